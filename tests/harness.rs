//! Test harness: runs the real `weir` binary on a free port with a temporary data directory,
//! connects over the wire, and kills it (SIGKILL) when dropped or restarted.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

pub struct TestServer {
    child: Option<Child>,
    pub addr: String,
    /// The HTTP port (`/metrics`, `/healthz`, `/readyz`), when it listens.
    #[allow(dead_code)]
    pub http_addr: Option<String>,
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    args: Vec<String>,
    data_dir: Option<PathBuf>,
}

/// How to start a server beyond the defaults.
#[derive(Default, Clone)]
pub struct Options<'a> {
    pub env: &'a [(&'a str, &'a str)],
    /// Extra `weir serve` flags.
    pub args: &'a [&'a str],
    /// The data directory (default: one in the server's temp dir).
    pub data_dir: Option<PathBuf>,
    /// The process's open-file limit (`prlimit --nofile`).
    pub nofile: Option<u64>,
}

impl TestServer {
    /// Start a server on a fresh data directory.
    pub fn start() -> TestServer {
        Self::start_with_env(&[])
    }

    /// Start a server with extra environment variables (tuning knobs tests lower).
    pub fn start_with_env(env: &[(&str, &str)]) -> TestServer {
        Self::start_with(Options {
            env,
            ..Default::default()
        })
    }

    /// Start a server with flags, environment, a data directory or limits of its own.
    pub fn start_with(o: Options<'_>) -> TestServer {
        let dir = tempfile::Builder::new()
            .prefix("weir-test-")
            .tempdir()
            .expect("temp dir");
        let env: Vec<(String, String)> = o
            .env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut args: Vec<String> = o.args.iter().map(|a| a.to_string()).collect();
        if let Some(n) = o.nofile {
            // read by spawn: run the server under prlimit
            args.insert(0, format!("--nofile={n}"));
        }
        let data = o
            .data_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("data"));
        let (child, addr, http_addr) = spawn(&data, &dir.path().join("server.log"), &env, &args);
        TestServer {
            child: Some(child),
            addr,
            http_addr,
            dir,
            env,
            args,
            data_dir: o.data_dir,
        }
    }

    /// The server's process id (for reading its memory use from /proc).
    #[allow(dead_code)]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| self.dir.path().join("data"))
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port")
    }

    /// `weir serve` flags for the next start (a restart after this call).
    #[allow(dead_code)]
    pub fn set_args(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| a.to_string()).collect();
    }

    /// Environment for the next start (a restart after this call).
    #[allow(dead_code)]
    pub fn set_env(&mut self, env: &[(&str, &str)]) {
        self.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Kill the server with SIGKILL (no shutdown path runs) and start it again on the same
    /// data directory.
    pub fn restart(&mut self) {
        self.kill();
        let (child, addr, http_addr) =
            spawn(&self.data_dir(), &self.log_path(), &self.env, &self.args);
        self.child = Some(child);
        self.addr = addr;
        self.http_addr = http_addr;
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn conn_string(&self) -> String {
        format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port())
    }

    pub async fn connect(&self) -> Client {
        let (client, conn) = tokio_postgres::connect(&self.conn_string(), NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}; log: {}", self.addr, self.log_tail()));
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(
    data_dir: &Path,
    log: &Path,
    env: &[(String, String)],
    args: &[String],
) -> (Child, String, Option<String>) {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let nofile = args.iter().find_map(|a| a.strip_prefix("--nofile="));
    let flags: Vec<&String> = args
        .iter()
        .filter(|a| !a.starts_with("--nofile="))
        .collect();
    let mut cmd = match nofile {
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg(env!("CARGO_BIN_EXE_weir"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_weir")),
    };
    // the HTTP port on a free port too, unless the test names one
    let http: &[&str] = if flags.iter().any(|f| f.as_str() == "--http-listen") {
        &[]
    } else {
        &["--http-listen", "127.0.0.1:0"]
    };
    // every view in two shards unless a test says otherwise, whatever the machine's cores
    let workers: &[&str] = if flags.iter().any(|f| f.as_str() == "--workers") {
        &[]
    } else {
        &["--workers", "2"]
    };
    let mut child = cmd
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(http)
        .args(workers)
        .args(flags)
        .env(
            "WEIR_LOG",
            std::env::var("WEIR_LOG").unwrap_or_else(|_| "info".into()),
        )
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .expect("spawn weir");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut http = None;
        while let Some(Ok(line)) = lines.next() {
            if let Some(addr) = line.strip_prefix("http listening on ") {
                http = Some(addr.to_owned());
            } else if let Some(addr) = line.strip_prefix("listening on ") {
                let _ = tx.send((addr.to_owned(), http.clone()));
            }
        }
    });
    // a restart recovers its views before it listens: under a memory limit a large state
    // takes minutes to read back (WEIR_START_TIMEOUT_SECS raises the wait, for benchmarks)
    let start_timeout = Duration::from_secs(
        std::env::var("WEIR_START_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let deadline = Instant::now() + start_timeout;
    loop {
        if let Ok((addr, http)) = rx.recv_timeout(Duration::from_millis(100)) {
            return (child, addr, http);
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "weir exited with {status} before listening; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!(
                "weir did not start within {}s; the end of its log:\n{}",
                start_timeout.as_secs(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// Run one statement with the simple protocol and return rows as text (NULL as "NULL").
/// `psql -X` as user weir against the test server with these further arguments (`-c`
/// commands, variables): its whole output.
pub fn psql_run(server: &TestServer, args: &[&str]) -> std::process::Output {
    let port = server.port().to_string();
    let mut all = vec![
        "-X",
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "weir",
        "-d",
        "weir",
    ];
    all.extend_from_slice(args);
    std::process::Command::new("psql")
        .args(&all)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql must be installed (the README test command installs postgresql-client)")
}

pub async fn query_text(client: &Client, sql: &str) -> Vec<Vec<String>> {
    let msgs = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
    msgs.into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_owned())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// An error with its SQLSTATE, for assertions and messages.
pub fn describe_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

pub fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_owned())
        .unwrap_or_default()
}

/// The memory a process holds now as `--memory-limit` counts it (`RssAnon` + `RssShmem`),
/// MiB.
#[allow(dead_code)]
pub fn held_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kb("RssAnon:") + kb("RssShmem:")) / 1024.0
}

/// Samples [`held_mib`] of a process every 20 ms on a thread of its own; `peak()` is the
/// most seen so far.
#[allow(dead_code)]
pub struct HeldPeak {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[allow(dead_code)]
impl HeldPeak {
    pub fn start(pid: u32) -> HeldPeak {
        use std::sync::atomic::Ordering;
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let kib = (held_mib(pid) * 1024.0) as u64;
                p.fetch_max(kib, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        HeldPeak { peak, stop }
    }

    pub fn peak_mib(&self) -> f64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for HeldPeak {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Peak resident set of a process, in MiB (benchmarks).
#[allow(dead_code)]
pub fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Wait (up to 60 s) until `view` reads its source through the source's shared reader
/// (its backfill, if any, has joined it).
#[allow(dead_code)]
pub async fn wait_for_shared_reader(c: &Client, view: &str) {
    let sql = format!("SELECT reader FROM weir_sources WHERE view_name = '{view}'");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = query_text(c, &sql).await;
        if r.len() == 1 && r[0][0] == "shared" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{view} never joined its source's shared reader: {r:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
