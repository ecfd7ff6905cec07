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

    pub fn len(&self) -> usize {
        self.data.num_rows()
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
