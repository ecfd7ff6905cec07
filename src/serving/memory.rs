//! The memory a session's statements may hold: a DataFusion [`MemoryPool`] per session
//! whose limit is the session's `work_mem` (at most the server's `--query-memory-limit`).
//! Operators that can spill (sorts, aggregations, joins that support it) spill to the data
//! directory's `spill/` when their reservation is refused; the others fail the statement
//! with 53200, and the server goes on.
//!
//! Unlike Postgres' `work_mem` (per sort or hash node) the limit covers all operators of a
//! statement together; a session runs one statement at a time, and the rows of an open
//! cursor count against it while the cursor is open.

use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};

use crate::limits::format_size;

#[derive(Debug)]
pub struct StatementMemoryPool {
    limit: AtomicUsize,
    used: AtomicUsize,
}

impl StatementMemoryPool {
    pub fn new(limit: usize) -> Self {
        StatementMemoryPool {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
        }
    }

    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Release);
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }
}

impl std::fmt::Display for StatementMemoryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "statement memory: {} of {} in use",
            format_size(self.reserved()),
            format_size(self.limit())
        )
    }
}

impl MemoryPool for StatementMemoryPool {
    fn name(&self) -> &str {
        "weir_statement"
    }

    fn grow(&self, _reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::AcqRel);
    }

    fn shrink(&self, _reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::AcqRel);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        let limit = self.limit();
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            let new = cur.saturating_add(additional);
            if new > limit {
                return Err(DataFusionError::ResourcesExhausted(format!(
                    "out of memory: the statement needs more than work_mem ({}) ({} more for {}, {} in use)",
                    format_size(limit),
                    format_size(additional),
                    reservation.consumer().name(),
                    format_size(cur)
                )));
            }
            match self
                .used
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit())
    }
}
