//! `--memory-limit`: at the limit, sources pause and INSERT waits instead of the process
//! growing; `weir_memory` shows where memory goes; freeing memory (a DROP) lets them go on.

use std::time::{Duration, Instant};

use crate::harness::{
    HeldPeak, Options, TestServer, describe_error, peak_mib, query_text, sqlstate,
};

fn count(r: &[Vec<String>]) -> i64 {
    r[0][0].parse().unwrap()
}

// run alone too: under the parallel run's load the process dipped under the limit while
// spilling and the INSERT that should wait went through (seen once, 12-02; passes alone)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures memory: run alone by `make test` (cargo test -- --ignored)"]
async fn at_the_memory_limit_sources_pause_and_inserts_wait() {
    let limit_mib = 160.0;
    let server = TestServer::start_with(Options {
        env: &[],
        // one shard per view, as when its bounds were measured: two shards' batches in
        // flight made the dip under the limit (above) likelier
        args: &[
            "--memory-limit",
            "160MiB",
            "--checkpoint-interval",
            "0",
            "--workers",
            "1",
        ],
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
    // a table keeps its rows in the store, not in memory; a full read of a view over it
    // builds the view's snapshot cache
    c.batch_execute(
        "CREATE TABLE big (id INT PRIMARY KEY, v TEXT); \
         INSERT INTO big SELECT g, repeat('x', 50) FROM generate_series(1, 100000) AS t(g); \
         CREATE MATERIALIZED VIEW big_v AS SELECT * FROM big; \
         SELECT count(*) FROM big_v WHERE v <> 'y'",
    )
    .await
    .unwrap();
    assert_eq!(
        query_text(
            &c,
            "SELECT bytes_in_memory, bytes_spilled > 5000000 FROM weir_memory WHERE component = 'table big'",
        )
        .await,
        vec![vec!["0", "t"]]
    );
    // a view whose state grows with every row of an endless generator, in groups that
    // cannot spill: a windowed aggregate's (its window, 1,000 days of 1 ms rows, never
    // closes here)
    c.batch_execute(
        "CREATE TABLE notes (n INT); \
         CREATE SOURCE ids (id BIGINT, pad VARCHAR, ts TIMESTAMP, \
           WATERMARK FOR ts AS ts - INTERVAL '1 second') WITH (connector = 'datagen', \
           fields.id.kind = 'sequence', fields.pad.length = '40'); \
         CREATE MATERIALIZED VIEW per_id AS SELECT window_start, window_end, id, max(pad) AS pad, \
           count(*) AS n FROM TUMBLE(ids, ts, INTERVAL '1000 days') \
           GROUP BY window_start, window_end, id",
    )
    .await
    .unwrap();
    // paused for good: spilling the view's state tables and contents first brings memory
    // under the limit a few times, but its groups cannot spill and keep growing; wait
    // until the source has stayed paused for 2 s
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
    // (measured 238-261 MiB held, debug build: batches in flight between the sampler's
    // looks, the windowed aggregate's per-batch working memory, the spill store's buffers;
    // 203 MiB when this view was a plain GROUP BY, whose groups now spill)
    assert!(
        peak < limit_mib + 128.0,
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
    // an INSERT waits while the server is over its limit. The process hovers at the limit
    // (when the sampler sees it dip under, sources resume and take it over again), and an
    // INSERT that arrives in a dip goes through, as it should: try again until one arrives
    // over the limit and waits (seen once in four runs: 180 MiB peak, one dip)
    let mut went_through = 0;
    let insert = loop {
        let c2 = server.connect().await;
        let insert =
            tokio::spawn(async move { c2.batch_execute("INSERT INTO notes VALUES (1)").await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        if !insert.is_finished() {
            break insert;
        }
        insert.await.unwrap().unwrap();
        went_through += 1;
        assert!(
            went_through < 10,
            "INSERT went through at the limit 10 times"
        );
    };
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
        vec![vec![(went_through + 1).to_string()]]
    );
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(log.contains("memory limit reached"), "the log says so");
    // the view's snapshot cache went first (it is rebuilt on demand)
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

/// `COPY` rows for `big`: `id`, `grp` = id % 1000, and a 200-byte text made from the id.
fn big_rows(from: i64, to: i64) -> bytes::Bytes {
    let mut out = String::with_capacity(((to - from) as usize) * 220);
    for id in from..to {
        let pad = format!("{id:0>12}").repeat(17);
        out.push_str(&format!("{id}\t{}\t{}\n", id % 1000, &pad[..200]));
    }
    bytes::Bytes::from(out)
}

/// The proof that tables live in the store: a table four times the memory limit is loaded
/// with one COPY, counted, read by primary key, fully scanned and 1% of it updated, and a
/// view holding half of it (twice the limit: its contents spill) is created and queried,
/// all under the limit (within a stated slack) and with the right answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures memory: run alone by `make test` (cargo test -- --ignored)"]
async fn a_table_four_times_the_memory_limit_loads_reads_and_updates_under_it() {
    use futures::SinkExt;
    const LIMIT_MIB: f64 = 128.0;
    // what is held beyond the limit at worst: a COPY chunk (4 MiB of rows) in its forms
    // between the wire and the store, fjall's write buffers being flushed, and what the
    // allocator keeps; measured in docs/benchmarks.md (160-190 MiB here, also on a disk
    // throttled to 20 MB/s; 220, 234 and 237 MiB on the CI machine, each during the view's
    // first checkpoint, where a checkpoint's 1 KB commit took 2.7-4.8 s): twice the limit
    const SLACK_MIB: f64 = 128.0;
    const ROWS: i64 = 2_400_000;
    let server = TestServer::start_with(Options {
        env: &[],
        args: &["--memory-limit", "128MiB"],
        data_dir: None,
        nofile: None,
    });
    let pid = server.pid().expect("pid");
    let held = HeldPeak::start(pid);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE big (id BIGINT PRIMARY KEY, grp INT NOT NULL, pad TEXT NOT NULL)",
    )
    .await
    .unwrap();
    let started = Instant::now();
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY big FROM STDIN")
        .await
        .expect("copy starts");
    futures::pin_mut!(sink);
    let mut from = 1;
    while from <= ROWS {
        let to = (from + 5_000).min(ROWS + 1);
        sink.send(big_rows(from, to)).await.unwrap();
        from = to;
    }
    let copied = sink.finish().await.expect("COPY");
    assert_eq!(copied, ROWS as u64);
    let load = started.elapsed();
    let stored = query_text(
        &c,
        "SELECT bytes_in_memory, bytes_spilled FROM weir_memory WHERE component = 'table big'",
    )
    .await;
    assert_eq!(stored[0][0], "0");
    let stored_mib = stored[0][1].parse::<f64>().unwrap() / 1048576.0;
    assert!(
        stored_mib >= 4.0 * LIMIT_MIB,
        "the table ({stored_mib:.0} MiB) is not 4x the limit"
    );
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM big").await,
        vec![vec![ROWS.to_string()]]
    );
    let sum_grp: i64 = (1..=ROWS).map(|id| id % 1000).sum();
    let scanned = Instant::now();
    assert_eq!(
        query_text(
            &c,
            "SELECT count(*), sum(grp), sum(length(pad)) FROM big WHERE pad <> ''"
        )
        .await,
        vec![vec![
            ROWS.to_string(),
            sum_grp.to_string(),
            (ROWS * 200).to_string()
        ]]
    );
    let scan = scanned.elapsed();
    let point = Instant::now();
    let want_pad = format!("{:0>12}", 1_234_567).repeat(17)[..200].to_owned();
    assert_eq!(
        query_text(&c, "SELECT grp, pad FROM big WHERE id = 1234567").await,
        vec![vec!["567".to_owned(), want_pad.clone()]]
    );
    let point = point.elapsed();
    let updated = Instant::now();
    assert_eq!(
        c.execute("UPDATE big SET grp = grp + 1 WHERE id % 100 = 0", &[])
            .await
            .unwrap(),
        (ROWS / 100) as u64
    );
    let update = updated.elapsed();
    assert_eq!(
        query_text(&c, "SELECT sum(grp) FROM big").await,
        vec![vec![(sum_grp + ROWS / 100).to_string()]]
    );
    assert_eq!(
        query_text(&c, "SELECT grp FROM big WHERE id = 1234500").await,
        vec![vec!["501"]]
    );
    let table_peak = held.peak_mib();
    // a view holding half the table: its contents (2x the limit) spill, and a query of it
    // streams them
    let viewed = Instant::now();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW evens AS SELECT id, grp, pad FROM big WHERE id % 2 = 0",
    )
    .await
    .unwrap();
    let backfill = viewed.elapsed();
    let view_peak = held.peak_mib();
    // its first checkpoint writes its contents (294 MiB) to the store; a query that reads
    // the table meanwhile holds a store snapshot, and fjall keeps the memtables written
    // while a snapshot is open (docs/GUARANTEES.md): the two are not overlapped here
    c.batch_execute("CHECKPOINT").await.unwrap();
    let checkpoint_peak = held.peak_mib();
    let want = query_text(
        &c,
        "SELECT count(*), sum(grp), sum(length(pad)) FROM big WHERE id % 2 = 0",
    )
    .await;
    let scan_peak = held.peak_mib();
    assert_eq!(
        query_text(&c, "SELECT count(*), sum(grp), sum(length(pad)) FROM evens").await,
        want
    );
    let contents = query_text(
        &c,
        "SELECT bytes_in_memory, bytes_spilled FROM weir_memory WHERE component = 'view evens: contents'",
    )
    .await;
    let contents_mib = (contents[0][0].parse::<f64>().unwrap()
        + contents[0][1].parse::<f64>().unwrap())
        / 1048576.0;
    assert!(
        contents_mib >= 2.0 * LIMIT_MIB,
        "the view's contents ({contents_mib:.0} MiB) are not 2x the limit"
    );
    let peak = held.peak_mib();
    println!(
        "table {stored_mib:.0} MiB under a {LIMIT_MIB} MiB limit: peak held {peak:.0} MiB \
         ({table_peak:.0} MiB through the table's steps, {view_peak:.0} MiB once the view was \
         built, {checkpoint_peak:.0} after its checkpoint, {scan_peak:.0} after a scan of the \
         table; VmHWM {:.0} MiB); COPY {:.1} s, scan {:.1} s, point query {:.1} ms, \
         UPDATE 1% {:.1} s; a view of {contents_mib:.0} MiB created in {:.1} s",
        peak_mib(pid),
        load.as_secs_f64(),
        scan.as_secs_f64(),
        point.as_secs_f64() * 1000.0,
        update.as_secs_f64(),
        backfill.as_secs_f64()
    );
    assert!(
        peak < LIMIT_MIB + SLACK_MIB,
        "held {peak:.0} MiB at a {LIMIT_MIB} MiB limit; {}",
        server.log_tail()
    );
}

/// A COPY is applied in chunks as its data arrives (a 1 MiB chunk under a 32 MiB limit),
/// and is still all or nothing: one that fails on its last row, one the client aborts, and
/// one in a rolled-back transaction block leave the table as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_applied_in_chunks_is_all_or_nothing() {
    use futures::SinkExt;
    let server = TestServer::start_with(Options {
        env: &[],
        args: &["--memory-limit", "32MiB"],
        data_dir: None,
        nofile: None,
    });
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE big (id BIGINT PRIMARY KEY, grp INT NOT NULL, pad TEXT NOT NULL); \
         INSERT INTO big VALUES (0, 0, 'before')",
    )
    .await
    .unwrap();
    let rows = 40_000;
    // a bad last row: the chunks before it were applied, and are undone
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY big FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for from in (1..=rows).step_by(5_000) {
        sink.send(big_rows(from, from + 5_000)).await.unwrap();
    }
    sink.send(bytes::Bytes::from_static(b"x\t1\tbad\n"))
        .await
        .unwrap();
    let e = sink.finish().await.expect_err("bad row");
    assert_eq!(sqlstate(&e), "22P02", "{}", describe_error(&e));
    assert_eq!(
        query_text(&c, "SELECT count(*), max(id) FROM big").await,
        vec![vec!["1", "0"]]
    );
    // a duplicate key in a later chunk: 23505, nothing stays
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY big FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for from in (1..=rows).step_by(5_000) {
        sink.send(big_rows(from, from + 5_000)).await.unwrap();
    }
    sink.send(big_rows(7, 8)).await.unwrap();
    let e = sink.finish().await.expect_err("duplicate key");
    assert_eq!(sqlstate(&e), "23505", "{}", describe_error(&e));
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM big").await,
        vec![vec!["1"]]
    );
    // in a transaction block: the COPY is applied, ROLLBACK undoes it
    c.batch_execute("BEGIN").await.unwrap();
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY big FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for from in (1..=rows).step_by(5_000) {
        sink.send(big_rows(from, from + 5_000)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), rows as u64);
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM big").await,
        vec![vec![(rows + 1).to_string()]]
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM big").await,
        vec![vec!["1"]]
    );
    // and a good one stays, across a restart
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY big FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for from in (1..=rows).step_by(5_000) {
        sink.send(big_rows(from, from + 5_000)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), rows as u64);
    drop(c);
    let mut server = server;
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        query_text(&c, "SELECT count(*), sum(grp) FROM big").await,
        vec![vec![
            (rows + 1).to_string(),
            (1..=rows).map(|id| id % 1000).sum::<i64>().to_string()
        ]]
    );
}

/// A COPY cut off by `kill -9` leaves nothing: the chunks it applied to a keyed table (seen
/// by other sessions meanwhile) are undone at the next start, and the view over the table
/// agrees; the chunks it staged for an append-only table are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_cut_off_by_kill_9_leaves_nothing() {
    use futures::SinkExt;
    let mut server = TestServer::start_with(Options {
        env: &[],
        args: &["--memory-limit", "32MiB"],
        data_dir: None,
        nofile: None,
    });
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE k (id BIGINT PRIMARY KEY, grp INT NOT NULL, pad TEXT NOT NULL); \
         CREATE TABLE a (id BIGINT, grp INT NOT NULL, pad TEXT NOT NULL) APPEND ONLY; \
         INSERT INTO k VALUES (0, 5, 'before'); INSERT INTO a VALUES (0, 5, 'before'); \
         CREATE MATERIALIZED VIEW kc AS SELECT count(*) AS n, sum(grp) AS s FROM k; \
         CREATE MATERIALIZED VIEW ac AS SELECT count(*) AS n, sum(grp) AS s FROM a; \
         CHECKPOINT",
    )
    .await
    .unwrap();
    let ck = server.connect().await;
    let ca = server.connect().await;
    let sk = ck
        .copy_in::<_, bytes::Bytes>("COPY k FROM STDIN")
        .await
        .unwrap();
    let sa = ca
        .copy_in::<_, bytes::Bytes>("COPY a FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sk);
    futures::pin_mut!(sa);
    for from in (1..=40_000).step_by(5_000) {
        sk.send(big_rows(from, from + 5_000)).await.unwrap();
        sa.send(big_rows(from, from + 5_000)).await.unwrap();
    }
    // the keyed table's chunks are applied as they arrive
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&query_text(&c, "SELECT count(*) FROM k").await) <= 1 {
        assert!(Instant::now() < deadline, "no chunk applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM a").await,
        vec![vec!["1"]],
        "staged rows are not seen"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    for (table, view) in [("k", "kc"), ("a", "ac")] {
        assert_eq!(
            query_text(&c, &format!("SELECT count(*), sum(grp) FROM {table}")).await,
            vec![vec!["1", "5"]],
            "{table} after the restart; {}",
            server.log_tail()
        );
        assert_eq!(
            query_text(&c, &format!("SELECT n, s FROM {view}")).await,
            vec![vec!["1", "5"]],
            "{view} after the restart"
        );
    }
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(log.contains("undid the applied chunks of a COPY that did not end"));
    assert!(log.contains("dropped the staged rows of a COPY that did not end"));
    // COPY works as before
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY a FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    sink.send(big_rows(1, 1001)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 1000);
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(query_text(&c, "SELECT n FROM ac").await, vec![vec!["1001"]]);
}
