//! Checkpoints: a consistent cut of every view between two epochs, written to the store in
//! ONE atomic, fsynced batch, and read back at start instead of recomputing the views.
//!
//! What a checkpoint holds (all under the store namespace `K`):
//! - `Kv{oid}g…`: the changes of every state table of the view's graph since the last
//!   checkpoint, one delta blob per table (or a new base snapshot, see `state_table.rs`),
//!   and the nodes' watermarks (`Graph::flush_state`); `Kv{oid}c…`: the view's contents
//!   (its Z-set's table);
//! - `Kr{table}`: per table, the last change-log sequence number the views have consumed
//!   (its log after that is kept through compaction: recovery replays it);
//! - `Kj{view}{source}…`: the input journal of each Kafka instance since the checkpoint
//!   (`journal.rs`; written by the instances, pruned by each checkpoint's commit);
//! - `Km`: the manifest, written last in the same batch: format, epoch, and per view its
//!   fingerprint (plan, nodes, state tables, state format), how many state entries it
//!   holds, its watermark, and per input the position (table sequence, generator row,
//!   Kafka offsets per partition) and watermark. The manifest ends in a CRC-32 of itself.
//!
//! Only what changed since the last checkpoint is written (state tables log their
//! changes). The dataflow worker builds the batch at an epoch boundary (handing over each
//! table's change log: the only pause ingest sees) and hands it to the writer thread
//! here, which commits and fsyncs it while the worker goes on. A failed write (disk full) is recorded in
//! `weir_checkpoints`; later incremental batches would then miss its changes, so they are
//! skipped until a full one (every view's whole state, stale keys deleted) is written.
//!
//! Recovery (`Manifest::read`, `restore_view`): the manifest's checksum is verified; a view
//! is restored only if its fingerprint matches the graph planned now (or is one the
//! catalog recorded for it when a relation it reads was renamed: `restores_from`), every blob's
//! checksum holds and the number of entries read equals the number recorded; otherwise it is rebuilt from its inputs, with the
//! reason in `weir_recovery`. Fjall's own journal makes the batch atomic and checks its
//! blocks' checksums, so a torn write is never half-visible.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::dataflow::graph::Graph;
use crate::dataflow::position::Position;
use crate::error::{Result, WeirError};
use crate::state::state_table::STATE_FORMAT;
use crate::state::store::{Durability, Store, WriteBatch, delete_prefixes};
use crate::state::zset::ZSet;

/// The layout of the manifest and the keys above; a different one is never restored.
pub const CHECKPOINT_FORMAT: &str = "weir-checkpoint-1";
/// Every checkpoint key starts with this.
pub const NAMESPACE: &[u8] = b"K";
const MANIFEST_KEY: &[u8] = b"Km";
/// Checkpoint records kept for `weir_checkpoints`.
const HISTORY: usize = 200;

fn view_prefix(oid: u32) -> Vec<u8> {
    let mut k = b"Kv".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

pub fn graph_prefix(oid: u32) -> Vec<u8> {
    let mut k = view_prefix(oid);
    k.push(b'g');
    k
}

pub fn contents_prefix(oid: u32) -> Vec<u8> {
    let mut k = view_prefix(oid);
    k.push(b'c');
    k
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub epoch: u64,
    /// Wall-clock time the checkpoint was cut (µs since the Unix epoch).
    pub taken_at_us: i64,
    pub views: Vec<ViewCheckpoint>,
    /// Sinks whose topic held all of their view's changes through this epoch.
    #[serde(default)]
    pub sinks_caught_up: Vec<u32>,
    /// Where each source's shared reader stood (`connectors/shared.rs`).
    #[serde(default)]
    pub sources: Vec<SourceCheckpoint>,
}

/// A source's shared reader at the checkpoint: recorded once, whatever the number of
/// views reading through it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceCheckpoint {
    pub source: u32,
    pub position: Option<Position>,
    pub watermark: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ViewCheckpoint {
    pub oid: u32,
    pub name: String,
    pub fingerprint: String,
    /// Entries of the view's state (graph state tables, its watermark record, contents).
    pub keys: u64,
    /// The view's own event-time watermark.
    pub watermark: Option<i64>,
    pub inputs: Vec<InputCheckpoint>,
    /// The shards its graph ran in (`dataflow/shards.rs`): its state is restored into as
    /// many.
    #[serde(default = "one_shard")]
    pub shards: usize,
}

fn one_shard() -> usize {
    1
}

/// One input of a view, named by catalog OID (a table, a view, or a connector source whose
/// instance the view runs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputCheckpoint {
    pub relation: u32,
    pub position: Option<Position>,
    pub watermark: Option<i64>,
    /// A connector source read through its shared reader (false: the view was still
    /// reading the source's history with a backfill reader of its own).
    #[serde(default)]
    pub shared: bool,
}

impl Manifest {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec(self)
            .map_err(|e| WeirError::internal(format!("cannot encode a checkpoint: {e}")))?;
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_be_bytes());
        Ok(bytes)
    }

    fn decode(bytes: &[u8]) -> Result<Manifest> {
        let corrupt = |what: &str| {
            WeirError::new(
                crate::error::sqlstate::DATA_CORRUPTED,
                format!("the checkpoint manifest (store key \"Km\") is corrupt: {what}"),
            )
        };
        if bytes.len() < 4 {
            return Err(corrupt("truncated"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32fast::hash(body) != stored {
            return Err(corrupt("checksum mismatch"));
        }
        let m: Manifest =
            serde_json::from_slice(body).map_err(|e| corrupt(&format!("undecodable ({e})")))?;
        if m.format != CHECKPOINT_FORMAT {
            return Err(corrupt(&format!(
                "format {} is not {CHECKPOINT_FORMAT}",
                m.format
            )));
        }
        Ok(m)
    }

    /// The last committed checkpoint, verified; None when there is none.
    pub fn read(store: &dyn Store) -> Result<Option<Manifest>> {
        match store.get(MANIFEST_KEY)? {
            None => Ok(None),
            Some(b) => Manifest::decode(&b).map(Some),
        }
    }

    pub fn source(&self, oid: u32) -> Option<&SourceCheckpoint> {
        self.sources.iter().find(|s| s.source == oid)
    }

    pub fn view(&self, oid: u32) -> Option<&ViewCheckpoint> {
        self.views.iter().find(|v| v.oid == oid)
    }
}

/// Add the manifest to a checkpoint batch (as its last write).
pub(crate) fn put_manifest(m: &Manifest, batch: &mut WriteBatch) -> Result<()> {
    batch.put(MANIFEST_KEY, m.encode()?);
    Ok(())
}

/// What a checkpoint of a view must match to be restored: its graph, its columns, the
/// state and checkpoint formats, and its query.
pub fn fingerprint(graph: &mut Graph, schema: &str, query: &str) -> String {
    format!(
        "{STATE_FORMAT}\n{CHECKPOINT_FORMAT}\nquery: {query}\nschema: {schema}\n{}",
        graph.fingerprint()
    )
}

/// A fingerprint in 32 hex digits (the first half of its SHA-256): what the catalog keeps
/// of the fingerprints a view's checkpoint may also carry
/// (`RelationDesc::restores_from`).
pub fn fingerprint_digest(fingerprint: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(fingerprint.as_bytes());
    d.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Load a view's checkpointed state into its freshly planned graph and an empty Z-set, and
/// check that exactly the recorded number of keys came back. Returns the bytes read.
pub fn restore_view(
    store: &dyn Store,
    vc: &ViewCheckpoint,
    graph: &mut Graph,
    contents: &mut ZSet,
) -> Result<usize> {
    graph.load_state(store, &graph_prefix(vc.oid))?;
    contents
        .state_table()
        .load(store, &contents_prefix(vc.oid))?;
    contents.recount()?;
    let (entries, bytes) = graph.state_size();
    let found = entries + contents.distinct_rows();
    if found as u64 != vc.keys {
        return Err(WeirError::new(
            crate::error::sqlstate::DATA_CORRUPTED,
            format!(
                "the checkpoint of view \"{}\" (store keys under Kv{:08x}) holds {found} state entries (keys), its manifest says {}",
                vc.name, vc.oid, vc.keys
            ),
        ));
    }
    Ok(bytes + contents.state_table().bytes())
}

/// One row of `weir_checkpoints`.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    pub epoch: u64,
    pub started_at_us: i64,
    pub duration_ms: f64,
    pub bytes_written: u64,
    pub keys_written: u64,
    pub state_bytes_total: u64,
    /// `committed`, `failed` or `skipped` (after a failure, until a full one lands).
    pub status: &'static str,
    pub error: Option<String>,
}

/// One row of `weir_recovery`: how a view came back at start.
#[derive(Debug, Clone)]
pub struct RecoveryRecord {
    pub view: String,
    pub started_at_us: i64,
    pub duration_ms: f64,
    pub bytes_read: u64,
    /// `restored` (from the checkpoint of `from_epoch`) or `rebuilt` (from its inputs).
    pub outcome: &'static str,
    pub from_epoch: Option<u64>,
    pub reason: Option<String>,
}

impl RecoveryRecord {
    /// A view rebuilt from its inputs, started at `started` (wall clock `started_at_us`);
    /// the other outcomes override fields.
    pub fn since(view: &str, started: Instant, started_at_us: i64) -> RecoveryRecord {
        RecoveryRecord {
            view: view.to_owned(),
            started_at_us,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
            bytes_read: 0,
            outcome: "rebuilt",
            from_epoch: None,
            reason: None,
        }
    }
}

/// Checkpoint and recovery history, for the system tables.
#[derive(Default)]
pub struct CheckpointLog {
    checkpoints: Mutex<VecDeque<CheckpointRecord>>,
    recovery: Mutex<Vec<RecoveryRecord>>,
}

impl CheckpointLog {
    pub fn checkpoints(&self) -> Vec<CheckpointRecord> {
        self.checkpoints.lock().iter().cloned().collect()
    }

    fn record(&self, r: CheckpointRecord) {
        let m = crate::metrics::global();
        m.checkpoint_duration.observe(r.duration_ms / 1000.0);
        m.checkpoint_bytes.set(r.bytes_written as i64);
        let mut h = self.checkpoints.lock();
        if h.len() >= HISTORY {
            h.pop_front();
        }
        h.push_back(r);
    }

    pub fn recovery(&self) -> Vec<RecoveryRecord> {
        self.recovery.lock().clone()
    }

    pub fn record_recovery(&self, r: RecoveryRecord) {
        self.recovery.lock().push(r);
    }
}

pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A checkpoint handed from the worker to the writer.
pub(crate) struct Job {
    pub(crate) epoch: u64,
    pub(crate) started: Instant,
    pub(crate) started_at_us: i64,
    pub(crate) batch: WriteBatch,
    /// Prefixes whose stored keys go first (views dropped or rebuilt; everything of a
    /// full checkpoint), in the same commit.
    pub(crate) clear: Vec<Vec<u8>>,
    /// Keys under `clear` the checkpoint wrote before its batch (large bases' chunks,
    /// `StateTable::flush`): not cleared.
    pub(crate) keep: Vec<Vec<u8>>,
    /// Every view's whole state (after a failure), not only what changed.
    pub(crate) full: bool,
    pub(crate) state_bytes: u64,
    /// Input journals (prefix) with the position and watermark this checkpoint records
    /// for them: the entries it covers are deleted in its commit.
    pub(crate) journals: Vec<(Vec<u8>, Option<Position>, Option<i64>)>,
    pub(crate) reply: Option<oneshot::Sender<Result<u64>>>,
}

/// The writer thread's handle.
pub(crate) struct Writer {
    tx: std::sync::mpsc::Sender<Job>,
    pub(crate) store: Arc<dyn Store>,
    /// Jobs handed over and not yet written.
    in_flight: Arc<AtomicUsize>,
    /// A write failed: the next job must be a full one.
    needs_full: Arc<AtomicBool>,
}

impl Writer {
    pub(crate) fn start(store: Arc<dyn Store>, log: Arc<CheckpointLog>) -> Writer {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let needs_full = Arc::new(AtomicBool::new(false));
        // a fail point for crash tests: the writer stalls this long before each commit
        let stall = std::env::var("WEIR_CHECKPOINT_STALL_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        let spawned = std::thread::Builder::new()
            .name("weir-checkpoint".into())
            .spawn({
                let store = store.clone();
                let in_flight = in_flight.clone();
                let needs_full = needs_full.clone();
                move || {
                    for job in rx {
                        write(&*store, &log, &needs_full, stall, job);
                        in_flight.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the checkpoint writer; checkpoints will fail");
        }
        Writer {
            tx,
            store,
            in_flight,
            needs_full,
        }
    }

    pub(crate) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    pub(crate) fn needs_full(&self) -> bool {
        self.needs_full.load(Ordering::Acquire)
    }

    pub(crate) fn submit(&self, job: Job) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Err(std::sync::mpsc::SendError(job)) = self.tx.send(job) {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            if let Some(r) = job.reply {
                let _ = r.send(Err(WeirError::internal(
                    "the checkpoint writer has stopped",
                )));
            }
        }
    }
}

/// Write one job; answers its reply.
fn write(
    store: &dyn Store,
    log: &CheckpointLog,
    needs_full: &AtomicBool,
    stall: Option<Duration>,
    job: Job,
) {
    let Job {
        epoch,
        started,
        started_at_us,
        batch,
        clear,
        keep,
        full,
        state_bytes,
        journals,
        reply,
    } = job;
    let mut record = CheckpointRecord {
        epoch,
        started_at_us,
        duration_ms: 0.0,
        bytes_written: 0,
        keys_written: 0,
        state_bytes_total: state_bytes,
        status: "committed",
        error: None,
    };
    let answer = |r: Result<u64>| {
        if let Some(tx) = reply {
            let _ = tx.send(r);
        }
    };
    if needs_full.load(Ordering::Acquire) && !full {
        record.status = "skipped";
        record.error = Some("an earlier checkpoint failed; waiting for a full one".into());
        record.duration_ms = started.elapsed().as_secs_f64() * 1e3;
        log.record(record);
        answer(Err(WeirError::new(
            "58030",
            "an earlier checkpoint failed; the next one writes all state",
        )));
        return;
    }
    if let Some(d) = stall {
        std::thread::sleep(d);
    }
    let result = (|| -> Result<(u64, u64)> {
        let mut batch = batch;
        if !clear.is_empty() {
            // deletes first; a key the batch writes again keeps its new value
            let mut deletes = WriteBatch::default();
            delete_prefixes(store, &clear, &mut deletes)?;
            let mut ops: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> =
                deletes.ops.into_iter().collect();
            for k in &keep {
                ops.remove(k);
            }
            for (k, v) in batch.ops {
                ops.insert(k, v);
            }
            batch = WriteBatch {
                ops: ops.into_iter().collect(),
            };
        }
        // the journal entries this checkpoint makes unnecessary go in the same commit
        // (entries appended meanwhile are past its positions and stay)
        for (prefix, position, watermark) in &journals {
            crate::dataflow::journal::prune(
                store,
                prefix,
                position.as_ref(),
                *watermark,
                &mut batch,
            )?;
        }
        let keys = batch.len() as u64;
        let bytes = batch
            .ops
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum::<usize>() as u64;
        store.commit(batch, Durability::Sync)?;
        Ok((keys, bytes))
    })();
    record.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok((keys, bytes)) => {
            if full {
                needs_full.store(false, Ordering::Release);
            }
            record.keys_written = keys;
            record.bytes_written = bytes;
            if record.duration_ms > 1000.0 {
                info!(
                    epoch,
                    keys,
                    bytes,
                    ms = record.duration_ms,
                    "slow checkpoint"
                );
            }
            log.record(record);
            answer(Ok(epoch));
        }
        Err(e) => {
            needs_full.store(true, Ordering::Release);
            warn!(epoch, error = %e, "checkpoint failed; the views keep running and the next checkpoint writes all state");
            record.status = "failed";
            record.error = Some(e.message.clone());
            log.record(record);
            answer(Err(e));
        }
    }
}

/// Remove what a checkpoint holds of views that no longer exist (dropped after the last
/// checkpoint, before a crash): nothing else would ever delete it.
pub fn forget_views(store: &dyn Store, oids: &[u32]) -> Result<()> {
    let prefixes: Vec<Vec<u8>> = oids
        .iter()
        .flat_map(|o| [view_prefix(*o), crate::dataflow::journal::view_prefix(*o)])
        .collect();
    let mut wb = WriteBatch::default();
    delete_prefixes(store, &prefixes, &mut wb)?;
    store.commit(wb, Durability::Sync)
}

/// Remove every checkpoint (checkpoints turned off: nothing may hold table logs back, and
/// a later start with checkpoints on must not restore state this run did not keep).
pub fn clear_all(store: &dyn Store) -> Result<()> {
    let mut wb = WriteBatch::default();
    delete_prefixes(store, &[NAMESPACE.to_vec()], &mut wb)?;
    store.commit(wb, Durability::Sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(epoch: u64, keys: &[(&str, &str)], full: bool) -> (Job, oneshot::Receiver<Result<u64>>) {
        let (tx, rx) = oneshot::channel();
        let mut batch = WriteBatch::default();
        for (k, v) in keys {
            batch.put(k.as_bytes().to_vec(), v.as_bytes().to_vec());
        }
        (
            Job {
                epoch,
                started: Instant::now(),
                started_at_us: 0,
                batch,
                clear: if full { vec![b"Kv".to_vec()] } else { vec![] },
                keep: Vec::new(),
                full,
                state_bytes: 0,
                journals: Vec::new(),
                reply: Some(tx),
            },
            rx,
        )
    }

    /// A failed write is recorded; incremental checkpoints after it are skipped (they
    /// would miss its changes) until a full one lands, which also clears stale keys.
    #[test]
    fn after_a_failed_write_only_a_full_checkpoint_lands() {
        let store = Arc::new(crate::state::store::testing::FullDisk::new());
        let log = Arc::new(CheckpointLog::default());
        let writer = Writer::start(store.clone(), log.clone());
        let run = |j: (Job, oneshot::Receiver<Result<u64>>)| {
            writer.submit(j.0);
            j.1.blocking_recv().unwrap()
        };
        assert_eq!(
            run(job(1, &[("Kv1", "a"), ("Kv2", "b")], false)).unwrap(),
            1
        );
        store.fail(usize::MAX);
        let e = run(job(2, &[("Kv1", "c")], false)).unwrap_err();
        assert_eq!(e.code, "53100");
        assert!(writer.needs_full());
        store.fail(0);
        // space is back, but an incremental batch would lose epoch 2's changes
        assert!(run(job(3, &[("Kv3", "d")], false)).is_err());
        assert_eq!(store.get(b"Kv3").unwrap(), None);
        // the full one: everything rewritten, what it does not write is gone
        assert_eq!(run(job(4, &[("Kv1", "c"), ("Kv3", "d")], true)).unwrap(), 4);
        assert!(!writer.needs_full());
        assert_eq!(store.get(b"Kv1").unwrap(), Some(b"c".to_vec()));
        assert_eq!(store.get(b"Kv2").unwrap(), None);
        let statuses: Vec<&str> = log.checkpoints().iter().map(|r| r.status).collect();
        assert_eq!(statuses, ["committed", "failed", "skipped", "committed"]);
        assert!(
            log.checkpoints()[1]
                .error
                .as_deref()
                .unwrap()
                .contains("space")
        );
    }

    fn manifest() -> Manifest {
        Manifest {
            sinks_caught_up: Vec::new(),
            sources: Vec::new(),
            format: CHECKPOINT_FORMAT.into(),
            epoch: 7,
            taken_at_us: 1,
            views: vec![ViewCheckpoint {
                oid: 3,
                name: "v".into(),
                fingerprint: "f".into(),
                keys: 2,
                shards: 2,
                watermark: Some(5),
                inputs: vec![InputCheckpoint {
                    relation: 1,
                    position: Some(Position::single(9)),
                    watermark: None,
                    shared: false,
                }],
            }],
        }
    }

    #[test]
    fn a_manifest_round_trips_and_any_flipped_byte_is_refused() {
        let bytes = manifest().encode().unwrap();
        let back = Manifest::decode(&bytes).unwrap();
        assert_eq!(back.epoch, 7);
        assert_eq!(back.views[0].inputs[0].position, Some(Position::single(9)));
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            let e = Manifest::decode(&b).unwrap_err();
            assert!(e.message.contains("corrupt"), "{}", e.message);
        }
        for n in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
    }
}
