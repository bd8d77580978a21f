//! The lines berm-vmm writes about itself (on stderr and into `<run-dir>/vmm.jsonl`), and the
//! files and lines that cross into the guest from the host side: one type each, serialized by
//! the writer and deserialized by every reader (`berm attest`, berm-init, the tests), so a
//! field cannot go missing on one side only. A reader refuses a line that lacks a field; it
//! ignores fields a later writer adds.

use std::path::PathBuf;

use berm_abi::grant::Grant;
use serde::{Deserialize, Serialize};

/// The source stamp of the lines berm-vmm writes about itself.
pub const HOST_SOURCE: &str = "berm-vmm";
/// The source stamp of the guest lines berm-vmm relays.
pub const GUEST_SOURCE: &str = "berm-init";

/// The console line berm-init prints once it listens on vsock. Under QEMU berm-vmm waits for
/// it before its first `CONNECT` (see docs/design/microvm-findings.md).
pub const LISTENING_MARKER: &str = "berm-init: listening on vsock 1024 1025";

/// The backend that ran (or will run) the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// libkrun, in a child of berm-vmm.
    Krun,
    /// QEMU + vhost-device-vsock, as child processes.
    Qemu,
}

impl Backend {
    /// The name used in lines and guest settings.
    pub fn name(self) -> &'static str {
        match self {
            Self::Krun => "krun",
            Self::Qemu => "qemu",
        }
    }
}

/// The `hypervisor` line: which backend runs the VM, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HypervisorLine {
    /// The backend.
    pub chosen: Backend,
    /// QEMU's accelerator (`kvm` or `tcg`); `None` for libkrun.
    pub accel: Option<String>,
    /// Why, in a sentence.
    pub reason: String,
}

/// The `guest_greeted` line: the guest answered on the control port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GreetedLine {
    /// Milliseconds from starting the hypervisor to the greeting.
    pub after_ms: u64,
    /// The greeting's boot id.
    pub boot_id: String,
}

/// The `exit` line: berm-vmm's verdict, its last line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitLine {
    /// The status's name (`clean`, `boot_failed`, … as docs/vm.md lists them).
    pub status: String,
    /// The process exit code.
    pub code: u8,
    /// One sentence for a person.
    pub message: String,
}

/// The `measurements` line: what berm-vmm is about to boot, hashed before the guest runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasurementsLine {
    /// The kernel.
    pub kernel: KernelMeasurement,
    /// The root filesystem.
    pub rootfs: RootfsMeasurement,
    /// The state disk, if one is attached.
    pub state: Option<StateMeasurement>,
    /// Every app, in port order.
    pub apps: Vec<AppMeasurement>,
    /// The engine the apps' code was compiled with, when there are apps: what re-deriving
    /// the code from the programs needs.
    #[serde(default)]
    pub engine: Option<EngineMeasurement>,
    /// The test-only enforcement probe, if attached.
    pub test_probe: Option<ProbeMeasurement>,
}

/// The Wasmtime engine the guest code was compiled with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineMeasurement {
    /// berm's engine fingerprint (Wasmtime version, settings, target, ISA flags).
    pub fingerprint: String,
    /// The target triple.
    pub target: String,
}

/// The kernel as measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelMeasurement {
    /// The guest architecture the kernel is for (`x86_64`, `aarch64`): which pins apply.
    #[serde(default = "default_arch")]
    pub arch: String,
    /// sha256 of the kernel file.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// Whether its hash equals the pin.
    pub pinned: bool,
    /// Where it is.
    pub path: PathBuf,
    /// The pinned Linux version.
    pub linux: String,
    /// sha256 of the pinned kernel config.
    pub config_sha256: String,
    /// The complete command line it boots with.
    pub cmdline: String,
    /// How long hashing took.
    pub hash_ms: u64,
}

/// The architecture of a measurement or record that names none: berm built only x86_64
/// guests before it named the architecture.
pub fn default_arch() -> String {
    "x86_64".to_owned()
}

/// The rootfs as measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootfsMeasurement {
    /// sha256 of the image.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// Whether its hash equals the pin.
    pub pinned: bool,
    /// Where it is.
    pub path: PathBuf,
    /// The pinned filesystem type.
    pub fstype: String,
    /// Always attached read-only.
    pub read_only: bool,
    /// How long hashing took.
    pub hash_ms: u64,
}

/// The state disk as measured, before the guest could write it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMeasurement {
    /// Where it is.
    pub path: PathBuf,
    /// Its size.
    pub size_bytes: u64,
    /// Whether berm-vmm created the file on this run.
    pub created: bool,
    /// Whether berm-vmm formatted it on this run (new or blank).
    pub formatted: bool,
    /// Bytes of zero tail put back because the file was shorter than its filesystem.
    pub restored_bytes: u64,
    /// sha256 over the per-MiB chunk hashes.
    pub chunked_sha256: String,
    /// Bytes actually read (data extents).
    pub hashed_bytes: u64,
    /// How long the digest took.
    pub hash_ms: u64,
}

/// One app as measured on the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppMeasurement {
    /// Its index: port 5000+i, `rpc-<i>.sock`, uid 10000+i.
    pub index: u32,
    /// Its name (berm.toml).
    pub name: String,
    /// The folder.
    pub path: PathBuf,
    /// sha256 over its files and links as length-prefixed raw bytes (`folder_digest` in berm-vmm).
    pub sha256: String,
    /// Files digested.
    pub files: u64,
    /// Its programs.
    pub programs: Vec<ProgramMeasurement>,
    /// Its precompiled code.
    pub code: Vec<CodeMeasurement>,
    /// Its disk image.
    pub image: ImageMeasurement,
    /// What berm-init applies (`launch.json`).
    pub limits: Launch,
    /// The uid it runs as.
    pub uid: u32,
}

/// One program of an app, measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramMeasurement {
    /// Its name.
    pub name: String,
    /// Its wasm file, relative to the folder; or, for a program `berm.toml` names by image,
    /// its reference (`REGISTRY/REPO@sha256:<manifest digest>`).
    pub wasm: String,
    /// sha256 of the wasm.
    pub sha256: String,
    /// The grants that reach past the program's own VM-local state
    /// ([`Grant::is_measured`]): egress (`net=HOST[:PORT]`, `secret:NAME=HOST`; never a
    /// secret's value), which the host dialer enforces for it, and the other programs it may
    /// call (`call=PROGRAM[_TOOL]`); absent when it has none. Typed, so a grant that does not
    /// parse is refused when the line is read, never dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<Grant>,
}

/// One precompiled code file in an app image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeMeasurement {
    /// The program.
    pub program: String,
    /// The file name the guest's engine looks for.
    pub file: String,
    /// sha256 of the file.
    pub sha256: String,
    /// Whether it came from berm-vmm's code cache.
    pub cached: bool,
}

/// A disk image berm-vmm built (an app's, the probe's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageMeasurement {
    /// sha256 of the image.
    pub sha256: String,
    /// Its size.
    pub size: u64,
}

/// The test-only enforcement probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeMeasurement {
    /// Its disk image.
    pub image: ImageMeasurement,
    /// The app whose confinement it runs under.
    pub app: u32,
}

/// `launch.json` in an app's disk: what berm-init needs from `berm.toml`, derived on the
/// host so PID 1 needs no TOML parser. Unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// The app's name (the app name rule: it becomes a cgroup and a directory).
    pub name: String,
    /// `cpu.max`.
    pub cpu_max: String,
    /// `memory.max` in bytes.
    pub memory_max: u64,
    /// `pids.max`.
    pub pids_max: u32,
}

/// The `host_sandbox` line: how berm-vmm confined itself and each child it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSandboxLine {
    /// Whether berm-vmm is confined.
    pub enabled: bool,
    /// The kernel's Landlock ABI (0 when unknown or not applied).
    pub landlock_abi: u32,
    /// How far Landlock is enforced.
    pub landlock: Landlock,
    /// Whether `no_new_privs` is set.
    #[serde(default)]
    pub no_new_privs: bool,
    /// `allow_list` or `none`.
    pub seccomp: String,
    /// The allowed syscalls, argument rules in parentheses, empty when disabled. Everything
    /// else answers `EPERM`; x32 and foreign-arch calls kill.
    pub allowed: Vec<String>,
    /// The Landlock scopes in force (`abstract_unix_socket`; none on kernels before ABI 6).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// sha256 of the policy.
    pub policy_sha256: String,
    /// What the sandbox grants.
    #[serde(default)]
    pub grants: SandboxGrants,
    /// Why it is disabled (`--no-host-sandbox`), if it is.
    pub reason: Option<String>,
    /// The children berm-vmm started, each as measured. A line from before berm measured
    /// them has none.
    #[serde(default)]
    pub children: Vec<HostChild>,
}

/// What a host sandbox grants: everything else is refused. One type for both ends: berm-vmm
/// builds its sandboxes from it (its host sandbox policy) and reports it as it is in the
/// `host_sandbox` line, so what is enforced and what is reported cannot drift apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxGrants {
    /// Files and folders readable (kernel, rootfs, app shares).
    pub read: Vec<PathBuf>,
    /// Files and folders readable and writable (state disk, run dir).
    pub read_write: Vec<PathBuf>,
    /// Devices readable, writable and ioctl-able (`/dev/kvm` for the libkrun child only).
    pub devices: Vec<PathBuf>,
    /// Files and folders readable and executable (a hypervisor child's program and
    /// libraries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub execute: Vec<PathBuf>,
    /// TCP connect left to seccomp and the process's own checks (the egress dialer only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connect_tcp: bool,
}

/// One confined child of berm-vmm, as measured (never stated): by itself once confined
/// (`self_report`: the connector, the dialer, krun-enter), or by berm-vmm from its
/// `/proc/PID/status` and a probe of its ruleset (`proc_status+probe`: QEMU,
/// vhost-device-vsock).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostChild {
    /// The program (`berm-vmm connector`, `berm-vmm dial`, `berm-vmm krun-enter`, or the
    /// path of QEMU or vhost-device-vsock).
    pub program: String,
    /// Its process id.
    pub pid: u32,
    /// Its seccomp role.
    pub role: String,
    /// Landlock as measured.
    pub landlock: Landlock,
    /// `NoNewPrivs` from its `/proc/PID/status`.
    pub no_new_privs: bool,
    /// The filter berm-vmm installed: `allow_list ROLE`, QEMU's `and -sandbox …` after it.
    pub seccomp: String,
    /// `Seccomp` from its `/proc/PID/status`: `filter`, `strict` or `disabled`.
    pub seccomp_mode: String,
    /// `Seccomp_filters` from it.
    pub seccomp_filters: u32,
    /// sha256 of the child's policy.
    pub policy_sha256: String,
    /// How it was measured: `self_report` or `proc_status+probe`.
    pub measured_by: String,
    /// `proc_status+probe` only: what the probe's read outside the policy gave (`EACCES`
    /// when Landlock refused it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_outside: Option<String>,
    /// The hypervisor children (QEMU, vhost-device-vsock, krun-enter): what a connect to a
    /// Unix socket outside every policy gave under the child's confinement (`ENOENT` in the
    /// view of its policy's paths, `EPERM` where its seccomp list has no `connect`,
    /// `allowed` where nothing stopped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_outside: Option<String>,
    /// The same children: what they saw of the filesystem, `policy_paths` (only the paths
    /// their policy grants) or `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<String>,
}

/// How far a Landlock ruleset is enforced, in the landlock crate's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Landlock {
    /// Every access right the ruleset names is enforced.
    FullyEnforced,
    /// This kernel enforces some of them.
    PartiallyEnforced,
    /// None (no Landlock, or not applied).
    NotEnforced,
}

impl Landlock {
    /// The word used in lines.
    pub fn name(self) -> &'static str {
        match self {
            Self::FullyEnforced => "fully_enforced",
            Self::PartiallyEnforced => "partially_enforced",
            Self::NotEnforced => "not_enforced",
        }
    }
}

/// Where a program's machine code came from when bermd deployed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeSource {
    /// The read-only directory of code precompiled on the host.
    Precompiled,
    /// The compiled-code cache, or code already loaded for an identical image.
    Cache,
    /// Compiled now.
    Compiled,
}

/// The one line bermd writes to `--ready-fd` once it serves: what berm-init turns into
/// `app_ready`. Readiness is never inferred from output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BermdReady {
    /// Always true: the line is only written once bermd serves.
    pub ready: bool,
    /// The app's name when bermd runs exactly one app folder, else null.
    pub app: Option<String>,
    /// How many tools the MCP endpoint lists.
    pub tools: u32,
    /// Milliseconds from bermd's start to now.
    pub ms: f64,
    /// Every program deployed from app folders, in folder order.
    pub programs: Vec<ReadyProgram>,
    /// The public key of the receipts it writes to `--receipts-fd`, when it writes them
    /// (SubjectPublicKeyInfo DER, base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_key: Option<String>,
}

/// One program of [`BermdReady`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadyProgram {
    /// Its name.
    pub name: String,
    /// The sha256 of its wasm, lowercase hex.
    pub sha256: String,
    /// Where its code came from.
    pub code: CodeSource,
    /// sha256 of the precompiled code file it mapped, when `code` is `precompiled`: the
    /// guest's word on which code runs, which `berm attest verify` holds against the host's
    /// measurement of the code it shipped.
    #[serde(default)]
    pub code_sha256: Option<String>,
    /// How long getting its code took, in milliseconds.
    pub ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_field_is_an_error_and_a_new_one_is_ignored() {
        let line = r#"{"chosen":"qemu","accel":"tcg","reason":"kvm_pvm","later":1}"#;
        let parsed: HypervisorLine = serde_json::from_str(line).unwrap();
        assert_eq!(parsed.chosen, Backend::Qemu);
        let err = serde_json::from_str::<HypervisorLine>(r#"{"chosen":"qemu","accel":null}"#)
            .unwrap_err();
        assert!(err.to_string().contains("missing field `reason`"), "{err}");
        let err = serde_json::from_str::<Launch>(
            r#"{"name":"a","cpu_max":"max","memory_max":1,"pids_max":1,"run":"sh"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `run`"), "{err}");
    }

    #[test]
    fn the_ready_line_round_trips() {
        let ready = BermdReady {
            ready: true,
            app: Some("notes".into()),
            tools: 4,
            ms: 1.5,
            programs: vec![ReadyProgram {
                name: "notes".into(),
                sha256: "ab".repeat(32),
                code: CodeSource::Precompiled,
                code_sha256: Some("cd".repeat(32)),
                ms: 0.25,
            }],
            receipt_key: None,
        };
        let text = serde_json::to_string(&ready).unwrap();
        assert!(text.contains(r#""code":"precompiled""#), "{text}");
        assert_eq!(serde_json::from_str::<BermdReady>(&text).unwrap(), ready);
    }
}
