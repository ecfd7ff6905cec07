//! Real clients against a real server: psql's meta-commands must print what they print
//! against Postgres (with our owner and database names).

use std::process::Command;

use crate::harness::TestServer;

fn psql(server: &TestServer, command: &str) -> String {
    let out = crate::harness::psql_run(server, &["-v", "ON_ERROR_STOP=1", "-c", command]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "psql {command} failed: {stderr}\nserver log:\n{}",
        server.log_tail()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_meta_commands() {
    let server = TestServer::start();
    let out = psql(
        &server,
        "CREATE TABLE t2 (id bigint primary key, name varchar(20) not null, price numeric(10,2), ts timestamp)",
    );
    assert_eq!(out.trim(), "CREATE TABLE");
    psql(
        &server,
        "CREATE TABLE other (a int, b text, primary key (b, a))",
    );
    psql(
        &server,
        "INSERT INTO t2 VALUES (1, 'x', 2.5, '2024-01-01 00:00:00')",
    );

    assert_eq!(
        psql(&server, "\\d t2"),
        r#"                           Table "public.t2"
 Column |            Type             | Collation | Nullable | Default 
--------+-----------------------------+-----------+----------+---------
 id     | bigint                      |           | not null | 
 name   | character varying(20)       |           | not null | 
 price  | numeric(10,2)               |           |          | 
 ts     | timestamp without time zone |           |          | 
Indexes:
    "t2_pkey" PRIMARY KEY, btree (id)

"#
    );
    assert_eq!(
        psql(&server, "\\dt"),
        r#"       List of relations
 Schema | Name  | Type  | Owner 
--------+-------+-------+-------
 public | other | table | weir
 public | t2    | table | weir
(2 rows)

"#
    );
    let l = psql(&server, "\\l");
    assert!(l.contains(" weir | weir  | UTF8     |"), "\\l output:\n{l}");
    assert_eq!(
        psql(&server, "\\dn"),
        r#"      List of schemas
  Name  |       Owner       
--------+-------------------
 public | pg_database_owner
(1 row)

"#
    );
    let d = psql(&server, "\\d other");
    assert!(
        d.contains("\"other_pkey\" PRIMARY KEY, btree (b, a)"),
        "\\d other:\n{d}"
    );
    let q = psql(&server, "SELECT id, name, price, ts FROM t2");
    assert_eq!(
        q,
        r#" id | name | price |         ts          
----+------+-------+---------------------
  1 | x    |  2.50 | 2024-01-01 00:00:00
(1 row)

"#
    );
    // a source describes like a table (its rows come only through views)
    psql(
        &server,
        "CREATE SOURCE person (id BIGINT, name TEXT, date_time TIMESTAMP) WITH (connector = 'nexmark', nexmark.table.type = 'person')",
    );
    let d = psql(&server, "\\d person");
    assert!(
        d.contains(" id        | bigint ")
            && d.contains(" date_time | timestamp without time zone "),
        "\\d person:\n{d}"
    );
    // the system catalogs describe too, and `information_schema` is not on the search path
    let d = psql(&server, "\\d pg_namespace");
    assert!(
        d.contains("Table \"pg_catalog.pg_namespace\"") && d.contains(" nspname  | name "),
        "\\d pg_namespace:\n{d}"
    );
    let d = psql(&server, "\\d information_schema.tables");
    assert!(
        d.contains("View \"information_schema.tables\"") && d.contains(" table_schema "),
        "\\d information_schema.tables:\n{d}"
    );
}

/// psql's `+` variants, roles and materialized views, as Postgres prints them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_more_meta_commands() {
    let server = TestServer::start();
    psql(
        &server,
        "CREATE TABLE t (id int primary key, name varchar(20) not null)",
    );
    psql(
        &server,
        "CREATE MATERIALIZED VIEW mv AS SELECT name, count(*) AS n FROM t GROUP BY name",
    );
    assert_eq!(
        psql(&server, "\\d+ t"),
        r#"                                                   Table "public.t"
 Column |         Type          | Collation | Nullable | Default | Storage  | Compression | Stats target | Description 
--------+-----------------------+-----------+----------+---------+----------+-------------+--------------+-------------
 id     | integer               |           | not null |         | plain    |             |              | 
 name   | character varying(20) |           | not null |         | extended |             |              | 
Indexes:
    "t_pkey" PRIMARY KEY, btree (id)
Access method: heap

"#
    );
    let mv = psql(&server, "\\d+ mv");
    assert!(
        mv.contains("Materialized view \"public.mv\"")
            && mv.contains(" n      | bigint ")
            && mv.contains("View definition:\n SELECT name, count(*) AS n FROM t GROUP BY name;"),
        "\\d+ mv:\n{mv}"
    );
    assert_eq!(
        psql(&server, "\\dm"),
        r#"             List of relations
 Schema | Name |       Type        | Owner 
--------+------+-------------------+-------
 public | mv   | materialized view | weir
(1 row)

"#
    );
    let dm = psql(&server, "\\dm+");
    assert!(
        dm.contains(
            " public | mv   | materialized view | weir  | permanent   | heap          | 0 bytes |"
        ),
        "\\dm+:\n{dm}"
    );
    assert_eq!(
        psql(&server, "\\di"),
        r#"            List of relations
 Schema |  Name  | Type  | Owner | Table 
--------+--------+-------+-------+-------
 public | t_pkey | index | weir  | t
(1 row)

"#
    );
    let du = psql(&server, "\\du");
    assert!(
        du.contains(" weir      | Superuser, Create role, Create DB, Replication, Bypass RLS | {}"),
        "\\du:\n{du}"
    );
    let df = psql(&server, "\\df");
    assert!(
        df.contains("List of functions") && df.contains("(0 rows)"),
        "\\df:\n{df}"
    );
    // COPY through psql: \copy sends COPY FROM STDIN with the file's data
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, "1,ann\n2,\"b,ob\"\n").expect("write csv");
    let out = psql(
        &server,
        &format!("\\copy t FROM '{}' WITH (FORMAT csv)", file.display()),
    );
    assert_eq!(out.trim(), "COPY 2");
    assert_eq!(
        psql(
            &server,
            "COPY (SELECT * FROM t ORDER BY id) TO STDOUT WITH CSV HEADER"
        ),
        "id,name\n1,ann\n2,\"b,ob\"\n"
    );
    // dates and timestamps in COPY: Postgres' infinities, a date alone for a timestamp
    psql(
        &server,
        "CREATE TABLE spans (k int, t timestamp, d date, z timestamptz)",
    );
    let file = dir.path().join("spans.tsv");
    std::fs::write(
        &file,
        "1\tinfinity\t-infinity\t-Infinity\n2\t2024-01-01 10:00\t2024-01-02\t2024-01-03\n",
    )
    .expect("write tsv");
    let out = psql(&server, &format!("\\copy spans FROM '{}'", file.display()));
    assert_eq!(out.trim(), "COPY 2");
    assert_eq!(
        psql(&server, "COPY (SELECT * FROM spans ORDER BY k) TO STDOUT"),
        "1\tinfinity\t-infinity\t-infinity\n2\t2024-01-01 10:00:00\t2024-01-02\t2024-01-03 00:00:00+00\n"
    );
    assert_eq!(
        psql(
            &server,
            "COPY (SELECT k FROM spans WHERE t = 'infinity' AND NOT isfinite(d)) TO STDOUT"
        ),
        "1\n"
    );
    // foreign keys: \d lists them on both tables; COPY's rows are checked
    psql(&server, "CREATE TABLE fp (id int PRIMARY KEY)");
    psql(
        &server,
        "CREATE TABLE fc (k int, pid int REFERENCES fp ON DELETE CASCADE)",
    );
    psql(&server, "INSERT INTO fp VALUES (1), (2)");
    let d = psql(&server, "\\d fc");
    assert!(
        d.contains("Foreign-key constraints:\n    \"fc_pid_fkey\" FOREIGN KEY (pid) REFERENCES fp(id) ON DELETE CASCADE"),
        "\\d fc:\n{d}"
    );
    let d = psql(&server, "\\d fp");
    assert!(
        d.contains("Referenced by:\n    TABLE \"fc\" CONSTRAINT \"fc_pid_fkey\" FOREIGN KEY (pid) REFERENCES fp(id) ON DELETE CASCADE"),
        "\\d fp:\n{d}"
    );
    let file = dir.path().join("fc.tsv");
    std::fs::write(&file, "1\t1\n2\t2\n3\t\\N\n").expect("write tsv");
    let out = psql(&server, &format!("\\copy fc FROM '{}'", file.display()));
    assert_eq!(out.trim(), "COPY 3");
    std::fs::write(&file, "4\t1\n5\t7\n").expect("write tsv");
    let bad = Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args(["-U", "weir", "-d", "weir", "-c"])
        .arg(format!("\\copy fc FROM '{}'", file.display()))
        .output()
        .expect("psql");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success()
            && err.contains("violates foreign key constraint \"fc_pid_fkey\"")
            && err.contains("Key (pid)=(7) is not present in table \"fp\"."),
        "COPY of a row referencing nothing: {err}"
    );
    psql(&server, "DELETE FROM fp WHERE id = 1");
    assert_eq!(
        psql(&server, "COPY (SELECT k FROM fc ORDER BY k) TO STDOUT"),
        "2\n3\n"
    );
}

/// Run a client program; its stdout, or a panic with its stderr and the server log.
fn run_client(server: &TestServer, cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
    stdout
}

fn clients_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Django 5 (psycopg 3): `migrate` of contrib.auth and a small app (DEFERRABLE INITIALLY
/// DEFERRED foreign keys, pattern-ops indexes, identity, JSON and decimal fields), the ORM,
/// and a dangling foreign key refused at COMMIT (tests/clients/django_check.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn django_migrations_and_orm() {
    let server = TestServer::start();
    let script = clients_dir().join("django_check.py");
    let port = server.port().to_string();
    let out = run_client(
        &server,
        Command::new("python3").arg(&script).arg(&port),
        "django_check.py",
    );
    for check in [
        "django migrate",
        "django orm",
        "django deferred foreign key",
        "django cascade delete",
        "django flush",
    ] {
        assert!(
            out.contains(&format!("ok {check}\n")),
            "missing {check}:\n{out}"
        );
    }
}

/// psycopg2, psycopg 3 and SQLAlchemy 2.x (both drivers) and 1.4 (psycopg2): queries,
/// COPY, savepoints, SUBSCRIBE streams and named cursors, cancel, disconnect cleanup, and
/// the inspector's answers (tests/clients/python_clients.py asserts each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_drivers_and_sqlalchemy() {
    let server = TestServer::start();
    let script = clients_dir().join("python_clients.py");
    let port = server.port().to_string();
    let out = run_client(
        &server,
        Command::new("python3").arg(&script).args([&port, "all"]),
        "python_clients.py",
    );
    for check in [
        "psycopg2 query",
        "psycopg2 copy",
        "psycopg2 copy error",
        "psycopg2 named cursor subscribe",
        "psycopg any list",
        "psycopg error positions",
        "psycopg uuid",
        "psycopg regclass parameter",
        "psycopg savepoints",
        "psycopg prepared statements",
        "psycopg copy",
        "psycopg subscribe stream",
        "psycopg server-side cursors",
        "psycopg subscribe cancel",
        "psycopg copy subscribe",
        "psycopg subscribe disconnect",
        "psycopg listen notify",
        "psycopg2 listen notify",
        "sqlalchemy 2.x inspector over psycopg2",
        "sqlalchemy 2.x inspector over psycopg",
        "sqlalchemy orm create_all with unique, check, foreign key, comments and uuid",
        "psycopg 3 ipaddress values for inet and cidr, text and binary",
        "sqlalchemy DOMAIN: get_domains, the reflected column type, a value outside it refused (psycopg 3 and 2)",
        "psycopg RESET reports the settings it changes back",
    ] {
        assert!(
            out.contains(&format!("ok {check}\n")),
            "missing {check}:\n{out}"
        );
    }
    // SQLAlchemy 1.4 sends other catalog queries (installed beside 2.x by `make deps`)
    let sa14 = dirs_home().join(".cache/weir-py/sa14");
    let out = run_client(
        &server,
        Command::new("python3")
            .arg(&script)
            .args([&port, "sqlalchemy"])
            .env("PYTHONPATH", &sa14),
        "python_clients.py with SQLAlchemy 1.4",
    );
    assert!(
        out.contains("ok sqlalchemy 1.x inspector over psycopg2\n"),
        "{out}"
    );
}

fn dirs_home() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
}

/// pgJDBC (Debian's libpostgresql-jdbc-java): DatabaseMetaData, ResultSetMetaData,
/// prepared statements, CopyManager, savepoints, fetch-size portals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgjdbc() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE jt (id int primary key, name varchar(20) not null, amount numeric(10,2), at timestamp);
             INSERT INTO jt VALUES (1,'one',1.5,'2024-01-01 00:00:00'),(2,'two',2.25,NULL),(3,'three',NULL,'2024-05-05 05:05:05');
             CREATE MATERIALIZED VIEW jv AS SELECT count(*) AS n FROM jt",
        )
        .await
        .expect("setup");
    let jar = "/usr/share/java/postgresql.jar";
    let classes = tempfile::tempdir().expect("temp dir");
    run_client(
        &server,
        Command::new("javac").args([
            "-cp",
            jar,
            "-d",
            &classes.path().display().to_string(),
            &clients_dir().join("JdbcCheck.java").display().to_string(),
        ]),
        "javac JdbcCheck.java",
    );
    let out = run_client(
        &server,
        Command::new("java").args([
            "-cp",
            &format!("{jar}:{}", classes.path().display()),
            "JdbcCheck",
            &server.port().to_string(),
        ]),
        "JdbcCheck",
    );
    assert_eq!(
        out,
        "product|PostgreSQL
schema|information_schema
schema|pg_catalog
schema|public
table|jt_pkey|INDEX
table|jv|MATERIALIZED VIEW
table|jt|TABLE
column|id|int4|4|NO|1
column|name|varchar|12|NO|2
column|amount|numeric|2|YES|3
column|at|timestamp|93|YES|4
pk|id|1|jt_pkey
index|jt_pkey|false|id
typeinfo|true
rsmd|id|int4|jt
rsmd|name|varchar|jt
rsmd|amount|numeric|jt
rsmd|at|timestamp|jt
data|2|two|2.25|null
data|3|three|null|2024-05-05 05:05:05.0
rsmd2|Name|jt|0|20|0
rsmd2|a2||2|0|0
rsmd2|a3||2|12|3
rsmd2|id|jt|0|10|0
copyin|2
copyout|10,copied/11,\"with,comma\"/
uuid|UUID|a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11|uuid|1
fkerror|23503
importedkey|jt|id|jfk|jt_id|1|3|0|jfk_jt_id_fkey|jt_pkey
exportedkey|jfk|jfk_jt_id_fkey
error|23505
after|20
fetched|6
subscribe|weir_diff|1|6
"
    );
}

/// TypeORM from npm (installed into ~/.cache/weir-node by `make deps`): synchronize, save and
/// load with a relation, a query builder, cascade, and a second synchronize that reads the
/// schema back through TypeORM's catalog queries and finds nothing to change
/// (tests/clients/typeorm_check.js).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typeorm_synchronize_and_introspect() {
    let server = TestServer::start();
    let out = run_client(
        &server,
        Command::new("node")
            .arg(clients_dir().join("typeorm_check.js"))
            .arg(server.port().to_string())
            .env(
                "NODE_PATH",
                dirs_home().join(".cache/weir-node/node_modules"),
            ),
        "typeorm_check.js",
    );
    assert_eq!(
        out,
        r#"synchronized
saved 1 true true 0.00 true
found [{"id":1,"title":"hello","tags":["a","b"]}] {"k":1}
query builder 1
cascaded 0
pending []
"#
    );
}

/// Sequelize from npm (installed into ~/.cache/weir-node by `make deps`): sync with an ENUM
/// (created by Sequelize's DO block), create, include, update, sync with alter, describeTable,
/// a rolled-back transaction (tests/clients/sequelize_check.js; PostgreSQL 15 prints the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequelize_sync_alter_and_describe() {
    let server = TestServer::start();
    let out = run_client(
        &server,
        Command::new("node")
            .arg(clients_dir().join("sequelize_check.js"))
            .arg(server.port().to_string())
            .env(
                "NODE_PATH",
                dirs_home().join(".cache/weir-node/node_modules"),
            ),
        "sequelize_check.js",
    );
    assert_eq!(
        out,
        r#"synced
found 1 t1,t2,t3 admin 0.00 ["x"]
updated 3 3
altered
described age,balance,createdAt,email,id,name,profile,role,tags,uid,updatedAt USER-DEFINED ["admin","user"]
users 1
"#
    );
}

/// Knex and Drizzle ORM from npm (installed into ~/.cache/weir-node by `make deps`): Knex's
/// schema builder, queries, `.first()`, ALTER TABLE, columnInfo, transactions and migrator;
/// Drizzle's migrator (a DO-block migration among them), queries, cascade
/// (tests/clients/knex_drizzle_check.js; PostgreSQL 15 prints the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knex_and_drizzle() {
    let server = TestServer::start();
    let out = run_client(
        &server,
        Command::new("node")
            .arg(clients_dir().join("knex_drizzle_check.js"))
            .arg(server.port().to_string())
            .env(
                "NODE_PATH",
                dirs_home().join(".cache/weir-node/node_modules"),
            ),
        "knex_drizzle_check.js",
    );
    assert_eq!(
        out,
        r#"knex created true true
knex rows [{"price":"1.50","name":"ann"},{"price":"2.00","name":"ann"}]
knex first {"total":"3.50","n":"2"}
knex columns data,id,kind,note,owner_id,price,ref
knex owners 2
knex migrated 20260101_notes.js
drizzle migrated
drizzle inserted 1 ok true 1.50 true
drizzle rows [{"title":"p2","name":"ann"},{"title":"p1","name":"ann"}]
drizzle count 2
drizzle mood happy
drizzle cascaded 0
drizzle migrated again
"#
    );
}

/// node-postgres from npm (installed into ~/.cache/weir-node by `make deps`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_postgres() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE nt (id int primary key, name text not null, amount numeric(10,2));
             INSERT INTO nt VALUES (1,'one',1.5),(2,'two',2.25)",
        )
        .await
        .expect("setup");
    let out = run_client(
        &server,
        Command::new("node")
            .arg(clients_dir().join("node_check.js"))
            .arg(server.port().to_string())
            .env(
                "NODE_PATH",
                dirs_home().join(".cache/weir-node/node_modules"),
            ),
        "node_check.js",
    );
    assert_eq!(
        out,
        r#"rows [{"id":2,"name":"two","amount":"2.25"}]
any [{"id":1},{"id":2}]
fields id:23:true:1,name:25:true:2,amount:1700:true:3
types 2024-01-02T03:04:05.000Z [1,2] true 1.5 null
error 22012 division by zero
after [{"id":10}]
error 42P01 relation "missing" does not exist
bytea [0,1,255]
error 22P02 invalid input syntax for type integer: "1.5"
page [{"id":2}]
default [{"amount":null}]
"#
    );
}
