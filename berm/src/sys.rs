//! The one unsafe operation berm performs: loading compiled code from disk.

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
    // SAFETY: the only files in the compiled-code cache are ones berm wrote
    // itself with `Module::serialize`, renamed into place atomically after an
    // fsync (so a reader never sees a torn file), in a directory the embedder
    // chose and owns (`$BERM_HOME/cache`, mode 0700 under bermd). Someone who
    // can write there can already replace the host binary; see
    // docs/threat-model.md. Files from another engine configuration are
    // refused by Wasmtime's own compatibility check, and berm then recompiles.
    unsafe { wasmtime::Module::deserialize_file(engine, path) }
}
