//! INSERT throughput of one connection against a real server (release build):
//! single-row INSERT statements (each acknowledged only after its fsync), the same through
//! a prepared statement, and 10,000-row multi-row INSERTs.
//!
//! Run: `cargo bench --bench inserts`. Results go in `docs/benchmarks.md`.

#[path = "../tests/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::Instant;

#[tokio::main]
async fn main() {
    let server = harness::TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE single (id BIGINT PRIMARY KEY, name TEXT, v DOUBLE PRECISION); \
         CREATE TABLE bulk (id BIGINT PRIMARY KEY, name TEXT, v DOUBLE PRECISION); \
         CREATE TABLE events (id BIGINT, name TEXT, v DOUBLE PRECISION) APPEND ONLY",
    )
    .await
    .expect("create");

    let n = 2000;
    let t = Instant::now();
    for i in 0..n {
        c.batch_execute(&format!(
            "INSERT INTO single VALUES ({i}, 'name-{i}', {i}.5)"
        ))
        .await
        .expect("insert");
    }
    let simple = n as f64 / t.elapsed().as_secs_f64();

    let stmt = c
        .prepare("INSERT INTO single VALUES ($1, $2, $3)")
        .await
        .expect("prepare");
    let t = Instant::now();
    for i in n..2 * n {
        c.execute(&stmt, &[&(i as i64), &format!("name-{i}"), &(i as f64)])
            .await
            .expect("insert");
    }
    let prepared = n as f64 / t.elapsed().as_secs_f64();

    let rows = 10_000;
    let mut keyed = Vec::new();
    let mut appended = Vec::new();
    for round in 0..5 {
        let mut sql = String::from("INSERT INTO bulk VALUES ");
        for i in 0..rows {
            let id = round * rows + i;
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&format!("({id}, 'name-{id}', {id}.25)"));
        }
        let t = Instant::now();
        c.batch_execute(&sql).await.expect("bulk insert");
        keyed.push(rows as f64 / t.elapsed().as_secs_f64());
        let sql = sql.replacen("INSERT INTO bulk", "INSERT INTO events", 1);
        let t = Instant::now();
        c.batch_execute(&sql).await.expect("bulk insert");
        appended.push(rows as f64 / t.elapsed().as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!("| single-row INSERT, simple protocol | {simple:.0} statements/s |");
    println!("| single-row INSERT, prepared | {prepared:.0} statements/s |");
    println!(
        "| 10,000-row INSERT into a keyed table | {:.0} rows/s (median of 5) |",
        median(&mut keyed)
    );
    println!(
        "| 10,000-row INSERT into an append-only table | {:.0} rows/s (median of 5) |",
        median(&mut appended)
    );
}
