//! Unnest keeps no unique keys: mends what DataFusion 55 gets wrong before anything relies
//! on them.
//!
//! `Unnest::try_new` gives its output the functional dependencies of its input ("we can
//! use the existing functional dependencies"), but unnesting a list repeats each input row
//! once per element, so a key of the input (a table's primary key) is no key of the output
//! and the unnested column depends on nothing. Two wrong answers followed, with `t` keyed
//! by `id`:
//! - `SELECT id, count(*) FROM t, unnest(t.tags) AS tag GROUP BY id` counted per `(id,
//!   tag)`: the SQL planner adds to a GROUP BY the columns its items determine (Postgres'
//!   "grouped by the primary key" rule), and `tag` was taken as determined by `id`.
//!   [`GroupKeysOverUnnest`] (an analyzer rule, the first thing after planning) gives such
//!   an Aggregate the GROUP BY its items give under the mended dependencies: the items
//!   written are the shortest start of the list that the planner's rule expands to the
//!   whole, and a column the plan above the Aggregate reads is kept;
//! - `... ORDER BY id, tag` came out ordered by `id` alone: the optimizer's
//!   `eliminate_duplicated_expr` drops ORDER BY items a key determines.
//!   [`sort_keys_over_unnest`] runs before that rule: before it looks at a Sort, the Unnests under
//!   it lose their dependencies (at each pass: other rules build Unnests again with
//!   `try_new`).
//!
//! Mended: every Unnest of a list claims no dependency, and the nodes above it are given
//! schemas computed again from their inputs.

use std::sync::Arc;

use std::collections::HashSet;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, FunctionalDependencies, Result};
use datafusion::logical_expr::logical_plan::builder::add_group_by_exprs_from_dependencies;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};

use super::wrapped_rule::Before;

/// The step before `eliminate_duplicated_expr` (`wrapped_rule.rs`): a Sort's input with
/// no dependency claimed by an Unnest of a list.
pub fn sort_keys_over_unnest(plan: LogicalPlan) -> Result<Before> {
    Ok(Before::Run(match plan {
        LogicalPlan::Sort(_) => without_unnest_keys(plan)?,
        plan => Transformed::no(plan),
    }))
}

/// The analyzer rule: Aggregates over Unnests grouped as their GROUP BY says.
#[derive(Debug)]
pub struct GroupKeysOverUnnest;

impl datafusion::optimizer::AnalyzerRule for GroupKeysOverUnnest {
    fn analyze(
        &self,
        plan: LogicalPlan,
        _config: &datafusion::config::ConfigOptions,
    ) -> Result<LogicalPlan> {
        if !has_keyed_unnest(&plan)? {
            return Ok(plan);
        }
        let (plan, changed) = regroup(plan, &HashSet::new())?;
        if !changed {
            return Ok(plan);
        }
        // the nodes above a regrouped Aggregate have its columns now
        plan.transform_up(|p| {
            Ok(Transformed::yes(match p {
                LogicalPlan::TableScan(_) | LogicalPlan::EmptyRelation(_) => p,
                p => p.recompute_schema()?,
            }))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "weir_group_keys_over_unnest"
    }
}

/// `plan` with its Aggregates over keyed Unnests regrouped; `above`: the columns the
/// nodes above it read. Returns whether one was.
fn regroup(plan: LogicalPlan, above: &HashSet<Column>) -> Result<(LogicalPlan, bool)> {
    let mut here = above.clone();
    for e in plan.expressions() {
        if let LogicalPlan::Aggregate(_) = &plan {
            // (an Aggregate's own expressions read its input, not its output)
            break;
        }
        here.extend(e.column_refs().into_iter().cloned());
    }
    let mut changed = false;
    let mut inputs = Vec::new();
    for input in plan.inputs() {
        let (i, c) = regroup(input.clone(), &here)?;
        changed |= c;
        inputs.push(i);
    }
    let plan = if changed {
        plan.with_new_exprs(plan.expressions(), inputs)?
    } else {
        plan
    };
    let LogicalPlan::Aggregate(agg) = plan else {
        return Ok((plan, changed));
    };
    if !has_keyed_unnest(&agg.input)?
        || agg
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return Ok((LogicalPlan::Aggregate(agg), changed));
    }
    // the items written: the shortest start the planner's rule expands to the whole list
    let wrong = agg.input.schema();
    let mut written = agg.group_expr.len();
    for n in 0..agg.group_expr.len() {
        if add_group_by_exprs_from_dependencies(agg.group_expr[..n].to_vec(), wrong)?
            == agg.group_expr
        {
            written = n;
            break;
        }
    }
    if written == agg.group_expr.len() {
        return Ok((LogicalPlan::Aggregate(agg), changed));
    }
    let input = without_unnest_keys(agg.input.as_ref().clone())?.data;
    let mut group =
        add_group_by_exprs_from_dependencies(agg.group_expr[..written].to_vec(), input.schema())?;
    // what the plan above reads stays (it was written, or the query reads it)
    for e in &agg.group_expr[written..] {
        if !group.contains(e) && e.column_refs().iter().any(|c| above.contains(*c)) {
            group.push(e.clone());
        }
    }
    if group == agg.group_expr {
        return Ok((LogicalPlan::Aggregate(agg), changed));
    }
    let regrouped = Aggregate::try_new(std::sync::Arc::new(input), group, agg.aggr_expr)?;
    Ok((LogicalPlan::Aggregate(regrouped), true))
}

/// Whether an Unnest of a list under `plan` claims a dependency.
fn has_keyed_unnest(plan: &LogicalPlan) -> Result<bool> {
    let mut found = false;
    plan.apply(|p| {
        found = keyed_list_unnest(p);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(found)
}

/// An Unnest of a list whose output claims a dependency.
fn keyed_list_unnest(p: &LogicalPlan) -> bool {
    matches!(p, LogicalPlan::Unnest(u)
        if !u.list_type_columns.is_empty()
            && *u.schema.functional_dependencies() != FunctionalDependencies::empty())
}

/// `plan` with no dependency claimed by an Unnest of a list, nor above one.
fn without_unnest_keys(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if !has_keyed_unnest(&plan)? {
        return Ok(Transformed::no(plan));
    }
    plan.transform_up(|p| {
        // (every node again from its inputs: one below may have lost a dependency)
        let p = match p {
            LogicalPlan::TableScan(_) | LogicalPlan::EmptyRelation(_) => p,
            p => p.recompute_schema()?,
        };
        Ok(Transformed::yes(match p {
            LogicalPlan::Unnest(mut u) if !u.list_type_columns.is_empty() => {
                u.schema = Arc::new(
                    u.schema
                        .as_ref()
                        .clone()
                        .with_functional_dependencies(FunctionalDependencies::empty())?,
                );
                LogicalPlan::Unnest(u)
            }
            p => p,
        }))
    })
}
