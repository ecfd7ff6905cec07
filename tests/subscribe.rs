//! SUBSCRIBE against the oracle: one `COPY (SUBSCRIBE v) TO STDOUT` stream per view, read
//! while random INSERT/UPDATE/DELETE rounds run; after each round's FLUSH, the sum of each
//! stream (snapshot + changes) must reach exactly the view's contents, and on the way every
//! row has diff ±1, epochs never go back and no row's count goes negative. A failure prints
//! its seed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, pin_mut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::{TestServer, query_text};

/// Longer than the server's keepalive interval (1 s).
const IDLE: Duration = Duration::from_millis(1500);

const VIEWS: &[(&str, &str)] = &[
    (
        "s_group",
        "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo FROM t1 GROUP BY g",
    ),
    (
        "s_join",
        "SELECT t1.id, t1.v, t2.w FROM t1 JOIN t2 ON t1.g = t2.g",
    ),
    ("s_filter", "SELECT id, v * 2 AS v2 FROM t1 WHERE v > 20"),
    ("s_top", "SELECT id, v FROM t1 ORDER BY v DESC, id LIMIT 3"),
    ("s_distinct", "SELECT DISTINCT g FROM t1"),
    ("s_multiset", "SELECT g FROM t1"),
];

/// What a stream has added up to: row text (COPY text format, without epoch and diff) →
/// count, plus the checks made on the way.
#[derive(Default)]
struct Folded {
    rows: HashMap<String, i64>,
    last_epoch: i64,
    problems: Vec<String>,
}

async fn follow(port: u16, view: &'static str, state: Arc<parking_lot::Mutex<Folded>>) {
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    let stream = client
        .copy_out(&format!("COPY (SUBSCRIBE {view}) TO STDOUT"))
        .await
        .expect("COPY (SUBSCRIBE)");
    pin_mut!(stream);
    let mut pending = String::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { return };
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let line = line.trim_end_matches('\n');
            let mut parts = line.splitn(3, '\t');
            let (Some(epoch), Some(diff)) = (parts.next(), parts.next()) else {
                state.lock().problems.push(format!("bad line {line:?}"));
                continue;
            };
            let row = parts.next().unwrap_or("").to_owned();
            let mut s = state.lock();
            let epoch: i64 = epoch.parse().unwrap_or(-1);
            if epoch < s.last_epoch {
                let msg = format!("epoch went back from {} to {epoch}", s.last_epoch);
                s.problems.push(msg);
            }
            s.last_epoch = epoch;
            let d: i64 = match diff {
                "1" => 1,
                "-1" => -1,
                other => {
                    s.problems.push(format!("diff {other} in {line:?}"));
                    0
                }
            };
            let n = {
                let n = s.rows.entry(row.clone()).or_default();
                *n += d;
                *n
            };
            if n < 0 {
                s.problems
                    .push(format!("row {row:?} went negative at epoch {epoch}"));
            }
            if n == 0 {
                s.rows.remove(&row);
            }
        }
    }
}

fn copy_text(row: &[String]) -> String {
    row.iter()
        .map(|v| {
            if v == "NULL" {
                "\\N".to_owned()
            } else {
                v.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("\t")
}

async fn run_seed(seed: u64) {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t1 (id INT PRIMARY KEY, g INT, v INT);
         CREATE TABLE t2 (g INT PRIMARY KEY, w INT);",
    )
    .await
    .expect("tables");
    let mut rng = StdRng::seed_from_u64(seed);
    // some rows before the views exist: the snapshots must carry them
    for id in 0..10 {
        c.batch_execute(&format!(
            "INSERT INTO t1 VALUES ({id}, {}, {})",
            rng.random_range(0..4),
            rng.random_range(0..50)
        ))
        .await
        .expect("insert");
    }
    let mut states = Vec::new();
    for (name, q) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {q}"))
            .await
            .expect("view");
        let state = Arc::new(parking_lot::Mutex::new(Folded::default()));
        tokio::spawn(follow(server.port(), name, state.clone()));
        states.push((*name, state));
    }
    for round in 0..8 {
        if round == 3 {
            // idle long enough for keepalives to go out in the middle of the COPY streams
            tokio::time::sleep(IDLE).await;
        }
        for _ in 0..rng.random_range(1..25) {
            let id = rng.random_range(0..30);
            let stmt = match rng.random_range(0..10) {
                0..=3 => format!(
                    "INSERT INTO t1 VALUES ({id}, {}, {}) ",
                    rng.random_range(0..5),
                    rng.random_range(0..60)
                ),
                4..=5 => format!(
                    "UPDATE t1 SET v = {} WHERE id = {id}",
                    rng.random_range(0..60)
                ),
                6 => format!("DELETE FROM t1 WHERE id = {id}"),
                7 => format!(
                    "INSERT INTO t2 VALUES ({}, {})",
                    rng.random_range(0..5),
                    rng.random_range(0..100)
                ),
                8 => format!("DELETE FROM t2 WHERE g = {}", rng.random_range(0..5)),
                _ => format!(
                    "UPDATE t1 SET g = {} WHERE id = {id}",
                    rng.random_range(0..5)
                ),
            };
            // duplicate keys fail; that is part of the workload
            let _ = c.batch_execute(&stmt).await;
        }
        c.batch_execute("FLUSH").await.expect("FLUSH");
        for (name, state) in &states {
            let mut expected: HashMap<String, i64> = HashMap::new();
            for row in query_text(&c, &format!("SELECT * FROM {name}")).await {
                *expected.entry(copy_text(&row)).or_default() += 1;
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                {
                    let s = state.lock();
                    assert!(
                        s.problems.is_empty(),
                        "seed {seed}, round {round}, view {name}: {:?}",
                        s.problems
                    );
                    if s.rows == expected {
                        break;
                    }
                    if Instant::now() > deadline {
                        panic!(
                            "seed {seed}, round {round}, view {name}: the stream adds up to\n{:?}\nbut the view holds\n{:?}\nrerun with WEIR_SUBSCRIBE_SEEDS={seed}",
                            s.rows, expected
                        );
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // every stream is a live subscriber until its connection goes
    let subs = query_text(&c, "SELECT sum(subscribers) FROM weir_views").await;
    assert_eq!(subs[0][0], VIEWS.len().to_string(), "seed {seed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_add_up_to_their_views() {
    let seeds: Vec<u64> = match std::env::var("WEIR_SUBSCRIBE_SEEDS") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => {
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1);
            (0..3).map(|i| base + i).collect()
        }
    };
    for seed in seeds {
        eprintln!("subscribe oracle seed {seed}");
        run_seed(seed).await;
    }
}

/// A reader that stops reading is cut off once it is more changed rows behind than allowed
/// (here 1,000), with 53400, instead of the server holding changes for it without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_too_far_behind_is_cut_off() {
    let server = TestServer::start_with_env(&[("WEIR_SUBSCRIBE_MAX_BACKLOG_ROWS", "1000")]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id INT PRIMARY KEY);
         CREATE MATERIALIZED VIEW v AS SELECT id FROM t;
         BEGIN;
         DECLARE c CURSOR FOR SUBSCRIBE v;",
    )
    .await
    .expect("setup");
    let w = server.connect().await;
    // one epoch of any size goes to a reader that is caught up
    w.batch_execute(&format!(
        "INSERT INTO t SELECT * FROM (VALUES {}) AS x(id); FLUSH",
        (0..1500)
            .map(|i| format!("({i})"))
            .collect::<Vec<_>>()
            .join(",")
    ))
    .await
    .expect("big insert");
    let subs = query_text(&w, "SELECT subscribers FROM weir_views").await;
    assert_eq!(subs[0][0], "1", "a caught-up reader keeps its subscription");
    // then it falls behind by more than 1,000 rows
    for round in 0..3 {
        let values: Vec<String> = (0..400)
            .map(|i| format!("({})", 10_000 + round * 400 + i))
            .collect();
        w.batch_execute(&format!("INSERT INTO t VALUES {}; FLUSH", values.join(",")))
            .await
            .expect("insert");
    }
    let subs = query_text(&w, "SELECT subscribers FROM weir_views").await;
    assert_eq!(subs[0][0], "0", "the subscription was dropped");
    let err = c
        .simple_query("FETCH ALL c")
        .await
        .expect_err("FETCH reports the overflow");
    assert_eq!(crate::harness::sqlstate(&err), "53400", "{err}");
}
