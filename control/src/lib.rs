//! bermd's control API, shared by the service and its clients.
//!
//! bermd serves HTTP/1.1 on `$BERM_HOME/control.sock` (mode 0600), the way
//! dockerd serves its API: the socket's file mode is the access control. This
//! crate holds everything both sides must agree on — the routes, the request
//! and response bodies, the grant syntax — and the [`Client`] the `berm` CLI
//! uses, so the two cannot drift. It links no WebAssembly compiler.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `GET /programs` | — | `[ProgramView]` |
//! | `PUT /programs/{name}` | [`DeployRequest`] | [`DeployResponse`] |
//! | `GET /programs/{name}` | — | [`ProgramView`] |
//! | `DELETE /programs/{name}` | — | [`RemoveResponse`] |
//! | `GET /state/{program}` | — | [`NameState`]: what a deploy under the name takes over |
//! | `GET /secrets/{program}` | — | [`SecretList`] (names only) |
//! | `PUT /secrets/{program}/{name}` | [`SecretValue`] | [`SecretList`] |
//! | `DELETE /secrets/{program}/{name}` | — | [`SecretList`] |
//! | `POST /tools/{tool}` (`tool` as MCP serves it: `{program}_{tool}`) | the arguments object | [`CallResponse`] |
//!
//! Every error is a JSON [`ErrorBody`] with a message a person can act on.
#![forbid(unsafe_code)]

mod api;
mod client;
pub mod home;
pub mod inherit;

pub use api::{
    CallOutcome, CallResponse, ContentSummary, DeployRequest, DeployResponse, DeployedFrom,
    ErrorBody, KeyspaceSize, LimitsSpec, NameState, ProgramView, RemoveResponse, SecretList,
    SecretValue,
};
/// Grants are typed in berm-abi; re-exported so clients of the control API need only this crate.
pub use berm_abi::grant::{FsQuota, Grant, GrantParseError};
pub use client::{Client, ClientError};
