//! berm's syscall confinement: one allow list per process role, and the seccomp filter built
//! from it.
//!
//! Every process berm confines is one of a few [`Role`]s: an app's bermd inside the guest,
//! berm-vmm (and the connector it forks), the libkrun child, vhost-device-vsock and QEMU. Each
//! role has its own table of the syscalls it may make ([`Role::allowed`]), written down from
//! what the process was seen to call (traced with strace under the test suite and the benches;
//! the method and date are in `docs/threat-model.md`). The same table is
//!
//! - compiled into the seccomp filter ([`Role::filter`]),
//! - printed in what berm reports (the `host_sandbox` line, an app's `enforcement`), and
//! - hashed into the policy digest ([`Role::policy_text`]),
//!
//! so what is reported cannot drift from what is enforced.
//!
//! Every filter starts with the same prologue, ahead of the table:
//!
//! 1. a foreign architecture kills the process (a 32-bit `int 0x80` call carries another
//!    arch word and other syscall numbers);
//! 2. a syscall number with the x32 bit (`0x40000000`) kills the process: seccompiler
//!    compares numbers for equality, so `nr | 0x40000000` would otherwise never match a rule
//!    and fall through to whatever the default is;
//! 3. `clone3` answers `ENOSYS`: its flags live in memory a filter cannot read, and `ENOSYS`
//!    makes the C library fall back to `clone`, whose flags the table checks.
//!
//! Anything else not in the table answers `EPERM` ([`DEFAULT_ERRNO`]): a call a role was not
//! traced making fails the way an unprivileged call does, which every caller already handles,
//! instead of killing a VM that is serving a user. What must never happen (x32, foreign arch)
//! kills.

#[cfg(target_os = "linux")]
use sha2::{Digest, Sha256};

// The tables name Linux syscall numbers: on other systems (berm-vmm on macOS, which has no
// seccomp) only the roles' names exist, and berm-vmm reports that it runs unconfined.
#[cfg(target_os = "linux")]
mod table;

#[cfg(target_os = "linux")]
pub use table::{Args, Syscall};

/// A compiled filter, ready to load.
#[cfg(target_os = "linux")]
pub use seccompiler::BpfProgram;

/// The errno every syscall outside a role's allow list gets.
pub const DEFAULT_ERRNO: i32 = libc::EPERM;

/// The x32 ABI bit in a syscall number (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A kind of process berm confines, each with its own allow list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// An app's bermd in the guest (and the enforcement probe, which runs in its place).
    Bermd,
    /// berm-vmm once it has started the hypervisor: it relays sockets and writes logs.
    Vmm,
    /// `berm-vmm krun-enter`, the child that runs libkrun's VM loop.
    KrunEnter,
    /// vhost-device-vsock, the QEMU path's vsock device.
    VhostDeviceVsock,
    /// QEMU (beside its own `-sandbox`).
    Qemu,
    /// The process berm-vmm forks before it confines itself to make its Unix-socket
    /// connections: only to the run dir's fixed socket names, handed back as descriptors, so
    /// berm-vmm itself needs neither `socket` nor `connect`.
    VmmConnector,
    /// berm-vmm's egress dialer: serves the guest's `http.fetch` requests on the run dir's
    /// egress sockets under each app's grants, and is the only process of a run that may make
    /// a network socket.
    VmmDialer,
    /// vhost-device-vsock of an egress run: its list plus `connect` to the dialer's sockets,
    /// run where only its policy's paths exist (`vmm/src/view.rs`).
    VhostDeviceVsockEgress,
    /// The libkrun child of an egress run: likewise (from libkrun's source; not traced, since
    /// libkrun cannot run a guest on this machine).
    KrunEnterEgress,
}

/// Why a filter could not be built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// seccompiler refused the table.
    #[error("building the {role} seccomp filter failed: {message}")]
    Build {
        /// The role.
        role: &'static str,
        /// seccompiler's message.
        message: String,
    },
    /// The kernel refused the filter.
    #[error("loading the {role} seccomp filter failed: {message}")]
    Load {
        /// The role.
        role: &'static str,
        /// seccompiler's message.
        message: String,
    },
}

impl Role {
    /// Every role, in the order the docs list them.
    pub const ALL: [Role; 9] = [
        Role::Bermd,
        Role::Vmm,
        Role::KrunEnter,
        Role::VhostDeviceVsock,
        Role::Qemu,
        Role::VmmConnector,
        Role::VmmDialer,
        Role::VhostDeviceVsockEgress,
        Role::KrunEnterEgress,
    ];

    /// The role's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Role::Bermd => "bermd",
            Role::Vmm => "berm-vmm",
            Role::KrunEnter => "krun-enter",
            Role::VhostDeviceVsock => "vhost-device-vsock",
            Role::Qemu => "qemu",
            Role::VmmConnector => "berm-vmm-connector",
            Role::VmmDialer => "berm-vmm-dialer",
            Role::VhostDeviceVsockEgress => "vhost-device-vsock-egress",
            Role::KrunEnterEgress => "krun-enter-egress",
        }
    }

    #[cfg(target_os = "linux")]
    /// The syscalls the role may make, with their argument rules.
    pub fn allowed(self) -> &'static [Syscall] {
        table::allowed(self)
    }

    #[cfg(target_os = "linux")]
    /// The allow list as reported: one entry per syscall, argument rules in parentheses
    /// (`clone(no CLONE_NEW*)`, `socket(AF_INET|AF_INET6)`).
    pub fn describe(self) -> Vec<String> {
        self.allowed().iter().map(Syscall::describe).collect()
    }

    #[cfg(target_os = "linux")]
    /// The whole syscall policy as text, one line each: what [`Role::policy_sha256`] hashes
    /// and what a reader can diff between two builds.
    pub fn policy_text(self) -> String {
        let mut text = format!(
            "seccomp role {}\nseccomp kill foreign-arch\nseccomp kill x32\nseccomp default errno {}\n",
            self.name(),
            DEFAULT_ERRNO
        );
        for (name, _) in table::enosys(self) {
            text.push_str("seccomp enosys ");
            text.push_str(name);
            text.push('\n');
        }
        for entry in self.describe() {
            text.push_str("seccomp allow ");
            text.push_str(&entry);
            text.push('\n');
        }
        text
    }

    #[cfg(target_os = "linux")]
    /// sha256 of [`Role::policy_text`].
    pub fn policy_sha256(self) -> String {
        hex::encode(Sha256::digest(self.policy_text().as_bytes()))
    }

    /// The BPF program for this role: the prologue (foreign arch and x32 killed, `clone3`
    /// `ENOSYS`), then the allow list, `EPERM` for the rest.
    #[cfg(target_os = "linux")]
    pub fn filter(self) -> Result<seccompiler::BpfProgram, ConfineError> {
        filter::build(self, &[])
    }

    /// [`Role::filter`], with `kill` allowed to exactly these pids (the entries whose rule is
    /// [`Args::Children`]).
    #[cfg(target_os = "linux")]
    pub fn filter_with_children(
        self,
        children: &[u32],
    ) -> Result<seccompiler::BpfProgram, ConfineError> {
        filter::build(self, children)
    }
}

/// Loads `program` on the calling thread (no_new_privs is set first, as seccomp requires).
/// Allocates nothing, so it is safe between fork and exec.
#[cfg(target_os = "linux")]
pub fn apply(role: Role, program: &seccompiler::BpfProgram) -> Result<(), ConfineError> {
    seccompiler::apply_filter(program).map_err(|e| ConfineError::Load {
        role: role.name(),
        message: e.to_string(),
    })
}

/// Loads `program` on every thread of the process (`SECCOMP_FILTER_FLAG_TSYNC`).
#[cfg(target_os = "linux")]
pub fn apply_all_threads(
    role: Role,
    program: &seccompiler::BpfProgram,
) -> Result<(), ConfineError> {
    seccompiler::apply_filter_all_threads(program).map_err(|e| ConfineError::Load {
        role: role.name(),
        message: e.to_string(),
    })
}

#[cfg(target_os = "linux")]
mod filter {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch, sock_filter,
    };

    use super::{ConfineError, DEFAULT_ERRNO, Role, X32_SYSCALL_BIT};

    // Classic BPF opcodes (linux/filter.h).
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    // Offsets in struct seccomp_data.
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    /// This build's `AUDIT_ARCH_*` (EM_X86_64 or EM_AARCH64 | 64-bit | little-endian) and
    /// seccompiler's name for it; a syscall made with any other arch word is killed.
    #[cfg(target_arch = "x86_64")]
    const ARCH_WORD: (u32, TargetArch) = (62 | 0x8000_0000 | 0x4000_0000, TargetArch::x86_64);
    #[cfg(target_arch = "aarch64")]
    const ARCH_WORD: (u32, TargetArch) = (183 | 0x8000_0000 | 0x4000_0000, TargetArch::aarch64);

    fn op(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    const JA: u16 = 0x05;

    /// Foreign arch and x32 killed, the role's ENOSYS calls answered; everything else jumps
    /// past the prologue to the table. Jumps count from the next instruction.
    pub(super) fn prologue(role: Role) -> BpfProgram {
        let enosys = super::table::enosys(role);
        let n = enosys.len();
        // Layout: ld arch, jeq arch, ld nr, jge x32, n × jeq, ja table, ret ENOSYS, ret KILL.
        let enosys_at = 4 + n + 1;
        let kill_at = enosys_at + 1;
        let to = |from: usize, target: usize| (target - from - 1) as u8;
        let mut program = vec![
            op(LD_W_ABS, 0, 0, ARCH),
            op(JEQ_K, 0, to(1, kill_at), ARCH_WORD.0),
            op(LD_W_ABS, 0, 0, NR),
            op(JGE_K, to(3, kill_at), 0, X32_SYSCALL_BIT),
        ];
        for (i, &(_, nr)) in enosys.iter().enumerate() {
            program.push(op(JEQ_K, to(4 + i, enosys_at), 0, nr as u32));
        }
        program.push(op(JA, 0, 0, 2));
        program.push(op(RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
        program.push(op(RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS));
        program
    }

    pub(super) fn build(role: Role, children: &[u32]) -> Result<BpfProgram, ConfineError> {
        let fail = |e: &dyn std::fmt::Display| ConfineError::Build {
            role: role.name(),
            message: e.to_string(),
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for syscall in role.allowed() {
            let conditions = syscall.rules(children).map_err(|e| fail(&e))?;
            // No rule at all means "any arguments" to seccompiler: an argument check that
            // admits no value leaves the syscall out instead.
            if conditions.is_empty() && syscall.args != super::Args::Any {
                continue;
            }
            rules.entry(syscall.nr()).or_default().extend(conditions);
        }
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Errno(DEFAULT_ERRNO as u32),
            SeccompAction::Allow,
            ARCH_WORD.1,
        )
        .map_err(|e| fail(&e))?;
        let table: BpfProgram = filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| fail(&e))?;
        let mut program = prologue(role);
        program.extend(table);
        Ok(program)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn every_role_builds_and_names_each_syscall_once() {
        for role in Role::ALL {
            let names: Vec<&str> = role.allowed().iter().map(|s| s.name()).collect();
            let mut unique = names.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(
                names.len(),
                unique.len(),
                "{} lists a syscall twice",
                role.name()
            );
            #[cfg(target_os = "linux")]
            assert!(role.filter().is_ok(), "{}", role.name());
        }
    }

    #[test]
    fn dangerous_calls_are_on_no_list() {
        let never = [
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "unshare",
            "setns",
            "init_module",
            "finit_module",
            "kexec_load",
            "kexec_file_load",
            "bpf",
            "keyctl",
            "add_key",
            "request_key",
            "io_uring_setup",
            "io_uring_enter",
            "reboot",
            "swapon",
            "perf_event_open",
            "userfaultfd",
            "open_by_handle_at",
            "kcmp",
            "pidfd_getfd",
            "personality",
            "syslog",
            "modify_ldt",
            "memfd_create",
            "execveat",
        ];
        for role in Role::ALL {
            for syscall in role.allowed() {
                // QEMU creates its guest memory with memfd_create (memory-backend-memfd).
                if role == Role::Qemu && syscall.name() == "memfd_create" {
                    continue;
                }
                assert!(
                    !never.contains(&syscall.name()),
                    "{} allows {}",
                    role.name(),
                    syscall.name()
                );
            }
        }
    }

    /// Runs `calls` in a forked child under `role`'s filter; the child exits with 0 when every
    /// call returned what was expected. Returns the wait status.
    #[cfg(target_os = "linux")]
    fn under_filter(role: Role, calls: fn() -> bool) -> libc::c_int {
        let program = role.filter().unwrap();
        // SAFETY: the child calls only async-signal-safe syscalls (prctl, seccomp, the calls
        // under test) and _exit; the program was built before the fork.
        unsafe {
            match libc::fork() {
                0 => {
                    let ok = apply(role, &program).is_ok() && calls();
                    libc::_exit(if ok { 0 } else { 1 })
                }
                pid => {
                    let mut status = 0;
                    libc::waitpid(pid, &mut status, 0);
                    status
                }
            }
        }
    }

    /// The child under the filter ran every call as expected and exited 0.
    #[cfg(target_os = "linux")]
    fn assert_exited_cleanly(status: libc::c_int) {
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
    }

    /// The errno of a stream `socket(domain)` (0 when it was allowed).
    ///
    /// # Safety
    /// Integer arguments only; a socket it makes is left open, for the child to exit with.
    #[cfg(target_os = "linux")]
    unsafe fn socket_errno(domain: libc::c_int) -> i32 {
        // SAFETY: integer arguments only.
        errno_of(unsafe { libc::syscall(libc::SYS_socket, domain, libc::SOCK_STREAM, 0) })
    }

    #[cfg(target_os = "linux")]
    fn errno_of(ret: libc::c_long) -> i32 {
        if ret >= 0 {
            return 0;
        }
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_filter_allows_its_list_refuses_the_rest_and_kills_x32() {
        // Allowed, refused with EPERM, clone3 ENOSYS, argument rules.
        let status = under_filter(Role::Vmm, || {
            // SAFETY: plain syscalls with integer arguments or null pointers.
            unsafe {
                libc::syscall(libc::SYS_getpid) > 0
                    && errno_of(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER))
                        == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_clone3, 0, 0)) == libc::ENOSYS
                    && socket_errno(libc::AF_INET) == libc::EPERM
                    // berm-vmm makes no socket and connects nowhere (its connector does).
                    && socket_errno(libc::AF_UNIX) == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_connect, -1, 0, 0)) == libc::EPERM
                    && errno_of(libc::syscall(
                        libc::SYS_mmap,
                        0,
                        4096,
                        libc::PROT_READ | libc::PROT_EXEC,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )) == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_execve, c"/bin/true".as_ptr(), 0, 0))
                        == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_kill, libc::getppid(), 0)) == libc::EPERM
            }
        });
        assert_exited_cleanly(status);

        // x32: the same call with the x32 bit kills the process, whatever the call.
        for role in Role::ALL {
            let status = under_filter(role, || {
                // SAFETY: getpid with the x32 bit; it never returns under the filter.
                unsafe { libc::syscall(libc::SYS_getpid | X32_SYSCALL_BIT as libc::c_long) };
                true
            });
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
                "{}: {status:#x}",
                role.name()
            );
        }

        // bermd: memfd_create answers ENOSYS (Wasmtime then does without), socket EPERM for
        // every family, vsock included (berm-init's egress broker connects for it), and no
        // connect; socketpair and recvmsg, the broker's channel, stay.
        let status = under_filter(Role::Bermd, || {
            // SAFETY: integer arguments, a constant C string, and a msghdr on the stack.
            unsafe {
                errno_of(libc::syscall(libc::SYS_memfd_create, c"x".as_ptr(), 0)) == libc::ENOSYS
                    && socket_errno(libc::AF_UNIX) == libc::EPERM
                    && socket_errno(libc::AF_VSOCK) == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_connect, -1, 0, 0)) == libc::EPERM
                    && {
                        let mut pair = [-1; 2];
                        let made = libc::syscall(
                            libc::SYS_socketpair,
                            libc::AF_UNIX,
                            libc::SOCK_SEQPACKET,
                            0,
                            pair.as_mut_ptr(),
                        );
                        let mut msg: libc::msghdr = std::mem::zeroed();
                        made == 0
                            && errno_of(libc::syscall(
                                libc::SYS_recvmsg,
                                pair[0],
                                &raw mut msg,
                                libc::MSG_DONTWAIT,
                            )) == libc::EAGAIN
                    }
                    && errno_of(libc::syscall(
                        libc::SYS_clone,
                        libc::CLONE_NEWUSER,
                        0,
                        0,
                        0,
                        0,
                    )) == libc::EPERM
            }
        });
        assert_exited_cleanly(status);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_connector_makes_unix_sockets_only_and_nothing_else() {
        let status = under_filter(Role::VmmConnector, || {
            // SAFETY: integer arguments and null pointers only.
            unsafe {
                libc::syscall(libc::SYS_socket, libc::AF_UNIX, libc::SOCK_STREAM, 0) >= 0
                    && socket_errno(libc::AF_INET) == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_getpid)) == libc::EPERM
                    && errno_of(libc::syscall(
                        libc::SYS_mmap,
                        0,
                        4096,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )) == libc::EPERM
                    && errno_of(libc::syscall(libc::SYS_kill, 1, 0)) == libc::EPERM
            }
        });
        assert_exited_cleanly(status);
    }

    #[test]
    fn policy_text_names_the_prologue_and_every_entry() {
        let text = Role::Bermd.policy_text();
        assert!(text.contains("seccomp kill x32\n"));
        assert!(text.contains("seccomp allow clone(no CLONE_NEW*)\n"));
        assert_eq!(Role::Bermd.policy_sha256().len(), 64);
        assert_ne!(Role::Bermd.policy_sha256(), Role::Vmm.policy_sha256());
    }
}
