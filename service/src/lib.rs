//! bermd: deploys berm programs by name, offers them the syscalls a host
//! grants, and serves every program's tools on one MCP endpoint.
//!
//! - [`service::Service`]: programs by name under `$BERM_HOME`, restored on
//!   start, calls validated against each tool's schema.
//! - [`syscalls`]: `log`, `clock`, `random`, `kv`, `fs` — granted per
//!   deployment, nothing by default.
//! - [`mcp`]: the rmcp handler; [`transport`] (Unix socket) and [`http`]
//!   (Streamable HTTP) serve it; [`control`] is the CLI's HTTP API.
//!
//! `docs/service.md` describes the layout, the API and the grants.
#![forbid(unsafe_code)]

pub mod catalog;
pub mod control;
pub mod daemon;
pub mod fs;
pub mod home;
pub mod http;
pub mod kv;
pub mod mcp;
pub mod service;
pub mod store;
pub mod syscalls;
pub mod transport;

pub use daemon::{DaemonConfig, Exit, RunError, run};
pub use service::{Service, ServiceConfig};
