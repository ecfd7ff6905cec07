//! ASOF joins: `a ASOF [LEFT] JOIN b ON a.k = b.k AND a.ts >= b.ts` pairs each row of `a`
//! with the rows of `b` of the same key at the latest `b.ts` at or before `a.ts` (`>`:
//! strictly before; `<=` / `<`: the earliest at or after / strictly after). When several
//! `b` rows share that time, each of them pairs with the `a` row (as an equi-join on that
//! time would). LEFT keeps `a` rows without a match, NULL-extended.
//!
//! The parser marks the join (`sql::parser::mark_asof_joins`: `ON __weir_asof() AND ...`);
//! once DataFusion has planned it as a join with that marker in its condition, [`plan`]
//! rewrites it:
//! - for a one-shot query into plain relational algebra ([`one_shot`]): both sides' keys
//!   and times in one union, a running max (min) of the right side's times per key in time
//!   order gives each left time the time of its match, then two equi-joins (left -> that
//!   time -> the right rows at it). O((n + m) log(n + m)), no pairs of rows beyond the
//!   matches.
//! - for a materialized view into an [`AsofJoinNode`], which the view planner lowers to
//!   the incremental `AsofJoin` operator (`operators/asof_join.rs`). The node keeps
//!   predicates from being pushed into its inputs: filtering `b` before an ASOF join is
//!   not filtering after it.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchemaRef, JoinType};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprFunctionExt, Extension, LogicalPlan, LogicalPlanBuilder, Operator,
    UserDefinedLogicalNodeCore, col, lit,
};

use crate::error::{Result, WeirError};
pub use crate::operators::asof_join::AsofOp;
use crate::sql::parser::ASOF_MARKER;

/// An ASOF join in a materialized view's plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AsofJoinNode {
    pub left: LogicalPlan,
    pub right: LogicalPlan,
    /// Equality keys: (expression over left, expression over right).
    pub on: Vec<(Expr, Expr)>,
    pub left_time: Expr,
    pub right_time: Expr,
    pub op: AsofOp,
    /// Inner or Left.
    pub join_type: JoinType,
    pub schema: DFSchemaRef,
}

impl PartialOrd for AsofJoinNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.left.partial_cmp(&other.left)? {
            Ordering::Equal => {}
            o => return Some(o),
        }
        match self.right.partial_cmp(&other.right)? {
            Ordering::Equal => {}
            o => return Some(o),
        }
        (&self.on, &self.left_time, &self.right_time, self.op).partial_cmp(&(
            &other.on,
            &other.left_time,
            &other.right_time,
            other.op,
        ))
    }
}

impl AsofJoinNode {
    /// The condition as written, for EXPLAIN.
    pub fn condition_text(&self) -> String {
        let mut parts: Vec<String> = self.on.iter().map(|(l, r)| format!("{l} = {r}")).collect();
        parts.push(format!(
            "{} {} {}",
            self.left_time,
            self.op.operator(),
            self.right_time
        ));
        format!("{} on [{}]", self.join_type, parts.join(", "))
    }
}

impl UserDefinedLogicalNodeCore for AsofJoinNode {
    fn name(&self) -> &str {
        "AsofJoin"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.left, &self.right]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        let mut e: Vec<Expr> = Vec::with_capacity(self.on.len() * 2 + 2);
        for (l, r) in &self.on {
            e.push(l.clone());
            e.push(r.clone());
        }
        e.push(self.left_time.clone());
        e.push(self.right_time.clone());
        e
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "AsofJoin: {}", self.condition_text())
    }

    fn with_exprs_and_inputs(
        &self,
        mut exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> datafusion::common::Result<Self> {
        if exprs.len() != self.on.len() * 2 + 2 || inputs.len() != 2 {
            return Err(datafusion::error::DataFusionError::Internal(
                "AsofJoin rebuilt with the wrong number of expressions or inputs".into(),
            ));
        }
        let right_time = exprs.pop().unwrap_or_else(|| lit(true));
        let left_time = exprs.pop().unwrap_or_else(|| lit(true));
        let mut on = Vec::with_capacity(self.on.len());
        let mut it = exprs.into_iter();
        while let (Some(l), Some(r)) = (it.next(), it.next()) {
            on.push((l, r));
        }
        let right = inputs.pop().unwrap_or_else(|| self.right.clone());
        let left = inputs.pop().unwrap_or_else(|| self.left.clone());
        Ok(AsofJoinNode {
            left,
            right,
            on,
            left_time,
            right_time,
            op: self.op,
            join_type: self.join_type,
            schema: self.schema.clone(),
        })
    }
}

/// What [`plan`] produces an ASOF join as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A one-shot query: relational algebra DataFusion runs.
    Query,
    /// A materialized view: an [`AsofJoinNode`] for the view planner.
    View,
}

/// Rewrite every ASOF join (a join whose condition has the parser's marker) of a freshly
/// planned statement.
pub fn plan(plan: LogicalPlan, mode: Mode) -> Result<LogicalPlan> {
    let mut failure: Option<WeirError> = None;
    let out = plan
        .transform_up_with_subqueries(|p| {
            let LogicalPlan::Join(j) = &p else {
                return Ok(Transformed::no(p));
            };
            let Some(filter) = &j.filter else {
                return Ok(Transformed::no(p));
            };
            if !filter.exists(|e| Ok(is_marker(e)))? {
                return Ok(Transformed::no(p));
            }
            match rewrite_join(j, mode) {
                Ok(new) => Ok(Transformed::yes(new)),
                Err(e) => {
                    failure.get_or_insert(e);
                    Ok(Transformed::no(p))
                }
            }
        })?
        .data;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(out)
}

fn is_marker(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(ScalarFunction { func, args }) if func.name() == ASOF_MARKER && args.is_empty())
}

fn condition_error(found: &str) -> WeirError {
    WeirError::not_supported(format!(
        "an ASOF join's ON condition must be equalities between the two sides and one comparison (>=, >, <=, <) of a left time with a right time, joined by AND; found {found}"
    ))
}

fn rewrite_join(j: &datafusion::logical_expr::Join, mode: Mode) -> Result<LogicalPlan> {
    if !matches!(j.join_type, JoinType::Inner | JoinType::Left) {
        return Err(WeirError::not_supported(format!(
            "ASOF {} JOIN is not supported: an ASOF join is inner or LEFT",
            j.join_type
        )));
    }
    let ls = j.left.schema();
    let rs = j.right.schema();
    // which side an expression reads: Some(true) left only, Some(false) right only
    let side = |e: &Expr| -> Option<bool> {
        let cols = e.column_refs();
        if cols.is_empty() {
            return None;
        }
        if cols.iter().all(|c| ls.has_column(c)) {
            Some(true)
        } else if cols.iter().all(|c| rs.has_column(c)) {
            Some(false)
        } else {
            None
        }
    };
    let mut on: Vec<(Expr, Expr)> = j.on.clone();
    let mut time: Option<(Expr, Expr, AsofOp)> = None;
    let filter = j
        .filter
        .as_ref()
        .ok_or_else(|| WeirError::internal("ASOF join without its condition"))?;
    let conjuncts = split_conjunction(filter);
    if !conjuncts.iter().any(|c| is_marker(c)) {
        // the marker sits under an OR (`ON __weir_asof() AND x OR y`)
        let shown = filter
            .to_string()
            .replace(&format!("{ASOF_MARKER}() AND "), "");
        return Err(condition_error(&shown));
    }
    for c in conjuncts {
        if is_marker(c) {
            continue;
        }
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = c else {
            return Err(condition_error(&c.to_string()));
        };
        let (l, r, op) = match (side(left), side(right)) {
            (Some(true), Some(false)) => ((**left).clone(), (**right).clone(), *op),
            (Some(false), Some(true)) => match op.swap() {
                Some(swapped) => ((**right).clone(), (**left).clone(), swapped),
                None => return Err(condition_error(&c.to_string())),
            },
            _ => return Err(condition_error(&c.to_string())),
        };
        if op == Operator::Eq {
            on.push((l, r));
            continue;
        }
        let Some(asof) = AsofOp::of(op) else {
            return Err(condition_error(&c.to_string()));
        };
        if time.is_some() {
            return Err(WeirError::not_supported(
                "an ASOF join compares one pair of times (>=, >, <=, <); found two comparisons",
            ));
        }
        time = Some((l, r, asof));
    }
    let Some((left_time, right_time, op)) = time else {
        return Err(WeirError::not_supported(
            "an ASOF join needs a comparison of a left time with a right time in its ON condition, e.g. a.ts >= b.ts",
        ));
    };
    match mode {
        Mode::View => Ok(LogicalPlan::Extension(Extension {
            node: Arc::new(AsofJoinNode {
                left: (*j.left).clone(),
                right: (*j.right).clone(),
                on,
                left_time,
                right_time,
                op,
                join_type: j.join_type,
                schema: j.schema.clone(),
            }),
        })),
        Mode::Query => one_shot(j, &on, &left_time, &right_time, op),
    }
}

/// An ASOF join as relational algebra DataFusion runs in O((n + m) log(n + m)): the keys
/// and times of both sides in one union, ordered by time per key, where a running max
/// (min, for the earliest match) of the right side's times gives each left time the time
/// of its match; then two equi-joins, left -> (key, time, matched time) -> right rows at
/// that time. At equal times the right row sorts first when it can match (`>=`, `<=`).
fn one_shot(
    j: &datafusion::logical_expr::Join,
    on: &[(Expr, Expr)],
    left_time: &Expr,
    right_time: &Expr,
    op: AsofOp,
) -> Result<LogicalPlan> {
    use datafusion::logical_expr::expr::WindowFunction;
    use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
    use datafusion::logical_expr::{
        ExprSchemable, WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
        when,
    };
    let (ls, rs) = (j.left.schema(), j.right.schema());
    let common = |l: &Expr, r: &Expr| -> Result<datafusion::arrow::datatypes::DataType> {
        let (lt, rt) = (l.get_type(ls)?, r.get_type(rs)?);
        comparison_coercion(&lt, &rt).ok_or_else(|| {
            WeirError::not_supported(format!("an ASOF join cannot compare {lt} with {rt}"))
        })
    };
    let key_types = on
        .iter()
        .map(|(l, r)| common(l, r))
        .collect::<Result<Vec<_>>>()?;
    let time_type = common(left_time, right_time)?;
    let (a_tag, b_tag) = if op.inclusive() { (1i32, 0i32) } else { (0, 1) };
    let side =
        |plan: &LogicalPlan, keys: Vec<&Expr>, time: &Expr, tag: i32| -> Result<LogicalPlan> {
            let mut exprs = Vec::with_capacity(keys.len() + 2);
            for (i, (k, t)) in keys.iter().zip(&key_types).enumerate() {
                exprs.push(
                    (*k).clone()
                        .cast_to(t, plan.schema())?
                        .alias(format!("__k{i}")),
                );
            }
            exprs.push(
                time.clone()
                    .cast_to(&time_type, plan.schema())?
                    .alias("__t"),
            );
            exprs.push(lit(tag).alias("__tag"));
            Ok(LogicalPlanBuilder::from(plan.clone())
                .project(exprs)?
                .build()?)
        };
    let a_side = side(
        &j.left,
        on.iter().map(|(l, _)| l).collect(),
        left_time,
        a_tag,
    )?;
    let b_side = side(
        &j.right,
        on.iter().map(|(_, r)| r).collect(),
        right_time,
        b_tag,
    )?;
    let keys: Vec<Expr> = (0..on.len()).map(|i| col(format!("__k{i}"))).collect();
    let right_times = when(col("__tag").eq(lit(b_tag)), col("__t")).end()?;
    let agg = if op.latest() {
        datafusion::functions_aggregate::min_max::max_udaf()
    } else {
        datafusion::functions_aggregate::min_max::min_udaf()
    };
    let matched = Expr::from(WindowFunction::new(
        WindowFunctionDefinition::AggregateUDF(agg),
        vec![right_times],
    ))
    .partition_by(keys.clone())
    .order_by(vec![
        col("__t").sort(op.latest(), true),
        col("__tag").sort(true, true),
    ])
    .window_frame(WindowFrame::new_bounds(
        WindowFrameUnits::Rows,
        WindowFrameBound::Preceding(datafusion::common::ScalarValue::UInt64(None)),
        WindowFrameBound::CurrentRow,
    ))
    .build()?
    .alias("__bt");
    const BEST: &str = "__weir_asof_best";
    let best = LogicalPlanBuilder::from(a_side)
        .union(b_side)?
        .window(vec![matched])?
        .filter(col("__tag").eq(lit(a_tag)))?
        .project(keys.into_iter().chain([col("__t"), col("__bt")]))?
        .distinct()?
        .alias(BEST)?
        .build()?;
    let b = |c: &str| Expr::Column(Column::new(Some(BEST), c));
    let mut to_best = left_time.clone().eq(b("__t"));
    let mut to_right = right_time.clone().eq(b("__bt"));
    for (i, (l, r)) in on.iter().enumerate() {
        to_best = to_best.and(l.clone().eq(b(&format!("__k{i}"))));
        to_right = to_right.and(r.clone().eq(b(&format!("__k{i}"))));
    }
    let out: Vec<Expr> = j
        .schema
        .iter()
        .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
        .collect();
    Ok(LogicalPlanBuilder::from((*j.left).clone())
        .join_on(best, j.join_type, Some(to_best))?
        .join_on((*j.right).clone(), j.join_type, Some(to_right))?
        .project(out)?
        .build()?)
}
