//! Transaction IDs as Postgres' functions give them: `txid_current()` /
//! `pg_current_xact_id()` (the transaction's ID, given it on first use: the same for every
//! call in a transaction block, or in one statement outside a block; a new one for the next
//! transaction) and `txid_current_if_assigned()` / `pg_current_xact_id_if_assigned()`
//! (NULL until one was given). Job queues and replication tools use them to tell
//! transactions apart and order them.
//!
//! Weir numbers transactions for these functions only (its writes are not versioned by
//! them): one process-wide counter that starts at the server's start time in microseconds,
//! so IDs grow across restarts too (as long as fewer than a million are given out per
//! second). `pg_current_xact_id()` is `bigint` here (Postgres' `xid8`, which prints the same).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::sql::transaction_time::TransactionStart;

/// The next transaction ID of the process.
fn next_id() -> u64 {
    static NEXT: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    NEXT.get_or_init(|| {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(3);
        AtomicU64::new(micros.max(3))
    })
    .fetch_add(1, Ordering::Relaxed)
}

/// A session's transaction ID, once given: (the transaction it was given to, the ID). The
/// transaction is the block's start, or outside a block the statement's start.
pub type TransactionId = Arc<parking_lot::Mutex<Option<(i64, u64)>>>;

#[derive(Debug)]
struct XactId {
    name: &'static str,
    /// `_if_assigned`: NULL rather than giving one.
    if_assigned: bool,
    start: TransactionStart,
    id: TransactionId,
    signature: Signature,
}

impl PartialEq for XactId {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.id, &other.id)
    }
}

impl Eq for XactId {}

impl std::hash::Hash for XactId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl XactId {
    /// The ID of the transaction `statement` (its start, when known) runs in.
    fn current(&self, statement: Option<i64>) -> Option<u64> {
        let key = match (*self.start.read(), statement) {
            (Some(block), _) => Some(block.timestamp_micros()),
            (None, s) => s,
        };
        let mut id = self.id.lock();
        match (*id, key) {
            (Some((k, x)), Some(key)) if k == key => return Some(x),
            _ => {}
        }
        if self.if_assigned {
            return None;
        }
        let x = next_id();
        // (a statement of unknown start gets an ID of its own and keeps none)
        *id = key.map(|k| (k, x));
        Some(x)
    }
}

impl ScalarUDFImpl for XactId {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Int64(
            self.current(None).map(|x| x as i64),
        )))
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let statement = info
            .query_execution_start_time()
            .map(|t| t.timestamp_micros());
        // (a simplification that does not know the statement, outside a block, leaves the
        // call for the optimizer's, which does)
        if statement.is_none() && self.start.read().is_none() {
            return Ok(ExprSimplifyResult::Original(args));
        }
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(
            ScalarValue::Int64(self.current(statement).map(|x| x as i64)),
            None,
        )))
    }
}

/// Register the session's transaction-ID functions: `start` is its block's start, `id` its
/// ID once given.
pub fn register(ctx: &datafusion::prelude::SessionContext, start: TransactionStart) {
    let id: TransactionId = Default::default();
    for (name, if_assigned) in [
        ("txid_current", false),
        ("pg_current_xact_id", false),
        ("txid_current_if_assigned", true),
        ("pg_current_xact_id_if_assigned", true),
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(XactId {
            name,
            if_assigned,
            start: start.clone(),
            id: id.clone(),
            // (volatile: not evaluated by a constant folding that does not know the
            // statement; `simplify` gives the value where it is known)
            signature: Signature::exact(vec![], Volatility::Volatile),
        }));
    }
}
