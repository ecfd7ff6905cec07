//! Acknowledged writes survive `kill -9`: several clients insert, update and delete while the
//! server is killed at a random moment; after a restart every acknowledged change is there,
//! nothing is there twice, and only the statements in flight at the kill may be either way.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

use crate::harness::{TestServer, describe_error, query_text};

/// What a client knows: keys whose last acknowledged state is `Some(v)` (present with v)
/// or `None` (deleted), and the one statement that was in flight, if any.
#[derive(Default)]
struct ClientLog {
    acked: BTreeMap<i64, Option<i64>>,
    in_flight: Option<(i64, Option<i64>)>,
    acked_events: u64,
}

async fn writer(addr_conn: String, client_id: i64, seed: u64, log: Arc<Mutex<ClientLog>>) {
    let Ok((c, conn)) = tokio_postgres::connect(&addr_conn, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for n in 0..100_000i64 {
        // each client owns keys client_id * 1_000_000 + k
        let key = client_id * 1_000_000 + rng.random_range(0..50);
        let present = log
            .lock()
            .await
            .acked
            .get(&key)
            .copied()
            .flatten()
            .is_some();
        let (sql, after) = if !present {
            let v = n;
            (format!("INSERT INTO kv VALUES ({key}, {v})"), Some(v))
        } else if rng.random_bool(0.5) {
            (format!("UPDATE kv SET v = {n} WHERE k = {key}"), Some(n))
        } else {
            (format!("DELETE FROM kv WHERE k = {key}"), None)
        };
        log.lock().await.in_flight = Some((key, after));
        if c.batch_execute(&sql).await.is_err() {
            // the server went away mid-statement: this one may or may not have applied
            return;
        }
        // also an append-only stream: every acknowledged event must survive exactly once
        let ev = format!("INSERT INTO events VALUES ({client_id}, {n})");
        if c.batch_execute(&ev).await.is_err() {
            let mut l = log.lock().await;
            l.acked.insert(key, after);
            l.in_flight = None;
            // the event itself is in flight: counted below as "may be present"
            l.acked_events = n as u64; // events 0..n acked, event n in flight
            return;
        }
        let mut l = log.lock().await;
        l.acked.insert(key, after);
        l.in_flight = None;
        l.acked_events = n as u64 + 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let seed: u64 = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("durability seed {seed} (replay with WEIR_TEST_SEED={seed})");
    let mut server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k BIGINT PRIMARY KEY, v BIGINT); \
         CREATE TABLE events (client BIGINT, n BIGINT) APPEND ONLY",
    )
    .await
    .unwrap();
    drop(c);

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let clients = 4;
    let logs: Vec<Arc<Mutex<ClientLog>>> = (0..clients)
        .map(|_| Arc::new(Mutex::new(ClientLog::default())))
        .collect();
    let mut tasks = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        tasks.push(tokio::spawn(writer(
            server.conn_string(),
            i as i64 + 1,
            seed.wrapping_add(i as u64),
            log.clone(),
        )));
    }
    let kill_after = Duration::from_millis(rng.random_range(300..1500));
    tokio::time::sleep(kill_after).await;
    server.kill();
    for t in tasks {
        let _ = t.await;
    }
    server.restart();
    let c = server.connect().await;

    let rows = query_text(&c, "SELECT k, v FROM kv ORDER BY k").await;
    let stored: BTreeMap<i64, i64> = rows
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect();
    let mut total_acked = 0;
    for (i, log) in logs.iter().enumerate() {
        let l = log.lock().await;
        total_acked += l.acked.len();
        for (k, expected) in &l.acked {
            let got = stored.get(k).copied();
            let in_flight_here = l.in_flight.filter(|(fk, _)| fk == k);
            let ok = got == *expected || in_flight_here.is_some_and(|(_, after)| got == after);
            assert!(
                ok,
                "seed {seed}: client {} key {k}: acknowledged {expected:?}, stored {got:?} (in flight {in_flight_here:?})",
                i + 1
            );
        }
        // no key appears that this client never wrote
        let base = (i as i64 + 1) * 1_000_000;
        for k in stored
            .keys()
            .filter(|k| **k >= base && **k < base + 1_000_000)
        {
            assert!(
                l.acked.contains_key(k) || l.in_flight.is_some_and(|(fk, _)| fk == *k),
                "seed {seed}: key {k} stored but never acknowledged"
            );
        }
        // events: 0..acked_events exactly once each; the one in flight at most once
        let counts = query_text(
            &c,
            &format!(
                "SELECT n, count(*) FROM events WHERE client = {} GROUP BY n ORDER BY n",
                i + 1
            ),
        )
        .await;
        let got: Vec<(u64, i64)> = counts
            .iter()
            .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
            .collect();
        for (n, cnt) in &got {
            assert_eq!(
                *cnt,
                1,
                "seed {seed}: event {n} of client {} stored {cnt} times",
                i + 1
            );
        }
        let ns: Vec<u64> = got.iter().map(|(n, _)| *n).collect();
        let expected: Vec<u64> = (0..l.acked_events).collect();
        assert!(
            ns == expected
                || (ns.len() == expected.len() + 1 && ns[..expected.len()] == expected[..]),
            "seed {seed}: client {} events stored {:?}.. (len {}), acknowledged 0..{}",
            i + 1,
            &ns[..ns.len().min(5)],
            ns.len(),
            l.acked_events
        );
    }
    println!("acknowledged keys: {total_acked}");
    assert!(
        total_acked > 0,
        "seed {seed}: no write was acknowledged before the kill"
    );

    // the server keeps working after recovery
    c.batch_execute("INSERT INTO kv VALUES (-1, -1)")
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
}

/// An APPEND ONLY table's index over the wire: built over rows already there, kept by
/// INSERTs and by a COPY, read by point queries (EXPLAIN shows the index's rows, not a
/// scan of the table), and after `kill -9` and a restart the lookups still equal a scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_only_tables_index_answers_point_queries_across_kill_9() {
    let mut server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (k int, v int) APPEND ONLY; \
         INSERT INTO ev SELECT g % 10, g FROM generate_series(1, 500) g; \
         CREATE INDEX ev_k ON ev (k); \
         INSERT INTO ev VALUES (3, 1000), (3, 1000), (11, 1)",
    )
    .await
    .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY ev FROM STDIN")
        .await
        .expect("copy");
    futures::pin_mut!(sink);
    use futures::SinkExt;
    sink.send(bytes::Bytes::from_static(b"3\t2000\n12\t5\n"))
        .await
        .expect("copy data");
    assert_eq!(sink.finish().await.expect("copy end"), 2);
    let plan = query_text(&c, "EXPLAIN SELECT * FROM ev WHERE k = 3").await;
    let plan: String = plan.into_iter().flatten().collect::<Vec<_>>().join("\n");
    assert!(
        plan.contains("DataSourceExec") && !plan.contains("ScanExec"),
        "a point query reads the index:\n{plan}"
    );
    assert_eq!(
        index_equals_scan(&server, "before the kill").await,
        vec![vec!["53"]]
    );
    drop(c);
    server.restart();
    assert_eq!(
        index_equals_scan(&server, "after kill -9").await,
        vec![vec!["53"]]
    );
}

/// Point queries on `ev.k` (through its index) equal the same filter as an expression (a
/// scan); returns the count of k = 3.
async fn index_equals_scan(server: &TestServer, round: &str) -> Vec<Vec<String>> {
    let c = server.connect().await;
    for k in [3, 11, 12, 42] {
        let by_index = query_text(&c, &format!("SELECT v FROM ev WHERE k = {k} ORDER BY v")).await;
        let scanned = query_text(
            &c,
            &format!("SELECT v FROM ev WHERE k + 0 = {k} ORDER BY v"),
        )
        .await;
        assert_eq!(by_index, scanned, "k = {k}, {round}");
    }
    query_text(&c, "SELECT count(*) FROM ev WHERE k = 3").await
}

/// Temporary tables go with the session that made them: when its connection closes, and
/// after a crash (the restart drops what a dead session left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporary_tables_end_with_their_session() {
    let mut server = TestServer::start();
    let observer = server.connect().await;
    {
        let a = server.connect().await;
        a.batch_execute("CREATE TEMP TABLE scratch (id int PRIMARY KEY, v text); INSERT INTO scratch VALUES (1, 'x')")
            .await
            .expect("temp table");
        let n: i64 = a
            .query_one("SELECT count(*) FROM scratch", &[])
            .await
            .expect("read it")
            .get(0);
        assert_eq!(n, 1);
        assert_eq!(temp_count(&observer, "scratch").await, 1);
    }
    // the connection closed: its table goes (asynchronously, soon after)
    let mut gone = false;
    for _ in 0..100 {
        if temp_count(&observer, "scratch").await == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "a closed session's temporary table is still there");
    // a crash leaves one behind: the restart drops it, a permanent table stays
    let b = server.connect().await;
    b.batch_execute("CREATE TEMP TABLE left_over (a int); CREATE TABLE kept (a int); INSERT INTO kept VALUES (1)")
        .await
        .expect("tables");
    server.restart();
    let c = server.connect().await;
    assert_eq!(temp_count(&c, "left_over").await, 0);
    let err = c
        .query("SELECT * FROM left_over", &[])
        .await
        .expect_err("the temporary table is gone");
    assert!(describe_error(&err).starts_with("42P01"), "{err:?}");
    let n: i64 = c
        .query_one("SELECT count(*) FROM kept", &[])
        .await
        .expect("kept")
        .get(0);
    assert_eq!(n, 1);
}

/// How many temporary tables of this name `pg_class` lists.
async fn temp_count(c: &tokio_postgres::Client, t: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_class WHERE relname = $1 AND relpersistence = 't'",
        &[&t],
    )
    .await
    .map(|r| r.get::<_, i64>(0))
    .expect("pg_class")
}
