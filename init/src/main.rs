//! berm-init: PID 1 of berm's microVM guest.
//!
//! The main sequence is a straight list of small steps. Order matters in two places: the
//! control and logs ports listen before anything that can fail (so a failed boot is reported
//! to the host), and `power_off` is the last line before the reset (so the host can tell a
//! clean stop from a crash, which the hypervisor's exit code cannot).
//!
//! PID 1 must never exit or panic the kernel: every failure is reported and ends in an
//! orderly power-off, and a panic hook does the same for bugs.
#![deny(unsafe_code)]

mod app_rules;
mod apps;
mod confine;
mod egress_broker;
mod hub;
mod lock;
mod registry;
mod relay;
mod settings;
#[allow(unsafe_code)]
mod sys;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use berm_vm_protocol::host::LISTENING_MARKER;
use berm_vm_protocol::{
    BootComplete, BootFailed, BootStart, BootStep, CONTROL_PORT, Event, LOGS_PORT, LogLevel, Phase,
    PowerOff, ShuttingDown,
};

use hub::{Command, Hub};

berm_abi::codes! {
    /// berm-init's exit codes, carried by `power_off` (documented in docs/vm.md).
    enum Exit: i32 {
        /// Requested shutdown, everything stopped and unmounted.
        Clean = 0,
        /// A pseudo filesystem could not be mounted.
        Mount = 2,
        /// A guest setting was unknown or malformed.
        Settings = 3,
        /// The state disk could not be mounted.
        State = 4,
        /// Shutdown finished but something could not be unmounted.
        Unmount = 6,
        /// berm-init itself panicked.
        Panic = 70,
    }
}

/// How long to wait for hosts to close their control connections after `power_off`.
const CLOSE_WAIT: Duration = Duration::from_millis(500);
/// How long shutdown waits, once the apps are gone, for their receipt relays to pass on what
/// their bermds wrote last.
const RECEIPTS_WAIT: Duration = Duration::from_secs(2);
/// How long to wait, when no host is connected at `power_off`, for one to connect and read the
/// history (a boot can fail before berm-vmm's first connection gets through).
const HOST_WAIT: Duration = Duration::from_secs(3);

/// Mounts made by berm-init, in order; unmounted in reverse at shutdown where marked.
struct MountSpec {
    source: &'static str,
    target: &'static str,
    fstype: &'static str,
    flags: u64,
    data: &'static str,
    unmount: bool,
}

const MOUNTS: [MountSpec; 4] = [
    MountSpec {
        source: "sysfs",
        target: "/sys",
        fstype: "sysfs",
        flags: sys::NOSUID | sys::NODEV | sys::NOEXEC,
        data: "",
        unmount: false,
    },
    MountSpec {
        source: "devtmpfs",
        target: "/dev",
        fstype: "devtmpfs",
        flags: sys::NOSUID | sys::NOEXEC,
        data: "mode=0755",
        unmount: false,
    },
    MountSpec {
        source: "tmpfs",
        target: "/run",
        fstype: "tmpfs",
        flags: sys::NOSUID | sys::NODEV,
        data: "mode=0755,size=16m",
        unmount: true,
    },
    MountSpec {
        source: "tmpfs",
        target: "/tmp",
        fstype: "tmpfs",
        flags: sys::NOSUID | sys::NODEV,
        data: "mode=1777,size=64m",
        unmount: true,
    },
];

static HUB: OnceLock<Arc<Hub>> = OnceLock::new();

fn main() {
    // The same binary confines an app's process before it execs bermd (see confine.rs). PID 1
    // itself never takes this path, whatever its arguments.
    if std::process::id() != 1 && std::env::args().nth(1).as_deref() == Some("confine") {
        confine::main();
    }
    // `berm-init policy-sha256` (on the build host, never as PID 1): the app policy digest
    // scripts/build-rootfs.sh pins beside the rootfs.
    if std::process::id() != 1 && std::env::args().nth(1).as_deref() == Some("policy-sha256") {
        println!("{}", confine::app_policy_sha256());
        std::process::exit(0);
    }
    std::panic::set_hook(Box::new(report_panic_and_reset));

    // /proc first: the boot id every line carries comes from it.
    let proc_mounted = sys::mount(
        "proc",
        "/proc",
        "proc",
        sys::NOSUID | sys::NODEV | sys::NOEXEC,
        "",
    )
    .map_err(|e| format!("/proc: {e}"));
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|_| String::from("0"));
    let (commands, requests) = mpsc::channel();
    let hub = Hub::new(boot_id, commands);
    // Cannot fail: HUB is set only here, once.
    let _ = HUB.set(Arc::clone(&hub));

    // Listen before anything else can fail, so every later failure reaches the host.
    if let Err(e) = listen(&hub) {
        // Without the control port nothing can be reported except on the console.
        eprintln!("berm-init: cannot listen on vsock: {e}; resetting");
        power_off(&hub, "listen_failed", Exit::Mount.code(), 0, Vec::new());
    }
    // The QEMU backend waits for this console line before its first CONNECT: handshakes sent
    // while the guest's vsock device is still coming up can stall vhost-device-vsock 0.3.0.
    eprintln!("{LISTENING_MARKER}");

    let mut mount_error = proc_mounted.err();
    for spec in &MOUNTS {
        if mount_error.is_none() {
            mount_error = mount(spec).err();
        }
    }
    let cgroup2 = match mount_cgroup2() {
        Ok(options) => options,
        Err(e) => {
            mount_error.get_or_insert(e);
            String::new()
        }
    };

    hub.event(Event::BootStart(BootStart {
        pid: std::process::id(),
        kernel_release: sys::kernel_release(),
        lsm: lsm_names(),
        landlock_abi: sys::landlock_abi(),
        cmdline_bytes: std::fs::read("/proc/cmdline")
            .map(|c| c.len() as u32)
            .unwrap_or(0),
        cgroup2,
    }));
    if let Some(message) = mount_error {
        boot_failed(&hub, BootStep::Mount, message, Exit::Mount.code());
    }

    let settings = match settings::parse(std::env::vars()) {
        Ok(settings) => settings,
        Err(message) => boot_failed(&hub, BootStep::Settings, message, Exit::Settings.code()),
    };
    hub.set_log_level(settings.log_level);

    let state_mounted = match &settings.state {
        None => false,
        Some(device) => match mount_state(device) {
            Ok(()) => true,
            Err(message) => boot_failed(&hub, BootStep::State, message, Exit::State.code()),
        },
    };

    let ready = if settings.apps > 0 {
        // Reap while apps start, so an app that dies at once is reported as it happens.
        let reaper_hub = Arc::clone(&hub);
        let reaping = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let keep_reaping = Arc::clone(&reaping);
        let reaper = std::thread::spawn(move || {
            while keep_reaping.load(std::sync::atomic::Ordering::Relaxed) {
                reap(&reaper_hub);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let ready = apps::start_all(
            &hub,
            settings.apps,
            state_mounted,
            settings.probe,
            settings.accept,
        );
        reaping.store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = reaper.join();
        ready
    } else {
        0
    };

    hub.set_phase(Phase::Running);
    hub.event(Event::BootComplete(BootComplete { apps: ready }));

    wait_for_shutdown(&hub, &requests);
    shutdown(
        &hub,
        "requested",
        Exit::Clean.code(),
        settings.stop_grace,
        state_mounted,
    );
}

fn listen(hub: &Arc<Hub>) -> std::io::Result<()> {
    let control = sys::vsock_listen(CONTROL_PORT)?;
    let logs = sys::vsock_listen(LOGS_PORT)?;
    let control_hub = Arc::clone(hub);
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || control_hub.serve_control(control))?;
    let logs_hub = Arc::clone(hub);
    std::thread::Builder::new()
        .name("logs".into())
        .spawn(move || logs_hub.serve_logs(logs))?;
    Ok(())
}

fn mount(spec: &MountSpec) -> Result<(), String> {
    // The kernel mounts devtmpfs on /dev itself (DEVTMPFS_MOUNT) when it mounts the root.
    if spec.fstype == "devtmpfs" && std::path::Path::new("/dev/null").exists() {
        return Ok(());
    }
    sys::mount(spec.source, spec.target, spec.fstype, spec.flags, spec.data)
        .map_err(|e| format!("{}: {e}", spec.target))
}

/// Mounts cgroup2 with `nsdelegate` (and `favordynmods` where the kernel has it) and returns
/// the options it ended up with, which `boot_start` reports.
fn mount_cgroup2() -> Result<String, String> {
    const TARGET: &str = "/sys/fs/cgroup";
    let flags = sys::NOSUID | sys::NODEV | sys::NOEXEC;
    sys::mount(
        "cgroup2",
        TARGET,
        "cgroup2",
        flags,
        "nsdelegate,favordynmods",
    )
    .or_else(|_| sys::mount("cgroup2", TARGET, "cgroup2", flags, "nsdelegate"))
    .map_err(|e| format!("{TARGET}: {e}"))?;
    let mounts = std::fs::read_to_string("/proc/self/mounts")
        .map_err(|e| format!("/proc/self/mounts: {e}"))?;
    Ok(mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[1] == TARGET && f[2] == "cgroup2")
        .map(|f| f[3].to_owned())
        .unwrap_or_default())
}

/// Mounts the state disk, which berm-vmm formats as ext4 on the host before the first boot
/// (docs/vm.md, "The state disk").
fn mount_state(device: &str) -> Result<(), String> {
    let path = format!("/dev/{device}");
    if !std::path::Path::new(&path).exists() {
        return Err(format!("state disk {path} does not exist"));
    }
    sys::mount(&path, "/state", "ext4", sys::NOSUID | sys::NODEV, "")
        .map_err(|e| format!("mounting {path} on /state as ext4: {e}"))
}

fn lsm_names() -> Vec<String> {
    let Ok(ids) = sys::lsm_ids() else {
        return Vec::new();
    };
    ids.into_iter()
        .map(|id| {
            match id {
                100 => "capability",
                101 => "selinux",
                102 => "smack",
                103 => "tomoyo",
                104 => "apparmor",
                105 => "yama",
                106 => "loadpin",
                107 => "safesetid",
                108 => "lockdown",
                109 => "bpf",
                110 => "landlock",
                111 => "ima",
                112 => "evm",
                113 => "ipe",
                _ => return format!("lsm-{id}"),
            }
            .to_owned()
        })
        .collect()
}

/// Reaps every zombie there is, reporting apps that ended.
fn reap(hub: &Hub) {
    while let sys::Reaped::Child { pid, code, signal } = sys::reap_one() {
        hub.apps().reaped(hub, pid, code, signal);
    }
}

/// Reaps zombies until a host asks for shutdown.
fn wait_for_shutdown(hub: &Hub, requests: &Receiver<Command>) {
    loop {
        match requests.recv_timeout(Duration::from_millis(200)) {
            Ok(Command::Shutdown) => return,
            Err(RecvTimeoutError::Timeout) => reap(hub),
            // Cannot happen: the hub holds a sender for as long as PID 1 lives.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Reports a failed step and powers off; the host's control connections already hold every
/// earlier event.
fn boot_failed(hub: &Hub, step: BootStep, message: String, exit_code: i32) -> ! {
    let message = hub::bounded(message, hub::MAX_MESSAGE_BYTES);
    hub.set_phase(Phase::Failed);
    hub.log(LogLevel::Error, format!("boot failed at {step}: {message}"));
    hub.event(Event::BootFailed(BootFailed {
        step,
        message,
        exit_code,
    }));
    shutdown(
        hub,
        "boot_failed",
        exit_code,
        Duration::from_millis(500),
        false,
    )
}

/// Stops every process, syncs, unmounts, reports `power_off` and resets.
fn shutdown(hub: &Hub, reason: &str, exit_code: i32, grace: Duration, state_mounted: bool) -> ! {
    hub.set_phase(Phase::ShuttingDown);
    hub.event(Event::ShuttingDown(ShuttingDown {
        reason: reason.into(),
    }));

    sys::kill_all(libc::SIGTERM);
    let deadline = Instant::now() + grace;
    let mut alive = true;
    while alive && Instant::now() < deadline {
        match sys::reap_one() {
            sys::Reaped::Child { .. } => {}
            sys::Reaped::Running => std::thread::sleep(Duration::from_millis(10)),
            sys::Reaped::None => alive = false,
        }
    }
    let mut killed = 0;
    if alive {
        sys::kill_all(libc::SIGKILL);
        loop {
            match sys::reap_one() {
                sys::Reaped::Child { .. } => killed += 1,
                sys::Reaped::Running => std::thread::sleep(Duration::from_millis(5)),
                sys::Reaped::None => break,
            }
        }
    }

    // The apps are gone, their receipt pipes closed: what their bermds sealed last goes out
    // before power_off.
    hub.wait_for_receipts(RECEIPTS_WAIT);
    sys::sync();
    let mut unmount_failed = Vec::new();
    let mut targets: Vec<&str> = MOUNTS
        .iter()
        .filter(|m| m.unmount)
        .map(|m| m.target)
        .collect();
    targets.push("/sys/fs/cgroup");
    if state_mounted {
        targets.push("/state");
    }
    let app_mounts = hub.apps().mounts();
    targets.extend(app_mounts.iter().map(String::as_str));
    for target in targets.into_iter().rev() {
        if let Err(e) = sys::umount(target)
            && e.raw_os_error() != Some(libc::EINVAL)
        {
            hub.log(LogLevel::Warn, format!("unmounting {target}: {e}"));
            unmount_failed.push(target.to_owned());
        }
    }
    sys::sync();
    let exit_code = if exit_code == Exit::Clean.code() && !unmount_failed.is_empty() {
        Exit::Unmount.code()
    } else {
        exit_code
    };
    power_off(hub, reason, exit_code, killed, unmount_failed)
}

/// Sends `power_off`, lets the hosts close their connections (so the line is read before the
/// reset), and resets the VM.
fn power_off(
    hub: &Hub,
    reason: &str,
    exit_code: i32,
    killed: u32,
    unmount_failed: Vec<String>,
) -> ! {
    hub.event(Event::PowerOff(PowerOff {
        reason: reason.into(),
        exit_code,
        killed,
        unmount_failed,
    }));
    let deadline = Instant::now() + HOST_WAIT;
    while hub.control_connections() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // No half-close here: vhost-device-vsock 0.3.0 stops passing the host's close on to the
    // guest once the guest has shut its side down, so waiting would always time out. Hosts
    // close when they read power_off (docs/design/vm-protocol.md).
    let closing = Instant::now();
    while hub.control_connections() > 0 && closing.elapsed() < CLOSE_WAIT {
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "berm-init: resetting; {} control connection(s) still open after {} ms",
        hub.control_connections(),
        closing.elapsed().as_millis()
    );
    reset()
}

fn reset() -> ! {
    sys::sync();
    let error = sys::reboot_autoboot();
    eprintln!("berm-init: reboot(RB_AUTOBOOT) failed: {error}");
    // PID 1 must not exit (that panics the kernel); nothing is left to do but wait.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The panic hook: report on the console and the control port, then reset instead of letting
/// PID 1 die (which would panic the kernel).
fn report_panic_and_reset(info: &std::panic::PanicHookInfo<'_>) {
    eprintln!("berm-init: panic: {info}");
    if let Some(hub) = HUB.get() {
        hub.event_from_panic(Event::PowerOff(PowerOff {
            reason: hub::bounded(
                format!(
                    "panic: {}",
                    info.to_string().replace(|c: char| c.is_control(), " ")
                ),
                1024,
            ),
            exit_code: Exit::Panic.code(),
            killed: 0,
            unmount_failed: Vec::new(),
        }));
    }
    reset()
}
