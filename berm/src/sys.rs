//! The unsafe operations berm performs: loading compiled code from disk, and
//! naming the instruction set it is compiled for.

use std::path::Path;

/// Loads a module that [`wasmtime::Module::serialize`] wrote.
///
/// Wasmtime marks this unsafe because the bytes are native code that will be
/// executed: it checks the header, version and engine settings, but cannot
/// check that the code is what the compiler produced.
pub(crate) fn deserialize_file(
    engine: &wasmtime::Engine,
    path: &Path,
) -> wasmtime::Result<wasmtime::Module> {
    // SAFETY: the files loaded are of two kinds. The compiled-code cache
    // holds only files berm wrote itself with `Module::serialize`, renamed
    // into place atomically after an fsync (so a reader never sees a torn
    // file), in a directory the embedder chose and owns (`$BERM_HOME/cache`,
    // mode 0700 under bermd). The read-only precompiled directory holds
    // `Engine::precompile` output that the embedder placed there itself
    // (berm-vmm on the host, shared read-only into the microVM, whose
    // measurement covers it). Someone who can write either can already
    // replace the binary that loads them; see docs/threat-model.md. Files
    // from another engine configuration are refused by Wasmtime's own
    // compatibility check, and berm then compiles.
    unsafe { wasmtime::Module::deserialize_file(engine, path) }
}

/// Loads a component that [`wasmtime::component::Component::serialize`] wrote: the same
/// files, from the same places, as [`deserialize_file`].
pub(crate) fn deserialize_component_file(
    engine: &wasmtime::Engine,
    path: &Path,
) -> wasmtime::Result<wasmtime::component::Component> {
    // SAFETY: as for `deserialize_file`: only code berm serialized itself (the cache) or the
    // embedder placed from `Engine::precompile` (the precompiled directory) is loaded, and
    // Wasmtime checks the header, version and engine settings.
    unsafe { wasmtime::component::Component::deserialize_file(engine, path) }
}

/// Enables Cranelift ISA flags by name, instead of detecting this CPU's.
pub(crate) fn enable_isa_flags(config: &mut wasmtime::Config, flags: &[&str]) {
    for flag in flags {
        // SAFETY: Wasmtime marks this unsafe because a flag the CPU running
        // the code lacks would make it execute unsupported instructions. The
        // flags passed are the fixed baseline of `CpuProfile::Portable`
        // (x86-64-v2, or none beyond armv8.0), and Wasmtime itself checks, before running any code
        // from such an engine, that the host CPU has every enabled flag
        // (`check_compatible_with_native_host`), refusing instead. An unknown
        // flag name fails `Engine::new`, it is not ignored.
        unsafe {
            config.cranelift_flag_enable(flag);
        }
    }
}
