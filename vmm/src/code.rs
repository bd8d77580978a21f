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
//!
//! A cached file is trusted as it is: the guest maps it as native code. So the cache is only
//! ever a directory nobody but the user could have written ([`CodeCache::open`]): the store's
//! `code/`, made mode 0700, owned by the user, in a path no other user can rename or replace
//! (every directory above it owned by the user or root and not writable by group or others,
//! unless sticky). There is no fallback to a shared directory: without a store there is no
//! cache, and a run with apps is refused.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use berm::GuestArch;
use berm_vm_protocol::private_dir::{self, NotPrivate};

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

/// Why the code cache cannot be used: each says which directory and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CodeCacheError {
    /// No artifact store is named, so there is no private place for the cache.
    #[error(
        "berm-vmm keeps the apps' compiled code in <artifact store>/code, and none of BERM_VM_ARTIFACTS, XDG_CACHE_HOME or HOME is set to say where the store is; set one (berm-vmm never falls back to a shared directory such as /tmp, where another user could put code the guest would run)"
    )]
    NoStore,
    /// Creating, reading or securing it failed.
    #[error("code cache {path}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The cache directory itself is not the user's alone.
    #[error(
        "code cache {path} {why}: the guest runs the code cached there as native code, so berm-vmm uses only a directory of this user's that nobody else can write; {fix}"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: NotPrivate,
        /// What to do.
        fix: &'static str,
    },
    /// A directory above the cache lets another user rename or replace it.
    #[error(
        "code cache {path}: the directory above it, {ancestor}, {why}, so another user could replace the cache with code of their own; use a store whose directories are yours or root's and not writable by others (BERM_VM_ARTIFACTS)"
    )]
    Ancestor {
        /// The cache directory.
        path: PathBuf,
        /// The directory above it.
        ancestor: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// The code cache, checked: a directory only this user could have written.
#[derive(Clone, Debug)]
pub struct CodeCache {
    dir: PathBuf,
}

impl CodeCache {
    /// The cache of the environment's artifact store (`<store>/code`, the store as
    /// [`berm_pins::ArtifactStore::from_env`] finds it), made if missing and checked.
    ///
    /// # Errors
    /// [`CodeCacheError::NoStore`] without a store; else as [`CodeCache::at`].
    pub fn open() -> Result<Self, CodeCacheError> {
        let store = berm_pins::ArtifactStore::from_env().ok_or(CodeCacheError::NoStore)?;
        Self::at(&store.root().join("code"))
    }

    /// The cache at `dir`: made (mode 0700, with the directories above it) if missing; else
    /// it must be a directory of this user's that group and others cannot write. One that
    /// group or others can only read (what berm-vmm made before this rule) is narrowed to
    /// 0700 — nobody else could have written in it. Every directory above it must belong to
    /// the user or root and not be writable by group or others, unless sticky (`/tmp`).
    ///
    /// # Errors
    /// Which directory breaks which rule, and what to do.
    pub fn at(dir: &Path) -> Result<Self, CodeCacheError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| CodeCacheError::Io { path, source }
        };
        let dir = std::path::absolute(dir).map_err(io(dir))?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        let user = crate::sys::euid();
        let meta = std::fs::symlink_metadata(&dir).map_err(io(&dir))?;
        match private_dir::check(&meta, user) {
            Ok(()) => {}
            Err(NotPrivate::Open { mode }) if mode & 0o022 == 0 => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io(&dir))?;
            }
            Err(why) => {
                let fix = match why {
                    NotPrivate::Symlink => {
                        "remove the link (berm-vmm makes the directory itself), or set BERM_VM_ARTIFACTS to a store of your own"
                    }
                    NotPrivate::NotADirectory => {
                        "move it away (berm-vmm makes the directory itself)"
                    }
                    NotPrivate::NotOwned { .. } | NotPrivate::Open { .. } => {
                        "its files may have been written by another user: remove it (berm-vmm compiles the programs again), or set BERM_VM_ARTIFACTS to a store of your own"
                    }
                };
                return Err(CodeCacheError::NotPrivate {
                    path: dir,
                    why,
                    fix,
                });
            }
        }
        // From here on the cache is named by its real path, whose every directory is checked.
        let dir = std::fs::canonicalize(&dir).map_err(io(&dir))?;
        for ancestor in dir.ancestors().skip(1) {
            let meta = std::fs::metadata(ancestor).map_err(io(ancestor))?;
            let mode = meta.mode() & 0o7777;
            let why = if meta.uid() != user && meta.uid() != 0 {
                format!(
                    "belongs to uid {}, neither this user (uid {user}) nor root",
                    meta.uid()
                )
            } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
                format!("has mode {mode:o}, writable by group or others and not sticky")
            } else {
                continue;
            };
            return Err(CodeCacheError::Ancestor {
                path: dir.clone(),
                ancestor: ancestor.to_owned(),
                why,
            });
        }
        Ok(Self { dir })
    }

    /// The checked directory (its real path).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The code for `wasm` on a guest of architecture `arch`, from the cache or compiled now.
    ///
    /// # Errors
    /// The engine cannot be built, Wasmtime refuses the module, or the cache cannot be
    /// written.
    pub fn precompiled(&self, wasm: &[u8], arch: GuestArch) -> Result<Compiled, CodeError> {
        precompiled(&self.dir, wasm, arch)
    }
}

/// The code for `wasm` on a guest of architecture `arch`, from the cache `dir` (checked by
/// [`CodeCache::at`]) or compiled now.
fn precompiled(dir: &Path, wasm: &[u8], arch: GuestArch) -> Result<Compiled, CodeError> {
    let engine = engine(arch)?;
    let digest = berm::Digest::of(wasm);
    let file_name = format!("{}-{}.cwasm", digest.hex(), engine.fingerprint());
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
    berm_durable::write_atomic(&path, &compiled.bytes).map_err(cache_err(&path))?;
    Ok(Compiled {
        file_name,
        sha256: hex::encode(Sha256::digest(&compiled.bytes)),
        path,
        cached: false,
    })
}
