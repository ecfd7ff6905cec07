//! Changelog batches: the unit of change between tables, operators and views.
//!
//! A changelog is an Arrow [`RecordBatch`] of rows plus one signed weight per row
//! (+1 insert, -1 retract; an update is -old/+new). A relation's contents are the sum of
//! every changelog it has received: the Z-set model of DBSP / Differential Dataflow, laid
//! out in columns. Weights other than ±1 are allowed (a row present n times has weight n).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

/// Name of the weight column when a changelog is stored or shipped as one batch.
pub const WEIGHT_COLUMN: &str = "__weir_weight";

#[derive(Debug, Clone)]
pub struct Changelog {
    pub data: RecordBatch,
    pub weights: Int64Array,
}

impl Changelog {
    pub fn new(data: RecordBatch, weights: Int64Array) -> Self {
        assert_eq!(
            data.num_rows(),
            weights.len(),
            "changelog rows and weights differ in length"
        );
        debug_assert_eq!(
            weights.null_count(),
            0,
            "changelog weights must not be null"
        );
        Changelog { data, weights }
    }

    /// Every row inserted once.
    pub fn inserts(data: RecordBatch) -> Self {
        let weights = Int64Array::from_value(1, data.num_rows());
        Changelog { data, weights }
    }

    /// Every row retracted once.
    pub fn retractions(data: RecordBatch) -> Self {
        let weights = Int64Array::from_value(-1, data.num_rows());
        Changelog { data, weights }
    }

    pub fn empty(schema: SchemaRef) -> Self {
        Changelog {
            data: RecordBatch::new_empty(schema),
            weights: Int64Array::from(Vec::<i64>::new()),
        }
    }

    /// The rows at `indices` (and their weights), in that order.
    pub fn take(&self, indices: &dyn Array) -> Result<Changelog> {
        use datafusion::arrow::array::AsArray;
        let data = datafusion::arrow::compute::take_record_batch(&self.data, indices)?;
        let weights = datafusion::arrow::compute::take(&self.weights, indices, None)?;
        Ok(Changelog::new(
            data,
            weights
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .clone(),
        ))
    }

    pub fn len(&self) -> usize {
        self.data.num_rows()
    }

    /// Rows `offset..offset + len` (no copy).
    pub fn slice(&self, offset: usize, len: usize) -> Changelog {
        Changelog {
            data: self.data.slice(offset, len),
            weights: self.weights.slice(offset, len),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.data.num_rows() == 0
    }

    pub fn schema(&self) -> SchemaRef {
        self.data.schema()
    }

    /// Concatenate changelogs of one schema.
    pub fn concat(schema: &SchemaRef, parts: &[Changelog]) -> Result<Changelog> {
        let data = concat_batches(schema, parts.iter().map(|c| &c.data))?;
        let weights: Vec<i64> = parts
            .iter()
            .flat_map(|c| c.weights.values().iter().copied())
            .collect();
        Ok(Changelog::new(data, Int64Array::from(weights)))
    }

    /// The rows with the weight as a trailing column.
    pub fn to_batch(&self) -> Result<RecordBatch> {
        let mut fields: Vec<Arc<Field>> = self.data.schema().fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(WEIGHT_COLUMN, DataType::Int64, false)));
        let mut cols: Vec<ArrayRef> = self.data.columns().to_vec();
        cols.push(Arc::new(self.weights.clone()));
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
    }

    /// Inverse of [`Changelog::to_batch`]; `schema` is the row schema without the weight.
    pub fn from_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<Changelog> {
        let n = batch.num_columns();
        if n == 0 || batch.schema().field(n - 1).name() != WEIGHT_COLUMN {
            return Err(WeirError::internal("stored changelog has no weight column"));
        }
        let weights = batch
            .column(n - 1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("stored changelog weight is not Int64"))?
            .clone();
        let data = RecordBatch::try_new(schema.clone(), batch.columns()[..n - 1].to_vec())?;
        Ok(Changelog::new(data, weights))
    }
}

/// Readable changelog literals for tests, in RisingWave's style:
/// `changelog("k:i64 v:str", "+ 1 a / - 2 b / +2 3 NULL")` (`+2` is weight 2).
#[cfg(test)]
pub mod tests {
    use super::*;
    use datafusion::arrow::array::{BooleanArray, Float64Array, StringArray};
    use datafusion::arrow::util::display::array_value_to_string;

    fn data_type(t: &str) -> DataType {
        match t {
            "i64" => DataType::Int64,
            "i32" => DataType::Int32,
            "u64" => DataType::UInt64,
            "f64" => DataType::Float64,
            "str" => DataType::Utf8,
            "bool" => DataType::Boolean,
            other => panic!("unknown test type {other}"),
        }
    }

    pub fn schema(spec: &str) -> SchemaRef {
        Arc::new(Schema::new(
            spec.split_whitespace()
                .map(|c| {
                    let (n, t) = c.split_once(':').expect("name:type");
                    Field::new(n, data_type(t), true)
                })
                .collect::<Vec<_>>(),
        ))
    }

    pub fn changelog(spec: &str, rows: &str) -> Changelog {
        let schema = schema(spec);
        let mut cells: Vec<Vec<Option<String>>> = vec![Vec::new(); schema.fields().len()];
        let mut weights = Vec::new();
        for row in rows
            .split(['/', '\n'])
            .map(str::trim)
            .filter(|r| !r.is_empty())
        {
            let mut parts = row.split_whitespace();
            let w = parts.next().expect("weight");
            let weight: i64 = match w {
                "+" => 1,
                "-" => -1,
                other => other.parse().expect("weight like +2 or -3"),
            };
            weights.push(weight);
            for (i, cell) in cells.iter_mut().enumerate() {
                let v = parts
                    .next()
                    .unwrap_or_else(|| panic!("row {row:?} lacks column {i}"));
                cell.push((v != "NULL").then(|| v.to_owned()));
            }
        }
        let cols: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .zip(cells)
            .map(|(f, vals)| -> ArrayRef {
                match f.data_type() {
                    DataType::Int64 => Arc::new(Int64Array::from(
                        vals.iter()
                            .map(|v| v.as_ref().map(|s| s.parse().unwrap()))
                            .collect::<Vec<_>>(),
                    )),
                    DataType::Int32 => Arc::new(datafusion::arrow::array::Int32Array::from(
                        vals.iter()
                            .map(|v| v.as_ref().map(|s| s.parse().unwrap()))
                            .collect::<Vec<_>>(),
                    )),
                    DataType::Float64 => Arc::new(Float64Array::from(
                        vals.iter()
                            .map(|v| v.as_ref().map(|s| s.parse().unwrap()))
                            .collect::<Vec<_>>(),
                    )),
                    DataType::Boolean => Arc::new(BooleanArray::from(
                        vals.iter()
                            .map(|v| v.as_ref().map(|s| s == "t" || s == "true"))
                            .collect::<Vec<_>>(),
                    )),
                    _ => Arc::new(StringArray::from(vals)),
                }
            })
            .collect();
        Changelog::new(
            RecordBatch::try_new(schema, cols).expect("batch"),
            Int64Array::from(weights),
        )
    }

    fn row_text(batch: &RecordBatch, i: usize) -> String {
        (0..batch.num_columns())
            .map(|c| {
                let col = batch.column(c);
                if col.is_null(i) {
                    "NULL".to_owned()
                } else {
                    array_value_to_string(col, i).unwrap()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Rows of batches as sorted strings.
    pub fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
        let mut out: Vec<String> = batches
            .iter()
            .flat_map(|b| (0..b.num_rows()).map(move |i| row_text(b, i)))
            .collect();
        out.sort();
        out
    }

    /// A changelog consolidated (weights of equal rows summed, zeros dropped) and printed as
    /// sorted `"+ row"` / `"- row"` / `"+2 row"` lines.
    pub fn render(cls: &[Changelog]) -> Vec<String> {
        let mut sums: std::collections::BTreeMap<String, i64> = Default::default();
        for cl in cls {
            for i in 0..cl.len() {
                *sums.entry(row_text(&cl.data, i)).or_default() += cl.weights.value(i);
            }
        }
        let mut out: Vec<String> = sums
            .into_iter()
            .filter(|(_, w)| *w != 0)
            .map(|(r, w)| match w {
                1 => format!("+ {r}"),
                -1 => format!("- {r}"),
                w if w > 0 => format!("+{w} {r}"),
                w => format!("{w} {r}"),
            })
            .collect();
        out.sort();
        out
    }
}
