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
use crate::dataflow::graph::{Graph, SourceBatch};
use crate::dataflow::publication::Published;
use crate::dataflow::runtime::Msg;
use crate::dataflow::stats::OperatorState;
use crate::error::WeirError;

/// Messages drained into one epoch at most (bounds latency under load).
const MAX_MESSAGES_PER_EPOCH: usize = 4096;

pub(crate) struct ViewRuntime {
    pub(crate) name: String,
    pub(crate) graph: Graph,
}

pub(crate) struct Worker {
    pub(crate) rx: mpsc::Receiver<Msg>,
    pub(crate) graphs: BTreeMap<u32, ViewRuntime>,
    pub(crate) published: Arc<RwLock<Published>>,
    pub(crate) stats: Arc<Mutex<HashMap<u32, Vec<OperatorState>>>>,
    /// Latest event-time watermark of each relation (tables and views) that has one.
    pub(crate) watermarks: HashMap<u32, i64>,
    /// Relations some view reads as a temporal join's lookup side.
    pub(crate) lookups: std::collections::HashSet<u32>,
}

impl Worker {
    pub(crate) fn run(mut self) {
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
        self.published
            .write()
            .publish(deltas, failures, &self.watermarks);
        let mut stats = self.stats.lock();
        for (oid, rt) in &self.graphs {
            stats.insert(*oid, rt.graph.operator_states());
        }
    }
}

/// An operator bug must not take every view down: the worker catches a panic, reports it
/// as an internal error, and fails only the view it happened in.
pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error in view maintenance: {what}")
}
