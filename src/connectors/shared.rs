//! One reader per source. A connector source (Kafka topic, generator) is read and decoded
//! by ONE reader, whatever the number of views over it: the reader hands its batches to the
//! dataflow under a relation id of its own, and the worker fans each batch out to every
//! view that has joined it (`worker.rs`), so all those views stand at the same position
//! between two epochs, and a checkpoint records the source's position once.
//!
//! A view created while the reader runs, over a source whose startup mode reaches back
//! (`earliest`, `timestamp`, a generator's event 0), first reads the source's history with
//! a backfill reader of its own (RisingWave's shared-source backfill works this way), then
//! joins the shared reader, with no gap and no overlap:
//!
//! 1. the backfill reader never hands over what the shared reader has not handed over yet:
//!    a message at or past the shared reader's published position is held back;
//! 2. close to the shared reader (or at it), it asks for a handoff: the shared reader stops
//!    between two batches and says where it stands (P);
//! 3. the backfill reader reads exactly up to P (every message below P, none at or past
//!    it) and says so;
//! 4. the shared reader sends `Msg::Join` for the view's instance — after its own batches
//!    up to P and after the backfill reader's (they are in the queue before) — and goes
//!    on; the worker fans every later batch out to that view too.
//!
//! A handoff the backfill reader cannot finish in `HANDOFF_TIMEOUT` is abandoned (the
//! shared reader goes on, the backfill reader tries again later). A shared reader that ends
//! (bounded generator, failure) leaves its last position: a backfill reader reads up to it
//! and sends the join itself (nothing else comes from the shared reader).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::mpsc;

use crate::dataflow::position::Position;
use crate::dataflow::runtime::Msg;

/// How long a shared reader waits, stopped, for a backfill reader to reach it.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);
/// A backfill reader asks for the handoff once it is this many messages (rows) behind.
pub const HANDOFF_LAG: i64 = 4_096;

/// The coordination point of a source's shared reader (see the module header).
pub struct SharedReader {
    pub source_oid: u32,
    pub source_name: String,
    /// The relation id the reader's batches are sent under.
    pub relation: u32,
    state: Mutex<State>,
    changed: Condvar,
    /// A handoff was asked for (checked between batches without the lock).
    requested: AtomicBool,
    /// Views reading through it, (OID, name), for `weir_sources`.
    pub views: Mutex<Vec<(u32, String)>>,
    /// Restored at start from the checkpoint's position of the source (views restored as
    /// joined may join it at once).
    pub restored: bool,
}

#[derive(Default)]
struct State {
    /// Where the reader stands after the last batch it handed over.
    position: Position,
    requests: Vec<Request>,
    /// Stopped for a handoff.
    paused: bool,
    /// The reader has ended: its position is final.
    finished: bool,
}

struct Request {
    instance: u32,
    view: (u32, String),
    /// The backfill reader is at the paused position.
    ready: bool,
    /// Joined (the shared reader sent the join) or given up.
    gone: bool,
}

/// What a backfill reader learns when it asks for a handoff.
pub enum Handoff {
    /// The shared reader is stopped (or has ended) here.
    At(Position),
    /// Nothing yet: ask again later.
    NotYet,
}

impl SharedReader {
    pub fn new(
        source_oid: u32,
        source_name: String,
        relation: u32,
        at: Position,
        restored: bool,
    ) -> SharedReader {
        SharedReader {
            source_oid,
            source_name,
            relation,
            state: Mutex::new(State {
                position: at,
                ..Default::default()
            }),
            changed: Condvar::new(),
            requested: AtomicBool::new(false),
            views: Mutex::new(Vec::new()),
            restored,
        }
    }

    // ---- the shared reader's side ----

    /// A batch up to `position` is in the dataflow's queue.
    pub fn published(&self, position: &Position) {
        let mut s = self.state.lock();
        s.position.merge(position);
    }

    /// Between two batches: serve the handoffs asked for (see the module header). False
    /// when the dataflow worker is gone.
    pub fn serve(&self, tx: &mpsc::Sender<Msg>, stop: &AtomicBool) -> bool {
        if !self.requested.load(Ordering::Acquire) {
            return true;
        }
        let mut s = self.state.lock();
        s.paused = true;
        self.changed.notify_all();
        let deadline = Instant::now() + HANDOFF_TIMEOUT;
        while s.requests.iter().any(|r| !r.ready && !r.gone)
            && Instant::now() < deadline
            && !stop.load(Ordering::Acquire)
        {
            self.changed.wait_for(&mut s, Duration::from_millis(50));
        }
        let ok = self.join_ready(&mut s, tx);
        // the ones not ready in time try again later
        for r in s.requests.iter_mut() {
            r.gone = true;
        }
        s.requests.clear();
        s.paused = false;
        self.requested.store(false, Ordering::Release);
        self.changed.notify_all();
        ok
    }

    /// The reader ends: later handoffs take its last position as final.
    pub fn finish(&self, tx: &mpsc::Sender<Msg>) {
        let mut s = self.state.lock();
        let _ = self.join_ready(&mut s, tx);
        s.finished = true;
        self.changed.notify_all();
    }

    fn join_ready(&self, s: &mut State, tx: &mpsc::Sender<Msg>) -> bool {
        let mut ok = true;
        for r in s.requests.iter_mut().filter(|r| r.ready && !r.gone) {
            ok &= self.send_join(tx, r.instance, &s.position);
            self.views.lock().push(r.view.clone());
            r.gone = true;
        }
        s.requests.retain(|r| !r.gone);
        ok
    }

    fn send_join(&self, tx: &mpsc::Sender<Msg>, instance: u32, at: &Position) -> bool {
        tx.blocking_send(Msg::Join {
            shared: self.relation,
            source: self.source_oid,
            instance,
            position: at.clone(),
        })
        .is_ok()
    }

    // ---- a backfill reader's side ----

    /// What the backfill reader may hand over: everything below this.
    pub fn bound(&self) -> Position {
        self.state.lock().position.clone()
    }

    /// Ask for a handoff (once), and see whether the shared reader has stopped for it.
    pub fn handoff(&self, instance: u32, view: (u32, String)) -> Handoff {
        let mut s = self.state.lock();
        if !s.requests.iter().any(|r| r.instance == instance) && !s.finished {
            s.requests.push(Request {
                instance,
                view,
                ready: false,
                gone: false,
            });
            self.requested.store(true, Ordering::Release);
        }
        if s.paused || s.finished {
            Handoff::At(s.position.clone())
        } else {
            Handoff::NotYet
        }
    }

    /// The backfill reader has handed over everything below the position its handoff
    /// gave: wait until the join is sent. False when the handoff was given up (the shared
    /// reader went on: read on and ask again).
    pub fn ready(&self, tx: &mpsc::Sender<Msg>, instance: u32, view: (u32, String)) -> bool {
        let mut s = self.state.lock();
        if s.finished {
            // nothing else comes from the shared reader: the join is ours to send
            let at = s.position.clone();
            drop(s);
            let sent = self.send_join(tx, instance, &at);
            self.views.lock().push(view);
            return sent;
        }
        let Some(r) = s.requests.iter_mut().find(|r| r.instance == instance) else {
            return false;
        };
        r.ready = true;
        self.changed.notify_all();
        loop {
            if !s.requests.iter().any(|r| r.instance == instance) {
                // served: joined when the shared reader was still paused for it
                return self.views.lock().iter().any(|v| v.0 == view.0);
            }
            self.changed.wait_for(&mut s, Duration::from_millis(50));
        }
    }

    /// The backfill reader stops (its view dropped) or gives up on a handoff.
    pub fn withdraw(&self, instance: u32) {
        let mut s = self.state.lock();
        s.requests.retain(|r| r.instance != instance);
        self.changed.notify_all();
    }

    /// A view stops reading through the reader.
    pub fn leave(&self, view: u32) {
        self.views.lock().retain(|v| v.0 != view);
    }
}

/// Whether a backfill reader may hand over a message: the shared reader is past it.
pub fn deliverable(bound: &Position, partition: i32, offset: i64) -> bool {
    bound
        .0
        .iter()
        .any(|p| p.partition == partition && p.next >= 0 && offset < p.next)
}

/// Whether a backfill reader standing at `backfill` has handed over exactly what the shared
/// reader standing at `shared` has: per partition the same next offset, or nothing between
/// them (`held_from`: the first offset the backfill reader read and holds there). A
/// partition the shared reader has not started must be untouched by the backfill reader.
pub fn joinable(
    backfill: &Position,
    shared: &Position,
    held_from: impl Fn(i32) -> Option<i64>,
) -> bool {
    let next = |p: &Position, part: i32| p.0.iter().find(|q| q.partition == part).map(|q| q.next);
    let mut parts: Vec<i32> = backfill
        .0
        .iter()
        .chain(shared.0.iter())
        .map(|p| p.partition)
        .collect();
    parts.sort_unstable();
    parts.dedup();
    parts.into_iter().all(|part| {
        let (b, s) = (next(backfill, part), next(shared, part));
        match s {
            _ if b == s => true,
            Some(s) if s >= 0 => b.unwrap_or(-1) < s && held_from(part).is_some_and(|h| h >= s),
            // not started by the shared reader: the backfill reader has handed over nothing
            _ => b.is_none_or(|b| b <= 0),
        }
    })
}

/// How far (messages, rows) a backfill reader is behind the shared reader.
pub fn lag(backfill: &Position, shared: &Position) -> i64 {
    shared
        .0
        .iter()
        .filter(|s| s.next >= 0)
        .map(|s| {
            let b = backfill
                .0
                .iter()
                .find(|b| b.partition == s.partition)
                .map_or(0, |b| b.next.max(0));
            (s.next - b).max(0)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(parts: &[(i32, i64)]) -> Position {
        Position::of(parts)
    }

    #[test]
    fn a_backfill_hands_over_only_what_the_shared_reader_has() {
        let bound = pos(&[(0, 10), (1, -1)]);
        assert!(deliverable(&bound, 0, 9));
        assert!(!deliverable(&bound, 0, 10));
        assert!(
            !deliverable(&bound, 1, 0),
            "not started by the shared reader"
        );
        assert!(
            !deliverable(&bound, 2, 0),
            "not assigned by the shared reader"
        );
    }

    #[test]
    fn a_backfill_joins_exactly_at_the_shared_position() {
        let shared = pos(&[(0, 10), (1, 5)]);
        assert!(joinable(&pos(&[(0, 10), (1, 5)]), &shared, |_| None));
        assert!(!joinable(&pos(&[(0, 9), (1, 5)]), &shared, |_| None));
        // a gap in the offsets (a transaction marker): the next message it holds is past
        assert!(joinable(&pos(&[(0, 8), (1, 5)]), &shared, |p| (p == 0).then_some(11)));
        assert!(!joinable(&pos(&[(0, 8), (1, 5)]), &shared, |p| (p == 0).then_some(9)));
        // ahead of the shared reader (restored from a checkpoint cut between the two)
        assert!(!joinable(&pos(&[(0, 12), (1, 5)]), &shared, |_| None));
        // a partition the shared reader has not started
        assert!(joinable(&pos(&[(0, 10), (1, 5), (2, 0)]), &shared, |_| {
            None
        }));
        assert!(!joinable(&pos(&[(0, 10), (1, 5), (2, 3)]), &shared, |_| {
            None
        }));
        // one it has that the backfill reader has not assigned yet
        assert!(!joinable(&pos(&[(0, 10)]), &shared, |_| None));
        assert_eq!(lag(&pos(&[(0, 4)]), &shared), 6 + 5);
    }

    #[test]
    fn a_handoff_stops_the_shared_reader_until_the_backfill_is_ready() {
        let (tx, mut rx) = mpsc::channel(16);
        let shared =
            std::sync::Arc::new(SharedReader::new(1, "s".into(), 7, pos(&[(0, 3)]), false));
        assert!(matches!(
            shared.handoff(9, (100, "v".into())),
            Handoff::NotYet
        ));
        let stop = AtomicBool::new(false);
        let reader = {
            let (shared, tx) = (shared.clone(), tx.clone());
            std::thread::spawn(move || {
                let stop = AtomicBool::new(false);
                assert!(shared.serve(&tx, &stop));
                // goes on after the join
                shared.published(&pos(&[(0, 20)]));
            })
        };
        let at = loop {
            if let Handoff::At(p) = shared.handoff(9, (100, "v".into())) {
                break p;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(at, pos(&[(0, 3)]));
        assert!(shared.ready(&tx, 9, (100, "v".into())));
        reader.join().unwrap();
        match rx.try_recv() {
            Ok(Msg::Join {
                shared: 7,
                instance: 9,
                position,
                ..
            }) => assert_eq!(position, pos(&[(0, 3)])),
            _ => panic!("expected a join"),
        }
        assert_eq!(shared.views.lock().len(), 1);
        assert!(shared.serve(&tx, &stop), "nothing asked: goes on at once");
    }

    #[test]
    fn a_finished_shared_reader_lets_the_backfill_join_by_itself() {
        let (tx, mut rx) = mpsc::channel(16);
        let shared = SharedReader::new(1, "s".into(), 7, pos(&[(0, 0)]), false);
        shared.published(&pos(&[(0, 50)]));
        shared.finish(&tx);
        let Handoff::At(at) = shared.handoff(9, (100, "v".into())) else {
            panic!("a finished reader is at its end");
        };
        assert_eq!(at, pos(&[(0, 50)]));
        assert!(shared.ready(&tx, 9, (100, "v".into())));
        assert!(matches!(rx.try_recv(), Ok(Msg::Join { instance: 9, .. })));
    }
}
