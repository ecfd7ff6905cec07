//! A view's dataflow graph: source nodes (a table's or another view's changes) feeding
//! operators, ending in the view's output. Nodes are stored children first, so index order
//! is a topological order, and an epoch runs each node once, in that order.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, TimestampMicrosecondArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;

use crate::dataflow::changelog::Changelog;
use crate::dataflow::late::LateLog;
use crate::dataflow::shards::{Part, route};
use crate::error::Result;
use crate::operators::{Operator, Sharding, filter_changelog};
use crate::state::state_table::FlushStats;
use crate::state::store::{Store, WriteBatch};

pub type NodeId = usize;

/// Input rows one pass of a graph takes at most (see [`Graph::run_epoch`]).
pub const PASS_ROWS: usize = 1 << 16;

/// A source's change with the event-time watermark in force when it arrived.
#[derive(Clone)]
pub struct SourceBatch {
    pub changelog: Changelog,
    pub watermark_before: Option<i64>,
}

/// Which rows of a watermarked source a view admits: event time >= watermark at arrival
/// minus the allowed lateness. The others are dropped and logged.
pub struct LatePolicy {
    pub ts_col: usize,
    pub lateness_us: i64,
    pub view: String,
    pub log: Arc<LateLog>,
    /// A relation read by several sources of one view (HOP, self-joins) logs once.
    pub record: bool,
}

pub enum NodeKind {
    /// Changes of a relation (table or view), by OID.
    Source {
        relation: u32,
        name: String,
        late: Option<LatePolicy>,
        /// The lookup side of a temporal join: its changes must be applied in arrival order
        /// relative to the stream's (the runtime gives them epochs of their own).
        lookup: bool,
    },
    Operator(Box<dyn Operator>),
}

/// What one epoch of a graph produced.
pub struct EpochOutput {
    pub changes: Vec<Changelog>,
    /// The output's event-time watermark (the minimum over its inputs that have one).
    pub watermark: Option<i64>,
}

pub struct Node {
    pub kind: NodeKind,
    /// Upstream nodes, one per input port.
    pub inputs: Vec<NodeId>,
    pub schema: SchemaRef,
    /// The operator's instances for shards 1.. (`shards.rs`); empty when the node runs
    /// unsharded (the instance in `kind` is shard 0).
    pub more: Vec<Box<dyn Operator>>,
}

impl Node {
    /// Every instance of the node's operator, shard 0 first (none for a source).
    pub fn shards_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn Operator>> {
        let first = match &mut self.kind {
            NodeKind::Operator(op) => Some(op),
            NodeKind::Source { .. } => None,
        };
        first.into_iter().chain(self.more.iter_mut())
    }

    fn shards(&self) -> impl Iterator<Item = &Box<dyn Operator>> {
        let first = match &self.kind {
            NodeKind::Operator(op) => Some(op),
            NodeKind::Source { .. } => None,
        };
        first.into_iter().chain(self.more.iter())
    }
}

pub struct Graph {
    pub nodes: Vec<Node>,
    pub output: NodeId,
    /// Each node's output watermark so far (monotone).
    watermarks: Vec<Option<i64>>,
    /// The view's allowed lateness: its rows can still change this far below its inputs'
    /// watermark, so the watermark it publishes (to views reading it) trails by this much.
    output_delay: i64,
    /// The watermarks as last flushed (written again only when they change).
    flushed_watermarks: Option<Vec<u8>>,
    /// What went through each node since the graph was built (per batch, not per row).
    counters: Vec<NodeCounters>,
    /// Each node's EXPLAIN line, made once (stats are taken every epoch).
    labels: Vec<String>,
    /// How many shards the graph was planned with (`add_shards`).
    shards: usize,
    /// Input rows one pass takes at most ([`PASS_ROWS`]; smaller in tests).
    pub pass_rows: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct NodeCounters {
    rows_in: u64,
    rows_out: u64,
    busy_ns: u64,
}

impl Graph {
    pub fn new() -> Graph {
        Graph {
            nodes: Vec::new(),
            output: 0,
            watermarks: Vec::new(),
            output_delay: 0,
            flushed_watermarks: None,
            counters: Vec::new(),
            labels: Vec::new(),
            shards: 1,
            pass_rows: PASS_ROWS,
        }
    }

    /// How many shards the graph runs in (1: unsharded).
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Shards 1.. of the graph: the same plan lowered again, once per further shard. Each
    /// operator that can split its work by key (`Operator::sharding`) keeps those
    /// instances; the others (a global aggregate) run unsharded.
    pub fn add_shards(&mut self, others: Vec<Graph>) -> Result<()> {
        self.shards += others.len();
        for other in others {
            if other.nodes.len() != self.nodes.len() {
                return Err(crate::error::WeirError::internal(
                    "a view's shards were planned differently",
                ));
            }
            for (node, o) in self.nodes.iter_mut().zip(other.nodes) {
                let (NodeKind::Operator(op), NodeKind::Operator(o)) = (&node.kind, o.kind) else {
                    continue;
                };
                let shardable = !node.inputs.is_empty()
                    && (0..node.inputs.len()).all(|p| !matches!(op.sharding(p), Sharding::Single));
                if shardable && o.name() == op.name() {
                    node.more.push(o);
                }
            }
        }
        Ok(())
    }

    /// How many shards the graph was planned with.
    pub fn shard_count(&self) -> usize {
        self.shards
    }

    /// See `output_delay`.
    pub fn set_output_delay(&mut self, delay_us: i64) {
        self.output_delay = delay_us.max(0);
    }

    pub fn add(&mut self, kind: NodeKind, inputs: Vec<NodeId>, schema: SchemaRef) -> NodeId {
        debug_assert!(inputs.iter().all(|i| *i < self.nodes.len()));
        self.nodes.push(Node {
            kind,
            inputs,
            schema,
            more: Vec::new(),
        });
        self.watermarks.push(None);
        self.nodes.len() - 1
    }

    /// Relations the graph reads.
    /// Whether the output only ever inserts, given which source relations only insert:
    /// sources through filters, projections and unions (a conservative test).
    pub fn only_inserts(&self, source_only_inserts: impl Fn(u32) -> bool) -> bool {
        self.nodes.iter().all(|n| match &n.kind {
            NodeKind::Source { relation, .. } => source_only_inserts(*relation),
            NodeKind::Operator(op) => matches!(op.name(), "Filter" | "Project" | "Merge"),
        })
    }

    pub fn sources(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Source { relation, .. } => Some(*relation),
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Every node: its state, what went through it, its watermark.
    pub fn operator_states(&mut self) -> Vec<crate::dataflow::stats::OperatorState> {
        if self.labels.len() != self.nodes.len() {
            self.labels = (0..self.nodes.len()).map(|i| self.label(i)).collect();
        }
        let labels = &self.labels;
        let counters = &self.counters;
        let watermarks = &self.watermarks;
        self.nodes
            .iter_mut()
            .enumerate()
            .map(|(i, n)| {
                let c = counters.get(i).copied().unwrap_or_default();
                let mut s = crate::dataflow::stats::OperatorState {
                    node: i,
                    label: labels[i].clone(),
                    inputs: n.inputs.clone(),
                    rows_in: c.rows_in,
                    rows_out: c.rows_out,
                    busy_ns: c.busy_ns,
                    watermark: watermarks.get(i).copied().flatten(),
                    ..Default::default()
                };
                if let NodeKind::Source { .. } = &n.kind {
                    s.name = "Source".to_owned();
                    s.source = true;
                }
                for op in n.shards_mut() {
                    s.name = op.name().to_owned();
                    s.rows += op.state_rows();
                    s.bytes += op
                        .state_tables()
                        .iter()
                        .map(|t| t.footprint())
                        .sum::<usize>()
                        + op.resident_bytes();
                    s.spilled += op
                        .state_tables()
                        .iter()
                        .map(|t| t.spilled_bytes())
                        .sum::<usize>();
                }
                s
            })
            .collect()
    }

    /// Bytes the operators hold in memory outside their state tables that cannot spill
    /// (a windowed aggregate's groups).
    pub fn unspillable_bytes(&self) -> usize {
        self.nodes
            .iter()
            .flat_map(|n| n.shards())
            .filter(|op| !op.resident_spills())
            .map(|op| op.resident_bytes())
            .sum()
    }

    /// Estimated bytes the operators' state takes in memory: their state tables and their
    /// working forms (`Operator::resident_bytes`).
    pub fn state_footprint(&mut self) -> usize {
        let mut n = 0;
        for node in self.nodes.iter_mut() {
            for op in node.shards_mut() {
                n += op.resident_bytes()
                    + op.state_tables()
                        .iter()
                        .map(|t| t.footprint())
                        .sum::<usize>();
            }
        }
        n
    }

    /// Spill `share` (0..1) of every state table's footprint (its coldest entries);
    /// returns the footprint freed.
    pub fn evict_state(&mut self, share: f64) -> usize {
        let mut freed = 0;
        for node in self.nodes.iter_mut() {
            for op in node.shards_mut() {
                // working forms first (into the tables), then the tables spill
                freed += op.evict_resident(share);
                for t in op.state_tables() {
                    freed += t.evict_share(share);
                }
            }
        }
        freed
    }

    /// The first spill-store error a state table met (its view must fail before what it
    /// computed is published).
    fn state_error(&mut self) -> Result<()> {
        for node in self.nodes.iter_mut() {
            for op in node.shards_mut() {
                for t in op.state_tables() {
                    if let Some(e) = t.take_error() {
                        return Err(crate::error::WeirError::internal(e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Write the dirty keys of every operator's state tables into `batch`, each table under
    /// `prefix ++ node id ++ position among the operator's tables ++ table name ++ 0` (an
    /// operator can have several tables of one kind, e.g. a multiset per aggregate); see
    /// [`Graph::load_state`].
    /// The graph's own state (each node's watermark) is written under `prefix ++ "wm"`.
    /// `direct`: where a large table's new base is written chunk by chunk (see
    /// `StateTable::flush`).
    pub fn flush_state(
        &mut self,
        prefix: &[u8],
        batch: &mut WriteBatch,
        direct: Option<&dyn crate::state::store::Store>,
    ) -> Result<FlushStats> {
        let mut total = FlushStats::default();
        let wm = encode_watermarks(&self.watermarks);
        if self.flushed_watermarks.as_deref() != Some(wm.as_slice()) {
            let mut k = prefix.to_vec();
            k.extend_from_slice(WATERMARKS_KEY);
            total.keys += 1;
            total.bytes += k.len() + wm.len();
            batch.put(k, wm.clone());
            self.flushed_watermarks = Some(wm);
        }
        for (id, node) in self.nodes.iter_mut().enumerate() {
            for (shard, op) in node.shards_mut().enumerate() {
                op.sync_state()?;
                for (i, t) in op.state_tables().into_iter().enumerate() {
                    let p = table_prefix(prefix, id, shard, i, t.decl().name);
                    let s = t.flush(&p, batch, direct);
                    if let Some(e) = t.take_error() {
                        // a checkpoint without the entries it could not read is no checkpoint
                        return Err(crate::error::WeirError::internal(e));
                    }
                    total.keys += s.keys;
                    total.bytes += s.bytes;
                    total.direct_keys.extend(s.direct_keys);
                }
            }
        }
        Ok(total)
    }

    /// Reload every operator's state tables from what [`Graph::flush_state`] wrote.
    /// Operators get their watermark again (what they did on it is in their state, so it
    /// changes nothing and emits nothing).
    pub fn load_state(&mut self, store: &dyn Store, prefix: &[u8]) -> Result<()> {
        let mut k = prefix.to_vec();
        k.extend_from_slice(WATERMARKS_KEY);
        if let Some(v) = store.get(&k)? {
            self.watermarks = decode_watermarks(&v, self.nodes.len())?;
            self.flushed_watermarks = Some(v);
        }
        for (id, node) in self.nodes.iter_mut().enumerate() {
            for (shard, op) in node.shards_mut().enumerate() {
                for (i, t) in op.state_tables().into_iter().enumerate() {
                    let p = table_prefix(prefix, id, shard, i, t.decl().name);
                    t.load(store, &p)?;
                }
                op.restore_state()?;
                if let Some(w) = self.watermarks[id] {
                    let out = op.on_watermark(w)?;
                    debug_assert!(
                        out.iter().all(|c| c.is_empty()),
                        "{}: a restored watermark emitted rows",
                        op.name()
                    );
                }
            }
        }
        Ok(())
    }

    /// Make the next flush write all state, not only what changed (see
    /// [`StateTable::rewrite_all`](crate::state::state_table::StateTable::rewrite_all)).
    pub fn rewrite_all_state(&mut self) {
        self.flushed_watermarks = None;
        for node in self.nodes.iter_mut() {
            for op in node.shards_mut() {
                for t in op.state_tables() {
                    t.rewrite_all();
                }
            }
        }
    }

    /// (entries, bytes) of the graph's state: the state tables' entries plus the
    /// watermark record once flushed or loaded, and the bytes the tables hold. A checkpoint
    /// records the entries; recovery compares them with what it read, so a lost or extra
    /// blob is noticed.
    pub fn state_size(&mut self) -> (usize, usize) {
        let mut entries = usize::from(self.flushed_watermarks.is_some());
        let mut bytes = 0;
        for node in self.nodes.iter_mut() {
            for op in node.shards_mut() {
                for t in op.state_tables() {
                    entries += t.len();
                    bytes += t.bytes();
                }
            }
        }
        (entries, bytes)
    }

    /// What a checkpoint of this graph must match to be restored into it: the plan as
    /// EXPLAIN shows it, and every node in id order with its state tables (state keys
    /// carry node ids and table positions).
    pub fn fingerprint(&mut self) -> String {
        let mut out = self.explain().join("\n");
        if self.shards > 1 {
            // state keys carry shard numbers, and keys are routed by the shard count
            out.push_str(&format!("\nshards: {}", self.shards));
        }
        for (id, node) in self.nodes.iter_mut().enumerate() {
            match &mut node.kind {
                NodeKind::Source { name, .. } => out.push_str(&format!("\n{id}: source {name}")),
                NodeKind::Operator(op) => {
                    let name = op.name().to_owned();
                    let tables: Vec<String> = op
                        .state_tables()
                        .iter()
                        .map(|t| {
                            format!("{}({} -> {})", t.decl().name, t.decl().key, t.decl().value)
                        })
                        .collect();
                    out.push_str(&format!("\n{id}: {name} [{}]", tables.join(", ")));
                }
            }
        }
        out
    }

    /// Relations read as the lookup side of a temporal join.
    pub fn lookup_relations(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Source {
                    relation,
                    lookup: true,
                    ..
                } => Some(*relation),
                _ => None,
            })
            .collect()
    }

    /// Read relation `from` as `to` (a view's private instance of a connector source).
    pub fn remap_relation(&mut self, from: u32, to: u32) {
        for n in self.nodes.iter_mut() {
            if let NodeKind::Source { relation, .. } = &mut n.kind
                && *relation == from
            {
                *relation = to;
            }
        }
    }

    /// Set the admission policy of the sources that read `relation`.
    pub fn set_late_policy(&mut self, relation: u32, make: impl Fn() -> LatePolicy) {
        let mut first = true;
        for n in self.nodes.iter_mut() {
            if let NodeKind::Source {
                relation: r, late, ..
            } = &mut n.kind
                && *r == relation
            {
                let mut p = make();
                p.record = first;
                first = false;
                *late = Some(p);
            }
        }
    }

    /// Run one epoch: the given changes of source relations in (with the watermarks the
    /// sources have after them), the change of the output relation out.
    ///
    /// The graph runs one operator at a time over everything an epoch brings, so what is in
    /// flight grows with the epoch (every stage's output; a HOP's rows once per window). An
    /// epoch of more than [`Graph::pass_rows`] input rows is run as several passes of at most that
    /// many (each relation's rows in order), with transient memory bounded by the pass
    /// instead of the epoch; the changes of all passes are the epoch's change, published at
    /// once. Each pass is given, per source, the watermark it had after the pass's rows:
    /// the watermark before its first batch in a later pass (a batch cut between passes
    /// gives the watermark before it), or the epoch's own when no later pass has its rows —
    /// what the same rows cut into smaller epochs would give. Rows are admitted by the
    /// watermark before their batch either way, so an admitted row never meets a window
    /// freed by an earlier pass; windows close and free their state pass by pass, so what
    /// is live stays the size of a pass, not of an epoch. A group that several passes
    /// change is emitted once per pass (-old/+new pairs that cancel out in the contents).
    pub fn run_epoch(
        &mut self,
        inputs: &HashMap<u32, Vec<SourceBatch>>,
        watermarks: &HashMap<u32, i64>,
    ) -> Result<EpochOutput> {
        let total: usize = inputs.values().flatten().map(|b| b.changelog.len()).sum();
        let limit = self.pass_rows.max(1);
        if total <= limit {
            return self.run_pass(inputs, watermarks);
        }
        let mut passes: Vec<HashMap<u32, Vec<SourceBatch>>> = Vec::new();
        for (relation, batches) in inputs {
            let (mut pass, mut filled) = (0usize, 0usize);
            for b in batches {
                let mut offset = 0;
                while offset < b.changelog.len() {
                    let n = (limit - filled).min(b.changelog.len() - offset);
                    if passes.len() <= pass {
                        passes.push(HashMap::new());
                    }
                    passes[pass]
                        .entry(*relation)
                        .or_default()
                        .push(SourceBatch {
                            changelog: b.changelog.slice(offset, n),
                            watermark_before: b.watermark_before,
                        });
                    offset += n;
                    filled += n;
                    if filled == limit {
                        pass += 1;
                        filled = 0;
                    }
                }
            }
        }
        let last = passes.len().saturating_sub(1);
        let mut after: Vec<HashMap<u32, i64>> = vec![HashMap::new(); passes.len()];
        for relation in inputs.keys() {
            for (i, wms) in after.iter_mut().enumerate().take(last) {
                let next = passes[i + 1..]
                    .iter()
                    .find_map(|p| p.get(relation).and_then(|b| b.first()));
                let wm = match next {
                    Some(b) => b.watermark_before,
                    None => watermarks.get(relation).copied(),
                };
                if let Some(w) = wm {
                    wms.insert(*relation, w);
                }
            }
        }
        let mut out = EpochOutput {
            changes: Vec::new(),
            watermark: None,
        };
        for (i, pass) in passes.iter().enumerate() {
            let r = self.run_pass(pass, if i == last { watermarks } else { &after[i] })?;
            out.changes.extend(r.changes);
            out.watermark = r.watermark;
        }
        Ok(out)
    }

    /// One pass of the graph over `inputs`: each operator once, in order.
    fn run_pass(
        &mut self,
        inputs: &HashMap<u32, Vec<SourceBatch>>,
        watermarks: &HashMap<u32, i64>,
    ) -> Result<EpochOutput> {
        let n = self.nodes.len();
        if self.counters.len() < n {
            self.counters.resize(n, NodeCounters::default());
        }
        let mut consumers: Vec<Vec<(NodeId, usize)>> = vec![Vec::new(); n];
        for (id, node) in self.nodes.iter().enumerate() {
            for (port, input) in node.inputs.iter().enumerate() {
                consumers[*input].push((id, port));
            }
        }
        // what each node's input ports received, with the shard that produced it
        let mut pending: Vec<Vec<Vec<Part>>> = self
            .nodes
            .iter()
            .map(|node| vec![Vec::new(); node.inputs.len()])
            .collect();
        let mut result = Vec::new();
        for id in 0..n {
            // this node's watermark: its source's, or the least of its inputs'
            let wm = match &self.nodes[id].kind {
                NodeKind::Source { relation, .. } => watermarks.get(relation).copied(),
                NodeKind::Operator(_) => self.nodes[id]
                    .inputs
                    .iter()
                    .filter_map(|i| self.watermarks[*i])
                    .min(),
            };
            let advanced = match (wm, self.watermarks[id]) {
                (Some(w), Some(old)) if w > old => Some(w),
                (Some(w), None) => Some(w),
                _ => None,
            };
            if let Some(w) = advanced {
                self.watermarks[id] = Some(w);
            }
            let started = std::time::Instant::now();
            let mut rows_in = 0u64;
            let node = &mut self.nodes[id];
            let outputs: Vec<Part> = match &mut node.kind {
                NodeKind::Source { relation, late, .. } => {
                    let mut outs = Vec::new();
                    for b in inputs.get(relation).map(|v| v.as_slice()).unwrap_or(&[]) {
                        let admitted = admit(late.as_ref(), b)?;
                        rows_in += admitted.len() as u64;
                        outs.push((None, admitted));
                    }
                    outs
                }
                NodeKind::Operator(_) => {
                    let ports = std::mem::take(&mut pending[id]);
                    let (outs, rows) = run_node(node, ports, advanced)?;
                    rows_in += rows;
                    outs
                }
            };
            let outputs: Vec<Part> = outputs.into_iter().filter(|(_, c)| !c.is_empty()).collect();
            let c = &mut self.counters[id];
            c.rows_in += rows_in;
            c.rows_out += outputs.iter().map(|(_, o)| o.len() as u64).sum::<u64>();
            c.busy_ns += started.elapsed().as_nanos() as u64;
            if id == self.output {
                result.extend(outputs.iter().map(|(_, c)| c.clone()));
            }
            for (consumer, port) in &consumers[id] {
                pending[*consumer][*port].extend(outputs.iter().cloned());
            }
        }
        self.state_error()?;
        Ok(EpochOutput {
            changes: result,
            watermark: self.watermarks[self.output].map(|w| w.saturating_sub(self.output_delay)),
        })
    }

    /// The graph, one operator per line, outputs first (EXPLAIN). A node that feeds several
    /// consumers (a subplan computed once, `plan/shared.rs`) is shown in full under the
    /// first and named again under the others.
    pub fn explain(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut shown = vec![false; self.nodes.len()];
        self.explain_node(self.output, 0, &mut lines, &mut shown);
        lines
    }

    #[recursive::recursive]
    fn explain_node(&self, id: NodeId, depth: usize, lines: &mut Vec<String>, shown: &mut [bool]) {
        let indent = "  ".repeat(depth);
        if shown[id] && !self.nodes[id].inputs.is_empty() {
            lines.push(format!(
                "{indent}{} (computed once, shown above)",
                self.label(id)
            ));
            return;
        }
        shown[id] = true;
        lines.push(format!("{indent}{}", self.label(id)));
        for i in &self.nodes[id].inputs {
            self.explain_node(*i, depth + 1, lines, shown);
        }
    }

    /// How EXPLAIN prints node `id`.
    fn label(&self, id: NodeId) -> String {
        let node = &self.nodes[id];
        match &node.kind {
            NodeKind::Source { name, late, .. } => match late {
                Some(l) => format!(
                    "Source: {name} (admits event time >= watermark - {}us)",
                    l.lateness_us
                ),
                None => format!("Source: {name}"),
            },
            NodeKind::Operator(op) => {
                let d = op.details();
                if d.is_empty() {
                    op.name().to_owned()
                } else {
                    format!("{}: {d}", op.name())
                }
            }
        }
    }
}

/// Run one operator node for an epoch: its inputs (per port, tagged with the shard that
/// produced them) routed to its shards, each shard's changes, watermark and epoch end run
/// (the shards in parallel when the node has enough rows), the outputs tagged with their
/// shard. Returns them with the rows that came in.
fn run_node(
    node: &mut Node,
    ports: Vec<Vec<Part>>,
    advanced: Option<i64>,
) -> Result<(Vec<Part>, u64)> {
    let shards = 1 + node.more.len();
    let takes_parts = match &node.kind {
        NodeKind::Operator(op) => op.takes_parts(),
        NodeKind::Source { .. } => false,
    };
    // per shard, per port: the changes it takes (one changelog unless the operator takes
    // parts)
    let mut work: Vec<Vec<Vec<Changelog>>> = vec![vec![Vec::new(); ports.len()]; shards];
    let mut rows = 0u64;
    for (port, parts) in ports.into_iter().enumerate() {
        let per_shard = if shards == 1 {
            vec![
                parts
                    .into_iter()
                    .map(|(_, c)| c)
                    .filter(|c| !c.is_empty())
                    .collect(),
            ]
        } else {
            let sharding = match &node.kind {
                NodeKind::Operator(op) => op.sharding(port),
                NodeKind::Source { .. } => Sharding::Single,
            };
            route(&sharding, parts, shards)?
        };
        for (shard, parts) in per_shard.into_iter().enumerate() {
            if parts.is_empty() {
                continue;
            }
            rows += parts.iter().map(|p| p.len() as u64).sum::<u64>();
            work[shard][port] = if takes_parts || parts.len() == 1 {
                parts
            } else {
                let schema = parts[0].schema();
                vec![Changelog::concat(&schema, &parts)?]
            };
        }
    }
    let run = |op: &mut Box<dyn Operator>, ins: Vec<Vec<Changelog>>| -> Result<Vec<Changelog>> {
        let mut outs = Vec::new();
        for (port, parts) in ins.into_iter().enumerate() {
            for input in parts {
                outs.extend(op.on_changes(port, input)?);
            }
        }
        if let Some(w) = advanced {
            outs.extend(op.on_watermark(w)?);
        }
        outs.extend(op.on_epoch_end()?);
        Ok(outs)
    };
    let tag = |shard: usize| (shards > 1).then_some(shard);
    let mut outputs = Vec::new();
    if shards > 1 && rows as usize >= crate::dataflow::shards::parallel_min_rows() {
        let jobs: Vec<crate::parallel::Job<'_, Vec<Changelog>>> = node
            .shards_mut()
            .zip(work)
            .map(|(op, ins)| {
                let run = &run;
                Box::new(move || run(op, ins)) as crate::parallel::Job<'_, _>
            })
            .collect();
        let results = crate::parallel::run_all(crate::parallel::Pool::Shards, jobs);
        for (shard, r) in results.into_iter().enumerate() {
            outputs.extend(r?.into_iter().map(|c| (tag(shard), c)));
        }
    } else {
        for (shard, (op, ins)) in node.shards_mut().zip(work).enumerate() {
            outputs.extend(run(op, ins)?.into_iter().map(|c| (tag(shard), c)));
        }
    }
    Ok((outputs, rows))
}

/// The rows of a source batch a view admits; the others are logged as late. A row whose
/// event time is NULL has no place in event time and is never admitted (it is logged with
/// a NULL event time).
fn admit(policy: Option<&LatePolicy>, b: &SourceBatch) -> Result<Changelog> {
    let Some(p) = policy else {
        return Ok(b.changelog.clone());
    };
    let Some(ts) = b
        .changelog
        .data
        .column(p.ts_col)
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
    else {
        return Ok(b.changelog.clone());
    };
    let wm = match b.watermark_before {
        Some(wm) => wm,
        None if ts.null_count() == 0 => return Ok(b.changelog.clone()),
        None => i64::MIN,
    };
    let bound = wm.saturating_sub(p.lateness_us);
    let keep: BooleanArray = (0..ts.len())
        .map(|i| Some(ts.is_valid(i) && ts.value(i) >= bound))
        .collect();
    if keep.true_count() == keep.len() {
        return Ok(b.changelog.clone());
    }
    let dropped_mask: BooleanArray = keep.iter().map(|k| k.map(|v| !v)).collect();
    let dropped = filter_record_batch(&b.changelog.data, &dropped_mask)?;
    let times: Vec<Option<i64>> = (0..ts.len())
        .filter(|i| !keep.value(*i))
        .map(|i| ts.is_valid(i).then(|| ts.value(i)))
        .collect();
    if p.record {
        p.log.record(&p.view, &dropped, &times, b.watermark_before);
    }
    filter_changelog(&b.changelog, &keep)
}

const WATERMARKS_KEY: &[u8] = b"wm";

/// One flag byte and an i64 per node.
fn encode_watermarks(w: &[Option<i64>]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + w.len() * 9);
    v.push(crate::state::state_table::VALUE_FORMAT);
    for x in w {
        v.push(x.is_some() as u8);
        v.extend_from_slice(&x.unwrap_or(0).to_le_bytes());
    }
    v
}

fn decode_watermarks(v: &[u8], nodes: usize) -> Result<Vec<Option<i64>>> {
    let mut r = crate::state::state_table::Reader::new(v, "graph watermarks");
    if r.u8()? != crate::state::state_table::VALUE_FORMAT {
        return Err(crate::error::WeirError::internal(
            "stored graph watermarks are in another format",
        ));
    }
    let mut out = Vec::with_capacity(nodes);
    for _ in 0..nodes {
        let set = r.u8()? == 1;
        let w = r.i64()?;
        out.push(set.then_some(w));
    }
    if r.remaining() != 0 {
        return Err(crate::error::WeirError::internal(
            "stored graph watermarks are for another graph",
        ));
    }
    Ok(out)
}

/// Where one state table of one node's shard is stored (shard 0 where an unsharded node's
/// table is: the shard number goes in the node id's top byte).
fn table_prefix(
    prefix: &[u8],
    node: NodeId,
    shard: usize,
    position: usize,
    table: &str,
) -> Vec<u8> {
    debug_assert!(node < 1 << 24 && shard < 256);
    let mut p = Vec::with_capacity(prefix.len() + 6 + table.len() + 1);
    p.extend_from_slice(prefix);
    p.extend_from_slice(&((node as u32) | ((shard as u32) << 24)).to_be_bytes());
    p.extend_from_slice(&(position as u16).to_be_bytes());
    p.extend_from_slice(table.as_bytes());
    p.push(0);
    p
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}
