//! The oracle (DESIGN §3): random INSERT/UPDATE/DELETE on tables with keys and NULLs,
//! `FLUSH`, then every materialized view must equal its query run one-shot over the same
//! tables. Each seed also kills the server (SIGKILL) once and checks the views after the
//! restart. A failure prints its seed and the command that replays it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::harness::{TestServer, describe_error, query_text};

const TABLES: &str = "
CREATE TABLE t1 (id INT PRIMARY KEY, g INT, v INT, s TEXT, b BOOLEAN);
CREATE TABLE t2 (id INT PRIMARY KEY, g INT, w NUMERIC(10,2));
CREATE TABLE t3 (k INT, x INT);
CREATE TABLE t4 (id INT PRIMARY KEY, g INT, f DOUBLE PRECISION);
";

/// (name, query): one view per construct the engine maintains.
const VIEWS: &[(&str, &str)] = &[
    (
        "v_filter",
        "SELECT id, v * 2 + 1 AS v2, upper(s) AS us, coalesce(g, -1) AS g FROM t1 WHERE v > 10 OR s IS NULL",
    ),
    (
        "v_group",
        "SELECT g, count(*) AS n, count(v) AS nv, count(DISTINCT v) AS dv, sum(v) AS sv, \
         avg(v) AS av, min(v) AS lo, max(s) AS hs, bool_and(b) AS ba, bool_or(b) AS bo, \
         string_agg(s, ',' ORDER BY s) AS ss, array_agg(v ORDER BY v) AS vs \
         FROM t1 GROUP BY g",
    ),
    (
        "v_having",
        "SELECT g, sum(v) AS s FROM t1 GROUP BY g HAVING count(*) > 1",
    ),
    (
        "v_global",
        "SELECT count(*) AS n, sum(v) AS s, min(s) AS lo, max(v) AS hi, avg(v) AS a FROM t1",
    ),
    (
        "v_global_t3",
        "SELECT count(*) AS n, sum(x) AS s FROM t3 WHERE x > 1000",
    ),
    (
        "v_numeric",
        "SELECT g, sum(w) AS sw, avg(w) AS aw, min(w) AS mw FROM t2 GROUP BY g",
    ),
    (
        "v_inner",
        "SELECT t1.id, t2.id AS id2, t1.v, t2.w FROM t1 JOIN t2 ON t1.g = t2.g AND t1.v < t2.id * 10",
    ),
    (
        "v_left",
        "SELECT t1.id, t2.id AS id2 FROM t1 LEFT JOIN t2 ON t1.g = t2.g",
    ),
    (
        "v_right",
        "SELECT t1.id, t2.id AS id2 FROM t1 RIGHT JOIN t2 ON t1.v = t2.g",
    ),
    (
        "v_full",
        "SELECT t2.id AS id2, t3.k, t3.x FROM t2 FULL JOIN t3 ON t2.g = t3.k",
    ),
    (
        "v_multi",
        "SELECT t1.id, t2.id AS id2, t3.x FROM t1 JOIN t2 ON t1.g = t2.g LEFT JOIN t3 ON t3.k = t2.id",
    ),
    ("v_in", "SELECT id, g FROM t1 WHERE g IN (SELECT g FROM t2)"),
    (
        "v_exists",
        "SELECT id FROM t2 WHERE EXISTS (SELECT 1 FROM t3 WHERE t3.k = t2.g AND t3.x > t2.id)",
    ),
    (
        "v_not_exists",
        "SELECT id FROM t1 WHERE NOT EXISTS (SELECT 1 FROM t2 WHERE t2.g = t1.g)",
    ),
    (
        "v_union_all",
        "SELECT g FROM t1 UNION ALL SELECT g FROM t2 UNION ALL SELECT k FROM t3",
    ),
    ("v_union", "SELECT g FROM t1 UNION SELECT k FROM t3"),
    ("v_distinct", "SELECT DISTINCT g, b FROM t1"),
    (
        "v_topn",
        "SELECT id, v FROM t1 ORDER BY v DESC NULLS LAST, id LIMIT 3",
    ),
    (
        "v_topn_offset",
        "SELECT id, v FROM t1 ORDER BY v, id LIMIT 4 OFFSET 2",
    ),
    (
        "v_rownum",
        "SELECT * FROM (SELECT id, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC, id) AS r FROM t1) AS x WHERE r <= 2",
    ),
    (
        "v_join_agg",
        "SELECT t2.g, count(*) AS n, sum(t1.v) AS s FROM t1 JOIN t2 ON t1.g = t2.g GROUP BY t2.g",
    ),
    (
        "v_scalar_subquery",
        "SELECT id FROM t1 WHERE v > (SELECT avg(x) FROM t3)",
    ),
    // views over views
    (
        "v_over_view",
        "SELECT g, count(*) AS n, max(s) AS ms FROM v_inner JOIN t1 ON v_inner.id = t1.id GROUP BY g",
    ),
    (
        "v_over_group",
        "SELECT n, count(*) AS groups FROM v_group GROUP BY n",
    ),
    // float sums under retractions, with huge and tiny magnitudes, NaN and infinities
    (
        "v_float",
        "SELECT g, sum(f) AS s, avg(f) AS a, count(f) AS n FROM t4 GROUP BY g",
    ),
    ("v_float_global", "SELECT sum(f) AS s, avg(f) AS a FROM t4"),
    // window functions over every row (ORDER BY a key, so row numbers are determined)
    (
        "v_over_running",
        "SELECT id, g, v, row_number() OVER (PARTITION BY g ORDER BY id) AS rn, \
         sum(v) OVER (PARTITION BY g ORDER BY id) AS run, \
         lag(v, 1, -1) OVER (PARTITION BY g ORDER BY id) AS prev, \
         lead(s) OVER (PARTITION BY g ORDER BY id) AS nxt FROM t1",
    ),
    (
        "v_over_ranks",
        "SELECT id, rank() OVER (ORDER BY v) AS rk, dense_rank() OVER (ORDER BY v) AS dr, \
         count(*) OVER (PARTITION BY g) AS n FROM t1",
    ),
    (
        "v_over_frames",
        "SELECT id, sum(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS ma, \
         first_value(v) OVER (PARTITION BY g ORDER BY id) AS fv, \
         min(v) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS lo, \
         max(v) OVER (PARTITION BY g) AS mx FROM t1",
    ),
    // every continuation of a running value from the row before a changed range (count,
    // max, min of text, first/last IGNORE NULLS, bool_or, sum), over peers (ORDER BY v
    // has ties) and over rows stored twice (t3 has duplicates), and decimals
    (
        "v_over_carry",
        "SELECT id, g, v, count(v) OVER w AS c, max(v) OVER w AS mx, min(s) OVER w AS mn, \
         first_value(s) IGNORE NULLS OVER w AS fs, last_value(s) IGNORE NULLS OVER w AS ls, \
         bool_or(b) OVER w AS bo, sum(v) OVER w AS sv, first_value(v) OVER w AS fv \
         FROM t1 WINDOW w AS (PARTITION BY g ORDER BY v, id)",
    ),
    (
        "v_over_peers",
        "SELECT id, g, v, rank() OVER w AS rk, dense_rank() OVER w AS dr, count(*) OVER w AS c, \
         sum(v) OVER w AS sv, max(s) OVER w AS ms FROM t1 WINDOW w AS (PARTITION BY g ORDER BY v)",
    ),
    (
        "v_over_dups",
        "SELECT k, x, sum(x) OVER (PARTITION BY k ORDER BY x) AS s, \
         count(*) OVER (PARTITION BY k ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS c, \
         row_number() OVER (PARTITION BY k ORDER BY x) AS rn FROM t3",
    ),
    (
        "v_over_decimal",
        "SELECT id, g, w, sum(w) OVER (PARTITION BY g ORDER BY id) AS sw, \
         lag(w, 2) OVER (PARTITION BY g ORDER BY id) AS l2, \
         avg(w) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 3 PRECEDING AND 1 PRECEDING) AS a3 FROM t2",
    ),
    // a set-returning function in FROM over the row before it (implicit LATERAL)
    (
        "v_two_set_returning",
        "SELECT id, unnest(ARRAY[v, g]) AS a, generate_series(1, g % 3) AS b FROM t1",
    ),
    (
        "v_lateral_series",
        "SELECT id, x FROM t1, generate_series(1, g % 4) AS x",
    ),
    // NOT IN: a null-aware anti join (t3.x and t1.v both have NULLs)
    (
        "v_not_in",
        "SELECT id, v FROM t1 WHERE v NOT IN (SELECT x FROM t3 WHERE x < 40)",
    ),
    // grouping sets: one aggregate per set, merged
    (
        "v_rollup",
        "SELECT g, b, count(*) AS n, sum(v) AS s, max(s) AS hs, grouping(g, b) AS gid \
         FROM t1 GROUP BY ROLLUP (g, b)",
    ),
    (
        "v_cube",
        "SELECT g, b, count(v) AS n FROM t1 GROUP BY CUBE (g, b)",
    ),
    (
        "v_grouping_sets",
        "SELECT g, s, count(*) AS n FROM t1 GROUP BY GROUPING SETS ((g), (g), (s), ())",
    ),
    // subplans computed once (`plan/shared.rs`): a self-join (both sides one node), two
    // aggregates of one input in two key orders (q5's shape), one subquery twice in a union
    (
        "v_self_join",
        "SELECT a.id, b.id AS id2, a.v + b.v AS vv FROM t1 a JOIN t1 b ON a.g = b.g AND a.id <> b.id",
    ),
    (
        "v_shared_aggregate",
        "SELECT x.g, x.b, x.n FROM (SELECT g, b, count(*) AS n FROM t1 GROUP BY g, b) x \
         JOIN (SELECT max(n) AS mn, g FROM (SELECT b, g, count(*) AS n FROM t1 GROUP BY b, g) y \
         GROUP BY g) m ON x.g = m.g AND x.n >= m.mn",
    ),
    (
        "v_shared_union",
        "SELECT g, sum(v) AS s FROM t1 WHERE v > 3 GROUP BY g \
         UNION ALL SELECT g, sum(v) AS s FROM t1 WHERE v > 3 GROUP BY g",
    ),
    // ASOF joins: the latest t2 at or before, the earliest t3 after (t3 has duplicates)
    (
        "v_asof",
        "SELECT t1.id, t2.id AS id2, t2.w FROM t1 ASOF JOIN t2 ON t1.g = t2.g AND t1.v >= t2.id",
    ),
    (
        "v_asof_left",
        "SELECT t1.id, t1.v, t3.x FROM t1 ASOF LEFT JOIN t3 ON t1.g = t3.k AND t1.v < t3.x",
    ),
    // MATCH_RECOGNIZE over tables: every row counts, re-scanned on any change
    (
        "v_match",
        "SELECT * FROM t1 MATCH_RECOGNIZE (PARTITION BY g ORDER BY v \
         MEASURES FIRST(x.id) AS first_id, LAST(y.id) AS last_id, COUNT(y.*) AS ny, \
         sum(y.v) AS sy, z.s AS zs, MATCH_NUMBER() AS mn, CLASSIFIER() AS cl \
         ONE ROW PER MATCH PATTERN (x y+ z?) \
         DEFINE x AS b, y AS y.id > PREV(id), z AS v > FIRST(x.v) + 5) AS m",
    ),
    (
        "v_match_next_row",
        "SELECT * FROM t1 MATCH_RECOGNIZE (ORDER BY id \
         MEASURES FIRST(p.id) AS p_id, LAST(q.id) AS q_id, COUNT(*) AS n, max(v) AS hv \
         AFTER MATCH SKIP TO NEXT ROW PATTERN ((p | q){1,2} r) \
         DEFINE p AS v > 50, q AS v < PREV(v), r AS g = 1) AS m",
    ),
    (
        "v_match_skip_to",
        "SELECT * FROM t1 MATCH_RECOGNIZE (PARTITION BY b ORDER BY id \
         MEASURES FIRST(x.id) AS x_id, LAST(y.id) AS y_id, COUNT(y.*) AS ny \
         AFTER MATCH SKIP TO FIRST y PATTERN (x y{1,3}) \
         DEFINE x AS v IS NOT NULL, y AS coalesce(v, 0) >= coalesce(PREV(v), 0)) AS m",
    ),
    // ordered-set aggregates under retractions
    (
        "v_ordered_set",
        "SELECT g, percentile_disc(0.5) WITHIN GROUP (ORDER BY v) AS pd, \
         mode() WITHIN GROUP (ORDER BY v) AS md FROM t1 GROUP BY g",
    ),
];

/// Doubles that break a running sum: huge ones that cancel, tiny ones they swallow, the
/// non-finite ones.
const FLOATS: &[&str] = &[
    "'1e308'",
    "'-1e308'",
    "'1e-300'",
    "'5e-324'",
    "1",
    "0.1",
    "-2.5",
    "'1e16'",
    "'-1e16'",
    "'NaN'",
    "'Infinity'",
    "'-Infinity'",
    "NULL",
    "3",
    "'1.7976931348623157e308'",
];

fn float(rng: &mut StdRng) -> &'static str {
    FLOATS[rng.random_range(0..FLOATS.len())]
}

fn val(rng: &mut StdRng, lo: i64, hi: i64, null_pct: f64) -> String {
    if rng.random_bool(null_pct) {
        "NULL".into()
    } else {
        rng.random_range(lo..hi).to_string()
    }
}

fn random_statement(rng: &mut StdRng) -> String {
    let words = ["ant", "bee", "cat", "dog", "eel"];
    match rng.random_range(0..14) {
        0..=2 => {
            let n = rng.random_range(1..5);
            let rows: Vec<String> = (0..n)
                .map(|_| {
                    let s = if rng.random_bool(0.2) {
                        "NULL".to_owned()
                    } else {
                        format!("'{}'", words[rng.random_range(0..words.len())])
                    };
                    let b = ["true", "false", "NULL"][rng.random_range(0..3)];
                    format!(
                        "({}, {}, {}, {s}, {b})",
                        rng.random_range(0..40),
                        val(rng, 0, 5, 0.15),
                        val(rng, 0, 30, 0.15)
                    )
                })
                .collect();
            format!("INSERT INTO t1 VALUES {}", rows.join(", "))
        }
        3 => {
            let rows: Vec<String> = (0..rng.random_range(1..4))
                .map(|_| {
                    let w = if rng.random_bool(0.15) {
                        "NULL".to_owned()
                    } else {
                        format!(
                            "{}.{:02}",
                            rng.random_range(0..100),
                            rng.random_range(0..100)
                        )
                    };
                    format!(
                        "({}, {}, {w})",
                        rng.random_range(0..12),
                        val(rng, 0, 5, 0.15)
                    )
                })
                .collect();
            format!("INSERT INTO t2 VALUES {}", rows.join(", "))
        }
        4 => {
            let rows: Vec<String> = (0..rng.random_range(1..4))
                .map(|_| format!("({}, {})", val(rng, 0, 12, 0.1), val(rng, 0, 2000, 0.1)))
                .collect();
            format!("INSERT INTO t3 VALUES {}", rows.join(", "))
        }
        5 => format!(
            "UPDATE t1 SET v = {}, g = {} WHERE id % {} = {}",
            ["v + 1", "NULL", "v - 3", "25"][rng.random_range(0..4)],
            ["g", "(g + 1) % 5", "NULL"][rng.random_range(0..3)],
            rng.random_range(2..6),
            rng.random_range(0..2)
        ),
        6 => format!(
            "UPDATE t2 SET w = w + 1.5, g = {} WHERE id % 3 = {}",
            ["g", "4 - g"][rng.random_range(0..2)],
            rng.random_range(0..3)
        ),
        7 => format!(
            "DELETE FROM t1 WHERE id % {} = {}",
            rng.random_range(3..9),
            rng.random_range(0..3)
        ),
        8 => format!("DELETE FROM t2 WHERE id = {}", rng.random_range(0..12)),
        10 | 11 => {
            let rows: Vec<String> = (0..rng.random_range(1..5))
                .map(|_| {
                    format!(
                        "({}, {}, {})",
                        rng.random_range(0..30),
                        val(rng, 0, 4, 0.1),
                        float(rng)
                    )
                })
                .collect();
            format!("INSERT INTO t4 VALUES {}", rows.join(", "))
        }
        12 => format!(
            "UPDATE t4 SET f = {} WHERE id % {} = {}",
            float(rng),
            rng.random_range(2..6),
            rng.random_range(0..2)
        ),
        13 => format!(
            "DELETE FROM t4 WHERE id % {} = {}",
            rng.random_range(2..7),
            rng.random_range(0..2)
        ),
        _ => format!(
            "DELETE FROM t3 WHERE k = {} OR x IS NULL",
            rng.random_range(0..12)
        ),
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

async fn check_views(c: &Client, seed: u64, round: usize) {
    c.batch_execute("FLUSH").await.expect("flush");
    for (name, query) in VIEWS {
        let got = rows(c, &format!("SELECT * FROM {name}")).await;
        let want = rows(c, query).await;
        if got != want {
            let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
            let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
            panic!(
                "oracle mismatch, seed {seed}, round {round}, view {name}:\n  query: {query}\n  \
                 view has {} rows, query {}\n  only in view: {extra:?}\n  only in query: {missing:?}\n\
                 replay: WEIR_ORACLE_SEED={seed} cargo test --test integration oracle",
                got.len(),
                want.len()
            );
        }
    }
}

/// One seed: with `--workers 2` (every stateful operator in two shards, their threads
/// started for any batch) for even seeds, `--workers 1` for odd ones; `spilled`: under
/// the memory limit in `args`, check that state did spill.
async fn run_seed(seed: u64, args: &[&str], spilled: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let workers = if seed.is_multiple_of(2) { "2" } else { "1" };
    println!("seed {seed}: --workers {workers}");
    let mut args = args.to_vec();
    args.extend(["--workers", workers]);
    let mut server = TestServer::start_with(crate::harness::Options {
        env: &[("WEIR_PARALLEL_MIN_ROWS", "1")],
        args: &args,
        data_dir: None,
        nofile: None,
    });
    let mut c = server.connect().await;
    c.batch_execute(TABLES).await.expect("tables");
    // some data before the views exist, so creation backfills
    for _ in 0..8 {
        let _ = c.batch_execute(&random_statement(&mut rng)).await;
    }
    for (name, query) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: create {name}: {}", describe_error(&e)));
    }
    check_views(&c, seed, 0).await;
    // most bytes spilled of views' operator state and of their contents
    let mut spilled_most = [0i64; 2];
    let rounds = 12;
    let restart_at = rng.random_range(3..rounds);
    for round in 1..=rounds {
        for _ in 0..rng.random_range(1..8) {
            // duplicate keys and such fail as in Postgres; the tables stay consistent
            let _ = c.batch_execute(&random_statement(&mut rng)).await;
        }
        if round == restart_at {
            server.restart();
            c = server.connect().await;
        }
        check_views(&c, seed, round).await;
        for (i, part) in ["state", "contents"].iter().enumerate() {
            let spilled = rows(
                &c,
                &format!(
                    "SELECT coalesce(sum(bytes_spilled), 0) FROM weir_memory WHERE component LIKE 'view %: {part}'"
                ),
            )
            .await;
            spilled_most[i] = spilled_most[i].max(spilled[0].parse().unwrap_or(0));
        }
    }
    if spilled {
        assert!(spilled_most[0] > 0, "seed {seed}: no state ever spilled");
        assert!(
            spilled_most[1] > 0,
            "seed {seed}: no view contents ever spilled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_their_queries() {
    let seeds: Vec<u64> = match std::env::var("WEIR_ORACLE_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_ORACLE_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("WEIR_ORACLE_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(20);
            let base: u64 = rand::rng().random_range(0..1_000_000);
            (base..base + n).collect()
        }
    };
    println!("oracle seeds {:?}", seeds);
    for seed in seeds {
        run_seed(seed, &[], false).await;
    }
}

/// The same under a 32 MiB memory limit with a state cache of 1 KiB: after every round of
/// statements nearly all operator state and views' contents are spilled, so every read of
/// them comes back from the spill store (queries of views stream their spilled rows),
/// checkpoints and the restart carry spilled state, and writers meet the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_their_queries_with_state_spilled() {
    let seeds: Vec<u64> = match std::env::var("WEIR_ORACLE_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_ORACLE_SEED is a number")],
        Err(_) => {
            let base: u64 = rand::rng().random_range(0..1_000_000);
            (base..base + 6).collect()
        }
    };
    println!("oracle seeds with state spilled {:?}", seeds);
    for seed in seeds {
        run_seed(
            seed,
            &["--memory-limit", "32MiB", "--state-cache-size", "1KiB"],
            true,
        )
        .await;
    }
}
