//! Kafka sources against a real Kafka-protocol broker (tansu): a multi-partition JSON
//! topic into windowed views compared with a model, dead letters, startup modes, INCLUDE
//! columns, `on_error = 'fail'`, and a network outage in the middle of a stream.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::broker::{Broker, Record};
use crate::harness::{TestServer, describe_error, query_text};

const SEC: i64 = 1_000_000;
const BASE_MS: i64 = 1_704_067_200_000; // 2024-01-01

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
    let seed: u64 = std::env::var("WEIR_KAFKA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random_range(0..1_000_000));
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
            let mut t = (round * 120 + p as i64 * 7) * SEC;
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
        let records: Vec<Record<'_>> = batch
            .iter()
            .map(|(p, v)| (*p, None, Some(v.as_slice()), None))
            .collect();
        producer.send_all("events", &records);
        exec(&c, "FLUSH").await;
    }
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
    let counted = query_text(
        &c,
        "SELECT dead_letters FROM weir_sources ORDER BY view_name",
    )
    .await;
    assert_eq!(
        counted
            .iter()
            .map(|r| r[0].parse::<usize>().unwrap())
            .sum::<usize>(),
        bad,
        "each bad record is counted by exactly one instance"
    );
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
    let server = TestServer::start();
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
