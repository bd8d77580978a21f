//! App folders given with `--app`: checked, digested for the measurement line, and mapped to
//! vsock ports 5000+i (`rpc-<i>.sock`).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Why an app folder was refused.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Not a directory.
    #[error("app folder {0} is not a directory")]
    NotADirectory(PathBuf),
    /// It could not be read.
    #[error("reading app folder {path} failed")]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Too many apps.
    #[error("{0} apps given; one VM serves at most 64")]
    TooMany(usize),
}

/// One app folder, measured.
#[derive(Clone, Debug)]
pub struct App {
    /// Its index: port 5000+i, `rpc-<i>.sock`.
    pub index: usize,
    /// The folder.
    pub path: PathBuf,
    /// sha256 over its sorted `<sha256>  <relative path>` lines.
    pub digest: String,
    /// Files digested.
    pub files: usize,
}

/// Checks and digests every app folder in order.
pub fn measure(folders: &[PathBuf]) -> Result<Vec<App>, AppError> {
    if folders.len() > 64 {
        return Err(AppError::TooMany(folders.len()));
    }
    folders
        .iter()
        .enumerate()
        .map(|(index, path)| {
            if !path.is_dir() {
                return Err(AppError::NotADirectory(path.clone()));
            }
            let mut lines = Vec::new();
            walk(path, path, &mut lines)?;
            lines.sort();
            let digest = hex::encode(Sha256::digest(lines.concat().as_bytes()));
            Ok(App {
                index,
                path: path.clone(),
                digest,
                files: lines.len(),
            })
        })
        .collect()
}

fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> AppError + '_ {
    move |source| AppError::Read {
        path: path.to_owned(),
        source,
    }
}

fn walk(root: &Path, dir: &Path, lines: &mut Vec<String>) -> Result<(), AppError> {
    for entry in std::fs::read_dir(dir).map_err(read_error(dir))? {
        let entry = entry.map_err(read_error(dir))?;
        let path = entry.path();
        // symlink_metadata: links are digested as links, never followed out of the folder.
        let meta = std::fs::symlink_metadata(&path).map_err(read_error(&path))?;
        let relative = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        if meta.is_dir() {
            walk(root, &path, lines)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(read_error(&path))?;
            lines.push(format!("link:{}  {relative}\n", target.display()));
        } else {
            let bytes = std::fs::read(&path).map_err(read_error(&path))?;
            lines.push(format!(
                "{}  {relative}\n",
                hex::encode(Sha256::digest(&bytes))
            ));
        }
    }
    Ok(())
}
