//! The few calls into libc that berm makes, each behind a safe function, so that every
//! `unsafe` block of the CLI is in this one module and the rest of it forbids them (the VM
//! lifecycle's own are in `berm-vm-launch`).

#![allow(unsafe_code)]

/// Ends the process as SIGPIPE would have, had the Rust runtime not ignored it.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: signal(2) with SIG_DFL and raise(3) take no pointers; restoring the default
    // action of a signal the Rust runtime set to ignored, then raising it, ends the process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(128 + libc::SIGPIPE);
}
