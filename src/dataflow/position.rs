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

impl Position {
    /// A single-partition position (tables: log sequence; generators: rows generated).
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
    }
}
