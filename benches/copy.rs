//! Bulk load and change streams through the wire (release build): `COPY ... FROM STDIN`
//! in text and CSV into a keyed table, `COPY (SELECT ...) TO STDOUT`, and how fast a
//! `SUBSCRIBE` delivers a view's changes while rows are loaded.
//!
//! Run: `cargo bench --bench copy`. Results go in `docs/benchmarks.md`.

#[path = "../tests/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::Instant;

use bytes::Bytes;
use futures::{SinkExt, StreamExt, pin_mut};

const ROWS: usize = 1_000_000;

async fn copy_in(c: &tokio_postgres::Client, sql: &str, data: String) -> f64 {
    let sink = c.copy_in::<_, Bytes>(sql).await.expect("COPY FROM");
    pin_mut!(sink);
    let t = Instant::now();
    // 1 MiB CopyData messages, as psql and drivers send
    let bytes = Bytes::from(data);
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + (1 << 20)).min(bytes.len());
        sink.send(bytes.slice(at..end)).await.expect("send");
        at = end;
    }
    let n = sink.finish().await.expect("finish");
    assert_eq!(n as usize, ROWS);
    ROWS as f64 / t.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let server = harness::TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE text_load (id BIGINT PRIMARY KEY, name TEXT, v DOUBLE PRECISION, g INT);
         CREATE TABLE csv_load (id BIGINT PRIMARY KEY, name TEXT, v DOUBLE PRECISION, g INT);
         CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM csv_load GROUP BY g;
         CREATE MATERIALIZED VIEW rows_out AS SELECT id, g FROM csv_load WHERE g >= 0;",
    )
    .await
    .expect("create");

    let mut text = String::with_capacity(ROWS * 32);
    let mut csv = String::with_capacity(ROWS * 32);
    for i in 0..ROWS {
        text.push_str(&format!("{i}\tname-{i}\t{i}.5\t{}\n", i % 1000));
        csv.push_str(&format!("{i},\"name,{i}\",{i}.5,{}\n", i % 1000));
    }
    let text_rate = copy_in(&c, "COPY text_load FROM STDIN", text).await;

    // a subscriber to a view over the CSV table, counting the change rows it receives
    let port = server.port();
    let (sub, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    let counter = tokio::spawn(async move {
        let stream = sub
            .copy_out("COPY (SUBSCRIBE rows_out WITH (snapshot = false)) TO STDOUT")
            .await
            .expect("subscribe");
        pin_mut!(stream);
        let mut lines = 0usize;
        let mut first = None;
        while let Some(Ok(chunk)) = stream.next().await {
            first.get_or_insert_with(Instant::now);
            lines += chunk.iter().filter(|b| **b == b'\n').count();
            // every loaded row once
            if lines >= ROWS {
                break;
            }
        }
        (lines, first.map(|f| f.elapsed()))
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let started = Instant::now();
    let csv_rate = copy_in(&c, "COPY csv_load FROM STDIN (FORMAT csv)", csv).await;
    c.batch_execute("FLUSH").await.expect("flush");
    let (lines, _) = counter.await.expect("subscriber");
    let sub_rate = lines as f64 / started.elapsed().as_secs_f64();

    let t = Instant::now();
    let out = c
        .copy_out("COPY (SELECT * FROM text_load) TO STDOUT")
        .await
        .expect("COPY TO");
    pin_mut!(out);
    let mut rows = 0usize;
    while let Some(chunk) = out.next().await {
        rows += chunk
            .expect("chunk")
            .iter()
            .filter(|b| **b == b'\n')
            .count();
    }
    assert_eq!(rows, ROWS);
    let out_rate = ROWS as f64 / t.elapsed().as_secs_f64();

    println!("COPY FROM STDIN text, 1M rows (4 columns, keyed): {text_rate:.0} rows/s");
    println!(
        "COPY FROM STDIN csv, 1M rows, feeding two views and a subscriber: {csv_rate:.0} rows/s"
    );
    println!(
        "SUBSCRIBE to a view over it: {lines} change rows at {sub_rate:.0} rows/s (from COPY start to the last row received)"
    );
    println!("COPY (SELECT * FROM t) TO STDOUT, 1M rows: {out_rate:.0} rows/s");
    if let Some(pid) = server.pid() {
        println!("server peak RSS: {:.0} MiB", harness::peak_mib(pid));
    }
}
