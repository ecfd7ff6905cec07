//! Where state tables put the entries they evict under `--memory-limit`: one process-wide
//! fjall database in `<data dir>/spill/state`, not part of any checkpoint.
//!
//! Spilled entries are memory moved to disk, nothing more: checkpoints write a table's
//! entries from memory and from here alike, recovery reads them back from the checkpoint,
//! and the directory is wiped at every start (the server deletes `<data dir>/spill`).
//! Writes are never synced nor even flushed to the OS per batch (no persist mode: the
//! journal's buffer is written out when it fills; manual journal persist): losing them
//! in a crash loses nothing a checkpoint holds.
//!
//! Each state table that spills gets an 8-byte id ([`SpillStore::table_id`]); its entries
//! are stored under `id (u64 BE) ++ key`, so a table's entries are one contiguous range in
//! key order (range reads of ordered tables are range scans here).
//!
//! The state-table cache budget ([`cache_budget`]) is process-wide too: the dataflow
//! worker keeps the sum of every state table's in-memory footprint under it by evicting
//! each table's coldest entries (see `StateTable::evict`).

use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use crate::error::{Result, WeirError};

pub struct SpillStore {
    db: Database,
    data: Keyspace,
    /// Its memtables' size (writers wait while several are full).
    memtable: u64,
    next_table: AtomicU64,
    /// Bytes of keys and values spilled now, all tables.
    bytes: AtomicU64,
}

static SPILL: OnceLock<SpillStore> = OnceLock::new();

/// Bytes [`SpillStore::scan`] reads by one fjall iterator before it opens the next.
const SCAN_PIECE_BYTES: usize = 4 << 20;

/// Bytes the state tables may hold in memory together; u64::MAX: no limit (nothing spills).
static CACHE_BUDGET: AtomicU64 = AtomicU64::new(u64::MAX);

fn io(e: fjall::Error) -> WeirError {
    WeirError::io("state spill store (fjall)", e)
}

impl SpillStore {
    /// Open a fresh spill store in `dir` (emptied first), caching in the process's block
    /// cache, with memtables of `memtable` bytes (the spill store's memory counts against
    /// the limit it serves).
    pub fn open(
        dir: &Path,
        cache: &crate::state::fjall_store::BlockCache,
        memtable: u64,
    ) -> Result<SpillStore> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)
            .map_err(|e| WeirError::io(&format!("cannot create {}", dir.display()), e))?;
        let db = cache
            .open(
                Database::builder(dir)
                    .manual_journal_persist(true)
                    .journal_compression(fjall::CompressionType::None)
                    .temporary(true)
                    // three workers, not fjall's two on this machine: with two, the first
                    // passes each compaction request on to the second and, while the
                    // second is busy compacting, keeps receiving and re-sending it (a
                    // measured quarter of the CPU); a third takes the request instead
                    .worker_threads(3),
            )
            .map_err(io)?;
        let data = db
            .keyspace("spill", || {
                // filters and indexes of every level stay in memory (about 2 bytes a
                // spilled entry): most reads here are of keys that were never spilled (a new
                // group, a new value of a min/max), and a miss must cost a filter check, not
                // a block read
                KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .filter_block_pinning_policy(fjall::config::PinningPolicy::all(true))
                    .index_block_pinning_policy(fjall::config::PinningPolicy::all(true))
                    // more level-0 runs before they are merged down: spilled entries are
                    // written once and mostly read by key (filters in memory), so fewer
                    // rewrites of level 1 are worth the extra runs a scan merges
                    .compaction_strategy(std::sync::Arc::new(
                        fjall::compaction::Leveled::default().with_l0_threshold(8),
                    ))
            })
            .map_err(io)?;
        Ok(SpillStore {
            db,
            data,
            memtable,
            next_table: AtomicU64::new(1),
            bytes: AtomicU64::new(0),
        })
    }

    /// A new table's id (its entries' key prefix).
    pub fn table_id(&self) -> u64 {
        self.next_table.fetch_add(1, Ordering::Relaxed)
    }

    /// Write `puts` and remove `deletes` in one batch (never synced).
    pub fn write(&self, puts: Vec<(Vec<u8>, Vec<u8>)>, deletes: Vec<Vec<u8>>) -> Result<()> {
        if puts.is_empty() && deletes.is_empty() {
            return Ok(());
        }
        // no persist per batch: a write(2) per eviction and per read-back cost the dataflow
        // thread more than the journal of a store nobody recovers is worth
        let mut b = self.db.batch().durability(None);
        for (k, v) in puts {
            b.insert(&self.data, k, v);
        }
        for k in deletes {
            b.remove(&self.data, k);
        }
        b.commit().map_err(io)?;
        crate::state::fjall_store::bound_write_buffer(&self.db, &self.data, self.memtable);
        Ok(())
    }

    /// A consistent read of the spill store as of now (a fjall snapshot): a reader of a
    /// view's contents takes it, with the contents' entries in memory, under the
    /// publication lock, so evictions and reads-back after it change neither half.
    pub fn read_view(&self) -> Box<dyn crate::state::store::ReadView> {
        Box::new(crate::state::fjall_store::FjallView::of(
            &self.db, &self.data,
        ))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.data.get(key).map_err(io)?.map(|v| v.to_vec()))
    }

    /// Visit the entries with keys in `[lo, hi)` (`hi` None: to the end), in key order.
    ///
    /// Read in pieces of about [`SCAN_PIECE_BYTES`], each by an iterator of its own that
    /// resumes after the last key of the one before: an open fjall iterator keeps the
    /// memtables and tables it started on alive (flushed or compacted meanwhile), and a
    /// visit may be slow (a checkpoint writes what it visits to the store), so one iterator
    /// over a large range held tens of MiB past `--memory-limit` on a slow disk. The
    /// entries of the range must not change during the scan (they belong to the caller).
    pub fn scan(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        use std::ops::Bound;
        let mut from = Bound::Included(lo.to_vec());
        loop {
            let to = match hi {
                Some(hi) => Bound::Excluded(hi),
                None => Bound::Unbounded,
            };
            let range = (from.as_ref().map(Vec::as_slice), to);
            let mut read = 0usize;
            let mut last = None;
            for guard in self.data.range::<&[u8], _>(range) {
                let (k, v) = guard.into_inner().map_err(io)?;
                visit(&k, &v);
                read += k.len() + v.len();
                if read >= SCAN_PIECE_BYTES {
                    last = Some(k.to_vec());
                    break;
                }
            }
            match last {
                Some(k) => from = Bound::Excluded(k),
                None => return Ok(()),
            }
        }
    }

    /// The first (or with `last`, the last) key in `[lo, hi)`.
    pub fn edge(&self, lo: &[u8], hi: &[u8], last: bool) -> Result<Option<Vec<u8>>> {
        let mut iter = self.data.range(lo..hi);
        let g = if last { iter.next_back() } else { iter.next() };
        match g {
            Some(g) => Ok(Some(g.key().map_err(io)?.to_vec())),
            None => Ok(None),
        }
    }

    pub(crate) fn add_bytes(&self, delta: i64) {
        if delta >= 0 {
            self.bytes.fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            self.bytes
                .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// Bytes of keys and values spilled now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Bytes the spill store holds in memory: its memtables (fjall's write buffer; the
    /// block cache is the process's, shared with the store).
    pub fn memory_bytes(&self) -> u64 {
        self.db.write_buffer_size()
    }
}

/// Make `store` the process's spill store (once; later calls are ignored and say so).
pub fn install(store: SpillStore) -> bool {
    SPILL.set(store).is_ok()
}

/// The process's spill store, if one was installed.
pub fn store() -> Option<&'static SpillStore> {
    SPILL.get()
}

/// Set the state-table cache budget (bytes).
pub fn set_cache_budget(bytes: u64) {
    CACHE_BUDGET.store(bytes, Ordering::Relaxed);
}

/// The state-table cache budget (bytes; u64::MAX: none).
pub fn cache_budget() -> u64 {
    CACHE_BUDGET.load(Ordering::Relaxed)
}

/// Tests: a spill store in a temporary directory, installed once per test process. (A
/// static is never dropped, so the directory outlives the process: those of test processes
/// that have ended are removed here.)
#[cfg(test)]
pub fn for_tests() -> &'static SpillStore {
    SPILL.get_or_init(|| {
        let tmp = std::env::temp_dir();
        if let Ok(entries) = std::fs::read_dir(&tmp) {
            for e in entries.flatten() {
                let name = e.file_name();
                let ended = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("weir-spill-test-"))
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
                if ended {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = tmp.join(format!("weir-spill-test-{}", std::process::id()));
        let cache = crate::state::fjall_store::BlockCache::new(4 << 20);
        SpillStore::open(&dir, &cache, 1 << 20).expect("open a test spill store")
    })
}
