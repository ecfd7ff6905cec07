//! The dataflow runtime: one worker thread owns every view's graph. Table writes send their
//! changelogs here (in commit order, while the writing statement still holds the table's
//! writer lock); the worker drains whatever is queued, runs one epoch of every affected
//! view (in creation order, so a view over a view sees its input's change of the same
//! epoch), and then publishes all views' new contents at once under one lock. Readers pin
//! the contents of the views a query reads under that same lock, so a query never sees
//! one view at epoch e and another at e+1.
//!
//! `FLUSH` sends a barrier through the same queue: it is answered after the epoch that
//! contains every change sent before it has been published.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};

use crate::dataflow::changelog::Changelog;
use crate::dataflow::graph::{Graph, SourceBatch};
use crate::dataflow::late::LateLog;
use crate::error::{Result, WeirError};
use crate::state::zset::ZSet;

/// Rows per epoch when a new view reads its inputs' existing contents.
const BACKFILL_CHUNK_ROWS: usize = 65_536;
/// Messages drained into one epoch at most (bounds latency under load).
const MAX_MESSAGES_PER_EPOCH: usize = 4096;

/// Contents of views by OID, all at one epoch.
pub type ViewContents = HashMap<u32, Arc<Vec<RecordBatch>>>;

pub enum Msg {
    Changes {
        relation: u32,
        changelog: Changelog,
        /// The relation's event-time watermark when the change arrived, and after it.
        watermark_before: Option<i64>,
        watermark_after: Option<i64>,
    },
    Barrier(oneshot::Sender<u64>),
    Create(Box<CreateView>),
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
    pub tables: Vec<(u32, Arc<Vec<RecordBatch>>)>,
    /// (event-time column, watermark delay) of the tables that declare a watermark: the
    /// backfill replays their batches in arrival order with the watermark each met.
    pub watermark_specs: HashMap<u32, (usize, i64)>,
    /// Relations that start empty (a view's own instances of connector sources: their
    /// rows come later, from the source runners).
    pub fresh: Vec<u32>,
    /// Progress lines for the client, sent while a long backfill runs.
    pub progress: Option<mpsc::UnboundedSender<String>>,
    pub done: oneshot::Sender<Result<()>>,
}

struct ViewData {
    contents: ZSet,
    /// Epoch of the last change, for the snapshot cache.
    changed_at: u64,
    cache: Mutex<Option<(u64, Arc<Vec<RecordBatch>>)>>,
    /// A view whose maintenance failed (e.g. division by zero on a new row) stops and
    /// answers queries with the error.
    failed: Option<String>,
    /// The view's event-time watermark, if its inputs have one.
    watermark: Option<i64>,
}

impl ViewData {
    fn snapshot(&self) -> Result<Arc<Vec<RecordBatch>>> {
        if let Some(e) = &self.failed {
            return Err(WeirError::new("XX000", e.clone()));
        }
        let mut cache = self.cache.lock();
        if let Some((at, b)) = cache.as_ref()
            && *at == self.changed_at
        {
            return Ok(b.clone());
        }
        let b = Arc::new(self.contents.to_batches()?);
        *cache = Some((self.changed_at, b.clone()));
        Ok(b)
    }
}

struct Published {
    epoch: u64,
    views: HashMap<u32, ViewData>,
    /// Change subscriptions (sinks, SUBSCRIBE) by view.
    subscribers: HashMap<u32, Vec<Subscriber>>,
}

struct Subscriber {
    tx: mpsc::UnboundedSender<EpochChanges>,
    /// The last epoch sent.
    sent: Arc<std::sync::atomic::AtomicU64>,
    /// For a bounded subscription: rows sent and not yet taken by the reader, and the most
    /// it may hold before it is cut off.
    backlog: Option<(Arc<Backlog>, usize)>,
}

/// How far a bounded subscription's reader is behind (see [`Dataflow::subscribe_bounded`]).
#[derive(Default)]
pub struct Backlog {
    /// Changed rows sent to the reader and not yet taken.
    pub rows: std::sync::atomic::AtomicUsize,
    /// The reader fell further behind than allowed and was unsubscribed.
    pub overflowed: std::sync::atomic::AtomicBool,
}

/// A view's changes in one epoch, for subscribers.
#[derive(Clone)]
pub struct EpochChanges {
    pub epoch: u64,
    pub changes: Vec<Changelog>,
    /// The view's watermark after the epoch.
    pub watermark: Option<i64>,
}

/// A subscription to a view: its contents at `epoch`, then every later epoch's changes, in
/// order, without gaps. Dropping the receiver ends it.
pub struct Subscription {
    pub epoch: u64,
    pub snapshot: Arc<Vec<RecordBatch>>,
    pub schema: SchemaRef,
    pub changes: mpsc::UnboundedReceiver<EpochChanges>,
    /// The last epoch the dataflow has sent (for waiting until a subscriber caught up).
    pub sent: Arc<std::sync::atomic::AtomicU64>,
}

struct ViewRuntime {
    name: String,
    graph: Graph,
}

/// Per-view numbers for system tables and tests.
#[derive(Debug, Clone)]
pub struct ViewStats {
    pub oid: u32,
    pub rows: usize,
    pub operators: Vec<OperatorState>,
    pub watermark: Option<i64>,
    pub failed: Option<String>,
    /// Live change subscriptions (SUBSCRIBE, cursors, sinks).
    pub subscribers: usize,
}

/// State held by one operator of a view's graph.
#[derive(Debug, Clone)]
pub struct OperatorState {
    pub node: usize,
    pub name: String,
    pub rows: usize,
}

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
}

impl Dataflow {
    pub fn start() -> Arc<Dataflow> {
        let (tx, rx) = mpsc::channel(1024);
        let published = Arc::new(RwLock::new(Published {
            epoch: 0,
            views: HashMap::new(),
            subscribers: HashMap::new(),
        }));
        let stats = Arc::new(Mutex::new(HashMap::new()));
        let worker = Worker {
            rx,
            graphs: BTreeMap::new(),
            published: published.clone(),
            stats: stats.clone(),
            watermarks: HashMap::new(),
            lookups: Default::default(),
        };
        std::thread::Builder::new()
            .name("weir-dataflow".into())
            // evaluating a view's expressions recurses once per level (statements are at
            // most `MAX_STATEMENT_DEPTH` deep)
            .stack_size(crate::limits::THREAD_STACK_BYTES)
            .spawn(move || worker.run())
            .expect("spawn dataflow thread");
        Arc::new(Dataflow {
            tx,
            published,
            observed: RwLock::new(HashMap::new()),
            stats,
            late: Arc::new(LateLog::default()),
            sources: Arc::default(),
            sinks: Arc::default(),
        })
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

    /// Contents of the given views, all at one epoch.
    pub fn snapshot(&self, views: &[u32]) -> Result<(u64, ViewContents)> {
        let p = self.published.read();
        let mut out = HashMap::new();
        for v in views {
            if let Some(d) = p.views.get(v) {
                out.insert(*v, d.snapshot()?);
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
        let snapshot = d.snapshot()?;
        let schema = d.contents.schema().clone();
        let epoch = p.epoch;
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
        })
    }

    /// Register a view that cannot be maintained: queries of it answer `message`.
    pub fn mark_failed(&self, oid: u32, schema: &SchemaRef, message: String) -> Result<()> {
        let mut p = self.published.write();
        let epoch = p.epoch;
        p.views.insert(
            oid,
            ViewData {
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
            })
            .collect()
    }
}

/// An operator bug must not take every view down: the worker catches a panic, reports it
/// as an internal error, and fails only the view it happened in.
fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error in view maintenance: {what}")
}

struct Sink(mpsc::Sender<Msg>);

impl crate::state::table::ChangeSink for Sink {
    fn send(
        &self,
        relation: u32,
        changelog: &Changelog,
        watermark_before: Option<i64>,
        watermark_after: Option<i64>,
    ) {
        // blocking: this is the writer's backpressure when views fall behind
        if self
            .0
            .blocking_send(Msg::Changes {
                relation,
                changelog: changelog.clone(),
                watermark_before,
                watermark_after,
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

struct Worker {
    rx: mpsc::Receiver<Msg>,
    graphs: BTreeMap<u32, ViewRuntime>,
    published: Arc<RwLock<Published>>,
    stats: Arc<Mutex<HashMap<u32, Vec<OperatorState>>>>,
    /// Latest event-time watermark of each relation (tables and views) that has one.
    watermarks: HashMap<u32, i64>,
    /// Relations some view reads as a temporal join's lookup side.
    lookups: std::collections::HashSet<u32>,
}

impl Worker {
    fn run(mut self) {
        while let Some(first) = self.rx.blocking_recv() {
            let mut msgs = vec![first];
            while msgs.len() < MAX_MESSAGES_PER_EPOCH {
                match self.rx.try_recv() {
                    Ok(m) => msgs.push(m),
                    Err(_) => break,
                }
            }
            let mut pending: HashMap<u32, Vec<SourceBatch>> = HashMap::new();
            let mut barriers = Vec::new();
            for m in msgs {
                match m {
                    Msg::Changes {
                        relation,
                        changelog,
                        watermark_before,
                        watermark_after,
                    } => {
                        // a temporal join's table changes take effect between the stream
                        // rows around them: give them an epoch of their own
                        if self.lookups.contains(&relation)
                            || pending.keys().any(|r| self.lookups.contains(r))
                        {
                            self.epoch(std::mem::take(&mut pending));
                        }
                        pending.entry(relation).or_default().push(SourceBatch {
                            changelog,
                            watermark_before,
                        });
                        if let Some(w) = watermark_after {
                            let e = self.watermarks.entry(relation).or_insert(w);
                            *e = (*e).max(w);
                        }
                    }
                    Msg::Barrier(tx) => barriers.push(tx),
                    Msg::Create(c) => {
                        self.epoch(std::mem::take(&mut pending));
                        self.create(*c);
                    }
                    Msg::Drop { oid, done } => {
                        self.epoch(std::mem::take(&mut pending));
                        if let Some(rt) = self.graphs.remove(&oid) {
                            // a view's source instances die with it
                            for s in rt.graph.sources() {
                                if s >= crate::connectors::runner::FIRST_INSTANCE_ID {
                                    self.watermarks.remove(&s);
                                }
                            }
                        }
                        self.refresh_lookups();
                        let mut p = self.published.write();
                        p.views.remove(&oid);
                        // subscribers see their channel close
                        p.subscribers.remove(&oid);
                        drop(p);
                        self.stats.lock().remove(&oid);
                        let _ = done.send(());
                    }
                }
            }
            self.epoch(pending);
            let epoch = self.published.read().epoch;
            for b in barriers {
                let _ = b.send(epoch);
            }
        }
    }

    fn refresh_lookups(&mut self) {
        self.lookups = self
            .graphs
            .values()
            .flat_map(|g| g.graph.lookup_relations())
            .collect();
    }

    /// Run one epoch over the given source changes and publish the views' new contents.
    fn epoch(&mut self, mut inputs: HashMap<u32, Vec<SourceBatch>>) {
        if inputs.is_empty() {
            return;
        }
        let mut deltas: Vec<(u32, Vec<Changelog>)> = Vec::new();
        let mut failures: Vec<(u32, String)> = Vec::new();
        let failed: Vec<u32> = {
            let p = self.published.read();
            p.views
                .iter()
                .filter(|(_, d)| d.failed.is_some())
                .map(|(o, _)| *o)
                .collect()
        };
        for (oid, rt) in self.graphs.iter_mut() {
            if failed.contains(oid) || !rt.graph.sources().iter().any(|s| inputs.contains_key(s)) {
                continue;
            }
            let watermarks = &self.watermarks;
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.graph.run_epoch(&inputs, watermarks)
            }))
            .unwrap_or_else(|p| Err(WeirError::internal(panic_message(&p))));
            match run {
                Ok(out) => {
                    if let Some(w) = out.watermark {
                        self.watermarks.insert(*oid, w);
                    }
                    if !out.changes.is_empty() {
                        inputs.insert(
                            *oid,
                            out.changes
                                .iter()
                                .map(|c| SourceBatch {
                                    changelog: c.clone(),
                                    watermark_before: None,
                                })
                                .collect(),
                        );
                        deltas.push((*oid, out.changes));
                    }
                }
                Err(e) => {
                    error!(view = %rt.name, error = %e, "view maintenance failed; the view stops");
                    failures.push((
                        *oid,
                        format!("materialized view \"{}\" failed: {}", rt.name, e.message),
                    ));
                }
            }
        }
        let mut p = self.published.write();
        p.epoch += 1;
        let epoch = p.epoch;
        for (oid, d) in p.views.iter_mut() {
            if let Some(w) = self.watermarks.get(oid) {
                d.watermark = Some(*w);
            }
        }
        for (oid, delta) in deltas {
            if let Some(d) = p.views.get_mut(&oid) {
                for cl in &delta {
                    if let Err(e) = d.contents.apply(cl) {
                        d.failed = Some(e.message.clone());
                    }
                }
                d.changed_at = epoch;
                let watermark = d.watermark;
                if let Some(subs) = p.subscribers.get_mut(&oid) {
                    let msg = EpochChanges {
                        epoch,
                        changes: delta,
                        watermark,
                    };
                    let rows: usize = msg.changes.iter().map(|c| c.len()).sum();
                    subs.retain(|s| {
                        if let Some((backlog, max)) = &s.backlog {
                            use std::sync::atomic::Ordering::{AcqRel, Release};
                            // a reader that is caught up always gets the next epoch, however
                            // large; one that is behind is cut off past `max`
                            let before = backlog.rows.fetch_add(rows, AcqRel);
                            if before > 0 && before + rows > *max {
                                backlog.overflowed.store(true, Release);
                                return false;
                            }
                        }
                        s.sent.store(epoch, std::sync::atomic::Ordering::Release);
                        s.tx.send(msg.clone()).is_ok()
                    });
                }
            }
        }
        for (oid, msg) in failures {
            if let Some(d) = p.views.get_mut(&oid) {
                d.failed = Some(msg);
                d.changed_at = epoch;
            }
        }
        drop(p);
        let mut stats = self.stats.lock();
        for (oid, rt) in &self.graphs {
            stats.insert(*oid, rt.graph.operator_states());
        }
    }

    fn create(&mut self, c: CreateView) {
        let CreateView {
            oid,
            name,
            mut graph,
            schema,
            tables,
            watermark_specs,
            fresh,
            progress,
            done,
        } = c;
        let mut final_watermarks: HashMap<u32, i64> = HashMap::new();
        let build = || -> Result<ZSet> {
            // inputs as they are now: tables from the snapshots taken with this message (in
            // arrival order, each batch with the watermark it met), views from their
            // published contents
            let mut inputs: Vec<(u32, SourceBatch, Option<i64>)> = Vec::new();
            for (rel, batches) in &tables {
                let mut wm: Option<i64> = None;
                for b in batches.iter() {
                    let before = wm;
                    if let Some((col, delay)) = watermark_specs.get(rel)
                        && let Some(ts) = b
                            .column(*col)
                            .as_any()
                            .downcast_ref::<datafusion::arrow::array::TimestampMicrosecondArray>(
                        )
                        && let Some(m) = datafusion::arrow::compute::max(ts)
                    {
                        wm = Some(wm.map_or(m - delay, |w| w.max(m - delay)));
                    }
                    inputs.push((
                        *rel,
                        SourceBatch {
                            changelog: Changelog::inserts(b.clone()),
                            watermark_before: before,
                        },
                        wm,
                    ));
                }
            }
            {
                let p = self.published.read();
                for rel in graph.sources() {
                    if tables.iter().any(|(t, _)| *t == rel) || fresh.contains(&rel) {
                        continue;
                    }
                    let d = p.views.get(&rel).ok_or_else(|| {
                        WeirError::internal(format!(
                            "relation {rel} of view {name} is not available"
                        ))
                    })?;
                    if let Some(e) = &d.failed {
                        return Err(WeirError::new("XX000", e.clone()));
                    }
                    let wm = self.watermarks.get(&rel).copied();
                    for cl in d.contents.to_changelogs()? {
                        inputs.push((
                            rel,
                            SourceBatch {
                                changelog: cl,
                                watermark_before: None,
                            },
                            wm,
                        ));
                    }
                }
            }
            // a temporal join looks up its table as it is now: feed lookup tables first, in
            // an epoch of their own
            let lookups = graph.lookup_relations();
            inputs.sort_by_key(|(rel, _, _)| !lookups.contains(rel));
            let lookup_rows: usize = inputs
                .iter()
                .filter(|(rel, _, _)| lookups.contains(rel))
                .map(|(_, b, _)| b.changelog.len())
                .sum();
            let total: usize = inputs.iter().map(|(_, b, _)| b.changelog.len()).sum();
            let mut contents = ZSet::new(schema.clone())?;
            let started = Instant::now();
            let mut last_report = started;
            let mut done_rows = 0usize;
            let mut chunk: HashMap<u32, Vec<SourceBatch>> = HashMap::new();
            let mut chunk_rows = 0usize;
            let mut wms: HashMap<u32, i64> = HashMap::new();
            let mut view_watermark = None;
            let mut iter = inputs.into_iter().peekable();
            loop {
                let next = iter.next();
                let at_end = next.is_none();
                if let Some((rel, b, wm_after)) = next {
                    chunk_rows += b.changelog.len();
                    chunk.entry(rel).or_default().push(b);
                    if let Some(w) = wm_after {
                        wms.insert(rel, w);
                    }
                }
                // the first epoch runs even without input: global aggregates and constants
                // emit their initial rows
                let lookups_done = lookup_rows > 0 && done_rows + chunk_rows == lookup_rows;
                if chunk_rows >= BACKFILL_CHUNK_ROWS || at_end || lookups_done {
                    let mut feed = std::mem::take(&mut chunk);
                    for s in graph.sources() {
                        feed.entry(s).or_default();
                    }
                    let out = graph.run_epoch(&feed, &wms)?;
                    for cl in out.changes {
                        contents.apply(&cl)?;
                    }
                    view_watermark = out.watermark;
                    done_rows += chunk_rows;
                    chunk_rows = 0;
                    if let Some(p) = &progress
                        && last_report.elapsed() > Duration::from_secs(1)
                    {
                        last_report = Instant::now();
                        let _ = p.send(format!(
                            "backfilling materialized view \"{name}\": {done_rows} of {total} input rows ({:.0}s)",
                            started.elapsed().as_secs_f64()
                        ));
                    }
                }
                if at_end {
                    break;
                }
            }
            if started.elapsed() > Duration::from_secs(1) {
                info!(view = %name, rows = total, secs = started.elapsed().as_secs_f64(), "backfill done");
            }
            final_watermarks = wms;
            if let Some(w) = view_watermark {
                final_watermarks.insert(oid, w);
            }
            Ok(contents)
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build))
            .unwrap_or_else(|p| Err(WeirError::internal(panic_message(&p))));
        for (rel, w) in final_watermarks {
            let e = self.watermarks.entry(rel).or_insert(w);
            *e = (*e).max(w);
        }
        match result {
            Ok(contents) => {
                let mut p = self.published.write();
                p.epoch += 1;
                let epoch = p.epoch;
                p.views.insert(
                    oid,
                    ViewData {
                        contents,
                        changed_at: epoch,
                        cache: Mutex::new(None),
                        failed: None,
                        watermark: self.watermarks.get(&oid).copied(),
                    },
                );
                drop(p);
                self.stats.lock().insert(oid, graph.operator_states());
                self.graphs.insert(oid, ViewRuntime { name, graph });
                self.refresh_lookups();
                let _ = done.send(Ok(()));
            }
            Err(e) => {
                let _ = done.send(Err(e));
            }
        }
    }
}
