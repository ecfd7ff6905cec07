//! Real clients against a real server: psql's meta-commands must print what they print
//! against Postgres (with our owner and database names).

use std::process::Command;

use crate::harness::TestServer;

fn psql(server: &TestServer, command: &str) -> String {
    let out = Command::new("psql")
        .args([
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &server.port().to_string(),
            "-U",
            "weir",
            "-d",
            "weir",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            command,
        ])
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql must be installed (the README test command installs postgresql-client)");
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
        r#"List of schemas
  Name  | Owner 
--------+-------
 public | weir
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
}
