//! A Z-set of rows held in memory: each distinct row (in `arrow_row` form) with its
//! multiplicity. Applying a changelog adds its weights; rows whose multiplicity reaches
//! zero disappear. Materialized views and key-less tables keep their contents this way.
//!
//! The rows live in a [`StateTable`] (key: the row, value: its multiplicity), so a view's
//! contents are checkpointed and reloaded like any operator state (a hashed table: point
//! access only).
//!
//! Invariant: in a consistent relation every multiplicity is positive. A negative one means
//! a retraction arrived for a row that was never inserted, i.e. an engine bug; it is kept
//! (so the sum stays right if the matching insertion comes later), counted in
//! [`ZSet::negative_rows`], and never shown by [`ZSet::to_batches`].

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::FastMap;
use crate::state::state_table::{StateTable, TableDecl};

/// The state table of a Z-set.
pub const ZSET_TABLE: TableDecl = TableDecl {
    name: "rows",
    key: "row",
    value: "multiplicity (i64 LE)",
    ordered: false,
};

pub use crate::state::state_table::count_of;

/// Rows per batch handed out by snapshots.
pub const BATCH_ROWS: usize = 8192;

pub struct ZSet {
    schema: SchemaRef,
    conv: RowConverter,
    rows: StateTable,
    /// Sum of positive multiplicities.
    total: i64,
    negative: usize,
    /// Holds a difference (negative multiplicities are expected), not a relation.
    delta: bool,
}

impl ZSet {
    pub fn new(schema: SchemaRef) -> Result<ZSet> {
        let conv = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(ZSet {
            schema,
            conv,
            rows: StateTable::new(ZSET_TABLE),
            total: 0,
            negative: 0,
            delta: false,
        })
    }

    /// A Z-set for summing changes (consolidating a changelog), where rows may end with a
    /// negative multiplicity.
    pub fn new_delta(schema: SchemaRef) -> Result<ZSet> {
        let mut z = ZSet::new(schema)?;
        z.delta = true;
        Ok(z)
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Number of rows, counting multiplicity.
    pub fn len(&self) -> usize {
        self.total.max(0) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.total <= 0
    }

    /// Number of distinct rows held.
    pub fn distinct_rows(&self) -> usize {
        self.rows.len()
    }

    /// Distinct rows with a negative multiplicity (should be zero).
    pub fn negative_rows(&self) -> usize {
        self.negative
    }

    /// The state table holding the rows (for checkpoints and recovery).
    /// Bytes of the contents' keys and counts.
    pub fn bytes(&self) -> usize {
        self.rows.bytes()
    }

    pub fn state_table(&mut self) -> &mut StateTable {
        &mut self.rows
    }

    /// After the state table was loaded: recompute the totals from it.
    pub fn recount(&mut self) {
        let mut total = 0i64;
        let mut negative = 0usize;
        for (_, v) in self.rows.iter_resident() {
            let c = count_of(v);
            total += c.max(0);
            negative += usize::from(c < 0);
        }
        self.total = total;
        self.negative = negative;
    }

    pub fn apply(&mut self, cl: &Changelog) -> Result<()> {
        if cl.is_empty() {
            return Ok(());
        }
        let rows = self.conv.convert_columns(cl.data.columns())?;
        // consolidate within the batch first: fewer map operations for -x/+x pairs
        let mut deltas: FastMap<&[u8], i64> =
            FastMap::with_capacity_and_hasher(rows.num_rows(), Default::default());
        for (i, w) in cl.weights.values().iter().enumerate() {
            *deltas.entry(rows.row(i).data()).or_default() += *w;
        }
        for (row, d) in deltas {
            if d == 0 {
                continue;
            }
            let (old, new) = self.rows.add_count(row, d);
            self.total += new.max(0) - old.max(0);
            match (old < 0, new < 0) {
                (false, true) => self.negative += 1,
                (true, false) => self.negative -= 1,
                _ => {}
            }
        }
        debug_assert!(
            self.delta || self.negative == 0,
            "a Z-set row went negative"
        );
        Ok(())
    }

    /// The rows, each repeated by its multiplicity.
    pub fn to_batches(&self) -> Result<Vec<RecordBatch>> {
        let parser = self.conv.parser();
        let mut out = Vec::new();
        let mut chunk: Vec<&[u8]> = Vec::with_capacity(BATCH_ROWS.min(self.len()));
        for (row, count) in self.rows.iter_resident() {
            for _ in 0..count_of(count).max(0) {
                chunk.push(row);
                if chunk.len() == BATCH_ROWS {
                    out.push(self.batch_of(&parser, &chunk)?);
                    chunk.clear();
                }
            }
        }
        if !chunk.is_empty() {
            out.push(self.batch_of(&parser, &chunk)?);
        }
        Ok(out)
    }

    /// The distinct rows with their multiplicities as weights.
    pub fn to_changelogs(&self) -> Result<Vec<Changelog>> {
        let parser = self.conv.parser();
        let entries: Vec<(&[u8], &[u8])> = self.rows.iter_resident();
        let mut out = Vec::new();
        for chunk in entries.chunks(BATCH_ROWS) {
            let rows: Vec<&[u8]> = chunk.iter().map(|(r, _)| *r).collect();
            let batch = self.batch_of(&parser, &rows)?;
            let weights = Int64Array::from_iter_values(chunk.iter().map(|(_, c)| count_of(c)));
            out.push(Changelog::new(batch, weights));
        }
        Ok(out)
    }

    fn batch_of(
        &self,
        parser: &datafusion::arrow::row::RowParser,
        rows: &[&[u8]],
    ) -> Result<RecordBatch> {
        let cols = self
            .conv
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::changelog::tests::{changelog, rows_of};

    #[test]
    fn weights_add_up_and_zero_rows_vanish() {
        let mut z = ZSet::new(changelog("k:i64 v:str", "+ 1 a").schema()).unwrap();
        z.apply(&changelog("k:i64 v:str", "+ 1 a / + 1 a / + 2 b"))
            .unwrap();
        z.apply(&changelog("k:i64 v:str", "- 1 a / - 2 b / + 3 c"))
            .unwrap();
        assert_eq!(rows_of(&z.to_batches().unwrap()), vec!["1 a", "3 c"]);
        assert_eq!(z.len(), 2);
        assert_eq!(z.distinct_rows(), 2);
        z.apply(&changelog("k:i64 v:str", "- 1 a / - 3 c")).unwrap();
        assert!(z.is_empty());
        assert_eq!(z.distinct_rows(), 0);
    }
}
