//! Weir's system tables, readable with plain SELECT (unqualified names, like pg_catalog):
//!
//! - `weir_views`: per materialized view its rows, operator state rows, watermark, rows
//!   dropped as late, failure, and live change subscriptions;
//! - `weir_operator_state`: state rows per operator of each view (proves state stays
//!   bounded on an endless stream);
//! - `weir_late_events`: the most recent rows views refused as late (bounded retention);
//! - `weir_sources`: each running source instance (one per view reading a connector
//!   source): rows produced, watermark, status, dead letters, whether it finished, its error;
//! - `weir_source_partitions`: per Kafka partition of each instance: offset read, high
//!   watermark, lag, event-time watermark input, rows, rows/s, dead letters, idleness;
//! - `weir_dead_letters`: the most recent records sources could not decode (raw bytes,
//!   error), kept once per record;
//! - `weir_checkpoints`: the most recent checkpoints (epoch, start, duration, bytes and
//!   keys written, total state bytes, status and error);
//! - `weir_recovery`: how each view came back at the last start (restored from the
//!   checkpoint of an epoch, or rebuilt from its inputs and why; time and bytes read).

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result as DfResult;

use crate::catalog::Catalog;
use crate::catalog::pg_catalog::{V, build_table};
use crate::dataflow::runtime::Dataflow;
use crate::sql::types::SqlType as T;

pub const TABLES: &[&str] = &[
    "weir_views",
    "weir_operator_state",
    "weir_late_events",
    "weir_sources",
    "weir_source_partitions",
    "weir_dead_letters",
    "weir_sinks",
    "weir_checkpoints",
    "weir_recovery",
    "weir_memory",
];

/// The rows of a system table that `role` may see: a row about a view, source or sink is
/// shown only to roles that may read it (SELECT; a sink: its owner's rights), so late
/// events, dead letters and sizes of other roles' relations stay theirs. Superusers see all.
pub fn visible_rows(batch: RecordBatch, catalog: &Catalog, role: u32) -> DfResult<RecordBatch> {
    use datafusion::arrow::array::{Array, BooleanArray, StringArray};
    if catalog.is_superuser(role) {
        return Ok(batch);
    }
    let may_read = |name: &str| match catalog.get(name) {
        None => false,
        Some(e) if e.desc.kind == crate::catalog::RelationKind::Sink => {
            catalog.has_owner_rights(role, e.desc.owner)
        }
        Some(e) => catalog.has_privilege(role, &e.desc, crate::catalog::roles::Privilege::Select),
    };
    let schema = batch.schema();
    let mut keep = vec![true; batch.num_rows()];
    for (i, field) in schema.fields().iter().enumerate() {
        let is_name = matches!(
            field.name().as_str(),
            "view_name" | "source_name" | "sink_name"
        );
        let is_component = field.name() == "component";
        if !is_name && !is_component {
            continue;
        }
        let Some(col) = batch.column(i).as_any().downcast_ref::<StringArray>() else {
            continue;
        };
        for (r, k) in keep.iter_mut().enumerate() {
            if col.is_null(r) {
                continue;
            }
            let v = col.value(r);
            let name = if is_component {
                // weir_memory: `view NAME: state` / `table NAME`
                match v.strip_prefix("view ").or_else(|| v.strip_prefix("table ")) {
                    Some(rest) => rest.split(':').next().unwrap_or(rest),
                    None => continue,
                }
            } else {
                v
            };
            if !may_read(name) {
                *k = false;
            }
        }
    }
    if keep.iter().all(|k| *k) {
        return Ok(batch);
    }
    Ok(datafusion::arrow::compute::filter_record_batch(
        &batch,
        &BooleanArray::from(keep),
    )?)
}

fn ts(us: Option<i64>) -> V {
    match us {
        Some(v) => V::I(v),
        None => V::Null,
    }
}

pub fn build(
    name: &str,
    catalog: &Catalog,
    dataflow: &Arc<Dataflow>,
) -> DfResult<Option<RecordBatch>> {
    let view_name = |oid: u32| {
        catalog
            .get_by_oid(oid)
            .map(|e| e.desc.name.clone())
            .unwrap_or_else(|| oid.to_string())
    };
    Ok(Some(match name {
        "weir_views" => {
            let mut stats = dataflow.stats();
            stats.sort_by_key(|s| s.oid);
            build_table(
                &[
                    ("view_name", T::Text),
                    ("rows", T::Int8),
                    ("state_rows", T::Int8),
                    ("watermark", T::Timestamp(None)),
                    ("late_rows_dropped", T::Int8),
                    ("failed", T::Text),
                    ("subscribers", T::Int8),
                ],
                stats
                    .iter()
                    .map(|s| {
                        let name = view_name(s.oid);
                        vec![
                            name.clone().into(),
                            s.rows.into(),
                            s.operators.iter().map(|o| o.rows).sum::<usize>().into(),
                            ts(s.watermark),
                            (dataflow.late.count(&name) as i64).into(),
                            s.failed.clone().map(V::S).unwrap_or(V::Null),
                            s.subscribers.into(),
                        ]
                    })
                    .collect(),
            )?
        }
        "weir_operator_state" => {
            let mut rows = Vec::new();
            let mut stats = dataflow.stats();
            stats.sort_by_key(|s| s.oid);
            for s in &stats {
                for o in s.operators.iter().filter(|o| !o.source) {
                    rows.push(vec![
                        view_name(s.oid).into(),
                        o.node.into(),
                        o.name.clone().into(),
                        o.rows.into(),
                    ]);
                }
            }
            build_table(
                &[
                    ("view_name", T::Text),
                    ("operator_id", T::Int4),
                    ("operator", T::Text),
                    ("state_rows", T::Int8),
                ],
                rows,
            )?
        }
        "weir_checkpoints" => build_table(
            &[
                ("epoch", T::Int8),
                ("started_at", T::TimestampTz(None)),
                ("duration_ms", T::Float8),
                ("bytes_written", T::Int8),
                ("keys_written", T::Int8),
                ("state_bytes_total", T::Int8),
                ("status", T::Text),
                ("error", T::Text),
            ],
            dataflow
                .checkpoints
                .checkpoints()
                .into_iter()
                .map(|r| {
                    vec![
                        V::I(r.epoch as i64),
                        V::I(r.started_at_us),
                        V::F(r.duration_ms),
                        V::I(r.bytes_written as i64),
                        V::I(r.keys_written as i64),
                        V::I(r.state_bytes_total as i64),
                        r.status.to_owned().into(),
                        r.error.map(V::S).unwrap_or(V::Null),
                    ]
                })
                .collect(),
        )?,
        "weir_recovery" => build_table(
            &[
                ("view_name", T::Text),
                ("started_at", T::TimestampTz(None)),
                ("duration_ms", T::Float8),
                ("bytes_read", T::Int8),
                ("outcome", T::Text),
                ("restored_epoch", T::Int8),
                ("reason", T::Text),
            ],
            dataflow
                .checkpoints
                .recovery()
                .into_iter()
                .map(|r| {
                    vec![
                        r.view.into(),
                        V::I(r.started_at_us),
                        V::F(r.duration_ms),
                        V::I(r.bytes_read as i64),
                        r.outcome.to_owned().into(),
                        r.from_epoch.map(|e| V::I(e as i64)).unwrap_or(V::Null),
                        r.reason.map(V::S).unwrap_or(V::Null),
                    ]
                })
                .collect(),
        )?,
        "weir_memory" => {
            // the process as a whole, then what the views and tables hold
            let memory = &dataflow.sources.memory;
            let limit = memory.limit().map(|l| V::I(l as i64)).unwrap_or(V::Null);
            let mut rows = vec![vec![
                "process (resident)".into(),
                V::I(memory.resident() as i64),
                V::I(0),
                limit.clone(),
            ]];
            if let Some(s) = crate::state::spill::store() {
                rows.push(vec![
                    "state spill store".into(),
                    V::I(s.memory_bytes() as i64),
                    V::I(s.bytes() as i64),
                    limit.clone(),
                ]);
            }
            let mut stats = dataflow.stats();
            stats.sort_by_key(|s| s.oid);
            for s in &stats {
                let name = view_name(s.oid);
                let state: usize = s.operators.iter().map(|o| o.bytes).sum();
                let spilled: usize = s.operators.iter().map(|o| o.spilled).sum();
                rows.push(vec![
                    format!("view {name}: state").into(),
                    state.into(),
                    spilled.into(),
                    limit.clone(),
                ]);
                rows.push(vec![
                    format!("view {name}: contents").into(),
                    s.contents_bytes.into(),
                    s.contents_spilled.into(),
                    limit.clone(),
                ]);
            }
            let mut tables: Vec<_> = catalog
                .entries()
                .into_iter()
                .filter_map(|e| e.table.clone())
                .collect();
            tables.sort_by_key(|t| t.oid);
            // tables keep their rows in the store: in memory is the store's shared cache
            // and write buffers, one row for all tables
            rows.push(vec![
                "store (block cache and write buffers)".into(),
                V::I(catalog.store().memory_bytes() as i64),
                V::I(0),
                limit.clone(),
            ]);
            for t in tables {
                rows.push(vec![
                    format!("table {}", t.name()).into(),
                    V::I(0),
                    t.stored_bytes().into(),
                    limit.clone(),
                ]);
            }
            build_table(
                &[
                    ("component", T::Text),
                    ("bytes_in_memory", T::Int8),
                    ("bytes_spilled", T::Int8),
                    ("limit", T::Int8),
                ],
                rows,
            )?
        }
        "weir_sources" => {
            let mut p = dataflow.sources.progress();
            p.sort_by(|a, b| (&a.view_name, &a.source_name).cmp(&(&b.view_name, &b.source_name)));
            build_table(
                &[
                    ("source_name", T::Text),
                    ("view_name", T::Text),
                    ("rows", T::Int8),
                    ("watermark", T::Timestamp(None)),
                    ("status", T::Text),
                    ("dead_letters", T::Int8),
                    ("done", T::Bool),
                    ("error", T::Text),
                    ("reader", T::Text),
                ],
                p.into_iter()
                    .map(|r| {
                        vec![
                            r.source_name.into(),
                            r.view_name.into(),
                            V::I(r.rows as i64),
                            ts(r.watermark),
                            r.status.into(),
                            V::I(r.dead_letters as i64),
                            r.done.into(),
                            r.error.map(V::S).unwrap_or(V::Null),
                            r.reader.to_owned().into(),
                        ]
                    })
                    .collect(),
            )?
        }
        "weir_sinks" => {
            let mut p = dataflow.sinks.rows();
            p.sort_by(|a, b| a.name.cmp(&b.name));
            build_table(
                &[
                    ("sink_name", T::Text),
                    ("view_name", T::Text),
                    ("topic", T::Text),
                    ("format", T::Text),
                    ("delivery", T::Text),
                    ("status", T::Text),
                    ("messages", T::Int8),
                    ("committed_epoch", T::Int8),
                    ("error", T::Text),
                ],
                p.into_iter()
                    .map(|r| {
                        vec![
                            r.name.into(),
                            r.view_name.into(),
                            r.topic.into(),
                            r.format.to_string().into(),
                            r.delivery.into(),
                            r.status.into(),
                            V::I(r.messages as i64),
                            V::I(r.committed_epoch as i64),
                            r.error.map(V::S).unwrap_or(V::Null),
                        ]
                    })
                    .collect(),
            )?
        }
        "weir_source_partitions" => {
            let mut p = dataflow.sources.progress();
            p.sort_by(|a, b| (&a.view_name, &a.source_name).cmp(&(&b.view_name, &b.source_name)));
            let mut rows = Vec::new();
            for s in &p {
                for part in &s.partitions {
                    let hw = (part.high_watermark >= 0).then_some(part.high_watermark);
                    rows.push(vec![
                        s.source_name.clone().into(),
                        s.view_name.clone().into(),
                        V::I(part.partition as i64),
                        V::I(part.offset),
                        hw.map(V::I).unwrap_or(V::Null),
                        hw.map(|h| V::I((h - part.offset).max(0)))
                            .unwrap_or(V::Null),
                        ts(part.max_event_time),
                        ts(part.watermark),
                        V::I(part.rows as i64),
                        V::F(part.rows_per_second),
                        V::I(part.dead_letters as i64),
                        part.idle.into(),
                    ]);
                }
            }
            build_table(
                &[
                    ("source_name", T::Text),
                    ("view_name", T::Text),
                    ("partition", T::Int4),
                    ("offset", T::Int8),
                    ("high_watermark", T::Int8),
                    ("lag", T::Int8),
                    ("max_event_time", T::Timestamp(None)),
                    ("watermark", T::Timestamp(None)),
                    ("rows", T::Int8),
                    ("rows_per_second", T::Float8),
                    ("dead_letters", T::Int8),
                    ("idle", T::Bool),
                ],
                rows,
            )?
        }
        "weir_dead_letters" => build_table(
            &[
                ("source_name", T::Text),
                ("partition", T::Int4),
                ("offset", T::Int8),
                ("raw", T::Bytea),
                ("error", T::Text),
                ("at", T::TimestampTz(None)),
            ],
            dataflow
                .sources
                .dead_letters
                .letters()
                .into_iter()
                .map(|l| {
                    vec![
                        l.source.into(),
                        V::I(l.partition as i64),
                        V::I(l.offset),
                        l.raw.map(V::Bytes).unwrap_or(V::Null),
                        l.error.into(),
                        V::I(l.at),
                    ]
                })
                .collect(),
        )?,
        "weir_late_events" => build_table(
            &[
                ("view_name", T::Text),
                ("row", T::Text),
                ("event_time", T::Timestamp(None)),
                ("watermark", T::Timestamp(None)),
                ("arrived", T::TimestampTz(None)),
            ],
            dataflow
                .late
                .events()
                .into_iter()
                .map(|e| {
                    vec![
                        e.view.into(),
                        e.row.into(),
                        ts(e.event_time),
                        ts(e.watermark),
                        V::I(e.arrived),
                    ]
                })
                .collect(),
        )?,
        _ => return Ok(None),
    }))
}
