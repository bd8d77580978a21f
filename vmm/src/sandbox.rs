//! berm-vmm confines itself: the host sandbox.
//!
//! A VMM is the host process a hostile guest attacks first (every virtio device is parsed in
//! it). Once the VM's files are open and the hypervisor is started, berm-vmm needs nothing but
//! the artifacts, the app shares, the state disk and its run dir, so it takes away everything
//! else before it serves the guest a single byte:
//!
//! - **Landlock**: read the kernel, the rootfs and each app share; read and write the state
//!   disk and the run dir; nothing else on the filesystem (no execute right anywhere), and no
//!   TCP bind or connect where the kernel can refuse them (ABI 4+).
//! - **seccomp**, an allow list ([`berm_confine::Role::Vmm`]): what berm-vmm was traced
//!   calling once confined, and nothing else (`EPERM`); no exec, no executable memory, no
//!   namespaces, no `socket` or `connect` (its connections to the run dir's sockets come from
//!   its connector, `connector.rs`), `kill` only to its own children; x32 and foreign-arch
//!   calls kill the process.
//! - **Landlock scopes** (ABI 6, where the kernel has them): no connecting to abstract Unix
//!   sockets made outside the sandbox. (Its signals are limited by seccomp instead: berm-vmm
//!   must stop its children, whose Landlock domains are not nested in its own.)
//!
//! Both are applied while the process is single-threaded (checked, not assumed: Landlock binds
//! only the calling thread and the threads it creates later), and fail closed: a kernel
//! without Landlock, a ruleset the kernel does not enforce, or a filter that does not load
//! stops the run. A kernel older than Landlock ABI 5 (Linux 6.10) enforces only the rights it
//! knows: the run goes on, reported `partially_enforced` (and refused by `berm attest
//! verify`). `--no-host-sandbox` runs unconfined, and the `host_sandbox` line says so.
//!
//! The hypervisor children (QEMU and vhost-device-vsock, or the libkrun child) get the same
//! policy widened just enough to run (see [`for_program`] and [`ChildSandbox`]), both
//! Landlock scopes (signals and abstract sockets), and their own role's allow list; the
//! connector gets no file at all, both scopes and its own list. How each child ends up
//! confined is measured, not assumed, and reported as a [`ChildReport`] (`measure.rs`).

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use berm_confine::Role;
pub use berm_vm_protocol::host::SandboxGrants;
use berm_vm_protocol::host::{HostChild, HostSandboxLine, Landlock};
use berm_vm_protocol::host_event::SandboxProbeLine;

/// Applying a child sandbox between fork and exec: the only `unsafe` code of this feature.
#[allow(unsafe_code)]
mod sys;

/// Where a dynamically linked program's loader and libraries live (Debian, merged /usr).
const LIBRARY_DIRS: &[&str] = &["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"];
/// Read-only system data a hypervisor child needs: the loader cache and QEMU's firmware.
const SYSTEM_DATA: &[&str] = &["/etc/ld.so.cache", "/usr/share/qemu", "/usr/share/seabios"];

/// `grants` widened just enough to exec `program` and let it load its libraries and
/// firmware: the policy of a hypervisor child (QEMU, vhost-device-vsock).
pub fn for_program(grants: &SandboxGrants, program: &Path) -> SandboxGrants {
    let existing = |paths: &[&str]| -> Vec<PathBuf> {
        paths
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect()
    };
    let mut policy = grants.clone();
    policy.execute.push(program.to_owned());
    policy.execute.extend(existing(LIBRARY_DIRS));
    policy.read.extend(existing(SYSTEM_DATA));
    policy
}

/// How one confined child of berm-vmm is confined, as the `host_sandbox` line reports it:
/// measured, never stated (see `measure.rs`).
#[derive(Clone, Debug, Serialize)]
pub struct ChildReport {
    /// The program (`berm-vmm connector`, `berm-vmm dial` and `berm-vmm krun-enter` for
    /// berm's own).
    pub program: PathBuf,
    /// Its process id.
    pub pid: u32,
    /// Its seccomp role ([`Role::name`]).
    pub role: &'static str,
    /// Landlock as measured: the status `landlock_restrict_self` gave the child itself
    /// (`self_report`) or the probe of its ruleset (`proc_status+probe`, `not_enforced` when
    /// the probe's read outside was not refused).
    pub landlock: &'static str,
    /// `NoNewPrivs` from the child's `/proc/PID/status`.
    pub no_new_privs: bool,
    /// The filter berm-vmm installed: `allow_list ROLE`, QEMU's `and -sandbox …` after it.
    pub seccomp: String,
    /// `Seccomp` from the child's `/proc/PID/status`: `filter`, `strict` or `disabled`.
    pub seccomp_mode: &'static str,
    /// `Seccomp_filters` from it (QEMU's own `-sandbox` adds one once it installs it).
    pub seccomp_filters: u32,
    /// sha256 of the child's policy.
    pub policy_sha256: String,
    /// How it was measured: `self_report` or `proc_status+probe`.
    pub measured_by: &'static str,
    /// `proc_status+probe` only: what the probe's read of `/` gave (`EACCES` when Landlock
    /// refused it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_outside: Option<String>,
    /// What a connect to a Unix socket outside every policy gave under the same confinement
    /// (`ENOENT` in the view of its policy's paths, `EPERM` where seccomp has no `connect`,
    /// `allowed` where nothing stops it): measured for the hypervisor children (the probe of
    /// QEMU's and vhost-device-vsock's, krun-enter's own), not for berm-vmm's helpers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_outside: Option<String>,
    /// What it saw of the filesystem (`view.rs`): `policy_paths` (only the paths its policy
    /// grants) or `host`; for the same children.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub view: Option<&'static str>,
}

/// A child's identity and policy, before its confinement is measured.
#[derive(Clone, Debug)]
pub struct ChildPolicy {
    /// The program.
    pub program: PathBuf,
    /// Its role.
    pub role: Role,
    /// The filter berm-vmm installs, as [`ChildReport::seccomp`] words it.
    pub seccomp: String,
    /// sha256 of its policy.
    pub policy_sha256: String,
}

impl ChildPolicy {
    /// `program` confined to `policy` under `role`'s allow list (`also`: what follows it in
    /// the `seccomp` words, e.g. QEMU's own sandbox).
    pub fn new(
        program: impl Into<PathBuf>,
        policy: &SandboxGrants,
        role: Role,
        also: &str,
    ) -> Self {
        Self {
            program: program.into(),
            role,
            seccomp: format!("allow_list {}{also}", role.name()),
            policy_sha256: policy_sha256(policy, role),
        }
    }

    /// The report of a child that measured itself (process `pid`).
    pub fn self_reported(self, pid: u32, report: &crate::measure::SelfReport) -> ChildReport {
        ChildReport {
            program: self.program,
            pid,
            role: self.role.name(),
            landlock: report.landlock.name(),
            no_new_privs: report.status.no_new_privs,
            seccomp: self.seccomp,
            seccomp_mode: report.status.seccomp.name(),
            seccomp_filters: report.status.seccomp_filters,
            policy_sha256: self.policy_sha256,
            measured_by: "self_report",
            read_outside: None,
            connect_outside: report
                .outside
                .map(|(errno, _)| crate::measure::outcome(errno)),
            view: report.outside.map(|(_, seen)| seen.name()),
        }
    }

    /// The report of an exec'd child `pid`: its `/proc/PID/status` as berm-vmm read it, and
    /// what the probe of its ruleset found.
    pub fn probed(
        self,
        pid: u32,
        status: &crate::measure::ProcStatus,
        probe: &crate::measure::ProbeReport,
    ) -> ChildReport {
        ChildReport {
            program: self.program,
            pid,
            role: self.role.name(),
            landlock: probe.landlock().name(),
            no_new_privs: status.no_new_privs,
            seccomp: self.seccomp,
            seccomp_mode: status.seccomp.name(),
            seccomp_filters: status.seccomp_filters,
            policy_sha256: self.policy_sha256,
            measured_by: "proc_status+probe",
            read_outside: Some(probe.outcome()),
            connect_outside: Some(crate::measure::outcome(probe.connect_outside)),
            view: Some(probe.seen.name()),
        }
    }
}

/// A Landlock ruleset built in the parent, applied by the child between fork and exec (so
/// the child allocates nothing there).
pub struct ChildSandbox {
    #[cfg(target_os = "linux")]
    ruleset: Option<landlock::RulesetCreated>,
    #[cfg(target_os = "linux")]
    role: Role,
    #[cfg(target_os = "linux")]
    filter: berm_confine::BpfProgram,
}

impl ChildSandbox {
    /// Builds the ruleset for `policy` (with both scopes) and `role`'s seccomp filter; fails
    /// closed like [`confine`].
    pub fn prepare(policy: &SandboxGrants, role: Role) -> Result<Self, SandboxError> {
        #[cfg(target_os = "linux")]
        {
            Ok(Self {
                ruleset: Some(linux::ruleset(policy, role, linux::CHILD_SCOPES)?),
                role,
                filter: role
                    .filter()
                    .map_err(|e| SandboxError::Seccomp(Box::new(e)))?,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (policy, role);
            Err(SandboxError::Unsupported)
        }
    }

    /// Applies it to the calling process (the forked child): `Err` unless enforced with
    /// `no_new_privs`, and the spawn then fails, so the child never runs unconfined. Returns
    /// the Landlock status the kernel gave.
    pub fn apply(&mut self) -> std::io::Result<Landlock> {
        #[cfg(target_os = "linux")]
        {
            let ruleset = self
                .ruleset
                .take()
                .ok_or_else(|| std::io::Error::other("the child sandbox was applied twice"))?;
            let landlock = match ruleset.restrict_self() {
                Ok(status) if status.no_new_privs => linux::landlock(status.ruleset),
                Ok(_) => return Err(std::io::Error::other("no_new_privs is not set")),
                Err(e) => return Err(std::io::Error::other(e)),
            };
            if landlock == Landlock::NotEnforced {
                return Err(std::io::Error::other("Landlock is not enforced"));
            }
            // Last, so the program's exec is the first call it filters.
            berm_confine::apply(self.role, &self.filter).map_err(std::io::Error::other)?;
            Ok(landlock)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(std::io::Error::other("no host sandbox on this OS"))
        }
    }
}

/// Makes the child of `command` apply `sandbox` between fork and exec; a child that cannot
/// is never executed (the spawn fails with the error).
pub fn confine_child(command: &mut std::process::Command, mut sandbox: ChildSandbox) {
    sys::confine_child(command, move || sandbox.apply().map(drop));
}

/// sha256 of the policy's canonical JSON (`grants` and `role`'s syscall policy), so a
/// record can say exactly which policy a run had.
pub fn policy_sha256(grants: &SandboxGrants, role: Role) -> String {
    let mut canonical = serde_json::json!({
        "landlock_handled_abi": 6,
        "read": grants.read, "read_write": grants.read_write, "devices": grants.devices,
        "execute": grants.execute,
        "seccomp": seccomp_text(role),
    });
    if grants.connect_tcp {
        canonical["connect_tcp"] = true.into();
    }
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// `role`'s syscall policy as [`policy_sha256`] hashes it: the allow list on Linux; elsewhere
/// the plain statement that there is none.
fn seccomp_text(role: Role) -> String {
    #[cfg(target_os = "linux")]
    {
        role.policy_text()
    }
    #[cfg(not(target_os = "linux"))]
    {
        format!("seccomp role {}\nseccomp none on this OS\n", role.name())
    }
}

/// What was applied, as the `host_sandbox` line reports it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Whether berm-vmm is confined.
    pub enabled: bool,
    /// The kernel's Landlock ABI (0 when unknown or not applied).
    pub landlock_abi: u32,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    pub landlock: &'static str,
    /// Whether `no_new_privs` is set.
    pub no_new_privs: bool,
    /// `allow_list` or `none`.
    pub seccomp: &'static str,
    /// The allowed syscalls, argument rules in parentheses ([`Role::describe`]), empty when
    /// disabled. Everything else answers `EPERM`; x32 and foreign-arch calls kill.
    pub allowed: Vec<String>,
    /// The Landlock scopes in force (`abstract_unix_socket`; none on kernels before ABI 6).
    pub scopes: Vec<&'static str>,
    /// [`policy_sha256`].
    pub policy_sha256: String,
    /// The grants.
    pub grants: SandboxGrants,
    /// Why it is disabled (`--no-host-sandbox`), if it is.
    pub reason: Option<String>,
    /// The hypervisor children berm-vmm started, and how each is confined.
    pub children: Vec<ChildReport>,
}

impl Report {
    /// The report for a run with `--no-host-sandbox`.
    pub fn disabled(reason: &str) -> Self {
        Self {
            enabled: false,
            landlock_abi: 0,
            landlock: "not_enforced",
            no_new_privs: false,
            seccomp: "none",
            allowed: Vec::new(),
            scopes: Vec::new(),
            policy_sha256: policy_sha256(&SandboxGrants::default(), Role::Vmm),
            grants: SandboxGrants::default(),
            reason: Some(reason.to_owned()),
            children: Vec::new(),
        }
    }
}

impl Report {
    /// The `host_sandbox` line this report is written as.
    pub fn line(&self) -> HostSandboxLine {
        HostSandboxLine {
            enabled: self.enabled,
            landlock_abi: self.landlock_abi,
            landlock: landlock_word(self.landlock),
            no_new_privs: self.no_new_privs,
            seccomp: self.seccomp.to_owned(),
            allowed: self.allowed.clone(),
            scopes: self.scopes.iter().map(|s| (*s).to_owned()).collect(),
            policy_sha256: self.policy_sha256.clone(),
            grants: self.grants.clone(),
            reason: self.reason.clone(),
            children: self.children.iter().map(ChildReport::line).collect(),
        }
    }
}

impl ChildReport {
    /// The child as the `host_sandbox` line lists it.
    pub fn line(&self) -> HostChild {
        HostChild {
            program: self.program.display().to_string(),
            pid: self.pid,
            role: self.role.to_owned(),
            landlock: landlock_word(self.landlock),
            no_new_privs: self.no_new_privs,
            seccomp: self.seccomp.clone(),
            seccomp_mode: self.seccomp_mode.to_owned(),
            seccomp_filters: self.seccomp_filters,
            policy_sha256: self.policy_sha256.clone(),
            measured_by: self.measured_by.to_owned(),
            read_outside: self.read_outside.clone(),
            connect_outside: self.connect_outside.clone(),
            view: self.view.map(str::to_owned),
        }
    }
}

/// A Landlock status word of a report (always one [`Landlock::name`] gave) as its type.
fn landlock_word(word: &str) -> Landlock {
    crate::measure::landlock_named(word.as_bytes()).unwrap_or(Landlock::NotEnforced)
}

/// Why berm-vmm could not confine itself (the run stops: fail-closed).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// More than one thread: Landlock would bind only this one.
    #[error(
        "berm-vmm has {0} threads where the host sandbox needs exactly one; refusing to run partly confined"
    )]
    Threaded(usize),
    /// A granted path could not be opened for its rule.
    #[error("the host sandbox cannot grant {path}")]
    Grant {
        /// The path.
        path: PathBuf,
        /// What Landlock said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Landlock could not be applied, or not fully.
    #[error(
        "Landlock is {status} on this kernel, so berm-vmm cannot confine itself; run on a kernel with Landlock enabled (lsm=…,landlock) or pass --no-host-sandbox to run unconfined"
    )]
    Landlock {
        /// What the kernel allowed.
        status: String,
    },
    /// The Landlock calls failed.
    #[error("applying the Landlock ruleset failed")]
    Ruleset(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The seccomp filter could not be built or loaded.
    #[error("loading the seccomp allow list failed")]
    Seccomp(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// This OS has no host sandbox in berm-vmm yet.
    #[error(
        "berm-vmm has no host sandbox on this OS yet; pass --no-host-sandbox to run unconfined"
    )]
    Unsupported,
}

/// The threads of this process, from `/proc/self/status`.
pub fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Confines the calling process (which must be single-threaded) to `policy` and `role`'s
/// allow list, fail-closed. `children` are the only processes it may signal (berm-vmm's
/// hypervisor children; none for the libkrun child).
pub fn confine(
    policy: &SandboxGrants,
    role: Role,
    children: &[u32],
) -> Result<Report, SandboxError> {
    confine_counted(policy, role, children, thread_count())
}

/// [`confine`], with the process's thread count taken beforehand (by a process that has since
/// entered a view without `/proc`: the libkrun child, which makes no thread in between).
pub fn confine_counted(
    policy: &SandboxGrants,
    role: Role,
    children: &[u32],
    threads: Option<usize>,
) -> Result<Report, SandboxError> {
    #[cfg(target_os = "linux")]
    {
        linux::confine(policy, role, children, threads)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (policy, role, children, threads);
        Err(SandboxError::Unsupported)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus,
        PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };

    use super::*;

    /// The access rights berm-vmm asks the kernel to handle (ABI 5: up to ioctl on devices).
    const HANDLED: ABI = ABI::V5;
    /// berm-vmm's own scopes: abstract sockets only (it must signal its children, whose
    /// domains are siblings of its own; seccomp limits its kill() to them instead).
    pub(super) const VMM_SCOPES: &[Scope] = &[Scope::AbstractUnixSocket];
    /// A hypervisor child's scopes: no abstract sockets and no signals outside its domain.
    pub(super) const CHILD_SCOPES: &[Scope] = &[Scope::AbstractUnixSocket, Scope::Signal];

    fn boxed<E: std::error::Error + Send + Sync + 'static>(
        e: E,
    ) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(e)
    }

    fn rule(path: &Path, access: BitFlags<AccessFs>) -> Result<PathBeneath<PathFd>, SandboxError> {
        let grant = |e| SandboxError::Grant {
            path: path.to_owned(),
            source: boxed(e),
        };
        let fd = PathFd::new(path).map_err(grant)?;
        // A rule on a file may only carry file rights; the kernel refuses directory rights.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(HANDLED)
        };
        Ok(PathBeneath::new(fd, access))
    }

    /// The Landlock ruleset for `policy` under `role`, created but not yet applied.
    ///
    /// A role that connects by pathname (the egress vsock device, `view.rs`) also gets
    /// Landlock's own rule for it where the kernel has one (ABI 9, Linux 7.1:
    /// `LANDLOCK_ACCESS_FS_RESOLVE_UNIX`): connecting only to sockets beneath its read-write
    /// paths (the run dir). It is asked for only on such a kernel, since an older one would
    /// leave the ruleset `partially_enforced`; there the view alone holds the rule.
    pub(super) fn ruleset(
        policy: &SandboxGrants,
        role: Role,
        scopes: &[Scope],
    ) -> Result<landlock::RulesetCreated, SandboxError> {
        let resolve_unix = crate::view::isolated(role) && crate::sys::landlock_abi() >= 9;
        let resolve = if resolve_unix {
            BitFlags::from(AccessFs::ResolveUnix)
        } else {
            BitFlags::empty()
        };
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        let read_write = AccessFs::from_all(HANDLED) & !AccessFs::Execute;
        let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
        let mut ruleset = Ruleset::default()
            // Landlock itself is required (ABI 1: read, write, execute, create, remove). The
            // later rights — refer (ABI 2), truncate (3), TCP (4), device ioctl (5) — are
            // applied where the kernel has them; without them the status is
            // `partially_enforced`, which the host_sandbox line and `berm attest` report.
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .map_err(|e| landlock_error(&e))?
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(HANDLED) | resolve)
            .map_err(|e| SandboxError::Ruleset(boxed(e)))?
            .handle_access(if policy.connect_tcp {
                BitFlags::from(AccessNet::BindTcp)
            } else {
                AccessNet::from_all(ABI::V4)
            })
            .map_err(|e| SandboxError::Ruleset(boxed(e)))?
            // ABI 6 (Linux 6.12); without it the status reads partially_enforced.
            .scope(scopes.iter().fold(BitFlags::empty(), |all, &s| all | s))
            .map_err(|e| SandboxError::Ruleset(boxed(e)))?
            .create()
            .map_err(|e| SandboxError::Ruleset(boxed(e)))?;
        for (paths, access) in [
            (&policy.read, read),
            (&policy.read_write, read_write | resolve),
            (&policy.devices, device),
            (&policy.execute, read | AccessFs::Execute),
        ] {
            for path in paths {
                ruleset = ruleset
                    .add_rule(rule(path, access)?)
                    .map_err(|e| SandboxError::Ruleset(boxed(e)))?;
            }
        }
        Ok(ruleset)
    }

    pub(super) fn confine(
        policy: &SandboxGrants,
        role: Role,
        children: &[u32],
        threads: Option<usize>,
    ) -> Result<Report, SandboxError> {
        match threads {
            Some(1) => {}
            Some(n) => return Err(SandboxError::Threaded(n)),
            None => return Err(SandboxError::Threaded(0)),
        }
        let scopes = if role == Role::Vmm {
            VMM_SCOPES
        } else {
            CHILD_SCOPES
        };
        let status = ruleset(policy, role, scopes)?
            .restrict_self()
            .map_err(|e| SandboxError::Ruleset(boxed(e)))?;
        let abi = match status.landlock {
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } => kernel_abi.map_or(effective_abi as u32, |k| k as u32),
            _ => 0,
        };
        let enforced = landlock(status.ruleset);
        let landlock = enforced.name();
        // Landlock's core is a hard requirement above; a status short of enforced here would
        // mean the kernel accepted nothing, so fail closed.
        if enforced == Landlock::NotEnforced || !status.no_new_privs {
            return Err(SandboxError::Landlock {
                status: landlock.replace('_', " "),
            });
        }
        let filter = role
            .filter_with_children(children)
            .map_err(|e| SandboxError::Seccomp(boxed(e)))?;
        // All threads: there is one (checked), and any the C library might have started would
        // be filtered too.
        berm_confine::apply_all_threads(role, &filter)
            .map_err(|e| SandboxError::Seccomp(boxed(e)))?;
        Ok(Report {
            enabled: true,
            landlock_abi: abi,
            landlock,
            no_new_privs: status.no_new_privs,
            seccomp: "allow_list",
            allowed: role.describe(),
            scopes: if abi >= 6 {
                scopes.iter().map(|&s| scope_name(s)).collect()
            } else {
                Vec::new()
            },
            policy_sha256: policy_sha256(policy, role),
            grants: policy.clone(),
            reason: None,
            children: Vec::new(),
        })
    }

    /// The line's word for a ruleset status.
    pub(super) fn landlock(status: RulesetStatus) -> Landlock {
        match status {
            RulesetStatus::FullyEnforced => Landlock::FullyEnforced,
            RulesetStatus::PartiallyEnforced => Landlock::PartiallyEnforced,
            RulesetStatus::NotEnforced => Landlock::NotEnforced,
        }
    }

    fn landlock_error(e: &landlock::RulesetError) -> SandboxError {
        SandboxError::Landlock {
            status: format!("unavailable ({e})"),
        }
    }

    fn scope_name(scope: Scope) -> &'static str {
        match scope {
            Scope::AbstractUnixSocket => "abstract_unix_socket",
            Scope::Signal => "signal",
            _ => "other",
        }
    }
}

/// What the `host_sandbox_probe` line reports: berm-vmm, once confined, tries what the sandbox
/// must refuse and what it must still allow, and says what happened (used by the tests, and by
/// anyone who wants to see the sandbox hold on their machine).
///
/// `sibling_pid` is a process that is neither berm-vmm's parent nor its child (the test starts one
/// beside berm-vmm and names it in `FILE.pid`, read before confinement).
pub fn probe(
    outside: &Path,
    kernel: &Path,
    run_dir: &Path,
    sibling_pid: Option<u32>,
) -> SandboxProbeLine {
    use std::io::{Read, Write};
    fn outcome<T>(result: std::io::Result<T>) -> String {
        match result {
            Ok(_) => "allowed".into(),
            Err(e) => match e.raw_os_error() {
                Some(libc::EACCES) => "EACCES".into(),
                Some(libc::EPERM) => "EPERM".into(),
                Some(code) => format!("errno {code}"),
                None => e.to_string(),
            },
        }
    }
    let sibling = outside.with_extension("berm-probe-created");
    // Inherited stdio: `Stdio::null()` would open /dev/null first, which the sandbox refuses
    // (EACCES) before exec is even tried. /bin/true prints nothing.
    let exec = std::process::Command::new("/bin/true").status();
    // The test binds a Unix socket beside `outside` (a pathname outside the run dir) and an
    // abstract one named after it.
    let socket = outside.with_extension("sock");
    let abstract_name = format!("berm-probe:{}", outside.display());
    #[cfg(target_os = "linux")]
    let connect_abstract = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name)
            .and_then(|addr| std::os::unix::net::UnixStream::connect_addr(&addr))
    };
    #[cfg(not(target_os = "linux"))]
    let connect_abstract: std::io::Result<()> = {
        let _ = abstract_name;
        Err(std::io::Error::other("no abstract sockets on this OS"))
    };
    SandboxProbeLine {
        connect_pathname_outside: outcome(std::os::unix::net::UnixStream::connect(&socket)),
        connect_abstract_socket: outcome(connect_abstract),
        kill_parent: outcome(crate::may_signal(crate::parent())),
        kill_sibling: sibling_pid.map_or_else(
            || "no sibling named".into(),
            |pid| outcome(crate::may_signal(pid)),
        ),
        x32_call: crate::x32_call_in_child(),
        read_outside: outcome(std::fs::File::open(outside).and_then(|mut f| f.read(&mut [0u8; 1]))),
        write_outside: outcome(
            std::fs::File::options()
                .append(true)
                .open(outside)
                .and_then(|mut f| f.write_all(b"x")),
        ),
        create_outside: outcome(std::fs::File::create_new(&sibling)),
        exec: outcome(exec),
        read_kernel: outcome(std::fs::File::open(kernel).and_then(|mut f| f.read(&mut [0u8; 1]))),
        write_run_dir: outcome(std::fs::write(run_dir.join("sandbox-probe"), b"ok")),
    }
}
