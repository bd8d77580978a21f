//! The one `unsafe` step of the child sandbox: running its application in a child between
//! fork and exec. It takes the step as a closure; only `sandbox.rs` can call it, with
//! [`super::ChildSandbox::apply`], which is what the invariant below is about.

use std::io;
use std::process::Command;

/// Makes the child run `apply` between fork and exec; a child whose `apply` fails is never
/// executed (the spawn fails with the error).
pub(super) fn confine_child(
    command: &mut Command,
    apply: impl FnMut() -> io::Result<()> + Send + Sync + 'static,
) {
    // SAFETY: the only caller passes a prepared `ChildSandbox`'s `apply`: the ruleset was
    // built in the parent; applying it is prctl(PR_SET_NO_NEW_PRIVS),
    // landlock_restrict_self(2) and the seccomp filter's load, all async-signal-safe system
    // calls, and builds a plain status value: no allocation on success and no lock.
    // (berm-vmm spawns its hypervisor children while still single-threaded, so no other
    // thread's lock can be held across the fork anyway.)
    unsafe {
        crate::sys::before_exec(command, apply);
    }
}
