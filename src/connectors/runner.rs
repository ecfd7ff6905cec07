//! Source runners: one thread per source reader that pulls batches from the source's
//! generator and hands them to the dataflow, with the event-time watermark the source's
//! `WATERMARK` declares (largest event time so far minus the delay; it only moves forward).
//! Each source has one shared reader whose batches every view over it receives, and views
//! created later read its history with a backfill reader of their own first (`shared.rs`).
//!
//! Flow control: after every few batches the runner sends a barrier and waits for it, so it
//! is never more than that many batches ahead of the views (memory stays bounded when the
//! generator is faster than the dataflow). A rate limit paces rows on the wall clock.
//!
//! A runner stops when its view is dropped (the flag is checked between batches; batches
//! already queued for the dropped view are ignored by the worker), when its generator is
//! exhausted, or when the generator fails (the error is kept for `weir_sources`). Kafka
//! instances run the loop in `kafka.rs` with the same registry, progress and flow control.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::dataflow::watermark::WatermarkSpec;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};

use crate::connectors::Generator;
use crate::connectors::shared::{Handoff, SharedReader};
use crate::dataflow::changelog::Changelog;
use crate::dataflow::position::Position;
use crate::dataflow::runtime::Msg;
use crate::state::memory::MemoryBudget;

/// The status of a backfill reader once its view has joined the shared reader.
pub const JOINED: &str = "joined";
/// Relation ids handed to source instances start here, far above any catalog OID.
pub const FIRST_INSTANCE_ID: u32 = 0xF000_0000;
const MAX_BATCH_ROWS: usize = 4096;
/// Batches a runner may have in flight before it waits for the views to catch up.
pub(crate) const BATCHES_PER_BARRIER: u64 = 8;
/// How long FLUSH waits for a source that makes no progress before it gives up with an
/// error.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);

/// What a runner needs to run.
pub struct RunnerSpec {
    pub view_oid: u32,
    pub view_name: String,
    pub source_name: String,
    /// The relation id the view's graph reads this source as.
    pub instance: u32,
    /// (event-time column, watermark delay in µs) when the source declares a WATERMARK.
    pub watermark: Option<(usize, i64)>,
    pub kind: SourceKind,
    /// Where a restored view's instance resumes (from its checkpoint); None: from the
    /// source's start.
    pub resume: Option<Resume>,
    /// Kafka instances with checkpoints on: the input journal their batches are recorded
    /// in (see `dataflow/journal.rs`).
    pub journal: Option<crate::dataflow::journal::Journal>,
    /// The source's shared reader, or a view's backfill reader that joins it.
    pub share: Share,
}

/// The part a reader plays (see `shared.rs`).
#[derive(Clone)]
pub enum Share {
    /// The source's one reader: its batches go under `SharedReader::relation` to every
    /// view that joined it.
    Reader(Arc<SharedReader>),
    /// A view's backfill reader: its batches go under the view's instance id, never past
    /// the shared reader, and it joins the shared reader once it is there.
    Backfill(Arc<SharedReader>),
}

impl Share {
    pub fn reader(&self) -> &Arc<SharedReader> {
        match self {
            Share::Reader(r) | Share::Backfill(r) => r,
        }
    }
}

/// The checkpointed position of a view's instance of a source, and its watermark then.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    pub position: Position,
    pub watermark: Option<i64>,
    /// The batches handed over after the checkpoint, to be re-formed exactly (Kafka).
    pub journal: Vec<crate::dataflow::journal::Entry>,
}

pub enum SourceKind {
    Generator {
        generator: Box<dyn Generator>,
        /// Rows per second of wall-clock time, when limited.
        rate: Option<u64>,
        /// The generator ends (a row count was given).
        bounded: bool,
    },
    Kafka(Box<crate::connectors::kafka::KafkaSpec>),
}

/// What a running instance reports (for `weir_sources` and `weir_source_partitions`).
#[derive(Default)]
pub struct Progress {
    pub rows: AtomicU64,
    /// i64::MIN: no watermark yet.
    pub watermark: AtomicI64,
    pub done: AtomicBool,
    pub error: Mutex<Option<String>>,
    /// What the instance is doing, in a few words ("running", "broker unreachable: ...").
    pub status: Mutex<String>,
    pub dead_letters: AtomicU64,
    pub partitions: Mutex<Vec<PartitionProgress>>,
}

/// One Kafka partition of a running instance.
#[derive(Debug, Clone, Default)]
pub struct PartitionProgress {
    pub partition: i32,
    /// Next offset to read.
    pub offset: i64,
    /// The broker's high watermark (log end) as of the last fetch, -1 if unknown.
    pub high_watermark: i64,
    /// Largest event time seen, µs.
    pub max_event_time: Option<i64>,
    /// This partition's event-time watermark (largest event time minus the delay), µs.
    pub watermark: Option<i64>,
    pub rows: u64,
    pub rows_per_second: f64,
    pub dead_letters: u64,
    /// No message for longer than the idle timeout: not holding the watermark back.
    pub idle: bool,
}

/// A request to catch up with everything written to the source so far; answered once
/// those rows are in the dataflow's queue, ahead of a barrier.
pub type SyncRequest = oneshot::Sender<std::result::Result<(), String>>;

struct Handle {
    /// The view a backfill reader reads for (0: a shared reader).
    view_oid: u32,
    /// A shared reader: the views reading through it are listed there.
    shared: Option<Arc<SharedReader>>,
    /// A table's consumer.
    table: bool,
    view_name: String,
    source_name: String,
    /// Bounded and not rate-limited: FLUSH waits for it to finish.
    awaited: bool,
    /// Kafka instances: FLUSH asks them to catch up with the topic.
    sync: Option<std::sync::mpsc::Sender<SyncRequest>>,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
}

/// One row of `weir_sources`.
#[derive(Debug, Clone)]
pub struct SourceProgress {
    pub source_name: String,
    pub view_name: String,
    pub rows: u64,
    pub watermark: Option<i64>,
    pub done: bool,
    pub error: Option<String>,
    pub status: String,
    pub dead_letters: u64,
    pub partitions: Vec<PartitionProgress>,
    /// "shared" (the source's one reader), "backfill" (the view's own, reading the
    /// source's history before it joins the shared reader) or "table" (a table's consumer).
    pub reader: &'static str,
}

/// A source's shared reader and the views over it (joined or backfilling).
type SharedEntry = (Arc<SharedReader>, HashSet<u32>);

/// Every running source instance.
pub struct Runners {
    next_instance: AtomicU32,
    handles: Mutex<Vec<Handle>>,
    /// Each source's shared reader (by source OID) and the views over it (joined or
    /// backfilling): the reader stops when the last of them goes.
    shared: Mutex<HashMap<u32, SharedEntry>>,
    pub dead_letters: Arc<crate::connectors::dead_letters::DeadLetters>,
    /// `--memory-limit`: readers pause while the process is over it.
    pub memory: Arc<MemoryBudget>,
}

impl Default for Runners {
    fn default() -> Self {
        Runners {
            next_instance: AtomicU32::new(FIRST_INSTANCE_ID),
            handles: Mutex::new(Vec::new()),
            shared: Mutex::new(HashMap::new()),
            dead_letters: Arc::default(),
            memory: MemoryBudget::unlimited(),
        }
    }
}

impl Runners {
    /// Readers under a memory budget.
    pub fn with_memory(memory: Arc<MemoryBudget>) -> Runners {
        Runners {
            memory,
            ..Default::default()
        }
    }
}

impl Runners {
    /// A fresh relation id for one view's instance of a source.
    pub fn new_instance_id(&self) -> u32 {
        self.next_instance.fetch_add(1, Ordering::Relaxed)
    }

    /// The source's shared reader, if one runs (or is about to).
    pub fn shared_reader(&self, source_oid: u32) -> Option<Arc<SharedReader>> {
        self.shared.lock().get(&source_oid).map(|(r, _)| r.clone())
    }

    /// The source's shared reader, or a new one (true: the caller starts it) when none
    /// runs, as one step (two views created at once share one reader).
    pub fn shared_reader_or_new(
        &self,
        source_oid: u32,
        source_name: &str,
    ) -> (Arc<SharedReader>, bool) {
        let mut g = self.shared.lock();
        if let Some((r, _)) = g.get(&source_oid) {
            return (r.clone(), false);
        }
        let r = Arc::new(SharedReader::new(
            source_oid,
            source_name.to_owned(),
            self.new_instance_id(),
            Position::default(),
            false,
        ));
        g.insert(source_oid, (r.clone(), HashSet::new()));
        (r, true)
    }

    /// A shared reader restored at the source's checkpointed position `at` (at start);
    /// start it with [`start`](Self::start) and a `Share::Reader` spec.
    pub fn new_shared_reader(
        &self,
        source_oid: u32,
        source_name: &str,
        at: Position,
    ) -> Arc<SharedReader> {
        let r = Arc::new(SharedReader::new(
            source_oid,
            source_name.to_owned(),
            self.new_instance_id(),
            at,
            true,
        ));
        self.shared
            .lock()
            .insert(source_oid, (r.clone(), HashSet::new()));
        r
    }

    /// Shared readers no view reads through (after a restart whose views over the source
    /// are all gone): stopped and forgotten; returns (relation, source OID) of each.
    pub fn unused_readers(&self) -> Vec<(u32, u32)> {
        self.end_readers(None)
    }

    /// A view reads the source through its shared reader (joined or backfilling).
    pub fn attach(&self, source_oid: u32, view_oid: u32) {
        if let Some((_, views)) = self.shared.lock().get_mut(&source_oid) {
            views.insert(view_oid);
        }
    }

    /// A view is dropped (or failed to start): its backfill readers stop, it leaves the
    /// shared readers, and those no view needs any more stop. Returns the relation ids of
    /// the shared readers stopped (the worker forgets them) with their source OIDs.
    pub fn detach(&self, view_oid: u32) -> Vec<(u32, u32)> {
        self.stop_view(view_oid);
        self.end_readers(Some(view_oid))
    }

    /// Stop the shared readers left without views (after `leaving` left them).
    fn end_readers(&self, leaving: Option<u32>) -> Vec<(u32, u32)> {
        let mut ended = Vec::new();
        self.shared.lock().retain(|source, (r, views)| {
            if let Some(v) = leaving {
                views.remove(&v);
                r.leave(v);
            }
            if views.is_empty() {
                ended.push((r.relation, *source));
            }
            !views.is_empty()
        });
        let gone = |r: &Handle| {
            r.shared
                .as_ref()
                .is_some_and(|s| ended.iter().any(|(rel, _)| *rel == s.relation))
        };
        let mut h = self.handles.lock();
        for r in h.iter().filter(|r| gone(r)) {
            r.stop.store(true, Ordering::Release);
        }
        h.retain(|r| !gone(r));
        ended
    }

    /// Start a runner feeding `tx`. Call after the view's graph is in the dataflow.
    pub fn start(&self, tx: mpsc::Sender<Msg>, spec: RunnerSpec) {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress {
            watermark: AtomicI64::new(i64::MIN),
            status: Mutex::new("starting".into()),
            ..Default::default()
        });
        let (awaited, sync_tx, sync_rx) = match &spec.kind {
            SourceKind::Generator { rate, bounded, .. } => (*bounded && rate.is_none(), None, None),
            SourceKind::Kafka(_) => {
                let (t, r) = std::sync::mpsc::channel();
                (false, Some(t), Some(r))
            }
        };
        let (view_oid, shared) = match &spec.share {
            Share::Reader(r) => (0, Some(r.clone())),
            Share::Backfill(_) => (spec.view_oid, None),
        };
        self.handles.lock().push(Handle {
            view_oid,
            shared,
            table: false,
            view_name: spec.view_name.clone(),
            source_name: spec.source_name.clone(),
            awaited,
            sync: sync_tx,
            stop: stop.clone(),
            progress: progress.clone(),
        });
        let name = format!("weir-src-{}", spec.instance - FIRST_INSTANCE_ID);
        let dead = self.dead_letters.clone();
        let memory = self.memory.clone();
        let spawned = std::thread::Builder::new().name(name).spawn({
            let progress = progress.clone();
            move || match sync_rx {
                Some(sync) => {
                    crate::connectors::kafka::run(tx, spec, stop, progress, sync, dead, memory)
                }
                None => run(tx, spec, stop, progress, memory),
            }
        });
        if let Err(e) = spawned {
            *progress.error.lock() = Some(format!("cannot start the source thread: {e}"));
            progress.done.store(true, Ordering::Release);
        }
    }

    /// Start the consumer of a table fed by a changelog topic; it stops with
    /// [`stop_view`](Self::stop_view) of the table's OID.
    pub fn start_table(
        &self,
        table: Arc<crate::state::table::TableStore>,
        spec: crate::connectors::kafka::KafkaSpec,
        decoder: crate::connectors::upsert::ChangeDecoder,
    ) {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress {
            watermark: AtomicI64::new(i64::MIN),
            status: Mutex::new("starting".into()),
            ..Default::default()
        });
        let (sync_tx, sync_rx) = std::sync::mpsc::channel();
        self.handles.lock().push(Handle {
            view_oid: table.oid,
            shared: None,
            table: true,
            view_name: table.name().to_string(),
            source_name: table.name().to_string(),
            awaited: false,
            sync: Some(sync_tx),
            stop: stop.clone(),
            progress: progress.clone(),
        });
        let dead = self.dead_letters.clone();
        let memory = self.memory.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("weir-table-{}", table.oid))
            .spawn({
                let progress = progress.clone();
                move || {
                    crate::connectors::kafka::run_table(
                        table,
                        spec,
                        decoder,
                        stop,
                        progress,
                        sync_rx,
                        (dead, memory),
                    )
                }
            });
        if let Err(e) = spawned {
            *progress.error.lock() = Some(format!("cannot start the table's consumer: {e}"));
            progress.done.store(true, Ordering::Release);
        }
    }

    /// Stop the runners of a view (dropped).
    pub fn stop_view(&self, view_oid: u32) {
        let mut h = self.handles.lock();
        for r in h.iter().filter(|r| r.view_oid == view_oid) {
            r.stop.store(true, Ordering::Release);
        }
        h.retain(|r| r.view_oid != view_oid);
    }

    /// FLUSH: wait until every bounded, unthrottled generator has handed over all its rows
    /// and every Kafka instance has read what its topic held when FLUSH began.
    pub async fn catch_up(&self) -> crate::error::Result<()> {
        let mut waits = Vec::new();
        for h in self.handles.lock().iter() {
            if let Some(sync) = &h.sync
                && !h.progress.done.load(Ordering::Acquire)
            {
                let (tx, rx) = oneshot::channel();
                if sync.send(tx).is_ok() {
                    waits.push((h.source_name.clone(), rx, h.progress.clone()));
                }
            }
        }
        loop {
            let pending = self
                .handles
                .lock()
                .iter()
                .any(|r| r.awaited && !r.progress.done.load(Ordering::Acquire));
            if !pending {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // a long backlog is fine as long as it is being read: give up only after
        // CATCH_UP_TIMEOUT without progress
        for (source, mut rx, progress) in waits {
            let mut last = progress.rows.load(Ordering::Acquire);
            let mut stalled_since = Instant::now();
            loop {
                match tokio::time::timeout(Duration::from_secs(1), &mut rx).await {
                    Ok(Ok(Ok(()))) | Ok(Err(_)) => break,
                    Ok(Ok(Err(e))) => {
                        return Err(crate::error::WeirError::new(
                            "58000",
                            format!("source \"{source}\" cannot catch up: {e}"),
                        ));
                    }
                    Err(_) => {
                        let now = progress.rows.load(Ordering::Acquire);
                        if now != last {
                            last = now;
                            stalled_since = Instant::now();
                        } else if stalled_since.elapsed() >= CATCH_UP_TIMEOUT {
                            return Err(crate::error::WeirError::new(
                                "58000",
                                format!(
                                    "source \"{source}\" made no progress for {}s while catching up (see weir_sources)",
                                    CATCH_UP_TIMEOUT.as_secs()
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// One row per (source, view): a view that joined its source's shared reader shows
    /// that reader; a view still backfilling shows its backfill reader.
    pub fn progress(&self) -> Vec<SourceProgress> {
        let mut out = Vec::new();
        let handles = self.handles.lock();
        // a backfill reader whose view has just joined shows as the shared reader
        let joined: HashSet<(String, String)> = handles
            .iter()
            .filter_map(|r| r.shared.as_ref())
            .flat_map(|s| {
                s.views
                    .lock()
                    .iter()
                    .map(|v| (s.source_name.clone(), v.1.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for r in handles.iter() {
            if r.shared.is_none()
                && !r.table
                && joined.contains(&(r.source_name.clone(), r.view_name.clone()))
            {
                continue;
            }
            let (views, reader): (Vec<String>, _) = match &r.shared {
                Some(s) => (
                    s.views.lock().iter().map(|v| v.1.clone()).collect(),
                    "shared",
                ),
                // a backfill reader that joined has nothing more to show
                None if *r.progress.status.lock() == JOINED => continue,
                None if r.table => (vec![r.view_name.clone()], "table"),
                None => (vec![r.view_name.clone()], "backfill"),
            };
            let wm = r.progress.watermark.load(Ordering::Acquire);
            for view_name in views {
                out.push(SourceProgress {
                    source_name: r.source_name.clone(),
                    view_name,
                    rows: r.progress.rows.load(Ordering::Acquire),
                    watermark: (wm != i64::MIN).then_some(wm),
                    done: r.progress.done.load(Ordering::Acquire),
                    error: r.progress.error.lock().clone(),
                    status: r.progress.status.lock().clone(),
                    dead_letters: r.progress.dead_letters.load(Ordering::Acquire),
                    partitions: r.progress.partitions.lock().clone(),
                    reader,
                });
            }
        }
        out
    }
}

fn run(
    tx: mpsc::Sender<Msg>,
    spec: RunnerSpec,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    memory: Arc<MemoryBudget>,
) {
    let SourceKind::Generator {
        mut generator,
        rate,
        ..
    } = spec.kind
    else {
        return;
    };
    *progress.status.lock() = "running".into();
    let started = Instant::now();
    // a restored instance continues where its checkpoint stands
    let (start_rows, mut watermark) = match &spec.resume {
        Some(r) => (r.position.first().unwrap_or(0).max(0) as u64, r.watermark),
        None => (0, None),
    };
    if start_rows > 0
        && let Err(e) = generator.seek(start_rows)
    {
        *progress.error.lock() = Some(e.message);
        *progress.status.lock() = "failed".into();
        progress.done.store(true, Ordering::Release);
        return;
    }
    let batch_rows = match rate {
        // about 20 batches a second when paced
        Some(r) => ((r / 20) as usize).clamp(1, MAX_BATCH_ROWS),
        None => MAX_BATCH_ROWS,
    };
    let mut rows: u64 = start_rows;
    progress.rows.store(rows, Ordering::Release);
    let mut batches: u64 = 0;
    let view = (spec.view_oid, spec.view_name.clone());
    // a backfill reader: the handoff's position once the shared reader stopped for it
    let mut handoff_at: Option<u64> = None;
    let mut joined = false;
    let gone = "the dataflow worker has stopped";
    let outcome: Result<(), String> = loop {
        if stop.load(Ordering::Acquire) {
            break Ok(());
        }
        // over --memory-limit: hand nothing more to the views until memory is freed
        if !hold_at_memory_limit(
            &memory,
            &stop,
            &progress,
            &spec.source_name,
            &spec.view_name,
        ) {
            break Ok(());
        }
        let mut limit = batch_rows;
        match &spec.share {
            Share::Reader(shared) => {
                if !shared.serve(&tx, &stop) {
                    break Err(gone.into());
                }
            }
            Share::Backfill(shared) => {
                // never past the shared reader; close to it, ask it to stop and join
                let bound = match handoff_at {
                    Some(at) => at,
                    None => shared.bound().first().unwrap_or(0).max(0) as u64,
                };
                if handoff_at.is_none()
                    && bound.saturating_sub(rows) <= crate::connectors::shared::HANDOFF_LAG as u64
                    && let Handoff::At(p) = shared.handoff(spec.instance, view.clone())
                {
                    handoff_at = Some(p.first().unwrap_or(0).max(0) as u64);
                    continue;
                }
                if rows >= bound {
                    if handoff_at.is_some() {
                        // exactly where the shared reader stands: join it
                        let _ = wait_for_views(&tx);
                        if shared.ready(&tx, spec.instance, view.clone()) {
                            joined = true;
                            break Ok(());
                        }
                        handoff_at = None;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                limit = limit.min((bound - rows) as usize);
            }
        }
        if let (Some(rate), Share::Reader(_)) = (rate, &spec.share) {
            // pace: row n is due n/rate seconds after the start
            let due = Duration::from_secs_f64((rows - start_rows) as f64 / rate.max(1) as f64);
            let now = started.elapsed();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(200)));
                continue;
            }
        }
        let batch = match generator.next_batch(limit) {
            Ok(Some(b)) => b,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.message),
        };
        if batch.num_rows() == 0 {
            break Ok(());
        }
        let before = watermark;
        if let Some(w) = spec.watermark {
            watermark = WatermarkSpec::new(w).after_batch(watermark, &batch);
        }
        let n = batch.num_rows() as u64;
        let position = Position::single((rows + n) as i64);
        if !send_batch(
            &tx,
            spec.instance,
            batch,
            before,
            watermark,
            position.clone(),
        ) {
            break Err(gone.into());
        }
        if let Share::Reader(shared) = &spec.share {
            shared.published(&position);
        }
        rows += n;
        batches += 1;
        progress.rows.store(rows, Ordering::Release);
        if let Some(w) = watermark {
            progress.watermark.store(w, Ordering::Release);
        }
        if batches.is_multiple_of(BATCHES_PER_BARRIER) && !wait_for_views(&tx) {
            break Err("the dataflow worker has stopped".into());
        }
    };
    // the last rows are in the views before the runner says it is done
    let _ = wait_for_views(&tx);
    match &spec.share {
        Share::Reader(shared) => shared.finish(&tx),
        Share::Backfill(shared) => shared.withdraw(spec.instance),
    }
    match outcome {
        Ok(()) => info!(
            source = %spec.source_name,
            view = %spec.view_name,
            rows,
            secs = started.elapsed().as_secs_f64(),
            "source instance finished"
        ),
        Err(e) => {
            error!(source = %spec.source_name, view = %spec.view_name, error = %e, "source failed");
            *progress.error.lock() = Some(e);
        }
    }
    *progress.status.lock() = if progress.error.lock().is_some() {
        "failed".into()
    } else if joined {
        JOINED.into()
    } else {
        "done".into()
    };
    progress.done.store(true, Ordering::Release);
}

/// Every reader, between batches: while the server is over `--memory-limit`, wait (saying
/// so in `weir_sources` and the log), then go on as `running`. False when `stop` was set
/// meanwhile.
pub(crate) fn hold_at_memory_limit(
    memory: &MemoryBudget,
    stop: &AtomicBool,
    progress: &Progress,
    source: &str,
    view: &str,
) -> bool {
    if !memory.must_wait() {
        return true;
    }
    let went_on = memory.wait_blocking(stop, || {
        tracing::warn!(
            source,
            view,
            "source paused: the server is at its --memory-limit"
        );
        *progress.status.lock() = PAUSED_MEMORY.into();
        // the batches this thread built were freed by the dataflow thread: give their
        // pages back now (mimalloc returns them on the owning thread's next collection)
        crate::state::memory::give_back_freed();
    });
    *progress.status.lock() = "running".into();
    went_on
}

/// `weir_sources.status` of a reader paused by `--memory-limit`.
pub const PAUSED_MEMORY: &str = "paused: memory limit";

/// Hand a batch of a source instance to the dataflow, with the watermark before and after
/// it and the instance's position after it. False when the worker is gone.
pub(crate) fn send_batch(
    tx: &mpsc::Sender<Msg>,
    instance: u32,
    batch: datafusion::arrow::record_batch::RecordBatch,
    before: Option<i64>,
    after: Option<i64>,
    position: Position,
) -> bool {
    tx.blocking_send(Msg::Changes {
        relation: instance,
        changelog: Changelog::inserts(batch),
        watermark_before: before,
        watermark_after: after,
        position: Some(position),
        arrived: std::time::Instant::now(),
    })
    .is_ok()
}

/// Send a barrier and wait until the worker has passed it.
pub(crate) fn wait_for_views(tx: &mpsc::Sender<Msg>) -> bool {
    let (btx, brx) = oneshot::channel();
    if tx.blocking_send(Msg::Barrier(btx)).is_err() {
        return false;
    }
    brx.blocking_recv().is_ok()
}
