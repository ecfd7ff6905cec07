//! A view's backfill reader of a Kafka source: it reads the topic's history for a view
//! created after the source's shared reader started, hands over only what the shared
//! reader has handed over already (a message at or past the shared reader's offset in its
//! partition is held back, and a partition with many held messages is paused), and joins
//! the shared reader once both stand at the same offsets (protocol in
//! `connectors/shared.rs`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::TopicPartitionList;

use super::poll::{Instance, Pending, SourceContext};
use super::replay::Held;
use super::target::Target;
use crate::connectors::runner::wait_for_views;
use crate::connectors::shared::{
    HANDOFF_LAG, HANDOFF_TIMEOUT, Handoff, SharedReader, deliverable, joinable, lag,
};
use crate::dataflow::position::Position;

/// Held messages of a partition past which it is paused.
const PAUSE_AT: usize = 2048;

pub(super) struct Backfill {
    shared: Arc<SharedReader>,
    view: (u32, String),
    held: BTreeMap<i32, VecDeque<Held>>,
    paused: BTreeSet<i32>,
    /// Where the shared reader stopped for this reader's handoff, and since when.
    handoff: Option<(Position, Instant)>,
    /// What may be handed over: everything below this.
    bound: Position,
}

impl Backfill {
    pub(super) fn new(shared: Arc<SharedReader>, view: (u32, String)) -> Backfill {
        let bound = shared.bound();
        Backfill {
            shared,
            view,
            held: BTreeMap::new(),
            paused: BTreeSet::new(),
            handoff: None,
            bound,
        }
    }

    /// A message read: to `pending` when the shared reader has handed it over already
    /// (and nothing earlier of its partition is held), held otherwise.
    pub(super) fn offer(
        &mut self,
        m: &rdkafka::message::BorrowedMessage<'_>,
        pending: &mut Pending,
    ) {
        let (p, o) = (m.partition(), m.offset());
        let clear = self.held.get(&p).is_none_or(|q| q.is_empty());
        if clear && deliverable(&self.bound, p, o) {
            pending.push(m);
        } else {
            self.held.entry(p).or_default().push_back(Held::of(m));
        }
    }

    /// Messages read ahead of a journal replay.
    pub(super) fn hold_all(&mut self, partition: i32, messages: VecDeque<Held>) {
        self.held.entry(partition).or_default().extend(messages);
    }

    /// Take the shared reader's position now (unless a handoff fixed it), hand held
    /// messages it has passed to `pending`, and pause or resume partitions by what is held.
    fn release(
        &mut self,
        pending: &mut Pending,
        consumer: &BaseConsumer<SourceContext>,
        topic: &str,
    ) {
        if self.handoff.is_none() {
            self.bound = self.shared.bound();
        }
        for (p, q) in self.held.iter_mut() {
            while q
                .front()
                .is_some_and(|h| deliverable(&self.bound, *p, h.offset))
            {
                if let Some(h) = q.pop_front() {
                    pending.push_parts(
                        *p,
                        h.offset,
                        h.key.as_deref(),
                        h.value.as_deref(),
                        h.timestamp,
                    );
                }
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(topic, *p);
            if q.len() >= PAUSE_AT && self.paused.insert(*p) {
                let _ = consumer.pause(&tpl);
            } else if q.is_empty() && self.paused.remove(p) {
                let _ = consumer.resume(&tpl);
            }
        }
    }

    fn held_from(&self, partition: i32) -> Option<i64> {
        self.held
            .get(&partition)
            .and_then(|q| q.front())
            .map(|h| h.offset)
    }
}

impl Instance {
    /// One step of a backfill reader after a poll burst: hand over what the shared reader
    /// has passed; close to it, ask for the handoff; at its position, join it. True once
    /// joined (the reader's work is done).
    pub(super) fn backfill_step(
        &mut self,
        pending: &mut Pending,
        consumer: &BaseConsumer<SourceContext>,
        topic: &str,
    ) -> std::result::Result<bool, String> {
        if self.replay.is_some() {
            return Ok(false);
        }
        let Some(mut b) = self.backfill.take() else {
            return Ok(false);
        };
        let joined = self.backfill_with(&mut b, pending, consumer, topic);
        self.backfill = Some(b);
        joined
    }

    fn backfill_with(
        &mut self,
        b: &mut Backfill,
        pending: &mut Pending,
        consumer: &BaseConsumer<SourceContext>,
        topic: &str,
    ) -> std::result::Result<bool, String> {
        b.release(pending, consumer, topic);
        let Target::View { tx, instance } = &self.target else {
            return Ok(false);
        };
        let (tx, instance) = (tx.clone(), *instance);
        match b.handoff.clone() {
            None => {
                if lag(&self.position(), &b.bound) <= HANDOFF_LAG
                    && let Handoff::At(p) = b.shared.handoff(instance, b.view.clone())
                {
                    tracing::debug!(source = %self.source, view = %self.view, at = ?p, "backfill: the shared reader stopped for the handoff");
                    b.bound = p.clone();
                    b.handoff = Some((p, Instant::now()));
                }
                Ok(false)
            }
            Some((at, since)) => {
                if !pending.meta.is_empty() {
                    self.hand_over(pending, None)?;
                }
                if joinable(&self.position(), &at, |p| b.held_from(p)) {
                    if !wait_for_views(&tx) {
                        return Err("the dataflow worker has stopped".into());
                    }
                    if b.shared.ready(&tx, instance, b.view.clone()) {
                        tracing::info!(source = %self.source, view = %self.view, rows = self.rows, "backfill done: the view reads the source's shared reader");
                        return Ok(true);
                    }
                    b.handoff = None;
                } else if since.elapsed() >= HANDOFF_TIMEOUT {
                    b.shared.withdraw(instance);
                    b.handoff = None;
                }
                Ok(false)
            }
        }
    }
}
