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
use crate::dataflow::graph::Graph;
use crate::error::{Result, WeirError};
use crate::state::zset::ZSet;

/// Rows per epoch when a new view reads its inputs' existing contents.
const BACKFILL_CHUNK_ROWS: usize = 65_536;
/// Messages drained into one epoch at most (bounds latency under load).
const MAX_MESSAGES_PER_EPOCH: usize = 4096;

/// Contents of views by OID, all at one epoch.
pub type ViewContents = HashMap<u32, Arc<Vec<RecordBatch>>>;

pub enum Msg {
    Changes { relation: u32, changelog: Changelog },
    Barrier(oneshot::Sender<u64>),
    Create(Box<CreateView>),
    Drop { oid: u32, done: oneshot::Sender<()> },
}

/// A view to start maintaining, with the contents of the tables it reads taken at the
/// point in the change stream where this message sits.
pub struct CreateView {
    pub oid: u32,
    pub name: String,
    pub graph: Graph,
    pub schema: SchemaRef,
    pub tables: Vec<(u32, Arc<Vec<RecordBatch>>)>,
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
    pub state_rows: usize,
    pub failed: Option<String>,
}

pub struct Dataflow {
    tx: mpsc::Sender<Msg>,
    published: Arc<RwLock<Published>>,
    /// Relations read by some view (their writes must be sent here), with how many views.
    observed: RwLock<HashMap<u32, usize>>,
    stats: Arc<Mutex<HashMap<u32, usize>>>,
}

impl Dataflow {
    pub fn start() -> Arc<Dataflow> {
        let (tx, rx) = mpsc::channel(1024);
        let published = Arc::new(RwLock::new(Published {
            epoch: 0,
            views: HashMap::new(),
        }));
        let stats = Arc::new(Mutex::new(HashMap::new()));
        let worker = Worker {
            rx,
            graphs: BTreeMap::new(),
            published: published.clone(),
            stats: stats.clone(),
        };
        std::thread::Builder::new()
            .name("weir-dataflow".into())
            .spawn(move || worker.run())
            .expect("spawn dataflow thread");
        Arc::new(Dataflow {
            tx,
            published,
            observed: RwLock::new(HashMap::new()),
            stats,
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
                state_rows: state.get(oid).copied().unwrap_or(0),
                failed: d.failed.clone(),
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
    fn send(&self, relation: u32, changelog: &Changelog) {
        // blocking: this is the writer's backpressure when views fall behind
        if self
            .0
            .blocking_send(Msg::Changes {
                relation,
                changelog: changelog.clone(),
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
    stats: Arc<Mutex<HashMap<u32, usize>>>,
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
            let mut pending: HashMap<u32, Vec<Changelog>> = HashMap::new();
            let mut barriers = Vec::new();
            for m in msgs {
                match m {
                    Msg::Changes {
                        relation,
                        changelog,
                    } => pending.entry(relation).or_default().push(changelog),
                    Msg::Barrier(tx) => barriers.push(tx),
                    Msg::Create(c) => {
                        self.epoch(std::mem::take(&mut pending));
                        self.create(*c);
                    }
                    Msg::Drop { oid, done } => {
                        self.epoch(std::mem::take(&mut pending));
                        self.graphs.remove(&oid);
                        self.published.write().views.remove(&oid);
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

    /// Run one epoch over the given source changes and publish the views' new contents.
    fn epoch(&mut self, mut inputs: HashMap<u32, Vec<Changelog>>) {
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
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.graph.run_epoch(&inputs)
            }))
            .unwrap_or_else(|p| Err(WeirError::internal(panic_message(&p))));
            match run {
                Ok(out) => {
                    if !out.is_empty() {
                        inputs.insert(*oid, out.clone());
                        deltas.push((*oid, out));
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
        for (oid, delta) in deltas {
            if let Some(d) = p.views.get_mut(&oid) {
                for cl in &delta {
                    if let Err(e) = d.contents.apply(cl) {
                        d.failed = Some(e.message.clone());
                    }
                }
                d.changed_at = epoch;
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
            stats.insert(*oid, rt.graph.state_rows());
        }
    }

    fn create(&mut self, c: CreateView) {
        let CreateView {
            oid,
            name,
            mut graph,
            schema,
            tables,
            progress,
            done,
        } = c;
        let build = || -> Result<ZSet> {
            // inputs as they are now: tables from the snapshots taken with this message,
            // views from their published contents
            let mut inputs: Vec<(u32, Changelog)> = Vec::new();
            for (rel, batches) in &tables {
                for b in batches.iter() {
                    inputs.push((*rel, Changelog::inserts(b.clone())));
                }
            }
            {
                let p = self.published.read();
                for rel in graph.sources() {
                    if tables.iter().any(|(t, _)| *t == rel) {
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
                    for cl in d.contents.to_changelogs()? {
                        inputs.push((rel, cl));
                    }
                }
            }
            let total: usize = inputs.iter().map(|(_, c)| c.len()).sum();
            let mut contents = ZSet::new(schema.clone())?;
            let started = Instant::now();
            let mut last_report = started;
            let mut done_rows = 0usize;
            // one epoch with no input first: global aggregates emit their initial row
            let mut chunk: HashMap<u32, Vec<Changelog>> = HashMap::new();
            let mut chunk_rows = 0usize;
            let mut iter = inputs.into_iter().peekable();
            loop {
                let next = iter.next();
                let at_end = next.is_none();
                if let Some((rel, cl)) = next {
                    chunk_rows += cl.len();
                    chunk.entry(rel).or_default().push(cl);
                }
                if chunk_rows >= BACKFILL_CHUNK_ROWS || at_end {
                    // an empty map still runs every operator's epoch end
                    let mut feed = std::mem::take(&mut chunk);
                    for s in graph.sources() {
                        feed.entry(s).or_default();
                    }
                    for cl in graph.run_epoch(&feed)? {
                        contents.apply(&cl)?;
                    }
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
            Ok(contents)
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build))
            .unwrap_or_else(|p| Err(WeirError::internal(panic_message(&p))));
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
                    },
                );
                drop(p);
                self.stats.lock().insert(oid, graph.state_rows());
                self.graphs.insert(oid, ViewRuntime { name, graph });
                let _ = done.send(Ok(()));
            }
            Err(e) => {
                let _ = done.send(Err(e));
            }
        }
    }
}
