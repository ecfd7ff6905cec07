//! Durable tables.
//!
//! A table's contents live in memory, indexed for the checks Postgres semantics need, and
//! every acknowledged change is first written to the store as a changelog batch (Arrow IPC,
//! fsynced) under `T{oid}L{seq}`. Restart replays the newest snapshot (`T{oid}S{seq}{chunk}`)
//! and the log after it; every [`COMPACT_AFTER_ENTRIES`] log entries the live contents are
//! written as a new snapshot and the older log is deleted, in one atomic store batch.
//!
//! Three layouts, by table kind:
//! - keyed (PRIMARY KEY): key row -> full row, ordered by key; duplicate keys are refused
//!   (23505) before anything is written, so a failing statement changes nothing;
//! - multiset (no key, UPDATE/DELETE allowed): full row -> multiplicity; DML predicates are
//!   functions of the row, so "delete n copies of this value" is exact;
//! - append-only: a list of batches; only INSERT.
//!
//! Rows are held in `arrow_row` format (compact, comparable, converted back to columns in
//! bulk); that format is never written to disk.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, StringArray};
use datafusion::arrow::compute::{concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::arrow::util::display::array_value_to_string;
use parking_lot::Mutex;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::watermark::WatermarkSpec;
use crate::error::{Result, WeirError, sqlstate};
use crate::sql::types::SqlType;
use crate::state::codec::{decode_batches, encode_batch};
use crate::state::store::{Durability, Store, WriteBatch, delete_prefixes, keys_with_prefix};

/// Write a snapshot and drop the log once this many log entries accumulated.
pub const COMPACT_AFTER_ENTRIES: u64 = 512;
/// Rows per batch handed to queries.
const SNAPSHOT_BATCH_ROWS: usize = 8192;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKind {
    Keyed { pk: Vec<usize> },
    Multiset,
    AppendOnly,
}

/// What a DML statement asks of a table. Row batches have the table's schema.
pub enum Change {
    Insert(Vec<RecordBatch>),
    Delete(Vec<RecordBatch>),
    /// `old[i]` becomes `new[i]`.
    Update {
        old: Vec<RecordBatch>,
        new: Vec<RecordBatch>,
    },
    /// Undo an earlier change (ROLLBACK): its changelog with weights negated.
    Revert(Changelog),
    /// Keyed tables fed by a changelog topic: a sequence of "set this key's row" and
    /// "delete this key" operations, applied in order (the last one for a key wins).
    /// `upserts` has the table's columns (any nullability; NOT NULL is checked on the rows
    /// that take effect); `deletes` has the primary-key columns, in key order; `order`
    /// lists the operations as (is_delete, row index in its batch).
    Upsert {
        upserts: RecordBatch,
        deletes: RecordBatch,
        order: Vec<(bool, u32)>,
    },
}

/// Receives every change a table applies, in commit order, while the table is still locked
/// (the dataflow runtime, for the views that read the table). Called from a blocking
/// context.
pub trait ChangeSink: Send + Sync {
    /// `watermark_before`/`after`: the table's event-time watermark (µs) in force when the
    /// change arrived and after it, for tables that declare one. `seq`: the change's
    /// log sequence number (what a checkpoint records as the table's position).
    fn send(
        &self,
        relation: u32,
        changelog: &Changelog,
        watermark_before: Option<i64>,
        watermark_after: Option<i64>,
        seq: u64,
    );
}

/// The outcome of a DML statement.
pub struct Applied {
    /// Rows the statement touched, as Postgres counts them for the command tag.
    pub rows: usize,
    /// The change in Z-set form (retractions first), for views.
    pub changelog: Changelog,
}

enum RowsMap {
    Keyed(BTreeMap<Box<[u8]>, Box<[u8]>>),
    Multiset(BTreeMap<Box<[u8]>, i64>),
    Append(Vec<RecordBatch>),
}

struct Inner {
    rows: RowsMap,
    /// Largest event time seen minus the declared delay (tables with a WATERMARK).
    watermark: Option<i64>,
    /// Last log sequence number used.
    seq: u64,
    log_entries: u64,
    cached: Option<Arc<Vec<RecordBatch>>>,
}

pub struct TableStore {
    pub oid: u32,
    pub name: String,
    schema: SchemaRef,
    kind: TableKind,
    column_types: Vec<SqlType>,
    row_conv: RowConverter,
    key_conv: Option<RowConverter>,
    store: Arc<dyn Store>,
    inner: Mutex<Inner>,
    /// Held by a DML statement from reading the rows it changes until it applied the change,
    /// so concurrent statements on one table are serialized (no lost updates).
    pub writer: tokio::sync::Mutex<()>,
    sink: parking_lot::RwLock<Option<Arc<dyn ChangeSink>>>,
    /// (event-time column, delay in µs) of a table with a WATERMARK.
    watermark_spec: Option<(usize, i64)>,
}

fn log_prefix(oid: u32) -> Vec<u8> {
    let mut k = table_prefix(oid);
    k.push(b'L');
    k
}

fn offsets_prefix(oid: u32) -> Vec<u8> {
    let mut k = table_prefix(oid);
    k.push(b'O');
    k
}

/// The store key of a connector table's next offset to read in one partition; written in
/// the same commit as the changes read before it.
pub fn offset_key(oid: u32, partition: i32) -> Vec<u8> {
    let mut k = offsets_prefix(oid);
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

fn snapshot_prefix(oid: u32) -> Vec<u8> {
    let mut k = table_prefix(oid);
    k.push(b'S');
    k
}

/// All keys of one table's data start with this.
/// Where a checkpoint records the last log sequence number of a table that the
/// checkpointed views have consumed: log entries after it are kept through compaction
/// (recovery replays them into the restored views). Under the checkpoint namespace `K`.
pub fn retention_key(oid: u32) -> Vec<u8> {
    let mut k = b"Kr".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

pub fn table_prefix(oid: u32) -> Vec<u8> {
    let mut k = b"T".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

impl TableStore {
    /// Open a table, replaying what the store holds for it.
    pub fn open(
        oid: u32,
        name: &str,
        schema: SchemaRef,
        column_types: Vec<SqlType>,
        kind: TableKind,
        store: Arc<dyn Store>,
        watermark_spec: Option<(usize, i64)>,
    ) -> Result<TableStore> {
        let sort_fields: Vec<SortField> = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let row_conv = RowConverter::new(sort_fields.clone())?;
        let key_conv = match &kind {
            TableKind::Keyed { pk } => Some(RowConverter::new(
                pk.iter().map(|&i| sort_fields[i].clone()).collect(),
            )?),
            _ => None,
        };
        let rows = match &kind {
            TableKind::Keyed { .. } => RowsMap::Keyed(BTreeMap::new()),
            TableKind::Multiset => RowsMap::Multiset(BTreeMap::new()),
            TableKind::AppendOnly => RowsMap::Append(Vec::new()),
        };
        let table = TableStore {
            oid,
            name: name.to_owned(),
            schema,
            kind,
            column_types,
            row_conv,
            key_conv,
            store,
            inner: Mutex::new(Inner {
                rows,
                watermark: None,
                seq: 0,
                log_entries: 0,
                cached: None,
            }),
            writer: tokio::sync::Mutex::new(()),
            sink: parking_lot::RwLock::new(None),
            watermark_spec,
        };
        table.replay()?;
        Ok(table)
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Start or stop forwarding applied changes.
    pub fn set_sink(&self, sink: Option<Arc<dyn ChangeSink>>) {
        *self.sink.write() = sink;
    }

    pub fn kind(&self) -> &TableKind {
        &self.kind
    }

    fn replay(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        let mut snapshot_seq = 0u64;
        let mut chunks: Vec<(u64, Vec<u8>)> = Vec::new();
        let sp = snapshot_prefix(self.oid);
        self.store.scan_prefix(&sp, &mut |k, v| {
            let seq = read_seq(&k[sp.len()..])?;
            chunks.push((seq, v.to_vec()));
            Ok(())
        })?;
        if let Some(max) = chunks.iter().map(|(s, _)| *s).max() {
            snapshot_seq = max;
            for (seq, bytes) in &chunks {
                if *seq == max {
                    for b in decode_batches(bytes)? {
                        let cl = Changelog::from_batch(&b, &self.schema)?;
                        self.apply_to_map(&mut inner.rows, &cl)?;
                    }
                }
            }
        }
        inner.seq = snapshot_seq;
        let lp = log_prefix(self.oid);
        let mut entries = 0;
        let mut logs: Vec<(u64, Vec<u8>)> = Vec::new();
        self.store.scan_prefix(&lp, &mut |k, v| {
            let seq = read_seq(&k[lp.len()..])?;
            if seq > snapshot_seq {
                logs.push((seq, v.to_vec()));
            }
            Ok(())
        })?;
        for (seq, bytes) in logs {
            for b in decode_batches(&bytes)? {
                let cl = Changelog::from_batch(&b, &self.schema)?;
                self.apply_to_map(&mut inner.rows, &cl)?;
            }
            inner.seq = inner.seq.max(seq);
            entries += 1;
        }
        inner.log_entries = entries;
        if let RowsMap::Append(batches) = &inner.rows {
            let mut wm = None;
            for b in batches {
                wm = self.advance(wm, b);
            }
            inner.watermark = wm;
        }
        Ok(())
    }

    /// The watermark after rows `batch` arrived, from `current`.
    fn advance(&self, current: Option<i64>, batch: &RecordBatch) -> Option<i64> {
        match self.watermark_spec {
            Some(spec) => WatermarkSpec::new(spec).after_batch(current, batch),
            None => current,
        }
    }

    /// (event-time column, delay µs), for tables that declare a watermark.
    pub fn watermark_spec(&self) -> Option<(usize, i64)> {
        self.watermark_spec
    }

    /// The last log sequence number used (the table's position in its change log).
    pub fn seq(&self) -> u64 {
        self.inner.lock().seq
    }

    /// Keep the log after `seq` through compaction until a checkpoint says otherwise (a
    /// view starting to read the table at `seq`, before its first checkpoint lands). Only
    /// lowers a retention already recorded, never raises it.
    pub fn hold_log_after(&self, seq: u64) -> Result<()> {
        let key = retention_key(self.oid);
        if let Some(v) = self.store.get(&key)?
            && read_seq(&v)? <= seq
        {
            return Ok(());
        }
        let mut wb = WriteBatch::default();
        wb.put(key, seq.to_be_bytes().to_vec());
        self.store.commit(wb, Durability::Sync)
    }

    /// The changes logged after sequence number `after`, in order (recovery replays them
    /// into views restored from a checkpoint at `after`). None when some of them are no
    /// longer in the log (compacted away): those views must be rebuilt instead. Call with
    /// the writer lock held, so nothing is appended meanwhile.
    pub fn log_after(&self, after: u64) -> Result<Option<Vec<(u64, Changelog)>>> {
        let last = self.inner.lock().seq;
        if after >= last {
            return Ok(Some(Vec::new()));
        }
        let lp = log_prefix(self.oid);
        let mut out = Vec::new();
        let mut expect = after + 1;
        let mut gap = false;
        self.store.scan_prefix(&lp, &mut |k, v| {
            let seq = read_seq(&k[lp.len()..])?;
            if seq <= after || gap {
                return Ok(());
            }
            if seq != expect {
                gap = true;
                return Ok(());
            }
            for b in decode_batches(v)? {
                out.push((seq, Changelog::from_batch(&b, &self.schema)?));
            }
            expect += 1;
            Ok(())
        })?;
        Ok((!gap && expect == last + 1).then_some(out))
    }

    /// The event-time watermark, for tables that declare one.
    pub fn watermark(&self) -> Option<i64> {
        self.inner.lock().watermark
    }

    /// The current contents, as batches of the table's schema.
    pub fn snapshot(&self) -> Result<Arc<Vec<RecordBatch>>> {
        let mut inner = self.inner.lock();
        if let Some(c) = &inner.cached {
            return Ok(c.clone());
        }
        let batches = Arc::new(self.build_snapshot(&inner.rows)?);
        inner.cached = Some(batches.clone());
        Ok(batches)
    }

    /// Drop the cached snapshot (rebuilt by the next full read); the bytes it held.
    pub fn drop_cache(&self) -> usize {
        self.inner
            .lock()
            .cached
            .take()
            .map_or(0, |b| batches_bytes(&b))
    }

    /// The primary key's columns (keyed tables).
    pub fn primary_key(&self) -> Option<&[usize]> {
        match &self.kind {
            TableKind::Keyed { pk } => Some(pk),
            _ => None,
        }
    }

    /// The rows of a keyed table with these primary keys (`keys`: one array per key
    /// column, in key order, of the columns' types): one lookup per key, not a scan. None
    /// when the table has no primary key.
    pub fn lookup(&self, keys: &[ArrayRef]) -> Result<Option<RecordBatch>> {
        let Some(kc) = &self.key_conv else {
            return Ok(None);
        };
        let encoded = kc.convert_columns(keys)?;
        let inner = self.inner.lock();
        let RowsMap::Keyed(map) = &inner.rows else {
            return Ok(None);
        };
        let found: Vec<&[u8]> = (0..encoded.num_rows())
            .filter_map(|i| map.get(encoded.row(i).data()).map(|v| v.as_ref()))
            .collect();
        let parser = self.row_conv.parser();
        let cols = self
            .row_conv
            .convert_rows(found.iter().map(|v| parser.parse(v)))?;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), cols)?))
    }

    pub fn row_count(&self) -> usize {
        let inner = self.inner.lock();
        match &inner.rows {
            RowsMap::Keyed(m) => m.len(),
            RowsMap::Multiset(m) => m.values().map(|c| *c as usize).sum(),
            RowsMap::Append(b) => b.iter().map(|b| b.num_rows()).sum(),
        }
    }

    fn build_snapshot(&self, rows: &RowsMap) -> Result<Vec<RecordBatch>> {
        let parser = self.row_conv.parser();
        let mut out = Vec::new();
        match rows {
            RowsMap::Append(batches) => out.extend(batches.iter().cloned()),
            RowsMap::Keyed(m) => {
                let values: Vec<&[u8]> = m.values().map(|v| v.as_ref()).collect();
                for chunk in values.chunks(SNAPSHOT_BATCH_ROWS) {
                    let cols = self
                        .row_conv
                        .convert_rows(chunk.iter().map(|v| parser.parse(v)))?;
                    out.push(RecordBatch::try_new(self.schema.clone(), cols)?);
                }
            }
            RowsMap::Multiset(m) => {
                let mut values: Vec<&[u8]> = Vec::new();
                for (row, count) in m {
                    for _ in 0..*count {
                        values.push(row.as_ref());
                    }
                }
                for chunk in values.chunks(SNAPSHOT_BATCH_ROWS) {
                    let cols = self
                        .row_conv
                        .convert_rows(chunk.iter().map(|v| parser.parse(v)))?;
                    out.push(RecordBatch::try_new(self.schema.clone(), cols)?);
                }
            }
        }
        Ok(out)
    }

    /// Apply a DML change: validate, write it durably, then make it visible. Blocking (it
    /// waits for the fsync); call from a blocking context.
    pub fn apply(&self, change: Change) -> Result<Applied> {
        self.apply_with(change, Vec::new())
    }

    /// Bytes the table's rows take in memory (keys and values, or the batches of an
    /// append-only table), for `weir_memory`.
    pub fn memory_bytes(&self) -> usize {
        // per entry: the key's and value's boxes (two pointers and lengths) plus the
        // B-tree's share of a node, or the box and the count
        const KEYED_ENTRY: usize = 48;
        const MULTISET_ENTRY: usize = 56;
        let inner = self.inner.lock();
        let cached = inner.cached.as_deref().map_or(0, |b| batches_bytes(b));
        let rows: usize = match &inner.rows {
            RowsMap::Keyed(m) => m.iter().map(|(k, v)| k.len() + v.len() + KEYED_ENTRY).sum(),
            RowsMap::Multiset(m) => m.keys().map(|k| k.len() + MULTISET_ENTRY).sum(),
            RowsMap::Append(b) => batches_bytes(b),
        };
        cached + rows
    }

    /// The connector tables' next offsets per partition, as last committed.
    pub fn offsets(&self) -> Result<BTreeMap<i32, i64>> {
        let prefix = offsets_prefix(self.oid);
        let mut out = BTreeMap::new();
        self.store.scan_prefix(&prefix, &mut |k, v| {
            let p: [u8; 4] = k[prefix.len()..]
                .try_into()
                .map_err(|_| WeirError::internal("corrupt offset key"))?;
            let o: [u8; 8] = v
                .try_into()
                .map_err(|_| WeirError::internal("corrupt offset value"))?;
            out.insert(i32::from_be_bytes(p), i64::from_be_bytes(o));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`apply`](Self::apply), writing `extra` (e.g. connector offsets, see
    /// [`offset_key`]) in the same atomic commit, even when the change turns out empty.
    pub fn apply_with(&self, change: Change, extra: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Applied> {
        let mut inner = self.inner.lock();
        let (rows, changelog) = self.prepare(&inner.rows, change)?;
        let mut wb = WriteBatch::default();
        for (k, v) in extra {
            wb.put(k, v);
        }
        if changelog.is_empty() {
            if !wb.is_empty() {
                self.store.commit(wb, Durability::Sync)?;
            }
            return Ok(Applied { rows, changelog });
        }
        let seq = inner.seq + 1;
        let mut key = log_prefix(self.oid);
        key.extend_from_slice(&seq.to_be_bytes());
        wb.put(key, encode_batch(&changelog.to_batch()?)?);
        self.store.commit(wb, Durability::Sync)?;
        inner.seq = seq;
        inner.log_entries += 1;
        self.apply_to_map(&mut inner.rows, &changelog)?;
        inner.cached = None;
        let before = inner.watermark;
        if self.kind == TableKind::AppendOnly {
            inner.watermark = self.advance(before, &changelog.data);
        }
        if let Some(sink) = self.sink.read().as_ref() {
            sink.send(self.oid, &changelog, before, inner.watermark, seq);
        }
        if inner.log_entries >= COMPACT_AFTER_ENTRIES {
            self.compact(&mut inner)?;
        }
        Ok(Applied { rows, changelog })
    }

    /// Write the live contents as a snapshot and drop the log, atomically; entries a
    /// checkpoint of the views reading the table still needs (see [`retention_key`]) stay.
    fn compact(&self, inner: &mut Inner) -> Result<()> {
        let mut wb = WriteBatch::default();
        let keep_after = match self.sink.read().is_some() {
            true => match self.store.get(&retention_key(self.oid))? {
                Some(v) => read_seq(&v)?,
                None => u64::MAX,
            },
            // no view reads the table: no checkpoint needs its log
            false => u64::MAX,
        };
        let lp = log_prefix(self.oid);
        for k in keys_with_prefix(self.store.as_ref(), &lp)? {
            if read_seq(&k[lp.len()..])? <= keep_after {
                wb.delete(k);
            }
        }
        delete_prefixes(self.store.as_ref(), &[snapshot_prefix(self.oid)], &mut wb)?;
        let seq = inner.seq;
        let snapshot: Vec<Changelog> = match &inner.rows {
            RowsMap::Multiset(m) => {
                // one row per distinct value, weighted by its multiplicity
                let parser = self.row_conv.parser();
                let entries: Vec<(&Box<[u8]>, &i64)> = m.iter().collect();
                let mut out = Vec::new();
                for chunk in entries.chunks(SNAPSHOT_BATCH_ROWS) {
                    let cols = self
                        .row_conv
                        .convert_rows(chunk.iter().map(|(r, _)| parser.parse(r)))?;
                    let weights = Int64Array::from_iter_values(chunk.iter().map(|(_, c)| **c));
                    out.push(Changelog::new(
                        RecordBatch::try_new(self.schema.clone(), cols)?,
                        weights,
                    ));
                }
                out
            }
            other => self
                .build_snapshot(other)?
                .into_iter()
                .map(Changelog::inserts)
                .collect(),
        };
        for (i, cl) in snapshot.iter().enumerate() {
            let mut key = snapshot_prefix(self.oid);
            key.extend_from_slice(&seq.to_be_bytes());
            key.extend_from_slice(&(i as u32).to_be_bytes());
            wb.put(key, encode_batch(&cl.to_batch()?)?);
        }
        self.store.commit(wb, Durability::Sync)?;
        inner.log_entries = 0;
        Ok(())
    }

    /// Store keys to delete when the table is dropped.
    pub fn data_keys(store: &dyn Store, oid: u32) -> Result<Vec<Vec<u8>>> {
        keys_with_prefix(store, &table_prefix(oid))
    }

    /// Check a change against the current contents and build its changelog.
    fn prepare(&self, rows: &RowsMap, change: Change) -> Result<(usize, Changelog)> {
        match change {
            Change::Upsert {
                upserts,
                deletes,
                order,
            } => self.prepare_upsert(rows, upserts, deletes, &order),
            Change::Revert(cl) => {
                if self.kind == TableKind::AppendOnly {
                    return Err(WeirError::not_supported(format!(
                        "cannot roll back rows inserted into APPEND ONLY table \"{}\"",
                        self.name
                    )));
                }
                // negate, retractions first (the original inserts), then the re-inserts
                let negated: Vec<i64> = cl.weights.values().iter().map(|w| -w).collect();
                let retract_mask: BooleanArray = negated.iter().map(|w| Some(*w < 0)).collect();
                let insert_mask: BooleanArray = negated.iter().map(|w| Some(*w > 0)).collect();
                let retract = filter_record_batch(&cl.data, &retract_mask)?;
                let insert = filter_record_batch(&cl.data, &insert_mask)?;
                if let (RowsMap::Keyed(map), Some(kc)) = (rows, &self.key_conv) {
                    let old_keys = kc.convert_columns(&self.key_columns(&retract))?;
                    for k in old_keys.iter() {
                        if !map.contains_key(k.data()) {
                            return Err(concurrent_change(&self.name));
                        }
                    }
                    let freed: HashSet<&[u8]> = old_keys.iter().map(|r| r.data()).collect();
                    let new_keys = kc.convert_columns(&self.key_columns(&insert))?;
                    self.check_unique(map, &new_keys, &freed, &insert)
                        .map_err(|_| concurrent_change(&self.name))?;
                }
                let n = cl.len();
                let changelog = Changelog::concat(
                    &self.schema,
                    &[Changelog::retractions(retract), Changelog::inserts(insert)],
                )?;
                Ok((n, changelog))
            }
            Change::Insert(batches) => {
                let batch = self.conform(batches)?;
                let batch = self.check_constraints(batch)?;
                if let (RowsMap::Keyed(map), Some(kc)) = (rows, &self.key_conv) {
                    let keys = kc.convert_columns(&self.key_columns(&batch))?;
                    self.check_unique(map, &keys, &HashSet::new(), &batch)?;
                }
                Ok((batch.num_rows(), Changelog::inserts(batch)))
            }
            Change::Delete(batches) => {
                self.refuse_append_only("DELETE")?;
                let batch = self.conform(batches)?;
                let batch = self.dedup_by_key(batch)?;
                let n = batch.num_rows();
                Ok((n, Changelog::retractions(batch)))
            }
            Change::Update { old, new } => {
                self.refuse_append_only("UPDATE")?;
                let old = self.conform(old)?;
                let new = self.conform(new)?;
                if old.num_rows() != new.num_rows() {
                    return Err(WeirError::internal(
                        "UPDATE produced unaligned old/new rows",
                    ));
                }
                // keep the first update of each old row (an UPDATE ... FROM may match twice)
                let (old, new) = match &self.key_conv {
                    Some(kc) => {
                        let keys = kc.convert_columns(&self.key_columns(&old))?;
                        let mask = first_occurrences(&keys);
                        (
                            filter_record_batch(&old, &mask)?,
                            filter_record_batch(&new, &mask)?,
                        )
                    }
                    None => (old, new),
                };
                let new = self.check_constraints(new)?;
                if let (RowsMap::Keyed(map), Some(kc)) = (rows, &self.key_conv) {
                    let old_keys = kc.convert_columns(&self.key_columns(&old))?;
                    let freed: HashSet<&[u8]> = old_keys.iter().map(|r| r.data()).collect();
                    let new_keys = kc.convert_columns(&self.key_columns(&new))?;
                    self.check_unique(map, &new_keys, &freed, &new)?;
                }
                let n = old.num_rows();
                let cl = Changelog::concat(
                    &self.schema,
                    &[Changelog::retractions(old), Changelog::inserts(new)],
                )?;
                Ok((n, cl))
            }
        }
    }

    /// The changelog of a sequence of upserts and deletes by key: for every key whose final
    /// state differs from its current row, the current row retracted and the new one
    /// inserted.
    fn prepare_upsert(
        &self,
        rows: &RowsMap,
        upserts: RecordBatch,
        deletes: RecordBatch,
        order: &[(bool, u32)],
    ) -> Result<(usize, Changelog)> {
        let (RowsMap::Keyed(map), Some(kc)) = (rows, &self.key_conv) else {
            return Err(WeirError::internal("upserts need a keyed table"));
        };
        let up_keys = kc.convert_columns(&self.key_columns(&upserts))?;
        let del_keys = kc.convert_columns(deletes.columns())?;
        // the last operation per key
        let mut last: HashMap<&[u8], (bool, u32)> = HashMap::with_capacity(order.len());
        for &(is_delete, i) in order {
            let n = if is_delete {
                del_keys.num_rows()
            } else {
                up_keys.num_rows()
            };
            if i as usize >= n {
                return Err(WeirError::internal("upsert operation out of range"));
            }
            let k = if is_delete {
                del_keys.row(i as usize)
            } else {
                up_keys.row(i as usize)
            };
            last.insert(k.data(), (is_delete, i));
        }
        let mut keep: Vec<u32> = last.values().filter(|(d, _)| !d).map(|(_, i)| *i).collect();
        keep.sort_unstable();
        let idx = datafusion::arrow::array::UInt32Array::from(keep);
        let new_cols: Vec<ArrayRef> = upserts
            .columns()
            .iter()
            .map(|c| datafusion::arrow::compute::take(c, &idx, None))
            .collect::<std::result::Result<_, _>>()?;
        let new_batch = RecordBatch::try_new(upserts.schema(), new_cols)?;
        let new_batch = self.conform(vec![new_batch])?;
        let new_batch = self.check_constraints(new_batch)?;
        let new_rows = self.row_conv.convert_columns(new_batch.columns())?;
        let new_keys = kc.convert_columns(&self.key_columns(&new_batch))?;
        // retract current rows of touched keys, unless the new row is the same
        let mut unchanged = vec![false; new_batch.num_rows()];
        let mut same_keys: HashSet<&[u8]> = HashSet::new();
        for (i, k) in new_keys.iter().enumerate() {
            if map.get(k.data()).map(|r| r.as_ref()) == Some(new_rows.row(i).data()) {
                unchanged[i] = true;
                same_keys.insert(k.data());
            }
        }
        let mut old: Vec<&[u8]> = Vec::new();
        for k in last.keys() {
            if !same_keys.contains(k)
                && let Some(r) = map.get(*k)
            {
                old.push(r.as_ref());
            }
        }
        let parser = self.row_conv.parser();
        let old_cols = self
            .row_conv
            .convert_rows(old.iter().map(|r| parser.parse(r)))?;
        let old_batch = RecordBatch::try_new(self.schema.clone(), old_cols)?;
        let mask: BooleanArray = unchanged.iter().map(|u| Some(!u)).collect();
        let new_batch = filter_record_batch(&new_batch, &mask)?;
        let cl = Changelog::concat(
            &self.schema,
            &[
                Changelog::retractions(old_batch),
                Changelog::inserts(new_batch),
            ],
        )?;
        Ok((order.len(), cl))
    }

    fn refuse_append_only(&self, what: &str) -> Result<()> {
        if self.kind == TableKind::AppendOnly {
            return Err(append_only_error(&self.name, what));
        }
        Ok(())
    }

    /// One batch with exactly the table's schema (names, types, metadata).
    fn conform(&self, batches: Vec<RecordBatch>) -> Result<RecordBatch> {
        let mut cols_of_all = Vec::with_capacity(batches.len());
        for b in &batches {
            if b.num_columns() != self.schema.fields().len() {
                return Err(WeirError::internal(format!(
                    "change for \"{}\" has {} columns, table has {}",
                    self.name,
                    b.num_columns(),
                    self.schema.fields().len()
                )));
            }
            for (i, f) in self.schema.fields().iter().enumerate() {
                if b.column(i).data_type() != f.data_type() {
                    return Err(WeirError::internal(format!(
                        "column \"{}\" of \"{}\": got {}, want {}",
                        f.name(),
                        self.name,
                        b.column(i).data_type(),
                        f.data_type()
                    )));
                }
            }
            cols_of_all.push(b.columns().to_vec());
        }
        // check NOT NULL before building the schema-typed batch (which would refuse it)
        for cols in &cols_of_all {
            for (i, f) in self.schema.fields().iter().enumerate() {
                if !f.is_nullable() && cols[i].null_count() > 0 {
                    return Err(WeirError::new(
                        sqlstate::NOT_NULL_VIOLATION,
                        format!(
                            "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                            f.name(),
                            self.name
                        ),
                    ));
                }
            }
        }
        let typed: Vec<RecordBatch> = cols_of_all
            .into_iter()
            .map(|cols| RecordBatch::try_new(self.schema.clone(), cols))
            .collect::<std::result::Result<_, _>>()?;
        Ok(concat_batches(&self.schema, &typed)?)
    }

    /// Declared-type checks arrow types do not express: varchar(n) lengths, and `jsonb`
    /// values (checked and stored in Postgres' canonical form, `sql::jsonb`). Returns the
    /// batch as it is stored.
    fn check_constraints(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let mut batch = batch;
        for (i, t) in self.column_types.iter().enumerate() {
            if *t == SqlType::Jsonb
                && let Some(col) = batch.column(i).as_any().downcast_ref::<StringArray>()
            {
                let mut changed = false;
                let mut out: Vec<Option<String>> = Vec::with_capacity(col.len());
                for v in col.iter() {
                    match v {
                        None => out.push(None),
                        Some(v) => {
                            let n = crate::sql::jsonb::normalize(v)?;
                            changed |= n != v;
                            out.push(Some(n));
                        }
                    }
                }
                if changed {
                    let mut cols = batch.columns().to_vec();
                    cols[i] = Arc::new(StringArray::from(out));
                    batch = RecordBatch::try_new(batch.schema(), cols)?;
                }
            }
        }
        self.check_lengths(&batch)?;
        Ok(batch)
    }

    fn check_lengths(&self, batch: &RecordBatch) -> Result<()> {
        for (i, t) in self.column_types.iter().enumerate() {
            if let SqlType::Varchar(Some(n)) = t {
                let n = *n as usize;
                let Some(col) = batch.column(i).as_any().downcast_ref::<StringArray>() else {
                    continue;
                };
                // byte length bounds char length from above: only long byte strings need counting
                for v in col.iter().flatten() {
                    if v.len() > n && v.chars().count() > n {
                        return Err(WeirError::new(
                            sqlstate::STRING_DATA_RIGHT_TRUNCATION,
                            format!("value too long for type character varying({n})"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn key_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        match &self.kind {
            TableKind::Keyed { pk } => pk.iter().map(|&i| batch.column(i).clone()).collect(),
            _ => batch.columns().to_vec(),
        }
    }

    /// Refuse a new key that exists (and is not being replaced) or repeats in the change.
    fn check_unique(
        &self,
        map: &BTreeMap<Box<[u8]>, Box<[u8]>>,
        keys: &Rows,
        freed: &HashSet<&[u8]>,
        batch: &RecordBatch,
    ) -> Result<()> {
        let mut seen: HashSet<&[u8]> = HashSet::with_capacity(keys.num_rows());
        for (i, k) in keys.iter().enumerate() {
            let k = k.data();
            if !seen.insert(k) || (map.contains_key(k) && !freed.contains(k)) {
                return Err(self.duplicate_key(batch, i));
            }
        }
        Ok(())
    }

    fn duplicate_key(&self, batch: &RecordBatch, row: usize) -> WeirError {
        let TableKind::Keyed { pk } = &self.kind else {
            return WeirError::internal("duplicate key on a table without key");
        };
        let names: Vec<&str> = pk
            .iter()
            .map(|&i| self.schema.field(i).name().as_str())
            .collect();
        let values: Vec<String> = pk
            .iter()
            .map(|&i| array_value_to_string(batch.column(i), row).unwrap_or_default())
            .collect();
        WeirError::new(
            sqlstate::UNIQUE_VIOLATION,
            format!(
                "duplicate key value violates unique constraint \"{}_pkey\"",
                self.name
            ),
        )
        .with_detail(format!(
            "Key ({})=({}) already exists.",
            names.join(", "),
            values.join(", ")
        ))
    }

    /// Rows of a DELETE on a keyed table, once per key.
    fn dedup_by_key(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(kc) = &self.key_conv else {
            return Ok(batch);
        };
        let keys = kc.convert_columns(&self.key_columns(&batch))?;
        let mask = first_occurrences(&keys);
        Ok(filter_record_batch(&batch, &mask)?)
    }

    fn apply_to_map(&self, rows: &mut RowsMap, cl: &Changelog) -> Result<()> {
        let weights = cl.weights.values();
        match rows {
            RowsMap::Append(batches) => {
                if weights.iter().any(|w| *w != 1) {
                    return Err(WeirError::internal(
                        "append-only table received a retraction",
                    ));
                }
                if !cl.is_empty() {
                    batches.push(cl.data.clone());
                }
            }
            RowsMap::Keyed(map) => {
                let kc = self
                    .key_conv
                    .as_ref()
                    .expect("keyed table has a key converter");
                let keys = kc.convert_columns(&self.key_columns(&cl.data))?;
                let full = self.row_conv.convert_columns(cl.data.columns())?;
                for (i, w) in weights.iter().enumerate() {
                    let k = keys.row(i).data();
                    if *w > 0 {
                        map.insert(k.into(), full.row(i).data().into());
                    } else {
                        map.remove(k);
                    }
                }
            }
            RowsMap::Multiset(map) => {
                let full = self.row_conv.convert_columns(cl.data.columns())?;
                let mut deltas: HashMap<&[u8], i64> = HashMap::new();
                for (i, w) in weights.iter().enumerate() {
                    *deltas.entry(full.row(i).data()).or_default() += *w;
                }
                for (row, d) in deltas {
                    if d == 0 {
                        continue;
                    }
                    let entry = map.entry(row.into()).or_insert(0);
                    *entry += d;
                    debug_assert!(*entry >= 0, "multiset count went negative");
                    if *entry <= 0 {
                        map.remove(row);
                    }
                }
            }
        }
        Ok(())
    }
}

fn concurrent_change(table: &str) -> WeirError {
    WeirError::new(
        "40001",
        format!(
            "could not roll back changes to \"{table}\": another session changed the same rows"
        ),
    )
}

pub fn append_only_error(table: &str, what: &str) -> WeirError {
    WeirError::not_supported(format!(
        "cannot {what} on table \"{table}\": it is APPEND ONLY (only INSERT is allowed)"
    ))
}

fn first_occurrences(keys: &Rows) -> BooleanArray {
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(keys.num_rows());
    keys.iter().map(|k| Some(seen.insert(k.data()))).collect()
}

fn read_seq(bytes: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| WeirError::internal("corrupt table key in store"))?;
    Ok(u64::from_be_bytes(arr))
}

/// Bytes of Arrow batches in memory.
fn batches_bytes(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.get_array_memory_size()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fjall_store::FjallStore;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    fn batch(keys: &[i64], vals: &[&str]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(StringArray::from(vals.to_vec())),
            ],
        )
        .unwrap()
    }

    fn open(store: &Arc<dyn Store>, kind: TableKind) -> TableStore {
        TableStore::open(
            20000,
            "t",
            schema(),
            vec![SqlType::Int8, SqlType::Text],
            kind,
            store.clone(),
            None,
        )
        .unwrap()
    }

    fn contents(t: &TableStore) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        for b in t.snapshot().unwrap().iter() {
            let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let v = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                out.push((k.value(i), v.value(i).to_owned()));
            }
        }
        out.sort();
        out
    }

    /// Upserts and deletes by key, in order: the last operation per key wins; the
    /// changelog retracts the current row of each changed key (`- 1 a / + 1 c / - 2 b`),
    /// an unchanged row gives nothing, and offsets commit with the change.
    #[test]
    fn upserts_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let t = open(&store, TableKind::Keyed { pk: vec![0] });
        t.apply(Change::Insert(vec![batch(&[1, 2, 3], &["a", "b", "x"])]))
            .unwrap();
        let deletes = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![2, 1, 9]))],
        )
        .unwrap();
        // upsert 1=b; delete 2; delete 1; upsert 1=c; upsert 3=x (same); upsert 4=d; delete 9
        let up = batch(&[1, 1, 3, 4], &["b", "c", "x", "d"]);
        let order = vec![
            (false, 0),
            (true, 0),
            (true, 1),
            (false, 1),
            (false, 2),
            (false, 3),
            (true, 2),
        ];
        let applied = t
            .apply_with(
                Change::Upsert {
                    upserts: up,
                    deletes,
                    order,
                },
                vec![(offset_key(t.oid, 0), 7i64.to_be_bytes().to_vec())],
            )
            .unwrap();
        assert_eq!(applied.rows, 7);
        let mut changes: Vec<(i64, i64, String)> = Vec::new();
        let cl = &applied.changelog;
        let k = cl
            .data
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let v = cl
            .data
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        for i in 0..cl.len() {
            changes.push((cl.weights.value(i), k.value(i), v.value(i).to_owned()));
        }
        changes.sort();
        assert_eq!(
            changes,
            vec![
                (-1, 1, "a".into()),
                (-1, 2, "b".into()),
                (1, 1, "c".into()),
                (1, 4, "d".into())
            ]
        );
        assert_eq!(
            contents(&t),
            vec![(1, "c".into()), (3, "x".into()), (4, "d".into())]
        );
        assert_eq!(t.offsets().unwrap(), BTreeMap::from([(0, 7)]));
        drop(t);
        let t = open(&store, TableKind::Keyed { pk: vec![0] });
        assert_eq!(contents(&t).len(), 3);
        assert_eq!(t.offsets().unwrap(), BTreeMap::from([(0, 7)]));
    }

    /// A point lookup by primary key reads the keys asked for, nothing else.
    #[test]
    fn lookup_by_primary_key() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let t = open(&store, TableKind::Keyed { pk: vec![0] });
        t.apply(Change::Insert(vec![batch(&[1, 2, 3], &["a", "b", "c"])]))
            .unwrap();
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![3, 9, 1]));
        let found = t.lookup(&[keys]).unwrap().expect("keyed");
        assert_eq!(found.num_rows(), 2, "9 is not a key");
        let names = found
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((names.value(0), names.value(1)), ("c", "a"));
        let plain = open(&store, TableKind::Multiset);
        let keys: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        assert!(plain.lookup(&[keys]).unwrap().is_none());
    }

    /// Past the compaction threshold the log is folded into a snapshot; reopening replays
    /// the snapshot plus the log after it and gets the same contents.
    #[test]
    fn compaction_and_replay_agree() {
        for kind in [TableKind::Keyed { pk: vec![0] }, TableKind::Multiset] {
            let dir = tempfile::tempdir().unwrap();
            let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
            let t = open(&store, kind.clone());
            let n = COMPACT_AFTER_ENTRIES as i64 + 40;
            for i in 0..n {
                t.apply(Change::Insert(vec![batch(&[i], &["a"])])).unwrap();
                if i % 3 == 0 {
                    t.apply(Change::Update {
                        old: vec![batch(&[i], &["a"])],
                        new: vec![batch(&[i], &["b"])],
                    })
                    .unwrap();
                }
                if i % 5 == 0 {
                    let v = if i % 3 == 0 { "b" } else { "a" };
                    t.apply(Change::Delete(vec![batch(&[i], &[v])])).unwrap();
                }
            }
            let before = contents(&t);
            assert_eq!(before.len(), (n - (n + 4) / 5) as usize);
            // the log was compacted at least once
            assert!(t.inner.lock().log_entries < COMPACT_AFTER_ENTRIES);
            drop(t);
            let reopened = open(&store, kind);
            assert_eq!(contents(&reopened), before);
        }
    }

    #[test]
    fn failed_statement_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let t = open(&store, TableKind::Keyed { pk: vec![0] });
        t.apply(Change::Insert(vec![batch(&[1, 2], &["a", "b"])]))
            .unwrap();
        let e = t
            .apply(Change::Insert(vec![batch(&[3, 1], &["c", "d"])]))
            .err()
            .unwrap();
        assert_eq!(e.code, sqlstate::UNIQUE_VIOLATION);
        assert_eq!(e.detail.as_deref(), Some("Key (k)=(1) already exists."));
        assert_eq!(contents(&t), vec![(1, "a".to_owned()), (2, "b".to_owned())]);
    }

    #[test]
    fn revert_undoes_an_update() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let t = open(&store, TableKind::Keyed { pk: vec![0] });
        t.apply(Change::Insert(vec![batch(&[1], &["a"])])).unwrap();
        let applied = t
            .apply(Change::Update {
                old: vec![batch(&[1], &["a"])],
                new: vec![batch(&[2], &["z"])],
            })
            .unwrap();
        assert_eq!(contents(&t), vec![(2, "z".to_owned())]);
        t.apply(Change::Revert(applied.changelog)).unwrap();
        assert_eq!(contents(&t), vec![(1, "a".to_owned())]);
    }
}
