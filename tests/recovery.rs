//! Checkpoints and recovery through the real server: views of every stateful kind over
//! tables written by concurrent clients and over a paced nexmark generator are killed with
//! SIGKILL at random moments (also while a checkpoint is being written: the writer is
//! stalled by the `WEIR_CHECKPOINT_STALL_MS` fail point) and restarted. After each restart
//! every view equals its query run one-shot over the same tables, views restored from a
//! checkpoint say so in `weir_recovery`, and the generator-fed view ends equal to a view
//! that never crashed. A corrupt checkpoint is detected and the views rebuilt; restart
//! time does not grow with the events already processed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::harness::{Options, TestServer, query_text};

/// (name, options, query) of the views over tables; each is compared with its query.
const TABLE_VIEWS: &[(&str, &str, &str)] = &[
    (
        "agg",
        "",
        "SELECT k % 7 AS g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi, count(DISTINCT v % 13) AS d FROM kv GROUP BY 1",
    ),
    ("top", "", "SELECT k, v FROM kv ORDER BY v DESC, k LIMIT 5"),
    (
        "joined",
        "",
        "SELECT e.client, d.name, count(*) AS n, sum(e.n) AS s FROM events e JOIN dim d ON e.client = d.id GROUP BY 1, 2",
    ),
    (
        "win",
        "WITH (allowed_lateness = '1 hour')",
        "SELECT window_start, count(*) AS n, sum(n) AS s, max(client) AS c FROM TUMBLE(events, ts, INTERVAL '1 second') GROUP BY window_start, window_end",
    ),
    (
        "over_agg",
        "",
        "SELECT sum(n) AS n, sum(s) AS s, count(*) AS groups FROM agg",
    ),
];

/// Session windows have no one-shot form: this view is compared with a model.
const SESSION_VIEW: &str = "CREATE MATERIALIZED VIEW sess WITH (allowed_lateness = '1 hour') AS
  SELECT client, window_start, window_end, count(*) AS n
  FROM SESSION(events, ts, INTERVAL '30 milliseconds') GROUP BY window_start, window_end, client";

/// Event `n` of a client happens at this many ms after 2024-01-01: 5 ms apart, with a
/// 45 ms pause after every 50 events (so sessions with a 30 ms gap hold 50 events each).
fn event_ms(client: i64, n: i64) -> i64 {
    n * 5 + (n / 50) * 40 + client
}

/// (client, events) of every session, from the events themselves.
fn session_model(events: &[(i64, i64)]) -> Vec<Vec<String>> {
    let mut by_client: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for (client, n) in events {
        by_client
            .entry(*client)
            .or_default()
            .push(event_ms(*client, *n));
    }
    let mut out = Vec::new();
    for (client, mut ts) in by_client {
        ts.sort();
        let mut count = 0;
        for (i, t) in ts.iter().enumerate() {
            if i > 0 && t - ts[i - 1] >= 30 {
                out.push(vec![client.to_string(), count.to_string()]);
                count = 0;
            }
            count += 1;
        }
        if count > 0 {
            out.push(vec![client.to_string(), count.to_string()]);
        }
    }
    out.sort();
    out
}

/// One client: inserts, updates and deletes keys of its own in `kv`, and appends events.
async fn writer(conn: String, client: i64, seed: u64, stop: Arc<AtomicBool>) {
    let Ok((c, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // continue numbering after what an earlier run of this client wrote
    let start: i64 = match c
        .simple_query(&format!(
            "SELECT coalesce(max(n) + 1, 0) FROM events WHERE client = {client}"
        ))
        .await
    {
        Ok(m) => m
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()),
                _ => None,
            })
            .unwrap_or(0),
        Err(_) => return,
    };
    for n in start.. {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let key = client * 1000 + rng.random_range(0..40);
        let sql = match rng.random_range(0..3) {
            0 => format!("INSERT INTO kv VALUES ({key}, {n})"),
            1 => format!("UPDATE kv SET v = v + {n} WHERE k = {key}"),
            _ => format!("DELETE FROM kv WHERE k = {key}"),
        };
        match c.batch_execute(&sql).await {
            Ok(()) => {}
            // a duplicate key: refused, nothing changed
            Err(e) if e.as_db_error().is_some() => {}
            Err(_) => return,
        }
        // interleaved across clients
        let ev = format!(
            "INSERT INTO events VALUES ({client}, {n}, TIMESTAMP '2024-01-01' + INTERVAL '1 millisecond' * {})",
            event_ms(client, n)
        );
        if c.batch_execute(&ev).await.is_err() {
            return;
        }
    }
}

fn sorted(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.sort();
    rows
}

async fn wait_for_source(c: &tokio_postgres::Client, view: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = query_text(
            c,
            &format!(
                "SELECT done, coalesce(error, '') FROM weir_sources WHERE view_name = '{view}'"
            ),
        )
        .await;
        if r.iter().all(|r| r[0] == "t") && !r.is_empty() {
            assert!(
                r.iter().all(|r| r[1].is_empty()),
                "source of {view} failed: {r:?}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the source of {view} did not finish: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_come_back_from_checkpoints_after_kill_9() {
    let seed: u64 = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("recovery seed {seed} (replay with WEIR_TEST_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut server = TestServer::start_with(Options {
        args: &["--checkpoint-interval", "100ms"],
        ..Default::default()
    });
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k BIGINT PRIMARY KEY, v BIGINT);
         CREATE TABLE dim (id BIGINT PRIMARY KEY, name TEXT);
         INSERT INTO dim VALUES (1, 'one'), (2, 'two'), (3, 'three');
         CREATE TABLE events (client BIGINT, n BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '1 second') APPEND ONLY;
         CREATE SOURCE bids WITH (connector = 'nexmark', nexmark.table.type = 'bid',
           nexmark.event.num = '300000', nexmark.rows.per.second = '40000');
         CREATE MATERIALIZED VIEW nb AS
           SELECT auction % 10 AS a, count(*) AS n, sum(price) AS s, max(price) AS p FROM bids GROUP BY 1",
    )
    .await
    .unwrap();
    for (name, options, query) in TABLE_VIEWS {
        c.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW {name} {options} AS {query}"
        ))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    c.batch_execute(SESSION_VIEW).await.unwrap();
    drop(c);
    let kills = 5;
    let mut restored = 0;
    for round in 0..kills {
        // about half the rounds kill while the checkpoint writer is stalled mid-write
        let stalled = rng.random_bool(0.5);
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (1..=3)
            .map(|client| {
                tokio::spawn(writer(
                    server.conn_string(),
                    client,
                    seed ^ (round * 10 + client) as u64,
                    stop.clone(),
                ))
            })
            .collect();
        let wait = Duration::from_millis(rng.random_range(300..1500));
        tokio::time::sleep(wait).await;
        println!("round {round}: kill after {wait:?} (checkpoint writer stalled: {stalled})");
        server.kill();
        stop.store(true, Ordering::Release);
        for t in tasks {
            let _ = t.await;
        }
        server.set_env(if stalled {
            &[("WEIR_CHECKPOINT_STALL_MS", "250")]
        } else {
            &[]
        });
        server.restart();
        let c = server.connect().await;
        let recovery = query_text(
            &c,
            "SELECT view_name, outcome, coalesce(reason, '') FROM weir_recovery",
        )
        .await;
        println!("round {round}: {recovery:?}");
        restored += recovery.iter().filter(|r| r[1] == "restored").count();
        assert!(
            recovery.iter().all(|r| r[1] != "failed"),
            "seed {seed}: a view failed to come back: {recovery:?}"
        );
        query_text(&c, "FLUSH").await;
        for (name, _, query) in TABLE_VIEWS {
            let view = sorted(query_text(&c, &format!("SELECT * FROM {name}")).await);
            let oracle = sorted(query_text(&c, query).await);
            assert_eq!(
                view, oracle,
                "seed {seed} round {round}: view {name} differs from its query after recovery"
            );
        }
        let events: Vec<(i64, i64)> = query_text(&c, "SELECT client, n FROM events")
            .await
            .iter()
            .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
            .collect();
        assert_eq!(
            sorted(query_text(&c, "SELECT client, n FROM sess").await),
            session_model(&events),
            "seed {seed} round {round}: session view differs from the model after recovery"
        );
    }
    assert!(
        restored > 0,
        "seed {seed}: no view was ever restored from a checkpoint"
    );
    // the generator-fed view, restored across the kills, equals one that never crashed
    let c = server.connect().await;
    c.batch_execute(
        "CREATE MATERIALIZED VIEW nb_fresh AS
           SELECT auction % 10 AS a, count(*) AS n, sum(price) AS s, max(price) AS p FROM bids GROUP BY 1",
    )
    .await
    .unwrap();
    wait_for_source(&c, "nb").await;
    wait_for_source(&c, "nb_fresh").await;
    query_text(&c, "FLUSH").await;
    let a = sorted(query_text(&c, "SELECT * FROM nb").await);
    let b = sorted(query_text(&c, "SELECT * FROM nb_fresh").await);
    assert_eq!(
        a, b,
        "seed {seed}: the restored generator view differs from a fresh one"
    );
    let total: i64 = a.iter().map(|r| r[1].parse::<i64>().unwrap()).sum();
    assert_eq!(
        total, 276_000,
        "seed {seed}: 46/50 of 300,000 events are bids"
    );
    let cps = query_text(
        &c,
        "SELECT count(*) FROM weir_checkpoints WHERE status = 'committed' AND bytes_written > 0",
    )
    .await;
    assert_ne!(
        cps[0][0], "0",
        "weir_checkpoints shows no committed checkpoint"
    );
}

/// Change the stopped server's store directly.
fn tamper(
    server: &TestServer,
    change: impl FnOnce(&dyn weir::state::store::Store) -> weir::state::store::WriteBatch,
) {
    let store =
        weir::state::fjall_store::FjallStore::open(&server.data_dir().join("store")).unwrap();
    let wb = change(&store);
    weir::state::store::Store::commit(&store, wb, weir::state::store::Durability::Sync).unwrap();
}

/// (outcome, reason) of a view in `weir_recovery`.
async fn recovery_of(c: &tokio_postgres::Client, view: &str) -> (String, String) {
    let r = query_text(
        c,
        &format!(
            "SELECT outcome, coalesce(reason, '') FROM weir_recovery WHERE view_name = '{view}'"
        ),
    )
    .await;
    (r[0][0].clone(), r[0][1].clone())
}

/// A checkpoint whose manifest or state was damaged is never restored: the views are
/// rebuilt from their inputs, `weir_recovery` says why, and the contents are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_checkpoint_is_rebuilt_not_restored() {
    let mut server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT PRIMARY KEY, v INT);
         INSERT INTO t SELECT g, g % 5 FROM generate_series(1, 1000) g;
         CREATE MATERIALIZED VIEW per_v AS SELECT v, count(*) AS n, sum(k) AS s FROM t GROUP BY v;
         CHECKPOINT",
    )
    .await
    .unwrap();
    let expected = sorted(query_text(&c, "SELECT * FROM per_v").await);
    drop(c);
    // 1. one state blob lost: the entry count no longer matches the manifest
    server.kill();
    tamper(&server, |store| {
        let mut victim = None;
        store
            .scan_prefix(b"Kv", &mut |k, _| {
                if victim.is_none() && k.len() > 8 {
                    victim = Some(k.to_vec());
                }
                Ok(())
            })
            .unwrap();
        let mut wb = weir::state::store::WriteBatch::default();
        wb.delete(victim.expect("a checkpointed state key"));
        wb
    });
    server.restart();
    let c = server.connect().await;
    let (outcome, reason) = recovery_of(&c, "per_v").await;
    assert_eq!(outcome, "rebuilt", "{reason}");
    // (the lost blob is a base chunk the checkpoint names, or the count of keys is short)
    assert!(
        reason.contains("keys") || reason.contains("is missing"),
        "{reason}"
    );
    assert_eq!(
        sorted(query_text(&c, "SELECT * FROM per_v").await),
        expected
    );
    query_text(&c, "CHECKPOINT").await;
    drop(c);
    // 2. a flipped byte in the manifest: its checksum catches it
    server.kill();
    tamper(&server, |store| {
        let mut m = store.get(b"Km").unwrap().expect("a manifest");
        let mid = m.len() / 2;
        m[mid] ^= 0x01;
        let mut wb = weir::state::store::WriteBatch::default();
        wb.put(b"Km".to_vec(), m);
        wb
    });
    server.restart();
    let c = server.connect().await;
    let (outcome, reason) = recovery_of(&c, "per_v").await;
    assert_eq!(outcome, "rebuilt", "{reason}");
    assert!(reason.contains("checksum"), "{reason}");
    assert_eq!(
        sorted(query_text(&c, "SELECT * FROM per_v").await),
        expected
    );
    // and checkpoints go on
    query_text(&c, "INSERT INTO t VALUES (5000, 1)").await;
    query_text(&c, "CHECKPOINT").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_eq!(recovery_of(&c, "per_v").await.0, "restored");
    let n = query_text(&c, "SELECT sum(n) FROM per_v").await;
    assert_eq!(n[0][0], "1001");
}

/// Restarting does not recompute: a view over 1M generator events comes back in about the
/// time one over 200k does (its state, 100 groups of count and sum, is the same size),
/// restored from its checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_time_depends_on_state_not_history() {
    let mut times = Vec::new();
    for events in [200_000u64, 1_000_000] {
        let mut server = TestServer::start();
        let c = server.connect().await;
        c.batch_execute(&format!(
            "CREATE SOURCE bids WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '{events}');
             CREATE MATERIALIZED VIEW per_auction AS SELECT auction % 100 AS a, count(*) AS n, sum(price) AS p FROM bids GROUP BY 1;
             FLUSH;
             CHECKPOINT"
        ))
        .await
        .unwrap();
        let before = sorted(query_text(&c, "SELECT * FROM per_auction").await);
        drop(c);
        let started = Instant::now();
        server.restart();
        let c = server.connect().await;
        let after = sorted(query_text(&c, "SELECT * FROM per_auction").await);
        let took = started.elapsed();
        assert_eq!(
            before, after,
            "{events} events: contents changed across the restart"
        );
        let r = query_text(&c, "SELECT outcome FROM weir_recovery").await;
        assert_eq!(r, vec![vec!["restored".to_string()]], "{events} events");
        println!("{events} events: restart and first read took {took:?}");
        times.push(took);
    }
    // 5x the history; allow noise, not growth with it (recomputing 1M events in a debug
    // build takes many seconds)
    assert!(
        times[1] < times[0] * 2 + Duration::from_secs(1),
        "restart time grew with the history: {times:?}"
    );
}

/// (keys, bytes) the store holds under `prefix` whose key also passes `only` (the server
/// must be stopped).
fn stored(server: &TestServer, prefix: &[u8], only: impl Fn(&[u8]) -> bool) -> (usize, usize) {
    use weir::state::store::Store;
    let store =
        weir::state::fjall_store::FjallStore::open(&server.data_dir().join("store")).unwrap();
    let (mut keys, mut bytes) = (0, 0);
    store
        .scan_prefix(prefix, &mut |k, v| {
            if only(k) {
                keys += 1;
                bytes += k.len() + v.len();
            }
            Ok(())
        })
        .unwrap();
    (keys, bytes)
}

/// Bytes of the views' operator state in the store: `Kv ++ oid ++ 'g'` (not their rows).
fn stored_state_bytes(server: &TestServer) -> usize {
    stored(server, b"Kv", |k| k.get(6) == Some(&b'g')).1
}

/// Closed windows leave the store too: on an endless stream the checkpointed operator
/// state stays bounded (the open windows, plus deltas until they are folded into a new
/// base) while the rows processed grow, and it restores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_windows_are_deleted_from_the_store() {
    let mut server = TestServer::start_with(Options {
        args: &["--checkpoint-interval", "100ms"],
        ..Default::default()
    });
    let c = server.connect().await;
    c.batch_execute(
        "CREATE SOURCE ticks (n BIGINT, k INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '100 milliseconds')
           WITH (connector = 'datagen', datagen.rows.per.second = '20000', datagen.time.step.ms = '1',
                 fields.n.kind = 'sequence', fields.k.min = '1', fields.k.max = '50');
         CREATE MATERIALIZED VIEW per_second AS
           SELECT window_start, k, count(*) AS n, sum(n) AS total FROM TUMBLE(ticks, ts, INTERVAL '1 second')
           GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE",
    )
    .await
    .unwrap();
    let mut samples = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c = server.connect().await;
        query_text(&c, "CHECKPOINT").await;
        let rows: i64 = query_text(&c, "SELECT rows FROM weir_sources")
            .await
            .first()
            .map(|r| r[0].parse().unwrap())
            .unwrap_or(0);
        drop(c);
        server.kill();
        let bytes = stored_state_bytes(&server);
        println!("{rows} rows generated: {bytes} bytes of operator state in the store");
        samples.push((rows, bytes));
        server.restart();
    }
    drop(c);
    let c = server.connect().await;
    let r = query_text(&c, "SELECT outcome FROM weir_recovery").await;
    assert_eq!(r, vec![vec!["restored".to_string()]]);
    let (first, last) = (samples[0], samples[2]);
    assert!(
        last.0 >= first.0 * 2,
        "the stream did not go on: {samples:?}"
    );
    // 50 keys x 1-2 open windows, and deltas of at most 1 MiB (then a new base)
    assert!(
        samples.iter().all(|(_, b)| *b < 3 << 20),
        "operator state in the store grew with the stream: {samples:?}"
    );
    let state = query_text(
        &c,
        "SELECT sum(state_rows) FROM weir_operator_state WHERE view_name = 'per_second'",
    )
    .await;
    let state: i64 = state[0][0].parse().unwrap();
    assert!(state <= 200, "{state} state rows after recovery");
}

fn stored_keys(server: &TestServer, prefix: &[u8]) -> usize {
    stored(server, prefix, |_| true).0
}

/// A view dropped after the last checkpoint, just before a crash, leaves nothing behind
/// in the store once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_dropped_before_a_crash_leaves_no_state() {
    let mut server = TestServer::start_with(Options {
        args: &["--checkpoint-interval", "1h"],
        ..Default::default()
    });
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT, v INT);
         INSERT INTO t SELECT g, g % 7 FROM generate_series(1, 100) g;
         CREATE MATERIALIZED VIEW keep AS SELECT v, count(*) AS n FROM t GROUP BY v;
         CREATE MATERIALIZED VIEW gone AS SELECT v, max(k) AS m FROM t GROUP BY v;
         CHECKPOINT;
         DROP MATERIALIZED VIEW gone",
    )
    .await
    .unwrap();
    drop(c);
    server.kill();
    let before = stored_keys(&server, b"Kv");
    server.restart();
    let c = server.connect().await;
    assert_eq!(recovery_of(&c, "keep").await.0, "restored");
    drop(c);
    server.kill();
    let after = stored_keys(&server, b"Kv");
    println!("checkpoint keys: {before} before the restart, {after} after");
    assert!(
        after < before,
        "the dropped view's state stayed: {before} -> {after} keys"
    );
    let mut keep_prefix = b"Kv".to_vec();
    let c_keys = {
        // what is left is the kept view's alone
        server.restart();
        let c = server.connect().await;
        let oid: u32 = query_text(&c, "SELECT oid FROM pg_class WHERE relname = 'keep'").await[0]
            [0]
        .parse()
        .unwrap();
        drop(c);
        server.kill();
        keep_prefix.extend_from_slice(&oid.to_be_bytes());
        stored_keys(&server, &keep_prefix)
    };
    assert_eq!(c_keys, after, "only the kept view has state in the store");
}

/// A view created with `--workers 2` keeps its two shards when the server comes back with
/// `--workers 1`: restored from its checkpoint (not rebuilt), equal to its query after more
/// inserts and deletes; a view created after the restart takes the new count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_keep_their_shards_across_a_restart_with_other_workers() {
    let mut server = TestServer::start_with(Options {
        args: &["--workers", "2"],
        env: &[("WEIR_PARALLEL_MIN_ROWS", "1")],
        ..Default::default()
    });
    let views = [
        (
            "sh_agg",
            "SELECT k, count(*) AS n, sum(v) AS s, max(v) AS m FROM sh GROUP BY k",
        ),
        (
            "sh_join",
            "SELECT a.k, count(*) AS n FROM sh a JOIN sh b ON a.k = b.k AND a.v = b.v + 50 GROUP BY a.k",
        ),
        ("sh_global", "SELECT count(*) AS n, sum(v) AS s FROM sh"),
    ];
    tables_views_checkpoint(
        &server,
        "CREATE TABLE sh (k int, v int); \
         INSERT INTO sh SELECT g % 50, g FROM generate_series(1, 5000) g",
        &views,
    )
    .await;
    server.set_args(&["--workers", "1"]);
    server.restart();
    let c = server.connect().await;
    c.batch_execute(
        "INSERT INTO sh SELECT g % 70, g FROM generate_series(5001, 7000) g; \
         DELETE FROM sh WHERE v % 7 = 0; UPDATE sh SET v = v + 1 WHERE k = 3; \
         CREATE MATERIALIZED VIEW sh_after AS SELECT k, min(v) AS lo FROM sh GROUP BY k; \
         FLUSH",
    )
    .await
    .expect("more changes");
    for (name, q) in views
        .iter()
        .copied()
        .chain([("sh_after", "SELECT k, min(v) AS lo FROM sh GROUP BY k")])
    {
        let mut got = query_text(&c, &format!("SELECT * FROM {name}")).await;
        let mut want = query_text(&c, q).await;
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name} after the restart with --workers 1");
    }
    for (name, _) in views {
        let (outcome, reason) = recovery_of(&c, name).await;
        assert_eq!(outcome, "restored", "{name}: {reason}");
    }
    let log = std::fs::read_to_string(server.log_path()).expect("server log");
    for (name, _) in views {
        assert!(
            log.lines()
                .any(|l| l.contains("keeps the shard count of its checkpoint")
                    && l.contains(&format!("view={name}"))
                    && l.contains("shards=2")),
            "{name}: no log line saying it keeps its 2 shards"
        );
    }
}

/// Constant rows in a view (VALUES, `generate_series` in FROM, a SELECT without FROM) are
/// emitted once in the view's life: a view restored from a checkpoint after kill -9 does
/// not emit them again (its join and aggregate state already hold them), so it stays equal
/// to its query (it counted every row twice before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_rows_are_not_emitted_again_after_a_restore() {
    let mut server = TestServer::start();
    let views = [
        (
            "cr_series",
            "SELECT h, count(e.id) AS n FROM generate_series(0, 3) AS h LEFT JOIN cr e ON e.hr = h GROUP BY h",
        ),
        (
            "cr_values",
            "SELECT h, count(e.id) AS n FROM (VALUES (0), (1), (2), (3)) AS t(h) LEFT JOIN cr e ON e.hr = h GROUP BY h",
        ),
        (
            "cr_alone",
            "SELECT count(*) AS n FROM (SELECT 1 AS one UNION ALL SELECT 2) AS u",
        ),
    ];
    tables_views_checkpoint(
        &server,
        "CREATE TABLE cr (id int PRIMARY KEY, hr int); \
         INSERT INTO cr VALUES (1, 1), (2, 1), (3, 3), (4, 7)",
        &views,
    )
    .await;
    for round in 0..2 {
        server.restart();
        let c = server.connect().await;
        c.batch_execute(&format!(
            "INSERT INTO cr VALUES ({}, 0); DELETE FROM cr WHERE id = 3; FLUSH; CHECKPOINT",
            10 + round
        ))
        .await
        .expect("more changes");
        for (name, q) in views {
            let mut got = query_text(&c, &format!("SELECT * FROM {name}")).await;
            let mut want = query_text(&c, q).await;
            got.sort();
            want.sort();
            assert_eq!(got, want, "{name} after restart {round}");
            let (outcome, reason) = recovery_of(&c, name).await;
            assert_eq!(outcome, "restored", "{name}: {reason}");
        }
    }
}

/// Run `setup` (tables and rows), create each `(name, query)` as a materialized view, then
/// FLUSH and CHECKPOINT.
async fn tables_views_checkpoint(server: &TestServer, setup: &str, views: &[(&str, &str)]) {
    let c = server.connect().await;
    c.batch_execute(setup).await.expect("tables");
    for (name, q) in views {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {q}"))
            .await
            .expect("view");
    }
    c.batch_execute("FLUSH; CHECKPOINT")
        .await
        .expect("checkpoint");
}
