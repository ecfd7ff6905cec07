//! `Aggregate`: GROUP BY with aggregate functions, maintained under inserts and retractions.
//!
//! - input: one changelog stream.
//! - output: per group whose result changed in an epoch, `-old` (if the group was shown)
//!   and `+new` (if it still has rows). A group whose rows all went away disappears. Without
//!   GROUP BY there is exactly one row, also over an empty input (count 0, sum NULL), as in
//!   Postgres.
//! - state: group key -> group id (`arrow_row` keys), weighted row count per group, the
//!   row each group shows (`emitted.rs`, one row per key: a hashed table), and per
//!   aggregate either
//!   * a *linear* state (count, sum, avg): DataFusion's own partial-aggregate state
//!     (`[count]`, `[sum]`, `[count, sum]`), maintained as Σ weight·value, plus the count
//!     of non-NULL inputs so a sum returns to NULL; results come from DataFusion's
//!     `GroupsAccumulator::merge_batch` + `evaluate` over the changed groups, so they are
//!     exactly DataFusion's (types, rounding, overflow);
//!   * a *multiset* of the group's argument values (min, max, count/sum DISTINCT, bool_and,
//!     bool_or, string_agg, array_agg, and any other aggregate): min/max read the first/last
//!     value; the others are recomputed for changed groups by a fresh DataFusion
//!     accumulator fed the group's values (ORDER BY inside the aggregate is honoured).
//!     Over an input that only inserts (`Aggregate::inserts_only`), min/max keep only the
//!     group's current pick in it (one entry per group).
//! - shards (`--workers`): by the group key (`Operator::sharding`); a global aggregate runs
//!   unsharded.
//! - watermark: for a windowed aggregate (a GROUP BY key named `window_end`, from TUMBLE or
//!   HOP), a window closes when the watermark reaches its end. With EMIT ON WINDOW CLOSE
//!   a group's row is emitted only once its window closed (append-only output; under
//!   `late_events = 'correct'` an admitted late row re-emits it as -old/+new). A window's
//!   state is freed when the watermark passes its end plus the allowed lateness; its row
//!   stays in the view.
//! - checkpoint (state tables): `groups`: group key -> row count, window end, whether an
//!   emission is pending (EOWC), and each linear aggregate's count and sum — the per-group vectors are the working form, written into the table for the
//!   groups changed since the last checkpoint (`sync_state`) and rebuilt from it
//!   (`restore_state`); one `multiset` table per multiset aggregate, keyed by group key.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int64Array, UInt32Array,
    UInt64Array,
};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::EmitTo;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::emitted::Emitted;
use crate::operators::float_sum::ExactSum;
use crate::operators::sketch::{DdSketch, Hll, Retractable};
use crate::operators::slot_index::SlotIndex;
use crate::operators::{FastMap, Operator, evaluate, true_mask};
use crate::state::state_table::{Reader, StateTable, TableDecl};
use crate::state::zset::count_of;

/// A stored (key, value) pair, owned.
type Entry = (Box<[u8]>, Box<[u8]>);

const GROUPS: TableDecl = TableDecl {
    name: "groups",
    key: "group key",
    value: "row count, window end, pending emission, per linear aggregate: count and sum",
    ordered: false,
};

const MULTISET: TableDecl = TableDecl {
    name: "multiset",
    key: "group key ++ value row",
    value: "multiplicity (i64 LE)",
    ordered: true,
};

/// One aggregate of the operator, as lowered from the logical plan.
pub struct AggSpec {
    pub func: Arc<AggregateFunctionExpr>,
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// ORDER BY inside the aggregate (`string_agg(x, ',' ORDER BY x)`).
    pub order_by: Vec<Arc<dyn PhysicalExpr>>,
    pub text: String,
}

enum Sums {
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// Decimal128 (scaled) and UInt64 sums.
    I128(Vec<i128>),
    /// Float sums and averages (`weir_exact_sum`, `weir_exact_avg`: see
    /// `catalog::pg_semantics`), exact under retractions.
    Exact(Vec<ExactSum>),
}

impl Sums {
    fn grow(&mut self, n: usize) {
        match self {
            Sums::I64(v) => v.resize(n, 0),
            Sums::F64(v) => v.resize(n, 0.0),
            Sums::I128(v) => v.resize(n, 0),
            Sums::Exact(v) => v.resize(n, ExactSum::new()),
        }
    }
    fn clear(&mut self) {
        match self {
            Sums::I64(v) => v.clear(),
            Sums::F64(v) => v.clear(),
            Sums::I128(v) => v.clear(),
            Sums::Exact(v) => v.clear(),
        }
    }
    fn encode(&self, g: usize, out: &mut Vec<u8>) {
        match self {
            Sums::I64(v) => out.extend_from_slice(&v[g].to_le_bytes()),
            Sums::F64(v) => out.extend_from_slice(&v[g].to_bits().to_le_bytes()),
            Sums::I128(v) => out.extend_from_slice(&v[g].to_le_bytes()),
            Sums::Exact(v) => v[g].encode(out),
        }
    }
    fn decode(&mut self, g: usize, r: &mut Reader<'_>) -> Result<()> {
        match self {
            Sums::I64(v) => v[g] = r.i64()?,
            Sums::F64(v) => v[g] = f64::from_bits(r.i64()? as u64),
            Sums::I128(v) => v[g] = r.i128()?,
            Sums::Exact(v) => v[g] = ExactSum::decode(r)?,
        }
        Ok(())
    }
    fn reset(&mut self, g: usize) {
        match self {
            Sums::I64(v) => v[g] = 0,
            Sums::F64(v) => v[g] = 0.0,
            Sums::I128(v) => v[g] = 0,
            Sums::Exact(v) => v[g] = ExactSum::new(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LinearKind {
    Count,
    Sum,
    Avg,
}

struct Linear {
    kind: LinearKind,
    /// Non-NULL inputs per group (weighted).
    counts: Vec<i64>,
    sums: Option<Sums>,
    /// Type of the sum in DataFusion's state.
    sum_type: Option<DataType>,
    /// Type of the count in DataFusion's state (Int64 for count, UInt64 for avg).
    count_type: DataType,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MultisetKind {
    Min,
    Max,
    /// Recompute with a DataFusion accumulator.
    General,
}

struct Multiset {
    kind: MultisetKind,
    /// Min/max over an input that only inserts: a group's value only moves one way, so
    /// only its current pick is kept (one entry per group, not one per value).
    extreme_only: bool,
    distinct: bool,
    conv: RowConverter,
    /// Columns the converter encodes (0 until the first batch fixes the value types).
    ncols: usize,
    /// group key ++ value row -> multiplicity (i64 LE); a prefix scan by group key reads a
    /// group's values in order (min: first, max: last)
    entries: StateTable,
}

enum State {
    Linear(Linear),
    Multiset(Box<Multiset>),
    Sketch(Box<SketchState>),
}

const SKETCHES: TableDecl = TableDecl {
    name: "sketches",
    key: "group key",
    value: "the group's sketch (operators/sketch.rs encoding)",
    ordered: false,
};

#[derive(Clone, Copy, PartialEq, Debug)]
enum SketchKind {
    /// approx_count_distinct: a counting HyperLogLog.
    Distinct,
    /// approx_percentile(q): a DDSketch.
    Percentile(f64),
}

/// An approximate aggregate kept as a retractable sketch per group (`sketch.rs`).
struct SketchState {
    kind: SketchKind,
    /// The argument holding the values.
    arg: usize,
    /// Encodes values for hashing (distinct), made from the first batch's type.
    conv: Option<RowConverter>,
    /// group key -> encoded sketch
    entries: StateTable,
}

/// Group `g`'s sketch among those changed in this batch, read from the table the first time.
fn group_sketch<'m, S: Retractable>(
    changed: &'m mut FastMap<u32, S>,
    entries: &mut StateTable,
    keys: &[Box<[u8]>],
    g: u32,
) -> Result<&'m mut S> {
    Ok(match changed.entry(g) {
        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            let old = match entries.get(&keys[g as usize]) {
                Some(b) => S::decode(b)?,
                None => S::default(),
            };
            v.insert(old)
        }
    })
}

/// Write the changed groups' sketches back (an empty one removes the group's entry).
fn store_sketches<S: Retractable>(
    changed: FastMap<u32, S>,
    entries: &mut StateTable,
    keys: &[Box<[u8]>],
) {
    let mut buf = Vec::new();
    for (g, sketch) in changed {
        let key = &keys[g as usize];
        if sketch.is_empty() {
            entries.delete(key);
        } else {
            buf.clear();
            sketch.encode(&mut buf);
            entries.put(key, &buf);
        }
    }
}

impl SketchState {
    /// approx_count_distinct(x) and approx_percentile(q) WITHIN GROUP (ORDER BY x) (in
    /// ascending order) without DISTINCT or FILTER-dependent forms DataFusion adds.
    fn of(func: &AggregateFunctionExpr, args: &[Arc<dyn PhysicalExpr>]) -> Option<SketchState> {
        use datafusion::physical_expr::expressions::Literal;
        if func.is_distinct() {
            return None;
        }
        let literal =
            |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<Literal>().map(|l| l.value().clone());
        let arg = args.iter().position(|e| literal(e).is_none())?;
        let kind = match func.fun().name() {
            "approx_distinct" if args.len() == 1 => SketchKind::Distinct,
            "approx_percentile_cont" => {
                if func.order_bys().iter().any(|o| o.options.descending) {
                    return None;
                }
                let q = args.iter().find_map(|e| {
                    literal(e)?
                        .cast_to(&DataType::Float64)
                        .ok()
                        .and_then(|v| match v {
                            ScalarValue::Float64(Some(f)) if (0.0..=1.0).contains(&f) => Some(f),
                            _ => None,
                        })
                })?;
                SketchKind::Percentile(q)
            }
            _ => return None,
        };
        Some(SketchState {
            kind,
            arg,
            conv: None,
            entries: StateTable::new(SKETCHES),
        })
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        keep: Option<&BooleanArray>,
        gids: &[u32],
        keys: &[Box<[u8]>],
        weights: &[i64],
    ) -> Result<()> {
        let Some(col) = args.get(self.arg) else {
            return Err(WeirError::internal("sketch aggregate without its argument"));
        };
        // each changed group's sketch, read once per batch
        match self.kind {
            SketchKind::Distinct => {
                if self.conv.is_none() {
                    self.conv = Some(RowConverter::new(vec![SortField::new(
                        col.data_type().clone(),
                    )])?);
                }
                let Some(conv) = &self.conv else {
                    return Ok(());
                };
                let rows = conv.convert_columns(std::slice::from_ref(col))?;
                let mut changed: FastMap<u32, Hll> = FastMap::default();
                for (i, g) in gids.iter().enumerate() {
                    if keep.is_some_and(|k| !k.value(i)) || col.is_null(i) {
                        continue;
                    }
                    group_sketch(&mut changed, &mut self.entries, keys, *g)?
                        .add(rows.row(i).data(), weights[i]);
                }
                store_sketches(changed, &mut self.entries, keys);
            }
            SketchKind::Percentile(_) => {
                let f = cast(col, &DataType::Float64)?;
                let f = f.as_primitive::<Float64Type>();
                let mut changed: FastMap<u32, DdSketch> = FastMap::default();
                for (i, g) in gids.iter().enumerate() {
                    if keep.is_some_and(|k| !k.value(i)) || f.is_null(i) {
                        continue;
                    }
                    group_sketch(&mut changed, &mut self.entries, keys, *g)?
                        .add(f.value(i), weights[i]);
                }
                store_sketches(changed, &mut self.entries, keys);
            }
        }
        Ok(())
    }

    fn evaluate(
        &mut self,
        func: &AggregateFunctionExpr,
        gids: &[u32],
        keys: &[Box<[u8]>],
    ) -> Result<ArrayRef> {
        let out_type = func.field().data_type().clone();
        let arr: ArrayRef = match self.kind {
            SketchKind::Distinct => {
                let mut out = Vec::with_capacity(gids.len());
                for g in gids {
                    out.push(match self.entries.get(&keys[*g as usize]) {
                        Some(b) => Hll::decode(b)?.estimate(),
                        None => 0,
                    });
                }
                Arc::new(UInt64Array::from(out))
            }
            SketchKind::Percentile(q) => {
                let mut out = Vec::with_capacity(gids.len());
                for g in gids {
                    out.push(match self.entries.get(&keys[*g as usize]) {
                        Some(b) => DdSketch::decode(b)?.quantile(q),
                        None => None,
                    });
                }
                Arc::new(Float64Array::from(out))
            }
        };
        Ok(if arr.data_type() != &out_type {
            cast(&arr, &out_type)?
        } else {
            arr
        })
    }
}

struct Agg {
    spec: AggSpec,
    args: Vec<Arc<dyn PhysicalExpr>>,
    state: State,
}

/// How a windowed aggregate uses the watermark.
#[derive(Debug, Clone)]
pub struct WindowPolicy {
    /// Position of `window_end` among the group keys, or of the key the end follows from.
    pub end_key: usize,
    /// The end is that key plus this (a group by the event time `ts`: 1 µs; by
    /// `date_trunc('minute', ts)`: a minute); None when the key is the end.
    pub end_step: Option<datafusion::arrow::datatypes::IntervalMonthDayNano>,
    pub lateness_us: i64,
    pub emit_on_close: bool,
    /// `late_events = 'correct'`: re-emit closed windows that admitted late rows.
    pub correct: bool,
}

pub struct Aggregate {
    window: Option<WindowPolicy>,
    /// window_end (µs) per group, for windowed aggregates.
    window_ends: Vec<i64>,
    /// Groups by window_end, to free closed windows.
    by_end: BTreeMap<i64, Vec<u32>>,
    watermark: Option<i64>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    group_text: String,
    group_conv: RowConverter,
    /// Group keys to their slots (the keys are `keys`).
    groups: SlotIndex,
    keys: Vec<Box<[u8]>>,
    row_counts: Vec<i64>,
    /// The row each group shows (`emitted.rs`, one row per group key).
    emitted: Emitted,
    free: Vec<u32>,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    aggs: Vec<Agg>,
    out_conv: RowConverter,
    schema: SchemaRef,
    input_schema: SchemaRef,
    global: bool,
    groups_table: StateTable,
    /// Groups changed since the last `sync_state`.
    changed: Vec<u32>,
    is_changed: Vec<bool>,
    /// Bytes of the live groups' keys (for [`Operator::resident_bytes`]).
    key_bytes: usize,
    /// Per group slot: read or written since the last eviction sweep (CLOCK).
    touched: Vec<bool>,
    /// Where the next eviction sweep starts.
    hand: usize,
    /// Some groups live only in `groups_table` (evicted, or not read back since a
    /// restore): a group not in memory is looked up there before it is taken as new, and a
    /// group deleted is deleted from the table at once.
    groups_in_table: bool,
}

fn linear_kind(name: &str) -> Option<LinearKind> {
    match name {
        "count" => Some(LinearKind::Count),
        "sum" => Some(LinearKind::Sum),
        "avg" | "mean" => Some(LinearKind::Avg),
        _ => None,
    }
}

/// The exact float aggregates (evaluated here, not by DataFusion's merge).
fn exact_kind(name: &str) -> Option<LinearKind> {
    match name {
        crate::catalog::pg_semantics::EXACT_SUM => Some(LinearKind::Sum),
        crate::catalog::pg_semantics::EXACT_AVG => Some(LinearKind::Avg),
        _ => None,
    }
}

impl Aggregate {
    /// `group_types` are the types of the group expressions' values.
    pub fn new(
        group_exprs: Vec<Arc<dyn PhysicalExpr>>,
        group_types: Vec<DataType>,
        group_text: String,
        specs: Vec<AggSpec>,
        input_schema: SchemaRef,
        schema: SchemaRef,
    ) -> Result<Aggregate> {
        let global = group_exprs.is_empty();
        let group_conv = RowConverter::new(group_types.into_iter().map(SortField::new).collect())?;
        let out_conv = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let mut aggs = Vec::with_capacity(specs.len());
        for spec in specs {
            aggs.push(Self::agg(spec)?);
        }
        let mut op = Aggregate {
            window: None,
            window_ends: Vec::new(),
            by_end: BTreeMap::new(),
            watermark: None,
            group_exprs,
            group_text,
            group_conv,
            groups: SlotIndex::default(),
            keys: Vec::new(),
            row_counts: Vec::new(),
            emitted: Emitted::one_per_key(),
            free: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            aggs,
            out_conv,
            schema,
            input_schema,
            global,
            groups_table: StateTable::new(GROUPS),
            changed: Vec::new(),
            key_bytes: 0,
            touched: Vec::new(),
            hand: 0,
            groups_in_table: false,
            is_changed: Vec::new(),
        };
        if global {
            // the one group of a global aggregate exists from the start
            op.group_id(&[]);
        }
        Ok(op)
    }

    fn agg(spec: AggSpec) -> Result<Agg> {
        let func = &spec.func;
        let args = func.expressions();
        let name = func.fun().name().to_lowercase();
        let distinct = func.is_distinct();
        let state_fields = func.state_fields()?;
        let exact = match exact_kind(&name) {
            Some(kind) if !distinct && spec.order_by.is_empty() && args.len() == 1 => {
                Some(Linear {
                    kind,
                    counts: Vec::new(),
                    sums: Some(Sums::Exact(Vec::new())),
                    sum_type: Some(DataType::Float64),
                    count_type: DataType::Int64,
                })
            }
            _ => None,
        };
        let linear = match linear_kind(&name) {
            _ if exact.is_some() => exact,
            Some(kind) if !distinct && spec.order_by.is_empty() => {
                let types: Vec<DataType> =
                    state_fields.iter().map(|f| f.data_type().clone()).collect();
                let ok_sum = |t: &DataType| {
                    matches!(
                        t,
                        DataType::Int64
                            | DataType::Float64
                            | DataType::UInt64
                            | DataType::Decimal128(..)
                    )
                };
                match (kind, types.as_slice()) {
                    (LinearKind::Count, [DataType::Int64]) if args.len() <= 1 => Some(Linear {
                        kind,
                        counts: Vec::new(),
                        sums: None,
                        sum_type: None,
                        count_type: DataType::Int64,
                    }),
                    (LinearKind::Sum, [t]) if ok_sum(t) && args.len() == 1 => {
                        Some(Linear::with_sum(kind, t.clone(), DataType::Int64))
                    }
                    (LinearKind::Avg, [DataType::UInt64, t]) if ok_sum(t) && args.len() == 1 => {
                        Some(Linear::with_sum(kind, t.clone(), DataType::UInt64))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(sk) = SketchState::of(func, &args) {
            return Ok(Agg {
                spec,
                args,
                state: State::Sketch(Box::new(sk)),
            });
        }
        let state = match linear {
            Some(l) => State::Linear(l),
            None => {
                let kind = match (name.as_str(), distinct, spec.order_by.is_empty()) {
                    ("min", _, true) => MultisetKind::Min,
                    ("max", _, true) => MultisetKind::Max,
                    _ => MultisetKind::General,
                };
                // value types are known from the first batch (ensure_conv)
                let conv = RowConverter::new(vec![])?;
                State::Multiset(Box::new(Multiset {
                    kind,
                    extreme_only: false,
                    distinct,
                    conv,
                    ncols: 0,
                    entries: StateTable::new(MULTISET),
                }))
            }
        };
        Ok(Agg { spec, args, state })
    }

    /// The input only ever inserts (an append-only table or a source through filters and
    /// projections): min and max keep only each group's pick.
    pub fn inserts_only(mut self) -> Self {
        for agg in &mut self.aggs {
            if let State::Multiset(m) = &mut agg.state
                && matches!(m.kind, MultisetKind::Min | MultisetKind::Max)
            {
                m.extreme_only = true;
            }
        }
        self
    }

    /// Make this a windowed aggregate.
    pub fn with_window(mut self, policy: WindowPolicy) -> Self {
        self.window = Some(policy);
        self
    }

    fn group_id(&mut self, key: &[u8]) -> u32 {
        let hash = self.groups.hash(key);
        if let Some(g) = self.groups.find(&self.keys, hash, key) {
            self.touched[g as usize] = true;
            return g;
        }
        let g = self.new_slot(key, hash);
        if self.groups_in_table
            && let Some(stored) = self.groups_table.get(key).map(|v| v.to_vec())
        {
            // a group evicted earlier: its state comes back from the table
            if let Err(e) = self.decode_group(g as usize, &stored) {
                tracing::error!(error = %e.message, "cannot read an evicted aggregate group back");
                self.groups_table.delete(key);
            }
        }
        g
    }

    /// A slot for a group not in memory: a free one or a new one, zeroed.
    fn new_slot(&mut self, key: &[u8], hash: u64) -> u32 {
        let g = match self.free.pop() {
            Some(g) => {
                self.keys[g as usize] = key.into();
                self.touched[g as usize] = true;
                g
            }
            None => {
                let g = self.keys.len() as u32;
                self.keys.push(key.into());
                self.touched.push(true);
                self.row_counts.push(0);
                self.is_dirty.push(false);
                self.is_changed.push(false);
                self.window_ends.push(i64::MAX);
                for a in self.aggs.iter_mut() {
                    if let State::Linear(l) = &mut a.state {
                        l.counts.push(0);
                        if let Some(s) = &mut l.sums {
                            s.grow(g as usize + 1);
                        }
                    }
                }
                g
            }
        };
        self.groups.insert(g, hash);
        self.key_bytes += key.len();
        g
    }

    fn mark(&mut self, g: u32) {
        if !self.is_dirty[g as usize] {
            self.is_dirty[g as usize] = true;
            self.dirty.push(g);
        }
        if !self.is_changed[g as usize] {
            self.is_changed[g as usize] = true;
            self.changed.push(g);
        }
    }

    /// Group `g`'s state as stored in the `groups` table.
    fn encode_group(&self, g: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.row_counts[g].to_le_bytes());
        out.extend_from_slice(&self.window_ends[g].to_le_bytes());
        out.push(self.is_dirty[g] as u8);
        for a in &self.aggs {
            if let State::Linear(l) = &a.state {
                out.extend_from_slice(&l.counts[g].to_le_bytes());
                if let Some(s) = &l.sums {
                    s.encode(g, out);
                }
            }
        }
    }

    fn decode_group(&mut self, g: usize, value: &[u8]) -> Result<()> {
        let mut r = Reader::new(value, "aggregate group");
        self.row_counts[g] = r.i64()?;
        self.window_ends[g] = r.i64()?;
        let pending = r.u8()? == 1;
        for a in self.aggs.iter_mut() {
            if let State::Linear(l) = &mut a.state {
                l.counts[g] = r.i64()?;
                if let Some(s) = &mut l.sums {
                    s.decode(g, &mut r)?;
                }
            }
        }
        if r.remaining() != 0 {
            return Err(WeirError::internal(
                "stored aggregate group has trailing bytes (another layout)",
            ));
        }
        if pending {
            self.is_dirty[g] = true;
            self.dirty.push(g as u32);
        }
        Ok(())
    }

    /// Final values of one aggregate for the given groups.
    fn evaluate_agg(agg: &mut Agg, gids: &[u32], keys: &[Box<[u8]>]) -> Result<ArrayRef> {
        match &mut agg.state {
            State::Linear(l) => l.evaluate(&agg.spec.func, gids),
            State::Multiset(m) => m.evaluate(&agg.spec.func, gids, keys),
            State::Sketch(sk) => sk.evaluate(&agg.spec.func, gids, keys),
        }
    }
}

impl Linear {
    fn with_sum(kind: LinearKind, sum_type: DataType, count_type: DataType) -> Linear {
        let sums = match &sum_type {
            DataType::Int64 => Sums::I64(Vec::new()),
            DataType::Float64 => Sums::F64(Vec::new()),
            _ => Sums::I128(Vec::new()),
        };
        Linear {
            kind,
            counts: Vec::new(),
            sums: Some(sums),
            sum_type: Some(sum_type),
            count_type,
        }
    }

    fn update(
        &mut self,
        value: Option<&ArrayRef>,
        keep: Option<&BooleanArray>,
        gids: &[u32],
        weights: &[i64],
    ) -> Result<()> {
        let valid = |i: usize| keep.is_none_or(|k| k.value(i));
        let Some(value) = value else {
            // count(*)
            for (i, g) in gids.iter().enumerate() {
                if valid(i) {
                    self.counts[*g as usize] += weights[i];
                }
            }
            return Ok(());
        };
        let Some(sum_type) = &self.sum_type else {
            // count(x): non-NULL values
            for (i, g) in gids.iter().enumerate() {
                if valid(i) && value.is_valid(i) {
                    self.counts[*g as usize] += weights[i];
                }
            }
            return Ok(());
        };
        let cast_type = match sum_type {
            DataType::UInt64 => DataType::Decimal128(38, 0),
            t => t.clone(),
        };
        let v = cast(value, &cast_type)?;
        match self.sums.as_mut().expect("sum state") {
            Sums::I64(s) => {
                let v = v.as_primitive::<Int64Type>();
                for (i, g) in gids.iter().enumerate() {
                    if valid(i) && v.is_valid(i) {
                        let g = *g as usize;
                        self.counts[g] += weights[i];
                        s[g] = s[g].wrapping_add(v.value(i).wrapping_mul(weights[i]));
                    }
                }
            }
            Sums::F64(s) => {
                let v = v.as_primitive::<Float64Type>();
                for (i, g) in gids.iter().enumerate() {
                    if valid(i) && v.is_valid(i) {
                        let g = *g as usize;
                        self.counts[g] += weights[i];
                        s[g] += v.value(i) * weights[i] as f64;
                    }
                }
            }
            Sums::I128(s) => {
                let v = v.as_primitive::<Decimal128Type>();
                for (i, g) in gids.iter().enumerate() {
                    if valid(i) && v.is_valid(i) {
                        let g = *g as usize;
                        self.counts[g] += weights[i];
                        s[g] = s[g].wrapping_add(v.value(i).wrapping_mul(weights[i] as i128));
                    }
                }
            }
            Sums::Exact(s) => {
                let v = v.as_primitive::<Float64Type>();
                for (i, g) in gids.iter().enumerate() {
                    if valid(i) && v.is_valid(i) {
                        let g = *g as usize;
                        self.counts[g] += weights[i];
                        s[g].add(v.value(i), weights[i]);
                    }
                }
            }
        }
        Ok(())
    }

    /// DataFusion's state arrays for the groups, then its own final evaluation.
    fn evaluate(&self, func: &AggregateFunctionExpr, gids: &[u32]) -> Result<ArrayRef> {
        let counts: Vec<i64> = gids.iter().map(|g| self.counts[*g as usize]).collect();
        if let Some(Sums::Exact(s)) = &self.sums {
            // NULL without values, as sum and avg are
            let avg = self.kind == LinearKind::Avg;
            return Ok(Arc::new(Float64Array::from_iter(
                gids.iter().zip(&counts).map(|(g, c)| {
                    (*c > 0).then(|| {
                        let v = s[*g as usize].value();
                        if avg { v / *c as f64 } else { v }
                    })
                }),
            )));
        }
        let count_array: ArrayRef = match self.count_type {
            // avg: a group without values has NULL state, which DataFusion leaves out
            // (it would divide by a zero count otherwise) and evaluates to NULL
            DataType::UInt64 => Arc::new(UInt64Array::from_iter(
                counts.iter().map(|c| (*c > 0).then_some(*c as u64)),
            )),
            _ => Arc::new(Int64Array::from(counts.clone())),
        };
        let sum_array: Option<ArrayRef> = match (&self.sums, &self.sum_type) {
            (Some(sums), Some(t)) => {
                let present = |k: usize| counts[k] > 0;
                let a: ArrayRef = match sums {
                    Sums::I64(s) => Arc::new(Int64Array::from_iter(
                        gids.iter()
                            .enumerate()
                            .map(|(k, g)| present(k).then(|| s[*g as usize])),
                    )),
                    Sums::F64(s) => Arc::new(Float64Array::from_iter(
                        gids.iter()
                            .enumerate()
                            .map(|(k, g)| present(k).then(|| s[*g as usize])),
                    )),
                    Sums::Exact(_) => unreachable!("exact sums are evaluated above"),
                    Sums::I128(s) => {
                        let d = Decimal128Array::from_iter(
                            gids.iter()
                                .enumerate()
                                .map(|(k, g)| present(k).then(|| s[*g as usize])),
                        );
                        match t {
                            DataType::Decimal128(p, sc) => {
                                Arc::new(d.with_precision_and_scale(*p, *sc)?)
                            }
                            _ => cast(
                                &(Arc::new(d.with_precision_and_scale(38, 0)?) as ArrayRef),
                                t,
                            )?,
                        }
                    }
                };
                Some(a)
            }
            _ => None,
        };
        let state: Vec<ArrayRef> = match self.kind {
            LinearKind::Count => vec![count_array],
            LinearKind::Sum => vec![sum_array.expect("sum state")],
            LinearKind::Avg => vec![count_array, sum_array.expect("sum state")],
        };
        merge_and_evaluate(func, &state, gids.len())
    }
}

/// Feed partial states (one row per group) to a fresh DataFusion accumulator and evaluate.
fn merge_and_evaluate(
    func: &AggregateFunctionExpr,
    state: &[ArrayRef],
    n: usize,
) -> Result<ArrayRef> {
    if func.groups_accumulator_supported() {
        let mut acc = func.create_groups_accumulator()?;
        let idx: Vec<usize> = (0..n).collect();
        acc.merge_batch(state, &idx, n)?;
        return Ok(acc.evaluate(EmitTo::All)?);
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut acc = func.create_accumulator()?;
        let row: Vec<ArrayRef> = state.iter().map(|a| a.slice(i, 1)).collect();
        acc.merge_batch(&row)?;
        out.push(acc.evaluate()?);
    }
    scalars_to_array(out, &func.field().data_type().clone())
}

fn scalars_to_array(values: Vec<ScalarValue>, t: &DataType) -> Result<ArrayRef> {
    if values.is_empty() {
        return Ok(datafusion::arrow::array::new_empty_array(t));
    }
    Ok(ScalarValue::iter_to_array(values)?)
}

impl Multiset {
    /// `update` for `extreme_only`: each changed group's best value of the batch (row
    /// format orders as the values do) replaces the group's pick when it is better.
    fn update_extreme(
        &mut self,
        rows: &Rows,
        cols: &[ArrayRef],
        keep: Option<&BooleanArray>,
        gids: &[u32],
        keys: &[Box<[u8]>],
        weights: &[i64],
    ) -> Result<()> {
        let min = self.kind == MultisetKind::Min;
        let better = |a: &[u8], b: &[u8]| if min { a < b } else { a > b };
        let mut best: FastMap<u32, usize> = FastMap::default();
        for (i, g) in gids.iter().enumerate() {
            if keep.is_some_and(|k| !k.value(i)) || cols[0].is_null(i) || weights[i] == 0 {
                continue;
            }
            if weights[i] < 0 {
                return Err(crate::error::WeirError::internal(
                    "a row was retracted from a min/max planned over an input that only inserts",
                ));
            }
            best.entry(*g)
                .and_modify(|b| {
                    if better(rows.row(i).data(), rows.row(*b).data()) {
                        *b = i;
                    }
                })
                .or_insert(i);
        }
        let mut key = Vec::with_capacity(64);
        for (g, i) in best {
            let group = &keys[g as usize];
            let new = rows.row(i);
            let old = self
                .entries
                .prefix_edge(group, !min)
                .map(|(k, _)| k.to_vec());
            if let Some(old) = &old {
                if !better(new.data(), &old[group.len()..]) {
                    continue;
                }
                self.entries.delete(old);
            }
            key.clear();
            key.extend_from_slice(group);
            key.extend_from_slice(new.data());
            self.entries.add_count(&key, 1);
        }
        Ok(())
    }

    fn ensure_conv(&mut self, cols: &[ArrayRef]) -> Result<()> {
        if self.ncols != cols.len() {
            self.ncols = cols.len();
            self.conv = RowConverter::new(
                cols.iter()
                    .map(|c| SortField::new(c.data_type().clone()))
                    .collect(),
            )?;
        }
        Ok(())
    }

    fn update(
        &mut self,
        cols: &[ArrayRef],
        keep: Option<&BooleanArray>,
        gids: &[u32],
        keys: &[Box<[u8]>],
        weights: &[i64],
    ) -> Result<()> {
        self.ensure_conv(cols)?;
        let rows: Rows = self.conv.convert_columns(cols)?;
        if self.extreme_only {
            return self.update_extreme(&rows, cols, keep, gids, keys, weights);
        }
        let skip_nulls = matches!(self.kind, MultisetKind::Min | MultisetKind::Max);
        let mut key = Vec::with_capacity(64);
        for (i, g) in gids.iter().enumerate() {
            if keep.is_some_and(|k| !k.value(i)) || (skip_nulls && cols[0].is_null(i)) {
                continue;
            }
            key.clear();
            key.extend_from_slice(&keys[*g as usize]);
            key.extend_from_slice(rows.row(i).data());
            self.entries.add_count(&key, weights[i]);
        }
        Ok(())
    }

    fn evaluate(
        &mut self,
        func: &AggregateFunctionExpr,
        gids: &[u32],
        keys: &[Box<[u8]>],
    ) -> Result<ArrayRef> {
        let out_type = func.field().data_type().clone();
        if self.ncols == 0 {
            // no input seen yet: every group is empty
            let mut out = Vec::with_capacity(gids.len());
            for _ in gids {
                let mut acc = func.create_accumulator()?;
                out.push(acc.evaluate()?);
            }
            return scalars_to_array(out, &out_type);
        }
        let parser = self.conv.parser();
        match self.kind {
            MultisetKind::Min | MultisetKind::Max => {
                // each group's pick, copied out (reading a group may bring it back from
                // the spill store, so the table is borrowed one group at a time)
                let mut buf: Vec<u8> = Vec::new();
                let min = self.kind == MultisetKind::Min;
                let spans: Vec<Option<(usize, usize)>> = gids
                    .iter()
                    .map(|g| {
                        let key = &keys[*g as usize];
                        let e = self
                            .entries
                            .prefix_edge(key, !min)
                            .map(|(k, c)| (&k[key.len()..], count_of(c)));
                        e.map(|(v, _)| {
                            buf.extend_from_slice(v);
                            (buf.len() - v.len(), buf.len())
                        })
                    })
                    .collect();
                let picks: Vec<Option<&[u8]>> =
                    spans.iter().map(|s| s.map(|(a, b)| &buf[a..b])).collect();
                // convert the present values, then place them (NULL for empty groups)
                let present: Vec<&[u8]> = picks.iter().flatten().copied().collect();
                let values = if present.is_empty() {
                    datafusion::arrow::array::new_empty_array(
                        self.conv_types()?.first().unwrap_or(&DataType::Null),
                    )
                } else {
                    self.conv
                        .convert_rows(present.iter().map(|r| parser.parse(r)))?
                        .remove(0)
                };
                let mut next = 0u32;
                let indices: UInt32Array = picks
                    .iter()
                    .map(|p| {
                        p.map(|_| {
                            next += 1;
                            next - 1
                        })
                    })
                    .collect();
                let taken = take(&values, &indices, None)?;
                Ok(if taken.data_type() != &out_type {
                    cast(&taken, &out_type)?
                } else {
                    taken
                })
            }
            MultisetKind::General => {
                let mut out = Vec::with_capacity(gids.len());
                for g in gids {
                    let mut rows: Vec<&[u8]> = Vec::new();
                    for (v, c) in values(&mut self.entries, &keys[*g as usize]) {
                        let times = if self.distinct { 1 } else { c.max(0) };
                        for _ in 0..times {
                            rows.push(v);
                        }
                    }
                    let mut acc = func.create_accumulator()?;
                    if !rows.is_empty() {
                        let cols = self
                            .conv
                            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
                        acc.update_batch(&cols)?;
                    }
                    out.push(acc.evaluate()?);
                }
                let arr = scalars_to_array(out, &out_type)?;
                Ok(if arr.data_type() != &out_type {
                    cast(&arr, &out_type)?
                } else {
                    arr
                })
            }
        }
    }

    fn conv_types(&self) -> Result<Vec<DataType>> {
        // the converter's column types, recovered from an empty conversion
        let cols = self.conv.convert_rows(std::iter::empty())?;
        Ok(cols.iter().map(|c| c.data_type().clone()).collect())
    }
}

impl Operator for Aggregate {
    fn name(&self) -> &'static str {
        "Aggregate"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.group_exprs)
    }

    fn takes_parts(&self) -> bool {
        // `on_changes` folds rows into the groups; rows are emitted at the epoch's end
        true
    }

    fn details(&self) -> String {
        let aggs: Vec<String> = self
            .aggs
            .iter()
            .map(|a| {
                let how = match &a.state {
                    State::Linear(_) => "linear",
                    State::Multiset(m) if m.kind == MultisetKind::General => "multiset, recompute",
                    State::Multiset(m) if m.extreme_only => "inserts only: one value per group",
                    State::Multiset(_) => "multiset",
                    State::Sketch(_) => "sketch",
                };
                format!("{} [{how}]", a.spec.text)
            })
            .collect();
        format!("group by [{}]: {}", self.group_text, aggs.join(", "))
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The per-group vectors and the key map (held in memory; their checkpoint form is
    /// the `groups` table): per group slot its key (in the slot list, indexed by `SlotIndex`), row
    /// count, flags, window end, map entry, and each linear aggregate's count and sum.
    fn resident_bytes(&self) -> usize {
        // per slot: row count, flags, window end, the key's box and hash; per live group:
        // its index entry and its key's bytes
        const SLOT: usize = 8 + 3 + 8 + 16 + 8;
        const LIVE: usize = 8;
        let linear = self
            .aggs
            .iter()
            .filter(|a| matches!(a.state, State::Linear(_)))
            .count();
        self.key_bytes + self.groups.len() * LIVE + self.keys.len() * (SLOT + 24 * linear)
    }

    fn resident_spills(&self) -> bool {
        self.window.is_none() && !self.global
    }

    /// Move about `share` of the groups in memory (the least recently touched: a CLOCK
    /// sweep over the slots) into `groups_table`, whose own eviction then spills them;
    /// they are read back when touched. Not for windowed aggregates (closing a window walks
    /// its groups) or a global one. Returns the bytes freed, as `resident_bytes` counts.
    fn evict_resident(&mut self, share: f64) -> usize {
        if self.window.is_some() || self.global || self.groups.is_empty() {
            return 0;
        }
        let before = self.resident_bytes();
        let want = ((self.groups.len() as f64) * share).ceil() as usize;
        let slots = self.keys.len();
        let mut evicted = 0usize;
        let mut buf = Vec::new();
        // two passes over the slots at most: the first clears the marks of touched groups
        let mut steps = 0usize;
        while evicted < want && steps < 2 * slots {
            let gi = self.hand % slots;
            self.hand = (self.hand + 1) % slots;
            steps += 1;
            let g = gi as u32;
            if !self.groups.contains_slot(g) {
                continue; // a free slot
            }
            if self.is_dirty[gi] {
                continue; // changed in the epoch being run
            }
            if std::mem::take(&mut self.touched[gi]) {
                continue;
            }
            // the group's state into the table (the checkpoint's change log has it), then
            // out of memory
            buf.clear();
            self.encode_group(gi, &mut buf);
            self.groups_table.put(&self.keys[gi], &buf);
            self.is_changed[gi] = false;
            self.vacate(gi);
            evicted += 1;
        }
        if evicted > 0 {
            self.groups_in_table = true;
            // give the map's memory back once it is mostly empty (not at every sweep: a
            // shrink rehashes every live group)
            if self.groups.capacity() > 4 * self.groups.len() + 1024 {
                self.groups.shrink_to_fit();
            }
        }
        before.saturating_sub(self.resident_bytes())
    }

    fn state_rows(&self) -> usize {
        // with groups out of memory the table has them (and most of those in memory): the
        // larger of the two is the estimate
        let groups = if self.groups_in_table {
            self.groups.len().max(self.groups_table.len())
        } else {
            self.groups.len()
        };
        groups
            + self
                .aggs
                .iter()
                .map(|a| match &a.state {
                    State::Multiset(m) => m.entries.len(),
                    State::Sketch(sk) => sk.entries.len(),
                    State::Linear(_) => 0,
                })
                .sum::<usize>()
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        let mut t = vec![&mut self.groups_table, self.emitted.state_table()];
        t.extend(self.aggs.iter_mut().filter_map(|a| match &mut a.state {
            State::Multiset(m) => Some(&mut m.entries),
            State::Sketch(sk) => Some(&mut sk.entries),
            State::Linear(_) => None,
        }));
        t
    }

    fn sync_state(&mut self) -> Result<()> {
        let mut buf = Vec::new();
        for g in std::mem::take(&mut self.changed) {
            let gi = g as usize;
            if !self.is_changed[gi] {
                continue; // evicted since (and written then)
            }
            self.is_changed[gi] = false;
            if !self.groups.contains_slot(g) {
                continue; // released since
            }
            buf.clear();
            self.encode_group(gi, &mut buf);
            let key = std::mem::take(&mut self.keys[gi]);
            self.groups_table.put(&key, &buf);
            self.keys[gi] = key;
        }
        Ok(())
    }

    fn restore_state(&mut self) -> Result<()> {
        self.groups.clear();
        self.key_bytes = 0;
        self.keys.clear();
        self.row_counts.clear();
        self.free.clear();
        self.dirty.clear();
        self.is_dirty.clear();
        self.is_changed.clear();
        self.changed.clear();
        self.window_ends.clear();
        self.by_end.clear();
        for a in self.aggs.iter_mut() {
            match &mut a.state {
                State::Linear(l) => {
                    l.counts.clear();
                    if let Some(s) = &mut l.sums {
                        s.clear();
                    }
                }
                State::Multiset(m) => {
                    // the value types, which a live operator learns from its first batch
                    let mut types = Vec::new();
                    for e in a.args.iter().chain(a.spec.order_by.iter()) {
                        types.push(e.data_type(&self.input_schema)?);
                    }
                    let empty: Vec<ArrayRef> = types
                        .iter()
                        .map(datafusion::arrow::array::new_empty_array)
                        .collect();
                    m.ensure_conv(&empty)?;
                }
                State::Sketch(_) => {}
            }
        }
        self.touched.clear();
        self.hand = 0;
        if self.window.is_none() {
            // groups are read back as they are touched (a windowed aggregate needs them all:
            // closing a window walks its groups)
            self.groups_in_table = true;
            if self.global {
                self.group_id(&[]);
            }
            return Ok(());
        }
        let mut stored: Vec<Entry> = self
            .groups_table
            .iter()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        stored.sort_unstable();
        if self.global {
            self.group_id(&[]);
        }
        for (key, value) in stored {
            let g = self.group_id(&key);
            self.decode_group(g as usize, &value)?;
            if self.window.is_some() {
                self.by_end
                    .entry(self.window_ends[g as usize])
                    .or_default()
                    .push(g);
            }
        }
        Ok(())
    }

    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let batch = &input.data;
        let weights = input.weights.values();
        let key_cols = self
            .group_exprs
            .iter()
            .map(|e| evaluate(e, batch))
            .collect::<Result<Vec<_>>>()?;
        let keys = if self.global {
            None
        } else {
            Some(self.group_conv.convert_columns(&key_cols)?)
        };
        let ends = self.window.as_ref().and_then(|w| {
            let key = &key_cols[w.end_key];
            let end = match w.end_step {
                None => key.clone(),
                Some(step) => {
                    let step =
                        datafusion::arrow::array::IntervalMonthDayNanoArray::new_scalar(step);
                    datafusion::arrow::compute::kernels::numeric::add(key, &step).ok()?
                }
            };
            end.as_any()
                .downcast_ref::<datafusion::arrow::array::TimestampMicrosecondArray>()
                .cloned()
        });
        let mut gids: Vec<u32> = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let g = match &keys {
                Some(k) => {
                    let before = self.groups.len();
                    let g = self.group_id(k.row(i).data());
                    if self.groups.len() > before
                        && let Some(e) = &ends
                    {
                        let end = if e.is_null(i) { i64::MAX } else { e.value(i) };
                        self.window_ends[g as usize] = end;
                        self.by_end.entry(end).or_default().push(g);
                    }
                    g
                }
                None => 0,
            };
            self.row_counts[g as usize] += weights[i];
            self.mark(g);
            gids.push(g);
        }
        for agg in self.aggs.iter_mut() {
            let keep = match &agg.spec.filter {
                Some(f) => {
                    let m = evaluate(f, batch)?;
                    let m = m
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .ok_or_else(|| WeirError::internal("aggregate FILTER is not boolean"))?;
                    Some(true_mask(m))
                }
                None => None,
            };
            let args = agg
                .args
                .iter()
                .map(|e| evaluate(e, batch))
                .collect::<Result<Vec<_>>>()?;
            match &mut agg.state {
                State::Linear(l) => {
                    // count(*) arrives as count(literal): a non-NULL constant counts rows
                    l.update(args.first(), keep.as_ref(), &gids, weights)?;
                }
                State::Multiset(m) => {
                    let mut cols = args;
                    for o in &agg.spec.order_by {
                        cols.push(evaluate(o, batch)?);
                    }
                    m.update(&cols, keep.as_ref(), &gids, &self.keys, weights)?;
                }
                State::Sketch(sk) => {
                    sk.update(&args, keep.as_ref(), &gids, &self.keys, weights)?;
                }
            }
        }
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        self.watermark = Some(watermark);
        Ok(vec![])
    }

    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        if self.global && self.emitted.shown_one(&[]).is_none() {
            self.mark(0);
        }
        let out = self.emit()?;
        self.free_closed_windows();
        Ok(out)
    }
}

impl Aggregate {
    /// Whether group `g`'s window has closed (the watermark reached its end).
    fn closed(&self, g: u32) -> bool {
        self.watermark
            .is_some_and(|w| self.window_ends[g as usize] <= w)
    }

    /// Free the state of windows no admitted row can change any more: end + lateness has
    /// passed. Their rows stay in the view; nothing is retracted.
    fn free_closed_windows(&mut self) {
        let (Some(policy), Some(wm)) = (&self.window, self.watermark) else {
            return;
        };
        let limit = wm.saturating_sub(policy.lateness_us);
        let ends: Vec<i64> = self.by_end.range(..=limit).map(|(e, _)| *e).collect();
        for end in ends {
            let gids = self.by_end.remove(&end).unwrap_or_default();
            for g in gids {
                let gi = g as usize;
                if self.is_dirty[gi] {
                    // still to emit: keep it until it is shown
                    self.by_end.entry(end).or_default().push(g);
                    continue;
                }
                self.release(g);
            }
        }
    }

    /// Forget a group entirely (its emitted row, if any, stays where it went).
    fn release(&mut self, g: u32) {
        let key = self.vacate(g as usize);
        // at once, not at the next sync: a lookup must not read the group back from an
        // older checkpoint's entry (once groups live in the table, after an eviction), and
        // a deferred delete would remove what an eviction writes for the group if it
        // comes back before the sync
        self.groups_table.delete(&key);
        self.emitted.forget(&key);
        for agg in self.aggs.iter_mut() {
            match &mut agg.state {
                State::Multiset(m) => {
                    m.entries.delete_prefix(&key);
                }
                State::Sketch(sk) => sk.entries.delete(&key),
                State::Linear(_) => {}
            }
        }
    }

    /// Take group slot `gi` out of use (the group was released, or evicted into the
    /// table): its key leaves the map, its state in memory is zeroed and the slot is free
    /// for another group. Returns the key.
    fn vacate(&mut self, gi: usize) -> Box<[u8]> {
        self.groups.remove_slot(gi as u32);
        let key = std::mem::take(&mut self.keys[gi]);
        self.key_bytes -= key.len();
        self.row_counts[gi] = 0;
        self.window_ends[gi] = i64::MAX;
        for agg in self.aggs.iter_mut() {
            if let State::Linear(l) = &mut agg.state {
                l.counts[gi] = 0;
                if let Some(s) = &mut l.sums {
                    s.reset(gi);
                }
            }
        }
        self.free.push(gi as u32);
        key
    }

    fn emit(&mut self) -> Result<Vec<Changelog>> {
        if self.dirty.is_empty() {
            return Ok(vec![]);
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        if let Some(policy) = self.window.clone()
            && policy.emit_on_close
        {
            // emit closed windows only; the others wait for the watermark
            let (ready, waiting): (Vec<u32>, Vec<u32>) =
                dirty.into_iter().partition(|g| self.closed(*g));
            self.dirty = waiting;
            // without 'correct', a window shown once is final
            dirty = if policy.correct {
                ready
            } else {
                ready
                    .into_iter()
                    .filter(|g| {
                        let keep = self.emitted.shown_one(&self.keys[*g as usize]).is_none();
                        if !keep {
                            self.is_dirty[*g as usize] = false;
                        }
                        keep
                    })
                    .collect()
            };
            if dirty.is_empty() {
                return Ok(vec![]);
            }
        }
        for g in &dirty {
            self.is_dirty[*g as usize] = false;
        }
        for g in &dirty {
            debug_assert!(
                self.row_counts[*g as usize] >= 0,
                "group row count went negative"
            );
        }
        // groups that have rows (or the global group) get a new row
        let mut live: Vec<u32> = Vec::with_capacity(dirty.len());
        // per dirty group, in order: its row in the new batch, if it has one
        let new_rows: Vec<Option<usize>> = dirty
            .iter()
            .map(|g| {
                (self.global || self.row_counts[*g as usize] > 0).then(|| {
                    live.push(*g);
                    live.len() - 1
                })
            })
            .collect();
        let mut new_batch = None;
        let mut new_out_rows = None;
        if !live.is_empty() {
            let parser = self.group_conv.parser();
            let mut cols: Vec<ArrayRef> = if self.global {
                Vec::new()
            } else {
                self.group_conv
                    .convert_rows(live.iter().map(|g| parser.parse(&self.keys[*g as usize])))?
            };
            for agg in self.aggs.iter_mut() {
                cols.push(Self::evaluate_agg(agg, &live, &self.keys)?);
            }
            let fields = self.schema.fields();
            for (i, c) in cols.iter_mut().enumerate() {
                if c.data_type() != fields[i].data_type() {
                    *c = cast(c, fields[i].data_type())?;
                }
            }
            let batch = RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(live.len())),
            )?;
            new_out_rows = Some(self.out_conv.convert_columns(batch.columns())?);
            new_batch = Some(batch);
        }
        let mut retract: Vec<Box<[u8]>> = Vec::new();
        let mut insert_idx: Vec<u32> = Vec::new();
        for (g, at) in dirty.iter().zip(&new_rows) {
            let gi = *g as usize;
            let new_row = at.map(|i| new_out_rows.as_ref().expect("rows").row(i).data());
            let Some(old) = self.emitted.replace_one(&self.keys[gi], new_row) else {
                continue; // unchanged
            };
            if let Some(old) = old {
                retract.push(old);
            }
            if let Some(i) = at {
                insert_idx.push(*i as u32);
            }
        }
        // free groups that are gone
        for g in &dirty {
            let gi = *g as usize;
            if !self.global
                && self.row_counts[gi] == 0
                && self.emitted.shown_one(&self.keys[gi]).is_none()
            {
                let end = self.window_ends[gi];
                if let Some(v) = self.by_end.get_mut(&end) {
                    v.retain(|x| x != g);
                    if v.is_empty() {
                        self.by_end.remove(&end);
                    }
                }
                self.release(*g);
            }
        }
        let mut out = Vec::new();
        if !retract.is_empty() {
            let parser = self.out_conv.parser();
            let cols = self
                .out_conv
                .convert_rows(retract.iter().map(|r| parser.parse(r)))?;
            out.push(Changelog::retractions(RecordBatch::try_new(
                self.schema.clone(),
                cols,
            )?));
        }
        if let Some(batch) = new_batch
            && !insert_idx.is_empty()
        {
            let idx = UInt32Array::from(insert_idx);
            let cols = batch
                .columns()
                .iter()
                .map(|c| take(c, &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            out.push(Changelog::inserts(RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(idx.len())),
            )?));
        }
        Ok(out)
    }
}
/// A group's values in a multiset table (without the group key) and their
/// multiplicities, in order.
fn values<'a>(
    entries: &'a mut StateTable,
    key: &'a [u8],
) -> impl DoubleEndedIterator<Item = (&'a [u8], i64)> {
    entries
        .prefix_range(key)
        .map(move |(k, c)| (&k[key.len()..], count_of(c)))
}
