//! `AsofJoin`: `a ASOF [LEFT] JOIN b ON a.k = b.k AND a.ts >= b.ts` (`plan/asof.rs` has the
//! semantics): each `a` row pairs with the `b` rows of its key at the latest `b.ts` at or
//! before its own (`>`: before; `<=` / `<`: the earliest at or after / after).
//!
//! - input: port 0 = `a` (left) changes, port 1 = `b` (right) changes.
//! - output: the change of the join. ASOF is linear in `a`: an `a` delta is matched
//!   against `b` as it stands. It is not linear in `b`: a `b` change at time `t` can only
//!   change the match of the `a` rows of its key between `t` and the next `b` time beyond
//!   it (for `>=`: `[t, next)`; `>`: `(t, next]`; `<=`: `(prev, t]`; `<`: `[prev, t)`,
//!   bounds taken from `b` before the change); those rows' old pairs are retracted and
//!   their new ones emitted (only where they differ). So after each delta the output
//!   equals ASOF(a, b) over the state, whichever side comes first in an epoch.
//!   `a` rows with a NULL key or time never match (LEFT: NULL-extended, no state kept);
//!   `b` rows with a NULL key or time are ignored.
//! - state (state tables, per side): `rows`: join key ++ time (order-preserving i64) ++
//!   row -> multiplicity, so the match of an `a` row is one reverse (or forward) range
//!   read from its key and time, and the `a` rows a `b` change reaches are one range read.
//!   With watermark freeing also `by_time`: time ++ rows key -> join key length.
//!   Times are i64: integers as they are, timestamps and dates as µs since the epoch.
//! - watermark: when both inputs only insert and both times are the view's watermarked
//!   column, rows no admitted change can reach are freed (their output stays): for `>=` /
//!   `>`, `a` rows below `watermark - lateness` (no `b` change can reach them) and, per
//!   key, `b` rows older than the latest `b` row below that limit (no future `a` row can
//!   pick them); for `<=` / `<`, `a` rows below the limit that have a match below it, then
//!   every `b` row below it. `a` rows still waiting for a later `b` row are kept.
//! - checkpoint: the four tables.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, new_null_array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Int64Type, SchemaRef, TimeUnit, TimestampMicrosecondType,
};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::{Operator, evaluate};
use crate::state::state_table::{StateTable, TableDecl, i64_key, i64_of_key, prefix_end};
use datafusion::logical_expr::Operator as BinaryOp;

/// How `a.time` compares with the `b.time` of its match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum AsofOp {
    /// `a.ts >= b.ts`: the latest b at or before a.
    AtOrBefore,
    /// `a.ts > b.ts`: the latest b strictly before a.
    Before,
    /// `a.ts <= b.ts`: the earliest b at or after a.
    AtOrAfter,
    /// `a.ts < b.ts`: the earliest b strictly after a.
    After,
}

impl AsofOp {
    pub fn of(op: BinaryOp) -> Option<AsofOp> {
        Some(match op {
            BinaryOp::GtEq => AsofOp::AtOrBefore,
            BinaryOp::Gt => AsofOp::Before,
            BinaryOp::LtEq => AsofOp::AtOrAfter,
            BinaryOp::Lt => AsofOp::After,
            _ => return None,
        })
    }

    pub fn operator(self) -> BinaryOp {
        match self {
            AsofOp::AtOrBefore => BinaryOp::GtEq,
            AsofOp::Before => BinaryOp::Gt,
            AsofOp::AtOrAfter => BinaryOp::LtEq,
            AsofOp::After => BinaryOp::Lt,
        }
    }

    /// Whether the match is the latest `b` (else the earliest).
    pub fn latest(self) -> bool {
        matches!(self, AsofOp::AtOrBefore | AsofOp::Before)
    }

    /// Whether a `b` row at the `a` row's own time can match.
    pub fn inclusive(self) -> bool {
        matches!(self, AsofOp::AtOrBefore | AsofOp::AtOrAfter)
    }
}

const LEFT_ROWS: TableDecl = TableDecl {
    name: "left_rows",
    key: "join key ++ time (order-preserving i64) ++ row",
    value: "multiplicity (i64 LE)",
    ordered: true,
};
const RIGHT_ROWS: TableDecl = TableDecl {
    name: "right_rows",
    key: "join key ++ time (order-preserving i64) ++ row",
    value: "multiplicity (i64 LE)",
    ordered: true,
};
const LEFT_BY_TIME: TableDecl = TableDecl {
    name: "left_by_time",
    key: "time ++ left_rows key",
    value: "join key length (u32 LE)",
    ordered: true,
};
const RIGHT_BY_TIME: TableDecl = TableDecl {
    name: "right_by_time",
    key: "time ++ right_rows key",
    value: "join key length (u32 LE)",
    ordered: true,
};

/// Whether a time expression's type can be an ASOF join's time.
pub fn time_type_supported(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
    )
}

/// Times as i64: integers as they are, timestamps and dates as µs (UTC).
pub(crate) fn times(a: &ArrayRef) -> Result<Int64Array> {
    let micros = |a: &ArrayRef, tz| -> Result<Int64Array> {
        let c = cast(a, &DataType::Timestamp(TimeUnit::Microsecond, tz))?;
        let p = c.as_primitive::<TimestampMicrosecondType>();
        Ok(Int64Array::new(p.values().clone(), p.nulls().cloned()))
    };
    match a.data_type() {
        DataType::Timestamp(_, tz) => micros(a, tz.clone()),
        DataType::Date32 | DataType::Date64 => micros(a, None),
        t if time_type_supported(t) => Ok(cast(a, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .clone()),
        t => Err(WeirError::not_supported(format!(
            "cannot compare times of type {t}"
        ))),
    }
}

fn i64_of(b: &[u8]) -> i64 {
    b.get(..8)
        .and_then(|x| x.try_into().ok())
        .map(i64::from_le_bytes)
        .unwrap_or(0)
}

fn u32_of(b: &[u8]) -> usize {
    b.get(..4)
        .and_then(|x| x.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0) as usize
}

/// `key ++ i64_key(t)`.
fn at(key: &[u8], t: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 8);
    k.extend_from_slice(key);
    k.extend_from_slice(&i64_key(t));
    k
}

/// The end of a join key's entries (exclusive), or unbounded for the empty key.
fn key_end(key: &[u8]) -> Bound<Vec<u8>> {
    match prefix_end(key) {
        Some(e) if !key.is_empty() => Bound::Excluded(e),
        _ => Bound::Unbounded,
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

struct Side {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    time: Arc<dyn PhysicalExpr>,
    conv: RowConverter,
    rows: StateTable,
    by_time: StateTable,
}

/// One delta, evaluated: per row its join key (None: a NULL in it), time and row bytes.
struct Prepared {
    keys: Option<Rows>,
    key_null: Vec<bool>,
    times: Int64Array,
    rows: Rows,
}

impl Prepared {
    fn key(&self, i: usize) -> Option<&[u8]> {
        if self.key_null[i] || self.times.is_null(i) {
            return None;
        }
        Some(match &self.keys {
            Some(k) => k.row(i).data(),
            None => &[],
        })
    }
}

/// A row's matches: the `b` time picked and the rows there, with multiplicities.
type Matches = Vec<(Box<[u8]>, i64)>;

/// A range of state keys.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// An output pair as row bytes: (a row, b row, weight).
type Pair = (Box<[u8]>, Box<[u8]>, i64);

/// Output being collected, as row bytes.
#[derive(Default)]
struct Collect {
    pairs: Vec<Pair>,
    /// (a row, weight): NULL-extended
    alone: Vec<(Box<[u8]>, i64)>,
}

pub struct AsofJoin {
    op: AsofOp,
    left_outer: bool,
    key_conv: Option<RowConverter>,
    sides: [Side; 2],
    schema: SchemaRef,
    right_fields: usize,
    text: String,
    /// Allowed lateness (µs) when the watermark frees state.
    free: Option<i64>,
    /// The limit up to which right rows were last swept.
    swept: i64,
}

impl AsofJoin {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        op: AsofOp,
        left_outer: bool,
        left_schema: SchemaRef,
        right_schema: SchemaRef,
        left_keys: Vec<Arc<dyn PhysicalExpr>>,
        right_keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<DataType>,
        times: [Arc<dyn PhysicalExpr>; 2],
        schema: SchemaRef,
        text: String,
    ) -> Result<AsofJoin> {
        let conv = |s: &SchemaRef| {
            RowConverter::new(
                s.fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        let [lt, rt] = times;
        let right_fields = right_schema.fields().len();
        Ok(AsofJoin {
            op,
            left_outer,
            key_conv: if key_types.is_empty() {
                None
            } else {
                Some(RowConverter::new(
                    key_types.into_iter().map(SortField::new).collect(),
                )?)
            },
            sides: [
                Side {
                    keys: left_keys,
                    time: lt,
                    conv: conv(&left_schema)?,
                    rows: StateTable::new(LEFT_ROWS),
                    by_time: StateTable::new(LEFT_BY_TIME),
                },
                Side {
                    keys: right_keys,
                    time: rt,
                    conv: conv(&right_schema)?,
                    rows: StateTable::new(RIGHT_ROWS),
                    by_time: StateTable::new(RIGHT_BY_TIME),
                },
            ],
            schema,
            right_fields,
            text,
            free: None,
            swept: i64::MIN,
        })
    }

    /// Free state by the watermark (both inputs insert-only, both times the watermarked
    /// column), with the view's allowed lateness.
    pub fn freeing_by_watermark(mut self, lateness_us: i64) -> Self {
        self.free = Some(lateness_us);
        self
    }

    fn prepare(&self, side: usize, batch: &RecordBatch) -> Result<Prepared> {
        let s = &self.sides[side];
        let key_cols = s
            .keys
            .iter()
            .map(|k| evaluate(k, batch))
            .collect::<Result<Vec<_>>>()?;
        let n = batch.num_rows();
        let key_null = (0..n)
            .map(|i| key_cols.iter().any(|c| c.is_null(i)))
            .collect();
        let keys = match &self.key_conv {
            Some(c) => Some(c.convert_columns(&key_cols)?),
            None => None,
        };
        Ok(Prepared {
            keys,
            key_null,
            times: times(&evaluate(&s.time, batch)?)?,
            rows: s.conv.convert_columns(batch.columns())?,
        })
    }

    /// The time of the right rows an `a` row of key `key` at time `t` pairs with: the
    /// latest (earliest) right time the comparison admits.
    fn match_time(&mut self, key: &[u8], t: i64) -> Option<i64> {
        let rows = &mut self.sides[1].rows;
        let time_of = |k: &[u8]| i64_of_key(&k[key.len()..]);
        if self.op.latest() {
            // right times up to t (inclusive) or below it
            let hi = match (self.op.inclusive(), t.checked_add(1)) {
                (true, Some(t1)) => Bound::Excluded(at(key, t1)),
                (true, None) => key_end(key),
                (false, _) => Bound::Excluded(at(key, t)),
            };
            rows.range((Bound::Included(key), as_ref(&hi)))
                .next_back()
                .map(|(k, _)| time_of(k))
        } else {
            // right times from t (inclusive) or above it
            let lo = if self.op.inclusive() {
                at(key, t)
            } else {
                at(key, t.checked_add(1)?)
            };
            let hi = key_end(key);
            rows.range((Bound::Included(lo.as_slice()), as_ref(&hi)))
                .next()
                .map(|(k, _)| time_of(k))
        }
    }

    /// The right rows an `a` row of key `key` at time `t` pairs with.
    fn matches(&mut self, key: &[u8], t: i64) -> Matches {
        let Some(best) = self.match_time(key, t) else {
            return Vec::new();
        };
        let prefix = at(key, best);
        self.sides[1]
            .rows
            .prefix(&prefix)
            .map(|(k, v)| (k[prefix.len()..].into(), i64_of(v)))
            .collect()
    }

    /// The range of left-rows keys a right change at (`key`, `t`) can reach, from the
    /// right rows as they are before it.
    fn reach(&mut self, key: &[u8], t: i64) -> Option<KeyRange> {
        let rows = &mut self.sides[1].rows;
        if self.op.latest() {
            // up to the next right time beyond t
            let next = match t.checked_add(1) {
                Some(t1) => {
                    let lo = at(key, t1);
                    let hi = key_end(key);
                    rows.range((Bound::Included(lo.as_slice()), as_ref(&hi)))
                        .next()
                        .map(|(k, _)| i64_of_key(&k[key.len()..]))
                }
                None => None,
            };
            let lo = if self.op.inclusive() {
                Bound::Included(at(key, t))
            } else {
                match t.checked_add(1) {
                    Some(t1) => Bound::Included(at(key, t1)),
                    None => return None,
                }
            };
            let hi = match next {
                // `>=`: [t, next); `>`: (t, next]
                Some(nx) if self.op.inclusive() => Bound::Excluded(at(key, nx)),
                Some(nx) => match nx.checked_add(1) {
                    Some(n1) => Bound::Excluded(at(key, n1)),
                    None => key_end(key),
                },
                None => key_end(key),
            };
            Some((lo, hi))
        } else {
            // down to the previous right time before t
            let before = at(key, t);
            let prev = rows
                .range((Bound::Included(key), Bound::Excluded(before.as_slice())))
                .next_back()
                .map(|(k, _)| i64_of_key(&k[key.len()..]));
            let lo = match prev {
                // `<=`: (prev, t]; `<`: [prev, t)
                Some(p) if self.op.inclusive() => Bound::Included(at(key, p.saturating_add(1))),
                Some(p) => Bound::Included(at(key, p)),
                None => Bound::Included(key.to_vec()),
            };
            let hi = if self.op.inclusive() {
                match t.checked_add(1) {
                    Some(t1) => Bound::Excluded(at(key, t1)),
                    None => key_end(key),
                }
            } else {
                Bound::Excluded(before)
            };
            Some((lo, hi))
        }
    }

    /// Emit `w` times the pairs of one left row (or it NULL-extended).
    fn emit(&self, out: &mut Collect, a_row: &[u8], matches: &Matches, w: i64) {
        if matches.is_empty() {
            if self.left_outer {
                out.alone.push((a_row.into(), w));
            }
            return;
        }
        for (b, m) in matches {
            out.pairs.push((a_row.into(), b.clone(), w * m));
        }
    }

    /// Add a delta to one side's rows (and time index).
    fn fold(&mut self, side: usize, key: &[u8], t: i64, row: &[u8], w: i64) {
        let free = self.free.is_some();
        let s = &mut self.sides[side];
        let mut k = at(key, t);
        k.extend_from_slice(row);
        let (_, after) = s.rows.add_count(&k, w);
        if free {
            let mut tk = i64_key(t).to_vec();
            tk.extend_from_slice(&k);
            if after == 0 {
                s.by_time.delete(&tk);
            } else {
                s.by_time.put(&tk, &(key.len() as u32).to_le_bytes());
            }
        }
    }

    fn left_delta(&mut self, input: &Changelog) -> Result<Collect> {
        let p = self.prepare(0, &input.data)?;
        let mut out = Collect::default();
        for (i, w) in input.weights.values().iter().enumerate() {
            let row = p.rows.row(i).data();
            let Some(key) = p.key(i) else {
                if self.left_outer {
                    out.alone.push((row.into(), *w));
                }
                continue;
            };
            let t = p.times.value(i);
            let m = self.matches(key, t);
            self.emit(&mut out, row, &m, *w);
            self.fold(0, key, t, row, *w);
        }
        Ok(out)
    }

    fn right_delta(&mut self, input: &Changelog) -> Result<Collect> {
        let p = self.prepare(1, &input.data)?;
        // the left rows the delta can reach: left_rows key -> (key length, multiplicity)
        let mut reached: BTreeMap<Box<[u8]>, (usize, i64)> = BTreeMap::new();
        for i in 0..input.len() {
            let Some(key) = p.key(i) else { continue };
            let Some(range) = self.reach(key, p.times.value(i)) else {
                continue;
            };
            for (k, v) in self.sides[0]
                .rows
                .range((as_ref(&range.0), as_ref(&range.1)))
            {
                reached.insert(k.into(), (key.len(), i64_of(v)));
            }
        }
        let before: Vec<Matches> = reached
            .iter()
            .map(|(k, (kl, _))| self.matches(&k[..*kl], i64_of_key(&k[*kl..])))
            .collect();
        for (i, w) in input.weights.values().iter().enumerate() {
            let Some(key) = p.key(i) else { continue };
            self.fold(1, key, p.times.value(i), p.rows.row(i).data(), *w);
        }
        let mut out = Collect::default();
        for ((k, (kl, m)), old) in reached.iter().zip(before) {
            let new = self.matches(&k[..*kl], i64_of_key(&k[*kl..]));
            if new == old {
                continue;
            }
            let row = &k[*kl + 8..];
            self.emit(&mut out, row, &old, -m);
            self.emit(&mut out, row, &new, *m);
        }
        Ok(out)
    }

    fn output(&self, out: Collect) -> Result<Vec<Changelog>> {
        let mut batches = Vec::new();
        let [l, r] = &self.sides;
        if !out.pairs.is_empty() {
            let lp = l.conv.parser();
            let rp = r.conv.parser();
            let mut cols = l
                .conv
                .convert_rows(out.pairs.iter().map(|(a, _, _)| lp.parse(a)))?;
            cols.extend(
                r.conv
                    .convert_rows(out.pairs.iter().map(|(_, b, _)| rp.parse(b)))?,
            );
            batches.push(self.changelog(cols, out.pairs.iter().map(|p| p.2).collect())?);
        }
        if !out.alone.is_empty() {
            let lp = l.conv.parser();
            let n = out.alone.len();
            let mut cols = l
                .conv
                .convert_rows(out.alone.iter().map(|(a, _)| lp.parse(a)))?;
            let right = &self.schema.fields()[self.schema.fields().len() - self.right_fields..];
            cols.extend(right.iter().map(|f| new_null_array(f.data_type(), n)));
            batches.push(self.changelog(cols, out.alone.iter().map(|a| a.1).collect())?);
        }
        Ok(batches)
    }

    fn changelog(&self, cols: Vec<ArrayRef>, weights: Int64Array) -> Result<Changelog> {
        // the output schema's types (a LEFT join's right side is nullable)
        let cols = cols
            .into_iter()
            .zip(self.schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    cast(&c, f.data_type()).map_err(WeirError::from)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let n = weights.len();
        Ok(Changelog::new(
            RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(n)),
            )?,
            weights,
        ))
    }

    /// `>=` / `>`: free left rows below `limit` and, per key, right rows older than the
    /// latest one below it.
    fn free_latest(&mut self, limit: i64) {
        let [l, r] = &mut self.sides;
        let freed = l.by_time.take_up_to(limit.saturating_sub(1));
        for (_, rk) in freed.iter() {
            l.rows.delete(rk);
        }
        // keys with right rows newly below the limit
        let lo = i64_key(self.swept);
        let hi = i64_key(limit);
        let mut keys: Vec<Box<[u8]>> = r
            .by_time
            .range((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])))
            .map(|(k, v)| k[8..8 + u32_of(v)].into())
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let below = at(&key, limit);
            let keep = r
                .rows
                .range((Bound::Included(&key[..]), Bound::Excluded(below.as_slice())))
                .next_back()
                .map(|(k, _)| i64_of_key(&k[key.len()..]));
            let Some(keep) = keep else { continue };
            let upto = at(&key, keep);
            let gone: Vec<Box<[u8]>> = r
                .rows
                .range((Bound::Included(&key[..]), Bound::Excluded(upto.as_slice())))
                .map(|(k, _)| k.into())
                .collect();
            for k in gone {
                r.rows.delete(&k);
                let mut tk = k[key.len()..key.len() + 8].to_vec();
                tk.extend_from_slice(&k);
                r.by_time.delete(&tk);
            }
        }
        self.swept = limit;
    }

    /// `<=` / `<`: free left rows below `limit` whose match is below it, then every right
    /// row below it.
    fn free_earliest(&mut self, limit: i64) {
        let hi = i64_key(limit);
        let candidates: Vec<(Box<[u8]>, usize)> = self.sides[0]
            .by_time
            .range((Bound::Unbounded, Bound::Excluded(&hi[..])))
            .map(|(k, v)| (k.into(), u32_of(v)))
            .collect();
        for (tk, kl) in candidates {
            let rk = &tk[8..];
            let (key, t) = (&rk[..kl], i64_of_key(&rk[kl..]));
            // settled: its match is a right row below the limit
            let settled = self.match_time(key, t).is_some_and(|m| m < limit);
            if settled {
                self.sides[0].rows.delete(rk);
                self.sides[0].by_time.delete(&tk);
            }
        }
        let r = &mut self.sides[1];
        let freed = r.by_time.take_up_to(limit.saturating_sub(1));
        for (_, rk) in freed.iter() {
            r.rows.delete(rk);
        }
    }
}

impl Operator for AsofJoin {
    fn name(&self) -> &'static str {
        "AsofJoin"
    }

    fn sharding(&self, port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.sides[port].keys)
    }

    fn details(&self) -> String {
        let mut t = self.text.clone();
        if self.free.is_some() {
            t.push_str(" [state freed by watermark]");
        }
        t
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.sides[0].rows.len() + self.sides[1].rows.len()
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        let free = self.free.is_some();
        let mut t = Vec::new();
        for s in self.sides.iter_mut() {
            t.push(&mut s.rows);
            if free {
                t.push(&mut s.by_time);
            }
        }
        t
    }

    fn on_changes(&mut self, port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let out = if port == 0 {
            self.left_delta(&input)?
        } else {
            self.right_delta(&input)?
        };
        self.output(out)
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        let Some(lateness) = self.free else {
            return Ok(vec![]);
        };
        let limit = watermark.saturating_sub(lateness);
        if limit <= self.swept || limit == i64::MIN {
            return Ok(vec![]);
        }
        if self.op.latest() {
            self.free_latest(limit);
        } else {
            self.free_earliest(limit);
            self.swept = limit;
        }
        Ok(vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::changelog::tests::{render, schema};
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_expr::expressions::Column;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn join(op: AsofOp, outer: bool, free: bool) -> AsofJoin {
        let side = schema("k:i64 t:i64 v:i64");
        let out = Arc::new(Schema::new(
            side.fields()
                .iter()
                .chain(side.fields().iter())
                .map(|f| f.as_ref().clone())
                .collect::<Vec<_>>(),
        ));
        let col = |n: &str, i| -> Arc<dyn PhysicalExpr> { Arc::new(Column::new(n, i)) };
        let j = AsofJoin::new(
            op,
            outer,
            side.clone(),
            side,
            vec![col("k", 0)],
            vec![col("k", 0)],
            vec![DataType::Int64],
            [col("t", 1), col("t", 1)],
            out,
            "test".into(),
        )
        .expect("asof join");
        if free { j.freeing_by_watermark(0) } else { j }
    }

    /// On insert-only inputs whose rows are never below the watermark, freeing state by
    /// the watermark changes no output, and frees something.
    #[test]
    fn freeing_by_watermark_changes_no_output() {
        let seed = std::env::var("WEIR_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random::<u64>);
        println!("asof freeing seed {seed} (WEIR_SEED={seed} to replay)");
        let mut rng = StdRng::seed_from_u64(seed);
        for op in [
            AsofOp::AtOrBefore,
            AsofOp::Before,
            AsofOp::AtOrAfter,
            AsofOp::After,
        ] {
            for outer in [false, true] {
                let mut kept = join(op, outer, false);
                let mut freed = join(op, outer, true);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let mut newest = [i64::MIN; 2];
                let mut watermark = 0i64;
                for round in 0..300i64 {
                    let port = rng.random_range(0..2usize);
                    let n = rng.random_range(1..5usize);
                    let k: Int64Array = (0..n).map(|_| Some(rng.random_range(0..4i64))).collect();
                    let t: Int64Array = (0..n)
                        .map(|_| Some(watermark + rng.random_range(0..30i64)))
                        .collect();
                    let v: Int64Array = (0..n).map(|i| Some(round * 10 + i as i64)).collect();
                    newest[port] = newest[port].max(t.values().iter().copied().max().unwrap_or(0));
                    let batch = RecordBatch::try_new(
                        schema("k:i64 t:i64 v:i64"),
                        vec![Arc::new(k), Arc::new(t), Arc::new(v)],
                    )
                    .expect("batch");
                    let cl = Changelog::new(batch, Int64Array::from(vec![1; n]));
                    a.extend(kept.on_changes(port, cl.clone()).expect("kept"));
                    b.extend(freed.on_changes(port, cl).expect("freed"));
                    let w = newest[0].min(newest[1]).saturating_sub(10);
                    if w > watermark {
                        watermark = w;
                        kept.on_watermark(w).expect("kept");
                        freed.on_watermark(w).expect("freed");
                    }
                    assert_eq!(
                        render(&a),
                        render(&b),
                        "seed {seed}, {op:?}, outer {outer}, round {round}"
                    );
                }
                assert!(
                    freed.state_rows() < kept.state_rows() / 2,
                    "seed {seed}, {op:?}: {} rows kept with freeing, {} without",
                    freed.state_rows(),
                    kept.state_rows()
                );
            }
        }
    }
}
