//! The libkrun backend.
//!
//! libkrun's `krun_start_enter` never returns: libkrun exits the process when the guest
//! resets, with exit code 0 for a clean reset and a panic alike. So berm-vmm runs it in a
//! child process — itself, re-executed as `berm-vmm krun-enter CONFIG` — and stays the
//! supervisor that reads the control stream and decides the exit code, exactly as on the QEMU
//! path. libkrun listens on the run dir's sockets itself (`krun_add_vsock_port2`, listen
//! mode), so clients connect straight to it.

use std::process::{Child, Command, Stdio};

use berm_vm_protocol::host_event::ChildSandboxLine;
use berm_vm_protocol::{HostEvent, VmmLine};
use serde::{Deserialize, Serialize};

use crate::log_cap::HypervisorOutput;
use crate::measure::{OwnStatus, SelfReport};
use crate::sandbox::{ChildPolicy, ChildReport, Role};
use crate::spec::VmSpec;
use crate::sys;
use crate::view::{PreparedView, Seen, View};

/// What the child is told; passed as one JSON argument.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KrunConfig {
    /// The VM.
    pub vm: VmSpec,
    /// The host sandbox the child applies to itself just before `krun_start_enter`
    /// (`None` with `--no-host-sandbox`).
    pub host_sandbox: Option<crate::sandbox::Policy>,
    /// The inherited pipe the child writes its confinement report to, once confined, and
    /// closes (set by [`spawn`] whenever there is a host sandbox).
    #[serde(default)]
    pub report_fd: Option<i32>,
    /// The socket outside every policy the child tries to connect to once confined, which
    /// its report carries (`measure.rs`); there whenever there is a host sandbox.
    #[serde(default)]
    pub outside: Option<std::path::PathBuf>,
    /// The run dir: where the child puts together its view of the filesystem when it runs
    /// the vsock device of a run with egress (`view.rs`).
    #[serde(default)]
    pub run_dir: Option<std::path::PathBuf>,
}

/// How long the libkrun child may take to confine itself and report it.
const REPORT_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the libkrun child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnKrunError {
    /// Spawning `/proc/self/exe` failed.
    #[error("starting the libkrun child process failed")]
    Spawn(#[source] std::io::Error),
    /// Its output could not be pointed at the hypervisor log's pipe.
    #[error("connecting the libkrun child's output to hypervisor.log failed")]
    Log(#[source] std::io::Error),
    /// It did not report how it is confined, or its report was refused.
    #[error("the libkrun child did not report its confinement: {0}")]
    Unmeasured(String),
}

/// Starts `berm-vmm krun-enter` with its output into `output` (relayed into `hypervisor.log`)
/// and, with a host sandbox, waits for the child's report of its own confinement (see
/// `measure.rs`): a child that does not report is stopped, and the start fails.
pub fn spawn(
    config: &KrunConfig,
    output: &HypervisorOutput,
) -> Result<(Child, Option<ChildReport>), SpawnKrunError> {
    let (out, err) = output.stdio().map_err(SpawnKrunError::Log)?;
    let mut command = Command::new("/proc/self/exe");
    let mut config = config.clone();
    let report = match &config.host_sandbox {
        Some(policy) => {
            let (reader, writer) = std::io::pipe().map_err(SpawnKrunError::Spawn)?;
            config.report_fd = Some(sys::pass_fd(&mut command, writer.into()));
            let role = config.vm.vsock_role(Role::KrunEnter);
            Some((
                reader,
                ChildPolicy::new("berm-vmm krun-enter", policy, role, ""),
            ))
        }
        None => None,
    };
    // Serializing paths and numbers cannot fail.
    let json = serde_json::to_string(&config).unwrap_or_default();
    command
        .arg("krun-enter")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    sys::kill_with_parent(&mut command);
    let mut child = command.spawn().map_err(SpawnKrunError::Spawn)?;
    // The pipe's write end is the child's alone now.
    drop(command);
    let Some((reader, policy)) = report else {
        return Ok((child, None));
    };
    match read_report(reader) {
        Ok(measured) => {
            let report = policy.self_reported(child.id(), &measured);
            Ok((child, Some(report)))
        }
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(SpawnKrunError::Unmeasured(why))
        }
    }
}

/// The child's report line: everything written to the pipe until it closes, within
/// [`REPORT_WITHIN`], at most [`crate::measure::MAX_REPORT`] bytes, parsed strictly.
fn read_report(mut reader: std::io::PipeReader) -> Result<SelfReport, String> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + REPORT_WITHIN;
    let mut line = Vec::new();
    let mut buf = [0u8; crate::measure::MAX_REPORT + 1];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !sys::wait_readable(&reader, left).map_err(|e| e.to_string())? {
            return Err(format!("no report within {} s", REPORT_WITHIN.as_secs()));
        }
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if line.len() > crate::measure::MAX_REPORT {
            return Err("its report is too long".into());
        }
    }
    if line.is_empty() {
        return Err("it ended without a report (see hypervisor.log in the run dir)".into());
    }
    SelfReport::decode(&line).map_err(|e| format!("its report was refused: {e}"))
}

/// The child's side, before anything else: enters the view of its policy's paths when it
/// runs the vsock device of a run with egress (going on without it, and saying so, where
/// the kernel refuses), confines itself to `config`'s host sandbox (if any), measures that
/// and writes the report to its report pipe, which it then closes.
pub fn confine_self(config: &KrunConfig) -> anyhow::Result<()> {
    use anyhow::Context;
    let Some(policy) = &config.host_sandbox else {
        return Ok(());
    };
    let fd = config
        .report_fd
        .context("the configuration names no report pipe")?;
    let mut pipe = std::fs::File::from(sys::inherited_fd(fd).context("the report pipe")?);
    let status = OwnStatus::open().context("opening /proc/self/status")?;
    let outside = config
        .outside
        .as_deref()
        .map(|path| {
            sys::UnixAddress::new(path)
                .with_context(|| format!("{} is not a Unix socket address", path.display()))
        })
        .transpose()?;
    // Counted while /proc is there: the view has none.
    let threads = crate::sandbox::thread_count();
    let role = config.vm.vsock_role(Role::KrunEnter);
    let seen = if crate::view::isolated(role) {
        let run_dir = config
            .run_dir
            .as_deref()
            .context("the configuration names no run dir")?;
        let view = View::of(policy, run_dir).and_then(|view| PreparedView::prepare(&view))?;
        match sys::isolate(&view) {
            Ok(()) => Seen::PolicyPaths,
            Err(e) => {
                crate::report::say(format_args!(
                    "berm-vmm krun-enter: the kernel refused the view of the policy's paths ({} failed: {}); the vsock device sees the host's filesystem, and its report says so",
                    e.step,
                    std::io::Error::from_raw_os_error(e.errno)
                ));
                Seen::Host
            }
        }
    } else {
        Seen::Host
    };
    // Just before krun_start_enter, while this process is still single-threaded: fail-closed.
    let report = crate::sandbox::confine_counted(policy, role, &[], threads)
        .context("confining the libkrun child")?;
    let landlock = crate::measure::landlock_named(report.landlock.as_bytes())
        .context("the libkrun child's Landlock status")?;
    let mut measured = status
        .measure(landlock)
        .context("measuring the libkrun child's confinement")?;
    measured.outside = outside.map(|address| (sys::connect_errno(&address), seen));
    let mut line = [0u8; crate::measure::MAX_REPORT];
    std::io::Write::write_all(&mut pipe, measured.encode(&mut line))
        .context("writing the confinement report")?;
    drop(pipe);
    // Written by the child to its own stderr (berm-vmm relays it into hypervisor.log), not
    // into the run's record.
    let line = VmmLine::Host(HostEvent::ChildSandbox(ChildSandboxLine {
        process: "krun-enter".into(),
        report: report.line(),
    }));
    crate::report::say(format_args!("{}", line.to_line().trim_end()));
    Ok(())
}

/// The child's side: configure libkrun and enter the VM. Returns only on failure.
pub fn enter(config: &KrunConfig) -> sys::KrunError {
    match sys::krun_enter(&config.vm) {
        Err(e) => e,
        Ok(never) => match never {},
    }
}
