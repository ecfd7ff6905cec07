//! Rows a view did not admit because they arrived too late (event time below the
//! watermark in force minus the view's allowed lateness): counted per view, and the most
//! recent ones kept for the `weir_late_events` system table.

use std::collections::{HashMap, VecDeque};

use datafusion::arrow::json::LineDelimitedWriter;
use datafusion::arrow::record_batch::RecordBatch;
use parking_lot::Mutex;

/// How many late rows `weir_late_events` keeps (oldest dropped first).
pub const RETAINED_LATE_EVENTS: usize = 10_000;

#[derive(Debug, Clone)]
pub struct LateEvent {
    pub view: String,
    /// The row as JSON text.
    pub row: String,
    /// Event time and watermark at arrival, µs since the epoch.
    pub event_time: Option<i64>,
    /// None before the relation had a watermark (a NULL event time arrived first).
    pub watermark: Option<i64>,
    /// Wall-clock arrival, µs since the epoch.
    pub arrived: i64,
}

#[derive(Default)]
pub struct LateLog {
    events: Mutex<VecDeque<LateEvent>>,
    counts: Mutex<HashMap<String, u64>>,
}

impl LateLog {
    pub fn record(
        &self,
        view: &str,
        rows: &RecordBatch,
        event_times: &[Option<i64>],
        watermark: Option<i64>,
    ) {
        if rows.num_rows() == 0 {
            return;
        }
        *self.counts.lock().entry(view.to_owned()).or_default() += rows.num_rows() as u64;
        let mut buf = Vec::new();
        {
            let mut w = LineDelimitedWriter::new(&mut buf);
            if w.write(rows).is_err() || w.finish().is_err() {
                buf.clear();
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let lines: Vec<&str> = text.lines().collect();
        let arrived = chrono::Utc::now().timestamp_micros();
        let mut events = self.events.lock();
        for (i, t) in event_times.iter().enumerate() {
            if events.len() == RETAINED_LATE_EVENTS {
                events.pop_front();
            }
            events.push_back(LateEvent {
                view: view.to_owned(),
                row: lines.get(i).map(|s| s.to_string()).unwrap_or_default(),
                event_time: *t,
                watermark,
                arrived,
            });
        }
    }

    pub fn events(&self) -> Vec<LateEvent> {
        self.events.lock().iter().cloned().collect()
    }

    pub fn count(&self, view: &str) -> u64 {
        self.counts.lock().get(view).copied().unwrap_or(0)
    }

    pub fn forget(&self, view: &str) {
        self.counts.lock().remove(view);
        self.events.lock().retain(|e| e.view != view);
    }
}
