//! The allow lists, one per role. Each entry is a syscall the role was traced making (see
//! `docs/threat-model.md` for how), with an argument rule where a cheap one exists.

// any! pushes one entry at a time so that each entry can carry its own #[cfg].
#![allow(clippy::vec_init_then_push)]

use crate::Role;

/// A check on a syscall's arguments (a rule per allowed value; the kernel compares numbers
/// only, so pointers and strings cannot be checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Args {
    /// Any arguments.
    Any,
    /// `clone(2)` without any `CLONE_NEW*` flag in argument 0.
    NoNamespaces,
    /// Argument 0 (an address family) is one of these.
    Families(&'static [(&'static str, i32)]),
    /// Argument 1 (an ioctl request) is one of these; compared on its low 32 bits, since
    /// musl passes the request as a sign-extended `int`.
    Requests(&'static [(&'static str, u32)]),
    /// Argument 2 (the `prot` of mmap or mprotect) has no `PROT_EXEC`.
    NoExec,
    /// Argument 0 is one of these (`prctl` options).
    Arg0Is(&'static [(&'static str, i64)]),
    /// Argument 0 (the pid of `kill`) is one of the children named when the filter is built;
    /// with none, the call is not allowed at all.
    Children,
}

/// One allowed syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    /// `SYS_<name>`, the libc constant's name.
    constant: &'static str,
    nr: libc::c_long,
    /// What its arguments may be.
    pub args: Args,
}

impl Syscall {
    /// Its name, as strace and the man pages spell it.
    pub fn name(&self) -> &'static str {
        self.constant.strip_prefix("SYS_").unwrap_or(self.constant)
    }

    /// Its number on this architecture.
    pub fn nr(&self) -> i64 {
        self.nr
    }

    /// `name`, or `name(rule)` when its arguments are checked.
    pub fn describe(&self) -> String {
        let names =
            |list: &mut dyn Iterator<Item = &'static str>| list.collect::<Vec<_>>().join("|");
        match self.args {
            Args::Any => self.name().to_owned(),
            Args::NoNamespaces => format!("{}(no CLONE_NEW*)", self.name()),
            Args::NoExec => format!("{}(no PROT_EXEC)", self.name()),
            Args::Families(list) => {
                format!("{}({})", self.name(), names(&mut list.iter().map(|e| e.0)))
            }
            Args::Requests(list) => {
                format!("{}({})", self.name(), names(&mut list.iter().map(|e| e.0)))
            }
            Args::Arg0Is(list) => {
                format!("{}({})", self.name(), names(&mut list.iter().map(|e| e.0)))
            }
            Args::Children => format!("{}(own children)", self.name()),
        }
    }

    /// The seccompiler rules: empty for [`Args::Any`] (the number alone matches), else one
    /// rule per allowed value (rules of one syscall are ORed).
    #[cfg(target_os = "linux")]
    pub(crate) fn rules(
        &self,
        children: &[u32],
    ) -> Result<Vec<seccompiler::SeccompRule>, seccompiler::BackendError> {
        use seccompiler::{
            SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition, SeccompRule,
        };
        let one = |arg: u8, len: Len, op: Op, value: u64| {
            SeccompRule::new(vec![SeccompCondition::new(arg, len, op, value)?])
        };
        match self.args {
            Args::Any => Ok(Vec::new()),
            Args::NoNamespaces => Ok(vec![one(0, Len::Qword, Op::MaskedEq(CLONE_NAMESPACES), 0)?]),
            Args::NoExec => Ok(vec![one(
                2,
                Len::Qword,
                Op::MaskedEq(libc::PROT_EXEC as u64),
                0,
            )?]),
            Args::Families(list) => list
                .iter()
                .map(|&(_, family)| one(0, Len::Dword, Op::Eq, family as u64))
                .collect(),
            Args::Requests(list) => list
                .iter()
                .map(|&(_, request)| one(1, Len::Dword, Op::Eq, u64::from(request)))
                .collect(),
            Args::Arg0Is(list) => list
                .iter()
                .map(|&(_, value)| one(0, Len::Qword, Op::Eq, value as u64))
                .collect(),
            Args::Children => children
                .iter()
                .map(|&pid| one(0, Len::Dword, Op::Eq, u64::from(pid)))
                .collect(),
        }
    }
}

/// The `CLONE_NEW*` flags: clone(2) with any of them creates a namespace.
pub const CLONE_NAMESPACES: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWTIME) as u64;

/// Syscall numbers: libc's, plus the few its aarch64 glibc module lacks although the kernel
/// has them (asm-generic numbers; musl's module has both).
mod nr {
    pub use libc::*;
    /// `renameat` (asm-generic 38), which musl's `rename()` calls on aarch64.
    #[cfg(all(target_arch = "aarch64", target_env = "gnu"))]
    #[allow(non_upper_case_globals)]
    pub const SYS_renameat: libc::c_long = 38;
    /// `getrlimit` (asm-generic 163).
    #[cfg(all(target_arch = "aarch64", target_env = "gnu"))]
    #[allow(non_upper_case_globals)]
    pub const SYS_getrlimit: libc::c_long = 163;
}

/// Allowed with any arguments: `any!(SYS_read, SYS_write)`. An entry marked
/// `#[cfg(target_arch = "x86_64")]` is a legacy call that aarch64 (asm-generic) does not have
/// at all; its `*at` successor, which is listed beside it, is what aarch64 programs call.
macro_rules! any {
    ($($(#[$attr:meta])* $sys:ident),* $(,)?) => {{
        let mut list = Vec::new();
        $(
            $(#[$attr])*
            list.push(Syscall { constant: stringify!($sys), nr: nr::$sys, args: Args::Any });
        )*
        list
    }};
}

/// Allowed with an argument rule: `with!(SYS_clone, Args::NoNamespaces)`.
macro_rules! with {
    ($sys:ident, $args:expr) => {
        Syscall {
            constant: stringify!($sys),
            nr: nr::$sys,
            args: $args,
        }
    };
}

/// What every Rust program on Linux calls once running, whichever C library: memory, threads,
/// signals, time, randomness, and I/O on descriptors it already holds.
fn runtime() -> Vec<Syscall> {
    any!(
        SYS_brk,
        SYS_munmap,
        SYS_mremap,
        SYS_madvise,
        SYS_futex,
        SYS_set_robust_list,
        SYS_set_tid_address,
        SYS_rseq,
        SYS_sched_yield,
        SYS_sched_getaffinity,
        SYS_rt_sigaction,
        SYS_rt_sigprocmask,
        SYS_rt_sigreturn,
        SYS_restart_syscall,
        SYS_sigaltstack,
        SYS_getpid,
        SYS_getppid,
        SYS_gettid,
        SYS_exit,
        SYS_exit_group,
        SYS_clock_gettime,
        SYS_clock_nanosleep,
        SYS_nanosleep,
        SYS_getrandom,
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_pread64,
        SYS_pwrite64,
        SYS_close,
        SYS_fcntl,
        #[cfg(target_arch = "x86_64")]
        SYS_poll,
        SYS_ppoll,
        SYS_epoll_create1,
        SYS_epoll_ctl,
        #[cfg(target_arch = "x86_64")]
        SYS_epoll_wait,
        SYS_epoll_pwait,
        SYS_eventfd2,
    )
}

/// Reading files and directories by path or descriptor.
fn files_read() -> Vec<Syscall> {
    any!(
        #[cfg(target_arch = "x86_64")]
        SYS_open,
        SYS_openat,
        #[cfg(target_arch = "x86_64")]
        SYS_stat,
        SYS_fstat,
        #[cfg(target_arch = "x86_64")]
        SYS_lstat,
        SYS_newfstatat,
        SYS_statx,
        SYS_lseek,
        SYS_getdents64,
        #[cfg(target_arch = "x86_64")]
        SYS_readlink,
        SYS_readlinkat,
        #[cfg(target_arch = "x86_64")]
        SYS_access,
        SYS_faccessat,
        SYS_faccessat2,
        SYS_getcwd,
        SYS_dup,
        SYS_dup3,
    )
}

/// Writing files: creating, renaming into place, syncing, removing.
fn files_write() -> Vec<Syscall> {
    any!(
        #[cfg(target_arch = "x86_64")]
        SYS_mkdir,
        SYS_mkdirat,
        #[cfg(target_arch = "x86_64")]
        SYS_unlink,
        SYS_unlinkat,
        #[cfg(target_arch = "x86_64")]
        SYS_rmdir,
        #[cfg(target_arch = "x86_64")]
        SYS_rename,
        SYS_renameat,
        SYS_renameat2,
        SYS_fsync,
        SYS_fdatasync,
        SYS_ftruncate,
        SYS_fallocate,
        #[cfg(target_arch = "x86_64")]
        SYS_chmod,
        SYS_fchmod,
        SYS_fchmodat,
        SYS_flock,
        SYS_copy_file_range,
    )
}

/// Serving connections on a socket it was handed (or bound before confinement).
fn serve() -> Vec<Syscall> {
    any!(
        SYS_accept,
        SYS_accept4,
        SYS_recvfrom,
        SYS_sendto,
        SYS_recvmsg,
        SYS_sendmsg,
        SYS_shutdown,
        SYS_getsockopt,
        SYS_setsockopt,
        SYS_getsockname,
        SYS_getpeername,
    )
}

const AF_UNIX: (&str, i32) = ("AF_UNIX", libc::AF_UNIX);
const AF_INET: (&str, i32) = ("AF_INET", libc::AF_INET);
const AF_INET6: (&str, i32) = ("AF_INET6", libc::AF_INET6);
const FIONBIO: (&str, u32) = ("FIONBIO", libc::FIONBIO as u32);
const FIOCLEX: (&str, u32) = ("FIOCLEX", libc::FIOCLEX as u32);
const TCGETS: (&str, u32) = ("TCGETS", libc::TCGETS as u32);
/// `PAGEMAP_SCAN` (`_IOWR('f', 16, struct pm_scan_arg)`): Wasmtime's pooling allocator asks
/// which pages an instance dirtied.
const PAGEMAP_SCAN: (&str, u32) = ("PAGEMAP_SCAN", 0xc060_6610);
const PR_SET_NAME: (&str, i64) = ("PR_SET_NAME", libc::PR_SET_NAME as i64);
const PR_GET_NAME: (&str, i64) = ("PR_GET_NAME", libc::PR_GET_NAME as i64);

/// A role's list: the shared groups every role belongs to, then its own rules and extra
/// calls, in that order (the order is what `Role::policy_text` lists and hashes).
fn list(own: &[Syscall], extra: &[Syscall]) -> Vec<Syscall> {
    [
        &runtime()[..],
        &files_read(),
        &files_write(),
        &serve(),
        own,
        extra,
    ]
    .concat()
}

/// An app's bermd: a Wasmtime host (code mapped executable, threads), serving MCP on the vsock
/// listener it is handed as fd 4, writing only its workspace. No `socket` and no `connect` at
/// all: tokio's signal pipe is a socketpair, and each `http.fetch` gets its connection to the
/// host dialer from berm-init's egress broker, as `SCM_RIGHTS` on the socketpair bermd is
/// handed as fd 6 (`recvmsg`). berm-init connects to the app's own egress port only, so a
/// bermd taken over cannot reach another app's port (and its grants and secrets). No exec but
/// the one that starts it (Landlock lets only bermd's own binary be executed), no namespaces.
fn bermd() -> Vec<Syscall> {
    let own = [
        with!(SYS_mmap, Args::Any),
        with!(SYS_mprotect, Args::Any),
        with!(SYS_clone, Args::NoNamespaces),
        with!(SYS_socketpair, Args::Families(&[AF_UNIX])),
        with!(
            SYS_ioctl,
            Args::Requests(&[FIONBIO, FIOCLEX, TCGETS, PAGEMAP_SCAN])
        ),
        with!(SYS_prctl, Args::Arg0Is(&[PR_SET_NAME, PR_GET_NAME])),
        with!(SYS_execve, Args::Any),
    ];
    let extra = any!(
        #[cfg(target_arch = "x86_64")]
        SYS_arch_prctl,
        SYS_prlimit64,
        SYS_getrlimit,
        SYS_membarrier,
        SYS_uname,
        SYS_getuid,
        SYS_geteuid,
        SYS_getgid,
        SYS_getegid,
        SYS_pipe2,
        // fs.* opens every path beneath its granted root with RESOLVE_BENEATH.
        SYS_openat2,
        // Program threads run at a lower priority than the threads that read requests, and
        // calls that computed for long in the idle class (SCHED_IDLE; without CAP_SYS_NICE,
        // which bermd does not have, a thread can only lower its own class).
        SYS_setpriority,
        SYS_sched_setscheduler,
    );
    list(&own, &extra)
}

/// berm-vmm once confined: relays bytes between run-dir sockets and the guest, writes its
/// logs, waits for and stops its children. It maps nothing executable, makes no process and
/// creates no socket: every connection it needs after confinement (the guest's ports in the
/// run dir) is made by its connector ([`Role::VmmConnector`]) and handed over.
fn vmm() -> Vec<Syscall> {
    let own = [
        with!(SYS_mmap, Args::NoExec),
        with!(SYS_mprotect, Args::NoExec),
        with!(SYS_clone, Args::NoNamespaces),
        with!(SYS_ioctl, Args::Requests(&[FIONBIO, FIOCLEX, TCGETS])),
        with!(SYS_prctl, Args::Arg0Is(&[PR_SET_NAME, PR_GET_NAME])),
        with!(SYS_kill, Args::Children),
    ];
    let extra = any!(
        SYS_wait4,
        SYS_waitid,
        SYS_prlimit64,
        SYS_getuid,
        SYS_geteuid,
        SYS_pipe2,
    );
    list(&own, &extra)
}

/// berm-vmm's connector, forked before berm-vmm confines itself: it reads a one-byte request
/// (an index into the run dir's fixed socket names), opens that name beneath the run dir
/// without following a symlink, checks it is a socket, connects to it through
/// `/proc/self/fd` and sends the connection back (`SCM_RIGHTS`). It allocates nothing in its
/// loop: this list is the whole of what it does, and Landlock grants it no file at all.
fn vmm_connector() -> Vec<Syscall> {
    let own = [with!(SYS_socket, Args::Families(&[AF_UNIX]))];
    let calls = any!(
        SYS_read,
        SYS_openat,
        SYS_fstat,
        SYS_newfstatat,
        SYS_connect,
        SYS_sendmsg,
        SYS_close,
        SYS_close_range,
        SYS_rt_sigreturn,
        SYS_restart_syscall,
        SYS_exit,
        SYS_exit_group,
    );
    [&own[..], &calls].concat()
}

/// berm-vmm's egress dialer (`berm-vmm dial`), once it has bound its run-dir sockets and
/// confined itself: it accepts the guest's `http.fetch` connections on them, resolves names
/// (reading `/etc/hosts`, `/etc/resolv.conf`, … and asking DNS over UDP), and connects to the
/// hosts an app's grants allow. The only process of a run that may make a network socket:
/// `socket` is `AF_INET`/`AF_INET6` only, so no Unix socket that could connect anywhere; it
/// writes no file, maps nothing
/// executable and starts no process.
fn vmm_dialer() -> Vec<Syscall> {
    let own = [
        with!(SYS_mmap, Args::NoExec),
        with!(SYS_mprotect, Args::NoExec),
        with!(SYS_clone, Args::NoNamespaces),
        with!(SYS_socket, Args::Families(&[AF_INET, AF_INET6])),
        // tokio's signal pipe, made when its I/O driver starts: a connected pair, which
        // reaches nothing.
        with!(SYS_socketpair, Args::Families(&[AF_UNIX])),
        with!(SYS_ioctl, Args::Requests(&[FIONBIO, FIOCLEX])),
        with!(SYS_prctl, Args::Arg0Is(&[PR_SET_NAME, PR_GET_NAME])),
    ];
    let extra = any!(
        SYS_connect,
        SYS_prlimit64,
        SYS_getuid,
        SYS_geteuid,
        SYS_pipe2,
        SYS_uname,
    );
    [&runtime()[..], &files_read(), &serve(), &own, &extra].concat()
}

/// The libkrun child from `krun_start_enter` on: KVM ioctls on its vCPU and VM fds, guest
/// memory, the device threads (virtio-blk on the disks, vsock listening on the run-dir
/// sockets, the console file), eventfds and timers.
fn krun_enter() -> Vec<Syscall> {
    let own = [
        with!(SYS_mmap, Args::Any),
        with!(SYS_mprotect, Args::Any),
        with!(SYS_clone, Args::NoNamespaces),
        with!(SYS_socket, Args::Families(&[AF_UNIX])),
        with!(SYS_socketpair, Args::Families(&[AF_UNIX])),
        // KVM's requests are many and differ by version: the fds they act on are KVM's own
        // (Landlock grants only /dev/kvm as a device).
        with!(SYS_ioctl, Args::Any),
        with!(SYS_prctl, Args::Arg0Is(&[PR_SET_NAME, PR_GET_NAME])),
    ];
    let extra = any!(
        SYS_bind,
        SYS_listen,
        SYS_kill,
        SYS_tgkill,
        SYS_prlimit64,
        SYS_getuid,
        SYS_geteuid,
        SYS_pipe2,
        SYS_timerfd_create,
        SYS_timerfd_settime,
        SYS_timerfd_gettime,
        SYS_preadv,
        SYS_pwritev,
        SYS_sched_setaffinity,
        SYS_mlock,
        SYS_munlock,
    );
    list(&own, &extra)
}

/// vhost-device-vsock from its exec on: the dynamic loader, its vhost-user socket and the
/// guest's memory (a memfd QEMU passes), the host-side socket it listens on. It never
/// connects out (but see [`Role::VhostDeviceVsockEgress`] and [`with_connect`]).
fn vhost_device_vsock() -> Vec<Syscall> {
    let own = [
        with!(SYS_mmap, Args::Any),
        with!(SYS_mprotect, Args::Any),
        with!(SYS_clone, Args::NoNamespaces),
        with!(SYS_socket, Args::Families(&[AF_UNIX])),
        with!(SYS_ioctl, Args::Requests(&[FIONBIO, FIOCLEX, TCGETS])),
        with!(SYS_prctl, Args::Arg0Is(&[PR_SET_NAME, PR_GET_NAME])),
        with!(SYS_execve, Args::Any),
    ];
    let extra = any!(
        #[cfg(target_arch = "x86_64")]
        SYS_arch_prctl,
        SYS_bind,
        SYS_listen,
        SYS_prlimit64,
        SYS_getuid,
        SYS_geteuid,
        SYS_pipe2,
    );
    list(&own, &extra)
}

/// QEMU from its exec on, beside its own `-sandbox`: the loader, TCG (code generated into
/// executable memory) or KVM, the guest memory memfd it shares with vhost-device-vsock, the
/// disks, the console, and the vhost-user connection it inherits (it makes no socket and
/// connects nowhere). Its own `-sandbox` installs a second filter with `seccomp`.
fn qemu() -> Vec<Syscall> {
    let own = [
        with!(SYS_mmap, Args::Any),
        with!(SYS_mprotect, Args::Any),
        with!(SYS_clone, Args::NoNamespaces),
        // KVM's requests (with -accel kvm) are many and act on QEMU's own KVM fds.
        with!(SYS_ioctl, Args::Any),
        with!(SYS_execve, Args::Any),
    ];
    let extra = any!(
        #[cfg(target_arch = "x86_64")]
        SYS_arch_prctl,
        SYS_prctl,
        SYS_memfd_create,
        SYS_prlimit64,
        SYS_getuid,
        SYS_geteuid,
        SYS_pipe2,
        SYS_fchdir,
        SYS_sysinfo,
        SYS_statfs,
        SYS_fstatfs,
        SYS_get_mempolicy,
        SYS_set_mempolicy,
        SYS_mbind,
        SYS_timerfd_create,
        SYS_timerfd_settime,
        SYS_signalfd4,
        SYS_preadv,
        SYS_pwritev,
        SYS_sched_setaffinity,
        SYS_seccomp,
    );
    list(&own, &extra)
}

/// A role's list plus `connect`, for the vsock device of an egress run: it connects to the
/// dialer's `vsock.sock_<port>` when the guest connects out. Landlock before ABI 9 cannot limit
/// that connect to the run dir, so berm-vmm runs such a role where only its policy's paths
/// exist (`vmm/src/view.rs`). A run without egress keeps the list without `connect`.
fn with_connect(list: Vec<Syscall>) -> Vec<Syscall> {
    [list, any!(SYS_connect)].concat()
}

/// Syscalls a role answers with `ENOSYS` (not in the allow list, not `EPERM`): callers that
/// treat `ENOSYS` as "this kernel is too old" fall back to something the list allows.
pub(crate) fn enosys(role: Role) -> &'static [(&'static str, libc::c_long)] {
    const CLONE3: (&str, libc::c_long) = ("clone3", libc::SYS_clone3);
    match role {
        // Wasmtime places a module's initial memory in a memfd unless it is mapped from the
        // code file; on ENOSYS it does without (bermd maps its code from files).
        Role::Bermd => &[CLONE3, ("memfd_create", libc::SYS_memfd_create)],
        _ => &[CLONE3],
    }
}

pub(crate) fn allowed(role: Role) -> &'static [Syscall] {
    use std::sync::LazyLock;
    static BERMD: LazyLock<Vec<Syscall>> = LazyLock::new(bermd);
    static VMM: LazyLock<Vec<Syscall>> = LazyLock::new(vmm);
    static KRUN_ENTER: LazyLock<Vec<Syscall>> = LazyLock::new(krun_enter);
    static VHOST: LazyLock<Vec<Syscall>> = LazyLock::new(vhost_device_vsock);
    static QEMU: LazyLock<Vec<Syscall>> = LazyLock::new(qemu);
    static CONNECTOR: LazyLock<Vec<Syscall>> = LazyLock::new(vmm_connector);
    static DIALER: LazyLock<Vec<Syscall>> = LazyLock::new(vmm_dialer);
    static VHOST_EGRESS: LazyLock<Vec<Syscall>> =
        LazyLock::new(|| with_connect(vhost_device_vsock()));
    static KRUN_EGRESS: LazyLock<Vec<Syscall>> = LazyLock::new(|| with_connect(krun_enter()));
    match role {
        Role::Bermd => &BERMD,
        Role::Vmm => &VMM,
        Role::KrunEnter => &KRUN_ENTER,
        Role::VhostDeviceVsock => &VHOST,
        Role::Qemu => &QEMU,
        Role::VmmConnector => &CONNECTOR,
        Role::VmmDialer => &DIALER,
        Role::VhostDeviceVsockEgress => &VHOST_EGRESS,
        Role::KrunEnterEgress => &KRUN_EGRESS,
    }
}
