//! Metrics recorded where things happen (checkpoints, statements), for `/metrics`.
//!
//! Everything a scrape can read off the running system (rows, lag, watermarks, state,
//! late rows, dead letters) is collected at scrape time from the same numbers the system
//! tables show (`server/http.rs`); only events that leave no state behind are counted here:
//! one histogram observation per checkpoint, one counter increment per statement. Nothing
//! here is touched per row.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The process's event metrics.
pub struct Metrics {
    /// Seconds each checkpoint took, committed or failed.
    pub checkpoint_duration: Histogram,
    /// Bytes the last checkpoint wrote.
    pub checkpoint_bytes: Gauge,
    /// Seconds from a change's arrival to its epoch's publication (the oldest change of
    /// each epoch: the epoch's worst case).
    pub epoch_latency: Histogram,
    /// Statements run, by kind (`select`, `insert`, `ddl`, ...).
    pub queries: Family<Vec<(String, String)>, Counter>,
    /// Transactions ended, by `outcome` (`commit`, `rollback`): a statement outside a
    /// block, or a block (`pg_stat_database.xact_commit` / `xact_rollback`).
    pub transactions: Family<Vec<(String, String)>, Counter>,
    /// Rows statements wrote or returned to clients, by `op` (`inserted`, `updated`,
    /// `deleted`, `returned`): `pg_stat_database.tup_*`. Counted per statement or batch.
    pub rows: Family<Vec<(String, String)>, Counter>,
    /// The families' counters, taken once (they share their values with the families):
    /// counting is one atomic add, no label lookup. Commit, rollback.
    transaction_counters: [Counter; 2],
    /// Inserted, updated, deleted, returned.
    row_counters: [Counter; 4],
}

/// The `op` labels of [`Metrics::rows`], in [`Metrics::row_counters`]' order.
const ROW_OPS: [&str; 4] = ["inserted", "updated", "deleted", "returned"];

/// One counter of a family, by its one label.
fn labelled(family: &Family<Vec<(String, String)>, Counter>, key: &str, value: &str) -> Counter {
    family
        .get_or_create(&vec![(key.to_owned(), value.to_owned())])
        .clone()
}

impl Metrics {
    fn new() -> Metrics {
        let transactions = Family::default();
        let rows = Family::default();
        let transaction_counters =
            ["commit", "rollback"].map(|o| labelled(&transactions, "outcome", o));
        let row_counters = ROW_OPS.map(|op| labelled(&rows, "op", op));
        Metrics {
            checkpoint_duration: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            checkpoint_bytes: Gauge::default(),
            epoch_latency: Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            queries: Family::default(),
            transactions,
            rows,
            transaction_counters,
            row_counters,
        }
    }

    /// Register these metrics (clones share their values) on a registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "weir_checkpoint_duration",
            "Time each checkpoint took, from its barrier to durable",
            Unit::Seconds,
            self.checkpoint_duration.clone(),
        );
        registry.register_with_unit(
            "weir_checkpoint",
            "Bytes the last checkpoint wrote",
            Unit::Bytes,
            self.checkpoint_bytes.clone(),
        );
        registry.register_with_unit(
            "weir_view_epoch_latency",
            "Time from a change's arrival to the publication of the epoch that holds it, for the oldest change of each epoch",
            Unit::Seconds,
            self.epoch_latency.clone(),
        );
        registry.register(
            "weir_queries",
            "Statements run, by kind",
            self.queries.clone(),
        );
        registry.register(
            "weir_transactions",
            "Transactions ended, by outcome (commit, rollback)",
            self.transactions.clone(),
        );
        registry.register(
            "weir_rows",
            "Rows statements inserted, updated, deleted or returned to clients",
            self.rows.clone(),
        );
    }

    /// Count one statement of `kind`.
    pub fn query(&self, kind: &'static str) {
        self.queries
            .get_or_create(&vec![("kind".to_owned(), kind.to_owned())])
            .inc();
    }

    /// Count one transaction's end.
    pub fn transaction(&self, committed: bool) {
        self.transaction_counters[usize::from(!committed)].inc();
    }

    /// Count `n` rows of `op` (one of [`ROW_OPS`]).
    pub fn rows(&self, op: &'static str, n: u64) {
        if let Some(at) = ROW_OPS.iter().position(|o| *o == op) {
            self.row_counters[at].inc_by(n);
        }
    }

    /// The rows of `op` counted so far.
    pub fn rows_of(&self, op: &'static str) -> u64 {
        ROW_OPS
            .iter()
            .position(|o| *o == op)
            .map_or(0, |at| self.row_counters[at].get())
    }

    /// The transactions ended so far with this outcome.
    pub fn transactions_of(&self, committed: bool) -> u64 {
        self.transaction_counters[usize::from(!committed)].get()
    }

    /// A statement's completion tag: the rows it wrote (`INSERT 0 3`, `UPDATE 2`,
    /// `DELETE 1`, `COPY 5` from a client).
    pub fn rows_written(&self, tag: &str) {
        let mut words = tag.split_whitespace();
        let op = match words.next() {
            Some("INSERT") | Some("COPY") => "inserted",
            Some("UPDATE") => "updated",
            Some("DELETE") => "deleted",
            _ => return,
        };
        if let Some(n) = words.last().and_then(|n| n.parse::<u64>().ok()) {
            self.rows(op, n);
        }
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// CPU seconds used and start time (Unix seconds) of this process, from /proc.
pub fn process_times() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // fields after the command (which may hold spaces) in parentheses
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): utime is field 14, stime 15, starttime 22
    let ticks = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let start_ticks: f64 = f.get(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let boot = now - uptime;
    Some(((utime + stime) / ticks, boot + start_ticks / ticks))
}

/// When this process started, in microseconds since the Unix epoch (read once:
/// `pg_postmaster_start_time()`).
pub fn process_start_micros() -> Option<i64> {
    static START: OnceLock<Option<i64>> = OnceLock::new();
    *START.get_or_init(|| process_times().map(|(_, start)| (start * 1e6) as i64))
}
