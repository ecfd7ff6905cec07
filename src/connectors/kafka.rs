//! Kafka sources (`connector = 'kafka'`, `FORMAT PLAIN ENCODE JSON`), on rdkafka
//! (librdkafka).
//!
//! Each view reading a source runs its own consumer (an instance): it assigns itself every
//! partition of the topic explicitly (no consumer group, no rebalancing), starting where
//! `scan.startup.mode` says, and picks up partitions added later (from their beginning).
//! Offsets are Weir's own: nothing is committed to Kafka. Until checkpoints exist, a view
//! rebuilt after a restart replays the topic from the configured start.
//!
//! Messages are decoded a batch at a time (`json.rs`); a record that does not decode goes
//! to `weir_dead_letters` (or, with `on_error = 'fail'`, stops the instance with an error
//! naming topic, partition and offset). The watermark is kept per partition (largest event
//! time minus the declared delay) and combined by minimum over the partitions that are not
//! idle (no message for `watermark.idle.timeout.ms`, default 5 s); it never moves back.
//!
//! FLUSH asks every instance to catch up: after a few fetch cycles it waits until every
//! partition has reported its end (librdkafka's partition EOF) with the log end unchanged
//! since, so every message written before FLUSH is read, then answers behind a barrier.
//! (The high watermark in fetch responses alone is not enough: some brokers report the end
//! of the data returned rather than the log end.)

use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::record_batch::RecordBatch;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::catalog::ColumnDesc;
use crate::connectors::avro::AvroDecoder;
use crate::connectors::csv::CsvDecoder;
use crate::connectors::dead_letters::DeadLetters;
use crate::connectors::json::JsonDecoder;
use crate::connectors::runner::{
    BATCHES_PER_BARRIER, PartitionProgress, Progress, RunnerSpec, SourceKind, SyncRequest,
    send_batch, wait_for_views,
};
use crate::connectors::upsert::{ChangeDecoder, KeyValue};
use crate::connectors::{Options, opt_u64};
use crate::dataflow::runtime::Msg;
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, schema_of};
use crate::state::table::{Change, TableStore, offset_key};

const MAX_BATCH_ROWS: usize = 4096;
/// A batch is handed over at the latest this long after its first message.
const MAX_BATCH_DELAY: Duration = Duration::from_millis(50);
const METADATA_REFRESH: Duration = Duration::from_secs(5);
/// After a client error, how long fetches must run cleanly before FLUSH trusts the cached
/// log ends (librdkafka reports failures at least every reconnect backoff, 1 s).
const ERROR_SETTLE: Duration = Duration::from_millis(1500);
/// How often partition progress (and idleness) is refreshed.
const PROGRESS_REFRESH: Duration = Duration::from_millis(100);
/// librdkafka's fetch long-poll: also how stale a cached high watermark can be.
const FETCH_WAIT_MS: u64 = 100;

#[derive(Debug, Clone, PartialEq)]
pub enum Startup {
    Earliest,
    Latest,
    /// Milliseconds since the epoch: the first message at or after it.
    Timestamp(i64),
}

/// Metadata columns a source can add (`INCLUDE partition | offset | key | timestamp AS c`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Include {
    Partition,
    Offset,
    Key,
    Timestamp,
}

impl Include {
    pub const ALL: [(&'static str, Include); 4] = [
        ("partition", Include::Partition),
        ("offset", Include::Offset),
        ("key", Include::Key),
        ("timestamp", Include::Timestamp),
    ];

    pub fn sql_type(self) -> SqlType {
        match self {
            Include::Partition => SqlType::Int4,
            Include::Offset => SqlType::Int8,
            Include::Key => SqlType::Bytea,
            Include::Timestamp => SqlType::TimestampTz,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum OnError {
    DeadLetter,
    Fail,
}

/// A Kafka source's `WITH` options, checked.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    pub topic: String,
    pub bootstrap: String,
    pub startup: Startup,
    /// `properties.*` other than the bootstrap server, passed to librdkafka.
    pub properties: Vec<(String, String)>,
    pub on_error: OnError,
    pub idle_timeout: Duration,
    /// (kind, column name), in the order the columns follow the value columns.
    pub includes: Vec<(Include, String)>,
}

const OPTIONS: &[&str] = &[
    "topic",
    "properties.bootstrap.server",
    "properties.bootstrap.servers",
    "scan.startup.mode",
    "scan.startup.timestamp.millis",
    "on_error",
    "watermark.idle.timeout.ms",
    "include.partition",
    "include.offset",
    "include.key",
    "include.timestamp",
    "format",
    "encode",
];

/// Whether `key` is an option of the kafka connector.
pub fn known_option(key: &str) -> bool {
    OPTIONS.contains(&key)
        || crate::connectors::csv::OPTIONS.contains(&key)
        || crate::connectors::avro::OPTIONS.contains(&key)
        || key.starts_with("properties.")
}

impl KafkaOptions {
    pub fn parse(o: &Options) -> Result<KafkaOptions> {
        let need = |k: &str| {
            o.get(k).cloned().ok_or_else(|| {
                WeirError::invalid_parameter(format!("a kafka source needs the option {k}"))
            })
        };
        let topic = need("topic")?;
        let bootstrap = o
            .get("properties.bootstrap.server")
            .or_else(|| o.get("properties.bootstrap.servers"))
            .cloned()
            .ok_or_else(|| {
                WeirError::invalid_parameter(
                    "a kafka source needs the option properties.bootstrap.server",
                )
            })?;
        let startup = match o
            .get("scan.startup.mode")
            .map(|s| s.to_lowercase())
            .as_deref()
        {
            None | Some("earliest") => Startup::Earliest,
            Some("latest") => Startup::Latest,
            Some("timestamp") => Startup::Timestamp(
                opt_u64(o, "scan.startup.timestamp.millis")?
                    .ok_or_else(|| {
                        WeirError::invalid_parameter(
                            "scan.startup.mode = 'timestamp' needs scan.startup.timestamp.millis",
                        )
                    })?
                    .try_into()
                    .map_err(|_| WeirError::invalid_parameter("timestamp out of range"))?,
            ),
            Some(other) => {
                return Err(WeirError::invalid_parameter(format!(
                    "scan.startup.mode must be earliest, latest or timestamp, not '{other}'"
                )));
            }
        };
        let on_error = match o.get("on_error").map(|s| s.to_lowercase()).as_deref() {
            None | Some("dead_letter") => OnError::DeadLetter,
            Some("fail") => OnError::Fail,
            Some(other) => {
                return Err(WeirError::invalid_parameter(format!(
                    "on_error must be 'dead_letter' or 'fail', not '{other}'"
                )));
            }
        };
        let idle_timeout =
            Duration::from_millis(opt_u64(o, "watermark.idle.timeout.ms")?.unwrap_or(5000));
        let mut properties: Vec<(String, String)> = o
            .iter()
            .filter_map(|(k, v)| {
                let p = k.strip_prefix("properties.")?;
                (p != "bootstrap.server" && p != "bootstrap.servers")
                    .then(|| (p.to_owned(), v.clone()))
            })
            .collect();
        properties.sort();
        // checked here, where every consumer, table feed and sink gets its options, also
        // when a catalog entry written under another policy is started again
        crate::connectors::policy::check_bootstrap(&bootstrap)?;
        for (k, v) in &properties {
            crate::connectors::policy::check_kafka_property(k, v)?;
        }
        let mut includes = Vec::new();
        for (word, kind) in Include::ALL {
            if let Some(col) = o.get(&format!("include.{word}")) {
                includes.push((kind, col.clone()));
            }
        }
        Ok(KafkaOptions {
            topic,
            bootstrap,
            startup,
            properties,
            on_error,
            idle_timeout,
            includes,
        })
    }

    /// A consumer config (also checks the passed-through properties).
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            // assigned partitions, offsets kept by Weir: the group id only satisfies
            // librdkafka and nothing is committed under it
            .set("group.id", "weir")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // FLUSH knows a partition is read to its end from the EOF event
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", FETCH_WAIT_MS.to_string())
            // when the local queue is full librdkafka pauses fetching a partition for this
            // long (default 1 s): the consumer then starves once the queue drains
            .set("fetch.queue.backoff.ms", "5")
            .set("reconnect.backoff.max.ms", "1000")
            .set("log_level", "3");
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }
}

/// The columns of a Kafka source: the declared ones, then the INCLUDEd metadata columns.
pub fn columns(o: &Options, declared: &[ColumnDesc]) -> Result<Vec<ColumnDesc>> {
    if declared.is_empty() {
        return Err(WeirError::invalid_parameter(
            "a kafka source needs its columns declared",
        ));
    }
    let opts = KafkaOptions::parse(o)?;
    let mut out = declared.to_vec();
    for (kind, name) in opts.includes {
        if out.iter().any(|c| c.name == name) {
            return Err(WeirError::new(
                crate::error::sqlstate::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        out.push(ColumnDesc {
            name,
            ty: kind.sql_type(),
            nullable: true,
        });
    }
    Ok(out)
}

/// How message values become rows.
pub enum ValueDecoder {
    Json(JsonDecoder),
    Csv(CsvDecoder),
    Avro(AvroDecoder),
}

impl ValueDecoder {
    pub fn decode(&self, values: &[Option<&[u8]>]) -> crate::connectors::json::Decoded {
        match self {
            ValueDecoder::Json(d) => d.decode(values),
            ValueDecoder::Csv(d) => d.decode(values),
            ValueDecoder::Avro(d) => d.decode(values),
        }
    }
}

/// What an instance needs: the checked options and the decoder for the value columns.
pub struct KafkaSpec {
    pub options: KafkaOptions,
    pub decoder: ValueDecoder,
    /// All columns of the source (values, then includes).
    pub columns: Vec<ColumnDesc>,
}

impl KafkaSpec {
    pub fn new(o: &Options, columns: &[ColumnDesc]) -> Result<KafkaSpec> {
        let options = KafkaOptions::parse(o)?;
        let values = &columns[..columns.len() - options.includes.len()];
        let decoder = match o.get("encode").map(|e| e.as_str()) {
            None | Some("json") => ValueDecoder::Json(JsonDecoder::new(values)?),
            Some("csv") => ValueDecoder::Csv(CsvDecoder::new(values, o)?),
            Some("avro") => ValueDecoder::Avro(AvroDecoder::new(values, o)?),
            Some(other) => {
                return Err(WeirError::not_supported(format!(
                    "ENCODE {} is not supported yet (JSON, CSV and AVRO are)",
                    other.to_uppercase()
                )));
            }
        };
        // the consumer config must be one librdkafka accepts
        options
            .client_config()
            .create::<BaseConsumer>()
            .map_err(|e| WeirError::invalid_parameter(format!("kafka properties: {e}")))?;
        Ok(KafkaSpec {
            options,
            decoder,
            columns: columns.to_vec(),
        })
    }
}

/// Receives librdkafka's client errors (broker down, transport failures), which do not
/// come through `poll`.
#[derive(Clone, Default)]
struct SourceContext {
    /// The latest client error and when it happened.
    error: Arc<parking_lot::Mutex<Option<(Instant, String)>>>,
}

impl ClientContext for SourceContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        // the end of a partition is reported here too; it is not a failure
        if matches!(error, rdkafka::error::KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF)
        {
            return;
        }
        *self.error.lock() = Some((Instant::now(), format!("{error}: {reason}")));
    }
}

impl ConsumerContext for SourceContext {}

/// Messages read but not yet handed over, their bytes in one buffer.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// (partition, offset, value range, key range, timestamp ms)
    meta: Vec<Meta>,
    since: Option<Instant>,
}

struct Meta {
    partition: i32,
    offset: i64,
    value: Option<(usize, usize)>,
    key: Option<(usize, usize)>,
    timestamp: Option<i64>,
}

impl Pending {
    fn push(&mut self, m: &rdkafka::message::BorrowedMessage<'_>) {
        let mut put = |b: Option<&[u8]>| {
            b.map(|b| {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(b);
                (start, self.bytes.len())
            })
        };
        let value = put(m.payload());
        let key = put(m.key());
        self.meta.push(Meta {
            partition: m.partition(),
            offset: m.offset(),
            value,
            key,
            timestamp: m.timestamp().to_millis(),
        });
        self.since.get_or_insert_with(Instant::now);
    }

    fn slice(&self, r: Option<(usize, usize)>) -> Option<&[u8]> {
        r.map(|(a, b)| &self.bytes[a..b])
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.meta.clear();
        self.since = None;
    }
}

struct PartitionState {
    progress: PartitionProgress,
    /// `scan.startup.mode = 'latest'`: messages below this offset are skipped; None until
    /// the first fetch response tells the log end (then the partition is sought there).
    skip_below: Option<Option<i64>>,
    /// `scan.startup.mode = 'timestamp'`: messages before this time (ms) are skipped until
    /// the first one at or after it.
    skip_before_ms: Option<i64>,
    last_message: Instant,
    /// The partition was read to its end (EOF), with the log end then; None once a
    /// message came after it.
    at_end: Option<i64>,
    /// The largest log end any response has reported (brokers can under-report it for a
    /// while; it never shrinks here).
    max_log_end: i64,
    /// For rows/s: (time, rows) at the last rate update.
    rate_mark: (Instant, u64),
}

/// Where an instance's rows go.
enum Target {
    /// A view's private relation in the dataflow.
    View {
        tx: mpsc::Sender<Msg>,
        instance: u32,
    },
    /// A keyed table (`FORMAT UPSERT | DEBEZIUM`): operations applied with the offsets
    /// in one commit.
    Table {
        table: Arc<TableStore>,
        decoder: ChangeDecoder,
        stop: Arc<AtomicBool>,
    },
}

struct Instance {
    target: Target,
    /// Next offsets per partition to resume from (tables: as committed with their rows).
    resume: BTreeMap<i32, i64>,
    source: String,
    view: String,
    spec: KafkaSpec,
    /// (event-time column, delay).
    watermark_spec: Option<(usize, i64)>,
    watermark: Option<i64>,
    partitions: BTreeMap<i32, PartitionState>,
    progress: Arc<Progress>,
    dead: Arc<DeadLetters>,
    batches: u64,
    rows: u64,
}

/// Run one view's instance of a Kafka source until `stop` (see the module header).
pub fn run(
    tx: mpsc::Sender<Msg>,
    spec: RunnerSpec,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    sync: std::sync::mpsc::Receiver<SyncRequest>,
    dead: Arc<DeadLetters>,
) {
    let SourceKind::Kafka(kspec) = spec.kind else {
        return;
    };
    let mut inst = Instance {
        target: Target::View {
            tx,
            instance: spec.instance,
        },
        resume: BTreeMap::new(),
        source: spec.source_name,
        view: spec.view_name,
        spec: *kspec,
        watermark_spec: spec.watermark,
        watermark: None,
        partitions: BTreeMap::new(),
        progress,
        dead,
        batches: 0,
        rows: 0,
    };
    inst.finish(&stop, &sync);
}

/// Run the consumer of a table fed by a changelog topic until `stop` (the table dropped),
/// resuming from the offsets committed with the table's rows.
pub fn run_table(
    table: Arc<TableStore>,
    spec: KafkaSpec,
    decoder: ChangeDecoder,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    sync: std::sync::mpsc::Receiver<SyncRequest>,
    dead: Arc<DeadLetters>,
) {
    let resume = match table.offsets() {
        Ok(r) => r,
        Err(e) => {
            *progress.error.lock() = Some(e.message);
            *progress.status.lock() = "failed".into();
            progress.done.store(true, Ordering::Release);
            return;
        }
    };
    let name = table.name.clone();
    let mut inst = Instance {
        target: Target::Table {
            table,
            decoder,
            stop: stop.clone(),
        },
        resume,
        source: name.clone(),
        view: name,
        spec,
        watermark_spec: None,
        watermark: None,
        partitions: BTreeMap::new(),
        progress,
        dead,
        batches: 0,
        rows: 0,
    };
    inst.finish(&stop, &sync);
}

impl Instance {
    fn finish(&mut self, stop: &AtomicBool, sync: &std::sync::mpsc::Receiver<SyncRequest>) {
        let inst = self;
        let result = inst.run(stop, sync);
        // answer FLUSHes still waiting: the instance is gone
        while let Ok(s) = sync.try_recv() {
            let _ = s.send(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(e.clone()),
            });
        }
        if let Err(e) = result {
            warn!(source = %inst.source, view = %inst.view, error = %e, "kafka source stopped");
            *inst.progress.error.lock() = Some(e);
            *inst.progress.status.lock() = "failed".into();
        } else {
            *inst.progress.status.lock() = "stopped".into();
        }
        inst.progress.done.store(true, Ordering::Release);
    }

    fn set_status(&self, s: impl Into<String>) {
        let s = s.into();
        let mut g = self.progress.status.lock();
        if *g != s {
            info!(source = %self.source, view = %self.view, status = %s, "kafka source status");
            *g = s;
        }
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        sync: &std::sync::mpsc::Receiver<SyncRequest>,
    ) -> std::result::Result<(), String> {
        let context = SourceContext::default();
        let consumer: BaseConsumer<SourceContext> = self
            .spec
            .options
            .client_config()
            .create_with_context(context.clone())
            .map_err(|e| format!("cannot create a Kafka consumer: {e}"))?;
        let topic = self.spec.options.topic.clone();
        let topic_c = CString::new(topic.clone()).map_err(|e| e.to_string())?;
        let mut pending = Pending::default();
        let mut last_metadata: Option<Instant> = None;
        // FLUSH requests being served: (request, when it came)
        let mut syncing: Vec<(SyncRequest, Instant)> = Vec::new();
        let mut last_refresh = Instant::now();
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(());
            }
            if last_metadata.is_none_or(|t| t.elapsed() >= METADATA_REFRESH) {
                match self.assign_new_partitions(&consumer, &topic) {
                    Ok(()) => last_metadata = Some(Instant::now()),
                    Err(e) => {
                        self.set_status(format!("waiting for the topic: {e}"));
                        last_metadata =
                            Some(Instant::now() - METADATA_REFRESH + Duration::from_secs(1));
                    }
                }
            }
            while let Ok(s) = sync.try_recv() {
                syncing.push((s, Instant::now()));
                // the log ends as ListOffsets reports them, too (each source of the log end
                // can lag; the largest seen is the target)
                for (p, st) in self.partitions.iter_mut() {
                    if let Ok((_, hi)) =
                        consumer.fetch_watermarks(&topic, *p, Duration::from_secs(1))
                    {
                        tracing::debug!(partition = *p, hi, "ListOffsets log end");
                        st.max_log_end = st.max_log_end.max(hi);
                    }
                }
            }
            let last_error = context.error.lock().clone();
            if let Some((at, e)) = &last_error
                && at.elapsed() < Duration::from_secs(2)
                && !self
                    .progress
                    .status
                    .lock()
                    .starts_with("broker unreachable")
            {
                self.set_status(format!("broker unreachable: {e}"));
            }
            // read a burst of messages (the first poll may wait; then only what is already
            // fetched), so the housekeeping below runs once per burst, not per message
            let mut drained = false; // nothing more to read right now
            let burst_start = Instant::now();
            let mut polled = 0usize;
            loop {
                let timeout = if polled == 0 {
                    Duration::from_millis(FETCH_WAIT_MS / 2)
                } else {
                    Duration::ZERO
                };
                match consumer.poll(timeout) {
                    Some(Ok(m)) => {
                        polled += 1;
                        if let Some(p) = self.partitions.get_mut(&m.partition()) {
                            p.at_end = None;
                        }
                        if m.topic() == topic && self.wanted(&consumer, &topic_c, &m) {
                            pending.push(&m);
                            if let Some(p) = self.partitions.get_mut(&m.partition()) {
                                p.last_message = burst_start;
                            }
                        }
                        if pending.meta.len() >= MAX_BATCH_ROWS || polled >= MAX_BATCH_ROWS {
                            break;
                        }
                    }
                    Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                        let hw = cached_high_watermark(&consumer, &topic_c, p);
                        tracing::debug!(partition = p, ?hw, "partition EOF");
                        if let Some(s) = self.partitions.get_mut(&p) {
                            s.at_end = Some(hw.unwrap_or(-1));
                            s.max_log_end = s.max_log_end.max(hw.unwrap_or(-1));
                        }
                        drained = true;
                        break;
                    }
                    Some(Err(e)) => {
                        self.set_status(format!("broker unreachable: {e}"));
                        break;
                    }
                    None => {
                        drained = true;
                        break;
                    }
                }
            }
            if polled > 0
                && self
                    .progress
                    .status
                    .lock()
                    .starts_with("broker unreachable")
            {
                self.set_status("running");
            }
            let full = pending.meta.len() >= MAX_BATCH_ROWS
                || pending
                    .since
                    .is_some_and(|t| t.elapsed() >= MAX_BATCH_DELAY);
            if full || (drained && !syncing.is_empty() && !pending.meta.is_empty()) {
                self.hand_over(&mut pending)?;
            }
            if last_refresh.elapsed() >= PROGRESS_REFRESH {
                last_refresh = Instant::now();
                self.refresh_progress(&consumer, &topic_c);
                // partitions going idle can let the watermark move without new rows
                if let Some((_, delay)) = self.watermark_spec {
                    let before = self.watermark;
                    self.advance_watermark(delay);
                    if self.watermark != before {
                        let empty = RecordBatch::new_empty(schema_of(
                            self.spec
                                .columns
                                .iter()
                                .map(|c| (c.name.as_str(), &c.ty, c.nullable)),
                        ));
                        self.send(empty, before)?;
                    }
                }
            }
            // serve FLUSH: once fetches have run for a while since the request (and since
            // the last client error: a reconnect), caught up when every partition has
            // reported its end (EOF) and its log end has not moved since (a message
            // fetched but not yet polled moves it; control records of transactions do
            // not count as unread)
            if !syncing.is_empty() {
                let oldest = syncing
                    .iter()
                    .map(|(_, t)| *t)
                    .min()
                    .unwrap_or_else(Instant::now);
                let settled = last_error
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() >= ERROR_SETTLE);
                let reached = settled
                    && oldest.elapsed() >= Duration::from_millis(FETCH_WAIT_MS * 3)
                    && !self.partitions.is_empty()
                    && self.partitions.iter().all(|(p, s)| match s.at_end {
                        Some(hw) => {
                            hw >= s.max_log_end
                                && cached_high_watermark(&consumer, &topic_c, *p)
                                    .is_none_or(|now| now == hw)
                        }
                        None => false,
                    });
                if reached && pending.meta.is_empty() {
                    let served = std::mem::take(&mut syncing);
                    // the system tables agree with what FLUSH says
                    self.refresh_progress(&consumer, &topic_c);
                    tracing::debug!(
                        source = %self.source,
                        view = %self.view,
                        partitions = ?self
                            .partitions
                            .iter()
                            .map(|(p, s)| (*p, s.progress.offset, s.at_end, s.max_log_end))
                            .collect::<Vec<_>>(),
                        "caught up for FLUSH"
                    );
                    // a table's changes are in the dataflow's queue once applied
                    if let Target::View { tx, .. } = &self.target
                        && !wait_for_views(tx)
                    {
                        return Err("the dataflow worker has stopped".into());
                    }
                    for (s, _) in served {
                        let _ = s.send(Ok(()));
                    }
                }
            }
        }
    }

    /// Assign partitions of the topic not assigned yet, from the startup position (new
    /// partitions of a running source from their beginning).
    fn assign_new_partitions(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        topic: &str,
    ) -> std::result::Result<(), String> {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        crate::connectors::policy::check_brokers(md.brokers().iter().map(|b| (b.host(), b.port())))
            .map_err(|e| e.message)?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .ok_or_else(|| format!("topic \"{topic}\" not found"))?;
        if let Some(e) = t.error() {
            return Err(format!("topic \"{topic}\": {e:?}"));
        }
        let new: Vec<i32> = t
            .partitions()
            .iter()
            .map(|p| p.id())
            .filter(|p| !self.partitions.contains_key(p))
            .collect();
        if new.is_empty() {
            if !self.partitions.is_empty() {
                self.set_status("running");
            }
            return Ok(());
        }
        let first = self.partitions.is_empty() && self.resume.is_empty();
        let mut tpl = TopicPartitionList::new();
        for p in &new {
            let offset = match (&self.spec.options.startup, first) {
                _ if self.resume.contains_key(p) => Offset::Offset(self.resume[p]),
                (Startup::Earliest, _) | (_, false) => Offset::Beginning,
                // the log end as the first fetch response reports it (ListOffsets
                // under-reports on some brokers): read from the start, skip up to it
                (Startup::Latest, true) => Offset::Beginning,
                // the first message at or after the time: read from the start and skip the
                // earlier ones (not every broker answers ListOffsets by time correctly)
                (Startup::Timestamp(_), true) => Offset::Beginning,
            };
            tpl.add_partition_offset(topic, *p, offset)
                .map_err(|e| e.to_string())?;
        }
        consumer
            .incremental_assign(&tpl)
            .map_err(|e| format!("cannot assign partitions: {e}"))?;
        let now = Instant::now();
        for p in new {
            self.partitions.insert(
                p,
                PartitionState {
                    progress: PartitionProgress {
                        partition: p,
                        offset: self.resume.get(&p).copied().unwrap_or(0),
                        high_watermark: -1,
                        ..Default::default()
                    },
                    last_message: now,
                    at_end: None,
                    max_log_end: -1,
                    rate_mark: (now, 0),
                    skip_below: (first && self.spec.options.startup == Startup::Latest)
                        .then_some(None),
                    skip_before_ms: match (&self.spec.options.startup, first) {
                        (Startup::Timestamp(ms), true) => Some(*ms),
                        _ => None,
                    },
                },
            );
        }
        info!(source = %self.source, view = %self.view, partitions = self.partitions.len(), "kafka partitions assigned");
        self.set_status("running");
        Ok(())
    }

    /// Decode the pending messages and hand the rows to the dataflow.
    fn hand_over(&mut self, pending: &mut Pending) -> std::result::Result<(), String> {
        if matches!(self.target, Target::Table { .. }) {
            return self.apply_to_table(pending);
        }
        let values: Vec<Option<&[u8]>> = pending
            .meta
            .iter()
            .map(|m| pending.slice(m.value))
            .collect();
        let decoded = self.spec.decoder.decode(&values);
        self.refuse(&decoded.errors, pending)?;
        self.note_offsets(pending);
        let mut batch = self
            .with_includes(&decoded.batch, &decoded.rows, pending)
            .map_err(|e| e.message)?;
        let mut rows = decoded.rows.clone();
        // a record without an event time has no place in event time: a dead letter
        if let Some((col, _)) = self.watermark_spec
            && batch.column(col).null_count() > 0
        {
            let ts = batch.column(col).clone();
            let name = self
                .spec
                .columns
                .get(col)
                .map(|c| c.name.clone())
                .unwrap_or_default();
            let errors: Vec<(usize, String)> = rows
                .iter()
                .enumerate()
                .filter(|(r, _)| ts.is_null(*r))
                .map(|(_, i)| {
                    (
                        *i,
                        format!("event-time column \"{name}\" is NULL: the record has no place in event time"),
                    )
                })
                .collect();
            self.refuse(&errors, pending)?;
            let keep = datafusion::arrow::array::BooleanArray::from(
                (0..ts.len()).map(|r| ts.is_valid(r)).collect::<Vec<_>>(),
            );
            batch = datafusion::arrow::compute::filter_record_batch(&batch, &keep)
                .map_err(|e| e.to_string())?;
            rows = rows
                .iter()
                .enumerate()
                .filter(|(r, _)| ts.is_valid(*r))
                .map(|(_, i)| *i)
                .collect();
        }
        // per-partition event time, then the combined watermark
        let before = self.watermark;
        if let Some((col, delay)) = self.watermark_spec
            && let Some(ts) = batch
                .column(col)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
        {
            for (r, i) in rows.iter().enumerate() {
                if ts.is_valid(r) {
                    let part = pending.meta[*i].partition;
                    if let Some(p) = self.partitions.get_mut(&part) {
                        let t = ts.value(r);
                        p.progress.max_event_time =
                            Some(p.progress.max_event_time.map_or(t, |m| m.max(t)));
                        p.progress.watermark =
                            p.progress.max_event_time.map(|m| m.saturating_sub(delay));
                    }
                }
            }
            self.advance_watermark(delay);
        }
        for i in &rows {
            if let Some(p) = self.partitions.get_mut(&pending.meta[*i].partition) {
                p.progress.rows += 1;
            }
        }
        pending.clear();
        let n = batch.num_rows() as u64;
        if n > 0 || self.watermark != before {
            self.send(batch, before)?;
            self.batches += 1;
            self.rows += n;
            self.progress.rows.store(self.rows, Ordering::Release);
            if let Some(w) = self.watermark {
                self.progress.watermark.store(w, Ordering::Release);
            }
            if let Target::View { tx, .. } = &self.target
                && self.batches.is_multiple_of(BATCHES_PER_BARRIER)
                && !wait_for_views(tx)
            {
                return Err("the dataflow worker has stopped".into());
            }
        }
        Ok(())
    }

    /// Hand rows to the view (with the watermark before and after them).
    fn send(&self, batch: RecordBatch, before: Option<i64>) -> std::result::Result<(), String> {
        match &self.target {
            Target::View { tx, instance } => {
                if send_batch(tx, *instance, batch, before, self.watermark) {
                    Ok(())
                } else {
                    Err("the dataflow worker has stopped".into())
                }
            }
            Target::Table { .. } => Ok(()),
        }
    }

    /// Records that did not decode: to the dead letters, or the end of the instance under
    /// `on_error = 'fail'`.
    fn refuse(
        &mut self,
        errors: &[(usize, String)],
        pending: &Pending,
    ) -> std::result::Result<(), String> {
        for (i, err) in errors {
            let m = &pending.meta[*i];
            if self.spec.options.on_error == OnError::Fail {
                return Err(format!(
                    "cannot decode the record at topic \"{}\" partition {} offset {}: {err}",
                    self.spec.options.topic, m.partition, m.offset
                ));
            }
            if self.dead.record(
                &self.source,
                m.partition,
                m.offset,
                pending.slice(m.value),
                err.clone(),
            ) {
                self.progress.dead_letters.fetch_add(1, Ordering::AcqRel);
            }
            if let Some(p) = self.partitions.get_mut(&m.partition) {
                p.progress.dead_letters += 1;
            }
        }
        Ok(())
    }

    /// Offsets read (also past refused records).
    fn note_offsets(&mut self, pending: &Pending) {
        for m in &pending.meta {
            if let Some(p) = self.partitions.get_mut(&m.partition) {
                p.progress.offset = p.progress.offset.max(m.offset + 1);
            }
        }
    }

    /// Decode the pending messages as keyed operations and apply them to the table, with
    /// the partitions' next offsets in the same commit.
    fn apply_to_table(&mut self, pending: &mut Pending) -> std::result::Result<(), String> {
        let Target::Table { decoder, .. } = &self.target else {
            return Ok(());
        };
        let messages: Vec<KeyValue<'_>> = pending
            .meta
            .iter()
            .map(|m| (pending.slice(m.key), pending.slice(m.value)))
            .collect();
        let decoded = decoder.decode(&messages);
        self.refuse(&decoded.errors, pending)?;
        self.note_offsets(pending);
        let mut extra = Vec::new();
        let mut touched: Vec<i32> = pending.meta.iter().map(|m| m.partition).collect();
        touched.sort_unstable();
        touched.dedup();
        let Target::Table { table, stop, .. } = &self.target else {
            return Ok(());
        };
        for p in touched {
            if let Some(s) = self.partitions.get(&p) {
                extra.push((
                    offset_key(table.oid, p),
                    s.progress.offset.to_be_bytes().to_vec(),
                ));
            }
        }
        let n = decoded.order.len() as u64;
        {
            // serialized with DML, backfills and DROP TABLE
            let _writer = table.writer.blocking_lock();
            if stop.load(Ordering::Acquire) {
                pending.clear();
                return Ok(());
            }
            table
                .apply_with(
                    Change::Upsert {
                        upserts: decoded.upserts,
                        deletes: decoded.deletes,
                        order: decoded.order,
                    },
                    extra,
                )
                .map_err(|e| format!("cannot apply to table \"{}\": {}", table.name, e.message))?;
        }
        for m in &pending.meta {
            if let Some(p) = self.partitions.get_mut(&m.partition) {
                p.progress.rows += 1;
            }
        }
        pending.clear();
        self.batches += 1;
        self.rows += n;
        self.progress.rows.store(self.rows, Ordering::Release);
        Ok(())
    }

    /// The minimum over active partitions of (largest event time - delay); idle
    /// partitions (read to their end, no message for the idle timeout) do not hold it
    /// back; it never moves back.
    fn advance_watermark(&mut self, delay: i64) {
        let idle = self.spec.options.idle_timeout;
        let mut min: Option<i64> = None;
        let mut all_idle = true;
        for p in self.partitions.values_mut() {
            // idle: read to its end and quiet; a partition with unread messages (a
            // backlog the consumer has not reached) is never idle
            p.progress.idle = p.at_end.is_some() && p.last_message.elapsed() >= idle;
            if p.progress.idle {
                continue;
            }
            all_idle = false;
            match p.progress.max_event_time {
                // an active partition that has shown no event time holds the watermark
                None => return,
                Some(t) => {
                    let w = t.saturating_sub(delay);
                    min = Some(min.map_or(w, |m: i64| m.min(w)));
                }
            }
        }
        if all_idle {
            return;
        }
        if let Some(w) = min {
            let before = self.watermark;
            self.watermark = Some(self.watermark.map_or(w, |old| old.max(w)));
            if self.watermark != before {
                tracing::debug!(
                    view = %self.view,
                    watermark = ?self.watermark,
                    partitions = ?self
                        .partitions
                        .iter()
                        .map(|(p, s)| (*p, s.progress.max_event_time, s.progress.idle))
                        .collect::<Vec<_>>(),
                    "source watermark"
                );
            }
        }
    }

    /// The decoded value columns plus the INCLUDEd metadata columns.
    fn with_includes(
        &self,
        values: &RecordBatch,
        rows: &[usize],
        pending: &Pending,
    ) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = values.columns().to_vec();
        for (kind, _) in &self.spec.options.includes {
            let a: ArrayRef = match kind {
                Include::Partition => {
                    let mut b = Int32Builder::with_capacity(rows.len());
                    for i in rows {
                        b.append_value(pending.meta[*i].partition);
                    }
                    Arc::new(b.finish())
                }
                Include::Offset => {
                    let mut b = Int64Builder::with_capacity(rows.len());
                    for i in rows {
                        b.append_value(pending.meta[*i].offset);
                    }
                    Arc::new(b.finish())
                }
                Include::Key => {
                    let mut b = BinaryBuilder::with_capacity(rows.len(), rows.len() * 8);
                    for i in rows {
                        match pending.slice(pending.meta[*i].key) {
                            Some(k) => b.append_value(k),
                            None => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                Include::Timestamp => {
                    let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
                    for i in rows {
                        match pending.meta[*i].timestamp {
                            Some(ms) => b.append_value(ms.saturating_mul(1000)),
                            None => b.append_null(),
                        }
                    }
                    let a: ArrayRef = Arc::new(b.finish());
                    cast(&a, &Include::Timestamp.sql_type().arrow_type())?
                }
            };
            cols.push(a);
        }
        let schema = schema_of(
            self.spec
                .columns
                .iter()
                .map(|c| (c.name.as_str(), &c.ty, c.nullable)),
        );
        Ok(RecordBatch::try_new(schema, cols)?)
    }

    /// Partition progress for the system tables: high watermarks from the latest fetch
    /// responses (librdkafka's cache; ListOffsets under-reports on some brokers), rates.
    /// Whether a message is to be read: under `latest`, only from the log end the first
    /// fetch response reported (the partition is sought there once it is known).
    fn wanted(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        topic: &CString,
        m: &rdkafka::message::BorrowedMessage<'_>,
    ) -> bool {
        let (partition, offset) = (m.partition(), m.offset());
        let Some(s) = self.partitions.get_mut(&partition) else {
            return true;
        };
        if let Some(t) = s.skip_before_ms {
            if m.timestamp().to_millis().is_some_and(|ts| ts < t) {
                s.progress.offset = s.progress.offset.max(offset + 1);
                return false;
            }
            s.skip_before_ms = None;
        }
        match s.skip_below {
            None => true,
            Some(Some(t)) => offset >= t,
            Some(None) => {
                // the fetch response carrying this message has set the cached log end
                match cached_high_watermark(consumer, topic, partition) {
                    Some(hw) => {
                        s.skip_below = Some(Some(hw));
                        s.progress.offset = hw;
                        seek(consumer, &self.spec.options.topic, partition, hw);
                        offset >= hw
                    }
                    None => false,
                }
            }
        }
    }

    fn refresh_progress(&mut self, consumer: &BaseConsumer<SourceContext>, topic: &CString) {
        let mut out = Vec::with_capacity(self.partitions.len());
        for (p, s) in self.partitions.iter_mut() {
            if let Some(hi) = cached_high_watermark(consumer, topic, *p) {
                s.progress.high_watermark = hi;
                s.max_log_end = s.max_log_end.max(hi);
                if s.skip_below == Some(None) {
                    s.skip_below = Some(Some(hi));
                    s.progress.offset = hi;
                    seek(consumer, &self.spec.options.topic, *p, hi);
                }
            }
            let (t, r) = s.rate_mark;
            if t.elapsed() >= Duration::from_secs(1) {
                s.progress.rows_per_second =
                    (s.progress.rows - r) as f64 / t.elapsed().as_secs_f64();
                s.rate_mark = (Instant::now(), s.progress.rows);
            }
            s.progress.idle =
                s.at_end.is_some() && s.last_message.elapsed() >= self.spec.options.idle_timeout;
            out.push(s.progress.clone());
        }
        *self.progress.partitions.lock() = out;
    }
}

/// librdkafka's cached high watermark of a partition, from the latest fetch response.
fn cached_high_watermark(
    consumer: &BaseConsumer<SourceContext>,
    topic: &CString,
    partition: i32,
) -> Option<i64> {
    cached_high_watermark_of(consumer.client().native_ptr(), topic, partition)
}

/// [`cached_high_watermark`] for any client handle.
pub(crate) fn cached_high_watermark_of(
    client: *mut rdkafka::bindings::rd_kafka_t,
    topic: &CString,
    partition: i32,
) -> Option<i64> {
    let (mut lo, mut hi) = (-1i64, -1i64);
    // SAFETY: the caller's client outlives the call; topic is a valid C string
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            client,
            topic.as_ptr(),
            partition,
            &mut lo,
            &mut hi,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && hi >= 0)
        .then_some(hi)
}

fn seek(consumer: &BaseConsumer<SourceContext>, topic: &str, partition: i32, offset: i64) {
    if let Err(e) = consumer.seek(
        topic,
        partition,
        Offset::Offset(offset),
        Duration::from_secs(5),
    ) {
        warn!(topic, partition, offset, error = %e, "cannot seek to the log end");
    }
}
