//! `SUBSCRIBE`: a view's rows, then its changes as they happen, as record batches with two
//! leading columns: `weir_epoch` (the epoch the row belongs to) and `weir_diff` (+1 for a
//! row added, -1 for a row removed).
//!
//! The snapshot is the view at the epoch the subscription began (every row `weir_diff =
//! 1`); after it come the changes of every later epoch, in epoch order, without gaps. An
//! epoch's changes are consolidated first (a row removed and added back in one epoch is not
//! shown) and removals come before additions; a row changed with multiplicity n shows as n
//! rows of ±1. Epochs that change nothing send nothing. The stream ends when the view is
//! dropped; dropping the stream unsubscribes.

use std::collections::VecDeque;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::runtime::{Backlog, EpochChanges, Subscription};
use crate::error::{Result, WeirError};
use crate::state::rows::BatchSource;
use crate::state::zset::ZSet;

pub const EPOCH_COLUMN: &str = "weir_epoch";
pub const DIFF_COLUMN: &str = "weir_diff";

/// The columns a subscription to a view with `view_schema` returns.
pub fn output_schema(view_schema: &Schema) -> SchemaRef {
    let mut fields = vec![
        Arc::new(Field::new(EPOCH_COLUMN, DataType::Int64, false)),
        Arc::new(Field::new(DIFF_COLUMN, DataType::Int64, false)),
    ];
    fields.extend(view_schema.fields().iter().cloned());
    Arc::new(Schema::new(fields))
}

/// The rows of `cl` whose weight has sign `sign`, each repeated |weight| times.
fn expand(cl: &Changelog, sign: i64) -> Result<RecordBatch> {
    let mut idx: Vec<u32> = Vec::new();
    for (i, w) in cl.weights.values().iter().enumerate() {
        if w.signum() == sign {
            idx.extend(std::iter::repeat_n(i as u32, w.unsigned_abs() as usize));
        }
    }
    let idx = UInt32Array::from(idx);
    let cols: Vec<ArrayRef> = cl
        .data
        .columns()
        .iter()
        .map(|c| take(c, &idx, None))
        .collect::<std::result::Result<_, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        cl.data.schema(),
        cols,
        &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(idx.len())),
    )?)
}

/// Changed rows a reader may leave unread before its subscription is dropped (53400):
/// 10 million, or `WEIR_SUBSCRIBE_MAX_BACKLOG_ROWS` from the server's environment.
pub fn max_backlog_rows() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("WEIR_SUBSCRIBE_MAX_BACKLOG_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000_000)
    })
}

pub struct SubscribeStream {
    schema: SchemaRef,
    view_schema: SchemaRef,
    /// The view's rows at the subscription's epoch, read a batch at a time (`weir_diff`
    /// 1) before any change.
    snapshot: Option<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>>,
    ready: VecDeque<RecordBatch>,
    sub: Subscription,
    backlog: Option<Arc<Backlog>>,
    ended: bool,
}

impl SubscribeStream {
    pub fn new(
        sub: Subscription,
        backlog: Option<Arc<Backlog>>,
        snapshot: bool,
    ) -> Result<SubscribeStream> {
        let view_schema = sub.schema.clone();
        let schema = output_schema(&view_schema);
        let snapshot = snapshot.then(|| sub.snapshot.clone().batches());
        Ok(SubscribeStream {
            schema,
            view_schema,
            snapshot,
            ready: VecDeque::new(),
            sub,
            backlog,
            ended: false,
        })
    }

    /// The next batch of the snapshot (its rows with `weir_diff` 1), None once it is done.
    fn next_of_snapshot(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            let next = self.snapshot.as_mut()?.next();
            match next {
                None => {
                    self.snapshot = None;
                    return None;
                }
                Some(Err(e)) => {
                    self.snapshot = None;
                    return Some(Err(e));
                }
                Some(Ok(b)) if b.num_rows() == 0 => continue,
                Some(Ok(b)) => {
                    let ones = Int64Array::from_value(1, b.num_rows());
                    return Some(self.with_meta(self.sub.epoch, &b, ones));
                }
            }
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch, waiting for the view to change if nothing is ready; `None` once the
    /// view is gone.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        if let Some(b) = self.next_of_snapshot() {
            return Some(b);
        }
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(Ok(b));
            }
            if self.ended {
                return None;
            }
            match self.sub.changes.recv().await {
                Some(ch) => {
                    if let Err(e) = self.enqueue(ch) {
                        return Some(Err(e));
                    }
                }
                None => {
                    self.ended = true;
                    if let Some(e) = self.overflow_error() {
                        return Some(Err(e));
                    }
                }
            }
        }
    }

    /// A batch that is ready now, without waiting; `None` if there is none yet.
    pub fn try_next(&mut self) -> Option<Result<RecordBatch>> {
        if let Some(b) = self.next_of_snapshot() {
            return Some(b);
        }
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(Ok(b));
            }
            match self.sub.changes.try_recv() {
                Ok(ch) => {
                    if let Err(e) = self.enqueue(ch) {
                        return Some(Err(e));
                    }
                }
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => return None,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    self.ended = true;
                    return self.overflow_error().map(Err);
                }
            }
        }
    }

    /// True once the view was dropped and every change was handed out.
    pub fn is_done(&self) -> bool {
        self.ended && self.ready.is_empty()
    }

    /// The subscription was dropped for falling too far behind.
    fn overflow_error(&self) -> Option<WeirError> {
        let b = self.backlog.as_ref()?;
        b.overflowed
            .load(std::sync::atomic::Ordering::Acquire)
            .then(|| {
                WeirError::new(
                    "53400",
                    format!(
                        "subscription fell behind: more than {} changed rows were not read",
                        max_backlog_rows()
                    ),
                )
            })
    }

    /// Consolidate an epoch's changes and queue them as ±1 rows, removals first.
    fn enqueue(&mut self, ch: EpochChanges) -> Result<()> {
        if let Some(b) = &self.backlog {
            let rows: usize = ch.changes.iter().map(|c| c.len()).sum();
            b.rows.fetch_sub(rows, std::sync::atomic::Ordering::AcqRel);
        }
        if ch.changes.iter().all(Changelog::is_empty) {
            return Ok(());
        }
        // only additions: nothing can cancel, so no consolidation (append-only views)
        if ch
            .changes
            .iter()
            .all(|cl| cl.weights.values().iter().all(|w| *w > 0))
        {
            for cl in &ch.changes {
                let rows = if cl.weights.values().iter().all(|w| *w == 1) {
                    cl.data.clone()
                } else {
                    expand(cl, 1)?
                };
                if rows.num_rows() > 0 {
                    let diffs = Int64Array::from_value(1, rows.num_rows());
                    let out = self.with_meta(ch.epoch, &rows, diffs)?;
                    self.ready.push_back(out);
                }
            }
            return Ok(());
        }
        let mut z = ZSet::new_delta(self.view_schema.clone())?;
        for cl in &ch.changes {
            z.apply(cl)?;
        }
        for sign in [-1i64, 1] {
            for cl in z.to_changelogs()? {
                let rows = expand(&cl, sign)?;
                if rows.num_rows() == 0 {
                    continue;
                }
                let diffs = Int64Array::from_value(sign, rows.num_rows());
                let out = self.with_meta(ch.epoch, &rows, diffs)?;
                self.ready.push_back(out);
            }
        }
        Ok(())
    }

    fn with_meta(&self, epoch: u64, rows: &RecordBatch, diffs: Int64Array) -> Result<RecordBatch> {
        let n = rows.num_rows();
        let epoch = i64::try_from(epoch)
            .map_err(|_| WeirError::internal("epoch does not fit in a bigint"))?;
        let mut cols: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from_value(epoch, n)), Arc::new(diffs)];
        cols.extend(rows.columns().iter().cloned());
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}
