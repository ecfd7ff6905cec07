//! Point queries by primary key on a large keyed table (release build): the table loaded
//! with `COPY`, then `SELECT ... WHERE id = k` for random keys over the simple and the
//! extended protocol (a prepared statement with `$1`), against a scan with a non-key filter,
//! and that filter again through a secondary index (`CREATE INDEX`).
//!
//! Run: `cargo bench --bench point` (`POINT_ROWS=1000000` to change the table size).
//! Results go in `docs/benchmarks.md`.

#[path = "../tests/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt, pin_mut};

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() {
    let rows: u64 = std::env::var("POINT_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let server = harness::TestServer::start_with(harness::Options {
        env: &[],
        args: &["--checkpoint-interval", "0"],
        data_dir: None,
        nofile: None,
    });
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE accounts (id BIGINT PRIMARY KEY, name TEXT, balance BIGINT)")
        .await
        .expect("create");
    let t = Instant::now();
    let sink = c
        .copy_in::<_, Bytes>("COPY accounts FROM STDIN")
        .await
        .expect("COPY");
    pin_mut!(sink);
    let chunk = 200_000u64;
    let mut at = 0u64;
    while at < rows {
        let end = (at + chunk).min(rows);
        let mut s = String::with_capacity((end - at) as usize * 24);
        for i in at..end {
            s.push_str(&format!("{i}\tacct-{i}\t{}\n", i % 10_000));
        }
        sink.send(Bytes::from(s)).await.expect("send");
        at = end;
    }
    assert_eq!(sink.finish().await.expect("finish"), rows);
    println!("loaded {rows} rows in {:.1} s", t.elapsed().as_secs_f64());

    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next_key = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % rows) as i64
    };
    let n = 2_000;
    // simple protocol, the key as a literal
    let mut simple = Vec::with_capacity(n);
    for _ in 0..n {
        let k = next_key();
        let t = Instant::now();
        let r = c
            .simple_query(&format!(
                "SELECT name, balance FROM accounts WHERE id = {k}"
            ))
            .await
            .expect("point query");
        simple.push(t.elapsed());
        let found = r
            .iter()
            .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
            .count();
        assert_eq!(found, 1, "key {k}");
    }
    // extended protocol: one prepared statement, the key as a parameter
    let stmt = c
        .prepare("SELECT name, balance FROM accounts WHERE id = $1")
        .await
        .expect("prepare");
    let mut prepared = Vec::with_capacity(n);
    for _ in 0..n {
        let k = next_key();
        let t = Instant::now();
        let r = c.query(&stmt, &[&k]).await.expect("prepared point query");
        prepared.push(t.elapsed());
        assert_eq!(r.len(), 1);
    }
    // a filter on a non-key column scans the table
    let mut scans = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        c.simple_query("SELECT name FROM accounts WHERE balance = -1")
            .await
            .expect("scan");
        scans.push(t.elapsed());
    }
    // the same kind of filter through a secondary index (CREATE INDEX)
    let t = Instant::now();
    c.batch_execute("CREATE UNIQUE INDEX accounts_name ON accounts (name)")
        .await
        .expect("create index");
    println!(
        "CREATE UNIQUE INDEX over {rows} rows: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut indexed = Vec::with_capacity(n);
    for _ in 0..n {
        let k = next_key();
        let t = Instant::now();
        let r = c
            .simple_query(&format!(
                "SELECT id, balance FROM accounts WHERE name = 'acct-{k}'"
            ))
            .await
            .expect("indexed query");
        indexed.push(t.elapsed());
        let found = r
            .iter()
            .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
            .count();
        assert_eq!(found, 1, "name acct-{k}");
    }
    for (what, mut v) in [
        ("point query, simple protocol", simple),
        ("point query, prepared ($1)", prepared),
        ("non-key filter (scan)", scans),
        ("non-key filter through an index", indexed),
    ] {
        v.sort();
        println!(
            "{what}: median {:.0} µs, p99 {:.0} µs (round trip on loopback, {} queries)",
            percentile(&v, 0.5),
            percentile(&v, 0.99),
            v.len()
        );
    }
    if let Some(pid) = server.pid() {
        println!("server peak RSS: {:.0} MiB", harness::peak_mib(pid));
    }
}
