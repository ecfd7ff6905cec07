//! Storage engine comparison on Weir's access pattern, through Weir's own `Store` trait:
//!
//! 1. batched upserts, fsync per commit (operator state checkpoints): N random 100-byte
//!    values in batches of 1,000;
//! 2. single-row commits with fsync (one acknowledged INSERT = one commit);
//! 3. changelog appends: 64 KiB values under increasing keys, fsync each (table logs);
//! 4. point reads of random existing keys;
//! 5. prefix scans of 1,000 keys each.
//!
//! Run: `cargo bench --bench store` (release build; `STORE_BENCH_N` sets N, default 200000).
//! The numbers and the decision are in `docs/storage.md`.

use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use weir::error::{Result, WeirError};
use weir::state::fjall_store::FjallStore;
use weir::state::store::{Durability, Store, Visit, WriteBatch};

fn io(e: impl std::fmt::Display) -> WeirError {
    WeirError::io("bench store", e)
}

struct SledStore {
    db: sled::Db,
}

impl Store for SledStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key).map_err(io)?.map(|v| v.to_vec()))
    }
    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()> {
        for kv in self.db.scan_prefix(prefix) {
            let (k, v) = kv.map_err(io)?;
            visit(&k, &v)?;
        }
        Ok(())
    }
    fn commit(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        let mut b = sled::Batch::default();
        for (k, v) in batch.ops {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
        }
        self.db.apply_batch(b).map_err(io)?;
        if durability == Durability::Sync {
            self.db.flush().map_err(io)?;
        }
        Ok(())
    }
    fn read_view(&self) -> Result<Box<dyn weir::state::store::ReadView>> {
        Err(WeirError::not_supported(
            "read views are not part of this comparison",
        ))
    }
    fn memory_bytes(&self) -> u64 {
        0
    }
    fn name(&self) -> &'static str {
        "sled 0.34"
    }
}

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("weir");

struct RedbStore {
    db: redb::Database,
}

impl Store for RedbStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        use redb::ReadableDatabase;
        let tx = self.db.begin_read().map_err(io)?;
        let t = match tx.open_table(TABLE) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        Ok(t.get(key).map_err(io)?.map(|v| v.value().to_vec()))
    }
    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()> {
        use redb::ReadableDatabase;
        let tx = self.db.begin_read().map_err(io)?;
        let t = tx.open_table(TABLE).map_err(io)?;
        for kv in t.range(prefix..).map_err(io)? {
            let (k, v) = kv.map_err(io)?;
            if !k.value().starts_with(prefix) {
                break;
            }
            visit(k.value(), v.value())?;
        }
        Ok(())
    }
    fn commit(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        let mut tx = self.db.begin_write().map_err(io)?;
        tx.set_durability(match durability {
            Durability::Sync => redb::Durability::Immediate,
            Durability::Buffered => redb::Durability::None,
        })
        .map_err(io)?;
        {
            let mut t = tx.open_table(TABLE).map_err(io)?;
            for (k, v) in &batch.ops {
                match v {
                    Some(v) => {
                        t.insert(k.as_slice(), v.as_slice()).map_err(io)?;
                    }
                    None => {
                        t.remove(k.as_slice()).map_err(io)?;
                    }
                }
            }
        }
        tx.commit().map_err(io)
    }
    fn read_view(&self) -> Result<Box<dyn weir::state::store::ReadView>> {
        Err(WeirError::not_supported(
            "read views are not part of this comparison",
        ))
    }
    fn memory_bytes(&self) -> u64 {
        0
    }
    fn name(&self) -> &'static str {
        "redb 4.6"
    }
}

fn key(i: u64) -> Vec<u8> {
    // 8-byte prefix group + 8-byte id, like T{oid}{seq}
    let mut k = (i / 1000).to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn rate(n: u64, t: Instant) -> String {
    let s = t.elapsed().as_secs_f64();
    format!("{:>10.0}/s", n as f64 / s)
}

fn run(store: Arc<dyn Store>, n: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut value = vec![0u8; 100];

    // 1. batched upserts of random keys, fsync per 1,000
    let t = Instant::now();
    let mut written = 0;
    while written < n {
        let mut wb = WriteBatch::default();
        for _ in 0..1000 {
            rng.fill(&mut value[..]);
            wb.put(key(rng.random_range(0..n)), value.clone());
        }
        store.commit(wb, Durability::Sync).expect("commit");
        written += 1000;
    }
    let upserts = rate(n, t);

    // 2. single-row commits, fsync each
    let singles = 2000u64;
    let t = Instant::now();
    for i in 0..singles {
        let mut wb = WriteBatch::default();
        wb.put(key(n + i), value.clone());
        store.commit(wb, Durability::Sync).expect("commit");
    }
    let single = rate(singles, t);

    // 3. 64 KiB changelog appends, fsync each
    let appends = 500u64;
    let blob = vec![7u8; 64 * 1024];
    let t = Instant::now();
    for i in 0..appends {
        let mut wb = WriteBatch::default();
        let mut k = b"L".to_vec();
        k.extend_from_slice(&i.to_be_bytes());
        wb.put(k, blob.clone());
        store.commit(wb, Durability::Sync).expect("commit");
    }
    let append_mb = (appends * 64) as f64 / 1024.0 / t.elapsed().as_secs_f64();

    // 4. point reads
    let reads = 100_000u64;
    let t = Instant::now();
    let mut found = 0;
    for _ in 0..reads {
        if store
            .get(&key(rng.random_range(0..n)))
            .expect("get")
            .is_some()
        {
            found += 1;
        }
    }
    let point = rate(reads, t);

    // 5. prefix scans of ~1,000 keys (one group of the key space)
    let scans = 200u64;
    let t = Instant::now();
    let mut rows = 0u64;
    for _ in 0..scans {
        let g = rng.random_range(0..n / 1000);
        store
            .scan_prefix(&g.to_be_bytes(), &mut |_, _| {
                rows += 1;
                Ok(())
            })
            .expect("scan");
    }
    let scan_rate = rows as f64 / t.elapsed().as_secs_f64();

    println!(
        "| {:<10} | {} | {} | {:>8.1} MB/s | {} | {:>10.0} rows/s ({} hits, {} scanned) |",
        store.name(),
        upserts,
        single,
        append_mb,
        point,
        scan_rate,
        found,
        rows
    );
}

fn main() {
    let n: u64 = std::env::var("STORE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "store bench: {n} upserts of 100 B in fsynced batches of 1000; 2000 fsynced single puts;"
    );
    println!("500 fsynced 64 KiB appends; 100k point reads; 200 prefix scans of ~1000 keys");
    println!(
        "| engine     | batched upserts | single commits | 64K appends | point reads | prefix scans |"
    );
    let p = |name: &str| dir.path().join(name);
    run(Arc::new(FjallStore::open(&p("fjall")).expect("fjall")), n);
    run(
        Arc::new(SledStore {
            db: sled::open(p("sled")).expect("sled"),
        }),
        n,
    );
    run(
        Arc::new(RedbStore {
            db: redb::Database::create(p("redb.db")).expect("redb"),
        }),
        n,
    );
}
