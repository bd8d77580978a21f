//! The libkrun backend.
//!
//! libkrun's `krun_start_enter` never returns: libkrun exits the process when the guest
//! resets, with exit code 0 for a clean reset and a panic alike. So berm-vmm runs it in a
//! child process — itself, re-executed as `berm-vmm krun-enter CONFIG` — and stays the
//! supervisor that reads the control stream and decides the exit code, exactly as on the QEMU
//! path. libkrun listens on the run dir's sockets itself (`krun_add_vsock_port2`, listen
//! mode), so clients connect straight to it.

use std::ffi::CString;
use std::process::{Child, Command, Stdio};

use berm_vm_protocol::host_event::ChildSandboxLine;
use berm_vm_protocol::{HostEvent, VmmLine};
use serde::{Deserialize, Serialize};

use crate::log_cap::HypervisorOutput;
use crate::measure::{OwnStatus, SelfReport};
use crate::sandbox::{ChildPolicy, ChildReport, Role};
use crate::spec::VmSpec;
use crate::view::{PreparedView, Seen, View};

/// libkrun's C API: the only `unsafe` code of this backend.
#[allow(unsafe_code)]
mod sys;

pub use sys::KrunError;

/// What the child is told; passed as one JSON argument.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KrunConfig {
    /// The VM.
    pub vm: VmSpec,
    /// The host sandbox the child applies to itself just before `krun_start_enter`
    /// (`None` with `--no-host-sandbox`).
    pub host_sandbox: Option<crate::sandbox::SandboxGrants>,
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
            config.report_fd = Some(crate::sys::pass_fd(&mut command, writer.into()));
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
    crate::sys::kill_with_parent(&mut command);
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
        if !crate::sys::wait_readable(&reader, left).map_err(|e| e.to_string())? {
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
    let mut pipe = std::fs::File::from(crate::sys::inherited_fd(fd).context("the report pipe")?);
    let status = OwnStatus::open().context("opening /proc/self/status")?;
    let outside = config
        .outside
        .as_deref()
        .map(|path| {
            crate::sys::UnixAddress::new(path)
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
        match crate::view::isolate(&view) {
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
    measured.outside = outside.map(|address| (crate::sys::connect_errno(&address), seen));
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

/// The child's side: configure libkrun and enter the VM. Returns only on failure: on success
/// libkrun exits the process when the guest resets. The call order is the one measured to
/// work (docs/design/microvm-findings.md): the implicit vsock is disabled first because it
/// turns on TSI, which needs libkrunfw's patched kernel.
pub fn enter(config: &KrunConfig) -> KrunError {
    match configure(&config.vm) {
        Ok(ctx) => ctx.start_enter(),
        Err(e) => e,
    }
}

/// A libkrun context holding `vm`, ready to enter.
fn configure(vm: &VmSpec) -> Result<sys::Context, KrunError> {
    let kernel = c(&vm.kernel)?;
    let cmdline = text(&vm.cmdline, "cmdline with a NUL byte")?;
    let rootfs = c(&vm.rootfs)?;
    let state = vm.state.as_deref().map(c).transpose()?;
    let console = c(&vm.console)?;
    let ports = c_ports(&vm.ports)?;
    let egress = c_ports(&vm.egress)?;
    let disks: Vec<(CString, CString)> = vm
        .disks
        .iter()
        .map(|(serial, path)| Ok((text(serial, "disk serial with a NUL byte")?, c(path)?)))
        .collect::<Result<_, _>>()?;

    // Warnings and errors go to stderr, which berm-vmm points at hypervisor.log.
    let ctx = sys::Context::create()?;
    ctx.set_vm_config(vm.cpus, vm.memory_mib)?;
    ctx.disable_implicit_vsock()?;
    ctx.add_vsock(0)?;
    ctx.set_kernel(&kernel, vm.kernel_format.krun(), &cmdline)?;
    ctx.add_disk("krun_add_disk2 (rootfs)", c"root", &rootfs, true)?;
    if let Some(state) = &state {
        ctx.add_disk("krun_add_disk2 (state)", c"state", state, false)?;
    }
    for (serial, path) in &disks {
        ctx.add_disk("krun_add_disk2 (app)", serial, path, true)?;
    }
    for (port, path) in &ports {
        ctx.add_vsock_port("krun_add_vsock_port2", *port, path, true)?;
    }
    // The egress ports: the guest connects, libkrun connects to the dialer's socket
    // (listen = false).
    for (port, path) in &egress {
        ctx.add_vsock_port("krun_add_vsock_port2 (egress)", *port, path, false)?;
    }
    ctx.set_console_output(&console)?;
    Ok(ctx)
}

fn c(path: &std::path::Path) -> Result<CString, KrunError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| KrunError {
        call: "path with a NUL byte",
        code: -libc::EINVAL,
    })
}

fn text(text: &str, call: &'static str) -> Result<CString, KrunError> {
    CString::new(text).map_err(|_| KrunError {
        call,
        code: -libc::EINVAL,
    })
}

fn c_ports(ports: &[(u32, std::path::PathBuf)]) -> Result<Vec<(u32, CString)>, KrunError> {
    ports.iter().map(|(p, path)| Ok((*p, c(path)?))).collect()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;

    use super::KrunConfig;
    use crate::measure::{OutsideSocket, SelfReport, outcome};
    use crate::sandbox::SandboxGrants;
    use crate::spec::{KernelFormat, VmSpec};
    use crate::view::Seen;

    /// krun-enter's confinement step, the one the libkrun child runs before
    /// `krun_start_enter` (libkrun cannot run a guest on this machine, so the step is run
    /// alone, in a forked child): in a run with egress it enters the view of its policy's
    /// paths, confines itself under `krun-enter-egress`, and reports a connect outside that
    /// finds nothing.
    #[test]
    fn the_libkrun_child_of_an_egress_run_confines_itself_into_its_view() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let kernel = tmp.path().join("vmlinux");
        std::fs::write(&kernel, b"not a kernel").unwrap();
        let outside = OutsideSocket::bind(&run).unwrap();
        let (mut reader, writer) = std::io::pipe().unwrap();
        let config = KrunConfig {
            vm: VmSpec {
                cpus: 1,
                memory_mib: 64,
                kernel: kernel.clone(),
                kernel_format: KernelFormat::Elf,
                cmdline: String::new(),
                rootfs: kernel.clone(),
                state: None,
                disks: Vec::new(),
                ports: Vec::new(),
                egress: vec![(6000, run.join("vsock.sock_6000"))],
                console: run.join("console.log"),
            },
            host_sandbox: Some(SandboxGrants {
                read: vec![kernel.clone()],
                read_write: vec![run.clone()],
                devices: vec!["/dev/null".into()],
                ..SandboxGrants::default()
            }),
            report_fd: Some(writer.as_raw_fd()),
            outside: Some(outside.path().to_owned()),
            run_dir: Some(run.clone()),
        };
        // The child runs the confinement step (which allocates, as krun-enter does after its
        // exec: the forking thread is the only one in the child, and no other thread of this
        // test process holds the allocator's lock across a fork, which glibc's fork handler
        // makes safe) and answers one byte: whether it held.
        let held = crate::sys::fork_reporting(1, std::time::Duration::from_secs(30), |out| {
            let ok = super::confine_self(&config).is_ok()
                && config.vm.kernel.exists()
                && !std::path::Path::new("/etc/passwd").exists();
            out[0] = u8::from(ok);
            1
        });
        drop(writer);
        let mut line = Vec::new();
        reader.read_to_end(&mut line).unwrap();
        assert_eq!(
            held.as_deref().ok(),
            Some(&[1u8][..]),
            "{held:?} {:?}",
            String::from_utf8_lossy(&line)
        );
        let report = SelfReport::decode(&line).unwrap();
        assert_eq!(report.landlock.name(), "fully_enforced", "{report:?}");
        assert!(report.status.no_new_privs);
        let (connect, seen) = report.outside.unwrap();
        assert_eq!(
            (outcome(connect).as_str(), seen),
            ("ENOENT", Seen::PolicyPaths)
        );
    }
}
