//! `Unnest`: a set-returning function in a view's select list (`unnest(tags)`,
//! `generate_series(1, n)`): each input row becomes one row per element of its list column,
//! the other columns repeated.
//!
//! - input: one changelog stream.
//! - output: per input row, one row per element with the input row's weight. Linear:
//!   unnest(ΔR) = Δ unnest(R), so a retracted row retracts exactly its elements.
//!   A NULL or empty list gives no rows (Postgres), unless the plan asks to keep NULLs.
//! - state: none.
//! - watermark: passed through unchanged.
//! - checkpoint: nothing.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, UInt64Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::Operator;

pub struct Unnest {
    /// The list column of the input.
    list: usize,
    /// For each output column, the input column it comes from.
    sources: Vec<usize>,
    preserve_nulls: bool,
    schema: SchemaRef,
    text: String,
}

impl Unnest {
    pub fn new(
        list: usize,
        sources: Vec<usize>,
        preserve_nulls: bool,
        schema: SchemaRef,
        text: String,
    ) -> Self {
        Unnest {
            list,
            sources,
            preserve_nulls,
            schema,
            text,
        }
    }
}

impl Operator for Unnest {
    fn name(&self) -> &'static str {
        "Unnest"
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
        let col = input.data.column(self.list);
        let field = match col.data_type() {
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => f.clone(),
            other => {
                return Err(WeirError::internal(format!(
                    "unnest of a non-list column ({other})"
                )));
            }
        };
        let list = cast(col, &DataType::LargeList(field))?;
        let list = list.as_list::<i64>();
        let offsets = list.value_offsets();
        // (input row, element position or None for a kept NULL)
        let mut rows: Vec<u64> = Vec::new();
        let mut elems: Vec<Option<u64>> = Vec::new();
        for i in 0..list.len() {
            if list.is_null(i) {
                if self.preserve_nulls {
                    rows.push(i as u64);
                    elems.push(None);
                }
                continue;
            }
            for p in offsets[i]..offsets[i + 1] {
                rows.push(i as u64);
                elems.push(Some(p as u64));
            }
        }
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let row_idx = UInt64Array::from(rows);
        let elem_idx = UInt64Array::from(elems);
        let cols = self
            .sources
            .iter()
            .zip(self.schema.fields())
            .map(|(&s, f)| -> Result<ArrayRef> {
                let c = if s == self.list {
                    take(list.values(), &elem_idx, None)?
                } else {
                    take(input.data.column(s), &row_idx, None)?
                };
                Ok(if c.data_type() == f.data_type() {
                    c
                } else {
                    cast(&c, f.data_type())?
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let weights = take(&input.weights, &row_idx, None)?;
        let weights = weights
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("weights are not i64"))?
            .clone();
        let data = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(row_idx.len())),
        )?;
        Ok(vec![Changelog::new(data, weights)])
    }
}
