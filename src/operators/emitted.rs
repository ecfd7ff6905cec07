//! `Emitted`: what an operator has shown per key (a partition, a group, a session key), so
//! that it can emit the difference when the key's rows change — the one mechanism for
//! "what I emitted before vs. what I emit now" (top-N, session windows, and the aggregate,
//! whose groups show one row each: `replace_one`).
//!
//! - state: one state table, key = the owner's key ++ output row (`arrow_row` encodings,
//!   prefix-free within one converter, so a prefix scan by owner key finds exactly that
//!   key's rows), value = multiplicity (i64 LE).
//! - `replace(key, rows)` sets what the key shows now and collects the retractions and
//!   insertions that take a reader from the old rows to the new ones; `forget(key)` drops a
//!   key without retracting it (a closed window whose rows stay in the view).
//! - owners that show at most one row (an aggregate's groups: [`Emitted::one_per_key`])
//!   keep it in a hashed table instead, key = owner key, value = the output row: a
//!   change is one hash lookup, where the ordered layout cost a prefix scan, a delete and
//!   an insert in a B-tree (21% of the dataflow thread on Nexmark q5).
//! - checkpoint: the table.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::RowConverter;

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::FastMap;
use crate::state::state_table::{StateTable, TableDecl};
use crate::state::zset::count_of;

pub const EMITTED_TABLE: TableDecl = TableDecl {
    name: "emitted",
    key: "owner key ++ output row",
    value: "multiplicity (i64 LE)",
    ordered: true,
};

pub const EMITTED_ONE_TABLE: TableDecl = TableDecl {
    name: "emitted",
    key: "owner key",
    value: "the output row it shows",
    ordered: false,
};

/// Output rows to retract and to insert, collected over an epoch.
#[derive(Default)]
pub struct Diff {
    pub retract: Vec<Box<[u8]>>,
    pub insert: Vec<Box<[u8]>>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.retract.is_empty() && self.insert.is_empty()
    }

    /// The changelogs (retractions first) of the collected rows, decoded with `conv` (the
    /// output row converter) into `schema`.
    pub fn into_changelogs(
        self,
        conv: &RowConverter,
        schema: &SchemaRef,
    ) -> Result<Vec<Changelog>> {
        let parser = conv.parser();
        let mut out = Vec::new();
        for (rows, insert) in [(self.retract, false), (self.insert, true)] {
            if rows.is_empty() {
                continue;
            }
            let cols = conv.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
            let batch = RecordBatch::try_new_with_options(
                Arc::clone(schema),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(rows.len())),
            )?;
            out.push(if insert {
                Changelog::inserts(batch)
            } else {
                Changelog::retractions(batch)
            });
        }
        Ok(out)
    }
}

/// Owners showing at most this many rows are diffed without a map.
const FEW: usize = 4;

pub struct Emitted {
    table: StateTable,
    key_buf: Vec<u8>,
}

impl Default for Emitted {
    fn default() -> Self {
        Emitted::new()
    }
}

impl Emitted {
    pub fn new() -> Emitted {
        Emitted {
            table: StateTable::new(EMITTED_TABLE),
            key_buf: Vec::new(),
        }
    }

    /// For owners that show at most one row each (an aggregate's groups).
    pub fn one_per_key() -> Emitted {
        Emitted {
            table: StateTable::new(EMITTED_ONE_TABLE),
            key_buf: Vec::new(),
        }
    }

    /// At most one row per owner, kept as the value of the owner's key (the hashed
    /// [`EMITTED_ONE_TABLE`]); only `shown_one`, `replace_one` and `forget` apply.
    fn one(&self) -> bool {
        !self.table.decl().ordered
    }

    pub fn state_table(&mut self) -> &mut StateTable {
        &mut self.table
    }

    /// Distinct (key, row) pairs shown.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// `key` now shows `rows` (output rows, repeated by multiplicity): record it, and add
    /// to `diff` the change from what it showed.
    pub fn replace(&mut self, key: &[u8], rows: &[&[u8]], diff: &mut Diff) {
        debug_assert!(!self.one(), "replace on a one-row-per-key Emitted");
        if rows.len() <= FEW {
            return self.replace_few(key, rows, diff);
        }
        let mut delta: FastMap<&[u8], i64> = FastMap::default();
        for r in rows {
            *delta.entry(r).or_default() += 1;
        }
        let old: Vec<(Box<[u8]>, i64)> = self
            .table
            .prefix(key)
            .map(|(k, v)| (k[key.len()..].into(), count_of(v)))
            .collect();
        for (r, c) in &old {
            *delta.entry(r).or_default() -= c;
        }
        for (row, d) in delta {
            self.record(key, row, d, diff);
        }
    }

    /// [`replace`](Self::replace) for a few rows (an over-window's owner is one input
    /// row): multiplicities by linear search in place of a map, and the rows shown before
    /// copied only when they are no longer shown.
    fn replace_few(&mut self, key: &[u8], rows: &[&[u8]], diff: &mut Diff) {
        let mut delta: [(&[u8], i64); FEW] = [(&[], 0); FEW];
        let mut n = 0;
        for r in rows {
            match delta[..n].iter_mut().find(|d| d.0 == *r) {
                Some(d) => d.1 += 1,
                None => {
                    delta[n] = (r, 1);
                    n += 1;
                }
            }
        }
        let mut gone: Vec<(Box<[u8]>, i64)> = Vec::new();
        for (k, v) in self.table.prefix(key) {
            let row = &k[key.len()..];
            match delta[..n].iter_mut().find(|d| d.0 == row) {
                Some(d) => d.1 -= count_of(v),
                None => gone.push((row.into(), -count_of(v))),
            }
        }
        for (row, d) in &delta[..n] {
            self.record(key, row, *d, diff);
        }
        for (row, d) in &gone {
            self.record(key, row, *d, diff);
        }
    }

    /// `key` shows `row` `d` more times (fewer when negative).
    fn record(&mut self, key: &[u8], row: &[u8], d: i64, diff: &mut Diff) {
        if d == 0 {
            return;
        }
        for _ in 0..d.abs() {
            if d > 0 {
                diff.insert.push(row.into());
            } else {
                diff.retract.push(row.into());
            }
        }
        self.key_buf.clear();
        self.key_buf.extend_from_slice(key);
        self.key_buf.extend_from_slice(row);
        let k = std::mem::take(&mut self.key_buf);
        self.table.add_count(&k, d);
        self.key_buf = k;
    }

    /// For owners that show at most one row (an aggregate's group): the row `key` shows.
    pub fn shown_one<'a>(&'a mut self, key: &'a [u8]) -> Option<&'a [u8]> {
        if self.one() {
            return self.table.get(key);
        }
        self.table.prefix(key).next().map(|(k, _)| &k[key.len()..])
    }

    /// For owners that show at most one row: `key` now shows `new` (or nothing). Returns
    /// None when that is what it showed already, else the row it showed before (which the
    /// caller retracts), if any.
    pub fn replace_one(&mut self, key: &[u8], new: Option<&[u8]>) -> Option<Option<Box<[u8]>>> {
        if self.one() {
            // one lookup: the old row is read and replaced in place
            let mut old: Option<Option<Box<[u8]>>> = None;
            self.table.update(key, |shown| {
                if shown != new {
                    old = Some(shown.map(Box::from));
                }
                new
            });
            return old;
        }
        let old: Option<Box<[u8]>> = self.shown_one(key).map(Box::from);
        if old.as_deref() == new {
            return None;
        }
        if let Some(o) = &old {
            self.key_buf.clear();
            self.key_buf.extend_from_slice(key);
            self.key_buf.extend_from_slice(o);
            let k = std::mem::take(&mut self.key_buf);
            self.table.delete(&k);
            self.key_buf = k;
        }
        if let Some(n) = new {
            self.key_buf.clear();
            self.key_buf.extend_from_slice(key);
            self.key_buf.extend_from_slice(n);
            let k = std::mem::take(&mut self.key_buf);
            self.table.put(&k, &1i64.to_le_bytes());
            self.key_buf = k;
        }
        Some(old)
    }

    /// Drop what `key` shows without retracting it.
    pub fn forget(&mut self, key: &[u8]) {
        if self.one() {
            self.table.delete(key);
        } else {
            self.table.delete_prefix(key);
        }
    }

    /// Drop the rows of `key` that sort before `below` (rows that start with an
    /// order-preserving time, e.g. a session's end), without retracting them.
    pub fn forget_before(&mut self, key: &[u8], below: &[u8]) {
        debug_assert!(!self.one(), "forget_before on a one-row-per-key Emitted");
        let mut hi = key.to_vec();
        hi.extend_from_slice(below);
        self.table.delete_range((
            std::ops::Bound::Included(key),
            std::ops::Bound::Excluded(hi.as_slice()),
        ));
    }

    /// The rows `key` shows, with multiplicities.
    pub fn rows<'a>(&'a mut self, key: &'a [u8]) -> impl Iterator<Item = (&'a [u8], i64)> + 'a {
        debug_assert!(!self.one(), "rows on a one-row-per-key Emitted");
        self.table
            .prefix(key)
            .map(move |(k, v)| (&k[key.len()..], count_of(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_emits_the_multiset_difference() {
        let mut e = Emitted::new();
        let mut d = Diff::default();
        e.replace(b"p1", &[b"a", b"b", b"b"], &mut d);
        e.replace(b"p2", &[b"z"], &mut d);
        assert_eq!(d.insert.len(), 4);
        let mut d = Diff::default();
        e.replace(b"p1", &[b"b", b"c"], &mut d);
        let mut r: Vec<&[u8]> = d.retract.iter().map(|r| r.as_ref()).collect();
        r.sort();
        assert_eq!(r, vec![&b"a"[..], b"b"]);
        assert_eq!(d.insert, vec![Box::from(&b"c"[..])]);
        // more rows than the few-row path takes, duplicates on both sides
        let mut d = Diff::default();
        e.replace(b"p3", &[b"x", b"x", b"y", b"z", b"w", b"v"], &mut d);
        let mut d = Diff::default();
        e.replace(b"p3", &[b"x", b"y", b"y", b"u", b"v", b"w"], &mut d);
        let mut r: Vec<&[u8]> = d.retract.iter().map(|r| r.as_ref()).collect();
        r.sort();
        let mut i: Vec<&[u8]> = d.insert.iter().map(|r| r.as_ref()).collect();
        i.sort();
        assert_eq!((r, i), (vec![&b"x"[..], b"z"], vec![&b"u"[..], b"y"]));
        e.forget(b"p3");
        // p2 untouched; forgetting p1 retracts nothing
        e.forget(b"p1");
        assert_eq!(e.len(), 1);
        let mut d = Diff::default();
        e.replace(b"p2", &[], &mut d);
        assert_eq!(d.retract, vec![Box::from(&b"z"[..])]);
        assert!(e.is_empty());
        // one row per owner
        assert_eq!(e.replace_one(b"g", Some(b"r1")), Some(None));
        assert_eq!(e.shown_one(b"g"), Some(&b"r1"[..]));
        assert_eq!(e.replace_one(b"g", Some(b"r1")), None, "unchanged");
        let r1: Box<[u8]> = Box::from(&b"r1"[..]);
        let r2: Box<[u8]> = Box::from(&b"r2"[..]);
        assert_eq!(e.replace_one(b"g", Some(b"r2")), Some(Some(r1)));
        assert_eq!(e.replace_one(b"g", None), Some(Some(r2)));
        assert!(e.is_empty());
    }

    #[test]
    fn one_row_per_key_is_a_value() {
        let mut e = Emitted::one_per_key();
        assert_eq!(e.replace_one(b"g", Some(b"r1")), Some(None));
        assert_eq!(e.replace_one(b"h", Some(b"r1")), Some(None));
        assert_eq!(e.shown_one(b"g"), Some(&b"r1"[..]));
        assert_eq!(e.replace_one(b"g", Some(b"r1")), None, "unchanged");
        assert_eq!(
            e.replace_one(b"g", Some(b"r2")),
            Some(Some(Box::from(&b"r1"[..])))
        );
        assert_eq!(e.replace_one(b"g", None), Some(Some(Box::from(&b"r2"[..]))));
        assert_eq!(
            e.replace_one(b"g", None),
            None,
            "nothing shown, nothing to show"
        );
        assert_eq!(e.shown_one(b"g"), None);
        // a key that prefixes another is its own owner
        assert_eq!(e.replace_one(b"", Some(b"x")), Some(None));
        assert_eq!(e.shown_one(b""), Some(&b"x"[..]));
        e.forget(b"h");
        assert_eq!(e.shown_one(b"h"), None);
        assert_eq!(e.len(), 1);
    }
}
