//! Stored rows back to columns: the one way rows held in `arrow_row` form (tables' rows,
//! views' contents, in memory or in a store) become Arrow batches, and the one trait a scan
//! streams them through.
//!
//! [`RowBatcher`] collects rows with their multiplicities (a row present n times is one
//! copy of its bytes listed n times) and cuts batches of at most [`BATCH_ROWS`] rows or
//! about [`BATCH_BYTES`] bytes; a row whose copies do not fit is carried into the next
//! batch. [`BatchSource`] is a consistent read of a relation (a table's store read view, a
//! view's contents at one epoch) that hands its batches out one at a time.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::RowConverter;

use crate::error::Result;

/// Rows per batch handed out by reads of stored rows.
pub const BATCH_ROWS: usize = 8192;
/// Bytes of row encodings per batch, at most about this many (wide rows).
pub const BATCH_BYTES: usize = 4 << 20;

/// A consistent read of a relation's rows, streamed a batch at a time.
pub trait BatchSource: Send + Sync {
    /// The relation's name, for plans and errors.
    fn name(&self) -> &str;
    /// Rows the read yields (counting multiplicity).
    fn rows(&self) -> u64;
    fn schema(&self) -> SchemaRef;
    /// The batches, read as they are taken.
    fn batches(self: Arc<Self>) -> Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;
}

/// Rows collected into batches (see the module header).
#[derive(Default)]
pub struct RowBatcher {
    /// The rows' bytes back to back.
    buf: Vec<u8>,
    /// Each row's range in `buf`, once per copy.
    ranges: Vec<(usize, usize)>,
    /// A row and the copies of it still due (they did not fit the batch).
    carry: Option<(Vec<u8>, i64)>,
}

impl RowBatcher {
    pub fn new() -> RowBatcher {
        RowBatcher::default()
    }

    /// Add `n` copies of `row` (as many as fit; the rest are carried to the next batch).
    /// Call only while not [`full`](Self::full).
    pub fn push(&mut self, row: &[u8], n: i64) {
        debug_assert!(self.carry.is_none(), "push onto a full batch");
        if n <= 0 {
            return;
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(row);
        let room = BATCH_ROWS.saturating_sub(self.ranges.len());
        let take = (n as usize).min(room);
        self.ranges
            .extend(std::iter::repeat_n((start, self.buf.len()), take));
        if (take as i64) < n {
            self.carry = Some((row.to_vec(), n - take as i64));
        }
    }

    /// Whether the batch is complete (take it before pushing more).
    pub fn full(&self) -> bool {
        self.carry.is_some() || self.ranges.len() >= BATCH_ROWS || self.buf.len() >= BATCH_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The rows collected as a batch (None if there are none); carried copies start the
    /// next one.
    pub fn take(&mut self, conv: &RowConverter, schema: &SchemaRef) -> Result<Option<RecordBatch>> {
        if self.ranges.is_empty() {
            return Ok(None);
        }
        let parser = conv.parser();
        let cols = conv.convert_rows(
            self.ranges
                .iter()
                .map(|&(a, b)| parser.parse(&self.buf[a..b])),
        )?;
        let batch = RecordBatch::try_new(schema.clone(), cols)?;
        self.buf.clear();
        self.ranges.clear();
        if let Some((row, n)) = self.carry.take() {
            self.push(&row, n);
        }
        Ok(Some(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::row::SortField;

    /// Copies beyond a batch are carried, every batch is at most BATCH_ROWS, and the rows
    /// come out in the order pushed.
    #[test]
    fn multiplicities_span_batches() {
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let conv = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let rows = conv
            .convert_columns(&[Arc::new(Int64Array::from(vec![1, 2, 3]))])
            .unwrap();
        let mut b = RowBatcher::new();
        let mut out = Vec::new();
        for (i, n) in [(0, 5i64), (1, BATCH_ROWS as i64 * 2 + 3), (2, 1)] {
            b.push(rows.row(i).data(), n);
            while b.full() {
                out.push(b.take(&conv, &schema).unwrap().unwrap());
            }
        }
        out.extend(b.take(&conv, &schema).unwrap());
        assert!(b.take(&conv, &schema).unwrap().is_none());
        let sizes: Vec<usize> = out.iter().map(|b| b.num_rows()).collect();
        assert_eq!(sizes, vec![BATCH_ROWS, BATCH_ROWS, 9]);
        let all: Vec<i64> = out
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..c.len()).map(|i| c.value(i)).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(&all[..5], &[1; 5]);
        assert_eq!(all.iter().filter(|v| **v == 2).count(), BATCH_ROWS * 2 + 3);
        assert_eq!(all.last(), Some(&3));
    }
}
