//! Kafka sinks (`CREATE SINK ... WITH (connector = 'kafka') FORMAT PLAIN | UPSERT |
//! DEBEZIUM ENCODE JSON`), on rdkafka.
//!
//! A sink subscribes to one view (`FROM view`, or its own query with `AS SELECT`): the
//! view's contents at one epoch, then every later epoch's changes, in order (see
//! `Dataflow::subscribe`). Each batch of epochs becomes Kafka messages:
//! - PLAIN: one message per inserted row (a row inserted twice, twice), no key. Only for
//!   views whose rows are never retracted: refused at CREATE when the view cannot be shown
//!   append-only, and a retraction that still arrives stops the sink with an error.
//! - UPSERT: keyed by the `primary_key` columns (a JSON object); the new row, or a
//!   tombstone (null value) when the key's row is gone.
//! - DEBEZIUM: `{"before":..,"after":..,"op":"c"|"u"|"d","ts_ms":..}`, keyed like UPSERT.
//!
//! Delivery: when the broker supports transactions, every batch of epochs is produced in
//! one transaction (`transactional.id = weir-sink-<oid>`), so a reader with
//! `isolation.level = read_committed` sees each epoch whole, once (exactly-once). When
//! transactions cannot be initialized the sink falls back to an idempotent producer and
//! waits for every delivery report (at-least-once: a failed batch is sent again). The mode
//! in force is in `weir_sinks.delivery`.
//!
//! Progress: the last message of every delivery carries a `weir-progress` header, the
//! positions of the view's inputs (table log sequence, generator row, Kafka offsets) at
//! the epoch whose changes it ends.
//!
//! Restart, usual case: before the views are restored the sink fences the previous run's
//! producer and reads its latest progress from the end of its topic (`read_progress`). If
//! its view is restored at or before that progress (or the checkpoint found the sink
//! caught up with it), the view ends an epoch exactly there (`runtime::EpochCut`) and the
//! sink, subscribed at the restored state, writes what comes after it: no read-back.
//!
//! Otherwise (a rebuilt view, a sink behind a newer checkpoint, a missed cut) it reads its
//! topic back (committed messages only) with the latest progress in it, waits until the
//! view has consumed its inputs at least that far, and then emits only the difference
//! between the view and what the topic already says: rows not yet written (PLAIN, as a
//! multiset), keys whose latest message differs from the view's row or whose row is gone
//! (UPSERT, DEBEZIUM). Waiting is what makes this exactly-once for views over generators
//! and Kafka sources too: compared any earlier, the view would lack rows the topic has,
//! and write them again when its sources replay. Rows written by others to the same topic
//! count as written.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::LineDelimitedWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use parking_lot::Mutex;
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::sync::mpsc::error::TryRecvError;
use tracing::{info, warn};

use crate::connectors::kafka::KafkaOptions;
use crate::dataflow::changelog::Changelog;
use crate::dataflow::position::{Position, all_reached};
use crate::dataflow::publication::InputPositions;
use crate::dataflow::runtime::{EpochChanges, Subscription};
use crate::error::{Result, WeirError};
use crate::state::zset::ZSet;

/// Options a Kafka sink knows (besides `properties.*`).
const OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "properties.bootstrap.server",
    "properties.bootstrap.servers",
    "primary_key",
    "format",
    "encode",
];

const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the read-back at restart waits for more messages once the log end is unknown.
const READ_BACK_QUIET: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFormat {
    Plain,
    Upsert,
    Debezium,
}

impl SinkFormat {
    pub fn parse(word: &str) -> Option<SinkFormat> {
        match word {
            "plain" => Some(SinkFormat::Plain),
            "upsert" => Some(SinkFormat::Upsert),
            "debezium" => Some(SinkFormat::Debezium),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SinkFormat::Plain => "plain",
            SinkFormat::Upsert => "upsert",
            SinkFormat::Debezium => "debezium",
        }
    }
}

/// A sink's checked settings.
#[derive(Clone)]
pub struct SinkSpec {
    pub oid: u32,
    pub name: String,
    pub view_name: String,
    pub options: KafkaOptions,
    pub format: SinkFormat,
    /// Key column indexes (UPSERT, DEBEZIUM).
    pub key: Vec<usize>,
    /// Read the topic back first (a restart), instead of writing the whole view.
    pub reconcile: bool,
    /// The view's input positions at the latest published epoch.
    pub view_positions: Arc<dyn Fn() -> Option<InputPositions> + Send + Sync>,
    /// A restart whose view was restored from a checkpoint at or before the topic's
    /// progress: the epoch cut at that progress (see `runtime::EpochCut`); the
    /// subscription was taken at the restored state. Once the cut is met, the sink goes on
    /// after it without reading the topic back.
    pub resume_at: Option<crate::dataflow::runtime::CutOutcome>,
    /// Where the sink says through which epoch its topic holds the view (see
    /// `runtime::SinksCaughtUp`), and the latest published epoch.
    pub caught_up: crate::dataflow::runtime::SinksCaughtUp,
    pub published_epoch: Arc<dyn Fn() -> u64 + Send + Sync>,
}

/// The record header holding a delivery's progress (JSON: `[[input OID, position]...]`).
const PROGRESS_HEADER: &str = "weir-progress";
/// How long a restarted sink waits for its view to reach the topic's progress before it
/// compares them anyway (a source that cannot get there, e.g. a truncated topic).
const PROGRESS_WAIT: Duration = Duration::from_secs(120);
/// How far before each partition's end a restarted sink reads for its progress.
const TAIL_MESSAGES: i64 = 16;

/// The latest progress a sink's topic records (committed messages only), reading only the
/// end of each partition; None when it has none or the broker cannot be read within
/// `wait`. The previous run's producer is fenced first: a transaction it had asked to
/// commit is completed then, and only then are its messages visible to `read_committed`
/// (reading before would find an older progress and write that transaction again).
pub fn read_progress(o: &KafkaOptions, oid: u32, wait: Duration) -> Option<Vec<(u32, Position)>> {
    if let Err(e) = fence(o, oid, wait) {
        warn!(topic = %o.topic, error = %e, "cannot fence a sink's previous producer; it reads its topic back");
        return None;
    }
    let stop = AtomicBool::new(false);
    match read_topic(o, true, &stop, &|_| {}, wait) {
        Ok((_, p)) => p,
        Err(e) => {
            warn!(topic = %o.topic, error = %e, "cannot read a sink's progress");
            None
        }
    }
}

/// Check a sink's options against the view's columns; returns (options, key indexes).
pub fn check(
    o: &crate::connectors::Options,
    format: SinkFormat,
    columns: &[String],
) -> Result<(KafkaOptions, Vec<usize>)> {
    for k in o.keys() {
        if !OPTIONS.contains(&k.as_str()) && !k.starts_with("properties.") {
            return Err(WeirError::invalid_parameter(format!(
                "unknown option \"{k}\" for a kafka sink"
            )));
        }
    }
    let options = KafkaOptions::parse(o)?;
    let key: Vec<usize> = match o.get("primary_key") {
        None if format != SinkFormat::Plain => {
            return Err(WeirError::invalid_parameter(format!(
                "FORMAT {} needs the key of its messages: WITH (primary_key = 'column, ...')",
                format.name().to_uppercase()
            )));
        }
        None => vec![],
        Some(list) => list
            .split(',')
            .map(|c| {
                let c = c.trim().to_lowercase();
                columns.iter().position(|n| *n == c).ok_or_else(|| {
                    WeirError::new(
                        crate::error::sqlstate::UNDEFINED_COLUMN,
                        format!("primary_key column \"{c}\" is not a column of the sink's query"),
                    )
                })
            })
            .collect::<Result<_>>()?,
    };
    let _checked = producer_config(&options, 0)
        .create_with_context::<_, rdkafka::producer::BaseProducer<SinkContext>>(
            SinkContext::default(),
        )
        .map_err(|e| WeirError::invalid_parameter(format!("kafka properties: {e}")))?;
    Ok((options, key))
}

fn producer_config(o: &KafkaOptions, oid: u32) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &o.bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("reconnect.backoff.max.ms", "1000")
        .set("log_level", "3");
    if oid != 0 {
        c.set("transactional.id", format!("weir-sink-{oid}"));
    }
    for (k, v) in &o.properties {
        c.set(k, v);
    }
    c
}

/// The broker cannot give this producer transactions (too old, or not allowed): the sink
/// is at-least-once.
fn no_transactions(e: &rdkafka::error::KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            rdkafka::types::RDKafkaErrorCode::UnsupportedVersion
                | rdkafka::types::RDKafkaErrorCode::UnsupportedForMessageFormat
                | rdkafka::types::RDKafkaErrorCode::TransactionalIdAuthorizationFailed
                | rdkafka::types::RDKafkaErrorCode::ClusterAuthorizationFailed
                | rdkafka::types::RDKafkaErrorCode::UnsupportedFeature
        )
    )
}

/// Initialize the sink's transactional producer once and drop it: this fences the
/// previous run's producer and ends (or completes) its open transaction. Brokers without
/// transactions have nothing to fence.
fn fence(o: &KafkaOptions, oid: u32, wait: Duration) -> std::result::Result<(), String> {
    let p: ThreadedProducer<SinkContext> = producer_config(o, oid)
        .create_with_context(SinkContext::default())
        .map_err(|e| e.to_string())?;
    let md = p
        .client()
        .fetch_metadata(None, wait)
        .map_err(|e| e.to_string())?;
    crate::connectors::policy::check_brokers(md.brokers().iter().map(|b| (b.host(), b.port())))
        .map_err(|e| e.message)?;
    match p.init_transactions(wait) {
        Ok(()) => Ok(()),
        Err(e) if no_transactions(&e) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Counts failed deliveries (at-least-once mode resends a batch that had any).
#[derive(Default, Clone)]
struct SinkContext {
    failed: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl ClientContext for SinkContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        *self.last_error.lock() = Some(format!("{error}: {reason}"));
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = r {
            self.failed.fetch_add(1, Ordering::AcqRel);
            *self.last_error.lock() = Some(e.to_string());
        }
    }
}

/// What a running sink reports (`weir_sinks`).
#[derive(Default)]
pub struct SinkProgress {
    pub status: Mutex<String>,
    pub delivery: Mutex<String>,
    pub messages: AtomicU64,
    /// Last epoch whose changes are in the topic (committed).
    pub committed_epoch: AtomicU64,
    pub error: Mutex<Option<String>>,
    pub done: AtomicBool,
}

struct SinkHandle {
    oid: u32,
    name: String,
    view_name: String,
    topic: String,
    format: SinkFormat,
    stop: Arc<AtomicBool>,
    progress: Arc<SinkProgress>,
    /// Last epoch the dataflow handed to the sink.
    sent: Arc<AtomicU64>,
}

/// One row of `weir_sinks`.
#[derive(Debug, Clone)]
pub struct SinkRow {
    pub name: String,
    pub view_name: String,
    pub topic: String,
    pub format: &'static str,
    pub delivery: String,
    pub status: String,
    pub messages: u64,
    pub committed_epoch: u64,
    pub error: Option<String>,
}

/// Every running sink.
#[derive(Default)]
pub struct Sinks {
    handles: Mutex<Vec<SinkHandle>>,
}

impl Sinks {
    pub fn start(&self, spec: SinkSpec, sub: Subscription) {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(SinkProgress {
            status: Mutex::new("starting".into()),
            delivery: Mutex::new("unknown".into()),
            ..Default::default()
        });
        progress.committed_epoch.store(0, Ordering::Release);
        self.handles.lock().push(SinkHandle {
            oid: spec.oid,
            name: spec.name.clone(),
            view_name: spec.view_name.clone(),
            topic: spec.options.topic.clone(),
            format: spec.format,
            stop: stop.clone(),
            progress: progress.clone(),
            sent: sub.sent.clone(),
        });
        let spawned = std::thread::Builder::new()
            .name(format!("weir-sink-{}", spec.oid))
            .spawn({
                let progress = progress.clone();
                move || run(spec, sub, stop, progress)
            });
        if let Err(e) = spawned {
            *progress.error.lock() = Some(format!("cannot start the sink thread: {e}"));
            progress.done.store(true, Ordering::Release);
        }
    }

    pub fn stop(&self, oid: u32) {
        let mut h = self.handles.lock();
        for s in h.iter().filter(|s| s.oid == oid) {
            s.stop.store(true, Ordering::Release);
        }
        h.retain(|s| s.oid != oid);
    }

    /// FLUSH: wait until every running sink has committed what the dataflow gave it.
    pub async fn catch_up(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let behind: Option<String> = self
                .handles
                .lock()
                .iter()
                .find(|s| {
                    !s.progress.done.load(Ordering::Acquire)
                        && s.progress.committed_epoch.load(Ordering::Acquire)
                            < s.sent.load(Ordering::Acquire)
                })
                .map(|s| s.name.clone());
            let Some(name) = behind else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(WeirError::new(
                    "58000",
                    format!("sink \"{name}\" did not catch up within 60s (see weir_sinks)"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn rows(&self) -> Vec<SinkRow> {
        self.handles
            .lock()
            .iter()
            .map(|s| SinkRow {
                name: s.name.clone(),
                view_name: s.view_name.clone(),
                topic: s.topic.clone(),
                format: s.format.name(),
                delivery: s.progress.delivery.lock().clone(),
                status: s.progress.status.lock().clone(),
                messages: s.progress.messages.load(Ordering::Acquire),
                committed_epoch: s.progress.committed_epoch.load(Ordering::Acquire),
                error: s.progress.error.lock().clone(),
            })
            .collect()
    }
}

/// A message to produce.
type Out = (Option<Vec<u8>>, Option<Vec<u8>>);

struct Runner {
    spec: SinkSpec,
    schema: SchemaRef,
    key_conv: Option<RowConverter>,
    producer: Option<ThreadedProducer<SinkContext>>,
    context: SinkContext,
    exactly_once: bool,
    progress: Arc<SinkProgress>,
    /// The view's input positions at the epoch of the changes being delivered.
    positions: InputPositions,
}

fn run(spec: SinkSpec, mut sub: Subscription, stop: Arc<AtomicBool>, progress: Arc<SinkProgress>) {
    let key_conv = if spec.key.is_empty() {
        None
    } else {
        RowConverter::new(
            spec.key
                .iter()
                .map(|&i| SortField::new(sub.schema.field(i).data_type().clone()))
                .collect(),
        )
        .ok()
    };
    let mut r = Runner {
        schema: sub.schema.clone(),
        spec,
        key_conv,
        producer: None,
        context: SinkContext::default(),
        exactly_once: false,
        progress: progress.clone(),
        positions: sub.positions.clone(),
    };
    let outcome = r.run(&mut sub, &stop);
    r.spec.caught_up.lock().remove(&r.spec.oid);
    if let Err(e) = &outcome {
        warn!(sink = %r.spec.name, error = %e, "sink stopped");
        *progress.error.lock() = Some(e.clone());
        *progress.status.lock() = "failed".into();
    } else {
        *progress.status.lock() = "stopped".into();
    }
    progress.done.store(true, Ordering::Release);
}

impl Runner {
    fn set_status(&self, s: impl Into<String>) {
        let s = s.into();
        let mut g = self.progress.status.lock();
        if *g != s {
            info!(sink = %self.spec.name, status = %s, "kafka sink status");
            *g = s;
        }
    }

    fn run(
        &mut self,
        sub: &mut Subscription,
        stop: &AtomicBool,
    ) -> std::result::Result<(), String> {
        // the initial contents: all of the view, or (after a restart) what the topic lacks
        // (reconciling with the topic compares whole contents: held in memory here)
        let snapshot: Vec<RecordBatch> = sub.snapshot.collect().map_err(|e| e.to_string())?;
        let snapshot = concat_batches(&self.schema, &snapshot).map_err(|e| e.to_string())?;
        let mut initial_epoch = sub.epoch;
        let resumed = match (self.spec.resume_at.clone(), self.spec.reconcile) {
            (Some(cut), true) => {
                self.connect(stop)?;
                self.wait_for_cut(&cut, stop)?
            }
            _ => None,
        };
        let initial = if let Some(epoch) = resumed {
            // the topic holds the view as of this epoch: go on after it
            info!(sink = %self.spec.name, epoch, "sink resumed after its committed progress without reading the topic back");
            initial_epoch = epoch;
            Vec::new()
        } else if self.spec.reconcile {
            // the producer first: initializing its transactions fences the previous run's
            // producer and ends the transaction it left open, so the read-back below sees
            // the topic as it will stay
            if self.producer.is_none() {
                self.connect(stop)?;
            }
            self.set_status("reading the topic back");
            let (existing, written) = self.read_back(stop)?;
            let snapshot = match written {
                Some(target) => {
                    let (contents, epoch) = self.catch_up_with(sub, snapshot, &target, stop)?;
                    initial_epoch = epoch;
                    contents
                }
                None => snapshot,
            };
            self.reconcile(&snapshot, existing)?
        } else {
            self.encode(&Changelog::inserts(snapshot))?
        };
        self.deliver(&initial, stop)?;
        self.progress
            .committed_epoch
            .store(initial_epoch, Ordering::Release);
        self.set_status("running");
        let mut caught_up_through = 0u64;
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(());
            }
            // everything published up to here is in the channel
            let published = (self.spec.published_epoch)();
            let mut batch: Vec<EpochChanges> = Vec::new();
            loop {
                match sub.changes.try_recv() {
                    Ok(c) => {
                        batch.push(c);
                        if batch.len() >= 64 {
                            break;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        if batch.is_empty() {
                            return Ok(());
                        }
                        break;
                    }
                }
            }
            // what the start already covered (changes queued before a resume point)
            batch.retain(|c| c.epoch > initial_epoch);
            let Some(last) = batch.last().map(|c| c.epoch) else {
                // all delivered: the topic holds the view as of `published`
                if caught_up_through < published {
                    caught_up_through = published;
                    self.spec.caught_up.lock().insert(self.spec.oid, published);
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            let mut out = Vec::new();
            for c in &batch {
                let cl = Changelog::concat(&self.schema, &c.changes).map_err(|e| e.to_string())?;
                out.extend(self.encode(&cl)?);
            }
            if let Some(c) = batch.last() {
                self.positions = c.positions.clone();
            }
            self.deliver(&out, stop)?;
            self.progress.committed_epoch.store(last, Ordering::Release);
        }
    }

    /// JSON text of each row of a batch (arrow-json, one line per row).
    fn json_rows(&self, batch: &RecordBatch) -> std::result::Result<Vec<Vec<u8>>, String> {
        let mut buf = Vec::new();
        {
            let mut w = LineDelimitedWriter::new(&mut buf);
            w.write(batch).map_err(|e| e.to_string())?;
            w.finish().map_err(|e| e.to_string())?;
        }
        let rows: Vec<Vec<u8>> = buf
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| l.to_vec())
            .collect();
        if rows.len() != batch.num_rows() {
            return Err(format!(
                "JSON encoding gave {} lines for {} rows",
                rows.len(),
                batch.num_rows()
            ));
        }
        Ok(rows)
    }

    fn key_rows(&self, batch: &RecordBatch) -> std::result::Result<Vec<Vec<u8>>, String> {
        let keys = batch.project(&self.spec.key).map_err(|e| e.to_string())?;
        self.json_rows(&keys)
    }

    /// One epoch's changes as messages (see the module header).
    fn encode(&self, cl: &Changelog) -> std::result::Result<Vec<Out>, String> {
        if cl.is_empty() {
            return Ok(vec![]);
        }
        let values = self.json_rows(&cl.data)?;
        let weights: &Int64Array = &cl.weights;
        if self.spec.format == SinkFormat::Plain {
            let mut out = Vec::with_capacity(values.len());
            for (i, v) in values.into_iter().enumerate() {
                let w = weights.value(i);
                if w < 0 {
                    return Err(format!(
                        "view \"{}\" retracted a row; FORMAT PLAIN needs an append-only view (use FORMAT UPSERT or DEBEZIUM)",
                        self.spec.view_name
                    ));
                }
                for _ in 1..w {
                    out.push((None, Some(v.clone())));
                }
                if w > 0 {
                    out.push((None, Some(v)));
                }
            }
            return Ok(out);
        }
        let key_json = self.key_rows(&cl.data)?;
        let kc = self.key_conv.as_ref().ok_or("sink without key converter")?;
        let key_cols: Vec<_> = self
            .spec
            .key
            .iter()
            .map(|&i| cl.data.column(i).clone())
            .collect();
        let keys = kc.convert_columns(&key_cols).map_err(|e| e.to_string())?;
        // per key, in first-seen order: (row retracted, row inserted)
        let mut slot: HashMap<&[u8], usize> = HashMap::new();
        let mut per_key: Vec<(usize, Option<usize>, Option<usize>)> = Vec::new();
        for i in 0..cl.len() {
            let k = keys.row(i).data();
            let n = *slot.entry(k).or_insert_with(|| {
                per_key.push((i, None, None));
                per_key.len() - 1
            });
            if weights.value(i) < 0 {
                per_key[n].1 = Some(i);
            } else if weights.value(i) > 0 {
                per_key[n].2 = Some(i);
            }
        }
        let mut out = Vec::with_capacity(per_key.len());
        for (first, before, after) in per_key {
            let key = Some(key_json[first].clone());
            if let (Some(b), Some(a)) = (before, after)
                && values[b] == values[a]
            {
                continue;
            }
            match self.spec.format {
                SinkFormat::Upsert => match after {
                    Some(a) => out.push((key, Some(values[a].clone()))),
                    None => out.push((key, None)),
                },
                _ => {
                    let b = before.map(|b| values[b].as_slice());
                    let a = after.map(|a| values[a].as_slice());
                    out.push((key, Some(debezium(b, a))));
                }
            }
        }
        Ok(out)
    }

    /// Messages that bring the topic's state (read back) to the view's contents.
    fn reconcile(
        &self,
        snapshot: &RecordBatch,
        existing: Vec<Out>,
    ) -> std::result::Result<Vec<Out>, String> {
        let values = self.json_rows(snapshot)?;
        let mut out = Vec::new();
        if self.spec.format == SinkFormat::Plain {
            let mut written: HashMap<Vec<u8>, usize> = HashMap::new();
            for (_, v) in existing {
                if let Some(v) = v {
                    *written.entry(v).or_default() += 1;
                }
            }
            for v in values {
                match written.get_mut(&v) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => out.push((None, Some(v))),
                }
            }
            return Ok(out);
        }
        // the latest row per key as the topic says (JSON values, compared parsed)
        let mut latest: HashMap<Vec<u8>, Option<serde_json::Value>> = HashMap::new();
        for (k, v) in existing {
            let Some(k) = k else { continue };
            let row = match (self.spec.format, v) {
                (_, None) => None,
                (SinkFormat::Upsert, Some(v)) => serde_json::from_slice(&v).ok(),
                (_, Some(v)) => serde_json::from_slice::<serde_json::Value>(&v)
                    .ok()
                    .and_then(|mut e| e.get_mut("after").map(|a| a.take()))
                    .filter(|a| !a.is_null()),
            };
            latest.insert(k, row);
        }
        let keys = self.key_rows(snapshot)?;
        for (k, v) in keys.into_iter().zip(values) {
            let now: Option<serde_json::Value> = serde_json::from_slice(&v).ok();
            let before = latest.remove(&k).flatten();
            if before.is_some() && before == now {
                continue;
            }
            out.push(match self.spec.format {
                SinkFormat::Upsert => (Some(k), Some(v)),
                _ => {
                    let b = before.map(|b| serde_json::to_vec(&b).unwrap_or_default());
                    (Some(k), Some(debezium(b.as_deref(), Some(&v))))
                }
            });
        }
        // keys the topic still has but the view does not
        for (k, before) in latest {
            if let Some(b) = before {
                out.push(match self.spec.format {
                    SinkFormat::Upsert => (Some(k), None),
                    _ => {
                        let b = serde_json::to_vec(&b).unwrap_or_default();
                        (Some(k), Some(debezium(Some(&b), None)))
                    }
                });
            }
        }
        Ok(out)
    }

    /// A resumed sink: the epoch at which its view met the topic's progress, or None when
    /// it went past it (then the topic is read back and compared, as for a rebuilt view).
    fn wait_for_cut(
        &self,
        cut: &crate::dataflow::runtime::CutOutcome,
        stop: &AtomicBool,
    ) -> std::result::Result<Option<u64>, String> {
        self.set_status("waiting for the view to reach the topic's progress");
        let started = Instant::now();
        loop {
            if let Some(outcome) = *cut.lock() {
                if outcome.is_none() {
                    info!(sink = %self.spec.name, "the view did not stop at the topic's progress; reading the topic back");
                }
                return Ok(outcome);
            }
            if stop.load(Ordering::Acquire) {
                return Err("stopped".into());
            }
            if started.elapsed() >= PROGRESS_WAIT {
                warn!(sink = %self.spec.name, "the view did not reach the progress its topic records; reading the topic back");
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// After a restart: the view's contents once it has consumed its inputs as far as the
    /// topic's progress says (the subscription's snapshot plus the changes since), and the
    /// epoch they are at.
    fn catch_up_with(
        &mut self,
        sub: &mut Subscription,
        snapshot: RecordBatch,
        target: &[(u32, Position)],
        stop: &AtomicBool,
    ) -> std::result::Result<(RecordBatch, u64), String> {
        let mut epoch = sub.epoch;
        let mut contents = ZSet::new(self.schema.clone()).map_err(|e| e.to_string())?;
        contents
            .apply(&Changelog::inserts(snapshot))
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        self.set_status("waiting for the view to reach the topic's progress");
        loop {
            // everything published up to `now` is already in the channel
            let now = (self.spec.view_positions)().unwrap_or_default();
            loop {
                match sub.changes.try_recv() {
                    Ok(c) => {
                        for cl in &c.changes {
                            contents.apply(cl).map_err(|e| e.to_string())?;
                        }
                        self.positions = c.positions.clone();
                        epoch = c.epoch;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Err("the view was dropped".into()),
                }
            }
            if all_reached(&now, target) {
                break;
            }
            if stop.load(Ordering::Acquire) {
                return Err("stopped".into());
            }
            if started.elapsed() >= PROGRESS_WAIT {
                warn!(sink = %self.spec.name, "the view did not reach the progress its topic records; comparing them as they are");
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let batches = contents.resident_batches().map_err(|e| e.to_string())?;
        Ok((
            concat_batches(&self.schema, &batches).map_err(|e| e.to_string())?,
            epoch,
        ))
    }

    /// Every committed message of the topic, in partition order, and the latest progress
    /// they record.
    #[allow(clippy::type_complexity)]
    fn read_back(
        &self,
        stop: &AtomicBool,
    ) -> std::result::Result<(Vec<Out>, Option<Vec<(u32, Position)>>), String> {
        read_topic(
            &self.spec.options,
            false,
            stop,
            &|s| self.set_status(s),
            Duration::from_secs(60),
        )
    }

    /// A producer, with transactions when the broker supports them.
    fn connect(&mut self, stop: &AtomicBool) -> std::result::Result<(), String> {
        loop {
            self.context = SinkContext::default();
            let p: ThreadedProducer<SinkContext> =
                producer_config(&self.spec.options, self.spec.oid)
                    .create_with_context(self.context.clone())
                    .map_err(|e| e.to_string())?;
            // the brokers the cluster advertises (the transaction coordinator and partition
            // leaders among them) must be allowed before the producer talks to them
            match p.client().fetch_metadata(None, Duration::from_secs(5)) {
                Ok(md) => crate::connectors::policy::check_brokers(
                    md.brokers().iter().map(|b| (b.host(), b.port())),
                )
                .map_err(|e| e.message)?,
                Err(e) => {
                    self.set_status(format!("broker unreachable: {e}"));
                    if stop.load(Ordering::Acquire) {
                        return Err("stopped".into());
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            }
            match p.init_transactions(Duration::from_secs(10)) {
                Ok(()) => {
                    self.exactly_once = true;
                    *self.progress.delivery.lock() = "exactly-once".into();
                    self.producer = Some(p);
                    return Ok(());
                }
                Err(e) => {
                    if no_transactions(&e) {
                        warn!(sink = %self.spec.name, error = %e, "transactions unavailable: at-least-once delivery");
                        self.context = SinkContext::default();
                        let p: ThreadedProducer<SinkContext> =
                            producer_config(&self.spec.options, 0)
                                .create_with_context(self.context.clone())
                                .map_err(|e| e.to_string())?;
                        self.exactly_once = false;
                        *self.progress.delivery.lock() = "at-least-once".into();
                        self.producer = Some(p);
                        return Ok(());
                    }
                    self.set_status(format!("broker unreachable: {e}"));
                    if stop.load(Ordering::Acquire) {
                        return Err("stopped".into());
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }

    /// Produce messages, in one transaction when exactly-once; retried until they are in
    /// the topic (or the sink is stopped).
    fn deliver(&mut self, msgs: &[Out], stop: &AtomicBool) -> std::result::Result<(), String> {
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(());
            }
            if self.producer.is_none() {
                self.connect(stop)?;
            }
            match self.try_deliver(msgs) {
                Ok(()) => {
                    self.progress
                        .messages
                        .fetch_add(msgs.len() as u64, Ordering::AcqRel);
                    if self.progress.status.lock().starts_with("retrying") {
                        self.set_status("running");
                    }
                    return Ok(());
                }
                Err((e, fatal)) => {
                    self.set_status(format!("retrying: {e}"));
                    if let Some(p) = &self.producer
                        && self.exactly_once
                        && !fatal
                    {
                        let _ = p.abort_transaction(SEND_TIMEOUT);
                    }
                    if fatal || !self.exactly_once {
                        // a fresh producer (a new one fences the old transaction)
                        self.producer = None;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }

    fn try_deliver(&mut self, msgs: &[Out]) -> std::result::Result<(), (String, bool)> {
        let p = self
            .producer
            .as_ref()
            .ok_or(("no producer".to_string(), true))?;
        let fatal = |e: &rdkafka::error::KafkaError| {
            let abortable = matches!(e, rdkafka::error::KafkaError::Transaction(t) if t.txn_requires_abort() && !t.is_fatal());
            (e.to_string(), !abortable)
        };
        if self.exactly_once {
            p.begin_transaction().map_err(|e| fatal(&e))?;
        }
        self.context.failed.store(0, Ordering::Release);
        let topic = &self.spec.options.topic;
        let progress = serde_json::to_vec(&*self.positions).unwrap_or_default();
        for (i, (k, v)) in msgs.iter().enumerate() {
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
            if i + 1 == msgs.len() {
                rec = rec.headers(OwnedHeaders::new().insert(Header {
                    key: PROGRESS_HEADER,
                    value: Some(progress.as_slice()),
                }));
            }
            if let Some(k) = k {
                rec = rec.key(k.as_slice());
            }
            if let Some(v) = v {
                rec = rec.payload(v.as_slice());
            }
            let mut rec = rec;
            let started = Instant::now();
            loop {
                match p.send(rec) {
                    Ok(()) => break,
                    Err((
                        rdkafka::error::KafkaError::MessageProduction(
                            rdkafka::types::RDKafkaErrorCode::QueueFull,
                        ),
                        r,
                    )) if started.elapsed() < SEND_TIMEOUT => {
                        rec = r;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => return Err((e.to_string(), !self.exactly_once)),
                }
            }
        }
        if self.exactly_once {
            p.commit_transaction(SEND_TIMEOUT).map_err(|e| fatal(&e))?;
        } else {
            p.flush(SEND_TIMEOUT).map_err(|e| (e.to_string(), true))?;
            if self.context.failed.load(Ordering::Acquire) > 0 {
                let e = self.context.last_error.lock().clone().unwrap_or_default();
                return Err((format!("deliveries failed: {e}"), true));
            }
        }
        Ok(())
    }
}

/// A Debezium-style change event.
/// The committed messages of a sink's topic (`tail`: only the last few of each partition,
/// enough to find the latest progress: the last message of the latest delivery is the
/// last message of its partition) and the latest progress they record.
#[allow(clippy::type_complexity)]
fn read_topic(
    o: &KafkaOptions,
    tail: bool,
    stop: &AtomicBool,
    set_status: &dyn Fn(String),
    metadata_wait: Duration,
) -> std::result::Result<(Vec<Out>, Option<Vec<(u32, Position)>>), String> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &o.bootstrap)
        .set("group.id", "weir-sink-read-back")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "100")
        .set("log_level", "3");
    for (k, v) in &o.properties {
        c.set(k, v);
    }
    let consumer: BaseConsumer = c.create().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + metadata_wait;
    let partitions: Vec<i32> = loop {
        match consumer.fetch_metadata(Some(&o.topic), Duration::from_secs(5)) {
            Ok(md) => {
                crate::connectors::policy::check_brokers(
                    md.brokers().iter().map(|b| (b.host(), b.port())),
                )
                .map_err(|e| e.message)?;
                let ps: Vec<i32> = md
                    .topics()
                    .iter()
                    .filter(|t| t.name() == o.topic && t.error().is_none())
                    .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                    .collect();
                if !ps.is_empty() {
                    break ps;
                }
            }
            Err(e) => set_status(format!("broker unreachable: {e}")),
        }
        if stop.load(Ordering::Acquire) || Instant::now() >= deadline {
            return Err(format!("cannot read topic \"{}\" back", o.topic));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        let from = match tail {
            // the log end as ListOffsets reports it can be low: reading more is harmless
            true => consumer
                .fetch_watermarks(&o.topic, *p, Duration::from_secs(5))
                .map(|(lo, hi)| Offset::Offset((hi - TAIL_MESSAGES).max(lo)))
                .unwrap_or(Offset::Beginning),
            false => Offset::Beginning,
        };
        tpl.add_partition_offset(&o.topic, *p, from)
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let topic_c = CString::new(o.topic.clone()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut written: Option<Vec<(u32, Position)>> = None;
    let mut quiet = Instant::now();
    let started = Instant::now();
    loop {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                if let Some(h) = m.headers() {
                    for hd in h.iter() {
                        if hd.key != PROGRESS_HEADER {
                            continue;
                        }
                        let Some(p) = hd
                            .value
                            .and_then(|v| serde_json::from_slice::<Vec<(u32, Position)>>(v).ok())
                        else {
                            continue;
                        };
                        let w = written.get_or_insert_with(Vec::new);
                        for (rel, pos) in p {
                            match w.iter_mut().find(|(r, _)| *r == rel) {
                                Some((_, q)) => q.max_with(&pos),
                                None => w.push((rel, pos)),
                            }
                        }
                    }
                }
                if !tail {
                    out.push((m.key().map(|k| k.to_vec()), m.payload().map(|v| v.to_vec())));
                }
                quiet = Instant::now();
                continue;
            }
            Some(Err(e)) => set_status(format!("reading the topic back: {e}")),
            None => {}
        }
        // done once every partition's position reached its log end (after a few fetch
        // cycles so the cached ends are fresh), or nothing came for a while
        if started.elapsed() >= Duration::from_millis(300) {
            let at_end = consumer.position().ok().is_some_and(|pos| {
                partitions.iter().all(|p| {
                    let hw = crate::connectors::kafka::cached_high_watermark_of(
                        consumer.client().native_ptr(),
                        &topic_c,
                        *p,
                    );
                    let at = pos
                        .find_partition(&o.topic, *p)
                        .and_then(|e| match e.offset() {
                            Offset::Offset(n) => Some(n),
                            _ => None,
                        });
                    matches!((hw, at), (Some(0), _))
                        || matches!((hw, at), (Some(h), Some(a)) if a >= h)
                })
            });
            if at_end || quiet.elapsed() >= READ_BACK_QUIET {
                break;
            }
        }
        if stop.load(Ordering::Acquire) {
            return Err("stopped".into());
        }
    }
    info!(topic = %o.topic, tail, messages = out.len(), progress = ?written, "sink read its topic back");
    Ok((out, written))
}

fn debezium(before: Option<&[u8]>, after: Option<&[u8]>) -> Vec<u8> {
    let op = match (before, after) {
        (None, _) => "c",
        (Some(_), Some(_)) => "u",
        (Some(_), None) => "d",
    };
    let ts = chrono::Utc::now().timestamp_millis();
    let mut out =
        Vec::with_capacity(64 + before.map_or(4, |b| b.len()) + after.map_or(4, |a| a.len()));
    out.extend_from_slice(b"{\"before\":");
    out.extend_from_slice(before.unwrap_or(b"null"));
    out.extend_from_slice(b",\"after\":");
    out.extend_from_slice(after.unwrap_or(b"null"));
    out.extend_from_slice(format!(",\"op\":\"{op}\",\"ts_ms\":{ts}}}").as_bytes());
    out
}
