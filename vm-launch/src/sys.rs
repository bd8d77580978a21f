//! The calls into libc the lifecycle makes, each behind a safe function, so that every
//! `unsafe` block of the crate is in this one module and the rest of it denies them.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

/// Sends `signal` to `pid` (0 probes that it exists and may be signalled). The caller has
/// checked that `pid` is the process it means and greater than 1, so no process group or
/// init is ever hit.
pub fn kill(pid: u32, signal: i32) -> std::io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: kill(2) takes no pointers; `pid` is a single positive pid (checked above to
    // fit an i32, and by the caller to be > 1).
    match unsafe { libc::kill(pid, signal) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Makes `command`'s child start a session of its own, so no terminal's hangup or Ctrl-C
/// reaches it.
pub fn new_session(command: &mut Command) {
    // SAFETY: between fork and exec the closure only calls setsid(2), which is
    // async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
