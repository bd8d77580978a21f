//! The Wasmtime engine berm runs programs on, and the bounds on every call.
//!
//! berm needs a particular engine: epoch interruption for deadlines, the
//! pooling allocator and copy-on-write memory images so that a fresh instance
//! per call costs microseconds, and a stack limit. [`Engine`] builds exactly
//! that and runs the epoch ticker, so an embedder cannot hand berm an engine
//! that would let a loop run forever.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::{DeployError, Digest, Manifest};

/// Up to this many dirty bytes of a finished call's memory are reset in
/// place rather than released to the kernel.
const KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// Most core instances one component may make (its core modules and the shims between
/// them); componentize-py's components, the largest here, make about twenty.
const COMPONENT_CORE_INSTANCES: u32 = 64;

/// Most linear memories one component may have.
const COMPONENT_MEMORIES: u32 = 4;

/// Bounds on one call. Every bound is an outer error when hit, with a message
/// naming it; the host never crashes and the next call is unaffected.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline for a call, shared by the calls it makes.
    #[serde(with = "millis", rename = "deadline_ms")]
    pub deadline: Duration,
    /// Largest linear memory a program may grow to, in bytes.
    pub memory_bytes: usize,
    /// Largest argument payload accepted, in bytes.
    pub max_args_bytes: usize,
    /// Largest result or failure message accepted, in bytes.
    pub max_result_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            max_args_bytes: 1 << 20,
            max_result_bytes: 4 << 20,
        }
    }
}

mod millis {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        <u64 as serde::Deserialize>::deserialize(d).map(Duration::from_millis)
    }
}

/// Which processor the engine compiles code for.
///
/// Compiled code is only ever loaded by an engine with the same target and
/// flags (the fingerprint in the code's file name covers both), so a host
/// that compiles for the microVM must use [`EngineConfig::vm_for`] with the
/// guest's architecture, exactly as the guest's bermd does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CpuProfile {
    /// This machine's target and every feature its CPU has (the fastest
    /// code, usable only here).
    #[default]
    Native,
    /// A guest bermd's target — [`GuestArch::portable_target`], a static
    /// musl binary — and a fixed baseline instruction set
    /// ([`GuestArch::portable_flags`]) instead of the features detected
    /// here, so code compiled on one machine runs on any CPU of that
    /// architecture that has the baseline. The architecture need not be this
    /// machine's: an x86_64 host compiles for an aarch64 guest.
    ///
    /// An engine with this profile in a program that is not itself built for
    /// that target (e.g. a glibc host) can precompile code but not run it:
    /// Wasmtime refuses with "target … does not match the host".
    Portable(GuestArch),
}

/// The processor architecture of a microVM guest: which kernel, rootfs and
/// compiled code it boots with. berm pins one kernel and rootfs per
/// architecture, and compiles each program for the guest it is shipped to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GuestArch {
    /// x86-64 (KVM, or QEMU's emulation elsewhere).
    X86_64,
    /// AArch64 (Apple's Hypervisor framework, KVM on arm64, or QEMU's
    /// emulation elsewhere).
    Aarch64,
}

impl GuestArch {
    /// Every architecture berm builds a guest for.
    pub const ALL: [GuestArch; 2] = [GuestArch::X86_64, GuestArch::Aarch64];

    /// The architecture this program was built for: the guest a host boots
    /// unless told otherwise (hardware virtualization runs only its own).
    #[cfg(target_arch = "x86_64")]
    pub const HOST: GuestArch = GuestArch::X86_64;
    /// The architecture this program was built for: the guest a host boots
    /// unless told otherwise (hardware virtualization runs only its own).
    #[cfg(target_arch = "aarch64")]
    pub const HOST: GuestArch = GuestArch::Aarch64;

    /// The name the pins, the command line and attestation records use
    /// (`x86_64`, `aarch64`; Rust's `target_arch`).
    pub const fn name(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "x86_64",
            GuestArch::Aarch64 => "aarch64",
        }
    }

    /// The target triple the guest's bermd is built for, which code for it
    /// is compiled for.
    pub const fn portable_target(self) -> &'static str {
        match self {
            GuestArch::X86_64 => "x86_64-unknown-linux-musl",
            GuestArch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The Cranelift ISA flags code for this guest may use. x86_64:
    /// x86-64-v2 (SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B), which
    /// every x86-64 CPU of the last fifteen years and every common
    /// hypervisor's default model has. aarch64: none beyond armv8.0, which
    /// every aarch64 CPU has (Apple's M-series and QEMU's `cortex-a72` alike).
    pub const fn portable_flags(self) -> &'static [&'static str] {
        match self {
            GuestArch::X86_64 => &[
                "has_sse3",
                "has_ssse3",
                "has_sse41",
                "has_sse42",
                "has_popcnt",
                "has_cmpxchg16b",
            ],
            GuestArch::Aarch64 => &[],
        }
    }
}

impl std::fmt::Display for GuestArch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A guest architecture name that is not one berm builds for.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown guest architecture {0:?}: berm builds guests for x86_64 and aarch64")]
pub struct UnknownArch(pub String);

impl std::str::FromStr for GuestArch {
    type Err = UnknownArch;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        GuestArch::ALL
            .into_iter()
            .find(|arch| arch.name() == name)
            .ok_or_else(|| UnknownArch(name.to_owned()))
    }
}

/// The target triple of this build's own guest ([`GuestArch::HOST`]).
pub const PORTABLE_TARGET: &str = GuestArch::HOST.portable_target();

/// The Cranelift ISA flags of this build's own guest ([`GuestArch::HOST`]).
pub const PORTABLE_FLAGS: &[&str] = GuestArch::HOST.portable_flags();

/// How the engine is built. The defaults suit a host serving a few hundred
/// concurrent calls; every field can be raised.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Default bounds for calls of programs deployed without their own.
    pub limits: Limits,
    /// Largest wasm stack, in bytes; unbounded recursion traps past it.
    pub max_wasm_stack: usize,
    /// Upper bound on any program's memory cap (the pooling allocator's slot
    /// size); a per-program [`Limits::memory_bytes`] above it is refused.
    pub max_memory_bytes: usize,
    /// How many instances may be alive at once (concurrent calls, counting
    /// nested calls). Past it, a call fails with a clear error.
    pub max_instances: u32,
    /// How often the deadline clock ticks; deadlines are this precise.
    pub epoch_tick: Duration,
    /// Which processor code is compiled for.
    pub cpu: CpuProfile,
}

impl EngineConfig {
    /// The one configuration of a microVM of this build's own architecture:
    /// the guest's bermd loads code with it. [`EngineConfig::vm_for`] of
    /// [`GuestArch::HOST`].
    pub fn vm() -> EngineConfig {
        Self::vm_for(GuestArch::HOST)
    }

    /// The one configuration of a microVM of architecture `arch`: berm-vmm
    /// precompiles with it on the host (whatever the host's architecture)
    /// and that guest's bermd loads code with it, so their fingerprints
    /// agree. [`CpuProfile::Portable`] and the defaults.
    pub fn vm_for(arch: GuestArch) -> EngineConfig {
        EngineConfig {
            cpu: CpuProfile::Portable(arch),
            ..EngineConfig::default()
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            limits: Limits::default(),
            max_wasm_stack: 512 << 10,
            max_memory_bytes: 1 << 30,
            max_instances: 256,
            epoch_tick: Duration::from_millis(1),
            cpu: CpuProfile::Native,
        }
    }
}

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Wasmtime refused the configuration.
    #[error("could not configure the WebAssembly engine: {0}")]
    Configure(String),
    /// The deadline clock could not be started; without it no deadline fires.
    #[error("could not start the epoch ticker thread")]
    Ticker(#[source] std::io::Error),
    /// The default memory cap exceeds the pool's slot size.
    #[error("default memory cap {cap} bytes exceeds max_memory_bytes {max} bytes")]
    MemoryCap {
        /// The requested cap.
        cap: usize,
        /// The pool's slot size.
        max: usize,
    },
}

/// The engine berm runs programs on: configured for per-call instantiation
/// and deadlines, with its epoch ticker running for as long as it lives.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    wasmtime: wasmtime::Engine,
    fingerprint: String,
    config: EngineConfig,
    stop: Arc<AtomicBool>,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Engine {
    /// Builds the engine and starts its epoch ticker.
    ///
    /// # Errors
    /// [`EngineError::Configure`] when Wasmtime refuses the configuration (a target or CPU
    /// flag it does not know, pool sizes it cannot reserve), [`EngineError::MemoryCap`] for a
    /// default memory cap above the pool's slot, [`EngineError::Ticker`] when the ticker
    /// thread cannot start.
    pub fn new(config: &EngineConfig) -> Result<Engine, EngineError> {
        Self::build(config, true)
    }

    /// An engine for [`Engine::precompile`] only: no epoch ticker thread and no compiler
    /// threads, so a process that must stay single-threaded (berm-vmm, which confines itself
    /// with a seccomp filter that needs one thread) can compile with it. Its code and file
    /// names are the same as an engine from [`Engine::new`] with the same config; calls made
    /// on it would never reach their deadline, so make none.
    ///
    /// # Errors
    /// As [`Engine::new`], without the ticker.
    pub fn compile_only(config: &EngineConfig) -> Result<Engine, EngineError> {
        Self::build(config, false)
    }

    fn build(config: &EngineConfig, ticker: bool) -> Result<Engine, EngineError> {
        if config.limits.memory_bytes > config.max_memory_bytes {
            return Err(EngineError::MemoryCap {
                cap: config.limits.memory_bytes,
                max: config.max_memory_bytes,
            });
        }
        let mut pool = PoolingAllocationConfig::default();
        // A component is several core modules (a language runtime, WASI adapters, shims):
        // the pool holds, on top of one slot per call, room for components of up to
        // COMPONENT_CORE_INSTANCES core instances, their tables and a few memories.
        let instances = config.max_instances;
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(COMPONENT_CORE_INSTANCES / 4))
            .total_memories(instances.saturating_mul(2))
            .total_tables(instances.saturating_mul(COMPONENT_CORE_INSTANCES / 4))
            .total_stacks(instances)
            .max_core_instances_per_component(COMPONENT_CORE_INSTANCES)
            .max_memories_per_component(COMPONENT_MEMORIES)
            .max_tables_per_component(COMPONENT_CORE_INSTANCES)
            .max_memories_per_module(1)
            .max_tables_per_module(1)
            .max_memory_size(config.max_memory_bytes)
            // Reset only the pages a call dirtied, with memcpy from the image,
            // instead of madvise: no syscall, no TLB shootdown, and no page
            // faults on the next call (Linux ≥ 6.7; ignored elsewhere).
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(64 << 10);

        let mut wasm = wasmtime::Config::new();
        wasm.wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(config.max_wasm_stack)
            // The fiber stack must hold the wasm stack plus the host frames
            // of syscalls and nested calls made from it.
            .async_stack_size(config.max_wasm_stack + (1 << 20))
            .memory_init_cow(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        if !ticker {
            wasm.parallel_compilation(false);
        }
        if let CpuProfile::Portable(arch) = config.cpu {
            let target = arch.portable_target();
            // Another architecture's Cranelift backend is compiled in only where a crate asks
            // for it (berm-vmm does, for aarch64 guests on x86_64 hosts); without it Wasmtime
            // says "support for architecture disabled at compile time".
            wasm.target(target)
                .map_err(|e| EngineError::Configure(format!("target {target}: {e:#}")))?;
            crate::sys::enable_isa_flags(&mut wasm, arch.portable_flags());
        }
        let wasmtime =
            wasmtime::Engine::new(&wasm).map_err(|e| EngineError::Configure(format!("{e:#}")))?;

        let stop = Arc::new(AtomicBool::new(false));
        if ticker {
            spawn_ticker(wasmtime.weak(), config.epoch_tick, stop.clone())
                .map_err(EngineError::Ticker)?;
        }
        let fingerprint = crate::cache::fingerprint(&wasmtime);
        Ok(Engine {
            inner: Arc::new(EngineInner {
                fingerprint,
                wasmtime,
                config: config.clone(),
                stop,
            }),
        })
    }

    /// The underlying Wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner.wasmtime
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Which compiled code this engine can load: 16 hex digits of a sha256 of
    /// Wasmtime's compatibility hash (its version, target, and every compiler
    /// and ISA flag). Part of every compiled-code file name.
    pub fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }

    /// Compiles `wasm` for this engine's target without loading it, for a
    /// host that ships code to another (berm-vmm for the microVM). The module
    /// is checked exactly as [`crate::Berm::deploy_with`] checks it, so a
    /// module deploy would refuse is refused here with the same error.
    /// Store the bytes under [`Precompiled::file_name`] in the directory the
    /// loading side passes as [`crate::CodeDirs::precompiled`].
    ///
    /// # Errors
    /// The [`DeployError`] a deploy of `wasm` would give: a manifest, shape or compile
    /// refusal.
    pub fn precompile(&self, wasm: &[u8]) -> Result<Precompiled, DeployError> {
        let manifest = Manifest::from_image(wasm)?;
        manifest.check()?;
        let engine = &self.inner.wasmtime;
        let bytes = if manifest.is_component() {
            engine.precompile_component(wasm)
        } else {
            crate::shape::check(wasm)?;
            engine.precompile_module(wasm)
        }
        .map_err(|e| DeployError::Compile(format!("{e:#}")))?;
        let digest = Digest::of(wasm);
        Ok(Precompiled {
            file_name: crate::cache::file_name(&digest, self.fingerprint()),
            digest,
            bytes,
        })
    }
}

/// Compiled code made by [`Engine::precompile`].
#[derive(Debug, Clone)]
pub struct Precompiled {
    /// The digest of the wasm it was compiled from.
    pub digest: Digest,
    /// The file name the loading side looks for:
    /// `<digest hex>-<engine fingerprint>.cwasm`.
    pub file_name: String,
    /// The code, as `wasmtime::Module::serialize` would write it.
    pub bytes: Vec<u8>,
}

/// Advances the engine's epoch every `tick` until the engine is dropped.
/// One thread per engine; it holds only a weak reference.
fn spawn_ticker(
    engine: wasmtime::EngineWeak,
    tick: Duration,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("berm-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                match engine.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map(drop)
}
