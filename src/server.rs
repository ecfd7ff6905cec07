//! The Postgres wire protocol front end (pgwire): accepts connections, runs the startup
//! handshake, and hands simple and extended queries to the engine.

pub mod copy;
pub mod encode;
pub mod handler;
pub mod params;
pub mod session;
pub mod streaming;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use pgwire::tokio::process_socket;
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
}

/// Open the database and serve until the process is stopped.
pub async fn serve(config: ServerConfig) -> Result<()> {
    let engine = Engine::open(&config.data_dir).await?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| WeirError::io(&format!("cannot listen on {}", config.listen), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| WeirError::io("listener address", e))?;
    info!(%addr, data_dir = %config.data_dir.display(), "weir is ready to accept connections");
    // one machine-readable line on stdout, for scripts and tests that listen on port 0
    println!("listening on {addr}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    run(listener, engine).await
}

/// Accept connections on a bound listener.
pub async fn run(listener: TcpListener, engine: Arc<Engine>) -> Result<()> {
    let backend = Arc::new(WeirBackend::new(engine));
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "accept failed");
                continue;
            }
        };
        let backend = backend.clone();
        tokio::spawn(async move {
            info!(%peer, "connection opened");
            if let Err(e) = process_socket(socket, None, backend).await {
                info!(%peer, error = %e, "connection closed with error");
            } else {
                info!(%peer, "connection closed");
            }
        });
    }
}
