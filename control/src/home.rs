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
