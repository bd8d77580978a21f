//! The host memory a program's calls hold outside its own linear memory: replies staged for
//! `berm.reply` and the request bytes a syscall copied out of the guest. The memory cap bounds
//! what a program grows inside its instance; this budget bounds what it makes the host keep
//! for it, summed over all its calls at once.
//!
//! Each deployed program has one [`HostMemory`]. Whatever holds host bytes for a call holds a
//! [`Reservation`] of them, and dropping it (the reply was pulled or replaced, the syscall
//! ended, the call ended by a trap or its deadline) gives them back.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A program's host memory budget unless its host says otherwise (`bermd --max-host-memory`):
/// 64 MiB, the default memory cap, and four of the largest `fs.read` replies.
pub const DEFAULT_HOST_MEMORY_BYTES: usize = 64 << 20;

/// One program's budget of host memory and how much of it its calls hold now.
pub struct HostMemory {
    program: Arc<str>,
    budget: usize,
    held: AtomicUsize,
}

impl HostMemory {
    /// A budget of `budget` bytes for `program`, none of it held.
    pub fn new(program: impl Into<Arc<str>>, budget: usize) -> Arc<HostMemory> {
        Arc::new(HostMemory {
            program: program.into(),
            budget,
            held: AtomicUsize::new(0),
        })
    }

    /// The budget, in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The bytes held now, across the program's calls.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Reserves `bytes` for `syscall`, or refuses when that would take the program past its
    /// budget. Nothing is reserved on a refusal.
    ///
    /// # Errors
    /// [`OverBudget`], whose message names the syscall, the program, the budget and the
    /// `bermd` flag that sets it.
    pub fn reserve(
        self: &Arc<Self>,
        syscall: &str,
        bytes: usize,
    ) -> Result<Reservation, OverBudget> {
        self.take(syscall, bytes)?;
        Ok(Reservation {
            memory: self.clone(),
            bytes,
        })
    }

    /// Adds `bytes` to what is held unless that passes the budget.
    fn take(&self, syscall: &str, bytes: usize) -> Result<(), OverBudget> {
        let refused = |held| OverBudget {
            syscall: syscall.to_string(),
            program: self.program.clone(),
            bytes,
            held,
            budget: self.budget,
        };
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes)
                    .filter(|total| *total <= self.budget)
            })
            .map(drop)
            .map_err(refused)
    }

    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostMemory")
            .field("program", &self.program)
            .field("budget", &self.budget)
            .field("held", &self.held())
            .finish()
    }
}

/// Bytes of a program's [`HostMemory`] held for one reply or request; given back on drop.
pub struct Reservation {
    memory: Arc<HostMemory>,
    bytes: usize,
}

impl Reservation {
    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` instead: gives back the difference, or takes more for `syscall` if the
    /// budget allows.
    ///
    /// # Errors
    /// [`OverBudget`] when growing would pass the budget; the reservation is unchanged.
    pub fn resize(&mut self, syscall: &str, bytes: usize) -> Result<(), OverBudget> {
        if bytes > self.bytes {
            self.memory.take(syscall, bytes - self.bytes)?;
        } else {
            self.memory.give_back(self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.memory.give_back(self.bytes);
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Reservation({} bytes of {:?})",
            self.bytes, self.memory.program
        )
    }
}

/// A reservation refused: it would take the program past its host memory budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{syscall}`: holding {bytes} more bytes would take `{program}` past its host memory budget of \
     {budget} bytes (bermd --max-host-memory); its calls already hold {held} bytes in replies \
     not yet pulled and requests in flight. Pull each reply before the next syscall, or make \
     fewer calls at once"
)]
pub struct OverBudget {
    /// The syscall that asked.
    pub syscall: String,
    /// The program.
    pub program: Arc<str>,
    /// The bytes asked for.
    pub bytes: usize,
    /// The bytes its calls held when it asked.
    pub held: usize,
    /// Its budget.
    pub budget: usize,
}

impl From<OverBudget> for crate::SyscallError {
    fn from(over: OverBudget) -> Self {
        crate::SyscallError::code(berm_abi::word::ErrorCode::TooLarge, over.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_add_up_to_the_budget_and_no_further() {
        let memory = HostMemory::new("p", 100);
        let a = memory.reserve("fs.read", 60).unwrap();
        let b = memory.reserve("kv.list", 40).unwrap();
        assert_eq!(memory.held(), 100);
        let refused = memory.reserve("fs.read", 1).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "`fs.read`: holding 1 more bytes would take `p` past its host memory budget of 100 bytes \
             (bermd --max-host-memory); its calls already hold 100 bytes in replies not yet \
             pulled and requests in flight. Pull each reply before the next syscall, or make \
             fewer calls at once"
        );
        assert_eq!(memory.held(), 100, "a refusal reserves nothing");
        drop(a);
        assert_eq!(memory.held(), 40);
        let c = memory.reserve("fs.read", 60).unwrap();
        drop((b, c));
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn one_reservation_larger_than_the_budget_is_refused() {
        let memory = HostMemory::new("p", 10);
        let refused = memory.reserve("fs.read", 11).unwrap_err();
        assert_eq!((refused.bytes, refused.held, refused.budget), (11, 0, 10));
        assert!(
            memory.reserve("fs.read", usize::MAX).is_err(),
            "no overflow"
        );
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn a_reservation_resizes_within_the_budget() {
        let memory = HostMemory::new("p", 100);
        let mut r = memory.reserve("fs.read", 50).unwrap();
        r.resize("fs.read", 20).unwrap();
        assert_eq!((r.bytes(), memory.held()), (20, 20));
        r.resize("fs.read", 100).unwrap();
        assert_eq!(memory.held(), 100);
        let _other = {
            r.resize("fs.read", 30).unwrap();
            memory.reserve("kv.get", 70).unwrap()
        };
        assert!(r.resize("fs.read", 31).is_err());
        assert_eq!(
            (r.bytes(), memory.held()),
            (30, 100),
            "a refused resize changes nothing"
        );
        drop(r);
        assert_eq!(memory.held(), 70);
    }

    #[test]
    fn concurrent_reservations_never_pass_the_budget() {
        let memory = HostMemory::new("p", 1000);
        let peak = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (memory, peak) = (memory.clone(), peak.clone());
                s.spawn(move || {
                    for _ in 0..10_000 {
                        if let Ok(r) = memory.reserve("x", 300) {
                            peak.fetch_max(memory.held(), Ordering::Relaxed);
                            drop(r);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Relaxed) <= 1000);
        assert_eq!(memory.held(), 0);
    }
}
