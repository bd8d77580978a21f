//! The native code bound to its program: re-derived, not taken on the host's word.
//!
//! berm-vmm compiles every program on the host and the guest maps that code; the record
//! measures it (`apps[].code[].sha256`). Cranelift under a pinned Wasmtime, with fixed engine
//! settings and target, is deterministic (attest/tests/code.rs proves it for berm's settings,
//! parallel compilation on and off), so a verifier holding the wasm files compiles each one
//! with the same engine ([`berm::EngineConfig::vm`], as vmm/src/code.rs does) and compares.
//! That needs this berm's engine to be the record's: the fingerprint covers Wasmtime's version
//! and every setting, so a verifier of another release says the code is unverified rather
//! than refusing it wrongly.
//!
//! Compiling takes tens of milliseconds to seconds per program, so results are cached by
//! their inputs — program digest, engine fingerprint, target — under
//! `$XDG_CACHE_HOME/berm/attest-code/` (else `~/.cache/berm/attest-code/`). The cache is the
//! verifier's own: it holds only digests this verifier computed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sha2::{Digest as _, Sha256};

use berm_vm_protocol::host::EngineMeasurement as CodeEngine;

use crate::canonical::is_sha256;
use crate::problem::{Code, Problem};
use crate::record::Record;

/// How deep [`Programs::from_dir`] looks for wasm files.
const MAX_DEPTH: usize = 8;
/// A wasm file larger than this is not read (berm refuses to deploy it anyway).
const MAX_WASM: u64 = 256 << 20;

/// The engine this berm compiles code for a guest of architecture `arch` with (berm-vmm
/// uses the same one), and what it calls itself in a record.
pub fn engine(arch: berm::GuestArch) -> Result<&'static (berm::Engine, CodeEngine), String> {
    type Built = OnceLock<Result<(berm::Engine, CodeEngine), String>>;
    static ENGINES: [Built; berm::GuestArch::ALL.len()] = [const { OnceLock::new() }; 2];
    let slot = berm::GuestArch::ALL
        .iter()
        .position(|a| *a == arch)
        .and_then(|i| ENGINES.get(i))
        .ok_or_else(|| format!("no engine slot for {arch}"))?;
    slot.get_or_init(|| {
        // compile_only: the code is the same as a threaded engine's (tests/code.rs), and
        // berm-vmm, which confines itself later with a seccomp filter that needs one
        // thread, starts none; neither does a verifier.
        let engine = berm::Engine::compile_only(&berm::EngineConfig::vm_for(arch))
            .map_err(|e| e.to_string())?;
        let identity = CodeEngine {
            fingerprint: engine.fingerprint().to_owned(),
            target: arch.portable_target().to_owned(),
        };
        Ok((engine, identity))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The guest architecture whose code targets `target` (a record's `code_engine.target`).
pub fn arch_of_target(target: &str) -> Option<berm::GuestArch> {
    berm::GuestArch::ALL
        .into_iter()
        .find(|arch| arch.portable_target() == target)
}

/// Why a programs directory could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading the programs in {path} failed")]
pub struct ProgramsError {
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// Wasm files by sha256, and where re-derived code digests are cached.
pub struct Programs {
    by_digest: HashMap<String, PathBuf>,
    cache: Option<PathBuf>,
}

impl Programs {
    /// Every `*.wasm` file under `dir` (app folders nest them), cached in
    /// [`Programs::default_cache`].
    pub fn from_dir(dir: &Path) -> Result<Programs, ProgramsError> {
        let mut by_digest = HashMap::new();
        collect(dir, 0, &mut by_digest)?;
        Ok(Programs {
            by_digest,
            cache: Self::default_cache(),
        })
    }

    /// `$XDG_CACHE_HOME/berm/attest-code`, else `~/.cache/berm/attest-code`.
    pub fn default_cache() -> Option<PathBuf> {
        let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let base = nonempty("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
        Some(base.join("berm").join("attest-code"))
    }

    /// The same programs with results cached in `dir` (or nowhere).
    pub fn with_cache(self, dir: Option<PathBuf>) -> Programs {
        Programs { cache: dir, ..self }
    }

    /// How many distinct programs were found.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether none was found.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// sha256 of the code `engine` makes from the program with `program_sha256`: from the
    /// cache, or compiled now. `Err(Unverified)` when it cannot be re-derived here,
    /// `Err(Failed)` when the program does not compile.
    fn code_sha256(&self, program_sha256: &str, engine: &CodeEngine) -> Result<String, Derive> {
        let arch = arch_of_target(&engine.target).ok_or_else(|| {
            Derive::Unverified(format!(
                "the record's code is for target {}, which this berm does not compile for",
                engine.target
            ))
        })?;
        let (ours, identity) = self::engine(arch).map_err(|e| {
            Derive::Unverified(format!(
                "this berm cannot build its {arch} guest engine: {e}"
            ))
        })?;
        if identity != engine {
            return Err(Derive::Unverified(format!(
                "this berm compiles with engine {} for {}, the record's code is from engine {} for {}: verify with the berm release that booted it",
                identity.fingerprint, identity.target, engine.fingerprint, engine.target
            )));
        }
        let cached = self.cache.as_ref().map(|dir| {
            dir.join(format!(
                "{program_sha256}-{}-{}",
                engine.fingerprint, engine.target
            ))
        });
        if let Some(path) = &cached
            && let Ok(text) = std::fs::read_to_string(path)
            && is_sha256(text.trim())
        {
            return Ok(text.trim().to_owned());
        }
        let Some(wasm_path) = self.by_digest.get(program_sha256) else {
            return Err(Derive::Unverified(format!(
                "no wasm file with sha256 {program_sha256} among the programs given"
            )));
        };
        let wasm = std::fs::read(wasm_path)
            .map_err(|e| Derive::Unverified(format!("reading {}: {e}", wasm_path.display())))?;
        // The file could have changed since it was indexed.
        if hex::encode(Sha256::digest(&wasm)) != program_sha256 {
            return Err(Derive::Unverified(format!(
                "{} changed while verifying",
                wasm_path.display()
            )));
        }
        let compiled = ours
            .precompile(&wasm)
            .map_err(|e| Derive::Failed(e.to_string()))?;
        let digest = hex::encode(Sha256::digest(&compiled.bytes));
        if let Some(path) = &cached {
            // Best effort: a verifier that cannot cache compiles again next time.
            let _ = store(path, &digest);
        }
        Ok(digest)
    }
}

enum Derive {
    Unverified(String),
    Failed(String),
}

fn store(path: &Path, digest: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, digest)?;
    std::fs::rename(&tmp, path)
}

fn collect(
    dir: &Path,
    depth: usize,
    out: &mut HashMap<String, PathBuf>,
) -> Result<(), ProgramsError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ProgramsError { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        // Links are followed (a programs dir may point at build output), files are bounded.
        let meta = std::fs::metadata(&path).map_err(io(&path))?;
        if meta.is_dir() {
            if depth < MAX_DEPTH {
                collect(&path, depth + 1, out)?;
            }
        } else if meta.is_file()
            && meta.len() <= MAX_WASM
            && path.extension().is_some_and(|e| e == "wasm")
        {
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            out.entry(hex::encode(Sha256::digest(&bytes)))
                .or_insert(path);
        }
    }
    Ok(())
}

/// Checks every measured code digest against the code its program compiles to, or reports
/// it unverified when that cannot be done here.
pub(crate) fn check_code(record: &Record, programs: Option<&Programs>, p: &mut Vec<Problem>) {
    let mut add = |code, detail: String| p.push(Problem { code, detail });
    for app in &record.apps {
        for code in &app.code {
            let field = format!("apps[{}].code[{}]", app.index, code.program);
            let Some(programs) = programs else {
                add(
                    Code::CodeUnverified,
                    format!("{field} was not re-derived from its program (give --programs DIR)"),
                );
                continue;
            };
            let Some(engine) = &record.code_engine else {
                add(
                    Code::CodeUnverified,
                    format!("{field}: the record names no engine to re-derive it with"),
                );
                continue;
            };
            let Some(program) = app.programs.iter().find(|m| m.name == code.program) else {
                add(
                    Code::CodeUnverified,
                    format!("{field}: the record measured no program of that name"),
                );
                continue;
            };
            match programs.code_sha256(&program.sha256, engine) {
                Ok(derived) if derived == code.sha256 => {}
                Ok(derived) => add(
                    Code::CodeNotReproduced,
                    format!(
                        "{field} is {}, but compiling program {} ({}) with engine {} for {} gives {derived}",
                        code.sha256,
                        program.name,
                        program.sha256,
                        engine.fingerprint,
                        engine.target
                    ),
                ),
                Err(Derive::Failed(e)) => add(
                    Code::CodeNotReproduced,
                    format!(
                        "{field}: program {} ({}) does not compile: {e}",
                        program.name, program.sha256
                    ),
                ),
                Err(Derive::Unverified(why)) => {
                    add(Code::CodeUnverified, format!("{field}: {why}"))
                }
            }
        }
    }
}
