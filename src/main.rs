//! The `weir` command line.

/// mimalloc instead of glibc's allocator: the engine allocates and frees many small keys
/// and rows on one thread while checkpoint blobs are freed on another, and glibc spent
/// 10–20% of the dataflow thread in `malloc_consolidate`/`_int_malloc` on Nexmark
/// (`docs/benchmarks.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Weir: a streaming SQL database that speaks Postgres"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        /// Address to accept Postgres connections on.
        #[arg(long, default_value = "127.0.0.1:9347")]
        listen: SocketAddr,
        /// Directory holding the catalog, tables and state; created if missing.
        #[arg(long, default_value = "./weir-data")]
        data_dir: PathBuf,
        /// Hosts connectors (Kafka brokers, schema registries) may connect to: a
        /// comma-separated list of host:port patterns (`*`, `*.example.com:9092`,
        /// `10.0.0.0/8:*`, `127.0.0.1:9092-9094`). Hosts are matched as written in SQL and
        /// as the cluster advertises them, not resolved. `*` allows any host.
        #[arg(long, default_value = "*", value_name = "PATTERNS", value_parser = allow_connect)]
        allow_connect: AllowConnect,
        /// Let connector properties name files on the server (`properties.ssl.key.location`
        /// and other `*.location` / `*.file` settings). Off: such options are refused.
        #[arg(long)]
        allow_connector_files: bool,
        /// Most client connections at once; more are refused with 53300.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        max_connections: u32,
        /// Most memory one statement may use for its operators (sorts, hash tables,
        /// buffers), and the largest `work_mem` a session may set: e.g. 512MB, 2GB.
        #[arg(long, default_value = "2GB", value_name = "SIZE", value_parser = weir::limits::parse_size)]
        query_memory_limit: usize,
        /// How often the views' state and the sources' positions are checkpointed, so a
        /// restart restores them instead of recomputing the views (e.g. 500ms, 1s, 1min).
        /// 0 turns checkpoints off: every restart rebuilds every view from its inputs.
        #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = weir::limits::parse_duration)]
        checkpoint_interval: std::time::Duration,
        /// Threads each view's dataflow runs on: its stateful operators are split into this
        /// many shards by key (default: the number of cores). A view keeps the count it
        /// was created with across restarts; it takes a new count when rebuilt.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
        workers: Option<u16>,
        /// Most memory the server may hold (e.g. 256MiB, 4GB): above it, sources pause and
        /// INSERT/COPY wait until memory is freed. Default: 70% of the cgroup's memory
        /// limit or of the machine's memory (shown at start).
        #[arg(long, value_name = "SIZE", value_parser = weir::limits::parse_size)]
        memory_limit: Option<usize>,
        /// Most memory the views' state may hold (keys, values and their overhead): beyond
        /// it the least recently used state spills to disk under the data directory and is
        /// read back on demand. Default: a third of --memory-limit.
        #[arg(long, value_name = "SIZE", value_parser = weir::limits::parse_size)]
        state_cache_size: Option<usize>,
        /// Name of the bootstrap superuser, applied when the data directory is created
        /// (default: weir).
        #[arg(long, value_name = "NAME")]
        superuser: Option<String>,
        /// File holding the bootstrap superuser's password (its first line), applied when
        /// the data directory is created. The environment variable WEIR_SUPERUSER_PASSWORD
        /// does the same.
        #[arg(long, value_name = "FILE")]
        superuser_password_file: Option<PathBuf>,
        /// Authentication rules in pg_hba.conf syntax (`hostssl all all 0.0.0.0/0
        /// scram-sha-256`), first match wins; methods trust, reject, scram-sha-256,
        /// password, cert. Without rules: trust on loopback until the superuser has a
        /// password, then scram-sha-256 everywhere.
        #[arg(long, value_name = "FILE")]
        hba_file: Option<PathBuf>,
        /// One authentication rule, as a line of --hba-file (repeatable; after the file's).
        #[arg(long, value_name = "RULE")]
        hba: Vec<String>,
        /// Allow listening beyond loopback with no password and no rules: anyone who
        /// reaches the port connects as any role. Logged as a warning.
        #[arg(long)]
        insecure: bool,
        /// Server certificate chain (PEM) for TLS; with --tls-key, clients may use
        /// sslmode=require / verify-full.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// Private key (PEM) of --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// CA certificate(s) (PEM) that sign client certificates; a `cert` rule logs a
        /// client in as the role named by its certificate's CN.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_client_ca: Option<PathBuf>,
        /// File holding the key that encrypts secrets at rest (32 bytes, or 64 hex
        /// digits). Default: secrets.key in the data directory, generated with mode 0600.
        #[arg(long, value_name = "FILE")]
        secrets_key_file: Option<PathBuf>,
        /// Address of the HTTP port: Prometheus /metrics, /healthz, /readyz. `off`
        /// disables it. Beyond loopback, requests authenticate by the SQL port's rules
        /// (HTTP Basic with a role's password). [default: 127.0.0.1:9348, skipped if taken]
        #[arg(long, value_name = "ADDR|off", value_parser = http_listen)]
        http_listen: Option<weir::server::http::HttpListen>,
    },
}

/// `--allow-connect`, parsed (None: any host).
#[derive(Clone)]
struct AllowConnect(Option<Vec<weir::connectors::policy::EndpointPattern>>);

fn allow_connect(text: &str) -> Result<AllowConnect, String> {
    weir::connectors::policy::parse_allow_connect(text).map(AllowConnect)
}

fn http_listen(text: &str) -> Result<weir::server::http::HttpListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(weir::server::http::HttpListen::Off);
    }
    text.parse()
        .map(weir::server::http::HttpListen::At)
        .map_err(|e| format!("an address like 127.0.0.1:9348, or off: {e}"))
}

fn main() {
    // resident memory must follow what is freed (see `--memory-limit`)
    weir::state::memory::no_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            listen,
            data_dir,
            allow_connect,
            allow_connector_files,
            max_connections,
            query_memory_limit,
            checkpoint_interval,
            workers,
            memory_limit,
            state_cache_size,
            superuser,
            superuser_password_file,
            hba_file,
            hba,
            insecure,
            tls_cert,
            tls_key,
            tls_client_ca,
            secrets_key_file,
            http_listen,
        } => {
            let superuser_password = match &superuser_password_file {
                Some(f) => match std::fs::read_to_string(f) {
                    Ok(t) => Some(t.lines().next().unwrap_or("").to_owned()),
                    Err(e) => {
                        eprintln!(
                            "weir: cannot read --superuser-password-file {}: {e}",
                            f.display()
                        );
                        std::process::exit(1);
                    }
                },
                None => std::env::var("WEIR_SUPERUSER_PASSWORD").ok(),
            }
            .filter(|p| !p.is_empty());
            let tls = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => Some(weir::server::tls::TlsConfig {
                    cert,
                    key,
                    client_ca: tls_client_ca,
                }),
                _ => None,
            };
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                // planning recurses over statements; deep ones get a clean 54001 from the
                // depth check, and this leaves room for everything below that limit
                .thread_stack_size(weir::limits::THREAD_STACK_BYTES)
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("weir: cannot start the runtime: {e}");
                    std::process::exit(1);
                }
            };
            if let Err(e) = rt.block_on(weir::server::serve(weir::server::ServerConfig {
                listen,
                data_dir,
                allow_connect: allow_connect.0,
                allow_connector_files,
                max_connections: max_connections as usize,
                query_memory_limit,
                checkpoint_interval: (!checkpoint_interval.is_zero())
                    .then_some(checkpoint_interval),
                workers: workers.map(usize::from).unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| n.get().min(256))
                }),
                memory_limit: memory_limit.map(|l| l as u64),
                state_cache_size: state_cache_size.map(|l| l as u64),
                superuser,
                superuser_password,
                hba_file,
                hba,
                insecure,
                tls,
                secrets_key_file,
                http_listen: http_listen.unwrap_or(weir::server::http::HttpListen::Default(
                    std::net::SocketAddr::from(([127, 0, 0, 1], 9348)),
                )),
            })) {
                eprintln!("weir: {}", e.message);
                if let Some(d) = &e.detail {
                    eprintln!("detail: {d}");
                }
                if let Some(h) = &e.hint {
                    eprintln!("hint: {h}");
                }
                std::process::exit(1);
            }
        }
    }
}
