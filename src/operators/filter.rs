//! `Filter`: keeps the rows for which a predicate is true.
//!
//! - input: one changelog stream.
//! - output: the rows whose predicate is true (NULL counts as false), with their weights.
//!   Linear: filter(ΔR) = Δ filter(R).
//! - state: none.
//! - watermark: passed through unchanged.
//! - checkpoint: nothing.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::{Operator, evaluate, filter_changelog, true_mask};

pub struct Filter {
    predicate: Arc<dyn PhysicalExpr>,
    schema: SchemaRef,
    text: String,
}

impl Filter {
    pub fn new(predicate: Arc<dyn PhysicalExpr>, schema: SchemaRef, text: String) -> Self {
        Filter {
            predicate,
            schema,
            text,
        }
    }
}

impl Operator for Filter {
    fn name(&self) -> &'static str {
        "Filter"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::Any
    }
    fn takes_parts(&self) -> bool {
        true // each batch is mapped on its own
    }
    fn details(&self) -> String {
        self.text.clone()
    }
    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }
    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let mask = evaluate(&self.predicate, &input.data)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| WeirError::internal("filter predicate is not boolean"))?;
        let mask = true_mask(mask);
        Ok(vec![filter_changelog(&input, &mask)?])
    }
}
