//! Re-forming journaled batches after a restore (see `dataflow/journal.rs`). A restored
//! instance resumes at its checkpointed offsets; the messages it reads are held per
//! partition until every message of the next journal entry is there, then handed over as
//! exactly that batch, in the recorded order, with the recorded watermarks. When the
//! journal is used up, the messages read ahead become the first ordinary batch.
//!
//! If the topic no longer holds what the journal names (retention deleted it, or the topic
//! was recreated), the replay stops with a warning and the rest is batched as it comes:
//! late decisions after that point may differ from before the crash.

use std::collections::{BTreeMap, VecDeque};

use rdkafka::message::Message;
use tracing::{info, warn};

use super::poll::{Instance, Pending};
use crate::dataflow::journal::Entry;

/// A message read ahead of its journal entry (or, backfilling, of the shared reader).
pub(super) struct Held {
    pub(super) offset: i64,
    pub(super) key: Option<Vec<u8>>,
    pub(super) value: Option<Vec<u8>>,
    pub(super) timestamp: Option<i64>,
}

impl Held {
    pub(super) fn of(m: &rdkafka::message::BorrowedMessage<'_>) -> Held {
        Held {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            timestamp: m.timestamp().to_millis(),
        }
    }
}

pub(super) struct Replay {
    entries: VecDeque<Entry>,
    held: BTreeMap<i32, VecDeque<Held>>,
}

enum Next {
    /// The entry's messages are in `pending`.
    Ready(Entry),
    Waiting,
    Diverged(String),
}

/// The first journaled offset of each partition.
pub(super) fn first_offsets(entries: &[Entry]) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for r in entries.iter().flat_map(|e| e.runs.iter()) {
        out.entry(r.partition).or_insert(r.first);
    }
    out
}

impl Replay {
    /// None when there is nothing to replay.
    pub(super) fn new(entries: Vec<Entry>) -> Option<Replay> {
        (!entries.is_empty()).then(|| Replay {
            entries: entries.into(),
            held: BTreeMap::new(),
        })
    }

    pub(super) fn hold(&mut self, m: &rdkafka::message::BorrowedMessage<'_>) {
        self.held
            .entry(m.partition())
            .or_default()
            .push_back(Held::of(m));
    }

    /// Move the next entry's messages into `pending` once they are all held.
    fn next(&mut self, pending: &mut Pending) -> Next {
        let Some(entry) = self.entries.front() else {
            return Next::Waiting;
        };
        // every run must start where the journal says; a run with too few messages so far
        // waits for more
        let mut taken: BTreeMap<i32, usize> = BTreeMap::new();
        let mut complete = true;
        for r in &entry.runs {
            let at = taken.entry(r.partition).or_default();
            let q = self.held.get(&r.partition);
            match q.and_then(|q| q.get(*at)) {
                Some(h) if h.offset != r.first => {
                    return Next::Diverged(format!(
                        "partition {} has offset {} where the journal has {}",
                        r.partition, h.offset, r.first
                    ));
                }
                Some(_) => {}
                None => complete = false,
            }
            *at += r.count as usize;
            if q.is_none_or(|q| q.len() < *at) {
                complete = false;
            }
        }
        if !complete {
            return Next::Waiting;
        }
        for r in &entry.runs {
            if let Some(q) = self.held.get_mut(&r.partition) {
                for h in q.drain(..r.count as usize) {
                    pending.push_parts(
                        r.partition,
                        h.offset,
                        h.key.as_deref(),
                        h.value.as_deref(),
                        h.timestamp,
                    );
                }
            }
        }
        match self.entries.pop_front() {
            Some(e) => Next::Ready(e),
            None => Next::Waiting,
        }
    }

    /// Hand the messages read ahead of the journal to `pending`, partition by partition
    /// (backfilling: to the backfill's hold, which hands them on as the shared reader
    /// passes them).
    fn release_to(self, pending: &mut Pending, backfill: Option<&mut super::backfill::Backfill>) {
        if let Some(b) = backfill {
            for (p, q) in self.held {
                b.hold_all(p, q);
            }
            return;
        }
        self.release(pending)
    }

    fn release(self, pending: &mut Pending) {
        for (p, q) in self.held {
            for h in q {
                pending.push_parts(
                    p,
                    h.offset,
                    h.key.as_deref(),
                    h.value.as_deref(),
                    h.timestamp,
                );
            }
        }
    }
}

impl Instance {
    /// Hand over every journaled batch whose messages have been read; end the replay when
    /// the journal is used up, or when the topic does not hold what it names (`drained`:
    /// the last poll found nothing more to read).
    pub(super) fn replay_journal(
        &mut self,
        pending: &mut Pending,
        drained: bool,
    ) -> std::result::Result<(), String> {
        loop {
            let Some(replay) = self.replay.as_mut() else {
                return Ok(());
            };
            if replay.entries.is_empty() {
                if let Some(r) = self.replay.take() {
                    r.release_to(pending, self.backfill.as_mut());
                }
                info!(source = %self.source, view = %self.view, "input journal replayed");
                return Ok(());
            }
            let diverged = match replay.next(pending) {
                Next::Ready(entry) => {
                    if entry.runs.is_empty() {
                        self.watermark = entry.after;
                        self.send_watermark(entry.before)?;
                    } else {
                        self.hand_over(pending, Some(&entry))?;
                    }
                    continue;
                }
                Next::Diverged(why) => why,
                Next::Waiting => {
                    let all_read = drained
                        && !self.partitions.is_empty()
                        && self.partitions.values().all(|p| p.at_end.is_some());
                    if !all_read {
                        return Ok(());
                    }
                    "every partition was read to its end without the messages it names".into()
                }
            };
            warn!(
                source = %self.source,
                view = %self.view,
                reason = %diverged,
                "the topic no longer matches the input journal; batching as messages come (late decisions after this point may differ from before the restart)"
            );
            if let Some(r) = self.replay.take() {
                r.release_to(pending, self.backfill.as_mut());
            }
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::journal::Run;
    use crate::dataflow::position::Position;

    fn held(offsets: &[i64]) -> VecDeque<Held> {
        offsets
            .iter()
            .map(|o| Held {
                offset: *o,
                key: None,
                value: Some(o.to_string().into_bytes()),
                timestamp: None,
            })
            .collect()
    }

    fn entry(runs: &[(i32, i64, u32)]) -> Entry {
        Entry {
            runs: runs
                .iter()
                .map(|(partition, first, count)| Run {
                    partition: *partition,
                    first: *first,
                    count: *count,
                })
                .collect(),
            before: None,
            after: None,
            position: Position::default(),
        }
    }

    #[test]
    fn batches_are_re_formed_in_the_recorded_order_once_complete() {
        let mut r = Replay::new(vec![
            entry(&[(0, 5, 2), (1, 0, 1), (0, 7, 1)]),
            entry(&[(1, 1, 1)]),
        ])
        .unwrap();
        let mut pending = Pending::default();
        r.held.insert(0, held(&[5, 6]));
        r.held.insert(1, held(&[0, 1]));
        assert!(matches!(r.next(&mut pending), Next::Waiting));
        assert!(pending.meta.is_empty());
        r.held.get_mut(&0).unwrap().extend(held(&[7, 8]));
        assert!(matches!(r.next(&mut pending), Next::Ready(_)));
        let order: Vec<(i32, i64)> = pending
            .meta
            .iter()
            .map(|m| (m.partition, m.offset))
            .collect();
        assert_eq!(order, vec![(0, 5), (0, 6), (1, 0), (0, 7)]);
        pending.clear();
        assert!(matches!(r.next(&mut pending), Next::Ready(_)));
        assert_eq!(pending.meta.len(), 1);
        pending.clear();
        // what was read past the journal becomes the next ordinary batch
        r.release(&mut pending);
        let rest: Vec<(i32, i64)> = pending
            .meta
            .iter()
            .map(|m| (m.partition, m.offset))
            .collect();
        assert_eq!(rest, vec![(0, 8)]);
        assert_eq!(pending.slice(pending.meta[0].value), Some(&b"8"[..]));
    }

    #[test]
    fn a_topic_that_no_longer_holds_the_journaled_messages_is_noticed() {
        let mut r = Replay::new(vec![entry(&[(0, 5, 2)])]).unwrap();
        r.held.insert(0, held(&[9]));
        let mut pending = Pending::default();
        assert!(matches!(r.next(&mut pending), Next::Diverged(_)));
        assert_eq!(
            first_offsets(&r.entries.iter().cloned().collect::<Vec<_>>()).get(&0),
            Some(&5)
        );
    }
}
