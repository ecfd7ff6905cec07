//! The consumer loop of a Kafka source instance: partition assignment from the startup
//! position, the fetch/poll burst, per-partition progress and idleness, and the combined
//! watermark. FLUSH is served by `flush.rs`, rows are handed over by `target.rs`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::options::{KafkaSpec, Startup};
use super::target::Target;
use crate::connectors::dead_letters::DeadLetters;
use crate::connectors::runner::{PartitionProgress, Progress, RunnerSpec, SourceKind, SyncRequest};
use crate::connectors::upsert::ChangeDecoder;
use crate::dataflow::runtime::Msg;
use crate::dataflow::watermark::{WatermarkSpec, advance};
use crate::state::table::TableStore;

const MAX_BATCH_ROWS: usize = 4096;
/// A batch is handed over at the latest this long after its first message.
const MAX_BATCH_DELAY: Duration = Duration::from_millis(50);
const METADATA_REFRESH: Duration = Duration::from_secs(5);
/// After a client error, how long fetches must run cleanly before FLUSH trusts the cached
/// log ends (librdkafka reports failures at least every reconnect backoff, 1 s).
pub(super) const ERROR_SETTLE: Duration = Duration::from_millis(1500);
/// How often partition progress (and idleness) is refreshed.
const PROGRESS_REFRESH: Duration = Duration::from_millis(100);
/// librdkafka's fetch long-poll: also how stale a cached high watermark can be.
pub(super) const FETCH_WAIT_MS: u64 = 100;

/// Receives librdkafka's client errors (broker down, transport failures), which do not
/// come through `poll`.
#[derive(Clone, Default)]
pub(super) struct SourceContext {
    /// The latest client error and when it happened.
    pub(super) error: Arc<parking_lot::Mutex<Option<(Instant, String)>>>,
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
pub(super) struct Pending {
    pub(super) bytes: Vec<u8>,
    /// (partition, offset, value range, key range, timestamp ms)
    pub(super) meta: Vec<Meta>,
    pub(super) since: Option<Instant>,
}

pub(super) struct Meta {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) value: Option<(usize, usize)>,
    pub(super) key: Option<(usize, usize)>,
    pub(super) timestamp: Option<i64>,
}

impl Pending {
    pub(super) fn push(&mut self, m: &rdkafka::message::BorrowedMessage<'_>) {
        self.push_parts(
            m.partition(),
            m.offset(),
            m.key(),
            m.payload(),
            m.timestamp().to_millis(),
        );
    }

    pub(super) fn push_parts(
        &mut self,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: Option<i64>,
    ) {
        let mut put = |b: Option<&[u8]>| {
            b.map(|b| {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(b);
                (start, self.bytes.len())
            })
        };
        let value = put(value);
        let key = put(key);
        self.meta.push(Meta {
            partition,
            offset,
            value,
            key,
            timestamp,
        });
        self.since.get_or_insert_with(Instant::now);
    }

    pub(super) fn slice(&self, r: Option<(usize, usize)>) -> Option<&[u8]> {
        r.map(|(a, b)| &self.bytes[a..b])
    }

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.meta.clear();
        self.since = None;
    }
}

pub(super) struct PartitionState {
    pub(super) progress: PartitionProgress,
    /// `scan.startup.mode = 'latest'`: messages below this offset are skipped; None until
    /// the first fetch response tells the log end (then the partition is sought there).
    pub(super) skip_below: Option<Option<i64>>,
    /// `scan.startup.mode = 'timestamp'`: messages before this time (ms) are skipped until
    /// the first one at or after it.
    pub(super) skip_before_ms: Option<i64>,
    pub(super) last_message: Instant,
    /// The partition was read to its end (EOF), with the log end then; None once a
    /// message came after it.
    pub(super) at_end: Option<i64>,
    /// The largest log end any response has reported (brokers can under-report it for a
    /// while; it never shrinks here).
    pub(super) max_log_end: i64,
    /// For rows/s: (time, rows) at the last rate update.
    pub(super) rate_mark: (Instant, u64),
}

pub(super) struct Instance {
    pub(super) target: Target,
    /// Next offsets per partition to resume from (tables: as committed with their rows;
    /// views: as checkpointed).
    pub(super) resume: BTreeMap<i32, i64>,
    /// Largest event time per partition as checkpointed (restored views).
    pub(super) resume_event_times: BTreeMap<i32, i64>,
    /// Partitions checkpointed before the startup mode's position was reached: they start
    /// as on a first start.
    pub(super) resume_unstarted: std::collections::BTreeSet<i32>,
    pub(super) source: String,
    pub(super) view: String,
    pub(super) spec: KafkaSpec,
    pub(super) watermark_spec: Option<WatermarkSpec>,
    pub(super) watermark: Option<i64>,
    pub(super) partitions: BTreeMap<i32, PartitionState>,
    pub(super) progress: Arc<Progress>,
    pub(super) dead: Arc<DeadLetters>,
    pub(super) batches: u64,
    pub(super) rows: u64,
    /// Where each batch handed over is recorded (views, with checkpoints on).
    pub(super) journal: Option<crate::dataflow::journal::Journal>,
    /// Journaled batches still to be re-formed (a restored view).
    pub(super) replay: Option<super::replay::Replay>,
    /// Partitions the checkpoint had not started (or did not know) whose journaled
    /// messages start here: they resume at that offset.
    pub(super) journal_start: BTreeMap<i32, i64>,
    /// The source's shared reader (its handoffs are served between batches), or this
    /// view's backfill reader of it (see `backfill.rs`).
    pub(super) share: Option<crate::connectors::runner::Share>,
    pub(super) backfill: Option<super::backfill::Backfill>,
    /// A backfill reader joined the shared reader: its work is done.
    pub(super) joined: bool,
    /// `--memory-limit`: nothing is read while the process is over it.
    pub(super) memory: Arc<crate::state::memory::MemoryBudget>,
}

/// Run one view's instance of a Kafka source until `stop` (see the module header).
pub fn run(
    tx: mpsc::Sender<Msg>,
    spec: RunnerSpec,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    sync: std::sync::mpsc::Receiver<SyncRequest>,
    dead: Arc<DeadLetters>,
    memory: Arc<crate::state::memory::MemoryBudget>,
) {
    let SourceKind::Kafka(kspec) = spec.kind else {
        return;
    };
    // a restored view's instance continues at its checkpointed offsets, never at the
    // consumer group's
    let resume = spec.resume.unwrap_or_default();
    let mut instance = Instance::new(
        Target::View {
            tx,
            instance: spec.instance,
        },
        resume
            .position
            .0
            .iter()
            .filter(|p| p.next >= 0)
            .map(|p| (p.partition, p.next))
            .collect(),
        (spec.source_name, spec.view_name),
        *kspec,
        spec.watermark.map(WatermarkSpec::new),
        progress,
        dead,
    );
    instance.resume_event_times = resume
        .position
        .0
        .iter()
        .filter_map(|p| p.max_event_time.map(|t| (p.partition, t)))
        .collect();
    instance.resume_unstarted = resume
        .position
        .0
        .iter()
        .filter(|p| p.next < 0)
        .map(|p| p.partition)
        .collect();
    instance.watermark = resume.watermark;
    instance.journal_start = super::replay::first_offsets(&resume.journal)
        .into_iter()
        .filter(|(p, _)| !instance.resume.contains_key(p))
        .collect();
    instance.replay = super::replay::Replay::new(resume.journal);
    instance.journal = spec.journal;
    if let crate::connectors::runner::Share::Backfill(shared) = &spec.share {
        instance.backfill = Some(super::backfill::Backfill::new(
            shared.clone(),
            (spec.view_oid, instance.view.clone()),
        ));
    }
    instance.share = Some(spec.share);
    instance.memory = memory;
    instance.finish(&stop, &sync);
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
    (dead, memory): (Arc<DeadLetters>, Arc<crate::state::memory::MemoryBudget>),
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
    let name = table.name().to_string();
    let mut instance = Instance::new(
        Target::Table {
            table,
            decoder,
            stop: stop.clone(),
        },
        resume,
        (name.clone(), name),
        spec,
        None,
        progress,
        dead,
    );
    instance.memory = memory;
    instance.finish(&stop, &sync);
}

impl Instance {
    fn new(
        target: Target,
        resume: BTreeMap<i32, i64>,
        (source, view): (String, String),
        spec: KafkaSpec,
        watermark_spec: Option<WatermarkSpec>,
        progress: Arc<Progress>,
        dead: Arc<DeadLetters>,
    ) -> Instance {
        Instance {
            target,
            resume,
            resume_event_times: BTreeMap::new(),
            resume_unstarted: Default::default(),
            source,
            view,
            spec,
            watermark_spec,
            watermark: None,
            partitions: BTreeMap::new(),
            progress,
            dead,
            batches: 0,
            rows: 0,
            journal: None,
            replay: None,
            journal_start: BTreeMap::new(),
            share: None,
            backfill: None,
            joined: false,
            memory: crate::state::memory::MemoryBudget::unlimited(),
        }
    }

    pub(super) fn finish(
        &mut self,
        stop: &AtomicBool,
        sync: &std::sync::mpsc::Receiver<SyncRequest>,
    ) {
        let inst = self;
        let result = inst.run(stop, sync);
        if let (Some(share), Target::View { tx, instance }) = (&inst.share, &inst.target) {
            match share {
                crate::connectors::runner::Share::Reader(r) => r.finish(tx),
                crate::connectors::runner::Share::Backfill(r) => r.withdraw(*instance),
            }
        }
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
        } else if inst.joined {
            *inst.progress.status.lock() = crate::connectors::runner::JOINED.into();
        } else {
            *inst.progress.status.lock() = "stopped".into();
        }
        inst.progress.done.store(true, Ordering::Release);
    }

    pub(super) fn set_status(&self, s: impl Into<String>) {
        let s = s.into();
        let mut g = self.progress.status.lock();
        if *g != s {
            info!(source = %self.source, view = %self.view, status = %s, "kafka source status");
            *g = s;
        }
    }

    pub(super) fn run(
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
            if let (Some(crate::connectors::runner::Share::Reader(r)), Target::View { tx, .. }) =
                (&self.share, &self.target)
                && !r.serve(tx, stop)
            {
                return Err("the dataflow worker has stopped".into());
            }
            // over --memory-limit: read nothing until memory is freed
            if !crate::connectors::runner::hold_at_memory_limit(
                &self.memory,
                stop,
                &self.progress,
                &self.source,
                &self.view,
            ) {
                return Ok(());
            }
            // a backfill reader answers FLUSH once it has joined the shared reader (which
            // serves FLUSH for the topic)
            if self.backfill.is_none() {
                while let Ok(s) = sync.try_recv() {
                    self.take_flush_request(&consumer, &topic, s, &mut syncing);
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
                            match (&mut self.replay, &mut self.backfill) {
                                (Some(r), _) => r.hold(&m),
                                (None, Some(b)) => b.offer(&m, &mut pending),
                                (None, None) => pending.push(&m),
                            }
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
            if self.replay.is_some() {
                self.replay_journal(&mut pending, drained)?;
            } else {
                let full = pending.meta.len() >= MAX_BATCH_ROWS
                    || pending
                        .since
                        .is_some_and(|t| t.elapsed() >= MAX_BATCH_DELAY);
                if full || (drained && !syncing.is_empty() && !pending.meta.is_empty()) {
                    self.hand_over(&mut pending, None)?;
                }
            }
            if self.backfill.is_some() && self.backfill_step(&mut pending, &consumer, &topic)? {
                self.joined = true;
                return Ok(());
            }
            if last_refresh.elapsed() >= PROGRESS_REFRESH {
                last_refresh = Instant::now();
                self.refresh_progress(&consumer, &topic_c);
                // partitions going idle can let the watermark move without new rows (not
                // while journaled batches are re-formed: they say where it moved)
                if let Some(spec) = self.watermark_spec
                    && self.replay.is_none()
                {
                    let before = self.watermark;
                    self.advance_watermark(spec);
                    if self.watermark != before {
                        self.record(Vec::new(), before)?;
                        self.send_watermark(before)?;
                    }
                }
            }
            if !syncing.is_empty() {
                self.serve_flush(
                    &consumer,
                    &topic_c,
                    &pending,
                    last_error.as_ref(),
                    &mut syncing,
                )?;
            }
        }
    }

    /// Assign partitions of the topic not assigned yet, from the startup position (new
    /// partitions of a running source from their beginning).
    pub(super) fn assign_new_partitions(
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
        let first_start = self.partitions.is_empty() && self.resume.is_empty();
        // a first start of the partition: the startup mode applies
        let first_of: BTreeMap<i32, bool> = new
            .iter()
            .map(|p| {
                let first = (first_start || self.resume_unstarted.contains(p))
                    && !self.journal_start.contains_key(p);
                (*p, first)
            })
            .collect();
        let mut tpl = TopicPartitionList::new();
        for p in &new {
            let first = first_of[p];
            let offset = match (&self.spec.options.startup, first) {
                _ if self.resume.contains_key(p) => Offset::Offset(self.resume[p]),
                _ if self.journal_start.contains_key(p) => Offset::Offset(self.journal_start[p]),
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
            let first = first_of[&p];
            let max_event_time = self.resume_event_times.get(&p).copied();
            self.partitions.insert(
                p,
                PartitionState {
                    progress: PartitionProgress {
                        partition: p,
                        offset: self
                            .resume
                            .get(&p)
                            .or(self.journal_start.get(&p))
                            .copied()
                            .unwrap_or(0),
                        high_watermark: -1,
                        max_event_time,
                        watermark: max_event_time
                            .zip(self.watermark_spec)
                            .map(|(t, spec)| spec.bound(t)),
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

    /// The minimum over active partitions of (largest event time - delay); idle
    /// partitions (read to their end, no message for the idle timeout) do not hold it
    /// back; it never moves back.
    pub(super) fn advance_watermark(&mut self, spec: WatermarkSpec) {
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
                    let w = spec.bound(t);
                    min = Some(min.map_or(w, |m: i64| m.min(w)));
                }
            }
        }
        if all_idle {
            return;
        }
        if let Some(w) = min {
            let before = self.watermark;
            self.watermark = advance(self.watermark, Some(w));
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

    /// Partition progress for the system tables: high watermarks from the latest fetch
    /// responses (librdkafka's cache; ListOffsets under-reports on some brokers), rates.
    /// Whether a message is to be read: under `latest`, only from the log end the first
    /// fetch response reported (the partition is sought there once it is known).
    pub(super) fn wanted(
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

    pub(super) fn refresh_progress(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        topic: &CString,
    ) {
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
pub(super) fn cached_high_watermark(
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

pub(super) fn seek(
    consumer: &BaseConsumer<SourceContext>,
    topic: &str,
    partition: i32,
    offset: i64,
) {
    if let Err(e) = consumer.seek(
        topic,
        partition,
        Offset::Offset(offset),
        Duration::from_secs(5),
    ) {
        warn!(topic, partition, offset, error = %e, "cannot seek to the log end");
    }
}
