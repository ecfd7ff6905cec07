//! The storage backend trait: an ordered key-value store with atomic, optionally fsynced
//! write batches, point reads and prefix scans. Everything durable in Weir (the catalog,
//! table changelogs, and later operator state and source offsets) goes through it, so the
//! engine can be swapped; `benches/store.rs` compares candidates on this access pattern.

use crate::error::Result;

/// One atomic group of writes.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl WriteBatch {
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push((key.into(), Some(value.into())));
    }
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push((key.into(), None));
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// Whether a commit must reach stable storage before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync before returning: what an acknowledged write needs.
    Sync,
    /// Hand to the OS only; survives a process crash but not a power loss.
    Buffered,
}

/// Called for each pair of a prefix scan.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// A consistent read of the store as of one moment: commits after it are not seen, and
/// nothing it can see is dropped while it lives (keep it no longer than a statement).
pub trait ReadView: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The pairs whose key starts with `prefix`, in key order, read as the cursor advances.
    fn cursor(&self, prefix: &[u8]) -> Box<dyn Cursor>;
}

/// A position in a [`ReadView`]'s prefix scan.
pub trait Cursor: Send {
    /// Visit the next pair; false (and no visit) at the end.
    fn next(&mut self, visit: &mut Visit<'_>) -> Result<bool>;
}

pub trait Store: Send + Sync + 'static {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Visit every pair whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()>;
    /// Apply all writes of `batch` atomically.
    fn commit(&self, batch: WriteBatch, durability: Durability) -> Result<()>;
    /// A consistent read view as of now.
    fn read_view(&self) -> Result<Box<dyn ReadView>>;
    /// Bytes the engine holds in memory (caches, write buffers), for `weir_memory`.
    fn memory_bytes(&self) -> u64;
    /// A short name for logs and system tables.
    fn name(&self) -> &'static str;
}

/// Delete every key under `prefix`, in commits of at most `PURGE_CHUNK` deletes (a large
/// table's rows are not collected in one batch). Not atomic: call it for data no longer
/// reachable (a dropped relation's, after its catalog entry is gone).
pub fn purge_prefix(store: &dyn Store, prefix: &[u8]) -> Result<usize> {
    const PURGE_CHUNK: usize = 65_536;
    let view = store.read_view()?;
    let mut cursor = view.cursor(prefix);
    let mut total = 0;
    loop {
        let mut wb = WriteBatch::default();
        let mut more = true;
        while wb.len() < PURGE_CHUNK {
            more = cursor.next(&mut |k, _| {
                wb.delete(k.to_vec());
                Ok(())
            })?;
            if !more {
                break;
            }
        }
        total += wb.len();
        store.commit(wb, Durability::Buffered)?;
        if !more {
            return Ok(total);
        }
    }
}

/// Keys of all pairs under a prefix (helper for deleting a range).
pub fn keys_with_prefix(store: &dyn Store, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    store.scan_prefix(prefix, &mut |k, _| {
        keys.push(k.to_vec());
        Ok(())
    })?;
    Ok(keys)
}

/// Add a delete of every stored key under each prefix to `batch`.
pub fn delete_prefixes(
    store: &dyn Store,
    prefixes: &[Vec<u8>],
    batch: &mut WriteBatch,
) -> Result<()> {
    for p in prefixes {
        for k in keys_with_prefix(store, p)? {
            batch.delete(k);
        }
    }
    Ok(())
}

/// Stores for tests.
#[cfg(test)]
pub mod testing {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{Durability, Store, Visit, WriteBatch};
    use crate::error::{Result, WeirError, sqlstate};
    use crate::state::fjall_store::FjallStore;

    /// A fjall store in a temp dir whose commits fail as on a full disk while failures are
    /// set: [`fail`](Self::fail)`(n)` fails the next `n` commits, `usize::MAX` until reset.
    pub struct FullDisk {
        inner: FjallStore,
        failures: AtomicUsize,
        _dir: tempfile::TempDir,
    }

    impl Default for FullDisk {
        fn default() -> FullDisk {
            FullDisk::new()
        }
    }

    impl FullDisk {
        pub fn new() -> FullDisk {
            let dir = tempfile::tempdir().expect("temp dir");
            FullDisk {
                inner: FjallStore::open(dir.path()).expect("store"),
                failures: AtomicUsize::new(0),
                _dir: dir,
            }
        }

        pub fn fail(&self, n: usize) {
            self.failures.store(n, Ordering::Release);
        }
    }

    impl Store for FullDisk {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.inner.get(key)
        }
        fn scan_prefix(&self, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()> {
            self.inner.scan_prefix(prefix, visit)
        }
        fn commit(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
            let failing = self
                .failures
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match n {
                    0 => None,
                    usize::MAX => Some(usize::MAX),
                    n => Some(n - 1),
                })
                .is_ok();
            if failing {
                return Err(WeirError::new(
                    sqlstate::DISK_FULL,
                    "no space left on device",
                ));
            }
            self.inner.commit(batch, durability)
        }
        fn read_view(&self) -> Result<Box<dyn super::ReadView>> {
            self.inner.read_view()
        }
        fn memory_bytes(&self) -> u64 {
            self.inner.memory_bytes()
        }
        fn name(&self) -> &'static str {
            "full-disk"
        }
    }
}
