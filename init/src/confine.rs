//! `berm-init confine PLAN`: the short-lived process between PID 1 and an app's bermd.
//!
//! PID 1 has threads, so it cannot safely do this work between fork and exec. Instead it
//! starts its own binary again, as a fresh single-threaded process, which confines itself
//! step by step and then execs bermd (or, on a test boot, the enforcement probe):
//!
//! 1. joins the app's cgroup (as root, before anything else, so every later allocation is
//!    charged to the app);
//! 2. listens on the app's vsock port, handing the socket to bermd as fd 4 (bermd then needs
//!    no socket(2) of its own, and the seccomp filter refuses it: its egress connections come
//!    from PID 1's broker on fd 6);
//! 3. sets no_new_privs and drops to the app's uid and gid, with no supplementary groups;
//! 4. applies the Landlock ruleset (read the app image; read and execute bermd and nothing
//!    else; write, never execute, the app's workspace; no signals or abstract sockets outside
//!    the domain);
//! 5. loads the seccomp filter, bermd's allow list from `berm-confine` (last: it refuses
//!    calls the earlier steps need; x32 and foreign-arch calls kill the process);
//! 6. reports what is in force on fd 3 — and refuses to go on unless all of it is
//!    (fail-closed) — then execs.
//!
//! The plan comes from PID 1 as one JSON argument; this process decides nothing itself.

use std::io::Write;
use std::os::unix::process::CommandExt;

use berm_confine::Role;
use berm_vm_protocol::{Enforcement, Landlock, Seccomp};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
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
/// The fd bermd asks PID 1's egress broker for connections on (`crate::egress_broker`).
pub const EGRESS_BROKER_FD: i32 = 6;
/// The fd bermd writes its receipt log to (`bermd --receipts-fd`), which PID 1 relays.
pub const RECEIPTS_FD: i32 = 7;
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
    for fd in [LISTEN_FD, READY_FD, EGRESS_BROKER_FD, RECEIPTS_FD] {
        // All are meant for the program (fds 5 to 7 only when PID 1 passed them); fcntl on a
        // number that is not open fails with EBADF and changes nothing.
        let _ = sys::inherit(&RawNumber(fd));
    }
    let no_new_privs = sys::set_no_new_privs().map_err(|e| format!("setting no_new_privs: {e}"))?;
    sys::become_user(plan.uid, plan.gid)
        .map_err(|e| format!("switching to uid {} gid {}: {e}", plan.uid, plan.gid))?;
    let (abi, landlock) = restrict_landlock(plan)?;
    let (filter, policy_sha256) = seccomp_filters(plan, abi)?;
    berm_confine::apply(Role::Bermd, &filter).map_err(|e| e.to_string())?;
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
            seccomp: Seccomp::AllowList,
            policy_sha256,
        },
    })
}

/// The policy digest every app of this build reports (`app_started.enforcement`): printed by
/// `berm-init policy-sha256` and pinned beside the rootfs, so `berm attest verify` can check it.
pub fn app_policy_sha256() -> String {
    let index = 0;
    let rules = crate::app_rules::AppRules::of(index, "app");
    let plan = Plan {
        app: "app".into(),
        uid: berm_vm_protocol::APP_UID_BASE + index,
        gid: berm_vm_protocol::APP_UID_BASE + index,
        cgroup: String::new(),
        listen_port: None,
        read: rules.read,
        exec: rules.exec,
        write: rules.write,
        argv: Vec::new(),
        env: Vec::new(),
    };
    hex::encode(Sha256::digest(
        policy_text(&plan, WANTED_ABI, index).as_bytes(),
    ))
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
    // Execute only on the files in `exec` (bermd itself): the app share and the workspace can
    // be read (and the workspace written), never executed, so an app cannot run a binary it
    // wrote or was shipped.
    let rules: [(&Vec<String>, _); 3] = [
        (&plan.read, AccessFs::from_read(abi) & !AccessFs::Execute),
        (&plan.exec, AccessFs::ReadFile | AccessFs::Execute),
        (&plan.write, AccessFs::from_all(abi) & !AccessFs::Execute),
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

/// The app's seccomp filter (its allow list, [`Role::Bermd`]) and the sha256 of the whole
/// policy (Landlock rules and the allow list), which `app_started` reports.
///
/// The digest covers the rules as templates — the app's index and name replaced by
/// `<index>` and `<app>` — so every app of one build reports the same digest, and `berm attest
/// verify` can compare it with the one pinned beside the rootfs (`berm-init policy-sha256`).
fn seccomp_filters(plan: &Plan, abi: ABI) -> Result<(berm_confine::BpfProgram, String), String> {
    let program = Role::Bermd.filter().map_err(|e| e.to_string())?;
    let index = plan
        .uid
        .checked_sub(berm_vm_protocol::APP_UID_BASE)
        .unwrap_or(plan.uid);
    let policy = policy_text(plan, abi, index);
    Ok((program, hex::encode(Sha256::digest(policy.as_bytes()))))
}

/// The policy as text: Landlock's rules and the syscall allow list. Rule lists that are the
/// standard ones of app `index` ([`crate::app_rules::AppRules`]) are written as the template, so
/// every app of one build has the same text; anything else (the probe's) is written as is.
pub fn policy_text(plan: &Plan, abi: ABI, index: u32) -> String {
    let own = crate::app_rules::AppRules::of(index, &plan.app);
    let template = crate::app_rules::AppRules::template();
    let mut policy = String::new();
    policy.push_str(&format!("landlock abi {}\n", abi as u32));
    for (kind, paths, standard, templated) in [
        ("read", &plan.read, &own.read, &template.read),
        ("exec", &plan.exec, &own.exec, &template.exec),
        ("write", &plan.write, &own.write, &template.write),
    ] {
        let shown = if paths == standard { templated } else { paths };
        for path in shown {
            policy.push_str(&format!("{kind} {path}\n"));
        }
    }
    policy.push_str(
        "execute only exec\nscope abstract_unix_socket signal\nnet tcp bind connect denied\n",
    );
    policy.push_str(&Role::Bermd.policy_text());
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(index: u32, name: &str) -> Plan {
        let rules = crate::app_rules::AppRules::of(index, name);
        Plan {
            app: name.into(),
            uid: berm_vm_protocol::APP_UID_BASE + index,
            gid: berm_vm_protocol::APP_UID_BASE + index,
            cgroup: String::new(),
            listen_port: Some(5000 + index),
            read: rules.read,
            exec: rules.exec,
            write: rules.write,
            argv: vec!["/usr/bin/bermd".into()],
            env: Vec::new(),
        }
    }

    #[test]
    fn every_app_reports_the_pinnable_digest_and_the_probe_another() {
        let pinned = app_policy_sha256();
        for (index, name) in [(0, "notes"), (3, "run"), (7, "usr"), (1, "apps")] {
            let plan = plan_of(index, name);
            let digest = hex::encode(Sha256::digest(
                policy_text(&plan, WANTED_ABI, index).as_bytes(),
            ));
            assert_eq!(digest, pinned, "{name}");
        }
        let mut probe = plan_of(0, "notes");
        probe.exec = vec!["/run/probe/berm-probe".into()];
        let text = policy_text(&probe, WANTED_ABI, 0);
        assert!(text.contains("exec /run/probe/berm-probe\n"), "{text}");
        assert!(text.contains("read /run/apps/<index>\n"), "{text}");
        assert!(
            text.contains("seccomp allow clone(no CLONE_NEW*)\n"),
            "{text}"
        );
    }
}
