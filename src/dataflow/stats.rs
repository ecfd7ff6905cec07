//! Per-view and per-operator numbers the runtime reports (system tables, tests).

/// Per-view numbers for system tables and tests.
#[derive(Debug, Clone)]
pub struct ViewStats {
    pub oid: u32,
    pub rows: usize,
    pub operators: Vec<OperatorState>,
    pub watermark: Option<i64>,
    pub failed: Option<String>,
    /// Live change subscriptions (SUBSCRIBE, cursors, sinks).
    pub subscribers: usize,
    /// Bytes of the view's contents (its Z-set's keys and counts).
    pub contents_bytes: usize,
    /// Bytes of the contents spilled to the spill store.
    pub contents_spilled: usize,
}

/// State held by one operator of a view's graph.
#[derive(Debug, Clone)]
pub struct OperatorState {
    pub node: usize,
    pub name: String,
    pub rows: usize,
    /// Bytes its state tables take in memory (keys, values and their overhead).
    pub bytes: usize,
    /// Bytes of keys and values its state tables spilled to disk.
    pub spilled: usize,
}
