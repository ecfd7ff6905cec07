//! The Postgres wire protocol front end (pgwire): accepts connections, runs the startup
//! handshake, and hands simple and extended queries to the engine.

pub mod advisory_locks;
pub mod auth;
pub mod connection;
pub mod console;
pub mod copy;
pub mod encode;
pub mod handler;
pub mod http;
pub mod notifications;
pub mod params;
pub mod session;
pub mod settings;
pub mod streaming;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::engine::Engine;
use crate::error::{Result, WeirError};
use crate::server::handler::WeirBackend;

/// The Postgres version we present to clients.
pub const PG_VERSION: &str = "16.6";
pub const PG_VERSION_NUM: &str = "160006";

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// `--allow-connect`: None allows any host.
    pub allow_connect: Option<Vec<crate::connectors::policy::EndpointPattern>>,
    pub allow_connector_files: bool,
    pub max_connections: usize,
    /// `--query-memory-limit`, bytes.
    pub query_memory_limit: usize,
    /// `--checkpoint-interval` (None: off).
    pub checkpoint_interval: Option<std::time::Duration>,
    /// `--workers`: shards per view.
    pub workers: usize,
    /// `--memory-limit`, bytes (None: the default, a fraction of the machine's memory).
    pub memory_limit: Option<u64>,
    /// `--state-cache-size`, bytes (None: a third of the memory limit).
    pub state_cache_size: Option<u64>,
    /// `--superuser`: the bootstrap superuser's name, at the first start.
    pub superuser: Option<String>,
    /// Its password (`--superuser-password-file` / `WEIR_SUPERUSER_PASSWORD`), at the first
    /// start.
    pub superuser_password: Option<String>,
    /// `--hba-file`.
    pub hba_file: Option<PathBuf>,
    /// `--hba` rules.
    pub hba: Vec<String>,
    /// `--insecure`.
    pub insecure: bool,
    /// `--tls-cert`, `--tls-key`, `--tls-client-ca`.
    pub tls: Option<tls::TlsConfig>,
    /// `--secrets-key-file`.
    pub secrets_key_file: Option<PathBuf>,
    /// `--http-listen`.
    pub http_listen: http::HttpListen,
}

/// Open the database and serve until the process is stopped.
pub async fn serve(config: ServerConfig) -> Result<()> {
    crate::connectors::policy::set_policy(crate::connectors::policy::ConnectorPolicy {
        allow_connect: config.allow_connect.clone(),
        allow_files: config.allow_connector_files,
    });
    let memory_limit = match config.memory_limit {
        Some(l) => {
            info!(memory_limit = %crate::limits::format_size(l as usize), "memory limit");
            l
        }
        None => match crate::state::memory::default_limit() {
            Some((l, of)) => {
                info!(memory_limit = %crate::limits::format_size(l as usize), "memory limit: 70% {of} (set it with --memory-limit)");
                l
            }
            None => {
                tracing::warn!(
                    "cannot tell the machine's memory: no memory limit (set one with --memory-limit)"
                );
                u64::MAX
            }
        },
    };
    let engine = Engine::open_with(
        &config.data_dir,
        crate::engine::EngineLimits {
            query_memory_limit: config.query_memory_limit,
            max_connections: config.max_connections,
            checkpoint_interval: config.checkpoint_interval,
            memory_limit: Some(memory_limit),
            state_cache_size: config.state_cache_size,
            secrets_key_file: config.secrets_key_file.clone(),
            workers: config.workers,
        },
    )
    .await?;
    // pg_locks lists the sessions' advisory locks
    engine
        .catalog
        .set_lock_listing(std::sync::Arc::new(advisory_locks::Listing));
    engine.catalog.bootstrap_superuser(
        config.superuser.as_deref(),
        config.superuser_password.as_deref(),
    )?;
    let auth = auth::AuthConfig::load(config.hba_file.as_deref(), &config.hba, config.insecure)?;
    auth.check_listen(config.listen, &engine.catalog)?;
    let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
    let http = http::start(config.http_listen, engine.clone(), auth.clone()).await?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| WeirError::io(&format!("cannot listen on {}", config.listen), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| WeirError::io("listener address", e))?;
    info!(
        %addr,
        data_dir = %config.data_dir.display(),
        max_connections = config.max_connections,
        workers = config.workers,
        query_memory_limit = %crate::limits::format_size(config.query_memory_limit),
        checkpoint_interval = %match config.checkpoint_interval {
            None => "off".to_owned(),
            Some(d) => format!("{d:?}"),
        },
        allow_connect = %match &config.allow_connect {
            None => "*".to_owned(),
            Some(p) => format!("{} pattern(s)", p.len()),
        },
        "weir is ready to accept connections"
    );
    // machine-readable lines on stdout, for scripts and tests that listen on port 0
    if let Some(h) = http {
        println!("http listening on {h}");
    }
    println!("listening on {addr}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let backend = Arc::new(WeirBackend::with_auth(engine, auth, tls));
    run_backend(listener, backend, config.max_connections).await
}

/// Accept connections on a bound listener. When accepting fails (out of file descriptors,
/// say) the loop waits, longer each time up to a second, and logs at most one line per
/// five seconds, so an exhausted process neither spins nor fills its log.
pub async fn run(listener: TcpListener, engine: Arc<Engine>, max_connections: usize) -> Result<()> {
    run_backend(
        listener,
        Arc::new(WeirBackend::new(engine)),
        max_connections,
    )
    .await
}

/// [`run`] with a backend of its own (authentication and TLS set up).
pub async fn run_backend(
    listener: TcpListener,
    backend: Arc<WeirBackend>,
    max_connections: usize,
) -> Result<()> {
    let slots = connection::ConnectionSlots::new(max_connections);
    let mut backoff = Duration::ZERO;
    let mut failures: u64 = 0;
    let mut last_log: Option<Instant> = None;
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(s) => {
                backoff = Duration::ZERO;
                s
            }
            Err(e) => {
                failures += 1;
                if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
                    warn!(error = %e, failures, "accept failed; backing off");
                    last_log = Some(Instant::now());
                    failures = 0;
                }
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let backend = backend.clone();
        match slots.try_acquire() {
            Some(slot) => {
                tokio::spawn(async move {
                    info!(%peer, "connection opened");
                    connection::serve(socket, backend, None).await;
                    drop(slot);
                    info!(%peer, "connection closed");
                });
            }
            None => {
                let max = slots.max();
                tokio::spawn(async move {
                    info!(%peer, max_connections = max, "connection refused: too many connections");
                    let e = WeirError::new(
                        crate::error::sqlstate::TOO_MANY_CONNECTIONS,
                        "sorry, too many clients already",
                    );
                    connection::serve(socket, backend, Some(e)).await;
                });
            }
        }
    }
}
