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

impl ViewStats {
    /// The view's output node: the one no other node reads.
    pub fn output(&self) -> Option<&OperatorState> {
        let nodes = &self.operators;
        nodes
            .iter()
            .filter(|n| !nodes.iter().any(|m| m.inputs.contains(&n.node)))
            .max_by_key(|n| n.node)
    }
}

/// One node of a view's graph (an operator, or a source it reads): its state and what
/// went through it since the view started (EXPLAIN ANALYZE, `/metrics`).
#[derive(Debug, Clone, Default)]
pub struct OperatorState {
    pub node: usize,
    pub name: String,
    /// The node as EXPLAIN prints it (`Aggregate: group by ...`).
    pub label: String,
    /// A source node (no state; `rows_in` are the changes it was given).
    pub source: bool,
    /// The nodes it reads, by index.
    pub inputs: Vec<usize>,
    pub rows: usize,
    /// Bytes its state tables take in memory (keys, values and their overhead).
    pub bytes: usize,
    /// Bytes of keys and values its state tables spilled to disk.
    pub spilled: usize,
    /// Change rows in and out, summed per batch.
    pub rows_in: u64,
    pub rows_out: u64,
    /// Time spent in the operator's handlers.
    pub busy_ns: u64,
    /// Its output watermark, µs.
    pub watermark: Option<i64>,
}
