//! `OverWindow`: window functions over every row, `f(...) OVER (PARTITION BY p ORDER BY o
//! [frame])` (`sum`, `count`, `min`, `max`, `avg`, ... as window functions, `row_number`,
//! `rank`, `dense_rank`, `lag`/`lead`, `first_value`/`last_value`/`nth_value`, `ntile`,
//! `percent_rank`, `cume_dist`), the values computed by DataFusion's window expressions over
//! a stretch of a partition's rows in order.
//!
//! - input: one changelog stream.
//! - output: the input rows, each followed by its window values. In a view that updates,
//!   a change to a partition retracts and re-emits exactly the rows whose values changed.
//!   Ties in the ordering are broken by the whole row, so the result is deterministic.
//! - incremental: each function declares its [`Reach`] (how many rows before and after a
//!   row its value reads: `lag(x, 2)` two before, `ROWS BETWEEN 1 PRECEDING AND 1
//!   FOLLOWING` one each side, a running `sum` every row before). From the first and last
//!   changed row of a partition the operator finds the affected range (rows whose frame
//!   reaches a change, widened to whole peer groups) and computes only that, reading only
//!   the rows those frames cover. A function that reads every row before its own (a
//!   running aggregate, `row_number`, `rank`) continues from the values of the row just
//!   before the range instead ([`Carry`]: running count/sum of integers or decimals,
//!   min/max, `row_number`/`rank`/`dense_rank`, `first_value`, `last_value IGNORE NULLS`),
//!   so an append at the end of a partition costs the appended rows, not the partition.
//!   Functions that read rows after their own without bound (`ntile`, `percent_rank`,
//!   `cume_dist`, frames to UNBOUNDED FOLLOWING, no ORDER BY) recompute the partition.
//! - state (state tables): `rows`: per partition every input row, key = partition ++ sort
//!   key ++ row, value = sort key length ++ multiplicity (the layout of `top_n.rs`), so a
//!   range scan reads a stretch of a partition in order; `emitted`: per input row (owner =
//!   its `rows` key) the output rows it shows.
//! - EMIT ON WINDOW CLOSE (ordered by the event time first, functions that look only
//!   backwards): a row is shown once `watermark - lateness` has passed its event time (no
//!   admitted row can come before it any more) and never changes: the output only inserts.
//!   `pending` (event time ++ partition) says which partitions have rows to show when the
//!   watermark moves; `shown` (per partition: rows shown, the last one's key and window
//!   values) is what the next rows continue from; rows no function can read again are
//!   freed (all shown rows but the last `n` when the functions read at most `n` rows
//!   back; none when one reads every row before its own without a carry, e.g. `avg`).
//!   No `emitted` table: what was shown never changes.
//! - watermark: passed through (the view's output delay covers the lateness).
//! - checkpoint: the tables above (changed partitions are emitted by the end of the epoch).

use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions, Scalar,
    TimestampMicrosecondArray,
};
use datafusion::arrow::compute::kernels::{boolean, cmp, numeric, zip::zip};
use datafusion::arrow::compute::{cast, concat_batches, is_null};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::WindowExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::emitted::{Diff, Emitted};
use crate::operators::top_n::{ROWS, SortKey, add_row, micros, parse_row_value};
use crate::operators::{FastMap, Operator, key_rows};
use crate::state::state_table::{StateTable, TableDecl, i64_key, prefix_end};

/// How a function that reads every row before its own continues from the value of the row
/// just before a stretch that starts at a peer-group boundary (its frame starts UNBOUNDED
/// PRECEDING and ends at the CURRENT ROW).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// The value before plus the stretch's own (`count`, `sum` of integers or decimals,
    /// `row_number`, `dense_rank`); a NULL on either side (no value yet) takes the other.
    Add,
    /// The stretch's own plus the number of rows before it (`rank`).
    Rank,
    /// The smaller / larger of the value before and the stretch's own (`min`, `max`,
    /// `bool_and`, `bool_or`).
    Min,
    Max,
    /// The value before (`first_value`: the partition's first row).
    First,
    /// The value before unless NULL (`first_value IGNORE NULLS`).
    FirstNonNull,
    /// The stretch's own unless NULL (`last_value IGNORE NULLS`).
    LastNonNull,
}

/// What a window function's value for a row reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// Rows before it (None: every one).
    pub back: Option<usize>,
    /// Rows after it (None: every one).
    pub ahead: Option<usize>,
    /// With `back` None: how its value continues from the row before a stretch.
    pub carry: Option<Carry>,
}

impl Reach {
    /// Reads the whole partition.
    pub const ALL: Reach = Reach {
        back: None,
        ahead: None,
        carry: None,
    };

    fn carried(&self) -> bool {
        self.back.is_none() && self.carry.is_some()
    }
}

/// One window function of the operator.
pub struct WindowFn {
    pub expr: Arc<dyn WindowExpr>,
    pub reach: Reach,
}

const PENDING: TableDecl = TableDecl {
    name: "pending",
    key: "event time (order-preserving i64) ++ partition",
    value: "empty",
    ordered: true,
};
const SHOWN: TableDecl = TableDecl {
    name: "shown",
    key: "partition",
    value: "rows shown (i64 LE) ++ last shown row's key length (u32 LE) ++ that key (sort key ++ row) ++ its window values (row format)",
    ordered: false,
};

/// EMIT ON WINDOW CLOSE (see the module header).
struct Close {
    /// Column of the event time, in the input and in the output.
    ts_col: usize,
    lateness_us: i64,
    /// Rows with an event time below this are shown.
    limit: Option<i64>,
    pending: StateTable,
    shown: StateTable,
    /// Shown rows kept for the functions that read rows before their own (None: all).
    keep: Option<usize>,
}

/// A partition's changes in an epoch: the first and last changed key (sort key ++ row,
/// with the sort key's length) and the keys whose rows are gone.
#[derive(Default)]
struct Changed {
    min: Vec<u8>,
    min_sk: usize,
    max: Vec<u8>,
    max_sk: usize,
    gone: Vec<Box<[u8]>>,
}

/// Stored rows before a change up to which a partition is read from its start rather than
/// continued from the row before (the fixed cost of continuing is about that many rows).
const SHORT_PREFIX: usize = 16;

/// What the functions together read around a row (from their [`Reach`]es).
#[derive(Clone, Copy)]
struct Span {
    /// Rows after it (None: every one).
    ahead: Option<usize>,
    /// The most rows before it of the functions that read a bounded number.
    back_bounded: usize,
    /// Some function reads every row before it.
    back_all: bool,
    /// Some function continues from the row before a stretch ([`Carry`]).
    carried: bool,
}

impl Span {
    fn of(funcs: &[WindowFn]) -> Span {
        Span {
            ahead: funcs
                .iter()
                .try_fold(0usize, |m, f| f.reach.ahead.map(|a| m.max(a))),
            back_bounded: funcs.iter().filter_map(|f| f.reach.back).max().unwrap_or(0),
            back_all: funcs.iter().any(|f| f.reach.back.is_none()),
            carried: funcs.iter().any(|f| f.reach.carried()),
        }
    }
}

/// One stored key of a partition: sort key ++ row, the sort key's length, multiplicity.
struct Entry {
    suffix: Box<[u8]>,
    sk: usize,
    count: i64,
}

impl Entry {
    fn sort_key(&self) -> &[u8] {
        self.suffix.get(..self.sk).unwrap_or_default()
    }
    fn row(&self) -> &[u8] {
        self.suffix.get(self.sk..).unwrap_or_default()
    }
}

fn entry(part: &[u8], k: &[u8], v: &[u8]) -> Entry {
    let (sk, count) = parse_row_value(v);
    Entry {
        suffix: k.get(part.len()..).unwrap_or_default().into(),
        sk,
        count,
    }
}

fn joined(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + b.len());
    k.extend_from_slice(a);
    k.extend_from_slice(b);
    k
}

/// From the key `from` (sort key ++ row, its sort key `from_sk` bytes long; it need not be
/// stored) `n` stored keys on through `keys` (a partition's keys beyond `from`, nearest
/// first), then on while they are peers of the last one reached: where a stretch ends so
/// that it holds `n` rows beyond `from` and whole peer groups. Returns (key, its sort key
/// length).
fn walk<'a>(
    keys: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    part: &[u8],
    from: &[u8],
    from_sk: usize,
    n: usize,
) -> (Vec<u8>, usize) {
    let mut at = from.to_vec();
    let mut at_sk = from_sk;
    let mut taken = 0usize;
    for (k, v) in keys {
        let e = entry(part, k, v);
        if taken < n || e.sort_key() == at.get(..at_sk).unwrap_or_default() {
            at = e.suffix.into_vec();
            at_sk = e.sk;
            taken += 1;
        } else {
            break;
        }
    }
    (at, at_sk)
}

/// [`walk`] towards the partition's start.
fn walk_back(
    rows: &mut StateTable,
    part: &[u8],
    from: &[u8],
    from_sk: usize,
    n: usize,
) -> (Vec<u8>, usize) {
    let hi = joined(part, from);
    let keys = rows
        .range((Bound::Included(part), Bound::Excluded(hi.as_slice())))
        .rev();
    walk(keys, part, from, from_sk, n)
}

/// [`walk`] towards the partition's end.
fn walk_ahead(
    rows: &mut StateTable,
    part: &[u8],
    from: &[u8],
    from_sk: usize,
    n: usize,
) -> (Vec<u8>, usize) {
    let lo = joined(part, from);
    let end = prefix_end(part);
    let hi: Bound<&[u8]> = match &end {
        Some(e) => Bound::Excluded(e.as_slice()),
        None => Bound::Unbounded,
    };
    let keys = rows.range((Bound::Excluded(lo.as_slice()), hi));
    walk(keys, part, from, from_sk, n)
}

/// The partition's stored keys from `lo` (inclusive) to `hi` (inclusive; None: the end).
fn read_entries(rows: &mut StateTable, part: &[u8], lo: &[u8], hi: Option<&[u8]>) -> Vec<Entry> {
    let lo = joined(part, lo);
    let end = match hi {
        Some(h) => Some(joined(part, h)),
        None => prefix_end(part),
    };
    let hi: Bound<&[u8]> = match (&end, hi.is_some()) {
        (Some(e), true) => Bound::Included(e.as_slice()),
        (Some(e), false) => Bound::Excluded(e.as_slice()),
        (None, _) => Bound::Unbounded,
    };
    rows.range((Bound::Included(lo.as_slice()), hi))
        .map(|(k, v)| entry(part, k, v))
        .collect()
}

/// A function's values over a stretch that starts at a peer-group boundary, continued from
/// `prev` (its value at the row just before; one row) with `before` rows before the stretch.
fn continue_from(kind: Carry, own: ArrayRef, prev: &ArrayRef, before: i64) -> Result<ArrayRef> {
    let n = own.len();
    let prev = if prev.data_type() != own.data_type() {
        cast(prev, own.data_type())?
    } else {
        prev.clone()
    };
    let prev_s = Scalar::new(prev.clone());
    let all = || BooleanArray::from(vec![true; n]);
    Ok(match kind {
        Carry::Add => {
            if prev.is_null(0) {
                return Ok(own);
            }
            // (decimal addition widens the precision: back to the function's type)
            let sum = cast(&numeric::add_wrapping(&own, &prev_s)?, own.data_type())?;
            zip(&is_null(&own)?, &prev_s, &sum)?
        }
        Carry::Rank => {
            let b = cast(&Int64Array::from(vec![before]), own.data_type())?;
            cast(
                &numeric::add_wrapping(&own, &Scalar::new(b))?,
                own.data_type(),
            )?
        }
        Carry::Min | Carry::Max => {
            if prev.is_null(0) {
                return Ok(own);
            }
            let better = if kind == Carry::Min {
                cmp::lt(&prev_s, &own)?
            } else {
                cmp::gt(&prev_s, &own)?
            };
            let take = boolean::or_kleene(&better, &is_null(&own)?)?;
            zip(&take, &prev_s, &own)?
        }
        Carry::First => zip(&all(), &prev_s, &own)?,
        Carry::FirstNonNull => {
            if prev.is_null(0) {
                own
            } else {
                zip(&all(), &prev_s, &own)?
            }
        }
        Carry::LastNonNull => zip(&is_null(&own)?, &prev_s, &own)?,
    })
}

pub struct OverWindow {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    part_conv: RowConverter,
    sort_by: Vec<Arc<dyn PhysicalExpr>>,
    sort_conv: RowConverter,
    row_conv: RowConverter,
    out_conv: RowConverter,
    /// The window value columns (the output's last ones): a row's values carried on.
    win_conv: RowConverter,
    funcs: Vec<WindowFn>,
    span: Span,
    in_schema: SchemaRef,
    schema: SchemaRef,
    rows: StateTable,
    emitted: Emitted,
    /// Partitions changed in this epoch (emitted and cleared at its end).
    changed: FastMap<Box<[u8]>, Changed>,
    close: Option<Close>,
    /// Stored rows read to compute window values (all epochs): what an affected range
    /// costs.
    rows_read: u64,
    text: String,
}

impl OverWindow {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        partition_types: Vec<DataType>,
        sort_by: Vec<SortKey>,
        funcs: Vec<WindowFn>,
        input_schema: SchemaRef,
        schema: SchemaRef,
        text: String,
    ) -> Result<OverWindow> {
        let fields = |s: &SchemaRef, skip: usize| -> Vec<SortField> {
            s.fields()
                .iter()
                .skip(skip)
                .map(|f| SortField::new(f.data_type().clone()))
                .collect()
        };
        let n_in = input_schema.fields().len();
        Ok(OverWindow {
            partition_by,
            part_conv: RowConverter::new(
                partition_types.into_iter().map(SortField::new).collect(),
            )?,
            sort_conv: RowConverter::new(
                sort_by
                    .iter()
                    .map(|k| SortField::new_with_options(k.data_type.clone(), k.options))
                    .collect(),
            )?,
            sort_by: sort_by.into_iter().map(|k| k.expr).collect(),
            row_conv: RowConverter::new(fields(&input_schema, 0))?,
            out_conv: RowConverter::new(fields(&schema, 0))?,
            win_conv: RowConverter::new(fields(&schema, n_in))?,
            span: Span::of(&funcs),
            funcs,
            in_schema: input_schema,
            schema,
            rows: StateTable::new(ROWS),
            emitted: Emitted::new(),
            changed: FastMap::default(),
            close: None,
            rows_read: 0,
            text,
        })
    }

    /// EMIT ON WINDOW CLOSE, ordered by the event time in input column `ts_col` first.
    pub fn emit_on_close(mut self, ts_col: usize, lateness_us: i64) -> Self {
        // shown rows the functions evaluated over the stretch may still read
        let mut keep = Some(0usize);
        for f in &self.funcs {
            if f.reach.carried() {
                continue;
            }
            keep = match (keep, f.reach.back) {
                (Some(k), Some(b)) => Some(k.max(b)),
                _ => None,
            };
        }
        self.close = Some(Close {
            ts_col,
            lateness_us,
            limit: None,
            pending: StateTable::new(PENDING),
            shown: StateTable::new(SHOWN),
            keep,
        });
        self
    }

    /// Rows (repeated by multiplicity) of `entries` as a batch of the input's schema.
    fn decode(&self, entries: &[Entry]) -> Result<RecordBatch> {
        let parser = self.row_conv.parser();
        let n: usize = entries.iter().map(|e| e.count.max(0) as usize).sum();
        let cols =
            self.row_conv.convert_rows(entries.iter().flat_map(|e| {
                std::iter::repeat_n(parser.parse(e.row()), e.count.max(0) as usize)
            }))?;
        Ok(RecordBatch::try_new_with_options(
            self.in_schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }

    /// Values of function `i` for rows `[from, from + len)` of `batch`, reading the rows
    /// from `start` on; continued from `prev` (the row before `from`) when given.
    fn values(
        &self,
        i: usize,
        batch: &RecordBatch,
        start: usize,
        from: usize,
        len: usize,
        prev: Option<(&ArrayRef, i64)>,
    ) -> Result<ArrayRef> {
        let f = &self.funcs[i];
        let stretch = batch.slice(start, from + len - start);
        let own = f.expr.evaluate(&stretch)?.slice(from - start, len);
        let v = match (prev, f.reach.carry) {
            (Some((p, before)), Some(kind)) if f.reach.carried() => {
                continue_from(kind, own, p, before)?
            }
            _ => own,
        };
        let t = self
            .schema
            .field(self.in_schema.fields().len() + i)
            .data_type();
        Ok(if v.data_type() != t { cast(&v, t)? } else { v })
    }

    /// The window values of the output row `row` (one column each, one row).
    fn window_values_of(&self, row: &[u8]) -> Result<Vec<ArrayRef>> {
        let parser = self.out_conv.parser();
        let cols = self
            .out_conv
            .convert_rows(std::iter::once(parser.parse(row)))?;
        Ok(cols
            .into_iter()
            .skip(self.in_schema.fields().len())
            .collect())
    }

    /// A view that updates: recompute the affected range of a changed partition and
    /// replace what its rows showed.
    fn emit_changed(&mut self, part: &[u8], ch: Changed, diff: &mut Diff) -> Result<()> {
        let Span {
            ahead,
            back_bounded,
            back_all,
            carried,
        } = self.span;
        // the first row whose value may change: its frame reaches the first change
        let (mut first, mut first_sk) = match ahead {
            Some(a) => walk_back(&mut self.rows, part, &ch.min, ch.min_sk, a),
            None => (Vec::new(), 0),
        };
        // functions reading every row before continue from the row before `first`, one
        // stored once (a row stored twice shows two sets of values)
        let mut use_carry = carried;
        let mut prev: Option<(Vec<ArrayRef>, i64)> = None;
        if carried && !first.is_empty() {
            use_carry = false;
            // a partition with few rows before the change is read from its start: cheaper
            // than decoding and continuing the values of the row before
            let hi = joined(part, &first);
            let (mut before, near) = {
                let mut keys = self
                    .rows
                    .range((Bound::Included(part), Bound::Excluded(hi.as_slice())))
                    .rev();
                let before = keys.next().map(|(k, v)| entry(part, k, v));
                (before, keys.take(SHORT_PREFIX).count())
            };
            let tries = if near == SHORT_PREFIX { 8 } else { 0 };
            for i in 0..tries {
                if i > 0 {
                    let hi = joined(part, &first);
                    before = self
                        .rows
                        .range((Bound::Included(part), Bound::Excluded(hi.as_slice())))
                        .next_back()
                        .map(|(k, v)| entry(part, k, v));
                }
                let Some(b) = before.take() else {
                    use_carry = true; // `first` starts the partition
                    break;
                };
                if b.count == 1 {
                    let owner = joined(part, &b.suffix);
                    let shown: Vec<Box<[u8]>> =
                        self.emitted.rows(&owner).map(|(r, _)| r.into()).collect();
                    if let [row] = shown.as_slice() {
                        let values = self.window_values_of(row)?;
                        let before = self.rows_before(part, &b, &values)?;
                        prev = Some((values, before));
                        use_carry = true;
                    }
                    break;
                }
                (first, first_sk) = walk_back(&mut self.rows, part, &b.suffix, b.sk, 0);
            }
        }
        // the last row whose value may change
        let last: Option<(Vec<u8>, usize)> = if back_all {
            None
        } else {
            Some(walk_ahead(
                &mut self.rows,
                part,
                &ch.max,
                ch.max_sk,
                back_bounded,
            ))
        };
        // the rows to read
        let from_start = self
            .funcs
            .iter()
            .any(|f| f.reach.back.is_none() && !(use_carry && f.reach.carried()));
        let in_start = if from_start || first.is_empty() {
            Vec::new()
        } else {
            walk_back(&mut self.rows, part, &first, first_sk, back_bounded).0
        };
        let in_end: Option<Vec<u8>> = match (&last, ahead) {
            (Some((l, l_sk)), Some(a)) => Some(walk_ahead(&mut self.rows, part, l, *l_sk, a).0),
            _ => None,
        };
        let last = last.map(|(l, _)| l);
        let entries = read_entries(&mut self.rows, part, &in_start, in_end.as_deref());
        self.rows_read += entries.len() as u64;
        // entries whose rows are shown anew: [e_first, e_last)
        let e_first = entries.partition_point(|e| *e.suffix < *first);
        let e_last = match &last {
            Some(l) => entries.partition_point(|e| *e.suffix <= **l),
            None => entries.len(),
        };
        let row_at =
            |e: usize| -> usize { entries[..e].iter().map(|x| x.count.max(0) as usize).sum() };
        let (from, to) = (row_at(e_first), row_at(e_last));
        if to > from {
            let batch = self.decode(&entries)?;
            let mut cols: Vec<ArrayRef> = batch
                .columns()
                .iter()
                .map(|c| c.slice(from, to - from))
                .collect();
            for i in 0..self.funcs.len() {
                let f = &self.funcs[i];
                let carry_here = use_carry && f.reach.carried();
                let start = if carry_here { from } else { 0 };
                let p = match (&prev, carry_here) {
                    (Some((values, before)), true) => Some((&values[i], *before)),
                    _ => None,
                };
                cols.push(self.values(i, &batch, start, from, to - from, p)?);
            }
            let out = self.out_conv.convert_columns(&cols)?;
            let mut at = 0usize;
            for e in &entries[e_first..e_last] {
                let n = e.count.max(0) as usize;
                let shown: Vec<&[u8]> = (at..at + n).map(|r| out.row(r).data()).collect();
                at += n;
                let owner = joined(part, &e.suffix);
                self.emitted.replace(&owner, &shown, diff);
            }
        }
        for g in &ch.gone {
            let owner = joined(part, g);
            if self.rows.get(&owner).is_none() {
                self.emitted.replace(&owner, &[], diff);
            }
        }
        Ok(())
    }

    /// Rows before the stretch that starts after `b` (stored once): for `rank`, its rank
    /// less one plus the rows of its peer group up to it.
    fn rows_before(&mut self, part: &[u8], b: &Entry, values: &[ArrayRef]) -> Result<i64> {
        let Some(i) = self
            .funcs
            .iter()
            .position(|f| f.reach.carried() && f.reach.carry == Some(Carry::Rank))
        else {
            return Ok(0);
        };
        let rank = cast(&values[i], &DataType::Int64)?;
        let rank = rank
            .as_any()
            .downcast_ref::<Int64Array>()
            .filter(|a| a.is_valid(0))
            .map(|a| a.value(0))
            .ok_or_else(|| WeirError::internal("over-window: a rank is NULL"))?;
        let hi = joined(part, &b.suffix);
        let mut peers = 0i64;
        for (k, v) in self
            .rows
            .range((Bound::Included(part), Bound::Included(hi.as_slice())))
            .rev()
        {
            let e = entry(part, k, v);
            if e.sort_key() != b.sort_key() {
                break;
            }
            peers += e.count;
        }
        Ok(rank - 1 + peers)
    }

    /// EMIT ON WINDOW CLOSE: show the rows of `part` the watermark has passed, continuing
    /// from what it showed; free the rows no function reads again.
    fn emit_closed(&mut self, part: &[u8], out: &mut Vec<RecordBatch>) -> Result<()> {
        let Some(close) = &mut self.close else {
            return Ok(());
        };
        let Some(limit) = close.limit else {
            return Ok(());
        };
        let keep = close.keep;
        let ts_col = close.ts_col;
        // rows shown, the last one's key, its window values
        let shown = close.shown.get(part).map(|v| {
            let n = v
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(i64::from_le_bytes)
                .unwrap_or(0);
            let len = v
                .get(8..12)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
                .unwrap_or(0) as usize;
            let last: Box<[u8]> = v.get(12..12 + len).unwrap_or_default().into();
            let win: Box<[u8]> = v.get(12 + len..).unwrap_or_default().into();
            (n, last, win)
        });
        let entries: Vec<Entry> = self
            .rows
            .prefix(part)
            .map(|(k, v)| entry(part, k, v))
            .collect();
        self.rows_read += entries.len() as u64;
        let e_new = match &shown {
            Some((_, last, _)) => entries.partition_point(|e| *e.suffix <= **last),
            None => 0,
        };
        let batch = self.decode(&entries)?;
        let from: usize = entries[..e_new]
            .iter()
            .map(|e| e.count.max(0) as usize)
            .sum();
        let ts = micros(batch.column(ts_col))?;
        let ts = ts
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| WeirError::internal("event time is not a timestamp"))?;
        let mut to = from;
        while to < ts.len() && ts.is_valid(to) && ts.value(to) < limit {
            to += 1;
        }
        if to == from {
            return Ok(());
        }
        let prev: Option<(Vec<ArrayRef>, i64)> = match &shown {
            Some((n, _, win)) if *n > 0 => {
                let parser = self.win_conv.parser();
                let values = self
                    .win_conv
                    .convert_rows(std::iter::once(parser.parse(win)))?;
                Some((values, *n))
            }
            _ => None,
        };
        let mut cols: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|c| c.slice(from, to - from))
            .collect();
        for i in 0..self.funcs.len() {
            let carry_here = self.funcs[i].reach.carried() && prev.is_some();
            let start = if carry_here { from } else { 0 };
            let p = match &prev {
                Some((values, n)) if carry_here => Some((&values[i], *n)),
                _ => None,
            };
            cols.push(self.values(i, &batch, start, from, to - from, p)?);
        }
        let n_in = self.in_schema.fields().len();
        let last_values: Vec<ArrayRef> = cols[n_in..]
            .iter()
            .map(|c| c.slice(to - from - 1, 1))
            .collect();
        let win = self.win_conv.convert_columns(&last_values)?;
        out.push(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(to - from)),
        )?);
        // the entry holding the last row shown
        let mut e_end = e_new;
        let mut at = from;
        while e_end < entries.len() && at < to {
            at += entries[e_end].count.max(0) as usize;
            e_end += 1;
        }
        let last = &entries[e_end - 1].suffix;
        let n_shown = shown.as_ref().map_or(0, |s| s.0) + (to - from) as i64;
        let mut v = Vec::with_capacity(12 + last.len() + win.row(0).data().len());
        v.extend_from_slice(&n_shown.to_le_bytes());
        v.extend_from_slice(&(last.len() as u32).to_le_bytes());
        v.extend_from_slice(last);
        v.extend_from_slice(win.row(0).data());
        if let Some(close) = &mut self.close {
            close.shown.put(part, &v);
        }
        // free shown rows beyond the last `keep`
        if let Some(k) = keep {
            let mut kept = 0usize;
            let mut cut = e_end;
            while cut > 0 && kept < k {
                cut -= 1;
                kept += entries[cut].count.max(0) as usize;
            }
            for e in &entries[..cut] {
                self.rows.delete(&joined(part, &e.suffix));
            }
        }
        Ok(())
    }
}

impl Operator for OverWindow {
    fn name(&self) -> &'static str {
        "OverWindow"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.partition_by)
    }

    fn details(&self) -> String {
        self.text.clone()
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.rows.len()
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        match &mut self.close {
            Some(c) => vec![&mut self.rows, &mut c.pending, &mut c.shown],
            None => vec![&mut self.rows, self.emitted.state_table()],
        }
    }

    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let batch = &input.data;
        let parts = key_rows(&self.partition_by, &self.part_conv, batch)?;
        // no ORDER BY (`OVER ()`): every row has the empty sort key
        let sorts = key_rows(&self.sort_by, &self.sort_conv, batch)?;
        let rows = self.row_conv.convert_columns(batch.columns())?;
        let times = match &self.close {
            Some(c) => Some(micros(batch.column(c.ts_col))?),
            None => None,
        };
        let times = times
            .as_ref()
            .and_then(|a| a.as_any().downcast_ref::<TimestampMicrosecondArray>());
        let mut key = Vec::with_capacity(64);
        for (i, w) in input.weights.values().iter().enumerate() {
            let part: &[u8] = parts.as_ref().map_or(&[], |p| p.row(i).data());
            let sk: &[u8] = sorts.as_ref().map_or(&[], |s| s.row(i).data());
            let count = add_row(&mut self.rows, &mut key, part, sk, rows.row(i).data(), *w);
            let suffix = &key[part.len()..];
            if let (Some(c), Some(t)) = (&mut self.close, times) {
                // rows come at or after the limit: those before it are shown already
                let at = t.is_valid(i).then(|| t.value(i));
                if at.is_none_or(|at| c.limit.is_some_and(|l| at < l)) {
                    return Err(WeirError::internal(
                        "EMIT ON WINDOW CLOSE over window functions: a row at or below the watermark changed (its input is not append-only in event time)",
                    ));
                }
                if *w > 0
                    && let Some(at) = at
                {
                    let mut k = i64_key(at).to_vec();
                    k.extend_from_slice(part);
                    c.pending.put(&k, &[]);
                }
                continue;
            }
            match self.changed.get_mut(part) {
                Some(ch) => {
                    if *suffix < *ch.min {
                        ch.min.clear();
                        ch.min.extend_from_slice(suffix);
                        ch.min_sk = sk.len();
                    }
                    if *suffix > *ch.max {
                        ch.max.clear();
                        ch.max.extend_from_slice(suffix);
                        ch.max_sk = sk.len();
                    }
                    if count == 0 {
                        ch.gone.push(suffix.into());
                    }
                }
                None => {
                    let ch = Changed {
                        min: suffix.to_vec(),
                        min_sk: sk.len(),
                        max: suffix.to_vec(),
                        max_sk: sk.len(),
                        gone: if count == 0 {
                            vec![suffix.into()]
                        } else {
                            vec![]
                        },
                    };
                    self.changed.insert(part.into(), ch);
                }
            }
        }
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        let Some(c) = &mut self.close else {
            return Ok(vec![]);
        };
        let limit = watermark.saturating_sub(c.lateness_us);
        if c.limit.is_some_and(|l| limit <= l) {
            return Ok(vec![]);
        }
        c.limit = Some(limit);
        // partitions with rows that close now, shown at once (in partition order)
        let mut due: Vec<Box<[u8]>> = c
            .pending
            .take_up_to(limit.saturating_sub(1))
            .iter()
            .map(|(_, p)| p.into())
            .collect();
        due.sort_unstable();
        due.dedup();
        let mut out = Vec::new();
        for part in due {
            self.emit_closed(&part, &mut out)?;
        }
        if out.is_empty() {
            return Ok(vec![]);
        }
        let batch = concat_batches(&self.schema, &out)?;
        Ok(vec![Changelog::inserts(batch)])
    }

    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        if self.changed.is_empty() {
            return Ok(vec![]);
        }
        let mut changed: Vec<(Box<[u8]>, Changed)> = self.changed.drain().collect();
        changed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut diff = Diff::default();
        for (part, ch) in changed {
            self.emit_changed(&part, ch, &mut diff)?;
        }
        diff.into_changelogs(&self.out_conv, &self.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::changelog::tests::{changelog, rows_of, schema};
    use datafusion::common::DFSchema;
    use datafusion::execution::context::ExecutionProps;
    use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
    use datafusion::logical_expr::{Expr, ExprFunctionExt, col};
    use datafusion::physical_expr::expressions::Column;

    /// `k, v, sum(v), row_number(), lag(v)` OVER (PARTITION BY k ORDER BY v).
    fn operator() -> OverWindow {
        let input = schema("k:i64 v:i64");
        let df = DFSchema::try_from(input.as_ref().clone()).unwrap();
        let over = |e: Expr| {
            e.partition_by(vec![col("k")])
                .order_by(vec![col("v").sort(true, false)])
                .build()
                .unwrap()
        };
        let exprs = [
            (
                over(Expr::from(
                    datafusion::logical_expr::expr::WindowFunction::new(
                        datafusion::functions_aggregate::sum::sum_udaf(),
                        vec![col("v")],
                    ),
                )),
                Reach {
                    back: None,
                    ahead: Some(0),
                    carry: Some(Carry::Add),
                },
            ),
            (
                over(datafusion::functions_window::expr_fn::row_number()),
                Reach {
                    back: None,
                    ahead: Some(0),
                    carry: Some(Carry::Add),
                },
            ),
            (
                over(datafusion::functions_window::expr_fn::lag(
                    col("v"),
                    Some(1),
                    None,
                )),
                Reach {
                    back: Some(1),
                    ahead: Some(0),
                    carry: None,
                },
            ),
        ];
        let funcs: Vec<WindowFn> = exprs
            .into_iter()
            .map(|(e, reach)| WindowFn {
                expr: datafusion::physical_planner::create_window_expr(
                    &e,
                    &df,
                    &ExecutionProps::new(),
                    &PhysicalPlanningContext::default(),
                )
                .unwrap(),
                reach,
            })
            .collect();
        OverWindow::new(
            vec![Arc::new(Column::new("k", 0))],
            vec![DataType::Int64],
            vec![SortKey {
                expr: Arc::new(Column::new("v", 1)),
                data_type: DataType::Int64,
                options: Default::default(),
            }],
            funcs,
            input,
            schema("k:i64 v:i64 s:i64 rn:u64 p:i64"),
            "test".into(),
        )
        .unwrap()
    }

    fn epoch(op: &mut OverWindow, rows: &str) -> Vec<String> {
        op.on_changes(0, changelog("k:i64 v:i64", rows)).unwrap();
        let mut out: Vec<String> = op
            .on_epoch_end()
            .unwrap()
            .iter()
            .flat_map(|c| {
                let w: Vec<i64> = c.weights.values().to_vec();
                rows_of(std::slice::from_ref(&c.data))
                    .into_iter()
                    .zip(w)
                    .map(|(r, w)| format!("{w:+} {r}"))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn an_append_reads_only_its_rows_and_a_change_only_what_follows() {
        let mut op = operator();
        let first: Vec<String> = (1..=100).map(|v| format!("+ 1 {v}")).collect();
        assert_eq!(epoch(&mut op, &first.join(" / ")).len(), 100);
        assert_eq!(op.rows_read, 100);
        // an append continues from the last row's values
        assert_eq!(epoch(&mut op, "+ 1 101"), vec!["+1 1 101 5151 101 100"]);
        assert_eq!(
            op.rows_read, 102,
            "the new row and the one before (for lag) read"
        );
        // deleting row 99 changes row 100 (its sum, number and lag) and 101
        assert_eq!(
            epoch(&mut op, "- 1 99"),
            vec![
                "+1 1 100 4951 99 98",
                "+1 1 101 5052 100 100",
                "-1 1 100 5050 100 99",
                "-1 1 101 5151 101 100",
                "-1 1 99 4950 99 98",
            ]
        );
        assert_eq!(op.rows_read, 105, "rows 98 (for lag), 100 and 101 read");
        // a row stored twice before the change: the range starts at it
        epoch(&mut op, "+ 1 102 / + 1 102");
        let before = op.rows_read;
        assert_eq!(
            epoch(&mut op, "+ 1 103"),
            vec!["+1 1 103 5359 103 102"],
            "continues past the twice-stored row"
        );
        assert!(op.rows_read - before <= 3, "{}", op.rows_read - before);
        // another partition is read on its own
        assert_eq!(epoch(&mut op, "+ 2 5"), vec!["+1 2 5 5 1 NULL"]);
        // a short partition is read from its start (no values continued)
        epoch(&mut op, "+ 3 1 / + 3 2 / + 3 3");
        let before = op.rows_read;
        assert_eq!(epoch(&mut op, "+ 3 4"), vec!["+1 3 4 10 4 3"]);
        assert_eq!(op.rows_read - before, 4);
    }
}
