//! Syscalls: the host functions an embedder offers programs.
//!
//! A [`Syscall`] is one import `module.name` with berm's uniform signature
//! `(ptr: i32, len: i32) -> i64`. The table passed to [`crate::Berm::new`] is
//! the linker programs are instantiated with: what is not in it traps when
//! called, naming the import, because nothing is registered for it.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use berm_abi::word::ErrorCode;

use crate::Digest;
use crate::host_memory::{HostMemory, Reservation};

/// What a syscall handler sees of the call it serves.
pub struct SyscallContext<'a> {
    /// The program making the syscall.
    pub program: &'a str,
    /// The tool being run.
    pub tool: &'a str,
    /// The program's digest.
    pub digest: &'a Digest,
    /// The program that called this one, for a nested call.
    pub caller: Option<&'a str>,
    /// When the call (with the calls it is nested in) must end. A host
    /// operation that may block ([`Syscall::blocking`]) gives up by then:
    /// the deadline cannot interrupt host code, only wasm.
    pub deadline: Instant,
    pub(crate) data: Option<&'a (dyn Any + Send + Sync)>,
    pub(crate) trace: Option<&'a crate::CallTrace>,
    pub(crate) host_memory: &'a Arc<HostMemory>,
}

impl SyscallContext<'_> {
    /// The host data attached to the deployment ([`crate::DeployOptions::data`]),
    /// if it is a `T`: how a host finds a program's kv store or fs root
    /// without a lookup per syscall.
    pub fn data<T: 'static>(&self) -> Option<&T> {
        self.data.and_then(|d| d.downcast_ref::<T>())
    }

    /// The host's record of this call ([`crate::CallOptions::trace`], or the one the
    /// [`crate::CallGate`] made for a call between programs), if it is a `T`.
    pub fn trace<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.trace.and_then(|t| Arc::clone(t).downcast::<T>().ok())
    }

    /// The program's host memory budget, shared by all its calls. A handler reserves from it
    /// what it copies out of the guest for the time it keeps it, and, when it knows a reply's
    /// size before making it, the reply's bytes too ([`Reply::Reserved`]), so that a reply
    /// past the budget is never allocated. A [`Reply::Staged`] is reserved when it is staged.
    pub fn host_memory(&self) -> &Arc<HostMemory> {
        self.host_memory
    }

    /// Reserves `bytes` of the program's host memory for `syscall`, or refuses with
    /// `too_large` and a message naming the budget.
    ///
    /// # Errors
    /// [`SyscallError::Code`] with [`ErrorCode::TooLarge`] past the budget.
    pub fn reserve(&self, syscall: &str, bytes: usize) -> Result<Reservation, SyscallError> {
        Ok(self.host_memory.reserve(syscall, bytes)?)
    }
}

/// A successful syscall's answer.
#[derive(Debug)]
pub enum Reply {
    /// Return this word as is (must not be negative).
    Word(i64),
    /// Stage these bytes for `berm.reply`; the word is their length. They are held against
    /// the program's host memory budget until pulled; past it the program gets `too_large`
    /// instead.
    Staged(Vec<u8>),
    /// [`Reply::Staged`], with the bytes already reserved ([`SyscallContext::reserve`]):
    /// the reservation is resized to their length and held with them.
    Reserved(Vec<u8>, Reservation),
}

/// A syscall that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyscallError {
    /// Tell the program: it gets `-code` and can pull the message. The call
    /// goes on; the program decides what to do.
    Code {
        /// The ABI error code.
        code: ErrorCode,
        /// A message the program (and then the model) can act on.
        message: String,
    },
    /// Stop the call: the host decided the program must not go on. The outer
    /// result is an error carrying this message.
    Trap(String),
}

impl SyscallError {
    /// A [`SyscallError::Code`] with a message.
    pub fn code(code: ErrorCode, message: impl Into<String>) -> Self {
        SyscallError::Code {
            code,
            message: message.into(),
        }
    }
}

/// The handler behind a syscall. It gets the guest's `(ptr, len)` region as a
/// mutable slice: input for most syscalls, the output buffer for a few (such
/// as `random.fill`).
pub type Handler =
    dyn Fn(&SyscallContext<'_>, &mut [u8]) -> Result<Reply, SyscallError> + Send + Sync;

/// The rest of a [`Syscall::blocking`] syscall, once its request is read:
/// owns everything it needs, so the guest's memory is free while it waits.
pub type Pending = Pin<Box<dyn Future<Output = Result<Reply, SyscallError>> + Send>>;

/// The handler behind a [`Syscall::blocking`] syscall: reads the request
/// (copying only what it keeps) and returns the work to wait for.
pub type BlockingHandler =
    dyn Fn(&SyscallContext<'_>, &mut [u8]) -> Result<Pending, SyscallError> + Send + Sync;

/// What [`Syscall::new`] (`R` = [`Reply`]) and [`Syscall::blocking`] (`R` = [`Pending`])
/// take as a handler: any thread-safe function from the call's context and the guest's
/// region to an `R`, stored as [`Handler`] or [`BlockingHandler`].
pub trait HandlerFn<R>:
    Fn(&SyscallContext<'_>, &mut [u8]) -> Result<R, SyscallError> + Send + Sync + 'static
{
}

impl<R, F> HandlerFn<R> for F where
    F: Fn(&SyscallContext<'_>, &mut [u8]) -> Result<R, SyscallError> + Send + Sync + 'static
{
}

#[derive(Clone)]
pub(crate) enum Kind {
    Immediate(Arc<Handler>),
    Blocking(Arc<BlockingHandler>),
}

/// One import a host serves.
#[derive(Clone)]
pub struct Syscall {
    pub(crate) module: String,
    pub(crate) name: String,
    pub(crate) kind: Kind,
}

impl Syscall {
    /// A syscall served at `module.name`. The import module is also the unit
    /// of granting.
    pub fn new(
        module: impl Into<String>,
        name: impl Into<String>,
        handler: impl HandlerFn<Reply>,
    ) -> Syscall {
        Syscall::of(module, name, Kind::Immediate(Arc::new(handler)))
    }

    /// A syscall whose work may wait (disk, network): the handler reads the
    /// request and returns a future, and the call's instance waits for it
    /// without holding a thread. Use it for anything that can block, so a
    /// slow or stuck host operation stalls only the call that made it; the
    /// future should give up at [`SyscallContext::deadline`].
    pub fn blocking(
        module: impl Into<String>,
        name: impl Into<String>,
        handler: impl HandlerFn<Pending>,
    ) -> Syscall {
        Syscall::of(module, name, Kind::Blocking(Arc::new(handler)))
    }

    fn of(module: impl Into<String>, name: impl Into<String>, kind: Kind) -> Syscall {
        Syscall {
            module: module.into(),
            name: name.into(),
            kind,
        }
    }

    /// The import module.
    pub fn module(&self) -> &str {
        &self.module
    }

    /// The import name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Syscall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Syscall({}.{})", self.module, self.name)
    }
}
