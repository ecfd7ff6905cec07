//! Publication: every view's contents at the latest completed epoch, behind one lock, and
//! the change subscriptions (sinks, SUBSCRIBE) fed from the same step. The worker publishes
//! all views' changes of an epoch at once, so readers never see views at different epochs.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::position::Position;
use crate::error::{Result, WeirError};
use crate::state::zset::{ZSet, ZSetRead};

pub(crate) struct ViewData {
    pub(crate) name: String,
    pub(crate) contents: ZSet,
    /// Epoch of the last change, for the snapshot cache.
    pub(crate) changed_at: u64,
    /// The contents as batches at an epoch, kept while nothing has spilled (a read of a
    /// view that spilled builds the part in memory anew and reads the rest from the spill
    /// store).
    pub(crate) cache: Mutex<Option<(u64, Arc<Vec<RecordBatch>>)>>,
    /// A view whose maintenance failed (e.g. division by zero on a new row) stops and
    /// answers queries with the error.
    pub(crate) failed: Option<String>,
    /// The view's event-time watermark, if its inputs have one.
    pub(crate) watermark: Option<i64>,
}

impl ViewData {
    /// A read of the contents as they are now (call under the publication lock: see
    /// [`ZSet::read`]).
    pub(crate) fn read(&self) -> Result<Arc<ZSetRead>> {
        if let Some(e) = &self.failed {
            return Err(WeirError::new("XX000", e.clone()));
        }
        if self.contents.spilled() {
            let resident = Arc::new(self.contents.resident_batches()?);
            return Ok(Arc::new(self.contents.read(&self.name, resident)?));
        }
        let mut cache = self.cache.lock();
        let resident = match cache.as_ref() {
            Some((at, b)) if *at == self.changed_at => b.clone(),
            _ => {
                let b = Arc::new(self.contents.resident_batches()?);
                *cache = Some((self.changed_at, b.clone()));
                b
            }
        };
        Ok(Arc::new(self.contents.read(&self.name, resident)?))
    }
}

/// Where a view's inputs stood at an epoch: (catalog OID of the input, its position).
pub type InputPositions = Arc<Vec<(u32, Position)>>;

pub(crate) struct Published {
    pub(crate) epoch: u64,
    pub(crate) views: HashMap<u32, ViewData>,
    /// Each view's input positions as of `epoch` (sinks record them with what they write).
    pub(crate) positions: HashMap<u32, InputPositions>,
    /// Change subscriptions (sinks, SUBSCRIBE) by view.
    pub(crate) subscribers: HashMap<u32, Vec<Subscriber>>,
    /// The secondary indexes each view's contents must keep (`CREATE INDEX`).
    pub(crate) index_specs: HashMap<u32, Vec<crate::state::table_index::IndexSpec>>,
}

pub(crate) struct Subscriber {
    pub(crate) tx: mpsc::UnboundedSender<EpochChanges>,
    /// The last epoch sent.
    pub(crate) sent: Arc<std::sync::atomic::AtomicU64>,
    /// For a bounded subscription: rows sent and not yet taken by the reader, and the most
    /// it may hold before it is cut off.
    pub(crate) backlog: Option<(Arc<Backlog>, usize)>,
}

impl Published {
    /// Make a view's contents keep exactly the indexes asked for it (building the new ones
    /// from its rows); nothing when the view is not there.
    pub(crate) fn reconcile_indexes(&mut self, view: u32) -> Result<()> {
        let want = self.index_specs.get(&view).cloned().unwrap_or_default();
        let Some(d) = self.views.get_mut(&view) else {
            return Ok(());
        };
        if d.contents.index_specs() != want {
            d.contents.set_indexes(&want)?;
        }
        Ok(())
    }

    /// Complete an epoch: bump the epoch number, set each view's watermark, apply each
    /// view's changes to its contents and send them to its subscribers (a bounded
    /// subscriber too far behind is cut off), and mark views whose maintenance failed.
    pub(crate) fn publish(
        &mut self,
        deltas: Vec<(u32, Vec<Changelog>)>,
        failures: Vec<(u32, String)>,
        watermarks: &HashMap<u32, i64>,
        positions: HashMap<u32, InputPositions>,
    ) {
        self.epoch += 1;
        self.positions.extend(positions);
        let epoch = self.epoch;
        for (oid, d) in self.views.iter_mut() {
            if let Some(w) = watermarks.get(oid) {
                d.watermark = Some(*w);
            }
        }
        for (oid, delta) in deltas {
            if let Some(d) = self.views.get_mut(&oid) {
                for cl in &delta {
                    if let Err(e) = d.contents.apply(cl) {
                        d.failed = Some(e.message.clone());
                    }
                }
                // a spilled row that could not be read back: the contents are wrong now
                if let Some(e) = d.contents.state_table().take_error() {
                    d.failed = Some(e);
                }
                d.changed_at = epoch;
                let watermark = d.watermark;
                if let Some(subs) = self.subscribers.get_mut(&oid) {
                    let msg = EpochChanges {
                        epoch,
                        changes: delta,
                        watermark,
                        positions: self.positions.get(&oid).cloned().unwrap_or_default(),
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
            if let Some(d) = self.views.get_mut(&oid) {
                d.failed = Some(msg);
                d.changed_at = epoch;
            }
        }
    }
}

/// How far a bounded subscription's reader is behind (see [`crate::dataflow::runtime::Dataflow::subscribe_bounded`]).
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
    /// The view's input positions after the epoch.
    pub positions: InputPositions,
}

/// A subscription to a view: its contents at `epoch`, then every later epoch's changes, in
/// order, without gaps. Dropping the receiver ends it.
pub struct Subscription {
    pub epoch: u64,
    /// The view's contents at `epoch`.
    pub snapshot: Arc<ZSetRead>,
    pub schema: SchemaRef,
    pub changes: mpsc::UnboundedReceiver<EpochChanges>,
    /// The last epoch the dataflow has sent (for waiting until a subscriber caught up).
    pub sent: Arc<std::sync::atomic::AtomicU64>,
    /// The view's input positions at `epoch`.
    pub positions: InputPositions,
}
