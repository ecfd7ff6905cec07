//! Materialized views over the wire: consistent reads across views under concurrent
//! writes, backfill progress NOTICEs, and views rebuilt under an ALTER TABLE.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::harness::{TestServer, describe_error, query_text};

/// A client whose NOTICE messages arrive on the returned channel.
async fn connect_with_notices(
    server: &TestServer,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (c, mut connection) = tokio_postgres::connect(&server.conn_string(), NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notice(n) = m {
                let _ = tx.send(n.message().to_owned());
            }
        }
    });
    (c, rx)
}

/// Two views of one table are always read at the same epoch: while a writer inserts, a
/// query joining them never sees one ahead of the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_sees_all_views_at_one_epoch() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT PRIMARY KEY, v BIGINT); \
         CREATE MATERIALIZED VIEW a AS SELECT count(*) AS n, sum(v) AS s FROM ev; \
         CREATE MATERIALIZED VIEW b AS SELECT count(*) AS n FROM ev WHERE v >= 0",
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let conn = server.conn_string();
        let stop = stop.clone();
        tokio::spawn(async move {
            let (w, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
            tokio::spawn(connection);
            let mut i = 0i64;
            while !stop.load(Ordering::Relaxed) {
                w.batch_execute(&format!("INSERT INTO ev VALUES ({i}, {i}), ({}, 1)", i + 1))
                    .await
                    .unwrap();
                i += 2;
            }
            i
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut checks = 0;
    let mut moved = 0;
    let mut last = String::new();
    while Instant::now() < deadline {
        let r = query_text(&c, "SELECT a.n, b.n FROM a CROSS JOIN b").await;
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0][0], r[0][1],
            "views read at different epochs: {:?}",
            r[0]
        );
        if r[0][0] != last {
            moved += 1;
            last = r[0][0].clone();
        }
        checks += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    let r = query_text(&c, "SELECT a.n, b.n FROM a, b").await;
    assert_eq!(r[0][0], written.to_string());
    assert_eq!(r[0][1], written.to_string());
    assert!(
        checks > 10 && moved > 2,
        "checks {checks}, changes seen {moved}"
    );
}

/// Creating a view over a large table reports progress while it backfills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_backfill_reports_progress() {
    let server = TestServer::start();
    let (c, mut rx) = connect_with_notices(&server).await;
    c.batch_execute(
        "CREATE TABLE big (k BIGINT, v BIGINT) APPEND ONLY; \
         INSERT INTO big SELECT g % 50000, g FROM generate_series(1, 1500000) AS g",
    )
    .await
    .unwrap();
    let t = Instant::now();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_key AS SELECT k, count(*) AS n, min(v) AS lo FROM big GROUP BY k",
    )
    .await
    .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    let took = t.elapsed();
    println!("backfill took {took:?}");
    let mut notices = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notices.push(n);
    }
    // a notice goes out after each chunk that ends more than 1 s after the last report
    // (or the start): none before 1 s, at least one for a backfill well past it, and
    // only progress notices of this view in any case
    assert!(
        notices
            .iter()
            .all(|n| n.starts_with("backfilling materialized view \"per_key\": ")),
        "{notices:?}"
    );
    if took > Duration::from_millis(1500) {
        assert!(!notices.is_empty(), "a {took:?} backfill sent no progress");
    } else if took < Duration::from_secs(1) {
        assert!(notices.is_empty(), "a {took:?} backfill sent {notices:?}");
    }
    assert_eq!(
        query_text(&c, "SELECT count(*), sum(n) FROM per_key").await,
        vec![vec!["50000", "1500000"]]
    );
}

/// An ALTER TABLE under materialized views (one over the other) rebuilds both, oldest
/// first, each told in a NOTICE, and they keep being maintained; a view that does not read
/// the table is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_rebuilds_the_views_over_it_with_notices() {
    let server = TestServer::start();
    let (c, mut rx) = connect_with_notices(&server).await;
    c.batch_execute(
        "CREATE TABLE t (k INT, v INT); \
         CREATE TABLE other (x INT); \
         INSERT INTO t VALUES (1, 10), (2, 20), (1, 5); \
         CREATE MATERIALIZED VIEW per_k AS SELECT k, sum(v) AS s FROM t GROUP BY k; \
         CREATE MATERIALIZED VIEW top AS SELECT max(s) AS m FROM per_k; \
         CREATE MATERIALIZED VIEW unrelated AS SELECT count(*) AS n FROM other",
    )
    .await
    .unwrap();
    while rx.try_recv().is_ok() {}
    c.batch_execute(
        "ALTER TABLE t ADD COLUMN w INT DEFAULT 1; ALTER TABLE t RENAME COLUMN v TO val",
    )
    .await
    .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    let mut notices = Vec::new();
    while let Ok(n) = rx.try_recv() {
        notices.push(n);
    }
    let rebuilt: Vec<&str> = notices
        .iter()
        .filter_map(|n| n.strip_prefix("materialized view \""))
        .filter_map(|n| n.split_once("\" rebuilt in ").map(|(v, _)| v))
        .collect();
    assert_eq!(rebuilt, ["per_k", "top", "per_k", "top"], "{notices:?}");
    c.batch_execute("INSERT INTO t VALUES (2, 30, 0); FLUSH")
        .await
        .unwrap();
    assert_eq!(
        query_text(&c, "SELECT k, s FROM per_k ORDER BY k").await,
        vec![vec!["1", "15"], vec!["2", "50"]]
    );
    assert_eq!(query_text(&c, "SELECT m FROM top").await, vec![vec!["50"]]);
}

/// One reader per generator source: a view created while the generator runs reads its
/// history with a backfill reader first, joins the shared reader, and from then on stands
/// where the first view stands after every epoch (the same rows, no gap, no overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_view_joins_the_generators_shared_reader() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE SOURCE ticks (n BIGINT) WITH (connector = 'datagen', \
           datagen.rows.per.second = '20000', fields.n.kind = 'sequence'); \
         CREATE MATERIALIZED VIEW first AS SELECT count(*) AS c, sum(n) AS s FROM ticks",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.batch_execute(
        "CREATE MATERIALIZED VIEW later AS SELECT count(*) AS c, sum(n) AS s FROM ticks",
    )
    .await
    .unwrap();
    crate::harness::wait_for_shared_reader(&c, "later").await;
    let mut last = 0i64;
    for _ in 0..30 {
        let r = query_text(&c, "SELECT f.c, f.s, l.c, l.s FROM first f, later l").await;
        assert_eq!(
            (&r[0][0], &r[0][1]),
            (&r[0][2], &r[0][3]),
            "the views disagree"
        );
        let n: i64 = r[0][0].parse().unwrap();
        assert!(n >= 20_000 && n >= last, "{n} rows, {last} before");
        last = n;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert!(last > 30_000, "the generator goes on: {last}");
}
