//! Every raw system call berm-init makes, each behind a safe function.
//!
//! PID 1 needs a few calls std does not offer (mount, reboot, AF_VSOCK sockets to listen on and,
//! for the egress broker, to connect with, the Landlock and LSM queries, CLOCK_BOOTTIME). Keeping them here means the rest of berm-init is
//! `#![forbid(unsafe_code)]`-clean in spirit: one small module to audit.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "string holds a NUL byte"))
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Mount flags berm-init uses.
pub const NOSUID: u64 = libc::MS_NOSUID;
/// No device nodes.
pub const NODEV: u64 = libc::MS_NODEV;
/// Read-only.
pub const RDONLY: u64 = libc::MS_RDONLY;
/// No execution.
pub const NOEXEC: u64 = libc::MS_NOEXEC;

/// mount(2).
pub fn mount(source: &str, target: &str, fstype: &str, flags: u64, data: &str) -> io::Result<()> {
    let (source, target, fstype, data) = (
        cstring(source)?,
        cstring(target)?,
        cstring(fstype)?,
        cstring(data)?,
    );
    // SAFETY: all four pointers come from CStrings that live until the call returns, so each
    // is a valid NUL-terminated string; mount(2) only reads them.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    })?;
    Ok(())
}

/// umount2(2) without flags.
pub fn umount(target: &str) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: `target` is a valid NUL-terminated string that outlives the call.
    check(unsafe { libc::umount2(target.as_ptr(), 0) })?;
    Ok(())
}

/// sync(2).
pub fn sync() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() }
}

/// reboot(RB_AUTOBOOT): with `reboot=k` on the command line a keyboard-controller reset,
/// which ends libkrun (exit 0) and QEMU (`-no-reboot`). Returns only if the call failed.
pub fn reboot_autoboot() -> io::Error {
    // SAFETY: reboot(2) takes a plain integer; on success it does not return.
    unsafe { libc::reboot(libc::RB_AUTOBOOT) };
    io::Error::last_os_error()
}

/// `uname -r`.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; all-zero bytes are a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname for the duration of the call.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::from("unknown");
    }
    let bytes: Vec<u8> = uts
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Milliseconds since boot, suspend included (CLOCK_BOOTTIME): the uptime every event carries.
pub fn uptime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec as u64 / 1_000_000)
}

/// The Landlock ABI version, or `None` when Landlock is not enabled.
pub fn landlock_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag the kernel ignores the (null) attribute pointer and size
    // and returns the ABI version without creating anything.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(ret).ok().filter(|&v| v > 0)
}

/// The ids of the active LSMs in order (lsm_list_modules(2), Linux 6.8+). Works without
/// securityfs, which the guest kernel does not build.
pub fn lsm_ids() -> io::Result<Vec<u64>> {
    const SYS_LSM_LIST_MODULES: libc::c_long = 461;
    let mut ids = [0u64; 32];
    let mut size: u32 = std::mem::size_of_val(&ids) as u32;
    // SAFETY: `ids` is writable for `size` bytes and `size` is a valid u32 the kernel updates;
    // both outlive the call.
    let ret = unsafe {
        libc::syscall(
            SYS_LSM_LIST_MODULES,
            ids.as_mut_ptr(),
            &mut size as *mut u32,
            0u32,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ids.iter().take(ret as usize).copied().collect())
}

/// A new AF_VSOCK stream socket, close-on-exec. (rustix, which the egress broker's channel
/// uses, has no vsock addresses: the vsock calls are written out here.)
fn vsock_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd =
        check(unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The vsock address `cid`:`port`.
fn vsock_addr(cid: u32, port: u32) -> libc::sockaddr_vm {
    // SAFETY: sockaddr_vm is plain old data; all-zero bytes are a valid value.
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_port = port;
    addr.svm_cid = cid;
    addr
}

const VSOCK_ADDR_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;

/// A listening AF_VSOCK stream socket on `port`, any CID.
pub fn vsock_listen(port: u32) -> io::Result<OwnedFd> {
    let fd = vsock_socket()?;
    let addr = vsock_addr(libc::VMADDR_CID_ANY, port);
    // SAFETY: `addr` is a valid sockaddr_vm of VSOCK_ADDR_LEN bytes that outlives the call.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_vm).cast(),
            VSOCK_ADDR_LEN,
        )
    })?;
    // SAFETY: listen(2) on a socket this function owns.
    check(unsafe { libc::listen(fd.as_raw_fd(), 16) })?;
    Ok(fd)
}

/// The host's CID, as a guest reaches it over vsock.
pub const VSOCK_HOST_CID: u32 = 2;

/// `SO_VM_SOCKETS_CONNECT_TIMEOUT` (`linux/vm_sockets.h`; on 64-bit targets the same as its
/// `_OLD` spelling, a `struct timeval`), at level `AF_VSOCK`. libc does not name it.
const SO_VM_SOCKETS_CONNECT_TIMEOUT: libc::c_int = 6;

/// A connection to the host (CID 2) on `port`, given up after `timeout` (vsock's own connect
/// timeout; the kernel's default is 2 s).
pub fn vsock_connect(port: u32, timeout: Duration) -> io::Result<OwnedFd> {
    let fd = vsock_socket()?;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as _,
        tv_usec: timeout.subsec_micros() as _,
    };
    // SAFETY: `tv` is a valid timeval of the size passed, alive for the call.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::AF_VSOCK,
            SO_VM_SOCKETS_CONNECT_TIMEOUT,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    let addr = vsock_addr(VSOCK_HOST_CID, port);
    // SAFETY: `addr` is a valid sockaddr_vm of VSOCK_ADDR_LEN bytes that outlives the call;
    // connect(2) only reads it.
    check(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_vm).cast(),
            VSOCK_ADDR_LEN,
        )
    })?;
    Ok(fd)
}

/// accept(2) on a listening socket; the connection as a `File` for Read/Write.
pub fn accept(listener: &OwnedFd) -> io::Result<File> {
    loop {
        // SAFETY: accept4 with null address pointers only returns the new fd.
        let ret = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        match check(ret) {
            // SAFETY: `fd` was just returned by accept4 and is owned by nobody else.
            Ok(fd) => return Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) })),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Sets SO_SNDTIMEO so a host that stops reading cannot block PID 1's writes for long.
pub fn set_send_timeout(socket: &File, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as _,
        tv_usec: timeout.subsec_micros() as _,
    };
    let len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: `tv` is a valid timeval of `len` bytes that outlives the call.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            len,
        )
    })?;
    Ok(())
}

/// kill(-1, signal): every process except PID 1 itself.
pub fn kill_all(signal: libc::c_int) {
    // SAFETY: kill(2) with plain integers; ESRCH (no processes) is harmless.
    unsafe { libc::kill(-1, signal) };
}

/// The result of reaping.
pub enum Reaped {
    /// A child exited (code) or was killed (signal).
    Child {
        /// Its pid.
        pid: u32,
        /// Its exit code, if it exited.
        code: Option<i32>,
        /// The signal that killed it, if one did.
        signal: Option<i32>,
    },
    /// Children exist but none has exited yet.
    Running,
    /// No children at all.
    None,
}

/// waitpid(-1, WNOHANG): reaps one zombie if there is one.
pub fn reap_one() -> Reaped {
    let mut status = 0;
    // SAFETY: `status` is a valid, writable int for the duration of the call.
    match unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } {
        0 => Reaped::Running,
        pid if pid > 0 => Reaped::Child {
            pid: pid as u32,
            code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        },
        _ => Reaped::None,
    }
}

/// Sets `PR_SET_NO_NEW_PRIVS` and reads it back.
pub fn set_no_new_privs() -> io::Result<bool> {
    // SAFETY: prctl(2) with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    // SAFETY: as above.
    Ok(check(unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) })? == 1)
}

/// Drops every supplementary group and switches real, effective and saved ids to `uid`/`gid`.
pub fn become_user(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: setgroups(0, NULL) clears the list; no pointer is read.
    check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: plain integer arguments.
    check(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: plain integer arguments.
    check(unsafe { libc::setresuid(uid, uid, uid) })?;
    Ok(())
}

/// chown(2).
pub fn chown(path: &str, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstring(path)?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    check(unsafe { libc::chown(c.as_ptr(), uid, gid) })?;
    Ok(())
}

/// A bind mount of `source` on `target`.
pub fn bind_mount(source: &str, target: &str) -> io::Result<()> {
    let (s, t) = (cstring(source)?, cstring(target)?);
    // SAFETY: valid NUL-terminated strings; null fstype and data are allowed for MS_BIND.
    check(unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })?;
    Ok(())
}

/// A pipe whose ends are close-on-exec.
pub fn pipe() -> io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two fresh fds that nothing else owns.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Arranges for `command`'s child to find each `(fd, number)` at that number, open across
/// exec (dup2 clears close-on-exec); everything else stays close-on-exec.
pub fn pass_fds(command: &mut std::process::Command, fds: Vec<(OwnedFd, i32)>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and calls only dup2 and
    // fcntl, which are async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // First move every source out of the way of the targets, then place them.
            let mut moved = [-1; 8];
            for (i, (fd, _)) in fds.iter().enumerate().take(8) {
                moved[i] = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 64);
                if moved[i] < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (i, (_, target)) in fds.iter().enumerate().take(8) {
                if libc::dup2(moved[i], *target) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Clears close-on-exec on `fd` so the next exec passes it on.
pub fn inherit(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) on an fd the caller owns.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
    Ok(())
}

/// dup2(2): places `fd` at `target` (open across exec).
pub fn dup_to(fd: &impl AsRawFd, target: i32) -> io::Result<()> {
    // SAFETY: dup2(2) on an fd the caller owns; `target` is replaced if open.
    check(unsafe { libc::dup2(fd.as_raw_fd(), target) })?;
    Ok(())
}

/// The real uid and gid.
pub fn ids() -> (u32, u32) {
    // SAFETY: getuid/getgid take no arguments and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Takes ownership of an fd the parent placed at a fixed number (the confine report pipe).
pub fn take_fd(fd: i32) -> File {
    // SAFETY: only called once per number, for an fd PID 1 passed to this process alone.
    unsafe { File::from_raw_fd(fd) }
}
