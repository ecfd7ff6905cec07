//! One of DataFusion's optimizer rules with a step of ours before it at each node: how
//! Weir mends a rule that gives a wrong answer on some plans, without copying the rule.
//! The step sees the node first and either keeps the rule away from it (the node as it
//! is) or hands it on, possibly changed, to the rule. Used for `push_down_filter`
//! (`global_aggregate_filters.rs`) and `eliminate_duplicated_expr` (`unnest_keys.rs`).

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// What the step before the rule decided for a node.
pub enum Before {
    /// The rule does not see the node.
    Skip(LogicalPlan),
    /// The rule runs on the node (changed by the step, or not).
    Run(Transformed<LogicalPlan>),
}

/// DataFusion's rule `inner`, with `before` run on each node first; named as the rule.
#[derive(Debug)]
pub struct WrappedRule {
    pub inner: Arc<dyn OptimizerRule + Send + Sync>,
    pub before: fn(LogicalPlan) -> Result<Before>,
}

impl OptimizerRule for WrappedRule {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.inner.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        match (self.before)(plan)? {
            Before::Skip(plan) => Ok(Transformed::no(plan)),
            Before::Run(changed) => {
                let after = self.inner.rewrite(changed.data, config)?;
                Ok(Transformed::new_transformed(
                    after.data,
                    changed.transformed || after.transformed,
                ))
            }
        }
    }
}
