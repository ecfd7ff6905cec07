//! `Project`: computes output columns from expressions over each input row.
//!
//! - input: one changelog stream.
//! - output: one row per input row, same weight. Linear: project(ΔR) = Δ project(R)
//!   (expressions are deterministic; volatile functions are refused when the view is
//!   created).
//! - state: none.
//! - watermark: passed through unchanged.
//! - checkpoint: nothing.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::{Operator, evaluate};

pub struct Project {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    text: String,
}

impl Project {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef, text: String) -> Self {
        Project {
            exprs,
            schema,
            text,
        }
    }
}

impl Operator for Project {
    fn name(&self) -> &'static str {
        "Project"
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
        let cols = self
            .exprs
            .iter()
            .map(|e| evaluate(e, &input.data))
            .collect::<Result<Vec<_>>>()?;
        let data = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(input.len())),
        )?;
        Ok(vec![Changelog::new(data, input.weights)])
    }
}
