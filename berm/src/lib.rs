//! berm: the program runtime.
//!
//! A *program* is one WebAssembly module (wasm32, no WASI), pinned by the
//! sha256 of its bytes, compiled once per digest and instantiated fresh for
//! every call, so nothing survives a call. It reaches the world only through
//! the imports it declares, and every import is either part of berm's calling
//! convention, the one syscall berm serves itself (`berm.call`, calls between
//! programs by name), or a [`Syscall`] from the table the embedder passes to
//! [`Berm::new`]. berm ships no syscalls of its own: what a filesystem is
//! bounded by, and where bytes persist, are decisions about a host.
//!
//! ```no_run
//! # async fn demo(wasm: Vec<u8>) -> Result<(), Box<dyn std::error::Error>> {
//! use berm::{call, Berm, Engine, EngineConfig};
//!
//! let engine = Engine::new(&EngineConfig::default())?;
//! let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
//! berm.deploy("example", &wasm)?;
//!
//! // The outer result is the host's (a missing tool, a trap); the inner one is
//! // the program reporting failure, which is a result the model should see.
//! match berm.call(None, "example", "echo", br#"{"message":"hello"}"#.to_vec()).await? {
//!     Ok(result) => println!("{result}"),
//!     Err(failure) => eprintln!("{failure}"),
//! }
//! # Ok(()) }
//! ```
//!
//! The ABI is specified in `docs/design/abi.md`; [`Manifest::from_image`]
//! reads what a module claims and reaches without compiling or running it.

mod cache;
pub mod call;
mod component;
mod component_json;
mod component_link;
mod component_wasi;
mod engine;
mod error;
mod host_memory;
mod invocation;
mod linker;
mod program;
mod progress;
mod shape;
mod sys;
pub mod syscall;

pub use berm_abi as abi;
pub use berm_abi::grant::Grant;
pub use berm_manifest::{self as manifest, Digest, DigestParseError, Manifest, ManifestError};
pub use call::{Admitted, Berm, CallGate, CallOptions, CallTrace, CodeDirs};
pub use engine::{
    CpuProfile, Engine, EngineConfig, EngineError, GuestArch, Limits, PORTABLE_FLAGS,
    PORTABLE_TARGET, Precompiled, UnknownArch,
};
pub use error::{Ask, Content, DeployError, Error, Failure, Output};
pub use host_memory::{DEFAULT_HOST_MEMORY_BYTES, HostMemory, OverBudget, Reservation};
pub use invocation::{CheckedArgs, Target};
pub use program::{CompileSource, DeployOptions, Deployed, Grants, ProgramInfo};
pub use progress::{Progress, ProgressSink};
pub use syscall::{Pending, Reply, Syscall, SyscallContext, SyscallError};
