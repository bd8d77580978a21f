//! The berm app folder: `berm.toml` and the wasm files of its programs.
//!
//! An app is the unit a host runs: a name (which is also its tag — the
//! cgroup `/berm/apps/<tag>` and the directory `/workspace/<tag>` inside the
//! microVM), the resource limits of the whole app, and one or more programs
//! with their grants. The same folder means the same thing under `bermd
//! --app` on the host and inside the VM, so nothing in it may name a host
//! path: wasm files are relative and stay inside the folder, and `fs` grants
//! are relative to a directory bermd chooses ([`Program::resolve_grants`]).
//!
//! [`load`] reads and checks everything before anything is deployed, so a
//! host either runs the whole folder or refuses it with a message naming the
//! file, the field and what is allowed. This crate is linked into berm-init
//! (a static musl PID 1) and berm-vmm: it stays free of wasmtime and async
//! runtimes. The format is documented in `docs/apps.md`.
#![forbid(unsafe_code)]

pub mod own_paths;
pub mod secret_file;
pub mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The one grant type, re-exported: a folder's grants are [`Grant`]s.
pub use berm_abi::grant::{Grant, GrantParseError};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
pub use store::{ImageRef, ProgramStore, StoreError};

/// The manifest's file name inside an app folder.
pub const MANIFEST: &str = "berm.toml";

/// Largest `berm.toml` read; a manifest is a few hundred bytes.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// Largest wasm file [`Program::read`] accepts (what bermd's control API
/// accepts too).
pub const MAX_WASM_BYTES: u64 = 64 << 20;

/// Most programs one app may hold.
pub const MAX_PROGRAMS: usize = 64;

/// Defaults and ranges of `[limits]`, in the units of `berm.toml`.
pub mod defaults {
    /// `cpu` when absent: one core.
    pub const CPU: f64 = 1.0;
    /// Smallest `cpu`.
    pub const CPU_MIN: f64 = 0.01;
    /// Largest `cpu`.
    pub const CPU_MAX: f64 = 64.0;
    /// `memory_mb` when absent.
    pub const MEMORY_MB: u64 = 256;
    /// Smallest `memory_mb`: bermd itself needs this much.
    pub const MEMORY_MB_MIN: u64 = 16;
    /// Largest `memory_mb`.
    pub const MEMORY_MB_MAX: u64 = 65536;
    /// `pids` when absent.
    pub const PIDS: u32 = 64;
    /// Smallest `pids`: bermd's own threads.
    pub const PIDS_MIN: u32 = 8;
    /// Largest `pids`.
    pub const PIDS_MAX: u32 = 4096;
    /// Largest `call_deadline_ms` (ten minutes); the smallest is 1.
    pub const CALL_DEADLINE_MS_MAX: u64 = 600_000;
    /// Largest per-program `memory_mb`: berm's engine caps one program's
    /// linear memory at 1 GiB.
    pub const PROGRAM_MEMORY_MB_MAX: u64 = 1024;
}

/// cgroup v2 `cpu.max` period, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// An app folder, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    /// The folder, canonical and absolute.
    pub dir: PathBuf,
    /// The app's name, also its tag.
    pub name: String,
    /// Its programs, in the order `berm.toml` lists them.
    pub programs: Vec<Program>,
    /// Limits of the whole app (defaults filled in).
    pub limits: Limits,
    /// The deadline of every call, when set; otherwise berm's default.
    pub call_deadline_ms: Option<u64>,
}

/// One `[[program]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The name it is deployed under; its tools are `name.tool`.
    pub name: String,
    /// The wasm file, absolute: `dir.join(wasm_relative)`; for a program named by
    /// [`Program::image`], its file in the program store once [`App::resolve_images`] found
    /// it (empty before).
    pub wasm: PathBuf,
    /// The wasm file as `berm.toml` names it, relative to the folder; or its image
    /// reference.
    pub wasm_relative: String,
    /// `image = "REGISTRY/REPO@sha256:…"`: the program is pulled into a program store
    /// ([`store`]) rather than kept in the folder.
    pub image: Option<ImageRef>,
    /// The sha256 (hex) the program's bytes must have, when known: an image's layer
    /// digest. [`Program::read`] refuses other bytes.
    pub expected_sha256: Option<String>,
    /// `accept = "sha256:…"`: the version (by the sha256 of its bytes) whose changes to
    /// what the model reads or what the program may reach, against what runs now, the
    /// folder's author has reviewed and accepts, as `--accept` would. It holds for those
    /// bytes only: once the program changes again, the upgrade is refused until accepted.
    pub accept: Option<String>,
    /// Its grants, read by berm's one grant parser (`fs=DIR` with DIR relative to the
    /// directory bermd chooses; see [`Program::resolve_grants`]).
    pub grants: Vec<Grant>,
    /// This program's memory cap in MiB, when set.
    pub memory_mb: Option<u64>,
    /// `[program.secrets]`: where the host reads each of this program's secrets, by name.
    /// Per program, so two programs that each bind `TOKEN` never share a value. Host paths,
    /// outside the folder and berm's own directories ([`secret_file`]), read only by the
    /// host side (bermd on the host, berm-vmm's dialer for a VM): the value never enters the
    /// folder, the guest or wasm memory.
    pub secret_files: BTreeMap<String, PathBuf>,
    /// `[program.serve_as]`: the name MCP clients see for a tool, by the tool's own name,
    /// instead of `{program}_{tool}` (for a client or fixture that expects a given name).
    /// Grants and `berm.call` keep the tool's own name.
    pub serve_as: BTreeMap<String, String>,
}

/// The app's resource limits, enforced by the cgroup berm-init creates for
/// it inside the VM (the host's bermd does not enforce them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU bandwidth in thousandths of a core.
    pub cpu_millicores: u32,
    /// Memory of the whole app (bermd and every call), MiB.
    pub memory_mb: u64,
    /// Most processes and threads.
    pub pids: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_millicores: (defaults::CPU * 1000.0) as u32,
            memory_mb: defaults::MEMORY_MB,
            pids: defaults::PIDS,
        }
    }
}

impl Limits {
    /// The cgroup v2 `cpu.max` value: `"<quota> <period>"` with a 100 ms
    /// period (`"100000 100000"` for one core).
    pub fn cpu_max(&self) -> String {
        let quota = u64::from(self.cpu_millicores) * CPU_PERIOD_US / 1000;
        format!("{quota} {CPU_PERIOD_US}")
    }

    /// The cgroup v2 `memory.max` value, in bytes (swap is set to 0 beside it).
    pub fn memory_max_bytes(&self) -> u64 {
        self.memory_mb << 20
    }
}

/// Why an app folder was refused. Every message names the file, the field or
/// program involved, and what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The folder itself could not be resolved.
    #[error("app folder {}: {source}", dir.display())]
    Dir {
        /// The folder as given.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `berm.toml` could not be read.
    #[error("{}: cannot read it: {source}", file.display())]
    ReadManifest {
        /// The manifest.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `berm.toml` is not a regular file.
    #[error("{}: not a regular file", file.display())]
    ManifestNotFile {
        /// The manifest.
        file: PathBuf,
    },
    /// `berm.toml` is larger than any real manifest.
    #[error("{}: {size} bytes, over the cap of {max} bytes", file.display(), max = MAX_MANIFEST_BYTES)]
    ManifestTooLarge {
        /// The manifest.
        file: PathBuf,
        /// Its size.
        size: u64,
    },
    /// `berm.toml` is not valid TOML, has an unknown key or a value of the
    /// wrong type.
    #[error("{}: {message}", file.display())]
    Parse {
        /// The manifest.
        file: PathBuf,
        /// The TOML reader's message (with line and column).
        message: String,
    },
    /// `name` breaks the rule.
    #[error(
        "{}: `name` = {value:?}: use 1-31 characters of a-z, 0-9 and `-`, starting with a letter",
        file.display()
    )]
    Name {
        /// The manifest.
        file: PathBuf,
        /// The value found.
        value: String,
    },
    /// A whole-number setting (`call_deadline_ms`, `limits.memory_mb`, `limits.pids`) is out
    /// of its range.
    #[error("{}: `{key}` = {value}: allowed {min} to {max}", file.display())]
    OutOfRange {
        /// The manifest.
        file: PathBuf,
        /// The setting, as written in `berm.toml`.
        key: &'static str,
        /// The value found.
        value: u64,
        /// The least value allowed.
        min: u64,
        /// The greatest value allowed.
        max: u64,
    },
    /// `[limits] cpu` is out of range.
    #[error(
        "{}: `limits.cpu` = {value}: allowed {min} to {max} cores",
        file.display(),
        min = defaults::CPU_MIN,
        max = defaults::CPU_MAX
    )]
    Cpu {
        /// The manifest.
        file: PathBuf,
        /// The value found.
        value: f64,
    },
    /// No `[[program]]` at all.
    #[error("{}: no `[[program]]`: an app holds 1 to {MAX_PROGRAMS} programs", file.display())]
    NoPrograms {
        /// The manifest.
        file: PathBuf,
    },
    /// More programs than an app may hold.
    #[error("{}: {count} programs: an app holds 1 to {MAX_PROGRAMS}", file.display())]
    TooManyPrograms {
        /// The manifest.
        file: PathBuf,
        /// How many were listed.
        count: usize,
    },
    /// A program's `name` breaks the naming rule.
    #[error(
        "{}: program name {name:?}: use 1-64 of a-z, 0-9, `-`, starting with a letter or digit (no `_`: it separates program and tool in the names MCP clients see, e.g. `notes_add`)",
        file.display()
    )]
    ProgramName {
        /// The manifest.
        file: PathBuf,
        /// The name found.
        name: String,
    },
    /// Two programs share a name.
    #[error("{}: program `{name}` is listed twice: program names must be unique", file.display())]
    DuplicateProgram {
        /// The manifest.
        file: PathBuf,
        /// The name.
        name: String,
    },
    /// A program's `memory_mb` is out of range.
    #[error(
        "{}: program `{program}`: `memory_mb` = {value}: allowed 1 to {max} and at most the app's `limits.memory_mb` ({app})",
        file.display(),
        max = defaults::PROGRAM_MEMORY_MB_MAX
    )]
    ProgramMemory {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// The value found.
        value: u64,
        /// The app's memory limit.
        app: u64,
    },
    /// A `[program.serve_as]` entry that is not a tool name and a served name, or a served
    /// name given twice.
    #[error("{}: program `{program}`: `serve_as`: {problem}", file.display())]
    ServeAs {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// What is wrong.
        problem: String,
    },
    /// A grant that berm's one grant parser ([`Grant`]) refuses.
    #[error("{}: program `{program}`: {source}", file.display())]
    Grant {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// What the parser said (boxed: it is large, and this path is cold).
        #[source]
        source: Box<GrantParseError>,
    },
    /// The app-level `[secrets]` table, which named one file per name for every program.
    #[error(
        "{}: the app-level [secrets] table is refused: secret files are named per program, so \
         that two programs that bind one name never share a value. Move each entry into a \
         [program.secrets] table written after the keys of the [[program]] that binds it, \
         then delete [secrets]: {moves}",
        file.display()
    )]
    AppSecrets {
        /// The manifest.
        file: PathBuf,
        /// Each entry and where it goes.
        moves: String,
    },
    /// A `[program.secrets]` entry that cannot be used.
    #[error("{}: program `{program}`: [program.secrets] {name}: {problem}", file.display())]
    Secret {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// The secret's name as written.
        name: String,
        /// What is wrong and what to write instead.
        problem: Box<str>,
    },
    /// A `[program.secrets]` file that is one of berm's own or lies in one of its
    /// directories.
    // `refused` is in the message and not a `#[source]`: a chain printer (`{:#}`) would print
    // it twice.
    #[error("{}: program `{program}`: [program.secrets] {name}: {refused}", file.display())]
    SecretFile {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// The secret's name.
        name: String,
        /// Why the file is refused.
        refused: Box<secret_file::SecretFileError>,
    },
    /// An `fs` grant's directory is not a plain relative path.
    #[error(
        "{}: program `{program}`: grant {grant:?}: {problem}; an app's fs directory is a directory inside bermd's data directory, named relative to it, without `..` (e.g. `fs=notes`)",
        file.display()
    )]
    FsGrant {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// The grant.
        grant: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// More than one `fs` grant for one program.
    #[error("{}: program `{program}`: at most one fs directory may be granted", file.display())]
    DuplicateFsGrant {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
    },
    /// A program's `wasm` is not a plain relative path inside the folder.
    #[error(
        "{}: program `{program}`: `wasm` = {path:?}: {problem}; use a path relative to the app folder, without `..`",
        file.display()
    )]
    WasmPath {
        /// The manifest.
        file: PathBuf,
        /// The program.
        program: String,
        /// The path as written.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A program's wasm file does not exist or cannot be resolved.
    #[error("program `{program}`: wasm file {}: {source}", path.display())]
    WasmMissing {
        /// The program.
        program: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A program gives neither `wasm` nor `image`, or both.
    #[error(
        "{}: program `{program}`: {}", file.display(),
        if *both { "give `wasm` (a file in the folder) or `image` (a pinned reference), not both" }
        else { "give `wasm = \"FILE.wasm\"` (a file in the folder) or `image = \"REGISTRY/REPO@sha256:…\"`" }
    )]
    WasmOrImage {
        /// berm.toml.
        file: PathBuf,
        /// The program.
        program: String,
        /// Both were given (else neither).
        both: bool,
    },
    /// A program's `accept` is not a program digest.
    #[error(
        "{}: program `{program}`: `accept` = {value:?}: name the accepted version's digest as sha256:<64 lowercase hex digits>, as berm ls and berm diff show it",
        file.display()
    )]
    Accept {
        /// berm.toml.
        file: PathBuf,
        /// The program.
        program: String,
        /// What it says.
        value: Box<str>,
    },
    /// A program's `image` is not a reference pinned by digest.
    #[error("{}: program `{program}`: `image` = {value:?}: {problem}", file.display())]
    Image {
        /// berm.toml.
        file: PathBuf,
        /// The program.
        program: String,
        /// What it says.
        value: Box<str>,
        /// What is wrong.
        problem: Box<str>,
    },
    /// A program named by image was read before it was found in a program store.
    #[error(
        "program `{program}` is the image {reference}: it is read from a program store \
         (bermd --programs DIR, filled by `berm pull --app FOLDER`), not the folder"
    )]
    ImageNotResolved {
        /// The program.
        program: String,
        /// Its reference.
        reference: String,
    },
    /// A program named by image is not in the program store, or does not verify there.
    #[error("program `{program}`: {source}")]
    Store {
        /// The program.
        program: String,
        /// What the store said.
        #[source]
        source: Box<StoreError>,
    },
    /// A program's bytes are not the ones its pin names.
    #[error(
        "program `{program}`: {} hashes to sha256:{actual}, not the sha256:{expected} its image names; remove it and pull again",
        path.display()
    )]
    WasmMismatch {
        /// The program.
        program: String,
        /// The file.
        path: PathBuf,
        /// What it should hash to.
        expected: Box<str>,
        /// What it hashes to.
        actual: Box<str>,
    },
    /// A program's wasm file resolves (through a symlink) outside the folder.
    #[error(
        "program `{program}`: wasm file {} leads outside the app folder {} (to {})",
        path.display(),
        dir.display(),
        target.display()
    )]
    WasmOutside {
        /// The program.
        program: String,
        /// The file as named.
        path: PathBuf,
        /// The app folder.
        dir: PathBuf,
        /// Where it really is.
        target: PathBuf,
    },
    /// A program's wasm path is a directory or a special file.
    #[error("program `{program}`: wasm file {}: not a regular file", path.display())]
    WasmNotFile {
        /// The program.
        program: String,
        /// The file.
        path: PathBuf,
    },
    /// A program's wasm file is larger than a host accepts.
    #[error(
        "program `{program}`: wasm file {}: {size} bytes, over the cap of {max} bytes",
        path.display(),
        max = MAX_WASM_BYTES
    )]
    WasmTooLarge {
        /// The program.
        program: String,
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
}

/// `berm.toml` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    name: String,
    call_deadline_ms: Option<u64>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default, rename = "program")]
    programs: Vec<RawProgram>,
    /// Refused ([`AppError::AppSecrets`]), read only to say where each entry goes.
    secrets: Option<BTreeMap<String, toml::Value>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    cpu: Option<Number>,
    memory_mb: Option<u64>,
    pids: Option<u64>,
}

/// TOML keeps integers and floats apart; `cpu = 2` and `cpu = 0.5` are both
/// meant.
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    fn value(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProgram {
    name: String,
    wasm: Option<String>,
    image: Option<String>,
    #[serde(default)]
    grants: Vec<String>,
    memory_mb: Option<u64>,
    accept: Option<String>,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    #[serde(default)]
    serve_as: BTreeMap<String, String>,
}

/// Where the process reading an app folder finds its `[program.secrets]` value files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretValues {
    /// On this machine: each file is named by an absolute path or from `~/` (`$HOME`), and
    /// is checked against berm's own directories when the folder is read.
    Here,
    /// On the host, not here: the microVM guest's bermd, whose requests carry placeholders
    /// that the host's dialer fills in. The names are kept as written and not checked here
    /// (the guest's `$HOME` is its workspace, not the user's); the host checked them.
    OnHost,
}

/// Reads and checks the app folder `dir`: `berm.toml`, every value's range,
/// every grant, and that each wasm file exists as a regular file inside the
/// folder. Nothing is deployed or written. Secret value files are on this machine
/// ([`SecretValues::Here`]).
///
/// # Errors
/// The first [`AppError`] found, naming the file, the field or the program at fault.
pub fn load(dir: &Path) -> Result<App, AppError> {
    load_with(dir, SecretValues::Here)
}

/// [`load`], with the secret value files where `secrets` says.
///
/// # Errors
/// As [`load`].
pub fn load_with(dir: &Path, secrets: SecretValues) -> Result<App, AppError> {
    let dir = fs::canonicalize(dir).map_err(|source| AppError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let file = dir.join(MANIFEST);
    let text = read_manifest(&file)?;
    let raw: RawApp = toml::from_str(&text).map_err(|e| AppError::Parse {
        file: file.clone(),
        message: e.to_string().trim_end().to_string(),
    })?;

    if !berm_abi::is_valid_app_name(&raw.name) {
        return Err(AppError::Name {
            file,
            value: raw.name,
        });
    }
    if let Some(value) = raw.call_deadline_ms {
        in_range(
            &file,
            "call_deadline_ms",
            value,
            1,
            defaults::CALL_DEADLINE_MS_MAX,
        )?;
    }
    let limits = limits(&file, &raw.limits)?;

    if raw.programs.is_empty() {
        return Err(AppError::NoPrograms { file });
    }
    if raw.programs.len() > MAX_PROGRAMS {
        return Err(AppError::TooManyPrograms {
            file,
            count: raw.programs.len(),
        });
    }
    let mut names = BTreeSet::new();
    let mut served_as = BTreeSet::new();
    let mut programs = Vec::with_capacity(raw.programs.len());
    for program in raw.programs {
        if !berm_abi::is_valid_program_name(&program.name) {
            return Err(AppError::ProgramName {
                file,
                name: program.name,
            });
        }
        if !names.insert(program.name.clone()) {
            return Err(AppError::DuplicateProgram {
                file,
                name: program.name,
            });
        }
        if let Some(value) = program.memory_mb
            && (value == 0 || value > defaults::PROGRAM_MEMORY_MB_MAX || value > limits.memory_mb)
        {
            return Err(AppError::ProgramMemory {
                file,
                program: program.name,
                value,
                app: limits.memory_mb,
            });
        }
        let grants = check_grants(&file, &program.name, &program.grants)?;
        for (tool, served) in &program.serve_as {
            let problem = if !berm_abi::is_valid_name(tool) {
                Some(format!("`{tool}` is not a tool name"))
            } else if !berm_abi::is_valid_name(served) {
                Some(format!(
                    "`{served}` is not a valid served name: use 1-64 of a-z, 0-9, `_`, `-`, starting with a letter or digit"
                ))
            } else if !served_as.insert(served.clone()) {
                Some(format!(
                    "`{served}` is given to two tools; a served name is unique"
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(AppError::ServeAs {
                    file,
                    program: program.name,
                    problem,
                });
            }
        }
        let (wasm, wasm_relative, image) = match (program.wasm, program.image) {
            (Some(wasm), None) => (wasm_file(&file, &dir, &program.name, &wasm)?, wasm, None),
            (None, Some(image)) => {
                let image = ImageRef::parse(&image).map_err(|problem| AppError::Image {
                    file: file.clone(),
                    program: program.name.clone(),
                    value: image.as_str().into(),
                    problem: problem.into(),
                })?;
                (PathBuf::new(), image.reference.clone(), Some(image))
            }
            (wasm, _) => {
                return Err(AppError::WasmOrImage {
                    file,
                    program: program.name,
                    both: wasm.is_some(),
                });
            }
        };
        let accept =
            match program.accept {
                None => None,
                Some(value) => {
                    Some(sha256_digits(&value).map(str::to_string).ok_or_else(|| {
                        AppError::Accept {
                            file: file.clone(),
                            program: program.name.clone(),
                            value: value.into(),
                        }
                    })?)
                }
            };
        let mut checked = Program {
            name: program.name,
            wasm,
            wasm_relative,
            image,
            expected_sha256: None,
            accept,
            grants,
            memory_mb: program.memory_mb,
            secret_files: BTreeMap::new(),
            serve_as: program.serve_as,
        };
        checked.secret_files = secret_files(&file, &dir, &program.secrets, &checked, secrets)?;
        programs.push(checked);
    }
    if let Some(secrets) = raw.secrets {
        return Err(AppError::AppSecrets {
            file,
            moves: app_secrets_moves(&secrets, &programs),
        });
    }
    Ok(App {
        dir,
        name: raw.name,
        programs,
        limits,
        call_deadline_ms: raw.call_deadline_ms,
    })
}

/// Where each entry of a refused app-level `[secrets]` goes: `NAME = "PATH"` into each
/// program that binds it, or nowhere when none does.
fn app_secrets_moves(secrets: &BTreeMap<String, toml::Value>, programs: &[Program]) -> String {
    if secrets.is_empty() {
        return "it is empty".into();
    }
    let moves: Vec<String> = secrets
        .iter()
        .map(|(name, value)| {
            let binders: Vec<String> = programs
                .iter()
                .filter(|p| p.binds_secret(name))
                .map(|p| format!("program `{}`", p.name))
                .collect();
            match binders.is_empty() {
                true => format!("`{name} = {value}`: no program binds it, delete it"),
                false => format!("`{name} = {value}` into {}", binders.join(", ")),
            }
        })
        .collect();
    moves.join("; ")
}

/// Checks one program's `[program.secrets]`: each name is bound by the
/// program's own `secret:NAME=HOST` grant, and each value file is named
/// absolute (or from `~/`) and lies outside the app folder, so packing or
/// sharing the folder never carries a value, and none of berm's own files
/// or directories ([`secret_file::check_path`], [`own_paths`]). The files themselves are read
/// (and their owner and mode checked) when a value is needed, on the host
/// only, so they need not exist yet.
fn secret_files(
    file: &Path,
    dir: &Path,
    raw: &BTreeMap<String, String>,
    program: &Program,
    values: SecretValues,
) -> Result<BTreeMap<String, PathBuf>, AppError> {
    let mut files = BTreeMap::new();
    for (name, value) in raw {
        let fail = |problem: String| AppError::Secret {
            file: file.to_path_buf(),
            program: program.name.clone(),
            name: name.clone(),
            problem: problem.into_boxed_str(),
        };
        if !berm_abi::net::is_valid_secret_name(name) {
            return Err(fail(
                "a secret's name is 1 to 64 of A-Z, a-z, 0-9, `_`, `-`".into(),
            ));
        }
        if !program.binds_secret(name) {
            return Err(fail(format!(
                "the program does not bind it: add `secret:{name}=HOST` to its grants"
            )));
        }
        if values == SecretValues::OnHost {
            files.insert(name.clone(), PathBuf::from(value));
            continue;
        }
        let path = match value.strip_prefix("~/") {
            Some(rest) => match std::env::var_os("HOME").map(PathBuf::from) {
                Some(home) if home.is_absolute() => home.join(rest),
                _ => {
                    return Err(fail(format!(
                        "{value:?} is named from ~/, but $HOME is not set to an absolute path: \
                         set HOME, or name the file by its absolute path"
                    )));
                }
            },
            None => PathBuf::from(value),
        };
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(fail(format!(
                "{value:?}: name the value's file by an absolute path or from ~/, without `..` \
                 (a secret's value never sits in the app folder)"
            )));
        }
        let real = fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if path.starts_with(dir) || real.starts_with(dir) {
            return Err(fail(format!(
                "{} is inside the app folder: keep secret values outside it, \
                 e.g. in ~/.secrets/ (`mkdir -m 700 ~/.secrets`)",
                path.display()
            )));
        }
        secret_file::check_path(&path).map_err(|refused| AppError::SecretFile {
            file: file.to_path_buf(),
            program: program.name.clone(),
            name: name.clone(),
            refused: Box::new(refused),
        })?;
        files.insert(name.clone(), path);
    }
    Ok(files)
}

impl Program {
    /// Whether one of its grants is `secret:NAME=HOST`: the program may send secret `name`.
    pub fn binds_secret(&self, name: &str) -> bool {
        self.grants
            .iter()
            .any(|g| matches!(g, Grant::Secret { name: bound, .. } if bound == name))
    }

    /// The grants with every `fs=DIR` made absolute under `root` (bermd
    /// passes a directory of its data directory), so the same folder grants
    /// the same files on the host and inside the VM.
    pub fn resolve_grants(&self, root: &Path) -> Vec<Grant> {
        self.grants
            .iter()
            .map(|grant| match grant {
                Grant::Fs {
                    dir,
                    read_only,
                    quota,
                } => Grant::Fs {
                    dir: root.join(dir),
                    read_only: *read_only,
                    quota: *quota,
                },
                other => other.clone(),
            })
            .collect()
    }

    /// The wasm file's bytes, refusing one over [`MAX_WASM_BYTES`].
    ///
    /// # Errors
    /// [`AppError::WasmMissing`] when the file cannot be read, [`AppError::WasmTooLarge`]
    /// when it is larger than [`MAX_WASM_BYTES`].
    pub fn read(&self) -> Result<Vec<u8>, AppError> {
        if let (Some(image), None) = (&self.image, &self.expected_sha256) {
            return Err(AppError::ImageNotResolved {
                program: self.name.clone(),
                reference: image.reference.clone(),
            });
        }
        let missing = |source| AppError::WasmMissing {
            program: self.name.clone(),
            path: self.wasm.clone(),
            source,
        };
        let file = fs::File::open(&self.wasm).map_err(missing)?;
        let mut bytes = Vec::new();
        file.take(MAX_WASM_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(missing)?;
        if bytes.len() as u64 > MAX_WASM_BYTES {
            return Err(AppError::WasmTooLarge {
                program: self.name.clone(),
                path: self.wasm.clone(),
                size: bytes.len() as u64,
            });
        }
        if let Some(expected) = &self.expected_sha256 {
            let actual = sha256_hex(&bytes);
            if &actual != expected {
                return Err(AppError::WasmMismatch {
                    program: self.name.clone(),
                    path: self.wasm.clone(),
                    expected: expected.as_str().into(),
                    actual: actual.into(),
                });
            }
        }
        Ok(bytes)
    }
}

impl App {
    /// The programs named by image reference, with their references.
    pub fn images(&self) -> impl Iterator<Item = (&Program, &ImageRef)> {
        self.programs
            .iter()
            .filter_map(|p| p.image.as_ref().map(|image| (p, image)))
    }

    /// Finds every program named by image reference in `store`, verified, so that
    /// [`Program::read`] reads it from there (and checks its bytes).
    ///
    /// # Errors
    /// [`AppError::Store`] for the first program that is not there or does not verify.
    pub fn resolve_images(&mut self, store: &ProgramStore) -> Result<(), AppError> {
        for program in &mut self.programs {
            let Some(image) = &program.image else {
                continue;
            };
            let stored = store.get(image).map_err(|source| AppError::Store {
                program: program.name.clone(),
                source: Box::new(source),
            })?;
            program.wasm = stored.wasm;
            program.expected_sha256 = Some(stored.sha256);
        }
        Ok(())
    }
}

/// The 64 lowercase hex digits of a `sha256:<hex>` digest, else `None`: the one check for
/// every digest a folder or a store names.
pub(crate) fn sha256_digits(digest: &str) -> Option<&str> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The sha256 of `bytes` in lowercase hex: a program's identity (berm prints
/// it as `sha256:<hex>`).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn read_manifest(file: &Path) -> Result<String, AppError> {
    let read = |source| AppError::ReadManifest {
        file: file.to_path_buf(),
        source,
    };
    let meta = fs::metadata(file).map_err(read)?;
    if !meta.is_file() {
        return Err(AppError::ManifestNotFile {
            file: file.to_path_buf(),
        });
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(AppError::ManifestTooLarge {
            file: file.to_path_buf(),
            size: meta.len(),
        });
    }
    let mut text = String::new();
    fs::File::open(file)
        .and_then(|f| f.take(MAX_MANIFEST_BYTES + 1).read_to_string(&mut text))
        .map_err(read)?;
    Ok(text)
}

fn limits(file: &Path, raw: &RawLimits) -> Result<Limits, AppError> {
    let mut limits = Limits::default();
    if let Some(cpu) = raw.cpu {
        let value = cpu.value();
        // NaN is in no range and is refused too.
        if !(defaults::CPU_MIN..=defaults::CPU_MAX).contains(&value) {
            return Err(AppError::Cpu {
                file: file.to_path_buf(),
                value,
            });
        }
        limits.cpu_millicores = (value * 1000.0).round() as u32;
    }
    if let Some(value) = raw.memory_mb {
        let (min, max) = (defaults::MEMORY_MB_MIN, defaults::MEMORY_MB_MAX);
        limits.memory_mb = in_range(file, "limits.memory_mb", value, min, max)?;
    }
    if let Some(value) = raw.pids {
        let (min, max) = (defaults::PIDS_MIN.into(), defaults::PIDS_MAX.into());
        limits.pids = in_range(file, "limits.pids", value, min, max)? as u32;
    }
    Ok(limits)
}

/// `value` when it is in `min..=max`, else [`AppError::OutOfRange`] for `key`.
fn in_range(
    file: &Path,
    key: &'static str,
    value: u64,
    min: u64,
    max: u64,
) -> Result<u64, AppError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(AppError::OutOfRange {
            file: file.to_path_buf(),
            key,
            value,
            min,
            max,
        })
    }
}

/// Why a relative path from `berm.toml` is not plain, if it is not: a plain path is
/// relative, has no `..` and names something inside the directory it is relative to (not
/// `.` itself), so it never leaves that directory nor takes all of it.
fn relative_path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("it is empty");
    }
    if path.chars().any(|c| c.is_control()) {
        return Some("it holds a control character");
    }
    let path = Path::new(path);
    if path.is_absolute() {
        return Some("absolute paths are refused");
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Some("`..` is refused");
    }
    // `.`, `./`, `././`: the directory the path is relative to, itself. For an `fs` grant
    // that is bermd's whole data directory, which holds every app's files.
    if !path.components().any(|c| matches!(c, Component::Normal(_))) {
        return Some("it names the directory itself, not one inside it");
    }
    None
}

/// Reads every grant with berm's one parser, and checks what an app folder adds: an `fs`
/// directory is a plain relative path, and there is at most one.
fn check_grants(file: &Path, program: &str, grants: &[String]) -> Result<Vec<Grant>, AppError> {
    let mut parsed = Vec::with_capacity(grants.len());
    for text in grants {
        let grant: Grant = text.parse().map_err(|source| AppError::Grant {
            file: file.to_path_buf(),
            program: program.to_string(),
            source: Box::new(source),
        })?;
        if let Grant::Fs { dir, .. } = &grant {
            // Parsed from a string, so the path is UTF-8.
            let dir = dir.to_string_lossy();
            if let Some(problem) = relative_path_problem(&dir) {
                return Err(AppError::FsGrant {
                    file: file.to_path_buf(),
                    program: program.to_string(),
                    grant: text.clone(),
                    problem,
                });
            }
            if parsed.iter().any(|g| matches!(g, Grant::Fs { .. })) {
                return Err(AppError::DuplicateFsGrant {
                    file: file.to_path_buf(),
                    program: program.to_string(),
                });
            }
        }
        parsed.push(grant);
    }
    Ok(parsed)
}

/// The absolute path of a program's wasm file, once it is known to be a
/// regular file inside the (canonical) folder.
fn wasm_file(file: &Path, dir: &Path, program: &str, relative: &str) -> Result<PathBuf, AppError> {
    if let Some(problem) = relative_path_problem(relative) {
        return Err(AppError::WasmPath {
            file: file.to_path_buf(),
            program: program.to_string(),
            path: relative.to_string(),
            problem,
        });
    }
    let path = dir.join(relative);
    let target = fs::canonicalize(&path).map_err(|source| AppError::WasmMissing {
        program: program.to_string(),
        path: path.clone(),
        source,
    })?;
    if !target.starts_with(dir) {
        return Err(AppError::WasmOutside {
            program: program.to_string(),
            path,
            dir: dir.to_path_buf(),
            target,
        });
    }
    let meta = fs::metadata(&target).map_err(|source| AppError::WasmMissing {
        program: program.to_string(),
        path: path.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(AppError::WasmNotFile {
            program: program.to_string(),
            path,
        });
    }
    Ok(path)
}

#[cfg(test)]
mod tests;
