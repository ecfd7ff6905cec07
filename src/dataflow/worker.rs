//! The dataflow worker: one thread that owns every view's graph. It drains the queue,
//! cuts it into epochs (a temporal join's lookup-table changes get epochs of their own),
//! runs each affected view's graph once per epoch in creation order, and publishes the
//! results (`publication.rs`). A panic in one view's operators fails that view only.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;
use tracing::error;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::checkpoint::{
    InputCheckpoint, Job, Manifest, SourceCheckpoint, ViewCheckpoint, Writer,
};
use crate::dataflow::graph::{Graph, SourceBatch};
use crate::dataflow::position::Position;
use crate::dataflow::publication::Published;
use crate::dataflow::runtime::Msg;
use crate::dataflow::stats::OperatorState;
use crate::error::{Result, WeirError};
use crate::state::store::WriteBatch;

/// Messages drained into one epoch at most (bounds latency under load).
const MAX_MESSAGES_PER_EPOCH: usize = 4096;
/// Input rows drained into one epoch at most (a message is never split, so an epoch holds
/// at least one): the graph runs an epoch one operator at a time over all of its input, so
/// what an epoch holds in flight — every stage's output, a HOP's rows once per window —
/// grows with it. A backlog (a COPY the views trail) is taken in epochs of about this
/// size instead of at once (issue 18: HOP over 10M rows peaked at 3.1 GiB that way).
const MAX_ROWS_PER_EPOCH: usize = 1 << 18;
/// Over `--memory-limit`, state spills a quarter at most this often.
const MEMORY_SPILL_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

pub(crate) struct ViewRuntime {
    pub(crate) name: String,
    pub(crate) graph: Graph,
}

/// What the worker keeps about a view for its checkpoints.
pub(crate) struct ViewInputs {
    pub(crate) fingerprint: String,
    /// (relation id the graph reads, catalog OID it stands for).
    pub(crate) inputs: Vec<(u32, u32)>,
}

pub(crate) struct Worker {
    /// When the oldest change not yet published arrived (`weir_view_epoch_latency_seconds`).
    pub(crate) oldest_arrival: Option<std::time::Instant>,
    pub(crate) rx: mpsc::Receiver<Msg>,
    pub(crate) graphs: BTreeMap<u32, ViewRuntime>,
    pub(crate) published: Arc<RwLock<Published>>,
    pub(crate) stats: Arc<Mutex<HashMap<u32, Vec<OperatorState>>>>,
    /// Latest event-time watermark of each relation (tables and views) that has one.
    pub(crate) watermarks: HashMap<u32, i64>,
    /// Relations some view reads as a temporal join's lookup side.
    pub(crate) lookups: std::collections::HashSet<u32>,
    /// Where each input relation stands after the last change the worker took from it.
    pub(crate) positions: HashMap<u32, Position>,
    pub(crate) views: HashMap<u32, ViewInputs>,
    /// The checkpoint writer (None: checkpoints are off).
    pub(crate) writer: Option<Writer>,
    /// An epoch ran since the last checkpoint.
    pub(crate) changed: bool,
    /// Store prefixes to clear with the next checkpoint (dropped or rebuilt views).
    pub(crate) clear: Vec<Vec<u8>>,
    /// Views are still being restored at start (no timer checkpoints yet).
    pub(crate) recovering: Arc<std::sync::atomic::AtomicBool>,
    /// Cutting a checkpoint failed after some state tables were flushed: the next one
    /// must write all state.
    pub(crate) force_full: bool,
    /// Epoch cuts of restored views not met yet (see `runtime::EpochCut`).
    pub(crate) cuts: Vec<crate::dataflow::runtime::EpochCut>,
    pub(crate) sinks_caught_up: crate::dataflow::runtime::SinksCaughtUp,
    /// The sinks the last checkpoint recorded as caught up with it.
    pub(crate) last_caught_up: Vec<u32>,
    /// Each source's shared reader (by the relation id it sends under): the source's OID
    /// and the views' instances its batches go to (`connectors/shared.rs`).
    pub(crate) fanout: HashMap<u32, Fanout>,
    /// `--memory-limit`: over it, state spills faster (see `keep_state_in_budget`).
    pub(crate) memory: Arc<crate::state::memory::MemoryBudget>,
    /// When state was last spilled because the process was over its memory limit.
    pub(crate) last_memory_spill: std::time::Instant,
    /// Whether the log said that state spills.
    pub(crate) told_spilling: bool,
    /// The state tables' budget now: the state-cache budget, lowered to what state was
    /// spilled down to while the process was over its memory limit (so it does not grow
    /// straight back into the limit), and raised again by 1% per round under it.
    pub(crate) state_budget: u64,
}

pub(crate) struct Fanout {
    pub(crate) source: u32,
    pub(crate) instances: Vec<u32>,
}

impl Worker {
    pub(crate) fn run(mut self) {
        while let Some(first) = self.rx.blocking_recv() {
            let rows_of = |m: &Msg| match m {
                Msg::Changes { changelog, .. } => changelog.len(),
                _ => 0,
            };
            let mut rows = rows_of(&first);
            let mut msgs = vec![first];
            while msgs.len() < MAX_MESSAGES_PER_EPOCH && rows < MAX_ROWS_PER_EPOCH {
                match self.rx.try_recv() {
                    Ok(m) => {
                        rows += rows_of(&m);
                        msgs.push(m);
                    }
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
                        position,
                        arrived,
                    } => {
                        self.oldest_arrival =
                            Some(self.oldest_arrival.map_or(arrived, |t| t.min(arrived)));
                        match self
                            .fanout
                            .get_mut(&relation)
                            .map(|f| std::mem::take(&mut f.instances))
                        {
                            // a shared reader's batch: to every view's instance that joined it
                            // (the list is taken out meanwhile: no copy of it per batch)
                            Some(targets) => {
                                self.advance(relation, watermark_after, position.as_ref());
                                for t in &targets {
                                    self.take(
                                        *t,
                                        changelog.clone(),
                                        watermark_before,
                                        watermark_after,
                                        position.as_ref(),
                                        &mut pending,
                                    );
                                }
                                if let Some(f) = self.fanout.get_mut(&relation) {
                                    f.instances = targets;
                                }
                            }
                            None => self.take(
                                relation,
                                changelog,
                                watermark_before,
                                watermark_after,
                                position.as_ref(),
                                &mut pending,
                            ),
                        }
                    }
                    Msg::Share {
                        shared,
                        source,
                        position,
                        watermark,
                    } => {
                        self.fanout.entry(shared).or_insert_with(|| Fanout {
                            source,
                            instances: Vec::new(),
                        });
                        self.positions.entry(shared).or_insert(position);
                        if let Some(w) = watermark {
                            self.watermarks.entry(shared).or_insert(w);
                        }
                    }
                    Msg::Join {
                        shared,
                        source,
                        instance,
                        position,
                    } => self.join(shared, source, instance, Some(position)),
                    Msg::Unshare { shared } => {
                        if let Some(f) = self.fanout.remove(&shared) {
                            self.positions.remove(&shared);
                            self.watermarks.remove(&shared);
                            if self.writer.is_some() {
                                self.clear
                                    .push(crate::dataflow::journal::prefix(0, f.source));
                            }
                        }
                    }
                    Msg::Barrier(tx) => barriers.push(tx),
                    Msg::Relieve => {}
                    Msg::Checkpoint(reply) => {
                        self.epoch(std::mem::take(&mut pending));
                        self.checkpoint(reply);
                    }
                    Msg::Create(c) => {
                        self.epoch(std::mem::take(&mut pending));
                        self.create(*c);
                    }
                    Msg::Drop { oid, done } => {
                        self.epoch(std::mem::take(&mut pending));
                        if let Some(rt) = self.graphs.remove(&oid) {
                            // its epoch cuts will not be met
                            self.cuts.retain(|c| {
                                if c.view == oid {
                                    *c.outcome.lock() = Some(None);
                                }
                                c.view != oid
                            });
                            // a view's source instances die with it
                            for s in rt.graph.sources() {
                                if s >= crate::connectors::runner::FIRST_INSTANCE_ID {
                                    self.watermarks.remove(&s);
                                    self.positions.remove(&s);
                                    for f in self.fanout.values_mut() {
                                        f.instances.retain(|i| *i != s);
                                    }
                                }
                            }
                        }
                        self.views.remove(&oid);
                        if self.writer.is_some() {
                            self.clear
                                .push(crate::dataflow::checkpoint::graph_prefix(oid));
                            self.clear
                                .push(crate::dataflow::checkpoint::contents_prefix(oid));
                            self.clear.push(crate::dataflow::journal::view_prefix(oid));
                        }
                        let read: std::collections::HashSet<u32> = self
                            .graphs
                            .values()
                            .flat_map(|g| g.graph.sources())
                            .collect();
                        let fanout = &self.fanout;
                        self.positions
                            .retain(|r, _| read.contains(r) || fanout.contains_key(r));
                        self.refresh_lookups();
                        let mut p = self.published.write();
                        p.views.remove(&oid);
                        // subscribers see their channel close
                        p.subscribers.remove(&oid);
                        drop(p);
                        self.stats.lock().remove(&oid);
                        // the view's state was freed on this thread: give it back now, so a
                        // DROP at --memory-limit lets paused sources and writers go on
                        crate::state::memory::give_back_freed();
                        let _ = done.send(());
                    }
                }
            }
            self.epoch(pending);
            // changes no view reads published nothing: they do not wait for a later epoch
            self.oldest_arrival = None;
            let epoch = self.published.read().epoch;
            for b in barriers {
                let _ = b.send(epoch);
            }
            self.keep_state_in_budget();
        }
    }

    /// Keep the views' state tables within the state-cache budget
    /// (`--state-cache-size`): once their footprint is over it, every table gives up the
    /// same share of its footprint (its coldest entries go to the spill store) until they
    /// are at 90% of it. While the process is over `--memory-limit`, a quarter of what is
    /// left in memory goes every [`MEMORY_SPILL_EVERY`] (the sampler needs that long to
    /// see the effect). Nothing without a spill store (no limit, embedded engines).
    fn keep_state_in_budget(&mut self) {
        if crate::state::spill::store().is_none() {
            return;
        }
        let configured = crate::state::spill::cache_budget();
        let over_memory = self.memory.over_limit();
        if configured == u64::MAX && !over_memory {
            return;
        }
        if !over_memory && self.state_budget < configured {
            self.state_budget = (self.state_budget + configured / 100).min(configured);
        }
        let budget = self.state_budget.min(configured);
        let contents: usize = self
            .published
            .read()
            .views
            .values()
            .map(|d| d.contents.footprint())
            .sum();
        let total: usize = contents
            + self
                .graphs
                .values_mut()
                .map(|rt| rt.graph.state_footprint())
                .sum::<usize>();
        let mut goal = if total as u64 > budget {
            (budget as f64 * 0.9) as usize
        } else {
            total
        };
        if over_memory && self.last_memory_spill.elapsed() >= MEMORY_SPILL_EVERY {
            self.last_memory_spill = std::time::Instant::now();
            goal = goal.min(total / 4 * 3);
            self.state_budget = goal as u64;
        }
        // nothing (left) to spill: writers need not wait for memory nothing will free.
        // Over the limit by what views hold and cannot spill (a windowed aggregate's
        // groups), they go on up to a slack and then wait (a DROP or closing windows frees
        // it); over it by what is not views' at all (caches, buffers, the allocator), they
        // go on.
        let limit = self.memory.limit().unwrap_or(u64::MAX);
        let floor = (limit / 100).max(1 << 20) as usize;
        let unspillable: usize = self
            .graphs
            .values()
            .map(|rt| rt.graph.unspillable_bytes())
            .sum();
        let spilled_all = over_memory && total.saturating_sub(unspillable) <= floor;
        self.memory
            .set_spilled_all(spilled_all, spilled_all && unspillable as u64 <= limit / 10);
        if total <= goal || total == 0 {
            return;
        }
        let share = (total - goal) as f64 / total as f64;
        let mut freed: usize = self
            .graphs
            .values_mut()
            .map(|rt| rt.graph.evict_state(share))
            .sum();
        if contents > 0 {
            // views' contents are read by other threads: evicted under the publication
            // lock (a reader's read is all in memory, or in memory and the spill store's
            // read view, never half moved)
            let mut p = self.published.write();
            for d in p.views.values_mut() {
                freed += d.contents.state_table().evict_share(share);
            }
        }
        tracing::debug!(total, goal, freed, over_memory, "state spilled");
        if freed > 0 {
            crate::state::memory::give_back_freed();
            // the numbers weir_memory shows (no epoch may run while sources are paused)
            let mut stats = self.stats.lock();
            for (oid, rt) in self.graphs.iter_mut() {
                stats.insert(*oid, rt.graph.operator_states());
            }
            drop(stats);
            if !self.told_spilling {
                self.told_spilling = true;
                tracing::info!(
                    state = %crate::limits::format_size(total),
                    budget = %crate::limits::format_size(budget.min(usize::MAX as u64) as usize),
                    over_memory_limit = over_memory,
                    "views' state spills to disk (the coldest entries; read back on demand)"
                );
            }
        }
    }

    /// Queue one input change of `relation` for the epoch being gathered.
    fn take(
        &mut self,
        relation: u32,
        changelog: Changelog,
        watermark_before: Option<i64>,
        watermark_after: Option<i64>,
        position: Option<&Position>,
        pending: &mut HashMap<u32, Vec<SourceBatch>>,
    ) {
        // a temporal join's table changes take effect between the stream rows around
        // them: give them an epoch of their own
        if self.lookups.contains(&relation) || pending.keys().any(|r| self.lookups.contains(r)) {
            self.epoch(std::mem::take(pending));
        }
        pending.entry(relation).or_default().push(SourceBatch {
            changelog,
            watermark_before,
        });
        self.advance(relation, watermark_after, position);
        if !self.cuts.is_empty() {
            self.meet_cuts(relation, pending);
        }
    }

    /// Where `relation` stands after a change of it.
    fn advance(&mut self, relation: u32, watermark: Option<i64>, position: Option<&Position>) {
        if let Some(w) = watermark {
            let e = self.watermarks.entry(relation).or_insert(w);
            *e = (*e).max(w);
        }
        if let Some(p) = position {
            self.positions.entry(relation).or_default().merge(p);
        }
    }

    /// A view's instance joins a shared reader: from here on it gets the reader's batches
    /// and stands where the reader stands (`at`: the reader's position then).
    pub(crate) fn join(&mut self, shared: u32, source: u32, instance: u32, at: Option<Position>) {
        // (a view created at the same moment can join before the reader's Share arrives)
        let f = self.fanout.entry(shared).or_insert_with(|| Fanout {
            source,
            instances: Vec::new(),
        });
        if !f.instances.contains(&instance) {
            f.instances.push(instance);
        }
        if let Some(p) = at {
            self.positions.insert(instance, p);
        }
        if let Some(w) = self.watermarks.get(&shared).copied() {
            let e = self.watermarks.entry(instance).or_insert(w);
            *e = (*e).max(w);
        }
    }

    /// End the epoch here if `relation`'s change just brought a view's inputs exactly to one
    /// of its cut points; give up on a cut point its inputs went past.
    fn meet_cuts(&mut self, relation: u32, pending: &mut HashMap<u32, Vec<SourceBatch>>) {
        let mut i = 0;
        while i < self.cuts.len() {
            let cut = &self.cuts[i];
            if !cut.at.iter().any(|(r, _)| *r == relation) {
                i += 1;
                continue;
            }
            use crate::dataflow::position::Stand;
            let stands: Vec<Stand> = cut
                .at
                .iter()
                .map(|(r, target)| match self.positions.get(r) {
                    Some(p) => p
                        .clone()
                        .with_watermark(self.watermarks.get(r).copied())
                        .stands_at(target),
                    None => Stand::Before,
                })
                .collect();
            let exact = stands.iter().all(|s| *s == Stand::At);
            let past = stands.contains(&Stand::Past);
            if exact {
                self.epoch(std::mem::take(pending));
                let epoch = self.published.read().epoch;
                *self.cuts[i].outcome.lock() = Some(Some(epoch));
                self.cuts.remove(i);
            } else if past {
                *self.cuts[i].outcome.lock() = Some(None);
                self.cuts.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Every view's input positions now, by catalog OID.
    pub(crate) fn view_positions(
        &self,
    ) -> HashMap<u32, crate::dataflow::publication::InputPositions> {
        self.views
            .iter()
            .map(|(oid, v)| {
                let list: Vec<(u32, Position)> = v
                    .inputs
                    .iter()
                    .filter_map(|(rel, catalog)| {
                        self.positions.get(rel).map(|p| {
                            let w = self.watermarks.get(rel).copied();
                            (*catalog, p.clone().with_watermark(w))
                        })
                    })
                    .collect();
                (*oid, Arc::new(list))
            })
            .collect()
    }

    pub(crate) fn refresh_lookups(&mut self) {
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
        self.changed = true;
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
        let positions = self.view_positions();
        self.published
            .write()
            .publish(deltas, failures, &self.watermarks, positions);
        // every change that arrived before this epoch's inputs were cut is published now
        if let Some(t) = self.oldest_arrival.take() {
            crate::metrics::global()
                .epoch_latency
                .observe(t.elapsed().as_secs_f64());
        }
        let mut stats = self.stats.lock();
        for (oid, rt) in self.graphs.iter_mut() {
            stats.insert(*oid, rt.graph.operator_states());
        }
    }
}

impl Worker {
    /// Cut a checkpoint here, between two epochs: take every view's state changes, its
    /// contents' changes and the inputs' positions into one batch and hand it to the
    /// writer (see `checkpoint.rs`). A timer tick is skipped when nothing changed or the
    /// previous checkpoint is still being written.
    fn checkpoint(&mut self, reply: Option<tokio::sync::oneshot::Sender<Result<u64>>>) {
        let Some(writer) = &self.writer else {
            if let Some(r) = reply {
                let _ = r.send(Err(WeirError::new("55000", "checkpoints are off")));
            }
            return;
        };
        let full = writer.needs_full() || self.force_full;
        // a sink that caught up since is worth a checkpoint of its own: after a restart it
        // resumes at the restored state instead of reading its topic back
        let sinks_moved = {
            let epoch = self.published.read().epoch;
            self.caught_up_sinks(epoch) != self.last_caught_up
        };
        if reply.is_none()
            && (writer.busy()
                || (!self.changed && !full && !sinks_moved)
                || self.recovering.load(std::sync::atomic::Ordering::Acquire))
        {
            return;
        }
        let started = std::time::Instant::now();
        let started_at_us = crate::dataflow::checkpoint::now_us();
        match self.cut(full) {
            Ok((batch, state_bytes, epoch, keep)) => {
                self.changed = false;
                self.force_full = false;
                let mut clear = std::mem::take(&mut self.clear);
                if full {
                    clear.push(b"Kv".to_vec());
                }
                let journals = self.journals();
                if let Some(w) = &self.writer {
                    w.submit(Job {
                        epoch,
                        started,
                        started_at_us,
                        batch,
                        clear,
                        keep,
                        full,
                        state_bytes,
                        journals,
                        reply,
                    });
                }
            }
            Err(e) => {
                // the change logs flushed before the error are gone: rewrite everything next
                self.force_full = true;
                error!(error = %e, "cannot cut a checkpoint; the next one writes all state");
                if let Some(r) = reply {
                    let _ = r.send(Err(e));
                }
            }
        }
    }

    /// The sinks whose topics hold their views' changes through `epoch`, in OID order.
    fn caught_up_sinks(&self, epoch: u64) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .sinks_caught_up
            .lock()
            .iter()
            .filter(|(_, e)| **e >= epoch)
            .map(|(s, _)| *s)
            .collect();
        v.sort_unstable();
        v
    }

    /// Every source instance's journal with what the checkpoint being cut records for it.
    fn journals(&self) -> Vec<(Vec<u8>, Option<Position>, Option<i64>)> {
        let shared = self.fanout.iter().map(|(rel, f)| {
            (
                crate::dataflow::journal::prefix(0, f.source),
                self.positions.get(rel).cloned(),
                self.watermarks.get(rel).copied(),
            )
        });
        self.views
            .iter()
            .flat_map(|(oid, v)| {
                v.inputs
                    .iter()
                    .filter(|(rel, _)| *rel >= crate::connectors::runner::FIRST_INSTANCE_ID)
                    .map(move |(rel, catalog)| {
                        (
                            crate::dataflow::journal::prefix(*oid, *catalog),
                            self.positions.get(rel).cloned(),
                            self.watermarks.get(rel).copied(),
                        )
                    })
            })
            .chain(shared)
            .collect()
    }

    /// The checkpoint batch: (batch, state bytes in total, epoch).
    /// Also the store keys written straight to the store for it (see `FlushStats`).
    fn cut(&mut self, full: bool) -> Result<(WriteBatch, u64, u64, Vec<Vec<u8>>)> {
        use crate::dataflow::checkpoint::{CHECKPOINT_FORMAT, contents_prefix, graph_prefix};
        let mut batch = WriteBatch::default();
        let mut state_bytes = 0u64;
        let mut views = Vec::new();
        let store = self.writer.as_ref().map(|w| w.store.clone());
        let mut keep: Vec<Vec<u8>> = Vec::new();
        // the graphs first, without holding readers off; the epoch cannot move meanwhile
        // (this thread is the only one that publishes)
        let (epoch, live): (u64, std::collections::HashSet<u32>) = {
            let p = self.published.read();
            (
                p.epoch,
                p.views
                    .iter()
                    .filter(|(_, d)| d.failed.is_none())
                    .map(|(o, _)| *o)
                    .collect(),
            )
        };
        for (oid, rt) in self.graphs.iter_mut() {
            let Some(info) = self.views.get(oid) else {
                continue;
            };
            if !live.contains(oid) {
                continue;
            }
            if full {
                rt.graph.rewrite_all_state();
            }
            let flushed =
                rt.graph
                    .flush_state(&graph_prefix(*oid), &mut batch, store.as_deref())?;
            keep.extend(flushed.direct_keys);
            let (entries, bytes) = rt.graph.state_size();
            state_bytes += bytes as u64;
            views.push(ViewCheckpoint {
                oid: *oid,
                name: rt.name.clone(),
                fingerprint: info.fingerprint.clone(),
                keys: entries as u64,
                shards: rt.graph.shard_count(),
                watermark: self.watermarks.get(oid).copied(),
                inputs: info
                    .inputs
                    .iter()
                    .map(|(rel, catalog_oid)| InputCheckpoint {
                        relation: *catalog_oid,
                        position: self.positions.get(rel).cloned(),
                        watermark: self.watermarks.get(rel).copied(),
                        shared: self.fanout.values().any(|f| f.instances.contains(rel)),
                    })
                    .collect(),
            });
        }
        // then the views' contents, under the publication lock (readers wait this long)
        {
            let mut p = self.published.write();
            for v in views.iter_mut() {
                let Some(d) = p.views.get_mut(&v.oid) else {
                    continue;
                };
                let t = d.contents.state_table();
                if full {
                    t.rewrite_all();
                }
                let flushed = t.flush(&contents_prefix(v.oid), &mut batch, store.as_deref());
                keep.extend(flushed.direct_keys);
                if let Some(e) = t.take_error() {
                    // a checkpoint without the rows it could not read or write is no checkpoint
                    return Err(WeirError::internal(e));
                }
                v.keys += t.len() as u64;
                state_bytes += t.bytes() as u64;
            }
        }
        // tables: their logs after what the views consumed stay for recovery
        for (rel, pos) in &self.positions {
            if *rel < crate::connectors::runner::FIRST_INSTANCE_ID
                && let Some(seq) = pos.first()
            {
                batch.put(
                    crate::state::table::retention_key(*rel),
                    (seq as u64).to_be_bytes().to_vec(),
                );
            }
        }
        let manifest = Manifest {
            format: CHECKPOINT_FORMAT.into(),
            epoch,
            taken_at_us: crate::dataflow::checkpoint::now_us(),
            views,
            sinks_caught_up: self.caught_up_sinks(epoch),
            sources: self
                .fanout
                .iter()
                .map(|(rel, f)| SourceCheckpoint {
                    source: f.source,
                    position: self.positions.get(rel).cloned(),
                    watermark: self.watermarks.get(rel).copied(),
                })
                .collect(),
        };
        self.last_caught_up = manifest.sinks_caught_up.clone();
        crate::dataflow::checkpoint::put_manifest(&manifest, &mut batch)?;
        Ok((batch, state_bytes, epoch, keep))
    }
}

/// An operator bug must not take every view down: the worker catches a panic, reports it
/// as an internal error, and fails only the view it happened in.
pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    format!(
        "internal error in view maintenance: {}",
        crate::parallel::panic_message(p)
    )
}
