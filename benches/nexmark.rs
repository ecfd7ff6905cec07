//! Nexmark on the built-in generator (release build): for each query, a fresh server, the
//! `person`, `auction` and `bid` sources bounded to `N` Nexmark events (default 10
//! million; 2% people, 6% auctions, 92% bids), the query created as a materialized view,
//! then FLUSH (which returns once the bounded generators are exhausted and every row is in
//! the view). Reported per query: the rows its sources produced, the time from CREATE to
//! FLUSH's return, Nexmark events/s (N / time) and source rows/s, the view's rows, and the
//! server's peak resident memory (VmHWM).
//!
//! Each view runs its own generator instances (one thread per source) beside the dataflow
//! worker, so generation overlaps with maintenance on a 2-core machine.
//!
//! With checkpoints on (the server's default, `--checkpoint-interval 1s`), after FLUSH a
//! `CHECKPOINT` is taken and reported (its time and the bytes it wrote: the view's whole
//! state, the first checkpoint after the timer's incremental ones), then the server is
//! killed and restarted and the time until the view answers again is reported (`restart
//! s`; restored from the checkpoint, not recomputed).
//!
//! Run: `cargo bench --bench nexmark` (`NEXMARK_EVENTS=1000000` to change N,
//! `NEXMARK_QUERIES=q0,q5` to pick queries, `NEXMARK_SERVER_ARGS='--checkpoint-interval 0'`
//! for flags of the server; `WEIR_START_TIMEOUT_SECS=600` when a restart under a memory
//! limit reads back more state than a minute allows: the server recovers before it listens).

#[path = "../tests/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/nexmark_queries.rs"]
mod nexmark_queries;

use nexmark_queries::{QUERIES, instantiate};

use std::time::Instant;

#[tokio::main]
async fn main() {
    let events: u64 = std::env::var("NEXMARK_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let only: Option<Vec<String>> = std::env::var("NEXMARK_QUERIES")
        .ok()
        .map(|s| s.split(',').map(|q| q.trim().to_owned()).collect());
    let server_args: Vec<String> = std::env::var("NEXMARK_SERVER_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let checkpoints = !server_args
        .windows(2)
        .any(|w| w[0] == "--checkpoint-interval" && w[1] == "0");
    println!("nexmark: {events} events per query, server flags {server_args:?}");
    println!(
        "{:<5} {:>12} {:>9} {:>13} {:>13} {:>11} {:>10} {:>9} {:>9} {:>9}",
        "query",
        "source rows",
        "secs",
        "events/s",
        "rows/s",
        "view rows",
        "peak MiB",
        "ckpt ms",
        "ckpt MiB",
        "restart s"
    );
    // the baseline: generating the bid rows and moving them through the dataflow into a
    // global count (almost no operator work)
    let baseline = [("bids", "SELECT count(*) AS n FROM {bid}")];
    for (name, sql) in baseline.iter().chain(QUERIES.iter()) {
        if let Some(o) = &only
            && !o.iter().any(|q| q == name)
        {
            continue;
        }
        let args: Vec<&str> = server_args.iter().map(String::as_str).collect();
        let mut server = harness::TestServer::start_with(harness::Options {
            args: &args,
            ..Default::default()
        });
        let c = server.connect().await;
        for table in ["person", "auction", "bid"] {
            c.batch_execute(&format!(
                "CREATE SOURCE {table} (WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') \
                 WITH (connector = 'nexmark', nexmark.table.type = '{table}', \
                 nexmark.event.num = '{events}')"
            ))
            .await
            .expect("create source");
        }
        let t = Instant::now();
        if let Err(e) = c
            .batch_execute(&format!(
                "CREATE MATERIALIZED VIEW {name} AS {}",
                instantiate(sql, "")
            ))
            .await
        {
            println!("{name:<5} not supported: {}", harness::describe_error(&e));
            continue;
        }
        c.batch_execute("FLUSH").await.expect("flush");
        let secs = t.elapsed().as_secs_f64();
        let source_rows: i64 = c
            .query_one("SELECT sum(rows)::bigint FROM weir_sources", &[])
            .await
            .expect("weir_sources")
            .get(0);
        let view_rows: i64 = c
            .query_one(&format!("SELECT count(*) FROM {name}"), &[])
            .await
            .expect("count")
            .get(0);
        let failed: Option<String> = c
            .query_one("SELECT failed FROM weir_views", &[])
            .await
            .expect("weir_views")
            .get(0);
        if let Some(f) = failed {
            println!("{name:<5} failed: {f}");
            continue;
        }
        let peak = server.pid().map(harness::peak_mib).unwrap_or(f64::NAN);
        let (mut ckpt_ms, mut ckpt_mib, mut restart) = (f64::NAN, f64::NAN, f64::NAN);
        if checkpoints {
            c.batch_execute("CHECKPOINT").await.expect("checkpoint");
            let r = c
                .query_one(
                    "SELECT duration_ms, bytes_written FROM weir_checkpoints ORDER BY epoch DESC LIMIT 1",
                    &[],
                )
                .await
                .expect("weir_checkpoints");
            ckpt_ms = r.get(0);
            ckpt_mib = r.get::<_, i64>(1) as f64 / (1 << 20) as f64;
            drop(c);
            let t = Instant::now();
            server.restart();
            let c = server.connect().await;
            let n: i64 = c
                .query_one(&format!("SELECT count(*) FROM {name}"), &[])
                .await
                .expect("count after restart")
                .get(0);
            restart = t.elapsed().as_secs_f64();
            assert_eq!(n, view_rows, "{name}: rows changed across the restart");
        }
        println!(
            "{name:<5} {source_rows:>12} {secs:>9.2} {:>13.0} {:>13.0} {view_rows:>11} {peak:>10.0} {ckpt_ms:>9.0} {ckpt_mib:>9.1} {restart:>9.2}",
            events as f64 / secs,
            source_rows as f64 / secs
        );
    }
}
