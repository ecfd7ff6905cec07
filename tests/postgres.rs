//! Weir against a real PostgreSQL 15 the test starts itself (`initdb` + `pg_ctl` on a temp
//! dir and a free port, as the `postgres` user when the tests run as root; stopped and
//! removed on drop):
//!
//! - `sql-tests/postgres_exact.slt` run against Postgres, which proves its expected outputs
//!   are Postgres' own (tests/slt.rs runs the same file against Weir);
//! - a differential test: a few hundred generated scalar expressions (arithmetic with
//!   overflow, casts, intervals, text functions, arrays, NULLs) through both, comparing the
//!   text results (or that both refuse); it prints its seed and the first difference.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::harness::TestServer;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Postgres {
    dir: PathBuf,
    port: u16,
    as_postgres_user: bool,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Postgres {
    pub fn start() -> Postgres {
        assert!(
            Path::new(PG_BIN).join("postgres").exists(),
            "PostgreSQL 15 is not installed at {PG_BIN} (make deps installs postgresql-15)"
        );
        let as_postgres_user = unsafe_is_root();
        let dir = tempfile::Builder::new()
            .prefix("weir-pg-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let port = free_port();
        let pg = Postgres {
            dir,
            port,
            as_postgres_user,
        };
        if as_postgres_user {
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&pg.dir)
                .status()
                .expect("chown")
                .success();
            assert!(ok, "chown the Postgres temp dir");
        }
        let data = pg.dir.join("data");
        pg.run(&format!(
            "{PG_BIN}/initdb -D {} -A trust -U postgres --no-sync -E UTF8 --locale=C.UTF-8 >{}/initdb.log 2>&1",
            data.display(),
            pg.dir.display()
        ));
        pg.run(&format!(
            "{PG_BIN}/pg_ctl -D {} -w -t 60 -l {}/log -o \"-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c TimeZone=UTC -c DateStyle='ISO, MDY' -c IntervalStyle=postgres -c extra_float_digits=1\" start >/dev/null",
            data.display(),
            pg.dir.display(),
            pg.dir.display()
        ));
        pg
    }

    fn run(&self, cmd: &str) {
        let status = if self.as_postgres_user {
            Command::new("su").args(["postgres", "-c", cmd]).status()
        } else {
            Command::new("sh").args(["-c", cmd]).status()
        }
        .expect("run a Postgres command");
        assert!(
            status.success(),
            "`{cmd}` failed; log: {}",
            std::fs::read_to_string(self.dir.join("log"))
                .or_else(|_| std::fs::read_to_string(self.dir.join("initdb.log")))
                .unwrap_or_default()
        );
    }

    pub fn conn_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    pub async fn connect(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match tokio_postgres::connect(&self.conn_string(), NoTls).await {
                Ok((client, conn)) => {
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    return client;
                }
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("connect to Postgres: {e}"),
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let cmd = format!(
            "{PG_BIN}/pg_ctl -D {}/data -m immediate stop >/dev/null 2>&1",
            self.dir.display()
        );
        let _ = if self.as_postgres_user {
            Command::new("su").args(["postgres", "-c", &cmd]).status()
        } else {
            Command::new("sh").args(["-c", &cmd]).status()
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Postgres refuses to run as root: then its commands run as the `postgres` user.
fn unsafe_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_exact_slt_is_what_postgres_answers() {
    let pg = Postgres::start();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-tests/postgres_exact.slt");
    let text = std::fs::read_to_string(&path).expect("read the slt file");
    crate::slt::run_script(
        pg.conn_string(),
        &text,
        "postgres_exact.slt on PostgreSQL 15",
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// One result as text: the rows' values joined, or the error's SQLSTATE class.
async fn answer(c: &Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(msgs) => {
            let mut out = Vec::new();
            for m in msgs {
                if let SimpleQueryMessage::Row(r) = m {
                    out.push(
                        (0..r.len())
                            .map(|i| r.get(i).unwrap_or("NULL").to_owned())
                            .collect::<Vec<_>>()
                            .join("|"),
                    );
                }
            }
            out.join("\n")
        }
        Err(e) => format!(
            "ERROR {}",
            e.as_db_error()
                .map(|d| d.code().code()[..2].to_owned())
                .unwrap_or_else(|| "connection".into())
        ),
    }
}

/// Whether two answers differ only in how many trailing fraction zeros numbers have.
fn same_numbers(a: &str, b: &str) -> bool {
    let fields = |s: &str| -> Vec<String> { s.split(['|', '\n']).map(str::to_owned).collect() };
    let (fa, fb) = (fields(a), fields(b));
    let norm = |x: &str| -> Option<String> {
        let (int, frac) = x.split_once('.')?;
        if !int
            .trim_start_matches('-')
            .bytes()
            .all(|c| c.is_ascii_digit())
            || !frac.bytes().all(|c| c.is_ascii_digit())
        {
            return None;
        }
        let frac = frac.trim_end_matches('0');
        Some(if frac.is_empty() {
            int.to_owned()
        } else {
            format!("{int}.{frac}")
        })
    };
    fa.len() == fb.len()
        && fa.iter().zip(&fb).all(|(x, y)| {
            x == y || matches!((norm(x).or(Some(x.clone())), norm(y).or(Some(y.clone()))), (Some(p), Some(q)) if p == q)
        })
}

/// Whether Weir's answer is Postgres' with more decimals: each number of `weir` that has
/// more fraction digits than Postgres' rounds (half away from zero) to exactly it. A
/// quotient is one scale per column in Weir, one per value in Postgres
/// (`sql/numeric.rs`): `100000 / 3.0` is `33333.333333333333` there and
/// `33333.33333333333333333333` here. With `fewer` (quotients), also the other way: a
/// quotient of unconstrained numerics has 16 decimals here, up to 20 there.
fn more_decimals(pg: &str, weir: &str, fewer: bool) -> bool {
    let fields = |s: &str| -> Vec<String> { s.split(['|', '\n']).map(str::to_owned).collect() };
    let (fp, fw) = (fields(pg), fields(weir));
    // (digits as an integer, fraction digits)
    let parse = |x: &str| -> Option<(i128, usize)> {
        let (int, frac) = x.split_once('.').unwrap_or((x, ""));
        let neg = int.starts_with('-');
        let digits = format!("{}{frac}", int.trim_start_matches('-'));
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let v: i128 = digits.parse().ok()?;
        Some((if neg { -v } else { v }, frac.len()))
    };
    fp.len() == fw.len()
        && fp.iter().zip(&fw).all(|(p, w)| {
            if p == w {
                return true;
            }
            let (Some((pv, ps)), Some((wv, ws))) = (parse(p), parse(w)) else {
                return false;
            };
            let round = |v: i128, by: usize| {
                let d = 10i128.pow(by as u32);
                let (q, r) = (v / d, v % d);
                if r.abs() * 2 >= d { q + v.signum() } else { q }
            };
            if ws > ps {
                round(wv, ws - ps) == pv
            } else {
                fewer && ws < ps && round(pv, ps - ws) == wv
            }
        })
}

/// The seed of a differential test: `WEIR_PG_DIFF_SEED`, else the clock's (odd, so the
/// generator never starts at 0).
fn diff_seed() -> u64 {
    std::env::var("WEIR_PG_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        })
}

/// A small deterministic generator (xorshift), so a seed reproduces a run.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
    fn int(&mut self) -> String {
        self.pick(&[
            "0",
            "1",
            "-1",
            "7",
            "-13",
            "42",
            "2147483647",
            "-2147483648",
            "9223372036854775807",
            "NULL::int",
            "3::smallint",
            "100000::bigint",
        ])
        .to_owned()
    }
    fn num(&mut self) -> String {
        self.pick(&[
            "1.5",
            "-0.25",
            "10.00",
            "3.14159",
            "1e3",
            "2.5e-2",
            "0.0",
            "NULL::numeric",
            "123.456",
            "1.5::numeric",
            "-7::numeric",
            "2.25::numeric",
        ])
        .to_owned()
    }
    fn float(&mut self) -> String {
        self.pick(&[
            "1.5::float8",
            "'NaN'::float8",
            "'-Infinity'::float8",
            "0.1::float8",
            "-2.5::float8",
            "1e300::float8",
            "3::real",
            "NULL::float8",
        ])
        .to_owned()
    }
    fn text(&mut self) -> String {
        self.pick(&[
            "'abc'",
            "'Hello World'",
            "''",
            "NULL::text",
            "'a,b,,c'",
            "'  pad  '",
            "'héllo'",
            "'123'",
        ])
        .to_owned()
    }
    fn interval(&mut self) -> String {
        self.pick(&[
            "interval '1 day'",
            "interval '24 hours'",
            "interval '1 mon'",
            "interval '30 days'",
            "interval '1 year 2 mons 3 days 04:05:06'",
            "interval '-1 day'",
            "interval '527:59:59'",
            "interval '90 minutes'",
            "NULL::interval",
        ])
        .to_owned()
    }
    fn array(&mut self) -> String {
        self.pick(&[
            "array[1,2,3]",
            "array[1,NULL,3]",
            "array[]::int[]",
            "array['a','b']",
            "array[NULL::int]",
            "'{4,5}'::int[]",
            "NULL::int[]",
        ])
        .to_owned()
    }
    fn timestamp(&mut self) -> String {
        self.pick(&[
            "timestamp '2024-01-01 10:00:00'",
            "timestamp '2024-02-29 23:59:59.5'",
            "'2024-03-10 02:30'::timestamp",
            "timestamp '1999-12-31 00:00'",
            "'infinity'::timestamp",
            "'-infinity'::timestamp",
            "NULL::timestamp",
            "timestamp '0044-03-15 10:00 BC'",
        ])
        .to_owned()
    }
    fn date(&mut self) -> String {
        self.pick(&[
            "date '2024-02-29'",
            "date '2000-01-01'",
            "'1970-01-01'::date",
            "'infinity'::date",
            "'-infinity'::date",
            "NULL::date",
            "'0001-12-31 BC'::date",
        ])
        .to_owned()
    }
    fn expr(&mut self) -> String {
        let (i, j) = (self.int(), self.int());
        let (n, m) = (self.num(), self.num());
        let (f, g) = (self.float(), self.float());
        let (s, t) = (self.text(), self.text());
        let (v, w) = (self.interval(), self.interval());
        let a = self.array();
        let cmp = self.pick(&["=", "<>", "<", "<=", ">", ">="]);
        let arith = self.pick(&["+", "-", "*"]);
        let (x, y) = (self.timestamp(), self.timestamp());
        let (d, e) = (self.date(), self.date());
        let ts_field = self.pick(&[
            "second",
            "minute",
            "hour",
            "day",
            "dow",
            "isodow",
            "doy",
            "week",
            "month",
            "quarter",
            "year",
            "decade",
            "century",
            "millennium",
            "isoyear",
            "epoch",
            "milliseconds",
            "microseconds",
            "julian",
        ]);
        let date_field = self.pick(&[
            "day", "dow", "doy", "week", "month", "quarter", "year", "century", "isoyear", "epoch",
            "julian",
        ]);
        let iv_field = self.pick(&[
            "second",
            "minute",
            "hour",
            "day",
            "month",
            "quarter",
            "year",
            "epoch",
            "milliseconds",
        ]);
        // extract of infinity: Infinity in Postgres for the growing fields, NULL here (a
        // known gap, Weir's numeric has no infinities)
        let growing = [
            "year",
            "decade",
            "century",
            "millennium",
            "isoyear",
            "epoch",
            "julian",
        ];
        let trunc_unit = self.pick(&[
            "week",
            "quarter",
            "year",
            "decade",
            "century",
            "millennium",
            "hour",
        ]);
        let finite = |t: &str| !t.contains("infinity");
        let ia = self.pick(&[
            "array[1,2,3]",
            "array[1,NULL,3]",
            "array[]::int[]",
            "array[NULL::int]",
            "'{4,5}'::int[]",
            "NULL::int[]",
        ]);
        match self.next() % 64 {
            53 => format!(
                "encode(({s})::bytea, 'base64'), encode(({s})::bytea || '\\x00ff5c'::bytea, 'escape'), decode(encode(({t})::bytea, 'hex'), 'hex')"
            ),
            54 => format!(
                "sin(({f})::real), cosh(({g})::real), round(({f})::real), asin(({f}) / 1e300::float8)"
            ),
            55 => format!(
                "{ia} @> array[1], array[1,NULL] <@ {ia}, {ia} && array[NULL::int, 3], array_ndims({ia})"
            ),
            56 => format!("{ia} {cmp} array[1, NULL], {ia} {cmp} '{{2}}'::int[]"),
            57 => format!("round({n}, 3), round({i}, 2), trunc({i}, 1), round({n}, 1)"),
            58 => format!("-{v}, {v} - {w}, {w} * -1"),
            59 => format!(
                "coalesce((SELECT x FROM (VALUES ({i})) t(x) WHERE x > 100), -1), (SELECT 1 WHERE {i} > 5) IS NULL"
            ),
            60 => {
                let p = self.pick(&["'x?'", "'l*'", "',?'", "'[a-c]'", "'(.)(.)?'", "'b|$'"]);
                format!(
                    "regexp_replace({s}, {p}, '<\\1>', 'g'), regexp_count({t}, {p}), regexp_instr({s}, {p}, 1, 2), regexp_substr({t}, {p}, 2), (SELECT count(*) FROM regexp_matches({s}, {p}, 'g')), (SELECT max(r) FROM regexp_split_to_table({t}, {p}) AS r)"
                )
            }
            62 => {
                let fmt = self.pick(&[
                    "'999.99'",
                    "'FM9999999999999999999.999'",
                    "'S0.99999999999999999'",
                    "'9.99EEEE'",
                    "'999,999,999,999,999.9'",
                    "'FM999PR'",
                ]);
                format!(
                    "to_char({f}, {fmt}), to_char({f} * 1234.56789, {fmt}), to_char(({i})::real / 7, {fmt})"
                )
            }
            63 => {
                // SQL/JSON path over documents whose numbers are integers (`sql::jsonpath`
                // reads numbers as doubles)
                let doc = self.pick(&[
                    "'{\"a\": [1, 2, 3], \"b\": {\"c\": \"x\"}}'",
                    "'[{\"k\": 1}, {\"k\": -2}, {\"k\": null}]'",
                    "'{\"a\": []}'",
                    "'\"s\"'",
                ]);
                let path = self.pick(&[
                    "'$.a[*] ? (@ > $n)'",
                    "'$[*].k ? (@ != null)'",
                    "'lax $.a.size()'",
                    "'$.*'",
                    "'$.a[last]'",
                    "'$.a[0 to 1]'",
                    "'$.b.* ? (@.type() == \"string\")'",
                    "'$[*] ? (exists(@.k))'",
                    "'$.b.c starts with \"x\"'",
                ]);
                format!(
                    "jsonb_path_query_array({doc}, {path}, jsonb_build_object('n', ({i}) % 3)), jsonb_path_exists({doc}, {path}, jsonb_build_object('n', ({i}) % 3)), {doc}::jsonb @? {path}"
                )
            }
            61 => {
                let doc = self.pick(&[
                    "'\"str\"'",
                    "'5'",
                    "'null'",
                    "'[1,\"x\",[2]]'",
                    "'{\"1\":2,\"a\":[3]}'",
                ]);
                format!(
                    "{doc}::jsonb -> ({i} % 3)::int, {doc}::jsonb ->> '1', {doc}::jsonb #>> '{{1}}', {doc}::json -> ({i} % 3)::int, {doc}::jsonb #> '{{a,-1}}'"
                )
            }
            52 if finite(&x) && finite(&d) => format!(
                "to_timestamp(to_char({x}, 'YYYY-MM-DD HH24:MI:SS.US'), 'YYYY-MM-DD HH24:MI:SS.US'), to_date(to_char({d}, 'DD Mon YYYY BC'), 'DD Mon YYYY BC')"
            ),
            52 => format!("{x} AT TIME ZONE 'America/New_York', {d} AT TIME ZONE 'Europe/Berlin'"),
            47 => format!("ln({f}), sqrt({g}), exp({f}), log({g})"),
            48 => format!("mod({i}, NULLIF({j}, 0)), mod({n}, NULLIF({m}, 0)), {f} ^ {g}"),
            49 => format!("width_bucket({f}, -10, 10, 4), width_bucket({n}, -5.5, 5.5, 3)"),
            // (an interval's time is nanoseconds here, microseconds in Postgres: past 292
            // years of hours it is out of range here, a known gap, so the factors are small)
            50 => format!("{v} * ({i} % 100), {w} / NULLIF({j}, 0), justify_interval({v} * 40)"),
            // (age of an infinity is a huge interval in Postgres 15, an error here)
            51 if [&x, &y, &d, &e].iter().all(|t| finite(t)) => {
                format!("{x} - {y}, age({x}, {y}), age({d}, {e})")
            }
            51 => format!("{x} - {y}"),
            46 => format!("date_trunc('{trunc_unit}', {x}), date_trunc('{trunc_unit}', {d})"),
            45 => format!("{x} + {v}, {d} - {w}, {w} + {d}"),
            42 => format!("{n} / NULLIF({m}, 0)"),
            43 => format!("({n})::numeric * ({m})::numeric * ({i})::numeric"),
            44 => format!("ceil({n}), floor({m}), trunc({n}, 2), trunc({m})"),
            38 if x.contains("infinity") && growing.contains(&ts_field) => {
                format!("extract(hour FROM {x})")
            }
            38 => format!("extract({ts_field} FROM {x})"),
            39 => format!("date_part('{ts_field}', {x}), date_part('{date_field}', {d})"),
            40 if d.contains("infinity") && growing.contains(&date_field) => {
                format!("extract(day FROM {d})")
            }
            40 => format!("extract({date_field} FROM {d})"),
            41 => format!("extract({iv_field} FROM {v}), date_part('{iv_field}', {w})"),
            30 => format!("{x} {cmp} {y}"),
            31 => format!("{d} {cmp} {e}"),
            32 => format!("({x})::text, ({d})::text"),
            33 => format!("isfinite({x}), isfinite({d})"),
            34 => format!("({x})::date, ({d})::timestamp"),
            35 => format!("to_char({x}, 'YYYY-MM-DD HH24:MI:SS')"),
            36 => format!("greatest({x}, {y}), least({d}, {e})"),
            37 => format!("date_trunc('month', {x}), date_trunc('day', {d})"),
            0 => format!("{i} {arith} {j}"),
            1 => format!("{i} / NULLIF({j}, 0)"),
            2 => format!("{n} {arith} {m}"),
            3 => format!("{i} {cmp} {j}"),
            4 => format!("{f} {cmp} {g}"),
            5 => format!("{v} {cmp} {w}"),
            6 => format!("{v} + {w}"),
            7 => format!("({i})::text"),
            8 => format!("({n})::int"),
            9 => format!("({f})::text"),
            10 => format!("length({s})"),
            11 => format!("upper({s}) || lower({t})"),
            12 => format!("concat_ws('-', {s}, {i}, {n}, true)"),
            13 => format!("coalesce({s}, {t}, 'x')"),
            14 => format!("{s} {cmp} {t}"),
            15 => format!("substr({s}, 2, 3)"),
            16 => format!("replace({s}, 'l', 'L')"),
            17 => format!("position('b' in {s})"),
            18 => format!("{i} {cmp} ANY({a})"),
            19 => format!("cardinality({a})"),
            20 => format!("({a})[2]"),
            21 => format!("array_length({a}, 1)"),
            22 => format!("{a}::text"),
            23 => format!("abs({i})"),
            24 => format!("-({i})"),
            25 => format!("{i} % NULLIF({j}, 0)"),
            26 => format!("CASE WHEN {i} {cmp} {j} THEN {s} ELSE {t} END"),
            27 => format!("{i} IS DISTINCT FROM {j}"),
            28 => format!("trim({s})"),
            _ => format!("greatest({i}, {j}), least({n}, {m})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scalar_expressions_match_postgres() {
    let seed = diff_seed();
    println!("scalar differential seed: {seed} (WEIR_PG_DIFF_SEED={seed} repeats it)");
    let pg = Postgres::start();
    let weir = TestServer::start();
    let (p, w) = (pg.connect().await, weir.connect().await);
    let mut g = Gen(seed);
    let mut differences = Vec::new();
    let mut scale_only = Vec::new();
    let n = 400;
    for _ in 0..n {
        let e = g.expr();
        let sql = format!("SELECT {e}");
        let (a, b) = (answer(&p, &sql).await, answer(&w, &sql).await);
        if a == b {
            continue;
        }
        let line = format!("{sql}\n  postgres: {a}\n  weir:     {b}");
        if same_numbers(&a, &b) || more_decimals(&a, &b, sql.contains(" / ")) {
            scale_only.push(line);
        } else {
            differences.push(line);
        }
    }
    // A known gap, counted and shown rather than hidden: Weir's numeric has one scale per
    // column (Arrow decimals), Postgres' one per value, so `least(0.0, 3.14159)` is
    // `0.00000` here and `0.0` there, and a quotient may have more decimals here. The
    // values must still be equal (Weir's rounded to Postgres' decimals).
    println!(
        "{} of {n} answers equal in value but printed with another numeric scale:\n{}",
        scale_only.len(),
        scale_only.join("\n")
    );
    assert!(
        differences.is_empty(),
        "seed {seed}: {} of {n} expressions differ; the first:\n{}\n\nall of them:\n{}",
        differences.len(),
        differences[0],
        differences.join("\n")
    );
}

/// Result columns are named as Postgres names them: the same statements prepared on both,
/// their column names compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_column_names_are_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let (p, w) = (pg.connect().await, weir.connect().await);
    for c in [&p, &w] {
        c.batch_execute("CREATE TABLE names_t (a int, b text, ts timestamp, tags text[])")
            .await
            .expect("table");
    }
    let queries = [
        "SELECT '2024-01-01'::date, '1'::int, '1.5'::numeric, 'abc'::text, '1 day'::interval",
        "SELECT 5::bigint, (1 + 2)::text, a::text, b::varchar, CAST(ts AS date) FROM names_t",
        "SELECT date '2024-01-01', timestamp '2024-01-01 10:00', interval '1 hour', 1 + 1, a FROM names_t",
        "SELECT count(*), sum(a), upper(b), coalesce(b, 'x'), CASE WHEN a > 1 THEN 1 END FROM names_t GROUP BY a, b",
        "SELECT extract(year FROM ts), date_trunc('day', ts), a * 2, -a, (a) FROM names_t",
        "SELECT tags[1], tags[2:], (tags)[1], names_t.tags[1], (ARRAY[1,2])[1], ('{1}'::int[])[1] FROM names_t",
        "SELECT x FROM unnest(ARRAY[1]) x",
        "SELECT (date '2024-01-01', date '2024-01-02') OVERLAPS (date '2024-01-02', date '2024-01-03')",
        "SELECT t.* FROM unnest(ARRAY[1]) AS t",
        "SELECT json_build_object('a', 1), array_replace(ARRAY[1], 1, 2), to_number('1', '9')",
        "SELECT substr(b, 2, 1), substring(b, 1, 1), substring(b FROM 1), array_agg(a) FROM names_t GROUP BY b",
    ];
    for q in queries {
        let names = |s: tokio_postgres::Statement| -> Vec<String> {
            s.columns().iter().map(|c| c.name().to_owned()).collect()
        };
        let want = names(p.prepare(q).await.expect("postgres prepares"));
        let got = names(w.prepare(q).await.expect("weir prepares"));
        assert_eq!(got, want, "column names of {q}");
    }
}

/// Joins that read a table by its primary key or an index (`IndexJoinExec`) answer as
/// Postgres does: the same tables (random keys with duplicates and NULLs, from a printed
/// seed) in both, each join's sorted rows compared; the plans that should use an index are
/// checked to (EXPLAIN), and one with too many keys to scan instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_joins_answer_as_postgres() {
    let seed = diff_seed();
    println!("index join seed: {seed} (WEIR_PG_DIFF_SEED={seed} repeats it)");
    let pg = Postgres::start();
    let weir = TestServer::start();
    let (p, w) = (pg.connect().await, weir.connect().await);
    let mut g = Gen(seed);
    let value = |g: &mut Gen, nulls: bool, range: u64| {
        let v = g.next() % range;
        if nulls && v.is_multiple_of(7) {
            "NULL".to_owned()
        } else {
            v.to_string()
        }
    };
    // big: keyed (pk id), an index on (grp, sub); multi: no key, duplicate rows, index on
    // k; logs: APPEND ONLY in Weir, index on k; small: the side the keys come from
    let mut big = Vec::new();
    for id in 0..3000 {
        big.push(format!(
            "({id}, {}, {}, 'b{id}')",
            value(&mut g, true, 300),
            value(&mut g, false, 5)
        ));
    }
    let mut multi = Vec::new();
    for _ in 0..2000 {
        let r = format!(
            "({}, {})",
            value(&mut g, true, 200),
            value(&mut g, false, 3)
        );
        multi.push(r.clone());
        if g.next().is_multiple_of(4) {
            multi.push(r);
        }
    }
    let mut logs = Vec::new();
    for i in 0..2000 {
        logs.push(format!("({}, {i})", value(&mut g, true, 100)));
    }
    let mut small = Vec::new();
    for i in 0..40 {
        small.push(format!(
            "({i}, {}, {}, {})",
            value(&mut g, true, 3200),
            value(&mut g, true, 320),
            value(&mut g, false, 6)
        ));
    }
    for (c, append_only) in [(&p, ""), (&w, " APPEND ONLY")] {
        let setup = format!(
            "CREATE TABLE big (id int PRIMARY KEY, grp int, sub int, name text);
             CREATE INDEX big_grp ON big (grp, sub);
             CREATE TABLE multi (k int, v int);
             CREATE INDEX multi_k ON multi (k);
             CREATE TABLE logs (k int, seq int){append_only};
             CREATE INDEX logs_k ON logs (k);
             CREATE TABLE small (i int, ref int, g int, s int);
             INSERT INTO big VALUES {};
             INSERT INTO multi VALUES {};
             INSERT INTO logs VALUES {};
             INSERT INTO small VALUES {};",
            big.join(","),
            multi.join(","),
            logs.join(","),
            small.join(",")
        );
        c.batch_execute(&setup).await.unwrap();
    }
    // (query, whether Weir reads a table by key for it)
    let queries = [
        (
            "SELECT s.i, b.id, b.name FROM small s JOIN big b ON b.id = s.ref",
            true,
        ),
        (
            "SELECT s.i, b.id FROM small s LEFT JOIN big b ON b.id = s.ref",
            true,
        ),
        (
            "SELECT s.i, b.id FROM small s JOIN big b ON b.id = s.ref WHERE s.i < 0",
            true,
        ),
        (
            "SELECT s.i, b.id FROM small s JOIN big b ON b.grp = s.g",
            true,
        ),
        (
            "SELECT s.i, b.id FROM small s JOIN big b ON b.grp = s.g AND b.sub = s.s",
            true,
        ),
        (
            "SELECT s.i, b.id FROM small s JOIN big b ON b.grp = s.g AND b.name LIKE 'b1%'",
            true,
        ),
        (
            "SELECT s.i, b.id FROM small s JOIN big b ON b.grp = s.g WHERE b.sub > 2 AND s.i < 30",
            true,
        ),
        (
            "SELECT s.i, m.k, m.v FROM small s JOIN multi m ON m.k = s.g",
            true,
        ),
        (
            "SELECT s.i, count(*) FROM small s JOIN multi m ON m.k = s.g GROUP BY s.i",
            true,
        ),
        (
            "SELECT s.i, l.seq FROM small s JOIN logs l ON l.k = s.g",
            true,
        ),
        (
            "SELECT s.i FROM small s WHERE EXISTS (SELECT 1 FROM big b WHERE b.grp = s.g)",
            true,
        ),
        (
            "SELECT s.i FROM small s WHERE NOT EXISTS (SELECT 1 FROM multi m WHERE m.k = s.g)",
            true,
        ),
        (
            "SELECT s.i FROM small s WHERE s.ref IN (SELECT id FROM big)",
            true,
        ),
        (
            "SELECT s.i FROM small s WHERE s.g NOT IN (SELECT k FROM multi)",
            false,
        ),
        ("SELECT b.id FROM big b JOIN big c ON c.id = b.grp", true),
    ];
    let mut differences = Vec::new();
    for (q, indexed) in queries {
        let sorted = |a: String| {
            let mut rows: Vec<&str> = a.lines().collect();
            rows.sort_unstable();
            rows.join("\n")
        };
        let (a, b) = (sorted(answer(&p, q).await), sorted(answer(&w, q).await));
        if a != b {
            differences.push(format!("{q}\n  postgres: {a}\n  weir:     {b}"));
        }
        let plan = answer(&w, &format!("EXPLAIN {q}")).await;
        assert_eq!(
            plan.contains("IndexJoinExec"),
            indexed,
            "{q}: index join expected {indexed}:\n{plan}"
        );
    }
    assert!(
        differences.is_empty(),
        "seed {seed}: {} joins differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    // keys for more than a quarter of the table: the same answer by a scan
    let many = "SELECT count(*), sum(b.id) FROM big a JOIN big b ON b.grp = a.id";
    assert_eq!(answer(&p, many).await, answer(&w, many).await);
}

/// A Postgres user's way in: `pg_dump` (plain SQL, as it comes, owners and all) of a
/// Postgres database, restored into Weir with `psql -v ON_ERROR_STOP=1 -f` — not one
/// statement may fail — then the same questions asked of both: rows, defaults, constraints,
/// indexes, comments, the views, and sequences that continue where Postgres left them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_dump_restores_into_weir() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let (p, w) = (pg.connect().await, weir.connect().await);
    // (a label added by ALTER TYPE may be used once committed: a batch of its own)
    p.batch_execute(
        "CREATE TYPE order_state AS ENUM ('new', 'paid', 'shipped'); \
         ALTER TYPE order_state ADD VALUE 'returned' BEFORE 'shipped';",
    )
    .await
    .expect("the enum in Postgres");
    p.batch_execute(
        r#"
        CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL,
            email varchar(100) UNIQUE, created timestamptz DEFAULT now(), vip boolean DEFAULT false);
        CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id int REFERENCES customers(id),
            total numeric(10,2) CHECK (total >= 0), status text DEFAULT 'new', placed date,
            tags text[], meta jsonb, state order_state NOT NULL DEFAULT 'new');
        CREATE INDEX orders_customer_idx ON orders (customer_id);
        CREATE INDEX orders_status_placed ON orders (status, placed);
        COMMENT ON TABLE orders IS 'customer orders';
        COMMENT ON COLUMN orders.total IS 'in EUR';
        CREATE VIEW big_orders AS SELECT id, total FROM orders WHERE total > 100;
        CREATE SEQUENCE invoice_no START 1000;
        CREATE TABLE kinds (id int GENERATED ALWAYS AS IDENTITY, code char(3), b bytea, u uuid, iv interval,
            f8 float8, f4 real, s2 smallint, t time, ts timestamp, flag boolean,
            CONSTRAINT kinds_pk PRIMARY KEY (id));
        CREATE TABLE notes (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, body text);
        CREATE MATERIALIZED VIEW order_count AS SELECT count(*) AS n, sum(total) AS s FROM orders;
        INSERT INTO customers (name, email, created, vip) VALUES
            ('Ann', 'ann@x.org', '2024-01-01 10:00:00+00', true),
            ('Bob', NULL, '2024-02-01 11:30:00.25+00', false),
            ('Cé "quoted"', 'c@x.org', NULL, false);
        INSERT INTO orders (customer_id, total, status, placed, tags, meta, state) VALUES
            (1, 120.50, 'paid', '2024-01-02', '{a,"b c"}', '{"k": 1, "l": [1, "x"]}', 'shipped'),
            (2, 9.99, 'new', '2024-02-03', NULL, NULL, 'new'),
            (1, 0, 'void', NULL, '{}', '[1, "x"]', 'returned');
        INSERT INTO kinds (code, b, u, iv, f8, f4, s2, t, ts, flag) VALUES
            ('ab', '\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1 day 02:00', 1.5, 2.25, 7,
             '10:11:12', '2024-01-01 00:00:00.5', true),
            ('xyz', NULL, NULL, NULL, 'NaN', '-Infinity', NULL, NULL, NULL, NULL);
        INSERT INTO notes (body) VALUES (E'tab\tand\nnewline \\ backslash'), ('plain');
        SELECT nextval('invoice_no');
        REFRESH MATERIALIZED VIEW order_count;
        CREATE SCHEMA shop;
        COMMENT ON SCHEMA shop IS 'the shop';
        CREATE TYPE shop.size AS ENUM ('s', 'm', 'l');
        CREATE TABLE shop.items (id serial PRIMARY KEY, size shop.size NOT NULL,
            customer_id int REFERENCES customers(id), label text UNIQUE);
        CREATE INDEX items_size ON shop.items (size);
        CREATE VIEW shop.big AS SELECT id, label FROM shop.items WHERE size = 'l';
        INSERT INTO shop.items (size, customer_id, label) VALUES ('s', 1, 'a'), ('l', 2, 'b');
        CREATE DOMAIN us_zip AS varchar(10) NOT NULL DEFAULT '00000'
            CONSTRAINT us_zip_format CHECK (VALUE ~ '^[0-9]{5}$');
        COMMENT ON DOMAIN us_zip IS 'a US postal code';
        CREATE DOMAIN shop.qty AS int CHECK (VALUE >= 0) CHECK (VALUE < 1000);
        CREATE DOMAIN shop.color AS varchar(10) CHECK (VALUE IN ('red', 'blue'));
        CREATE TABLE addresses (id serial PRIMARY KEY, zip us_zip, n shop.qty DEFAULT 1,
            door shop.color);
        INSERT INTO addresses (zip, n, door) VALUES ('12345', 3, 'red'), (DEFAULT, 0, NULL);
        "#,
    )
    .await
    .expect("the schema in Postgres");
    let dump = Command::new(format!("{PG_BIN}/pg_dump"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port.to_string(),
            "-U",
            "postgres",
            "postgres",
        ])
        .output()
        .expect("run pg_dump");
    assert!(
        dump.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), &dump.stdout).expect("write the dump");
    // the dump sets owners to postgres, as a restore into Postgres needs that role too
    w.batch_execute("CREATE ROLE postgres").await.unwrap();
    let restore = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &weir.port().to_string(),
        ])
        .args(["-U", "weir", "-d", "weir", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(file.path())
        .output()
        .expect("psql must be installed");
    let stderr = String::from_utf8_lossy(&restore.stderr);
    assert!(
        restore.status.success() && !stderr.contains("ERROR"),
        "restoring the pg_dump into Weir failed: {stderr}\nthe dump:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&dump.stdout),
        weir.log_tail()
    );
    w.batch_execute("FLUSH").await.unwrap();
    let questions = [
        "SELECT * FROM customers ORDER BY id",
        "SELECT * FROM orders ORDER BY id",
        "SELECT * FROM kinds ORDER BY id",
        "SELECT code || '|', length(code) FROM kinds WHERE code = 'ab' ORDER BY id",
        "SELECT * FROM notes ORDER BY id",
        "SELECT * FROM big_orders ORDER BY id",
        "SELECT n, s FROM order_count",
        "SELECT table_name, column_name, column_default, is_nullable, data_type, is_identity \
         FROM information_schema.columns \
         WHERE table_name IN ('customers', 'orders', 'kinds', 'notes') \
         ORDER BY table_name, ordinal_position",
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE conrelid IN ('customers'::regclass, 'orders'::regclass, 'kinds'::regclass, \
         'notes'::regclass) ORDER BY conname",
        "SELECT tablename, indexname FROM pg_indexes \
         WHERE tablename IN ('customers', 'orders', 'kinds', 'notes') ORDER BY indexname",
        "SELECT obj_description('orders'::regclass, 'pg_class'), col_description('orders'::regclass, 3)",
        "SELECT pg_get_serial_sequence('customers', 'id'), pg_get_serial_sequence('notes', 'id')",
        "SELECT id, state FROM orders ORDER BY state DESC, id",
        "SELECT t.typname, t.typtype, e.enumlabel FROM pg_enum e \
         JOIN pg_type t ON t.oid = e.enumtypid ORDER BY e.enumsortorder",
        "SELECT udt_name FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'state'",
        "SELECT * FROM shop.items ORDER BY id",
        "SELECT * FROM shop.big",
        "SELECT obj_description('shop'::regnamespace, 'pg_namespace')",
        "SELECT data_type, udt_schema, udt_name FROM information_schema.columns \
         WHERE table_schema = 'shop' AND column_name = 'size'",
        "SELECT t.typname, t.typnamespace::regnamespace FROM pg_type t WHERE t.typname = 'size'",
        "SELECT n.nspname, c.relname, c.relkind FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'shop' ORDER BY 2",
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE conrelid = 'shop.items'::regclass ORDER BY 1",
        "SELECT pg_get_serial_sequence('shop.items', 'id'), format_type(atttypid, atttypmod) \
         FROM pg_attribute WHERE attrelid = 'shop.items'::regclass AND attname = 'size'",
        "SELECT * FROM addresses ORDER BY id",
        "SELECT t.typname, t.typnamespace::regnamespace, t.typtype, format_type(t.typbasetype, t.typtypmod), \
         t.typnotnull, t.typdefault, obj_description(t.oid, 'pg_type') FROM pg_type t \
         WHERE t.typtype = 'd' AND t.typnamespace <> 'information_schema'::regnamespace ORDER BY 1",
        "SELECT c.conname, c.contypid::regtype, c.convalidated FROM pg_constraint c \
         WHERE c.contypid <> 0 AND c.connamespace <> 'information_schema'::regnamespace ORDER BY 1",
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
         WHERE a.attrelid = 'addresses'::regclass AND a.attnum > 0 ORDER BY a.attnum",
        "SELECT column_name, column_default, domain_schema, domain_name FROM information_schema.columns \
         WHERE table_name = 'addresses' ORDER BY ordinal_position",
    ];
    for q in questions {
        assert_eq!(
            answer(&p, q).await,
            answer(&w, q).await,
            "after the restore: {q}"
        );
    }
    // the sequences continue where Postgres left them, the constraints hold
    let next = [
        "INSERT INTO customers (name) VALUES ('new') RETURNING id",
        "INSERT INTO orders (customer_id, total) VALUES (3, 5) RETURNING id, status",
        "INSERT INTO kinds (s2) VALUES (1) RETURNING id",
        "INSERT INTO notes (body) VALUES ('n') RETURNING id",
        "SELECT nextval('invoice_no')",
        "INSERT INTO orders (customer_id, total) VALUES (999, 1)",
        "INSERT INTO orders (customer_id, total) VALUES (1, -1)",
        "INSERT INTO customers (name, email) VALUES ('dup', 'ann@x.org')",
        "INSERT INTO kinds (id) VALUES (10)",
        "INSERT INTO orders (customer_id, total, state) VALUES (1, 1, 'lost')",
        "SELECT count(*) FROM orders WHERE state > 'paid'",
        "INSERT INTO shop.items (size, label) VALUES ('m', 'c') RETURNING id, size",
        "INSERT INTO addresses (n) VALUES (5) RETURNING id, zip, n",
        "INSERT INTO addresses (zip) VALUES ('1234x')",
        "INSERT INTO addresses (zip, n) VALUES ('54321', 1000)",
        "INSERT INTO addresses (zip) VALUES (NULL)",
        "INSERT INTO addresses (door) VALUES ('green')",
        "UPDATE addresses SET door = 'blue' WHERE n = 0 RETURNING id, door",
        "SELECT '99999'::us_zip, 7::shop.qty",
        "INSERT INTO shop.items (size, label) VALUES ('xl', 'd')",
        "INSERT INTO shop.items (size, label) VALUES ('m', 'a')",
        "SELECT size, count(*) FROM shop.items GROUP BY size ORDER BY size",
    ];
    for q in next {
        assert_eq!(
            answer(&p, q).await,
            answer(&w, q).await,
            "after the restore: {q}"
        );
    }
}

/// LISTEN / NOTIFY / pg_notify through psql, which prints each notification it receives
/// after the statement it ran: the sender's own notifications, those of a committed block
/// (once for a repeat), none of a rolled-back block, none after UNLISTEN, quoted channel
/// names, the errors, as Postgres answers them; and the `void` these functions (and
/// pg_sleep, advisory locks) return: an empty value, not NULL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_notify_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
LISTEN ch;
LISTEN other_ch;
SELECT pg_listening_channels();
UNLISTEN other_ch;
SELECT count(*) FROM pg_listening_channels() c;
NOTIFY ch, 'hi';
SELECT coalesce(pg_notify('ch', 'fn')::text, '') = '' AS sent;
BEGIN;
NOTIFY ch, 'in block';
NOTIFY ch, 'in block';
SELECT 1;
COMMIT;
BEGIN;
NOTIFY ch, 'rolled back';
ROLLBACK;
BEGIN;
NOTIFY ch, 'failed';
SELECT 1/0;
COMMIT;
NOTIFY other, 'not listened';
SELECT coalesce(pg_notify('ch', 'x' || 1/0)::text, '') = '' AS sent;
UNLISTEN *;
NOTIFY ch, 'after unlisten';
LISTEN "Mixed";
NOTIFY "Mixed";
NOTIFY Mixed, 'lower';
SELECT coalesce(pg_notify('', 'x')::text, '') = '' AS sent;
SELECT coalesce(pg_notify('ch', repeat('x', 8000))::text, '') = '' AS sent;
DISCARD ALL;
NOTIFY "Mixed", 'after discard';
\pset null NULL
SELECT pg_sleep(0), pg_typeof(pg_sleep(0)), pg_typeof(pg_notify('x', 'y'));
SELECT pg_advisory_lock(7), pg_advisory_xact_lock(8), pg_advisory_unlock_all();
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &["payload \"in block\"", "channel name cannot be empty"],
        "LISTEN and NOTIFY",
    );
}

/// COPY's options through psql's `\copy` (CSV with FORCE_NULL, FORCE_NOT_NULL, FORCE_QUOTE,
/// HEADER MATCH, and their misuse): the same script's whole output from Postgres and Weir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_options_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE cp (a int, b text, c text);
\copy cp from stdin with (format csv, force_null (b), force_not_null (c))
1,"",
2,x,""
3,,
\.
SELECT a, b IS NULL AS b_null, c IS NULL AS c_null, c = '' AS c_empty FROM cp ORDER BY a;
\copy cp to stdout with (format csv, force_quote (b))
\copy cp to stdout with (format csv, force_quote *, header)
\copy (SELECT a, c FROM cp ORDER BY a) to stdout with (format csv, force_quote (c))
\copy cp from stdin with (format csv, header match)
a,b,c
4,y,z
\.
\copy cp from stdin with (format csv, header match)
a,x,c
5,y,z
\.
\copy cp from stdin with (format csv, header match)
a,b
\.
\copy cp from stdin csv force not null c
6,,
\.
SELECT a, b IS NULL, c IS NULL FROM cp WHERE a >= 4 ORDER BY a;
\copy cp to stdout with (force_quote (b))
\copy cp from stdin with (format csv, force_quote (b))
\copy cp to stdout with (format csv, force_null (b))
\copy cp to stdout with (format csv, force_not_null (b))
\copy cp from stdin with (format csv, force_null (x))
\copy cp (a, c) from stdin with (format csv, force_not_null (b))
\copy cp to stdout with (format csv, force_quote (x))
\copy cp from stdin with (format csv, force_null *)
\copy cp to stdout with (format csv, header match)
DROP TABLE cp;
CREATE TABLE ct (t time, ts timestamp);
\copy ct (t) from stdin
24:00
allballs
12:30:01.5
\.
SELECT t FROM ct ORDER BY t;
\copy ct (t) from stdin
bad
\.
\copy ct (ts) from stdin
bad
\.
DROP TABLE ct;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &["b_null", "column name mismatch"],
        "COPY options",
    );
}

/// User schemas: relations made, read, changed and copied in a schema other than public,
/// the catalogs that list them, regclass, constraint errors, DROP SCHEMA refused and with
/// CASCADE (its notice), undone by ROLLBACK; CREATE SCHEMA in a rolled-back block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE SCHEMA sc_app;
CREATE SCHEMA sc_app;
CREATE SCHEMA IF NOT EXISTS sc_app;
CREATE TABLE sc_app.users (id serial PRIMARY KEY, name text NOT NULL UNIQUE, age int CHECK (age > 0));
CREATE TABLE sc_app.posts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, user_id int REFERENCES sc_app.users (id) ON DELETE CASCADE, title varchar(20));
CREATE TABLE sc_users (id int PRIMARY KEY, note text);
CREATE INDEX ON sc_app.posts (title);
INSERT INTO sc_app.users (name, age) VALUES ('ann', 30), ('bob', 40) RETURNING id, name;
INSERT INTO "sc_app"."posts" (user_id, title) VALUES (1, 'hello'), (2, 'world');
INSERT INTO sc_users VALUES (1, 'public one');
SELECT u.name, p.title, x.note FROM sc_app.users u JOIN sc_app.posts p ON p.user_id = u.id LEFT JOIN sc_users x ON x.id = u.id ORDER BY 1;
UPDATE sc_app.users SET age = age + 1 WHERE name = 'bob';
DELETE FROM sc_app.users WHERE name = 'ann';
SELECT * FROM sc_app.posts;
SELECT sc_app.users.name FROM sc_app.users;
INSERT INTO sc_app.users (name, age) VALUES ('bob', 1);
INSERT INTO sc_app.users (name, age) VALUES ('cy', 0);
INSERT INTO sc_app.users (id, name) VALUES (NULL, 'dd');
CREATE VIEW sc_app.names AS SELECT name FROM sc_app.users;
SELECT * FROM sc_app.names;
SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'sc_app' ORDER BY 2;
SELECT table_schema, table_name, table_type FROM information_schema.tables WHERE table_schema = 'sc_app' ORDER BY 2;
SELECT table_name, column_name, column_default, is_nullable FROM information_schema.columns WHERE table_schema = 'sc_app' ORDER BY 1, ordinal_position;
SELECT constraint_name, constraint_type, table_schema FROM information_schema.table_constraints WHERE table_schema = 'sc_app' AND constraint_type <> 'CHECK' ORDER BY 1;
SELECT conname, contype, connamespace::regnamespace FROM pg_constraint WHERE conrelid = 'sc_app.users'::regclass ORDER BY 1;
SELECT indexdef FROM pg_indexes WHERE schemaname = 'sc_app' ORDER BY 1;
SELECT 'sc_app.users'::regclass, 'sc_app.users_pkey'::regclass, '"sc_app"."users"'::regclass::oid = 'sc_app.users'::regclass::oid, to_regclass('sc_app.nope');
SELECT pg_get_serial_sequence('sc_app.users', 'id'), pg_get_serial_sequence('"sc_app"."posts"', 'id');
SELECT nspname FROM pg_namespace WHERE oid = 'sc_app'::regnamespace;
SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'sc%';
COMMENT ON SCHEMA sc_app IS 'the app';
SELECT obj_description('sc_app'::regnamespace, 'pg_namespace');
COMMENT ON SCHEMA sc_nosuch IS 'x';
SELECT * FROM sc_app.nope;
CREATE TABLE sc_nosuch.t (a int);
ALTER TABLE sc_app.posts RENAME TO articles;
SELECT * FROM sc_app.articles;
\copy sc_app.users (name, age) from stdin
dee	7
\.
SELECT id, name, age FROM sc_app.users ORDER BY id;
\copy sc_app.users to stdout
SELECT schemaname, relname FROM pg_stat_user_tables WHERE schemaname = 'sc_app' ORDER BY 2;
SELECT schemaname, relname, indexrelname FROM pg_stat_user_indexes WHERE schemaname = 'sc_app' ORDER BY 3;
DROP SCHEMA sc_app;
BEGIN;
DROP SCHEMA sc_app CASCADE;
ROLLBACK;
SELECT count(*) FROM sc_app.users;
DROP SCHEMA sc_app CASCADE;
SELECT * FROM sc_app.users;
DROP SCHEMA sc_app;
DROP SCHEMA IF EXISTS sc_app;
BEGIN;
CREATE SCHEMA sc_tx;
CREATE TABLE sc_tx.t (a int);
ROLLBACK;
SELECT count(*) FROM pg_namespace WHERE nspname = 'sc_tx';
SELECT * FROM sc_users;
DROP TABLE sc_users;
CREATE TABLE pg_catalog.sc_t (a int);
CREATE SCHEMA pg_sc;
CREATE SCHEMA sc_ta;
CREATE SCHEMA sc_tb;
CREATE TABLE sc_ta.users (id int PRIMARY KEY, email text UNIQUE);
CREATE TABLE sc_tb.users (id int PRIMARY KEY, email text UNIQUE);
CREATE INDEX index_users_on_email ON sc_ta.users (email);
CREATE INDEX index_users_on_email ON sc_tb.users (email);
CREATE INDEX ON sc_ta.users (id, email);
CREATE INDEX ON sc_tb.users (id, email);
CREATE INDEX index_users_on_email ON sc_ta.users (id);
SET search_path TO sc_tb;
CREATE INDEX index_users_on_id ON users (id);
DROP INDEX index_users_on_email;
RESET search_path;
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'i' AND n.nspname IN ('sc_ta','sc_tb') ORDER BY 1, 2;
SELECT 'sc_ta.index_users_on_email'::regclass, 'sc_ta.users_pkey'::regclass::oid <> 'sc_tb.users_pkey'::regclass::oid;
ALTER INDEX sc_ta.index_users_on_email RENAME TO users_email_idx;
DROP INDEX index_users_on_email;
DROP INDEX sc_ta.users_email_idx;
SELECT indexname FROM pg_indexes WHERE schemaname = 'sc_ta' ORDER BY 1;
DROP SCHEMA sc_ta CASCADE;
DROP SCHEMA sc_tb CASCADE;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "drop cascades to 3 other objects",
            "cannot drop schema sc_app because other objects depend on it",
            "sc_app.users_id_seq",
            "5\tdee\t7",
        ],
        "user schemas",
    );
}

/// `ALTER TABLE | VIEW | SEQUENCE | TYPE | DOMAIN ... SET SCHEMA` and `ALTER SCHEMA ...
/// RENAME TO` of a schema that holds tables, types and a sequence: what reads and
/// references the moved objects follows them (a view in another schema, a foreign key, a
/// serial column's default, a column of the moved enum type), a move inside a transaction
/// block is undone by ROLLBACK, the errors; against PostgreSQL 15.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_schema_answers_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE SCHEMA ss_app;
CREATE SCHEMA ss_arch;
CREATE TYPE ss_mood AS ENUM ('sad', 'ok');
CREATE DOMAIN ss_pos AS int CHECK (VALUE > 0);
CREATE TABLE ss_p (id serial PRIMARY KEY, m ss_mood, q ss_pos);
CREATE TABLE ss_c (id int PRIMARY KEY, pid int REFERENCES ss_p (id));
INSERT INTO ss_p (m, q) VALUES ('ok', 5);
INSERT INTO ss_c VALUES (10, 1);
CREATE VIEW ss_v AS SELECT p.id, p.m, c.id AS cid FROM ss_p p JOIN ss_c c ON c.pid = p.id;
ALTER TABLE ss_p SET SCHEMA ss_nosuch;
ALTER TABLE ss_nosuch_t SET SCHEMA ss_app;
ALTER TABLE IF EXISTS ss_nosuch_t SET SCHEMA ss_app;
ALTER TABLE ss_p SET SCHEMA public;
CREATE TABLE ss_app.ss_p (x int);
ALTER TABLE ss_p SET SCHEMA ss_app;
DROP TABLE ss_app.ss_p;
ALTER TABLE ss_p SET SCHEMA ss_app;
ALTER TYPE ss_mood SET SCHEMA ss_app;
ALTER TYPE ss_app.ss_mood SET SCHEMA ss_app;
ALTER DOMAIN ss_pos SET SCHEMA ss_app;
ALTER DOMAIN ss_app.ss_pos SET SCHEMA ss_nosuch;
\d ss_app.ss_p
\d ss_c
SELECT * FROM ss_v;
INSERT INTO ss_app.ss_p (m, q) VALUES ('sad', 1);
INSERT INTO ss_c VALUES (11, 2);
INSERT INTO ss_c VALUES (12, 3);
DELETE FROM ss_app.ss_p WHERE id = 1;
SELECT * FROM ss_v ORDER BY id;
SELECT pg_get_serial_sequence('ss_app.ss_p', 'id');
SELECT schemaname, tablename FROM pg_tables WHERE schemaname LIKE 'ss%' ORDER BY 1, 2;
SELECT sequence_schema, sequence_name FROM information_schema.sequences WHERE sequence_name LIKE 'ss%' ORDER BY 1, 2;
SELECT n.nspname, t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typname IN ('ss_mood', 'ss_pos') ORDER BY 2;
ALTER VIEW ss_v SET SCHEMA ss_app;
ALTER VIEW ss_app.ss_p SET SCHEMA public;
ALTER SEQUENCE ss_app.ss_p SET SCHEMA public;
ALTER TABLE ss_app.ss_v SET SCHEMA ss_arch;
SELECT * FROM ss_arch.ss_v ORDER BY id;
BEGIN;
ALTER TABLE ss_app.ss_p SET SCHEMA ss_arch;
SELECT count(*) FROM ss_arch.ss_p;
SELECT * FROM ss_arch.ss_v ORDER BY id;
ROLLBACK;
SELECT count(*) FROM ss_app.ss_p;
SELECT * FROM ss_arch.ss_v ORDER BY id;
CREATE SEQUENCE ss_s1;
CREATE TABLE ss_d (id int DEFAULT nextval('ss_s1'), v text);
ALTER SEQUENCE ss_s1 RENAME TO ss_s2;
INSERT INTO ss_d (v) VALUES ('x');
ALTER SEQUENCE ss_s2 SET SCHEMA ss_arch;
INSERT INTO ss_d (v) VALUES ('y');
SELECT * FROM ss_d ORDER BY id;
\d ss_d
ALTER SCHEMA ss_arch RENAME TO ss_app;
ALTER SCHEMA ss_arch RENAME TO ss_old;
ALTER SCHEMA ss_app RENAME TO ss_new;
\d ss_d
\d ss_new.ss_p
SELECT * FROM ss_old.ss_v ORDER BY id;
INSERT INTO ss_new.ss_p (m, q) VALUES ('ok', 2);
INSERT INTO ss_c VALUES (13, 3);
SELECT * FROM ss_old.ss_v ORDER BY id;
SELECT 'ok'::ss_new.ss_mood, 3::ss_new.ss_pos;
SELECT 0::ss_new.ss_pos;
SELECT n.nspname, t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typname IN ('ss_mood', 'ss_pos') ORDER BY 2;
SET search_path TO ss_new, public;
SELECT m, q FROM ss_p ORDER BY id;
RESET search_path;
DROP TABLE ss_d;
DROP SCHEMA ss_old CASCADE;
DROP SCHEMA ss_new CASCADE;
DROP TABLE ss_c;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "relation \"ss_p\" already exists in schema \"ss_app\"",
            "nextval('ss_new.ss_p_id_seq'::regclass)",
            "drop cascades to constraint ss_c_pid_fkey on table ss_c",
            "| ok  |  13",
        ],
        "SET SCHEMA and ALTER SCHEMA RENAME",
    );
}

/// Domains as psql shows them (`\dD`, `\dD+`, `\d`), their errors, ALTER DOMAIN, defaults
/// and a domain of a user schema reached through the search path, against PostgreSQL 15.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE DOMAIN dm_pos AS int NOT NULL DEFAULT 1 CHECK (value > 0);
COMMENT ON DOMAIN dm_pos IS 'positive';
CREATE DOMAIN dm_code text CONSTRAINT dm_code_upper CHECK (VALUE = upper(VALUE));
CREATE DOMAIN dm_short varchar(3);
CREATE TYPE dm_mood AS ENUM ('sad', 'ok');
CREATE TABLE dm_t (id int PRIMARY KEY, a dm_pos, b dm_pos DEFAULT 5, c dm_code, m dm_mood, s dm_short);
INSERT INTO dm_t (id, c) VALUES (1, 'AB');
INSERT INTO dm_t (id, a) VALUES (2, 0);
INSERT INTO dm_t (id, a) VALUES (3, NULL);
INSERT INTO dm_t (id, c) VALUES (4, 'abc');
INSERT INTO dm_t (id, s) VALUES (5, 'ABCD');
\dD
\dD+
\d dm_t
SELECT obj_description('dm_pos'::regtype, 'pg_type');
ALTER DOMAIN dm_pos SET DEFAULT 2;
INSERT INTO dm_t (id) VALUES (6);
ALTER TABLE dm_t ALTER COLUMN a SET DEFAULT 3;
ALTER DOMAIN dm_pos SET DEFAULT 4;
INSERT INTO dm_t (id) VALUES (7);
ALTER DOMAIN dm_pos DROP DEFAULT;
INSERT INTO dm_t (id) VALUES (8);
ALTER TABLE dm_t ADD COLUMN d dm_pos;
ALTER TABLE dm_t RENAME COLUMN c TO cc;
UPDATE dm_t SET cc = 'x' WHERE id = 1;
ALTER TABLE dm_t DROP COLUMN cc;
SELECT * FROM dm_t ORDER BY id;
SELECT column_name, column_default, domain_name FROM information_schema.columns WHERE table_name = 'dm_t' ORDER BY ordinal_position;
ALTER DOMAIN dm_mood ADD CONSTRAINT x CHECK (true);
DROP DOMAIN dm_mood;
ALTER DOMAIN dm_nosuch SET NOT NULL;
DROP DOMAIN dm_pos;
CREATE DOMAIN dm_pos AS int;
CREATE DOMAIN dm_bad AS int CHECK (VALUE);
CREATE DOMAIN "Dm Mixed" AS text;
SELECT 'x'::"Dm Mixed";
CREATE SCHEMA dm_app;
CREATE DOMAIN dm_app.qty AS int CHECK (VALUE >= 0);
CREATE TABLE dm_q (q dm_app.qty);
\dD
\dD dm_app.*
SET search_path TO dm_app, public;
CREATE DOMAIN dm_inapp AS text;
CREATE TABLE dm_app.dm_r (x qty, y dm_inapp);
\dD
\d dm_app.dm_r
RESET search_path;
INSERT INTO dm_app.dm_r VALUES (-1, 'a');
\d dm_app.dm_r
BEGIN;
CREATE DOMAIN dm_tmp AS text;
ROLLBACK;
CREATE DOMAIN dm_tmp AS text;
DROP TABLE dm_app.dm_r, dm_q;
DROP SCHEMA dm_app CASCADE;
DROP TABLE dm_t;
DROP DOMAIN dm_pos, dm_code, dm_short, dm_tmp, "Dm Mixed";
DROP TYPE dm_mood;
CREATE TYPE dd_mood AS ENUM ('a', 'b');
CREATE DOMAIN dd_pos AS int CHECK (VALUE > 0);
CREATE TABLE dd_t (id int PRIMARY KEY, m dd_mood, p dd_pos, q dd_pos);
INSERT INTO dd_t VALUES (1, 'a', 1, 2);
DROP TYPE dd_mood;
DROP TYPE dd_mood CASCADE;
DROP DOMAIN dd_pos CASCADE;
\d dd_t
SELECT * FROM dd_t;
CREATE SCHEMA dd_s;
CREATE TYPE dd_s.kind AS ENUM ('x');
CREATE TABLE dd_u (id int, k dd_s.kind);
DROP SCHEMA dd_s CASCADE;
\d dd_u
DROP TABLE dd_t, dd_u;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "value for domain dm_pos violates check constraint \"dm_pos_check\"",
            "domain dm_pos does not allow null values",
            "dm_app | qty",
            "positive",
        ],
        "domains",
    );
}

/// `SET search_path` with user schemas: unqualified names made in the path's first schema
/// (tables, serial sequences, types, views, indexes), found along the path (a table of the
/// same name in public shadowed), a WITH query's name left alone, views keeping the
/// relations they were made over after the path changes, current_schema(s), a
/// multi-statement query whose SET changes how its later statements read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_path_answers_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE SCHEMA sp_a;
CREATE SCHEMA sp_b;
CREATE TABLE sp_t (id int PRIMARY KEY, who text);
INSERT INTO sp_t VALUES (0, 'public');
SET search_path TO sp_a, public;
CREATE TABLE sp_t (id serial PRIMARY KEY, who text);
INSERT INTO sp_t (who) VALUES ('a');
CREATE TABLE sp_only_a (v int);
INSERT INTO sp_only_a VALUES (1);
CREATE TYPE sp_mood AS ENUM ('ok', 'sad');
CREATE TABLE sp_m (x sp_mood);
INSERT INTO sp_m VALUES ('ok');
SELECT x, 'sad'::sp_mood FROM sp_m;
CREATE VIEW sp_v AS SELECT who FROM sp_t;
CREATE INDEX sp_t_who ON sp_t (who);
WITH sp_t AS (SELECT 'cte' AS who) SELECT who FROM sp_t;
SELECT current_schema(), current_schemas(false), current_schemas(true);
SELECT c.relname FROM pg_class c WHERE pg_table_is_visible(c.oid) AND c.relname LIKE 'sp%' ORDER BY 1;
CREATE SEQUENCE sp_seq;
SELECT nextval('sp_seq'), currval('sp_seq'), pg_get_serial_sequence('sp_t', 'id'), 'sp_t'::regclass, to_regclass('sp_only_a'), 'sp_t'::regclass::oid = 'sp_a.sp_t'::regclass::oid;
CREATE TABLE "Sp_Mixed" (a int PRIMARY KEY);
SELECT '"Sp_Mixed"'::regclass, '"Sp_Mixed_pkey"'::regclass, 'public.sp_t'::regclass;
SET search_path TO sp_b, public;
CREATE TABLE sp_t (id int, who text);
INSERT INTO sp_t VALUES (2, 'b');
SELECT * FROM sp_t;
SELECT * FROM sp_only_a;
SELECT * FROM sp_a.sp_v;
UPDATE sp_t SET who = 'B';
ALTER TABLE sp_t ADD COLUMN z int;
SELECT * FROM sp_t;
SELECT * FROM sp_a.sp_t;
SET search_path TO public;
SELECT * FROM sp_t;
SELECT pg_get_serial_sequence('sp_a.sp_t', 'id');
RESET search_path;
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname LIKE 'sp%' ORDER BY 1, 2;
SET search_path TO sp_b; CREATE TABLE sp_multi (a int); INSERT INTO sp_multi VALUES (7); SELECT current_schema(), count(*) FROM sp_multi; RESET search_path; SELECT count(*) FROM sp_b.sp_multi;
DROP SCHEMA sp_b CASCADE;
DROP SCHEMA sp_a CASCADE;
DROP TABLE sp_t;
SET search_path TO sp_nosuch;
CREATE TABLE sp_x (a int);
CREATE TABLE public.sp_y (a int);
SELECT set_config('search_path', '', false);
CREATE SEQUENCE sp_s;
RESET search_path;
DROP TABLE sp_y;
CREATE SCHEMA sp_off;
CREATE TABLE sp_pub (a int);
CREATE SEQUENCE sp_pub_s;
INSERT INTO sp_pub VALUES (1);
CREATE TABLE sp_off.sp_own (b int);
SET search_path TO sp_off;
SELECT * FROM sp_pub;
SELECT * FROM sp_own, sp_pub;
INSERT INTO sp_pub VALUES (2);
UPDATE sp_pub SET a = 3;
DELETE FROM sp_pub;
DROP TABLE sp_pub;
DROP TABLE IF EXISTS sp_pub;
ALTER TABLE sp_pub ADD COLUMN c int;
CREATE INDEX ON sp_pub (a);
SELECT nextval('sp_pub_s');
SELECT 'sp_pub'::regclass;
SELECT to_regclass('sp_pub');
WITH sp_pub AS (SELECT 5 AS a) SELECT * FROM sp_pub;
SELECT * FROM public.sp_pub;
COPY sp_pub TO stdout;
TRUNCATE sp_pub;
SELECT count(*) FROM pg_class WHERE relname = 'sp_pub';
SET search_path TO '';
SELECT * FROM sp_pub;
SELECT * FROM public.sp_pub;
RESET search_path;
SELECT * FROM sp_pub;
CREATE TYPE sp_pub_mood AS ENUM ('a', 'b');
CREATE DOMAIN sp_pub_pos AS int CHECK (VALUE > 0);
SET search_path TO sp_off;
CREATE TABLE sp_t1 (m sp_pub_mood);
SELECT 'a'::sp_pub_mood, 1::sp_pub_pos;
SELECT 'a'::public.sp_pub_mood, 1::public.sp_pub_pos;
DROP TYPE sp_pub_mood;
DROP TYPE IF EXISTS sp_pub_mood;
DROP DOMAIN sp_pub_pos;
DROP DOMAIN IF EXISTS sp_pub_pos;
ALTER TYPE sp_pub_mood ADD VALUE 'c';
CREATE TABLE sp_t2 (m public.sp_pub_mood);
INSERT INTO sp_t2 VALUES ('b');
SELECT * FROM sp_t2;
RESET search_path;
DROP SCHEMA sp_off CASCADE;
DROP TABLE sp_pub;
DROP SEQUENCE sp_pub_s;
DROP TYPE sp_pub_mood;
DROP DOMAIN sp_pub_pos;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "{pg_catalog,sp_a,public}",
            "drop cascades to view sp_a.sp_v",
            "relation \"sp_pub_s\" does not exist",
            "table \"sp_pub\" does not exist, skipping",
        ],
        "search_path",
    );
    // one message of several statements (psql sends a script's one by one): a SET in it
    // changes how the statements after it read their names
    let (p, w) = (pg.connect().await, weir.connect().await);
    for q in [
        "CREATE SCHEMA sp_m; SET search_path TO sp_m, public; CREATE TABLE sp_q (a int); \
         INSERT INTO sp_q VALUES (1); SELECT current_schema(), count(*) FROM sp_q",
        "SET search_path TO public; CREATE TABLE sp_q (b text); INSERT INTO sp_q VALUES ('p'); \
         SELECT * FROM sp_q",
        "SELECT (SELECT count(*) FROM sp_m.sp_q), (SELECT count(*) FROM public.sp_q)",
        "DROP SCHEMA sp_m CASCADE; DROP TABLE sp_q; SELECT count(*) FROM pg_namespace WHERE nspname = 'sp_m'",
    ] {
        assert_eq!(answer(&p, q).await, answer(&w, q).await, "{q}");
    }
}

/// Dates, timestamps and times in COPY data, in the canonical form (read by COPY's one-pass
/// reader) and in every other form (the general reading), mixed in one COPY and alone;
/// days past their month; more than six fractional digits, rounded half to even to
/// microseconds as Postgres rounds them (also in casts and INSERT literals), where a date
/// ignores the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_datetimes_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE tc (a timestamp, b date, c timestamptz, d time, e bigint, f float8);
\copy tc from stdin with (format csv)
2024-01-01 10:00:00,2024-01-01,2024-01-01 10:00:00,10:00:00, 12 ,1.5
2024-02-29T23:59:59.123456,2024-02-29,2024-02-29 23:59:59.5+02,23:59:59.9999999,-7, 2.5
,,,,,
2024-01-01 23:59:59.9999999,2024-01-01 23:59:59.9999999,2024-01-01 23:59:59.9999999 UTC,00:00:00.0000015,0,0
\.
SELECT * FROM tc ORDER BY e NULLS LAST;
CREATE TABLE tc2 (a timestamp, b date);
\copy tc2 from stdin with (format csv)
2024-01-01 10:00:00,2024-01-01
2024-01-01 10:00:00.5,2024-12-31
2000-02-29 00:00:00,2000-02-29
1999-12-31 23:59:59.999999,0001-01-01
\.
SELECT * FROM tc2 ORDER BY a;
\copy tc2 from stdin with (format csv)
2024-01-01 10:00:00,2024-02-30
\.
\copy tc2 from stdin with (format csv)
2023-02-29 10:00:00,2024-02-01
\.
\copy tc2 from stdin with (format csv)
2023-02-28 25:00:00,2024-02-01
\.
SELECT count(*) FROM tc2;
SELECT '2024-01-01 00:00:00.0000005'::timestamp, '2024-01-01 00:00:00.0000015'::timestamp, '2024-01-01 00:00:00.1234567'::timestamp, '2024-01-01 23:59:59.9999999'::timestamp;
SELECT '2024-01-01 00:00:00.0000025'::timestamptz, '2024-01-01 23:59:59.9999999+02'::timestamptz, '2024-01-01 23:59:59.9999999 America/New_York'::timestamptz;
SELECT '10:00:00.0000005'::time, '10:00:00.9999996'::time, '23:59:59.9999999'::time, '10:00:00.00000150'::time;
SELECT '2024-01-01 00:00:00.00000049999'::timestamp, '2024-01-01 23:59:59.9999999'::date, '2024-12-31 23:59:59.99999951'::timestamp;
INSERT INTO tc VALUES ('2024-01-01 23:59:59.9999999', '2024-01-01 23:59:59.9999999', '2024-01-01 23:59:59.9999999', '23:59:59.9999999', 5, 5);
SELECT * FROM tc WHERE e = 5;
DROP TABLE tc;
DROP TABLE tc2;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "2024-02-29 23:59:59.123456",
            "date/time field value out of range",
            "24:00:00",
        ],
        "COPY dates and times",
    );
}

/// `script` run by psql against Postgres and against Weir prints the same (errors' LINE and
/// caret lines aside: those are Postgres' own parser's); `ran` are texts Postgres' output
/// must hold, to be sure the script really ran there.
fn same_psql_output(pg: &Postgres, weir: &TestServer, script: &str, ran: &[&str], what: &str) {
    psql_output_compared(pg, weir, script, ran, what, false)
}

/// [`same_psql_output`], the `LINE n:` and caret lines (the error's position) compared too.
fn same_psql_output_and_places(
    pg: &Postgres,
    weir: &TestServer,
    script: &str,
    ran: &[&str],
    what: &str,
) {
    psql_output_compared(pg, weir, script, ran, what, true)
}

fn psql_output_compared(
    pg: &Postgres,
    weir: &TestServer,
    script: &str,
    ran: &[&str],
    what: &str,
    places: bool,
) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), script).expect("write the script");
    let run = |args: &[&str]| {
        let out = Command::new("psql")
            .args(["-X", "-q", "-v", "VERBOSITY=default"])
            .args(args)
            .arg("-f")
            .arg(file.path())
            .output()
            .expect("psql must be installed");
        // psql names the script file in its error lines: the same file for both
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let pg_port = pg.port.to_string();
    let weir_port = weir.port().to_string();
    let expected = run(&[
        "-h",
        "127.0.0.1",
        "-p",
        &pg_port,
        "-U",
        "postgres",
        "-d",
        "postgres",
    ]);
    let got = run(&[
        "-h",
        "127.0.0.1",
        "-p",
        &weir_port,
        "-U",
        "weir",
        "-d",
        "weir",
    ]);
    for r in ran {
        assert!(
            expected.contains(r),
            "the script did not run in Postgres ({r}): {expected}"
        );
    }
    // (a notification names its sender's pid: process ids differ)
    let pid = |l: &str| -> String {
        match l.split_once("server process with PID ") {
            Some((head, _)) => format!("{head}server process with PID N."),
            None => l.to_owned(),
        }
    };
    let strip = |s: &str| -> String {
        s.lines()
            .filter(|l| {
                places
                    || (!l.starts_with("LINE ")
                        && l.trim() != "^"
                        && !l.trim_start().starts_with('^'))
            })
            .map(pid)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        strip(&got),
        strip(&expected),
        "{what}: Weir (left) vs Postgres (right)"
    );
}

/// Stored generated columns through psql: `\d`, COPY in and out (their columns left out, or
/// refused by name), notices of ALTER TABLE, as Postgres answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_columns_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE gc (a int, b int GENERATED ALWAYS AS (a * 2) STORED, c text);
\d gc
INSERT INTO gc (a, c) VALUES (1, 'x');
\copy gc from stdin
2	y
3	\N
\.
\copy gc (a, b) from stdin
\.
\copy gc to stdout
\copy gc (a, b) to stdout
SELECT * FROM gc ORDER BY a;
INSERT INTO gc VALUES (5, 10, 'z');
UPDATE gc SET b = 1;
ALTER TABLE gc ALTER COLUMN b DROP DEFAULT;
ALTER TABLE gc ALTER COLUMN a DROP EXPRESSION IF EXISTS;
ALTER TABLE gc ADD COLUMN d int GENERATED ALWAYS AS (a + length(c)) STORED;
SELECT * FROM gc ORDER BY a;
ALTER TABLE gc DROP COLUMN a CASCADE;
\d gc
DROP TABLE gc;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &["generated always as (a * 2) stored", "drop cascades to"],
        "generated columns",
    );
}

/// SQL functions as psql and the catalogs show them: a call's column is named after the
/// function, `\df` lists it with its signature, `pg_proc`, `information_schema.routines`
/// and `parameters` describe it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_functions_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE FUNCTION addx(a integer, b integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT a + b $$;
CREATE FUNCTION twice(bigint) RETURNS bigint LANGUAGE sql AS 'SELECT $1 * 2';
SELECT addx(1, 2), twice(21), addx(1, 2) + 1;
SELECT addx(1, 2) AS s;
\df addx
\df
SELECT proname, prorettype::regtype, proargtypes, prokind, prolang, proargnames FROM pg_proc WHERE proname IN ('addx', 'twice') ORDER BY 1;
SELECT routine_name, routine_type, data_type FROM information_schema.routines WHERE routine_schema = 'public' ORDER BY 1;
SELECT p.parameter_name, p.data_type, p.ordinal_position FROM information_schema.parameters p JOIN information_schema.routines r USING (specific_name) WHERE r.routine_name = 'addx' ORDER BY 3;
CREATE OR REPLACE FUNCTION addx(a integer, b integer) RETURNS integer LANGUAGE sql AS $$ SELECT a + b + 1 $$;
SELECT count(DISTINCT oid) FROM pg_proc WHERE proname = 'addx';
CREATE FUNCTION fx(a int, b numeric(10,2), c varchar(5)) RETURNS int LANGUAGE sql STABLE AS 'select a * 2';
SELECT pg_get_functiondef('fx'::regproc);
SELECT 'fx'::regproc, pg_get_function_arguments('fx'::regproc);
SELECT proname, prosrc, provolatile, proparallel, pronargs, pg_get_function_sqlbody(oid) FROM pg_proc WHERE proname IN ('fx', 'addx') ORDER BY 1;
DROP FUNCTION fx;
DROP FUNCTION addx;
DROP FUNCTION twice;
\df
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "a integer, b integer",
            "{a,b}",
            "FUNCTION",
            "$function$select a * 2$function$",
        ],
        "SQL functions",
    );
}

/// The system column `tableoid` of a table and a catalog, and the psql commands that read
/// it (`\dd`), a function's definition (`\sf`) or extensions' comments (`\dx`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_oid_and_describe_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE tq (a int, CONSTRAINT tq_pos CHECK (a > 0));
INSERT INTO tq VALUES (1);
SELECT tableoid = 'tq'::regclass, a FROM tq;
SELECT t.tableoid::regclass, t.a FROM tq t;
SELECT count(*) > 0 FROM pg_class c WHERE c.tableoid = 'pg_class'::regclass;
SELECT c.relname FROM pg_class c JOIN tq ON c.oid = tq.tableoid;
\dd tq
CREATE FUNCTION tqf(x int) RETURNS int LANGUAGE sql IMMUTABLE AS 'select x + 1';
\sf tqf
DROP FUNCTION tqf;
DROP TABLE tq;
CREATE EXTENSION IF NOT EXISTS pgcrypto;
\dx
SELECT extname, obj_description(oid, 'pg_extension') FROM pg_extension ORDER BY extname;
DROP EXTENSION pgcrypto;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "Object descriptions",
            "CREATE OR REPLACE FUNCTION public.tqf",
            "cryptographic functions",
        ],
        "tableoid and describe",
    );
}

/// Notices and warnings a session gets, as Postgres sends them, and advisory locks across
/// two psql sessions' statements (one session here: re-entrancy and unlocking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_notices_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET CONSTRAINTS ALL DEFERRED;
SELECT pg_advisory_lock(77), pg_advisory_lock(77), pg_try_advisory_lock(1, 2);
SELECT pg_advisory_unlock(77), pg_advisory_unlock(77);
SELECT pg_advisory_unlock_all();
BEGIN;
SELECT pg_try_advisory_xact_lock(78);
SET TRANSACTION READ ONLY;
COMMIT;
SELECT 'a' COLLATE "C" < 'b' AS c_order, 'B' < 'a' COLLATE "POSIX" AS posix_order;
SELECT 'a' COLLATE "de_DE";
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &["SET TRANSACTION can only be used", "c_order"],
        "session notices",
    );
}

/// IF EXISTS / IF NOT EXISTS on something missing or already there: the NOTICE each sends,
/// as Postgres words it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_notices_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE sk (a int);
CREATE TABLE IF NOT EXISTS sk (a int);
CREATE SEQUENCE sk_seq;
CREATE SEQUENCE IF NOT EXISTS sk_seq;
CREATE INDEX sk_a ON sk (a);
CREATE INDEX IF NOT EXISTS sk_a ON sk (a);
DROP TABLE IF EXISTS sk_nope;
DROP TABLE IF EXISTS sk_nope, sk;
DROP VIEW IF EXISTS sk_view;
DROP MATERIALIZED VIEW IF EXISTS sk_mv;
DROP SEQUENCE IF EXISTS sk_seq2, sk_seq;
DROP INDEX IF EXISTS sk_a;
DROP TYPE IF EXISTS sk_type;
ALTER TABLE IF EXISTS sk RENAME TO sk2;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &["already exists, skipping", "does not exist, skipping"],
        "skipping notices",
    );
}

/// COPY's CSV options through psql, in and out, as Postgres reads and writes them: a QUOTE
/// of its own (ESCAPE follows it unless given), FORCE_QUOTE, NULL, HEADER, quoted fields
/// with delimiters, quotes and newlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_csv_options_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE cpx (id int, s text, n numeric(6,2), b boolean);
INSERT INTO cpx VALUES (1, 'plain', 1.5, true), (2, E'tab\there, "quote", comma', NULL, false), (3, '', -0.01, NULL), (4, E'new\nline\\back', 0, true);
\copy (select * from cpx order by id) to stdout with (format csv, header)
\copy (select id, s from cpx order by id) to stdout with (format csv, delimiter ';', quote '''', force_quote (s))
\copy (select * from cpx order by id) to stdout with (format csv, null 'NULL')
\copy (select s from cpx where id = 2) to stdout with (format csv, quote '''', escape '\')
COPY cpx (id, s) FROM stdin WITH (format csv, quote '''');
30,'it''s "x"'
31,'a,b'
\.
COPY cpx (id, s) FROM stdin WITH (format csv, header true);
id,s
32,"quoted, with comma"
33,""
34,
\.
SELECT id, s, s IS NULL AS null_s FROM cpx WHERE id >= 30 ORDER BY id;
DROP TABLE cpx;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &["2;'tab\there, \"quote\", comma'", "quoted, with comma"],
        "COPY CSV options",
    );
}

/// Everyday mistakes, and the errors, hints and warnings Postgres answers them with: a
/// misspelt column (the hint names the nearest one), ORDER BY past the select list, a
/// negative LIMIT/OFFSET, COMMIT and BEGIN where they do nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE mis (id int PRIMARY KEY, name text NOT NULL, amount numeric(5,2));
CREATE TABLE mis2 (id int, names text);
SELECT nme FROM mis;
SELECT mis.nme FROM mis;
SELECT zzzzzz FROM mis;
SELECT nam FROM mis, mis2;
SELECT id FROM mis ORDER BY 5;
SELECT DISTINCT id FROM mis ORDER BY name;
SELECT * FROM mis LIMIT -1;
SELECT * FROM mis OFFSET -1;
SELECT (SELECT id FROM mis UNION SELECT 2);
COMMIT;
ROLLBACK;
BEGIN;
BEGIN;
COMMIT;
DROP TABLE mis, mis2;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "Perhaps you meant to reference the column",
            "LIMIT must not be negative",
        ],
        "mistakes",
    );
}

/// Errors point where Postgres points (psql's `LINE n:` and caret): syntax errors at the
/// token, in Postgres' words (`syntax error at or near ";"`, `unterminated quoted
/// string`); a missing column, table or function at its name; a
/// literal that is no value of its type at the literal; also in the second line of a
/// statement and in the second statement of a message. Text that is no JSON is refused in
/// Postgres' words: the DETAIL its JSON lexer or parser gives (`Token "x" is invalid.`,
/// `Expected ":", but found "1".`) and the CONTEXT (`JSON data, line 1: {"a":x...`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_places_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE plc (id int PRIMARY KEY, name text NOT NULL, born date);
INSERT INTO plc VALUES (1, 'a', '2020-01-01');
SELECT 1 +;
selec 1;
SELECT 1 + * 2;
SELECT id,
  name FROM plc WHERE;
SELECT nosuch FROM plc;
SELECT plc.nosuch
  FROM plc;
SELECT * FROM nosuch_table;
SELECT * FROM public.nosuch_table;
SELECT 'abc'::int;
SELECT * FROM plc WHERE id = 'x1';
INSERT INTO plc VALUES (2, 'b', '2020-13-45');
INSERT INTO plc (id, name, nosuch) VALUES (3, 'c', 1);
UPDATE plc SET nosuch = 1;
ALTER TABLE plc DROP COLUMN nosuch;
SELECT id FROM plc GROUP BY name;
SELECT 1; SELECT nosuch FROM plc;
SELECT 1 + FROM plc;
SELECT FROM where;
SELECT * FROM plc AS order;
SELECT * FROM plc ORDER BY 7;
SELECT '9999999999'::int;
SELECT '{"a":x}'::jsonb;
SELECT '{"a":1,}'::jsonb;
SELECT '[1,2'::json;
SELECT '{"a":1} x'::jsonb;
SELECT E'{"a":\n  tru}'::jsonb;
SELECT '{"a": "\u00zz"}'::jsonb;
SELECT '[1,2,]'::jsonb, 'ok';
SELECT '{"a" 1}'::jsonb;
SELECT '"abc'::jsonb;
SELECT '{"a":"b\q"}'::jsonb;
SELECT E'"a\tb"'::jsonb;
SELECT '{"a":1, "b":2, "c":3, "d":4, "e":5, "f":6, "g":7, "h":8, "i": x}'::jsonb;
SELECT '01'::jsonb;
SELECT '-'::jsonb;
CREATE TABLE plc_json (id int, j jsonb);
COPY plc_json FROM STDIN;
1	{"a":1}
2	{"a":x}
\.
COPY plc_json FROM STDIN (FORMAT csv);
1,"[1,2"
\.
SELECT count(*) FROM plc_json;
DROP TABLE plc_json;
SELECT * FROM plc WHERE id = name;
SELECT * FROM plc WHERE name <> id;
SELECT * FROM plc WHERE born = name || 'x';
SELECT id AS k FROM plc ORDER BY k + 1;
SELECT count(*) AS n FROM plc GROUP BY name ORDER BY n + 0;
SELECT sum('1');
SELECT stddev_pop('x');
SELECT 'a'::nosuchtype;
SELECT CAST(1 AS nosuch);
SELECT NULL::nosuch[];
SELECT 'a'::public.nosuch;
CREATE TABLE plc_t (a int, b nosuchtype);
CREATE TABLE plc_t (a nosuch[]);
CREATE TABLE plc_t (a int DEFAULT 1::nosuch);
CREATE TABLE plc_t (a int DEFAULT nosuchfunc());
CREATE TABLE plc_t (a int DEFAULT 'abc'::int + 1);
CREATE TABLE plc_t (a int DEFAULT (SELECT 1));
CREATE DOMAIN plc_d AS nosuch;
DROP TYPE nosuch;
ALTER TABLE plc ALTER COLUMN name SET DEFAULT nosuchfunc();
ALTER TABLE plc ALTER COLUMN born SET DEFAULT 'zz';
ALTER TABLE plc ADD COLUMN z nosuchtype;
ALTER TABLE plc ALTER COLUMN born TYPE nosuchtype;
SELECT nosuchfunc();
SELECT nosuchfunc(1, 'a', -2.5, NULL, true, 5000000000);
SELECT lower(1, 2, 3);
SELECT 1::"int4", 'abcdef'::"varchar"(3), 'a'::"char", '1'::"INT4";
DROP TABLE plc;
SELECT 1, 'it''s"#;
    same_psql_output_and_places(
        &pg,
        &weir,
        script,
        &[
            "LINE 2:",
            "syntax error at or near",
            "unterminated quoted string",
        ],
        "error places",
    );
}

/// DROP ... CASCADE says what else it drops, in one NOTICE (views, views over views,
/// foreign keys of other tables), as Postgres does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_notices_answer_as_postgres() {
    let pg = Postgres::start();
    let weir = TestServer::start();
    let script = r#"
CREATE TABLE cdd (a int PRIMARY KEY);
CREATE VIEW cdv1 AS SELECT * FROM cdd;
CREATE VIEW cdv2 AS SELECT a FROM cdv1;
CREATE TABLE cdc (a int REFERENCES cdd);
DROP TABLE cdd CASCADE;
CREATE TABLE cdd (a int PRIMARY KEY);
CREATE VIEW cdv3 AS SELECT * FROM cdd;
DROP TABLE cdd CASCADE;
CREATE TABLE cdd (a int PRIMARY KEY);
ALTER TABLE cdc ADD FOREIGN KEY (a) REFERENCES cdd;
DROP TABLE cdd CASCADE;
DROP TABLE cdc;
"#;
    same_psql_output(
        &pg,
        &weir,
        script,
        &[
            "drop cascades to 3 other objects",
            "drop cascades to view cdv3",
        ],
        "cascade notices",
    );
}
