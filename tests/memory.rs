//! `--memory-limit`: at the limit, sources pause and INSERT waits instead of the process
//! growing; `weir_memory` shows where memory goes; freeing memory (a DROP) lets them go on.

use std::time::{Duration, Instant};

use crate::harness::{HeldPeak, Options, TestServer, peak_mib, query_text};

fn count(r: &[Vec<String>]) -> i64 {
    r[0][0].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_memory_limit_sources_pause_and_inserts_wait() {
    let limit_mib = 160.0;
    let server = TestServer::start_with(Options {
        env: &[],
        args: &["--memory-limit", "160MiB", "--checkpoint-interval", "0"],
        data_dir: None,
        nofile: None,
    });
    let held = HeldPeak::start(server.pid().expect("pid"));
    let c = server.connect().await;
    let r = query_text(
        &c,
        "SELECT bytes_in_memory > 0, bytes_spilled, \"limit\" FROM weir_memory WHERE component = 'process (resident)'",
    )
    .await;
    assert_eq!(r, vec![vec!["t", "0", &(160u64 << 20).to_string()]]);
    // a table whose full read built a snapshot cache
    c.batch_execute(
        "CREATE TABLE big (id INT PRIMARY KEY, v TEXT); \
         INSERT INTO big SELECT g, repeat('x', 50) FROM generate_series(1, 100000) AS t(g); \
         SELECT count(*) FROM big WHERE v <> 'y'",
    )
    .await
    .unwrap();
    let table_bytes = |r: Vec<Vec<String>>| -> i64 { r[0][0].parse().unwrap() };
    let big_before = table_bytes(
        query_text(
            &c,
            "SELECT bytes_in_memory FROM weir_memory WHERE component = 'table big'",
        )
        .await,
    );
    // a view whose state grows with every row of an endless generator
    c.batch_execute(
        "CREATE TABLE notes (n INT); \
         CREATE SOURCE ids (id BIGINT, pad VARCHAR) WITH (connector = 'datagen', \
           fields.id.kind = 'sequence', fields.pad.length = '40'); \
         CREATE MATERIALIZED VIEW per_id AS SELECT id, max(pad) AS pad, count(*) AS n FROM ids GROUP BY id",
    )
    .await
    .unwrap();
    // paused for good: spilling the view's state tables first brings memory under the limit
    // a few times, but its groups and contents cannot spill and keep growing; wait until
    // the source has stayed paused for 2 s
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut paused_since: Option<Instant> = None;
    loop {
        let s = query_text(
            &c,
            "SELECT status FROM weir_sources WHERE view_name = 'per_id'",
        )
        .await;
        if s[0][0] == "paused: memory limit" {
            let since = *paused_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(2) {
                break;
            }
        } else {
            paused_since = None;
        }
        assert!(
            Instant::now() < deadline,
            "never paused: {s:?}; {}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // paused: the view stops growing, the process stays near the limit
    let before = count(&query_text(&c, "SELECT count(*) FROM per_id").await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = count(&query_text(&c, "SELECT count(*) FROM per_id").await);
    assert!(
        after - before < 100_000,
        "still growing: {before} -> {after}"
    );
    // what the limit counts: anonymous memory (not the binary's code pages)
    let peak = held.peak_mib();
    println!(
        "peak held {peak:.0} MiB (VmHWM {:.0} MiB) with a {limit_mib} MiB limit",
        peak_mib(server.pid().expect("pid"))
    );
    assert!(
        peak < limit_mib + 96.0,
        "peak {peak} MiB over a {limit_mib} MiB limit"
    );
    // weir_memory says where it went: the view's state and contents
    let parts = query_text(
        &c,
        "SELECT component, bytes_in_memory + bytes_spilled > 1000000 FROM weir_memory WHERE component LIKE 'view per_id%' ORDER BY 1",
    )
    .await;
    assert_eq!(
        parts,
        vec![
            vec!["view per_id: contents", "t"],
            vec!["view per_id: state", "t"]
        ]
    );
    // the table's snapshot cache went first (it is rebuilt on demand)
    let big_after = table_bytes(
        query_text(
            &c,
            "SELECT bytes_in_memory FROM weir_memory WHERE component = 'table big'",
        )
        .await,
    );
    assert!(
        big_after < big_before,
        "cache kept: {big_before} -> {big_after}"
    );
    // an INSERT waits while the server is over its limit
    let insert = {
        let c2 = server.connect().await;
        tokio::spawn(async move { c2.batch_execute("INSERT INTO notes VALUES (1)").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!insert.is_finished(), "INSERT went through at the limit");
    // reads still answer; dropping the view frees memory and everything goes on
    c.batch_execute("DROP MATERIALIZED VIEW per_id")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), insert)
        .await
        .expect("the INSERT went on once memory was freed")
        .unwrap()
        .unwrap();
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM notes").await,
        vec![vec!["1"]]
    );
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(log.contains("memory limit reached"), "the log says so");
    assert!(log.contains("snapshot caches dropped"));
    assert!(log.contains("memory below the limit again"));
}

/// A size that is not one is refused at start, naming the flag; the default limit is shown.
#[test]
fn a_bad_memory_limit_is_refused_and_the_default_is_shown() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--memory-limit", "lots"])
        .output()
        .expect("run weir");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--memory-limit") && err.contains("is not a size"),
        "{err}"
    );
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--help"])
        .output()
        .expect("run weir");
    assert!(String::from_utf8_lossy(&help.stdout).contains("--memory-limit <SIZE>"));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--state-cache-size <SIZE>"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--state-cache-size", "lots"])
        .output()
        .expect("run weir");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--state-cache-size") && err.contains("is not a size"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_memory_limit_is_logged_at_start() {
    let server = TestServer::start();
    let c = server.connect().await;
    let r = query_text(
        &c,
        "SELECT \"limit\" > 0 FROM weir_memory WHERE component = 'process (resident)'",
    )
    .await;
    assert_eq!(r, vec![vec!["t"]]);
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(
        log.contains("memory limit: 70% of the"),
        "{}",
        server.log_tail()
    );
}

/// Two generated streams of `rows` rows each, with 200-byte texts and random keys: a
/// regular join keeps every row of both sides.
fn join_ddl(rows: u64) -> String {
    let source = |name: &str, seed: u32| {
        format!(
            "CREATE SOURCE {name} (k BIGINT, x BIGINT, pad VARCHAR) WITH (connector = 'datagen', \
             datagen.row.num = '{rows}', datagen.seed = '{seed}', fields.k.min = '1', \
             fields.k.max = '{rows}', fields.x.min = '0', fields.x.max = '1000', \
             fields.pad.length = '200');"
        )
    };
    format!(
        "{} {} CREATE MATERIALIZED VIEW j AS SELECT count(*) AS n, sum(a.x + b.x) AS s, \
         sum(ascii(a.pad) * ascii(b.pad)) AS p FROM a JOIN b ON a.k = b.k",
        source("a", 1),
        source("b", 2)
    )
}

async fn wait_until_read(c: &tokio_postgres::Client, server: &TestServer, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let done = query_text(c, "SELECT bool_and(done) FROM weir_sources").await;
        if done[0][0] == "t" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sources not read in time: {:?}; {}",
            query_text(c, "SELECT * FROM weir_sources").await,
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.batch_execute("FLUSH").await.unwrap();
}

/// The proof of spilling: a regular join whose state is more than three times the memory
/// limit runs under it (within a stated slack) and answers what a server that kept
/// everything in memory answers, which in turn is the one-shot query over the same rows.
/// Run alone, after the other tests (`make test` runs the ignored tests on their own):
/// under the parallel run's load the held peak was 240 MiB instead of 196 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures memory: run alone by `make test` (cargo test -- --ignored)"]
async fn a_join_three_times_the_memory_limit_spills_and_answers_right() {
    const LIMIT_MIB: f64 = 128.0;
    // what the server holds beyond its limit at worst: batches in flight between two
    // samples of the limit (50 ms), the spill store's buffers and what the allocator has
    // not given back yet; peaks of 196-247 MiB held measured (debug build, run alone):
    // at a limit this small, what is not state dominates (see docs/benchmarks.md)
    const SLACK_MIB: f64 = 160.0;
    let rows = 760_000;
    let server = TestServer::start_with(Options {
        env: &[],
        // (checkpoints off: a checkpoint's full base of a spilled table is still built in
        // memory, see docs/GUARANTEES.md)
        args: &["--memory-limit", "128MiB", "--checkpoint-interval", "0"],
        data_dir: None,
        nofile: None,
    });
    let pid = server.pid().expect("pid");
    let held = HeldPeak::start(pid);
    let c = server.connect().await;
    let started = Instant::now();
    c.batch_execute(&join_ddl(rows)).await.unwrap();
    wait_until_read(&c, &server, Duration::from_secs(900)).await;
    let took = started.elapsed();
    let spilled = query_text(
        &c,
        "SELECT bytes_in_memory, bytes_spilled FROM weir_memory WHERE component = 'view j: state'",
    )
    .await;
    let (in_memory, spilled): (f64, f64) = (
        spilled[0][0].parse().unwrap(),
        spilled[0][1].parse().unwrap(),
    );
    let state_mib = (in_memory + spilled) / 1048576.0;
    let peak = held.peak_mib();
    println!(
        "join state {state_mib:.0} MiB ({:.0} MiB spilled) under a {LIMIT_MIB} MiB limit: \
         peak held {peak:.0} MiB, VmHWM {:.0} MiB, {:.1} s",
        spilled / 1048576.0,
        peak_mib(pid),
        took.as_secs_f64()
    );
    assert!(
        state_mib >= 3.0 * LIMIT_MIB,
        "state {state_mib:.0} MiB is not 3x the limit"
    );
    assert!(
        peak < LIMIT_MIB + SLACK_MIB,
        "held {peak:.0} MiB at a {LIMIT_MIB} MiB limit; {}",
        server.log_tail()
    );
    let spilled_answer = query_text(&c, "SELECT n, s, p FROM j").await;
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(
        log.contains("views' state spills to disk"),
        "the log says so"
    );
    drop(c);
    drop(server);

    // the same rows on a server that keeps everything in memory, and the one-shot query
    // over them (per-key counts and sums of both sides, joined)
    let control = TestServer::start_with(Options {
        env: &[],
        args: &["--checkpoint-interval", "0"],
        data_dir: None,
        nofile: None,
    });
    let c = control.connect().await;
    c.batch_execute(&join_ddl(rows)).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW ca AS SELECT k, count(*) AS n, sum(x) AS sx, sum(ascii(pad)) AS sp FROM a GROUP BY k; \
         CREATE MATERIALIZED VIEW cb AS SELECT k, count(*) AS n, sum(x) AS sx, sum(ascii(pad)) AS sp FROM b GROUP BY k",
    )
    .await
    .unwrap();
    wait_until_read(&c, &control, Duration::from_secs(600)).await;
    let in_memory_answer = query_text(&c, "SELECT n, s, p FROM j").await;
    assert_eq!(spilled_answer, in_memory_answer, "spilled vs in memory");
    let one_shot = query_text(
        &c,
        "SELECT sum(ca.n * cb.n), sum(ca.sx * cb.n + cb.sx * ca.n), sum(ca.sp * cb.sp) \
         FROM ca JOIN cb ON ca.k = cb.k",
    )
    .await;
    assert_eq!(in_memory_answer, one_shot, "the view vs the one-shot query");
}
