//! DataFusion's `push_down_filter`, except below an aggregate without groups or with
//! grouping sets. DataFusion pushes a predicate under an Aggregate when every column it
//! reads is a group column, which a predicate reading none (`'y' = 'x'`, what `WHERE c =
//! 'x'` becomes over `SELECT max(a), 'y' AS c`) always passes: under a global aggregate
//! the filter then empties the input, and the aggregate still gives its one row
//! (`(NULL, 'y')`, where Postgres gives none). Under grouping sets a predicate on a group
//! column changes the totals of the sets without it. So a filter directly over such an
//! aggregate stays where it is; every other node is DataFusion's rule's.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

#[derive(Debug)]
pub struct FiltersAboveGlobalAggregates(pub Arc<dyn OptimizerRule + Send + Sync>);

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

impl OptimizerRule for FiltersAboveGlobalAggregates {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.0.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if let LogicalPlan::Filter(f) = &plan
            && keeps_filters(&f.input)
        {
            return Ok(Transformed::no(plan));
        }
        self.0.rewrite(plan, config)
    }
}
