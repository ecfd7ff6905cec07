//! No statement, message or client may take the server down, and the limits say what
//! happens instead (docs/GUARANTEES.md, "Limits"): deep statements, malformed and random
//! protocol messages, too many connections, running out of file descriptors, a full disk,
//! statement and idle timeouts, per-statement memory, huge statements and values.
//! Every test ends by checking a fresh connection still gets answers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::{Options, TestServer, describe_error, query_text, sqlstate};

async fn alive(server: &TestServer) {
    let c = server.connect().await;
    assert_eq!(
        query_text(&c, "SELECT 40 + 2").await,
        vec![vec!["42"]],
        "server log: {}",
        server.log_tail()
    );
}

async fn error_code(c: &tokio_postgres::Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(_) => panic!("{} should fail", &sql[..sql.len().min(80)]),
        Err(e) => sqlstate(&e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_and_long_statements_answer_or_refuse_cleanly() {
    let server = TestServer::start();
    let c = server.connect().await;
    query_text(&c, "CREATE TABLE t (id INT PRIMARY KEY, v INT)").await;
    query_text(&c, "INSERT INTO t VALUES (1, 10), (2, 20), (999, 30)").await;
    // what ORMs generate: 1,000-term OR and IN lists, 1,000-branch UNION ALL
    let or = (0..1000)
        .map(|i| format!("id = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    assert_eq!(
        query_text(&c, &format!("SELECT count(*) FROM t WHERE {or}")).await,
        vec![vec!["3"]]
    );
    let list = (0..1000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        query_text(&c, &format!("SELECT count(*) FROM t WHERE id IN ({list})")).await,
        vec![vec!["3"]]
    );
    let and = (0..700)
        .map(|i| format!("v <> {}", i + 1000))
        .collect::<Vec<_>>()
        .join(" AND ");
    assert_eq!(
        query_text(&c, &format!("SELECT count(*) FROM t WHERE {and}")).await,
        vec![vec!["3"]]
    );
    let union = (0..1000)
        .map(|i| format!("SELECT {i} AS x"))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    assert_eq!(
        query_text(&c, &format!("SELECT count(*), sum(x) FROM ({union}) u")).await,
        vec![vec!["1000", "499500"]]
    );
    let sum = vec!["1"; 900].join("+");
    assert_eq!(
        query_text(&c, &format!("SELECT {sum}")).await,
        vec![vec!["900"]]
    );
    // a materialized view with a 700-term expression
    let expr = vec!["v"; 700].join(" + ");
    query_text(
        &c,
        &format!("CREATE MATERIALIZED VIEW deep AS SELECT id, {expr} AS s FROM t"),
    )
    .await;
    query_text(&c, "FLUSH").await;
    assert_eq!(
        query_text(&c, "SELECT s FROM deep WHERE id = 1").await,
        vec![vec!["7000"]]
    );
    // deeper, still under the limit: the view's worker evaluates it without running out of
    // stack
    let expr = vec!["v"; 3000].join(" + ");
    query_text(
        &c,
        &format!("CREATE MATERIALIZED VIEW deeper AS SELECT id, {expr} AS s FROM t"),
    )
    .await;
    query_text(&c, "INSERT INTO t VALUES (3, 1)").await;
    query_text(&c, "FLUSH").await;
    assert_eq!(
        query_text(&c, "SELECT s FROM deeper WHERE id = 3").await,
        vec![vec!["3000"]]
    );
    // absurd depths: 54001, never an abort
    for sql in [
        format!("SELECT {}", vec!["1"; 20_000].join("+")),
        format!("SELECT 1 WHERE {}", vec!["true"; 20_000].join(" OR ")),
        (0..12_000)
            .map(|i| format!("SELECT {i}"))
            .collect::<Vec<_>>()
            .join(" UNION ALL "),
        format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000)),
        format!(
            "CREATE MATERIALIZED VIEW too_deep AS SELECT {} FROM t",
            vec!["v"; 20_000].join(" * ")
        ),
    ] {
        assert_eq!(error_code(&c, &sql).await, "54001", "{}", &sql[..60]);
    }
    alive(&server).await;
}

/// Send raw bytes after a startup; return what came back until the server closed the
/// connection or sent ReadyForQuery.
fn raw_exchange(addr: &str, payload: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut body = 196608i32.to_be_bytes().to_vec();
    for kv in ["user", "weir", "database", "weir"] {
        body.extend_from_slice(kv.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend(body);
    s.write_all(&m).unwrap();
    read_messages(&mut s, true);
    let _ = s.write_all(payload);
    read_messages(&mut s, true)
}

fn read_messages(s: &mut TcpStream, until_ready: bool) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 5];
        if s.read_exact(&mut head).is_err() {
            return out;
        }
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]).max(4) as usize - 4;
        let mut body = vec![0u8; len];
        if s.read_exact(&mut body).is_err() {
            return out;
        }
        let kind = head[0];
        out.push((kind, body));
        if until_ready && kind == b'Z' {
            return out;
        }
    }
}

fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn error_fields(msgs: &[(u8, Vec<u8>)]) -> Option<(String, String)> {
    let (_, body) = msgs.iter().find(|(k, _)| *k == b'E')?;
    let mut code = String::new();
    let mut severity = String::new();
    for f in body.split(|b| *b == 0) {
        if let Some((&t, rest)) = f.split_first() {
            let v = String::from_utf8_lossy(rest).to_string();
            match t {
                b'C' => code = v,
                b'S' => severity = v,
                _ => {}
            }
        }
    }
    Some((severity, code))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_get_08p01_and_no_panic() {
    let server = TestServer::start();
    // a Parse that ends before its parameter-type count
    let parse = msg(b'P', b"\0SELECT 1\0");
    let got = raw_exchange(&server.addr, &parse);
    assert_eq!(
        error_fields(&got),
        Some(("FATAL".into(), "08P01".into())),
        "{got:?}"
    );
    // a Bind whose parameter length runs past the message
    let mut ok_parse = b"s\0SELECT $1::int\0".to_vec();
    ok_parse.extend_from_slice(&0u16.to_be_bytes());
    let mut bind = b"\0s\0".to_vec();
    bind.extend_from_slice(&0u16.to_be_bytes());
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&1_000_000i32.to_be_bytes());
    bind.extend_from_slice(b"12");
    bind.extend_from_slice(&0u16.to_be_bytes());
    let mut payload = msg(b'P', &ok_parse);
    payload.extend(msg(b'B', &bind));
    payload.extend(msg(b'S', b""));
    let got = raw_exchange(&server.addr, &payload);
    assert_eq!(
        error_fields(&got),
        Some(("FATAL".into(), "08P01".into())),
        "{got:?}"
    );
    // a binary NUMERIC with ndigits = -1: an ERROR (22P03), and the connection goes on
    let mut parse = b"n\0SELECT $1::numeric + 1\0".to_vec();
    parse.extend_from_slice(&1u16.to_be_bytes());
    parse.extend_from_slice(&1700u32.to_be_bytes());
    let mut bind = b"\0n\0".to_vec();
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&1u16.to_be_bytes());
    let numeric = [0xffu8, 0xff, 0, 0, 0, 0, 0, 0];
    bind.extend_from_slice(&(numeric.len() as i32).to_be_bytes());
    bind.extend_from_slice(&numeric);
    bind.extend_from_slice(&0u16.to_be_bytes());
    let mut payload = msg(b'P', &parse);
    payload.extend(msg(b'B', &bind));
    payload.extend(msg(b'E', b"\0\0\0\0\0"));
    payload.extend(msg(b'S', b""));
    payload.extend(msg(b'Q', b"SELECT 7\0"));
    let got = raw_exchange(&server.addr, &payload);
    assert_eq!(
        error_fields(&got),
        Some(("ERROR".into(), "22P03".into())),
        "{got:?}"
    );
    // no panic was logged, and the server answers
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(!log.contains("panicked"), "{}", server.log_tail());
    alive(&server).await;
}

/// Valid message sequences, mutated at random (bytes flipped, lengths changed, messages
/// cut, garbage appended), each on its own connection: the server must survive them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_fuzz_never_takes_the_server_down() {
    let seed: u64 = std::env::var("WEIR_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("protocol fuzz seed {seed} (replay: WEIR_FUZZ_SEED={seed})");
    let server = TestServer::start();
    {
        let c = server.connect().await;
        query_text(&c, "CREATE TABLE f (a INT, b TEXT)").await;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let bases: Vec<Vec<u8>> = {
        let mut parse = b"s\0INSERT INTO f VALUES ($1, $2)\0".to_vec();
        parse.extend_from_slice(&2u16.to_be_bytes());
        parse.extend_from_slice(&23u32.to_be_bytes());
        parse.extend_from_slice(&25u32.to_be_bytes());
        let mut bind = b"\0s\0".to_vec();
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&2u16.to_be_bytes());
        bind.extend_from_slice(&4i32.to_be_bytes());
        bind.extend_from_slice(&5i32.to_be_bytes());
        bind.extend_from_slice(&3i32.to_be_bytes());
        bind.extend_from_slice(b"abc");
        bind.extend_from_slice(&0u16.to_be_bytes());
        let mut ext = msg(b'P', &parse);
        ext.extend(msg(b'B', &bind));
        ext.extend(msg(b'D', b"P\0"));
        ext.extend(msg(b'E', b"\0\0\0\0\0"));
        ext.extend(msg(b'S', b""));
        let simple = msg(b'Q', b"SELECT a, b FROM f WHERE a > 1; SELECT 1\0");
        let mut copy = msg(b'Q', b"COPY f FROM STDIN\0");
        copy.extend(msg(b'd', b"1\tx\n2\ty\n"));
        copy.extend(msg(b'c', b""));
        vec![ext, simple, copy]
    };
    for round in 0..150 {
        let mut p = bases[rng.random_range(0..bases.len())].clone();
        for _ in 0..rng.random_range(1..4) {
            match rng.random_range(0..5) {
                0 if !p.is_empty() => {
                    let i = rng.random_range(0..p.len());
                    p[i] = rng.random();
                }
                1 if p.len() > 5 => {
                    // a length field set to a random value
                    let i = rng.random_range(0..p.len() - 4);
                    let v: u32 = rng.random_range(0..2000);
                    p[i..i + 4].copy_from_slice(&v.to_be_bytes());
                }
                2 if !p.is_empty() => {
                    let at = rng.random_range(0..p.len());
                    p.truncate(at);
                }
                3 => {
                    let n = rng.random_range(1..64);
                    p.extend((0..n).map(|_| rng.random::<u8>()));
                }
                _ => {
                    let i = rng.random_range(0..=p.len());
                    let b: u8 = *b"PBDECSHQdcfXpF"
                        .get(rng.random_range(0..14))
                        .unwrap_or(&b'Q');
                    p.insert(i, b);
                }
            }
        }
        let addr = server.addr.clone();
        let handle = std::thread::spawn(move || {
            let mut s = match TcpStream::connect(&addr) {
                Ok(s) => s,
                Err(e) => return Err(format!("connect: {e}")),
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let mut body = 196608i32.to_be_bytes().to_vec();
            body.extend_from_slice(b"user\0weir\0database\0weir\0\0");
            let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
            m.extend(body);
            let _ = s.write_all(&m);
            read_messages(&mut s, true);
            let _ = s.write_all(&p);
            let _ = s.shutdown(std::net::Shutdown::Write);
            read_messages(&mut s, false);
            Ok(())
        });
        if let Ok(Err(e)) = handle.join() {
            panic!(
                "seed {seed} round {round}: {e}; server log: {}",
                server.log_tail()
            );
        }
    }
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(
        !log.contains("panicked"),
        "seed {seed}: {}",
        server.log_tail()
    );
    alive(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_connections_get_53300() {
    let server = TestServer::start_with(Options {
        args: &["--max-connections", "3"],
        ..Default::default()
    });
    let a = server.connect().await;
    let _b = server.connect().await;
    let _c = server.connect().await;
    let refused = tokio_postgres::connect(&server.conn_string(), tokio_postgres::NoTls).await;
    match refused {
        Ok(_) => panic!("a fourth connection must be refused"),
        Err(e) => {
            let db = e.as_db_error().expect("an ErrorResponse");
            assert_eq!(db.code().code(), "53300");
            assert_eq!(db.message(), "sorry, too many clients already");
        }
    }
    assert_eq!(
        query_text(&a, "SHOW max_connections").await,
        vec![vec!["3"]]
    );
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    alive(&server).await;
}

/// Past the file-descriptor limit accepting fails; the server backs off (no spinning, no
/// flood of log lines) and serves again once descriptors are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_backs_off() {
    let server = TestServer::start_with(Options {
        nofile: Some(128),
        ..Default::default()
    });
    let pid = server.pid().expect("pid");
    let cpu = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    };
    // hold more sockets than the server has descriptors
    let mut held = Vec::new();
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(&server.addr) {
            held.push(s);
        }
    }
    let log_before = std::fs::metadata(server.log_path())
        .map(|m| m.len())
        .unwrap_or(0);
    let cpu_before = cpu();
    std::thread::sleep(Duration::from_secs(3));
    let ticks = cpu() - cpu_before;
    let log_growth = std::fs::metadata(server.log_path())
        .map(|m| m.len())
        .unwrap_or(0)
        - log_before;
    // 3 s of spinning would be ~300 ticks; backing off is a few
    assert!(
        ticks < 100,
        "{ticks} CPU ticks in 3 s at the descriptor limit"
    );
    assert!(
        log_growth < 200_000,
        "{log_growth} bytes of log in 3 s at the descriptor limit"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((c, conn)) =
            tokio_postgres::connect(&server.conn_string(), tokio_postgres::NoTls).await
        {
            tokio::spawn(conn);
            assert_eq!(query_text(&c, "SELECT 1").await, vec![vec!["1"]]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no service after descriptors came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_and_idle_timeouts_are_honoured() {
    let server = TestServer::start();
    let c = server.connect().await;
    query_text(&c, "CREATE TABLE t (id INT PRIMARY KEY)").await;
    query_text(&c, "SET statement_timeout = '300ms'").await;
    assert_eq!(
        query_text(&c, "SHOW statement_timeout").await,
        vec![vec!["300ms"]]
    );
    let started = Instant::now();
    let e = c
        .simple_query(
            "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
        )
        .await
        .expect_err("must time out");
    assert_eq!(sqlstate(&e), "57014", "{}", describe_error(&e));
    assert!(
        describe_error(&e).contains("statement timeout"),
        "{}",
        describe_error(&e)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // also through the extended protocol
    let e = c
        .query(
            "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
            &[],
        )
        .await
        .expect_err("must time out");
    assert_eq!(sqlstate(&e), "57014");
    // the next statement starts its own clock
    assert_eq!(query_text(&c, "SELECT 1").await, vec![vec!["1"]]);
    // a COPY whose data does not finish in time applies nothing
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY t FROM STDIN")
        .await
        .expect("copy starts");
    futures::pin_mut!(sink);
    use futures::SinkExt;
    sink.send(bytes::Bytes::from_static(b"1\n2\n"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    sink.send(bytes::Bytes::from_static(b"3\n")).await.unwrap();
    let e = sink.finish().await.expect_err("COPY must time out");
    assert_eq!(sqlstate(&e), "57014", "{}", describe_error(&e));
    query_text(&c, "RESET statement_timeout").await;
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM t").await,
        vec![vec!["0"]]
    );
    // idle in a transaction block too long: the connection ends, the block rolls back
    let idle = server.connect().await;
    query_text(&idle, "SET idle_in_transaction_session_timeout = '300ms'").await;
    query_text(&idle, "BEGIN").await;
    query_text(&idle, "INSERT INTO t VALUES (7)").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let e = idle.simple_query("SELECT 1").await.expect_err("closed");
    assert!(
        e.as_db_error()
            .map(|d| d.code().code() == "25P03")
            .unwrap_or(true),
        "{}",
        describe_error(&e)
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM t").await,
        vec![vec!["0"]]
    );
    // outside a block idling is fine
    query_text(&c, "SET idle_in_transaction_session_timeout = '200ms'").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(query_text(&c, "SELECT 2").await, vec![vec!["2"]]);
    alive(&server).await;
}

fn peak_rss_mib(pid: u32) -> f64 {
    crate::harness::peak_mib(pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_statement_cannot_exhaust_memory() {
    let server = TestServer::start_with(Options {
        args: &["--query-memory-limit", "256MB"],
        ..Default::default()
    });
    let pid = server.pid().expect("pid");
    let c = server.connect().await;
    // values past 1 GB are refused before they are built
    assert_eq!(
        error_code(&c, "SELECT length(lpad('x', 2147483647))").await,
        "54000"
    );
    assert_eq!(
        error_code(&c, "SELECT length(repeat('abc', 500000000))").await,
        "54000"
    );
    assert_eq!(
        error_code(&c, "SELECT cardinality(array_repeat(1, 1000000000))").await,
        "54000"
    );
    // an operator that cannot spill, past work_mem: 53200
    let e = error_code(
        &c,
        "SELECT cardinality(array_agg(x)) FROM generate_series(1, 50000000) x",
    )
    .await;
    assert_eq!(e, "53200");
    // work_mem is the session's share, at most the server's limit
    assert_eq!(error_code(&c, "SET work_mem = '1TB'").await, "22023");
    query_text(&c, "SET work_mem = '64MB'").await;
    assert_eq!(query_text(&c, "SHOW work_mem").await, vec![vec!["64MB"]]);
    // every statement of a message streams: a 3M-row result before another statement
    let before = peak_rss_mib(pid);
    let msgs = c
        .simple_query("SELECT x FROM generate_series(1, 3000000) x; SELECT 1")
        .await
        .expect("both statements");
    let rows = msgs
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 3_000_001);
    drop(msgs);
    let grew = peak_rss_mib(pid) - before;
    assert!(
        grew < 400.0,
        "peak memory grew {grew:.0} MiB for a streamed result"
    );
    // a 200,000-row literal INSERT (7 MB of SQL) needs about its own size, not 100 times
    query_text(&c, "CREATE TABLE big (a INT, b TEXT, c DOUBLE PRECISION)").await;
    let sql = format!(
        "INSERT INTO big VALUES {}",
        (0..200_000)
            .map(|i| format!("({i}, 'row {i}', {i}.5)"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let before = peak_rss_mib(pid);
    assert_eq!(
        c.execute(sql.as_str(), &[]).await.expect("bulk insert"),
        200_000
    );
    let grew = peak_rss_mib(pid) - before;
    assert!(
        grew < 600.0,
        "peak memory grew {grew:.0} MiB for a 7 MB INSERT"
    );
    assert_eq!(
        query_text(&c, "SELECT count(*), sum(a), max(c) FROM big").await,
        vec![vec!["200000", "19999900000", "199999.5"]]
    );
    // a statement too large to parse within work_mem is refused, not attempted
    query_text(&c, "SET work_mem = '1MB'").await;
    let sql = format!(
        "SELECT 1 WHERE 1 IN ({})",
        (0..300_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(error_code(&c, &sql).await, "53200");
    alive(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_connect_and_file_properties() {
    let server = TestServer::start_with(Options {
        args: &["--allow-connect", "127.0.0.1:9092-9094,*.kafka.internal:*"],
        ..Default::default()
    });
    let c = server.connect().await;
    let source = |bootstrap: &str, extra: &str| {
        format!(
            "CREATE SOURCE s (a INT) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '{bootstrap}'{extra})"
        )
    };
    assert_eq!(error_code(&c, &source("10.1.2.3:9092", "")).await, "42501");
    assert_eq!(
        error_code(&c, &source("127.0.0.1:9092,evil.example:9092", "")).await,
        "42501"
    );
    assert_eq!(
        error_code(
            &c,
            &source(
                "127.0.0.1:9092",
                ", properties.sasl.oauthbearer.token.endpoint.url = 'http://169.254.169.254/token'"
            )
        )
        .await,
        "42501"
    );
    query_text(&c, &source("b1.kafka.internal:9093", "")).await;
    query_text(&c, "DROP SOURCE s").await;
    query_text(&c, &source("127.0.0.1:9094", "")).await;
    query_text(&c, "DROP SOURCE s").await;
    assert_eq!(
        error_code(
            &c,
            "CREATE SOURCE av (a INT) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '127.0.0.1:9092', schema.registry = 'http://10.0.0.1:8081') FORMAT PLAIN ENCODE AVRO"
        )
        .await
        .as_str(),
        "42501"
    );
    // files on the server only with --allow-connector-files
    assert_eq!(
        error_code(
            &c,
            &source(
                "127.0.0.1:9092",
                ", properties.ssl.ca.location = '/etc/ssl/certs/ca-certificates.crt'"
            )
        )
        .await,
        "42501"
    );
    drop(c);
    let files = TestServer::start_with(Options {
        args: &["--allow-connector-files"],
        ..Default::default()
    });
    let c = files.connect().await;
    // the policy lets it through; what is left is librdkafka's own verdict (this build has
    // no OpenSSL, so it may answer that the property is not supported: 22023)
    match c
        .simple_query(&source(
            "127.0.0.1:9092",
            ", properties.ssl.ca.location = '/etc/ssl/certs/ca-certificates.crt'",
        ))
        .await
    {
        Ok(_) => {}
        Err(e) => assert_ne!(sqlstate(&e), "42501", "{}", describe_error(&e)),
    }
    // code and commands stay refused with the flag
    assert_eq!(
        error_code(
            &c,
            &source(
                "127.0.0.1:9092",
                ", properties.plugin.library.paths = '/tmp/x.so'"
            )
        )
        .await,
        "42501"
    );
    alive(&files).await;
}

/// A full disk: writes fail with 53100, nothing acknowledged is lost, and once space is
/// back writes succeed without a restart. The data directory is on a small tmpfs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_is_53100_and_recovers_without_restart() {
    let mnt = tempfile::Builder::new()
        .prefix("weir-full-")
        .tempdir()
        .expect("temp dir");
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48m", "tmpfs"])
        .arg(mnt.path())
        .status()
        .expect("run mount");
    assert!(
        status.success(),
        "this test mounts a small tmpfs (it needs root, as CI runs)"
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(mnt.path().to_owned());
    let ballast = mnt.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 24 << 20]).expect("ballast");
    let mut server = TestServer::start_with(Options {
        data_dir: Some(mnt.path().join("data")),
        ..Default::default()
    });
    let c = server.connect().await;
    query_text(&c, "CREATE TABLE f (id INT PRIMARY KEY, pad TEXT)").await;
    let mut acknowledged = 0;
    let mut full = None;
    for i in 1..200 {
        let sql = format!(
            "INSERT INTO f SELECT {i}, string_agg(md5(g::text || '{i}'), '') FROM generate_series(1, 20000) g"
        );
        match c.simple_query(&sql).await {
            Ok(_) => acknowledged = i,
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    let e = full.expect("the disk must fill up");
    assert_eq!(sqlstate(&e), "53100", "{}", describe_error(&e));
    assert!(acknowledged > 0);
    std::fs::remove_file(&ballast).expect("free space");
    query_text(&c, "INSERT INTO f VALUES (1000, 'after')").await;
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM f").await,
        vec![vec![(acknowledged + 1).to_string()]]
    );
    drop(c);
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        query_text(&c, "SELECT count(*), max(id) FROM f").await,
        vec![vec![(acknowledged + 1).to_string(), "1000".to_string()]]
    );
    drop(c);
    server.kill();
}

/// Foreign keys under concurrent writers: one session keeps inserting rows that reference a
/// key while another deletes that key. Either may fail (23503), but no referencing row may
/// outlive its key: each side checks again after it writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_keys_hold_under_concurrent_writers() {
    let server = TestServer::start();
    let setup = server.connect().await;
    setup
        .batch_execute(
            "CREATE TABLE fkc_p (id int PRIMARY KEY);
             CREATE TABLE fkc_c (id int PRIMARY KEY, pid int REFERENCES fkc_p)",
        )
        .await
        .expect("setup");
    let inserter = server.connect().await;
    let deleter = server.connect().await;
    let (mut deleted, mut refused) = (0, 0);
    for k in 0..60 {
        setup
            .execute(&format!("INSERT INTO fkc_p VALUES ({k})"), &[])
            .await
            .expect("parent");
        let inserts = async {
            let mut failed = 0;
            for j in 0..6 {
                if let Err(e) = inserter
                    .execute(
                        &format!("INSERT INTO fkc_c VALUES ({}, {k})", k * 10 + j),
                        &[],
                    )
                    .await
                {
                    let code = e.as_db_error().map(|d| d.code().code().to_owned());
                    assert_eq!(code.as_deref(), Some("23503"), "insert: {e}");
                    failed += 1;
                }
            }
            failed
        };
        let delete = async {
            match deleter
                .execute(&format!("DELETE FROM fkc_p WHERE id = {k}"), &[])
                .await
            {
                Ok(n) => n,
                Err(e) => {
                    let code = e.as_db_error().map(|d| d.code().code().to_owned());
                    assert_eq!(code.as_deref(), Some("23503"), "delete: {e}");
                    0
                }
            }
        };
        let (failed, n) = tokio::join!(inserts, delete);
        refused += failed;
        deleted += n;
    }
    let orphans: i64 = setup
        .query_one(
            "SELECT count(*) FROM fkc_c WHERE pid NOT IN (SELECT id FROM fkc_p)",
            &[],
        )
        .await
        .expect("orphans")
        .get(0);
    println!("60 rounds: {deleted} parents deleted, {refused} inserts refused");
    assert_eq!(orphans, 0, "rows reference deleted keys");
}

/// LOCK TABLE: a writer of another session waits for the lock and goes on at COMMIT; two
/// sessions that would wait for each other's locks get 40P01 in the one that closes the
/// cycle instead of hanging, and the other then gets its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_table_waits_and_a_deadlock_is_detected() {
    let server = TestServer::start();
    let a = server.connect().await;
    let b = server.connect().await;
    query_text(&a, "CREATE TABLE lk1 (id INT PRIMARY KEY)").await;
    query_text(&a, "CREATE TABLE lk2 (id INT PRIMARY KEY)").await;

    // B's INSERT waits until A commits
    a.batch_execute("BEGIN; LOCK TABLE lk1").await.unwrap();
    let started = Instant::now();
    let insert = tokio::spawn(async move {
        b.batch_execute("INSERT INTO lk1 VALUES (1)").await.unwrap();
        (b, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !insert.is_finished(),
        "the INSERT did not wait for the lock"
    );
    a.batch_execute("INSERT INTO lk1 VALUES (2); COMMIT")
        .await
        .unwrap();
    let (b, waited) = insert.await.unwrap();
    assert!(waited >= Duration::from_millis(500), "waited {waited:?}");
    assert_eq!(
        query_text(&a, "SELECT count(*) FROM lk1").await,
        vec![vec!["2".to_owned()]]
    );

    // A holds lk1 and waits for lk2; B holds lk2 and asks for lk1: B is the victim
    a.batch_execute("BEGIN; LOCK TABLE lk1").await.unwrap();
    b.batch_execute("BEGIN; LOCK TABLE lk2").await.unwrap();
    let a_waits = tokio::spawn(async move {
        let r = a.batch_execute("LOCK TABLE lk2").await;
        (a, r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!a_waits.is_finished(), "A did not wait for lk2");
    let e = b
        .batch_execute("INSERT INTO lk1 VALUES (3)")
        .await
        .expect_err("B closed a cycle of waits and was not refused");
    assert_eq!(sqlstate(&e), "40P01", "{}", describe_error(&e));
    b.batch_execute("ROLLBACK").await.unwrap();
    let (a, r) = tokio::time::timeout(Duration::from_secs(10), a_waits)
        .await
        .expect("A still waits after B rolled back")
        .unwrap();
    r.unwrap();
    a.batch_execute("INSERT INTO lk2 VALUES (1); COMMIT")
        .await
        .unwrap();
    assert_eq!(
        query_text(&b, "SELECT count(*) FROM lk2").await,
        vec![vec!["1".to_owned()]]
    );
}

/// Schema changes roll back with their transaction: a multi-statement query that fails
/// undoes its CREATE TABLE, a connection that goes away inside a block takes its CREATE
/// TABLE and ADD COLUMN back, and a ROLLBACK past a DROP TABLE (which it cannot undo)
/// says so in a WARNING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_roll_back_with_their_block() {
    let server = TestServer::start();
    let c = server.connect().await;
    query_text(&c, "CREATE TABLE kept (a int)").await;
    query_text(&c, "INSERT INTO kept VALUES (1)").await;
    // one simple-protocol message: an implicit transaction
    let e = c
        .simple_query("CREATE TABLE made (a int); INSERT INTO made VALUES ('x')")
        .await
        .expect_err("the insert fails");
    assert_eq!(sqlstate(&e), "22P02", "{}", describe_error(&e));
    assert_eq!(
        error_code(&c, "SELECT * FROM made").await,
        "42P01",
        "the failed query's CREATE TABLE must be undone"
    );
    // a connection that goes away inside a block
    let gone = server.connect().await;
    for sql in [
        "BEGIN",
        "CREATE TABLE made2 (a int)",
        "ALTER TABLE kept ADD COLUMN b int DEFAULT 5",
        "INSERT INTO kept VALUES (2, 3)",
    ] {
        query_text(&gone, sql).await;
    }
    drop(gone);
    let mut undone = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let tables = query_text(
            &c,
            "SELECT count(*) FROM pg_class WHERE relname IN ('made2', 'kept')",
        )
        .await;
        let columns = query_text(
            &c,
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'kept'",
        )
        .await;
        if tables == vec![vec!["1"]] && columns == vec![vec!["1"]] {
            undone = true;
            break;
        }
    }
    assert!(undone, "the closed connection's block must be rolled back");
    assert_eq!(query_text(&c, "SELECT * FROM kept").await, vec![vec!["1"]]);
    // DROP TABLE in a block waits for the block's end: a ROLLBACK brings the table back
    // with its rows and its serial column's sequence
    query_text(&c, "CREATE TABLE counted (id serial, a int)").await;
    query_text(&c, "INSERT INTO counted (a) VALUES (10), (20)").await;
    let out = crate::harness::psql_run(
        &server,
        &[
            "-c",
            "BEGIN",
            "-c",
            "DROP TABLE kept, counted",
            "-c",
            "ROLLBACK",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("WARNING"), "psql said: {stderr}");
    assert_eq!(query_text(&c, "SELECT * FROM kept").await, vec![vec!["1"]]);
    query_text(&c, "INSERT INTO counted (a) VALUES (30)").await;
    assert_eq!(
        query_text(&c, "SELECT id, a FROM counted ORDER BY id").await,
        vec![vec!["1", "10"], vec!["2", "20"], vec!["3", "30"]]
    );
    // a materialized view dropped in a block is gone at once: the ROLLBACK past it warns
    query_text(
        &c,
        "CREATE MATERIALIZED VIEW kept_n AS SELECT count(*) AS n FROM kept",
    )
    .await;
    let out = crate::harness::psql_run(
        &server,
        &[
            "-c",
            "BEGIN",
            "-c",
            "DROP MATERIALIZED VIEW kept_n",
            "-c",
            "ROLLBACK",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARNING:  ROLLBACK did not undo \"DROP MATERIALIZED VIEW kept_n\""),
        "psql said: {stderr}"
    );
    alive(&server).await;
}

/// A column dropped in a transaction block (the table's rows rewritten under a new OID)
/// is back with the table's rows after a ROLLBACK, and the materialized view over the
/// table is rebuilt over them; a crash (SIGKILL) inside the block keeps the completed
/// DROP COLUMN, as every completed statement of a block, and the table answers after the
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_in_a_block_is_undone_by_its_rollback() {
    let mut server = TestServer::start();
    let c = server.connect().await;
    query_text(
        &c,
        "CREATE TABLE rewritten (id int PRIMARY KEY, a text, b int)",
    )
    .await;
    query_text(
        &c,
        "INSERT INTO rewritten VALUES (1, 'x', 10), (2, 'y', 20)",
    )
    .await;
    query_text(
        &c,
        "CREATE MATERIALIZED VIEW rewritten_sum AS SELECT count(*) AS n, sum(b) AS s FROM rewritten",
    )
    .await;
    query_text(&c, "BEGIN").await;
    query_text(&c, "INSERT INTO rewritten VALUES (3, 'z', 30)").await;
    query_text(&c, "ALTER TABLE rewritten DROP COLUMN a").await;
    query_text(&c, "INSERT INTO rewritten VALUES (4, 40)").await;
    query_text(&c, "FLUSH").await;
    assert_eq!(
        query_text(&c, "SELECT n, s FROM rewritten_sum").await,
        vec![vec!["4", "100"]],
        "the view is rebuilt over the rewritten table inside the block"
    );
    query_text(&c, "ROLLBACK").await;
    assert_eq!(
        query_text(&c, "SELECT * FROM rewritten ORDER BY id").await,
        vec![vec!["1", "x", "10"], vec!["2", "y", "20"]],
        "the rollback brings the column and the rows back"
    );
    query_text(&c, "FLUSH").await;
    assert_eq!(
        query_text(&c, "SELECT n, s FROM rewritten_sum").await,
        vec![vec!["2", "30"]],
        "the view follows the restored table"
    );
    query_text(&c, "INSERT INTO rewritten VALUES (5, 'v', 50)").await;
    query_text(&c, "FLUSH").await;
    assert_eq!(
        query_text(&c, "SELECT n, s FROM rewritten_sum").await,
        vec![vec!["3", "80"]]
    );
    // killed inside a block that changed a column's type
    query_text(&c, "BEGIN").await;
    query_text(&c, "ALTER TABLE rewritten ALTER COLUMN a TYPE varchar(3)").await;
    server.kill();
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        query_text(
            &c,
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'rewritten' AND column_name = 'a'"
        )
        .await,
        vec![vec!["character varying"]],
        "a completed statement of a block stays after a crash"
    );
    assert_eq!(
        query_text(&c, "SELECT * FROM rewritten ORDER BY id").await,
        vec![
            vec!["1", "x", "10"],
            vec!["2", "y", "20"],
            vec!["5", "v", "50"]
        ]
    );
    query_text(&c, "FLUSH").await;
    assert_eq!(
        query_text(&c, "SELECT n, s FROM rewritten_sum").await,
        vec![vec!["3", "80"]]
    );
    alive(&server).await;
}

/// A table dropped in a transaction block is dropped when the block commits: a crash
/// (SIGKILL) before the COMMIT finds the table with its rows after the restart, one after
/// it finds none, and its name is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_in_a_block_is_dropped_at_its_commit() {
    let mut server = TestServer::start();
    let c = server.connect().await;
    query_text(&c, "CREATE TABLE dropped_late (id int PRIMARY KEY, v text)").await;
    query_text(&c, "INSERT INTO dropped_late VALUES (1, 'a'), (2, 'b')").await;
    query_text(&c, "BEGIN").await;
    query_text(&c, "DROP TABLE dropped_late").await;
    let other = server.connect().await;
    assert_eq!(
        error_code(&other, "SELECT * FROM dropped_late").await,
        "42P01",
        "a dropped table is not seen while its block runs"
    );
    server.kill();
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        query_text(&c, "SELECT * FROM dropped_late ORDER BY id").await,
        vec![vec!["1", "a"], vec!["2", "b"]],
        "the block never committed: the table stays"
    );
    query_text(&c, "BEGIN").await;
    query_text(&c, "DROP TABLE dropped_late").await;
    query_text(&c, "COMMIT").await;
    server.kill();
    server.restart();
    let c = server.connect().await;
    assert_eq!(error_code(&c, "SELECT * FROM dropped_late").await, "42P01");
    query_text(&c, "CREATE TABLE dropped_late (x int)").await;
    assert!(
        query_text(&c, "SELECT * FROM dropped_late")
            .await
            .is_empty()
    );
}
