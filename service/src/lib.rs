//! bermd: deploys berm programs by name, offers them the syscalls a host
//! grants, and serves every program's tools on one MCP endpoint.
//!
//! - [`service::Service`]: wires the [`registry`] (programs by name under
//!   `$BERM_HOME`, restored on start, the catalog, the secrets) to the call path,
//!   [`calls`] (each call resolved once at its edge, validated against its tool's
//!   schema, timed, traced and given its receipt).
//! - [`syscalls`]: `log`, `clock`, `random`, `kv`, `fs`, `http` — granted
//!   per deployment, nothing by default; [`egress`] builds what `http`
//!   reaches and keeps programs' secrets.
//! - [`app`]: app folders deployed at start (`--app`) and the ready line;
//!   [`listen`]: MCP on an inherited listening socket (`--listen-fd`).
//! - [`mcp`]: the rmcp handler; [`transport`] (Unix socket) and [`http`]
//!   (Streamable HTTP) serve it; [`control`] is the CLI's HTTP API.
//!
//! `docs/service.md` describes the layout, the API and the grants.
// Unsafe code lives only in `sys` (taking inherited descriptors).
#![deny(unsafe_code)]

pub mod app;
pub mod app_record;
pub mod ask;
mod call_threads;
pub mod calls;
pub mod catalog;
pub mod control;
pub mod daemon;
pub mod egress;
pub mod fs;
// For the fuzz targets in fuzz/ only.
#[doc(hidden)]
pub mod fuzzing;
pub mod home;
pub mod http;
pub mod kv;
pub mod listen;
pub mod logs;
pub mod mcp;
pub mod metrics;
mod nested;
pub mod otel;
pub mod param_headers;
mod receipts;
pub mod registry;
pub mod resource_server;
pub mod server_card;
pub mod service;
pub mod session_threads;
pub mod store;
pub mod sys;
pub mod syscalls;
pub mod tasks;
mod trace;
pub mod transport;

pub use daemon::{DaemonConfig, Exit, RunError, run};
pub use service::{Service, ServiceConfig};
