//! The web console on the HTTP port: `/` (one page, embedded in the binary, no build step
//! or CDN) and the JSON API behind it (`docs/observability.md`, "Console"):
//!
//! - `GET /api/v1/relations`: sources, tables, views and sinks with their counters (the
//!   page turns successive counters into rows/s), lag, watermark, state size, errors;
//! - `GET /api/v1/views/{name}`: one view's graph, node by node (EXPLAIN's labels, rows in
//!   and out, time, state, watermark, inputs), its late rows and its sources' dead letters;
//! - `GET /api/v1/views/{name}/graph.svg`: that graph drawn by layout-rs (operators as
//!   boxes, edges labelled with rows/s since the previous drawing of that view).

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{Value, json};

use crate::catalog::RelationKind;
use crate::engine::Engine;

/// The page.
pub const PAGE: &str = include_str!("console.html");

/// Rates: every second the counters (rows per source, table, view output, sink, and per
/// node of each view's graph) are read, and each rate is the difference to the previous
/// reading. Kept here, not in the page, so every reader sees the same rates.
#[derive(Default)]
pub struct Rates {
    previous: parking_lot::Mutex<Option<(Instant, HashMap<String, u64>)>>,
    rates: parking_lot::Mutex<HashMap<String, f64>>,
}

impl Rates {
    /// Read the counters and update the rates (called every second).
    pub fn tick(&self, engine: &Engine) {
        let now = Instant::now();
        let current = counters(engine);
        let mut previous = self.previous.lock();
        if let Some((t, old)) = previous.as_ref() {
            let secs = now.duration_since(*t).as_secs_f64();
            if secs > 0.0 {
                let rates = current
                    .iter()
                    .map(|(k, v)| {
                        let before = old.get(k).copied().unwrap_or(*v);
                        (k.clone(), v.saturating_sub(before) as f64 / secs)
                    })
                    .collect();
                *self.rates.lock() = rates;
            }
        }
        *previous = Some((now, current));
    }

    fn rate(&self, key: &str) -> Value {
        self.rates
            .lock()
            .get(key)
            .map(|r| json!((r * 10.0).round() / 10.0))
            .unwrap_or(Value::Null)
    }
}

/// The counters rates are taken of, by key (`source:NAME`, `table:NAME`, `view:NAME`,
/// `sink:NAME`, `node:VIEW:N`).
fn counters(engine: &Engine) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for p in engine.dataflow.sources.progress() {
        if p.reader != "backfill" {
            *out.entry(format!("source:{}", p.source_name)).or_default() += p.rows;
        }
    }
    for e in engine.catalog.entries() {
        if let Some(t) = &e.table {
            out.insert(format!("table:{}", e.desc.name), t.row_count() as u64);
        }
    }
    for s in engine.dataflow.stats() {
        let Some(name) = engine
            .catalog
            .get_by_oid(s.oid)
            .map(|e| e.desc.name.clone())
        else {
            continue;
        };
        if let Some(r) = s.output() {
            out.insert(format!("view:{name}"), r.rows_out);
        }
        for n in &s.operators {
            out.insert(format!("node:{name}:{}", n.node), n.rows_out);
        }
    }
    for k in engine.dataflow.sinks.rows() {
        out.insert(format!("sink:{}", k.name), k.messages);
    }
    out
}

fn ms(us: Option<i64>) -> Value {
    us.map(|u| json!(u / 1000)).unwrap_or(Value::Null)
}

/// Whether `role` (None: anyone the HTTP port lets in unnamed) may see a relation: SELECT on
/// it, or the owner's rights on a sink, as in the system tables.
fn may_see(engine: &Engine, role: Option<u32>, desc: &crate::catalog::RelationDesc) -> bool {
    let Some(role) = role else {
        return true;
    };
    let c = &engine.catalog;
    if desc.kind == RelationKind::Sink {
        c.has_owner_rights(role, desc.owner)
    } else {
        c.has_privilege(role, desc, crate::catalog::roles::Privilege::Select)
    }
}

pub fn relations(engine: &Engine, rates: &Rates, role: Option<u32>) -> Value {
    let dataflow = &engine.dataflow;
    let catalog = &engine.catalog;
    let progress = dataflow.sources.progress();
    let stats = dataflow.stats();
    let mut sources = Vec::new();
    let mut tables = Vec::new();
    let mut views = Vec::new();
    for e in catalog.entries() {
        let d = &e.desc;
        if !may_see(engine, role, d) {
            continue;
        }
        match d.kind {
            // a plain view is a named query and a sequence a counter: nothing runs for them
            RelationKind::View | RelationKind::Sequence => {}
            RelationKind::Source => {
                let readers: Vec<_> = progress
                    .iter()
                    .filter(|p| p.source_name == d.name && p.reader != "backfill")
                    .collect();
                let lag: i64 = readers
                    .iter()
                    .flat_map(|p| p.partitions.iter())
                    .filter(|p| p.high_watermark >= 0)
                    .map(|p| (p.high_watermark - p.offset).max(0))
                    .sum();
                sources.push(json!({
                    "name": d.name,
                    "connector": d.options.iter().find(|(k, _)| k == "connector").map(|(_, v)| v.clone()),
                    "rows": readers.iter().map(|p| p.rows).sum::<u64>(),
                    "rows_per_second": rates.rate(&format!("source:{}", d.name)),
                    "lag": lag,
                    "watermark_ms": ms(readers.iter().filter_map(|p| p.watermark).min()),
                    "status": readers.first().map(|p| p.status.clone()).unwrap_or_else(|| "idle (no view reads it)".into()),
                    "dead_letters": readers.iter().map(|p| p.dead_letters).sum::<u64>(),
                    "error": readers.iter().find_map(|p| p.error.clone()),
                }));
            }
            RelationKind::Table | RelationKind::AppendOnlyTable => {
                tables.push(json!({
                    "name": d.name,
                    "rows": e.table.as_ref().map(|t| t.row_count()).unwrap_or(0),
                    "rows_per_second": rates.rate(&format!("table:{}", d.name)),
                    "append_only": d.kind == RelationKind::AppendOnlyTable,
                }));
            }
            RelationKind::MaterializedView => {
                let Some(s) = stats.iter().find(|s| s.oid == d.oid) else {
                    continue;
                };
                let root = s.output();
                views.push(json!({
                    "name": d.name,
                    "rows": s.rows,
                    "changes_out": root.map(|r| r.rows_out).unwrap_or(0),
                    "changes_per_second": rates.rate(&format!("view:{}", d.name)),
                    "watermark_ms": ms(s.watermark),
                    "state_bytes": s.operators.iter().map(|o| o.bytes + o.spilled).sum::<usize>(),
                    "late_rows": dataflow.late.count(&d.name),
                    "failed": s.failed,
                    "subscribers": s.subscribers,
                }));
            }
            RelationKind::Sink => {}
        }
    }
    let sinks: Vec<Value> = dataflow
        .sinks
        .rows()
        .into_iter()
        .filter(|s| {
            catalog
                .get(&s.name)
                .is_some_and(|e| may_see(engine, role, &e.desc))
        })
        .map(|s| {
            json!({
                "name": s.name, "view": s.view_name, "topic": s.topic, "format": s.format,
                "messages": s.messages, "status": s.status, "error": s.error,
                "messages_per_second": rates.rate(&format!("sink:{}", s.name)),
            })
        })
        .collect();
    json!({
        "sources": sources,
        "tables": tables,
        "views": views,
        "sinks": sinks,
    })
}

fn view_stats(
    engine: &Engine,
    role: Option<u32>,
    name: &str,
) -> Option<(u32, crate::dataflow::stats::ViewStats)> {
    let entry = engine
        .catalog
        .get(name)
        .filter(|e| e.desc.kind == RelationKind::MaterializedView)
        .filter(|e| may_see(engine, role, &e.desc))?;
    let s = engine
        .dataflow
        .stats()
        .into_iter()
        .find(|s| s.oid == entry.desc.oid)?;
    Some((entry.desc.oid, s))
}

pub fn view(engine: &Engine, rates: &Rates, role: Option<u32>, name: &str) -> Option<Value> {
    let (oid, s) = view_stats(engine, role, name)?;
    let sources: Vec<String> = engine
        .catalog
        .get_by_oid(oid)
        .map(|e| {
            e.desc
                .dependencies
                .iter()
                .filter_map(|d| engine.catalog.get_by_oid(*d))
                .map(|d| d.desc.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let dead_letters: u64 = engine
        .dataflow
        .sources
        .progress()
        .iter()
        .filter(|p| sources.contains(&p.source_name) && p.reader != "backfill")
        .map(|p| p.dead_letters)
        .sum();
    let nodes: Vec<Value> = s
        .operators
        .iter()
        .map(|n| {
            json!({
                "node": n.node, "name": n.name, "label": n.label, "source": n.source,
                "inputs": n.inputs, "rows_in": n.rows_in, "rows_out": n.rows_out,
                "rows_out_per_second": rates.rate(&format!("node:{name}:{}", n.node)),
                "busy_ms": n.busy_ns as f64 / 1e6, "state_rows": n.rows,
                "state_bytes": n.bytes + n.spilled, "watermark_ms": ms(n.watermark),
            })
        })
        .collect();
    Some(json!({
        "name": name,
        "rows": s.rows,
        "failed": s.failed,
        "late_rows": engine.dataflow.late.count(name),
        "dead_letters": dead_letters,
        "reads": sources,
        "nodes": nodes,
    }))
}

/// Escape text for a DOT string literal.
fn dot_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

fn human_bytes(b: usize) -> String {
    crate::limits::format_size(b)
}

/// The view's graph as SVG, drawn by layout-rs from a DOT description.
pub fn graph_svg(engine: &Engine, rates: &Rates, role: Option<u32>, name: &str) -> Option<String> {
    let (_, s) = view_stats(engine, role, name)?;
    let mut dot = String::from("digraph {\n");
    for n in &s.operators {
        // one fact per line (`\n` in DOT)
        let mut lines = vec![dot_text(&short(&n.label, 48))];
        lines.push(format!("rows in {} / out {}", n.rows_in, n.rows_out));
        if !n.source {
            lines.push(format!(
                "state {} rows, {}",
                n.rows,
                human_bytes(n.bytes + n.spilled)
            ));
        }
        if let Some(w) = n.watermark {
            let shown = chrono::DateTime::from_timestamp_micros(w)
                .map(|d| d.naive_utc().format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            lines.push(format!("watermark {shown}"));
        }
        dot.push_str(&format!(
            "  n{} [shape=box, label=\"{}\"];\n",
            n.node,
            lines.join("\\n")
        ));
    }
    for n in &s.operators {
        for i in &n.inputs {
            let label = match rates.rate(&format!("node:{name}:{i}")) {
                Value::Number(r) => format!("{:.0} rows/s", r.as_f64().unwrap_or(0.0)),
                _ => "… rows/s".into(),
            };
            dot.push_str(&format!(
                "  n{i} -> n{} [label=\"{}\"];\n",
                n.node,
                dot_text(&label)
            ));
        }
    }
    if let Some(e) = &s.failed {
        dot.push_str(&format!(
            "  failed [shape=box, label=\"failed: {}\"];\n",
            dot_text(&short(e, 80))
        ));
    }
    dot.push_str("}\n");
    render_dot(&dot)
}

fn render_dot(dot: &str) -> Option<String> {
    use layout::backends::svg::SVGWriter;
    use layout::gv::{DotParser, GraphBuilder};
    let dot = dot.to_owned();
    // a layout crate's panic must not take the HTTP task with it
    std::panic::catch_unwind(move || {
        let mut parser = DotParser::new(&dot);
        let graph = parser.process().ok()?;
        let mut builder = GraphBuilder::new();
        builder.visit_graph(&graph);
        let mut visual = builder.get();
        let mut svg = SVGWriter::new();
        visual.do_it(false, false, false, &mut svg);
        Some(svg.finalize())
    })
    .ok()
    .flatten()
}
