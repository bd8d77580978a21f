//! The line contract between berm-init (PID 1 in the guest) and the host, and the one
//! host-side client that berm-vmm, the tests and the CLI use to speak it.
//!
//! Two vsock ports carry newline-terminated JSON objects (see `docs/design/vm-protocol.md`):
//! control (1024: events and replies from the guest, requests from the host) and logs (1025:
//! log lines from the guest). The guest greets first on every connection.
//!
//! The host-side rule lives here, in one place: every line from the guest is bounded
//! ([`MAX_LINE_BYTES`]), must be a JSON object, is shape-checked against what its port may
//! carry ([`GuestLine::parse`]), and every wait takes a deadline ([`client`]). Nothing the guest
//! says chooses what the host does next: callers get typed values and decide themselves.
//!
//! berm-vmm's own lines (stderr and `vmm.jsonl`) are one closed type too, [`VmmLine`]: its
//! [`HostEvent`]s and the guest lines it relays ([`host_event`]).
#![forbid(unsafe_code)]

pub mod client;
pub mod egress_broker;
pub mod framing;
pub mod host;
pub mod host_event;
mod line;
pub mod private_dir;

pub use host::{CodeSource, Landlock};
pub use host_event::{HostEvent, VmmLine, VmmLineError};
pub use line::{
    AppExited, AppLimits, AppProgram, AppReady, AppRefused, AppStarted, AppState, AppStatus,
    BootComplete, BootFailed, BootStart, BootStep, Enforcement, ErrorReply, Event, Greeting,
    GuestLine, LineError, Log, LogLevel, ParseRequestError, Phase, PowerOff, ProbeCheck,
    ProbeReport, Receipt, Request, Seccomp, Service, ShuttingDown, Status,
};

/// The longest line either side accepts, newline included. Longer lines end the connection.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The version of this contract, sent in every greeting.
pub const PROTOCOL_VERSION: u32 = 2;

/// The guest's control port: lifecycle events, `status` and `shutdown`.
pub const CONTROL_PORT: u32 = 1024;

/// The guest's log port.
pub const LOGS_PORT: u32 = 1025;

/// App `i` is served on port `RPC_PORT_BASE + i` (its bermd's MCP endpoint).
pub const RPC_PORT_BASE: u32 = 5000;

/// App `i`'s `http.fetch` goes to the host dialer on port `EGRESS_PORT_BASE + i` (guest →
/// host: berm-init connects, CID 2, and hands the connection to the app's bermd;
/// [`egress_broker`]). The host tells the apps apart by the port, so
/// what a guest writes never picks another app's grants.
pub const EGRESS_PORT_BASE: u32 = 6000;

/// App `i` runs as uid and gid `APP_UID_BASE + i`.
pub const APP_UID_BASE: u32 = 10000;
