//! View maintenance throughput (release build, one server):
//!
//! 1. `N` rows (default 10 million) inserted in 100k-row statements into an append-only
//!    table, with no view: the ingest baseline;
//! 2. the same with a `GROUP BY k` (100k keys) count/sum view, then FLUSH;
//! 3. the same with a join view (the stream joined with a 100k-row table, then grouped);
//! 4. the same with a `GROUP BY ROLLUP` view (a maintained aggregate per grouping set);
//! 5. `W` rows (default 1 million) with a window-function view (a running sum per key,
//!    100k partitions: every 100k-row statement changes every partition, from the first
//!    changed row on), against its own no-view baseline,
//!    and `W` rows in 5,000-row statements (one epoch each) appended in order to 10
//!    partitions under a view with a running sum, `row_number` and `lag` (each epoch
//!    computes only the appended rows, continuing from the row before);
//! 6. `W` rows with an ASOF join view: each row picks the latest of 10 quotes of its key
//!    (100k keys, 1M quotes in a table) at or before its value;
//! 7. `W` rows on a watermarked stream (1,000 keys, one row per key per second) with a
//!    MATCH_RECOGNIZE view (falls then a rise of `v % 7` within 10 seconds), against the
//!    same rows in a stream without a view;
//! 8. DataFusion running each view's query one-shot over the same rows.
//!
//! Maintenance time = (ingest + FLUSH with the view) - (ingest without it). Reported:
//! maintenance rows/s and its ratio to the one-shot query time.
//!
//! Run: `cargo bench --bench views` (`VIEW_BENCH_ROWS` to change N,
//! `VIEW_BENCH_WINDOW_ROWS` to change W).

#[path = "../tests/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::Instant;

use tokio_postgres::Client;

const KEYS: i64 = 100_000;
const CHUNK: i64 = 100_000;

async fn ingest(c: &Client, table: &str, rows: i64) -> f64 {
    let t = Instant::now();
    let mut start = 0;
    while start < rows {
        let end = (start + CHUNK).min(rows) - 1;
        c.batch_execute(&format!(
            "INSERT INTO {table} SELECT g % {KEYS}, g FROM generate_series({start}, {end}) AS g"
        ))
        .await
        .expect("insert");
        start = end + 1;
    }
    c.batch_execute("FLUSH").await.expect("flush");
    t.elapsed().as_secs_f64()
}

/// `rows` rows into a stream `(k, v, ts)`: 1,000 keys, 1 ms apart.
async fn ingest_ts(c: &Client, table: &str, rows: i64) -> f64 {
    let t = Instant::now();
    let mut start = 0;
    while start < rows {
        let end = (start + CHUNK).min(rows) - 1;
        c.batch_execute(&format!(
            "INSERT INTO {table} SELECT g % 1000, g, to_timestamp_micros(1704067200000000 + g * 1000) \
             FROM generate_series({start}, {end}) AS g"
        ))
        .await
        .expect("insert");
        start = end + 1;
    }
    c.batch_execute("FLUSH").await.expect("flush");
    t.elapsed().as_secs_f64()
}

/// `rows` rows `(k, v)` into `table` in `chunk`-row statements, each followed by FLUSH (one
/// epoch each): 10 keys, `v` ascending, so every statement appends to every partition.
async fn ingest_appending(c: &Client, table: &str, rows: i64, chunk: i64) -> f64 {
    let t = Instant::now();
    let mut start = 0;
    while start < rows {
        let end = (start + chunk).min(rows) - 1;
        c.batch_execute(&format!(
            "INSERT INTO {table} SELECT g % 10, g FROM generate_series({start}, {end}) AS g; FLUSH"
        ))
        .await
        .expect("insert");
        start = end + 1;
    }
    t.elapsed().as_secs_f64()
}

async fn timed(c: &Client, sql: &str) -> f64 {
    let t = Instant::now();
    c.simple_query(sql).await.expect("query");
    t.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let rows: i64 = std::env::var("VIEW_BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let server = harness::TestServer::start();
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE base (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE ev_agg (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE ev_join (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE ev_roll (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE base_win (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE ev_win (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE ev_asof (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE base_run (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE ev_run (k BIGINT, v BIGINT) APPEND ONLY; \
         CREATE TABLE quotes (k BIGINT, t BIGINT, px BIGINT); \
         CREATE TABLE dim (k BIGINT PRIMARY KEY, name TEXT); \
         INSERT INTO dim SELECT g, 'name-' || CAST(g % 1000 AS TEXT) FROM generate_series(0, {}) AS g",
        KEYS - 1
    ))
    .await
    .expect("setup");

    let baseline = ingest(&c, "base", rows).await;

    let agg_query = "SELECT k, count(*) AS n, sum(v) AS s FROM ev_agg GROUP BY k";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW agg AS {agg_query}"))
        .await
        .expect("view");
    let with_agg = ingest(&c, "ev_agg", rows).await;
    let one_shot_agg = timed(&c, agg_query).await;
    let check = c
        .query_one("SELECT count(*), sum(n) FROM agg", &[])
        .await
        .expect("check");
    assert_eq!(check.get::<_, i64>(0), KEYS.min(rows));

    let join_query = "SELECT d.name, count(*) AS n, sum(e.v) AS s FROM ev_join e JOIN dim d ON e.k = d.k GROUP BY d.name";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW joined AS {join_query}"))
        .await
        .expect("view");
    let with_join = ingest(&c, "ev_join", rows).await;
    let one_shot_join = timed(&c, join_query).await;

    let roll_query = "SELECT k % 100 AS a, k % 7 AS b, count(*) AS n, sum(v) AS s FROM ev_roll \
                      GROUP BY ROLLUP (k % 100, k % 7)";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW rolled AS {roll_query}"))
        .await
        .expect("view");
    let with_roll = ingest(&c, "ev_roll", rows).await;
    let one_shot_roll = timed(&c, roll_query).await;

    let win_rows: i64 = std::env::var("VIEW_BENCH_WINDOW_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let win_baseline = ingest(&c, "base_win", win_rows).await;
    let win_query = "SELECT k, v, sum(v) OVER (PARTITION BY k ORDER BY v) AS run FROM ev_win";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW windowed AS {win_query}"))
        .await
        .expect("view");
    let with_win = ingest(&c, "ev_win", win_rows).await;
    let one_shot_win = timed(&c, win_query).await;
    let state = c
        .query_one(
            "SELECT CAST(sum(state_rows) AS BIGINT) FROM weir_operator_state WHERE view_name = 'windowed'",
            &[],
        )
        .await
        .map(|r| r.get::<_, Option<i64>>(0).unwrap_or(0))
        .unwrap_or(-1);

    let run_baseline = ingest_appending(&c, "base_run", win_rows, 5_000).await;
    let run_query = "SELECT k, v, sum(v) OVER w AS s, row_number() OVER w AS rn, lag(v) OVER w AS p \
                     FROM ev_run WINDOW w AS (PARTITION BY k ORDER BY v)";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW running AS {run_query}"))
        .await
        .expect("view");
    let with_run = ingest_appending(&c, "ev_run", win_rows, 5_000).await;
    let one_shot_run = timed(&c, run_query).await;

    c.batch_execute(&format!(
        "INSERT INTO quotes SELECT g % {KEYS}, g * 10, g FROM generate_series(0, {}) AS g",
        KEYS * 10 - 1
    ))
    .await
    .expect("quotes");
    let asof_query =
        "SELECT e.k, e.v, q.px FROM ev_asof e ASOF JOIN quotes q ON e.k = q.k AND e.v >= q.t";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW asof AS {asof_query}"))
        .await
        .expect("view");
    let with_asof = ingest(&c, "ev_asof", win_rows).await;
    let one_shot_asof = timed(&c, asof_query).await;

    c.batch_execute(
        "CREATE TABLE base_mr (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) APPEND ONLY; \
         CREATE TABLE ev_mr (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) APPEND ONLY",
    )
    .await
    .expect("streams");
    let mr_baseline = ingest_ts(&c, "base_mr", win_rows).await;
    let mr_query = "SELECT * FROM ev_mr MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts \
                    MEASURES FIRST(a.ts) AS s, LAST(c.v) AS e, COUNT(*) AS n \
                    PATTERN (a b+ c) WITHIN INTERVAL '10 seconds' \
                    DEFINE b AS v % 7 < PREV(v) % 7, c AS v % 7 > PREV(v) % 7) AS m";
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW cep AS {mr_query}"))
        .await
        .expect("view");
    let with_mr = ingest_ts(&c, "ev_mr", win_rows).await;
    let one_shot_mr = timed(&c, mr_query).await;
    let mr_out = c
        .query_one("SELECT count(*) FROM cep", &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(-1);
    let mr_state = c
        .query_one(
            "SELECT CAST(sum(state_rows) AS BIGINT) FROM weir_operator_state WHERE view_name = 'cep'",
            &[],
        )
        .await
        .map(|r| r.get::<_, Option<i64>>(0).unwrap_or(0))
        .unwrap_or(-1);

    let report_with = |name: &str, n: i64, base: f64, with: f64, one_shot: f64| {
        let maintenance = (with - base).max(1e-9);
        println!(
            "| {name} | {n} | {base:.1} s | {with:.1} s | {:.0} rows/s | {one_shot:.2} s | {:.1}x |",
            n as f64 / maintenance,
            maintenance / one_shot
        );
    };
    let report =
        |name: &str, with: f64, one_shot: f64| report_with(name, rows, baseline, with, one_shot);
    println!(
        "| view | rows | ingest, no view | ingest + FLUSH, with view | maintenance | one-shot query | maintenance / one-shot |"
    );
    report("GROUP BY k (100k keys): count, sum", with_agg, one_shot_agg);
    report(
        "join with 100k-row table, GROUP BY name",
        with_join,
        one_shot_join,
    );
    report(
        "GROUP BY ROLLUP (k % 100, k % 7): count, sum",
        with_roll,
        one_shot_roll,
    );
    report_with(
        "sum(v) OVER (PARTITION BY k ORDER BY v), 100k partitions",
        win_rows,
        win_baseline,
        with_win,
        one_shot_win,
    );
    report_with(
        "sum, row_number, lag OVER (PARTITION BY k ORDER BY v), 10 partitions appended in 5k-row epochs",
        win_rows,
        run_baseline,
        with_run,
        one_shot_run,
    );
    report_with(
        "ASOF JOIN 1M quotes (100k keys) ON k AND v >= t",
        win_rows,
        win_baseline,
        with_asof,
        one_shot_asof,
    );
    report_with(
        "MATCH_RECOGNIZE (a b+ c) WITHIN 10 s, 1k partitions, stream",
        win_rows,
        mr_baseline,
        with_mr,
        one_shot_mr,
    );
    println!("window view state rows: {state}");
    println!("MATCH_RECOGNIZE view: {mr_out} matches, state rows after FLUSH: {mr_state}");
    if let Some(pid) = server.pid() {
        println!("server peak RSS: {:.0} MiB", harness::peak_mib(pid));
    }
}
