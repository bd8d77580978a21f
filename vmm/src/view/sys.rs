//! The system calls that put a process into a [`PreparedView`] (see `view.rs`): a user
//! namespace mapping this user to itself and a mount namespace whose root is a tmpfs holding
//! only the view's bind mounts. The plan is C strings and flags, prepared in the parent, so
//! a forked child applies it without allocating.

use std::ffi::CString;
use std::io;
use std::process::Command;

/// Most paths a view may bind (the child keeps their descriptors in a fixed array).
pub const MAX_MOUNTS: usize = 32;

/// A view (`View` in `view.rs`) ready to apply in a child without allocating: every path as
/// a C string, and the user namespace's maps (this user to itself). The child opens each
/// source itself, once it is in its own mount namespace: a bind mount's source must be a
/// mount of that namespace.
// Only Linux's [`isolate`] reads the fields; elsewhere a view is prepared (so its errors
// show up the same way) and then refused with ENOSYS.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub struct PreparedView {
    /// `(source, target beneath the stage, is a directory)`, in order.
    pub(super) binds: Vec<(CString, CString, bool)>,
    /// Directories to make beneath the stage, parents first.
    pub(super) dirs: Vec<CString>,
    /// The stage.
    pub(super) stage: CString,
    /// The directory to return to once the root is the view (relative paths keep their
    /// meaning where they lie in it).
    pub(super) cwd: CString,
    /// `uid_map` and `gid_map` lines: this user and group to themselves.
    pub(super) uid_map: CString,
    pub(super) gid_map: CString,
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
pub fn isolate(view: &PreparedView) -> Result<(), IsolateError> {
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
        let mut sources = [-1; MAX_MOUNTS];
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
            crate::sys::proc_fd_path(fd, &mut source);
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
pub fn isolate(_view: &PreparedView) -> Result<(), IsolateError> {
    Err(IsolateError {
        step: "unshare",
        errno: libc::ENOSYS,
    })
}

/// Makes the child enter `view` between fork and exec, before anything else confines it; a
/// child that cannot is never executed (the spawn fails with the errno).
pub fn isolate_child(command: &mut Command, view: PreparedView) {
    // SAFETY: the step runs in the child between fork and exec and calls only
    // async-signal-safe system calls on data prepared in the parent ([`isolate`] allocates
    // nothing); berm-vmm spawns its children while single-threaded, so no lock is held.
    unsafe {
        crate::sys::before_exec(command, move || isolate(&view).map_err(io::Error::from));
    }
}
