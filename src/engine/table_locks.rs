//! Table write locks: one mutex per table (`TableStore::writer`), taken by every statement
//! that writes the table for as long as it reads and applies its rows, and by `LOCK TABLE`
//! until its transaction block ends.
//!
//! - A session that holds a table's lock (LOCK TABLE in its block) takes it again for free:
//!   its own statements on the table go on ([`lock_writer`] gives `None`).
//! - `LOCK TABLE` in SHARE, SHARE ROW EXCLUSIVE, EXCLUSIVE or ACCESS EXCLUSIVE mode (the
//!   modes that conflict with Postgres' ROW EXCLUSIVE, which writers take) holds the lock;
//!   ACCESS SHARE, ROW SHARE, ROW EXCLUSIVE and SHARE UPDATE EXCLUSIVE conflict with no
//!   writer and take nothing. Differences from Postgres: reads never wait (a query reads a
//!   snapshot), and two SHARE lockers exclude each other.
//! - Deadlocks: who holds and who waits for which lock is registered here; a session that
//!   is about to wait for a lock whose holder (or the holder of what that one waits for,
//!   and so on) is itself gets 40P01 instead of waiting forever. The session that closes a
//!   cycle is the one that sees it (each check and its registration happen under one
//!   mutex), as in Postgres one of the transactions is the victim.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::state::table::TableStore;

/// Who holds which table lock (by the mutex's address) and which lock each waiting session
/// (by its address) waits for.
#[derive(Default)]
struct Registry {
    holders: HashMap<usize, usize>,
    waiting: HashMap<usize, usize>,
}

static REGISTRY: std::sync::LazyLock<Mutex<Registry>> = std::sync::LazyLock::new(Default::default);

/// A held table lock; released (and unregistered) when dropped.
pub struct WriterLock {
    _guard: tokio::sync::OwnedMutexGuard<()>,
    key: usize,
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        REGISTRY.lock().holders.remove(&self.key);
    }
}

fn key_of(table: &TableStore) -> usize {
    Arc::as_ptr(&table.writer) as usize
}

fn session_key(session: &Session) -> usize {
    Arc::as_ptr(&session.interrupt) as usize
}

/// Whether the session holds the table's lock (LOCK TABLE).
fn holds(session: &Session, key: usize) -> bool {
    session.table_locks.iter().any(|l| l.key == key)
}

/// The table's write lock for one statement of `session`: `None` when the session holds it
/// already (LOCK TABLE). Waits as long as `lock_timeout` allows, and not for a lock whose
/// wait would close a cycle (40P01).
pub(crate) async fn lock_writer(
    session: &Session,
    table: &TableStore,
) -> Result<Option<WriterLock>> {
    let key = key_of(table);
    if holds(session, key) {
        return Ok(None);
    }
    acquire(session, table, false).await.map(Some)
}

/// The table's write lock for undoing `session`'s changes (ROLLBACK, a statement that
/// failed part way): `None` when the session holds it already (LOCK TABLE), else waited for
/// without a timeout (an undo does not give up).
pub(crate) async fn lock_for_undo(session: &Session, table: &TableStore) -> Option<WriterLock> {
    let key = key_of(table);
    if holds(session, key) {
        return None;
    }
    let g = table.writer.clone().lock_owned().await;
    REGISTRY.lock().holders.insert(key, session_key(session));
    Some(WriterLock { _guard: g, key })
}

async fn acquire(session: &Session, table: &TableStore, nowait: bool) -> Result<WriterLock> {
    let key = key_of(table);
    let me = session_key(session);
    if let Ok(g) = table.writer.clone().try_lock_owned() {
        REGISTRY.lock().holders.insert(key, me);
        return Ok(WriterLock { _guard: g, key });
    }
    if nowait {
        return Err(WeirError::new(
            sqlstate::LOCK_NOT_AVAILABLE,
            format!("could not obtain lock on relation \"{}\"", table.name()),
        ));
    }
    {
        let mut r = REGISTRY.lock();
        let mut at = key;
        // follow holder -> what it waits for -> its holder ... (each session waits for at
        // most one lock, so the chain is a path)
        for _ in 0..=r.waiting.len() {
            let Some(&holder) = r.holders.get(&at) else {
                break;
            };
            if holder == me {
                return Err(WeirError::new(
                    sqlstate::DEADLOCK_DETECTED,
                    "deadlock detected",
                )
                .with_detail(format!(
                    "Waiting to write table \"{}\" would wait for this transaction's own lock, through the sessions that wait for each other.",
                    table.name()
                ))
                .with_hint("See server log for query details."));
            }
            match r.waiting.get(&holder) {
                Some(&next) => at = next,
                None => break,
            }
        }
        r.waiting.insert(me, key);
    }
    let interrupt = session.interrupt.clone();
    let wait = async {
        tokio::select! {
            g = table.writer.clone().lock_owned() => Ok(g),
            _ = interrupt.cancelled() => Err(interrupt.error()),
        }
    };
    let got = match session.duration("lock_timeout") {
        None => wait.await,
        Some(limit) => match tokio::time::timeout(limit, wait).await {
            Ok(r) => r,
            Err(_) => Err(WeirError::new(
                sqlstate::LOCK_NOT_AVAILABLE,
                format!(
                    "canceling statement due to lock timeout (waiting to write table \"{}\")",
                    table.name()
                ),
            )),
        },
    };
    let mut r = REGISTRY.lock();
    r.waiting.remove(&me);
    let g = got?;
    r.holders.insert(key, me);
    Ok(WriterLock { _guard: g, key })
}

/// `LOCK [TABLE] name [, ...] [IN mode MODE] [NOWAIT]` in a transaction block: the locks of
/// the modes that exclude writers, held by the session until the block ends.
pub(crate) async fn lock_tables(
    session: &mut Session,
    tables: &[Arc<TableStore>],
    excludes_writers: bool,
    nowait: bool,
) -> Result<()> {
    if !excludes_writers {
        return Ok(());
    }
    for t in tables {
        if holds(session, key_of(t)) {
            continue;
        }
        let l = acquire(session, t, nowait).await?;
        session.table_locks.push(l);
    }
    Ok(())
}
