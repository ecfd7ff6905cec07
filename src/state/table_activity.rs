//! What a table has been asked to do since the server started: the counters Postgres'
//! statistics views show (`pg_stat_all_tables`, `pg_stat_all_indexes` and their `user`
//! forms). Counted per statement, not per row: a scan counts once with the rows the table
//! held when it started (what it reads unless a LIMIT stops it early), a lookup once with
//! the rows it found, a write once with the rows it inserted, updated or deleted. Like
//! Postgres' after a crash, the counters start at zero when the server starts; a rolled
//! back write stays counted, as in Postgres.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// The index key the primary key's lookups are counted under (its index has no oid in the
/// table layer; the catalog knows it).
pub const PRIMARY_KEY: u32 = 0;

#[derive(Default)]
pub struct TableActivity {
    seq_scan: AtomicU64,
    seq_tup_read: AtomicU64,
    tup_ins: AtomicU64,
    tup_upd: AtomicU64,
    tup_del: AtomicU64,
    /// index oid ([`PRIMARY_KEY`] for the primary key) → its lookups
    indexes: Mutex<BTreeMap<u32, IndexActivity>>,
}

/// One index's lookups: how many, and the rows they found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IndexActivity {
    pub scans: u64,
    pub rows: u64,
}

/// The counters at one moment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ActivityCounts {
    pub seq_scan: u64,
    pub seq_tup_read: u64,
    /// all indexes' lookups together
    pub idx_scan: u64,
    pub idx_tup_fetch: u64,
    pub tup_ins: u64,
    pub tup_upd: u64,
    pub tup_del: u64,
    pub indexes: BTreeMap<u32, IndexActivity>,
}

/// What a write did, for the counters.
#[derive(Debug, Clone, Copy)]
pub enum Written {
    Inserted(u64),
    Updated(u64),
    Deleted(u64),
}

impl TableActivity {
    pub fn scanned(&self, rows: u64) {
        self.seq_scan.fetch_add(1, Ordering::Relaxed);
        self.seq_tup_read.fetch_add(rows, Ordering::Relaxed);
    }

    pub fn looked_up(&self, index: u32, found: u64) {
        let mut indexes = self.indexes.lock();
        let a = indexes.entry(index).or_default();
        a.scans += 1;
        a.rows += found;
    }

    pub fn wrote(&self, w: Written) {
        let (counter, n) = match w {
            Written::Inserted(n) => (&self.tup_ins, n),
            Written::Updated(n) => (&self.tup_upd, n),
            Written::Deleted(n) => (&self.tup_del, n),
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A dropped index's lookups are forgotten with it.
    pub fn forget_index(&self, index: u32) {
        self.indexes.lock().remove(&index);
    }

    pub fn counts(&self) -> ActivityCounts {
        let indexes = self.indexes.lock().clone();
        ActivityCounts {
            seq_scan: self.seq_scan.load(Ordering::Relaxed),
            seq_tup_read: self.seq_tup_read.load(Ordering::Relaxed),
            idx_scan: indexes.values().map(|a| a.scans).sum(),
            idx_tup_fetch: indexes.values().map(|a| a.rows).sum(),
            tup_ins: self.tup_ins.load(Ordering::Relaxed),
            tup_upd: self.tup_upd.load(Ordering::Relaxed),
            tup_del: self.tup_del.load(Ordering::Relaxed),
            indexes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_kind_and_index() {
        let a = TableActivity::default();
        a.scanned(10);
        a.scanned(5);
        a.looked_up(PRIMARY_KEY, 1);
        a.looked_up(7, 3);
        a.looked_up(7, 0);
        a.wrote(Written::Inserted(4));
        a.wrote(Written::Updated(2));
        a.wrote(Written::Deleted(1));
        let c = a.counts();
        assert_eq!((c.seq_scan, c.seq_tup_read), (2, 15));
        assert_eq!((c.idx_scan, c.idx_tup_fetch), (3, 4));
        assert_eq!(c.indexes[&7], IndexActivity { scans: 2, rows: 3 });
        assert_eq!((c.tup_ins, c.tup_upd, c.tup_del), (4, 2, 1));
        a.forget_index(7);
        assert_eq!(a.counts().idx_scan, 1);
    }
}
