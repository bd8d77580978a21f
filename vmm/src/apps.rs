//! App folders given with `--app`: checked (berm-app), measured, precompiled and packed into
//! one read-only erofs disk each, which the guest sees with the virtio serial `app-<i>`.
//!
//! The order of `--app` fixes the index i: uid 10000+i, vsock port 5000+i, `rpc-<i>.sock`.
//! An app disk holds:
//!
//! - `app/` — the folder exactly as given (its digest is in the measurement line);
//! - `programs/` — the programs its `berm.toml` names by image, as the program store holds
//!   them (manifest and module; the guest's bermd verifies both against the pin);
//! - `code/` — each program's machine code, compiled here on the host by [`crate::code`]
//!   for the guest's engine settings (compiling in a TCG guest is ~200× slower);
//! - `launch.json` — the app's name and cgroup limits, derived from `berm.toml`, so berm-init
//!   (a small static PID 1) needs no TOML parser.
//!
//! The image is built with fixed timestamps and UUID, so the same folder gives the same
//! image; its sha256 is measured too.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::code::{CodeCache, CodeError};

/// Every inode's timestamp in app images (the rootfs's epoch).
const IMAGE_EPOCH: &str = "1767225600";

/// Why an app folder was refused.
#[derive(Debug, thiserror::Error)]
pub enum PrepareAppError {
    /// berm.toml or a program file is wrong.
    #[error("app folder {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// What berm-app found.
        #[source]
        source: berm_app::AppError,
    },
    /// It could not be read.
    #[error("reading app folder {path} failed")]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A program is named by image and no program store was given.
    #[error(
        "app {app}: program `{program}` is the image {reference}: give --programs DIR, a program \
         store `berm pull --app FOLDER --store DIR` filled (berm vm up passes $BERM_HOME/programs)"
    )]
    NoProgramStore {
        /// The app.
        app: String,
        /// The program.
        program: String,
        /// Its reference.
        reference: String,
    },
    /// Two apps share a name (their cgroups and workspaces would collide).
    #[error("two apps are named {0}; app names must be unique in one VM")]
    DuplicateName(String),
    /// Too many apps.
    #[error("{0} apps given; one VM serves at most 64")]
    TooMany(usize),
    /// A program could not be precompiled.
    #[error("app {app}, program {program}: {source}")]
    Code {
        /// The app.
        app: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: CodeError,
    },
    /// mkfs.erofs failed or is missing.
    #[error("packing app {app} into an erofs image failed: {message}")]
    Image {
        /// The app.
        app: String,
        /// What went wrong.
        message: String,
    },
}

use berm_vm_protocol::host::{AppMeasurement, ImageMeasurement};
pub use berm_vm_protocol::host::{
    CodeMeasurement as CodeMeasure, Launch, ProgramMeasurement as ProgramMeasure,
};

/// A disk image berm-vmm built in the run dir, and its measurement.
#[derive(Clone, Debug)]
pub struct Image {
    /// Where it is (in the run dir).
    pub path: PathBuf,
    /// Its sha256 and size.
    pub measured: ImageMeasurement,
}

impl Image {
    /// Measures the image at `path`.
    fn measure(path: PathBuf) -> Result<Image, PrepareAppError> {
        let bytes = std::fs::read(&path).map_err(read_error(&path))?;
        Ok(Image {
            path,
            measured: ImageMeasurement {
                sha256: hex::encode(Sha256::digest(&bytes)),
                size: bytes.len() as u64,
            },
        })
    }
}

/// One app, checked, measured and packed: its measurement line entry (index, name, folder
/// and program digests, code, image, limits) and where its image is.
#[derive(Clone, Debug)]
pub struct App {
    /// What the measurement line says of it.
    pub measured: AppMeasurement,
    /// Its disk image in the run dir.
    pub image: PathBuf,
    /// Each program's `[program.secrets]`, by program: host files the egress dialer reads
    /// that program's values from (never packed, never sent to the guest).
    pub secret_files:
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, PathBuf>>,
}

impl App {
    /// Its index: port 5000+i, `rpc-<i>.sock`, uid 10000+i.
    pub fn index(&self) -> usize {
        self.measured.index as usize
    }
}

/// Checks, measures, precompiles (for a guest of architecture `arch`, through the checked
/// code `cache`) and packs every app folder in order into `run_dir`.
pub fn prepare(
    folders: &[PathBuf],
    programs: Option<&Path>,
    run_dir: &Path,
    arch: berm::GuestArch,
    cache: &CodeCache,
) -> Result<Vec<App>, PrepareAppError> {
    if folders.len() > 64 {
        return Err(PrepareAppError::TooMany(folders.len()));
    }
    let mut names = HashSet::new();
    let mut apps = Vec::new();
    for (index, path) in folders.iter().enumerate() {
        let mut app = berm_app::load(path).map_err(|source| PrepareAppError::Folder {
            path: path.clone(),
            source,
        })?;
        let first_image = app
            .images()
            .next()
            .map(|(program, image)| (program.name.clone(), image.reference.clone()));
        if let Some((program, reference)) = first_image {
            let Some(store) = programs else {
                return Err(PrepareAppError::NoProgramStore {
                    app: app.name.clone(),
                    program,
                    reference,
                });
            };
            app.resolve_images(&berm_app::ProgramStore::new(store))
                .map_err(|source| PrepareAppError::Folder {
                    path: path.clone(),
                    source,
                })?;
        }
        if !names.insert(app.name.clone()) {
            return Err(PrepareAppError::DuplicateName(app.name));
        }
        apps.push(pack(index, path, &app, run_dir, arch, cache)?);
    }
    Ok(apps)
}

fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> PrepareAppError + '_ {
    move |source| PrepareAppError::Read {
        path: path.to_owned(),
        source,
    }
}

fn pack(
    index: usize,
    path: &Path,
    app: &berm_app::App,
    run_dir: &Path,
    arch: berm::GuestArch,
    cache: &CodeCache,
) -> Result<App, PrepareAppError> {
    let (digest, files) =
        berm_attest::folder_digest(&app.dir).map_err(|e| PrepareAppError::Read {
            path: e.path,
            source: e.source,
        })?;

    let stage = run_dir.join(format!("app-{index}.stage"));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(read_error(&stage))?;
    }
    let code_dir = stage.join("code");
    std::fs::create_dir_all(&code_dir).map_err(read_error(&code_dir))?;
    copy_tree(&app.dir, &stage.join("app"))?;
    // The programs named by image, as the guest's bermd reads them (`--programs`): each
    // store entry whole, so the guest verifies the same chain from pin to bytes.
    let store = stage.join("programs");
    std::fs::create_dir_all(&store).map_err(read_error(&store))?;
    for (program, image) in app.images() {
        let entry = berm_app::ProgramStore::new(&store).entry(image);
        std::fs::create_dir_all(&entry).map_err(read_error(&entry))?;
        let from = program.wasm.parent().unwrap_or(Path::new("/"));
        for file in ["manifest.json", "program.wasm"] {
            let (source, target) = (from.join(file), entry.join(file));
            std::fs::copy(&source, &target).map_err(read_error(&source))?;
        }
    }

    let mut programs = Vec::new();
    let mut code = Vec::new();
    for program in &app.programs {
        let bytes = program.read().map_err(|source| PrepareAppError::Folder {
            path: path.to_owned(),
            source,
        })?;
        programs.push(ProgramMeasure {
            name: program.name.clone(),
            wasm: program.wasm_relative.clone(),
            sha256: berm_app::sha256_hex(&bytes),
            grants: program
                .grants
                .iter()
                .filter(|g| g.is_measured())
                .cloned()
                .collect(),
        });
        let compiled = cache
            .precompiled(&bytes, arch)
            .map_err(|source| PrepareAppError::Code {
                app: app.name.clone(),
                program: program.name.clone(),
                source,
            })?;
        let target = code_dir.join(&compiled.file_name);
        std::fs::copy(&compiled.path, &target).map_err(read_error(&target))?;
        code.push(CodeMeasure {
            program: program.name.clone(),
            file: compiled.file_name,
            sha256: compiled.sha256,
            cached: compiled.cached,
        });
    }
    let limits = Launch {
        name: app.name.clone(),
        cpu_max: app.limits.cpu_max(),
        memory_max: app.limits.memory_max_bytes(),
        pids_max: app.limits.pids,
    };
    let launch = stage.join("launch.json");
    // Serializing strings and integers cannot fail.
    let json = serde_json::to_vec(&limits).unwrap_or_default();
    std::fs::write(&launch, json).map_err(read_error(&launch))?;
    make_readable(&stage)?;

    let image = run_dir.join(format!("app-{index}.erofs"));
    let _ = std::fs::remove_file(&image);
    let uuid = format!("6265726d-6170-7000-0000-{index:012x}");
    let output = Command::new("mkfs.erofs")
        .arg(format!("-T{IMAGE_EPOCH}"))
        .args(["-U", &uuid, "--all-root", "-x-1"])
        .arg(&image)
        .arg(&stage)
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .map_err(|e| PrepareAppError::Image {
            app: app.name.clone(),
            message: format!("running mkfs.erofs: {e} (install erofs-utils)"),
        })?;
    let _ = std::fs::remove_dir_all(&stage);
    if !output.status.success() {
        let _ = std::fs::remove_file(&image);
        return Err(PrepareAppError::Image {
            app: app.name.clone(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let image = Image::measure(image)?;
    Ok(App {
        measured: AppMeasurement {
            index: index as u32,
            name: app.name.clone(),
            path: path.to_owned(),
            sha256: digest,
            files,
            programs,
            code,
            image: image.measured,
            limits,
            uid: berm_vm_protocol::APP_UID_BASE + index as u32,
        },
        image: image.path,
        secret_files: app
            .programs
            .iter()
            .map(|p| (p.name.clone(), p.secret_files.clone()))
            .collect(),
    })
}

/// Copies the folder's directories, regular files and links (as links) into `to`.
fn copy_tree(from: &Path, to: &Path) -> Result<(), PrepareAppError> {
    std::fs::create_dir_all(to).map_err(read_error(to))?;
    for entry in std::fs::read_dir(from).map_err(read_error(from))? {
        let entry = entry.map_err(read_error(from))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let meta = std::fs::symlink_metadata(&source).map_err(read_error(&source))?;
        if meta.is_dir() {
            copy_tree(&source, &target)?;
        } else if meta.file_type().is_symlink() {
            let link = std::fs::read_link(&source).map_err(read_error(&source))?;
            std::os::unix::fs::symlink(&link, &target).map_err(read_error(&target))?;
        } else if meta.is_file() {
            std::fs::copy(&source, &target).map_err(read_error(&source))?;
        }
    }
    Ok(())
}

/// Directories 0755 and files 0644: the image is owned by root, and the app's uid reads it.
fn make_readable(dir: &Path) -> Result<(), PrepareAppError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(read_error(dir))?;
    for entry in std::fs::read_dir(dir).map_err(read_error(dir))? {
        let path = entry.map_err(read_error(dir))?.path();
        let meta = std::fs::symlink_metadata(&path).map_err(read_error(&path))?;
        if meta.is_dir() {
            make_readable(&path)?;
        } else if meta.is_file() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                .map_err(read_error(&path))?;
        }
    }
    Ok(())
}

/// Packs the test-only enforcement probe binary into its own image (serial `probe`).
pub fn pack_probe(binary: &Path, run_dir: &Path) -> Result<Image, PrepareAppError> {
    use std::os::unix::fs::PermissionsExt;
    let stage = run_dir.join("probe.stage");
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).map_err(read_error(&stage))?;
    let target = stage.join("berm-probe");
    std::fs::copy(binary, &target).map_err(read_error(binary))?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
        .map_err(read_error(&target))?;
    std::fs::set_permissions(&stage, std::fs::Permissions::from_mode(0o755))
        .map_err(read_error(&stage))?;
    let image = run_dir.join("probe.erofs");
    let _ = std::fs::remove_file(&image);
    let output = Command::new("mkfs.erofs")
        .arg(format!("-T{IMAGE_EPOCH}"))
        .args(["--all-root", "-x-1"])
        .arg(&image)
        .arg(&stage)
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .map_err(|e| PrepareAppError::Image {
            app: "probe".into(),
            message: format!("running mkfs.erofs: {e} (install erofs-utils)"),
        })?;
    let _ = std::fs::remove_dir_all(&stage);
    if !output.status.success() {
        return Err(PrepareAppError::Image {
            app: "probe".into(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Image::measure(image)
}
