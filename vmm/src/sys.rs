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
        command.pre_exec(move || sandbox.apply().map(drop));
    }
}

/// The kernel's Landlock ABI version (0 without Landlock), as
/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` gives it.
#[cfg(target_os = "linux")]
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
    // SAFETY: with a null attribute and size 0, this flag only asks the kernel's ABI
    // version; no memory is read or written.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
}

/// This process's real uid and gid.
pub fn ids() -> (u32, u32) {
    // SAFETY: getuid(2) and getgid(2) take no arguments and always succeed.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// The step of [`isolate`] that failed, and its errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IsolateError {
    /// The step (`unshare`, `uid_map`, `mount tmpfs`, …).
    pub step: &'static str,
    /// Its errno.
    pub errno: i32,
}

impl From<IsolateError> for io::Error {
    fn from(e: IsolateError) -> Self {
        io::Error::from_raw_os_error(e.errno)
    }
}

/// Writes `text` to the file `path` (a `/proc/self` map), allocating nothing.
#[cfg(target_os = "linux")]
fn write_proc(path: &std::ffi::CStr, text: &[u8], step: &'static str) -> Result<(), IsolateError> {
    let fail = || IsolateError {
        step,
        errno: io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    };
    // SAFETY: open(2) of a constant NUL-terminated path; write(2) from `text`, alive for
    // the call; the descriptor is closed once.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(fail());
        }
        let written = libc::write(fd, text.as_ptr().cast(), text.len());
        let result = if written == text.len() as isize {
            Ok(())
        } else {
            Err(fail())
        };
        libc::close(fd);
        result
    }
}

/// Puts the calling process (single-threaded: a forked child, or krun-enter before it
/// confines itself) into `view` (see `view.rs`): a user namespace mapping this user to itself
/// and a mount namespace whose root is a tmpfs holding only the view's bind mounts. Must run
/// before Landlock, which forbids changing mounts. Allocates nothing.
#[cfg(target_os = "linux")]
pub fn isolate(view: &crate::view::PreparedView) -> Result<(), IsolateError> {
    let check = |ret: libc::c_long, step: &'static str| {
        if ret < 0 {
            Err(IsolateError {
                step,
                errno: io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            })
        } else {
            Ok(())
        }
    };
    // SAFETY: unshare(2) with integer flags; it touches no memory of this process.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
    check(unshared.into(), "unshare")?;
    write_proc(c"/proc/self/setgroups", b"deny", "setgroups")?;
    write_proc(c"/proc/self/uid_map", view.uid_map.as_bytes(), "uid_map")?;
    write_proc(c"/proc/self/gid_map", view.gid_map.as_bytes(), "gid_map")?;
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: mount(2), mkdir(2), open(2), chdir(2), pivot_root(2) and umount2(2) with
    // NUL-terminated strings the view owns (alive for each call), constant strings, null
    // pointers where mount(2) documents them as unused, and integer flags.
    unsafe {
        // Nothing done here propagates back to the host's mounts.
        check(
            libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                null.cast(),
            )
            .into(),
            "make mounts private",
        )?;
        // Each source opened now, in this namespace (a bind's source must be one of its
        // mounts), and before the tmpfs hides the stage, which is one of them.
        let mut sources = [-1; crate::view::MAX_MOUNTS];
        for ((source, ..), slot) in view.binds.iter().zip(sources.iter_mut()) {
            *slot = libc::open(source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            check((*slot).into(), "open a source")?;
        }
        check(
            libc::mount(
                c"tmpfs".as_ptr(),
                view.stage.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0755,size=64k".as_ptr().cast(),
            )
            .into(),
            "mount tmpfs",
        )?;
        for dir in &view.dirs {
            if libc::mkdir(dir.as_ptr(), 0o755) < 0 && *libc::__errno_location() != libc::EEXIST {
                check(-1, "mkdir")?;
            }
        }
        for ((_, target, dir), &fd) in view.binds.iter().zip(&sources) {
            if !dir {
                let fd = libc::open(
                    target.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                    0o600,
                );
                check(fd.into(), "create a file mount point")?;
                libc::close(fd);
            }
            let mut source = [0 as libc::c_char; 108];
            connector::proc_fd_path(fd, &mut source);
            check(
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    null,
                    // Not recursive: the stage is one of the sources (or beneath one), and
                    // the tmpfs now on it must not come along into the view.
                    libc::MS_BIND,
                    null.cast(),
                )
                .into(),
                "bind mount",
            )?;
        }
        check(libc::chdir(view.stage.as_ptr()).into(), "chdir to the view")?;
        check(
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()),
            "pivot_root",
        )?;
        check(
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH).into(),
            "detach the old root",
        )?;
        if libc::chdir(view.cwd.as_ptr()) < 0 {
            check(libc::chdir(c"/".as_ptr()).into(), "chdir")?;
        }
        for &fd in sources.iter().take(view.binds.len()) {
            libc::close(fd);
        }
    }
    Ok(())
}

/// No namespaces on this OS (nor a host sandbox).
#[cfg(not(target_os = "linux"))]
pub fn isolate(_view: &crate::view::PreparedView) -> Result<(), IsolateError> {
    Err(IsolateError {
        step: "unshare",
        errno: libc::ENOSYS,
    })
}

/// Makes the child enter `view` between fork and exec, before anything else confines it; a
/// child that cannot is never executed (the spawn fails with the errno).
pub fn isolate_child(command: &mut Command, view: crate::view::PreparedView) {
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe system calls on data prepared in the parent ([`isolate`] allocates
    // nothing); berm-vmm spawns its children while single-threaded, so no lock is held.
    unsafe {
        command.pre_exec(move || isolate(&view).map_err(io::Error::from));
    }
}

/// A pathname Unix socket address, built in the parent so a child can connect to it without
/// allocating.
pub struct UnixAddress {
    addr: libc::sockaddr_un,
    len: libc::socklen_t,
}

impl UnixAddress {
    /// The address of `path`; `None` if it does not fit `sun_path`.
    pub fn new(path: &Path) -> Option<Self> {
        let bytes = path.as_os_str().as_encoded_bytes();
        // SAFETY: sockaddr_un is plain old data for which all-zero bytes are valid; zeroing
        // it also covers fields only some platforms have (macOS's `sun_len`).
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
            return None;
        }
        for (slot, &b) in addr.sun_path.iter_mut().zip(bytes) {
            *slot = b as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
        Some(Self { addr, len })
    }
}

/// Tries to connect a new stream socket to `address`: 0 if it connected (the connection is
/// closed at once), else the errno of the first call refused (`socket` or `connect`).
/// Allocates nothing.
pub fn connect_errno(address: &UnixAddress) -> u32 {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .map_or(u32::MAX, |e| e as u32)
    };
    // SAFETY: socket(2) with integer arguments; connect(2) with a sockaddr_un whose length
    // was computed for it; the socket is closed once.
    unsafe {
        // Linux sets close-on-exec atomically; elsewhere the window is harmless because the
        // socket is closed before this function returns.
        #[cfg(target_os = "linux")]
        let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
        #[cfg(not(target_os = "linux"))]
        let kind = libc::SOCK_STREAM;
        let socket = libc::socket(libc::AF_UNIX, kind, 0);
        if socket < 0 {
            return errno();
        }
        let ret = libc::connect(
            socket,
            std::ptr::from_ref(&address.addr).cast::<libc::sockaddr>(),
            address.len,
        );
        let result = if ret == 0 { 0 } else { errno() };
        libc::close(socket);
        result
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
    let egress: Vec<(u32, CString)> = vm
        .egress
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
    // The egress ports: the guest connects, libkrun connects to the dialer's socket
    // (listen = false).
    for (port, path) in &egress {
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        ok("krun_add_vsock_port2 (egress)", unsafe {
            krun::krun_add_vsock_port2(ctx, *port, path.as_ptr(), false)
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

/// Raises a pipe's buffer to `bytes` (best effort: the kernel caps it at
/// `/proc/sys/fs/pipe-max-size`), so a hypervisor child can write that much before anyone
/// reads: its output relay starts only once berm-vmm is confined.
#[cfg(target_os = "linux")]
pub fn grow_pipe(pipe: &impl AsRawFd, bytes: i32) {
    // SAFETY: fcntl(2) F_SETPIPE_SZ on a descriptor the caller owns; integer arguments only,
    // and a failure leaves the pipe as it was.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, bytes) };
}

/// No pipe sizes to set here.
#[cfg(not(target_os = "linux"))]
pub fn grow_pipe(_pipe: &impl AsRawFd, _bytes: i32) {}

/// The connector process (see `connector.rs`): forked from berm-vmm while it is still
/// single-threaded, it serves one-byte requests on `channel` (its end of a `SOCK_SEQPACKET`
/// pair) until berm-vmm closes the other end or dies.
#[cfg(target_os = "linux")]
pub mod connector {
    use std::ffi::CString;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use crate::sandbox::ChildSandbox;

    fn errno() -> i32 {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }

    /// A `SOCK_SEQPACKET` pair, close-on-exec: one message per request and per answer.
    pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [-1; 2];
        // SAFETY: socketpair(2) writes two descriptors into the array it is given.
        let ret = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// Forks the connector. In the child: signals that stop berm-vmm are ignored (it must
    /// outlive a stop request, to connect the shutdown), it dies with berm-vmm, opens
    /// `/proc/self/status`, applies `sandbox` (or exits 1), measures itself and sends the
    /// report as its first message on `channel` (or exits 1: see `measure.rs`), closes every
    /// descriptor but `channel` and `dir`, and serves. Returns the child's pid. The caller
    /// must be single-threaded.
    pub fn fork(
        channel: OwnedFd,
        dir: OwnedFd,
        names: &[CString],
        mut sandbox: ChildSandbox,
    ) -> io::Result<u32> {
        // SAFETY: berm-vmm is single-threaded here (run.rs forks the connector right before
        // confining itself, which checks that), so no lock is held by another thread and the
        // child may use the heap; the child never returns into the caller (it _exits).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid > 0 {
            return Ok(pid as u32);
        }
        // The child.
        // SAFETY: signal dispositions, prctl and close_range take integer arguments (and a
        // constant name); the descriptors named are this process's own.
        unsafe {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_IGN);
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                libc::_exit(1);
            }
            libc::prctl(libc::PR_SET_NAME, c"berm-connector".as_ptr());
        }
        // Opened before Landlock grants nothing; read after the filter is loaded, which
        // allows only `read`, `close` and `sendmsg` of what follows (nothing allocates).
        let status = crate::measure::OwnStatus::open();
        let measured = match (status, sandbox.apply()) {
            (Ok(status), Ok(landlock)) => status.measure(landlock).ok(),
            _ => None,
        };
        let mut line = [0u8; crate::measure::MAX_REPORT];
        let sent = measured.is_some_and(|report| {
            let line = report.encode(&mut line);
            // SAFETY: sends `line` (alive for the call) as one message, no control data.
            unsafe {
                let mut iov = libc::iovec {
                    iov_base: line.as_ptr().cast_mut().cast(),
                    iov_len: line.len(),
                };
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                libc::sendmsg(channel.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) == line.len() as isize
            }
        });
        if !sent {
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(1) };
        }
        let (a, b) = {
            let (x, y) = (channel.as_raw_fd(), dir.as_raw_fd());
            (x.min(y) as libc::c_uint, x.max(y) as libc::c_uint)
        };
        // SAFETY: closes every descriptor but the two this process serves with; nothing else
        // in the child uses them (it is about to loop in `serve`).
        unsafe {
            if a > 0 {
                libc::syscall(libc::SYS_close_range, 0, a - 1, 0);
            }
            if b > a + 1 {
                libc::syscall(libc::SYS_close_range, a + 1, b - 1, 0);
            }
            libc::syscall(libc::SYS_close_range, b + 1, libc::c_uint::MAX, 0);
        }
        serve(channel.as_raw_fd(), dir.as_raw_fd(), names)
    }

    /// The connector's loop: read an index, connect to that name, answer. Allocates nothing.
    fn serve(channel: i32, dir: i32, names: &[CString]) -> ! {
        let mut request = [0u8; 1];
        loop {
            // SAFETY: reads at most one byte into a one-byte buffer.
            let n = unsafe { libc::read(channel, request.as_mut_ptr().cast(), 1) };
            if n == 0 {
                // berm-vmm closed its end (or exited): nothing more to serve.
                // SAFETY: ends the process without unwinding.
                unsafe { libc::_exit(0) };
            }
            if n < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                // SAFETY: as above.
                unsafe { libc::_exit(1) };
            }
            let answer = connect_named(dir, names.get(usize::from(request[0])));
            send_answer(channel, answer);
            if let Ok(fd) = answer {
                // SAFETY: the connection was sent (or could not be); this copy is ours to close.
                unsafe { libc::close(fd) };
            }
        }
    }

    /// `dir`/`name` connected, if it is a socket (not a symlink to one): opened `O_PATH`
    /// without following, checked with fstat, and connected through `/proc/self/fd/N`, so the
    /// inode connected to is the one checked. Non-blocking, so a listener whose backlog is
    /// full answers `EAGAIN` instead of stalling every other request.
    fn connect_named(dir: i32, name: Option<&CString>) -> Result<i32, i32> {
        let name = name.ok_or(libc::EINVAL)?;
        // SAFETY: `name` is a valid NUL-terminated string; `dir` is the run dir's descriptor.
        let inode = unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if inode < 0 {
            return Err(errno());
        }
        let result = connect_inode(inode);
        // SAFETY: `inode` was opened above and is closed once.
        unsafe { libc::close(inode) };
        result
    }

    fn connect_inode(inode: i32) -> Result<i32, i32> {
        // SAFETY: stat is plain old data; all-zero bytes are a valid value that fstat
        // overwrites.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat(2) on an O_PATH descriptor this process owns, into `stat`.
        if unsafe { libc::fstat(inode, &mut stat) } != 0 {
            return Err(errno());
        }
        if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(libc::ECONNREFUSED);
        }
        // SAFETY: sockaddr_un is plain old data; all-zero bytes are a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let len = proc_fd_path(inode, &mut addr.sun_path);
        // SAFETY: socket(2) with integer arguments.
        let socket = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if socket < 0 {
            return Err(errno());
        }
        let addr_len = (std::mem::size_of::<libc::sa_family_t>() + len + 1) as libc::socklen_t;
        // SAFETY: `addr` is a valid sockaddr_un whose path is NUL-terminated within
        // `addr_len` bytes.
        let ret = unsafe {
            libc::connect(
                socket,
                std::ptr::from_ref(&addr).cast::<libc::sockaddr>(),
                addr_len,
            )
        };
        if ret != 0 {
            let e = errno();
            // SAFETY: the socket was created above and is closed once.
            unsafe { libc::close(socket) };
            return Err(e);
        }
        Ok(socket)
    }

    /// Writes `/proc/self/fd/<fd>` into `path` (NUL-terminated, zeroed before), returning its
    /// length without the NUL. No allocation.
    pub(crate) fn proc_fd_path(fd: i32, path: &mut [libc::c_char; 108]) -> usize {
        let prefix = b"/proc/self/fd/";
        let mut digits = [0u8; 10];
        let mut n = fd.unsigned_abs();
        let mut count = 0;
        loop {
            digits[count] = b'0' + (n % 10) as u8;
            count += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for (slot, &byte) in path.iter_mut().zip(prefix) {
            *slot = byte as libc::c_char;
        }
        for i in 0..count {
            path[prefix.len() + i] = digits[count - 1 - i] as libc::c_char;
        }
        prefix.len() + count
    }

    /// One answer: a 4-byte errno (0 for success) and, on success, the connection as
    /// `SCM_RIGHTS`.
    fn send_answer(channel: i32, answer: Result<i32, i32>) {
        let code: i32 = match answer {
            Ok(_) => 0,
            Err(e) => e,
        };
        let mut payload = code.to_ne_bytes();
        let mut iov = libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        };
        // Room for one descriptor's control message, aligned as cmsghdr requires.
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain old data; all-zero bytes are a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Ok(fd) = answer {
            // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic; the control buffer (32 bytes) is
            // larger than CMSG_SPACE(4) (24 on x86_64), and the header written is inside it.
            unsafe {
                msg.msg_control = control.as_mut_ptr().cast();
                msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
            }
        }
        // SAFETY: `msg` points at `iov`, `payload` and `control`, all alive for the call.
        unsafe { libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL) };
    }

    /// The connector's first message: how it measured its own confinement, within
    /// `timeout` (its bytes, at most [`crate::measure::MAX_REPORT`]; parsed by the caller).
    pub fn receive_report(channel: &OwnedFd, timeout: std::time::Duration) -> io::Result<Vec<u8>> {
        if !super::wait_readable(channel, timeout)? {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no report within {} s", timeout.as_secs()),
            ));
        }
        let mut line = [0u8; crate::measure::MAX_REPORT + 1];
        // SAFETY: receives one message into `line`, at most its size; MSG_TRUNC makes the
        // return value the message's real length, so a longer one is seen as such.
        let n = unsafe {
            libc::recv(
                channel.as_raw_fd(),
                line.as_mut_ptr().cast(),
                line.len(),
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            )
        };
        match n {
            n if n < 0 => Err(io::Error::last_os_error()),
            0 => Err(io::Error::other("it ended without a report")),
            n if n as usize > crate::measure::MAX_REPORT => {
                Err(io::Error::other("its report is too long"))
            }
            n => Ok(line[..n as usize].to_vec()),
        }
    }

    /// berm-vmm's side of one request: sends `index` and receives the answer; the
    /// connection comes back close-on-exec.
    pub fn request(channel: &OwnedFd, index: u8) -> io::Result<OwnedFd> {
        // SAFETY: writes one byte from a one-byte buffer.
        let sent = unsafe {
            libc::send(
                channel.as_raw_fd(),
                std::ptr::from_ref(&index).cast(),
                1,
                libc::MSG_NOSIGNAL,
            )
        };
        if sent != 1 {
            return Err(io::Error::last_os_error());
        }
        let mut payload = [0u8; 4];
        let mut iov = libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        };
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain old data; all-zero bytes are a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `msg` points at buffers alive for the call; the kernel writes at most their
        // sizes.
        let n = unsafe { libc::recvmsg(channel.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n != 4 {
            return Err(if n < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::other("the connector ended")
            });
        }
        // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR reads its header
        // only when msg_controllen says one is there.
        let fd = unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null()
                || (*cmsg).cmsg_level != libc::SOL_SOCKET
                || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            {
                None
            } else {
                Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<i32>(),
                ))
            }
        };
        let code = i32::from_ne_bytes(payload);
        match (code, fd) {
            // SAFETY: the kernel installed this descriptor in this process for us.
            (0, Some(fd)) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            (0, None) => Err(io::Error::other("the connector sent no connection")),
            (code, fd) => {
                if let Some(fd) = fd {
                    // SAFETY: an unexpected descriptor the kernel installed; closed once.
                    drop(unsafe { OwnedFd::from_raw_fd(fd) });
                }
                Err(io::Error::from_raw_os_error(code))
            }
        }
    }
}

/// Forks a probe of `sandbox`: the child enters `view` if there is one (going on without it
/// if the kernel refuses, as the real child then does), applies the sandbox (the ruleset and
/// role filter an exec'd child gets), tries to open [`crate::measure::PROBE_OUTSIDE`] and to
/// connect to the socket at `outside` (one outside every policy), writes a
/// [`crate::measure::ProbeReport`] line to a pipe and exits. Returns the line's bytes
/// (parsed by the caller), read within `timeout`; empty if the probe could not apply the
/// sandbox. The caller must be single-threaded (berm-vmm starts its hypervisor children
/// while it is).
#[cfg(target_os = "linux")]
pub fn probe_child(
    mut sandbox: crate::sandbox::ChildSandbox,
    view: Option<&crate::view::PreparedView>,
    outside: &UnixAddress,
    timeout: std::time::Duration,
) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let (mut reader, writer) = io::pipe()?;
    // SAFETY: berm-vmm is single-threaded here, so no lock is held by another thread; the
    // child applies the sandbox (as a pre-exec closure would), makes three system calls on
    // stack buffers and _exits, never returning into the caller.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let mut line = [0u8; crate::measure::MAX_REPORT];
        let seen = match view.map(isolate) {
            Some(Ok(())) => crate::view::Seen::PolicyPaths,
            _ => crate::view::Seen::Host,
        };
        let line: &[u8] = match sandbox.apply() {
            Ok(landlock) => {
                // SAFETY: open(2) of a constant NUL-terminated path; the descriptor, if
                // any, is closed at once.
                let fd = unsafe {
                    libc::open(
                        crate::measure::PROBE_OUTSIDE.as_ptr(),
                        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    )
                };
                let read_outside = if fd >= 0 {
                    // SAFETY: closes the descriptor just opened.
                    unsafe { libc::close(fd) };
                    0
                } else {
                    io::Error::last_os_error()
                        .raw_os_error()
                        .map_or(u32::MAX, |e| e as u32)
                };
                crate::measure::ProbeReport {
                    landlock,
                    read_outside,
                    connect_outside: connect_errno(outside),
                    seen,
                }
                .encode(&mut line)
            }
            Err(_) => &[],
        };
        // SAFETY: writes `line` (alive for the call) to the pipe, then ends the child
        // without running the parent's destructors.
        unsafe {
            libc::write(writer.as_raw_fd(), line.as_ptr().cast(), line.len());
            libc::_exit(0)
        }
    }
    drop(writer);
    let deadline = std::time::Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; crate::measure::MAX_REPORT + 1];
    let read = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match wait_readable(&reader, left) {
            Ok(true) => {}
            Ok(false) => break Err(io::Error::new(io::ErrorKind::TimedOut, "the probe hung")),
            Err(e) => break Err(e),
        }
        match reader.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
        if out.len() > crate::measure::MAX_REPORT {
            break Err(io::Error::other("the probe said too much"));
        }
    };
    // SAFETY: kill(2) and waitpid(2) on the child just forked, which is reaped once.
    unsafe {
        if read.is_err() {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    read.map(|()| out)
}

/// No probe on this OS: there is no host sandbox either.
#[cfg(not(target_os = "linux"))]
pub fn probe_child(
    _sandbox: crate::sandbox::ChildSandbox,
    _view: Option<&crate::view::PreparedView>,
    _outside: &UnixAddress,
    _timeout: std::time::Duration,
) -> io::Result<Vec<u8>> {
    Err(io::Error::other("no host sandbox on this OS"))
}

/// The descriptor `fd` this process inherited (krun-enter's report pipe), taken over: it is
/// closed when dropped. Refuses the standard streams and a number that is not open.
pub fn inherited_fd(fd: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd <= 2 {
        return Err(io::Error::other(format!("fd {fd} is a standard stream")));
    }
    // SAFETY: fcntl(F_GETFD) on a number only reads its flags; EBADF if it is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open and was passed to this process for it alone (the
    // parent named it in the configuration); nothing else in it owns the number.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Waits until `fd` is readable (or closed) for at most `timeout`; `false` on timeout. Made
/// without a thread, for the steps that must leave berm-vmm single-threaded.
pub fn wait_readable(fd: &impl AsRawFd, timeout: std::time::Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is one valid pollfd, alive for the call, and the count says one.
    let ready = unsafe { libc::poll(&raw mut pfd, 1, ms) };
    if ready < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ready > 0)
}

/// Blocks until the peer of the stream socket `fd` has closed it altogether (or this side has
/// shut down both directions): `POLLHUP`. A peer that only shut down its write side does not
/// end the wait; that is what lets a relay keep delivering the reply to such a client.
pub fn wait_for_hangup(fd: &impl AsRawFd) -> io::Result<()> {
    loop {
        // No events asked for: poll reports only POLLHUP, POLLERR and POLLNVAL, never the
        // POLLIN that a half-closed peer leaves standing.
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd, alive for the call, and the count says one.
        let ready = unsafe { libc::poll(&raw mut pfd, 1, -1) };
        if ready > 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if ready < 0 && error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;

    use crate::krun::KrunConfig;
    use crate::measure::{OutsideSocket, SelfReport, outcome};
    use crate::sandbox::Policy;
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
            host_sandbox: Some(Policy {
                read: vec![kernel.clone()],
                read_write: vec![run.clone()],
                devices: vec!["/dev/null".into()],
                ..Policy::default()
            }),
            report_fd: Some(writer.as_raw_fd()),
            outside: Some(outside.path().to_owned()),
            run_dir: Some(run.clone()),
        };
        // SAFETY: the child runs the confinement step (which allocates, as krun-enter does
        // after its exec: the forking thread is the only one in the child, and no other
        // thread of this test process holds the allocator's lock across a fork, which
        // glibc's fork handler makes safe) and then _exits without unwinding.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = crate::krun::confine_self(&config).is_ok()
                && config.vm.kernel.exists()
                && !std::path::Path::new("/etc/passwd").exists();
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        drop(writer);
        let mut line = Vec::new();
        reader.read_to_end(&mut line).unwrap();
        let mut status = 0;
        // SAFETY: reaps the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x} {:?}",
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
