//! Backfill: a new view first reads the existing contents of its inputs (tables streamed
//! from the store reads taken with its CREATE message, in arrival order with the watermark
//! each batch met; views from their published contents), in epochs of at most
//! `BACKFILL_CHUNK_ROWS` rows (and of a 64th of the memory limit in bytes, for wide rows),
//! before it joins the live change stream.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::info;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::graph::SourceBatch;
use crate::dataflow::publication::ViewData;
use crate::dataflow::runtime::CreateView;
use crate::dataflow::watermark::WatermarkSpec;
use crate::dataflow::worker::{ViewRuntime, Worker, panic_message};
use crate::error::{Result, WeirError};
use crate::state::rows::BatchSource;
use crate::state::zset::ZSet;

/// Rows per epoch when a new view reads its inputs' existing contents.
const BACKFILL_CHUNK_ROWS: usize = 65_536;

impl Worker {
    pub(crate) fn create(&mut self, c: CreateView) {
        let CreateView {
            oid,
            name,
            mut graph,
            schema,
            tables,
            watermark_specs,
            fresh,
            progress,
            fingerprint,
            inputs,
            positions,
            joins,
            restore,
            done,
        } = c;
        let mut final_watermarks: HashMap<u32, i64> = HashMap::new();
        let mut restored_epoch = None;
        let store = self.writer.as_ref().map(|w| w.store.clone());
        let build = || -> Result<(ZSet, u64)> {
            if let Some(r) = &restore {
                // the checkpointed state, then the changes after it arrive as usual
                let store = store.ok_or_else(|| {
                    WeirError::internal("a checkpoint cannot be restored: checkpoints are off")
                })?;
                let mut contents = ZSet::new(schema.clone())?;
                let bytes = crate::dataflow::checkpoint::restore_view(
                    &*store,
                    &r.view,
                    &mut graph,
                    &mut contents,
                )?;
                final_watermarks.extend(r.watermarks.iter().copied());
                if let Some(w) = r.view.watermark {
                    final_watermarks.insert(oid, w);
                }
                restored_epoch = Some(r.epoch);
                return Ok((contents, bytes as u64));
            }
            // inputs as they are now: tables streamed from the reads taken with this
            // message (in arrival order, each batch with the watermark it met), views from
            // their published contents
            let mut feeds: Vec<Feed> = Vec::new();
            for (rel, scan) in &tables {
                feeds.push(Feed {
                    rel: *rel,
                    rows: scan.rows as usize,
                    batches: FeedBatches::Table {
                        batches: scan.batches(),
                        spec: watermark_specs.get(rel).map(|s| WatermarkSpec::new(*s)),
                        watermark: None,
                    },
                });
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
                    let read = d.read()?;
                    feeds.push(Feed {
                        rel,
                        rows: read.rows() as usize,
                        batches: FeedBatches::View {
                            batches: read.batches(),
                            watermark: self.watermarks.get(&rel).copied(),
                        },
                    });
                }
            }
            // a temporal join looks up its table as it is now: feed lookup tables first, in
            // an epoch of their own
            let lookups = graph.lookup_relations();
            feeds.sort_by_key(|f| !lookups.contains(&f.rel));
            let lookup_rows: usize = feeds
                .iter()
                .filter(|f| lookups.contains(&f.rel))
                .map(|f| f.rows)
                .sum();
            let total: usize = feeds.iter().map(|f| f.rows).sum();
            let mut feeds = feeds.into_iter().peekable();
            let mut next_input = move || -> Result<Option<(u32, SourceBatch, Option<i64>)>> {
                while let Some(f) = feeds.peek_mut() {
                    if let Some(next) = f.next()? {
                        return Ok(Some(next));
                    }
                    feeds.next();
                }
                Ok(None)
            };
            let mut contents = ZSet::new(schema.clone())?;
            let started = Instant::now();
            let mut last_report = started;
            let mut done_rows = 0usize;
            let mut chunk: HashMap<u32, Vec<SourceBatch>> = HashMap::new();
            let mut chunk_rows = 0usize;
            let mut chunk_bytes = 0usize;
            let max_chunk_bytes = self
                .memory
                .limit()
                .map_or(usize::MAX, |l| (l / 64).max(1 << 20) as usize);
            let mut wms: HashMap<u32, i64> = HashMap::new();
            let mut view_watermark = None;
            loop {
                let next = next_input()?;
                let at_end = next.is_none();
                if let Some((rel, b, wm_after)) = next {
                    chunk_rows += b.changelog.len();
                    chunk_bytes += b.changelog.data.get_array_memory_size();
                    chunk.entry(rel).or_default().push(b);
                    if let Some(w) = wm_after {
                        wms.insert(rel, w);
                    }
                }
                // the first epoch runs even without input: global aggregates and constants
                // emit their initial rows
                let lookups_done = lookup_rows > 0 && done_rows + chunk_rows == lookup_rows;
                if chunk_rows >= BACKFILL_CHUNK_ROWS
                    || chunk_bytes >= max_chunk_bytes
                    || at_end
                    || lookups_done
                {
                    let mut feed = std::mem::take(&mut chunk);
                    for s in graph.sources() {
                        feed.entry(s).or_default();
                    }
                    let out = graph.run_epoch(&feed, &wms)?;
                    for cl in out.changes {
                        contents.apply(&cl)?;
                    }
                    if let Some(e) = contents.state_table().take_error() {
                        return Err(WeirError::internal(e));
                    }
                    spill_while_building(&mut graph, &mut contents, &self.memory);
                    view_watermark = out.watermark;
                    done_rows += chunk_rows;
                    chunk_rows = 0;
                    chunk_bytes = 0;
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
            Ok((contents, 0))
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build))
            .unwrap_or_else(|p| Err(WeirError::internal(panic_message(&p))));
        for (rel, w) in final_watermarks {
            let e = self.watermarks.entry(rel).or_insert(w);
            *e = (*e).max(w);
        }
        match result {
            Ok((contents, bytes)) => {
                for (rel, pos) in positions {
                    self.positions.entry(rel).or_insert(pos);
                }
                for (shared, source, instance) in joins {
                    let at = self.positions.get(&shared).cloned();
                    self.join(shared, source, instance, at);
                }
                if restore.is_none() && self.writer.is_some() {
                    // whatever an older checkpoint left under this view's keys is stale
                    self.clear
                        .push(crate::dataflow::checkpoint::graph_prefix(oid));
                    self.clear
                        .push(crate::dataflow::checkpoint::contents_prefix(oid));
                }
                self.views.insert(
                    oid,
                    crate::dataflow::worker::ViewInputs {
                        fingerprint,
                        inputs,
                    },
                );
                self.changed = true;
                let positions = self.view_positions();
                let mut p = self.published.write();
                p.positions.extend(positions);
                p.epoch = p.epoch.max(restored_epoch.unwrap_or(0)) + 1;
                let epoch = p.epoch;
                p.views.insert(
                    oid,
                    ViewData {
                        name: name.clone(),
                        contents,
                        changed_at: epoch,
                        cache: Mutex::new(None),
                        failed: None,
                        watermark: self.watermarks.get(&oid).copied(),
                    },
                );
                // its indexes (CREATE INDEX on the view), built from the contents
                if let Err(e) = p.reconcile_indexes(oid)
                    && let Some(d) = p.views.get_mut(&oid)
                {
                    d.failed = Some(format!("could not build the view's indexes: {e}"));
                }
                drop(p);
                self.stats.lock().insert(oid, graph.operator_states());
                self.graphs.insert(oid, ViewRuntime { name, graph });
                self.refresh_lookups();
                if let Some(r) = restore {
                    self.cuts.extend(r.cuts);
                }
                let _ = done.send(Ok(bytes));
            }
            Err(e) => {
                for c in restore.iter().flat_map(|r| r.cuts.iter()) {
                    *c.outcome.lock() = Some(None);
                }
                let _ = done.send(Err(e));
            }
        }
    }
}

/// One input of a backfill, read a batch at a time.
struct Feed {
    rel: u32,
    rows: usize,
    batches: FeedBatches,
}

enum FeedBatches {
    /// A table's rows streamed from its store read, with the watermark each batch met.
    Table {
        batches: crate::state::table::TableBatches,
        spec: Option<WatermarkSpec>,
        watermark: Option<i64>,
    },
    /// A view's published contents, streamed from a read of them.
    View {
        batches:
            Box<dyn Iterator<Item = Result<datafusion::arrow::record_batch::RecordBatch>> + Send>,
        watermark: Option<i64>,
    },
}

impl Feed {
    /// The next batch: (relation, the batch with the watermark before it, the watermark
    /// after it).
    fn next(&mut self) -> Result<Option<(u32, SourceBatch, Option<i64>)>> {
        match &mut self.batches {
            FeedBatches::Table {
                batches,
                spec,
                watermark,
            } => {
                let Some(b) = batches.next().transpose()? else {
                    return Ok(None);
                };
                let before = *watermark;
                if let Some(spec) = spec {
                    *watermark = spec.after_batch(*watermark, &b);
                }
                Ok(Some((
                    self.rel,
                    SourceBatch {
                        changelog: Changelog::inserts(b),
                        watermark_before: before,
                    },
                    *watermark,
                )))
            }
            FeedBatches::View { batches, watermark } => Ok(batches.next().transpose()?.map(|b| {
                (
                    self.rel,
                    SourceBatch {
                        changelog: Changelog::inserts(b),
                        watermark_before: None,
                    },
                    *watermark,
                )
            })),
        }
    }
}

/// A view being built runs no round of the worker (where state is held to its budget):
/// once its state and contents take more than half the state cache, or the process is over
/// its memory limit, the coldest go to the spill store, down to a quarter of the cache.
fn spill_while_building(
    graph: &mut crate::dataflow::graph::Graph,
    contents: &mut ZSet,
    memory: &crate::state::memory::MemoryBudget,
) {
    let budget = crate::state::spill::cache_budget();
    if budget == u64::MAX || crate::state::spill::store().is_none() {
        return;
    }
    let footprint = graph.state_footprint() + contents.footprint();
    if (footprint as u64) <= budget / 2 && !memory.over_limit() {
        return;
    }
    let goal = (budget / 4) as usize;
    if footprint <= goal {
        return;
    }
    let share = (footprint - goal) as f64 / footprint as f64;
    let freed = graph.evict_state(share) + contents.state_table().evict_share(share);
    if freed > 0 {
        crate::state::memory::give_back_freed();
    }
}
