//! `Merge`: UNION ALL of several inputs of one row type.
//!
//! - input: N changelog streams (ports 0..N) with the same column types.
//! - output: every input change, unchanged. Linear.
//! - state: none.
//! - watermark: the minimum of the inputs' watermarks (event-time views).
//! - checkpoint: nothing.

use datafusion::arrow::datatypes::SchemaRef;

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::{Operator, with_schema};

pub struct Merge {
    schema: SchemaRef,
    inputs: usize,
}

impl Merge {
    pub fn new(schema: SchemaRef, inputs: usize) -> Self {
        Merge { schema, inputs }
    }
}

impl Operator for Merge {
    fn name(&self) -> &'static str {
        "Merge"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::Any
    }
    fn takes_parts(&self) -> bool {
        true // each batch is mapped on its own
    }
    fn details(&self) -> String {
        format!("{} inputs", self.inputs)
    }
    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }
    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        Ok(vec![with_schema(input, &self.schema)?])
    }
}
