//! The typed lines, and their strict parsing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::host::{CodeSource, Landlock};
use crate::{MAX_LINE_BYTES, PROTOCOL_VERSION};

/// Which of the guest's two line services a connection speaks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Service {
    /// Port 1024: lifecycle events, replies to requests.
    Control,
    /// Port 1025: log lines.
    Logs,
}

impl Service {
    /// The vsock port the guest serves this on.
    pub fn port(self) -> u32 {
        match self {
            Self::Control => crate::CONTROL_PORT,
            Self::Logs => crate::LOGS_PORT,
        }
    }

    /// The name used in lines and socket file names.
    pub fn name(self) -> &'static str {
        match self {
            Self::Control => "control",
            Self::Logs => "logs",
        }
    }
}

/// A request from the host on the control port: `{"op":"status"}` or `{"op":"shutdown"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Ask for a [`Status`] reply.
    Status,
    /// Stop everything, sync, unmount, report [`PowerOff`] and reset the VM.
    Shutdown,
}

/// Why a host request was refused by the guest.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseRequestError {
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("request line is longer than {MAX_LINE_BYTES} bytes")]
    TooLong,
    /// The line is not a JSON object with a known `op` and no other field.
    #[error("request is not {{\"op\":\"status\"}} or {{\"op\":\"shutdown\"}}: {0}")]
    Malformed(String),
}

impl Request {
    /// Parses one request line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Self, ParseRequestError> {
        if line.len() >= MAX_LINE_BYTES {
            return Err(ParseRequestError::TooLong);
        }
        let value: Value = serde_json::from_slice(line)
            .map_err(|e| ParseRequestError::Malformed(e.to_string()))?;
        // serde ignores extra fields beside an internally tagged unit variant's tag even with
        // deny_unknown_fields, so the object's size is checked here.
        match &value {
            Value::Object(map) if map.len() == 1 => {}
            Value::Object(_) => {
                return Err(ParseRequestError::Malformed(
                    "fields other than `op`".into(),
                ));
            }
            _ => return Err(ParseRequestError::Malformed("not a JSON object".into())),
        }
        serde_json::from_value(value).map_err(|e| ParseRequestError::Malformed(e.to_string()))
    }

    /// The request as one line, newline included.
    pub fn to_line(self) -> String {
        match self {
            Self::Status => "{\"op\":\"status\"}\n".to_owned(),
            Self::Shutdown => "{\"op\":\"shutdown\"}\n".to_owned(),
        }
    }
}

/// The first line on every connection: who is speaking and which contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Greeting {
    /// The service this connection reached.
    pub service: Service,
    /// [`PROTOCOL_VERSION`] of the guest.
    pub protocol: u32,
    /// The guest's init, e.g. `berm-init 0.1.0`.
    pub init: String,
}

/// PID 1 started: what kind of guest this is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootStart {
    /// berm-init's pid; 1 unless something else became init.
    pub pid: u32,
    /// `uname -r` of the guest kernel.
    pub kernel_release: String,
    /// Active LSMs in order, as the kernel lists them.
    pub lsm: Vec<String>,
    /// Landlock ABI version, or `None` when Landlock is not available.
    pub landlock_abi: Option<u32>,
    /// Length of `/proc/cmdline` in bytes (the kernel caps it at 2048).
    pub cmdline_bytes: u32,
    /// The options cgroup2 was mounted with.
    pub cgroup2: String,
}

/// Booting finished; the guest serves requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootComplete {
    /// Number of apps started.
    pub apps: u32,
}

/// Booting failed at a named step; the guest powers off next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootFailed {
    /// The step that failed.
    pub step: BootStep,
    /// What went wrong, for a person.
    pub message: String,
    /// The exit code [`PowerOff`] will carry.
    pub exit_code: i32,
}

/// The boot steps that can fail (`boot_failed`); each has its own exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BootStep {
    /// Mounting proc, sys, devtmpfs, cgroup2 and the tmpfs directories.
    Mount,
    /// Reading the `BERM_*` guest settings.
    Settings,
    /// Formatting or mounting the state disk.
    State,
}

impl BootStep {
    /// The step's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mount => "mount",
            Self::Settings => "settings",
            Self::State => "state",
        }
    }
}

impl std::fmt::Display for BootStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The system call filter a guest process runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seccomp {
    /// berm-init's allow list for the process role is loaded.
    AllowList,
}

impl Seccomp {
    /// The word used in lines.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllowList => "allow_list",
        }
    }
}

/// Where an app is in its life, as `status` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AppState {
    /// Its confined process was started; bermd is not ready yet.
    Starting,
    /// bermd serves.
    Ready,
    /// Its process ended.
    Exited,
    /// It was not started.
    Refused,
}

/// Shutdown began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShuttingDown {
    /// `requested`, `boot_failed`, `panic`, …
    pub reason: String,
}

/// The last line of a guest: after it the VM resets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerOff {
    /// Why the guest stopped.
    pub reason: String,
    /// 0 for a clean, requested stop; berm-init's documented codes otherwise.
    pub exit_code: i32,
    /// Processes still alive after the grace period, killed with SIGKILL.
    pub killed: u32,
    /// Mount points that could not be unmounted.
    pub unmount_failed: Vec<String>,
}

/// cgroup limits of an app as read back from the kernel after berm-init wrote them (the
/// kernel's own spelling: `max`, `"50000 100000"`, bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppLimits {
    /// `cpu.max`: quota and period in microseconds.
    pub cpu_max: String,
    /// `memory.max` in bytes.
    pub memory_max: String,
    /// `memory.swap.max` in bytes (berm sets 0).
    pub memory_swap_max: String,
    /// `pids.max`.
    pub pids_max: String,
}

/// How an app's process was confined, as the confined process itself found it just before
/// it exec'd bermd. berm-init starts an app only when every part is in force (fail-closed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enforcement {
    /// `PR_GET_NO_NEW_PRIVS` after setting it.
    pub no_new_privs: bool,
    /// The Landlock ABI the ruleset was built for.
    pub landlock_abi: u32,
    /// How far the Landlock ruleset is enforced.
    pub landlock: Landlock,
    /// The seccomp filter in force.
    pub seccomp: Seccomp,
    /// sha256 of the policy text (Landlock rules and the seccomp deny list), so two boots can
    /// be compared and an attestation can name the policy.
    pub policy_sha256: String,
}

/// An app's confined process started: who it runs as, in which cgroup, under what limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppStarted {
    /// The app's name (its tag).
    pub app: String,
    /// Its index: uid 10000+index, vsock port 5000+index.
    pub index: u32,
    /// The uid it runs as.
    pub uid: u32,
    /// The gid it runs as.
    pub gid: u32,
    /// Its pid in the guest.
    pub pid: u32,
    /// The vsock port its bermd serves MCP on.
    pub port: u32,
    /// Its cgroup, as `/proc/self/cgroup` showed it to the process.
    pub cgroup: String,
    /// Its cgroup limits, read back.
    pub limits: AppLimits,
    /// Its confinement.
    pub enforcement: Enforcement,
}

/// One program an app's bermd deployed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppProgram {
    /// The program's name.
    pub name: String,
    /// sha256 of its wasm.
    pub sha256: String,
    /// Where its machine code came from.
    pub code: CodeSource,
    /// sha256 of the precompiled code file it mapped (`None` unless `code` is
    /// `precompiled`): what `berm attest verify` compares with the host's measurement.
    #[serde(default)]
    pub code_sha256: Option<String>,
    /// How long deploying it took, in milliseconds.
    pub ms: u64,
}

/// An app's bermd is listening and every program is deployed (bermd said so on its
/// readiness pipe; nothing is inferred from its output).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppReady {
    /// The app's name.
    pub app: String,
    /// Its index.
    pub index: u32,
    /// bermd's pid.
    pub pid: u32,
    /// Milliseconds from starting the process to ready.
    pub ms: u64,
    /// Tools it serves.
    pub tools: u32,
    /// Programs it deployed.
    pub programs: Vec<AppProgram>,
    /// The public key its bermd signs its receipts' checkpoints with, made at its start and
    /// never stored: SubjectPublicKeyInfo DER in base64 (the body of its PEM). In the
    /// boot's signed record, so a receipt chains to the attestation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_key: Option<String>,
}

/// One line of an app's receipt log (docs/receipts.md), relayed on the log port as its
/// bermd wrote it, byte for byte (its sha256 is what the next receipt and the checkpoints
/// name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The app whose bermd wrote it.
    pub app: String,
    /// The line, without its newline.
    pub line: String,
}

/// An app was not started; the other apps are unaffected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppRefused {
    /// The app's name (or `app-<index>` when its folder could not be read).
    pub app: String,
    /// Its index.
    pub index: u32,
    /// Why.
    pub reason: String,
}

/// An app's process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppExited {
    /// The app's name.
    pub app: String,
    /// Its index.
    pub index: u32,
    /// Its pid.
    pub pid: u32,
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Signal, if one killed it.
    pub signal: Option<i32>,
}

/// One check of the enforcement probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeCheck {
    /// What was tried, e.g. `write /tmp`.
    pub name: String,
    /// What confinement should make of it, e.g. `EACCES`.
    pub expected: String,
    /// What happened.
    pub outcome: String,
    /// Whether the outcome is the expected one.
    pub pass: bool,
}

/// What the test-only enforcement probe found, run under exactly an app's confinement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeReport {
    /// The app whose confinement it ran under.
    pub app: String,
    /// That app's index.
    pub index: u32,
    /// The uid it ran as.
    pub uid: u32,
    /// The gid it ran as.
    pub gid: u32,
    /// Its cgroup.
    pub cgroup: String,
    /// Its confinement, as the confined process found it.
    pub enforcement: Enforcement,
    /// Every check, in order.
    pub checks: Vec<ProbeCheck>,
}

/// One app in a [`Status`] reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppStatus {
    /// The app's name.
    pub app: String,
    /// Its index.
    pub index: u32,
    /// Its uid.
    pub uid: u32,
    /// Its process, while one runs.
    pub pid: Option<u32>,
    /// Where it is in its life.
    pub state: AppState,
    /// Its cgroup path.
    pub cgroup: String,
    /// Its limits, read back when it started.
    pub limits: Option<AppLimits>,
}

/// Where the guest is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Mounting, reading settings.
    Booting,
    /// Boot completed.
    Running,
    /// Boot failed; powering off.
    Failed,
    /// Shutdown requested.
    ShuttingDown,
}

/// Reply to [`Request::Status`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// Current phase.
    pub phase: Phase,
    /// berm-init's pid.
    pub pid: u32,
    /// Live child processes of PID 1.
    pub children: u32,
    /// Open control connections, this one included.
    pub control_connections: u32,
    /// `MemAvailable` from `/proc/meminfo`, in KiB.
    pub mem_available_kib: u64,
    /// Every app, in index order.
    pub apps: Vec<AppStatus>,
}

/// Reply to a request the guest could not serve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// What was wrong with the request.
    pub message: String,
}

/// Severity of a [`Log`] line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Fine detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something unusual that did not stop the guest.
    Warn,
    /// Something failed.
    Error,
}

/// One line on the log port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// Severity.
    pub level: LogLevel,
    /// Who logged it (`berm-init`, later an app's tag).
    pub source: String,
    /// The text; may hold any character, it is re-escaped whenever printed.
    pub message: String,
}

/// What a guest line says. The JSON field `event` names the variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// First line of every connection.
    Greeting(Greeting),
    /// PID 1 started.
    BootStart(BootStart),
    /// Boot finished.
    BootComplete(BootComplete),
    /// Boot failed.
    BootFailed(BootFailed),
    /// Shutdown began.
    ShuttingDown(ShuttingDown),
    /// Last line before the reset.
    PowerOff(PowerOff),
    /// Reply to `status`.
    Status(Status),
    /// Reply to a bad request.
    Error(ErrorReply),
    /// A log line (logs port only).
    Log(Log),
    /// A line of an app's receipt log (logs port only).
    Receipt(Receipt),
    /// An app's confined process started.
    AppStarted(AppStarted),
    /// An app's bermd is ready.
    AppReady(AppReady),
    /// An app was refused.
    AppRefused(AppRefused),
    /// An app's process ended.
    AppExited(AppExited),
    /// The enforcement probe's findings (test boots only).
    ProbeReport(ProbeReport),
}

impl Event {
    /// The `event` name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Greeting(_) => "greeting",
            Self::BootStart(_) => "boot_start",
            Self::BootComplete(_) => "boot_complete",
            Self::BootFailed(_) => "boot_failed",
            Self::ShuttingDown(_) => "shutting_down",
            Self::PowerOff(_) => "power_off",
            Self::Status(_) => "status",
            Self::Error(_) => "error",
            Self::Log(_) => "log",
            Self::Receipt(_) => "receipt",
            Self::AppStarted(_) => "app_started",
            Self::AppReady(_) => "app_ready",
            Self::AppRefused(_) => "app_refused",
            Self::AppExited(_) => "app_exited",
            Self::ProbeReport(_) => "probe_report",
        }
    }

    /// Whether this event may appear on `service`'s port.
    pub fn allowed_on(&self, service: Service) -> bool {
        match self {
            Self::Greeting(g) => g.service == service,
            Self::Log(_) | Self::Receipt(_) => service == Service::Logs,
            _ => service == Service::Control,
        }
    }
}

/// One line from the guest: an [`Event`] stamped with the boot it belongs to and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestLine {
    /// The guest kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// Guest uptime (CLOCK_BOOTTIME) in milliseconds when the line was written.
    pub uptime_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// Why a guest line was rejected. The line is never acted on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LineError {
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("line of {len} bytes is longer than the {MAX_LINE_BYTES}-byte limit")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// Not UTF-8.
    #[error("line is not UTF-8")]
    NotUtf8,
    /// Not JSON at all.
    #[error("line is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("line is JSON but not an object")]
    NotAnObject,
    /// A field every line carries is missing or has the wrong type.
    #[error("field `{0}` is missing or has the wrong type")]
    BadEnvelope(&'static str),
    /// `boot_id` is not 1 to 64 lowercase hex digits and dashes.
    #[error("boot_id is not 1 to 64 lowercase hex digits and dashes")]
    BadBootId,
    /// The event name is not one this contract knows.
    #[error("unknown event {0:?}")]
    UnknownEvent(String),
    /// The event's fields do not have the contract's shape.
    #[error("event `{event}` has the wrong shape: {message}")]
    Shape {
        /// The event name.
        event: String,
        /// What serde said.
        message: String,
    },
    /// The event is not one this port carries.
    #[error("event `{event}` is not allowed on the {service} port")]
    WrongPort {
        /// The event name.
        event: &'static str,
        /// The port's service.
        service: &'static str,
    },
    /// A greeting with another protocol version.
    #[error("guest speaks protocol {0}, this host speaks {PROTOCOL_VERSION}")]
    WrongProtocol(u32),
    /// A name-like field holds a control character.
    #[error("field `{0}` holds a control character")]
    ControlCharacter(String),
}

const EVENTS: [&str; 15] = [
    "greeting",
    "boot_start",
    "boot_complete",
    "boot_failed",
    "shutting_down",
    "power_off",
    "status",
    "error",
    "log",
    "receipt",
    "app_started",
    "app_ready",
    "app_refused",
    "app_exited",
    "probe_report",
];

impl GuestLine {
    /// Parses one line (without its newline) that arrived on `service`'s port, strictly:
    /// a JSON object with `event`, `boot_id` and `uptime_ms`, the fields of that event and no
    /// other, allowed on that port, with no control characters outside `message` fields.
    pub fn parse(service: Service, line: &[u8]) -> Result<Self, LineError> {
        if line.len() >= MAX_LINE_BYTES {
            return Err(LineError::TooLong { len: line.len() });
        }
        let text = std::str::from_utf8(line).map_err(|_| LineError::NotUtf8)?;
        let value: Value =
            serde_json::from_str(text).map_err(|e| LineError::NotJson(e.to_string()))?;
        let Value::Object(mut object) = value else {
            return Err(LineError::NotAnObject);
        };
        let boot_id = match object.remove("boot_id") {
            Some(Value::String(s)) => s,
            _ => return Err(LineError::BadEnvelope("boot_id")),
        };
        let valid_id = !boot_id.is_empty()
            && boot_id.len() <= 64
            && boot_id
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-'));
        if !valid_id {
            return Err(LineError::BadBootId);
        }
        let uptime_ms = match object.remove("uptime_ms") {
            Some(Value::Number(n)) => n.as_u64().ok_or(LineError::BadEnvelope("uptime_ms"))?,
            _ => return Err(LineError::BadEnvelope("uptime_ms")),
        };
        let name = match object.get("event") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(LineError::BadEnvelope("event")),
        };
        if !EVENTS.contains(&name.as_str()) {
            return Err(LineError::UnknownEvent(name));
        }
        check_control_characters(&object)?;
        let event = deserialize_event(&name, object)?;
        if !event.allowed_on(service) {
            return Err(LineError::WrongPort {
                event: event.name(),
                service: service.name(),
            });
        }
        if let Event::Greeting(g) = &event
            && g.protocol != PROTOCOL_VERSION
        {
            return Err(LineError::WrongProtocol(g.protocol));
        }
        Ok(Self {
            boot_id,
            uptime_ms,
            event,
        })
    }

    /// The line as the guest writes it, newline included.
    pub fn to_line(&self) -> String {
        // Serializing these types cannot fail: every field is a string, number, bool, list or
        // a map with string keys.
        let mut text = serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"));
        text.push('\n');
        text
    }
}

/// Deserializes the event body. Internally tagged enums cannot deny unknown fields
/// themselves, so each variant's struct (which does) is deserialized from the object
/// without its tag.
fn deserialize_event(name: &str, mut object: Map<String, Value>) -> Result<Event, LineError> {
    object.remove("event");
    let value = Value::Object(object);
    let shape = |e: serde_json::Error| LineError::Shape {
        event: name.to_owned(),
        message: e.to_string(),
    };
    Ok(match name {
        "greeting" => Event::Greeting(serde_json::from_value(value).map_err(shape)?),
        "boot_start" => Event::BootStart(serde_json::from_value(value).map_err(shape)?),
        "boot_complete" => Event::BootComplete(serde_json::from_value(value).map_err(shape)?),
        "boot_failed" => Event::BootFailed(serde_json::from_value(value).map_err(shape)?),
        "shutting_down" => Event::ShuttingDown(serde_json::from_value(value).map_err(shape)?),
        "power_off" => Event::PowerOff(serde_json::from_value(value).map_err(shape)?),
        "status" => Event::Status(serde_json::from_value(value).map_err(shape)?),
        "error" => Event::Error(serde_json::from_value(value).map_err(shape)?),
        "log" => Event::Log(serde_json::from_value(value).map_err(shape)?),
        "receipt" => Event::Receipt(serde_json::from_value(value).map_err(shape)?),
        "app_started" => Event::AppStarted(serde_json::from_value(value).map_err(shape)?),
        "app_ready" => Event::AppReady(serde_json::from_value(value).map_err(shape)?),
        "app_refused" => Event::AppRefused(serde_json::from_value(value).map_err(shape)?),
        "app_exited" => Event::AppExited(serde_json::from_value(value).map_err(shape)?),
        "probe_report" => Event::ProbeReport(serde_json::from_value(value).map_err(shape)?),
        other => return Err(LineError::UnknownEvent(other.to_owned())),
    })
}

/// Refuses control characters in every string except `message` fields, so that names,
/// reasons and versions a host may print or compare are plain text.
fn check_control_characters(object: &Map<String, Value>) -> Result<(), LineError> {
    fn walk(field: &str, value: &Value) -> Result<(), LineError> {
        match value {
            Value::String(s) if field != "message" && s.chars().any(char::is_control) => {
                Err(LineError::ControlCharacter(field.to_owned()))
            }
            Value::Array(items) => items.iter().try_for_each(|item| walk(field, item)),
            Value::Object(map) => map.iter().try_for_each(|(k, v)| walk(k, v)),
            _ => Ok(()),
        }
    }
    object.iter().try_for_each(|(k, v)| walk(k, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(extra: &str) -> Vec<u8> {
        format!("{{\"boot_id\":\"0f-a\",\"uptime_ms\":7,{extra}}}").into_bytes()
    }

    #[test]
    fn round_trips_every_event() {
        let events = vec![
            Event::Greeting(Greeting {
                service: Service::Control,
                protocol: PROTOCOL_VERSION,
                init: "berm-init 0.1.0".into(),
            }),
            Event::BootStart(BootStart {
                pid: 1,
                kernel_release: "6.12.117-berm".into(),
                lsm: vec!["capability".into(), "landlock".into()],
                landlock_abi: Some(6),
                cmdline_bytes: 300,
                cgroup2: "rw,nsdelegate".into(),
            }),
            Event::BootComplete(BootComplete { apps: 0 }),
            Event::BootFailed(BootFailed {
                step: BootStep::Settings,
                message: "bad\u{1b}".into(),
                exit_code: 3,
            }),
            Event::ShuttingDown(ShuttingDown {
                reason: "requested".into(),
            }),
            Event::PowerOff(PowerOff {
                reason: "requested".into(),
                exit_code: 0,
                killed: 0,
                unmount_failed: vec![],
            }),
            Event::Status(Status {
                phase: Phase::Running,
                pid: 1,
                children: 0,
                control_connections: 1,
                mem_available_kib: 1000,
                apps: vec![AppStatus {
                    app: "notes".into(),
                    index: 0,
                    uid: 10000,
                    pid: Some(40),
                    state: AppState::Ready,
                    cgroup: "/berm/apps/notes".into(),
                    limits: None,
                }],
            }),
            Event::AppStarted(AppStarted {
                app: "notes".into(),
                index: 0,
                uid: 10000,
                gid: 10000,
                pid: 40,
                port: 5000,
                cgroup: "0::/berm/apps/notes".into(),
                limits: AppLimits {
                    cpu_max: "100000 100000".into(),
                    memory_max: "268435456".into(),
                    memory_swap_max: "0".into(),
                    pids_max: "64".into(),
                },
                enforcement: Enforcement {
                    no_new_privs: true,
                    landlock_abi: 6,
                    landlock: Landlock::FullyEnforced,
                    seccomp: Seccomp::AllowList,
                    policy_sha256: "ab".repeat(32),
                },
            }),
            Event::AppReady(AppReady {
                app: "notes".into(),
                index: 0,
                pid: 40,
                ms: 30,
                tools: 4,
                programs: vec![AppProgram {
                    name: "notes".into(),
                    sha256: "cd".repeat(32),
                    code: CodeSource::Precompiled,
                    code_sha256: Some("ef".repeat(32)),
                    ms: 12,
                }],
                receipt_key: Some("MCowBQYDK2VwAyEA".into()),
            }),
            Event::AppRefused(AppRefused {
                app: "b".into(),
                index: 1,
                reason: "Landlock not enforced".into(),
            }),
            Event::AppExited(AppExited {
                app: "notes".into(),
                index: 0,
                pid: 40,
                code: None,
                signal: Some(9),
            }),
            Event::Error(ErrorReply {
                message: "no".into(),
            }),
        ];
        for event in events {
            let line = GuestLine {
                boot_id: "ab-12".into(),
                uptime_ms: 5,
                event,
            };
            let text = line.to_line();
            assert!(text.ends_with('\n'));
            let parsed = GuestLine::parse(Service::Control, text.trim_end().as_bytes()).unwrap();
            assert_eq!(parsed, line);
        }
        let log = GuestLine {
            boot_id: "ab".into(),
            uptime_ms: 0,
            event: Event::Log(Log {
                level: LogLevel::Info,
                source: "berm-init".into(),
                message: "hi".into(),
            }),
        };
        assert_eq!(
            GuestLine::parse(Service::Logs, log.to_line().trim_end().as_bytes()).unwrap(),
            log
        );
    }

    #[test]
    fn refuses_lines_by_name() {
        let cases: Vec<(Vec<u8>, LineError)> = vec![
            (b"[1,2]".to_vec(), LineError::NotAnObject),
            (b"\"event\"".to_vec(), LineError::NotAnObject),
            (vec![0xff, 0xfe], LineError::NotUtf8),
            (
                b"{\"uptime_ms\":1,\"event\":\"status\"}".to_vec(),
                LineError::BadEnvelope("boot_id"),
            ),
            (
                b"{\"boot_id\":\"ab\",\"uptime_ms\":-1,\"event\":\"status\"}".to_vec(),
                LineError::BadEnvelope("uptime_ms"),
            ),
            (
                b"{\"boot_id\":\"ab\",\"uptime_ms\":1.5,\"event\":\"status\"}".to_vec(),
                LineError::BadEnvelope("uptime_ms"),
            ),
            (
                b"{\"boot_id\":\"AB\",\"uptime_ms\":1,\"event\":\"status\"}".to_vec(),
                LineError::BadBootId,
            ),
            (
                b"{\"boot_id\":\"\",\"uptime_ms\":1,\"event\":\"status\"}".to_vec(),
                LineError::BadBootId,
            ),
            (
                line("\"event\":\"reboot_host\""),
                LineError::UnknownEvent("reboot_host".into()),
            ),
            (line("\"event\":7"), LineError::BadEnvelope("event")),
            (
                line("\"event\":\"shutting_down\",\"reason\":\"a\\u001b[2Jb\""),
                LineError::ControlCharacter("reason".into()),
            ),
            (
                line("\"event\":\"log\",\"level\":\"info\",\"source\":\"x\",\"message\":\"m\""),
                LineError::WrongPort {
                    event: "log",
                    service: "control",
                },
            ),
            (
                line(
                    "\"event\":\"greeting\",\"service\":\"control\",\"protocol\":9,\"init\":\"x\"",
                ),
                LineError::WrongProtocol(9),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                GuestLine::parse(Service::Control, &input),
                Err(want),
                "{}",
                String::from_utf8_lossy(&input)
            );
        }
    }

    #[test]
    fn refuses_wrong_shapes() {
        for extra in [
            "\"event\":\"power_off\",\"reason\":\"x\",\"exit_code\":0,\"killed\":0",
            "\"event\":\"power_off\",\"reason\":\"x\",\"exit_code\":\"0\",\"killed\":0,\"unmount_failed\":[]",
            "\"event\":\"power_off\",\"reason\":\"x\",\"exit_code\":0,\"killed\":0,\"unmount_failed\":[],\"run\":\"rm\"",
            "\"event\":\"status\",\"phase\":\"dancing\",\"pid\":1,\"children\":0,\"control_connections\":1,\"mem_available_kib\":1",
            "\"event\":\"boot_complete\",\"apps\":4294967296",
        ] {
            let err = GuestLine::parse(Service::Control, &line(extra)).unwrap_err();
            assert!(matches!(err, LineError::Shape { .. }), "{extra}: {err}");
        }
    }

    #[test]
    fn greeting_must_name_its_own_port() {
        let greeting =
            line("\"event\":\"greeting\",\"service\":\"logs\",\"protocol\":2,\"init\":\"x\"");
        assert!(GuestLine::parse(Service::Logs, &greeting).is_ok());
        assert_eq!(
            GuestLine::parse(Service::Control, &greeting),
            Err(LineError::WrongPort {
                event: "greeting",
                service: "control"
            })
        );
    }

    #[test]
    fn oversized_lines_are_refused_before_parsing() {
        let big = vec![b' '; MAX_LINE_BYTES];
        assert_eq!(
            GuestLine::parse(Service::Control, &big),
            Err(LineError::TooLong {
                len: MAX_LINE_BYTES
            })
        );
        assert_eq!(Request::parse(&big), Err(ParseRequestError::TooLong));
    }

    #[test]
    fn requests_are_strict() {
        assert_eq!(Request::parse(b"{\"op\":\"status\"}"), Ok(Request::Status));
        assert_eq!(
            Request::parse(b"{\"op\":\"shutdown\"}"),
            Ok(Request::Shutdown)
        );
        for bad in [
            &b"{\"op\":\"exec\"}"[..],
            b"{\"op\":\"status\",\"x\":1}",
            b"[]",
            b"status",
            b"",
        ] {
            assert!(
                matches!(Request::parse(bad), Err(ParseRequestError::Malformed(_))),
                "{:?}",
                bad
            );
        }
        assert_eq!(
            Request::parse(Request::Shutdown.to_line().trim_end().as_bytes()),
            Ok(Request::Shutdown)
        );
    }
}
