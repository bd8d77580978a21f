//! The connector process's system calls (see `connector.rs`): forked from berm-vmm while
//! it is still single-threaded, it serves one-byte requests on `channel` (its end of a
//! `SOCK_SEQPACKET` pair) until berm-vmm closes the other end or dies. Nothing here knows
//! the sandbox or the report: the connector's first message is whatever the closure
//! given to [`fork`] writes.
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::sys::proc_fd_path;

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
/// outlive a stop request, to connect the shutdown), it dies with berm-vmm, runs
/// `first_message` on a buffer of `max` bytes (it confines and measures the child, or
/// returns `None` and the child exits 1) and sends what it wrote as its first message on
/// `channel`, closes every descriptor but `channel` and `dir`, and serves. Returns the
/// child's pid. The caller must be single-threaded.
pub fn fork(
    channel: OwnedFd,
    dir: OwnedFd,
    names: &[CString],
    max: usize,
    first_message: impl FnOnce(&mut [u8]) -> Option<usize>,
) -> io::Result<u32> {
    // Allocated before the fork, so the child's first message needs no allocation of its own.
    let mut line = vec![0u8; max];
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
    // The closure confines and measures this process (`connector.rs`); what it wrote is
    // sent as the first message. A panic must not unwind into the caller's code here.
    let written =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| first_message(&mut line)))
            .ok()
            .flatten()
            .map(|len| len.min(line.len()));
    let sent = written.is_some_and(|len| {
        let line = &line[..len];
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

/// The connector's first message, within `timeout`: its bytes, at most `max` (parsed by
/// the caller).
pub fn receive_report(
    channel: &OwnedFd,
    max: usize,
    timeout: std::time::Duration,
) -> io::Result<Vec<u8>> {
    if !crate::sys::wait_readable(channel, timeout)? {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no report within {} s", timeout.as_secs()),
        ));
    }
    let mut line = vec![0u8; max + 1];
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
        n if n as usize > max => Err(io::Error::other("its report is too long")),
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
