//! Randomized event-time test: out-of-order rows (disorder below the watermark delay), rows
//! late by less and by more than each view's allowed lateness, FLUSH between phases. Every
//! windowed view is compared with a model computed here from the rows that view admitted
//! (all windows for continuous views, closed windows only under EMIT ON WINDOW CLOSE), late
//! counts must be exact, and interval and temporal joins are checked the same way. A
//! failure prints the seed and the command that replays it.

use std::collections::{BTreeMap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::harness::{TestServer, describe_error, query_text};

const SEC: i64 = 1_000_000;
const DELAY: i64 = 10 * SEC;
const BASE: i64 = 1_704_067_200 * SEC; // 2024-01-01 00:00:00 UTC

fn ts_text(us: i64) -> String {
    let dt = chrono::DateTime::from_timestamp_micros(us).expect("timestamp");
    dt.naive_utc().format("%Y-%m-%d %H:%M:%S%.f").to_string()
}

/// Postgres' text for a timestamp column.
fn pg_ts(us: i64) -> String {
    let s = ts_text(us);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

struct ViewSpec {
    name: &'static str,
    sql: &'static str,
    lateness: i64,
}

const VIEWS: &[ViewSpec] = &[
    ViewSpec {
        name: "tumble_live",
        sql: "CREATE MATERIALIZED VIEW tumble_live AS SELECT window_start, window_end, k, count(*) AS n, sum(v) AS s FROM TUMBLE(ev, ts, INTERVAL '1 minute') GROUP BY window_start, window_end, k",
        lateness: 0,
    },
    ViewSpec {
        name: "tumble_close",
        sql: "CREATE MATERIALIZED VIEW tumble_close AS SELECT window_start, window_end, k, count(*) AS n, sum(v) AS s FROM TUMBLE(ev, ts, INTERVAL '1 minute') GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE",
        lateness: 0,
    },
    ViewSpec {
        name: "tumble_fixed",
        sql: "CREATE MATERIALIZED VIEW tumble_fixed WITH (late_events = 'correct', allowed_lateness = '30 seconds') AS SELECT window_start, window_end, k, count(*) AS n, sum(v) AS s FROM TUMBLE(ev, ts, INTERVAL '1 minute') GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE",
        lateness: 30 * SEC,
    },
    ViewSpec {
        name: "hop_live",
        sql: "CREATE MATERIALIZED VIEW hop_live WITH (late_events = 'correct', allowed_lateness = '20 seconds') AS SELECT window_start, window_end, k, count(*) AS n, sum(v) AS s FROM HOP(ev, ts, INTERVAL '20 seconds', INTERVAL '1 minute') GROUP BY window_start, window_end, k",
        lateness: 20 * SEC,
    },
    ViewSpec {
        name: "sessions",
        sql: "CREATE MATERIALIZED VIEW sessions WITH (late_events = 'correct', allowed_lateness = '1 minute') AS SELECT window_start, window_end, k, count(*) AS n, sum(v) AS s FROM SESSION(ev, ts, INTERVAL '15 seconds') GROUP BY window_start, window_end, k",
        lateness: 60 * SEC,
    },
    ViewSpec {
        name: "sessions_close",
        sql: "CREATE MATERIALIZED VIEW sessions_close AS SELECT window_start, window_end, k, count(*) AS n, sum(v) AS s FROM SESSION(ev, ts, INTERVAL '15 seconds') GROUP BY window_start, window_end, k EMIT ON WINDOW CLOSE",
        lateness: 0,
    },
    ViewSpec {
        name: "over_close",
        sql: "CREATE MATERIALIZED VIEW over_close AS SELECT k, v, ts, sum(v) OVER (PARTITION BY k ORDER BY ts, v) AS run, row_number() OVER (PARTITION BY k ORDER BY ts, v) AS rn FROM ev EMIT ON WINDOW CLOSE",
        lateness: 0,
    },
    ViewSpec {
        name: "cep_drop",
        sql: "CREATE MATERIALIZED VIEW cep_drop AS SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(a.ts) AS s, LAST(b.ts) AS e, COUNT(b.*) AS n, sum(b.v) AS sv PATTERN (a b+) WITHIN INTERVAL '30 seconds' DEFINE a AS v % 2 = 0, b AS v % 2 = 1) AS m",
        lateness: 0,
    },
    ViewSpec {
        name: "cep_fixed",
        sql: "CREATE MATERIALIZED VIEW cep_fixed WITH (late_events = 'correct', allowed_lateness = '30 seconds') AS SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(a.ts) AS s, LAST(b.ts) AS e, COUNT(b.*) AS n, sum(b.v) AS sv PATTERN (a b+) WITHIN INTERVAL '30 seconds' DEFINE a AS v % 2 = 0, b AS v % 2 = 1) AS m",
        lateness: 30 * SEC,
    },
    ViewSpec {
        name: "joined",
        sql: "CREATE MATERIALIZED VIEW joined AS SELECT e.v, f.w FROM ev e JOIN ev2 f ON e.k = f.k AND e.ts BETWEEN f.ts - INTERVAL '5 seconds' AND f.ts + INTERVAL '5 seconds'",
        lateness: 0,
    },
    ViewSpec {
        name: "looked_up",
        sql: "CREATE MATERIALIZED VIEW looked_up AS SELECT e.v, d.label FROM ev e LEFT JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() d ON e.k = d.k",
        lateness: 0,
    },
];

const TOP_FIXED: &str = "CREATE MATERIALIZED VIEW top_fixed AS SELECT window_start, window_end, k, n FROM (SELECT window_start, window_end, k, n, row_number() OVER (PARTITION BY window_start ORDER BY n DESC, k) AS r FROM tumble_fixed) x WHERE r <= 1";

/// The expected `top_fixed`: per window of `tumble_fixed`, the key with the most rows
/// (the smallest key among equals).
fn top_per_window(windows: &[String]) -> Vec<String> {
    let mut best: BTreeMap<String, (i64, i64, String)> = BTreeMap::new();
    for w in windows {
        let f: Vec<&str> = w.split('|').collect();
        let (k, n): (i64, i64) = (f[2].parse().unwrap(), f[3].parse().unwrap());
        let e = best
            .entry(f[0].to_owned())
            .or_insert((n, k, f[1].to_owned()));
        if n > e.0 || (n == e.0 && k < e.1) {
            *e = (n, k, f[1].to_owned());
        }
    }
    let mut out: Vec<String> = best
        .into_iter()
        .map(|(ws, (n, k, we))| format!("{ws}|{we}|{k}|{n}"))
        .collect();
    out.sort();
    out
}

#[derive(Clone)]
struct Row {
    k: i64,
    v: i64,
    ts: i64,
}

#[derive(Default)]
struct Model {
    /// per stream: watermark after the batches so far
    wm: HashMap<&'static str, Option<i64>>,
    /// per view: rows admitted (ev rows, in arrival order)
    admitted: HashMap<&'static str, Vec<Row>>,
    late: HashMap<&'static str, u64>,
    /// ev2 rows admitted by `joined`
    ev2_admitted: Vec<Row>,
    /// `looked_up` expected output: (v, label)
    looked_up: Vec<(i64, Option<String>)>,
    dim: BTreeMap<i64, String>,
}

impl Model {
    fn insert(&mut self, stream: &'static str, rows: &[Row]) {
        let before = self.wm.get(stream).copied().flatten();
        for spec in VIEWS {
            let applies = match stream {
                "ev" => true,
                _ => spec.name == "joined",
            };
            if !applies {
                continue;
            }
            for r in rows {
                let ok = before.is_none_or(|w| r.ts >= w - spec.lateness);
                if ok {
                    if stream == "ev" {
                        self.admitted.entry(spec.name).or_default().push(r.clone());
                    } else {
                        self.ev2_admitted.push(r.clone());
                    }
                } else {
                    *self.late.entry(spec.name).or_default() += 1;
                }
            }
        }
        if stream == "ev" {
            // the temporal join sees the table as it is now (its rows are admitted: lateness 0
            // but a LEFT JOIN keeps every admitted row)
            let admitted_now: Vec<Row> = rows
                .iter()
                .filter(|r| before.is_none_or(|w| r.ts >= w))
                .cloned()
                .collect();
            for r in admitted_now {
                self.looked_up.push((r.v, self.dim.get(&r.k).cloned()));
            }
        }
        let max = rows.iter().map(|r| r.ts).max();
        if let Some(m) = max {
            let w = m - DELAY;
            self.wm.insert(stream, Some(before.map_or(w, |b| b.max(w))));
        }
    }

    fn windows(&self, view: &str, size: i64, hop: i64, closed_only: bool) -> Vec<String> {
        let wm = self.wm.get("ev").copied().flatten();
        let mut groups: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
        for r in self.admitted.get(view).map(|v| v.as_slice()).unwrap_or(&[]) {
            let last_start = r.ts.div_euclid(hop) * hop;
            let mut start = last_start;
            while start > r.ts - size {
                let e = groups.entry((start, r.k)).or_default();
                e.0 += 1;
                e.1 += r.v;
                start -= hop;
            }
        }
        let mut out: Vec<String> = groups
            .into_iter()
            .filter(|((start, _), _)| !closed_only || wm.is_some_and(|w| start + size <= w))
            .map(|((start, k), (n, s))| {
                format!("{}|{}|{k}|{n}|{s}", pg_ts(start), pg_ts(start + size))
            })
            .collect();
        out.sort();
        out
    }

    /// `over_close`: per key, the admitted rows in (ts, v) order with their running sum and
    /// row number, those the watermark has passed.
    fn over_close(&self) -> Vec<String> {
        let wm = self.wm.get("ev").copied().flatten();
        let mut by_key: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
        for r in self
            .admitted
            .get("over_close")
            .map(|v| v.as_slice())
            .unwrap_or(&[])
        {
            by_key.entry(r.k).or_default().push(r);
        }
        let mut out = Vec::new();
        for (k, mut rows) in by_key {
            rows.sort_by_key(|r| (r.ts, r.v));
            let mut run = 0;
            for (i, r) in rows.iter().enumerate() {
                run += r.v;
                if wm.is_some_and(|w| r.ts < w) {
                    out.push(format!("{k}|{}|{}|{run}|{}", r.v, pg_ts(r.ts), i + 1));
                }
            }
        }
        out.sort();
        out
    }

    /// `cep_*`: per key, the admitted rows in (ts, v) order; rows before the watermark are
    /// final; from each start row in order: an even `v`, then the longest run of odd `v`
    /// within 30 s of it; a run that reaches the last final row waits unless the watermark
    /// has passed its 30 s (then nothing later can join it), and the scan stops there.
    fn cep(&self, view: &str) -> Vec<String> {
        let within = 30 * SEC;
        let Some(wm) = self.wm.get("ev").copied().flatten() else {
            return Vec::new();
        };
        let mut by_key: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
        for r in self.admitted.get(view).map(|v| v.as_slice()).unwrap_or(&[]) {
            by_key.entry(r.k).or_default().push(r);
        }
        let mut out = Vec::new();
        for (k, mut rows) in by_key {
            rows.sort_by_key(|r| (r.ts, r.v));
            let fin: Vec<&Row> = rows.into_iter().filter(|r| r.ts < wm).collect();
            let mut s = 0;
            while s < fin.len() {
                if fin[s].v % 2 != 0 {
                    s += 1;
                    continue;
                }
                let mut j = s + 1;
                while j < fin.len() && fin[j].ts - fin[s].ts < within && fin[j].v % 2 != 0 {
                    j += 1;
                }
                if j == fin.len() && wm < fin[s].ts + within {
                    break;
                }
                if j == s + 1 {
                    s += 1;
                    continue;
                }
                let b = &fin[s + 1..j];
                out.push(format!(
                    "{k}|{}|{}|{}|{}",
                    pg_ts(fin[s].ts),
                    pg_ts(b[b.len() - 1].ts),
                    b.len(),
                    b.iter().map(|r| r.v).sum::<i64>()
                ));
                s = j;
            }
        }
        out.sort();
        out
    }

    fn sessions(&self, view: &str, gap: i64, closed_only: bool) -> Vec<String> {
        let wm = self.wm.get("ev").copied().flatten();
        let mut by_key: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
        for r in self.admitted.get(view).map(|v| v.as_slice()).unwrap_or(&[]) {
            by_key.entry(r.k).or_default().push(r);
        }
        let mut out = Vec::new();
        for (k, mut rows) in by_key {
            rows.sort_by_key(|r| r.ts);
            let mut i = 0;
            while i < rows.len() {
                let start = rows[i].ts;
                let mut last = start;
                let (mut n, mut s) = (0, 0);
                while i < rows.len() && (n == 0 || rows[i].ts - last < gap) {
                    last = rows[i].ts;
                    n += 1;
                    s += rows[i].v;
                    i += 1;
                }
                if closed_only && wm.is_none_or(|w| last + gap > w) {
                    continue;
                }
                out.push(format!(
                    "{}|{}|{k}|{n}|{s}",
                    pg_ts(start),
                    pg_ts(last + gap)
                ));
            }
        }
        out.sort();
        out
    }

    fn joined(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in self
            .admitted
            .get("joined")
            .map(|v| v.as_slice())
            .unwrap_or(&[])
        {
            for b in &self.ev2_admitted {
                if a.k == b.k && a.ts >= b.ts - 5 * SEC && a.ts <= b.ts + 5 * SEC {
                    out.push(format!("{}|{}", a.v, b.v));
                }
            }
        }
        out.sort();
        out
    }
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

fn check(seed: u64, phase: usize, what: &str, got: Vec<String>, want: Vec<String>) {
    if got != want {
        let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
        let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
        panic!(
            "event-time mismatch, seed {seed}, phase {phase}, {what}: view has {} rows, model {}\n  \
             only in view: {extra:?}\n  only in model: {missing:?}\n\
             replay: WEIR_EVENT_SEED={seed} cargo test --test integration event_time",
            got.len(),
            want.len()
        );
    }
}

async fn verify(c: &Client, m: &Model, seed: u64, phase: usize) {
    c.batch_execute("FLUSH").await.unwrap();
    check(
        seed,
        phase,
        "over_close",
        rows(c, "SELECT k, v, ts, run, rn FROM over_close").await,
        m.over_close(),
    );
    for v in ["cep_drop", "cep_fixed"] {
        check(
            seed,
            phase,
            v,
            rows(c, &format!("SELECT k, s, e, n, sv FROM {v}")).await,
            m.cep(v),
        );
    }
    let q = |v: &str| format!("SELECT window_start, window_end, k, n, s FROM {v}");
    check(
        seed,
        phase,
        "tumble_live",
        rows(c, &q("tumble_live")).await,
        m.windows("tumble_live", 60 * SEC, 60 * SEC, false),
    );
    check(
        seed,
        phase,
        "tumble_close",
        rows(c, &q("tumble_close")).await,
        m.windows("tumble_close", 60 * SEC, 60 * SEC, true),
    );
    check(
        seed,
        phase,
        "tumble_fixed",
        rows(c, &q("tumble_fixed")).await,
        m.windows("tumble_fixed", 60 * SEC, 60 * SEC, true),
    );
    check(
        seed,
        phase,
        "top_fixed",
        rows(c, "SELECT window_start, window_end, k, n FROM top_fixed").await,
        top_per_window(&m.windows("tumble_fixed", 60 * SEC, 60 * SEC, true)),
    );
    check(
        seed,
        phase,
        "hop_live",
        rows(c, &q("hop_live")).await,
        m.windows("hop_live", 60 * SEC, 20 * SEC, false),
    );
    check(
        seed,
        phase,
        "sessions",
        rows(c, &q("sessions")).await,
        m.sessions("sessions", 15 * SEC, false),
    );
    check(
        seed,
        phase,
        "sessions_close",
        rows(c, &q("sessions_close")).await,
        m.sessions("sessions_close", 15 * SEC, true),
    );
    check(
        seed,
        phase,
        "joined",
        rows(c, "SELECT v, w FROM joined").await,
        m.joined(),
    );
    let mut want: Vec<String> = m
        .looked_up
        .iter()
        .map(|(v, l)| format!("{v}|{}", l.clone().unwrap_or_else(|| "NULL".into())))
        .collect();
    want.sort();
    check(
        seed,
        phase,
        "looked_up",
        rows(c, "SELECT v, label FROM looked_up").await,
        want,
    );
    for spec in VIEWS {
        let got = query_text(
            c,
            &format!(
                "SELECT late_rows_dropped FROM weir_views WHERE view_name = '{}'",
                spec.name
            ),
        )
        .await;
        let want = m.late.get(spec.name).copied().unwrap_or(0).to_string();
        assert_eq!(
            got[0][0], want,
            "seed {seed}, phase {phase}: late count of {} (replay: WEIR_EVENT_SEED={seed})",
            spec.name
        );
    }
}

async fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '10 seconds') APPEND ONLY; \
         CREATE TABLE ev2 (k BIGINT, w BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '10 seconds') APPEND ONLY; \
         CREATE TABLE dim (k BIGINT PRIMARY KEY, label TEXT)",
    )
    .await
    .unwrap();
    for spec in VIEWS {
        c.batch_execute(spec.sql)
            .await
            .unwrap_or_else(|e| panic!("{}: {}", spec.name, describe_error(&e)));
    }
    // window top-N over a view whose closed windows are corrected by late rows: it must
    // keep each window until the corrections stop (the view's watermark trails its lateness)
    c.batch_execute(TOP_FIXED)
        .await
        .unwrap_or_else(|e| panic!("top_fixed: {}", describe_error(&e)));
    let mut m = Model::default();
    let mut now = BASE;
    let mut next_v = 1i64;
    for phase in 0..6 {
        for _ in 0..rng.random_range(3..8) {
            match rng.random_range(0..10) {
                0 => {
                    // the lookup table changes
                    let k = rng.random_range(0..4);
                    let label = format!("L{}", rng.random_range(0..100));
                    c.batch_execute(&format!(
                        "DELETE FROM dim WHERE k = {k}; INSERT INTO dim VALUES ({k}, '{label}')"
                    ))
                    .await
                    .unwrap();
                    m.dim.insert(k, label);
                }
                1 | 2 => {
                    let rows: Vec<Row> = (0..rng.random_range(1..4))
                        .map(|_| {
                            let r = Row {
                                k: rng.random_range(0..4),
                                v: next_v,
                                ts: now + rng.random_range(-8 * SEC..8 * SEC),
                            };
                            next_v += 1;
                            r
                        })
                        .collect();
                    insert(&c, "ev2", &rows).await;
                    m.insert("ev2", &rows);
                }
                _ => {
                    now += rng.random_range(0..15) * SEC;
                    let rows: Vec<Row> = (0..rng.random_range(1..6))
                        .map(|_| {
                            // mostly in order within the delay; sometimes late by less than
                            // the lateness of some views, sometimes by more than all
                            let ts = match rng.random_range(0..10) {
                                0 => now - rng.random_range(15..45) * SEC,
                                1 => now - rng.random_range(90..300) * SEC,
                                _ => now - rng.random_range(0..9) * SEC,
                            };
                            let r = Row {
                                k: rng.random_range(0..4),
                                v: next_v,
                                ts,
                            };
                            next_v += 1;
                            r
                        })
                        .collect();
                    insert(&c, "ev", &rows).await;
                    m.insert("ev", &rows);
                }
            }
        }
        verify(&c, &m, seed, phase).await;
    }
    // state is bounded: after the stream moves on, closed windows' state is freed
    let state = query_text(
        &c,
        "SELECT view_name, operator, state_rows FROM weir_operator_state WHERE view_name = 'tumble_close' AND operator = 'Aggregate'",
    )
    .await;
    let groups: usize = state[0][2].parse().unwrap();
    assert!(
        groups <= 4 * 2,
        "seed {seed}: tumble_close holds {groups} groups (expected only open windows)"
    );
}

async fn insert(c: &Client, table: &str, rows: &[Row]) {
    let values: Vec<String> = rows
        .iter()
        .map(|r| format!("({}, {}, '{}')", r.k, r.v, ts_text(r.ts)))
        .collect();
    c.batch_execute(&format!("INSERT INTO {table} VALUES {}", values.join(", ")))
        .await
        .unwrap_or_else(|e| panic!("insert: {}", describe_error(&e)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_views_match_the_model() {
    let seeds: Vec<u64> = match std::env::var("WEIR_EVENT_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_EVENT_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("WEIR_EVENT_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(10);
            let base: u64 = rand::rng().random_range(0..1_000_000);
            (base..base + n).collect()
        }
    };
    println!("event-time seeds {seeds:?}");
    for seed in seeds {
        run_seed(seed).await;
    }
}

/// Sum of operator state rows of a view.
async fn state_rows(c: &Client, view: &str) -> usize {
    let r = query_text(
        c,
        &format!("SELECT sum(state_rows) FROM weir_operator_state WHERE view_name = '{view}'"),
    )
    .await;
    r[0][0].parse().unwrap_or(0)
}

async fn wait_for_rows(c: &Client, view: &str, rows: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let r = query_text(
            c,
            &format!("SELECT min(rows) FROM weir_sources WHERE view_name = '{view}'"),
        )
        .await;
        if r[0][0].parse::<i64>().unwrap_or(0) >= rows {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{view}: the source did not reach {rows} rows in time"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// On an endless stream (an unbounded datagen source), windowed aggregates, sessions, an
/// interval join, MATCH_RECOGNIZE, window functions under EMIT ON WINDOW CLOSE and an ASOF
/// join of two streams free their state as the watermark moves: state after 4x the rows is no
/// larger than a small multiple of what it was, while the rows keep flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_stays_flat_on_an_endless_stream() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE SOURCE ev (k BIGINT, v BIGINT, ts TIMESTAMP, \
           WATERMARK FOR ts AS ts - INTERVAL '1 second') \
         WITH (connector = 'datagen', fields.k.min = '0', fields.k.max = '999', \
               datagen.time.step.ms = '10'); \
         CREATE MATERIALIZED VIEW tumbling AS SELECT window_start, window_end, k, count(*) AS n \
           FROM TUMBLE(ev, ts, INTERVAL '1 second') GROUP BY window_start, window_end, k; \
         CREATE MATERIALIZED VIEW closing AS SELECT window_start, window_end, sum(v) AS s \
           FROM TUMBLE(ev, ts, INTERVAL '1 second') GROUP BY window_start, window_end \
           EMIT ON WINDOW CLOSE; \
         CREATE MATERIALIZED VIEW hopping AS SELECT window_start, window_end, max(v) AS m \
           FROM HOP(ev, ts, INTERVAL '1 second', INTERVAL '5 seconds') GROUP BY window_start, window_end; \
         CREATE MATERIALIZED VIEW sessions AS SELECT k, window_start, window_end, count(*) AS n \
           FROM SESSION(ev, ts, INTERVAL '50 milliseconds') GROUP BY k, window_start, window_end; \
         CREATE MATERIALIZED VIEW pairs AS SELECT a.k, a.v AS av, b.v AS bv FROM ev a JOIN ev b \
           ON a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL '100 milliseconds' AND b.ts; \
         CREATE MATERIALIZED VIEW cep AS SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k \
           ORDER BY ts MEASURES FIRST(a.ts) AS s, COUNT(b.*) AS n PATTERN (a b+ c) \
           WITHIN INTERVAL '1 second' DEFINE a AS v % 3 = 0, b AS v % 3 = 1, c AS v % 3 = 2) AS m; \
         CREATE MATERIALIZED VIEW running AS SELECT k, ts, v, \
           sum(v) OVER (PARTITION BY k ORDER BY ts) AS run, lag(v, 2) OVER (PARTITION BY k ORDER BY ts) AS prev, \
           row_number() OVER (PARTITION BY k ORDER BY ts) AS rn, max(v) OVER (PARTITION BY k ORDER BY ts) AS hi \
           FROM ev EMIT ON WINDOW CLOSE; \
         CREATE MATERIALIZED VIEW asof AS SELECT a.k, a.ts, a.v, b.v AS before \
           FROM ev a ASOF JOIN ev b ON a.k = b.k AND a.ts > b.ts",
    )
    .await
    .unwrap_or_else(|e| panic!("setup: {}", describe_error(&e)));
    let views = [
        "tumbling", "closing", "hopping", "sessions", "pairs", "cep", "running", "asof",
    ];
    for v in views {
        wait_for_rows(&c, v, 50_000).await;
    }
    let mut early = Vec::new();
    for v in views {
        early.push(state_rows(&c, v).await);
    }
    for v in views {
        wait_for_rows(&c, v, 200_000).await;
    }
    for (v, before) in views.iter().zip(early) {
        let after = state_rows(&c, v).await;
        eprintln!("{v}: state {before} -> {after}");
        // a source batch (4,096 rows, 41 seconds of event time) is in flight at most
        assert!(
            after <= 2 * before + 5_000,
            "{v}: state grew from {before} to {after} rows while the stream went on"
        );
    }
    let late = query_text(&c, "SELECT sum(late_rows_dropped) FROM weir_views").await;
    assert_eq!(late[0][0], "0", "the generator is in order");
}

/// One COPY of 300,000 rows into a table with a watermark: applied in chunks of a graph
/// pass's rows, each with the watermark after its rows, so one epoch runs as passes that
/// close windows (and free their state) as they go. Every windowed view — tumbling, hopping,
/// EMIT ON WINDOW CLOSE — equals the same query run one-shot over the table (closed windows
/// only for the last), with nothing dropped as late (the disorder is below the delay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_run_in_passes_closes_windows_as_one_epoch_would() {
    use futures::SinkExt;
    const ROWS: i64 = 300_000;
    let server = TestServer::start();
    let c = server.connect().await;
    let tumble = "SELECT k, window_start, count(*) AS n, sum(v) AS s \
                  FROM TUMBLE(ev, ts, INTERVAL '10 seconds') GROUP BY k, window_start, window_end";
    let hop = "SELECT k, window_start, max(v) AS m \
               FROM HOP(ev, ts, INTERVAL '2 seconds', INTERVAL '10 seconds') GROUP BY k, window_start, window_end";
    let closing = "SELECT window_start, window_end, count(*) AS n, sum(v) AS s \
                   FROM TUMBLE(ev, ts, INTERVAL '5 seconds') GROUP BY window_start, window_end";
    c.batch_execute(&format!(
        "CREATE TABLE ev (k BIGINT, v BIGINT, ts TIMESTAMP, \
           WATERMARK FOR ts AS ts - INTERVAL '2 seconds') APPEND ONLY; \
         CREATE MATERIALIZED VIEW tumbling AS {tumble}; \
         CREATE MATERIALIZED VIEW hopping AS {hop}; \
         CREATE MATERIALIZED VIEW closing AS {closing} EMIT ON WINDOW CLOSE"
    ))
    .await
    .unwrap_or_else(|e| panic!("setup: {}", describe_error(&e)));
    let sink = c
        .copy_in::<_, bytes::Bytes>("COPY ev FROM STDIN WITH (FORMAT csv)")
        .await
        .expect("copy starts");
    futures::pin_mut!(sink);
    let mut text = String::new();
    for i in 0..ROWS {
        // 1 ms apart, up to 999 ms out of order (below the 2 s delay)
        let ts = BASE + i * 1_000 - (i * 7_919 % 1_000) * 1_000;
        text.push_str(&format!("{},{},{}\n", i % 97, i % 1_000, ts_text(ts)));
        if text.len() > 60_000 {
            sink.send(bytes::Bytes::from(std::mem::take(&mut text)))
                .await
                .unwrap();
        }
    }
    sink.send(bytes::Bytes::from(text)).await.unwrap();
    assert_eq!(sink.finish().await.expect("COPY"), ROWS as u64);
    c.batch_execute("FLUSH").await.unwrap();
    for (view, sql) in [("tumbling", tumble), ("hopping", hop)] {
        let got = rows(&c, &format!("SELECT * FROM {view}")).await;
        let want = rows(&c, sql).await;
        assert!(want.len() > 1_000, "{view}: {} windows", want.len());
        assert_eq!(got, want, "{view} against the one-shot query");
    }
    let got = rows(&c, "SELECT * FROM closing").await;
    let want = rows(
        &c,
        &format!(
            "SELECT * FROM ({closing}) w \
             WHERE window_end <= (SELECT max(ts) FROM ev) - INTERVAL '2 seconds'"
        ),
    )
    .await;
    assert!(want.len() > 50, "closing: {} windows", want.len());
    assert_eq!(got, want, "closing against the one-shot query");
    let late = query_text(&c, "SELECT sum(late_rows_dropped) FROM weir_views").await;
    assert_eq!(late[0][0], "0", "no row is late");
}
