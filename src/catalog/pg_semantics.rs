//! Postgres' arithmetic where DataFusion's differs, as one analyzer rule that runs after
//! DataFusion's type coercion on every plan (ad-hoc queries, DML, views):
//!
//! - integer `+`, `-`, `*` and unary `-` raise 22003 (`bigint out of range`) on overflow
//!   instead of wrapping (DataFusion's defaults wrap); `/` already raises;
//! - `sum` of `bigint` is `numeric`, as in Postgres, so it cannot overflow (a `sum` of our
//!   own that types its argument as Postgres does, registered over DataFusion's);
//! - `sum` and `avg` of `real` and `double precision` are exact (see
//!   [`crate::operators::float_sum`]): the same value whatever the order of the rows, and
//!   what an incrementally maintained view gives after any retractions.
//!
//! Output names are kept (the rewritten expressions are aliased back), so a column
//! `a + b` is still named as before.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Datum};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ExprSchema, Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::{AggregateFunction, AggregateFunctionParams};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, BinaryExpr, ColumnarValue, Expr, ExprSchemable,
    LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
    cast,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{WeirError, sqlstate};
use crate::operators::float_sum::ExactSum;
use crate::sql::inet::{InetFn, InetOp};
use crate::sql::numeric::{NumericArith, NumericOp, as_decimal};
use crate::sql::pg_functions;
use crate::sql::types::SqlType;

/// Integer types whose arithmetic must not wrap, and how Postgres names them.
fn integer_name(t: &DataType) -> Option<&'static str> {
    Some(match t {
        DataType::Int8 => "tinyint",
        DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        DataType::Int64 => "bigint",
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => "integer",
        DataType::UInt64 => "numeric",
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
    Neg,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Add => "weir_checked_add",
            Op::Sub => "weir_checked_sub",
            Op::Mul => "weir_checked_mul",
            Op::Neg => "weir_checked_neg",
        }
    }
}

/// Checked integer arithmetic (arrow's checked kernels), erroring as Postgres does.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Checked {
    op: Op,
    signature: Signature,
}

impl Checked {
    fn new(op: Op) -> Self {
        let n = if op == Op::Neg { 1 } else { 2 };
        Checked {
            op,
            signature: Signature::any(n, Volatility::Immutable),
        }
    }
}

fn datum(v: &ColumnarValue) -> DfResult<Box<dyn Datum>> {
    Ok(match v {
        ColumnarValue::Array(a) => Box::new(a.clone()),
        ColumnarValue::Scalar(s) => Box::new(s.to_scalar()?),
    })
}

fn out_of_range(t: &DataType) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{} out of range", integer_name(t).unwrap_or("integer")),
    )))
}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        self.op.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Int64))
    }
    /// A constant name: deriving it from the arguments would cost the length of the whole
    /// chain at every level of `a + b + c ...` (the analyzer aliases rewritten
    /// expressions back to their original names).
    fn schema_name(&self, _args: &[Expr]) -> DfResult<String> {
        Ok(self.op.name().to_owned())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let t = args.return_field.data_type().clone();
        let result: ArrayRef = match self.op {
            Op::Neg => {
                let a = match &args.args[0] {
                    ColumnarValue::Array(a) => a.clone(),
                    ColumnarValue::Scalar(s) => s.to_array()?,
                };
                numeric::neg(&a).map_err(|_| out_of_range(&t))?
            }
            op => {
                let l = datum(&args.args[0])?;
                let r = datum(&args.args[1])?;
                let f = match op {
                    Op::Add => numeric::add,
                    Op::Sub => numeric::sub,
                    _ => numeric::mul,
                };
                f(l.as_ref(), r.as_ref()).map_err(|e| match e {
                    datafusion::arrow::error::ArrowError::ArithmeticOverflow(_) => out_of_range(&t),
                    other => DataFusionError::ArrowError(Box::new(other), None),
                })?
            }
        };
        if scalar && result.len() == 1 {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(result))
        }
    }
}

fn checked_udf(op: Op) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Checked::new(op)))
}

/// `sum` as Postgres types it: `sum(bigint)` is `numeric` (DataFusion's is a wrapping
/// `bigint`), the rest as DataFusion's own `sum`, which does the work.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSum {
    inner: Arc<AggregateUDF>,
    signature: Signature,
}

impl PgSum {
    fn new() -> Self {
        PgSum {
            inner: datafusion::functions_aggregate::sum::sum_udaf(),
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for PgSum {
    fn name(&self) -> &str {
        "sum"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        let [t] = args else {
            return Err(DataFusionError::Plan(
                "sum takes exactly one argument".into(),
            ));
        };
        // must map each result to itself: DataFusion coerces again when it types the call
        let to = match t {
            DataType::Null => DataType::Int64,
            DataType::Int8 | DataType::Int16 | DataType::Int32 => t.clone(),
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => DataType::Int32,
            DataType::Int64 | DataType::UInt64 => DataType::Decimal128(38, 0),
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
            DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
            | DataType::Duration(_)
            | DataType::Interval(_) => t.clone(),
            DataType::Dictionary(_, v) => return self.coerce_types(&[v.as_ref().clone()]),
            other => {
                return Err(DataFusionError::External(Box::new(WeirError::new(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!(
                        "function sum({}) does not exist",
                        crate::sql::types::SqlType::from_arrow(other)
                            .map(|t| t.display_name())
                            .unwrap_or_else(|| other.to_string())
                    ),
                ))));
            }
        };
        Ok(vec![to])
    }
    /// `smallint` and `integer` sum to `bigint` (DataFusion's `sum` of their values
    /// widened, see [`Widened`]).
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        match args {
            [DataType::Int8 | DataType::Int16 | DataType::Int32] => Ok(DataType::Int64),
            _ => self.inner.inner().return_type(args),
        }
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(Widened(self.inner.inner().accumulator(args)?)))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        self.inner.inner().state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.inner().groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DfResult<Box<dyn datafusion::logical_expr::GroupsAccumulator>> {
        Ok(Box::new(WidenedGroups(
            self.inner.inner().create_groups_accumulator(args)?,
        )))
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(Widened(
            self.inner.inner().create_sliding_accumulator(args)?,
        )))
    }
    fn reverse_expr(&self) -> datafusion::logical_expr::ReversedUDAF {
        datafusion::logical_expr::ReversedUDAF::Identical
    }
    fn order_sensitivity(&self) -> datafusion::logical_expr::utils::AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }
    fn default_value(&self, t: &DataType) -> DfResult<ScalarValue> {
        self.inner.inner().default_value(t)
    }
}

/// Narrow integers widened to `bigint` before DataFusion's `sum` sees them (its
/// accumulators take values of their result type).
fn widen(values: &[ArrayRef]) -> DfResult<Vec<ArrayRef>> {
    values
        .iter()
        .map(|v| match v.data_type() {
            DataType::Int8 | DataType::Int16 | DataType::Int32 => {
                Ok(datafusion::arrow::compute::cast(v, &DataType::Int64)?)
            }
            _ => Ok(v.clone()),
        })
        .collect()
}

#[derive(Debug)]
struct Widened(Box<dyn Accumulator>);

impl Accumulator for Widened {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.0.update_batch(&widen(values)?)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.0.retract_batch(&widen(values)?)
    }
    fn supports_retract_batch(&self) -> bool {
        self.0.supports_retract_batch()
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        self.0.evaluate()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        self.0.state()
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.0.merge_batch(states)
    }
}

struct WidenedGroups(Box<dyn datafusion::logical_expr::GroupsAccumulator>);

impl datafusion::logical_expr::GroupsAccumulator for WidenedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.0
            .update_batch(&widen(values)?, group_indices, opt_filter, total_num_groups)
    }
    fn evaluate(&mut self, emit_to: datafusion::logical_expr::EmitTo) -> DfResult<ArrayRef> {
        self.0.evaluate(emit_to)
    }
    fn state(&mut self, emit_to: datafusion::logical_expr::EmitTo) -> DfResult<Vec<ArrayRef>> {
        self.0.state(emit_to)
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.0.merge_batch(values, group_indices, total_num_groups)
    }
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        self.0.convert_to_state(&widen(values)?, opt_filter)
    }
    fn size(&self) -> usize {
        self.0.size()
    }
}

/// Names of the exact float aggregates (the `Aggregate` operator knows them).
pub const EXACT_SUM: &str = "weir_exact_sum";
pub const EXACT_AVG: &str = "weir_exact_avg";

/// `sum` / `avg` of floats, exact (see `operators::float_sum`). Shown under the name of the
/// aggregate it replaces.
#[derive(Debug)]
struct ExactFloatAgg {
    avg: bool,
    shown: Arc<AggregateUDF>,
    signature: Signature,
}

impl PartialEq for ExactFloatAgg {
    fn eq(&self, other: &Self) -> bool {
        self.avg == other.avg
    }
}
impl Eq for ExactFloatAgg {}
impl std::hash::Hash for ExactFloatAgg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.avg.hash(state);
    }
}

impl ExactFloatAgg {
    fn new(avg: bool) -> Self {
        ExactFloatAgg {
            avg,
            shown: if avg {
                datafusion::functions_aggregate::average::avg_udaf()
            } else {
                datafusion::functions_aggregate::sum::sum_udaf()
            },
            signature: Signature::exact(vec![DataType::Float64], Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for ExactFloatAgg {
    fn name(&self) -> &str {
        if self.avg { EXACT_AVG } else { EXACT_SUM }
    }
    fn schema_name(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.shown.inner().schema_name(params)
    }
    fn human_display(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.shown.inner().human_display(params)
    }
    fn display_name(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.shown.inner().display_name(params)
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(ExactFloatAccumulator {
            avg: self.avg,
            sum: ExactSum::new(),
            count: 0,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[sum]", args.name),
                DataType::Binary,
                true,
            )),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::Int64,
                true,
            )),
        ])
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        self.accumulator(args)
    }
}

#[derive(Debug)]
struct ExactFloatAccumulator {
    avg: bool,
    sum: ExactSum,
    count: i64,
}

impl ExactFloatAccumulator {
    fn feed(&mut self, values: &[ArrayRef], weight: i64) -> DfResult<()> {
        let v = datafusion::arrow::compute::cast(&values[0], &DataType::Float64)?;
        let v = v.as_primitive::<Float64Type>();
        for x in v.iter().flatten() {
            self.sum.add(x, weight);
            self.count += weight;
        }
        Ok(())
    }
}

impl Accumulator for ExactFloatAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.feed(values, 1)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.feed(values, -1)
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        if self.count == 0 {
            return Ok(ScalarValue::Float64(None));
        }
        let v = self.sum.value();
        Ok(ScalarValue::Float64(Some(if self.avg {
            v / self.count as f64
        } else {
            v
        })))
    }
    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.sum.heap_size()
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Binary(Some(self.sum.to_bytes())),
            ScalarValue::Int64(Some(self.count)),
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let sums = states[0].as_binary::<i32>();
        let counts = states[1].as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        for i in 0..sums.len() {
            if sums.is_valid(i) {
                let other = ExactSum::from_bytes(sums.value(i))
                    .ok_or_else(|| DataFusionError::Internal("corrupt exact-sum state".into()))?;
                self.sum.merge(&other);
            }
            if counts.is_valid(i) {
                self.count += counts.value(i);
            }
        }
        Ok(())
    }
}

fn exact_udaf(avg: bool) -> Arc<AggregateUDF> {
    Arc::new(AggregateUDF::new_from_impl(ExactFloatAgg::new(avg)))
}

/// The analyzer rule (see the module header).
#[derive(Debug, Default)]
pub struct PgSemantics;

impl AnalyzerRule for PgSemantics {
    fn name(&self) -> &str {
        "weir_pg_semantics"
    }

    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let plan = plan.transform_up_with_subqueries(rewrite_node)?.data;
        let plan = plan.transform_up_with_subqueries(interval_groups)?.data;
        let zone = crate::sql::time_zone::plan_zone(config);
        let plan = if zone.is_utc() {
            plan
        } else {
            let zone = zone.arg_text();
            plan.transform_up_with_subqueries(|p| session_zone_node(p, &zone))?
                .data
        };
        Ok(plan.transform_up_with_subqueries(cast_nullability)?.data)
    }
}

/// A cast to a type that carries its SQL type in its field (`x::numeric`, `::jsonb`) has
/// a nullable target field; DataFusion 55 takes a cast's nullability from its input in the
/// logical plan but from that field in the physical one, so a cast of a NOT NULL value
/// moved into a projection of its own (common subexpressions: `sum(x::numeric),
/// max(x::numeric)` over VALUES) failed "Physical input schema should be the same". The
/// field gets the input's nullability (a cast of a value is never NULL).
fn cast_nullability(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    // (most nodes have no such cast: no schema is merged for them)
    let mut any = false;
    plan.apply_expressions(|e| {
        any = e.exists(|x| Ok(matches!(x, Expr::Cast(c) if c.field.is_nullable())))?;
        Ok(if any {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if !any {
        return Ok(Transformed::no(plan));
    }
    let schema = expression_schema(&plan);
    let t = plan.map_expressions(|expr| {
        expr.transform_up(|e| match e {
            Expr::Cast(datafusion::logical_expr::Cast { expr, field })
                if field.is_nullable() && matches!(expr.nullable(&schema), Ok(false)) =>
            {
                let field = Arc::new(field.as_ref().clone().with_nullable(false));
                Ok(Transformed::yes(Expr::Cast(
                    datafusion::logical_expr::Cast { expr, field },
                )))
            }
            e => Ok(Transformed::no(e)),
        })
    })?;
    if t.transformed {
        t.map_data(|p| p.recompute_schema())
    } else {
        Ok(t)
    }
}

/// A session whose TimeZone is not UTC reads and shows `timestamptz` in its zone, as
/// Postgres: the functions that read or show one's wall-clock time get the zone as an extra
/// argument (`TEXT_OUT`, `to_char`, `extract`/`date_part`, text read as timestamptz, `+`/`-`
/// of an interval: days and months counted there); `date_trunc(unit, tstz)` truncates the
/// wall-clock time there (`timezone(z, date_trunc(unit, timezone(z, x)))`); casts between
/// `timestamptz` and `timestamp`, `date` or `time` go through `timezone(z, x)` (also the
/// casts type coercion added, `timestamp_col = tstz_col`). Runs after [`rewrite_node`], on
/// its forms. The zone is a constant of the plan: a materialized view keeps the zone it was
/// created in (`RelationDesc::time_zone`).
fn session_zone_node(plan: LogicalPlan, zone: &str) -> DfResult<Transformed<LogicalPlan>> {
    let schema = expression_schema(&plan);
    let names = NamePreserver::new(&plan);
    let t = plan.map_expressions(|expr| {
        let saved = names.save(&expr);
        let t = expr.transform_up(|e| session_zone_expr(e, &schema, zone))?;
        Ok(if t.transformed {
            Transformed::yes(saved.restore(t.data))
        } else {
            t
        })
    })?;
    if t.transformed {
        t.map_data(|p| p.recompute_schema())
    } else {
        Ok(t)
    }
}

/// The functions that write a `timestamptz` argument as a JSON string.
const JSON_WRITERS: &[&str] = &[
    "to_json",
    "to_jsonb",
    "json_build_object",
    "jsonb_build_object",
    "json_build_array",
    "jsonb_build_array",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
];

/// A JSON function's `timestamptz` arguments given as the text the JSON functions write,
/// shown in `zone`; whether there was one.
fn json_in_zone(args: &mut [Expr], ty: &dyn Fn(&Expr) -> Option<DataType>, zone: &str) -> bool {
    let mut changed = false;
    for a in args.iter_mut() {
        if ty(a).is_some_and(|t| is_timestamptz(&t)) {
            let x = std::mem::replace(a, Expr::Literal(ScalarValue::Null, None));
            *a = pg_udf(pg_functions::TIMESTAMPTZ_JSON)
                .call(vec![x, datafusion::logical_expr::lit(zone)]);
            changed = true;
        }
    }
    changed
}

fn is_timestamptz(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(_, Some(_)))
}

/// Whether a value of type `t` holds a `timestamptz` (itself, or in an array or record).
fn holds_timestamptz(t: &DataType) -> bool {
    match t {
        DataType::Timestamp(_, Some(_)) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_timestamptz(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| holds_timestamptz(f.data_type())),
        _ => false,
    }
}

fn session_zone_expr(e: Expr, schema: &DFSchema, zone: &str) -> DfResult<Transformed<Expr>> {
    use datafusion::logical_expr::lit;
    let ty = |e: &Expr| e.get_type(schema).ok();
    let at_zone = |x: Expr| pg_udf("timezone").call(vec![lit(zone), x]);
    match e {
        Expr::ScalarFunction(mut f) => {
            let name = f.func.name().to_owned();
            // a JSON function's timestamptz: written in the zone
            if JSON_WRITERS.contains(&name.as_str()) && json_in_zone(&mut f.args, &ty, zone) {
                return Ok(Transformed::yes(Expr::ScalarFunction(f)));
            }
            let arg_type = |i: usize| f.args.get(i).and_then(ty);
            let tstz_at = |i: usize| arg_type(i).is_some_and(|t| is_timestamptz(&t));
            let extra = match (name.as_str(), f.args.len()) {
                (n, 2) if n == pg_functions::TIMESTAMPTZ_IN => true,
                (n, 1) if n == pg_functions::TEXT_OUT => {
                    arg_type(0).is_some_and(|t| holds_timestamptz(&t))
                }
                ("to_char", 2) => tstz_at(0),
                ("extract" | "date_part", 2) => tstz_at(1),
                (n, 2) if n == pg_functions::DATETIME_PLUS || n == pg_functions::DATETIME_MINUS => {
                    tstz_at(0)
                }
                // the wall-clock time read in the zone (to_timestamp's, where its template
                // reads no offset)
                ("make_timestamptz", 6) | ("to_timestamp", 2) => true,
                _ => false,
            };
            if extra {
                f.args.push(lit(zone));
                return Ok(Transformed::yes(Expr::ScalarFunction(f)));
            }
            match (name.as_str(), f.args.len()) {
                // a timestamptz series steps its days and months on the wall clock there
                // (DataFusion steps in its arguments' zone)
                ("generate_series" | "range", 3) if tstz_at(0) && tstz_at(1) => {
                    let Ok(z) = crate::sql::time_zone::Zone::parse(zone) else {
                        return Ok(Transformed::no(Expr::ScalarFunction(f)));
                    };
                    for a in f.args.iter_mut().take(2) {
                        if let Some(DataType::Timestamp(unit, _)) = ty(a) {
                            let x = std::mem::replace(a, lit(ScalarValue::Null));
                            *a = cast(x, DataType::Timestamp(unit, Some(z.arrow_tz().into())));
                        }
                    }
                    Ok(Transformed::yes(Expr::ScalarFunction(f)))
                }
                // ages of wall-clock times in the zone (a day across a change is a day); a
                // timestamp beside a timestamptz is one there already (Postgres casts it to
                // timestamptz in the zone)
                ("age", 2) if tstz_at(0) || tstz_at(1) => {
                    let zoned = [tstz_at(0), tstz_at(1)];
                    let b = f.args.remove(1);
                    let a = f.args.remove(0);
                    let wall = |x: Expr, z: bool| if z { at_zone(x) } else { x };
                    f.args = vec![wall(a, zoned[0]), wall(b, zoned[1])];
                    Ok(Transformed::yes(Expr::ScalarFunction(f)))
                }
                // the wall-clock time truncated in the zone, read back there
                ("date_trunc", 2) if tstz_at(1) => {
                    let Some(out_type) = ty(&Expr::ScalarFunction(f.clone())) else {
                        return Ok(Transformed::no(Expr::ScalarFunction(f)));
                    };
                    let x = f.args.remove(1);
                    f.args.push(at_zone(x));
                    let cut = at_zone(Expr::ScalarFunction(f));
                    Ok(Transformed::yes(cast(cut, out_type)))
                }
                (n, 2) if n == pg_functions::DATETIME_CAST => {
                    let (from, to) = (arg_type(0), arg_type(1));
                    match (from, to) {
                        // a timestamptz's date there
                        (Some(DataType::Timestamp(_, Some(_))), Some(DataType::Date32)) => {
                            let x = f.args.remove(0);
                            f.args.insert(0, at_zone(x));
                            Ok(Transformed::yes(Expr::ScalarFunction(f)))
                        }
                        // a date's midnight there
                        (Some(DataType::Date32), Some(to @ DataType::Timestamp(_, Some(_)))) => {
                            let x = f.args.remove(0);
                            let naive = DataType::Timestamp(
                                datafusion::arrow::datatypes::TimeUnit::Microsecond,
                                None,
                            );
                            let midnight = pg_udf(pg_functions::DATETIME_CAST)
                                .call(vec![x, Expr::Literal(ScalarValue::try_from(&naive)?, None)]);
                            Ok(Transformed::yes(cast(at_zone(midnight), to)))
                        }
                        _ => Ok(Transformed::no(Expr::ScalarFunction(f))),
                    }
                }
                _ => Ok(Transformed::no(Expr::ScalarFunction(f))),
            }
        }
        // a JSON aggregate's timestamptz: written in the zone
        Expr::AggregateFunction(mut f) if JSON_WRITERS.contains(&f.func.name()) => {
            Ok(if json_in_zone(&mut f.params.args, &ty, zone) {
                Transformed::yes(Expr::AggregateFunction(f))
            } else {
                Transformed::no(Expr::AggregateFunction(f))
            })
        }
        Expr::Cast(datafusion::logical_expr::Cast { expr, field }) => {
            let from = ty(&expr);
            let through_zone = matches!(
                (&from, field.data_type()),
                (
                    Some(DataType::Timestamp(_, Some(_))),
                    DataType::Timestamp(_, None)
                ) | (
                    Some(DataType::Timestamp(_, None)),
                    DataType::Timestamp(_, Some(_))
                ) | (
                    Some(DataType::Timestamp(_, Some(_))),
                    DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_),
                )
            );
            Ok(if through_zone {
                Transformed::yes(Expr::Cast(datafusion::logical_expr::Cast {
                    expr: Box::new(at_zone(*expr)),
                    field,
                }))
            } else {
                Transformed::no(Expr::Cast(datafusion::logical_expr::Cast { expr, field }))
            })
        }
        other => Ok(Transformed::no(other)),
    }
}

/// One expression over `schema` with Postgres' semantics applied, as this rule applies them
/// to a plan's expressions (a CHECK constraint is planned as an expression, not a query).
pub fn analyze_expr(e: Expr, schema: &DFSchema) -> DfResult<Expr> {
    Ok(rewrite_expr(e, schema)?.0)
}

/// An expression's SQL type, by its field (its metadata tells `jsonb` and `uuid` from text).
fn declared_type(e: &Expr, schema: &DFSchema) -> Option<crate::sql::types::SqlType> {
    e.to_field(schema)
        .ok()
        .and_then(|(_, f)| crate::sql::types::field_sql_type(&f))
}

/// Whether an expression is `jsonb` (text whose field says so).
fn is_jsonb(e: &Expr, schema: &DFSchema) -> bool {
    declared_type(e, schema) == Some(crate::sql::types::SqlType::Jsonb)
}

/// The function that reads text as a value of a text-stored type (checked, canonical).
fn text_input_function(field: &Field) -> Option<&'static str> {
    match crate::sql::types::field_sql_type(field)? {
        crate::sql::types::SqlType::Jsonb => Some(pg_functions::JSONB_IN),
        crate::sql::types::SqlType::Json => Some(pg_functions::JSON_IN),
        crate::sql::types::SqlType::Uuid => Some(pg_functions::UUID_IN),
        crate::sql::types::SqlType::Inet => Some(InetOp::InetIn.name()),
        crate::sql::types::SqlType::Cidr => Some(InetOp::CidrIn.name()),
        _ => None,
    }
}

/// The function whose value sorts `e` as Postgres orders its type, when arrow's order of
/// its values differs: the grouping key of an interval or a jsonb (which also orders them),
/// an enum's label position.
fn sort_key(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    group_key(e, schema)
        .or_else(|| enum_type(e, schema).map(|t| enum_sort_key(e.clone(), &t)))
        .or_else(|| inet_sort_key(e, schema))
}

/// An `inet` / `cidr` value's bytes in Postgres' order (`sql::inet::write_sort_key`).
fn inet_sort_key(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    matches!(
        declared_type(e, schema),
        Some(SqlType::Inet | SqlType::Cidr)
    )
    .then(|| InetFn::udf(InetOp::SortKey).call(vec![e.clone()]))
}

/// The enum type of an expression (a column of one, a cast to one).
fn enum_type(e: &Expr, schema: &DFSchema) -> Option<crate::sql::types::EnumType> {
    match declared_type(e, schema)? {
        SqlType::Enum(t) => Some(t),
        _ => None,
    }
}

/// The type as the enum functions take it: its JSON, a constant.
fn enum_type_literal(t: &crate::sql::types::EnumType) -> Expr {
    datafusion::logical_expr::lit(serde_json::to_string(t).unwrap_or_default())
}

/// An enum value's position in its type's order: how enums sort and compare.
fn enum_sort_key(e: Expr, t: &crate::sql::types::EnumType) -> Expr {
    pg_udf(pg_functions::ENUM_SORT_KEY).call(vec![e, enum_type_literal(t)])
}

/// Text read as a value of the enum type (checked against its labels), typed as one.
fn enum_in(e: Expr, t: &crate::sql::types::EnumType) -> Expr {
    Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
        Box::new(pg_udf(pg_functions::ENUM_IN).call(vec![e, enum_type_literal(t)])),
        Arc::new(SqlType::Enum(t.clone()).field("", true)),
    ))
}

/// A quoted constant beside a value of a text-stored type is read as that type, as Postgres
/// types an untyped literal by the other side: beside a `uuid` it is checked and canonical
/// (`uuid_column = 'A0EEBC99-...'`), beside an enum checked against the labels (`m = 'nope'`
/// is 22P02), beside a `character(n)` its trailing blanks go (`code = 'ab '`). Returns the
/// expression and whether it changed.
fn read_constant_beside(e: Expr, other: Option<&SqlType>) -> (Expr, bool) {
    let Expr::Literal(ScalarValue::Utf8(Some(text)), meta) = &e else {
        return (e, false);
    };
    match other {
        Some(SqlType::Uuid) => (
            Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                Box::new(pg_udf(pg_functions::UUID_IN).call(vec![e])),
                Arc::new(SqlType::Uuid.field("", true)),
            )),
            true,
        ),
        Some(SqlType::Inet) => (InetFn::udf(InetOp::InetIn).call(vec![e]), true),
        Some(SqlType::Cidr) => (InetFn::udf(InetOp::CidrIn).call(vec![e]), true),
        Some(SqlType::Enum(t)) => (enum_in(e, t), true),
        Some(SqlType::Bpchar(_)) if text.ends_with(' ') => (
            Expr::Literal(
                ScalarValue::Utf8(Some(text.trim_end_matches(' ').to_owned())),
                meta.clone(),
            ),
            true,
        ),
        _ => (e, false),
    }
}

/// What a GROUP BY / DISTINCT of `e` groups by when arrow's equality of its values is not
/// Postgres': an interval's normalised key (1 day = 24 hours), a jsonb's value (1 = 1.0).
fn group_key(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    if is_interval(e, schema) {
        Some(pg_udf(pg_functions::INTERVAL_KEY).call(vec![e.clone()]))
    } else if is_jsonb(e, schema) {
        Some(pg_udf(pg_functions::JSONB_SORT_KEY).call(vec![e.clone()]))
    } else {
        None
    }
}

fn is_interval(e: &Expr, schema: &DFSchema) -> bool {
    matches!(e.get_type(schema), Ok(DataType::Interval(_)))
}

/// Intervals, jsonb and enums group, deduplicate and order as Postgres compares them:
/// `GROUP BY` and `DISTINCT` on an interval (1 day = 24 hours, 1 month = 30 days) or a jsonb
/// (1 = 1.0) group by its key ([`group_key`]) and show one of the group's values (an
/// interval's least as stored, a jsonb's first); `count(DISTINCT x)` counts keys; `min`/`max`
/// of intervals and enums pick by key; `ORDER BY` sorts by [`sort_key`]. The output
/// columns keep their names and order (a projection over the rewritten aggregate).
fn interval_groups(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    use datafusion::functions_aggregate::expr_fn::{first_value, min};
    use datafusion::logical_expr::{Aggregate, Distinct, Projection};
    let plan = match plan {
        LogicalPlan::Distinct(Distinct::All(input))
            if input
                .schema()
                .columns()
                .into_iter()
                .any(|c| group_key(&Expr::Column(c), input.schema()).is_some()) =>
        {
            let cols = column_exprs(&input);
            LogicalPlan::Aggregate(Aggregate::try_new(input, cols, vec![])?)
        }
        LogicalPlan::Aggregate(a) => LogicalPlan::Aggregate(a),
        LogicalPlan::Sort(mut sort)
            if sort
                .expr
                .iter()
                .any(|e| sort_key(&e.expr, sort.input.schema()).is_some()) =>
        {
            // ORDER BY an interval: by its normalised key; a jsonb: in Postgres' jsonb
            // order (`sql::jsonb::sort_key`); an enum: in its labels' order
            for e in sort.expr.iter_mut() {
                if let Some(k) = sort_key(&e.expr, sort.input.schema()) {
                    e.expr = k;
                }
            }
            return Ok(Transformed::yes(LogicalPlan::Sort(sort)));
        }
        other => return Ok(Transformed::no(other)),
    };
    let LogicalPlan::Aggregate(a) = plan else {
        return Ok(Transformed::no(plan));
    };
    let in_schema = a.input.schema().clone();
    let key = |e: Expr| pg_udf(pg_functions::INTERVAL_KEY).call(vec![e]);
    // aggregates over intervals: count(DISTINCT) by key, min/max by key
    let mut changed = false;
    let mut aggr = Vec::with_capacity(a.aggr_expr.len());
    for e in &a.aggr_expr {
        let (inner, name) = match e {
            Expr::Alias(al) => (al.expr.as_ref(), al.name.clone()),
            other => (other, other.schema_name().to_string()),
        };
        let Expr::AggregateFunction(f) = inner else {
            aggr.push(e.clone());
            continue;
        };
        // min/max of an enum: by its labels' order; count(DISTINCT) of a jsonb by value
        let (arg, by): (Expr, Box<dyn Fn(Expr) -> Expr>) = match f.params.args.as_slice() {
            [x] if is_interval(x, &in_schema) => (x.clone(), Box::new(key)),
            [x] if f.func.name() == "count" && f.params.distinct && is_jsonb(x, &in_schema) => (
                x.clone(),
                Box::new(|e| pg_udf(pg_functions::JSONB_SORT_KEY).call(vec![e])),
            ),
            [x] if let Some(t) = enum_type(x, &in_schema) => {
                (x.clone(), Box::new(move |e| enum_sort_key(e, &t)))
            }
            [x] if matches!(f.func.name(), "min" | "max")
                && inet_sort_key(x, &in_schema).is_some() =>
            {
                (
                    x.clone(),
                    Box::new(|e| InetFn::udf(InetOp::SortKey).call(vec![e])),
                )
            }
            _ => {
                aggr.push(e.clone());
                continue;
            }
        };
        let rewritten = match f.func.name() {
            "count" if f.params.distinct && enum_type(&arg, &in_schema).is_none() => {
                let mut f = f.clone();
                f.params.args = vec![by(arg)];
                Expr::AggregateFunction(f)
            }
            "min" | "max" if f.params.filter.is_none() => {
                let asc = f.func.name() == "min";
                // equal keys (1 day, 24 hours) in the stored order, for one answer
                first_value(
                    arg.clone(),
                    vec![by(arg.clone()).sort(asc, false), arg.sort(asc, false)],
                )
            }
            _ => {
                aggr.push(e.clone());
                continue;
            }
        };
        changed = true;
        aggr.push(rewritten.alias(name));
    }
    let grouping_sets = matches!(a.group_expr.as_slice(), [Expr::GroupingSet(_)]);
    let interval_keys: Vec<usize> = match grouping_sets {
        true => vec![],
        false => (0..a.group_expr.len())
            .filter(|&i| group_key(&a.group_expr[i], &in_schema).is_some())
            .collect(),
    };
    if interval_keys.is_empty() {
        if !changed {
            return Ok(Transformed::no(LogicalPlan::Aggregate(a)));
        }
        let out = Aggregate::try_new(a.input.clone(), a.group_expr.clone(), aggr)?;
        return Ok(Transformed::yes(LogicalPlan::Aggregate(out)));
    }
    // group by the keys; each group's value comes back as the least of its group (an
    // interval as stored), or its first (a jsonb)
    let mut groups = a.group_expr.clone();
    let mut jsonb_values = Vec::new();
    for (n, &i) in interval_keys.iter().enumerate() {
        let g = groups[i].clone();
        if is_jsonb(&g, &in_schema) {
            jsonb_values.push(n);
        }
        let k = group_key(&g, &in_schema).unwrap_or_else(|| key(g.clone()));
        groups[i] = k.alias(format!("__weir_interval_key_{n}"));
        // (a jsonb group shows its first value, as Postgres' does)
        let value = if jsonb_values.contains(&n) {
            first_value(g, vec![])
        } else {
            min(g)
        };
        aggr.push(value.alias(format!("__weir_interval_value_{n}")));
    }
    let n_aggr = a.aggr_expr.len();
    let inner = Aggregate::try_new(a.input.clone(), groups, aggr)?;
    let inner_cols = inner.schema.columns();
    let n_groups = a.group_expr.len();
    let mut exprs = Vec::with_capacity(a.schema.fields().len());
    for (i, (q, f)) in a.schema.iter().enumerate() {
        let from = if i < n_groups {
            match interval_keys.iter().position(|&k| k == i) {
                Some(n) => n_groups + n_aggr + n,
                None => i,
            }
        } else {
            i
        };
        let value = Expr::Column(inner_cols[from].clone());
        // a jsonb group's value is typed jsonb again (min gave text)
        let value = match interval_keys.iter().position(|&k| k == i && i < n_groups) {
            Some(n) if jsonb_values.contains(&n) => {
                Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                    Box::new(value),
                    Arc::new(SqlType::Jsonb.field("", true)),
                ))
            }
            _ => value,
        };
        exprs.push(value.alias_qualified(q.cloned(), f.name()));
    }
    let projection = Projection::try_new(exprs, Arc::new(LogicalPlan::Aggregate(inner)))?;
    Ok(Transformed::yes(LogicalPlan::Projection(projection)))
}

/// Fixes a freshly planned statement needs before anything reads its schema (the
/// analyzer rule runs later, and must keep the schema): `SELECT *` over USING joins in
/// Postgres' column order.
pub fn fix_planned(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    let mut changed = false;
    let effects = crate::catalog::side_effects::has_effects(&plan);
    Ok(plan
        .transform_up_with_subqueries(|p| {
            let (p, c7) = match effects {
                true => crate::catalog::side_effects::keep_effects(p)?,
                false => (p, false),
            };
            let (p, c1) = percentile_cont_in_double(p)?;
            let (p, c0) = bag_set_operation(p)?;
            let (p, c) = star_over_using(p)?;
            let c = c || c0;
            let (p, c2) = numeric_operators(p)?;
            let (p, c3) = real_math_in_double(p)?;
            let (p, c4) = nullable_scalar_subqueries(p)?;
            let (p, c5) = numeric_avg(p)?;
            let (p, c6) = recursive_term_metadata(p)?;
            let (p, c8) = keep_declared_types(p)?;
            let (p, c9) = min_max_declared_types(p)?;
            let c = c || c1 || c2 || c3 || c4 || c5 || c6 || c7 || c8 || c9;
            changed |= c;
            Ok(if c {
                Transformed::yes(p)
            } else if changed {
                Transformed::yes(p.recompute_schema()?)
            } else {
                Transformed::no(p)
            })
        })?
        .data)
}

/// `min` / `max` of a value with a declared type (an enum, `inet`, `uuid`: text to Arrow)
/// have that type, as in Postgres; DataFusion's field for them carries no declared type, so
/// a materialized view's `max(ip)` column was text. A projection over such an aggregate gives
/// those columns their argument's field (names and qualifiers kept).
fn min_max_declared_types(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    let LogicalPlan::Aggregate(a) = &plan else {
        return Ok((plan, false));
    };
    let n_groups = a.group_expr.len();
    let mut declared: Vec<Option<FieldRef>> = vec![None; a.schema.fields().len()];
    for (i, e) in a.aggr_expr.iter().enumerate() {
        let inner = match e {
            Expr::Alias(al) => al.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(f) = inner else {
            continue;
        };
        let [x] = f.params.args.as_slice() else {
            continue;
        };
        if !matches!(f.func.name(), "min" | "max") {
            continue;
        }
        let Ok((_, arg)) = x.to_field(a.input.schema()) else {
            continue;
        };
        let out = a.schema.field(n_groups + i);
        if !arg.metadata().is_empty()
            && arg.data_type() == out.data_type()
            && arg.metadata() != out.metadata()
        {
            declared[n_groups + i] = Some(Arc::new(
                out.as_ref().clone().with_metadata(arg.metadata().clone()),
            ));
        }
    }
    if declared.iter().all(Option::is_none) {
        return Ok((plan, false));
    }
    let exprs = a
        .schema
        .iter()
        .zip(declared)
        .map(|((q, f), d)| {
            let col = Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()));
            match d {
                Some(field) => Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                    Box::new(col),
                    field,
                ))
                .alias_qualified(q.cloned(), f.name()),
                None => col,
            }
        })
        .collect();
    let projection = datafusion::logical_expr::Projection::try_new(exprs, Arc::new(plan))?;
    Ok((LogicalPlan::Projection(projection), true))
}

/// `CASE`, `coalesce`, `nullif`, `greatest` and `least` over values that all have one
/// declared type (`uuid`, `jsonb`, `json`, `varchar(n)`, an enum...: text to Arrow) have
/// that type, as in Postgres (a client gets the uuid's OID, psycopg a `UUID`); DataFusion's
/// fields for them carry no declared type. Each such expression of a projection is wrapped
/// in [`pg_functions::DECLARED`] naming the type (its name kept).
fn keep_declared_types(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    use crate::sql::types::PG_TYPE_KEY;
    let LogicalPlan::Projection(p) = &plan else {
        return Ok((plan, false));
    };
    let schema = p.input.schema().clone();
    let declared = |e: &Expr| -> Option<String> {
        e.to_field(&schema)
            .ok()
            .and_then(|(_, f)| f.metadata().get(PG_TYPE_KEY).cloned())
    };
    // the values an expression answers with: its branches, or its arguments
    let values = |e: &Expr| -> Option<Vec<Expr>> {
        match e {
            Expr::Case(c) => Some(
                c.when_then_expr
                    .iter()
                    .map(|(_, t)| t.as_ref().clone())
                    .chain(c.else_expr.iter().map(|x| x.as_ref().clone()))
                    .collect(),
            ),
            Expr::ScalarFunction(f)
                if matches!(f.func.name(), "coalesce" | "greatest" | "least") =>
            {
                Some(f.args.clone())
            }
            Expr::ScalarFunction(f) if f.func.name() == "nullif" => {
                Some(f.args.iter().take(1).cloned().collect())
            }
            _ => None,
        }
    };
    // a string type's name without its length (`character varying(5)` → `character
    // varying`), None for other types
    let string_base = |t: &str| -> Option<String> {
        let base = t.split('(').next().unwrap_or(t).trim();
        matches!(base, "text" | "character varying" | "character" | "bpchar").then(|| match base {
            "character" => "bpchar".to_owned(),
            b => b.to_owned(),
        })
    };
    let typed = |e: &Expr| -> Option<String> {
        let values = values(e)?;
        if declared(e).is_some() {
            return None;
        }
        // (a computed text without a declared type is a text)
        let types: Vec<String> = values
            .iter()
            .filter(|v| !matches!(v, Expr::Literal(ScalarValue::Null, _)))
            .map(|v| {
                declared(v).or_else(|| {
                    matches!(v.get_type(&schema), Ok(DataType::Utf8)).then(|| "text".to_owned())
                })
            })
            .collect::<Option<_>>()?;
        let first = types.first()?.clone();
        let t = if types.iter().all(|t| *t == first) {
            first
        } else {
            // strings of several types: the first's (Postgres' resolution of CASE and
            // coalesce), without a length when the lengths differ
            types
                .iter()
                .map(|t| string_base(t))
                .collect::<Option<Vec<_>>>()?;
            string_base(&first)?
        };
        // nullif compares as `=`, which strings do as text: a text (Arrow's own)
        if matches!(e, Expr::ScalarFunction(f) if f.func.name() == "nullif")
            && string_base(&t).is_some()
        {
            return None;
        }
        (t != "text").then_some(t)
    };
    if !p
        .expr
        .iter()
        .any(|e| e.exists(|x| Ok(typed(x).is_some())).unwrap_or(false))
    {
        return Ok((plan, false));
    }
    let names = NamePreserver::new(&plan);
    let declared_udf = pg_udf(pg_functions::DECLARED);
    let out = plan.map_expressions(|e| {
        let name = names.save(&e);
        e.transform_up(|x| match typed(&x) {
            Some(t) => {
                Ok(Transformed::yes(declared_udf.call(vec![
                    x,
                    Expr::Literal(ScalarValue::Utf8(Some(t)), None),
                ])))
            }
            None => Ok(Transformed::no(x)),
        })
        .map(|t| t.update_data(|e| name.restore(e)))
    })?;
    Ok((out.data.recompute_schema()?, true))
}

/// `WITH RECURSIVE t AS (SELECT ARRAY[id] ... UNION ALL SELECT t.path || c.id ...)`: the
/// recursive term's rows must have the first term's schema to the field metadata (its
/// declared types: `integer[]`), which a computed column lacks ("Cannot project plan column
/// 3 to expected output field 'path': field metadata differs"); the recursive term's
/// columns are given the first term's metadata where they carry less.
fn recursive_term_metadata(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    let LogicalPlan::RecursiveQuery(r) = &plan else {
        return Ok((plan, false));
    };
    let (first, rest) = (r.static_term.schema(), r.recursive_term.schema());
    if first.fields().len() != rest.fields().len() {
        return Ok((plan, false));
    }
    let mut changed = false;
    let exprs: Vec<Expr> = rest
        .iter()
        .zip(first.fields())
        .map(|((q, f), want)| {
            let column = Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()));
            let lacks = f.metadata() != want.metadata()
                && f.metadata()
                    .iter()
                    .all(|(k, v)| want.metadata().get(k) == Some(v));
            if lacks {
                changed = true;
                column.alias_qualified_with_metadata(
                    q.cloned(),
                    f.name(),
                    Some(datafusion::common::metadata::FieldMetadata::from(
                        want.metadata(),
                    )),
                )
            } else {
                column
            }
        })
        .collect();
    if !changed {
        return Ok((plan, false));
    }
    let LogicalPlan::RecursiveQuery(mut r) = plan else {
        return Err(datafusion::error::DataFusionError::Internal(
            "matched a recursive query above".into(),
        ));
    };
    let projected = datafusion::logical_expr::Projection::try_new(exprs, r.recursive_term.clone())?;
    r.recursive_term = Arc::new(LogicalPlan::Projection(projected));
    Ok((LogicalPlan::RecursiveQuery(r), true))
}

/// Numeric `*` and `/` as Postgres computes them (`sql::numeric`), and `date ± interval`
/// as the timestamp Postgres makes it: put in place before
/// type coercion, which then types what is built over them (a `CASE` branch, a comparison)
/// with their types, and the plan's columns are typed as the values will be.
fn numeric_operators(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    let schema = expression_schema(&plan);
    rewrite_plan_exprs(plan, |e| {
        let float = |x: &Expr| {
            matches!(
                x.get_type(&schema),
                Ok(DataType::Float64 | DataType::Float32)
            )
        };
        if let Expr::ScalarFunction(f) = &e {
            // `round(double precision)` rounds half to even (Postgres' is `rint`)
            if f.func.name() == "round" && f.args.len() == 1 && float(&f.args[0]) {
                return Ok(Transformed::yes(
                    pg_udf(pg_functions::ROUND_FOR_INT).call(f.args.clone()),
                ));
            }
            // `sign` of a float NaN is 0 in Postgres (`> 0`, `< 0`, else 0); DataFusion's
            // signum passes the NaN through
            if matches!(f.func.name(), "sign" | "signum") && f.args.len() == 1 && float(&f.args[0])
            {
                let x = f.args[0].clone();
                let nan = datafusion::functions::math::expr_fn::isnan(x);
                return Ok(Transformed::yes(
                    datafusion::logical_expr::when(nan, datafusion::logical_expr::lit(0f64))
                        .otherwise(e.clone())?,
                ));
            }
            // `array_remove` removes every element equal to the value (DataFusion's
            // the first only)
            if f.func.name() == "array_remove" && f.args.len() == 2 {
                // of NULL: the NULL elements (Postgres compares with IS NOT DISTINCT
                // FROM; DataFusion's answer is NULL)
                if is_null_literal(&f.args[1]) {
                    return Ok(Transformed::yes(
                        pg_udf(pg_functions::ARRAY_REMOVE_NULLS).call(vec![f.args[0].clone()]),
                    ));
                }
                return Ok(Transformed::yes(
                    datafusion::functions_nested::remove::array_remove_all_udf()
                        .call(f.args.clone()),
                ));
            }
            // `a @> b` / `b <@ a` and `a && b`: a NULL element matches nothing in
            // Postgres (DataFusion's match NULL with NULL), and a NULL array makes
            // `@>` NULL (DataFusion's is true)
            if matches!(f.func.name(), "array_has_all" | "array_has_any") && f.args.len() == 2 {
                let (a, b) = (f.args[0].clone(), f.args[1].clone());
                let without_nulls =
                    |x: Expr| pg_udf(pg_functions::ARRAY_REMOVE_NULLS).call(vec![x]);
                if f.func.name() == "array_has_any" {
                    return Ok(Transformed::yes(f.func.call(vec![without_nulls(a), b])));
                }
                let cardinality = datafusion::functions_nested::expr_fn::cardinality;
                let no_null_in_b = cardinality(without_nulls(b.clone())).eq(cardinality(b.clone()));
                return Ok(Transformed::yes(
                    datafusion::logical_expr::when(
                        a.clone().is_null().or(b.clone().is_null()),
                        Expr::Literal(ScalarValue::Boolean(None), None),
                    )
                    .otherwise(f.func.call(vec![a, b]).and(no_null_in_b))?,
                ));
            }
            // an empty array has no dimensions: NULL (DataFusion's says 1)
            if f.func.name() == "array_ndims" && f.args.len() == 1 {
                let x = f.args[0].clone();
                let empty = datafusion::functions_nested::expr_fn::cardinality(x)
                    .eq(datafusion::logical_expr::lit(0u64));
                return Ok(Transformed::yes(
                    datafusion::logical_expr::when(
                        empty,
                        Expr::Literal(ScalarValue::UInt64(None), None),
                    )
                    .otherwise(e.clone())?,
                ));
            }
            // `ARRAY[...]` typed by its elements (`uuid[]`, `jsonb[]`): the SQL planner
            // builds it with DataFusion's own `make_array`, not the session's
            if f.func.name() == "make_array" && !f.args.is_empty() {
                return Ok(Transformed::yes(
                    crate::sql::typed_arrays::make_array().call(f.args.clone()),
                ));
            }
        }
        if let Expr::ScalarFunction(f) = &e
            && let Some((arg, t)) = integral_scale(f, &schema)
        {
            let mut f = f.clone();
            // room for the carry first: DataFusion's ceil/floor of a decimal keep its
            // type, and fail when the result does not fit it (`floor(-0.25)`)
            if let DataType::Decimal128(p, s) = arg
                && p < 38
            {
                f.args[0] = cast(f.args[0].clone(), DataType::Decimal128(p + 1, s));
            }
            return Ok(Transformed::yes(cast(Expr::ScalarFunction(f), t)));
        }
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
            return Ok(Transformed::no(e));
        };
        // `date ± interval` is a timestamp in Postgres (arrow's kernel keeps a date)
        if matches!(op, Operator::Plus | Operator::Minus) {
            let (lt, rt) = (left.get_type(&schema).ok(), right.get_type(&schema).ok());
            let date = |t: &Option<DataType>| matches!(t, Some(DataType::Date32));
            let interval = |t: &Option<DataType>| matches!(t, Some(DataType::Interval(_)));
            let ts = DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None);
            if date(&lt) && interval(&rt) {
                return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(cast(*left, ts)),
                    op,
                    right,
                ))));
            }
            if op == Operator::Plus && interval(&lt) && date(&rt) {
                return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    left,
                    op,
                    Box::new(cast(*right, ts)),
                ))));
            }
            // `date - date` is an integer of days (DataFusion's a bigint)
            if op == Operator::Minus && date(&lt) && date(&rt) {
                return Ok(Transformed::yes(cast(
                    Expr::BinaryExpr(BinaryExpr::new(left, op, right)),
                    DataType::Int32,
                )));
            }
        }
        // a float divided by zero is an error in Postgres (IEEE: infinity or NaN)
        if op == Operator::Divide {
            let number = |x: &Expr| {
                x.get_type(&schema)
                    .is_ok_and(|t| t.is_numeric() || t == DataType::Null)
            };
            if (float(&left) || float(&right)) && number(&left) && number(&right) {
                return Ok(Transformed::yes(
                    pg_udf(pg_functions::FLOAT_DIV).call(vec![*left, *right]),
                ));
            }
        }
        let nop = match op {
            Operator::Multiply => NumericOp::Mul,
            Operator::Divide => NumericOp::Div,
            _ => {
                return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                    left,
                    op,
                    right,
                })));
            }
        };
        let (lt, rt) = (left.get_type(&schema).ok(), right.get_type(&schema).ok());
        let decimal = |t: &DataType| matches!(t, DataType::Decimal128(..));
        if let (Some(lt), Some(rt)) = (&lt, &rt)
            && (decimal(lt) || decimal(rt))
            && let (Some(ld), Some(rd)) = (as_decimal(lt), as_decimal(rt))
            && nop.result_type(&ld, &rd).is_some()
        {
            // a quotient of two constants at the scale Postgres gives that quotient
            if nop == NumericOp::Div
                && let (Some((l, ls)), Some((r, rs))) =
                    (constant_decimal(&left), constant_decimal(&right))
                && let Some((q, s)) = crate::sql::numeric::constant_quotient(l, ls, r, rs)
            {
                return Ok(Transformed::yes(Expr::Literal(
                    ScalarValue::Decimal128(Some(q), 38, s),
                    None,
                )));
            }
            return Ok(Transformed::yes(
                NumericArith::udf(nop).call(vec![*left, *right]),
            ));
        }
        Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
            left,
            op,
            right,
        })))
    })
}

/// A constant integer or decimal operand (maybe cast, maybe negated) as a raw decimal
/// value and its scale; `None` for anything else, NULL included.
fn constant_decimal(e: &Expr) -> Option<(i128, i8)> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::Decimal128(Some(v), _, s) => Some((*v, *s)),
            ScalarValue::Int8(Some(v)) => Some((*v as i128, 0)),
            ScalarValue::Int16(Some(v)) => Some((*v as i128, 0)),
            ScalarValue::Int32(Some(v)) => Some((*v as i128, 0)),
            ScalarValue::Int64(Some(v)) => Some((*v as i128, 0)),
            _ => None,
        },
        Expr::Cast(c) => {
            let (v, s) = constant_decimal(&c.expr)?;
            let fits = |bits: u32| s == 0 && v.unsigned_abs() < (1u128 << (bits - 1));
            match *c.field.data_type() {
                // an unconstrained `numeric` keeps the value's own scale
                DataType::Decimal128(p, to)
                    if (p, to)
                        == (
                            crate::sql::types::NUMERIC_DEFAULT_PRECISION,
                            crate::sql::types::NUMERIC_DEFAULT_SCALE,
                        ) =>
                {
                    Some((v, s))
                }
                // `numeric(p, s)`: that scale, rounded half away from zero
                DataType::Decimal128(_, to) if to >= 0 => {
                    let shift = to as i32 - s as i32;
                    let f = 10i128.checked_pow(shift.unsigned_abs())?;
                    let v = if shift >= 0 {
                        v.checked_mul(f)?
                    } else {
                        let (q, r) = (v / f, v % f);
                        if r.unsigned_abs() * 2 >= f.unsigned_abs() {
                            q + v.signum()
                        } else {
                            q
                        }
                    };
                    Some((v, to))
                }
                DataType::Int16 if fits(16) => Some((v, s)),
                DataType::Int32 if fits(32) => Some((v, s)),
                DataType::Int64 if fits(64) => Some((v, s)),
                _ => None,
            }
        }
        Expr::Negative(x) => constant_decimal(x).and_then(|(v, s)| Some((v.checked_neg()?, s))),
        _ => None,
    }
}

/// The type of `ceil`, `floor`, `trunc`, `trunc(x, n)` and `round(x, n)` of a `numeric`,
/// as Postgres scales their value (0 decimals, `n` decimals, also more than the
/// argument's: `trunc(1.5, 2)` = `round(1.5, 2)` = `1.50`, none for a negative `n`:
/// `trunc(1234.5, -2)` = `1200`); DataFusion keeps the
/// argument's scale (`ceil(1.5)` = `2.0`); `round(x, n)` and `trunc(x, n)` of an integer
/// are `numeric` (`round(7, 2)` = `7.00`). Returns the type the argument is taken as (a
/// decimal) and the result's, `None` when the function keeps its type. The value is
/// already integral at that scale, so the cast is exact.
fn integral_scale(
    f: &datafusion::logical_expr::expr::ScalarFunction,
    schema: &DFSchema,
) -> Option<(DataType, DataType)> {
    let name = f.func.name();
    if !matches!(name, "ceil" | "floor" | "trunc" | "round") {
        return None;
    }
    let arg = f.args.first()?.get_type(schema).ok()?;
    let integer = arg.is_integer() && f.args.len() == 2;
    let arg = if integer { as_decimal(&arg)? } else { arg };
    let DataType::Decimal128(p, s) = arg else {
        return None;
    };
    // a constant number of decimals (`-3` is a negation of 3, maybe cast to the argument
    // type the function takes)
    fn constant(e: &Expr) -> Option<i64> {
        match e {
            Expr::Literal(ScalarValue::Int64(Some(n)), _) => Some(*n),
            Expr::Literal(ScalarValue::Int32(Some(n)), _) => Some(*n as i64),
            Expr::Negative(e) => constant(e).map(|n| -n),
            Expr::Cast(c) => constant(&c.expr),
            _ => None,
        }
    }
    let n: i8 = match f.args.as_slice() {
        [_] if name != "round" => 0,
        [_, e] if name != "ceil" && name != "floor" => i8::try_from(constant(e)?).ok()?,
        _ => return None,
    };
    // to tens, hundreds (`trunc(x, -3)`): no decimals
    let scale = n.max(0);
    // a carry can add an integer digit (`ceil(9.5)` = 10)
    let p = p as i16 - s as i16 + scale as i16 + 1;
    // (`round` to fewer decimals is DataFusion's already: only more, or none for a
    // negative `n`, are scaled here)
    if (scale == s && !integer) || p > 38 || (name == "round" && (0..s).contains(&n)) {
        return None;
    }
    Some((arg, DataType::Decimal128(p.max(1) as u8, scale)))
}

/// `avg` of integers and `numeric` is a `numeric` in Postgres, the quotient of the sum and
/// the count by numeric division's rules (`sql::numeric`: `avg(1, 2, 4)` =
/// `2.3333333333333333`); DataFusion's is a double for integers (`2.3333333333333335`) and
/// 4 more decimals than the argument, truncated, for decimals. An aggregate computes
/// `sum(x)` and `count(x)` instead (with the avg's DISTINCT and FILTER), and so does a window
/// for `avg(x) OVER (...)` (the same window); a projection over the node divides them under
/// the avg's column name. In a materialized view both are maintained incrementally as any
/// sum and count are (in a window, as running values continued as rows arrive).
fn numeric_avg(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    use datafusion::logical_expr::{Aggregate, Window};
    let (exprs, in_schema, n_pass, tag) = match &plan {
        LogicalPlan::Aggregate(a) => (
            &a.aggr_expr,
            a.input.schema(),
            a.schema.fields().len() - a.aggr_expr.len(),
            "avg",
        ),
        LogicalPlan::Window(w) => (
            &w.window_expr,
            w.input.schema(),
            w.input.schema().fields().len(),
            "window_avg",
        ),
        _ => return Ok((plan, false)),
    };
    let Some((exprs, sources)) = split_avgs(exprs, tag, |e| exact_avg_split(e, in_schema)) else {
        return Ok((plan, false));
    };
    let inner = match &plan {
        LogicalPlan::Aggregate(a) => LogicalPlan::Aggregate(Aggregate::try_new(
            a.input.clone(),
            a.group_expr.clone(),
            exprs,
        )?),
        LogicalPlan::Window(w) => LogicalPlan::Window(Window::try_new(exprs, w.input.clone())?),
        _ => return Ok((plan, false)),
    };
    let inner_schema = inner.schema().clone();
    let out = avg_projection(plan.schema(), n_pass, inner, &inner_schema, &sources)?;
    Ok((out, true))
}

/// `avg(x)` of an integer or numeric `x`, as an aggregate or over a window: the same call of
/// `sum` and of `count` instead.
fn exact_avg_split(e: &Expr, in_schema: &DFSchema) -> Option<(Expr, Expr)> {
    use datafusion::functions_aggregate::{count::count_udaf, sum::sum_udaf};
    use datafusion::logical_expr::expr::WindowFunctionDefinition;
    let is_avg = |name: &str| matches!(name, "avg" | "mean");
    let exact = |args: &[Expr]| matches!(args, [x] if exact_avg_argument(x, in_schema));
    let with: Box<dyn Fn(Arc<AggregateUDF>) -> Expr> = match e {
        Expr::AggregateFunction(f) if is_avg(f.func.name()) && exact(&f.params.args) => {
            Box::new(|func| {
                let mut g = f.clone();
                g.func = func;
                Expr::AggregateFunction(g)
            })
        }
        Expr::WindowFunction(f)
            if matches!(&f.fun, WindowFunctionDefinition::AggregateUDF(u) if is_avg(u.name()))
                && exact(&f.params.args) =>
        {
            Box::new(|func| {
                let mut g = f.as_ref().clone();
                g.fun = WindowFunctionDefinition::AggregateUDF(func);
                Expr::WindowFunction(Box::new(g))
            })
        }
        _ => return None,
    };
    Some((with(sum_udaf()), with(count_udaf())))
}

/// Whether `avg` of `x` is a `numeric` in Postgres: of an integer or a numeric.
fn exact_avg_argument(x: &Expr, schema: &DFSchema) -> bool {
    x.get_type(schema)
        .is_ok_and(|t| t.is_integer() || matches!(t, DataType::Decimal128(..)))
}

/// Where an output column of a node split by [`split_avgs`] comes from: its own column, or
/// the sum and count columns an avg became (positions among the node's new expressions).
type AvgSource = Result<usize, (usize, usize)>;

/// A node's expressions (aggregates, window functions) with each `avg` that `sum_count`
/// takes apart replaced by its sum and its count (named `__weir_{tag}_sum_k`,
/// `__weir_{tag}_count_k`), and where each original column now comes from; None when none
/// is.
fn split_avgs(
    exprs: &[Expr],
    tag: &str,
    sum_count: impl Fn(&Expr) -> Option<(Expr, Expr)>,
) -> Option<(Vec<Expr>, Vec<AvgSource>)> {
    let unaliased = |e: &Expr| match e {
        Expr::Alias(al) => sum_count(&al.expr),
        other => sum_count(other),
    };
    let split: Vec<_> = exprs.iter().map(unaliased).collect();
    if split.iter().all(Option::is_none) {
        return None;
    }
    let mut out = Vec::with_capacity(exprs.len() + 1);
    let mut sources = Vec::with_capacity(exprs.len());
    for (k, (e, split)) in exprs.iter().zip(split).enumerate() {
        match split {
            Some((sum, count)) => {
                sources.push(Err((out.len(), out.len() + 1)));
                out.push(sum.alias(format!("__weir_{tag}_sum_{k}")));
                out.push(count.alias(format!("__weir_{tag}_count_{k}")));
            }
            None => {
                sources.push(Ok(out.len()));
                out.push(e.clone());
            }
        }
    }
    Some((out, sources))
}

/// The projection over `inner` (a node [`split_avgs`] split) that gives back the columns of
/// `schema` (the node before): the first `n_pass` as they are, then each expression's
/// column, an avg as its sum divided by its count (`NumericOp::Avg`), under its name.
fn avg_projection(
    schema: &DFSchema,
    n_pass: usize,
    inner: LogicalPlan,
    inner_schema: &DFSchema,
    sources: &[AvgSource],
) -> DfResult<LogicalPlan> {
    let cols = inner_schema.columns();
    let mut exprs = Vec::with_capacity(schema.fields().len());
    for (i, (q, f)) in schema.iter().enumerate() {
        let value = if i < n_pass {
            Expr::Column(cols[i].clone())
        } else {
            match sources[i - n_pass] {
                Ok(at) => Expr::Column(cols[n_pass + at].clone()),
                Err((sum, count)) => NumericArith::udf(NumericOp::Avg).call(vec![
                    Expr::Column(cols[n_pass + sum].clone()),
                    Expr::Column(cols[n_pass + count].clone()),
                ]),
            }
        };
        exprs.push(value.alias_qualified(q.cloned(), f.name()));
    }
    Ok(LogicalPlan::Projection(
        datafusion::logical_expr::Projection::try_new(exprs, Arc::new(inner))?,
    ))
}

/// A scalar subquery is NULL when it has no rows, whatever its column's nullability; a
/// subquery whose column is declared NOT NULL (and which may have no rows: not an
/// aggregate without GROUP BY) gets its value wrapped in [`pg_functions::NULLABLE`], so the
/// plan's schema allows the NULL and the simplifier does not fold `IS NULL` away.
fn nullable_scalar_subqueries(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    use datafusion::logical_expr::{Projection, Subquery};
    let t = plan.map_expressions(|expr| {
        expr.transform_up(|e| {
            let Expr::ScalarSubquery(sq) = &e else {
                return Ok(Transformed::no(e));
            };
            let inner = sq.subquery.as_ref();
            let schema = inner.schema();
            if schema.fields().len() != 1 || schema.field(0).is_nullable() {
                return Ok(Transformed::no(e));
            }
            // (an aggregate without GROUP BY has its one row; projections over it too)
            let mut top = inner;
            while let LogicalPlan::Projection(p) = top {
                top = p.input.as_ref();
            }
            if matches!(top, LogicalPlan::Aggregate(a) if a.group_expr.is_empty()) {
                return Ok(Transformed::no(e));
            }
            let (qualifier, field) = schema.qualified_field(0);
            let column = Expr::Column(datafusion::common::Column::new(
                qualifier.cloned(),
                field.name(),
            ));
            let wrapped = pg_udf(pg_functions::NULLABLE)
                .call(vec![column])
                .alias_qualified(qualifier.cloned(), field.name());
            let projection = Projection::try_new(vec![wrapped], sq.subquery.clone())?;
            Ok(Transformed::yes(Expr::ScalarSubquery(Subquery {
                subquery: Arc::new(LogicalPlan::Projection(projection)),
                outer_ref_columns: sq.outer_ref_columns.clone(),
                spans: sq.spans.clone(),
            })))
        })
    })?;
    settled(t)
}

/// A plan whose expressions were rewritten, its schema recomputed if one changed, and
/// whether one did.
fn settled(t: Transformed<LogicalPlan>) -> DfResult<(LogicalPlan, bool)> {
    match t.transformed {
        true => Ok((t.data.recompute_schema()?, true)),
        false => Ok((t.data, false)),
    }
}

/// Each expression of `plan` rewritten bottom-up by `f`, the plan's column names kept
/// (its schema recomputed when something changed); whether something did.
fn rewrite_plan_exprs(
    plan: LogicalPlan,
    mut f: impl FnMut(Expr) -> DfResult<Transformed<Expr>>,
) -> DfResult<(LogicalPlan, bool)> {
    let names = NamePreserver::new(&plan);
    let t = plan.map_expressions(|expr| {
        let saved = names.save(&expr);
        let t = expr.transform_up(&mut f)?;
        Ok(if t.transformed {
            Transformed::yes(saved.restore(t.data))
        } else {
            t
        })
    })?;
    settled(t)
}

/// Postgres' math functions over `real` (`sqrt`, `sin`, `round`, `power`, ...) take and
/// return double precision (only `abs` has a `real` form): a `real` argument is widened
/// (DataFusion computes and shows them in single precision: `sin(3::real)` = `0.14112`).
const DOUBLE_ONLY_MATH: &[&str] = &[
    "sin", "cos", "tan", "cot", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
    "acosh", "atanh", "degrees", "radians", "sqrt", "cbrt", "exp", "ln", "log", "log10", "log2",
    "power", "pow", "ceil", "ceiling", "floor", "trunc", "round", "sign", "signum",
];

fn real_math_in_double(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    let schema = expression_schema(&plan);
    let single = |x: &Expr| {
        matches!(
            x.get_type(&schema),
            Ok(DataType::Float32 | DataType::Float16)
        )
    };
    rewrite_plan_exprs(plan, |e| match e {
        Expr::ScalarFunction(mut f)
            if DOUBLE_ONLY_MATH.contains(&f.func.name()) && f.args.iter().any(single) =>
        {
            for a in f.args.iter_mut() {
                if single(a) {
                    *a = cast(a.clone(), DataType::Float64);
                }
            }
            Ok(Transformed::yes(Expr::ScalarFunction(f)))
        }
        e => Ok(Transformed::no(e)),
    })
}

/// `percentile_cont` over `real`, integers and `numeric` interpolates in double precision
/// and returns it, as Postgres' does (its only numeric form takes `float8`; DataFusion
/// keeps the input's type): its argument cast, the aggregate named as before.
fn percentile_cont_in_double(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    let LogicalPlan::Aggregate(a) = &plan else {
        return Ok((plan, false));
    };
    let schema = a.input.schema().clone();
    let mut changed = false;
    let mut exprs = Vec::with_capacity(a.aggr_expr.len());
    for e in &a.aggr_expr {
        let (inner, alias) = match e {
            Expr::Alias(al) => (al.expr.as_ref(), Some(al.name.clone())),
            other => (other, None),
        };
        if let Expr::AggregateFunction(f) = inner
            && f.func.name() == "percentile_cont"
            && let Some(first) = f.params.args.first()
            && first.get_type(&schema).is_ok_and(|t| {
                matches!(t, DataType::Float32 | DataType::Float16)
                    || t.is_integer()
                    || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
            })
        {
            let name = alias.unwrap_or_else(|| e.schema_name().to_string());
            let mut f = f.clone();
            let arg = f.params.args.remove(0);
            let wide = cast(arg.clone(), DataType::Float64);
            f.params.args.insert(0, wide.clone());
            for s in f.params.order_by.iter_mut() {
                if s.expr == arg {
                    s.expr = wide.clone();
                }
            }
            exprs.push(Expr::AggregateFunction(f).alias(name));
            changed = true;
        } else {
            exprs.push(e.clone());
        }
    }
    if !changed {
        return Ok((plan, false));
    }
    let agg =
        datafusion::logical_expr::Aggregate::try_new(a.input.clone(), a.group_expr.clone(), exprs)?;
    Ok((LogicalPlan::Aggregate(agg), true))
}

/// One output column of a FROM clause as Postgres orders `*`: the columns that are the
/// same column (a USING pair, the preferred side first), and whether it is their COALESCE
/// (a FULL JOIN's USING column).
struct Slot {
    cols: Vec<datafusion::common::Column>,
    coalesce: bool,
}

fn star_slots(plan: &LogicalPlan) -> Vec<Slot> {
    use datafusion::common::JoinConstraint;
    use datafusion::logical_expr::JoinType;
    match plan {
        LogicalPlan::Join(j)
            if matches!(
                j.join_type,
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
            ) =>
        {
            let (left, right) = (star_slots(&j.left), star_slots(&j.right));
            if j.join_constraint != JoinConstraint::Using {
                return left.into_iter().chain(right).collect();
            }
            let pairs: Vec<(datafusion::common::Column, datafusion::common::Column)> =
                j.on.iter()
                    .filter_map(|(l, r)| match (l, r) {
                        (Expr::Column(l), Expr::Column(r)) => Some((l.clone(), r.clone())),
                        _ => None,
                    })
                    .collect();
            let in_pair = |slot: &Slot, left_side: bool| {
                pairs
                    .iter()
                    .position(|(l, r)| slot.cols.contains(if left_side { l } else { r }))
            };
            let mut using: Vec<Option<Slot>> = pairs.iter().map(|_| None).collect();
            let mut rest_left = Vec::new();
            let mut rest_right = Vec::new();
            for s in left {
                match in_pair(&s, true) {
                    Some(k) => using[k] = Some(s),
                    None => rest_left.push(s),
                }
            }
            for s in right {
                match in_pair(&s, false) {
                    Some(k) => {
                        let l = using[k].take();
                        let mut cols = match j.join_type {
                            JoinType::Right => s.cols.clone(),
                            _ => l.as_ref().map(|l| l.cols.clone()).unwrap_or_default(),
                        };
                        let other = match j.join_type {
                            JoinType::Right => l.map(|l| l.cols).unwrap_or_default(),
                            _ => s.cols,
                        };
                        cols.extend(other);
                        using[k] = Some(Slot {
                            cols,
                            coalesce: j.join_type == JoinType::Full,
                        });
                    }
                    None => rest_right.push(s),
                }
            }
            using
                .into_iter()
                .flatten()
                .chain(rest_left)
                .chain(rest_right)
                .collect()
        }
        LogicalPlan::Filter(f) => star_slots(&f.input),
        _ => plan
            .schema()
            .columns()
            .into_iter()
            .map(|c| Slot {
                cols: vec![c],
                coalesce: false,
            })
            .collect(),
    }
}

/// The projection of a marked `SELECT *` over USING joins, in Postgres' column order.
/// `L INTERSECT ALL R` and `L EXCEPT ALL R` count copies, as Postgres does: a row n times
/// in L and m times in R is min(n, m) times in the intersection and max(n - m, 0) times in
/// the difference. DataFusion plans them as a semi / anti join of L with R (every copy of a
/// row of L kept, or none); the rewrite marks R (`pg_functions::BAG_SET_OPERAND`, see
/// `catalog::rewrite`), and here each side numbers the copies of each row (`row_number()`
/// over the row's columns) and the join matches the copies too: copy k of a row of L is
/// kept by the semi join when R has a k-th copy, by the anti join when it has not.
fn bag_set_operation(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    use datafusion::common::{Column, NullEquality};
    use datafusion::logical_expr::{ExprFunctionExt, JoinType, LogicalPlanBuilder};
    let LogicalPlan::Join(j) = &plan else {
        return Ok((plan, false));
    };
    // under the `SELECT *` over it and the aliases DataFusion adds to operands whose
    // columns are named alike (`left`, `right`)
    let mut operand = j.right.as_ref();
    let marked = loop {
        match operand {
            LogicalPlan::SubqueryAlias(a) if a.alias.table() == pg_functions::BAG_SET_OPERAND => {
                break true;
            }
            LogicalPlan::SubqueryAlias(a) => operand = a.input.as_ref(),
            LogicalPlan::Projection(p) => operand = p.input.as_ref(),
            _ => break false,
        }
    };
    if !marked
        || !matches!(j.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
        || j.null_equality != NullEquality::NullEqualsNull
        || j.filter.is_some()
    {
        return Ok((plan, false));
    }
    const COPY: &str = "weir_copy";
    let numbered = |input: &LogicalPlan, alias: &str| -> DfResult<LogicalPlan> {
        let copy = datafusion::functions_window::expr_fn::row_number()
            .partition_by(column_exprs(input))
            .build()?
            .alias(COPY);
        LogicalPlanBuilder::from(input.clone())
            .window(vec![copy])?
            .alias(alias)?
            .build()
    };
    let keys = |plan: &LogicalPlan| -> Vec<Column> { plan.schema().columns() };
    let left = numbered(&j.left, "weir_bag_l")?;
    let right = numbered(&j.right, "weir_bag_r")?;
    let (lk, rk) = (keys(&left), keys(&right));
    // the left side's columns as they were named (qualifier and name)
    let shown: Vec<Expr> = j
        .left
        .schema()
        .iter()
        .zip(left.schema().columns())
        .map(|((q, f), c)| Expr::Column(c).alias_qualified(q.cloned(), f.name()))
        .collect();
    let built = LogicalPlanBuilder::from(left)
        .join_detailed(
            right,
            j.join_type,
            (lk, rk),
            None,
            NullEquality::NullEqualsNull,
        )?
        .project(shown)?
        .build()?;
    Ok((built, true))
}

/// Every column of a plan's output, as expressions.
fn column_exprs(plan: &LogicalPlan) -> Vec<Expr> {
    plan.schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect()
}

fn star_over_using(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    let LogicalPlan::Projection(p) = &plan else {
        return Ok((plan, false));
    };
    // the renaming of a derived table's columns (`AS s(x, y, z)`, the marker named last by
    // `rewrite::renamed_star_over_using`) over a star whose marker is gone: the names, but
    // the marker's, go to the columns below in their (Postgres') order
    let renamed = |e: &Expr| matches!(e, Expr::Alias(a) if matches!(*a.expr, Expr::Column(_)));
    if let Some(Expr::Alias(last)) = p.expr.last()
        && last.name == pg_functions::STAR_OVER_USING
        && p.expr.iter().all(renamed)
        && p.input.schema().fields().len() + 1 == p.expr.len()
    {
        let exprs: Vec<Expr> = p
            .input
            .schema()
            .columns()
            .into_iter()
            .zip(&p.expr)
            .map(|(c, e)| match e {
                Expr::Alias(a) => Expr::Column(c).alias(a.name.clone()),
                other => other.clone(),
            })
            .collect();
        let proj = datafusion::logical_expr::Projection::try_new(exprs, p.input.clone())?;
        return Ok((LogicalPlan::Projection(proj), true));
    }
    // the marker stands after the star's columns; an ORDER BY of what the select list
    // lacks adds its keys after it, and a projection above the sort keeps the select
    // list's columns (the marker among them, last)
    // `s.*` over such a derived table read its marker column, now gone below
    let is_marker =
        |e: &Expr| matches!(e, Expr::Column(c) if c.name == pg_functions::STAR_OVER_USING);
    if p.expr.iter().any(is_marker)
        && p.input
            .schema()
            .fields()
            .iter()
            .all(|f| f.name() != pg_functions::STAR_OVER_USING)
    {
        let exprs: Vec<Expr> = p.expr.iter().filter(|e| !is_marker(e)).cloned().collect();
        let proj = datafusion::logical_expr::Projection::try_new(exprs, p.input.clone())?;
        return Ok((LogicalPlan::Projection(proj), true));
    }
    let Some(at) = p.expr.iter().position(|e| match e {
        Expr::Alias(a) => a.name == pg_functions::STAR_OVER_USING,
        _ => false,
    }) else {
        let Some(k) = p
            .expr
            .iter()
            .position(|e| matches!(e, Expr::Column(c) if c.name == pg_functions::STAR_OVER_USING))
        else {
            return Ok((plan, false));
        };
        if !p.expr.iter().all(|e| matches!(e, Expr::Column(_))) {
            return Ok((plan, false));
        }
        // the star's columns below, already in Postgres' order, then the select list's
        // other items (without the sort keys after them)
        let exprs: Vec<Expr> = p
            .input
            .schema()
            .columns()
            .into_iter()
            .take(k)
            .map(Expr::Column)
            .chain(p.expr[k + 1..].iter().cloned())
            .collect();
        let proj = datafusion::logical_expr::Projection::try_new(exprs, p.input.clone())?;
        return Ok((LogicalPlan::Projection(proj), true));
    };
    let extras: Vec<Expr> = p.expr[at + 1..].to_vec();
    let mut exprs: Vec<Expr> = p.expr[..at].to_vec();
    if exprs.iter().all(|e| matches!(e, Expr::Column(_))) {
        let mut used = vec![false; exprs.len()];
        let mut ordered = Vec::with_capacity(exprs.len());
        for slot in star_slots(&p.input) {
            let found = exprs.iter().enumerate().position(|(i, e)| {
                !used[i] && matches!(e, Expr::Column(c) if slot.cols.contains(c))
            });
            let Some(i) = found else { continue };
            used[i] = true;
            let Expr::Column(star) = &exprs[i] else {
                continue;
            };
            // under the name the star gave it, so that a sort above (`ORDER BY 1`, the
            // merged column) reads the merged value
            let (qualifier, name) = (star.relation.clone(), star.name.clone());
            ordered.push(if slot.coalesce {
                datafusion::functions::expr_fn::coalesce(
                    slot.cols.iter().cloned().map(Expr::Column).collect(),
                )
                .alias_qualified(qualifier, name)
            } else if slot.cols[0] == *star {
                Expr::Column(slot.cols[0].clone())
            } else {
                Expr::Column(slot.cols[0].clone()).alias_qualified(qualifier, name)
            });
        }
        for (i, e) in exprs.iter().enumerate() {
            if !used[i] {
                ordered.push(e.clone());
            }
        }
        exprs = ordered;
    }
    exprs.extend(extras);
    let proj = datafusion::logical_expr::Projection::try_new(exprs, p.input.clone())?;
    Ok((LogicalPlan::Projection(proj), true))
}

/// The columns a node's expressions can name: its inputs', a scan's source's.
pub(crate) fn expression_schema(plan: &LogicalPlan) -> DFSchema {
    let mut schema = DFSchema::empty();
    for input in plan.inputs() {
        schema.merge(input.schema());
    }
    if let LogicalPlan::TableScan(ts) = plan
        && let Ok(s) =
            DFSchema::try_from_qualified_schema(ts.table_name.clone(), &ts.source.schema())
    {
        schema.merge(&s);
    }
    schema
}

fn rewrite_node(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    // a UNION's schema is made once, from its inputs as first planned: a declared type its
    // inputs no longer carry (a typed constant cast to the common type) is dropped, or the
    // logical and physical schemas disagree (an internal error)
    if let LogicalPlan::Union(u) = &plan
        && u.schema.fields().iter().enumerate().any(|(i, f)| {
            !f.metadata().is_empty()
                && u.inputs
                    .iter()
                    .any(|input| input.schema().field(i).metadata() != f.metadata())
        })
    {
        let LogicalPlan::Union(u) = plan else {
            unreachable!("matched as a union above");
        };
        let fields: Vec<Arc<Field>> = u
            .schema
            .fields()
            .iter()
            .map(|f| Arc::new(f.as_ref().clone().with_metadata(Default::default())))
            .collect();
        let qualified = u
            .schema
            .iter()
            .zip(fields)
            .map(|((q, _), f)| (q.cloned(), f))
            .collect();
        let schema = Arc::new(DFSchema::new_with_metadata(
            qualified,
            u.schema.as_arrow().metadata().clone(),
        )?);
        let plan = LogicalPlan::Union(datafusion::logical_expr::Union {
            inputs: u.inputs,
            schema,
        });
        return Ok(Transformed::yes(rewrite_node(plan)?.data));
    }
    let schema = expression_schema(&plan);
    let names = NamePreserver::new(&plan);
    let t = plan.map_expressions(|expr| {
        let saved = names.save(&expr);
        let (e, changed, _) = rewrite_expr(expr, &schema)?;
        let e = if changed { saved.restore(e) } else { e };
        Ok(if changed {
            Transformed::yes(e)
        } else {
            Transformed::no(e)
        })
    })?;
    if t.transformed {
        t.map_data(|p| p.recompute_schema())
    } else {
        Ok(t)
    }
}

/// `column = 'text'` where DataFusion's coercion read the text at another time unit than
/// the column's (a microsecond column meets text read as nanoseconds: both sides are cast
/// to nanoseconds, and the simplifier later casts the constant back, dividing
/// `infinity` into a finite instant): the text is read at the column's own type instead,
/// and the column is not cast. `col` is `CAST(c AS timestamp(u2))` with `c` a timestamp of
/// another unit, `text` a `weir_timestamp_in(...)` read (under a cast or not).
fn text_timestamp_at_column_unit(
    col: &Expr,
    text: &Expr,
    schema: &DFSchema,
) -> Option<(Expr, Expr)> {
    let Expr::Cast(datafusion::logical_expr::Cast { expr: c, field }) = col else {
        return None;
    };
    let (DataType::Timestamp(to_unit, _), Ok(own @ DataType::Timestamp(from_unit, _))) =
        (field.data_type(), c.get_type(schema))
    else {
        return None;
    };
    if to_unit == &from_unit {
        return None;
    }
    let call = match text {
        Expr::Cast(datafusion::logical_expr::Cast { expr, .. }) => expr.as_ref(),
        other => other,
    };
    let Expr::ScalarFunction(f) = call else {
        return None;
    };
    let name = match f.func.name() {
        n if n == pg_functions::TIMESTAMP_IN => pg_functions::TIMESTAMP_IN,
        n if n == pg_functions::TIMESTAMPTZ_IN => pg_functions::TIMESTAMPTZ_IN,
        _ => return None,
    };
    let raw = f.args.first()?.clone();
    let target = Expr::Literal(ScalarValue::try_from(&own).ok()?, None);
    Some((*c.clone(), pg_udf(name).call(vec![raw, target])))
}

/// The type of an expression whose type the rewrite did not learn on the way up.
fn type_of(e: &Expr, known: Option<DataType>, schema: &DFSchema) -> Option<DataType> {
    known.or_else(|| e.get_type(schema).ok())
}

/// Rewrite bottom up, returning (expression, changed, type when cheaply known). Types are
/// carried up the tree so that a chain of N operators costs O(N), not O(N²).
#[recursive::recursive]
fn rewrite_expr(e: Expr, schema: &DFSchema) -> DfResult<(Expr, bool, Option<DataType>)> {
    match e {
        // `jsonb IN (SELECT ...)`: by value, as jsonb's = (1 = 1.0): both sides keyed
        Expr::InSubquery(mut ins)
            if is_jsonb(&ins.expr, schema)
                && ins.subquery.subquery.schema().fields().len() == 1 =>
        {
            let (x, _, _) = rewrite_expr(*ins.expr, schema)?;
            let key = |e: Expr| pg_udf(pg_functions::JSONB_SORT_KEY).call(vec![e]);
            let plan = ins.subquery.subquery.clone();
            let (q, f) = plan.schema().qualified_field(0);
            let column = Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()));
            let keyed = datafusion::logical_expr::Projection::try_new(
                vec![key(column).alias(f.name())],
                plan,
            )?;
            ins.subquery.subquery = Arc::new(LogicalPlan::Projection(keyed));
            ins.expr = Box::new(key(x));
            Ok((Expr::InSubquery(ins), true, Some(DataType::Boolean)))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply) =>
        {
            let (l, lc, lt) = rewrite_expr(*left, schema)?;
            let (r, rc, rt) = rewrite_expr(*right, schema)?;
            let lt = type_of(&l, lt, schema);
            let rt = type_of(&r, rt, schema);
            // date/timestamp ± interval: the ends stay themselves (Postgres' answer)
            let datetime = |t: &Option<DataType>| {
                matches!(t, Some(DataType::Timestamp(..) | DataType::Date32))
            };
            let interval = |t: &Option<DataType>| matches!(t, Some(DataType::Interval(_)));
            let (dt, iv, dt_type) = if datetime(&lt) && interval(&rt) {
                (Some(l.clone()), Some(r.clone()), lt.clone())
            } else if op == Operator::Plus && interval(&lt) && datetime(&rt) {
                (Some(r.clone()), Some(l.clone()), rt.clone())
            } else {
                (None, None, None)
            };
            if let (Some(dt), Some(iv), Some(dt_type)) = (dt, iv, dt_type)
                && matches!(op, Operator::Plus | Operator::Minus)
                && Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(l.clone()),
                    op,
                    Box::new(r.clone()),
                ))
                .get_type(schema)
                .is_ok_and(|t| t == dt_type)
            {
                let f = if op == Operator::Plus {
                    pg_functions::DATETIME_PLUS
                } else {
                    pg_functions::DATETIME_MINUS
                };
                return Ok((pg_udf(f).call(vec![dt, iv]), true, Some(dt_type)));
            }
            match (lt, rt) {
                (Some(lt), Some(rt)) if lt == rt && integer_name(&lt).is_some() => {
                    let op = match op {
                        Operator::Plus => Op::Add,
                        Operator::Minus => Op::Sub,
                        _ => Op::Mul,
                    };
                    Ok((checked_udf(op).call(vec![l, r]), true, Some(lt)))
                }
                _ => Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
                    lc || rc,
                    None,
                )),
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::IsDistinctFrom
                    | Operator::IsNotDistinctFrom
            ) =>
        {
            let (l, lc, lt) = rewrite_expr(*left, schema)?;
            let (r, rc, rt) = rewrite_expr(*right, schema)?;
            if let Some((l, r)) = text_timestamp_at_column_unit(&l, &r, schema)
                .or_else(|| text_timestamp_at_column_unit(&r, &l, schema).map(|(a, b)| (b, a)))
            {
                return Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
                    true,
                    Some(DataType::Boolean),
                ));
            }
            // quoted constants read as the other side's type; enums order by their labels
            let (l_type, r_type) = (declared_type(&l, schema), declared_type(&r, schema));
            let (l, l_read) = read_constant_beside(l, r_type.as_ref());
            let (r, r_read) = read_constant_beside(r, l_type.as_ref());
            let (lc, rc) = (lc || l_read, rc || r_read);
            let an_enum = [&l_type, &r_type].into_iter().find_map(|t| match t {
                Some(SqlType::Enum(t)) => Some(t.clone()),
                _ => None,
            });
            let ordering = matches!(
                op,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            );
            // arrays order with a NULL element after every value, as Postgres' do
            let list = |e: &Expr| {
                matches!(
                    e.get_type(schema),
                    Ok(DataType::List(_) | DataType::LargeList(_))
                )
            };
            if ordering && list(&l) && l.get_type(schema).ok() == r.get_type(schema).ok() {
                let key = |e: Expr| pg_udf(pg_functions::ARRAY_SORT_KEY).call(vec![e]);
                return Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(key(l)), op, Box::new(key(r)))),
                    true,
                    Some(DataType::Boolean),
                ));
            }
            // inet and cidr order as Postgres orders them, and a cidr equals an inet of the
            // same address and mask (their texts differ: `1.2.3.4/32`, `1.2.3.4`)
            let network = |t: &Option<SqlType>| matches!(t, Some(SqlType::Inet | SqlType::Cidr));
            let (l_now, r_now) = (declared_type(&l, schema), declared_type(&r, schema));
            if (network(&l_now) || network(&r_now)) && (ordering || l_now != r_now) {
                let key = |e: Expr| InetFn::udf(InetOp::SortKey).call(vec![e]);
                return Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(key(l)), op, Box::new(key(r)))),
                    true,
                    Some(DataType::Boolean),
                ));
            }
            if let Some(t) = an_enum {
                let (l, r) = match ordering {
                    true => (enum_sort_key(l, &t), enum_sort_key(r, &t)),
                    false => (l, r),
                };
                return Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
                    true,
                    Some(DataType::Boolean),
                ));
            }
            let is_interval = |t: Option<DataType>, e: &Expr| {
                matches!(type_of(e, t, schema), Some(DataType::Interval(_)))
            };
            if matches!(
                op,
                Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::Eq
                    | Operator::NotEq
            ) && {
                // (a quoted constant beside a jsonb is a jsonb, as Postgres types it)
                let text = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Utf8(Some(_)), _));
                (is_jsonb(&l, schema) || text(&l))
                    && (is_jsonb(&r, schema) || text(&r))
                    && (is_jsonb(&l, schema) || is_jsonb(&r, schema))
            } {
                // jsonb compares in Postgres' jsonb order (numbers by value: 1 = 1.0)
                let key = |e: Expr| pg_udf(pg_functions::JSONB_SORT_KEY).call(vec![e]);
                return Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(key(l)), op, Box::new(key(r)))),
                    true,
                    Some(DataType::Boolean),
                ));
            }
            if is_interval(lt, &l) && is_interval(rt, &r) {
                // Postgres compares intervals with 1 month = 30 days, 1 day = 24 hours
                let key = |e: Expr| pg_udf(pg_functions::INTERVAL_KEY).call(vec![e]);
                return Ok((
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(key(l)), op, Box::new(key(r)))),
                    true,
                    Some(DataType::Boolean),
                ));
            }
            Ok((
                Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r))),
                lc || rc,
                Some(DataType::Boolean),
            ))
        }
        // a cast to a domain: to its base type, then the domain's check (typed as the base)
        Expr::Cast(datafusion::logical_expr::Cast { expr, field })
            if field.metadata().contains_key(crate::sql::types::DOMAIN_KEY) =>
        {
            let mut meta = field.metadata().clone();
            let domain = meta
                .remove(crate::sql::types::DOMAIN_KEY)
                .unwrap_or_default();
            let base = Arc::new(field.as_ref().clone().with_metadata(meta));
            let (x, _, t) = rewrite_expr(
                Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                    expr,
                    base.clone(),
                )),
                schema,
            )?;
            let checked = pg_udf(pg_functions::DOMAIN_CHECK)
                .call(vec![x, datafusion::logical_expr::lit(domain)]);
            Ok((
                Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                    Box::new(checked),
                    base,
                )),
                true,
                t,
            ))
        }
        Expr::Cast(datafusion::logical_expr::Cast { expr, field }) => {
            let data_type = field.data_type().clone();
            let (x, c, t) = rewrite_expr(*expr, schema)?;
            // a typed constant (`2.25::numeric`, whose field names its declared type) cast to
            // another type (UNION's common type) loses that type: DataFusion's logical cast
            // kept the constant's metadata where the physical one drops it, an internal
            // error in a plan that compares them (`VALUES (3.14159) UNION SELECT
            // 2.25::numeric ORDER BY 1`)
            let (x, c) = match x {
                Expr::Literal(v, Some(_)) if v.data_type() != data_type => {
                    (Expr::Literal(v, None), true)
                }
                Expr::Cast(datafusion::logical_expr::Cast { expr, field })
                    if !field.metadata().is_empty() && *field.data_type() != data_type =>
                {
                    let cast = datafusion::logical_expr::Cast::new(expr, field.data_type().clone());
                    (Expr::Cast(cast), true)
                }
                x => (x, c),
            };
            let from = type_of(&x, t, schema);
            // an int2vector / oidvector's text: its elements separated by spaces (`1 2`)
            if matches!(declared_type(&x, schema), Some(SqlType::Vector(_)))
                && matches!(
                    data_type,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                )
            {
                let text = datafusion::functions_nested::expr_fn::array_to_string(
                    x,
                    datafusion::logical_expr::lit(" "),
                );
                return Ok((cast(text, data_type.clone()), true, Some(data_type)));
            }
            // text (or another enum) to an enum: checked against its labels
            if let Some(t) = crate::sql::types::field_enum_type(&field)
                && enum_type(&x, schema).as_ref() != Some(&t)
            {
                let text = match &from {
                    Some(DataType::Utf8) => x,
                    _ => cast(x, DataType::Utf8),
                };
                return Ok((enum_in(text, &t), true, Some(data_type)));
            }
            match (&from, &data_type) {
                // text by the value's output function: `{a,b}`, `Infinity`, `1e+300`
                (
                    Some(
                        DataType::List(_)
                        | DataType::LargeList(_)
                        | DataType::FixedSizeList(..)
                        | DataType::Struct(_)
                        | DataType::Float32
                        | DataType::Float64
                        | DataType::Date32
                        | DataType::Timestamp(..)
                        | DataType::Time64(_)
                        | DataType::Interval(_)
                        | DataType::Binary
                        | DataType::LargeBinary
                        // an unconstrained numeric: without its trailing zeros
                        | DataType::Decimal128(
                            crate::sql::types::NUMERIC_DEFAULT_PRECISION,
                            crate::sql::types::NUMERIC_DEFAULT_SCALE,
                        ),
                    ),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View,
                ) => {
                    let text = pg_udf(pg_functions::TEXT_OUT).call(vec![x]);
                    let text = if data_type == DataType::Utf8 {
                        text
                    } else {
                        cast(text, data_type.clone())
                    };
                    Ok((text, true, Some(data_type)))
                }
                // to boolean: only from integer (and text); Postgres has no cast from
                // smallint, bigint, numeric or floats (42846). A bigint only when it is
                // one for sure (a column, a cast): integer constants and expressions over
                // them are bigint here where Postgres' are integer.
                (
                    Some(
                        from @ (DataType::Int16
                        | DataType::Float32
                        | DataType::Float64
                        | DataType::Decimal128(..)),
                    ),
                    DataType::Boolean,
                ) | (Some(from @ DataType::Int64), DataType::Boolean)
                    if *from != DataType::Int64
                        || matches!(&x, Expr::Column(_) | Expr::Cast(_)) =>
                {
                    let shown = match from {
                        DataType::Decimal128(..) => "numeric".to_owned(),
                        other => SqlType::from_arrow(other)
                            .map(|t| t.display_name())
                            .unwrap_or_else(|| other.to_string()),
                    };
                    Err(DataFusionError::External(Box::new(crate::error::WeirError::new(
                        "42846",
                        format!("cannot cast type {shown} to boolean"),
                    ))))
                }
                // to an integer: rounded, not truncated
                (
                    Some(
                        DataType::Float32
                        | DataType::Float64
                        | DataType::Decimal128(..)
                        | DataType::Decimal256(..),
                    ),
                    DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64,
                ) => Ok((
                    cast(
                        pg_udf(pg_functions::ROUND_FOR_INT).call(vec![x]),
                        data_type.clone(),
                    ),
                    true,
                    Some(data_type),
                )),
                // double precision to real: out of range is 22003, not infinity or 0
                (Some(DataType::Float64), DataType::Float32) => Ok((
                    pg_udf(crate::sql::pg_math::FLOAT4_OF_FLOAT8).call(vec![x]),
                    true,
                    Some(data_type),
                )),
                // text to bytea: Postgres' input forms (`\x` hex, or `\ooo` / `\\` escapes)
                (
                    Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
                    DataType::Binary | DataType::LargeBinary | DataType::BinaryView,
                ) => Ok((
                    cast(pg_udf(pg_functions::BYTEA_IN).call(vec![x]), data_type.clone()),
                    true,
                    Some(data_type),
                )),
                // text to an interval: Postgres' input forms (`sql::interval_in`)
                (
                    Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
                    DataType::Interval(_),
                ) => Ok((
                    cast(pg_udf(pg_functions::INTERVAL_IN).call(vec![x]), data_type.clone()),
                    true,
                    Some(data_type),
                )),
                // text to an array: read as Postgres array text, then its elements cast
                // (arrow's cast would make the whole text one element)
                (Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View), DataType::List(_)) => {
                    // a constant of more than one dimension (`'{{1,2},{3,4}}'::int[]`): an
                    // array of arrays, as `ARRAY[ARRAY[1,2],ARRAY[3,4]]` (Postgres' int[]
                    // has any number of dimensions)
                    if let Some((value, nested)) = multi_dimensional_literal(&x, &data_type)? {
                        let field = Arc::new(field.as_ref().clone().with_data_type(nested.clone()));
                        let (e, _, _) = rewrite_expr(
                            Expr::Cast(datafusion::logical_expr::Cast {
                                expr: Box::new(Expr::Literal(value, None)),
                                field,
                            }),
                            schema,
                        )?;
                        return Ok((e, true, Some(nested)));
                    }
                    let parsed = pg_udf(pg_functions::PARSE_ARRAY).call(vec![x]);
                    let (e, _, _) = rewrite_expr(
                        Expr::Cast(datafusion::logical_expr::Cast {
                            expr: Box::new(parsed),
                            field,
                        }),
                        schema,
                    )?;
                    Ok((e, true, Some(data_type)))
                }
                // text[] to uuid[] (inet[], cidr[]): each element checked and canonical
                (Some(DataType::List(from_elem)), DataType::List(to_elem))
                    if let Some(input) = text_input_function(to_elem)
                        && input != pg_functions::JSONB_IN
                        && input != pg_functions::JSON_IN
                        && crate::sql::types::field_sql_type(from_elem)
                            != crate::sql::types::field_sql_type(to_elem) =>
                {
                    Ok((
                        Expr::Cast(datafusion::logical_expr::Cast {
                            expr: Box::new(pg_udf(input).call(vec![x])),
                            field,
                        }),
                        true,
                        Some(data_type),
                    ))
                }
                // inet to text: with the mask length always (`text(inet)`); inet to cidr:
                // the address cut to its mask (`network`), not checked as cidr input
                (Some(DataType::Utf8), DataType::Utf8)
                    if matches!(declared_type(&x, schema), Some(SqlType::Inet | SqlType::Cidr))
                        && matches!(
                            crate::sql::types::field_sql_type(&field),
                            Some(SqlType::Text | SqlType::Varchar(_) | SqlType::Bpchar(_) | SqlType::Cidr)
                        ) =>
                {
                    let op = match crate::sql::types::field_sql_type(&field) {
                        Some(SqlType::Cidr) => InetOp::Network,
                        _ => InetOp::Text,
                    };
                    if op == InetOp::Network && declared_type(&x, schema) == Some(SqlType::Cidr) {
                        return Ok((x, c, Some(data_type)));
                    }
                    Ok((
                        Expr::Cast(datafusion::logical_expr::Cast {
                            expr: Box::new(InetFn::udf(op).call(vec![x])),
                            field,
                        }),
                        true,
                        Some(data_type),
                    ))
                }
                // text to jsonb or uuid: checked and canonical (`sql::jsonb::normalize`,
                // `sql::uuid::canonical`)
                (Some(DataType::Utf8), DataType::Utf8)
                    if let Some(input) = text_input_function(&field)
                        && declared_type(&x, schema) != crate::sql::types::field_sql_type(&field) =>
                {
                    Ok((
                        Expr::Cast(datafusion::logical_expr::Cast {
                            expr: Box::new(pg_udf(input).call(vec![x])),
                            field,
                        }),
                        true,
                        Some(data_type),
                    ))
                }
                // date <-> timestamp: infinity stays infinity
                (
                    Some(DataType::Date32 | DataType::Timestamp(..)),
                    DataType::Date32 | DataType::Timestamp(..),
                ) if matches!(from, Some(DataType::Date32))
                    != matches!(data_type, DataType::Date32) =>
                {
                    let target = Expr::Literal(ScalarValue::try_from(&data_type)?, None);
                    Ok((
                        Expr::Cast(datafusion::logical_expr::Cast {
                            expr: Box::new(
                                pg_udf(pg_functions::DATETIME_CAST).call(vec![x, target]),
                            ),
                            field,
                        }),
                        true,
                        Some(data_type),
                    ))
                }
                // the time of day of `infinity` is NULL, as in Postgres (arrow's cast fails)
                (Some(DataType::Timestamp(..)), DataType::Time64(_) | DataType::Time32(_)) => {
                    let finite = pg_udf("isfinite").call(vec![x.clone()]);
                    let time = Expr::Cast(datafusion::logical_expr::Cast {
                        expr: Box::new(x),
                        field,
                    });
                    Ok((
                        Expr::Case(datafusion::logical_expr::Case::new(
                            None,
                            vec![(Box::new(finite), Box::new(time))],
                            None,
                        )),
                        true,
                        Some(data_type),
                    ))
                }
                // a numeric as Postgres reads it (`1e3`, `-1.5E-2`)
                (
                    Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
                    DataType::Decimal128(..),
                ) => Ok((
                    cast(
                        pg_udf(pg_functions::NUMERIC_IN).call(vec![x]),
                        data_type.clone(),
                    ),
                    true,
                    Some(data_type),
                )),
                // a time as Postgres reads it (`allballs`, `24:00`)
                (Some(DataType::Utf8), DataType::Time64(_)) => Ok((
                    cast(pg_udf(pg_functions::TIME_IN).call(vec![x]), data_type.clone()),
                    true,
                    Some(data_type),
                )),
                // dates and timestamps as Postgres reads them (`sql::datetime_in`)
                (Some(DataType::Utf8), t) if crate::sql::datetime_in::applies(t).is_some() => {
                    let f = if crate::sql::datetime_in::applies(t) == Some(true) {
                        pg_functions::TIMESTAMPTZ_IN
                    } else {
                        pg_functions::TIMESTAMP_IN
                    };
                    let target = Expr::Literal(ScalarValue::try_from(&data_type)?, None);
                    Ok((
                        cast(pg_udf(f).call(vec![x, target]), data_type.clone()),
                        true,
                        Some(data_type),
                    ))
                }
                // text as a float, as Postgres reads it (out of range 22003, '-NaN' the one
                // NaN: `sql::pg_math::FLOAT_IN`)
                (
                    Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
                    DataType::Float32 | DataType::Float64,
                ) => {
                    let target = Expr::Literal(ScalarValue::try_from(&data_type)?, None);
                    Ok((
                        pg_udf(crate::sql::pg_math::FLOAT_IN).call(vec![x, target]),
                        true,
                        Some(data_type),
                    ))
                }
                _ => Ok((
                    Expr::Cast(datafusion::logical_expr::Cast {
                        expr: Box::new(x),
                        field,
                    }),
                    c,
                    Some(data_type),
                )),
            }
        }
        // `date_trunc(unit, date)`: the date as a `timestamptz` in microseconds, as
        // Postgres reads it (DataFusion's coercion made it a nanosecond timestamp)
        Expr::ScalarFunction(mut f)
            if f.func.name() == "date_trunc"
                && f.args.len() == 2
                && matches!(&f.args[1], Expr::Cast(c)
                    if matches!(c.expr.get_type(schema), Ok(DataType::Date32))) =>
        {
            if let Expr::Cast(c) = &mut f.args[1] {
                let zone = Some(crate::sql::types::SESSION_ZONE.into());
                let t =
                    DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, zone);
                c.field = Arc::new(c.field.as_ref().clone().with_data_type(t));
            }
            let mut args = Vec::with_capacity(2);
            for a in f.args {
                args.push(rewrite_expr(a, schema)?.0);
            }
            let call = Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction {
                func: f.func,
                args,
            });
            Ok((call, true, None))
        }
        // `generate_series(date, date, interval)` is Postgres' timestamptz series (there
        // is no date one: the dates are cast), as `generate_series` in FROM already is
        Expr::ScalarFunction(f)
            if matches!(f.func.name(), "generate_series" | "range")
                && f.args.len() == 3
                && matches!(f.args[0].get_type(schema), Ok(DataType::Date32)) =>
        {
            let zone = Some(crate::sql::types::SESSION_ZONE.into());
            let t = DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Nanosecond, zone);
            let mut args = Vec::with_capacity(3);
            for (i, a) in f.args.into_iter().enumerate() {
                let a = rewrite_expr(a, schema)?.0;
                args.push(if i < 2 { cast(a, t.clone()) } else { a });
            }
            let call = Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction {
                func: f.func,
                args,
            });
            Ok((call, true, None))
        }
        // `octet_length` of a character(n) counts its padding (Postgres' bpcharoctetlen);
        // the value is stored without it
        Expr::ScalarFunction(mut f)
            if f.func.name() == "octet_length"
                && f.args.len() == 1
                && matches!(
                    declared_type(&f.args[0], schema),
                    Some(SqlType::Bpchar(Some(_)))
                ) =>
        {
            let Some(SqlType::Bpchar(Some(n))) = declared_type(&f.args[0], schema) else {
                return Ok((Expr::ScalarFunction(f), false, None));
            };
            let x = f.args.remove(0);
            f.args = vec![datafusion::functions::unicode::expr_fn::rpad(vec![
                x,
                datafusion::logical_expr::lit(n as i64),
            ])];
            Ok((Expr::ScalarFunction(f), true, None))
        }
        // `to_hex` of an integer narrower than bigint is Postgres' int4 one: a negative
        // value is its 32-bit two's complement (DataFusion's widens it to 64 bits)
        Expr::ScalarFunction(mut f)
            if f.func.name() == "to_hex"
                && f.args.len() == 1
                && matches!(
                    f.args[0].get_type(schema),
                    Ok(DataType::Int8 | DataType::Int16 | DataType::Int32)
                ) =>
        {
            let x = cast(rewrite_expr(f.args.remove(0), schema)?.0, DataType::Int64);
            let wrapped = datafusion::logical_expr::when(
                x.clone().lt(datafusion::logical_expr::lit(0i64)),
                x.clone() + datafusion::logical_expr::lit(1i64 << 32),
            )
            .otherwise(x)?;
            f.args = vec![wrapped];
            Ok((Expr::ScalarFunction(f), true, None))
        }
        Expr::ScalarFunction(f) if f.func.name() == "array_element" && f.args.len() == 2 => {
            // the whole chain `a[i][j]...` at once: the array and its subscripts, innermost
            // first
            let func = f.func.clone();
            let mut subscripts = vec![f.args[1].clone()];
            let mut base = f.args[0].clone();
            while let Expr::ScalarFunction(g) = &base
                && g.func.name() == "array_element"
                && g.args.len() == 2
            {
                subscripts.push(g.args[1].clone());
                base = g.args[0].clone();
            }
            subscripts.reverse();
            let mut element = rewrite_expr(base, schema)?.0;
            // fewer subscripts than the array has dimensions (`a[1]` of `{{1,2},{3,4}}`):
            // NULL in Postgres (a multi-dimensional array is not an array of arrays)
            // (of the type the subscripts leave: the statement's columns are typed already)
            if let Ok(t) = element.get_type(schema) {
                let (mut depth, mut inner, mut left) = (0, t, None);
                while let DataType::List(f) | DataType::LargeList(f) = inner {
                    depth += 1;
                    inner = f.data_type().clone();
                    if depth == subscripts.len() {
                        left = Some(inner.clone());
                    }
                }
                if let Some(left) = left.filter(|_| subscripts.len() < depth) {
                    return Ok((
                        Expr::Literal(ScalarValue::try_from(&left)?, None),
                        true,
                        None,
                    ));
                }
            }
            for (k, sub) in subscripts.into_iter().enumerate() {
                let mut index = rewrite_expr(sub, schema)?.0;
                // an int2vector / oidvector (`pg_index.indkey`) counts from 0
                if k == 0 && matches!(declared_type(&element, schema), Some(SqlType::Vector(_))) {
                    index = cast(index, DataType::Int64) + datafusion::logical_expr::lit(1i64);
                }
                let at = Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction {
                    func: func.clone(),
                    args: vec![element, index.clone()],
                });
                // Postgres arrays have no negative subscripts: `a[-1]` is NULL, not the last
                element = datafusion::logical_expr::when(
                    cast(index, DataType::Int64).gt_eq(datafusion::logical_expr::lit(1i64)),
                    at,
                )
                .end()?;
            }
            Ok((element, true, None))
        }
        // `generate_subscripts(v, 1)` of an int2vector / oidvector (`pg_index.indkey`: what
        // `rewrite.rs` made it, a series from 1 to the length) counts from 0, as its
        // subscripts do
        Expr::ScalarFunction(mut f)
            if f.func.name() == "generate_series"
                && f.args.len() == 2
                && matches!(f.args[0], Expr::Literal(ScalarValue::Int64(Some(1)), _))
                && f.args[1]
                    .exists(|e| {
                        Ok(matches!(e, Expr::ScalarFunction(g)
                        if g.func.name() == "array_length"
                            && g.args.first().is_some_and(|a| {
                                matches!(declared_type(a, schema), Some(SqlType::Vector(_)))
                            })))
                    })
                    .unwrap_or(false) =>
        {
            let last = f
                .args
                .pop()
                .unwrap_or_else(|| Expr::Literal(ScalarValue::Null, None));
            f.args[0] = datafusion::logical_expr::lit(0i64);
            f.args.push(last - datafusion::logical_expr::lit(1i64));
            Ok((Expr::ScalarFunction(f), true, None))
        }
        // `~ inet`: the address's bits inverted (`~` was planned as the integer operator)
        Expr::ScalarFunction(f)
            if f.func.name() == pg_functions::BITWISE_NOT
                && f.args.len() == 1
                && matches!(
                    declared_type(&f.args[0], schema),
                    Some(SqlType::Inet | SqlType::Cidr)
                ) =>
        {
            let arg = f
                .args
                .into_iter()
                .next()
                .unwrap_or_else(|| Expr::Literal(ScalarValue::Null, None));
            let (x, _, _) = rewrite_expr(arg, schema)?;
            Ok((
                InetFn::udf(InetOp::Not).call(vec![x]),
                true,
                Some(DataType::Utf8),
            ))
        }
        Expr::InList(il) => {
            // `uuid_column IN ('A0EEBC99-...', ...)`: the constants read as the column's type
            let (x, mut changed, _) = rewrite_expr(*il.expr, schema)?;
            let x_type = declared_type(&x, schema);
            let mut list = Vec::with_capacity(il.list.len());
            for item in il.list {
                let (item, c, _) = rewrite_expr(item, schema)?;
                let (item, read) = read_constant_beside(item, x_type.as_ref());
                changed |= c || read;
                list.push(item);
            }
            Ok((
                Expr::InList(datafusion::logical_expr::expr::InList::new(
                    Box::new(x),
                    list,
                    il.negated,
                )),
                changed,
                Some(DataType::Boolean),
            ))
        }
        Expr::Negative(inner) => {
            let (x, c, t) = rewrite_expr(*inner, schema)?;
            match type_of(&x, t, schema) {
                Some(t) if integer_name(&t).is_some() => {
                    Ok((checked_udf(Op::Neg).call(vec![x]), true, Some(t)))
                }
                _ => Ok((Expr::Negative(Box::new(x)), c, None)),
            }
        }
        Expr::Column(ref c) => {
            let t = schema
                .field_from_column(c)
                .ok()
                .map(|f| f.data_type().clone());
            Ok((e, false, t))
        }
        Expr::Literal(ref v, _) => {
            let t = v.data_type();
            Ok((e, false, Some(t)))
        }
        Expr::AggregateFunction(agg) => {
            let mut changed = false;
            let mut agg = agg;
            let mut args = Vec::with_capacity(agg.params.args.len());
            for a in std::mem::take(&mut agg.params.args) {
                let (a, c, _) = rewrite_expr(a, schema)?;
                changed |= c;
                args.push(a);
            }
            agg.params.args = args;
            if let Some(f) = agg.params.filter.take() {
                let (f, c, _) = rewrite_expr(*f, schema)?;
                changed |= c;
                agg.params.filter = Some(Box::new(f));
            }
            let (e, c) = rewrite_aggregate(agg, schema);
            Ok((e, changed || c, None))
        }
        other => {
            let mut changed = false;
            let t = other.map_children(|c| {
                let (c, ch, _) = rewrite_expr(c, schema)?;
                changed |= ch;
                Ok(Transformed::new_transformed(c, ch))
            })?;
            Ok((t.data, changed, None))
        }
    }
}

/// A text constant holding a Postgres array literal of two or more dimensions, cast to an
/// array type: the literal as nested text lists and the target type nested as deep (its
/// element type kept). `None` for anything else (one dimension, not a constant).
fn multi_dimensional_literal(
    x: &Expr,
    target: &DataType,
) -> DfResult<Option<(ScalarValue, DataType)>> {
    use crate::sql::pg_text::{ArrayTextItem, array_text_dims, parse_array_items};
    use datafusion::arrow::array::{ListArray, StringArray};
    use datafusion::arrow::buffer::OffsetBuffer;
    let Expr::Literal(
        ScalarValue::Utf8(Some(text))
        | ScalarValue::LargeUtf8(Some(text))
        | ScalarValue::Utf8View(Some(text)),
        _,
    ) = x
    else {
        return Ok(None);
    };
    let Some(items) = parse_array_items(text) else {
        return Ok(None);
    };
    if !items.iter().any(|i| matches!(i, ArrayTextItem::Sub(_))) {
        return Ok(None);
    }
    let malformed = |detail: &str| {
        DataFusionError::External(Box::new(
            WeirError::new(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                format!("malformed array literal: \"{text}\""),
            )
            .with_detail(detail),
        ))
    };
    let dims = array_text_dims(&items).map_err(malformed)?;
    // the element type: the target's innermost
    let mut element = target.clone();
    while let DataType::List(f) = element {
        element = f.data_type().clone();
    }
    // the literal is rectangular (`dims`): its leaves in order, then one level of lists per
    // dimension, innermost first, each `dims[d]` long
    fn leaves<'a>(items: &'a [ArrayTextItem], out: &mut Vec<Option<&'a str>>) {
        for i in items {
            match i {
                ArrayTextItem::Value(v) => out.push(v.as_deref()),
                ArrayTextItem::Sub(s) => leaves(s, out),
            }
        }
    }
    let mut values = Vec::new();
    leaves(&items, &mut values);
    let mut array: ArrayRef = Arc::new(StringArray::from(values));
    let mut nested = element;
    for d in (0..dims.len()).rev() {
        // as many lists at this level as the levels above make
        let outer: usize = dims[..d].iter().product();
        let len = dims[d];
        let item = Arc::new(Field::new_list_field(array.data_type().clone(), true));
        array = Arc::new(ListArray::try_new(
            item,
            OffsetBuffer::from_lengths(std::iter::repeat_n(len, outer)),
            array,
            None,
        )?);
        nested = DataType::List(Arc::new(Field::new_list_field(nested, true)));
    }
    // the outermost level holds the one value
    let value = ScalarValue::List(Arc::new(array.as_list::<i32>().clone()));
    Ok(Some((value, nested)))
}

/// A Postgres-semantics function (`sql/pg_functions.rs`) by name, for the rewrites here.
fn pg_udf(name: &'static str) -> Arc<ScalarUDF> {
    if let Some(op) = InetOp::ALL.into_iter().find(|o| o.name() == name) {
        return InetFn::udf(op);
    }
    PG_UDFS
        .iter()
        .find(|u| u.name() == name)
        .cloned()
        .unwrap_or_else(|| Arc::new(ScalarUDF::new_from_impl(pg_functions::udf(name))))
}

static PG_UDFS: std::sync::LazyLock<Vec<Arc<ScalarUDF>>> = std::sync::LazyLock::new(|| {
    [
        pg_functions::INTERVAL_KEY,
        pg_functions::TEXT_OUT,
        pg_functions::CANONICAL_NAN,
        crate::sql::pg_math::FLOAT_IN,
        pg_functions::ROUND_FOR_INT,
        pg_functions::TIMESTAMP_IN,
        pg_functions::TIMESTAMPTZ_IN,
        pg_functions::DATETIME_CAST,
        pg_functions::DATETIME_PLUS,
        pg_functions::DATETIME_MINUS,
        pg_functions::JSONB_SORT_KEY,
        pg_functions::JSONB_IN,
        pg_functions::JSON_IN,
        pg_functions::TIMESTAMPTZ_JSON,
        pg_functions::BYTEA_IN,
        pg_functions::ARRAY_SORT_KEY,
        pg_functions::ARRAY_REMOVE_NULLS,
        pg_functions::NULLABLE,
        pg_functions::DECLARED,
        crate::sql::pg_math::FLOAT4_OF_FLOAT8,
        "timezone",
        "isfinite",
    ]
    .into_iter()
    .map(|n| Arc::new(ScalarUDF::new_from_impl(pg_functions::udf(n))))
    .collect()
});

/// `sum`/`avg` of floats become exact.
fn rewrite_aggregate(mut agg: AggregateFunction, schema: &DFSchema) -> (Expr, bool) {
    let name = agg.func.name().to_owned();
    if !matches!(name.as_str(), "sum" | "avg" | "mean") || agg.params.args.len() != 1 {
        return (Expr::AggregateFunction(agg), false);
    }
    let avg = name != "sum";
    match agg.params.args[0].get_type(schema) {
        Ok(DataType::Float64 | DataType::Float32) => {
            agg.func = exact_udaf(avg);
            let arg = agg.params.args.remove(0);
            agg.params.args = vec![cast(arg, DataType::Float64)];
            (Expr::AggregateFunction(agg), true)
        }
        _ => (Expr::AggregateFunction(agg), false),
    }
}

/// Register the checked operators (views and plans name them).
pub fn register(ctx: &datafusion::execution::context::SessionContext) {
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Neg] {
        ctx.register_udf(checked_udf(op).as_ref().clone());
    }
    for op in [NumericOp::Mul, NumericOp::Div, NumericOp::Avg] {
        ctx.register_udf(NumericArith::udf(op).as_ref().clone());
    }
    for avg in [false, true] {
        ctx.register_udaf(exact_udaf(avg).as_ref().clone());
    }
    ctx.register_udaf(AggregateUDF::new_from_impl(PgSum::new()));
    ctx.register_udaf(crate::sql::typed_arrays::PgArrayAgg::udaf());
}

/// A NULL constant, cast or not (`NULL`, `NULL::int`).
fn is_null_literal(e: &Expr) -> bool {
    match e {
        Expr::Literal(v, _) => v.is_null(),
        Expr::Cast(c) => is_null_literal(&c.expr),
        _ => false,
    }
}
