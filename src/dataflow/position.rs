//! Where a relation's input stands: what a checkpoint records so that recovery resumes each
//! input exactly after the last change the checkpointed state contains.
//!
//! One shape for every kind of input, as (partition, next) pairs:
//! - a table: partition 0, `next` = the last change-log sequence number delivered;
//! - a generator: partition 0, `next` = rows generated so far (the next row's index);
//! - a Kafka source: one pair per partition, `next` = the next offset to read, with the
//!   partition's largest event time (so the per-partition watermark resumes too).
//!
//! Every `Msg::Changes` carries the position *after* its batch; the dataflow worker keeps
//! the latest per relation, so at an epoch boundary it knows exactly what every view has
//! consumed.
//!
//! The positions a view *publishes* (what sinks record as their progress) also carry the
//! input's event-time watermark, as the pseudo-partition [`WATERMARK_PARTITION`] whose
//! `next` is the watermark: a Kafka source's watermark can move (partitions going idle)
//! without its offsets moving, and a sink's progress must tell those points apart. It
//! only moves forward, so `reached` and `max_with` treat it like an offset.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartPosition {
    pub partition: i32,
    pub next: i64,
    /// Largest event time seen in the partition (µs), for sources with a watermark.
    pub max_event_time: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position(pub Vec<PartPosition>);

/// See [`Position::stands_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stand {
    Before,
    At,
    Past,
}

/// Positions of a view's inputs, by catalog OID (what a sink's progress records).
pub type InputList = Vec<(u32, Position)>;

/// The pseudo-partition of a published position that holds the input's watermark.
pub const WATERMARK_PARTITION: i32 = i32::MIN;

impl Position {
    /// This position with the input's watermark as [`WATERMARK_PARTITION`] (if it has one).
    pub fn with_watermark(mut self, watermark: Option<i64>) -> Position {
        self.0.retain(|p| p.partition != WATERMARK_PARTITION);
        if let Some(w) = watermark {
            self.0.insert(
                0,
                PartPosition {
                    partition: WATERMARK_PARTITION,
                    next: w,
                    max_event_time: None,
                },
            );
        }
        self
    }

    /// A single-partition position (tables: log sequence; generators: rows generated).
    /// A position of (partition, next offset) pairs without event times.
    pub fn of(parts: &[(i32, i64)]) -> Position {
        Position(
            parts
                .iter()
                .map(|(partition, next)| PartPosition {
                    partition: *partition,
                    next: *next,
                    max_event_time: None,
                })
                .collect(),
        )
    }

    pub fn single(next: i64) -> Position {
        Position(vec![PartPosition {
            partition: 0,
            next,
            max_event_time: None,
        }])
    }

    /// The `next` of partition 0 (tables, generators).
    pub fn first(&self) -> Option<i64> {
        self.0.iter().find(|p| p.partition == 0).map(|p| p.next)
    }

    /// Fold a later position in: its partitions replace the same partitions here (a Kafka
    /// batch may cover only some partitions).
    pub fn merge(&mut self, later: &Position) {
        for p in &later.0 {
            match self.0.iter_mut().find(|q| q.partition == p.partition) {
                Some(q) => *q = *p,
                None => self.0.push(*p),
            }
        }
        self.0.sort_by_key(|p| p.partition);
    }
}

impl Position {
    /// Whether this position is at or past `target` in every partition `target` names.
    pub fn reached(&self, target: &Position) -> bool {
        target.0.iter().all(|t| {
            self.0
                .iter()
                .any(|p| p.partition == t.partition && p.next >= t.next)
        })
    }

    /// Where this position stands against `target` in the partitions `target` names:
    /// exactly at it, past it in some partition, or not there yet.
    pub fn stands_at(&self, target: &Position) -> Stand {
        let mut stand = Stand::At;
        for t in &target.0 {
            match self.0.iter().find(|p| p.partition == t.partition) {
                Some(p) if p.next == t.next => {}
                Some(p) if p.next > t.next => return Stand::Past,
                _ => stand = Stand::Before,
            }
        }
        stand
    }

    /// The later of two positions, partition by partition.
    pub fn max_with(&mut self, other: &Position) {
        for o in &other.0 {
            match self.0.iter_mut().find(|p| p.partition == o.partition) {
                Some(p) => {
                    if o.next > p.next {
                        *p = *o;
                    }
                }
                None => self.0.push(*o),
            }
        }
        self.0.sort_by_key(|p| p.partition);
    }
}

/// Whether positions of inputs (by catalog OID) reached `target` for every input it names
/// (an input no longer read counts as reached).
pub fn all_reached(now: &[(u32, Position)], target: &[(u32, Position)]) -> bool {
    target
        .iter()
        .all(|(rel, t)| match now.iter().find(|(r, _)| r == rel) {
            Some((_, p)) => p.reached(t),
            None => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_partitions_replace_earlier_ones() {
        let part = |partition, next| PartPosition {
            partition,
            next,
            max_event_time: None,
        };
        let mut p = Position(vec![part(0, 5), part(1, 7)]);
        p.merge(&Position(vec![part(1, 9), part(2, 1)]));
        assert_eq!(p, Position(vec![part(0, 5), part(1, 9), part(2, 1)]));
        assert_eq!(p.first(), Some(5));
        assert!(p.reached(&Position(vec![part(1, 9)])));
        assert!(!p.reached(&Position(vec![part(1, 10)])));
        assert!(!p.reached(&Position(vec![part(3, 0)])));
        let mut m = Position(vec![part(0, 9)]);
        m.max_with(&p);
        assert_eq!(m, Position(vec![part(0, 9), part(1, 9), part(2, 1)]));
    }

    #[test]
    fn a_published_position_orders_watermark_moves_at_the_same_offsets() {
        let part = |partition, next| PartPosition {
            partition,
            next,
            max_event_time: None,
        };
        let at = Position(vec![part(0, 5)]);
        let before = at.clone().with_watermark(Some(100));
        let after = at.clone().with_watermark(Some(200));
        assert_ne!(before, after);
        assert!(after.reached(&before) && !before.reached(&after));
        // replaced, not added twice; none without a watermark
        assert_eq!(before.clone().with_watermark(Some(200)), after);
        assert_eq!(after.clone().with_watermark(None), at);
        assert_eq!(before.first(), Some(5));
        assert_eq!(before.stands_at(&before), Stand::At);
        assert_eq!(before.stands_at(&after), Stand::Before);
        assert_eq!(after.stands_at(&before), Stand::Past);
    }
}
