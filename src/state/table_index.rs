//! Secondary indexes of keyed, multiset and append-only tables (`CREATE INDEX`).
//!
//! An index is a second ordering of a table's rows in the store, written in the same commit
//! as every change to the rows, so it is never behind them and a crash cannot split them.
//! Entry keys start with `T{oid}X` ++ the index's OID, then the `arrow_row` encoding of the
//! indexed columns, then what tells rows apart:
//! - keyed tables: ++ primary-key encoding -> the full row (a covering index: a lookup reads
//!   no second key);
//! - multiset tables: ++ full-row encoding -> multiplicity (i64 BE) ++ length of the
//!   indexed columns' encoding (u32 BE), which finds where the row starts in the key.
//! - append-only tables: ++ the row's log position (seq u64 BE ++ row within the entry
//!   u32 BE) -> the full row; written with the log entry (or, for a COPY, in the commit
//!   that publishes it); never changed after. Not UNIQUE.
//!
//! `arrow_row` encodes each column on its own and prefix-free, back to back, so the
//! encoding of the first k indexed columns of a probe is a prefix of the key of every row
//! with those values: a lookup by all indexed columns, or by a leading part of them, is one
//! prefix scan. A marker `T{oid}I` ++ index OID is written before an index is built; a
//! table opened with markers of indexes the catalog no longer lists (a crash in CREATE or
//! DROP INDEX) purges their entries.
//!
//! `UNIQUE`: before a change is written, every row it adds is checked against the rows
//! already under its indexed values (and the change's other rows); rows with a NULL in an
//! indexed column never conflict (Postgres' NULLS DISTINCT).
//!
//! Expression and partial indexes (`CREATE INDEX ON t (lower(email)) WHERE NOT deleted`):
//! their keys and which rows they hold are computed from the table's rows by a
//! [`DerivedKeys`] the catalog plans from the index's SQL (this layer knows no SQL); the
//! entries are the same as a column index's, and a row the predicate does not hold has
//! none. Point queries do not read them (`IndexSpec::columns` is empty).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::arrow::util::display::array_value_to_string;

use crate::error::{Result, WeirError, sqlstate};

/// What the table layer knows of an index.
#[derive(Debug, Clone)]
pub struct IndexSpec {
    pub oid: u32,
    /// For error messages (the unique constraint's name).
    pub name: String,
    /// Indexed columns (positions in the table), in index order; empty when the keys are
    /// derived.
    pub columns: Vec<usize>,
    pub unique: bool,
    /// `UNIQUE NULLS NOT DISTINCT`: rows with NULL indexed values conflict like others.
    pub nulls_not_distinct: bool,
    /// Keys computed from the rows (an expression or partial index), in place of `columns`.
    pub derived: Option<Arc<dyn DerivedKeys>>,
}

impl PartialEq for IndexSpec {
    fn eq(&self, other: &Self) -> bool {
        self.oid == other.oid
            && self.name == other.name
            && self.columns == other.columns
            && self.unique == other.unique
            && self.nulls_not_distinct == other.nulls_not_distinct
            && self.derived.as_ref().map(|d| d.describe())
                == other.derived.as_ref().map(|d| d.describe())
    }
}
impl Eq for IndexSpec {}

/// An index's keys computed from a table's rows: an expression index's values, a partial
/// index's predicate. Made by the catalog from the index's SQL.
pub trait DerivedKeys: Send + Sync + std::fmt::Debug {
    /// For the rows of `batch` (the table's columns, in its order): one array per key, and
    /// which rows the index holds (true; None: every row).
    fn derive(&self, batch: &RecordBatch) -> Result<(Vec<ArrayRef>, Option<BooleanArray>)>;
    /// The keys as an error's detail names them (`lower(email)`).
    fn key_names(&self) -> Vec<String>;
    /// What tells two derivations apart (the index's definition).
    fn describe(&self) -> String;
}

/// A change's rows under an index: each row's indexed values encoded, the values
/// themselves, and whether the index holds the row.
pub(crate) struct IndexKeys {
    pub(crate) rows: Rows,
    values: Vec<ArrayRef>,
    names: Vec<String>,
    holds: Option<BooleanArray>,
    /// NULL values are distinct (never conflict): false for `NULLS NOT DISTINCT`.
    nulls_distinct: bool,
}

impl IndexKeys {
    /// Row `i`'s encoded indexed values.
    pub(crate) fn values(&self, i: usize) -> &[u8] {
        self.rows.row(i).data()
    }

    /// Whether the index has an entry for row `i` (a partial index's predicate is true).
    pub(crate) fn holds(&self, i: usize) -> bool {
        self.holds
            .as_ref()
            .is_none_or(|h| h.is_valid(i) && h.value(i))
    }

    /// Whether row `i` has a NULL indexed value that makes it distinct from every other row
    /// (it never conflicts): not under `NULLS NOT DISTINCT`, where NULLs are equal.
    pub(crate) fn has_null(&self, i: usize) -> bool {
        self.nulls_distinct && self.values.iter().any(|v| v.is_null(i))
    }

    /// `Key (a, b)=(1, x)` for row `i`, as Postgres' details name a key.
    fn key_text(&self, i: usize) -> String {
        let values: Vec<String> = self
            .values
            .iter()
            .map(|v| match v.is_null(i) {
                // (as Postgres' detail writes a NULL: `Key (a)=(null)`)
                true => "null".to_owned(),
                false => array_value_to_string(v, i).unwrap_or_default(),
            })
            .collect();
        format!("Key ({})=({})", self.names.join(", "), values.join(", "))
    }
}

pub(crate) struct SecondaryIndex {
    pub(crate) spec: IndexSpec,
    conv: RowConverter,
    /// `T{table oid}X` ++ index oid.
    pub(crate) prefix: Vec<u8>,
}

/// `T{table oid}` ++ `kind` ++ index oid.
fn index_key(table_prefix: &[u8], kind: u8, index: u32) -> Vec<u8> {
    let mut k = table_prefix.to_vec();
    k.push(kind);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The marker of index `index` of the table whose keys start with `table_prefix`.
pub(crate) fn marker_key(table_prefix: &[u8], index: u32) -> Vec<u8> {
    index_key(table_prefix, b'I', index)
}

/// Where markers are (one per index).
pub(crate) fn markers_prefix(table_prefix: &[u8]) -> Vec<u8> {
    let mut k = table_prefix.to_vec();
    k.push(b'I');
    k
}

/// Where the entries of index `index` are.
pub(crate) fn entries_prefix(table_prefix: &[u8], index: u32) -> Vec<u8> {
    index_key(table_prefix, b'X', index)
}

impl SecondaryIndex {
    pub(crate) fn new(
        table_prefix: &[u8],
        spec: IndexSpec,
        schema: &SchemaRef,
    ) -> Result<SecondaryIndex> {
        let types: Vec<datafusion::arrow::datatypes::DataType> = match &spec.derived {
            Some(d) => {
                // the keys' types, from what they are over no rows
                let (keys, _) = d.derive(&RecordBatch::new_empty(schema.clone()))?;
                keys.iter().map(|k| k.data_type().clone()).collect()
            }
            None => {
                if spec.columns.iter().any(|&c| c >= schema.fields().len()) {
                    return Err(WeirError::internal(format!(
                        "index \"{}\" names columns the table does not have",
                        spec.name
                    )));
                }
                spec.columns
                    .iter()
                    .map(|&c| schema.field(c).data_type().clone())
                    .collect()
            }
        };
        if types.is_empty() {
            return Err(WeirError::internal(format!(
                "index \"{}\" has no keys",
                spec.name
            )));
        }
        let conv = RowConverter::new(types.into_iter().map(SortField::new).collect())?;
        let prefix = entries_prefix(table_prefix, spec.oid);
        Ok(SecondaryIndex { spec, conv, prefix })
    }

    /// The rows of `batch` (the table's columns) under the index: their indexed values,
    /// encoded, and which rows it holds.
    pub(crate) fn encode(&self, batch: &RecordBatch) -> Result<IndexKeys> {
        let (values, names, holds) = match &self.spec.derived {
            Some(d) => {
                let (values, holds) = d.derive(batch)?;
                (values, d.key_names(), holds)
            }
            None => {
                let schema = batch.schema();
                let values = self
                    .spec
                    .columns
                    .iter()
                    .map(|&c| batch.column(c).clone())
                    .collect();
                let names = self
                    .spec
                    .columns
                    .iter()
                    .map(|&c| schema.field(c).name().clone())
                    .collect();
                (values, names, None)
            }
        };
        let rows = self.conv.convert_columns(&values)?;
        Ok(IndexKeys {
            rows,
            values,
            names,
            holds,
            nulls_distinct: !self.spec.nulls_not_distinct,
        })
    }

    /// The key of an entry: the prefix, the indexed values, what tells rows apart.
    pub(crate) fn key(&self, values: &[u8], row_id: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + values.len() + row_id.len());
        self.key_into(&mut k, values, row_id);
        k
    }

    /// [`key`](Self::key) written into `buf` (cleared first), for callers that reuse one
    /// buffer per row.
    pub(crate) fn key_into(&self, buf: &mut Vec<u8>, values: &[u8], row_id: &[u8]) {
        buf.clear();
        buf.extend_from_slice(&self.prefix);
        buf.extend_from_slice(values);
        buf.extend_from_slice(row_id);
    }

    /// The prefix every entry of rows with these values of the leading indexed columns
    /// starts with: one per row of `probe` (one array per leading column, of the columns'
    /// types).
    pub(crate) fn probe_prefixes(&self, probe: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        let fields: Vec<SortField> = probe
            .iter()
            .map(|a| SortField::new(a.data_type().clone()))
            .collect();
        let conv = RowConverter::new(fields)?;
        let rows = conv.convert_columns(probe)?;
        Ok(rows
            .iter()
            .map(|r| {
                let mut k = self.prefix.clone();
                k.extend_from_slice(r.data());
                k
            })
            .collect())
    }

    /// 23505 for a change that would put row `i` beside a row with the same values, as
    /// Postgres words it.
    pub(crate) fn duplicate(&self, keys: &IndexKeys, i: usize) -> WeirError {
        WeirError::new(
            sqlstate::UNIQUE_VIOLATION,
            format!(
                "duplicate key value violates unique constraint \"{}\"",
                self.spec.name
            ),
        )
        .with_detail(format!("{} already exists.", keys.key_text(i)))
    }

    /// 23505 for a UNIQUE index built over rows that repeat row `i`'s values.
    pub(crate) fn duplicated(&self, keys: &IndexKeys, i: usize) -> WeirError {
        WeirError::new(
            sqlstate::UNIQUE_VIOLATION,
            format!("could not create unique index \"{}\"", self.spec.name),
        )
        .with_detail(format!("{} is duplicated.", keys.key_text(i)))
    }
}

/// A multiset entry's value: the multiplicity and where the row starts in the key.
pub(crate) fn multiset_value(count: i64, values_len: usize) -> Vec<u8> {
    let mut v = count.to_be_bytes().to_vec();
    v.extend_from_slice(&(values_len as u32).to_be_bytes());
    v
}

/// (multiplicity, length of the indexed values) of a multiset entry.
pub(crate) fn read_multiset_value(v: &[u8]) -> Result<(i64, usize)> {
    let corrupt = || WeirError::internal("corrupt index entry in store");
    if v.len() != 12 {
        return Err(corrupt());
    }
    let count = i64::from_be_bytes(v[..8].try_into().map_err(|_| corrupt())?);
    let len = u32::from_be_bytes(v[8..].try_into().map_err(|_| corrupt())?);
    Ok((count, len as usize))
}
