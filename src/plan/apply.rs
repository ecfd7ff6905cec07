//! Correlated subqueries DataFusion cannot turn into joins, run as Postgres runs them: once
//! per outer row (a `SubPlan`), with the outer row's values bound in.
//!
//! DataFusion decorrelates the common shapes (`x IN (SELECT ...)`, `EXISTS` and scalar
//! subqueries correlated by equality, LATERAL joins it can rewrite) into joins. What is
//! left after its optimizer — a scalar subquery correlated by `<`, a LATERAL subquery with
//! `ORDER BY ... LIMIT`, a subquery inside `CASE`, an outer column in a LATERAL select list
//! — its physical planner refuses ("Physical plan does not support logical expression
//! ScalarSubquery"), and its invariants refuse some shapes before that (a correlated scalar
//! subquery without an aggregate, one in ORDER BY or GROUP BY). Each such place becomes an
//! [`ApplyNode`] over the node's input, by one function ([`extract`] for subquery
//! expressions, [`lateral`] for LATERAL joins) called from three places: the analyzer rule
//! [`SubqueryApply`] (what the invariants would refuse; subqueries that read two levels up,
//! which DataFusion's decorrelation loses), the optimizer rule [`LeftoverSubqueries`] right
//! after DataFusion's decorrelation rules (what they left, before filters are pushed under
//! aliases and the outer columns only a subquery reads are pruned), and [`rewrite`] in the
//! session's physical planner (anything still left). [`ApplyExec`] evaluates it:
//!
//! - input: the outer rows (any partitioning; each partition is applied on its own);
//! - output: the outer rows followed by one column per subquery expression (its value,
//!   `EXISTS`'s or `IN`'s boolean), or, for a LATERAL join, the joined rows (left rows
//!   without a match kept with NULLs for `LEFT JOIN LATERAL`);
//! - per distinct set of outer values the subquery is bound (outer references replaced by
//!   the values as constants), optimized (not analyzed again: it was, with the outer query)
//!   and run once; its answer is kept for the rest of the partition (the cache is the only
//!   state; nothing is checkpointed: one-shot queries only — a materialized view over an
//!   `ApplyNode` is refused by `plan/view.rs` with 0A000).
//! - cost: one planning and one run of the subquery per distinct outer value (~3 ms each in
//!   a debug build), as Postgres runs a SubPlan per row; no per-row work in a hot path.
//!
//! Semantics as Postgres: a scalar subquery with no row is NULL and with more than one row
//! is 21000 "more than one row returned by a subquery used as an expression"; `x IN (...)`
//! is true on an equal value, else NULL when `x` or a value is NULL (and the subquery has
//! rows), else false; `NOT` of those for the negated forms.
//!
//! Unlike Postgres, a subquery inside a `CASE` branch is run for every row, not only for
//! rows that take the branch (an error in a branch not taken still surfaces).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, filter_record_batch, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::{Exists, InSubquery};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Expr, Extension, JoinType, LogicalPlan, LogicalPlanBuilder, Projection, Subquery,
    UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::StreamExt;

use crate::error::WeirError;

/// What an [`ApplyNode`] evaluates per outer row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub enum Kind {
    /// A scalar subquery: its one value, or NULL.
    Scalar(LogicalPlan),
    Exists {
        plan: LogicalPlan,
        negated: bool,
    },
    /// `expr [NOT] IN (plan)`; `expr` is over the outer row.
    In {
        expr: Expr,
        plan: LogicalPlan,
        negated: bool,
    },
    /// `left [LEFT] JOIN LATERAL (plan) ON filter`; the node's input is `left`.
    Lateral {
        plan: LogicalPlan,
        left_join: bool,
        filter: Option<Expr>,
    },
}

impl Kind {
    fn plan(&self) -> &LogicalPlan {
        match self {
            Kind::Scalar(plan)
            | Kind::Exists { plan, .. }
            | Kind::In { plan, .. }
            | Kind::Lateral { plan, .. } => plan,
        }
    }
}

/// A subquery applied to each row of `input` (see the module header).
#[derive(Debug, Clone)]
pub struct ApplyNode {
    pub input: LogicalPlan,
    pub kind: Kind,
    pub schema: DFSchemaRef,
}

impl PartialEq for ApplyNode {
    fn eq(&self, other: &Self) -> bool {
        self.input == other.input && self.kind == other.kind
    }
}
impl Eq for ApplyNode {}
impl Hash for ApplyNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.input.hash(state);
        self.kind.hash(state);
    }
}
impl PartialOrd for ApplyNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.input.partial_cmp(&other.input)? {
            Ordering::Equal => self.kind.partial_cmp(&other.kind),
            o => Some(o),
        }
    }
}

impl UserDefinedLogicalNodeCore for ApplyNode {
    fn name(&self) -> &str {
        "Apply"
    }
    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }
    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }
    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }
    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let what = match &self.kind {
            Kind::Scalar(_) => "scalar subquery".to_string(),
            Kind::Exists { negated, .. } => format!("{}EXISTS", if *negated { "NOT " } else { "" }),
            Kind::In { expr, negated, .. } => {
                format!("{expr} {}IN subquery", if *negated { "NOT " } else { "" })
            }
            Kind::Lateral { left_join, .. } => {
                format!("{}JOIN LATERAL", if *left_join { "LEFT " } else { "" })
            }
        };
        write!(f, "Apply: {what} per row")
    }
    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let input = inputs
            .pop()
            .ok_or_else(|| DataFusionError::Internal("Apply without input".into()))?;
        if input.schema().fields() != self.input.schema().fields() {
            return Err(DataFusionError::Internal(
                "Apply's input changed its columns".into(),
            ));
        }
        Ok(ApplyNode {
            input,
            kind: self.kind.clone(),
            schema: self.schema.clone(),
        })
    }
}

fn is_subquery_expr(e: &Expr) -> bool {
    matches!(
        e,
        Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
    )
}

/// Whether `plan` (its expressions' subqueries included) reads a column of an outer query.
fn has_outer_reference(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|p| {
        found = matches!(p, LogicalPlan::Subquery(_))
            || p.expressions().iter().any(|e| {
                e.exists(|e| Ok(matches!(e, Expr::OuterReferenceColumn(..))))
                    .unwrap_or(false)
            });
        Ok(if found {
            datafusion::common::tree_node::TreeNodeRecursion::Stop
        } else {
            datafusion::common::tree_node::TreeNodeRecursion::Continue
        })
    });
    found
}

/// Whether [`rewrite`] has anything to do in `plan`.
pub fn needed(plan: &LogicalPlan) -> bool {
    plan.exists(|p| {
        Ok(p.expressions()
            .iter()
            .any(|e| e.exists(|e| Ok(correlated(e))).unwrap_or(false))
            || matches!(p, LogicalPlan::Join(j) if has_outer_reference(&j.right)))
    })
    .unwrap_or(false)
}

/// A LATERAL join `join` DataFusion did not decorrelate, as an [`ApplyNode`].
fn lateral(p: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Join(j) = &p else {
        return Ok(Transformed::no(p));
    };
    if !has_outer_reference(&j.right) {
        return Ok(Transformed::no(p));
    }
    {
        {
            let left_join = match j.join_type {
                JoinType::Inner => false,
                JoinType::Left => true,
                other => {
                    return Err(DataFusionError::External(Box::new(
                        WeirError::not_supported(format!(
                            "a {other} JOIN LATERAL of a correlated subquery is not supported"
                        )),
                    )));
                }
            };
            let mut conds: Vec<Expr> = j.on.iter().map(|(l, r)| l.clone().eq(r.clone())).collect();
            conds.extend(j.filter.clone());
            let node = ApplyNode {
                input: j.left.as_ref().clone(),
                kind: Kind::Lateral {
                    plan: j.right.as_ref().clone(),
                    left_join,
                    filter: conjunction(conds),
                },
                schema: j.schema.clone(),
            };
            Ok(Transformed::yes(LogicalPlan::Extension(Extension {
                node: Arc::new(node),
            })))
        }
    }
}

/// Turns the LATERAL joins and correlated subquery expressions DataFusion's decorrelation
/// rules left into [`ApplyNode`]s; placed right after those rules, before
/// `push_down_filter` and `optimize_projections` move filters under aliases and drop the
/// outer columns that only a subquery reads (both miss the outer references).
#[derive(Debug)]
pub struct LeftoverSubqueries;

impl datafusion::optimizer::OptimizerRule for LeftoverSubqueries {
    fn name(&self) -> &str {
        "weir_leftover_subqueries"
    }
    fn apply_order(&self) -> Option<datafusion::optimizer::ApplyOrder> {
        Some(datafusion::optimizer::ApplyOrder::BottomUp)
    }
    fn supports_rewrite(&self) -> bool {
        true
    }
    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let plan = lateral(plan)?;
        let tnr = plan.tnr;
        let transformed = plan.transformed;
        let plan = extract(plan.data, &|_, e| correlated(e))?;
        Ok(Transformed::new(
            plan.data,
            transformed || plan.transformed,
            tnr,
        ))
    }
}

/// DataFusion's optimizer rules with [`LeftoverSubqueries`] after `decorrelate_lateral_join`.
pub fn optimizer_rules() -> Vec<Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>> {
    let mut rules = datafusion::optimizer::Optimizer::new().rules;
    // DataFusion's rules with a step of ours before them (`plan/wrapped_rule.rs`): filters
    // stay over global aggregates (`plan/global_aggregate_filters.rs`); ORDER BY items are
    // not pruned by keys an Unnest does not keep (`plan/unnest_keys.rs`)
    for r in rules.iter_mut() {
        let before: Option<fn(LogicalPlan) -> Result<super::wrapped_rule::Before>> = match r.name()
        {
            "push_down_filter" => {
                Some(super::global_aggregate_filters::filters_above_global_aggregates)
            }
            "eliminate_duplicated_expr" => Some(super::unnest_keys::sort_keys_over_unnest),
            _ => None,
        };
        if let Some(before) = before {
            *r = Arc::new(super::wrapped_rule::WrappedRule {
                inner: r.clone(),
                before,
            });
        }
    }
    let at = rules
        .iter()
        .position(|r| r.name() == "decorrelate_lateral_join")
        .map_or(0, |i| i + 1);
    rules.insert(at, Arc::new(LeftoverSubqueries));
    rules
}

/// The optimized `plan` with every subquery expression and LATERAL join left in it turned
/// into [`ApplyNode`]s (see the module header).
pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|p| {
        let p = lateral(p)?.data;
        extract(p, &|_, e| correlated(e))
    })
    .data()
}

/// Whether subquery expression `e` reads a column of the query around it (DataFusion runs
/// the others itself, once).
fn correlated(e: &Expr) -> bool {
    match e {
        Expr::ScalarSubquery(s)
        | Expr::Exists(Exists { subquery: s, .. })
        | Expr::InSubquery(InSubquery { subquery: s, .. }) => {
            !s.outer_ref_columns.is_empty() || has_outer_reference(&s.subquery)
        }
        _ => false,
    }
}

/// Names of the columns [`ApplyNode`]s add; unique in the process, so that nodes made by
/// [`SubqueryApply`] and by [`rewrite`] never collide.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Node `p` with its subquery expressions that `select` picks computed by [`ApplyNode`]s
/// over its input, and its columns as before.
fn extract(
    p: LogicalPlan,
    select: &dyn Fn(&LogicalPlan, &Expr) -> bool,
) -> Result<Transformed<LogicalPlan>> {
    let picked = |e: &Expr| is_subquery_expr(e) && select(&p, e);
    let any = p
        .expressions()
        .iter()
        .any(|e| e.exists(|e| Ok(picked(e))).unwrap_or(false));
    if any && matches!(p, LogicalPlan::Join(_)) {
        return extract_in_join(p, select);
    }
    if !any
        || !matches!(
            p,
            LogicalPlan::Projection(_)
                | LogicalPlan::Filter(_)
                | LogicalPlan::Sort(_)
                | LogicalPlan::Aggregate(_)
                | LogicalPlan::Window(_)
        )
    {
        return Ok(Transformed::no(p));
    }
    let original = p.schema().clone();
    let Some(input) = p.inputs().first().map(|i| (*i).clone()) else {
        return Ok(Transformed::no(p));
    };
    let mut applies: Vec<(String, Expr)> = Vec::new();
    let exprs = p
        .expressions()
        .into_iter()
        .map(|e| {
            e.transform_up(|e| {
                if !picked(&e) {
                    return Ok(Transformed::no(e));
                }
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = format!("__weir_apply_{n}");
                applies.push((name.clone(), e));
                Ok(Transformed::yes(Expr::Column(Column::from_name(name))))
            })
            .data()
        })
        .collect::<Result<Vec<_>>>()?;
    let rebuilt = match &p {
        // ORDER BY over the select list: the subqueries read the rows under it
        LogicalPlan::Sort(sort) if let LogicalPlan::Projection(list) = sort.input.as_ref() => {
            let mut below = list.input.as_ref().clone();
            let mut shown = list.expr.clone();
            for (name, e) in applies {
                shown.push(Expr::Column(Column::from_name(name.clone())));
                below = apply_expr(below, name, e)?;
            }
            let list = Projection::try_new(shown, Arc::new(below))?;
            p.with_new_exprs(exprs, vec![LogicalPlan::Projection(list)])?
        }
        _ => {
            let mut below = input;
            for (name, e) in applies {
                below = apply_expr(below, name, e)?;
            }
            p.with_new_exprs(exprs, vec![below])?
        }
    };
    // the same columns, named as before, in the same order
    let shown = rebuilt.schema().clone();
    let columns = original
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            let (q, f) = shown.qualified_field(i);
            Expr::Column(Column::new(q.cloned(), f.name()))
                .alias_qualified(qualifier.cloned(), field.name())
        })
        .collect::<Vec<_>>();
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(columns, Arc::new(rebuilt))?,
    )))
}

/// A subquery in an (inner or left) join's ON condition that reads only the left side's
/// columns (TypeORM's `LEFT JOIN pg_attribute a ON a.attrelid = (SELECT c.oid ... WHERE
/// c.relname = columns.table_name)`): applied per row of the left side, its value a column
/// the condition then reads. Left as it is otherwise.
fn extract_in_join(
    p: LogicalPlan,
    select: &dyn Fn(&LogicalPlan, &Expr) -> bool,
) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Join(j) = &p else {
        return Ok(Transformed::no(p));
    };
    let picked = |e: &Expr| is_subquery_expr(e) && select(&p, e);
    let Some(filter) = j.filter.clone() else {
        return Ok(Transformed::no(p));
    };
    if !matches!(j.join_type, JoinType::Inner | JoinType::Left) {
        return Ok(Transformed::no(p));
    }
    let left_schema = j.left.schema().clone();
    // every outer column the subquery reads, at any depth (what [`ApplyExec`] binds), is
    // the left side's
    let reads_left_only = |e: &Expr| match e {
        Expr::ScalarSubquery(s) | Expr::Exists(Exists { subquery: s, .. }) => {
            let own = own_columns(&s.subquery);
            let mut left_only = true;
            let _ = s.subquery.apply_with_subqueries(|p| {
                for x in p.expressions() {
                    let _ = x.apply(|x| {
                        if let Expr::OuterReferenceColumn(_, c) = x
                            && !own.contains(c)
                            && !left_schema.has_column(c)
                        {
                            left_only = false;
                        }
                        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
                    });
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            });
            left_only
        }
        _ => false,
    };
    let mut left = j.left.as_ref().clone();
    let mut fits = true;
    let filter = filter
        .transform_up(|e| {
            if !picked(&e) {
                return Ok(Transformed::no(e));
            }
            if !reads_left_only(&e) {
                fits = false;
                return Ok(Transformed::no(e));
            }
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("__weir_apply_{n}");
            left = apply_expr(std::mem::take(&mut left), name.clone(), e)?;
            Ok(Transformed::yes(Expr::Column(Column::from_name(name))))
        })
        .data()?;
    if !fits {
        return Ok(Transformed::no(p));
    }
    let join = datafusion::logical_expr::Join::try_new(
        Arc::new(left),
        j.right.clone(),
        j.on.clone(),
        Some(filter),
        j.join_type,
        j.join_constraint,
        j.null_equality,
        j.null_aware,
    )?;
    // the join's columns as before (the applied values left out)
    let columns = p
        .schema()
        .iter()
        .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
        .collect::<Vec<_>>();
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(columns, Arc::new(LogicalPlan::Join(join)))?,
    )))
}

/// Whether DataFusion's plan invariants refuse correlated scalar subquery `e` in `node`:
/// one that is not sure to return at most one row (Postgres checks that when it runs), or
/// one outside a projection, filter or aggregate (`ORDER BY (SELECT ...)`), or one in a
/// GROUP BY.
fn refused_by_datafusion(node: &LogicalPlan, e: &Expr) -> bool {
    if let Expr::ScalarSubquery(s)
    | Expr::Exists(Exists { subquery: s, .. })
    | Expr::InSubquery(InSubquery { subquery: s, .. }) = e
        && skips_a_level(&s.subquery)
    {
        return true;
    }
    let Expr::ScalarSubquery(s) = e else {
        return false;
    };
    if s.outer_ref_columns.is_empty() {
        return false;
    }
    let mut inner = s.subquery.as_ref();
    while let LogicalPlan::Projection(datafusion::logical_expr::Projection { input, .. })
    | LogicalPlan::SubqueryAlias(datafusion::logical_expr::SubqueryAlias {
        input, ..
    }) = inner
    {
        inner = input.as_ref();
    }
    if let LogicalPlan::Filter(f) = inner
        && matches!(f.input.as_ref(), LogicalPlan::Aggregate(_))
    {
        inner = f.input.as_ref();
    }
    let one_row = match inner {
        LogicalPlan::Aggregate(a) => !a.aggr_expr.is_empty() && a.group_expr.is_empty(),
        _ => s.subquery.max_rows().is_some_and(|m| m <= 1),
    };
    match node {
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) => !one_row,
        // in GROUP BY: grouped by its value per row
        LogicalPlan::Aggregate(a) => {
            !one_row || (a.group_expr.contains(e) && !a.aggr_expr.contains(e))
        }
        _ => true,
    }
}

/// A LATERAL subquery's query, under its alias and `Subquery` wrapper.
fn unwrapped(mut plan: &LogicalPlan) -> &LogicalPlan {
    while let LogicalPlan::SubqueryAlias(datafusion::logical_expr::SubqueryAlias {
        input, ..
    })
    | LogicalPlan::Subquery(Subquery {
        subquery: input, ..
    }) = plan
    {
        plan = input.as_ref();
    }
    plan
}

/// The columns `plan`'s own nodes have, by the names SQL in `plan` can use (an aliased
/// relation's, not the table's under the alias; not those of the subqueries in its
/// expressions).
fn own_columns(plan: &LogicalPlan) -> Vec<Column> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut own: Vec<Column> = Vec::new();
    // a LATERAL subquery's alias and wrapper: its query is under them
    let plan = unwrapped(plan);
    let _ = plan.apply(|p| {
        own.extend(p.schema().columns());
        Ok(match p {
            LogicalPlan::SubqueryAlias(_) => TreeNodeRecursion::Jump,
            _ => TreeNodeRecursion::Continue,
        })
    });
    own
}

/// Whether a subquery nested in `plan` reads a column of the query around `plan` (two
/// levels up): DataFusion's decorrelation of `plan` then loses that column ("column does
/// not exist"), so `plan` runs per row with it bound.
fn skips_a_level(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let own = own_columns(plan);
    let mut skips = false;
    let _ = plan.apply(|p| {
        for e in p.expressions() {
            let _ = e.apply(|e| {
                if let Expr::ScalarSubquery(s)
                | Expr::Exists(Exists { subquery: s, .. })
                | Expr::InSubquery(InSubquery { subquery: s, .. }) = e
                {
                    skips |= s
                        .outer_ref_columns
                        .iter()
                        .any(|o| matches!(o, Expr::OuterReferenceColumn(_, c) if !own.contains(c)));
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        if let LogicalPlan::Subquery(s) = p {
            skips |= s
                .outer_ref_columns
                .iter()
                .any(|o| matches!(o, Expr::OuterReferenceColumn(_, c) if !own.contains(c)));
        }
        Ok(if skips {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    skips
}

/// Runs per row the correlated scalar subqueries DataFusion's invariants would refuse
/// ([`refused_by_datafusion`]), before they are checked; the rest is left to DataFusion's
/// decorrelation and then [`rewrite`].
#[derive(Debug)]
pub struct SubqueryApply;

impl datafusion::optimizer::AnalyzerRule for SubqueryApply {
    fn analyze(
        &self,
        plan: LogicalPlan,
        _config: &datafusion::config::ConfigOptions,
    ) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            // a LATERAL subquery with a subquery in it that reads the query around both
            if let LogicalPlan::Join(j) = &p
                && skips_a_level(unwrapped(&j.right))
            {
                return lateral(p);
            }
            extract(p, &refused_by_datafusion)
        })
        .data()
    }
    fn name(&self) -> &str {
        "weir_subquery_apply"
    }
}

/// `input` with one more column `name`: the value of the subquery expression `e` per row.
fn apply_expr(input: LogicalPlan, name: String, e: Expr) -> Result<LogicalPlan> {
    let (kind, field) = match e {
        Expr::ScalarSubquery(s) => {
            let plan = s.subquery.as_ref().clone();
            let inner = plan.schema().field(0).clone();
            let field = Field::new(name, inner.data_type().clone(), true)
                .with_metadata(inner.metadata().clone());
            (Kind::Scalar(plan), field)
        }
        Expr::Exists(Exists { subquery, negated }) => (
            Kind::Exists {
                plan: subquery.subquery.as_ref().clone(),
                negated,
            },
            Field::new(name, datafusion::arrow::datatypes::DataType::Boolean, false),
        ),
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated,
        }) => (
            Kind::In {
                expr: *expr,
                plan: subquery.subquery.as_ref().clone(),
                negated,
            },
            Field::new(name, datafusion::arrow::datatypes::DataType::Boolean, true),
        ),
        other => {
            return Err(DataFusionError::Internal(format!(
                "not a subquery expression: {other}"
            )));
        }
    };
    let added = DFSchema::try_from(Schema::new(vec![field]))?;
    let schema = Arc::new(input.schema().join(&added)?);
    Ok(LogicalPlan::Extension(Extension {
        node: Arc::new(ApplyNode {
            input,
            kind,
            schema,
        }),
    }))
}

/// Plans [`ApplyNode`]s as [`ApplyExec`].
#[derive(Debug)]
pub struct ApplyPlanner;

#[async_trait::async_trait]
impl ExtensionPlanner for ApplyPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session_state: &dyn datafusion::catalog::Session,
        planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(n) = node.as_any().downcast_ref::<ApplyNode>() else {
            return Ok(None);
        };
        let (Some(input), Some(logical)) = (physical_inputs.first(), logical_inputs.first()) else {
            return Ok(None);
        };
        let Some(state) = session_state.as_any().downcast_ref::<SessionState>() else {
            return Err(DataFusionError::Internal(
                "Apply planned outside a session".into(),
            ));
        };
        let in_schema = logical.schema();
        // (a subquery nested in the subquery may read the subquery's own columns: a
        // column the subquery has is its own, or SQL would not have named it outer)
        let own = own_columns(n.kind.plan());
        let mut outer: Vec<(Column, usize)> = Vec::new();
        n.kind.plan().apply_with_subqueries(|p| {
            for e in p.expressions() {
                e.apply(|e| {
                    if let Expr::OuterReferenceColumn(_, c) = e
                        && !outer.iter().any(|(o, _)| o == c)
                        && !own.contains(c)
                    {
                        // the query outside this one is bound before this is planned
                        let i = in_schema.index_of_column(c).map_err(|_| {
                            external(WeirError::not_supported(format!(
                                "a subquery here cannot read column \"{}\" of the outer query",
                                c.name
                            )))
                        })?;
                        outer.push((c.clone(), i));
                    }
                    Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
                })?;
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })?;
        let expr = match &n.kind {
            Kind::In { expr, .. } => {
                Some(planner.create_physical_expr(expr, in_schema, session_state, planning_ctx)?)
            }
            Kind::Lateral {
                filter: Some(f), ..
            } => Some(planner.create_physical_expr(f, &n.schema, session_state, planning_ctx)?),
            _ => None,
        };
        let schema: SchemaRef = Arc::new(n.schema.as_arrow().clone());
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Some(Arc::new(ApplyExec {
            input: input.clone(),
            shared: Arc::new(Shared {
                kind: n.kind.clone(),
                state: state.clone(),
                outer,
                expr,
                schema,
            }),
            props,
        })))
    }
}

/// What every partition of an [`ApplyExec`] reads.
struct Shared {
    kind: Kind,
    state: SessionState,
    /// The outer columns the subquery reads, with their index in the input.
    outer: Vec<(Column, usize)>,
    /// `IN`'s left side over the input, or a LATERAL join's condition over the output.
    expr: Option<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

/// Evaluates an [`ApplyNode`] (see the module header).
pub struct ApplyExec {
    input: Arc<dyn ExecutionPlan>,
    shared: Arc<Shared>,
    props: Arc<PlanProperties>,
}

impl fmt::Debug for ApplyExec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ApplyExec")
    }
}

impl DisplayAs for ApplyExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let outer: Vec<String> = self
            .shared
            .outer
            .iter()
            .map(|(c, _)| c.flat_name())
            .collect();
        write!(f, "ApplyExec: per row of ({})", outer.join(", "))
    }
}

impl ExecutionPlan for ApplyExec {
    fn name(&self) -> &str {
        "ApplyExec"
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn PhysicalExpr>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("ApplyExec without input".into()))?;
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(self.shared.schema.clone()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Arc::new(ApplyExec {
            input,
            shared: self.shared.clone(),
            props,
        }))
    }
    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context.clone())?;
        let shared = self.shared.clone();
        let schema = shared.schema.clone();
        let cache: Arc<tokio::sync::Mutex<HashMap<Vec<ScalarValue>, Answer>>> =
            Arc::new(tokio::sync::Mutex::new(HashMap::new()));
        let stream = input.then(move |batch| {
            let shared = shared.clone();
            let context = context.clone();
            let cache = cache.clone();
            async move {
                let batch = batch?;
                let mut cache = cache.lock().await;
                shared.apply(&batch, &context, &mut cache).await
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// The subquery's answer for one set of outer values.
#[derive(Clone)]
enum Answer {
    Value(ScalarValue),
    Rows(RecordBatch),
}

fn external(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl Shared {
    async fn apply(
        &self,
        batch: &RecordBatch,
        context: &Arc<TaskContext>,
        cache: &mut HashMap<Vec<ScalarValue>, Answer>,
    ) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let left_values: Option<ArrayRef> = match (&self.kind, &self.expr) {
            (Kind::In { .. }, Some(e)) => Some(e.evaluate(batch)?.into_array(rows)?),
            _ => None,
        };
        let mut values: Vec<ScalarValue> = Vec::with_capacity(rows);
        let mut pieces: Vec<RecordBatch> = Vec::new();
        for row in 0..rows {
            let mut key = self
                .outer
                .iter()
                .map(|(_, i)| ScalarValue::try_from_array(batch.column(*i), row))
                .collect::<Result<Vec<_>>>()?;
            let bound = key.clone();
            if let Some(l) = &left_values {
                key.push(ScalarValue::try_from_array(l, row)?);
            }
            let answer = match cache.get(&key) {
                Some(a) => a.clone(),
                None => {
                    let a = self.answer(&bound, key.last(), context).await?;
                    cache.insert(key, a.clone());
                    a
                }
            };
            match answer {
                Answer::Value(v) => values.push(v),
                Answer::Rows(r) => pieces.push(self.join_row(batch, row, &r)?),
            }
        }
        if let Kind::Lateral { .. } = self.kind {
            return Ok(concat_batches(&self.schema, &pieces)?);
        }
        let field = self.schema.field(self.schema.fields().len() - 1);
        let column = if values.is_empty() {
            datafusion::arrow::array::new_empty_array(field.data_type())
        } else {
            let a = ScalarValue::iter_to_array(values)?;
            if a.data_type() != field.data_type() {
                cast(&a, field.data_type())?
            } else {
                a
            }
        };
        let mut columns = batch.columns().to_vec();
        columns.push(column);
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// The subquery with the outer values bound, planned and run.
    async fn answer(
        &self,
        bound: &[ScalarValue],
        left: Option<&ScalarValue>,
        context: &Arc<TaskContext>,
    ) -> Result<Answer> {
        let mut plan = bind(self.kind.plan(), &self.outer, bound)?;
        if let Kind::Lateral { .. } = self.kind {
            plan = strip_subquery(plan)?;
        }
        if let Kind::Exists { .. } = self.kind {
            plan = LogicalPlanBuilder::from(plan).limit(0, Some(1))?.build()?;
        }
        // analyzed already, with the outer query: Weir's analyzer rule reads casts the
        // optimizer removes, so it must not run twice
        let plan = self
            .state
            .optimizer()
            .optimize(plan, &self.state, |_, _| {})?;
        let physical = self
            .state
            .query_planner()
            .create_physical_plan(&plan, &self.state)
            .await?;
        let batches = datafusion::physical_plan::collect(physical, context.clone()).await?;
        let schema = plan.schema().inner().clone();
        let all = concat_batches(&schema, &batches)?;
        match &self.kind {
            Kind::Scalar(_) => match all.num_rows() {
                0 => {
                    let t = self
                        .schema
                        .field(self.schema.fields().len() - 1)
                        .data_type();
                    Ok(Answer::Value(ScalarValue::try_from(t)?))
                }
                1 => Ok(Answer::Value(ScalarValue::try_from_array(
                    all.column(0),
                    0,
                )?)),
                _ => Err(external(WeirError::new(
                    "21000",
                    "more than one row returned by a subquery used as an expression",
                ))),
            },
            Kind::Exists { negated, .. } => Ok(Answer::Value(ScalarValue::Boolean(Some(
                (all.num_rows() > 0) != *negated,
            )))),
            Kind::In { negated, .. } => {
                let left = left.ok_or_else(|| {
                    DataFusionError::Internal("IN subquery without its left side".into())
                })?;
                let found = in_values(left, all.column(0))?;
                Ok(Answer::Value(ScalarValue::Boolean(
                    found.map(|f| f != *negated),
                )))
            }
            Kind::Lateral { .. } => Ok(Answer::Rows(all)),
        }
    }

    /// Outer row `row` of `batch` joined with the subquery's rows `right`, the condition
    /// applied; for LEFT JOIN LATERAL the row with NULLs when nothing matched.
    fn join_row(
        &self,
        batch: &RecordBatch,
        row: usize,
        right: &RecordBatch,
    ) -> Result<RecordBatch> {
        let Kind::Lateral { left_join, .. } = self.kind else {
            return Err(DataFusionError::Internal("not a LATERAL apply".into()));
        };
        let left_width = batch.num_columns();
        let build = |right: &RecordBatch| -> Result<RecordBatch> {
            let n = right.num_rows();
            let index = UInt32Array::from(vec![row as u32; n]);
            let mut columns: Vec<ArrayRef> = batch
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &index, None))
                .collect::<std::result::Result<_, _>>()?;
            for (i, c) in right.columns().iter().enumerate() {
                let want = self.schema.field(left_width + i).data_type();
                columns.push(if c.data_type() != want {
                    cast(c, want)?
                } else {
                    c.clone()
                });
            }
            Ok(RecordBatch::try_new_with_options(
                self.schema.clone(),
                columns,
                &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n)),
            )?)
        };
        let mut joined = build(right)?;
        if let Some(cond) = &self.expr {
            let keep = cond.evaluate(&joined)?.into_array(joined.num_rows())?;
            let keep = keep
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| DataFusionError::Internal("join condition not boolean".into()))?;
            joined = filter_record_batch(&joined, keep)?;
        }
        if joined.num_rows() == 0 && left_join {
            let right_schema = Arc::new(Schema::new(self.schema.fields()[left_width..].to_vec()));
            let nulls = right_schema
                .fields()
                .iter()
                .map(|f| datafusion::arrow::array::new_null_array(f.data_type(), 1))
                .collect::<Vec<_>>();
            joined = build(&RecordBatch::try_new(right_schema, nulls)?)?;
        }
        Ok(joined)
    }
}

/// Postgres' `left IN (values)`: Some(true) on an equal value, None when nothing is equal
/// but `left` or a value is NULL (and there are values), else Some(false).
fn in_values(left: &ScalarValue, values: &ArrayRef) -> Result<Option<bool>> {
    if values.is_empty() {
        return Ok(Some(false));
    }
    if left.is_null() {
        return Ok(None);
    }
    let left = left.to_array()?;
    let values = if values.data_type() != left.data_type() {
        cast(values, left.data_type())?
    } else {
        values.clone()
    };
    let equal = datafusion::arrow::compute::kernels::cmp::eq(
        &values,
        &datafusion::arrow::array::Scalar::new(left),
    )?;
    if equal.true_count() > 0 {
        Ok(Some(true))
    } else if equal.null_count() > 0 {
        Ok(None)
    } else {
        Ok(Some(false))
    }
}

/// `plan` with the outer references to `outer` replaced by `values` (constants).
fn bind(
    plan: &LogicalPlan,
    outer: &[(Column, usize)],
    values: &[ScalarValue],
) -> Result<LogicalPlan> {
    let bound = |c: &Column| outer.iter().position(|(o, _)| o == c);
    let prune = |s: &Subquery| Subquery {
        subquery: s.subquery.clone(),
        outer_ref_columns: s
            .outer_ref_columns
            .iter()
            .filter(|e| !matches!(e, Expr::OuterReferenceColumn(_, c) if bound(c).is_some()))
            .cloned()
            .collect(),
        spans: s.spans.clone(),
    };
    plan.clone()
        .transform_down_with_subqueries(|p| {
            let p = match p {
                LogicalPlan::Subquery(s) => LogicalPlan::Subquery(prune(&s)),
                p => p,
            };
            // an expression keeps its name with constants in it (what the nodes above
            // call an aggregate's output: `first_value(... outer_ref(a.x) ...)`)
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&p);
            p.map_expressions(|e| {
                let name = names.save(&e);
                e.transform(|e| match e {
                    Expr::OuterReferenceColumn(f, c) => match bound(&c) {
                        Some(i) => {
                            let meta = (!f.metadata().is_empty()).then(|| {
                                datafusion::common::metadata::FieldMetadata::from(f.metadata())
                            });
                            Ok(Transformed::yes(Expr::Literal(values[i].clone(), meta)))
                        }
                        None => Ok(Transformed::no(Expr::OuterReferenceColumn(f, c))),
                    },
                    Expr::ScalarSubquery(s) => {
                        Ok(Transformed::yes(Expr::ScalarSubquery(prune(&s))))
                    }
                    Expr::Exists(Exists { subquery, negated }) => {
                        Ok(Transformed::yes(Expr::Exists(Exists {
                            subquery: prune(&subquery),
                            negated,
                        })))
                    }
                    Expr::InSubquery(InSubquery {
                        expr,
                        subquery,
                        negated,
                    }) => Ok(Transformed::yes(Expr::InSubquery(InSubquery {
                        expr,
                        subquery: prune(&subquery),
                        negated,
                    }))),
                    e => Ok(Transformed::no(e)),
                })
                .map(|t| t.update_data(|e| name.restore(e)))
            })
        })
        .data()
}

/// A LATERAL join's right side without its `Subquery` wrapper, once its outer references
/// are bound (a LATERAL join nested in it is an [`ApplyNode`] by then: [`LeftoverSubqueries`]
/// runs bottom-up).
fn strip_subquery(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_down(|p| match p {
        LogicalPlan::Subquery(s) => Ok(Transformed::yes(s.subquery.as_ref().clone())),
        p => Ok(Transformed::no(p)),
    })
    .data()
}
