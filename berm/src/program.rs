//! A deployed program and the options it was deployed with.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use berm_abi::grant::Grant;

use crate::{Digest, Limits, Manifest};

/// Which syscall modules of the host's table a program may use, and which other programs'
/// tools it may call. The rest of the table is still linked, as traps that name the missing
/// grant; so is `berm.call` without a `call=` grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Grants {
    /// Everything in the table, and calls to any program its manifest declares (the
    /// library default: the table *is* the host's decision).
    #[default]
    All,
    /// Only these grants: each opens its syscall module ([`Grant::module`]), and the
    /// `call=` grants open `berm.call` to the programs and tools they name.
    Only(BTreeSet<Grant>),
}

impl Grants {
    /// No syscall at all, and no calls.
    pub fn none() -> Grants {
        Grants::Only(BTreeSet::new())
    }

    /// Whether the module is granted (`berm` for `berm.call`: some `call=` grant).
    pub fn allows(&self, module: &str) -> bool {
        match self {
            Grants::All => true,
            Grants::Only(set) => set.iter().any(|g| g.module() == module),
        }
    }

    /// Whether a call to tool `tool` of `program` is granted.
    pub fn allows_call(&self, program: &str, tool: &str) -> bool {
        match self {
            Grants::All => true,
            Grants::Only(set) => set.iter().any(|g| g.allows_call(program, tool)),
        }
    }
}

/// How to deploy a program.
#[derive(Clone, Default)]
pub struct DeployOptions {
    /// Which syscall modules it may use.
    pub grants: Grants,
    /// Bounds for its calls; `None` uses the engine's defaults.
    pub limits: Option<Limits>,
    /// Host data handed to every syscall it makes ([`crate::SyscallContext::data`]).
    pub data: Option<Arc<dyn Any + Send + Sync>>,
    /// Its host memory budget ([`crate::HostMemory`]): how many bytes its calls, all together,
    /// may have the host hold in replies not yet pulled and in syscall requests in flight.
    /// `None` is [`crate::DEFAULT_HOST_MEMORY_BYTES`].
    pub host_memory_bytes: Option<usize>,
}

impl fmt::Debug for DeployOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeployOptions")
            .field("grants", &self.grants)
            .field("limits", &self.limits)
            .field("data", &self.data.is_some())
            .field("host_memory_bytes", &self.host_memory_bytes)
            .finish()
    }
}

/// Where a deploy got its compiled code from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now (Cranelift).
    Compiled,
    /// Loaded from the on-disk compiled-code cache; nothing was compiled.
    DiskCache,
    /// Loaded from the read-only directory of precompiled code
    /// ([`crate::CodeDirs::precompiled`]); nothing was compiled.
    Precompiled,
    /// Already in memory from an earlier deploy of the same digest.
    Memory,
}

/// What a deploy did.
#[derive(Debug, Clone)]
pub struct Deployed {
    /// The program's digest.
    pub digest: Digest,
    /// Its manifest.
    pub manifest: Arc<Manifest>,
    /// Where its compiled code came from.
    pub source: CompileSource,
    /// How long getting the code took (compiling, or loading it).
    pub code_time: Duration,
    /// The digest this name pointed at before, if it was replaced.
    pub replaced: Option<Digest>,
}

/// A deployed program as listed by [`crate::Berm::list`].
#[derive(Debug, Clone)]
pub struct ProgramInfo {
    /// Its name.
    pub name: String,
    /// Its digest.
    pub digest: Digest,
    /// Its manifest.
    pub manifest: Arc<Manifest>,
    /// Its grants.
    pub grants: Grants,
    /// Its limits.
    pub limits: Limits,
    /// Where its compiled code came from when it was deployed.
    pub source: CompileSource,
    /// How long getting the code took at deploy (compiling, or loading it).
    pub code_time: Duration,
}
