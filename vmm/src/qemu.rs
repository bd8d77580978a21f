//! The QEMU backend: `qemu-system-x86_64 -machine microvm` (KVM where QEMU can use hardware
//! KVM, TCG otherwise), or for an aarch64 guest `qemu-system-aarch64 -machine virt` (TCG on an
//! x86_64 host), with the guest's vsock served by vhost-device-vsock, both as children of
//! berm-vmm. Both machines put every device on virtio-mmio, so the guest sees the same disks,
//! console and vsock either way.
//!
//! vhost-device-vsock exposes the guest's ports through one host socket and a
//! `CONNECT <port>\n` → `OK <n>\n` handshake. To present the same run dir as libkrun, berm-vmm
//! listens on `control.sock`, `logs.sock` and `rpc-<i>.sock` itself and relays each connection
//! through that handshake, retrying every 100 ms until the guest listens (faster retries can
//! stall vhost-device-vsock 0.3.0).

use std::fs::File;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berm::GuestArch;

use crate::connector::{Connector, Target};
use crate::log_cap::HypervisorOutput;
use crate::measure::{OutsideSocket, ProbeReport, ProcStatus};
use crate::run_dir::RunDir;
use crate::sandbox::{ChildPolicy, ChildReport, ChildSandbox, Role, SandboxError, SandboxGrants};
use crate::spec::VmSpec;
use crate::sys;
use crate::view::{PreparedView, Seen, View};

/// QEMU's own seccomp sandbox for itself: no obsolete syscalls, no privilege changes, no
/// fork/exec, no scheduler or resource changes.
const QEMU_SANDBOX: &str =
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// The guest CID vhost-device-vsock gives the VM.
const GUEST_CID: u32 = 3;
/// How long vhost-device-vsock may take to create its socket.
const VHOST_START: Duration = Duration::from_secs(5);
/// Between handshake attempts.
const RETRY: Duration = Duration::from_millis(100);

/// Why QEMU or vhost-device-vsock could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartQemuError {
    /// A child could not be spawned.
    #[error("starting {program} failed")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// vhost-device-vsock did not listen on its socket in time, or ended first.
    #[error(
        "vhost-device-vsock did not listen on {0} within 5 s (see hypervisor.log in the run dir)"
    )]
    VhostNotReady(PathBuf),
    /// A child's host sandbox could not be prepared.
    #[error("confining {program} failed")]
    Sandbox {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: SandboxError,
    },
    /// The vsock device's view of the filesystem could not be prepared.
    #[error("preparing the filesystem view of {program} failed")]
    View {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: crate::view::ViewError,
    },
    /// A child's confinement could not be measured (it is stopped: fail-closed).
    #[error("berm-vmm could not measure how {program} is confined: {reason}")]
    Unmeasured {
        /// The program.
        program: PathBuf,
        /// Why.
        reason: String,
    },
    /// A path cannot be passed to QEMU or vhost-device-vsock as an option value.
    #[error("{path} cannot be passed to {program}: {reason}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Which program's options it would go into.
        program: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A relay socket could not be bound.
    #[error("listening on {path} failed")]
    Bind {
        /// The socket.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// What QEMU is told: the VM, and what only this backend needs.
pub struct QemuVm<'a> {
    /// The VM.
    pub spec: &'a VmSpec,
    /// The guest's architecture: which machine QEMU emulates.
    pub arch: GuestArch,
    /// `qemu-system-x86_64` or `qemu-system-aarch64`.
    pub qemu: &'a Path,
    /// `vhost-device-vsock`.
    pub vhost_device_vsock: &'a Path,
    /// `kvm` or `tcg`.
    pub accel: &'a str,
    /// The run directory.
    pub run: &'a RunDir,
    /// How long a relayed connection waits for the guest to listen.
    pub connect_timeout: Duration,
    /// berm-vmm's own host-sandbox policy, which each child gets widened just enough to run
    /// (`None`: `--no-host-sandbox`).
    pub sandbox: Option<&'a SandboxGrants>,
    /// The socket outside every policy that each child's probe tries to connect to (there
    /// whenever there is a sandbox).
    pub outside: Option<&'a OutsideSocket>,
    /// Where both children's output goes (relayed into `hypervisor.log`).
    pub output: &'a HypervisorOutput,
}

/// The running children, vhost-device-vsock first.
pub struct QemuChildren {
    /// vhost-device-vsock.
    pub vhost: Child,
    /// QEMU.
    pub qemu: Child,
    /// The run dir's sockets, bound but not served yet.
    pub relays: Relays,
    /// How each child is confined.
    pub sandboxes: Vec<ChildReport>,
}

/// How long the Landlock probe of a child's ruleset may take.
const PROBE_WITHIN: Duration = Duration::from_secs(5);

/// A child confined by [`confine`], whose confinement is measured once it runs.
struct Confined {
    child: ChildPolicy,
    probe: ProbeReport,
}

/// Confines `command` (which runs `program`) to `policy` and `role`'s allow list, if there is
/// a policy, and probes it first: a forked probe under the same confinement shows what
/// Landlock enforces and where a connect to a socket outside the policy gets (`measure.rs`).
/// A role that connects by pathname also runs in the view of its policy's paths
/// (`view.rs`), if the probe could enter it; if the kernel refused the probe, the child runs
/// without it and its report says so.
fn confine(
    command: &mut Command,
    program: &Path,
    policy: Option<SandboxGrants>,
    role: Role,
    also: &str,
    vm: &QemuVm<'_>,
) -> Result<Option<Confined>, StartQemuError> {
    let Some(policy) = policy else {
        return Ok(None);
    };
    let prepare = || {
        ChildSandbox::prepare(&policy, role).map_err(|source| StartQemuError::Sandbox {
            program: program.to_owned(),
            source,
        })
    };
    let unmeasured = |reason: String| StartQemuError::Unmeasured {
        program: program.to_owned(),
        reason,
    };
    let outside = vm
        .outside
        .ok_or_else(|| unmeasured("there is no socket outside its policy to probe".into()))?;
    let view = crate::view::isolated(role)
        .then(|| View::of(&policy, &vm.run.dir).and_then(|view| PreparedView::prepare(&view)))
        .transpose()
        .map_err(|source| StartQemuError::View {
            program: program.to_owned(),
            source,
        })?;
    let line =
        crate::probe::probe_child(prepare()?, view.as_ref(), outside.address(), PROBE_WITHIN)
            .map_err(|e| unmeasured(format!("its probe failed: {e}")))?;
    if line.is_empty() {
        return Err(unmeasured(
            "its Landlock probe could not apply the policy".into(),
        ));
    }
    let probe = ProbeReport::decode(&line)
        .map_err(|e| unmeasured(format!("its Landlock probe's report: {e}")))?;
    // Before Landlock, which forbids changing mounts: the pre-exec steps run in order.
    if let Some(view) = view
        && probe.seen == Seen::PolicyPaths
    {
        crate::view::isolate_child(command, view);
    }
    crate::sandbox::confine_child(command, prepare()?);
    Ok(Some(Confined {
        child: ChildPolicy::new(program, &policy, role, also),
        probe,
    }))
}

/// The report of `child`, spawned confined as `confined` says: its `/proc/PID/status`, read
/// now (the spawn returned, so it runs the program, filtered since before its exec), and the
/// probe. A child that cannot be measured is stopped.
fn measured(
    confined: Option<Confined>,
    child: &mut Child,
    program: &Path,
    reports: &mut Vec<ChildReport>,
) -> Result<(), StartQemuError> {
    let Some(Confined {
        child: policy,
        probe,
    }) = confined
    else {
        return Ok(());
    };
    match ProcStatus::of_pid(child.id()) {
        Ok(status) => {
            reports.push(policy.probed(child.id(), &status, &probe));
            Ok(())
        }
        Err(reason) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartQemuError::Unmeasured {
                program: program.to_owned(),
                reason,
            })
        }
    }
}

/// The bound `control.sock`, `logs.sock` and `rpc-<i>.sock` listeners. Connections queue until
/// [`Relays::serve`] starts a thread per socket; run.rs calls it only after berm-vmm has
/// confined itself, which needs the process to be single-threaded.
pub struct Relays {
    listeners: Vec<(UnixListener, u32)>,
    console: PathBuf,
    timeout: Duration,
}

impl Relays {
    /// Starts relaying every socket to its guest port, each relayed connection to
    /// vhost-device-vsock made by `connector` (berm-vmm, confined, connects nowhere itself).
    pub fn serve(self, connector: &Arc<Connector>) {
        for (listener, port) in self.listeners {
            let connector = Arc::clone(connector);
            let console = self.console.clone();
            let timeout = self.timeout;
            std::thread::spawn(move || serve(listener, connector, console, port, timeout));
        }
    }
}

/// `path` as the value of a QEMU `key=value,…` option: QEMU reads `,,` as a literal comma,
/// so commas are doubled; a path that is not UTF-8 is refused rather than passed mangled.
pub fn qemu_value(path: &Path) -> Result<String, StartQemuError> {
    let text = path.to_str().ok_or_else(|| StartQemuError::Path {
        path: path.to_owned(),
        program: "QEMU",
        reason: "it is not valid UTF-8",
    })?;
    Ok(text.replace(',', ",,"))
}

/// `path` in vhost-device-vsock's `--vm key=value,…` option, which has no escape: a comma is
/// refused.
fn vhost_value(path: &Path) -> Result<&str, StartQemuError> {
    let refuse = |reason| StartQemuError::Path {
        path: path.to_owned(),
        program: "vhost-device-vsock",
        reason,
    };
    let text = path
        .to_str()
        .ok_or_else(|| refuse("it is not valid UTF-8"))?;
    if text.contains(',') {
        return Err(refuse(
            "its option syntax has no escape for ','; choose a run dir without commas",
        ));
    }
    Ok(text)
}

/// The vhost-user device on the connection QEMU inherits as `fd`.
fn vhost_args(fd: i32) -> [String; 4] {
    [
        "-chardev".into(),
        format!("socket,id=vsock,fd={fd}"),
        "-device".into(),
        "vhost-user-vsock-device,chardev=vsock".into(),
    ]
}

/// Every path QEMU gets inside an option value, escaped before anything is started.
struct OptionValues {
    rootfs: String,
    state: Option<String>,
    disks: Vec<String>,
    console: String,
}

impl OptionValues {
    fn of(vm: &QemuVm<'_>) -> Result<Self, StartQemuError> {
        Ok(Self {
            rootfs: qemu_value(&vm.spec.rootfs)?,
            state: vm.spec.state.as_deref().map(qemu_value).transpose()?,
            disks: vm
                .spec
                .disks
                .iter()
                .map(|(_, image)| qemu_value(image))
                .collect::<Result<_, _>>()?,
            console: qemu_value(&vm.run.console)?,
        })
    }
}

/// Starts vhost-device-vsock, binds the relays, then starts QEMU on a connection to
/// vhost-device-vsock that berm-vmm opens for it.
pub fn start(vm: &QemuVm<'_>) -> Result<QemuChildren, StartQemuError> {
    let values = OptionValues::of(vm)?;
    let mut sandboxes = Vec::new();
    let (mut vhost, connected) = start_vhost(vm, &mut sandboxes)?;
    let started = bind_relays(vm).and_then(|relays| {
        let qemu = start_qemu(vm, &values, connected, &mut sandboxes)?;
        Ok((relays, qemu))
    });
    match started {
        Ok((relays, qemu)) => Ok(QemuChildren {
            vhost,
            qemu,
            relays,
            sandboxes,
        }),
        Err(e) => {
            let _ = vhost.kill();
            let _ = vhost.wait();
            Err(e)
        }
    }
}

/// Starts vhost-device-vsock (confined to the run dir) and connects to its socket, the
/// connection QEMU is handed.
fn start_vhost(
    vm: &QemuVm<'_>,
    sandboxes: &mut Vec<ChildReport>,
) -> Result<(Child, UnixStream), StartQemuError> {
    let run = vm.run;
    let (out, err) = vm.output.stdio().map_err(|source| StartQemuError::Spawn {
        program: vm.vhost_device_vsock.to_owned(),
        source,
    })?;
    let mut command = Command::new(vm.vhost_device_vsock);
    command
        .arg("--vm")
        .arg(format!(
            "guest-cid={GUEST_CID},socket={},uds-path={}",
            vhost_value(&run.vhost)?,
            vhost_value(&run.vsock)?
        ))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    sys::kill_with_parent(&mut command);
    // vhost-device-vsock needs only its run-dir sockets.
    let vhost_policy = vm.sandbox.map(|_| {
        crate::sandbox::for_program(
            &SandboxGrants {
                read_write: vec![run.dir.clone()],
                ..SandboxGrants::default()
            },
            vm.vhost_device_vsock,
        )
    });
    let confined = confine(
        &mut command,
        vm.vhost_device_vsock,
        vhost_policy,
        vm.spec.vsock_role(Role::VhostDeviceVsock),
        "",
        vm,
    )?;
    let mut vhost = command.spawn().map_err(|source| StartQemuError::Spawn {
        program: vm.vhost_device_vsock.to_owned(),
        source,
    })?;
    measured(confined, &mut vhost, vm.vhost_device_vsock, sandboxes)?;
    // The socket file appears when vhost-device-vsock binds, a moment before it listens: a
    // missing file or a refused connection is tried again until it accepts.
    let deadline = Instant::now() + VHOST_START;
    loop {
        let failed = match UnixStream::connect(&run.vhost) {
            Ok(connected) => return Ok((vhost, connected)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                (Instant::now() >= deadline || matches!(vhost.try_wait(), Ok(Some(_))))
                    .then(|| StartQemuError::VhostNotReady(run.vhost.clone()))
            }
            Err(source) => Some(StartQemuError::Spawn {
                program: vm.vhost_device_vsock.to_owned(),
                source,
            }),
        };
        if let Some(error) = failed {
            let _ = vhost.kill();
            let _ = vhost.wait();
            return Err(error);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Binds a listener on every socket of the VM's port plan; served later by [`Relays::serve`].
fn bind_relays(vm: &QemuVm<'_>) -> Result<Relays, StartQemuError> {
    let mut listeners = Vec::new();
    for (port, path) in &vm.spec.ports {
        let listener = UnixListener::bind(path).map_err(|source| StartQemuError::Bind {
            path: path.clone(),
            source,
        })?;
        listeners.push((listener, *port));
    }
    Ok(Relays {
        listeners,
        console: vm.run.console.clone(),
        timeout: vm.connect_timeout,
    })
}

/// Starts QEMU with [`qemu_args`] on an inherited connection to vhost-device-vsock, confined
/// like berm-vmm (plus `/dev/kvm` under KVM).
fn start_qemu(
    vm: &QemuVm<'_>,
    values: &OptionValues,
    connected: UnixStream,
    sandboxes: &mut Vec<ChildReport>,
) -> Result<Child, StartQemuError> {
    // berm-vmm connects to vhost-device-vsock and hands QEMU the connected socket, so QEMU
    // itself never needs socket(2) or connect(2) (its allow list has neither).
    let (out, err) = vm.output.stdio().map_err(|source| StartQemuError::Spawn {
        program: vm.qemu.to_owned(),
        source,
    })?;
    let mut command = Command::new(vm.qemu);
    command
        .args(qemu_args(vm, values))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    sys::kill_with_parent(&mut command);
    let vhost_fd = sys::pass_fd(&mut command, connected.into());
    command.args(vhost_args(vhost_fd));
    let qemu_policy = vm.sandbox.map(|base| {
        let mut policy = crate::sandbox::for_program(base, vm.qemu);
        if vm.accel == "kvm" {
            policy.devices.push(PathBuf::from("/dev/kvm"));
        }
        policy
    });
    let confined = confine(
        &mut command,
        vm.qemu,
        qemu_policy,
        Role::Qemu,
        &format!(" and -sandbox {QEMU_SANDBOX}"),
        vm,
    )?;
    let mut qemu = command.spawn().map_err(|source| StartQemuError::Spawn {
        program: vm.qemu.to_owned(),
        source,
    })?;
    measured(confined, &mut qemu, vm.qemu, sandboxes)?;
    Ok(qemu)
}

/// The machine, and the CPU model under TCG, for each guest architecture.
///
/// aarch64 under TCG: `cortex-a72` (armv8.0, exactly the baseline programs are compiled for),
/// not `max`, whose pointer authentication QEMU emulates at a high cost on every call and
/// return. The `virt` machine brings its own GIC, PSCI and timer; `-nodefaults` leaves no PCI
/// device on its PCIe bus.
fn machine(arch: GuestArch) -> (&'static str, &'static str) {
    match arch {
        GuestArch::X86_64 => ("microvm,acpi=off,memory-backend=mem", "max"),
        GuestArch::Aarch64 => ("virt,gic-version=3,memory-backend=mem", "cortex-a72"),
    }
}

/// QEMU's command line for `vm` (before the inherited vhost-user device): a microvm (x86_64)
/// or virt (aarch64) machine without defaults, the kernel and its command line, every disk as
/// virtio-blk with root as vda and the state disk as vdb, the console on hvc0 into the run
/// dir. Paths come escaped in `values`.
fn qemu_args(vm: &QemuVm<'_>, values: &OptionValues) -> Vec<String> {
    let spec = vm.spec;
    let memory = format!("{}M", spec.memory_mib);
    let (machine, tcg_cpu) = machine(vm.arch);
    let mut args: Vec<String> = vec![
        "-machine".into(),
        machine.into(),
        "-accel".into(),
        vm.accel.into(),
        "-cpu".into(),
        if vm.accel == "kvm" {
            "host".into()
        } else {
            tcg_cpu.into()
        },
        "-smp".into(),
        spec.cpus.to_string(),
        "-m".into(),
        memory.clone(),
        // vhost-user needs the guest memory shared with vhost-device-vsock.
        "-object".into(),
        format!("memory-backend-memfd,id=mem,size={memory},share=on"),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        // reboot(RB_AUTOBOOT) ends QEMU instead of restarting the guest (on aarch64 a PSCI
        // reset).
        "-no-reboot".into(),
    ];
    if vm.arch == GuestArch::X86_64 {
        // With reboot=k the i8042 device makes that reset take ~15 ms instead of ~1.5 s.
        args.extend(["-device".into(), "i8042".into()]);
    }
    args.extend([
        "-kernel".into(),
        spec.kernel.display().to_string(),
        "-append".into(),
        spec.cmdline.clone(),
    ]);
    let mut disks = vec![[
        "-drive".into(),
        format!(
            "file={},format=raw,if=none,id=root,readonly=on",
            values.rootfs
        ),
        "-device".into(),
        "virtio-blk-device,drive=root,serial=root".into(),
    ]];
    if let Some(state) = &values.state {
        disks.push([
            "-drive".into(),
            format!("file={state},format=raw,if=none,id=state"),
            "-device".into(),
            "virtio-blk-device,drive=state,serial=state".into(),
        ]);
    }
    for (i, ((serial, _), image)) in spec.disks.iter().zip(&values.disks).enumerate() {
        disks.push([
            "-drive".into(),
            format!("file={image},format=raw,if=none,id=disk{i},readonly=on"),
            "-device".into(),
            format!("virtio-blk-device,drive=disk{i},serial={serial}"),
        ]);
    }
    // microvm: the first virtio-blk device on the command line is vda. virt: the last is —
    // it hands out its virtio-mmio transports from the highest address down and Linux probes
    // them from the lowest up (QEMU's hw/arm/virt.c says as much), so the disks go in reverse.
    if vm.arch == GuestArch::Aarch64 {
        disks.reverse();
    }
    args.extend(disks.into_iter().flatten());
    args.extend([
        // hvc0, the console the pinned cmdline names, as libkrun provides it.
        "-device".into(),
        "virtio-serial-device".into(),
        "-chardev".into(),
        // append=on: berm-vmm truncates the console at its cap (log_cap.rs), and QEMU's
        // writes must then continue at the new end.
        format!("file,id=console,path={},append=on", values.console),
        "-device".into(),
        "virtconsole,chardev=console".into(),
    ]);
    if vm.sandbox.is_some() {
        args.extend(["-sandbox".into(), QEMU_SANDBOX.into()]);
    }
    args
}

/// The console line berm-init writes once it listens on vsock.
pub const LISTENING_MARKER: &[u8] = berm_vm_protocol::host::LISTENING_MARKER.as_bytes();
/// How much of the console is searched for the marker before giving up on it.
const MARKER_SCAN_LIMIT: u64 = 4 << 20;

/// Waits until the guest's console shows [`LISTENING_MARKER`], so no `CONNECT` reaches
/// vhost-device-vsock while the guest's vsock device is still coming up (that can stall it;
/// docs/design/microvm-findings.md). The marker only decides *when* to start connecting: if it
/// never comes (or the console grows past the scan limit), handshakes start anyway at the
/// deadline's edge and simply fail like any unanswered connect.
fn wait_for_listening(console: &Path, deadline: Instant) {
    let mut seen = 0u64;
    let mut tail: Vec<u8> = Vec::new();
    while Instant::now() < deadline && seen < MARKER_SCAN_LIMIT {
        if let Ok(mut file) = File::open(console) {
            use std::io::{Seek, SeekFrom};
            if file.seek(SeekFrom::Start(seen)).is_ok() {
                let mut chunk = Vec::new();
                if let Ok(n) = Read::by_ref(&mut file)
                    .take(MARKER_SCAN_LIMIT - seen)
                    .read_to_end(&mut chunk)
                {
                    seen += n as u64;
                    tail.extend_from_slice(&chunk);
                    if tail
                        .windows(LISTENING_MARKER.len())
                        .any(|w| w == LISTENING_MARKER)
                    {
                        return;
                    }
                    let keep = tail.len().saturating_sub(LISTENING_MARKER.len());
                    tail.drain(..keep);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn serve(
    listener: UnixListener,
    connector: Arc<Connector>,
    console: PathBuf,
    port: u32,
    timeout: Duration,
) {
    let started = Instant::now();
    let listening = Arc::new(std::sync::OnceLock::new());
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let connector = Arc::clone(&connector);
        let console = console.clone();
        let listening = Arc::clone(&listening);
        std::thread::spawn(move || {
            listening.get_or_init(|| wait_for_listening(&console, started + timeout));
            if let Some(guest) = handshake(&connector, port, Instant::now() + timeout) {
                splice(client, guest);
            }
            // Otherwise dropping `client` closes it: the client sees the end of the stream
            // and retries, as it would with libkrun.
        });
    }
}

/// `CONNECT <port>\n` → `OK <n>\n`, retried every [`RETRY`] until the guest listens.
fn handshake(connector: &Connector, port: u32, deadline: Instant) -> Option<UnixStream> {
    while Instant::now() < deadline {
        if let Ok(mut stream) = connector.connect(Target::Vsock)
            && stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .is_ok()
            && stream
                .write_all(format!("CONNECT {port}\n").as_bytes())
                .is_ok()
        {
            // The answer is short; read byte by byte so nothing after it is consumed.
            let mut answer = Vec::new();
            let mut byte = [0u8; 1];
            while answer.len() < 64 && matches!(stream.read(&mut byte), Ok(1)) && byte[0] != b'\n' {
                answer.push(byte[0]);
            }
            if answer.starts_with(b"OK ") && stream.set_read_timeout(None).is_ok() {
                return Some(stream);
            }
        }
        std::thread::sleep(RETRY);
    }
    None
}

/// Relays one client connection and its guest connection until both directions are done.
///
/// A client's half-close is not passed on as one: vhost-device-vsock 0.3.0 turns an end of
/// stream on its host side into a vsock shutdown of both directions (rust-vmm/vhost-device#874),
/// on which the guest kernel resets the connection or fails the guest's next write with
/// `EPIPE`, so the reply to a request the client wrote just before its EOF was lost. So once
/// the client has shut down its write side, the guest connection stays whole and every byte
/// the guest writes still reaches the client; it is closed when the client hangs up
/// altogether or the guest closes it. The guest's close reaches the client as the end of
/// its stream (`shutdown(SHUT_WR)`), with everything before it delivered.
fn splice(client: UnixStream, guest: UnixStream) {
    let (Ok(client2), Ok(guest2)) = (client.try_clone(), guest.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        if std::io::copy(&mut &client2, &mut &guest2).is_ok() {
            // The client's end of stream: wait for it to hang up before closing the guest's
            // side, which would lose the reply (see above).
            let _ = crate::sys::wait_for_hangup(&client2);
        }
        let _ = guest2.shutdown(Shutdown::Both);
    });
    let _ = std::io::copy(&mut &guest, &mut &client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// The guest's end as vhost-device-vsock 0.3.0 leaves it: an end of stream before the
    /// reply resets the connection, so the reply is never written.
    fn device(mut guest: UnixStream, reply: &'static [u8]) -> std::thread::JoinHandle<bool> {
        std::thread::spawn(move || {
            let mut request = [0u8; 16];
            let n = guest.read(&mut request).unwrap();
            assert_eq!(&request[..n], b"request\n");
            std::thread::sleep(Duration::from_millis(50));
            guest.set_nonblocking(true).unwrap();
            if matches!(guest.read(&mut request), Ok(0)) {
                return false;
            }
            guest.set_nonblocking(false).unwrap();
            guest.write_all(reply).unwrap();
            // The guest keeps its connection open until the relay closes it.
            let mut rest = Vec::new();
            let _ = guest.read_to_end(&mut rest);
            true
        })
    }

    #[test]
    fn a_client_that_half_closed_gets_the_whole_reply_and_its_hang_up_closes_the_guest() {
        let (client, client_relay) = UnixStream::pair().unwrap();
        let (guest_relay, guest) = UnixStream::pair().unwrap();
        let device = device(guest, b"reply\n");
        let relay = std::thread::spawn(move || splice(client_relay, guest_relay));
        let mut client = client;
        client.write_all(b"request\n").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut reply = [0u8; 6];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"reply\n");
        // The client hangs up: the relay closes the guest's connection and ends.
        drop(client);
        assert!(
            device.join().unwrap(),
            "the guest saw the end of stream before its reply"
        );
        relay.join().unwrap();
    }

    #[test]
    fn the_guests_close_reaches_the_client_as_its_end_of_stream() {
        let (mut client, client_relay) = UnixStream::pair().unwrap();
        let (guest_relay, mut guest) = UnixStream::pair().unwrap();
        let relay = std::thread::spawn(move || splice(client_relay, guest_relay));
        guest.write_all(b"greeting\nbye\n").unwrap();
        drop(guest);
        let mut all = String::new();
        client.read_to_string(&mut all).unwrap();
        assert_eq!(all, "greeting\nbye\n");
        drop(client);
        relay.join().unwrap();
    }

    #[test]
    fn option_values_escape_commas_or_refuse() {
        assert_eq!(
            qemu_value(Path::new("/a,b/disk,,x.img")).unwrap(),
            "/a,,b/disk,,,,x.img"
        );
        let invalid = Path::new(std::ffi::OsStr::from_bytes(b"/a/\xff.img"));
        let err = qemu_value(invalid).unwrap_err().to_string();
        assert!(err.contains("not valid UTF-8"), "{err}");
        let err = vhost_value(Path::new("/run,x/vhost.sock"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no escape for ','"), "{err}");
        assert_eq!(
            vhost_value(Path::new("/run/x.sock")).unwrap(),
            "/run/x.sock"
        );
    }
}
