//! The operating system's primitives that several of berm-vmm's features share: stop
//! signals, process ids, descriptors passed to or inherited from a child, polls, Unix socket
//! addresses, and the two ways of running code in a child (before its exec, or forked).
//! They take descriptors, paths, commands and closures, never berm's own types: each
//! feature keeps the `unsafe` code that knows its own types in a `sys` module beside it
//! (`connector/sys.rs`, `krun/sys.rs`, `sandbox/sys.rs`, `view/sys.rs`), built on these.

#[cfg(target_os = "linux")]
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

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

#[cfg(target_os = "linux")]
/// Writes `/proc/self/fd/<fd>` into `path` (NUL-terminated, zeroed before), returning its
/// length without the NUL. No allocation.
pub fn proc_fd_path(fd: i32, path: &mut [libc::c_char; 108]) -> usize {
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

/// Runs `step` in the child of `command` between fork and exec; a child whose step fails is
/// never executed (the spawn fails with the error). Steps run in the order they were added.
///
/// # Safety
///
/// `step` runs in a forked copy of this process that holds only the spawning thread. The
/// caller guarantees that either this process is single-threaded when it spawns `command`
/// (so no lock is held by a thread the child lacks), or `step` makes only
/// async-signal-safe calls and neither allocates nor takes a lock.
pub unsafe fn before_exec(
    command: &mut Command,
    step: impl FnMut() -> io::Result<()> + Send + Sync + 'static,
) {
    // SAFETY: the caller guarantees what `pre_exec` asks of the closure (see `# Safety`).
    unsafe {
        command.pre_exec(step);
    }
}

/// Forks a child that runs `body` on a zeroed buffer of `max` bytes (allocated here, before
/// the fork), writes the first bytes `body` says it filled to a pipe, and exits. Returns
/// those bytes, read within `timeout`; a child that hangs is killed. The child is reaped
/// before this returns. The caller must be single-threaded, as for the connector's fork and
/// [`x32_call_in_child`]: berm-vmm starts its hypervisor children while it is.
#[cfg(target_os = "linux")]
pub fn fork_reporting(
    max: usize,
    timeout: std::time::Duration,
    body: impl FnOnce(&mut [u8]) -> usize,
) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let (mut reader, writer) = io::pipe()?;
    let mut line = vec![0u8; max];
    // SAFETY: berm-vmm is single-threaded here (its callers run before it starts a thread),
    // so no lock is held by another thread and the child may use the heap; the child runs
    // `body`, makes one write and _exits, never returning into the caller.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // A panicking body must not unwind into the caller's code in the child.
        let len = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut line)))
            .unwrap_or(0)
            .min(line.len());
        // SAFETY: writes `line` (alive for the call) to the pipe, then ends the child
        // without running the parent's destructors.
        unsafe {
            libc::write(writer.as_raw_fd(), line.as_ptr().cast(), len);
            libc::_exit(0)
        }
    }
    drop(writer);
    let deadline = std::time::Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = vec![0u8; max + 1];
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
        if out.len() > max {
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

#[cfg(target_os = "linux")]
/// Tries to open the directory `path`: 0 if it opened (it is closed at once), else the
/// errno. Allocates nothing.
pub fn open_dir_errno(path: &CStr) -> u32 {
    // SAFETY: open(2) of a NUL-terminated path alive for the call; the descriptor, if any,
    // is closed at once.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        // SAFETY: closes the descriptor just opened.
        unsafe { libc::close(fd) };
        0
    } else {
        io::Error::last_os_error()
            .raw_os_error()
            .map_or(u32::MAX, |e| e as u32)
    }
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
