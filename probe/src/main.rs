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

use serde_json::{Value, json};

struct Args {
    own: String,
    others: Vec<String>,
    other_shares: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        own: String::new(),
        others: Vec::new(),
        other_shares: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--own" => args.own = value,
            "--other" => args.others.push(value),
            "--other-share" => args.other_shares.push(value),
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
        Some(n) => format!("errno {n}"),
        None => e.to_string(),
    }
}

fn check(name: &str, expected: &str, result: io::Result<()>) -> Value {
    let outcome = match &result {
        Ok(()) => "ok".to_owned(),
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

/// Forks sleeping children until fork fails, then kills them: the pids.max limit must stop
/// it long before 4096.
fn fork_until_refused() -> (io::Result<()>, usize) {
    let mut children = Vec::new();
    let result = loop {
        if children.len() >= 4096 {
            break Ok(());
        }
        // SAFETY: the child only pauses until it is killed; it touches no shared state.
        match unsafe { libc::fork() } {
            0 => loop {
                // SAFETY: pause(2) takes no arguments.
                unsafe { libc::pause() };
            },
            -1 => break Err(io::Error::last_os_error()),
            pid => children.push(pid),
        }
    };
    for pid in &children {
        // SAFETY: signalling and reaping this process's own children.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
            libc::waitpid(*pid, std::ptr::null_mut(), 0);
        }
    }
    (result, children.len())
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
        ("socket AF_VSOCK", libc::AF_VSOCK),
    ] {
        checks.push(check(name, "EPERM", socket(domain)));
    }
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
    let (forked, count) = fork_until_refused();
    checks.push(check(
        &format!("fork until refused (stopped after {count} children)"),
        "EAGAIN",
        forked,
    ));
    println!("{}", json!({ "checks": checks }));
}
