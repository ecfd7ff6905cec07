//! The dataflow runtime's handle: what the rest of the server talks to. One worker thread
//! (`worker.rs`) owns every view's graph. Table writes send their changelogs here (in commit
//! order, while the writing statement still holds the table's writer lock); the worker
//! drains whatever is queued, runs one epoch of every affected view (in creation order, so a
//! view over a view sees its input's change of the same epoch), and then publishes all
//! views' new contents at once under one lock (`publication.rs`). Readers pin the contents
//! of the views a query reads under that same lock, so a query never sees one view at epoch
//! e and another at e+1. A new view first reads its inputs' existing contents
//! (`backfill.rs`); per-view numbers are in `stats.rs`.
//!
//! `FLUSH` sends a barrier through the same queue: it is answered after the epoch that
//! contains every change sent before it has been published.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
use tracing::error;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::checkpoint::{CheckpointLog, Writer};
use crate::dataflow::graph::Graph;
use crate::dataflow::late::LateLog;
use crate::dataflow::position::Position;
use crate::dataflow::publication::{Published, Subscriber, ViewData};
use crate::dataflow::worker::Worker;
use crate::error::{Result, WeirError};
use crate::state::store::Store;
use crate::state::zset::ZSet;

pub use crate::dataflow::publication::{Backlog, EpochChanges, Subscription};
pub use crate::dataflow::stats::{OperatorState, ViewStats};

/// Contents of views by OID, all at one epoch.
pub type ViewContents = HashMap<u32, Arc<crate::state::zset::ZSetRead>>;

pub enum Msg {
    Changes {
        relation: u32,
        changelog: Changelog,
        /// The relation's event-time watermark when the change arrived, and after it.
        watermark_before: Option<i64>,
        watermark_after: Option<i64>,
        /// Where the relation's input stands after this change (see `position.rs`).
        position: Option<Position>,
        /// When the change arrived (before any wait for room in the queue): the start of
        /// `weir_view_epoch_latency_seconds`.
        arrived: std::time::Instant,
    },
    Barrier(oneshot::Sender<u64>),
    /// The process is over `--memory-limit`: spill state (sent by the memory sampler;
    /// the worker spills at the end of every round of messages anyway).
    Relieve,
    /// Cut a checkpoint at the next epoch boundary: from the interval timer (None; skipped
    /// when nothing changed or one is still being written) or from `CHECKPOINT` (answered
    /// once it is durable, with its epoch).
    Checkpoint(Option<oneshot::Sender<Result<u64>>>),
    Create(Box<CreateView>),
    /// A view's source instance joins the source's shared reader (`connectors/shared.rs`):
    /// every later batch of `shared` goes to `instance` too, which now stands where the
    /// shared reader stands (`position`).
    Join {
        shared: u32,
        /// The source's OID.
        source: u32,
        instance: u32,
        position: Position,
    },
    /// A source's shared reader is about to start, at `position` (restored from a
    /// checkpoint, or empty) with `watermark`: checkpoints record where it stands.
    Share {
        shared: u32,
        source: u32,
        position: Position,
        watermark: Option<i64>,
    },
    /// A source's shared reader stopped (no view reads the source any more).
    Unshare {
        shared: u32,
    },
    Drop {
        oid: u32,
        done: oneshot::Sender<()>,
    },
}

/// A view to start maintaining, with the contents of the tables it reads taken at the
/// point in the change stream where this message sits.
pub struct CreateView {
    pub oid: u32,
    pub name: String,
    pub graph: Graph,
    pub schema: SchemaRef,
    /// Consistent reads of the tables it reads, streamed into it by the backfill.
    pub tables: Vec<(u32, crate::state::table::TableScan)>,
    /// (event-time column, watermark delay) of the tables that declare a watermark: the
    /// backfill replays their batches in arrival order with the watermark each met.
    pub watermark_specs: HashMap<u32, (usize, i64)>,
    /// Relations that start empty (a view's own instances of connector sources: their
    /// rows come later, from the source runners).
    pub fresh: Vec<u32>,
    /// Progress lines for the client, sent while a long backfill runs.
    pub progress: Option<mpsc::UnboundedSender<String>>,
    /// What a checkpoint of this view must match (see `checkpoint::fingerprint`).
    pub fingerprint: String,
    /// The graph's input relations with the catalog OIDs they stand for (a connector
    /// source's private instance id maps to the source).
    pub inputs: Vec<(u32, u32)>,
    /// Positions of inputs as of this message: tables' log sequence at the snapshot (or,
    /// restored, at the checkpoint).
    pub positions: Vec<(u32, Position)>,
    /// (shared reader's relation, source OID, the view's instance): instances that read
    /// their source's shared reader from this message on, standing where it stands.
    pub joins: Vec<(u32, u32, u32)>,
    /// Restore the view from this checkpoint instead of backfilling it.
    pub restore: Option<Box<RestoreFrom>>,
    /// Answered with the bytes of state read (restored) or 0 (backfilled).
    pub done: oneshot::Sender<Result<u64>>,
}

/// A view's checkpoint, with its inputs' watermarks under the relation ids its graph
/// reads now.
pub struct RestoreFrom {
    pub epoch: u64,
    pub view: crate::dataflow::checkpoint::ViewCheckpoint,
    pub watermarks: Vec<(u32, i64)>,
    /// Where epochs of this view must end while its inputs catch up (sinks' progress).
    pub cuts: Vec<EpochCut>,
}

/// A point in a restored view's inputs (graph relation, position) where an epoch must end:
/// a sink's last committed progress. Its inputs are re-read after the checkpoint in the
/// batches they had (see `journal.rs`), so the view passes exactly that point again; an
/// epoch ending there gives the sink the view as its topic has it, without reading the
/// topic back. The outcome: the epoch that ended there, or None when the inputs went past
/// it without meeting it (several inputs interleaved otherwise, a source that changed).
pub struct EpochCut {
    /// The view (catalog OID).
    pub view: u32,
    pub at: Vec<(u32, crate::dataflow::position::Position)>,
    pub outcome: CutOutcome,
}

/// Unknown yet (None), met at an epoch (Some(Some(epoch))), or gone past (Some(None)).
pub type CutOutcome = Arc<Mutex<Option<Option<u64>>>>;

/// Per running sink (OID): the last published epoch through which its topic holds all of
/// its view's changes. A checkpoint records which sinks were caught up with it: their
/// topic equals the view as checkpointed, so after a restart they resume at the restored
/// state without reading the topic back, even when their view had no changes to write
/// (and so no newer progress in the topic) since.
pub type SinksCaughtUp = Arc<Mutex<HashMap<u32, u64>>>;

pub struct Dataflow {
    tx: mpsc::Sender<Msg>,
    published: Arc<RwLock<Published>>,
    /// Relations read by some view (their writes must be sent here), with how many views.
    observed: RwLock<HashMap<u32, usize>>,
    stats: Arc<Mutex<HashMap<u32, Vec<OperatorState>>>>,
    pub late: Arc<LateLog>,
    /// Running source instances (generators feeding views).
    pub sources: Arc<crate::connectors::runner::Runners>,
    /// Running sinks (subscribers writing views' changes out).
    pub sinks: Arc<crate::connectors::kafka_sink::Sinks>,
    /// `--checkpoint-interval` (None: checkpoints are off).
    pub checkpoint_interval: Option<Duration>,
    /// Checkpoints written and how views came back at start (system tables).
    pub checkpoints: Arc<CheckpointLog>,
    /// Views are still being restored: the timer cuts no checkpoint (it would hold only
    /// the views back so far, and the others would have to be rebuilt after a crash).
    recovering: Arc<AtomicBool>,
    /// See [`SinksCaughtUp`].
    pub sinks_caught_up: SinksCaughtUp,
}

impl Dataflow {
    /// A dataflow without checkpoints.
    pub fn start() -> Arc<Dataflow> {
        Self::start_with(None, crate::state::memory::MemoryBudget::unlimited())
    }

    /// A dataflow that checkpoints into `store` every `interval`, its sources pausing
    /// while the process is over `memory`'s limit.
    pub fn start_with(
        checkpoints: Option<(Arc<dyn Store>, Duration)>,
        memory: Arc<crate::state::memory::MemoryBudget>,
    ) -> Arc<Dataflow> {
        let (tx, rx) = mpsc::channel(1024);
        let log = Arc::new(CheckpointLog::default());
        let recovering = Arc::new(AtomicBool::new(true));
        let published = Arc::new(RwLock::new(Published {
            epoch: 0,
            views: HashMap::new(),
            positions: HashMap::new(),
            subscribers: HashMap::new(),
            index_specs: HashMap::new(),
        }));
        let stats = Arc::new(Mutex::new(HashMap::new()));
        let sinks_caught_up: SinksCaughtUp = Arc::default();
        let worker = Worker {
            oldest_arrival: None,
            rx,
            graphs: BTreeMap::new(),
            published: published.clone(),
            stats: stats.clone(),
            watermarks: HashMap::new(),
            lookups: Default::default(),
            positions: HashMap::new(),
            views: HashMap::new(),
            writer: checkpoints
                .as_ref()
                .map(|(store, _)| Writer::start(store.clone(), log.clone())),
            changed: false,
            clear: Vec::new(),
            recovering: recovering.clone(),
            force_full: false,
            cuts: Vec::new(),
            sinks_caught_up: sinks_caught_up.clone(),
            last_caught_up: Vec::new(),
            fanout: HashMap::new(),
            memory: memory.clone(),
            last_memory_spill: std::time::Instant::now(),
            told_spilling: false,
            state_budget: u64::MAX,
        };
        std::thread::Builder::new()
            .name("weir-dataflow".into())
            // evaluating a view's expressions recurses once per level (statements are at
            // most `MAX_STATEMENT_DEPTH` deep)
            .stack_size(crate::limits::THREAD_STACK_BYTES)
            .spawn(move || worker.run())
            .expect("spawn dataflow thread");
        {
            // while over --memory-limit, the worker spills state even when paused sources
            // send it nothing
            let wake = tx.clone();
            memory.while_over(Box::new(move || {
                let _ = wake.try_send(Msg::Relieve);
            }));
        }
        let interval = checkpoints.map(|(_, i)| i);
        if let Some(every) = interval {
            // the interval timer: a tick the worker takes at its next epoch boundary
            let tick = tx.clone();
            let _ = std::thread::Builder::new()
                .name("weir-checkpoint-timer".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(every);
                        match tick.try_send(Msg::Checkpoint(None)) {
                            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                            Err(mpsc::error::TrySendError::Closed(_)) => break,
                        }
                    }
                });
        }
        Arc::new(Dataflow {
            tx,
            published,
            observed: RwLock::new(HashMap::new()),
            stats,
            late: Arc::new(LateLog::default()),
            sources: Arc::new(crate::connectors::runner::Runners::with_memory(memory)),
            sinks: Arc::default(),
            checkpoint_interval: interval,
            checkpoints: log,
            recovering,
            sinks_caught_up,
        })
    }

    /// Every view is back after a start: checkpoints may begin.
    pub fn recovered(&self) {
        self.recovering.store(false, Ordering::Release);
    }

    /// `CHECKPOINT`: cut one now and wait until it is durable; returns its epoch.
    pub async fn checkpoint(&self) -> Result<u64> {
        if self.checkpoint_interval.is_none() {
            return Err(WeirError::new(
                "55000",
                "checkpoints are off (the server runs with --checkpoint-interval 0)",
            ));
        }
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Checkpoint(Some(tx))).await?;
        rx.await
            .map_err(|_| WeirError::internal("the dataflow worker has stopped"))?
    }

    pub fn observes(&self, relation: u32) -> bool {
        self.observed.read().contains_key(&relation)
    }

    pub fn observe(&self, relations: &[u32]) {
        let mut o = self.observed.write();
        for r in relations {
            *o.entry(*r).or_default() += 1;
        }
    }

    pub fn unobserve(&self, relations: &[u32]) {
        let mut o = self.observed.write();
        for r in relations {
            if let Some(c) = o.get_mut(r) {
                *c -= 1;
                if *c == 0 {
                    o.remove(r);
                }
            }
        }
    }

    /// A sink that forwards a table's changes to the worker (see `TableStore::set_sink`).
    pub fn sink(self: &Arc<Self>) -> Arc<dyn crate::state::table::ChangeSink> {
        Arc::new(Sink(self.tx.clone()))
    }

    /// A sender into the worker's queue (source runners use it from their own threads).
    pub fn sender(&self) -> mpsc::Sender<Msg> {
        self.tx.clone()
    }

    pub async fn send(&self, msg: Msg) -> Result<()> {
        self.tx
            .send(msg)
            .await
            .map_err(|_| WeirError::internal("the dataflow worker has stopped"))
    }

    /// Wait until every change sent before this call is in every view; returns the epoch.
    pub async fn flush(&self) -> Result<u64> {
        let (tx, rx) = oneshot::channel();
        self.send(Msg::Barrier(tx)).await?;
        rx.await
            .map_err(|_| WeirError::internal("the dataflow worker has stopped"))
    }

    /// Keep these secondary indexes of a view's contents (`CREATE INDEX` on a materialized
    /// view): built now if the view runs, else when it starts; an empty list drops them.
    pub fn set_view_indexes(
        &self,
        view: u32,
        specs: Vec<crate::state::table_index::IndexSpec>,
    ) -> Result<()> {
        let mut p = self.published.write();
        if specs.is_empty() {
            p.index_specs.remove(&view);
        } else {
            p.index_specs.insert(view, specs);
        }
        p.reconcile_indexes(view)
    }

    /// The rows of a view an index finds (see [`crate::state::zset::ZSet::index_lookup`]),
    /// as of now; None when the view or the index is not there (yet).
    pub fn view_index_lookup(
        &self,
        view: u32,
        index: u32,
        probe: &[datafusion::arrow::array::ArrayRef],
    ) -> Result<Option<RecordBatch>> {
        let p = self.published.read();
        let Some(d) = p.views.get(&view) else {
            return Ok(None);
        };
        if let Some(e) = &d.failed {
            return Err(WeirError::new("XX000", e.clone()));
        }
        d.contents.index_lookup(index, probe)
    }

    /// Contents of the given views, all at one epoch.
    pub fn snapshot(&self, views: &[u32]) -> Result<(u64, ViewContents)> {
        let p = self.published.read();
        let mut out = HashMap::new();
        for v in views {
            if let Some(d) = p.views.get(v) {
                out.insert(*v, d.read()?);
            }
        }
        Ok((p.epoch, out))
    }

    /// Subscribe to a view's changes (see [`Subscription`]). The channel is unbounded: a
    /// subscriber that stops reading holds the changes in memory until it drops.
    pub fn subscribe(&self, view: u32) -> Result<Subscription> {
        self.subscribe_with(view, None)
    }

    /// A subscription whose reader may fall at most `max_rows` changed rows behind: past
    /// that, the dataflow drops it (the channel closes and `backlog.overflowed` is set)
    /// instead of holding changes for it without bound. For clients (SUBSCRIBE), which
    /// may stop reading; sinks keep the unbounded kind.
    pub fn subscribe_bounded(
        &self,
        view: u32,
        max_rows: usize,
    ) -> Result<(Subscription, Arc<Backlog>)> {
        let backlog = Arc::new(Backlog::default());
        let sub = self.subscribe_with(view, Some((backlog.clone(), max_rows)))?;
        Ok((sub, backlog))
    }

    fn subscribe_with(
        &self,
        view: u32,
        backlog: Option<(Arc<Backlog>, usize)>,
    ) -> Result<Subscription> {
        let mut p = self.published.write();
        let d = p
            .views
            .get(&view)
            .ok_or_else(|| WeirError::internal(format!("view {view} is not maintained")))?;
        let snapshot = d.read()?;
        let schema = d.contents.schema().clone();
        let epoch = p.epoch;
        let positions = p.positions.get(&view).cloned().unwrap_or_default();
        let (tx, rx) = mpsc::unbounded_channel();
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(epoch));
        p.subscribers.entry(view).or_default().push(Subscriber {
            tx,
            sent: sent.clone(),
            backlog,
        });
        Ok(Subscription {
            epoch,
            snapshot,
            schema,
            changes: rx,
            sent,
            positions,
        })
    }

    /// Register a view that cannot be maintained: queries of it answer `message`.
    pub fn mark_failed(
        &self,
        oid: u32,
        name: &str,
        schema: &SchemaRef,
        message: String,
    ) -> Result<()> {
        let mut p = self.published.write();
        let epoch = p.epoch;
        p.views.insert(
            oid,
            ViewData {
                name: name.to_owned(),
                contents: ZSet::new(schema.clone())?,
                changed_at: epoch,
                cache: Mutex::new(None),
                failed: Some(message),
                watermark: None,
            },
        );
        Ok(())
    }

    pub fn epoch(&self) -> u64 {
        self.published.read().epoch
    }

    /// A view's input positions at the latest published epoch.
    pub fn view_positions(
        &self,
        view: u32,
    ) -> Option<crate::dataflow::publication::InputPositions> {
        self.published.read().positions.get(&view).cloned()
    }

    /// Drop every view's cached snapshot (rebuilt by the next read); the bytes they held.
    pub fn drop_caches(&self) -> usize {
        let p = self.published.read();
        p.views
            .values()
            .filter_map(|d| d.cache.lock().take())
            .map(|(_, b)| b.iter().map(|b| b.get_array_memory_size()).sum::<usize>())
            .sum()
    }

    pub fn stats(&self) -> Vec<ViewStats> {
        let p = self.published.read();
        let state = self.stats.lock();
        p.views
            .iter()
            .map(|(oid, d)| ViewStats {
                oid: *oid,
                rows: d.contents.len(),
                operators: state.get(oid).cloned().unwrap_or_default(),
                watermark: d.watermark,
                failed: d.failed.clone(),
                subscribers: p
                    .subscribers
                    .get(oid)
                    .map(|v| v.iter().filter(|s| !s.tx.is_closed()).count())
                    .unwrap_or(0),
                contents_bytes: d.contents.bytes(),
                contents_spilled: d.contents.spilled_bytes(),
            })
            .collect()
    }
}

struct Sink(mpsc::Sender<Msg>);

impl crate::state::table::ChangeSink for Sink {
    fn send(
        &self,
        relation: u32,
        changelog: &Changelog,
        watermark_before: Option<i64>,
        watermark_after: Option<i64>,
        seq: u64,
    ) {
        // blocking: this is the writer's backpressure when views fall behind
        if self
            .0
            .blocking_send(Msg::Changes {
                relation,
                changelog: changelog.clone(),
                watermark_before,
                watermark_after,
                position: Some(Position::single(seq as i64)),
                arrived: std::time::Instant::now(),
            })
            .is_err()
        {
            error!(
                relation,
                "the dataflow worker has stopped; a change was not delivered"
            );
        }
    }
}
