//! Kafka source throughput (release build): a 4-partition topic of `N` JSON bid records
//! (default 10 million, ~150 bytes each, event time advancing 1 ms per record, in order per
//! partition) on a local tansu broker (memory storage), read by a fresh server into
//!
//! - `count`: a global count (the decode + transport ceiling), and
//! - `tumble`: a 10-second tumbling window per auction (count, max price), the benchmark
//!   the Kafka issue names.
//!
//! Reported per view: the time from CREATE to FLUSH's return (FLUSH returns once every
//! partition is read to its end and every row is in the view), records/s, and the
//! server's peak resident memory. The broker, the producer (before the clock starts) and
//! the server share the machine's cores.
//!
//! Run: `cargo bench --bench kafka` (`KAFKA_RECORDS=1000000` to change N,
//! `KAFKA_SERVER_ARGS='--checkpoint-interval 0'` for flags of the server).

#[path = "../tests/broker.rs"]
#[allow(dead_code)]
mod broker;
#[path = "../tests/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::Instant;

#[tokio::main]
async fn main() {
    let n: u64 = std::env::var("KAFKA_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let b = broker::Broker::start_direct();
    b.create_topic("bids", 4);
    let producer = b.producer();
    let t = Instant::now();
    let base_ms: i64 = 1_704_067_200_000;
    let channels = ["Google", "Facebook", "Baidu", "Apple"];
    let chunk = 100_000u64;
    let mut bytes = 0usize;
    let mut i = 0u64;
    while i < n {
        let end = (i + chunk).min(n);
        let values: Vec<Vec<u8>> = (i..end)
            .map(|j| {
                format!(
                    "{{\"auction\": {}, \"bidder\": {}, \"price\": {}, \"channel\": \"{}\", \"url\": \"https://www.nexmark.com/item/{}\", \"date_time\": {}}}",
                    1000 + (j * 7919) % 1_000,
                    2000 + (j * 104_729) % 50_000,
                    100 + (j * 31) % 10_000,
                    channels[(j % 4) as usize],
                    j % 977,
                    base_ms + j as i64
                )
                .into_bytes()
            })
            .collect();
        bytes += values.iter().map(|v| v.len()).sum::<usize>();
        let records: Vec<broker::Record<'_>> = values
            .iter()
            .enumerate()
            .map(|(k, v)| (((i + k as u64) % 4) as i32, None, Some(v.as_slice()), None))
            .collect();
        producer.send_all("bids", &records);
        i = end;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "produced {n} records ({:.0} MiB) in {secs:.1}s ({:.0} records/s)",
        bytes as f64 / (1 << 20) as f64,
        n as f64 / secs
    );
    // the client-side ceiling: a bare librdkafka consumer reading every partition, with
    // librdkafka's defaults and with Weir's consumer settings
    for weir_config in [false, true] {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
        let config = if weir_config {
            let o: std::collections::HashMap<String, String> = [
                ("topic".to_string(), "bids".to_string()),
                (
                    "properties.bootstrap.server".to_string(),
                    b.bootstrap.clone(),
                ),
            ]
            .into();
            weir::connectors::kafka::KafkaOptions::parse(&o)
                .expect("options")
                .client_config()
        } else {
            let mut c = rdkafka::config::ClientConfig::new();
            c.set("bootstrap.servers", &b.bootstrap)
                .set("group.id", "bench-raw")
                .set("enable.auto.commit", "false")
                .set("fetch.wait.max.ms", "100");
            c
        };
        let c: BaseConsumer = config.create().expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..4 {
            tpl.add_partition_offset("bids", p, Offset::Beginning)
                .expect("partition");
        }
        c.assign(&tpl).expect("assign");
        let t = Instant::now();
        let mut got = 0u64;
        while got < n && t.elapsed().as_secs() < 600 {
            if let Some(Ok(_)) = c.poll(std::time::Duration::from_millis(50)) {
                got += 1;
            }
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "bare librdkafka consumer ({}): {got} records in {secs:.1}s ({:.0} records/s)",
            if weir_config {
                "Weir's settings"
            } else {
                "defaults"
            },
            got as f64 / secs
        );
    }
    println!(
        "{:<8} {:>10} {:>14} {:>11} {:>10}",
        "view", "secs", "records/s", "view rows", "peak MiB"
    );
    let views = [
        ("count", "SELECT count(*) AS n FROM bids"),
        (
            "tumble",
            "SELECT auction, window_start, count(*) AS bids, max(price) AS top \
             FROM TUMBLE(bids, date_time, INTERVAL '10 seconds') \
             GROUP BY auction, window_start, window_end",
        ),
    ];
    // `KAFKA_SERVER_ARGS='--checkpoint-interval 0'`: server flags (e.g. checkpoints and
    // with them the input journal off)
    let server_args: Vec<String> = std::env::var("KAFKA_SERVER_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    println!("server flags {server_args:?}");
    for (name, sql) in views {
        let server = harness::TestServer::start_with(harness::Options {
            args: &args,
            ..Default::default()
        });
        let c = server.connect().await;
        c.batch_execute(&format!(
            "CREATE SOURCE bids (auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, \
               date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '4 seconds') \
             WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = '{}') \
             FORMAT PLAIN ENCODE JSON",
            b.bootstrap
        ))
        .await
        .expect("create source");
        let t = Instant::now();
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {sql}; FLUSH"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {}", harness::describe_error(&e)));
        let secs = t.elapsed().as_secs_f64();
        let rows = harness::query_text(&c, &format!("SELECT count(*) FROM {name}")).await;
        let total_sql = if name == "count" {
            "SELECT n FROM count".to_string()
        } else {
            format!("SELECT sum(bids) FROM {name}")
        };
        let total = harness::query_text(&c, &total_sql).await;
        if total[0][0] != n.to_string() {
            eprintln!("{}", server.log_tail());
        }
        assert_eq!(
            total[0][0],
            n.to_string(),
            "{name}: every record in the view"
        );
        let got = harness::query_text(&c, "SELECT sum(rows) FROM weir_source_partitions").await;
        if got[0][0] != n.to_string() {
            let parts = harness::query_text(
                &c,
                "SELECT partition, \"offset\", high_watermark, rows FROM weir_source_partitions ORDER BY 1",
            )
            .await;
            eprintln!("{name}: partitions after FLUSH: {parts:?}");
            eprintln!("{}", server.log_tail());
        }
        assert_eq!(got[0][0], n.to_string(), "{name}: every record read");
        println!(
            "{name:<8} {secs:>10.1} {:>14.0} {:>11} {:>10.0}",
            n as f64 / secs,
            rows[0][0],
            server.pid().map(harness::peak_mib).unwrap_or(f64::NAN)
        );
    }
}
