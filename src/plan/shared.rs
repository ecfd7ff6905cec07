//! Common subplans of a view, computed once. A view query often says the same thing twice
//! (Nexmark q5 counts bids per auction and HOP window in two subqueries, one to join and
//! one to take the maximum of; a self-join reads one relation twice). The dataflow
//! lowering (`plan/view.rs`) gives equal subplans one node whose output feeds every
//! consumer, so their state is kept and their work done once. This pass makes subplans
//! that differ only in ways that do not change what they compute equal first:
//!
//! - the names DataFusion's common-subexpression pass makes up (`__common_expr_N`, numbered
//!   across the whole plan, so the same expression in two subqueries gets two names) are
//!   renamed by their expression: the Nth distinct expression met bottom-up is
//!   `__common_expr_N`, whichever subquery it is in;
//! - an aggregate that groups the same input by the same keys with the same aggregates as
//!   an earlier one, in another key order, groups in the earlier one's order under a
//!   projection that puts its columns back in its own order.
//!
//! Sharing is sound because a view's plan is deterministic (`check_deterministic`): equal
//! subplans over the same inputs compute equal changes.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, Projection};

use crate::error::Result;

const COMMON_EXPR: &str = "__common_expr_";

/// The plan with equal-meaning subplans made equal (see the module doc). Its output is
/// the plan's own (names and types), or this is an error.
pub fn canonical_subplans(plan: LogicalPlan) -> Result<LogicalPlan> {
    let before = plan.schema().clone();
    let plan = align_group_orders(rename_common_exprs(plan)?)?;
    if plan.schema().as_ref() != before.as_ref() {
        return Err(crate::error::WeirError::internal(
            "making common subplans equal changed the view's columns",
        ));
    }
    Ok(plan)
}

/// `__common_expr_N` aliases named by their expression, in the order met bottom-up.
fn rename_common_exprs(plan: LogicalPlan) -> Result<LogicalPlan> {
    // old name -> new name; expression text -> new name
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut by_text: HashMap<String, String> = HashMap::new();
    // once a name changed, every node above takes its schema again (a join or union
    // passing a renamed column on keeps the one it was built with otherwise)
    let mut any_renamed = false;
    let out = plan.transform_up(|p| {
        let p = p.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::Column(c) if c.relation.is_none() => match renamed.get(&c.name) {
                    Some(n) if *n != c.name => Ok(Transformed::yes(Expr::Column(Column::new(
                        None::<&str>,
                        n.clone(),
                    )))),
                    _ => Ok(Transformed::no(Expr::Column(c))),
                },
                Expr::Alias(a) if a.name.starts_with(COMMON_EXPR) => {
                    let next = by_text.len() + 1;
                    let name = by_text
                        .entry(a.expr.to_string())
                        .or_insert_with(|| format!("{COMMON_EXPR}{next}"))
                        .clone();
                    renamed.insert(a.name.clone(), name.clone());
                    if name == a.name {
                        return Ok(Transformed::no(Expr::Alias(a)));
                    }
                    any_renamed = true;
                    Ok(Transformed::yes(a.expr.alias_qualified(a.relation, name)))
                }
                other => Ok(Transformed::no(other)),
            })
        })?;
        if !p.transformed && !any_renamed {
            return Ok(p);
        }
        Ok(Transformed::yes(p.data.recompute_schema()?))
    })?;
    Ok(out.data)
}

/// Aggregates of one input by one key set and one list of aggregates group in the order
/// of the first met (bottom-up), under a projection back to their own column order.
fn align_group_orders(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut seen: Vec<Aggregate> = Vec::new();
    let out = plan.transform_up(|p| {
        let LogicalPlan::Aggregate(a) = &p else {
            return Ok(Transformed::no(p));
        };
        if a.group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return Ok(Transformed::no(p));
        }
        let first = seen.iter().find(|s| {
            s.input == a.input
                && s.aggr_expr == a.aggr_expr
                && s.group_expr.len() == a.group_expr.len()
                && a.group_expr.iter().all(|g| s.group_expr.contains(g))
        });
        let Some(first) = first else {
            seen.push(a.clone());
            return Ok(Transformed::no(p));
        };
        if first.group_expr == a.group_expr {
            return Ok(Transformed::no(p));
        }
        let groups = first.group_expr.clone();
        // this aggregate's group key i is the aligned one's key at its place there
        let place: Vec<usize> = a
            .group_expr
            .iter()
            .enumerate()
            .map(|(i, g)| groups.iter().position(|f| f == g).unwrap_or(i))
            .collect();
        let n = place.len();
        let plan = regrouped(a, groups, |i| if i < n { place[i] } else { i })?;
        Ok(Transformed::yes(plan))
    })?;
    Ok(out.data)
}

/// Aggregate `a` grouped by `groups` instead (its input and aggregates kept), under a
/// projection giving `a`'s own columns, names and qualifiers: its column `i` is the new
/// aggregate's column `source(i)`.
pub fn regrouped(
    a: &Aggregate,
    groups: Vec<Expr>,
    source: impl Fn(usize) -> usize,
) -> datafusion::common::Result<LogicalPlan> {
    let regrouped = Aggregate::try_new(a.input.clone(), groups, a.aggr_expr.clone())?;
    let cols = regrouped.schema.columns();
    let back: Vec<Expr> = a
        .schema
        .iter()
        .enumerate()
        .map(|(i, (q, f))| {
            Expr::Column(cols[source(i)].clone()).alias_qualified(q.cloned(), f.name())
        })
        .collect();
    let projection = Projection::try_new(back, Arc::new(LogicalPlan::Aggregate(regrouped)))?;
    Ok(LogicalPlan::Projection(projection))
}
