//! The unsafe operations bermd performs: taking ownership of a file
//! descriptor its parent passed by number (`--listen-fd`, `--ready-fd`,
//! `--egress-broker-fd`),
//! putting an owned descriptor on tokio's reactor, and moving a thread to
//! the idle scheduling class.
#![allow(unsafe_code)]

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Why an inherited descriptor could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum InheritError {
    /// 0, 1 and 2 are stdin, stdout and stderr, which bermd uses as such.
    #[error("{flag} {fd}: descriptors 0-2 are stdin, stdout and stderr; pass 3 or above")]
    Standard {
        /// The flag that named it.
        flag: &'static str,
        /// The descriptor.
        fd: RawFd,
    },
    /// Nothing is open under that number.
    #[error(
        "{flag} {fd}: no such open file descriptor (was it inherited? clear FD_CLOEXEC in the parent)"
    )]
    NotOpen {
        /// The flag that named it.
        flag: &'static str,
        /// The descriptor.
        fd: RawFd,
    },
}

/// Takes ownership of descriptor `fd`, which the parent left open for
/// bermd, and marks it close-on-exec.
///
/// Call it before anything in this process opens a file, so that an open
/// `fd` can only be the inherited one.
pub fn inherit_fd(flag: &'static str, fd: RawFd) -> Result<OwnedFd, InheritError> {
    if (0..=2).contains(&fd) {
        return Err(InheritError::Standard { flag, fd });
    }
    if fd < 0 {
        return Err(InheritError::NotOpen { flag, fd });
    }
    // SAFETY: the borrow is used only for the one fcntl below, which fails
    // with EBADF and touches nothing if `fd` is not open.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    if rustix::io::fcntl_getfd(borrowed).is_err() {
        return Err(InheritError::NotOpen { flag, fd });
    }
    // SAFETY: `fd` is open (checked above) and nothing in this process owns
    // it: bermd calls this while parsing its command line, before it opens
    // any file or socket, so the descriptor is the one the parent passed,
    // and each flag names a different number (checked by the caller). From
    // here the OwnedFd is its only owner and closes it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
    Ok(owned)
}

/// Registers an owned descriptor with tokio's reactor (inside a runtime).
pub(crate) fn register(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: tokio requires that the descriptor stay open and the same for
    // the AsyncFd's life. `OwnedFd` owns an open descriptor, closes it only
    // when dropped (which the AsyncFd does after deregistering), and its
    // `as_raw_fd` always returns that one number.
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}

/// Moves the calling thread to `SCHED_IDLE`: it runs only when no other
/// thread of its group wants the CPU, and any that wakes up preempts it.
/// Unprivileged threads may always lower their own class.
pub(crate) fn schedule_idle() -> std::io::Result<()> {
    // The kernel's `struct sched_param` is one int; libc's differs by libc
    // (musl's has more fields), so hand the kernel exactly what it reads.
    let priority: libc::c_int = 0;
    // The raw syscall, not libc's wrapper: musl's refuses with ENOSYS, since
    // POSIX means the whole process where Linux means one thread (pid 0).
    // SAFETY: sched_setscheduler reads one int (the kernel's
    // `sched_param`) through the pointer, which points at a live value for
    // the whole call, and
    // changes nothing but the calling thread's scheduling class.
    let result = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_IDLE,
            &raw const priority,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
