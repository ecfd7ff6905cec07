//! DataFusion's `push_down_filter`, except below an aggregate without groups or with
//! grouping sets. DataFusion pushes a predicate under an Aggregate when every column it
//! reads is a group column, which a predicate reading none (`'y' = 'x'`, what `WHERE c =
//! 'x'` becomes over `SELECT max(a), 'y' AS c`) always passes: under a global aggregate
//! the filter then empties the input, and the aggregate still gives its one row
//! (`(NULL, 'y')`, where Postgres gives none). Under grouping sets a predicate on a group
//! column changes the totals of the sets without it. So a filter directly over such an
//! aggregate stays where it is; every other node is DataFusion's rule's.

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::{Expr, LogicalPlan};

use super::wrapped_rule::Before;

/// The step before `push_down_filter` (`wrapped_rule.rs`): a filter over an aggregate that
/// keeps it is left where it is.
pub fn filters_above_global_aggregates(plan: LogicalPlan) -> Result<Before> {
    Ok(match &plan {
        LogicalPlan::Filter(f) if keeps_filters(&f.input) => Before::Skip(plan),
        _ => Before::Run(Transformed::no(plan)),
    })
}

/// An aggregate a filter over it must stay over: no groups, or grouping sets.
fn keeps_filters(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(a) => {
            a.group_expr.is_empty()
                || a.group_expr
                    .iter()
                    .any(|e| matches!(e, Expr::GroupingSet(_)))
        }
        _ => false,
    }
}
