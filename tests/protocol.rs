//! The wire protocol as drivers use it: the extended protocol with typed and inferred
//! parameters, binary results, named statements, portals with row limits, cancel requests,
//! SSL negotiation, and a raw Parse/Bind/Execute exchange the way node-postgres sends it.

use std::error::Error;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use tokio_postgres::NoTls;
use tokio_postgres::types::{FromSql, Type};

use crate::harness::{TestServer, describe_error, query_text, sqlstate};

/// NUMERIC in binary, decoded here independently of the server's encoder.
#[derive(Debug, PartialEq)]
struct Numeric(String);

impl<'a> FromSql<'a> for Numeric {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let rd = |o: usize| i16::from_be_bytes([raw[o], raw[o + 1]]) as i64;
        let (n, weight, sign, dscale) = (rd(0) as usize, rd(2), rd(4), rd(6) as usize);
        let digits: Vec<i64> = (0..n).map(|k| rd(8 + 2 * k)).collect();
        // value = sum(d_k * 10000^(weight-k)), scaled to dscale decimals
        let mut scaled: i128 = 0;
        for (k, d) in digits.iter().enumerate() {
            let exp = (weight - k as i64) * 4 + dscale as i64;
            let term = if exp >= 0 {
                *d as i128 * 10i128.pow(exp as u32)
            } else {
                *d as i128 / 10i128.pow((-exp) as u32)
            };
            scaled += term;
        }
        let s = scaled.to_string();
        let s = if dscale > 0 {
            let padded = format!("{:0>width$}", s, width = dscale + 1);
            let (i, f) = padded.split_at(padded.len() - dscale);
            format!("{i}.{f}")
        } else {
            s
        };
        Ok(Numeric(if sign == 0x4000 { format!("-{s}") } else { s }))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

/// Any value's raw binary bytes.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_binary_round_trip() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, s SMALLINT, i INT, f REAL, d DOUBLE PRECISION, \
         b BOOLEAN, name TEXT, code VARCHAR(4), n NUMERIC(12,3), dt DATE, ts TIMESTAMP, \
         tz TIMESTAMPTZ, raw BYTEA, j JSONB, iv INTERVAL)",
    )
    .await
    .unwrap();
    // parameter types come from the planner: the client sends none
    let insert = c
        .prepare("INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)")
        .await
        .unwrap();
    let types: Vec<&Type> = insert.params().iter().collect();
    assert_eq!(
        types,
        vec![
            &Type::INT8,
            &Type::INT2,
            &Type::INT4,
            &Type::FLOAT4,
            &Type::FLOAT8,
            &Type::BOOL,
            &Type::TEXT,
            &Type::VARCHAR,
            &Type::NUMERIC,
            &Type::DATE,
            &Type::TIMESTAMP,
            &Type::TIMESTAMPTZ,
            &Type::BYTEA,
            &Type::JSONB,
            &Type::INTERVAL,
        ]
    );
    let ts = NaiveDate::from_ymd_opt(2024, 1, 2)
        .unwrap()
        .and_hms_micro_opt(3, 4, 5, 678_901)
        .unwrap();
    let tz: DateTime<Utc> = DateTime::from_naive_utc_and_offset(ts, Utc);
    // NUMERIC, JSONB and INTERVAL parameters are bound as text by this client (see below);
    // the others go in binary
    c.execute(
        "INSERT INTO t (id, s, i, f, d, b, name, code, dt, ts, tz, raw) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[
            &1i64,
            &-7i16,
            &123456i32,
            &1.5f32,
            &-0.25f64,
            &true,
            &"héllo",
            &"abcd",
            &NaiveDate::from_ymd_opt(2024, 2, 29).unwrap(),
            &ts,
            &tz,
            &vec![0u8, 1, 255],
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    c.batch_execute(
        "UPDATE t SET n = 12345678.125, j = '{\"k\": [1, null]}', iv = '1 day 02:00:00' WHERE id = 1",
    )
    .await
    .unwrap();

    let row = c
        .query_one("SELECT * FROM t WHERE id = $1", &[&1i64])
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(row.get::<_, i16>(1), -7);
    assert_eq!(row.get::<_, i32>(2), 123456);
    assert_eq!(row.get::<_, f32>(3), 1.5);
    assert_eq!(row.get::<_, f64>(4), -0.25);
    assert!(row.get::<_, bool>(5));
    assert_eq!(row.get::<_, String>(6), "héllo");
    assert_eq!(row.get::<_, String>(7), "abcd");
    assert_eq!(row.get::<_, Numeric>(8), Numeric("12345678.125".into()));
    assert_eq!(
        row.get::<_, NaiveDate>(9),
        NaiveDate::from_ymd_opt(2024, 2, 29).unwrap()
    );
    assert_eq!(row.get::<_, NaiveDateTime>(10), ts);
    assert_eq!(row.get::<_, DateTime<Utc>>(11), tz);
    assert_eq!(row.get::<_, Vec<u8>>(12), vec![0u8, 1, 255]);
    // jsonb binary: version byte 1, then the text
    let j = row.get::<_, Raw>(13).0;
    assert_eq!(j[0], 1);
    assert_eq!(std::str::from_utf8(&j[1..]).unwrap(), "{\"k\": [1, null]}");
    // interval binary: microseconds, days, months
    let iv = row.get::<_, Raw>(14).0;
    assert_eq!(iv.len(), 16);
    assert_eq!(
        i64::from_be_bytes(iv[0..8].try_into().unwrap()),
        7_200_000_000
    );
    assert_eq!(i32::from_be_bytes(iv[8..12].try_into().unwrap()), 1);
    assert_eq!(i32::from_be_bytes(iv[12..16].try_into().unwrap()), 0);

    // negative and small numerics in binary
    let row = c
        .query_one(
            "SELECT CAST(-0.005 AS NUMERIC(6,3)), CAST(0 AS NUMERIC(4,1))",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Numeric>(0), Numeric("-0.005".into()));
    assert_eq!(row.get::<_, Numeric>(1), Numeric("0.0".into()));

    // result column names follow Postgres
    let row = c
        .query_one(
            "SELECT version(), count(*), 1 + 1, id FROM t GROUP BY id",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, vec!["version", "count", "?column?", "id"]);
    assert!(row.get::<_, String>(0).starts_with("PostgreSQL 16.6 "));

    // the same values in text, through the simple protocol
    let text = query_text(&c, "SELECT n, ts, tz, raw, iv FROM t").await;
    assert_eq!(
        text,
        vec![vec![
            "12345678.125",
            "2024-01-02 03:04:05.678901",
            "2024-01-02 03:04:05.678901+00",
            "\\x0001ff",
            "1 day 02:00:00"
        ]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statements_portals_and_errors() {
    let server = TestServer::start();
    let mut c = server.connect().await;
    c.batch_execute("CREATE TABLE n (x BIGINT PRIMARY KEY)")
        .await
        .unwrap();
    let ins = c.prepare("INSERT INTO n VALUES ($1)").await.unwrap();
    for x in 0..50i64 {
        assert_eq!(c.execute(&ins, &[&x]).await.unwrap(), 1);
    }
    // a duplicate key through the extended protocol, then the connection keeps working
    let err = c.execute(&ins, &[&3i64]).await.unwrap_err();
    assert_eq!(sqlstate(&err), "23505", "{}", describe_error(&err));
    let sel = c
        .prepare("SELECT x FROM n WHERE x >= $1 ORDER BY x")
        .await
        .unwrap();
    assert_eq!(c.query(&sel, &[&45i64]).await.unwrap().len(), 5);

    // portal with a row limit: Execute(max_rows) suspends and resumes
    let tx = c.transaction().await.unwrap();
    let portal = tx.bind(&sel, &[&0i64]).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let rows = tx.query_portal(&portal, 7).await.unwrap();
        if rows.is_empty() {
            break;
        }
        assert!(rows.len() <= 7);
        seen.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
    }
    assert_eq!(seen, (0..50).collect::<Vec<i64>>());
    tx.commit().await.unwrap();

    // errors at parse time and at execution time
    let err = c.prepare("SELEC 1").await.unwrap_err();
    assert_eq!(sqlstate(&err), "42601");
    let err = c.prepare("SELECT * FROM nosuch").await.unwrap_err();
    assert_eq!(sqlstate(&err), "42P01");
    // 1 is an integer, so $1 is one too, as in Postgres
    let err = c.query("SELECT 1 / $1", &[&0i32]).await.unwrap_err();
    assert_eq!(sqlstate(&err), "22012");
    let err = c.prepare("SELECT 1; SELECT 2").await.unwrap_err();
    assert_eq!(sqlstate(&err), "42601");
    let row = c.query_one("SELECT count(*) FROM n", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 50);

    // an error inside a transaction block aborts it until ROLLBACK, as in Postgres
    c.batch_execute("BEGIN").await.unwrap();
    let _ = c.batch_execute("SELECT * FROM nosuch").await.unwrap_err();
    let err = c.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&err), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("SELECT 1").await.unwrap();
}

/// The TimeZone a driver asks for at connect (`-c TimeZone=...` in `options`; pgJDBC sends
/// a `TimeZone` parameter): ParameterStatus and SHOW report it, timestamptz text is shown
/// and read there, a binary `timestamp` bound to a timestamptz column is a wall-clock time
/// there, and binary results stay the instant (UTC microseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_time_zone_reads_and_shows_timestamptz_there() {
    let server = TestServer::start();
    let conn = format!(
        "{} options='-c TimeZone=America/New_York'",
        server.conn_string()
    );
    let (c, connection) = tokio_postgres::connect(&conn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    assert_eq!(
        query_text(&c, "SHOW timezone").await,
        vec![vec!["America/New_York".to_string()]]
    );
    query_text(
        &c,
        "CREATE TABLE tz_wire (id int PRIMARY KEY, t timestamptz)",
    )
    .await;
    // text without a zone is New York's wall clock (EST in March before the change)
    query_text(&c, "INSERT INTO tz_wire VALUES (1, '2024-03-10 01:30:00')").await;
    // a binary timestamp parameter declared as timestamp, for a timestamptz column
    let insert = c
        .prepare_typed(
            "INSERT INTO tz_wire VALUES ($1, $2)",
            &[Type::INT4, Type::TIMESTAMP],
        )
        .await
        .unwrap_or_else(|e| panic!("prepare: {}", describe_error(&e)));
    let wall: NaiveDateTime = NaiveDate::from_ymd_opt(2024, 7, 1)
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .expect("a date");
    c.execute(&insert, &[&2i32, &wall])
        .await
        .unwrap_or_else(|e| panic!("insert: {}", describe_error(&e)));
    // shown in the session's zone (text)
    assert_eq!(
        query_text(&c, "SELECT id, t, t::date FROM tz_wire ORDER BY id").await,
        vec![
            vec![
                "1".to_string(),
                "2024-03-10 01:30:00-05".into(),
                "2024-03-10".into()
            ],
            vec![
                "2".to_string(),
                "2024-07-01 12:00:00-04".into(),
                "2024-07-01".into()
            ],
        ]
    );
    // binary: the instants
    let rows = c
        .query("SELECT t FROM tz_wire ORDER BY id", &[])
        .await
        .unwrap_or_else(|e| panic!("select: {}", describe_error(&e)));
    let got: Vec<DateTime<Utc>> = rows.iter().map(|r| r.get(0)).collect();
    let want: Vec<DateTime<Utc>> = ["2024-03-10T06:30:00Z", "2024-07-01T16:00:00Z"]
        .iter()
        .map(|s| s.parse().expect("an instant"))
        .collect();
    assert_eq!(got, want);
    // another session, in UTC, sees the same instants in UTC
    let other = server.connect().await;
    assert_eq!(
        query_text(&other, "SELECT t FROM tz_wire ORDER BY id").await,
        vec![
            vec!["2024-03-10 06:30:00+00".to_string()],
            vec!["2024-07-01 16:00:00+00".to_string()],
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let server = TestServer::start();
    let c = server.connect().await;
    let token = c.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await
    });
    let started = std::time::Instant::now();
    let err = c
        .simple_query(
            "SELECT count(*) FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 100000) b \
             WHERE a + b = 3",
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "57014", "{}", describe_error(&err));
    // run to its end the query takes hours; alone the cancel returns within seconds, but
    // under the whole suite's load (2 cores, views in 2 shards) it has taken over 30 s
    assert!(started.elapsed() < Duration::from_secs(120));
    canceller.await.unwrap().unwrap();
    // the connection survives a cancel
    assert_eq!(query_text(&c, "SELECT 42").await, vec![vec!["42"]]);
}

/// A bytea parameter in text format, as a driver that sends text sends it: the escape form
/// (`a\000b`, three bytes) and the hex form read as Postgres' byteain reads them, and a bad
/// one is 22P02 with the connection still usable.
#[test]
fn text_bytea_parameters_read_as_postgres() {
    let server = TestServer::start();
    let mut s = startup(&server.addr, false);
    let run = |s: &mut TcpStream, value: &str| -> Vec<(u8, Vec<u8>)> {
        // Parse (unnamed, one parameter declared bytea: OID 17), Bind (text), Execute, Sync
        let mut out = parse_msg("", "SELECT encode($1, 'hex')", &[17]);
        out.extend(bind_text_msg("", &[value]));
        out.extend(execute_msg());
        out.extend(msg(b'S', &[]));
        s.write_all(&out).unwrap();
        read_until_ready(s)
    };
    let value_of = |msgs: &[(u8, Vec<u8>)]| -> Option<String> {
        let (_, row) = msgs.iter().find(|(k, _)| *k == b'D')?;
        // one column: int16 count, int32 length, the text
        let len = i32::from_be_bytes(row[2..6].try_into().ok()?) as usize;
        Some(String::from_utf8_lossy(&row[6..6 + len]).into_owned())
    };
    let msgs = run(&mut s, "a\\000b");
    assert_eq!(value_of(&msgs).as_deref(), Some("610062"), "{msgs:?}");
    let msgs = run(&mut s, "\\x00ff");
    assert_eq!(value_of(&msgs).as_deref(), Some("00ff"), "{msgs:?}");
    let msgs = run(&mut s, "a\\9");
    let err = msgs.iter().find(|(k, _)| *k == b'E').expect("an error");
    assert!(
        String::from_utf8_lossy(&err.1).contains("C22P02"),
        "{:?}",
        String::from_utf8_lossy(&err.1)
    );
    let msgs = run(&mut s, "plain");
    assert_eq!(value_of(&msgs).as_deref(), Some("706c61696e"), "{msgs:?}");
}

/// A Parse message: statement `name`, its text, the parameter types declared (OIDs).
fn parse_msg(name: &str, sql: &str, oids: &[i32]) -> Vec<u8> {
    let mut body = cstr(name);
    body.extend(cstr(sql));
    body.extend((oids.len() as i16).to_be_bytes());
    for oid in oids {
        body.extend(oid.to_be_bytes());
    }
    msg(b'P', &body)
}

/// A Bind message of the unnamed portal to `statement`, every parameter in text, the
/// results in text.
fn bind_text_msg(statement: &str, values: &[&str]) -> Vec<u8> {
    let mut body = cstr("");
    body.extend(cstr(statement));
    body.extend(0i16.to_be_bytes());
    body.extend((values.len() as i16).to_be_bytes());
    for v in values {
        body.extend((v.len() as i32).to_be_bytes());
        body.extend(v.as_bytes());
    }
    body.extend(0i16.to_be_bytes());
    msg(b'B', &body)
}

/// Execute of the unnamed portal, all rows.
fn execute_msg() -> Vec<u8> {
    let mut body = cstr("");
    body.extend(0i32.to_be_bytes());
    msg(b'E', &body)
}

/// A frontend message: type byte, length, body.
fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// Read backend messages until ReadyForQuery; returns (type, body) pairs.
fn read_until_ready(s: &mut TcpStream) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).expect("message header");
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize - 4;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).expect("message body");
        let kind = head[0];
        out.push((kind, body));
        if kind == b'Z' {
            return out;
        }
    }
}

fn startup(addr: &str, ssl_first: bool) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    if ssl_first {
        // SSLRequest: length 8, code 80877103; the server must answer 'N'
        s.write_all(&8i32.to_be_bytes()).unwrap();
        s.write_all(&80877103i32.to_be_bytes()).unwrap();
        let mut answer = [0u8; 1];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(answer[0], b'N', "SSL must be declined");
    }
    let mut body = 196608i32.to_be_bytes().to_vec();
    for kv in ["user", "weir", "database", "weir"] {
        body.extend(cstr(kv));
    }
    body.push(0);
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend(body);
    s.write_all(&m).unwrap();
    let msgs = read_until_ready(&mut s);
    let params: Vec<String> = msgs
        .iter()
        .filter(|(k, _)| *k == b'S')
        .map(|(_, b)| String::from_utf8_lossy(b).replace('\0', "="))
        .collect();
    for expected in [
        "server_version=16.6=",
        "server_encoding=UTF8=",
        "client_encoding=UTF8=",
        "DateStyle=ISO, MDY=",
        "integer_datetimes=on=",
        "standard_conforming_strings=on=",
        "TimeZone=UTC=",
        "IntervalStyle=postgres=",
    ] {
        assert!(
            params.iter().any(|p| p == expected),
            "missing {expected} in {params:?}"
        );
    }
    s
}

#[test]
fn node_postgres_style_untyped_text_parameters() {
    let server = TestServer::start();
    let mut s = startup(&server.addr, true);
    s.write_all(&msg(
        b'Q',
        &cstr("CREATE TABLE p (id INT PRIMARY KEY, price NUMERIC(8,2), seen TIMESTAMP)"),
    ))
    .unwrap();
    let r = read_until_ready(&mut s);
    assert!(r.iter().all(|(k, _)| *k != b'E'), "create failed");

    // Parse with zero parameter types, Bind text values, Describe portal, Execute, Sync
    let mut wire = parse_msg("", "INSERT INTO p VALUES ($1, $2, $3)", &[]);
    wire.extend(bind_text_msg("", &["7", "19.99", "2024-05-06 07:08:09"]));
    let mut describe = vec![b'P'];
    describe.extend(cstr(""));
    wire.extend(msg(b'D', &describe));
    wire.extend(execute_msg());
    wire.extend(msg(b'S', &[]));
    s.write_all(&wire).unwrap();
    let r = read_until_ready(&mut s);
    let kinds: Vec<u8> = r.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, b"12nCZ".to_vec(), "{r:?}");
    assert_eq!(&r[3].1, b"INSERT 0 1\0");

    // statement Describe reports inferred parameter types (int4, numeric, timestamp)
    let mut wire = parse_msg("s1", "SELECT price FROM p WHERE id = $1 AND seen < $2", &[]);
    let mut describe = vec![b'S'];
    describe.extend(cstr("s1"));
    wire.extend(msg(b'D', &describe));
    wire.extend(msg(b'S', &[]));
    s.write_all(&wire).unwrap();
    let r = read_until_ready(&mut s);
    let (_, desc) = r
        .iter()
        .find(|(k, _)| *k == b't')
        .expect("ParameterDescription");
    let n = i16::from_be_bytes([desc[0], desc[1]]) as usize;
    let oids: Vec<u32> = (0..n)
        .map(|i| u32::from_be_bytes(desc[2 + 4 * i..6 + 4 * i].try_into().unwrap()))
        .collect();
    assert_eq!(oids, vec![23, 1114]);
    assert!(r.iter().any(|(k, _)| *k == b'T'), "RowDescription for s1");

    // execute the named statement with text parameters and read the text result
    let mut wire = bind_text_msg("s1", &["7", "2025-01-01 00:00:00"]);
    wire.extend(execute_msg());
    wire.extend(msg(b'S', &[]));
    s.write_all(&wire).unwrap();
    let r = read_until_ready(&mut s);
    let (_, row) = r.iter().find(|(k, _)| *k == b'D').expect("DataRow");
    let len = i32::from_be_bytes(row[2..6].try_into().unwrap()) as usize;
    assert_eq!(&row[6..6 + len], b"19.99");

    // an empty query through Parse/Bind/Execute answers EmptyQueryResponse
    let mut wire = parse_msg("", "", &[]);
    wire.extend(bind_text_msg("", &[]));
    wire.extend(execute_msg());
    wire.extend(msg(b'S', &[]));
    s.write_all(&wire).unwrap();
    let kinds: Vec<u8> = read_until_ready(&mut s).iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, b"12IZ".to_vec());

    // a bad text parameter is a clean error, and the session goes on
    let mut wire = bind_text_msg("s1", &["seven", "2025-01-01"]);
    wire.extend(execute_msg());
    wire.extend(msg(b'S', &[]));
    s.write_all(&wire).unwrap();
    let r = read_until_ready(&mut s);
    let (_, e) = r.iter().find(|(k, _)| *k == b'E').expect("ErrorResponse");
    assert!(
        String::from_utf8_lossy(e).contains("22P02"),
        "{}",
        String::from_utf8_lossy(e)
    );
    s.write_all(&msg(b'Q', &cstr("SELECT 1"))).unwrap();
    let r = read_until_ready(&mut s);
    assert!(r.iter().any(|(k, _)| *k == b'D'));
    s.write_all(&msg(b'X', &[])).unwrap();
}

/// Postgres' `infinity` / `-infinity` dates and timestamps in binary, both ways: a driver's
/// infinite parameters are stored as infinities (not wrapped), come back as its infinite
/// values, compare in a parameterized WHERE, and read as text from a literal; a binary
/// parameter the server's range cannot hold is 22008, not a wrapped value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_dates_and_timestamps_in_binary() {
    use tokio_postgres::types::{Date, Timestamp};
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE inf (id INT PRIMARY KEY, d DATE, ts TIMESTAMP, tz TIMESTAMPTZ)")
        .await
        .unwrap();
    c.execute(
        "INSERT INTO inf VALUES (1, $1, $2, $3)",
        &[
            &Date::<NaiveDate>::PosInfinity,
            &Timestamp::<NaiveDateTime>::NegInfinity,
            &Timestamp::<DateTime<Utc>>::PosInfinity,
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    c.batch_execute(
        "INSERT INTO inf VALUES (2, '-infinity', 'infinity', '2024-01-02 03:04:05+00')",
    )
    .await
    .unwrap();
    let rows = c
        .query("SELECT id, d, ts, tz FROM inf ORDER BY id", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, Date<NaiveDate>>(1), Date::PosInfinity);
    assert_eq!(
        rows[0].get::<_, Timestamp<NaiveDateTime>>(2),
        Timestamp::NegInfinity
    );
    assert_eq!(
        rows[0].get::<_, Timestamp<DateTime<Utc>>>(3),
        Timestamp::PosInfinity
    );
    assert_eq!(rows[1].get::<_, Date<NaiveDate>>(1), Date::NegInfinity);
    assert_eq!(
        rows[1].get::<_, Timestamp<NaiveDateTime>>(2),
        Timestamp::PosInfinity
    );
    let found = c
        .query(
            "SELECT id FROM inf WHERE ts = $1",
            &[&Timestamp::<NaiveDateTime>::PosInfinity],
        )
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].get::<_, i32>(0), 2);
    assert_eq!(
        query_text(&c, "SELECT d, ts, tz FROM inf ORDER BY id").await,
        vec![
            vec!["infinity", "-infinity", "infinity"],
            vec!["-infinity", "infinity", "2024-01-02 03:04:05+00"],
        ]
    );
    // a finite binary timestamp one microsecond below the top of i64: moving it from
    // Postgres' epoch (2000) to arrow's (1970) does not fit
    let err = c
        .execute(
            "INSERT INTO inf (id, ts) VALUES (3, $1)",
            &[&RawTimestamp(i64::MAX - 1)],
        )
        .await
        .expect_err("out of range");
    assert_eq!(sqlstate(&err), "22008", "{}", describe_error(&err));
    assert_eq!(
        query_text(&c, "SELECT count(*) FROM inf").await,
        vec![vec!["2"]]
    );
}

/// A timestamp parameter as the raw i64 Postgres sends (microseconds from 2000-01-01).
#[derive(Debug)]
struct RawTimestamp(i64);

impl tokio_postgres::types::ToSql for RawTimestamp {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(&self.0.to_be_bytes());
        Ok(tokio_postgres::types::IsNull::No)
    }
    tokio_postgres::types::accepts!(TIMESTAMP);
    tokio_postgres::types::to_sql_checked!();
}
