//! berm-probe: the enforcement probe of berm's VM tests.
//!
//! berm-init runs it under exactly one app's confinement (uid, cgroup, Landlock, seccomp,
//! no_new_privs) when a test boot attaches it with `berm-vmm run --test-probe`. It tries, for
//! real, what that confinement must refuse and the one thing it must allow (writing the app's
//! own workspace), and prints one JSON line: `{"checks":[{name, expected, outcome, pass}]}`.
//! It is built by the tests and attached as its own disk; it is never part of the pinned
//! rootfs.
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

use serde_json::{Value, json};

struct Args {
    own: String,
    others: Vec<String>,
    other_shares: Vec<String>,
    other_pids: Vec<libc::pid_t>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        own: String::new(),
        others: Vec::new(),
        other_shares: Vec::new(),
        other_pids: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--own" => args.own = value,
            "--other" => args.others.push(value),
            "--other-share" => args.other_shares.push(value),
            "--other-pid" => args.other_pids.push(
                value
                    .parse()
                    .map_err(|_| format!("--other-pid {value:?}"))?,
            ),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if args.own.is_empty() {
        return Err("--own DIR is required".into());
    }
    Ok(args)
}

fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::ENOSYS) => "ENOSYS".into(),
        Some(libc::EAGAIN) => "EAGAIN".into(),
        Some(libc::ENOENT) => "ENOENT".into(),
        Some(libc::EAFNOSUPPORT) => "EAFNOSUPPORT".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ESRCH) => "ESRCH".into(),
        Some(n) => format!("errno {n}"),
        None => e.to_string(),
    }
}

fn check(name: &str, expected: &str, result: io::Result<()>) -> Value {
    let outcome = match &result {
        Ok(()) => "ok".to_owned(),
        Err(e) if e.raw_os_error().is_none() && e.to_string() == "SIGSYS" => "SIGSYS".to_owned(),
        Err(e) => errno_name(e),
    };
    json!({"name": name, "expected": expected, "pass": outcome == expected, "outcome": outcome})
}

fn ret(value: libc::c_long) -> io::Result<()> {
    if value < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn socket(domain: libc::c_int) -> io::Result<()> {
    // SAFETY: socket(2) with integer arguments; a created fd is closed at once.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd >= 0 {
        // SAFETY: closing the fd just created.
        unsafe { libc::close(fd) };
    }
    ret(fd as libc::c_long)
}

/// What a program would do to reach the network without the host dialer: its own TCP socket,
/// connected to the address QEMU's user network would give the host. The guest kernel has no
/// network device, so this could reach nothing anyway; the filter refuses the socket first.
fn tcp_on_its_own() -> io::Result<()> {
    // SAFETY: socket(2) with integer arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    ret(fd as libc::c_long)?;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 80u16.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([10, 0, 2, 2]).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: the pointer and length describe `addr`, alive for the call.
    let result = ret(unsafe {
        libc::connect(
            fd,
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } as libc::c_long);
    // SAFETY: closing the socket created above.
    unsafe { libc::close(fd) };
    result
}

/// A raw IP socket, the other way around a proxy.
fn raw_socket() -> io::Result<()> {
    // SAFETY: socket(2) with integer arguments; a created fd is closed at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 6) };
    if fd >= 0 {
        // SAFETY: closing the fd just created.
        unsafe { libc::close(fd) };
    }
    ret(fd as libc::c_long)
}

fn io_uring_setup() -> io::Result<()> {
    let mut params = [0u8; 120];
    // SAFETY: `params` is a writable, zeroed buffer the size of io_uring_params.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: closing the fd just created.
        unsafe { libc::close(fd as libc::c_int) };
    }
    ret(fd)
}

fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: integer argument.
    ret(unsafe { libc::unshare(flags) } as libc::c_long)
}

fn mount_tmpfs() -> io::Result<()> {
    // SAFETY: constant NUL-terminated strings and a null data pointer.
    ret(unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    } as libc::c_long)
}

fn ptrace_init() -> io::Result<()> {
    // SAFETY: integer arguments and null pointers, which PTRACE_ATTACH ignores.
    ret(unsafe {
        libc::ptrace(
            libc::PTRACE_ATTACH,
            1,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    })
}

fn bpf() -> io::Result<()> {
    let attr = [0u8; 128];
    // SAFETY: `attr` is a readable buffer of the size passed; 5 is BPF_PROG_LOAD.
    ret(unsafe { libc::syscall(libc::SYS_bpf, 5, attr.as_ptr(), attr.len()) })
}

fn setuid_root() -> io::Result<()> {
    // SAFETY: integer argument.
    ret(unsafe { libc::setuid(0) } as libc::c_long)
}

fn exec(path: &str) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    // exec only returns on failure; on success the probe would be replaced, which the
    // expected outcome (EACCES) rules out — and the report would then be missing.
    Err(std::process::Command::new(path).arg("--version").exec())
}

/// fork(2) as bermd's allow list has it: clone(2) with SIGCHLD and no other flag (the
/// `fork` syscall itself is not on the list, which changes nothing: this is the same call).
fn fork() -> libc::pid_t {
    // SAFETY: a fork-like clone (no CLONE_VM, no new stack): the child gets a copy of the
    // address space and continues here, as after fork(2).
    unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) as libc::pid_t }
}

/// The x32 bit of a syscall number: under berm's filters any such call kills the process.
const X32: libc::c_long = 0x4000_0000;

/// How the last child ended, as its SIGCHLD said (bermd's allow list, which the probe runs
/// under, has no wait4 or waitid: the probe learns of its children from the signal instead).
static CHILD_CODE: AtomicI32 = AtomicI32::new(0);
static CHILD_STATUS: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_child(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t for an SA_SIGINFO handler; SIGCHLD fills
    // si_code and si_status.
    let (code, status) = unsafe { ((*info).si_code, (*info).si_status()) };
    CHILD_STATUS.store(status, Ordering::SeqCst);
    CHILD_CODE.store(code, Ordering::SeqCst);
}

/// A pipe: (read end, write end).
fn pipe() -> io::Result<(libc::c_int, libc::c_int)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// Runs `call` in a forked child and says how the child ended: `SIGSYS` when the seccomp
/// filter killed it (the expected outcome for x32 calls), else what the call returned.
fn in_child(call: fn() -> libc::c_long) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with an SA_SIGINFO handler that only stores two atomics.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_child as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        if libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    CHILD_CODE.store(0, Ordering::SeqCst);
    let (read_end, write_end) = pipe()?;
    let pid = fork();
    if pid == 0 {
        // The child: one raw syscall, its outcome (if it returns) on the pipe, then _exit.
        let ret = call();
        let code: u8 = if ret >= 0 {
            0
        } else {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(1)
                .min(125) as u8
        };
        // SAFETY: writing one byte from a local to the pipe; then ending the child.
        unsafe {
            libc::write(write_end, (&raw const code).cast(), 1);
            libc::_exit(0)
        }
    }
    // SAFETY: closing the parent's copy of the write end, so EOF means the child is gone.
    unsafe { libc::close(write_end) };
    if pid < 0 {
        // SAFETY: closing the read end just made.
        unsafe { libc::close(read_end) };
        return Err(io::Error::last_os_error());
    }
    let mut byte = 0u8;
    // SAFETY: reading at most one byte into a local; returns 0 at EOF (the child ended).
    let n = unsafe { libc::read(read_end, (&raw mut byte).cast(), 1) };
    // SAFETY: closing the read end.
    unsafe { libc::close(read_end) };
    if n == 1 {
        return match byte {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno.into())),
        };
    }
    // Nothing written: the child died in the call. Its SIGCHLD says how.
    for _ in 0..1000 {
        if CHILD_CODE.load(Ordering::SeqCst) != 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let code = CHILD_CODE.load(Ordering::SeqCst);
    let status = CHILD_STATUS.load(Ordering::SeqCst);
    if (code == libc::CLD_KILLED || code == libc::CLD_DUMPED) && status == libc::SIGSYS {
        return Err(io::Error::other("SIGSYS"));
    }
    Err(io::Error::other(format!(
        "child ended without an answer (si_code {code}, status {status})"
    )))
}

fn x32_unshare() -> libc::c_long {
    // SAFETY: integer arguments.
    unsafe { libc::syscall(libc::SYS_unshare | X32, libc::CLONE_NEWUSER) }
}

fn x32_execve() -> libc::c_long {
    let argv = [c"/usr/bin/bermd".as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: a constant path and NULL-terminated argv and envp arrays.
    unsafe {
        libc::syscall(
            libc::SYS_execve | X32,
            c"/usr/bin/bermd".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    }
}

/// Copies the probe's own binary into the workspace, marks it executable and execs it: an app
/// must not run a binary it wrote.
fn exec_written(own: &str) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let me = std::env::args().next().unwrap_or_default();
    let copy = format!("{own}/written-binary");
    std::fs::copy(&me, &copy)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
    exec(&copy)
}

/// memfd_create, the probe's own bytes into it, then fexecve: a binary that never touches a
/// filesystem.
fn memfd_exec() -> io::Result<()> {
    // SAFETY: a constant name and flags.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, c"probe".as_ptr(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let me = std::fs::read(std::env::args().next().unwrap_or_default())?;
    // SAFETY: `fd` is the memfd just created; `me` is a readable buffer of its length.
    let written = unsafe { libc::write(fd as libc::c_int, me.as_ptr().cast(), me.len()) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    let argv = [c"probe".as_ptr(), c"--version".as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: fd from above, NULL-terminated argv and envp; on success it does not return.
    ret(unsafe { libc::fexecve(fd as libc::c_int, argv.as_ptr(), envp.as_ptr()) } as libc::c_long)
}

fn keyctl() -> io::Result<()> {
    // SAFETY: KEYCTL_GET_KEYRING_ID (0) of KEY_SPEC_SESSION_KEYRING (-3), create = 1.
    ret(unsafe { libc::syscall(libc::SYS_keyctl, 0, -3, 1) })
}

fn userfaultfd() -> io::Result<()> {
    // SAFETY: integer flags; a created fd is closed.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: closing the fd just created.
        unsafe { libc::close(fd as libc::c_int) };
    }
    ret(fd)
}

fn perf_event_open() -> io::Result<()> {
    // struct perf_event_attr, zeroed: type 0 (hardware), size field set, config 0 (cycles).
    let mut attr = [0u8; 128];
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    // SAFETY: `attr` is a readable buffer of the size it declares; pid 0, cpu -1, no group.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) };
    if fd >= 0 {
        // SAFETY: closing the fd just created.
        unsafe { libc::close(fd as libc::c_int) };
    }
    ret(fd)
}

/// clone(2) itself with CLONE_NEWUSER (not unshare): the namespace flag in a raw clone.
fn clone_newuser() -> io::Result<()> {
    // SAFETY: fork-like clone (no CLONE_VM, null stack): a child that only _exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_NEWUSER | libc::SIGCHLD,
            0,
            0,
            0,
            0,
        )
    };
    if pid == 0 {
        // SAFETY: the child ends at once.
        unsafe { libc::_exit(0) };
    }
    if pid > 0 {
        // SAFETY: reaping that child.
        unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0) };
    }
    ret(pid)
}

fn kill_probe(pid: libc::pid_t) -> io::Result<()> {
    // SAFETY: signal 0 checks only whether a signal could be sent; integer arguments.
    ret(unsafe { libc::kill(pid, 0) } as libc::c_long)
}

/// socket(AF_UNIX) then connect to an abstract address (`\0berm-probe`).
fn connect_abstract() -> io::Result<()> {
    // SAFETY: integer arguments.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a zeroed sockaddr_un is valid; the path is written within sun_path.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, b) in b"\0berm-probe".iter().enumerate() {
        addr.sun_path[i] = *b as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 11) as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes.
    let result = ret(unsafe { libc::connect(fd, (&raw const addr).cast(), len) } as libc::c_long);
    // SAFETY: closing the socket created above.
    unsafe { libc::close(fd) };
    result
}

/// Forks sleeping children until fork fails, then kills them: the pids.max limit must stop
/// it long before 4096.
fn fork_until_refused() -> (io::Result<()>, usize) {
    // Each child blocks reading a pipe whose write end only the parent holds; closing it ends
    // them all (the probe's list has no kill, so they are not signalled).
    let (read_end, write_end) = match pipe() {
        Ok(ends) => ends,
        Err(e) => return (Err(e), 0),
    };
    let mut children = 0;
    let result = loop {
        if children >= 4096 {
            break Ok(());
        }
        match fork() {
            0 => {
                let mut byte = 0u8;
                // SAFETY: the child drops its copy of the write end, waits for EOF, ends.
                unsafe {
                    libc::close(write_end);
                    while libc::read(read_end, (&raw mut byte).cast(), 1) > 0 {}
                    libc::_exit(0)
                }
            }
            -1 => break Err(io::Error::last_os_error()),
            _ => children += 1,
        }
    };
    // SAFETY: closing both ends: the children see EOF and exit.
    unsafe {
        libc::close(write_end);
        libc::close(read_end);
    }
    (result, children)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("berm-probe: {e}");
            std::process::exit(2);
        }
    };
    let mut checks = vec![
        check(
            "write /tmp",
            "EACCES",
            std::fs::write("/tmp/berm-probe", b"x"),
        ),
        check(
            "write own workspace",
            "ok",
            std::fs::write(format!("{}/probe-ok", args.own), b"x"),
        ),
        check(
            "read /proc/cmdline",
            "EACCES",
            std::fs::read("/proc/cmdline").map(drop),
        ),
        check(
            "exec /usr/bin/bermd (not granted to the probe)",
            "EACCES",
            exec("/usr/bin/bermd"),
        ),
    ];
    for other in &args.others {
        checks.push(check(
            &format!("write other app's workspace {other}"),
            "EACCES",
            std::fs::write(format!("{other}/from-probe"), b"x"),
        ));
        checks.push(check(
            &format!("list other app's workspace {other}"),
            "EACCES",
            std::fs::read_dir(other).map(drop),
        ));
    }
    for share in &args.other_shares {
        checks.push(check(
            &format!("read other app's share {share}/launch.json"),
            "EACCES",
            std::fs::read(format!("{share}/launch.json")).map(drop),
        ));
    }
    for (name, domain) in [
        ("socket AF_INET", libc::AF_INET),
        ("socket AF_INET6", libc::AF_INET6),
        ("socket AF_UNIX", libc::AF_UNIX),
        // Refused since issue 25: http.fetch's connection to the host dialer comes from
        // berm-init's egress broker, made to the app's own port, so an app cannot reach
        // another app's egress port.
        (
            "socket AF_VSOCK (egress connections come from berm-init's broker)",
            libc::AF_VSOCK,
        ),
    ] {
        checks.push(check(name, "EPERM", socket(domain)));
    }
    checks.push(check(
        "http on its own: socket AF_INET + connect 10.0.2.2:80",
        "EPERM",
        tcp_on_its_own(),
    ));
    checks.push(check("raw socket AF_INET SOCK_RAW", "EPERM", raw_socket()));
    checks.extend([
        check("io_uring_setup", "EPERM", io_uring_setup()),
        check(
            "unshare CLONE_NEWUSER",
            "EPERM",
            unshare(libc::CLONE_NEWUSER),
        ),
        check("unshare CLONE_NEWNS", "EPERM", unshare(libc::CLONE_NEWNS)),
        check("mount tmpfs on /tmp", "EPERM", mount_tmpfs()),
        check("ptrace attach PID 1", "EPERM", ptrace_init()),
        check("bpf prog load", "EPERM", bpf()),
        check("setuid 0", "EPERM", setuid_root()),
    ]);
    checks.extend([
        check("x32 unshare CLONE_NEWUSER", "SIGSYS", in_child(x32_unshare)),
        check("x32 execve /usr/bin/bermd", "SIGSYS", in_child(x32_execve)),
        check(
            "execve a binary written in the workspace",
            "EACCES",
            exec_written(&args.own),
        ),
        check("memfd_create + fexecve", "ENOSYS", memfd_exec()),
        check("keyctl get session keyring", "EPERM", keyctl()),
        check("userfaultfd", "EPERM", userfaultfd()),
        check("perf_event_open", "EPERM", perf_event_open()),
        check("raw clone CLONE_NEWUSER", "EPERM", clone_newuser()),
        check("connect abstract socket", "EPERM", connect_abstract()),
    ]);
    for pid in &args.other_pids {
        checks.push(check(
            &format!("kill(0) other app's bermd (pid {pid})"),
            "EPERM",
            kill_probe(*pid),
        ));
    }
    let (forked, count) = fork_until_refused();
    checks.push(check(
        &format!("fork until refused (stopped after {count} children)"),
        "EAGAIN",
        forked,
    ));
    println!("{}", json!({ "checks": checks }));
}
