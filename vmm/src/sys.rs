//! Every `unsafe` call berm-vmm makes: libkrun's C API (linked statically from the `libkrun`
//! crate), `prctl(PR_SET_PDEATHSIG)` for child processes, and `lseek(SEEK_DATA)` for the
//! state-disk digest.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::spec::VmSpec;

/// Set by SIGTERM, SIGINT or SIGHUP once [`catch_stop_signals`] ran.
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Turns SIGTERM, SIGINT and SIGHUP into a flag [`stop_requested`] reports, so berm-vmm can
/// ask the guest to shut down instead of dying with the VM half-stopped.
pub fn catch_stop_signals() -> io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: sigaction is plain old data; all-zero bytes are a valid value (empty mask,
        // no flags).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `action` is a valid sigaction whose handler only stores to an atomic, which
        // is async-signal-safe; the old action is not needed (null).
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

/// kill(`pid`, 0): whether this process may signal `pid` (for the host-sandbox probe).
pub fn may_signal(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill(2) with signal 0 sends nothing; integer arguments only.
    if unsafe { libc::kill(pid, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This process's parent.
pub fn parent() -> u32 {
    // SAFETY: getppid(2) takes no arguments and always succeeds.
    unsafe { libc::getppid() as u32 }
}

#[cfg(not(target_os = "linux"))]
/// No x32 here.
pub fn x32_call_in_child() -> String {
    "not linux".into()
}

#[cfg(target_os = "linux")]
/// Forks a child that makes one x32 system call (getpid with the x32 bit) and reports how
/// the child ended: `SIGSYS` when the seccomp filter killed it.
pub fn x32_call_in_child() -> String {
    // SAFETY: the child makes one raw system call and _exits, touching no lock or allocation
    // (the probe runs while berm-vmm is still single-threaded).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a raw getpid with the x32 bit; then _exit without unwinding.
        unsafe {
            libc::syscall(libc::SYS_getpid | 0x4000_0000);
            libc::_exit(0)
        }
    }
    if pid < 0 {
        return format!("fork failed: {}", io::Error::last_os_error());
    }
    let mut status = 0;
    // SAFETY: reaping the child just forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFSIGNALED(status) {
        match libc::WTERMSIG(status) {
            libc::SIGSYS => "SIGSYS".into(),
            signal => format!("signal {signal}"),
        }
    } else {
        "allowed".into()
    }
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, touches no memory and always succeeds.
    unsafe { libc::geteuid() }
}

/// Makes the kernel SIGKILL the child when berm-vmm dies, so no hypervisor outlives it, and
/// puts it in its own process group, so a terminal's Ctrl-C reaches only berm-vmm (which then
/// stops the guest in order).
pub fn kill_with_parent(command: &mut Command) {
    command.process_group(0);
    // macOS has no PR_SET_PDEATHSIG: there the children die with berm-vmm only when it
    // exits normally (it kills and waits for them); see docs/macos.md.
    #[cfg(target_os = "linux")]
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl(2),
    // which is async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Lets the child inherit `fd` under its own number (close-on-exec cleared in the child
/// only), so it can use a socket berm-vmm connected instead of connecting itself. The number
/// is the parent's, so it cannot collide with any descriptor the spawn itself uses.
pub fn pass_fd(command: &mut Command, fd: std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and calls only fcntl(2),
    // which is async-signal-safe; it allocates nothing. `fd` is moved into the closure, so
    // it stays open in the parent until the command is dropped.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    raw
}

/// Makes the child apply `sandbox` between fork and exec; a child that cannot is never
/// executed (the spawn fails with the error).
pub fn confine_child(command: &mut Command, mut sandbox: crate::sandbox::ChildSandbox) {
    // SAFETY: the closure runs in the child between fork and exec. The ruleset was built in
    // the parent; applying it is prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self(2),
    // both async-signal-safe system calls, and builds a plain status value: no allocation on
    // success and no lock. (berm-vmm spawns its hypervisor children while still
    // single-threaded, so no other thread's lock can be held across the fork anyway.)
    unsafe {
        command.pre_exec(move || sandbox.apply());
    }
}

/// The offset of the first data byte at or after `offset`, or `None` when the rest of the
/// file is a hole (SEEK_DATA; ENXIO means no more data).
pub fn next_data(file: &File, offset: u64) -> io::Result<Option<u64>> {
    let Ok(offset) = libc::off_t::try_from(offset) else {
        return Ok(None);
    };
    // SAFETY: lseek(2) on an fd the File owns; it only moves the file offset, which the
    // caller does not rely on (it reads with explicit offsets).
    let ret = unsafe { libc::lseek(file.as_raw_fd(), offset, libc::SEEK_DATA) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::ENXIO) {
            Ok(None)
        } else {
            Err(err)
        };
    }
    Ok(Some(ret as u64))
}

/// A libkrun call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {}", io::Error::from_raw_os_error(-*.code))]
pub struct KrunError {
    /// The function.
    pub call: &'static str,
    /// Its negative errno.
    pub code: i32,
}

fn c(path: &Path) -> Result<CString, KrunError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| KrunError {
        call: "path with a NUL byte",
        code: -libc::EINVAL,
    })
}

fn ok(call: &'static str, ret: i32) -> Result<i32, KrunError> {
    if ret < 0 {
        Err(KrunError { call, code: ret })
    } else {
        Ok(ret)
    }
}

/// Configures libkrun and enters the VM. On success this never returns: libkrun exits the
/// process when the guest resets. The call order is the one measured to work
/// (docs/design/microvm-findings.md): the implicit vsock is disabled first because it turns on TSI,
/// which needs libkrunfw's patched kernel.
pub fn krun_enter(vm: &VmSpec) -> Result<std::convert::Infallible, KrunError> {
    let kernel = c(&vm.kernel)?;
    let cmdline = CString::new(vm.cmdline.as_str()).map_err(|_| KrunError {
        call: "cmdline with a NUL byte",
        code: -libc::EINVAL,
    })?;
    let rootfs = c(&vm.rootfs)?;
    let state = vm.state.as_deref().map(c).transpose()?;
    let console = c(&vm.console)?;
    let ports: Vec<(u32, CString)> = vm
        .ports
        .iter()
        .map(|(p, path)| Ok((*p, c(path)?)))
        .collect::<Result<_, _>>()?;
    let root_id = CString::from(c"root");
    let state_id = CString::from(c"state");
    let disks: Vec<(CString, CString)> = vm
        .disks
        .iter()
        .map(|(serial, path)| {
            let serial = CString::new(serial.as_str()).map_err(|_| KrunError {
                call: "disk serial with a NUL byte",
                code: -libc::EINVAL,
            })?;
            Ok((serial, c(path)?))
        })
        .collect::<Result<_, _>>()?;

    // Warnings and errors go to stderr, which berm-vmm points at hypervisor.log.
    ok("krun_set_log_level", krun::krun_set_log_level(2))?;
    let ctx = ok("krun_create_ctx", krun::krun_create_ctx())? as u32;
    ok(
        "krun_set_vm_config",
        krun::krun_set_vm_config(ctx, vm.cpus, vm.memory_mib),
    )?;
    ok(
        "krun_disable_implicit_vsock",
        krun::krun_disable_implicit_vsock(ctx),
    )?;
    ok("krun_add_vsock", krun::krun_add_vsock(ctx, 0))?;
    // SAFETY: `kernel` and `cmdline` are valid NUL-terminated strings alive until the VM
    // ends (this function never returns on success); a null initramfs is documented as none.
    ok("krun_set_kernel", unsafe {
        krun::krun_set_kernel(
            ctx,
            kernel.as_ptr(),
            vm.kernel_format.krun(),
            std::ptr::null(),
            cmdline.as_ptr(),
        )
    })?;
    // SAFETY: both strings are valid NUL-terminated strings that outlive the call; format 0
    // is raw.
    ok("krun_add_disk2 (rootfs)", unsafe {
        krun::krun_add_disk2(ctx, root_id.as_ptr(), rootfs.as_ptr(), 0, true)
    })?;
    if let Some(state) = &state {
        // SAFETY: as above.
        ok("krun_add_disk2 (state)", unsafe {
            krun::krun_add_disk2(ctx, state_id.as_ptr(), state.as_ptr(), 0, false)
        })?;
    }
    for (serial, path) in &disks {
        // SAFETY: both strings are valid NUL-terminated strings that outlive the call; the
        // serial is what the guest reads from /sys/block/*/serial.
        ok("krun_add_disk2 (app)", unsafe {
            krun::krun_add_disk2(ctx, serial.as_ptr(), path.as_ptr(), 0, true)
        })?;
    }
    for (port, path) in &ports {
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        ok("krun_add_vsock_port2", unsafe {
            krun::krun_add_vsock_port2(ctx, *port, path.as_ptr(), true)
        })?;
    }
    // SAFETY: `console` is a valid NUL-terminated string that outlives the call.
    ok("krun_set_console_output", unsafe {
        krun::krun_set_console_output(ctx, console.as_ptr())
    })?;
    let ret = krun::krun_start_enter(ctx);
    Err(KrunError {
        call: "krun_start_enter",
        code: if ret < 0 { ret } else { -libc::EIO },
    })
}
