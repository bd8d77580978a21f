//! Machine code for the guest, compiled on the host.
//!
//! Under QEMU/TCG, Cranelift inside the guest is about 200× slower than on the host
//! (docs/design/microvm-findings.md), so compiling every program at every boot would decide
//! boot-to-first-answer. berm-vmm therefore compiles each program here, with exactly the
//! engine settings the guest's bermd uses ([`berm::EngineConfig::vm_for`] the guest's
//! architecture: a fixed musl target and a baseline CPU feature set instead of this host's;
//! an x86_64 host compiles for an aarch64 guest as readily), and ships the code in the app's
//! image; the guest loads it with a ~20 ms deserialize. The host is already trusted to
//! provide the kernel and rootfs, so trusting its compiler adds nothing new; the code files'
//! digests are in the measurement line.
//!
//! Compiled code is cached under `<artifact store>/code/<digest>-<fingerprint>.cwasm`, where
//! the fingerprint covers Wasmtime's version, the target and every setting, so stale code or
//! another architecture's is never used.

use std::path::PathBuf;

use berm::GuestArch;

use sha2::{Digest as _, Sha256};

/// Why a program could not be compiled for the guest.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// The guest's engine settings could not be built here.
    #[error("building the guest's WebAssembly engine failed: {0}")]
    Engine(String),
    /// Wasmtime refused the module (the same refusal a deploy would give).
    #[error("{0}")]
    Compile(String),
    /// The code cache could not be written or read.
    #[error("code cache {path}: {source}")]
    Cache {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One program's code, ready to copy into an app image.
#[derive(Debug)]
pub struct Compiled {
    /// The name the guest's engine looks for.
    pub file_name: String,
    /// Where the code is (in the cache).
    pub path: PathBuf,
    /// sha256 of the code file.
    pub sha256: String,
    /// Whether it was already in the cache.
    pub cached: bool,
}

/// The guest's engine: the one `berm attest verify` re-derives code with (compile_only: no
/// ticker or compiler threads, because berm-vmm confines itself later and its seccomp filter
/// needs it single-threaded).
fn engine(arch: GuestArch) -> Result<&'static berm::Engine, CodeError> {
    berm_attest::code_engine(arch)
        .map(|(engine, _)| engine)
        .map_err(CodeError::Engine)
}

/// The guest engine's fingerprint and target, as the measurement line names them: what a
/// verifier needs to re-derive each code digest from its program.
pub fn engine_identity(arch: GuestArch) -> Option<berm_vm_protocol::host::EngineMeasurement> {
    berm_attest::code_engine(arch).ok().map(|(_, identity)| {
        berm_vm_protocol::host::EngineMeasurement {
            fingerprint: identity.fingerprint.clone(),
            target: identity.target.clone(),
        }
    })
}

fn cache_dir() -> PathBuf {
    match berm_pins::ArtifactStore::from_env() {
        Some(store) => store.root().join("code"),
        None => std::env::temp_dir().join("berm-vmm-code"),
    }
}

/// The code for `wasm` on a guest of architecture `arch`, from the cache or compiled now.
pub fn precompiled(wasm: &[u8], arch: GuestArch) -> Result<Compiled, CodeError> {
    let engine = engine(arch)?;
    let digest = berm::Digest::of(wasm);
    let file_name = format!("{}-{}.cwasm", digest.hex(), engine.fingerprint());
    let dir = cache_dir();
    let path = dir.join(&file_name);
    let cache_err = |path: &PathBuf| {
        let path = path.clone();
        move |source| CodeError::Cache { path, source }
    };
    if let Ok(bytes) = std::fs::read(&path) {
        return Ok(Compiled {
            file_name,
            sha256: hex::encode(Sha256::digest(&bytes)),
            path,
            cached: true,
        });
    }
    let compiled = engine
        .precompile(wasm)
        .map_err(|e| CodeError::Compile(e.to_string()))?;
    std::fs::create_dir_all(&dir).map_err(cache_err(&dir))?;
    berm_durable::write_atomic(&path, &compiled.bytes).map_err(cache_err(&path))?;
    Ok(Compiled {
        file_name,
        sha256: hex::encode(Sha256::digest(&compiled.bytes)),
        path,
        cached: false,
    })
}
