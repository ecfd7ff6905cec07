//! Nexmark on the built-in generator (release build): for each query, a fresh server, the
//! `person`, `auction` and `bid` sources bounded to `N` Nexmark events (default 10
//! million; 2% people, 6% auctions, 92% bids), the query created as a materialized view,
//! then FLUSH (which returns once the bounded generators are exhausted and every row is in
//! the view). Reported per query: the rows its sources produced, the time from CREATE to
//! FLUSH's return, Nexmark events/s (N / time) and source rows/s, the view's rows, and the
//! server's peak resident memory (VmHWM).
//!
//! Each view runs its own generator instances (one thread per source, its large batches
//! made in slices on the `weir-gen-K` threads) beside the dataflow worker (`weir-dataflow`
//! and the view's shards on `weir-shard-K`), so generation overlaps with maintenance.
//! The server's threads' CPU (from `/proc/<pid>/task/*/stat`, sampled every 100 ms from
//! CREATE to FLUSH: a thread that ends is counted as of its last sample) is reported per
//! kind: `df cpu` (dataflow and shard threads), `gen cpu` (source and generator threads),
//! and `ev/df-cpu-s`, Nexmark events per CPU-second of the dataflow threads: the engine's
//! cost without the generator's. The server runs with `--workers 2` unless
//! `NEXMARK_SERVER_ARGS` says otherwise.
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
        "{:<5} {:>12} {:>9} {:>13} {:>13} {:>8} {:>8} {:>12} {:>11} {:>10} {:>9} {:>9} {:>9}",
        "query",
        "source rows",
        "secs",
        "events/s",
        "rows/s",
        "df cpu",
        "gen cpu",
        "ev/df-cpu-s",
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
        let pid = server.pid().expect("server pid");
        let sampler = CpuSampler::start(pid);
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
        let (df_cpu, gen_cpu) = sampler.stop();
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
            "{name:<5} {source_rows:>12} {secs:>9.2} {:>13.0} {:>13.0} {df_cpu:>8.2} {gen_cpu:>8.2} {:>12.0} {view_rows:>11} {peak:>10.0} {ckpt_ms:>9.0} {ckpt_mib:>9.1} {restart:>9.2}",
            events as f64 / secs,
            source_rows as f64 / secs,
            events as f64 / df_cpu
        );
    }
}

/// Samples the server's per-thread CPU until stopped; see the header.
struct CpuSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<std::collections::HashMap<u64, (String, f64)>>,
    base: std::collections::HashMap<u64, (String, f64)>,
}

impl CpuSampler {
    fn start(pid: u32) -> CpuSampler {
        let base = thread_cpu(pid);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handle = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut seen = std::collections::HashMap::new();
                loop {
                    let done = stop.load(std::sync::atomic::Ordering::Acquire);
                    seen.extend(thread_cpu(pid));
                    if done {
                        return seen;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
        });
        CpuSampler { stop, handle, base }
    }

    /// (dataflow CPU s, generator CPU s) since `start`.
    fn stop(self) -> (f64, f64) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let seen = self.handle.join().expect("cpu sampler");
        let (mut df, mut generator) = (0.0, 0.0);
        for (tid, (name, cpu)) in seen {
            let used = cpu - self.base.get(&tid).map_or(0.0, |(_, c)| *c);
            if name.starts_with("weir-dataflow") || name.starts_with("weir-shard") {
                df += used;
            } else if name.starts_with("weir-src") || name.starts_with("weir-gen") {
                generator += used;
            }
        }
        (df, generator)
    }
}

/// CPU seconds so far of each thread of `pid`: tid -> (name, seconds).
fn thread_cpu(pid: u32) -> std::collections::HashMap<u64, (String, f64)> {
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut out = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "tid (name) state ..." : utime and stime are fields 14 and 15
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks: f64 = rest
            .get(11..13)
            .map(|f| f.iter().filter_map(|x| x.parse::<f64>().ok()).sum())
            .unwrap_or(0.0);
        out.insert(tid, (name, ticks / tick));
    }
    out
}
