//! A view's dataflow graph: source nodes (a table's or another view's changes) feeding
//! operators, ending in the view's output. Nodes are stored children first, so index order
//! is a topological order, and an epoch runs each node once, in that order.

use std::collections::HashMap;

use datafusion::arrow::datatypes::SchemaRef;

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::Operator;

pub type NodeId = usize;

pub enum NodeKind {
    /// Changes of a relation (table or view), by OID.
    Source {
        relation: u32,
        name: String,
    },
    Operator(Box<dyn Operator>),
}

pub struct Node {
    pub kind: NodeKind,
    /// Upstream nodes, one per input port.
    pub inputs: Vec<NodeId>,
    pub schema: SchemaRef,
}

pub struct Graph {
    pub nodes: Vec<Node>,
    pub output: NodeId,
}

impl Graph {
    pub fn new() -> Graph {
        Graph {
            nodes: Vec::new(),
            output: 0,
        }
    }

    pub fn add(&mut self, kind: NodeKind, inputs: Vec<NodeId>, schema: SchemaRef) -> NodeId {
        debug_assert!(inputs.iter().all(|i| *i < self.nodes.len()));
        self.nodes.push(Node {
            kind,
            inputs,
            schema,
        });
        self.nodes.len() - 1
    }

    /// Relations the graph reads.
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

    pub fn state_rows(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| match &n.kind {
                NodeKind::Operator(op) => op.state_rows(),
                _ => 0,
            })
            .sum()
    }

    /// Run one epoch: the given changes of source relations in, the change of the output
    /// relation out.
    pub fn run_epoch(&mut self, inputs: &HashMap<u32, Vec<Changelog>>) -> Result<Vec<Changelog>> {
        let n = self.nodes.len();
        let mut consumers: Vec<Vec<(NodeId, usize)>> = vec![Vec::new(); n];
        for (id, node) in self.nodes.iter().enumerate() {
            for (port, input) in node.inputs.iter().enumerate() {
                consumers[*input].push((id, port));
            }
        }
        let mut pending: Vec<Vec<Vec<Changelog>>> = self
            .nodes
            .iter()
            .map(|node| vec![Vec::new(); node.inputs.len()])
            .collect();
        let mut result = Vec::new();
        for id in 0..n {
            let outputs: Vec<Changelog> = match &mut self.nodes[id].kind {
                NodeKind::Source { relation, .. } => {
                    inputs.get(relation).cloned().unwrap_or_default()
                }
                NodeKind::Operator(op) => {
                    let mut outs = Vec::new();
                    for (port, parts) in std::mem::take(&mut pending[id]).into_iter().enumerate() {
                        let parts: Vec<Changelog> =
                            parts.into_iter().filter(|c| !c.is_empty()).collect();
                        if parts.is_empty() {
                            continue;
                        }
                        let input = if parts.len() == 1 {
                            parts.into_iter().next().expect("one part")
                        } else {
                            let schema = parts[0].schema();
                            Changelog::concat(&schema, &parts)?
                        };
                        outs.extend(op.on_changes(port, input)?);
                    }
                    outs.extend(op.on_epoch_end()?);
                    outs
                }
            };
            let outputs: Vec<Changelog> = outputs.into_iter().filter(|c| !c.is_empty()).collect();
            if id == self.output {
                result.extend(outputs.iter().cloned());
            }
            for (consumer, port) in &consumers[id] {
                pending[*consumer][*port].extend(outputs.iter().cloned());
            }
        }
        Ok(result)
    }

    /// The graph, one operator per line, outputs first (EXPLAIN).
    pub fn explain(&self) -> Vec<String> {
        let mut lines = Vec::new();
        self.explain_node(self.output, 0, &mut lines);
        lines
    }

    fn explain_node(&self, id: NodeId, depth: usize, lines: &mut Vec<String>) {
        let node = &self.nodes[id];
        let text = match &node.kind {
            NodeKind::Source { name, .. } => format!("Source: {name}"),
            NodeKind::Operator(op) => {
                let d = op.details();
                if d.is_empty() {
                    op.name().to_owned()
                } else {
                    format!("{}: {d}", op.name())
                }
            }
        };
        lines.push(format!("{}{text}", "  ".repeat(depth)));
        for i in &node.inputs {
            self.explain_node(*i, depth + 1, lines);
        }
    }
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}
