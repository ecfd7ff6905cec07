//! Records a source could not decode: counted per source, and the most recent kept with
//! their raw bytes for the `weir_dead_letters` system table. Every view runs its own
//! instance of a source, so the same record can be refused by several instances: it is
//! kept and counted once (by source, partition and offset).

use std::collections::{HashMap, HashSet, VecDeque};

use parking_lot::Mutex;

/// How many dead letters `weir_dead_letters` keeps (oldest dropped first).
pub const RETAINED_DEAD_LETTERS: usize = 10_000;
/// A kept record's bytes are cut to this length (the error says how long it was).
pub const MAX_KEPT_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub source: String,
    pub partition: i32,
    pub offset: i64,
    pub raw: Option<Vec<u8>>,
    pub error: String,
    /// Wall-clock time it was refused, µs since the epoch.
    pub at: i64,
}

#[derive(Default)]
struct Inner {
    letters: VecDeque<DeadLetter>,
    /// (source, partition, offset) of every record counted (bounded like the letters).
    seen: HashSet<(String, i32, i64)>,
    seen_order: VecDeque<(String, i32, i64)>,
    counts: HashMap<String, u64>,
}

#[derive(Default)]
pub struct DeadLetters {
    inner: Mutex<Inner>,
}

impl DeadLetters {
    /// Record a refused record; false when this record was already recorded (by another
    /// view's instance of the source).
    pub fn record(
        &self,
        source: &str,
        partition: i32,
        offset: i64,
        raw: Option<&[u8]>,
        error: String,
    ) -> bool {
        let key = (source.to_owned(), partition, offset);
        let mut g = self.inner.lock();
        if g.seen.contains(&key) {
            return false;
        }
        // remember recent keys well past the letters kept, so a slower instance reading
        // the same records does not count them again
        if g.seen_order.len() == RETAINED_DEAD_LETTERS * 10
            && let Some(old) = g.seen_order.pop_front()
        {
            g.seen.remove(&old);
        }
        g.seen.insert(key.clone());
        g.seen_order.push_back(key);
        *g.counts.entry(source.to_owned()).or_default() += 1;
        if g.letters.len() == RETAINED_DEAD_LETTERS {
            g.letters.pop_front();
        }
        let (raw, error) = match raw {
            Some(r) if r.len() > MAX_KEPT_BYTES => (
                Some(r[..MAX_KEPT_BYTES].to_vec()),
                format!(
                    "{error} (record of {} bytes; first {MAX_KEPT_BYTES} kept)",
                    r.len()
                ),
            ),
            r => (r.map(|r| r.to_vec()), error),
        };
        g.letters.push_back(DeadLetter {
            source: source.to_owned(),
            partition,
            offset,
            raw,
            error,
            at: chrono::Utc::now().timestamp_micros(),
        });
        true
    }

    pub fn letters(&self) -> Vec<DeadLetter> {
        self.inner.lock().letters.iter().cloned().collect()
    }

    pub fn count(&self, source: &str) -> u64 {
        self.inner.lock().counts.get(source).copied().unwrap_or(0)
    }

    /// A dropped source's letters go with it.
    pub fn forget(&self, source: &str) {
        let mut g = self.inner.lock();
        g.counts.remove(source);
        g.letters.retain(|l| l.source != source);
        g.seen.retain(|k| k.0 != source);
        g.seen_order.retain(|k| k.0 != source);
    }
}
