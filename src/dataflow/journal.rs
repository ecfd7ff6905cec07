//! The input journal: for every batch a Kafka source instance hands to a view after the
//! view's last checkpoint, a small fsynced record of exactly what it was — which messages
//! (per partition: first offset and count, in the order they were read) and the watermark
//! before and after it. Recovery replays the journal, so the batches after the checkpoint
//! are re-formed exactly as they were, and late-event decisions (a row is admitted by the
//! watermark in force when its batch arrived) come out the same as before the crash: a
//! reader who saw a view's value before a crash sees the same value after it.
//!
//! Only Kafka instances need it: how their messages fall into batches depends on fetch
//! timing, and their watermark on partition idleness (wall clock). Tables replay their
//! change log, and generators cut batches at fixed row counts, so their batches and
//! watermarks are a function of the position alone.
//!
//! Keys: `Kj` ++ view OID ++ source OID ++ sequence (all big-endian), so one view's
//! entries sort together and in order. Value: JOURNAL_FORMAT, JSON, CRC-32. An entry is
//! written (fsynced) before its batch is handed to the dataflow, so every batch a reader
//! can have seen the effect of is journaled. The checkpoint writer deletes the entries a
//! checkpoint covers (`prune`), in the checkpoint's own commit.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dataflow::position::Position;
use crate::error::{Result, WeirError, sqlstate};
use crate::state::store::{Durability, Store, WriteBatch, delete_prefixes};

/// The layout of a journal entry; a different one is never replayed.
pub const JOURNAL_FORMAT: u8 = 1;

/// All journal entries of one view.
pub fn view_prefix(view: u32) -> Vec<u8> {
    let mut k = b"Kj".to_vec();
    k.extend_from_slice(&view.to_be_bytes());
    k
}

/// The journal of one view's instance of one source.
pub fn prefix(view: u32, source: u32) -> Vec<u8> {
    let mut k = view_prefix(view);
    k.extend_from_slice(&source.to_be_bytes());
    k
}

/// Consecutive messages of one partition within a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub partition: i32,
    /// Offset of the first message.
    pub first: i64,
    pub count: u32,
}

/// One batch as it was handed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The messages of the batch, in the order they were read (none: a watermark move).
    pub runs: Vec<Run>,
    /// The instance's watermark before and after the batch.
    pub before: Option<i64>,
    pub after: Option<i64>,
    /// The instance's position after the batch.
    pub position: Position,
}

impl Entry {
    /// Runs of the messages `(partition, offset)` in read order.
    pub fn runs_of(messages: impl IntoIterator<Item = (i32, i64)>) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for (partition, offset) in messages {
            match runs.last_mut() {
                Some(r) if r.partition == partition => r.count += 1,
                _ => runs.push(Run {
                    partition,
                    first: offset,
                    count: 1,
                }),
            }
        }
        runs
    }

    /// Whether a view checkpointed at `position` with `watermark` has consumed this batch:
    /// its position is reached in every partition and its watermark move is included
    /// (both only move forward, so the covered entries are a prefix of the journal).
    pub fn covered_by(&self, position: Option<&Position>, watermark: Option<i64>) -> bool {
        let reached = match position {
            Some(p) => p.reached(&self.position),
            None => self.position.0.is_empty(),
        };
        reached
            && match (self.after, watermark) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(a), Some(w)) => a <= w,
            }
    }

    fn encode(&self) -> Result<Vec<u8>> {
        let mut bytes = vec![JOURNAL_FORMAT];
        serde_json::to_writer(&mut bytes, self)
            .map_err(|e| WeirError::internal(format!("cannot encode a journal entry: {e}")))?;
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_be_bytes());
        Ok(bytes)
    }

    fn decode(key: &[u8], bytes: &[u8]) -> Result<Entry> {
        let corrupt = |what: &str| {
            WeirError::new(
                sqlstate::DATA_CORRUPTED,
                format!(
                    "the input journal entry at store key {} is corrupt: {what}",
                    hex(key)
                ),
            )
        };
        if bytes.len() < 5 {
            return Err(corrupt("truncated"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body) != u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(corrupt("checksum mismatch"));
        }
        if body[0] != JOURNAL_FORMAT {
            return Err(corrupt(&format!(
                "format {} is not {JOURNAL_FORMAT}",
                body[0]
            )));
        }
        serde_json::from_slice(&body[1..]).map_err(|e| corrupt(&format!("undecodable ({e})")))
    }
}

fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every entry under `prefix`, with its key, in order.
fn read_all(store: &dyn Store, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Entry)>> {
    let mut out = Vec::new();
    store.scan_prefix(prefix, &mut |k, v| {
        out.push((k.to_vec(), Entry::decode(k, v)?));
        Ok(())
    })?;
    Ok(out)
}

/// Add deletes of the entries under `prefix` that a checkpoint at `position` with
/// `watermark` covers to `batch`.
pub fn prune(
    store: &dyn Store,
    prefix: &[u8],
    position: Option<&Position>,
    watermark: Option<i64>,
    batch: &mut WriteBatch,
) -> Result<()> {
    let mut keys = Vec::new();
    store.scan_prefix(prefix, &mut |k, v| {
        // an entry that does not decode is left for recovery to report
        if Entry::decode(k, v).is_ok_and(|e| e.covered_by(position, watermark)) {
            keys.push(k.to_vec());
        }
        Ok(())
    })?;
    for k in keys {
        batch.delete(k);
    }
    Ok(())
}

/// One instance's journal, appended to by its runner.
pub struct Journal {
    store: Arc<dyn Store>,
    prefix: Vec<u8>,
    next: u64,
}

impl Journal {
    /// A new instance (a view created or rebuilt): whatever an earlier run left is stale.
    pub fn fresh(store: Arc<dyn Store>, view: u32, source: u32) -> Result<Journal> {
        let prefix = prefix(view, source);
        let mut wb = WriteBatch::default();
        delete_prefixes(store.as_ref(), std::slice::from_ref(&prefix), &mut wb)?;
        if !wb.is_empty() {
            store.commit(wb, Durability::Sync)?;
        }
        Ok(Journal {
            store,
            prefix,
            next: 0,
        })
    }

    /// A restored instance: its journal, and the entries after its checkpoint (position,
    /// watermark) to replay.
    pub fn resume(
        store: Arc<dyn Store>,
        view: u32,
        source: u32,
        position: Option<&Position>,
        watermark: Option<i64>,
    ) -> Result<(Journal, Vec<Entry>)> {
        let prefix = prefix(view, source);
        let all = read_all(store.as_ref(), &prefix)?;
        let next = all
            .last()
            .and_then(|(k, _)| k.get(prefix.len()..))
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, |s| u64::from_be_bytes(s) + 1);
        let replay = all
            .into_iter()
            .map(|(_, e)| e)
            .skip_while(|e| e.covered_by(position, watermark))
            .collect();
        Ok((
            Journal {
                store,
                prefix,
                next,
            },
            replay,
        ))
    }

    /// Append an entry like [`append`](Self::append), waiting out a store that cannot take
    /// it (a full disk, an I/O error): `waiting` is told each failure, then it retries
    /// every `retry`. Other errors are returned.
    pub fn append_waiting(
        &mut self,
        entry: &Entry,
        retry: std::time::Duration,
        mut waiting: impl FnMut(&WeirError),
    ) -> Result<()> {
        loop {
            match self.append(entry) {
                Err(e) if e.code == sqlstate::DISK_FULL || e.code == sqlstate::IO_ERROR => {
                    waiting(&e);
                    std::thread::sleep(retry);
                }
                other => return other,
            }
        }
    }

    /// Append an entry, fsynced, before its batch is handed over.
    pub fn append(&mut self, entry: &Entry) -> Result<()> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(&self.next.to_be_bytes());
        let mut wb = WriteBatch::default();
        wb.put(key, entry.encode()?);
        self.store.commit(wb, Durability::Sync)?;
        self.next += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fjall_store::FjallStore;

    fn pos(parts: &[(i32, i64)]) -> Position {
        Position::of(parts)
    }

    fn entry(parts: &[(i32, i64)], after: Option<i64>) -> Entry {
        Entry {
            runs: Entry::runs_of(parts.iter().map(|(p, n)| (*p, n - 1))),
            before: None,
            after,
            position: pos(parts),
        }
    }

    #[test]
    fn a_full_disk_is_waited_out_and_nothing_is_lost() {
        let store = Arc::new(crate::state::store::testing::FullDisk::new());
        let mut j = Journal::fresh(store.clone(), 1, 2).unwrap();
        store.fail(3);
        let mut told = Vec::new();
        let e = entry(&[(0, 4)], Some(5));
        j.append_waiting(&e, std::time::Duration::from_millis(1), |err| {
            told.push(err.code)
        })
        .unwrap();
        assert_eq!(told, vec![sqlstate::DISK_FULL; 3]);
        let (_, replay) = Journal::resume(store, 1, 2, None, None).unwrap();
        assert_eq!(replay, vec![e]);
    }

    #[test]
    fn runs_group_consecutive_messages_of_a_partition() {
        let runs = Entry::runs_of([(0, 5), (0, 6), (1, 2), (0, 7)]);
        assert_eq!(
            runs,
            vec![
                Run {
                    partition: 0,
                    first: 5,
                    count: 2
                },
                Run {
                    partition: 1,
                    first: 2,
                    count: 1
                },
                Run {
                    partition: 0,
                    first: 7,
                    count: 1
                },
            ]
        );
    }

    #[test]
    fn a_checkpoint_covers_what_it_consumed_positions_and_watermark_moves() {
        let e = entry(&[(0, 10), (1, 4)], Some(100));
        assert!(e.covered_by(Some(&pos(&[(0, 10), (1, 4)])), Some(100)));
        assert!(e.covered_by(Some(&pos(&[(0, 12), (1, 4)])), Some(150)));
        assert!(!e.covered_by(Some(&pos(&[(0, 9), (1, 4)])), Some(150)));
        // a watermark move at the same position: consumed only if the watermark was
        assert!(!e.covered_by(Some(&pos(&[(0, 10), (1, 4)])), Some(99)));
        assert!(!e.covered_by(Some(&pos(&[(0, 10), (1, 4)])), None));
        assert!(!e.covered_by(None, Some(100)));
    }

    #[test]
    fn resume_replays_what_the_checkpoint_does_not_cover_and_prune_deletes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let mut j = Journal::fresh(store.clone(), 7, 3).unwrap();
        let entries = [
            entry(&[(0, 2)], Some(10)),
            entry(&[(0, 4)], Some(20)),
            entry(&[(0, 4)], Some(30)),
            entry(&[(0, 9)], Some(40)),
        ];
        for e in &entries {
            j.append(e).unwrap();
        }
        // another view's journal is not touched
        Journal::fresh(store.clone(), 8, 3)
            .unwrap()
            .append(&entries[0])
            .unwrap();
        let at = pos(&[(0, 4)]);
        let (mut j2, replay) = Journal::resume(store.clone(), 7, 3, Some(&at), Some(20)).unwrap();
        assert_eq!(replay, entries[2..].to_vec());
        // appends continue after the last entry
        j2.append(&entries[3]).unwrap();
        let mut wb = WriteBatch::default();
        prune(store.as_ref(), &prefix(7, 3), Some(&at), Some(20), &mut wb).unwrap();
        assert_eq!(wb.len(), 2);
        store.commit(wb, Durability::Sync).unwrap();
        let (_, replay) = Journal::resume(store.clone(), 7, 3, None, None).unwrap();
        assert_eq!(replay.len(), 3);
        // a damaged entry is reported with its key, never replayed
        let mut key = prefix(7, 3);
        key.extend_from_slice(&2u64.to_be_bytes());
        let mut wb = WriteBatch::default();
        wb.put(key, b"\x01{}garbage".to_vec());
        store.commit(wb, Durability::Sync).unwrap();
        let err = Journal::resume(store.clone(), 7, 3, None, None)
            .err()
            .unwrap();
        assert_eq!(err.code, sqlstate::DATA_CORRUPTED);
        assert!(err.message.contains("corrupt"), "{}", err.message);
        // a fresh instance starts an empty journal
        Journal::fresh(store.clone(), 7, 3).unwrap();
        let (_, replay) = Journal::resume(store, 7, 3, None, None).unwrap();
        assert!(replay.is_empty());
    }
}
