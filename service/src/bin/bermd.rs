//! bermd: the berm service. Argument parsing and wiring only; the logic is
//! in the `berm-service` library. Exit codes: [`berm_service::Exit`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use berm_service::http::HttpConfig;
use berm_service::transport::DEFAULT_MAX_FRAME_BYTES;
use berm_service::{DaemonConfig, Exit, ServiceConfig};
use clap::Parser;

/// Deploys berm programs and serves every one of their tools over MCP.
///
/// Exit codes: 0 stopped by a signal, 1 failed, 2 usage, 3 already running.
#[derive(Parser)]
#[command(name = "bermd", version)]
struct Args {
    /// The data directory (default ~/.berm).
    #[arg(long, env = "BERM_HOME")]
    home: Option<PathBuf>,
    /// Also serve MCP over Streamable HTTP at http://ADDR/mcp (loopback only
    /// unless --http-allow-remote and --http-token-file are given).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Allow --http on an address that is not loopback.
    #[arg(long, requires = "http")]
    http_allow_remote: bool,
    /// A file holding the bearer token HTTP clients must send.
    #[arg(long, requires = "http", value_name = "FILE")]
    http_token_file: Option<PathBuf>,
    /// Largest JSON-RPC message read on the MCP socket, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_FRAME_BYTES)]
    max_frame_bytes: usize,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BERM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                Exit::Usage.into()
            } else {
                Exit::Clean.into()
            };
        }
    };
    match start(args) {
        Ok(()) => Exit::Clean.into(),
        Err((exit, error)) => {
            eprintln!("bermd: {error:#}");
            exit.into()
        }
    }
}

fn start(args: Args) -> Result<(), (Exit, anyhow::Error)> {
    let home = args.home.unwrap_or_else(berm_control::home::berm_home);
    let token = match &args.http_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))
                .map_err(|e| (Exit::Usage, e))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let config = DaemonConfig {
        service: ServiceConfig::new(home),
        http: args.http.map(|addr| HttpConfig {
            addr,
            allow_remote: args.http_allow_remote,
            token,
        }),
        max_frame_bytes: args.max_frame_bytes,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(|e| (Exit::Failed, e))?;
    runtime
        .block_on(berm_service::run(config))
        .map_err(|e| (e.exit(), anyhow::Error::new(e)))
}
