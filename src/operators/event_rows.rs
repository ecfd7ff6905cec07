//! Rows per key in event-time order, with a deadline per key: the state of operators that
//! look at a key's rows again as the watermark moves (`SessionAggregate`,
//! `MatchRecognize`). Not an operator: the part those share.
//!
//! - `rows`: key ++ event time (order-preserving i64) ++ row -> multiplicity, so a prefix
//!   scan reads a key's rows in time order (ties by the row's bytes).
//! - `deadlines` (deadline ++ key) and `next_deadline` (key -> earliest registered
//!   deadline): when a key next needs a look, so a watermark step revisits only the keys
//!   due, not every key.
//! - the keys changed or due since the operator last took them (in memory: taken at every
//!   epoch end, so empty at a checkpoint).

use datafusion::arrow::array::{Array, ArrowPrimitiveType, PrimitiveArray};
use datafusion::arrow::row::Rows;

use crate::operators::FastSet;
use crate::state::state_table::{StateTable, TableDecl, i64_key, i64_of_key};
use crate::state::zset::count_of;

const ROWS: TableDecl = TableDecl {
    name: "rows",
    key: "key ++ event time (order-preserving i64) ++ row",
    value: "multiplicity (i64 LE)",
    ordered: true,
};
const DEADLINES: TableDecl = TableDecl {
    name: "deadlines",
    key: "deadline (order-preserving i64) ++ key",
    value: "empty",
    ordered: true,
};
const NEXT_DEADLINE: TableDecl = TableDecl {
    name: "next_deadline",
    key: "key",
    value: "earliest registered deadline (i64 LE)",
    ordered: false,
};

pub struct EventRows {
    pub rows: StateTable,
    pub deadlines: StateTable,
    pub next_deadline: StateTable,
    dirty: FastSet<Box<[u8]>>,
    buf: Vec<u8>,
}

impl Default for EventRows {
    fn default() -> Self {
        EventRows::new()
    }
}

impl EventRows {
    pub fn new() -> EventRows {
        EventRows {
            rows: StateTable::new(ROWS),
            deadlines: StateTable::new(DEADLINES),
            next_deadline: StateTable::new(NEXT_DEADLINE),
            dirty: FastSet::default(),
            buf: Vec::with_capacity(64),
        }
    }

    /// Add a batch of changes: row `i` under key `keys[i]` (one key for all when None) at
    /// event time `ts[i]` with weight `weights[i]`. Rows without a time are skipped (they
    /// have no place in event time). Their keys become dirty.
    pub fn add<T: ArrowPrimitiveType<Native = i64>>(
        &mut self,
        keys: Option<&Rows>,
        ts: &PrimitiveArray<T>,
        rows: &Rows,
        weights: &[i64],
    ) {
        for (i, w) in weights.iter().enumerate() {
            if ts.is_null(i) {
                continue;
            }
            let key: &[u8] = match keys {
                Some(k) => k.row(i).data(),
                None => &[],
            };
            self.buf.clear();
            self.buf.extend_from_slice(key);
            self.buf.extend_from_slice(&i64_key(ts.value(i)));
            self.buf.extend_from_slice(rows.row(i).data());
            self.rows.add_count(&self.buf, *w);
            if !self.dirty.contains(key) {
                self.dirty.insert(key.into());
            }
        }
    }

    /// A key's rows in event-time order: (event time, row, multiplicity). Call
    /// `rows.fetch_prefix(key)` first (spilled rows come back).
    pub fn key_rows<'a>(
        &'a self,
        key: &'a [u8],
    ) -> impl Iterator<Item = (i64, &'a [u8], i64)> + 'a {
        self.rows.prefix_resident(key).map(move |(k, v)| {
            let rest = &k[key.len()..];
            (i64_of_key(rest), &rest[8..], count_of(v))
        })
    }

    /// `key` needs a look when the watermark reaches `d` (nothing if `d` has passed or
    /// an earlier look is registered).
    pub fn register(&mut self, key: &[u8], d: i64, watermark: Option<i64>) {
        if watermark.is_some_and(|w| d <= w) {
            return;
        }
        if self
            .next_deadline
            .get(key)
            .is_some_and(|cur| count_of(cur) <= d)
        {
            return;
        }
        self.next_deadline.put(key, &d.to_le_bytes());
        let mut k = i64_key(d).to_vec();
        k.extend_from_slice(key);
        self.deadlines.put(&k, &[]);
    }

    /// The watermark reached `watermark`: the keys whose deadline came become dirty.
    pub fn due(&mut self, watermark: i64) {
        let due = self.deadlines.take_up_to(watermark);
        for (d, k) in due.iter() {
            if self.next_deadline.get(k).map(count_of) == Some(d) {
                self.next_deadline.delete(k);
            }
            self.dirty.insert(k.into());
        }
    }

    /// The dirty keys, in order; none are dirty after.
    pub fn take_dirty(&mut self) -> Vec<Box<[u8]>> {
        let mut dirty: Vec<Box<[u8]>> = self.dirty.drain().collect();
        dirty.sort_unstable();
        dirty
    }
}
