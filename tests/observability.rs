//! The HTTP port: `/metrics` scraped while a Kafka source and a Nexmark source run, parsed
//! by Prometheus' own OpenMetrics parser (Python `prometheus_client`); `/healthz` and
//! `/readyz`.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use crate::broker::Broker;
use crate::harness::{TestServer, query_text};

fn clients_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The families of one scrape, by name (as the parser names them: counters without
/// `_total`, units kept).
fn scrape(server: &TestServer) -> BTreeMap<String, Value> {
    let http = server.http_addr.as_ref().expect("the HTTP port listens");
    let out = Command::new("python3")
        .arg(clients_dir().join("scrape.py"))
        .arg(format!("http://{http}/metrics"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "scrape failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The value of the sample `name` whose labels include all of `want`.
fn sample(
    families: &BTreeMap<String, Value>,
    family: &str,
    name: &str,
    want: &[(&str, &str)],
) -> Option<f64> {
    families.get(family)?["samples"]
        .as_array()?
        .iter()
        .find(|s| {
            s[0] == name
                && want
                    .iter()
                    .all(|(k, v)| s[1].get(*k).and_then(Value::as_str) == Some(*v))
        })
        .and_then(|s| s[2].as_f64())
}

fn kind(families: &BTreeMap<String, Value>, family: &str) -> String {
    families
        .get(family)
        .and_then(|f| f["type"].as_str())
        .unwrap_or("missing")
        .to_owned()
}

fn get(server: &TestServer, path: &str) -> (u16, String) {
    let http = server.http_addr.as_ref().expect("the HTTP port listens");
    match ureq::get(&format!("http://{http}{path}")).call() {
        Ok(mut r) => (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(ureq::Error::StatusCode(code)) => (code, String::new()),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_while_sources_run() {
    let broker = Broker::start();
    broker.create_topic("m_in", 2);
    let server = TestServer::start();
    assert_eq!(get(&server, "/healthz"), (200, "ok\n".into()));
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE SOURCE kin (k INT, v INT) WITH (connector = 'kafka', topic = 'm_in', \
           properties.bootstrap.server = '{}', scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON; \
         CREATE MATERIALIZED VIEW kagg AS SELECT k, count(*) AS n FROM kin GROUP BY k; \
         CREATE SOURCE bids WITH (connector = 'nexmark', nexmark.table.type = 'bid', \
           nexmark.rows.per.second = '2000'); \
         CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n FROM bids GROUP BY auction",
        broker.bootstrap
    ))
    .await
    .expect("setup");
    let records: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("{{\"k\": {}, \"v\": {i}}}", i % 7).into_bytes())
        .collect();
    let batch: Vec<_> = records
        .iter()
        .enumerate()
        .map(|(i, r)| ((i % 2) as i32, None, Some(r.as_slice()), None))
        .collect();
    broker.producer().send_all("m_in", &batch);
    c.batch_execute("FLUSH").await.expect("flush");
    c.batch_execute("CHECKPOINT").await.expect("checkpoint");
    let first = scrape(&server);

    // names, types and units as documented
    for (family, t) in [
        ("weir_source_rows", "counter"),
        ("weir_source_lag_records", "gauge"),
        ("weir_dead_letters", "counter"),
        ("weir_view_rows", "gauge"),
        ("weir_watermark_delay_seconds", "gauge"),
        ("weir_state_rows", "gauge"),
        ("weir_state_bytes", "gauge"),
        ("weir_late_rows", "counter"),
        ("weir_view_failed", "gauge"),
        ("weir_operator_rows", "counter"),
        ("weir_operator_busy_seconds", "counter"),
        ("weir_connections", "gauge"),
        ("weir_queries", "counter"),
        ("weir_checkpoint_duration_seconds", "histogram"),
        ("weir_checkpoint_bytes", "gauge"),
        ("weir_view_epoch_latency_seconds", "histogram"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds", "counter"),
        ("process_open_fds", "gauge"),
    ] {
        assert_eq!(kind(&first, family), t, "{family}: {:?}", first.get(family));
    }
    // the Kafka partitions were read to their end: 200 rows, no lag
    let kafka_rows: f64 = (0..2)
        .map(|p| {
            sample(
                &first,
                "weir_source_rows",
                "weir_source_rows_total",
                &[("source", "kin"), ("partition", &p.to_string())],
            )
            .unwrap_or_else(|| panic!("partition {p}: {:?}", first.get("weir_source_rows")))
        })
        .sum();
    assert_eq!(kafka_rows, 200.0);
    for p in 0..2 {
        assert_eq!(
            sample(
                &first,
                "weir_source_lag_records",
                "weir_source_lag_records",
                &[("source", "kin"), ("partition", &p.to_string())]
            ),
            Some(0.0),
            "lag after FLUSH"
        );
    }
    assert_eq!(
        sample(
            &first,
            "weir_view_rows",
            "weir_view_rows",
            &[("view", "kagg")]
        ),
        Some(7.0)
    );
    assert!(
        sample(
            &first,
            "weir_queries",
            "weir_queries_total",
            &[("kind", "ddl")]
        )
        .unwrap_or(0.0)
            >= 4.0
    );
    assert!(
        sample(
            &first,
            "weir_checkpoint_duration_seconds",
            "weir_checkpoint_duration_seconds_count",
            &[]
        )
        .unwrap_or(0.0)
            >= 1.0
    );
    assert_eq!(
        sample(&first, "weir_connections", "weir_connections", &[]),
        Some(1.0)
    );
    // state per operator: the aggregate of kagg holds its 7 groups
    let groups = first["weir_state_rows"]["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .filter(|s| s[1]["view"] == "kagg")
        .filter_map(|s| s[2].as_f64())
        .fold(0.0, f64::max);
    assert!(groups >= 7.0, "{:?}", first["weir_state_rows"]);

    // the generator keeps producing: its counter grows between scrapes
    let nexmark = |f: &BTreeMap<String, Value>| {
        f["weir_source_rows"]["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .filter(|s| s[1]["source"] == "bids")
            .filter_map(|s| s[2].as_f64())
            .sum::<f64>()
    };
    let before = nexmark(&first);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let second = scrape(&server);
    assert!(
        nexmark(&second) > before,
        "{before} -> {}",
        nexmark(&second)
    );
    assert!(
        sample(
            &second,
            "weir_queries",
            "weir_queries_total",
            &[("kind", "ddl")]
        ) >= sample(
            &first,
            "weir_queries",
            "weir_queries_total",
            &[("kind", "ddl")]
        )
    );
    assert_eq!(get(&server, "/readyz").0, 200);
}

/// `--http-listen off` runs without the port; an address beyond loopback asks for a role's
/// password (HTTP Basic) once the SQL port would.
#[test]
fn http_port_off_and_authenticated() {
    let off = TestServer::start_with(crate::harness::Options {
        args: &["--http-listen", "off"],
        ..Default::default()
    });
    assert!(off.http_addr.is_none());
    drop(off);
    let server = TestServer::start_with(crate::harness::Options {
        env: &[("WEIR_SUPERUSER_PASSWORD", "h-pw")],
        args: &["--http-listen", "0.0.0.0:0"],
        ..Default::default()
    });
    let port = server
        .http_addr
        .as_ref()
        .and_then(|a| a.rsplit(':').next())
        .expect("port")
        .to_owned();
    let url = format!("http://127.0.0.1:{port}/metrics");
    match ureq::get(&url).call() {
        Err(ureq::Error::StatusCode(401)) => {}
        other => panic!("without credentials: {other:?}"),
    }
    let basic = |user: &str, pw: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"))
        )
    };
    match ureq::get(&url)
        .header("Authorization", &basic("weir", "wrong"))
        .call()
    {
        Err(ureq::Error::StatusCode(401)) => {}
        other => panic!("wrong password: {other:?}"),
    }
    let mut ok = ureq::get(&url)
        .header("Authorization", &basic("weir", "h-pw"))
        .call()
        .expect("with the superuser's password");
    assert!(
        ok.body_mut()
            .read_to_string()
            .expect("body")
            .contains("# EOF")
    );
    // the console's API shows a role only what it may read
    let sql = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={} user=weir dbname=weir",
            server.port()
        ))
        .args([
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "CREATE TABLE t (a INT)",
            "-c",
            "CREATE MATERIALIZED VIEW v AS SELECT count(*) AS n FROM t",
            "-c",
            "CREATE ROLE viewer LOGIN PASSWORD 'v-pw'",
        ])
        .env("PGPASSWORD", "h-pw")
        .output()
        .expect("psql");
    assert!(
        sql.status.success(),
        "{}",
        String::from_utf8_lossy(&sql.stderr)
    );
    let views = |user: &str, pw: &str| -> Vec<String> {
        let mut r = ureq::get(&format!("http://127.0.0.1:{port}/api/v1/relations"))
            .header("Authorization", &basic(user, pw))
            .call()
            .expect("api");
        let v: Value =
            serde_json::from_str(&r.body_mut().read_to_string().expect("body")).expect("json");
        v["views"]
            .as_array()
            .expect("views")
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(views("weir", "h-pw"), vec!["v".to_owned()]);
    assert!(views("viewer", "v-pw").is_empty());
    match ureq::get(&format!("http://127.0.0.1:{port}/api/v1/views/v"))
        .header("Authorization", &basic("viewer", "v-pw"))
        .call()
    {
        Err(ureq::Error::StatusCode(404)) => {}
        other => panic!("a view the role may not read: {other:?}"),
    }
}

/// The console in a real headless browser (Debian's chromium; `make test` installs it):
/// two views, the page polls the JSON API and shows them with their rates; opening a view
/// (the page's `#view=` link, what a click sets) draws its dataflow as SVG with the
/// operators' names. The page needs no network beyond the server. A screenshot is saved
/// under the test's temp dir and its path printed (`WEIR_KEEP_SCREENSHOT=1` keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_headless_chromium() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE SOURCE bids WITH (connector = 'nexmark', nexmark.table.type = 'bid', \
           nexmark.rows.per.second = '1000'); \
         CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n FROM bids WHERE price > 10 GROUP BY auction; \
         CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2); \
         CREATE MATERIALIZED VIEW sums AS SELECT sum(a) AS s FROM t",
    )
    .await
    .expect("setup");
    // the server reads its counters every second: let it take two readings
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let http = server.http_addr.clone().expect("the HTTP port listens");
    let dir = tempfile::Builder::new()
        .prefix("weir-console-")
        .tempdir()
        .expect("temp dir");
    let chromium = |extra: &[&str], profile: &str| {
        let out = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--virtual-time-budget=5000",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.path().join(profile).display()
            ))
            .args(extra)
            .arg(format!("http://{http}/#view=per_auction"))
            .output()
            .expect("chromium must be installed (make test installs it)");
        assert!(
            out.status.success(),
            "chromium: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dom = chromium(&["--dump-dom"], "p1");
    // both views listed, per_auction with a non-zero rate of changes
    let row = |view: &str| {
        let start = dom
            .find(&format!("data-view=\"{view}\""))
            .unwrap_or_else(|| panic!("{view} not in the page:\n{dom}"));
        let end = dom[start..]
            .find("</tr>")
            .map(|e| start + e)
            .unwrap_or(dom.len());
        dom[start..end].to_owned()
    };
    let cells = |r: &str| -> Vec<String> {
        r.split("<td")
            .skip(1)
            .map(|c| {
                let c = &c[c.find('>').map(|i| i + 1).unwrap_or(0)..];
                c[..c.find('<').unwrap_or(c.len())].to_owned()
            })
            .collect()
    };
    let per_auction = cells(&row("per_auction"));
    assert_eq!(per_auction[0], "per_auction", "{per_auction:?}");
    let rate: f64 = per_auction[2].parse().unwrap_or(0.0);
    assert!(rate > 0.0, "changes/s of per_auction: {per_auction:?}");
    let sums = cells(&row("sums"));
    assert_eq!(&sums[..2], &["sums".to_owned(), "1".to_owned()]);
    // the selected view's dataflow, drawn, with its operators as EXPLAIN names them
    assert!(dom.contains("Dataflow of per_auction"), "{dom}");
    let svg = &dom[dom.find("<svg").expect("an SVG graph")..];
    for name in [
        "Source: bids",
        "Filter: bids.price &gt; Int64(10)",
        "Aggregate: group by [bids.auction]",
        "rows/s",
    ] {
        assert!(svg.contains(name), "{name} not in the graph:\n{svg}");
    }
    assert!(
        dom.contains("late rows 0 · dead letters 0 · reads bids"),
        "{dom}"
    );
    let shot = dir.path().join("console.png");
    chromium(
        &[
            "--window-size=1300,1800",
            &format!("--screenshot={}", shot.display()),
        ],
        "p2",
    );
    let png = std::fs::read(&shot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000);
    println!("console screenshot: {}", shot.display());
    // the temp dir goes with the test unless asked to keep it (to look at the picture)
    if std::env::var_os("WEIR_KEEP_SCREENSHOT").is_some() {
        let kept = dir.keep();
        println!("kept {}", kept.display());
    }
}

/// Whether `sql` answers the one row `want` within about three seconds (asked every 30 ms).
async fn answers_soon(client: &tokio_postgres::Client, sql: &str, want: &[&str]) -> bool {
    let want = vec![want.iter().map(|w| w.to_string()).collect::<Vec<_>>()];
    for _ in 0..100 {
        if query_text(client, sql).await == want {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    false
}

/// `pg_stat_activity` lists every connection: its user, application_name, address, the
/// statement it runs (state `active`) or ran last (`idle`, `idle in transaction`), and when.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stat_activity_shows_what_connections_run() {
    let server = TestServer::start();
    let (sleeper, connection) = tokio_postgres::connect(
        &format!("{} application_name=sleeper", server.conn_string()),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(connection);
    let watcher = server.connect().await;
    let sleeper_pid: i32 = sleeper
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let sleeping = tokio::spawn(async move {
        sleeper
            .batch_execute("SELECT pg_sleep(1.5)")
            .await
            .expect("sleep");
        sleeper
    });
    let query = format!(
        "SELECT usename, application_name, client_addr, state, query, query_start >= backend_start, \
         xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = {sleeper_pid}"
    );
    let want = [
        "weir",
        "sleeper",
        "127.0.0.1",
        "active",
        "SELECT pg_sleep(1.5)",
        "t",
        "t",
    ];
    assert!(
        answers_soon(&watcher, &query, &want).await,
        "{:?}",
        query_text(&watcher, &query).await
    );
    let sleeper = sleeping.await.expect("joined");
    let state = format!(
        "SELECT state, query, xact_start IS NULL FROM pg_stat_activity WHERE pid = {sleeper_pid}"
    );
    assert_eq!(
        query_text(&watcher, &state).await,
        vec![vec![
            "idle".to_string(),
            "SELECT pg_sleep(1.5)".into(),
            "t".into()
        ]]
    );
    sleeper
        .batch_execute("BEGIN; SELECT 1")
        .await
        .expect("begin");
    assert_eq!(
        query_text(&watcher, &state).await,
        vec![vec![
            "idle in transaction".to_string(),
            "BEGIN; SELECT 1".into(),
            "f".into()
        ]]
    );
    // the watcher sees itself running the query it runs
    assert_eq!(
        query_text(
            &watcher,
            "SELECT state, query FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        .await,
        vec![vec![
            "active".to_string(),
            "SELECT state, query FROM pg_stat_activity WHERE pid = pg_backend_pid()".into()
        ]]
    );
    drop(sleeper);
    assert!(
        answers_soon(
            &watcher,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {sleeper_pid}"),
            &["0"]
        )
        .await,
        "a closed connection stays in pg_stat_activity"
    );
}

/// `pg_cancel_backend` stops another connection's statement (57014) and leaves it open;
/// `pg_terminate_backend` closes it (57P01); a role that is not a superuser may signal only
/// its own role's connections; an unknown pid is `false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_cancel_and_terminate_backend() {
    let server = TestServer::start();
    let admin = server.connect().await;
    let victim = server.connect().await;
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let (victim, e) = {
        let sleeping = tokio::spawn(async move {
            let r = victim.batch_execute("SELECT pg_sleep(30)").await;
            (victim, r)
        });
        let running = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND state = 'active' AND query = 'SELECT pg_sleep(30)'"
        );
        assert!(
            answers_soon(&admin, &running, &["1"]).await,
            "the sleep never ran"
        );
        assert_eq!(
            query_text(&admin, &format!("SELECT pg_cancel_backend({pid})")).await,
            vec![vec!["t".to_string()]]
        );
        let (victim, r) = sleeping.await.expect("joined");
        (victim, r.expect_err("the sleep is canceled"))
    };
    assert_eq!(crate::harness::sqlstate(&e), "57014", "{e:?}");
    // still open
    assert_eq!(
        query_text(&victim, "SELECT 1").await,
        vec![vec!["1".to_string()]]
    );
    // signalling what is not a connection of this server
    assert_eq!(
        query_text(
            &admin,
            "SELECT pg_cancel_backend(-7), pg_terminate_backend(-7)"
        )
        .await,
        vec![vec!["f".to_string(), "f".into()]]
    );
    // a role without superuser may not signal the superuser's connection
    admin
        .batch_execute("CREATE ROLE plain LOGIN PASSWORD 'pw'")
        .await
        .expect("role");
    let (plain, connection) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=plain password=pw dbname=weir",
            server.port()
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect as plain");
    tokio::spawn(connection);
    let refused = plain
        .batch_execute(&format!("SELECT pg_terminate_backend({pid})"))
        .await
        .expect_err("refused");
    assert_eq!(crate::harness::sqlstate(&refused), "42501", "{refused:?}");
    // terminated: the idle connection is closed by the server
    assert_eq!(
        query_text(&admin, &format!("SELECT pg_terminate_backend({pid})")).await,
        vec![vec!["t".to_string()]]
    );
    for _ in 0..100 {
        if victim.is_closed() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    assert!(victim.is_closed(), "the terminated connection is closed");
    assert!(victim.batch_execute("SELECT 1").await.is_err());
    assert!(
        answers_soon(
            &admin,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
            &["0"]
        )
        .await,
        "the terminated connection stays in pg_stat_activity"
    );
    // another plain role's query: refused to `plain` until it is granted pg_signal_backend
    admin
        .batch_execute("CREATE ROLE sleeper LOGIN PASSWORD 'pw'")
        .await
        .expect("role");
    let (sleeper, connection) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=sleeper password=pw dbname=weir",
            server.port()
        ),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect as sleeper");
    tokio::spawn(connection);
    let sleeper_pid: i32 = sleeper
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let sleeping = tokio::spawn(async move { sleeper.batch_execute("SELECT pg_sleep(30)").await });
    let running = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = {sleeper_pid} AND state = 'active'"
    );
    assert!(
        answers_soon(&admin, &running, &["1"]).await,
        "the sleep never ran"
    );
    let refused = plain
        .batch_execute(&format!("SELECT pg_cancel_backend({sleeper_pid})"))
        .await
        .expect_err("refused");
    assert_eq!(crate::harness::sqlstate(&refused), "42501", "{refused:?}");
    admin
        .batch_execute("GRANT pg_signal_backend TO plain")
        .await
        .expect("grant");
    assert_eq!(
        query_text(&plain, &format!("SELECT pg_cancel_backend({sleeper_pid})")).await,
        vec![vec!["t".to_string()]]
    );
    let e = sleeping.await.expect("join").expect_err("canceled");
    assert_eq!(crate::harness::sqlstate(&e), "57014", "{e:?}");
    // never a superuser's, though
    let refused = plain
        .batch_execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE usename = 'weir'")
        .await
        .expect_err("refused");
    assert_eq!(crate::harness::sqlstate(&refused), "42501", "{refused:?}");
}

/// This database's row of `pg_stat_database`: backends, commits, rollbacks, rows returned,
/// inserted, updated, deleted.
async fn database_stats(c: &tokio_postgres::Client) -> Vec<i64> {
    let r = query_text(
        c,
        "SELECT numbackends, xact_commit, xact_rollback, tup_returned, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database WHERE datname = current_database()",
    )
    .await;
    r[0].iter()
        .map(|v| v.parse::<i64>().expect("a count"))
        .collect()
}

/// `pg_stat_database` counts what happened since the server started: connections,
/// transactions committed and rolled back (a statement outside a block is one), rows
/// written and returned — what pgAdmin's dashboard and Grafana's panels read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_stat_database_counts_transactions_and_rows() {
    let server = TestServer::start();
    let c = server.connect().await;
    let before = database_stats(&c).await;
    assert!(before[0] >= 1, "this connection is a backend: {before:?}");
    query_text(&c, "CREATE TABLE counted (a int)").await;
    query_text(&c, "INSERT INTO counted VALUES (1), (2), (3)").await;
    query_text(&c, "UPDATE counted SET a = a + 10 WHERE a > 1").await;
    query_text(&c, "DELETE FROM counted WHERE a = 1").await;
    assert_eq!(
        query_text(&c, "SELECT * FROM counted ORDER BY a")
            .await
            .len(),
        2
    );
    assert!(c.simple_query("SELECT 1 / 0").await.is_err());
    for sql in ["BEGIN", "INSERT INTO counted VALUES (7)", "ROLLBACK"] {
        query_text(&c, sql).await;
    }
    let after = database_stats(&c).await;
    let delta: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // statements: the first stats read, CREATE, INSERT, UPDATE, DELETE, SELECT commit; the
    // division and the block roll back (the second stats read counts after it answers)
    assert_eq!(delta[1], 6, "commits: {delta:?}");
    assert_eq!(delta[2], 2, "rollbacks: {delta:?}");
    // rows returned: the first stats row and the two rows selected
    assert_eq!(delta[3], 3, "returned: {delta:?}");
    assert_eq!(
        &delta[4..],
        &[4, 2, 1],
        "inserted, updated, deleted: {delta:?}"
    );
}
