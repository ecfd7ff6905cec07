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
}

impl Metrics {
    fn new() -> Metrics {
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
    }

    /// Count one statement of `kind`.
    pub fn query(&self, kind: &'static str) {
        self.queries
            .get_or_create(&vec![("kind".to_owned(), kind.to_owned())])
            .inc();
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
