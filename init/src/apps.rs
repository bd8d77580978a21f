//! Apps: each one a bermd under its own uid, cgroup, Landlock ruleset and seccomp filter,
//! serving MCP on vsock 5000+i.
//!
//! berm-vmm attaches app i as a read-only erofs disk with the serial `app-<i>`, holding
//! `app/` (the app folder as given), `code/` (its programs precompiled on the host) and
//! `launch.json` (the app's name and cgroup limits, derived on the host from `berm.toml`).
//! The order of `--app` fixes uid 10000+i and port 5000+i. For each app PID 1:
//!
//! 1. mounts its disk at `/run/apps/<i>` and reads `launch.json`;
//! 2. creates the cgroup `/berm/apps/<name>`, writes `cpu.max`, `memory.max`,
//!    `memory.swap.max` and `pids.max`, and reads them back;
//! 3. creates `/workspace/<name>` owned by the app's uid (on the state disk when there is one);
//! 4. starts the app's egress broker ([`crate::egress_broker`]) and `berm-init confine PLAN`
//!    (see [`crate::confine`]), which reports on a pipe what is in force (`app_started`, or
//!    `app_refused` — fail-closed) and execs bermd with the broker's channel on fd 6;
//! 5. waits for bermd's own ready line on a second pipe (`app_ready`).
//!
//! An app that fails at any step is refused with the reason; the others still start. The
//! reaper in `main` reports `app_exited`.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berm_vm_protocol::host::{BermdReady, Launch};
use berm_vm_protocol::{
    APP_UID_BASE, AppLimits, AppProgram, AppReady, AppRefused, AppStarted, AppState, AppStatus,
    Event, LogLevel, ProbeCheck, ProbeReport, RPC_PORT_BASE,
};
use serde::Deserialize;

use crate::app_rules::{APPS_DIR, AppRules, BERMD, WORKSPACE};
use crate::confine::{self, EGRESS_BROKER_FD, Plan, READY_FD, RECEIPTS_FD, REPORT_FD, Report};
use crate::egress_broker;
use crate::hub::{self, Hub};
use crate::lock::lock;
use crate::registry::Registry;
use crate::sys;

/// Where the probe disk is mounted.
const PROBE_DIR: &str = "/run/probe";
/// The apps' cgroup parent.
const CGROUP_APPS: &str = "/sys/fs/cgroup/berm/apps";
/// How long a confining process may take to report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long bermd may take to get ready (under TCG, a program that must be compiled in the
/// guest takes seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest line read from a report or ready pipe.
const MAX_PIPE_LINE: u64 = 64 * 1024;
/// The longest receipt-log line relayed: a receipt is a few KiB, a checkpoint of bermd's 64
/// receipts about 7 KiB; with the event around it and its escaping, well within the line
/// protocol's 64 KiB.
const MAX_RECEIPT_LINE: usize = 24 * 1024;

/// The probe's one output line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeOutput {
    checks: Vec<ProbeCheck>,
}

/// The reaper's side of the registry, here rather than in [`crate::registry`] because it
/// speaks through the hub, which holds the registry.
impl Registry {
    /// A reaped process: if it was an app's, mark it exited and say so.
    pub fn reaped(&self, hub: &Hub, pid: u32, code: Option<i32>, signal: Option<i32>) {
        if let Some(event) = self.exited(pid, code, signal) {
            hub.event(event);
        }
    }
}

/// How an app's start ended, sent to the boot sequence.
enum Settled {
    Ready,
    NotReady,
}

/// Starts every app and waits until each is ready, refused or gone; returns how many are
/// ready. `probe` names the app whose confinement the test probe runs under.
pub fn start_all(
    hub: &Arc<Hub>,
    count: u32,
    state_mounted: bool,
    probe: Option<u32>,
    accept: bool,
) -> u32 {
    let registry = hub.apps();
    if let Err(message) = prepare(state_mounted, registry) {
        for index in 0..count {
            refuse(hub, &format!("app-{index}"), index, &message);
        }
        return 0;
    }
    let (settled_tx, settled_rx) = mpsc::channel();
    let mut names = HashSet::new();
    let mut launched = Vec::new();
    for index in 0..count {
        let fallback = format!("app-{index}");
        match launch(hub, index, &mut names, accept) {
            Ok(app) => {
                launched.push(app.clone());
                let watcher_hub = Arc::clone(hub);
                let tx = settled_tx.clone();
                if let Err(e) = std::thread::Builder::new()
                    .name(format!("app-{index}"))
                    .spawn(move || watch(&watcher_hub, app, tx))
                {
                    refuse(
                        hub,
                        &fallback,
                        index,
                        &format!("no thread to watch it: {e}"),
                    );
                }
            }
            Err((name, message)) => {
                refuse(hub, name.as_deref().unwrap_or(&fallback), index, &message)
            }
        }
    }
    drop(settled_tx);
    let ready = wait_settled(&settled_rx, launched.len());
    if let Some(index) = probe {
        match launched.iter().find(|a| a.index == index) {
            Some(app) => run_probe(hub, app, &launched),
            None => hub.log(
                LogLevel::Error,
                format!("probe: app {index} did not start, so nothing runs under its confinement"),
            ),
        }
    }
    ready
}

fn wait_settled(rx: &Receiver<Settled>, launched: usize) -> u32 {
    let deadline = Instant::now() + REPORT_TIMEOUT + READY_TIMEOUT;
    let mut ready = 0;
    for _ in 0..launched {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Settled::Ready) => ready += 1,
            Ok(Settled::NotReady) => {}
            Err(_) => break,
        }
    }
    ready
}

fn refuse(hub: &Hub, app: &str, index: u32, reason: &str) {
    let reason = hub::bounded(reason.replace(|c: char| c.is_control(), " "), 2048);
    hub.apps().push_refused(app, index);
    hub.log(LogLevel::Error, format!("app {app} refused: {reason}"));
    hub.event(Event::AppRefused(AppRefused {
        app: app.into(),
        index,
        reason,
    }));
}

/// cgroup controllers for the app tree, and `/workspace`.
fn prepare(state_mounted: bool, registry: &Registry) -> Result<(), String> {
    let controllers = "+cpu +memory +pids";
    for dir in ["/sys/fs/cgroup", "/sys/fs/cgroup/berm", CGROUP_APPS] {
        if dir != "/sys/fs/cgroup" {
            mkdir(dir, 0o755)?;
        }
        if dir != CGROUP_APPS {
            std::fs::write(format!("{dir}/cgroup.subtree_control"), controllers)
                .map_err(|e| format!("enabling {controllers} in {dir}: {e}"))?;
        }
    }
    std::fs::write(format!("{CGROUP_APPS}/cgroup.subtree_control"), controllers)
        .map_err(|e| format!("enabling {controllers} in {CGROUP_APPS}: {e}"))?;
    if state_mounted {
        mkdir("/state/workspace", 0o755)?;
        sys::bind_mount("/state/workspace", WORKSPACE)
            .map_err(|e| format!("binding /state/workspace on {WORKSPACE}: {e}"))?;
    } else {
        sys::mount(
            "tmpfs",
            WORKSPACE,
            "tmpfs",
            sys::NOSUID | sys::NODEV,
            "mode=0755,size=64m",
        )
        .map_err(|e| format!("tmpfs on {WORKSPACE}: {e}"))?;
    }
    registry.add_mount(WORKSPACE.into());
    mkdir(APPS_DIR, 0o755)
}

fn mkdir(path: &str, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {path}: {e}")),
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("setting the mode of {path}: {e}"))
}

/// The block device whose virtio serial is `serial`.
fn disk_with_serial(serial: &str) -> Option<String> {
    let entries = std::fs::read_dir("/sys/block").ok()?;
    entries.flatten().find_map(|entry| {
        let name = entry.file_name().into_string().ok()?;
        let found = std::fs::read_to_string(entry.path().join("serial")).ok()?;
        (found.trim_end_matches(['\0', '\n']) == serial).then_some(name)
    })
}

/// Mounts a read-only erofs disk by serial.
fn mount_disk(registry: &Registry, serial: &str, target: &str, exec: bool) -> Result<(), String> {
    let device = disk_with_serial(serial)
        .ok_or_else(|| format!("no disk with serial {serial} is attached"))?;
    mkdir(target, 0o755)?;
    let mut flags = sys::NOSUID | sys::NODEV | sys::RDONLY;
    if !exec {
        flags |= sys::NOEXEC;
    }
    sys::mount(&format!("/dev/{device}"), target, "erofs", flags, "")
        .map_err(|e| format!("mounting /dev/{device} ({serial}) on {target} as erofs: {e}"))?;
    registry.add_mount(target.into());
    Ok(())
}

/// An app whose process was started.
#[derive(Clone)]
struct Launched {
    name: String,
    index: u32,
    pid: u32,
    started: Instant,
    report: Arc<Mutex<Option<File>>>,
    ready: Arc<Mutex<Option<File>>>,
}

fn launch(
    hub: &Arc<Hub>,
    index: u32,
    names: &mut HashSet<String>,
    accept: bool,
) -> Result<Launched, (Option<String>, String)> {
    let registry = hub.apps();
    let root = format!("{APPS_DIR}/{index}");
    // Not noexec: bermd maps the precompiled code from `code/` executable (Wasmtime's
    // deserialize_file); the app's Landlock ruleset grants no execute right here, so nothing
    // in the image can be exec'd.
    mount_disk(registry, &format!("app-{index}"), &root, true).map_err(|e| (None, e))?;
    let launch = read_launch(&root).map_err(|e| (None, e))?;
    let name = launch.name.clone();
    let fail = |message: String| (Some(name.clone()), message);
    if !names.insert(name.clone()) {
        return Err(fail(format!("a second app is named {name}")));
    }
    let uid = APP_UID_BASE + index;
    let cgroup = format!("{CGROUP_APPS}/{name}");
    let limits = set_limits(&cgroup, &launch).map_err(fail)?;
    let workspace = format!("{WORKSPACE}/{name}");
    mkdir(&workspace, 0o700).map_err(fail)?;
    sys::chown(&workspace, uid, uid).map_err(|e| fail(format!("chown {workspace}: {e}")))?;
    let plan = bermd_plan(&name, index, &root, accept);
    let (report_r, report_w) = sys::pipe().map_err(|e| fail(format!("pipe: {e}")))?;
    let (ready_r, ready_w) = sys::pipe().map_err(|e| fail(format!("pipe: {e}")))?;
    let (receipts_r, receipts_w) = sys::pipe().map_err(|e| fail(format!("pipe: {e}")))?;
    let (broker, egress) = berm_vm_protocol::egress_broker::channel::pair()
        .map_err(|e| fail(format!("socketpair for its egress broker: {e}")))?;
    // Before bermd starts: if bermd never does, its end closes and the broker ends.
    egress_broker::spawn(hub, &name, index, broker)
        .map_err(|e| fail(format!("no thread for its egress broker: {e}")))?;
    let started = Instant::now();
    let fds = vec![
        (report_w.into(), REPORT_FD),
        (ready_w.into(), READY_FD),
        (egress, EGRESS_BROKER_FD),
        (receipts_w.into(), RECEIPTS_FD),
    ];
    let pid = spawn_confined(hub, &plan, &name, fds).map_err(fail)?;
    {
        let (hub, app) = (Arc::clone(hub), name.clone());
        let relaying = hub.relaying();
        std::thread::Builder::new()
            .name(format!("{name}-receipts"))
            .spawn(move || {
                let _relaying = relaying;
                relay_receipts(&hub, &app, receipts_r)
            })
            .map_err(|e| fail(format!("no thread for its receipts: {e}")))?;
    }
    registry.track(AppStatus {
        app: name.clone(),
        index,
        uid,
        pid: Some(pid),
        state: AppState::Starting,
        cgroup: format!("/berm/apps/{name}"),
        limits: Some(limits),
    });
    Ok(Launched {
        name,
        index,
        pid,
        started,
        report: Arc::new(Mutex::new(Some(report_r))),
        ready: Arc::new(Mutex::new(Some(ready_r))),
    })
}

/// Reads and checks `launch.json` from the app disk mounted at `root`: known fields only, and
/// a name that follows the app name rule (it becomes a cgroup and a directory name).
fn read_launch(root: &str) -> Result<Launch, String> {
    let launch: Launch = std::fs::read(format!("{root}/launch.json"))
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
        .map_err(|e| format!("{root}/launch.json: {e}"))?;
    if !berm_abi::is_valid_app_name(&launch.name) {
        return Err(format!(
            "app name {:?} is not [a-z][a-z0-9-]{{0,30}}",
            launch.name
        ));
    }
    Ok(launch)
}

/// What app `name` (index `index`, disk mounted at `root`) runs as: bermd under uid and gid
/// 10000+index in its cgroup, serving MCP on vsock 5000+index, reading its disk, writing only
/// its workspace, asking PID 1's egress broker for its `http.fetch` connections.
fn bermd_plan(name: &str, index: u32, root: &str, accept: bool) -> Plan {
    let uid = APP_UID_BASE + index;
    let workspace = format!("{WORKSPACE}/{name}");
    let rules = AppRules::of(index, name);
    Plan {
        app: name.to_owned(),
        uid,
        gid: uid,
        cgroup: format!("{CGROUP_APPS}/{name}"),
        listen_port: Some(RPC_PORT_BASE + index),
        read: rules.read,
        exec: rules.exec,
        write: rules.write,
        argv: {
            let mut argv = [
                BERMD,
                "--home",
                &workspace,
                "--app",
                &format!("{root}/app"),
                "--listen-fd",
                &confine::LISTEN_FD.to_string(),
                "--ready-fd",
                &READY_FD.to_string(),
                "--code-dir",
                &format!("{root}/code"),
                "--programs",
                &format!("{root}/programs"),
                "--cpu-profile",
                "portable",
                "--egress-broker-fd",
                &EGRESS_BROKER_FD.to_string(),
                "--receipts-fd",
                &RECEIPTS_FD.to_string(),
            ]
            .map(String::from)
            .to_vec();
            // berm-vmm --accept: what the folder changed since it last ran on this state disk
            // (bermd's record in the workspace) is accepted for this boot.
            if accept {
                argv.push("--accept".into());
            }
            argv
        },
        env: vec![
            ("HOME".into(), workspace),
            ("BERM_LOG".into(), "info".into()),
        ],
    }
}

/// Writes the app's limits and reads back what the kernel holds.
fn set_limits(cgroup: &str, launch: &Launch) -> Result<AppLimits, String> {
    mkdir(cgroup, 0o755)?;
    let write = |file: &str, value: &str| {
        std::fs::write(format!("{cgroup}/{file}"), value)
            .map_err(|e| format!("writing {value:?} to {cgroup}/{file}: {e}"))
    };
    let read = |file: &str| {
        std::fs::read_to_string(format!("{cgroup}/{file}"))
            .map(|v| v.trim().to_owned())
            .map_err(|e| format!("reading {cgroup}/{file}: {e}"))
    };
    write("cpu.max", &launch.cpu_max)?;
    write("memory.max", &launch.memory_max.to_string())?;
    write("pids.max", &launch.pids_max.to_string())?;
    // Without CONFIG_SWAP the kernel has no swap at all and no memory.swap.max file.
    let swap = if std::path::Path::new(&format!("{cgroup}/memory.swap.max")).exists() {
        write("memory.swap.max", "0")?;
        read("memory.swap.max")?
    } else {
        "none (the kernel has no swap)".into()
    };
    let limits = AppLimits {
        cpu_max: read("cpu.max")?,
        memory_max: read("memory.max")?,
        memory_swap_max: swap,
        pids_max: read("pids.max")?,
    };
    let wanted_memory = launch.memory_max.to_string();
    if limits.memory_max != wanted_memory || limits.pids_max != launch.pids_max.to_string() {
        return Err(format!(
            "the kernel holds memory.max {} and pids.max {} instead of {wanted_memory} and {}",
            limits.memory_max, limits.pids_max, launch.pids_max
        ));
    }
    Ok(limits)
}

/// Starts `berm-init confine PLAN` with `fds` placed at their numbers and returns its pid. The
/// reaper in main waits for it (waitpid(-1)), so no handle is kept.
fn start_confine(
    plan: &Plan,
    stdout: Stdio,
    stderr: Stdio,
    fds: Vec<(OwnedFd, i32)>,
) -> Result<u32, String> {
    let plan_json = serde_json::to_string(plan).map_err(|e| format!("plan: {e}"))?;
    let mut command = Command::new("/proc/self/exe");
    command
        .arg0("berm-init")
        .arg("confine")
        .arg(plan_json)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    sys::pass_fds(&mut command, fds);
    let child = command
        .spawn()
        .map_err(|e| format!("starting berm-init confine: {e}"))?;
    Ok(child.id())
}

/// Starts `berm-init confine PLAN` with `fds` at their numbers (the report pipe on fd 3,
/// bermd's ready pipe on fd 5, its egress channel on fd 6); its output goes to the logs port
/// under `source`.
fn spawn_confined(
    hub: &Arc<Hub>,
    plan: &Plan,
    source: &str,
    fds: Vec<(OwnedFd, i32)>,
) -> Result<u32, String> {
    let (out_r, out_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let out_w2 = out_w.try_clone().map_err(|e| format!("pipe: {e}"))?;
    let pid = start_confine(plan, out_w.into(), out_w2.into(), fds)?;
    let hub = Arc::clone(hub);
    let source = source.to_owned();
    let _ = std::thread::Builder::new()
        .name(format!("{source}-out"))
        .spawn(move || relay_output(&hub, &source, out_r));
    Ok(pid)
}

/// Relays an app's output line by line, within its rate ([`relay::RateLimit`]); the pipe is
/// always drained, so the app never blocks on it.
fn relay_output(hub: &Hub, source: &str, out: File) {
    use crate::relay::{self, RateLimit, Verdict};
    let mut limit = RateLimit::new(Instant::now());
    let mut reader = BufReader::new(out);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader
            .by_ref()
            .take(hub::MAX_MESSAGE_BYTES as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => match limit.admit(line.len(), Instant::now()) {
                Verdict::Drop => {}
                Verdict::Relay { dropped_before } => {
                    if dropped_before > 0 {
                        hub.log(
                            LogLevel::Warn,
                            format!(
                                "{source}: dropped {dropped_before} lines of output over {} KiB/s",
                                relay::RATE_BYTES_PER_SEC / 1024
                            ),
                        );
                    }
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    hub.log_as(source, LogLevel::Info, text);
                }
            },
        }
    }
}

/// Relays an app's receipt log (docs/receipts.md) to the host, each line as bermd wrote it,
/// until bermd closes it. Never rate-limited: a dropped receipt is a gap every verifier
/// reports. A line that is not one (too long, not UTF-8, not a JSON object) is not relayed,
/// and said so; the relay then goes on with the next line.
fn relay_receipts(hub: &Hub, app: &str, log: File) {
    let mut reader = BufReader::new(log);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader
            .by_ref()
            .take(MAX_RECEIPT_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(n) if n > MAX_RECEIPT_LINE || line.last() != Some(&b'\n') => {
                hub.log(
                    LogLevel::Error,
                    format!(
                        "app {app}: a receipt line over {MAX_RECEIPT_LINE} bytes was not relayed"
                    ),
                );
                // Skip the rest of it.
                let mut rest = Vec::new();
                if reader.read_until(b'\n', &mut rest).unwrap_or(0) == 0 {
                    return;
                }
            }
            Ok(_) => {
                line.pop();
                let text = match String::from_utf8(std::mem::take(&mut line)) {
                    Ok(text) if text.starts_with('{') && !text.contains(char::is_control) => text,
                    _ => {
                        hub.log(
                            LogLevel::Error,
                            format!("app {app}: a receipt line that is not one JSON object was not relayed"),
                        );
                        continue;
                    }
                };
                hub.receipt(app, text);
            }
        }
    }
}

fn read_line(file: File, timeout: Duration) -> Result<Option<String>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = Vec::new();
        let result = BufReader::new(file)
            .take(MAX_PIPE_LINE)
            .read_until(b'\n', &mut line)
            .map(|n| (n > 0).then(|| String::from_utf8_lossy(&line).trim_end().to_owned()));
        let _ = tx.send(result);
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(line)) => Ok(line),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("nothing within {} s", timeout.as_secs())),
    }
}

/// Follows one app from its report to ready.
fn watch(hub: &Arc<Hub>, app: Launched, settled: Sender<Settled>) {
    let registry = hub.apps();
    let report = lock(&app.report).take();
    let ready = lock(&app.ready).take();
    let (Some(report), Some(ready)) = (report, ready) else {
        let _ = settled.send(Settled::NotReady);
        return;
    };
    let confined = match read_line(report, REPORT_TIMEOUT) {
        Ok(Some(line)) => match serde_json::from_str::<Report>(&line) {
            Ok(Report::Confined {
                cgroup,
                uid,
                gid,
                enforcement,
            }) => Ok((cgroup, uid, gid, enforcement)),
            Ok(Report::Refused(reason)) => Err(reason),
            Err(e) => Err(format!("unreadable confinement report: {e}")),
        },
        Ok(None) => Err("the confining process ended before reporting".into()),
        Err(e) => Err(format!("no confinement report: {e}")),
    };
    let (cgroup, uid, gid, enforcement) = match confined {
        Ok(c) => c,
        Err(reason) => {
            refuse(hub, &app.name, app.index, &reason);
            let _ = settled.send(Settled::NotReady);
            return;
        }
    };
    let limits = registry
        .statuses()
        .into_iter()
        .find(|s| s.index == app.index)
        .and_then(|s| s.limits);
    let Some(limits) = limits else {
        let _ = settled.send(Settled::NotReady);
        return;
    };
    hub.event(Event::AppStarted(AppStarted {
        app: app.name.clone(),
        index: app.index,
        uid,
        gid,
        pid: app.pid,
        port: RPC_PORT_BASE + app.index,
        cgroup,
        limits,
        enforcement,
    }));
    let ready_line = read_line(ready, READY_TIMEOUT);
    let parsed = match ready_line {
        Ok(Some(line)) => serde_json::from_str::<BermdReady>(&line)
            .map_err(|e| format!("bermd's ready line is unreadable: {e}")),
        Ok(None) => Err("bermd closed its ready pipe without a ready line".into()),
        Err(e) => Err(format!("bermd did not get ready: {e}")),
    };
    match parsed {
        Ok(ready) if ready.ready => {
            registry.mark_ready(app.index);
            hub.event(Event::AppReady(AppReady {
                app: app.name.clone(),
                index: app.index,
                pid: app.pid,
                ms: app.started.elapsed().as_millis() as u64,
                tools: ready.tools,
                programs: ready
                    .programs
                    .into_iter()
                    .map(|p| AppProgram {
                        name: bounded_name(p.name),
                        sha256: bounded_name(p.sha256),
                        code: p.code,
                        code_sha256: p.code_sha256.map(bounded_name),
                        ms: p.ms.max(0.0).round() as u64,
                    })
                    .collect(),
                receipt_key: ready.receipt_key.map(bounded_name),
            }));
            let _ = settled.send(Settled::Ready);
        }
        Ok(_) => {
            hub.log(
                LogLevel::Error,
                format!("app {}: bermd reported not ready", app.name),
            );
            let _ = settled.send(Settled::NotReady);
        }
        Err(message) => {
            hub.log(LogLevel::Error, format!("app {}: {message}", app.name));
            let _ = settled.send(Settled::NotReady);
        }
    }
}

fn bounded_name(text: String) -> String {
    hub::bounded(text.replace(|c: char| c.is_control(), " "), 256)
}

/// Runs the test-only enforcement probe (attached as the disk with serial `probe`) under
/// exactly `app`'s confinement, plus read and execute of the probe itself, and reports what it
/// found as `probe_report`.
fn run_probe(hub: &Arc<Hub>, app: &Launched, all: &[Launched]) {
    let registry = hub.apps();
    if let Err(e) = mount_disk(registry, "probe", PROBE_DIR, true) {
        hub.log(LogLevel::Error, format!("probe: {e}"));
        return;
    }
    let probe = format!("{PROBE_DIR}/berm-probe");
    let mut argv = vec![
        probe.clone(),
        "--own".into(),
        format!("{WORKSPACE}/{}", app.name),
    ];
    for other in all.iter().filter(|o| o.index != app.index) {
        argv.extend([
            "--other".into(),
            format!("{WORKSPACE}/{}", other.name),
            "--other-share".into(),
            format!("{APPS_DIR}/{}", other.index),
            "--other-pid".into(),
            other.pid.to_string(),
        ]);
    }
    let uid = APP_UID_BASE + app.index;
    let plan = Plan {
        app: app.name.clone(),
        uid,
        gid: uid,
        cgroup: format!("{CGROUP_APPS}/{}", app.name),
        listen_port: None,
        read: AppRules::of(app.index, &app.name).read,
        exec: vec![probe],
        write: AppRules::of(app.index, &app.name).write,
        argv,
        env: Vec::new(),
    };
    let result = (|| {
        let (report_r, report_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
        let (out_r, out_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
        start_confine(
            &plan,
            out_w.into(),
            Stdio::inherit(),
            vec![(report_w.into(), REPORT_FD)],
        )?;
        let report = read_line(report_r, REPORT_TIMEOUT)?.ok_or("the probe was not confined")?;
        let Report::Confined {
            cgroup,
            uid,
            gid,
            enforcement,
        } = serde_json::from_str::<Report>(&report).map_err(|e| e.to_string())?
        else {
            return Err(format!("the probe's confinement was refused: {report}"));
        };
        let output = read_line(out_r, REPORT_TIMEOUT)?.ok_or("the probe printed nothing")?;
        let output: ProbeOutput =
            serde_json::from_str(&output).map_err(|e| format!("probe output: {e}"))?;
        Ok(ProbeReport {
            app: app.name.clone(),
            index: app.index,
            uid,
            gid,
            cgroup,
            enforcement,
            checks: output
                .checks
                .into_iter()
                .map(|c| ProbeCheck {
                    name: bounded_name(c.name),
                    expected: bounded_name(c.expected),
                    outcome: bounded_name(c.outcome),
                    pass: c.pass,
                })
                .collect(),
        })
    })();
    match result {
        Ok(report) => hub.event(Event::ProbeReport(report)),
        Err(e) => hub.log(LogLevel::Error, format!("probe: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berm_vm_protocol::{AppExited, GuestLine, Service};

    fn hub() -> Arc<Hub> {
        Hub::new("0f-a".into(), mpsc::channel().0)
    }

    fn state_of(registry: &Registry, index: u32) -> AppState {
        let statuses = registry.statuses();
        let status = statuses.iter().find(|s| s.index == index).unwrap();
        status.state
    }

    fn starting(index: u32, pid: u32) -> AppStatus {
        AppStatus {
            app: format!("app{index}"),
            index,
            uid: APP_UID_BASE + index,
            pid: Some(pid),
            state: AppState::Starting,
            cgroup: format!("/berm/apps/app{index}"),
            limits: None,
        }
    }

    #[test]
    fn apps_go_from_starting_to_ready_to_exited_once_in_index_order() {
        let hub = hub();
        let registry = hub.apps();
        registry.track(starting(1, 41));
        registry.track(starting(0, 40));
        refuse(&hub, "third", 2, "no\u{1b}[2J landlock");
        let order: Vec<u32> = registry.statuses().iter().map(|s| s.index).collect();
        assert_eq!(order, [0, 1, 2]);
        assert_eq!(state_of(registry, 2), AppState::Refused);
        assert_eq!(registry.statuses()[2].uid, APP_UID_BASE + 2);

        registry.mark_ready(0);
        assert_eq!(state_of(registry, 0), AppState::Ready);
        registry.reaped(&hub, 40, Some(1), None);
        assert_eq!(state_of(registry, 0), AppState::Exited);
        // An exited app does not become ready, and is not reported exited twice.
        registry.mark_ready(0);
        registry.reaped(&hub, 40, Some(1), None);
        assert_eq!(state_of(registry, 0), AppState::Exited);
        // A pid that is not an app's changes nothing.
        registry.reaped(&hub, 99, None, Some(9));
        assert_eq!(state_of(registry, 1), AppState::Starting);

        let events: Vec<Event> = hub
            .history()
            .iter()
            .map(|l| {
                GuestLine::parse(Service::Control, l.trim_end().as_bytes())
                    .unwrap()
                    .event
            })
            .collect();
        assert_eq!(events.len(), 2, "{events:?}");
        let Event::AppRefused(refused) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(
            (refused.app.as_str(), refused.reason.as_str()),
            ("third", "no [2J landlock")
        );
        assert_eq!(
            events[1],
            Event::AppExited(AppExited {
                app: "app0".into(),
                index: 0,
                pid: 40,
                code: Some(1),
                signal: None,
            })
        );
    }

    #[test]
    fn launch_json_is_strict_and_the_name_follows_the_rule() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join("launch.json"), text).unwrap();
        write(r#"{"name":"notes","cpu_max":"max 100000","memory_max":268435456,"pids_max":64}"#);
        let launch = read_launch(root).unwrap();
        assert_eq!(
            (launch.name.as_str(), launch.memory_max, launch.pids_max),
            ("notes", 268435456, 64)
        );
        for (text, problem) in [
            (
                r#"{"name":"Notes","cpu_max":"max","memory_max":1,"pids_max":1}"#,
                "app name \"Notes\" is not [a-z][a-z0-9-]{0,30}",
            ),
            (
                r#"{"name":"n","cpu_max":"max","memory_max":1,"pids_max":1,"exec":"/bin/sh"}"#,
                "unknown field `exec`",
            ),
            (
                r#"{"name":"n","cpu_max":"max","memory_max":-1,"pids_max":1}"#,
                "invalid value",
            ),
            (r#"{"name":"n"}"#, "missing field"),
        ] {
            write(text);
            let err = read_launch(root).unwrap_err();
            assert!(err.contains(problem), "{text}: {err}");
        }
        std::fs::remove_file(dir.path().join("launch.json")).unwrap();
        assert!(
            read_launch(root)
                .unwrap_err()
                .starts_with(&format!("{root}/launch.json: "))
        );
    }

    #[test]
    fn limits_are_written_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let cgroup = dir.path().join("notes");
        let cgroup = cgroup.to_str().unwrap();
        let launch = Launch {
            name: "notes".into(),
            cpu_max: "50000 100000".into(),
            memory_max: 64 << 20,
            pids_max: 32,
        };
        let limits = set_limits(cgroup, &launch).unwrap();
        assert_eq!(limits.cpu_max, "50000 100000");
        assert_eq!(limits.memory_max, (64u64 << 20).to_string());
        assert_eq!(limits.pids_max, "32");
        assert_eq!(limits.memory_swap_max, "none (the kernel has no swap)");
        // With swap, berm sets none.
        std::fs::write(format!("{cgroup}/memory.swap.max"), "max").unwrap();
        assert_eq!(set_limits(cgroup, &launch).unwrap().memory_swap_max, "0");
        // A limit the kernel will not take is named.
        std::fs::remove_file(format!("{cgroup}/pids.max")).unwrap();
        std::fs::create_dir(format!("{cgroup}/pids.max")).unwrap();
        let err = set_limits(cgroup, &launch).unwrap_err();
        assert!(
            err.starts_with(&format!("writing \"32\" to {cgroup}/pids.max")),
            "{err}"
        );
    }

    #[test]
    fn bermd_runs_as_the_apps_uid_on_its_port_writing_only_its_workspace() {
        let plan = bermd_plan("notes", 3, "/run/apps/3", false);
        assert_eq!((plan.uid, plan.gid), (10003, 10003));
        assert_eq!(plan.listen_port, Some(5003));
        assert_eq!(plan.cgroup, "/sys/fs/cgroup/berm/apps/notes");
        assert_eq!(plan.read, ["/run/apps/3"]);
        assert_eq!(plan.write, ["/workspace/notes"]);
        assert_eq!(plan.exec, [BERMD]);
        assert_eq!(plan.argv[0], BERMD);
        let flag = |name: &str| {
            let at = plan.argv.iter().position(|a| a == name).unwrap();
            plan.argv[at + 1].clone()
        };
        assert_eq!(flag("--home"), "/workspace/notes");
        assert_eq!(flag("--app"), "/run/apps/3/app");
        assert_eq!(flag("--code-dir"), "/run/apps/3/code");
        assert_eq!(flag("--programs"), "/run/apps/3/programs");
        assert_eq!(flag("--ready-fd"), READY_FD.to_string());
        assert_eq!(flag("--listen-fd"), confine::LISTEN_FD.to_string());
        assert_eq!(flag("--egress-broker-fd"), EGRESS_BROKER_FD.to_string());
        assert_eq!(flag("--receipts-fd"), RECEIPTS_FD.to_string());
        assert!(
            !plan.argv.iter().any(|a| a.contains("vsock")),
            "{:?}",
            plan.argv
        );
    }
}
