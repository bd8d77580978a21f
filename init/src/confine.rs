//! `berm-init confine PLAN`: the short-lived process between PID 1 and an app's bermd.
//!
//! PID 1 has threads, so it cannot safely do this work between fork and exec. Instead it
//! starts its own binary again, as a fresh single-threaded process, which confines itself
//! step by step and then execs bermd (or, on a test boot, the enforcement probe):
//!
//! 1. joins the app's cgroup (as root, before anything else, so every later allocation is
//!    charged to the app);
//! 2. listens on the app's vsock port, handing the socket to bermd as fd 4 (bermd then needs
//!    no socket(2) of its own, and the seccomp filter refuses it);
//! 3. sets no_new_privs and drops to the app's uid and gid, with no supplementary groups;
//! 4. applies the Landlock ruleset (read the app image and bermd; write only the app's
//!    workspace; no signals or abstract sockets outside the domain);
//! 5. loads the seccomp filter (last: it refuses calls the earlier steps need);
//! 6. reports what is in force on fd 3 — and refuses to go on unless all of it is
//!    (fail-closed) — then execs.
//!
//! The plan comes from PID 1 as one JSON argument; this process decides nothing itself.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;

use berm_vm_protocol::{Enforcement, Landlock, Seccomp};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::sys;

/// The fd the report goes to.
pub const REPORT_FD: i32 = 3;
/// The fd bermd finds its listening socket on.
pub const LISTEN_FD: i32 = 4;
/// The fd bermd writes its ready line to.
pub const READY_FD: i32 = 5;
/// Exit code when the plan cannot be carried out in full.
const REFUSED: i32 = 78;

/// What PID 1 asks for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The app's name.
    pub app: String,
    /// uid to run as.
    pub uid: u32,
    /// gid to run as.
    pub gid: u32,
    /// The app's cgroup directory.
    pub cgroup: String,
    /// vsock port to listen on and pass as fd 4 (none for the probe).
    pub listen_port: Option<u32>,
    /// Trees the process may read.
    pub read: Vec<String>,
    /// Files the process may read and execute.
    pub exec: Vec<String>,
    /// Trees the process may read and write.
    pub write: Vec<String>,
    /// The program to exec, and its arguments.
    pub argv: Vec<String>,
    /// Its environment.
    pub env: Vec<(String, String)>,
}

/// What the confined process reports on fd 3, one JSON line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Report {
    /// Everything is in force; exec follows.
    Confined {
        /// `/proc/self/cgroup`, read after joining.
        cgroup: String,
        /// uid after dropping.
        uid: u32,
        /// gid after dropping.
        gid: u32,
        /// What is enforced.
        enforcement: Enforcement,
    },
    /// Something could not be put in force; the process exits without exec.
    Refused(String),
}

/// Syscalls an app never needs and must not reach: io_uring (its own syscall surface),
/// namespaces, ptrace and cross-process memory access, the mount family, modules and kexec,
/// bpf and perf, keyrings, reboot and swap, and new sockets (bermd gets its one socket
/// ready-made). Refused with EPERM.
const DENIED: &[(&str, libc::c_long)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("socket", libc::SYS_socket),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("adjtimex", libc::SYS_adjtimex),
];

/// Flags of clone(2) that create namespaces: refused like unshare(2).
const CLONE_NAMESPACES: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWTIME) as u64;

/// Runs the plan in argument 2; never returns.
pub fn main() -> ! {
    let mut report = sys::take_fd(REPORT_FD);
    let outcome = std::env::args()
        .nth(2)
        .ok_or_else(|| "no plan given".to_owned())
        .and_then(|text| {
            serde_json::from_str::<Plan>(&text).map_err(|e| format!("unreadable plan: {e}"))
        })
        .and_then(|plan| confine(&plan).map(|confined| (plan, confined)));
    let (plan, confined) = match outcome {
        Ok(done) => done,
        Err(reason) => {
            let _ = writeln!(report, "{}", json(&Report::Refused(reason)));
            std::process::exit(REFUSED);
        }
    };
    let _ = writeln!(report, "{}", json(&confined));
    drop(report);
    let error = std::process::Command::new(&plan.argv[0])
        .args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .exec();
    eprintln!("berm-init confine: exec {} failed: {error}", plan.argv[0]);
    std::process::exit(127)
}

fn json(report: &Report) -> String {
    serde_json::to_string(report).unwrap_or_else(|_| "{\"refused\":\"unserializable\"}".into())
}

fn confine(plan: &Plan) -> Result<Report, String> {
    if plan.argv.is_empty() {
        return Err("the plan names no program".into());
    }
    std::fs::write(format!("{}/cgroup.procs", plan.cgroup), "0")
        .map_err(|e| format!("joining cgroup {}: {e}", plan.cgroup))?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?
        .trim()
        .to_owned();
    if let Some(port) = plan.listen_port {
        let listener = sys::vsock_listen(port).map_err(|e| format!("vsock port {port}: {e}"))?;
        // The socket may already be fd 4 (the lowest free number): then it is kept open as it
        // is; otherwise it is duplicated there and the original closed.
        if std::os::fd::AsRawFd::as_raw_fd(&listener) == LISTEN_FD {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(listener);
        } else {
            sys::dup_to(&listener, LISTEN_FD)
                .map_err(|e| format!("placing fd {LISTEN_FD}: {e}"))?;
        }
    }
    for fd in [LISTEN_FD, READY_FD] {
        // Both are meant for the program (fd 5 only when PID 1 passed it); fcntl on a number
        // that is not open fails with EBADF and changes nothing.
        let _ = sys::inherit(&RawNumber(fd));
    }
    let no_new_privs = sys::set_no_new_privs().map_err(|e| format!("setting no_new_privs: {e}"))?;
    sys::become_user(plan.uid, plan.gid)
        .map_err(|e| format!("switching to uid {} gid {}: {e}", plan.uid, plan.gid))?;
    let (abi, landlock) = restrict_landlock(plan)?;
    let (filters, policy_sha256) = seccomp_filters(plan, abi)?;
    for filter in &filters {
        seccompiler::apply_filter(filter).map_err(|e| format!("loading seccomp filter: {e}"))?;
    }
    let landlock = match landlock {
        RulesetStatus::FullyEnforced => Landlock::FullyEnforced,
        RulesetStatus::PartiallyEnforced => Landlock::PartiallyEnforced,
        RulesetStatus::NotEnforced => Landlock::NotEnforced,
    };
    if landlock != Landlock::FullyEnforced || !no_new_privs {
        return Err(format!(
            "Landlock is {} (ABI {}), no_new_privs {no_new_privs}: refusing to run unconfined",
            landlock.name(),
            abi as u32
        ));
    }
    Ok(Report::Confined {
        cgroup,
        uid: sys::ids().0,
        gid: sys::ids().1,
        enforcement: Enforcement {
            no_new_privs,
            landlock_abi: abi as u32,
            landlock,
            seccomp: Seccomp::Filter,
            policy_sha256,
        },
    })
}

/// An fd given by number only, for the flag calls in [`sys`].
struct RawNumber(i32);

impl std::os::fd::AsRawFd for RawNumber {
    fn as_raw_fd(&self) -> i32 {
        self.0
    }
}

/// The newest Landlock ABI this build knows; the kernel's own is checked against it.
const WANTED_ABI: ABI = ABI::V6;

fn restrict_landlock(plan: &Plan) -> Result<(ABI, RulesetStatus), String> {
    let abi = WANTED_ABI;
    let err = |what: &str, e: &dyn std::fmt::Display| format!("Landlock {what}: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| err("filesystem access", &e))?
        .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
        .map_err(|e| err("network access", &e))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| err("scopes", &e))?
        .create()
        .map_err(|e| err("create", &e))?;
    let rules: [(&Vec<String>, _); 3] = [
        (&plan.read, AccessFs::from_read(abi)),
        (
            &plan.exec,
            AccessFs::from_read(abi) & (AccessFs::ReadFile | AccessFs::Execute),
        ),
        (&plan.write, AccessFs::from_all(abi)),
    ];
    for (paths, access) in rules {
        for path in paths {
            let fd = PathFd::new(path).map_err(|e| err(&format!("opening {path}"), &e))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| err(&format!("rule for {path}"), &e))?;
        }
    }
    let status = ruleset
        .restrict_self()
        .map_err(|e| err("restrict_self", &e))?;
    Ok((abi, status.ruleset))
}

/// The deny-list filters and the sha256 of the whole policy (Landlock rules and the syscall
/// list), which `app_started` reports.
fn seccomp_filters(
    plan: &Plan,
    abi: ABI,
) -> Result<(Vec<seccompiler::BpfProgram>, String), String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp: unsupported architecture: {e:?}"))?;
    let err = |e: &dyn std::fmt::Display| format!("building the seccomp filter: {e}");
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&(_, nr)| (nr, Vec::new())).collect();
    let deny = SeccompFilter::new(
        rules.clone(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| err(&e))?;
    // clone with namespace flags: one rule per flag bit (seccomp compares, it cannot test
    // "any bit of a mask").
    rules.clear();
    let mut clone_rules = Vec::new();
    for bit in 0..64u32 {
        let flag = 1u64 << bit;
        if CLONE_NAMESPACES & flag != 0 {
            clone_rules.push(
                SeccompRule::new(vec![
                    SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Qword,
                        SeccompCmpOp::MaskedEq(flag),
                        flag,
                    )
                    .map_err(|e| err(&e))?,
                ])
                .map_err(|e| err(&e))?,
            );
        }
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let clone = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| err(&e))?;
    // clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes libc fall
    // back to clone(2), which the filter above can check.
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| err(&e))?;
    let programs = [deny, clone, clone3]
        .into_iter()
        .map(|f| f.try_into().map_err(|e: seccompiler::BackendError| err(&e)))
        .collect::<Result<Vec<seccompiler::BpfProgram>, String>>()?;

    let mut policy = String::new();
    policy.push_str(&format!("landlock abi {}\n", abi as u32));
    for (kind, paths) in [
        ("read", &plan.read),
        ("exec", &plan.exec),
        ("write", &plan.write),
    ] {
        for path in paths {
            policy.push_str(&format!("{kind} {path}\n"));
        }
    }
    policy.push_str("scope abstract_unix_socket signal\nnet tcp bind connect denied\n");
    for (name, _) in DENIED {
        policy.push_str(&format!("seccomp eperm {name}\n"));
    }
    policy.push_str("seccomp eperm clone with namespace flags\nseccomp enosys clone3\n");
    Ok((programs, hex::encode(Sha256::digest(policy.as_bytes()))))
}
