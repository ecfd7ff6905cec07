//! The `weir` command line.

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
    },
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { listen, data_dir } => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
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
            })) {
                eprintln!("weir: {e}");
                std::process::exit(1);
            }
        }
    }
}
