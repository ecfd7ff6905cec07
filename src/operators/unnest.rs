//! `Unnest`: set-returning functions in a view's select list (`unnest(tags)`,
//! `generate_series(1, n)`, `jsonb_each` as two lists): each input row becomes one row per
//! element of its list columns (side by side, the shorter padded with NULLs), the other
//! columns repeated.
//!
//! - input: one changelog stream.
//! - output: per input row, one row per element with the input row's weight. Linear:
//!   unnest(ΔR) = Δ unnest(R), so a retracted row retracts exactly its elements.
//!   A NULL or empty list gives no rows (Postgres), unless the plan asks to keep NULLs.
//! - state: none.
//! - watermark: passed through unchanged.
//! - checkpoint: nothing.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt64Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::Operator;

pub struct Unnest {
    /// The list columns of the input, unnested side by side (Postgres' several
    /// set-returning functions in one select list: as many rows as the longest, the shorter
    /// ones padded with NULLs).
    lists: Vec<usize>,
    /// For each output column, the input column it comes from.
    sources: Vec<usize>,
    preserve_nulls: bool,
    schema: SchemaRef,
    text: String,
}

impl Unnest {
    pub fn new(
        lists: Vec<usize>,
        sources: Vec<usize>,
        preserve_nulls: bool,
        schema: SchemaRef,
        text: String,
    ) -> Self {
        Unnest {
            lists,
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
        let mut lists = Vec::with_capacity(self.lists.len());
        for &l in &self.lists {
            let col = input.data.column(l);
            let field = match col.data_type() {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                    f.clone()
                }
                other => {
                    return Err(WeirError::internal(format!(
                        "unnest of a non-list column ({other})"
                    )));
                }
            };
            lists.push(cast(col, &DataType::LargeList(field))?);
        }
        let lists: Vec<_> = lists.iter().map(|l| l.as_list::<i64>()).collect();
        // (input row; per list, element position or None for a NULL)
        let mut rows: Vec<u64> = Vec::new();
        let mut elems: Vec<Vec<Option<u64>>> = vec![Vec::new(); lists.len()];
        for i in 0..input.data.num_rows() {
            let len = |l: &&datafusion::arrow::array::LargeListArray| {
                (!l.is_null(i)).then(|| (l.value_offsets()[i + 1] - l.value_offsets()[i]) as u64)
            };
            let lens: Vec<Option<u64>> = lists.iter().map(len).collect();
            if lens.iter().all(Option::is_none) {
                if self.preserve_nulls {
                    rows.push(i as u64);
                    for e in elems.iter_mut() {
                        e.push(None);
                    }
                }
                continue;
            }
            let n = lens.iter().map(|l| l.unwrap_or(0)).max().unwrap_or(0);
            for p in 0..n {
                rows.push(i as u64);
                for (j, l) in lists.iter().enumerate() {
                    let at = (lens[j].unwrap_or(0) > p).then(|| l.value_offsets()[i] as u64 + p);
                    elems[j].push(at);
                }
            }
        }
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let row_idx = UInt64Array::from(rows);
        let elem_idx: Vec<UInt64Array> = elems.into_iter().map(UInt64Array::from).collect();
        let cols = self
            .sources
            .iter()
            .zip(self.schema.fields())
            .map(|(&s, f)| -> Result<ArrayRef> {
                let c = match self.lists.iter().position(|&l| l == s) {
                    Some(j) => take(lists[j].values(), &elem_idx[j], None)?,
                    None => take(input.data.column(s), &row_idx, None)?,
                };
                Ok(if c.data_type() == f.data_type() {
                    c
                } else {
                    cast(&c, f.data_type())?
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let weights = take(&input.weights, &row_idx, None)?
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .clone();
        let data = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(row_idx.len())),
        )?;
        Ok(vec![Changelog::new(data, weights)])
    }
}
