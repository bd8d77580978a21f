//! Where bermd keeps its state and sockets, so the CLI finds them the same way.

use std::path::PathBuf;

/// The environment variable naming bermd's data directory.
pub const HOME_ENV: &str = "BERM_HOME";

/// The control socket's file name inside `$BERM_HOME`.
pub const CONTROL_SOCKET: &str = "control.sock";

/// The MCP socket's file name inside `$BERM_HOME`.
pub const MCP_SOCKET: &str = "mcp.sock";

/// `$BERM_HOME`, or `~/.berm` when it is unset (or `./.berm` without a home).
pub fn berm_home() -> PathBuf {
    if let Some(dir) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".berm"),
        None => PathBuf::from(".berm"),
    }
}

/// The file in `$BERM_HOME` where bermd keeps the bearer token it generated
/// for `--http` (mode 0600), reused across restarts so configured clients
/// keep working.
pub const HTTP_TOKEN: &str = "http-token";

/// The file in `$BERM_HOME` where a bermd serving `--http` records how to
/// reach it ([`HttpInfo`]), so `berm http` can tell a client; written at
/// start, removed on a clean stop.
pub const HTTP_INFO: &str = "http.json";

/// What `$BERM_HOME/http.json` holds: where bermd serves MCP over HTTP and
/// which file holds the token every request must carry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HttpInfo {
    /// The endpoint, e.g. `http://127.0.0.1:8765/mcp`.
    pub url: String,
    /// The bearer token's file, or none when bermd runs with `--no-auth`.
    pub token_file: Option<PathBuf>,
}
