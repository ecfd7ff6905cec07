//! Postgres' advisory locks: `pg_advisory_lock(key)` and its family, the locks migration
//! tools (Prisma, Rails, golang-migrate, Flyway) take so that two of them never run at once.
//!
//! A lock is named by a `bigint` or by two `integer`s (two separate spaces, as in Postgres)
//! and held exclusive or shared, at session level (until unlocked, or the connection ends)
//! or at transaction level (`pg_advisory_xact_lock`: until the transaction ends; a
//! statement outside a block is its own transaction). A session's own locks never conflict
//! with each other, and a session-level lock taken twice is released by two unlocks, as in
//! Postgres. `pg_advisory_lock` waits (in 10 ms steps) until the lock is free, or the
//! statement is cancelled or times out (57014); the `pg_try_` forms answer at once.
//!
//! Differences: no deadlock detection (two sessions waiting on each other wait until a
//! statement_timeout or cancel); `pg_advisory_unlock` of a lock not held answers false
//! without Postgres' WARNING; `pg_locks` lists the locks held (granted), not the waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, NullArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;
use parking_lot::Mutex;

/// A lock's name: which space (one bigint, or two integers) and the key in it.
type Key = (u8, i64);

/// How long a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Level {
    Session,
    Transaction,
}

/// Who holds a lock, and how many times: (session, level) → count, per mode.
#[derive(Default)]
struct Holders {
    exclusive: HashMap<(u64, Level), u32>,
    shared: HashMap<(u64, Level), u32>,
}

impl Holders {
    fn is_empty(&self) -> bool {
        self.exclusive.is_empty() && self.shared.is_empty()
    }

    /// Whether `session` may take the lock in this mode: nobody else holds it exclusive,
    /// and for exclusive nobody else holds it shared.
    fn allows(&self, session: u64, exclusive: bool) -> bool {
        let others = |m: &HashMap<(u64, Level), u32>| m.keys().any(|(s, _)| *s != session);
        !others(&self.exclusive) && (!exclusive || !others(&self.shared))
    }
}

static LOCKS: LazyLock<Mutex<HashMap<Key, Holders>>> = LazyLock::new(Default::default);
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// A new session's name as a lock holder.
pub fn new_holder() -> u64 {
    NEXT_SESSION.fetch_add(1, Ordering::Relaxed)
}

/// The backend pid of each client session's holder name (for `pg_locks`).
static PIDS: LazyLock<Mutex<HashMap<u64, i32>>> = LazyLock::new(Default::default);

/// `holder` is the session of the connection with this backend pid.
pub fn set_pid(holder: u64, pid: i32) {
    PIDS.lock().insert(holder, pid);
}

/// The advisory locks held now, per holding connection, as `pg_locks` shows them.
pub struct Listing;

impl crate::catalog::LockListing for Listing {
    fn held(&self) -> Vec<crate::catalog::HeldLock> {
        let pids = PIDS.lock().clone();
        let locks = LOCKS.lock();
        let mut out = Vec::new();
        for ((space, k), h) in locks.iter() {
            let key = match space {
                1 => ((*k >> 32) as u32, *k as u32, 1),
                _ => ((*k >> 32) as u32, *k as u32, 2),
            };
            for (mode, holders) in [("ExclusiveLock", &h.exclusive), ("ShareLock", &h.shared)] {
                // (a session holding it at both levels, or several times, is one row)
                let mut sessions: Vec<u64> = holders.keys().map(|(s, _)| *s).collect();
                sessions.sort_unstable();
                sessions.dedup();
                for s in sessions {
                    if let Some(pid) = pids.get(&s) {
                        out.push(crate::catalog::HeldLock {
                            pid: *pid,
                            locktype: "advisory",
                            key,
                            mode,
                        });
                    }
                }
            }
        }
        out.sort_by_key(|l| (l.pid, l.key));
        out
    }
}

fn try_lock(session: u64, key: Key, exclusive: bool, level: Level) -> bool {
    let mut locks = LOCKS.lock();
    let holders = locks.entry(key).or_default();
    if !holders.allows(session, exclusive) {
        return false;
    }
    let mode = if exclusive {
        &mut holders.exclusive
    } else {
        &mut holders.shared
    };
    *mode.entry((session, level)).or_insert(0) += 1;
    true
}

/// One session-level hold released; false when there was none.
fn unlock(session: u64, key: Key, exclusive: bool) -> bool {
    let mut locks = LOCKS.lock();
    let Some(holders) = locks.get_mut(&key) else {
        return false;
    };
    let mode = if exclusive {
        &mut holders.exclusive
    } else {
        &mut holders.shared
    };
    let released = match mode.get_mut(&(session, Level::Session)) {
        Some(n) if *n > 1 => {
            *n -= 1;
            true
        }
        Some(_) => {
            mode.remove(&(session, Level::Session));
            true
        }
        None => false,
    };
    if holders.is_empty() {
        locks.remove(&key);
    }
    released
}

/// Every lock `session` holds at `level` (all levels: `None`) released.
fn release(session: u64, level: Option<Level>) {
    let mut locks = LOCKS.lock();
    locks.retain(|_, h| {
        let mine = |(s, l): &(u64, Level)| *s == session && level.is_none_or(|x| x == *l);
        h.exclusive.retain(|k, _| !mine(k));
        h.shared.retain(|k, _| !mine(k));
        !h.is_empty()
    });
}

/// The transaction of `session` ended: its transaction-level locks go.
pub fn transaction_ended(session: u64) {
    release(session, Some(Level::Transaction));
}

/// The connection of `session` ended: every lock it held goes.
pub fn session_ended(session: u64) {
    release(session, None);
    PIDS.lock().remove(&session);
}

/// The lock keys of a call's rows: one bigint, or two integers.
fn keys(args: &[ColumnarValue], rows: usize) -> DfResult<Vec<Option<Key>>> {
    let arrays: Vec<ArrayRef> = args
        .iter()
        .map(|a| {
            a.to_array(rows)
                .and_then(|a| Ok(cast(&a, &DataType::Int64)?))
        })
        .collect::<DfResult<_>>()?;
    let ints = |a: &ArrayRef, i: usize| -> Option<i64> {
        let p = a
            .as_any()
            .downcast_ref::<datafusion::arrow::array::PrimitiveArray<Int64Type>>()?;
        (!p.is_null(i)).then(|| p.value(i))
    };
    Ok((0..rows)
        .map(|i| match arrays.as_slice() {
            [k] => ints(k, i).map(|k| (1, k)),
            [a, b] => {
                let (a, b) = (ints(a, i)?, ints(b, i)?);
                Some((2, ((a as i32 as i64) << 32) | (b as i32 as u32 as i64)))
            }
            _ => None,
        })
        .collect())
}

/// The number of rows of a call (1 for all-constant arguments).
use crate::sql::pg_functions::rows_of;

fn result(args: &[ColumnarValue], out: ArrayRef) -> DfResult<ColumnarValue> {
    Ok(
        if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        },
    )
}

/// Register the advisory lock functions of `session`; `check` says whether its statement
/// was cancelled or timed out (a waiting lock stops there).
pub fn register(
    ctx: &SessionContext,
    session: u64,
    check: Arc<dyn Fn() -> crate::error::Result<()> + Send + Sync>,
) {
    let signature = || {
        Signature::one_of(
            vec![TypeSignature::Any(1), TypeSignature::Any(2)],
            Volatility::Volatile,
        )
    };
    let wait_for = move |key: Key, exclusive: bool, level: Level| -> DfResult<()> {
        let wait = || -> DfResult<()> {
            while !try_lock(session, key, exclusive, level) {
                check().map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Ok(())
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            _ => wait(),
        }
    };
    // pg_advisory[_xact]_lock[_shared](key): waits; void
    for (name, exclusive, level) in [
        ("pg_advisory_lock", true, Level::Session),
        ("pg_advisory_lock_shared", false, Level::Session),
        ("pg_advisory_xact_lock", true, Level::Transaction),
        ("pg_advisory_xact_lock_shared", false, Level::Transaction),
    ] {
        let wait_for = wait_for.clone();
        let f = move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
            let rows = rows_of(args);
            for key in keys(args, rows)?.into_iter().flatten() {
                wait_for(key, exclusive, level)?;
            }
            result(args, Arc::new(NullArray::new(rows)))
        };
        ctx.register_udf(crate::sql::void::void(ScalarUDF::from(
            SimpleScalarUDF::new_with_signature(name, signature(), DataType::Null, Arc::new(f)),
        )));
    }
    // the functions answering a boolean per key: pg_try_* (at once; whether taken) and
    // pg_advisory_unlock* (one session-level hold; whether there was one)
    let boolean = |name: &str, op: Arc<dyn Fn(Key) -> bool + Send + Sync>| {
        let f = move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
            let rows = rows_of(args);
            let out: BooleanArray = keys(args, rows)?
                .into_iter()
                .map(|k| k.map(|k| op(k)))
                .collect();
            result(args, Arc::new(out))
        };
        ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
            name,
            signature(),
            DataType::Boolean,
            Arc::new(f),
        )));
    };
    for (name, exclusive, level) in [
        ("pg_try_advisory_lock", true, Level::Session),
        ("pg_try_advisory_lock_shared", false, Level::Session),
        ("pg_try_advisory_xact_lock", true, Level::Transaction),
        (
            "pg_try_advisory_xact_lock_shared",
            false,
            Level::Transaction,
        ),
    ] {
        boolean(
            name,
            Arc::new(move |k| try_lock(session, k, exclusive, level)),
        );
    }
    for (name, exclusive) in [
        ("pg_advisory_unlock", true),
        ("pg_advisory_unlock_shared", false),
    ] {
        boolean(name, Arc::new(move |k| unlock(session, k, exclusive)));
    }
    let unlock_all = move |_: &[ColumnarValue]| -> DfResult<ColumnarValue> {
        release(session, Some(Level::Session));
        Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::Null))
    };
    ctx.register_udf(crate::sql::void::void(ScalarUDF::from(
        SimpleScalarUDF::new_with_signature(
            "pg_advisory_unlock_all",
            Signature::nullary(Volatility::Volatile),
            DataType::Null,
            Arc::new(unlock_all),
        ),
    )));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_exclude_each_other_and_not_themselves() {
        let (a, b) = (new_holder(), new_holder());
        let k = (1, 424242);
        assert!(try_lock(a, k, true, Level::Session));
        assert!(try_lock(a, k, true, Level::Session), "re-entrant");
        assert!(!try_lock(b, k, true, Level::Session));
        assert!(!try_lock(b, k, false, Level::Session));
        assert!(unlock(a, k, true));
        assert!(!try_lock(b, k, true, Level::Session), "held once more");
        assert!(unlock(a, k, true));
        assert!(!unlock(a, k, true), "nothing left to unlock");
        // shared with shared, not with exclusive
        assert!(try_lock(a, k, false, Level::Session));
        assert!(try_lock(b, k, false, Level::Transaction));
        assert!(!try_lock(b, k, true, Level::Session));
        transaction_ended(b);
        session_ended(a);
        assert!(try_lock(b, k, true, Level::Session));
        session_ended(b);
        // two integers are another space than one bigint
        assert!(try_lock(a, (1, 7), true, Level::Session));
        assert!(try_lock(b, (2, 7), true, Level::Session));
        session_ended(a);
        session_ended(b);
    }
}
