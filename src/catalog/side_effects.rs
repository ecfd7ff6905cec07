//! Functions called for what they do (`nextval`, `setval`, `pg_notify`, advisory locks,
//! `pg_sleep`, `set_config`, ...) run once per row of the query that computes them, also
//! when nothing reads their result, as in Postgres: `SELECT count(*) FROM (SELECT
//! nextval('s') FROM generate_series(1, 1000)) x` advances the sequence by 1000.
//!
//! DataFusion's projection pruning drops a computed column nothing above reads, volatile or
//! not. So a projection that calls such a function, below the plan's top, gets a filter
//! right above it that reads those columns and keeps every row ([`KEEP`], a volatile
//! function answering true): the columns stay computed, once per row (a filter over a
//! volatile column is not pushed below it, so the call is not repeated). Not under a
//! LIMIT: `SELECT nextval('s') FROM t LIMIT 1` calls it once.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Filter, LogicalPlan, ScalarUDF, Signature, SimpleScalarUDF, Volatility,
};

/// The filter function that keeps the columns it reads computed.
pub const KEEP: &str = "weir_keep_evaluated";

/// Functions whose call is the point, not its value.
const SIDE_EFFECTS: &[&str] = &[
    "nextval",
    "setval",
    "pg_notify",
    "pg_sleep",
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
    "pg_advisory_unlock",
    "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
    "pg_cancel_backend",
    "pg_terminate_backend",
];

/// [`KEEP`]: true for every row, whatever it reads.
pub fn keep_udf() -> ScalarUDF {
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        KEEP,
        Signature::variadic_any(Volatility::Volatile),
        DataType::Boolean,
        Arc::new(|args: &[ColumnarValue]| {
            let rows = crate::sql::pg_functions::rows_of(args);
            Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(vec![
                true;
                rows
            ]))))
        }),
    ))
}

fn calls_side_effect(e: &Expr) -> bool {
    e.exists(|x| Ok(matches!(x, Expr::ScalarFunction(f) if SIDE_EFFECTS.contains(&f.func.name()))))
        .unwrap_or(false)
}

/// The columns of a projection that call a function for its effect.
fn effect_columns(plan: &LogicalPlan) -> Vec<Expr> {
    let LogicalPlan::Projection(p) = plan else {
        return vec![];
    };
    p.expr
        .iter()
        .zip(p.schema.iter())
        .filter(|(e, _)| calls_side_effect(e))
        .map(|(_, (q, f))| Expr::Column(Column::new(q.cloned(), f.name())))
        .collect()
}

fn is_keep(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Filter(f)
        if matches!(&f.predicate, Expr::ScalarFunction(s) if s.func.name() == KEEP))
}

/// `plan` with a [`KEEP`] filter above each of its inputs that is a projection calling a
/// function for its effect (none above one that has it already).
pub fn keep_effects(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool)> {
    // (under a LIMIT the rows past it are not computed, as in Postgres; a LIMIT and an
    // INSERT/UPDATE/DELETE read every column of their input)
    if is_keep(&plan)
        || matches!(plan, LogicalPlan::Limit(_) | LogicalPlan::Dml(_))
        || !plan.inputs().iter().any(|i| !effect_columns(i).is_empty())
    {
        return Ok((plan, false));
    }
    let keep = Arc::new(keep_udf());
    let inputs: Vec<LogicalPlan> = plan
        .inputs()
        .into_iter()
        .map(|i| {
            let columns = effect_columns(i);
            if columns.is_empty() {
                return Ok(i.clone());
            }
            Ok(LogicalPlan::Filter(Filter::try_new(
                keep.call(columns),
                Arc::new(i.clone()),
            )?))
        })
        .collect::<DfResult<_>>()?;
    let exprs = plan.expressions();
    Ok((plan.with_new_exprs(exprs, inputs)?, true))
}

/// Whether a plan calls a function for its effect anywhere (the rule has work to do).
pub fn has_effects(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|p| {
        if !effect_columns(p).is_empty() {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}
