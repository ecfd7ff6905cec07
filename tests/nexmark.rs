//! Nexmark oracle: every benchmark query as a materialized view over the nexmark generator
//! sources equals the same query run one-shot over views that copy the sources' rows (the
//! generator is in event-time order, so no row is late and every window counts).

use tokio_postgres::Client;

use crate::harness::{TestServer, describe_error, query_text};
use crate::nexmark_queries::{QUERIES, instantiate};

/// Rows as sorted text, with floating-point fields rounded (incremental and one-shot
/// averages may differ in the last bits).
async fn rows(c: &Client, sql: &str) -> Vec<String> {
    let mut v: Vec<String> = query_text(c, sql)
        .await
        .into_iter()
        .map(|r| {
            r.iter()
                .map(|f| match f.parse::<f64>() {
                    Ok(x) if f.contains('.') => format!("{x:.6e}"),
                    _ => f.clone(),
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_views_equal_their_queries() {
    let server = TestServer::start();
    let c = server.connect().await;
    // 40,000 events at 1,000 per second of event time: 40 seconds, several windows
    for t in ["person", "auction", "bid"] {
        c.batch_execute(&format!(
            "CREATE SOURCE {t} (WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') \
             WITH (connector = 'nexmark', nexmark.table.type = '{t}', nexmark.event.num = '40000', \
             nexmark.event.rate = '1000'); \
             CREATE MATERIALIZED VIEW all_{t} AS SELECT * FROM {t}"
        ))
        .await
        .expect("sources");
    }
    for (name, sql) in QUERIES {
        c.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW {name} AS {}",
            instantiate(sql, "")
        ))
        .await
        .unwrap_or_else(|e| panic!("create {name}: {}", describe_error(&e)));
    }
    c.batch_execute("FLUSH").await.expect("flush");
    let counts = rows(&c, "SELECT count(*) FROM all_bid").await;
    assert_eq!(counts, vec!["36800".to_owned()]);
    let late = rows(&c, "SELECT sum(late_rows_dropped) FROM weir_views").await;
    assert_eq!(late, vec!["0".to_owned()], "the generator is in order");
    for (name, sql) in QUERIES {
        let got = rows(&c, &format!("SELECT * FROM {name}")).await;
        let want = rows(&c, &instantiate(sql, "all_")).await;
        assert!(!want.is_empty(), "{name}: the one-shot query has rows");
        if got != want {
            let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
            let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
            panic!(
                "nexmark {name}: view has {} rows, query {}\n  only in view: {extra:?}\n  \
                 only in query: {missing:?}",
                got.len(),
                want.len()
            );
        }
    }
}

/// An unpaced generator makes its large batches in one slice per worker (`weir-gen-K`
/// threads): the rows are those one generator makes, whatever `--workers` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generator_slices_make_the_same_rows_as_one_generator() {
    let mut answers = Vec::new();
    for workers in ["1", "2"] {
        let server = TestServer::start_with(crate::harness::Options {
            args: &["--workers", workers],
            ..Default::default()
        });
        let c = server.connect().await;
        c.batch_execute(
            "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'bid', \
             nexmark.event.num = '300000'); \
             CREATE MATERIALIZED VIEW all_bid AS SELECT * FROM bid; FLUSH",
        )
        .await
        .expect("source");
        answers.push(
            rows(
                &c,
                "SELECT count(*), sum(auction), sum(bidder), sum(price), min(date_time), \
                 max(date_time), sum(length(url)), count(DISTINCT extra) FROM all_bid",
            )
            .await,
        );
    }
    assert_eq!(answers[0][0].split('|').next(), Some("276000"));
    assert_eq!(answers[0], answers[1], "--workers 1 vs 2");
}
