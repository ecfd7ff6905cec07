//! sqllogictest files under `sql-tests/`, run over a real pgwire connection (the simple
//! query protocol, as psql uses) against a server started for each file.
//!
//! A line `# restart` in a file kills the server with SIGKILL, starts it again on the same
//! data directory, and continues on a fresh connection: what was acknowledged before must
//! still be there.

use std::path::Path;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::harness::TestServer;

pub struct PgDb {
    client: Client,
}

#[derive(Debug)]
pub struct PgError {
    code: Option<String>,
    message: String,
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(c) => write!(f, "{c}: {}", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for PgError {}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            // the detail on a line of its own: `statement error (?s)(23502).*Failing row
            // contains \(...\)` checks it (a pattern without `(?s)` sees the first line)
            Some(db) => PgError {
                code: Some(db.code().code().to_owned()),
                message: match db.detail() {
                    Some(d) => format!("{}\nDETAIL: {d}", db.message()),
                    None => db.message().to_owned(),
                },
            },
            None => PgError {
                code: None,
                message: e.to_string(),
            },
        }
    }
}

#[async_trait]
impl AsyncDB for PgDb {
    type Error = PgError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, PgError> {
        let msgs = self.client.simple_query(sql).await?;
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut ncols: Option<usize> = None;
        let mut count = 0u64;
        for m in msgs {
            match m {
                SimpleQueryMessage::RowDescription(cols) => ncols = Some(cols.len()),
                SimpleQueryMessage::Row(r) => {
                    ncols = Some(r.len());
                    rows.push(
                        (0..r.len())
                            .map(|i| match r.get(i) {
                                None => "NULL".to_owned(),
                                Some("") => "(empty)".to_owned(),
                                Some(v) => v.to_owned(),
                            })
                            .collect(),
                    );
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        match ncols {
            Some(n) => Ok(DBOutput::Rows {
                types: vec![DefaultColumnType::Any; n],
                rows,
            }),
            None => Ok(DBOutput::StatementComplete(count)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }

    fn error_sql_state(err: &PgError) -> Option<String> {
        err.code.clone()
    }
}

/// Run one .slt file; returns a description of the first failure.
pub async fn run_file(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut server = TestServer::start();
    let segments: Vec<String> = split_on_restart(&text);
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            server.restart();
        }
        let name = format!("{} (part {})", path.display(), i + 1);
        run_script(server.conn_string(), segment, &name)
            .await
            .map_err(|e| format!("{e}\nserver log tail:\n{}", server.log_tail()))?;
    }
    Ok(())
}

/// Run an slt script over one connection string (Weir's, or a real Postgres').
pub async fn run_script(conn: String, script: &str, name: &str) -> Result<(), String> {
    let mut runner = Runner::new(move || {
        let conn = conn.clone();
        async move {
            let (client, connection) =
                tokio_postgres::connect(&conn, tokio_postgres::NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok::<_, PgError>(PgDb { client })
        }
    });
    runner.with_column_validator(|_, _| true);
    runner
        .run_script_with_name_async(script, name)
        .await
        .map_err(|e| e.display(true).to_string())
}

/// Split at `# restart` lines, padding later parts with blank lines so that reported line
/// numbers match the file.
fn split_on_restart(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    for (n, line) in text.lines().enumerate() {
        if line.trim() == "# restart" {
            parts.push("\n".repeat(n + 1));
        } else {
            let last = parts.last_mut().expect("one part");
            last.push_str(line);
            last.push('\n');
        }
    }
    parts
}

macro_rules! slt_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("sql-tests")
                    .join(concat!(stringify!($name), ".slt"));
                if let Err(e) = run_file(&path).await {
                    panic!("{e}");
                }
            }
        )*

        /// Every file in sql-tests/ must be listed above.
        #[test]
        fn every_slt_file_is_run() {
            let listed: Vec<&str> = vec![$(stringify!($name)),*];
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-tests");
            for entry in std::fs::read_dir(&dir).expect("sql-tests dir") {
                let p = entry.expect("entry").path();
                if p.extension().and_then(|e| e.to_str()) == Some("slt") {
                    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
                    assert!(listed.contains(&stem.as_str()), "{stem}.slt is not listed in tests/slt.rs");
                }
            }
        }
    };
}

slt_tests!(
    tables,
    asof_join,
    match_recognize,
    dml,
    types,
    queries,
    errors,
    session,
    restart,
    catalog,
    views,
    views_ddl,
    event_time,
    sources,
    json,
    cursors,
    hardening,
    security,
    observability,
    postgres_exact,
);
