//! Postgres' statistics views over Weir's tables and materialized views, for the monitoring
//! tools that read them (pgAdmin's dashboard, Grafana's and Datadog's Postgres checks):
//! `pg_stat_{all,user}_tables`, `pg_statio_{all,user}_tables`,
//! `pg_stat_{all,user}_indexes`, `pg_statio_{all,user}_indexes`, `pg_stat_bgwriter`,
//! `pg_stat_replication`, `pg_replication_slots`, `pg_timezone_names` and
//! `pg_timezone_abbrevs`.
//!
//! What is counted is real (`state/table_activity.rs`: scans, lookups by key or index, rows
//! inserted, updated and deleted since the server started; rows held). What Weir does not
//! have is said so: no dead rows, HOT updates, vacuums or analyzes (0 and NULL, as a
//! Postgres table that never had them shows); what Weir does not count — blocks read and
//! hit (Weir has no buffer pool of pages), the background writer's work — is NULL, as in
//! `pg_stat_database`. The `all` views list the same relations as the `user` ones: reads
//! of the system catalogs are not counted. A materialized view's reads are served by the
//! view store, not counted here: its row count is shown, its counters are 0. Weir has no
//! replication: `pg_stat_replication` and `pg_replication_slots` are empty.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result as DfResult;

use super::pg_catalog::{V, build_table};
use crate::catalog::{Entry, IndexInfo};
use crate::sql::types::SqlType as T;
use crate::state::table_activity::{ActivityCounts, PRIMARY_KEY};

fn counted(e: &Entry) -> bool {
    matches!(e.desc.kind.relkind(), "r" | "m" | "p" | "t")
}

/// Its schema's name (`app` of `app.t`) and its own.
fn schema_of(e: &Entry) -> &str {
    if e.desc.is_temporary() {
        "pg_temp"
    } else {
        crate::catalog::schemas::split_relation_name(&e.desc.name).0
    }
}

fn bare_name(e: &Entry) -> &str {
    crate::catalog::schemas::split_relation_name(&e.desc.name).1
}

fn activity(e: &Entry) -> ActivityCounts {
    e.table
        .as_ref()
        .map(|t| t.activity.counts())
        .unwrap_or_default()
}

fn n(v: u64) -> V {
    V::I(v as i64)
}

/// The columns every per-table view starts with, then `more`.
fn table_columns(more: Vec<(&'static str, T)>) -> Vec<(&'static str, T)> {
    let mut c = vec![
        ("relid", T::Oid),
        ("schemaname", T::Name),
        ("relname", T::Name),
    ];
    c.extend(more);
    c
}

/// The columns every per-index view starts with, then `more`.
fn index_columns(more: Vec<(&'static str, T)>) -> Vec<(&'static str, T)> {
    let mut c = vec![
        ("relid", T::Oid),
        ("indexrelid", T::Oid),
        ("schemaname", T::Name),
        ("relname", T::Name),
        ("indexrelname", T::Name),
    ];
    c.extend(more);
    c
}

/// One row per table and materialized view: its leading columns, then `more`'s.
fn table_rows(entries: &[Arc<Entry>], more: impl Fn(&Entry) -> Vec<V>) -> Vec<Vec<V>> {
    entries
        .iter()
        .filter(|e| counted(e))
        .map(|e| {
            let mut row = vec![e.desc.oid.into(), schema_of(e).into(), bare_name(e).into()];
            row.extend(more(e));
            row
        })
        .collect()
}

/// One row per index of a table or materialized view: its leading columns, then `more`'s
/// (given the table's activity and the index).
fn index_rows(
    entries: &[Arc<Entry>],
    more: impl Fn(&ActivityCounts, &IndexInfo) -> Vec<V>,
) -> Vec<Vec<V>> {
    let mut rows = Vec::new();
    for e in entries.iter().filter(|e| counted(e)) {
        let a = activity(e);
        for ix in e.desc.all_indexes() {
            let mut row = vec![
                e.desc.oid.into(),
                ix.oid.into(),
                schema_of(e).into(),
                bare_name(e).into(),
                ix.name.clone().into(),
            ];
            row.extend(more(&a, &ix));
            rows.push(row);
        }
    }
    rows
}

/// `view`'s rows, None when it is not one of this module's views.
pub fn build(view: &str, entries: &[Arc<Entry>]) -> Option<DfResult<RecordBatch>> {
    let i8 = || T::Int8;
    let ts = || T::TimestampTz(None);
    Some(match view {
        "pg_stat_all_tables" | "pg_stat_user_tables" => build_table(
            &table_columns(vec![
                ("seq_scan", i8()),
                ("seq_tup_read", i8()),
                ("idx_scan", i8()),
                ("idx_tup_fetch", i8()),
                ("n_tup_ins", i8()),
                ("n_tup_upd", i8()),
                ("n_tup_del", i8()),
                ("n_tup_hot_upd", i8()),
                ("n_live_tup", i8()),
                ("n_dead_tup", i8()),
                ("n_mod_since_analyze", i8()),
                ("n_ins_since_vacuum", i8()),
                ("last_vacuum", ts()),
                ("last_autovacuum", ts()),
                ("last_analyze", ts()),
                ("last_autoanalyze", ts()),
                ("vacuum_count", i8()),
                ("autovacuum_count", i8()),
                ("analyze_count", i8()),
                ("autoanalyze_count", i8()),
            ]),
            table_rows(entries, |e| {
                let a = activity(e);
                let rows = e.table.as_ref().map_or(0, |t| t.row_count()) as u64;
                // (Postgres: NULL index counters for a table without indexes)
                let indexed = !e.desc.all_indexes().is_empty();
                let ix = |v: u64| if indexed { n(v) } else { V::Null };
                vec![
                    n(a.seq_scan),
                    n(a.seq_tup_read),
                    ix(a.idx_scan),
                    ix(a.idx_tup_fetch),
                    n(a.tup_ins),
                    n(a.tup_upd),
                    n(a.tup_del),
                    n(0),
                    n(rows),
                    n(0),
                    n(a.tup_ins + a.tup_upd + a.tup_del),
                    n(a.tup_ins),
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    n(0),
                    n(0),
                    n(0),
                    n(0),
                ]
            }),
        ),
        "pg_statio_all_tables" | "pg_statio_user_tables" => build_table(
            &table_columns(
                [
                    "heap_blks_read",
                    "heap_blks_hit",
                    "idx_blks_read",
                    "idx_blks_hit",
                    "toast_blks_read",
                    "toast_blks_hit",
                    "tidx_blks_read",
                    "tidx_blks_hit",
                ]
                .into_iter()
                .map(|c| (c, i8()))
                .collect(),
            ),
            table_rows(entries, |_| vec![V::Null; 8]),
        ),
        "pg_stat_all_indexes" | "pg_stat_user_indexes" => build_table(
            &index_columns(vec![
                ("idx_scan", i8()),
                ("idx_tup_read", i8()),
                ("idx_tup_fetch", i8()),
            ]),
            index_rows(entries, |a, ix| {
                let key = if ix.primary { PRIMARY_KEY } else { ix.oid };
                let used = a.indexes.get(&key).copied().unwrap_or_default();
                vec![n(used.scans), n(used.rows), n(used.rows)]
            }),
        ),
        "pg_statio_all_indexes" | "pg_statio_user_indexes" => build_table(
            &index_columns(vec![("idx_blks_read", i8()), ("idx_blks_hit", i8())]),
            index_rows(entries, |_, _| vec![V::Null, V::Null]),
        ),
        // one row, as in Postgres; the counters of a background writer Weir does not have
        // are NULL, `stats_reset` is when the server started
        "pg_stat_bgwriter" => build_table(
            &[
                ("checkpoints_timed", i8()),
                ("checkpoints_req", i8()),
                ("checkpoint_write_time", T::Float8),
                ("checkpoint_sync_time", T::Float8),
                ("buffers_checkpoint", i8()),
                ("buffers_clean", i8()),
                ("maxwritten_clean", i8()),
                ("buffers_backend", i8()),
                ("buffers_backend_fsync", i8()),
                ("buffers_alloc", i8()),
                ("stats_reset", ts()),
            ],
            vec![{
                let mut row = vec![V::Null; 10];
                row.push(
                    crate::metrics::process_start_micros()
                        .map(V::I)
                        .unwrap_or(V::Null),
                );
                row
            }],
        ),
        "pg_stat_replication" => build_table(
            &[
                ("pid", T::Int4),
                ("usesysid", T::Oid),
                ("usename", T::Name),
                ("application_name", T::Text),
                ("client_addr", T::Text),
                ("client_hostname", T::Text),
                ("client_port", T::Int4),
                ("backend_start", ts()),
                ("backend_xmin", T::Text),
                ("state", T::Text),
                ("sent_lsn", T::Text),
                ("write_lsn", T::Text),
                ("flush_lsn", T::Text),
                ("replay_lsn", T::Text),
                ("write_lag", T::Interval),
                ("flush_lag", T::Interval),
                ("replay_lag", T::Interval),
                ("sync_priority", T::Int4),
                ("sync_state", T::Text),
                ("reply_time", ts()),
            ],
            Vec::new(),
        ),
        "pg_replication_slots" => build_table(
            &[
                ("slot_name", T::Name),
                ("plugin", T::Name),
                ("slot_type", T::Text),
                ("datoid", T::Oid),
                ("database", T::Name),
                ("temporary", T::Bool),
                ("active", T::Bool),
                ("active_pid", T::Int4),
                ("xmin", T::Text),
                ("catalog_xmin", T::Text),
                ("restart_lsn", T::Text),
                ("confirmed_flush_lsn", T::Text),
                ("wal_status", T::Text),
                ("safe_wal_size", i8()),
                ("two_phase", T::Bool),
            ],
            Vec::new(),
        ),
        "pg_timezone_names" => build_table(
            &[
                ("name", T::Text),
                ("abbrev", T::Text),
                ("utc_offset", T::Interval),
                ("is_dst", T::Bool),
            ],
            crate::sql::time_zone::zones_now()
                .into_iter()
                .map(|z| {
                    vec![
                        z.name.into(),
                        z.abbrev.into(),
                        V::I(z.utc_offset as i64),
                        z.is_dst.into(),
                    ]
                })
                .collect(),
        ),
        "pg_timezone_abbrevs" => build_table(
            &[
                ("abbrev", T::Text),
                ("utc_offset", T::Interval),
                ("is_dst", T::Bool),
            ],
            crate::sql::time_zone::abbreviations()
                .map(|(abbrev, offset, dst)| vec![abbrev.into(), V::I(offset as i64), dst.into()])
                .collect(),
        ),
        _ => return None,
    })
}
