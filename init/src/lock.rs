//! Locking that outlives a panic: PID 1 keeps reporting after a thread died holding a lock.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex even if a thread panicked while holding it: a panic already resets the VM
/// through the panic hook, and the hook itself must still be able to report.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
