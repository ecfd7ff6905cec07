//! `Join`: equi-join with an optional residual predicate: inner, left/right/full outer,
//! semi and anti (IN / EXISTS / NOT EXISTS after decorrelation).
//!
//! - input: port 0 = left changes, port 1 = right changes.
//! - output: the change of the join result. A delta on one side is joined with the other
//!   side's current state (the delta rule Δ(L⋈R) = ΔL⋈R + L'⋈ΔR, with L' = L + ΔL because
//!   port 0 is applied before port 1 in an epoch).
//!   Outer joins: each row of a preserved side carries its number of matches; when it goes
//!   from 0 to >0 its NULL-extended row is retracted, from >0 to 0 it is emitted again.
//!   Semi/anti joins emit the preserved side's rows when their match count crosses zero.
//! - state (state tables, per side): `rows`: join key ++ row (`arrow_row`) -> multiplicity,
//!   match count and event time, so a probe is a prefix scan by join key; for interval
//!   joins also `by_time`: event time (order-preserving) ++ join key ++ row, whose range
//!   below the watermark bound is the set of rows to free.
//! - temporal join (`JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`): the right side is a table
//!   looked up when a left row arrives. Right changes update the state and emit nothing
//!   (earlier output is not rewritten). Over an insert-only left input left rows are not
//!   kept; over a left input that retracts (a table with UPDATE/DELETE), what each left row
//!   produced is kept (`emitted`: left row ++ output row -> multiplicity, `left_rows`: left
//!   row -> multiplicity), and a retracted left row retracts exactly that output, whatever
//!   the table holds now.
//! - watermark: an interval join (`l.ts BETWEEN r.ts - X AND r.ts + Y`) frees rows that no
//!   admitted row of the other side can match any more: a left row once
//!   `ts_l - lo < watermark - lateness`, a right row once `ts_r + hi < watermark - lateness`
//!   (with `lo <= ts_l - ts_r <= hi`). Their output stays.
//! - checkpoint: both sides' tables.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, UInt32Array, new_null_array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::JoinType;
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::{Operator, evaluate, true_mask};
use crate::state::state_table::{StateTable, TableDecl, i64_key};

const ROWS: TableDecl = TableDecl {
    name: "rows",
    key: "join key ++ row",
    value: "multiplicity, match count, event time µs (3 x i64 LE)",
    ordered: true,
};
const EMITTED: TableDecl = TableDecl {
    name: "emitted",
    key: "left row ++ output row (temporal join over a retracting left input)",
    value: "multiplicity (i64 LE)",
    ordered: true,
};
const LEFT_ROWS: TableDecl = TableDecl {
    name: "left_rows",
    key: "left row (temporal join over a retracting left input)",
    value: "multiplicity (i64 LE)",
    ordered: false,
};
const BY_TIME: TableDecl = TableDecl {
    name: "by_time",
    key: "event time (order-preserving i64) ++ join key ++ row",
    value: "empty",
    ordered: true,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    mult: i64,
    /// Matching rows of the other side (weighted), kept where the side needs it.
    matches: i64,
    /// Event time of the row (interval joins), µs.
    ts: i64,
}

/// `lo <= ts_left - ts_right <= hi` (µs), from an interval join's condition.
#[derive(Debug, Clone, Copy)]
pub struct IntervalBounds {
    pub left_ts: usize,
    pub right_ts: usize,
    pub lo_us: i64,
    pub hi_us: i64,
    pub lateness_us: i64,
}

impl Entry {
    fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.mult.to_le_bytes());
        b[8..16].copy_from_slice(&self.matches.to_le_bytes());
        b[16..].copy_from_slice(&self.ts.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Entry {
        let at = |i: usize| {
            b.get(i..i + 8)
                .and_then(|x| x.try_into().ok())
                .map(i64::from_le_bytes)
                .unwrap_or(0)
        };
        Entry {
            mult: at(0),
            matches: at(8),
            ts: at(16),
        }
    }
}

/// Rows of a side (or of the output) as arrow-row bytes. arrow-row encodes no rows at all
/// for no columns, so rows of zero columns (a side nothing above reads, as under
/// `count(*)` of a cross join) are encoded as one NULL column each, dropped when decoded.
struct RowCodec {
    conv: RowConverter,
    no_columns: bool,
}

impl RowCodec {
    fn new(fields: &datafusion::arrow::datatypes::Fields) -> Result<RowCodec> {
        let no_columns = fields.is_empty();
        let sort_fields = match no_columns {
            true => vec![SortField::new(DataType::Null)],
            false => fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        };
        Ok(RowCodec {
            conv: RowConverter::new(sort_fields)?,
            no_columns,
        })
    }

    /// The `n` rows of `columns`.
    fn encode(&self, columns: &[ArrayRef], n: usize) -> Result<Rows> {
        Ok(match self.no_columns {
            true => self
                .conv
                .convert_columns(&[Arc::new(datafusion::arrow::array::NullArray::new(n))])?,
            false => self.conv.convert_columns(columns)?,
        })
    }

    fn parser(&self) -> datafusion::arrow::row::RowParser {
        self.conv.parser()
    }

    /// The columns of `rows` (none for rows of zero columns).
    fn decode<'a>(
        &self,
        rows: impl IntoIterator<Item = datafusion::arrow::row::Row<'a>>,
    ) -> Result<Vec<ArrayRef>> {
        let cols = self.conv.convert_rows(rows)?;
        Ok(if self.no_columns { Vec::new() } else { cols })
    }
}

struct Side {
    schema: SchemaRef,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    conv: RowCodec,
    rows: StateTable,
    /// Interval joins only.
    by_time: StateTable,
}

pub struct Join {
    join_type: JoinType,
    nulls_equal: bool,
    temporal: bool,
    /// Temporal join whose left input retracts: what each left row produced, to retract it.
    emitted: Option<Emitted>,
    interval: Option<IntervalBounds>,
    key_conv: RowConverter,
    filter: Option<Arc<dyn PhysicalExpr>>,
    sides: [Side; 2],
    schema: SchemaRef,
    text: String,
}

/// A temporal join's record of its output per left row.
struct Emitted {
    out_conv: RowCodec,
    emitted: StateTable,
    left_rows: StateTable,
}

fn i64_of(b: &[u8]) -> i64 {
    b.get(..8)
        .and_then(|x| x.try_into().ok())
        .map(i64::from_le_bytes)
        .unwrap_or(0)
}

impl Join {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        join_type: JoinType,
        left_schema: SchemaRef,
        right_schema: SchemaRef,
        left_keys: Vec<Arc<dyn PhysicalExpr>>,
        right_keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<DataType>,
        nulls_equal: bool,
        filter: Option<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
        text: String,
    ) -> Result<Join> {
        match join_type {
            JoinType::Inner
            | JoinType::Left
            | JoinType::Right
            | JoinType::Full
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::RightSemi
            | JoinType::RightAnti => {}
            other => {
                return Err(WeirError::not_supported(format!(
                    "{other} join is not supported in materialized views"
                )));
            }
        }
        let side = |schema: SchemaRef, keys| -> Result<Side> {
            Ok(Side {
                conv: RowCodec::new(schema.fields())?,
                schema,
                keys,
                rows: StateTable::new(ROWS),
                by_time: StateTable::new(BY_TIME),
            })
        };
        Ok(Join {
            join_type,
            nulls_equal,
            temporal: false,
            emitted: None,
            interval: None,
            key_conv: RowConverter::new(key_types.into_iter().map(SortField::new).collect())?,
            filter,
            sides: [
                side(left_schema, left_keys)?,
                side(right_schema, right_keys)?,
            ],
            schema,
            text,
        })
    }

    /// Make the right side a table looked up at processing time (inner or left join).
    /// `left_retracts`: the left input may retract rows (then each left row's output is
    /// kept, to retract it exactly).
    pub fn temporal(mut self, left_retracts: bool) -> Result<Self> {
        if !matches!(self.join_type, JoinType::Inner | JoinType::Left) {
            return Err(WeirError::not_supported(
                "a temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) must be an inner or left join with the table on the right",
            ));
        }
        self.temporal = true;
        if left_retracts {
            self.emitted = Some(Emitted {
                out_conv: RowCodec::new(self.schema.fields())?,
                emitted: StateTable::new(EMITTED),
                left_rows: StateTable::new(LEFT_ROWS),
            });
        }
        Ok(self)
    }

    /// A temporal join's left delta over a retracting input: inserted rows are looked up
    /// and their output recorded; retracted rows retract what they produced.
    fn temporal_left(&mut self, input: Changelog) -> Result<Vec<Changelog>> {
        let w = input.weights.values();
        let ins: BooleanArray = w.iter().map(|w| Some(*w > 0)).collect();
        let ret: BooleanArray = w.iter().map(|w| Some(*w < 0)).collect();
        let filter = |m: &BooleanArray| -> Result<Changelog> {
            let data = datafusion::arrow::compute::filter_record_batch(&input.data, m)?;
            let weights = datafusion::arrow::compute::filter(&input.weights, m)?;
            let weights = weights
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| WeirError::internal("weights are not i64"))?
                .clone();
            Ok(Changelog::new(data, weights))
        };
        let mut out = Vec::new();
        // retractions first: a row updated in this epoch retracts its old output, then
        // its new version is looked up
        let retracted = filter(&ret)?;
        if !retracted.is_empty() {
            out.extend(self.temporal_retract(&retracted)?);
        }
        let inserted = filter(&ins)?;
        if !inserted.is_empty() {
            let produced = self.probe(0, &inserted)?;
            self.record_emitted(&inserted, &produced)?;
            out.extend(produced);
        }
        Ok(out)
    }

    fn left_keys(&self, batch: &RecordBatch) -> Result<datafusion::arrow::row::Rows> {
        self.sides[0].conv.encode(batch.columns(), batch.num_rows())
    }

    /// Remember, per left row, the rows its insertion produced.
    fn record_emitted(&mut self, inserted: &Changelog, produced: &[Changelog]) -> Result<()> {
        let left_n = self.sides[0].schema.fields().len();
        let lrows = self.left_keys(&inserted.data)?;
        let Some(em) = self.emitted.as_mut() else {
            return Ok(());
        };
        for (i, r) in lrows.iter().enumerate() {
            let w = inserted.weights.value(i);
            em.left_rows.update(r.data(), |old| {
                let n = old.map(i64_of).unwrap_or(0) + w;
                (n != 0).then(|| n.to_le_bytes())
            });
        }
        let mut key = Vec::new();
        for cl in produced {
            let left_cols: Vec<ArrayRef> = cl.data.columns()[..left_n].to_vec();
            let lk = self.sides[0].conv.encode(&left_cols, cl.len())?;
            let Some(em) = self.emitted.as_mut() else {
                return Ok(());
            };
            let ok = em.out_conv.encode(cl.data.columns(), cl.len())?;
            for i in 0..cl.len() {
                key.clear();
                key.extend_from_slice(lk.row(i).data());
                key.extend_from_slice(ok.row(i).data());
                let w = cl.weights.value(i);
                em.emitted.update(&key, |old| {
                    let n = old.map(i64_of).unwrap_or(0) + w;
                    (n != 0).then(|| n.to_le_bytes())
                });
            }
        }
        Ok(())
    }

    /// Retract what retracted left rows produced: for a row held n times, each copy
    /// retracts 1/n of its recorded output.
    fn temporal_retract(&mut self, retracted: &Changelog) -> Result<Vec<Changelog>> {
        let lrows = self.left_keys(&retracted.data)?;
        let Some(em) = self.emitted.as_mut() else {
            return Ok(vec![]);
        };
        let mut out_rows: Vec<Vec<u8>> = Vec::new();
        let mut out_w: Vec<i64> = Vec::new();
        for (i, r) in lrows.iter().enumerate() {
            let lk = r.data();
            let gone = -retracted.weights.value(i); // > 0 copies
            let held = em.left_rows.get(lk).map(i64_of).unwrap_or(0);
            if held <= 0 {
                continue;
            }
            let outputs: Vec<(Vec<u8>, i64)> = em
                .emitted
                .prefix(lk)
                .map(|(k, v)| (k.to_vec(), i64_of(v)))
                .collect();
            for (k, m) in outputs {
                let take = if gone >= held { m } else { m * gone / held };
                if take == 0 {
                    continue;
                }
                out_rows.push(k[lk.len()..].to_vec());
                out_w.push(-take);
                let left = m - take;
                if left == 0 {
                    em.emitted.delete(&k);
                } else {
                    em.emitted.put(&k, &left.to_le_bytes());
                }
            }
            let n = held - gone;
            if n <= 0 {
                em.left_rows.delete(lk);
            } else {
                em.left_rows.put(lk, &n.to_le_bytes());
            }
        }
        if out_rows.is_empty() {
            return Ok(vec![]);
        }
        let parser = em.out_conv.parser();
        let cols = em
            .out_conv
            .decode(out_rows.iter().map(|r| parser.parse(r)))?;
        Ok(vec![Changelog::new(
            RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(out_rows.len())),
            )?,
            Int64Array::from(out_w),
        )])
    }

    /// Free state by the watermark, given the join's time bounds.
    pub fn with_interval(mut self, bounds: IntervalBounds) -> Self {
        self.interval = Some(bounds);
        self
    }

    /// Whether rows of `side` (0 left, 1 right) appear NULL-extended when unmatched.
    fn preserved(&self, side: usize) -> bool {
        matches!(
            (self.join_type, side),
            (JoinType::Left, 0) | (JoinType::Right, 1) | (JoinType::Full, _)
        )
    }

    /// The side whose rows a semi/anti join outputs, and whether it is anti.
    fn filtering(&self) -> Option<(usize, bool)> {
        match self.join_type {
            JoinType::LeftSemi => Some((0, false)),
            JoinType::LeftAnti => Some((0, true)),
            JoinType::RightSemi => Some((1, false)),
            JoinType::RightAnti => Some((1, true)),
            _ => None,
        }
    }

    fn tracks_matches(&self, side: usize) -> bool {
        self.preserved(side) || self.filtering().is_some_and(|(s, _)| s == side)
    }

    /// Output rows of a semi/anti join, or pairs of an inner/outer join.
    fn pairs_output(&self) -> bool {
        self.filtering().is_none()
    }

    /// Rows of `side` as output: alone (semi/anti), or NULL-extended on the other side.
    fn side_rows_output(&self, side: usize, cols: Vec<ArrayRef>, n: usize) -> Result<RecordBatch> {
        let cols = if self.pairs_output() {
            let other = &self.sides[1 - side].schema;
            let nulls: Vec<ArrayRef> = other
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n))
                .collect();
            if side == 0 {
                cols.into_iter().chain(nulls).collect()
            } else {
                nulls.into_iter().chain(cols).collect()
            }
        } else {
            cols
        };
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

fn take_all(cols: &[ArrayRef], idx: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(cols
        .iter()
        .map(|c| take(c, idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

impl Operator for Join {
    fn name(&self) -> &'static str {
        "Join"
    }

    fn sharding(&self, port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.sides[port].keys)
    }

    fn details(&self) -> String {
        let mut t = self.text.clone();
        if self.temporal {
            t.push_str(" [temporal: right side looked up at processing time]");
        }
        if let Some(b) = &self.interval {
            t.push_str(&format!(
                " [interval: {}us <= left.ts - right.ts <= {}us, state freed by watermark]",
                b.lo_us, b.hi_us
            ));
        }
        t
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.sides[0].rows.len()
            + self.sides[1].rows.len()
            + self.emitted.as_ref().map(|e| e.emitted.len()).unwrap_or(0)
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        let interval = self.interval.is_some();
        let mut t = Vec::new();
        for side in self.sides.iter_mut() {
            t.push(&mut side.rows);
            if interval {
                t.push(&mut side.by_time);
            }
        }
        if let Some(em) = self.emitted.as_mut() {
            t.push(&mut em.emitted);
            t.push(&mut em.left_rows);
        }
        t
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        let Some(b) = self.interval else {
            return Ok(vec![]);
        };
        let limit = watermark.saturating_sub(b.lateness_us);
        // left rows match right rows with ts_r >= ts_l - hi and <= ts_l - lo: a left row is
        // dead once ts_l - lo < limit, a right row once ts_r + hi < limit
        let thresholds = [limit.saturating_add(b.lo_us), limit.saturating_sub(b.hi_us)];
        for (st, below) in self.sides.iter_mut().zip(thresholds) {
            if below == i64::MIN {
                continue;
            }
            let freed = st.by_time.take_up_to(below - 1);
            for (_, k) in freed.iter() {
                st.rows.delete(k);
            }
        }
        Ok(vec![])
    }

    fn on_changes(&mut self, port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        if self.temporal && port == 1 {
            // the looked-up table changed: remember, emit nothing
            let (_, keys) = self.key_rows(port, &input.data)?;
            return self
                .fold_into_state(port, &input, None, keys.as_ref())
                .map(|_| vec![]);
        }
        if self.temporal && self.emitted.is_some() {
            return self.temporal_left(input);
        }
        self.probe(port, &input)
    }
}

impl Join {
    /// Join a delta on `port` with the other side's state, update match counts and fold
    /// the delta into its side's state: the delta rule.
    fn probe(&mut self, port: usize, input: &Changelog) -> Result<Vec<Changelog>> {
        let (me, other) = (port, 1 - port);
        let batch = &input.data;
        let weights = input.weights.values();
        let n = batch.num_rows();
        // evaluated and encoded once: probing and folding into state both use them
        let (key_cols, keys) = self.key_rows(me, batch)?;
        let key_has_null: Vec<bool> = (0..n)
            .map(|i| key_cols.iter().any(|c| c.is_null(i)))
            .collect();
        let key_of = |i: usize| -> &[u8] {
            match &keys {
                Some(k) => k.row(i).data(),
                None => &[],
            }
        };

        // candidate pairs: (delta row, other-side row); the other rows' bytes are copied
        // into one buffer so the other side can be updated below
        let mut cand_delta: Vec<u32> = Vec::new();
        let mut cand_buf: Vec<u8> = Vec::new();
        let mut cand_end: Vec<usize> = Vec::new();
        let mut cand_mult: Vec<i64> = Vec::new();
        // an interval join only pairs rows whose times are within its bounds: skip the
        // others before materializing them (the filter still decides exactly)
        let delta_ts = self.interval_ts(me, batch);
        let time_bounds = self.interval.map(|b| (b.lo_us, b.hi_us));
        for (i, has_null) in key_has_null.iter().enumerate() {
            if *has_null && !self.nulls_equal {
                continue;
            }
            let t = match &delta_ts {
                Some(a) if a.is_null(i) => continue,
                Some(a) => Some(a.value(i)),
                None => None,
            };
            let key = key_of(i);
            for (k, e) in self.sides[other].rows.prefix(key) {
                let row = &k[key.len()..];
                let e = Entry::decode(e);
                if let (Some(t), Some((lo, hi))) = (t, time_bounds) {
                    // stored rows without a time are kept as i64::MAX and match nothing
                    if e.ts == i64::MAX {
                        continue;
                    }
                    let d = if me == 0 { t - e.ts } else { e.ts - t };
                    if d < lo || d > hi {
                        continue;
                    }
                }
                cand_delta.push(i as u32);
                cand_buf.extend_from_slice(row);
                cand_end.push(cand_buf.len());
                cand_mult.push(e.mult);
            }
        }
        let cand_row = |k: usize| -> &[u8] {
            let start = if k == 0 { 0 } else { cand_end[k - 1] };
            &cand_buf[start..cand_end[k]]
        };

        let mut out: Vec<Changelog> = Vec::new();
        let mut delta_matches = vec![0i64; n];
        // (delta row, entry index, passes)
        let mut passing: Vec<bool> = vec![true; cand_delta.len()];
        if !cand_delta.is_empty() {
            let idx = UInt32Array::from(cand_delta.clone());
            let mine = take_all(batch.columns(), &idx)?;
            let parser = self.sides[other].conv.parser();
            let theirs = self.sides[other]
                .conv
                .decode((0..cand_delta.len()).map(|k| parser.parse(cand_row(k))))?;
            let (left_cols, right_cols) = if me == 0 {
                (mine, theirs)
            } else {
                (theirs, mine)
            };
            let joined_cols: Vec<ArrayRef> = left_cols.into_iter().chain(right_cols).collect();
            if let Some(f) = &self.filter {
                let joined = RecordBatch::try_new_with_options(
                    joined_schema(&self.sides[0].schema, &self.sides[1].schema),
                    joined_cols.clone(),
                    &RecordBatchOptions::new().with_row_count(Some(cand_delta.len())),
                )?;
                let m = evaluate(f, &joined)?;
                let m = m
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| WeirError::internal("join filter is not boolean"))?;
                let m = true_mask(m);
                for (k, p) in passing.iter_mut().enumerate() {
                    *p = m.value(k);
                }
            }
            if self.pairs_output() {
                let keep: Vec<u32> = (0..cand_delta.len() as u32)
                    .filter(|k| passing[*k as usize])
                    .collect();
                if !keep.is_empty() {
                    let kidx = UInt32Array::from(keep.clone());
                    let cols = take_all(&joined_cols, &kidx)?;
                    let w: Int64Array = keep
                        .iter()
                        .map(|k| weights[cand_delta[*k as usize] as usize] * cand_mult[*k as usize])
                        .collect();
                    out.push(Changelog::new(
                        RecordBatch::try_new_with_options(
                            self.schema.clone(),
                            cols,
                            &RecordBatchOptions::new().with_row_count(Some(keep.len())),
                        )?,
                        w,
                    ));
                }
            }
        }

        // match counts: the delta rows' own, and transitions of the other side's rows
        let track_other = self.tracks_matches(other);
        let mut flips: Vec<(Box<[u8]>, i64)> = Vec::new(); // other-side rows to emit, weight
        let mut state_key: Vec<u8> = Vec::new();
        {
            let filtering = self.filtering();
            let preserved_other = self.preserved(other);
            for k in 0..cand_delta.len() {
                if !passing[k] {
                    continue;
                }
                let i = cand_delta[k] as usize;
                delta_matches[i] += cand_mult[k];
                if !track_other {
                    continue;
                }
                let row = cand_row(k);
                state_key.clear();
                state_key.extend_from_slice(key_of(i));
                state_key.extend_from_slice(row);
                let mut found: Option<Entry> = None;
                self.sides[other].rows.update(&state_key, |old| {
                    let mut e = Entry::decode(old?);
                    e.matches += weights[i];
                    found = Some(e);
                    Some(e.encode())
                });
                let Some(e) = found else {
                    return Err(WeirError::internal(
                        "join candidate row is not in the other side's state",
                    ));
                };
                let before = e.matches - weights[i];
                let after = e.matches;
                if (before == 0) == (after == 0) {
                    continue;
                }
                // the row went matched <-> unmatched
                let became_matched = before == 0;
                let w = match filtering {
                    Some((_, anti)) => {
                        if became_matched != anti {
                            e.mult
                        } else {
                            -e.mult
                        }
                    }
                    None if preserved_other => {
                        if became_matched {
                            -e.mult
                        } else {
                            e.mult
                        }
                    }
                    None => 0,
                };
                if w != 0 {
                    flips.push((row.into(), w));
                }
            }
        }
        if !flips.is_empty() {
            let parser = self.sides[other].conv.parser();
            let cols = self.sides[other]
                .conv
                .decode(flips.iter().map(|(r, _)| parser.parse(r)))?;
            let b = self.side_rows_output(other, cols, flips.len())?;
            out.push(Changelog::new(
                b,
                flips.iter().map(|(_, w)| *w).collect::<Int64Array>(),
            ));
        }

        // the delta rows themselves, where their side is preserved or filtered
        let own: Option<bool> = match self.filtering() {
            Some((s, anti)) if s == me => Some(anti),
            Some(_) => None,
            None if self.preserved(me) => Some(true), // NULL-extend the unmatched ones
            None => None,
        };
        if let Some(want_unmatched) = own {
            let sel: Vec<u32> = (0..n as u32)
                .filter(|i| (delta_matches[*i as usize] == 0) == want_unmatched)
                .collect();
            if !sel.is_empty() {
                let idx = UInt32Array::from(sel.clone());
                let cols = take_all(batch.columns(), &idx)?;
                let b = self.side_rows_output(me, cols, sel.len())?;
                out.push(Changelog::new(
                    b,
                    sel.iter()
                        .map(|i| weights[*i as usize])
                        .collect::<Int64Array>(),
                ));
            }
        }

        // fold the delta into this side's state (a temporal join keeps no left rows)
        if !(self.temporal && me == 0) {
            self.fold_into_state(me, input, Some(&delta_matches), keys.as_ref())?;
        }
        Ok(out)
    }
}

impl Join {
    /// The event times of a delta on side `me` of an interval join, as µs.
    fn interval_ts(
        &self,
        me: usize,
        batch: &RecordBatch,
    ) -> Option<datafusion::arrow::array::TimestampMicrosecondArray> {
        self.interval.and_then(|b| {
            let col = if me == 0 { b.left_ts } else { b.right_ts };
            datafusion::arrow::compute::cast(
                batch.column(col),
                &DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None),
            )
            .ok()
            .and_then(|a| {
                a.as_any()
                    .downcast_ref::<datafusion::arrow::array::TimestampMicrosecondArray>()
                    .cloned()
            })
        })
    }

    /// A delta's join-key columns on side `me` and their row encoding (None for a cross
    /// join: every row has the empty key).
    fn key_rows(&self, me: usize, batch: &RecordBatch) -> Result<(Vec<ArrayRef>, Option<Rows>)> {
        let key_cols = self.sides[me]
            .keys
            .iter()
            .map(|k| evaluate(k, batch))
            .collect::<Result<Vec<_>>>()?;
        let keys = if key_cols.is_empty() {
            None
        } else {
            Some(self.key_conv.convert_columns(&key_cols)?)
        };
        Ok((key_cols, keys))
    }

    /// Add a delta to one side's state, with each row's match count when it is tracked;
    /// `keys` are the delta's [`Join::key_rows`].
    fn fold_into_state(
        &mut self,
        me: usize,
        input: &Changelog,
        delta_matches: Option<&[i64]>,
        keys: Option<&Rows>,
    ) -> Result<()> {
        let batch = &input.data;
        let weights = input.weights.values();
        let rows = self.sides[me]
            .conv
            .encode(batch.columns(), batch.num_rows())?;
        let ts = self.interval_ts(me, batch);
        let track_me = self.tracks_matches(me);
        let interval = self.interval.is_some();
        let side = &mut self.sides[me];
        let mut buf: Vec<u8> = Vec::with_capacity(64);
        for (i, w) in weights.iter().enumerate() {
            let key: &[u8] = match keys {
                Some(k) => k.row(i).data(),
                None => &[],
            };
            let row = rows.row(i).data();
            let matches = match (track_me, delta_matches) {
                (true, Some(m)) => m[i],
                _ => 0,
            };
            let t = match &ts {
                Some(a) if a.is_valid(i) => a.value(i),
                Some(_) => i64::MAX,
                None => 0,
            };
            // one buffer: 8 bytes of event time, then the rows-table key
            buf.clear();
            buf.extend_from_slice(&[0; 8]);
            buf.extend_from_slice(key);
            buf.extend_from_slice(row);
            let k = &buf[8..];
            let mut e = Entry {
                mult: *w,
                matches,
                ts: t,
            };
            side.rows.update(k, |old| {
                if let Some(old) = old.map(Entry::decode) {
                    e.mult += old.mult;
                    e.ts = old.ts;
                    if !track_me {
                        e.matches = old.matches;
                    }
                }
                (e.mult != 0).then(|| e.encode())
            });
            if interval {
                buf[..8].copy_from_slice(&i64_key(e.ts));
                if e.mult == 0 {
                    side.by_time.delete(&buf);
                } else {
                    side.by_time.put(&buf, &[]);
                }
            }
        }
        Ok(())
    }
}

/// Left columns then right columns, all nullable (the filter's input).
fn joined_schema(left: &SchemaRef, right: &SchemaRef) -> SchemaRef {
    Arc::new(datafusion::arrow::datatypes::Schema::new(
        left.fields()
            .iter()
            .chain(right.fields().iter())
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}
