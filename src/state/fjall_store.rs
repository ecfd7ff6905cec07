//! [`Store`] on fjall, an LSM-tree key-value engine: chosen for its write throughput with an
//! fsync per commit (see `docs/storage.md` for the measurements against sled and redb).

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::error::{Result, WeirError};
use crate::state::store::{Durability, Store, Visit, WriteBatch};

pub struct FjallStore {
    db: Database,
    data: Keyspace,
}

fn io(e: fjall::Error) -> WeirError {
    WeirError::io("storage engine (fjall)", e)
}

impl FjallStore {
    pub fn open(path: &Path) -> Result<FjallStore> {
        let db = Database::builder(path).open().map_err(io)?;
        let data = db
            .keyspace("weir", KeyspaceCreateOptions::default)
            .map_err(io)?;
        Ok(FjallStore { db, data })
    }
}

impl Store for FjallStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.data.get(key).map_err(io)?.map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()> {
        for guard in self.data.prefix(prefix) {
            let (k, v) = guard.into_inner().map_err(io)?;
            visit(&k, &v)?;
        }
        Ok(())
    }

    fn commit(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mode = match durability {
            Durability::Sync => PersistMode::SyncAll,
            Durability::Buffered => PersistMode::Buffer,
        };
        let mut b = self.db.batch().durability(Some(mode));
        for (k, v) in batch.ops {
            match v {
                Some(v) => b.insert(&self.data, k, v),
                None => b.remove(&self.data, k),
            }
        }
        b.commit().map_err(io)
    }

    fn name(&self) -> &'static str {
        "fjall"
    }
}
