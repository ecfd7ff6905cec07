//! Kafka sources against a real Kafka-protocol broker (tansu): a multi-partition JSON
//! topic into windowed views compared with a model, dead letters, startup modes, INCLUDE
//! columns, `on_error = 'fail'`, and a network outage in the middle of a stream.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::broker::{Broker, Record, TestProducer};
use crate::harness::{TestServer, describe_error, query_text};

const SEC: i64 = 1_000_000;
const BASE_MS: i64 = 1_704_067_200_000; // 2024-01-01

/// The seed of a randomized test: `WEIR_KAFKA_SEED`, or a fresh one (printed by the test).
fn kafka_seed() -> u64 {
    std::env::var("WEIR_KAFKA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random_range(0..1_000_000))
}

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
}

async fn rows(c: &Client, sql: &str) -> Vec<String> {
    let mut v: Vec<String> = query_text(c, sql)
        .await
        .into_iter()
        .map(|r| r.join("|"))
        .collect();
    v.sort();
    v
}

fn pg_ts(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .expect("ts")
        .naive_utc()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// 4 partitions of JSON events, out of order within each partition by less than the
/// watermark delay, with bad records mixed in: every good row reaches the views, every bad
/// one is a dead letter (once, though two views read the source), windows match a model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_topic_into_windowed_views() {
    let seed = kafka_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let broker = Broker::start();
    broker.create_topic("events", 4);
    let server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SOURCE events (k BIGINT, v BIGINT NOT NULL, ts TIMESTAMP, \
               WATERMARK FOR ts AS ts - INTERVAL '10 seconds') \
             INCLUDE partition AS p INCLUDE offset \
             WITH (connector = 'kafka', topic = 'events', properties.bootstrap.server = '{}') \
             FORMAT PLAIN ENCODE JSON; \
             CREATE MATERIALIZED VIEW per_window AS SELECT window_start, k, count(*) AS n, sum(v) AS s \
               FROM TUMBLE(events, ts, INTERVAL '1 minute') GROUP BY window_start, window_end, k; \
             CREATE MATERIALIZED VIEW closed AS SELECT window_start, count(*) AS n \
               FROM TUMBLE(events, ts, INTERVAL '1 minute') GROUP BY window_start, window_end \
               EMIT ON WINDOW CLOSE",
            broker.bootstrap
        ),
    )
    .await;
    let producer = broker.producer();
    // the model: all good rows (no row is late: disorder < delay within a partition)
    let mut good: Vec<(i64, i64, i64)> = Vec::new();
    let mut max_per_partition = [i64::MIN; 4];
    let mut bad = 0usize;
    for round in 0..3 {
        let mut batch: Vec<(i32, Vec<u8>)> = Vec::new();
        for p in 0..4i32 {
            // rounds 400 s apart: a partition spans at most 150 x 2 s per round, so no row of a
            // round is late against the previous round
            let mut t = (round * 400 + p as i64 * 7) * SEC;
            for _ in 0..rng.random_range(50..150) {
                t += rng.random_range(0..3) * SEC;
                let ts = t - rng.random_range(0..9) * SEC; // disorder below the 10 s delay
                let k = rng.random_range(0..5i64);
                let v = rng.random_range(-100..100i64);
                let kind = rng.random_range(0..40);
                let value: Vec<u8> = match kind {
                    0 => b"{\"k\": 1, \"v\": ".to_vec(), // truncated
                    1 => format!("{{\"k\": {k}, \"v\": \"many\"}}").into_bytes(), // wrong type
                    2 => format!("{{\"k\": {k}}}").into_bytes(), // v NOT NULL missing
                    3 => vec![0xff, 0xfe, b'{'],         // not UTF-8
                    _ => {
                        // ISO or epoch-millis timestamps
                        let ts_json = if rng.random_bool(0.5) {
                            format!("\"{}\"", pg_ts(BASE_MS * 1000 + ts).replace(' ', "T"))
                        } else {
                            (BASE_MS + ts / 1000).to_string()
                        };
                        good.push((k, v, BASE_MS * 1000 + ts));
                        let m = &mut max_per_partition[p as usize];
                        *m = (*m).max(BASE_MS * 1000 + ts);
                        format!("{{\"k\": {k}, \"v\": {v}, \"ts\": {ts_json}, \"extra\": [1]}}")
                            .into_bytes()
                    }
                };
                if kind < 4 {
                    bad += 1;
                }
                batch.push((p, value));
            }
        }
        if round == 0 {
            // 5 MB messages: one that does not fit (a dead letter, its raw bytes cut to
            // 64 KiB), one good row padded with an undeclared field
            let big = "x".repeat(5 << 20);
            batch.push((1, format!("{{\"k\": 1, \"v\": \"{big}\"}}").into_bytes()));
            bad += 1;
            // at the partition's latest event time: not late
            let ts = max_per_partition[2] - BASE_MS * 1000;
            good.push((2, 7, BASE_MS * 1000 + ts));
            max_per_partition[2] = max_per_partition[2].max(BASE_MS * 1000 + ts);
            batch.push((
                2,
                format!(
                    "{{\"k\": 2, \"v\": 7, \"ts\": {}, \"pad\": \"{big}\"}}",
                    BASE_MS + ts / 1000
                )
                .into_bytes(),
            ));
        }
        let records: Vec<Record<'_>> = batch
            .iter()
            .map(|(p, v)| (*p, None, Some(v.as_slice()), None))
            .collect();
        producer.send_all("events", &records);
        exec(&c, "FLUSH").await;
    }
    let raws = c
        .query(
            "SELECT raw FROM weir_dead_letters WHERE source_name = 'events'",
            &[],
        )
        .await
        .expect("dead letters");
    let longest = raws
        .iter()
        .map(|r| r.get::<_, Vec<u8>>(0).len())
        .max()
        .unwrap_or(0);
    assert_eq!(
        longest, 65536,
        "the 5 MB dead letter keeps its first 64 KiB"
    );
    // per window and key
    let mut model: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    for (k, v, ts) in &good {
        let start = ts.div_euclid(60 * SEC) * 60 * SEC;
        let e = model.entry((start, *k)).or_default();
        e.0 += 1;
        e.1 += v;
    }
    let want: Vec<String> = {
        let mut w: Vec<String> = model
            .iter()
            .map(|((start, k), (n, s))| format!("{}|{k}|{n}|{s}", pg_ts(*start)))
            .collect();
        w.sort();
        w
    };
    let got = rows(&c, "SELECT window_start, k, n, s FROM per_window").await;
    if got != want {
        eprintln!(
            "late events: {:?}\npartitions: {:?}",
            rows(&c, "SELECT view_name, row, event_time, watermark FROM weir_late_events").await,
            rows(&c, "SELECT view_name, partition, \"offset\", high_watermark, rows, dead_letters FROM weir_source_partitions").await
        );
        let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
        for l in log
            .lines()
            .filter(|l| l.contains("source watermark") && l.contains("per_window"))
        {
            eprintln!("{l}");
        }
    }
    assert_eq!(
        got, want,
        "seed {seed}: per_window (replay: WEIR_KAFKA_SEED={seed})"
    );
    // closed windows: end <= min over partitions of (max event time) - 10 s
    let wm = max_per_partition.iter().min().copied().unwrap() - 10 * SEC;
    let mut closed: BTreeMap<i64, i64> = BTreeMap::new();
    for (_, _, ts) in &good {
        let start = ts.div_euclid(60 * SEC) * 60 * SEC;
        if start + 60 * SEC <= wm {
            *closed.entry(start).or_default() += 1;
        }
    }
    let want_closed: Vec<String> = closed
        .iter()
        .map(|(s, n)| format!("{}|{n}", pg_ts(*s)))
        .collect();
    let got_closed = rows(&c, "SELECT window_start, n FROM closed").await;
    assert_eq!(got_closed, want_closed, "seed {seed}: closed windows");
    // dead letters: each bad record once, with partition and offset
    let dl = query_text(
        &c,
        "SELECT count(*), count(DISTINCT (partition, \"offset\")), min(length(error)) > 0 FROM weir_dead_letters WHERE source_name = 'events'",
    )
    .await;
    assert_eq!(dl[0][0], bad.to_string(), "seed {seed}: dead letters");
    assert_eq!(dl[0][1], bad.to_string());
    // the topic is read once, by the source's shared reader: every view over it shows the
    // same reader, which counted each bad record once
    let counted = query_text(
        &c,
        "SELECT view_name, dead_letters, reader FROM weir_sources ORDER BY view_name",
    )
    .await;
    assert!(counted.len() >= 2, "{counted:?}");
    for r in &counted {
        assert_eq!(r[1], bad.to_string(), "seed {seed}: {r:?}");
        assert_eq!(r[2], "shared", "{r:?}");
    }
    // partitions: all read to the end, no lag
    let parts = query_text(
        &c,
        "SELECT count(*), sum(lag), sum(rows) FROM weir_source_partitions WHERE view_name = 'per_window'",
    )
    .await;
    assert_eq!(parts[0][0], "4");
    assert_eq!(parts[0][1], "0", "seed {seed}: lag after FLUSH");
    assert_eq!(parts[0][2], good.len().to_string());
    // INCLUDE columns: partition and offset of each row, as read
    exec(
        &c,
        "CREATE MATERIALIZED VIEW offsets AS SELECT p, count(*) AS n, max(_offset) AS last FROM events GROUP BY p; FLUSH",
    )
    .await;
    let o = rows(&c, "SELECT p, n FROM offsets").await;
    assert_eq!(o.len(), 4, "seed {seed}: every partition seen: {o:?}");
}

/// `scan.startup.mode`: earliest reads what was there, latest only what comes after the
/// view starts, timestamp from the first message at or after the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_modes() {
    let broker = Broker::start();
    broker.create_topic("modes", 2);
    let producer = broker.producer();
    let rec = |i: i64| format!("{{\"i\": {i}}}").into_bytes();
    let first: Vec<Vec<u8>> = (0..10).map(rec).collect();
    let records: Vec<Record<'_>> = first
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                (i % 2) as i32,
                None,
                Some(v.as_slice()),
                Some(BASE_MS + i as i64 * 1000),
            )
        })
        .collect();
    producer.send_all("modes", &records);
    let mut server = TestServer::start();
    let c = server.connect().await;
    let b = &broker.bootstrap;
    exec(
        &c,
        &format!(
            "CREATE SOURCE s_earliest (i BIGINT) WITH (connector = 'kafka', topic = 'modes', properties.bootstrap.server = '{b}', scan.startup.mode = 'earliest'); \
             CREATE SOURCE s_latest (i BIGINT) WITH (connector = 'kafka', topic = 'modes', properties.bootstrap.server = '{b}', scan.startup.mode = 'latest'); \
             CREATE SOURCE s_time (i BIGINT) INCLUDE timestamp AS at WITH (connector = 'kafka', topic = 'modes', properties.bootstrap.server = '{b}', \
               scan.startup.mode = 'timestamp', scan.startup.timestamp.millis = '{}'); \
             CREATE MATERIALIZED VIEW v_earliest AS SELECT count(*) AS n FROM s_earliest; \
             CREATE MATERIALIZED VIEW v_latest AS SELECT count(*) AS n, min(i) AS lo FROM s_latest; \
             CREATE MATERIALIZED VIEW v_time AS SELECT count(*) AS n, min(i) AS lo, min(at) AS first_at FROM s_time; \
             FLUSH",
            BASE_MS + 6000
        ),
    )
    .await;
    // the latest instance has its partitions assigned before more records come
    tokio::time::sleep(Duration::from_millis(500)).await;
    exec(&c, "FLUSH").await;
    let second: Vec<Vec<u8>> = (100..104).map(rec).collect();
    let records: Vec<Record<'_>> = second
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                (i % 2) as i32,
                None,
                Some(v.as_slice()),
                Some(BASE_MS + 100_000),
            )
        })
        .collect();
    producer.send_all("modes", &records);
    exec(&c, "FLUSH").await;
    assert_eq!(rows(&c, "SELECT n FROM v_earliest").await, vec!["14"]);
    assert_eq!(rows(&c, "SELECT n, lo FROM v_latest").await, vec!["4|100"]);
    assert_eq!(
        rows(&c, "SELECT n, lo, first_at FROM v_time").await,
        vec!["8|6|2024-01-01 00:00:06+00"]
    );
    // restored from a checkpoint, each instance goes on where it was, not at its
    // startup position again: two more records on partition 0 only (partition 1 of the
    // `latest` instance is still at the log end it started from)
    let third: Vec<Vec<u8>> = (200..202).map(rec).collect();
    let records: Vec<Record<'_>> = third
        .iter()
        .map(|v| (0, None, Some(v.as_slice()), Some(BASE_MS + 200_000)))
        .collect();
    producer.send_all("modes", &records);
    exec(&c, "FLUSH").await;
    exec(&c, "CHECKPOINT").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT outcome FROM weir_recovery").await,
        vec!["restored", "restored", "restored"]
    );
    assert_eq!(rows(&c, "SELECT n FROM v_earliest").await, vec!["16"]);
    assert_eq!(rows(&c, "SELECT n, lo FROM v_latest").await, vec!["6|100"]);
    assert_eq!(rows(&c, "SELECT n, lo FROM v_time").await, vec!["10|6"]);
}

/// `on_error = 'fail'` stops the instance at the first bad record with an error naming
/// topic, partition and offset; the server and other sources keep going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_error_fail_stops_the_source() {
    let broker = Broker::start();
    broker.create_topic("strict", 1);
    let producer = broker.producer();
    let recs: Vec<&[u8]> = vec![b"{\"a\": 1}", b"{\"a\": 2}", b"not json", b"{\"a\": 4}"];
    let records: Vec<Record<'_>> = recs.iter().map(|v| (0, None, Some(*v), None)).collect();
    producer.send_all("strict", &records);
    let server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SOURCE strict (a INT) WITH (connector = 'kafka', topic = 'strict', \
               properties.bootstrap.server = '{}', on_error = 'fail'); \
             CREATE MATERIALIZED VIEW strict_sum AS SELECT count(*) AS n FROM strict",
            broker.bootstrap
        ),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = query_text(&c, "SELECT status, error FROM weir_sources").await;
        if r[0][0] == "failed" {
            assert!(
                r[0][1].contains("topic \"strict\" partition 0 offset 2"),
                "error: {}",
                r[0][1]
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "source did not fail: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows(&c, "SELECT count(*) FROM weir_dead_letters").await,
        vec!["0"]
    );
    // the server keeps serving
    exec(&c, "CREATE TABLE t (a INT); INSERT INTO t VALUES (1)").await;
}

/// The network to the broker goes away mid-stream and comes back: the source reports the
/// outage, reconnects, and ends with every record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_outage_loses_nothing() {
    let broker = Broker::start();
    broker.create_topic("flaky", 2);
    let producer = broker.producer();
    let server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SOURCE flaky (i BIGINT) WITH (connector = 'kafka', topic = 'flaky', \
               properties.bootstrap.server = '{}'); \
             CREATE MATERIALIZED VIEW flaky_stats AS SELECT count(*) AS n, count(DISTINCT i) AS d, sum(i) AS s FROM flaky",
            broker.bootstrap
        ),
    )
    .await;
    let send = |from: i64, to: i64| {
        let vals: Vec<Vec<u8>> = (from..to)
            .map(|i| format!("{{\"i\": {i}}}").into_bytes())
            .collect();
        let records: Vec<Record<'_>> = vals
            .iter()
            .enumerate()
            .map(|(n, v)| ((n % 2) as i32, None, Some(v.as_slice()), None))
            .collect();
        producer.send_all("flaky", &records);
    };
    send(0, 500);
    exec(&c, "FLUSH").await;
    broker.cut();
    // while the network is down the status says so
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = query_text(&c, "SELECT status FROM weir_sources").await;
        if r[0][0].starts_with("broker unreachable") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "outage not reported: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    broker.restore();
    send(500, 1000);
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT n, d, s FROM flaky_stats").await,
        vec![format!("1000|1000|{}", (0..1000).sum::<i64>())]
    );
}

/// A compacted-topic table (`FORMAT UPSERT`) over 2 partitions with random updates and
/// deletes, and a Debezium table: contents and a view over each match a model; user DML is
/// refused; after a kill -9 the table resumes from the offsets committed with its rows
/// (it does not re-read the topic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_and_debezium_tables() {
    let seed = kafka_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let broker = Broker::start();
    broker.create_topic("users", 2);
    broker.create_topic("orders_cdc", 1);
    let producer = broker.producer();
    let mut server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE TABLE users (id INT PRIMARY KEY, name TEXT, score BIGINT) \
               WITH (connector = 'kafka', topic = 'users', properties.bootstrap.server = '{0}') \
               FORMAT UPSERT ENCODE JSON; \
             CREATE TABLE orders (id INT, amount BIGINT NOT NULL, status TEXT, PRIMARY KEY (id)) \
               WITH (connector = 'kafka', topic = 'orders_cdc', properties.bootstrap.server = '{0}') \
               FORMAT DEBEZIUM ENCODE JSON; \
             CREATE MATERIALIZED VIEW user_stats AS SELECT count(*) AS n, sum(score) AS s FROM users; \
             CREATE MATERIALIZED VIEW by_status AS SELECT status, count(*) AS n, sum(amount) AS total \
               FROM orders GROUP BY status",
            broker.bootstrap
        ),
    )
    .await;
    let mut users: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    let mut sent = 0usize;
    let round = |rng: &mut StdRng, users: &mut BTreeMap<i64, (String, i64)>, n: usize| {
        let mut msgs: Vec<(i32, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for _ in 0..n {
            let id = rng.random_range(0..40i64);
            // one partition per key keeps a key's messages in order
            let p = (id % 2) as i32;
            let key = if rng.random_bool(0.5) {
                format!("{{\"id\": {id}}}").into_bytes()
            } else {
                id.to_string().into_bytes()
            };
            if rng.random_bool(0.25) {
                users.remove(&id);
                msgs.push((p, key, None));
            } else {
                let name = format!("u{}", rng.random_range(0..1000));
                let score = rng.random_range(-50..50i64);
                users.insert(id, (name.clone(), score));
                msgs.push((
                    p,
                    key,
                    Some(format!("{{\"name\": \"{name}\", \"score\": {score}}}").into_bytes()),
                ));
            }
        }
        let records: Vec<Record<'_>> = msgs
            .iter()
            .map(|(p, k, v)| (*p, Some(k.as_slice()), v.as_deref(), None))
            .collect();
        producer.send_all("users", &records);
        msgs.len()
    };
    let model_rows = |users: &BTreeMap<i64, (String, i64)>| -> Vec<String> {
        let mut v: Vec<String> = users
            .iter()
            .map(|(id, (n, s))| format!("{id}|{n}|{s}"))
            .collect();
        v.sort();
        v
    };
    let stats = |users: &BTreeMap<i64, (String, i64)>| {
        let s: i64 = users.values().map(|(_, s)| s).sum();
        vec![if users.is_empty() {
            "0|NULL".to_string()
        } else {
            format!("{}|{s}", users.len())
        }]
    };
    for _ in 0..3 {
        sent += round(&mut rng, &mut users, 300);
        exec(&c, "FLUSH").await;
        assert_eq!(
            rows(&c, "SELECT id, name, score FROM users").await,
            model_rows(&users),
            "seed {seed}"
        );
        assert_eq!(
            rows(&c, "SELECT n, s FROM user_stats").await,
            stats(&users),
            "seed {seed}"
        );
    }
    assert_eq!(
        rows(
            &c,
            "SELECT rows FROM weir_sources WHERE source_name = 'users'"
        )
        .await,
        vec![sent.to_string()]
    );

    // Debezium: create, update, delete, snapshot read; envelope with and without schema
    let events: Vec<String> = vec![
        r#"{"before":null,"after":{"id":1,"amount":10,"status":"new"},"op":"c"}"#.into(),
        r#"{"before":null,"after":{"id":2,"amount":20,"status":"new"},"op":"c"}"#.into(),
        r#"{"schema":{"type":"struct"},"payload":{"before":{"id":1,"amount":10,"status":"new"},"after":{"id":1,"amount":15,"status":"paid"},"op":"u"}}"#.into(),
        r#"{"before":null,"after":{"id":3,"amount":30,"status":"paid"},"op":"r"}"#.into(),
        r#"{"before":{"id":2,"amount":20,"status":"new"},"after":null,"op":"d"}"#.into(),
        r#"{"op":"c","after":{"id":4,"status":"no amount"}}"#.into(), // amount NOT NULL
        r#"{"before":null,"after":{"id":5,"amount":7,"status":"new"},"op":"c"}"#.into(),
    ];
    let mut records: Vec<Record<'_>> = events
        .iter()
        .map(|e| (0, None, Some(e.as_bytes()), None))
        .collect();
    records.insert(5, (0, Some(b"{\"id\":2}".as_slice()), None, None)); // tombstone
    producer.send_all("orders_cdc", &records);
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT id, amount, status FROM orders").await,
        vec!["1|15|paid", "3|30|paid", "5|7|new"]
    );
    assert_eq!(
        rows(&c, "SELECT status, n, total FROM by_status").await,
        vec!["new|1|7", "paid|2|45"]
    );
    assert_eq!(
        rows(
            &c,
            "SELECT source_name, \"offset\" FROM weir_dead_letters WHERE source_name = 'orders'"
        )
        .await,
        vec!["orders|6"]
    );
    // the connector owns the table
    for sql in [
        "INSERT INTO users VALUES (100, 'x', 1)",
        "UPDATE users SET score = 0",
        "DELETE FROM orders",
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(crate::harness::sqlstate(&e), "42809", "{sql}");
    }

    // kill -9: tables and views come back; the consumers resume after the committed offsets
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        rows(&c, "SELECT id, name, score FROM users").await,
        model_rows(&users)
    );
    let more = round(&mut rng, &mut users, 50);
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT id, name, score FROM users").await,
        model_rows(&users),
        "seed {seed}"
    );
    assert_eq!(
        rows(&c, "SELECT n, s FROM user_stats").await,
        stats(&users),
        "seed {seed}"
    );
    assert_eq!(
        rows(
            &c,
            "SELECT rows FROM weir_sources WHERE source_name = 'users'"
        )
        .await,
        vec![more.to_string()],
        "after a restart the table reads only new messages"
    );
    assert_eq!(
        rows(&c, "SELECT status, n, total FROM by_status").await,
        vec!["new|1|7", "paid|2|45"]
    );
    exec(&c, "DROP MATERIALIZED VIEW user_stats; DROP TABLE users").await;
    assert_eq!(
        rows(
            &c,
            "SELECT count(*) FROM weir_sources WHERE source_name = 'users'"
        )
        .await,
        vec!["0"]
    );
}

/// The `window_start|n` of every message of a PLAIN sink topic of closed windows, sorted.
fn closed_windows(broker: &Broker, topic: &str, partitions: i32) -> Vec<String> {
    let mut out: Vec<String> = broker
        .read_topic(topic, partitions)
        .into_iter()
        .map(|(_, _, v)| {
            let r = json(&v.expect("value"));
            format!(
                "{}|{}",
                r["window_start"].as_str().unwrap().replace('T', " "),
                r["n"]
            )
        })
        .collect();
    out.sort();
    out
}

/// The latest row per key of an UPSERT topic (tombstones delete), as `a|b|c` of the
/// fields named, sorted.
fn upsert_rows(broker: &Broker, topic: &str, partitions: i32, fields: [&str; 3]) -> Vec<String> {
    let mut latest: BTreeMap<Vec<u8>, Option<serde_json::Value>> = BTreeMap::new();
    for (_, k, v) in broker.read_topic(topic, partitions) {
        latest.insert(k.expect("upsert key"), v.map(|v| json(&v)));
    }
    let mut got: Vec<String> = latest
        .values()
        .flatten()
        .map(|v| format!("{}|{}|{}", v[fields[0]], v[fields[1]], v[fields[2]]))
        .collect();
    got.sort();
    got
}

/// The test's seed (`WEIR_KAFKA_SEED`, else random), printed, and a generator from it.
fn seeded(what: &str) -> (u64, StdRng) {
    let seed = kafka_seed();
    println!("{what} seed {seed} (replay with WEIR_KAFKA_SEED={seed})");
    (seed, StdRng::seed_from_u64(seed))
}

/// `WITH (...)` of a Kafka connector on the test broker.
fn kafka_with(broker: &Broker, topic: &str, extra: &str) -> String {
    format!(
        "WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{}'{extra})",
        broker.bootstrap
    )
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

/// Sinks read back with a Kafka consumer: UPSERT (compacted by key) and DEBEZIUM (events
/// applied) give the view's contents, PLAIN gives each row of an append-only view once;
/// PLAIN over an updatable view is refused. After a kill -9 the sinks reconcile with their
/// topics: no row written twice, nothing missing — also with the table under them renamed
/// before the kill (they are restored, not computed again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_round_trip() {
    let seed = kafka_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let broker = Broker::start();
    for (t, p) in [
        ("upsert_out", 2),
        ("cdc_out", 1),
        ("plain_out", 2),
        ("raw_out", 1),
    ] {
        broker.create_topic(t, p);
    }
    let mut server = TestServer::start();
    let c = server.connect().await;
    let with = |topic: &str, extra: &str| kafka_with(&broker, topic, extra);
    exec(
        &c,
        &format!(
            "CREATE TABLE t (k INT PRIMARY KEY, v BIGINT); \
             CREATE TABLE ev (k INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1 second') APPEND ONLY; \
             CREATE MATERIALIZED VIEW agg AS SELECT k % 3 AS g, count(*) AS n, sum(v) AS s FROM t GROUP BY k % 3; \
             CREATE MATERIALIZED VIEW per_sec AS SELECT window_start, count(*) AS n \
               FROM TUMBLE(ev, ts, INTERVAL '1 second') GROUP BY window_start, window_end EMIT ON WINDOW CLOSE; \
             CREATE SINK s_up FROM agg {} FORMAT UPSERT ENCODE JSON; \
             CREATE SINK s_cdc AS SELECT k, v FROM t WHERE v > 0 {} FORMAT DEBEZIUM ENCODE JSON; \
             CREATE SINK s_plain FROM per_sec {} FORMAT PLAIN ENCODE JSON; \
             CREATE SINK s_raw AS SELECT k, ts FROM ev WHERE k > 0 {}",
            with("upsert_out", ""),
            with("cdc_out", ", primary_key = 'k'"),
            with("plain_out", ""),
            with("raw_out", ""),
        ),
    )
    .await;
    // refused: PLAIN over a view whose rows change; UPSERT without a key; a sink of a table
    for (sql, state) in [
        (
            format!("CREATE SINK bad FROM agg {}", with("x", "")),
            "0A000",
        ),
        // no primary_key, and GROUP BY window_end is not an output column
        (
            format!(
                "CREATE SINK bad FROM per_sec {} FORMAT UPSERT ENCODE JSON",
                with("x", "")
            ),
            "22023",
        ),
        (
            format!(
                "CREATE SINK bad FROM agg {} FORMAT UPSERT ENCODE JSON",
                with("x", ", primary_key = 'nope'")
            ),
            "42703",
        ),
        (format!("CREATE SINK bad FROM t {}", with("x", "")), "42809"),
        (
            format!("CREATE SINK bad AS SELECT * FROM t {}", with("x", "")),
            "0A000",
        ),
        // a table under a sink (directly, or through the view a sink is made from) is not
        // altered: a rebuilt sink would write its output again (renamed, it is: below)
        ("ALTER TABLE t ADD COLUMN w INT".to_owned(), "2BP01"),
    ] {
        let e = c.batch_execute(&sql).await.expect_err(&sql);
        assert_eq!(
            crate::harness::sqlstate(&e),
            state,
            "{sql}: {}",
            describe_error(&e)
        );
    }
    assert_eq!(
        rows(
            &c,
            "SELECT count(*) FROM pg_class WHERE relname LIKE 's\\_%'"
        )
        .await,
        vec!["0"],
        "sinks are not relations"
    );
    #[derive(Default)]
    struct Model {
        t: BTreeMap<i64, i64>,
        ev_rows: usize,
        ev_second: i64,
    }
    let mut m = Model::default();
    let round = async |rng: &mut StdRng, c: &Client, m: &mut Model| {
        let model = &mut m.t;
        let mut sql = String::new();
        for _ in 0..rng.random_range(5..20) {
            let k = rng.random_range(0..30i64);
            let v = rng.random_range(-5..20i64);
            match (model.contains_key(&k), rng.random_range(0..3)) {
                (false, _) => {
                    model.insert(k, v);
                    sql += &format!("INSERT INTO t VALUES ({k}, {v});");
                }
                (true, 0) => {
                    model.remove(&k);
                    sql += &format!("DELETE FROM t WHERE k = {k};");
                }
                (true, _) => {
                    model.insert(k, v);
                    sql += &format!("UPDATE t SET v = {v} WHERE k = {k};");
                }
            }
        }
        for _ in 0..rng.random_range(1..4) {
            m.ev_second += 1;
            let ev_second = m.ev_second;
            for _ in 0..rng.random_range(1..5) {
                let k = rng.random_range(-2..5);
                if k > 0 {
                    m.ev_rows += 1;
                }
                sql += &format!(
                    "INSERT INTO ev VALUES ({k}, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{ev_second} seconds');"
                );
            }
        }
        exec(c, &sql).await;
        exec(c, "FLUSH").await;
    };
    let check = async |c: &Client, model: &BTreeMap<i64, i64>, ev_rows: usize, when: &str| {
        // UPSERT: the latest value per key, tombstones delete
        let got = upsert_rows(&broker, "upsert_out", 2, ["g", "n", "s"]);
        assert_eq!(
            got,
            rows(c, "SELECT g, n, s FROM agg").await,
            "{when}: upsert seed {seed}"
        );
        // DEBEZIUM: apply the events
        let mut state: BTreeMap<i64, i64> = BTreeMap::new();
        for (_, _, v) in broker.read_topic("cdc_out", 1) {
            let e = json(&v.expect("debezium value"));
            match e["op"].as_str() {
                Some("c") | Some("u") => {
                    state.insert(
                        e["after"]["k"].as_i64().unwrap(),
                        e["after"]["v"].as_i64().unwrap(),
                    );
                }
                Some("d") => {
                    state.remove(&e["before"]["k"].as_i64().unwrap());
                }
                other => panic!("op {other:?}"),
            }
        }
        let want: BTreeMap<i64, i64> = model
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| (*k, *v))
            .collect();
        assert_eq!(state, want, "{when}: debezium seed {seed}");
        // PLAIN: each closed window once
        let windows = closed_windows(&broker, "plain_out", 2);
        assert_eq!(
            windows,
            rows(c, "SELECT window_start, n FROM per_sec").await,
            "{when}: plain seed {seed}"
        );
        assert_eq!(
            broker.read_topic("raw_out", 1).len(),
            ev_rows,
            "{when}: raw seed {seed}"
        );
    };
    for _ in 0..4 {
        round(&mut rng, &c, &mut m).await;
    }
    check(&c, &m.t, m.ev_rows, "before restart").await;
    // tansu supports transactions: every sink is exactly-once
    assert_eq!(
        rows(&c, "SELECT DISTINCT delivery FROM weir_sinks").await,
        vec!["exactly-once"]
    );
    // the table under the view and the sinks renamed: their stored queries name it anew,
    // and they come back from their checkpoints (not computed again, which would write
    // their output into the topics twice)
    exec(&c, "ALTER TABLE t RENAME TO t_moved; CHECKPOINT").await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(
            &c,
            "SELECT view_name, outcome FROM weir_recovery WHERE view_name IN ('agg', 's_cdc') ORDER BY 1"
        )
        .await,
        vec!["agg|restored", "s_cdc|restored"],
        "seed {seed}"
    );
    check(&c, &m.t, m.ev_rows, "after restart").await;
    exec(&c, "ALTER TABLE t_moved RENAME TO t").await;
    for _ in 0..2 {
        round(&mut rng, &c, &mut m).await;
    }
    check(&c, &m.t, m.ev_rows, "after restart and more changes").await;
    exec(&c, "DROP SINK s_up; DROP SINK s_cdc").await;
    let e = c
        .batch_execute("DROP MATERIALIZED VIEW per_sec")
        .await
        .expect_err("dependent sink");
    assert_eq!(crate::harness::sqlstate(&e), "2BP01");
    exec(
        &c,
        "DROP MATERIALIZED VIEW per_sec CASCADE; DROP SINK s_raw",
    )
    .await;
    assert_eq!(rows(&c, "SELECT count(*) FROM weir_sinks").await, vec!["0"]);
}

/// `ENCODE CSV`: positional fields, a header record skipped, a custom delimiter, bad
/// records to the dead letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_source() {
    let broker = Broker::start();
    broker.create_topic("csv_in", 1);
    let server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SOURCE trips (city TEXT, km DOUBLE PRECISION, at TIMESTAMP) \
               WITH (connector = 'kafka', topic = 'csv_in', properties.bootstrap.server = '{}', \
                     csv.delimiter = ';', csv.header = 'true') FORMAT PLAIN ENCODE CSV; \
             CREATE MATERIALIZED VIEW by_city AS SELECT city, count(*) AS n, sum(km) AS km, max(at) AS last FROM trips GROUP BY city",
            broker.bootstrap
        ),
    )
    .await;
    let lines: Vec<&[u8]> = vec![
        b"city;km;at",
        b"oslo;1.5;2024-01-01T10:00:00Z",
        b"\"ber;lin\";2;1704103200000",
        b"oslo;far;2024-01-01T10:00:00Z",
        b"oslo;3",
        b"oslo;2.5;",
    ];
    let records: Vec<Record<'_>> = lines.iter().map(|l| (0, None, Some(*l), None)).collect();
    broker.producer().send_all("csv_in", &records);
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT city, n, km, last FROM by_city").await,
        vec![
            "ber;lin|1|2|2024-01-01 10:00:00",
            "oslo|2|4|2024-01-01 10:00:00"
        ]
    );
    assert_eq!(
        rows(
            &c,
            "SELECT \"offset\" FROM weir_dead_letters WHERE source_name = 'trips'"
        )
        .await,
        vec!["3", "4"]
    );
}

/// docs/kafka-demo.sql (what `docker compose up` runs) works as written against a broker,
/// twice (it is idempotent): the live view fills and the sink writes closed windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_kafka_demo_runs() {
    let broker = Broker::start();
    broker.create_topic("bids", 4);
    broker.create_topic("bid_stats", 1);
    let server = TestServer::start();
    let c = server.connect().await;
    let sql = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kafka-demo.sql"),
    )
    .expect("docs/kafka-demo.sql")
    .replace("redpanda:9092", &broker.bootstrap);
    exec(&c, &sql).await;
    exec(&c, &sql).await;
    // 30 s of bids, 10 a second, the way the compose producer writes them
    let vals: Vec<Vec<u8>> = (0..300)
        .map(|i: i64| {
            format!(
                "{{\"auction\": {}, \"bidder\": {}, \"price\": {}, \"channel\": \"demo\", \"date_time\": {}}}",
                1000 + i % 20,
                i % 500,
                i % 1000,
                BASE_MS + i * 100
            )
            .into_bytes()
        })
        .collect();
    let records: Vec<Record<'_>> = vals
        .iter()
        .enumerate()
        .map(|(i, v)| ((i % 4) as i32, None, Some(v.as_slice()), None))
        .collect();
    broker.producer().send_all("bids", &records);
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT sum(bids) FROM bids_per_auction").await,
        vec!["300"]
    );
    // watermark 29.9 s - 2 s: the windows [0,10) and [10,20) are closed
    assert_eq!(
        rows(&c, "SELECT bids FROM closed_windows").await,
        vec!["100", "100"]
    );
    assert_eq!(broker.read_topic("bid_stats", 1).len(), 2);
}

fn avro_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A schema registry answering `GET /schemas/ids/<id>` for one id, on a free port; counts
/// the requests.
fn fake_registry(
    id: u32,
    schema: &str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let body = serde_json::json!({ "schema": schema }).to_string();
    let h = hits.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (status, b) = if req.starts_with(&format!("GET /schemas/ids/{id} ")) {
                ("200 OK", body.clone())
            } else {
                ("404 Not Found", "{\"error_code\":40403}".to_string())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                b.len()
            );
        }
    });
    (url, hits)
}

/// `ENCODE AVRO` with an inline schema (bare records) and with a schema registry
/// (Confluent framing, the schema fetched once): rows into views, undecodable records and
/// unknown schema ids to the dead letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_sources() {
    let schema = r#"{"type": "record", "name": "bid", "fields": [
        {"name": "auction", "type": "long"},
        {"name": "price", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}"#;
    let broker = Broker::start();
    broker.create_topic("avro_inline", 1);
    broker.create_topic("avro_registry", 2);
    let (url, hits) = fake_registry(7, schema);
    let server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SOURCE inline_bids (auction BIGINT, price BIGINT, at TIMESTAMP) \
               WITH (connector = 'kafka', topic = 'avro_inline', properties.bootstrap.server = '{0}', \
                     schema.definition = '{schema}') FORMAT PLAIN ENCODE AVRO; \
             CREATE SOURCE registry_bids (auction BIGINT, price INT, at TIMESTAMP) \
               WITH (connector = 'kafka', topic = 'avro_registry', properties.bootstrap.server = '{0}', \
                     schema.registry = '{url}') FORMAT PLAIN ENCODE AVRO; \
             CREATE MATERIALIZED VIEW inline_stats AS SELECT count(*) AS n, sum(price) AS s, max(at) AS last FROM inline_bids; \
             CREATE MATERIALIZED VIEW registry_stats AS SELECT count(*) AS n, sum(price) AS s, max(at) AS last FROM registry_bids",
            broker.bootstrap
        ),
    )
    .await;
    let record = |auction: i64, price: i64, at_ms: i64| {
        let mut b = Vec::new();
        avro_long(&mut b, auction);
        avro_long(&mut b, price);
        avro_long(&mut b, at_ms);
        b
    };
    let framed = |id: u32, body: Vec<u8>| {
        let mut b = vec![0u8];
        b.extend_from_slice(&id.to_be_bytes());
        b.extend(body);
        b
    };
    let inline: Vec<Vec<u8>> = (0..100)
        .map(|i| record(i, i * 10, BASE_MS + i))
        .chain([vec![0x02]]) // truncated
        .collect();
    let registry: Vec<Vec<u8>> = (0..100)
        .map(|i| framed(7, record(i, i * 10, BASE_MS + i)))
        .chain([framed(8, record(1, 1, 1)), b"{\"json\": 1}".to_vec()])
        .collect();
    let producer = broker.producer();
    let r1: Vec<Record<'_>> = inline
        .iter()
        .map(|v| (0, None, Some(v.as_slice()), None))
        .collect();
    producer.send_all("avro_inline", &r1);
    let r2: Vec<Record<'_>> = registry
        .iter()
        .enumerate()
        .map(|(i, v)| ((i % 2) as i32, None, Some(v.as_slice()), None))
        .collect();
    producer.send_all("avro_registry", &r2);
    exec(&c, "FLUSH").await;
    let want = format!(
        "100|{}|2024-01-01 00:00:00.099",
        (0..100).map(|i| i * 10).sum::<i64>()
    );
    assert_eq!(
        rows(&c, "SELECT n, s, last FROM inline_stats").await,
        vec![want.clone()]
    );
    assert_eq!(
        rows(&c, "SELECT n, s, last FROM registry_stats").await,
        vec![want]
    );
    assert_eq!(
        rows(
            &c,
            "SELECT source_name, count(*) FROM weir_dead_letters GROUP BY source_name"
        )
        .await,
        vec!["inline_bids|1", "registry_bids|2"]
    );
    let errs = rows(
        &c,
        "SELECT error FROM weir_dead_letters WHERE source_name = 'registry_bids'",
    )
    .await;
    assert!(errs.iter().any(|e| e.contains("schema id 8")), "{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("Confluent wire format")),
        "{errs:?}"
    );
    // id 7 once; id 8 asked again per batch that has it (here: once per partition batch)
    assert!(
        hits.load(std::sync::atomic::Ordering::SeqCst) <= 4,
        "registry asked too often"
    );
    // a bad inline schema or an unknown field is refused at CREATE
    let e = c
        .batch_execute(&format!(
            "CREATE SOURCE bad (nope BIGINT) WITH (connector = 'kafka', topic = 't', \
               properties.bootstrap.server = '{}', schema.definition = '{schema}') FORMAT PLAIN ENCODE AVRO",
            broker.bootstrap
        ))
        .await
        .expect_err("unknown field");
    assert!(describe_error(&e).contains("not a field of the Avro schema"));
}

/// Wait until the source instances of a view are done.
async fn wait_done(c: &Client, view: &str, deadline: std::time::Instant) {
    let sql = format!("SELECT done FROM weir_sources WHERE view_name = '{view}'");
    while rows(c, &sql).await != vec!["t"] {
        assert!(
            std::time::Instant::now() < deadline,
            "the source of {view} did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checkpoints with Kafka on both sides: a 3-partition topic and a paced nexmark generator
/// feed views and sinks (UPSERT over the topic's aggregate, PLAIN over the generator's
/// rows) while the server is killed with SIGKILL four times, records still arriving. After
/// the last restart the view over the topic counts every record exactly once (the
/// restored instances resume at their checkpointed offsets), and the sink topics read
/// with `read_committed` equal the views: PLAIN rows each exactly once, UPSERT's latest
/// row per key equal to the view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_and_generator_views_and_sinks_survive_kill_9() {
    let (seed, mut rng) = seeded("kafka recovery");
    let broker = Broker::start();
    broker.create_topic("in", 3);
    broker.create_topic("up_out", 2);
    broker.create_topic("plain_out", 1);
    let mut server = TestServer::start_with(crate::harness::Options {
        args: &["--checkpoint-interval", "100ms"],
        ..Default::default()
    });
    let c = server.connect().await;
    let with = |topic: &str, extra: &str| kafka_with(&broker, topic, extra);
    exec(
        &c,
        &format!(
            "CREATE SOURCE kin (k BIGINT, v BIGINT) {} FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW kagg AS SELECT k, count(*) AS n, sum(v) AS s FROM kin GROUP BY k;
             CREATE SINK up FROM kagg {} FORMAT UPSERT ENCODE JSON;
             CREATE SOURCE bids WITH (connector = 'nexmark', nexmark.table.type = 'bid',
               nexmark.event.num = '100000', nexmark.rows.per.second = '20000');
             CREATE MATERIALIZED VIEW picked AS SELECT auction, bidder, price FROM bids WHERE price % 97 = 0;
             CREATE SINK plain FROM picked {} FORMAT PLAIN ENCODE JSON",
            with("in", ""),
            with("up_out", ", primary_key = 'k'"),
            with("plain_out", ""),
        ),
    )
    .await;
    drop(c);
    let producer = broker.producer();
    let mut model: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut next_v = 0i64;
    for round in 0..4 {
        // records arrive before and while the server runs
        for _ in 0..rng.random_range(3..8) {
            let mut batch: Vec<(i32, Vec<u8>)> = Vec::new();
            for _ in 0..rng.random_range(20..200) {
                let k = rng.random_range(0..8i64);
                next_v += 1;
                let e = model.entry(k).or_default();
                e.0 += 1;
                e.1 += next_v;
                batch.push((
                    rng.random_range(0..3),
                    format!("{{\"k\": {k}, \"v\": {next_v}}}").into_bytes(),
                ));
            }
            let records: Vec<Record<'_>> = batch
                .iter()
                .map(|(p, v)| (*p, None, Some(v.as_slice()), None))
                .collect();
            producer.send_all("in", &records);
            tokio::time::sleep(Duration::from_millis(rng.random_range(50..300))).await;
        }
        println!("round {round}: kill");
        server.restart();
    }
    let c = server.connect().await;
    println!(
        "recovery: {:?}",
        query_text(
            &c,
            "SELECT view_name, outcome, coalesce(reason, '') FROM weir_recovery"
        )
        .await
    );
    // how the sinks came back (timing decides: a checkpoint newer than a sink's
    // progress makes it read its topic back)
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    println!(
        "seed {seed}: sinks resumed at their progress {} times, read their whole topic back {} times",
        log.matches("without reading the topic back").count(),
        log.matches("tail=false").count()
    );
    // the generator ends; then everything is in the views and the sinks
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    wait_done(&c, "picked", deadline).await;
    if let Err(e) = c.batch_execute("FLUSH").await {
        panic!(
            "seed {seed}: FLUSH: {}; sinks: {:?}; log:\n{}",
            describe_error(&e),
            query_text(&c, "SELECT * FROM weir_sinks").await,
            std::fs::read_to_string(server.log_path())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("sink") || l.contains("WARN") || l.contains("ERROR"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let want: Vec<String> = model
        .iter()
        .map(|(k, (n, s))| format!("{k}|{n}|{s}"))
        .collect();
    assert_eq!(
        rows(&c, "SELECT k, n, s FROM kagg").await,
        want,
        "seed {seed}: the view over the topic lost or repeated records"
    );
    // UPSERT: the latest row per key is the view
    let got = upsert_rows(&broker, "up_out", 2, ["k", "n", "s"]);
    assert_eq!(
        got, want,
        "seed {seed}: the UPSERT sink topic differs from the view"
    );
    // and the restored generator view equals one that never crashed
    exec(
        &c,
        "CREATE MATERIALIZED VIEW picked_fresh AS SELECT auction, bidder, price FROM bids WHERE price % 97 = 0",
    )
    .await;
    wait_done(&c, "picked_fresh", deadline).await;
    exec(&c, "FLUSH").await;
    assert_eq!(
        rows(&c, "SELECT * FROM picked_fresh").await,
        rows(&c, "SELECT auction, bidder, price FROM picked").await,
        "seed {seed}: restored generator view vs fresh"
    );
    // PLAIN: each row of the view exactly once
    let mut plain: Vec<String> = broker
        .read_topic("plain_out", 1)
        .into_iter()
        .map(|(_, _, v)| {
            let r = json(&v.expect("value"));
            format!("{}|{}|{}", r["auction"], r["bidder"], r["price"])
        })
        .collect();
    plain.sort();
    let view = rows(&c, "SELECT auction, bidder, price FROM picked").await;
    assert!(!view.is_empty());
    assert_eq!(
        plain.len(),
        view.len(),
        "seed {seed}: the PLAIN sink wrote {} messages for {} view rows; {}",
        plain.len(),
        view.len(),
        std::fs::read_to_string(server.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("topic back") || l.contains("progress"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        plain, view,
        "seed {seed}: the PLAIN sink topic differs from the view"
    );
}

/// Late decisions survive a crash: rows whose lateness depends on how the stream was cut
/// into batches (each step is its own batch: FLUSH after it) are dropped or admitted before
/// a SIGKILL; after the restart, which re-reads everything after the checkpoint at once,
/// the input journal re-forms the same batches, so exactly the same rows are dropped and
/// the views show exactly what they showed. Then more rows, another kill without a
/// checkpoint in between, and the views equal a model of the admitted rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_decisions_survive_kill_9() {
    let (seed, mut rng) = seeded("late decisions");
    let broker = Broker::start();
    broker.create_topic("late", 2);
    broker.create_topic("win_out", 2);
    broker.create_topic("closed_out", 1);
    // checkpoints only when asked (the interval never comes in this test)
    let mut server = TestServer::start_with(crate::harness::Options {
        args: &["--checkpoint-interval", "1h"],
        ..Default::default()
    });
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SOURCE ev (k BIGINT, ts TIMESTAMP, \
               WATERMARK FOR ts AS ts - INTERVAL '1 second') {} FORMAT PLAIN ENCODE JSON; \
             CREATE MATERIALIZED VIEW per_win AS SELECT window_start, count(*) AS n, sum(k) AS s \
               FROM TUMBLE(ev, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end; \
             CREATE MATERIALIZED VIEW closed AS SELECT window_start, count(*) AS n \
               FROM TUMBLE(ev, ts, INTERVAL '10 seconds') GROUP BY window_start, window_end \
               EMIT ON WINDOW CLOSE; \
             CREATE SINK win FROM per_win {} FORMAT UPSERT ENCODE JSON; \
             CREATE SINK closed_sink FROM closed {} FORMAT PLAIN ENCODE JSON",
            kafka_with(&broker, "late", ""),
            kafka_with(&broker, "win_out", ", primary_key = 'window_start'"),
            kafka_with(&broker, "closed_out", ""),
        ),
    )
    .await;
    // the sinks' topics read with read_committed: the latest row per window, each closed
    // window once
    let topics = |broker: &Broker| {
        let mut win: Vec<String> = upsert_rows(broker, "win_out", 2, ["window_start", "n", "s"])
            .into_iter()
            .map(|r| r.replace('"', "").replace('T', " "))
            .collect();
        win.sort();
        let closed = closed_windows(broker, "closed_out", 1);
        (win, closed)
    };
    let producer = broker.producer();
    let mut produced: Vec<(i64, i64)> = Vec::new(); // (k, event time µs)
    let mut next_k = 0i64;
    let mut now_s = 0i64;
    // one step: rows to both partitions, some moving event time on, some behind it
    let mut step = |rng: &mut StdRng, late_ones: bool| {
        now_s += rng.random_range(3..12);
        let mut recs: Vec<(i32, Vec<u8>)> = Vec::new();
        for p in 0..2 {
            // with late ones: one more row in partition 0, 25 s behind (late once both
            // partitions' watermarks pass its window, so every seed has late rows)
            let n = rng.random_range(1..4) + i64::from(late_ones && p == 0);
            for i in 0..n {
                // the first row of each partition in a step is on time: every step
                // changes per_win and moves both partitions' watermarks
                let behind = match (late_ones, i) {
                    (false, _) | (true, 0) => 0,
                    (true, i) if i == n - 1 && p == 0 => 25,
                    _ => rng.random_range(0..25),
                };
                let t = (now_s - behind).max(0) * SEC + rng.random_range(0..1000) * 1000;
                next_k += 1;
                produced.push((next_k, t));
                let ts = pg_ts(BASE_MS * 1000 + t).replace(' ', "T");
                let frac = t % SEC / 1000;
                recs.push((
                    p,
                    format!("{{\"k\": {next_k}, \"ts\": \"{ts}.{frac:03}\"}}").into_bytes(),
                ));
            }
        }
        recs
    };
    let send = |recs: &[(i32, Vec<u8>)]| {
        let records: Vec<Record<'_>> = recs
            .iter()
            .map(|(p, v)| (*p, None, Some(v.as_slice()), None))
            .collect();
        producer.send_all("late", &records);
    };
    async fn state(c: &Client) -> (Vec<String>, Vec<String>, Vec<String>) {
        exec(c, "FLUSH").await;
        let late = rows(
            c,
            "SELECT view_name, row FROM weir_late_events ORDER BY view_name, row",
        )
        .await;
        (
            rows(c, "SELECT window_start, n, s FROM per_win").await,
            rows(c, "SELECT window_start, n FROM closed").await,
            late,
        )
    }
    // before the checkpoint: nothing late
    for _ in 0..2 {
        let recs = step(&mut rng, false);
        send(&recs);
        exec(&c, "FLUSH").await;
    }
    exec(&c, "CHECKPOINT").await;
    // after it: each step its own batch; rows behind the watermark of the earlier steps
    for _ in 0..rng.random_range(4..8) {
        let recs = step(&mut rng, true);
        send(&recs);
        exec(&c, "FLUSH").await;
    }
    let before = state(&c).await;
    assert!(
        !before.2.is_empty(),
        "seed {seed}: the test needs late rows: {before:?}"
    );
    drop(c);
    server.restart();
    let c = server.connect().await;
    let after = state(&c).await;
    assert_eq!(
        after, before,
        "seed {seed}: after the restart the same rows are dropped and the views are the same"
    );
    // the journal replay is visible in the log, and the UPSERT sink (its progress is
    // after the checkpoint) went on from the epoch cut at its progress without reading
    // its topic back
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(
        log.contains("input journal replayed"),
        "seed {seed}: {}",
        server.log_tail()
    );
    let resumed = |log: &str| {
        log.lines()
            .filter(|l| l.contains("without reading the topic back") && l.contains("sink=win"))
            .count()
    };
    assert_eq!(resumed(&log), 1, "seed {seed}: {}", server.log_tail());
    exec(&c, "FLUSH").await;
    assert_eq!(
        topics(&broker),
        (after.0.clone(), after.1.clone()),
        "seed {seed}: sink topics after the first restart"
    );
    // on: more steps, a checkpoint between some of them, a kill after the last
    for i in 0..rng.random_range(3..6) {
        let recs = step(&mut rng, true);
        send(&recs);
        exec(&c, "FLUSH").await;
        if i == 1 {
            exec(&c, "CHECKPOINT").await;
        }
    }
    let before = state(&c).await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    let after = state(&c).await;
    // the late log is in memory: after this restart it holds what was replayed, a part
    // of what was dropped before
    assert_eq!(
        (&after.0, &after.1),
        (&before.0, &before.1),
        "seed {seed}: views after the second restart"
    );
    for l in &after.2 {
        assert!(
            before.2.contains(l),
            "seed {seed}: {l} was not dropped before"
        );
    }
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert_eq!(resumed(&log), 2, "seed {seed}: {}", server.log_tail());
    exec(&c, "FLUSH").await;
    assert_eq!(
        topics(&broker),
        (after.0.clone(), after.1.clone()),
        "seed {seed}: sink topics after the second restart"
    );
    // the model: every produced row but the dropped ones, per 10 s window
    let dropped: std::collections::HashSet<i64> = before
        .2
        .iter()
        .filter(|l| l.starts_with("per_win|"))
        .map(|l| {
            json(&l.as_bytes()["per_win|".len()..])["k"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let mut model: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for (k, t) in &produced {
        if !dropped.contains(k) {
            let e = model.entry(t.div_euclid(10 * SEC) * 10 * SEC).or_default();
            e.0 += 1;
            e.1 += k;
        }
    }
    let mut want: Vec<String> = model
        .iter()
        .map(|(w, (n, s))| format!("{}|{n}|{s}", pg_ts(BASE_MS * 1000 + w)))
        .collect();
    want.sort();
    assert_eq!(after.0, want, "seed {seed}: per_win against the model");
}

/// `{"v": i}` for i in `from..to`, round-robin over the partitions.
fn send_values(producer: &TestProducer, topic: &str, partitions: i64, from: i64, to: i64) {
    let values: Vec<(i32, Vec<u8>)> = (from..to)
        .map(|i| {
            (
                (i % partitions) as i32,
                format!("{{\"v\": {i}}}").into_bytes(),
            )
        })
        .collect();
    let records: Vec<Record<'_>> = values
        .iter()
        .map(|(p, v)| (*p, None, Some(v.as_slice()), None))
        .collect();
    producer.send_all(topic, &records);
}

/// A source over `{"v": i}` records of `topic` and view `a` counting and summing them.
async fn create_counted(c: &Client, broker: &Broker, topic: &str) {
    exec(
        c,
        &format!(
            "CREATE SOURCE {topic} (v BIGINT) WITH (connector = 'kafka', topic = '{topic}', \
               properties.bootstrap.server = '{}') FORMAT PLAIN ENCODE JSON; \
             CREATE MATERIALIZED VIEW a AS SELECT count(*) AS n, sum(v) AS s FROM {topic}; FLUSH",
            broker.bootstrap
        ),
    )
    .await;
}

/// One reader per source: two views over a topic read it once and, between FLUSHes, stand
/// at the same offsets; a view created while messages keep coming reads the history with a
/// backfill reader of its own and joins the shared reader with no gap and no overlap; the
/// reader stops with the last view and a later view starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reader_per_source() {
    let broker = Broker::start();
    broker.create_topic("clicks", 3);
    let server = TestServer::start();
    let c = server.connect().await;
    let producer = broker.producer();
    send_values(&producer, "clicks", 3, 0, 20_000);
    create_counted(&c, &broker, "clicks").await;
    // more keeps coming while the second view reads the history
    let total: i64 = 60_000;
    let writer = std::thread::spawn(move || {
        for from in (20_000..total).step_by(500) {
            send_values(&producer, "clicks", 3, from, from + 500);
            std::thread::sleep(Duration::from_millis(10));
        }
        producer
    });
    exec(
        &c,
        "CREATE MATERIALIZED VIEW b AS SELECT count(*) AS n, sum(v) AS s FROM clicks",
    )
    .await;
    crate::harness::wait_for_shared_reader(&c, "b").await;
    // joined: every epoch moves both views by the same batches
    for _ in 0..30 {
        let r = query_text(&c, "SELECT a.n, a.s, b.n, b.s FROM a, b").await;
        assert_eq!(
            (&r[0][0], &r[0][1]),
            (&r[0][2], &r[0][3]),
            "a and b disagree"
        );
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let producer = writer.join().expect("writer");
    exec(&c, "FLUSH").await;
    let want = |n: i64| vec![format!("{n}|{}", n * (n - 1) / 2)];
    assert_eq!(rows(&c, "SELECT n, s FROM a").await, want(total));
    assert_eq!(
        rows(&c, "SELECT n, s FROM b").await,
        want(total),
        "b: a gap or an overlap"
    );
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("backfill done") && l.contains("view=b")),
        "b read the history with a backfill reader"
    );
    assert_eq!(
        rows(
            &c,
            "SELECT view_name, reader, rows FROM weir_sources WHERE source_name = 'clicks'"
        )
        .await,
        vec![format!("a|shared|{total}"), format!("b|shared|{total}")]
    );
    // the reader stays while a view reads through it, and stops with the last one
    exec(&c, "DROP MATERIALIZED VIEW a").await;
    send_values(&producer, "clicks", 3, total, total + 1000);
    exec(&c, "FLUSH").await;
    assert_eq!(rows(&c, "SELECT n, s FROM b").await, want(total + 1000));
    exec(&c, "DROP MATERIALIZED VIEW b").await;
    assert_eq!(
        rows(
            &c,
            "SELECT count(*) FROM weir_sources WHERE source_name = 'clicks'"
        )
        .await,
        vec!["0"]
    );
    // a new first view starts the reader again from the startup mode (earliest)
    exec(
        &c,
        "CREATE MATERIALIZED VIEW d AS SELECT count(*) AS n, sum(v) AS s FROM clicks; FLUSH",
    )
    .await;
    assert_eq!(rows(&c, "SELECT n, s FROM d").await, want(total + 1000));
}

/// A view killed (SIGKILL) while it reads a topic's history with its backfill reader, and
/// the shared reader beside it: after the restart the backfill resumes from the checkpoint
/// (or the view is rebuilt) and joins the restored shared reader; both views equal the
/// topic, nothing lost and nothing twice. Kill points vary with the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_killed_mid_way_joins_after_the_restart() {
    let seed = kafka_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let broker = Broker::start();
    broker.create_topic("hist", 3);
    let mut server = TestServer::start_with(crate::harness::Options {
        env: &[],
        args: &["--checkpoint-interval", "200ms"],
        data_dir: None,
        nofile: None,
    });
    let c = server.connect().await;
    let producer = broker.producer();
    let mut sent: i64 = 60_000;
    send_values(&producer, "hist", 3, 0, sent);
    create_counted(&c, &broker, "hist").await;
    send_values(&producer, "hist", 3, sent, sent + 5_000);
    sent += 5_000;
    exec(
        &c,
        "CREATE MATERIALIZED VIEW b AS SELECT count(*) AS n, sum(v) AS s FROM hist",
    )
    .await;
    let wait_ms = rng.random_range(0..350u64);
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    let _ = c.batch_execute("CHECKPOINT").await;
    let at_kill = query_text(
        &c,
        "SELECT reader, rows FROM weir_sources WHERE view_name = 'b'",
    )
    .await;
    drop(c);
    server.restart();
    let c = server.connect().await;
    // 1,000 more, then both views equal the topic
    let more = async |c: &Client, sent: &mut i64| {
        send_values(&producer, "hist", 3, *sent, *sent + 1_000);
        *sent += 1_000;
        exec(c, "FLUSH").await;
        let want = vec![format!("{sent}|{}", *sent * (*sent - 1) / 2)];
        assert_eq!(rows(c, "SELECT n, s FROM a").await, want, "seed {seed}: a");
        assert_eq!(rows(c, "SELECT n, s FROM b").await, want, "seed {seed}: b");
    };
    more(&c, &mut sent).await;
    let recovery = rows(&c, "SELECT view_name, outcome FROM weir_recovery").await;
    println!(
        "seed {seed}: killed {wait_ms} ms into b's backfill, b then {at_kill:?}; {recovery:?}"
    );
    assert!(
        recovery.contains(&"a|restored".to_string()),
        "seed {seed}: {recovery:?}"
    );
    // b ends up on the shared reader
    crate::harness::wait_for_shared_reader(&c, "b").await;
    more(&c, &mut sent).await;
}

/// A connector option given as a secret reaches librdkafka resolved (a reference passed
/// through unresolved is not a valid `security.protocol`): at CREATE, when the reader runs,
/// and after a kill -9 (the secrets key unseals it again); a secret in use cannot be
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_connector_options() {
    let broker = Broker::start();
    broker.create_topic("sec_in", 1);
    let mut server = TestServer::start();
    let c = server.connect().await;
    exec(
        &c,
        &format!(
            "CREATE SECRET proto AS 'PLAINTEXT'; \
             CREATE SOURCE s (a INT) WITH (connector = 'kafka', topic = 'sec_in', \
               properties.bootstrap.server = '{}', properties.security.protocol = SECRET proto) \
               FORMAT PLAIN ENCODE JSON; \
             CREATE MATERIALIZED VIEW sv AS SELECT count(*) AS n, sum(a) AS total FROM s",
            broker.bootstrap
        ),
    )
    .await;
    let produce = |v: &'static [u8]| {
        broker
            .producer()
            .send_all("sec_in", &[(0, None, Some(v), None)])
    };
    produce(br#"{"a": 1}"#);
    exec(&c, "FLUSH").await;
    assert_eq!(rows(&c, "SELECT n, total FROM sv").await, vec!["1|1"]);
    let e = c
        .simple_query("DROP SECRET proto")
        .await
        .expect_err("in use");
    assert!(
        describe_error(&e).starts_with("2BP01"),
        "{}",
        describe_error(&e)
    );
    drop(c);
    server.restart();
    let c = server.connect().await;
    produce(br#"{"a": 2}"#);
    exec(&c, "FLUSH").await;
    assert_eq!(rows(&c, "SELECT n, total FROM sv").await, vec!["2|3"]);
    // a reference to a secret that does not exist is refused at CREATE
    let e = c
        .simple_query(&format!(
            "CREATE SOURCE s2 (a INT) WITH (connector = 'kafka', topic = 'sec_in', \
               properties.bootstrap.server = '{}', properties.sasl.password = SECRET nosuch) \
               FORMAT PLAIN ENCODE JSON",
            broker.bootstrap
        ))
        .await
        .expect_err("no such secret");
    assert!(
        describe_error(&e).starts_with("42704: secret \"nosuch\" does not exist"),
        "{}",
        describe_error(&e)
    );
}
