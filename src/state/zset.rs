//! A Z-set of rows held in memory: each distinct row (in `arrow_row` form) with its
//! multiplicity. Applying a changelog adds its weights; rows whose multiplicity reaches
//! zero disappear. Materialized views and key-less tables keep their contents this way.
//!
//! The rows live in a [`StateTable`] (key: the row, value: its multiplicity), so a view's
//! contents are checkpointed, reloaded and spilled under the memory limit like any
//! operator state (a hashed table: point access only). A reader on another thread takes a
//! [`ZSetRead`] (the rows in memory as batches, plus a read view of the spilled ones) and
//! streams it.
//!
//! Invariant: in a consistent relation every multiplicity is positive. A negative one means
//! a retraction arrived for a row that was never inserted, i.e. an engine bug; it is kept
//! (so the sum stays right if the matching insertion comes later), counted in
//! [`ZSet::negative_rows`], and never shown by [`ZSet::to_batches`].

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::FastMap;
use crate::state::rows::{BatchSource, RowBatcher};
use crate::state::state_table::{StateTable, TableDecl};
use crate::state::store::{Cursor, ReadView};
use crate::state::table_index::{IndexSpec, SecondaryIndex};

/// The state table of a Z-set.
pub const ZSET_TABLE: TableDecl = TableDecl {
    name: "rows",
    key: "row",
    value: "multiplicity (i64 LE)",
    ordered: false,
};

pub use crate::state::state_table::count_of;

/// The state table of a Z-set's secondary index (`CREATE INDEX` on a materialized view):
/// derived from the rows, so never checkpointed (built again when the view is restored)
/// and held in memory.
pub const ZSET_INDEX_TABLE: TableDecl = TableDecl {
    name: "index",
    key: "index prefix ++ indexed values ++ row",
    value: "multiplicity (i64 LE) ++ length of the indexed values (u32 LE)",
    ordered: true,
};

/// A secondary index of a Z-set: its rows again, ordered by the indexed columns.
struct ZIndex {
    ix: SecondaryIndex,
    entries: StateTable,
    /// The key being written (one buffer for every row).
    key: Vec<u8>,
}

/// The multiplicity in an index entry's value (its first 8 bytes).
fn entry_count(v: &[u8]) -> i64 {
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_le_bytes)
        .unwrap_or(0)
}

impl ZIndex {
    /// Add `d` copies of `row` (with indexed values `values`).
    fn add(&mut self, values: &[u8], row: &[u8], d: i64) {
        self.ix.key_into(&mut self.key, values, row);
        let old = self.entries.get(&self.key).map(entry_count).unwrap_or(0);
        let new = old + d;
        if new == 0 {
            self.entries.delete(&self.key);
        } else {
            let mut v = [0u8; 12];
            v[..8].copy_from_slice(&new.to_le_bytes());
            v[8..].copy_from_slice(&(values.len() as u32).to_le_bytes());
            self.entries.put(&self.key, &v);
        }
    }
}

pub struct ZSet {
    schema: SchemaRef,
    conv: RowConverter,
    rows: StateTable,
    /// Sum of positive multiplicities.
    total: i64,
    negative: usize,
    /// Holds a difference (negative multiplicities are expected), not a relation.
    delta: bool,
    indexes: Vec<ZIndex>,
}

impl ZSet {
    pub fn new(schema: SchemaRef) -> Result<ZSet> {
        let conv = row_converter(&schema)?;
        Ok(ZSet {
            schema,
            conv,
            rows: StateTable::new(ZSET_TABLE),
            total: 0,
            negative: 0,
            delta: false,
            indexes: Vec::new(),
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

    /// Bytes of the contents' keys and counts in memory.
    pub fn bytes(&self) -> usize {
        self.rows.bytes()
    }

    /// Bytes of the contents' keys and counts spilled.
    pub fn spilled_bytes(&self) -> usize {
        self.rows.spilled_bytes()
    }

    /// What the contents take in memory, as the state-cache budget counts it (their
    /// indexes too, which stay in memory).
    pub fn footprint(&self) -> usize {
        self.rows.footprint() + self.index_bytes()
    }

    /// Bytes of the secondary indexes' entries.
    pub fn index_bytes(&self) -> usize {
        self.indexes.iter().map(|i| i.entries.bytes()).sum()
    }

    /// The secondary indexes kept.
    pub fn index_specs(&self) -> Vec<IndexSpec> {
        self.indexes.iter().map(|i| i.ix.spec.clone()).collect()
    }

    /// Keep exactly these secondary indexes: drop the others, build the missing ones from
    /// every row (the spilled ones too).
    pub fn set_indexes(&mut self, specs: &[IndexSpec]) -> Result<()> {
        self.indexes.retain(|i| specs.contains(&i.ix.spec));
        for spec in specs {
            if self.indexes.iter().any(|i| &i.ix.spec == spec) {
                continue;
            }
            let mut z = ZIndex {
                ix: SecondaryIndex::new(&[], spec.clone(), &self.schema)?,
                entries: StateTable::new(ZSET_INDEX_TABLE),
                key: Vec::new(),
            };
            let mut rows: Vec<(Vec<u8>, i64)> = self
                .rows
                .iter_resident()
                .into_iter()
                .map(|(r, c)| (r.to_vec(), count_of(c)))
                .collect();
            self.rows
                .visit_spilled(&mut |r, c| rows.push((r.to_vec(), count_of(c))))?;
            let parser = self.conv.parser();
            for chunk in rows.chunks(crate::state::rows::BATCH_ROWS) {
                let cols = self
                    .conv
                    .convert_rows(chunk.iter().map(|(r, _)| parser.parse(r)))?;
                let batch = RecordBatch::try_new(self.schema.clone(), cols)?;
                let values = z.ix.encode(&batch)?;
                for (i, (row, count)) in chunk.iter().enumerate() {
                    if values.holds(i) {
                        z.add(values.values(i), row, *count);
                    }
                }
            }
            self.indexes.push(z);
        }
        Ok(())
    }

    /// The rows whose leading indexed columns of index `oid` equal a row of `probe` (one
    /// array per leading column, of the columns' types); None without such an index.
    pub fn index_lookup(&self, oid: u32, probe: &[ArrayRef]) -> Result<Option<RecordBatch>> {
        let Some(z) = self.indexes.iter().find(|i| i.ix.spec.oid == oid) else {
            return Ok(None);
        };
        let mut prefixes = z.ix.probe_prefixes(probe)?;
        prefixes.sort();
        prefixes.dedup();
        let mut b = RowBatcher::new();
        let mut out = Vec::new();
        for p in &prefixes {
            for (k, v) in z.entries.prefix_resident(p) {
                let len = v
                    .get(8..12)
                    .and_then(|l| l.try_into().ok())
                    .map(u32::from_le_bytes)
                    .ok_or_else(|| WeirError::internal("corrupt index entry"))?;
                let row = k
                    .get(z.ix.prefix.len() + len as usize..)
                    .ok_or_else(|| WeirError::internal("corrupt index entry"))?;
                b.push(row, entry_count(v));
                while b.full() {
                    out.extend(b.take(&self.conv, &self.schema)?);
                }
            }
        }
        out.extend(b.take(&self.conv, &self.schema)?);
        Ok(Some(datafusion::arrow::compute::concat_batches(
            &self.schema,
            &out,
        )?))
    }

    /// The state table holding the rows (for checkpoints, recovery and spilling).
    pub fn state_table(&mut self) -> &mut StateTable {
        &mut self.rows
    }

    /// After the state table was loaded: recompute the totals from it (the entries in
    /// memory and those that spilled while it loaded).
    pub fn recount(&mut self) -> Result<()> {
        let mut total = 0i64;
        let mut negative = 0usize;
        let mut count = |v: &[u8]| {
            let c = count_of(v);
            total += c.max(0);
            negative += usize::from(c < 0);
        };
        for (_, v) in self.rows.iter_resident() {
            count(v);
        }
        self.rows.visit_spilled(&mut |_, v| count(v))?;
        self.total = total;
        self.negative = negative;
        Ok(())
    }

    pub fn apply(&mut self, cl: &Changelog) -> Result<()> {
        if cl.is_empty() {
            return Ok(());
        }
        let rows = self.conv.convert_columns(cl.data.columns())?;
        let weights = cl.weights.values();
        // consolidate within the batch first: fewer map operations for -x/+x pairs; a
        // batch of inserts only (or retractions only) has none, and is applied row by row
        let one_sign = weights.iter().all(|w| *w > 0) || weights.iter().all(|w| *w < 0);
        let deltas: Vec<(&[u8], (i64, usize))> = match one_sign {
            true => (0..rows.num_rows())
                .map(|i| (rows.row(i).data(), (weights[i], i)))
                .collect(),
            false => {
                let mut deltas: FastMap<&[u8], (i64, usize)> =
                    FastMap::with_capacity_and_hasher(rows.num_rows(), Default::default());
                for (i, w) in weights.iter().enumerate() {
                    deltas.entry(rows.row(i).data()).or_insert((0, i)).0 += *w;
                }
                deltas.into_iter().collect()
            }
        };
        for z in self.indexes.iter_mut() {
            let values = z.ix.encode(&cl.data)?;
            for (row, (d, i)) in deltas.iter() {
                if *d != 0 && values.holds(*i) {
                    z.add(values.values(*i), row, *d);
                }
            }
        }
        for (row, (d, _)) in deltas {
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

    /// The rows held in memory as batches, each repeated by its multiplicity (all of them
    /// unless the contents spilled).
    pub fn resident_batches(&self) -> Result<Vec<RecordBatch>> {
        let mut b = RowBatcher::new();
        let mut out = Vec::new();
        for (row, count) in self.rows.iter_resident() {
            b.push(row, count_of(count));
            while b.full() {
                out.extend(b.take(&self.conv, &self.schema)?);
            }
        }
        out.extend(b.take(&self.conv, &self.schema)?);
        Ok(out)
    }

    /// The distinct rows held in memory with their multiplicities as weights (a Z-set
    /// that never spills: an epoch's changes consolidated).
    pub fn to_changelogs(&self) -> Result<Vec<Changelog>> {
        let parser = self.conv.parser();
        let entries: Vec<(&[u8], &[u8])> = self.rows.iter_resident();
        let mut out = Vec::new();
        for chunk in entries.chunks(crate::state::rows::BATCH_ROWS) {
            let cols = self
                .conv
                .convert_rows(chunk.iter().map(|(r, _)| parser.parse(r)))?;
            let batch = RecordBatch::try_new(self.schema.clone(), cols)?;
            let weights = Int64Array::from_iter_values(chunk.iter().map(|(_, c)| count_of(c)));
            out.push(Changelog::new(batch, weights));
        }
        Ok(out)
    }

    /// Whether some rows are spilled (not in memory).
    pub fn spilled(&self) -> bool {
        self.rows.spilled_prefix().is_some()
    }

    /// A read of the contents as they are now, for a reader on another thread: the rows in
    /// memory as batches (`resident`: built by the caller, or cached by it when nothing
    /// spilled), and a read view of the spill store for the rest. Take it with the Z-set
    /// still (under the lock that guards it): later changes, evictions and reads-back change
    /// neither half.
    pub fn read(&self, name: &str, resident: Arc<Vec<RecordBatch>>) -> Result<ZSetRead> {
        let spilled = match (self.rows.spilled_prefix(), crate::state::spill::store()) {
            (Some(prefix), Some(store)) => Some((Arc::from(store.read_view()), prefix)),
            _ => None,
        };
        Ok(ZSetRead {
            name: name.to_owned(),
            schema: self.schema.clone(),
            resident,
            spilled,
            rows: self.len() as u64,
        })
    }
}

/// A read of a Z-set at one moment (see [`ZSet::read`]): streamed a batch at a time, the
/// rows in memory first, then the spilled ones from the spill store's read view.
pub struct ZSetRead {
    name: String,
    schema: SchemaRef,
    resident: Arc<Vec<RecordBatch>>,
    /// The spill store as of the read, and the prefix of the Z-set's entries in it.
    spilled: Option<(Arc<dyn ReadView>, Vec<u8>)>,
    rows: u64,
}

impl ZSetRead {
    /// An empty read (a view with no rows, or a failed one's stand-in).
    pub fn empty(name: &str, schema: SchemaRef) -> ZSetRead {
        ZSetRead {
            name: name.to_owned(),
            schema,
            resident: Arc::new(Vec::new()),
            spilled: None,
            rows: 0,
        }
    }

    /// All rows in one list of batches (callers that need them whole: a sink reconciling
    /// its topic).
    pub fn collect(self: &Arc<Self>) -> Result<Vec<RecordBatch>> {
        self.clone().batches().collect()
    }
}

impl BatchSource for ZSetRead {
    fn name(&self) -> &str {
        &self.name
    }

    fn rows(&self) -> u64 {
        self.rows
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn batches(self: Arc<Self>) -> Box<dyn Iterator<Item = Result<RecordBatch>> + Send> {
        let resident: Vec<RecordBatch> = self.resident.iter().cloned().collect();
        let spilled = self.spilled.as_ref().map(|(view, prefix)| SpilledRows {
            cursor: view.cursor(prefix),
            prefix_len: prefix.len(),
            conv: row_converter(&self.schema),
            schema: self.schema.clone(),
            rows: RowBatcher::new(),
            done: false,
        });
        Box::new(
            resident
                .into_iter()
                .map(Ok)
                .chain(spilled.into_iter().flatten()),
        )
    }
}

/// The spilled rows of a Z-set read, a batch at a time.
struct SpilledRows {
    cursor: Box<dyn Cursor>,
    prefix_len: usize,
    conv: Result<RowConverter>,
    schema: SchemaRef,
    rows: RowBatcher,
    done: bool,
}

impl Iterator for SpilledRows {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        let conv = match &self.conv {
            Ok(c) => c,
            Err(e) => {
                if self.done {
                    return None;
                }
                self.done = true;
                return Some(Err(e.clone()));
            }
        };
        while !self.done && !self.rows.full() {
            let (rows, n) = (&mut self.rows, self.prefix_len);
            match self.cursor.next(&mut |k, v| {
                rows.push(&k[n..], count_of(v));
                Ok(())
            }) {
                Ok(more) => self.done = !more,
                Err(e) => {
                    self.done = true;
                    self.rows = RowBatcher::new();
                    return Some(Err(e));
                }
            }
        }
        self.rows.take(conv, &self.schema).transpose()
    }
}

fn row_converter(schema: &SchemaRef) -> Result<RowConverter> {
    Ok(RowConverter::new(
        schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
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
        assert_eq!(rows_of(&z.resident_batches().unwrap()), vec!["1 a", "3 c"]);
        assert_eq!(z.len(), 2);
        assert_eq!(z.distinct_rows(), 2);
        z.apply(&changelog("k:i64 v:str", "- 1 a / - 3 c")).unwrap();
        assert!(z.is_empty());
        assert_eq!(z.distinct_rows(), 0);
    }
}
