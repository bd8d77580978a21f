//! Every line berm-vmm writes on stderr and into `<run-dir>/vmm.jsonl`, as one closed type:
//! [`VmmLine`] is either one of berm-vmm's own [`HostEvent`]s (`"source":"berm-vmm"`) or a
//! guest line it relayed (`"source":"berm-init"`). berm-vmm writes only through these types,
//! and every reader (`berm vm`, `berm attest`, the tests) parses with [`VmmLine::parse`], so
//! no reader indexes untyped JSON and no field can go missing on one side only.
//!
//! A reader refuses a line of a known event that lacks a field, and ignores fields a later
//! writer adds; an event it does not know is [`VmmLineError::UnknownEvent`], which readers
//! pass over (a later berm-vmm may say more).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::host::{
    Backend, ExitLine, GUEST_SOURCE, GreetedLine, HOST_SOURCE, HostSandboxLine, HypervisorLine,
    MeasurementsLine,
};
use crate::{GuestLine, Service};

/// One of berm-vmm's own lines; the `event` field names the variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEvent {
    /// Which backend runs the VM, and why. First, before anything boots.
    Hypervisor(HypervisorLine),
    /// Where the run's sockets and files are.
    Endpoints(EndpointsLine),
    /// What the VM is configured with.
    VmConfig(VmConfigLine),
    /// What is about to boot, hashed before the guest runs.
    Measurements(MeasurementsLine),
    /// How berm-vmm confined itself and its children.
    HostSandbox(HostSandboxLine),
    /// How the libkrun child confined itself (in `hypervisor.log`: the child writes it).
    ChildSandbox(ChildSandboxLine),
    /// `--sandbox-probe`: what the confined berm-vmm could and could not do.
    HostSandboxProbe(SandboxProbeLine),
    /// The guest answered on the control port.
    GuestGreeted(GreetedLine),
    /// berm-vmm got a stop signal and asked the guest to shut down.
    StopSignal(StopSignalLine),
    /// The guest's share of the record reached its cap; later guest events are dropped.
    RecordCapped(RecordCappedLine),
    /// Removing the run dir's sockets and images after the VM ended failed.
    RunDirCleanup(RunDirCleanupLine),
    /// berm-vmm's verdict: its last line before the record is signed.
    Exit(ExitLine),
    /// The record was signed (`record.dsse.json`).
    RecordSigned(RecordSignedLine),
    /// The record could not be signed.
    RecordUnsigned(RecordUnsignedLine),
}

impl HostEvent {
    /// Every event's name on the wire.
    pub const NAMES: [&'static str; 14] = [
        "hypervisor",
        "endpoints",
        "vm_config",
        "measurements",
        "host_sandbox",
        "child_sandbox",
        "host_sandbox_probe",
        "guest_greeted",
        "stop_signal",
        "record_capped",
        "run_dir_cleanup",
        "exit",
        "record_signed",
        "record_unsigned",
    ];

    /// The event's name on the wire.
    pub fn name(&self) -> &'static str {
        let i = match self {
            Self::Hypervisor(_) => 0,
            Self::Endpoints(_) => 1,
            Self::VmConfig(_) => 2,
            Self::Measurements(_) => 3,
            Self::HostSandbox(_) => 4,
            Self::ChildSandbox(_) => 5,
            Self::HostSandboxProbe(_) => 6,
            Self::GuestGreeted(_) => 7,
            Self::StopSignal(_) => 8,
            Self::RecordCapped(_) => 9,
            Self::RunDirCleanup(_) => 10,
            Self::Exit(_) => 11,
            Self::RecordSigned(_) => 12,
            Self::RecordUnsigned(_) => 13,
        };
        Self::NAMES[i]
    }
}

/// The `endpoints` line: the run's sockets and files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointsLine {
    /// The run dir.
    pub run_dir: PathBuf,
    /// The guest's control port, relayed.
    pub control: PathBuf,
    /// The guest's log port, relayed.
    pub logs: PathBuf,
    /// The serial console's output.
    pub console: PathBuf,
    /// The hypervisor's own output.
    pub hypervisor_log: PathBuf,
    /// Each app's MCP socket, in port order.
    pub rpc: Vec<RpcEndpoint>,
    /// Each app's egress socket (guest → host dialer), for apps with egress grants.
    pub egress: Vec<EgressEndpoint>,
}

/// One app's MCP socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcEndpoint {
    /// The app's index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its folder.
    pub app: PathBuf,
    /// The guest port its bermd serves on.
    pub port: u32,
    /// `rpc-<index>.sock`.
    pub socket: PathBuf,
}

/// One app's egress socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressEndpoint {
    /// The app's index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// The guest port its bermd connects to.
    pub port: u32,
    /// The socket the dialer listens on.
    pub socket: PathBuf,
}

/// The `vm_config` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmConfigLine {
    /// The guest architecture.
    pub arch: String,
    /// The backend as chosen and as asked for.
    pub hypervisor: HypervisorChoice,
    /// What this host offers.
    pub detection: HostDetection,
    /// vCPUs.
    pub cpus: u32,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// The guest settings on the kernel command line, `NAME=value`.
    pub settings: Vec<String>,
    /// The words a PVM host adds to the command line, when it does.
    pub pvm_cmdline: Option<String>,
    /// How long berm-vmm waits for the guest's greeting.
    pub boot_timeout_ms: u64,
}

/// The backend as chosen, with what `--hypervisor` asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HypervisorChoice {
    /// The backend.
    pub chosen: Backend,
    /// QEMU's accelerator (`kvm` or `tcg`); `None` for libkrun.
    pub accel: Option<String>,
    /// Why, in a sentence.
    pub reason: String,
    /// What `--hypervisor` asked for.
    pub requested: RequestedBackend,
}

/// What `--hypervisor` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestedBackend {
    /// libkrun where it can run guest user space, else QEMU.
    Auto,
    /// libkrun.
    Krun,
    /// QEMU.
    Qemu,
}

/// What a host offers for running the guest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDetection {
    /// `/dev/kvm` opens read-write.
    pub kvm_usable: bool,
    /// `/dev/kvm` is provided by `kvm_pvm` (cannot run guest user space).
    pub kvm_pvm: bool,
    /// `kvm_intel` or `kvm_amd` is loaded: hardware virtualization.
    pub kvm_hardware: bool,
    /// macOS: Apple's Hypervisor framework is there.
    pub hvf: bool,
    /// `qemu-system-x86_64`, if found.
    pub qemu: Option<PathBuf>,
    /// `qemu-system-aarch64`, if found.
    pub qemu_aarch64: Option<PathBuf>,
    /// `vhost-device-vsock`, if found.
    pub vhost_device_vsock: Option<PathBuf>,
}

/// The `child_sandbox` line the libkrun child writes once confined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSandboxLine {
    /// Which child (`krun-enter`).
    pub process: String,
    /// Its confinement as it applied it.
    pub report: HostSandboxLine,
}

/// The `host_sandbox_probe` line: each attempt's outcome (`allowed`, `EACCES`, `EPERM`,
/// `errno N`, or the error's text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProbeLine {
    /// Connecting to a pathname Unix socket outside the run dir.
    pub connect_pathname_outside: String,
    /// Connecting to an abstract Unix socket.
    pub connect_abstract_socket: String,
    /// Signalling berm-vmm's parent.
    pub kill_parent: String,
    /// Signalling a process that is neither parent nor child.
    pub kill_sibling: String,
    /// An x32 system call, in a child.
    pub x32_call: String,
    /// Reading a file outside the policy.
    pub read_outside: String,
    /// Writing a file outside the policy.
    pub write_outside: String,
    /// Creating a file outside the policy.
    pub create_outside: String,
    /// Executing a program.
    pub exec: String,
    /// Reading the kernel (granted).
    pub read_kernel: String,
    /// Writing in the run dir (granted).
    pub write_run_dir: String,
}

/// The `stop_signal` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopSignalLine {
    /// What berm-vmm did about it (`shutdown requested`).
    pub action: String,
}

/// The `record_capped` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCappedLine {
    /// Bytes of guest events recorded before the cap.
    pub guest_bytes: u64,
    /// The cap.
    pub cap: u64,
}

/// The `run_dir_cleanup` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDirCleanupLine {
    /// What failed.
    pub error: String,
}

/// The `record_signed` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSignedLine {
    /// `record.dsse.json`.
    pub path: PathBuf,
    /// The signed record's `record_sha256` (`recordSha256` in format `berm-attest/1`).
    pub record_sha256: String,
    /// The key's id.
    pub key_id: String,
}

/// The `record_unsigned` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordUnsignedLine {
    /// Why signing failed.
    pub message: String,
}

/// One line of berm-vmm's stderr or `vmm.jsonl`.
// A line is parsed, matched and dropped one at a time: boxing the larger variant would only
// add an allocation per line.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmmLine {
    /// berm-vmm's own (`"source":"berm-vmm"`).
    Host(HostEvent),
    /// A guest line berm-vmm relayed (`"source":"berm-init"`), parsed as strictly as the
    /// host parsed it off the guest's port.
    Guest(GuestLine),
}

/// Why a line is not a [`VmmLine`].
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum VmmLineError {
    /// Not a JSON object: one of berm-vmm's lines for a person, or a torn last line.
    #[error("not a JSON object")]
    NotJson,
    /// `source` is neither `berm-vmm` nor `berm-init`.
    #[error("unknown source {0:?}")]
    UnknownSource(String),
    /// A host event this reader does not know (a later berm-vmm's).
    #[error("unknown berm-vmm event {0:?}")]
    UnknownEvent(String),
    /// A known host event whose fields do not fit its type.
    #[error("the {event} line {message}")]
    Shape {
        /// The event's name.
        event: String,
        /// What serde found wrong, naming the field.
        message: String,
    },
    /// A relayed guest line that does not parse.
    #[error("a relayed guest line: {0}")]
    Guest(#[from] crate::LineError),
}

impl VmmLine {
    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Result<Self, VmmLineError> {
        let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(line) else {
            return Err(VmmLineError::NotJson);
        };
        let source = match object.remove("source") {
            Some(Value::String(source)) => source,
            _ => return Err(VmmLineError::UnknownSource(String::new())),
        };
        match source.as_str() {
            HOST_SOURCE => {
                let event = match object.get("event") {
                    Some(Value::String(event)) => event.clone(),
                    _ => return Err(VmmLineError::UnknownEvent(String::new())),
                };
                if !HostEvent::NAMES.contains(&event.as_str()) {
                    return Err(VmmLineError::UnknownEvent(event));
                }
                serde_json::from_value(Value::Object(object))
                    .map(Self::Host)
                    .map_err(|e| VmmLineError::Shape {
                        event,
                        message: e.to_string(),
                    })
            }
            GUEST_SOURCE => {
                // berm-vmm relays a line of either port; each parses only on its own.
                let text = Value::Object(object).to_string();
                GuestLine::parse(Service::Control, text.as_bytes())
                    .or_else(|_| GuestLine::parse(Service::Logs, text.as_bytes()))
                    .map(Self::Guest)
                    .map_err(VmmLineError::Guest)
            }
            _ => Err(VmmLineError::UnknownSource(source)),
        }
    }

    /// The line as berm-vmm writes it, newline included: `source` first, then the event's
    /// fields in their type's order.
    pub fn to_line(&self) -> String {
        let (source, fields) = match self {
            Self::Host(event) => (HOST_SOURCE, serde_json::to_string(event)),
            Self::Guest(line) => (GUEST_SOURCE, serde_json::to_string(line)),
        };
        // Every line type holds strings, numbers, booleans, lists and string-keyed maps: it
        // serializes, to an object (`{…}`, never empty: each has its event).
        let fields = fields.unwrap_or_else(|_| String::from("{}"));
        let rest = fields.strip_prefix('{').unwrap_or(&fields);
        let mut text = format!("{{\"source\":\"{source}\",{rest}");
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BootComplete, Event};

    #[test]
    fn host_and_guest_lines_round_trip() {
        let lines = [
            VmmLine::Host(HostEvent::Exit(ExitLine {
                status: "clean".into(),
                code: 0,
                message: "the guest powered off (requested)".into(),
            })),
            VmmLine::Host(HostEvent::RecordCapped(RecordCappedLine {
                guest_bytes: 10,
                cap: 8,
            })),
            VmmLine::Host(HostEvent::StopSignal(StopSignalLine {
                action: "shutdown requested".into(),
            })),
            VmmLine::Guest(GuestLine {
                boot_id: "ab-12".into(),
                uptime_ms: 5,
                event: Event::BootComplete(BootComplete { apps: 1 }),
            }),
        ];
        for line in lines {
            let text = line.to_line();
            assert!(text.starts_with("{\"source\":"), "{text}");
            assert_eq!(VmmLine::parse(text.trim_end()).unwrap(), line, "{text}");
        }
    }

    #[test]
    fn every_name_is_its_variants() {
        let line = VmmLine::Host(HostEvent::RunDirCleanup(RunDirCleanupLine {
            error: "x".into(),
        }));
        let text = line.to_line();
        assert!(text.contains("\"event\":\"run_dir_cleanup\""), "{text}");
        let VmmLine::Host(event) = line else {
            unreachable!()
        };
        assert_eq!(event.name(), "run_dir_cleanup");
    }

    #[test]
    fn unknown_events_are_told_apart_from_malformed_ones() {
        assert_eq!(
            VmmLine::parse(r#"{"source":"berm-vmm","event":"later","x":1}"#),
            Err(VmmLineError::UnknownEvent("later".into()))
        );
        let err =
            VmmLine::parse(r#"{"source":"berm-vmm","event":"exit","status":"clean","code":0}"#)
                .unwrap_err();
        assert!(
            err.to_string()
                .contains("the exit line missing field `message`"),
            "{err}"
        );
        assert_eq!(VmmLine::parse("berm-vmm: no"), Err(VmmLineError::NotJson));
        assert!(matches!(
            VmmLine::parse(r#"{"source":"berm-init","event":"boot_complete","apps":1}"#),
            Err(VmmLineError::Guest(_))
        ));
        // A field a later writer adds is ignored.
        let line = r#"{"source":"berm-vmm","event":"stop_signal","action":"shutdown requested","later":true}"#;
        assert!(VmmLine::parse(line).is_ok());
    }
}
