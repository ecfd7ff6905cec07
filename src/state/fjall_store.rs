//! [`Store`] on fjall, an LSM-tree key-value engine: chosen for its write throughput with an
//! fsync per commit (see `docs/storage.md` for the measurements against sled and redb).
//!
//! A write that fails (the disk is full, say) leaves fjall's handle refusing every later
//! write ("poisoned"). The store then reopens the database before its next write: fjall
//! recovers everything committed from its journal and drops the torn batch, so once space
//! is back writes succeed again without a restart, and nothing acknowledged is lost. A
//! full disk is reported as 53100 (`disk_full`), as Postgres reports it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use parking_lot::RwLock;
use tracing::{info, warn};

use crate::error::{Result, WeirError, sqlstate};
use crate::state::store::{Cursor, Durability, ReadView, Store, Visit, WriteBatch};

struct Handle {
    /// Kept open for the keyspace's lifetime.
    db: Database,
    data: Keyspace,
}

/// Memory fjall may use: the block cache (one for the process, shared by the store and the
/// spill store) and the largest memtable of the store (both count against
/// `--memory-limit`; fjall's defaults are 32 MiB and 64 MiB). fjall queues up to four full
/// memtables for flushing before it stalls writes, so the memtable is sized small.
#[derive(Debug, Clone, Copy)]
pub struct StoreMemory {
    pub cache: u64,
    pub memtable: u64,
}

impl StoreMemory {
    /// fjall's defaults.
    pub const DEFAULT: StoreMemory = StoreMemory {
        cache: 32 << 20,
        memtable: 64 << 20,
    };

    /// Sized from a memory limit: a 16th of it for the block cache (2 MiB to 512 MiB: it
    /// caches tables' rows), a 64th for a memtable (1 MiB to 64 MiB).
    pub fn for_limit(limit: u64) -> StoreMemory {
        StoreMemory {
            cache: (limit / 16).clamp(2 << 20, 512 << 20),
            memtable: (limit / 64).clamp(1 << 20, 64 << 20),
        }
    }
}

/// Memtables' worth of write buffer (active and sealed) past which a writer seals the
/// active memtable itself (see [`bound_write_buffer`]): fjall's four sealed ones before it
/// stalls, the active one and one more.
const WRITE_BUFFER_MEMTABLES: u64 = 6;

/// After a commit to `data` in `db` (memtables of `memtable` bytes): if the write buffer
/// holds more than [`WRITE_BUFFER_MEMTABLES`] memtables' worth, seal the active memtable
/// now. fjall seals a full memtable on a worker thread, by a request queued behind the
/// flushes, and stalls writers only once four sealed memtables wait: when the disk is
/// slower than the writer (each flush syncs the journal) the active memtable grows without
/// bound meanwhile, 300 MiB of a checkpoint's 1 MiB chunks at a 2 MiB memtable on a disk
/// throttled to 30 MB/s (docs/benchmarks.md). Sealed here, it counts toward the stall, so
/// the next commit waits for flushes instead. (A keyspace keeps the memtable size it was
/// created with: this also holds an older store to the size configured now.)
/// `rotate_memtable` is hidden from fjall's docs but public; fjall is pinned by the lock.
pub(crate) fn bound_write_buffer(db: &Database, data: &Keyspace, memtable: u64) {
    if db.write_buffer_size() <= memtable.saturating_mul(WRITE_BUFFER_MEMTABLES) {
        return;
    }
    if let Err(e) = data.rotate_memtable() {
        warn!(error = %e, "could not seal a memtable of the store");
    }
}

/// The process's block cache: fjall's, created once and given to every database opened
/// with it, so the store and the spill store share one byte budget.
#[derive(Clone)]
pub struct BlockCache(std::sync::Arc<lsm_tree::Cache>);

impl BlockCache {
    pub fn new(bytes: u64) -> BlockCache {
        BlockCache(std::sync::Arc::new(lsm_tree::Cache::with_capacity_bytes(
            bytes,
        )))
    }

    /// Bytes cached now.
    pub fn used(&self) -> u64 {
        self.0.size()
    }

    pub fn capacity(&self) -> u64 {
        self.0.capacity()
    }

    /// Open a database configured by `builder`, with this cache.
    pub fn open(&self, builder: fjall::DatabaseBuilder<Database>) -> fjall::Result<Database> {
        let mut config = builder.into_config();
        config.cache = self.0.clone();
        Database::open(config)
    }
}

pub struct FjallStore {
    path: PathBuf,
    memtable: u64,
    cache: BlockCache,
    /// None only while it is being reopened (under the write lock).
    handle: RwLock<Option<Handle>>,
    /// A write failed: reopen before the next one.
    broken: AtomicBool,
}

/// Whether an error (or its cause) is "no space left on device".
fn is_disk_full(e: &fjall::Error) -> bool {
    fn io_full(e: &std::io::Error) -> bool {
        e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
    }
    if let fjall::Error::Io(io) = e {
        return io_full(io);
    }
    // lsm-tree and journal errors wrap the io error; read the chain
    let mut src: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io_full(io)
        {
            return true;
        }
        src = s.source();
    }
    let text = format!("{e:?} {e}");
    text.contains("StorageFull") || text.contains("No space left")
}

fn io(e: fjall::Error) -> WeirError {
    if is_disk_full(&e) {
        return WeirError::new(
            sqlstate::DISK_FULL,
            format!("could not write to the store: no space left on device ({e})"),
        )
        .with_hint(
            "Free disk space; writes resume once there is room (nothing acknowledged is lost).",
        );
    }
    WeirError::io("storage engine (fjall)", e)
}

fn closed() -> WeirError {
    WeirError::new(sqlstate::IO_ERROR, "the store is closed (a reopen failed)")
}

fn open_handle(
    path: &Path,
    memtable: u64,
    cache: &BlockCache,
) -> std::result::Result<Handle, fjall::Error> {
    // large values (checkpoint blobs, table batches) are not lz4-compressed into the
    // journal: on two cores the compression cost the dataflow more than the bytes it saved
    // (docs/benchmarks.md, "Checkpoints")
    let db =
        cache.open(Database::builder(path).journal_compression(fjall::CompressionType::None))?;
    // (a keyspace keeps the memtable size it was created with)
    let data = db.keyspace("weir", || {
        KeyspaceCreateOptions::default().max_memtable_size(memtable)
    })?;
    Ok(Handle { db, data })
}

impl FjallStore {
    /// A store with fjall's default memory (a cache of its own).
    pub fn open(path: &Path) -> Result<FjallStore> {
        let cache = BlockCache::new(StoreMemory::DEFAULT.cache);
        Self::open_with(path, StoreMemory::DEFAULT.memtable, cache)
    }

    /// A store with memtables of `memtable` bytes, caching in `cache`.
    pub fn open_with(path: &Path, memtable: u64, cache: BlockCache) -> Result<FjallStore> {
        let handle = open_handle(path, memtable, &cache).map_err(io)?;
        Ok(FjallStore {
            path: path.to_owned(),
            memtable,
            cache,
            handle: RwLock::new(Some(handle)),
            broken: AtomicBool::new(false),
        })
    }

    /// Reopen after a failed write (fjall refuses writes after one fails): the old handle
    /// is closed first (releasing its lock file), then the database opened again, which
    /// replays the journal.
    fn recover(&self) -> Result<()> {
        let mut h = self.handle.write();
        if !self.broken.load(Ordering::Acquire) && h.is_some() {
            return Ok(());
        }
        drop(h.take());
        match open_handle(&self.path, self.memtable, &self.cache) {
            Ok(new) => {
                *h = Some(new);
                self.broken.store(false, Ordering::Release);
                info!(path = %self.path.display(), "store reopened after a failed write");
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "store reopen failed; will retry at the next write");
                self.broken.store(true, Ordering::Release);
                Err(io(e))
            }
        }
    }
}

impl Store for FjallStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.handle.read().is_none() {
            self.recover()?;
        }
        let h = self.handle.read();
        let h = h.as_ref().ok_or_else(closed)?;
        Ok(h.data.get(key).map_err(io)?.map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()> {
        if self.handle.read().is_none() {
            self.recover()?;
        }
        let h = self.handle.read();
        let h = h.as_ref().ok_or_else(closed)?;
        for guard in h.data.prefix(prefix) {
            let (k, v) = guard.into_inner().map_err(io)?;
            visit(&k, &v)?;
        }
        Ok(())
    }

    fn commit(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.broken.load(Ordering::Acquire) {
            self.recover()?;
        }
        let mode = match durability {
            Durability::Sync => PersistMode::SyncAll,
            Durability::Buffered => PersistMode::Buffer,
        };
        let h = self.handle.read();
        let h = h.as_ref().ok_or_else(closed)?;
        let mut b = h.db.batch().durability(Some(mode));
        for (k, v) in batch.ops {
            match v {
                Some(v) => b.insert(&h.data, k, v),
                None => b.remove(&h.data, k),
            }
        }
        b.commit().map_err(|e| {
            self.broken.store(true, Ordering::Release);
            warn!(error = %e, "store write failed; the store will be reopened before the next write");
            io(e)
        })?;
        bound_write_buffer(&h.db, &h.data, self.memtable);
        Ok(())
    }

    fn read_view(&self) -> Result<Box<dyn ReadView>> {
        if self.handle.read().is_none() {
            self.recover()?;
        }
        let h = self.handle.read();
        let h = h.as_ref().ok_or_else(closed)?;
        Ok(Box::new(FjallView::of(&h.db, &h.data)))
    }

    /// Its memtables and the block cache (the process's one cache: the spill store's
    /// blocks are in it too, and reported here only).
    fn memory_bytes(&self) -> u64 {
        let memtables = match self.handle.read().as_ref() {
            Some(h) => h.db.write_buffer_size(),
            None => 0,
        };
        memtables + self.cache.used()
    }

    fn name(&self) -> &'static str {
        "fjall"
    }
}

/// A fjall snapshot: reads see the database as of its creation.
pub(crate) struct FjallView {
    snapshot: fjall::Snapshot,
    data: Keyspace,
}

impl FjallView {
    /// A read view of `data` in `db`, as of now.
    pub(crate) fn of(db: &Database, data: &Keyspace) -> FjallView {
        FjallView {
            snapshot: db.snapshot(),
            data: data.clone(),
        }
    }
}

impl ReadView for FjallView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        use fjall::Readable;
        Ok(self
            .snapshot
            .get(&self.data, key)
            .map_err(io)?
            .map(|v| v.to_vec()))
    }

    fn cursor(&self, prefix: &[u8]) -> Box<dyn Cursor> {
        use fjall::Readable;
        Box::new(FjallCursor {
            iter: self.snapshot.prefix(&self.data, prefix),
        })
    }
}

struct FjallCursor {
    iter: fjall::Iter,
}

impl Cursor for FjallCursor {
    fn next(&mut self, visit: &mut Visit<'_>) -> Result<bool> {
        match self.iter.next() {
            None => Ok(false),
            Some(guard) => {
                let (k, v) = guard.into_inner().map_err(io)?;
                visit(&k, &v)?;
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::store::{Store, WriteBatch};

    /// A writer outrunning fjall's flushes (1 MiB values into 1 MiB memtables, as a
    /// checkpoint writes a large base) keeps the write buffer near six memtables: the active
    /// memtable is sealed by the writer, and fjall's stall at four sealed ones holds it.
    #[test]
    fn a_fast_writer_keeps_the_write_buffer_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let memtable = 1 << 20;
        let store = FjallStore::open_with(dir.path(), memtable, BlockCache::new(1 << 20)).unwrap();
        let value = vec![7u8; 1 << 20];
        let mut most = 0;
        for i in 0u32..200 {
            let mut b = WriteBatch::default();
            b.put(i.to_be_bytes().to_vec(), value.clone());
            store.commit(b, Durability::Buffered).unwrap();
            let h = store.handle.read();
            most = most.max(h.as_ref().unwrap().db.write_buffer_size());
        }
        // six memtables, and what goes in before the stall: fjall checks it after a
        // commit's insert, and flushes finishing meanwhile let more in (9 MiB measured;
        // without the writer sealing, 47-57 MiB of the 200 written)
        assert!(
            most <= 2 * WRITE_BUFFER_MEMTABLES * memtable,
            "the write buffer held {most} bytes"
        );
        assert_eq!(store.get(&199u32.to_be_bytes()).unwrap(), Some(value));
    }
}
