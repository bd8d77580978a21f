//! `$BERM_HOME`: the one directory bermd keeps everything in, and the one way
//! it writes a file there.
//!
//! ```text
//! $BERM_HOME/            0700
//!   images/<hex>.wasm    every deployed image, by digest
//!   deployments/<name>.json   name → digest, grants, limits
//!   cache/               compiled code (berm's on-disk cache)
//!   state/<name>/kv.log  a program's keyspace
//!   data/<DIR>           what an app folder's `fs=DIR` grants reach
//!   control.sock         the control API (0600)
//!   mcp.sock             MCP, newline-delimited JSON-RPC (0600)
//! ```

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why the data directory could not be prepared or written.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// A directory could not be created or restricted.
    #[error("could not prepare directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written atomically.
    #[error("could not write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The layout of `$BERM_HOME`.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// Creates (mode 0700) and returns the layout rooted at `root`.
    pub fn create(root: &Path) -> Result<Home, HomeError> {
        let home = Home {
            root: root.to_path_buf(),
        };
        for dir in [
            home.root.clone(),
            home.images(),
            home.deployments(),
            home.code_cache(),
            home.state_root(),
        ] {
            create_private_dir(&dir)?;
        }
        Ok(home)
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where images live, by digest.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// Where deployment records live, by name.
    pub fn deployments(&self) -> PathBuf {
        self.root.join("deployments")
    }

    /// berm's compiled-code cache.
    pub fn code_cache(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// Where the `fs=DIR` grants of app folders point: `data/DIR`, so an
    /// app's files stay under the data directory on the host and in the VM.
    pub fn app_data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// Where programs' state lives.
    pub fn state_root(&self) -> PathBuf {
        self.root.join("state")
    }

    /// One program's state directory (created on first use).
    pub fn state(&self, program: &str) -> Result<PathBuf, HomeError> {
        let dir = self.state_root().join(program);
        create_private_dir(&dir)?;
        Ok(dir)
    }

    /// One program's secret values (`secrets/<program>/<NAME>`, mode 0600,
    /// directories 0700), kept apart from its state so that nothing a
    /// program can reach (kv, fs) holds them.
    pub fn secrets(&self, program: &str) -> PathBuf {
        self.root.join("secrets").join(program)
    }

    /// The control socket.
    pub fn control_socket(&self) -> PathBuf {
        self.root.join(berm_control::home::CONTROL_SOCKET)
    }

    /// The MCP socket.
    pub fn mcp_socket(&self) -> PathBuf {
        self.root.join(berm_control::home::MCP_SOCKET)
    }
}

pub(crate) fn create_private_dir(path: &Path) -> Result<(), HomeError> {
    let fail = |source| HomeError::CreateDir {
        path: path.to_path_buf(),
        source,
    };
    // The directories this call creates, outermost first: each one's name
    // lives in its parent, which is synced once it is made, so a crash
    // cannot lose a directory that a file written next relies on.
    let created: Vec<&Path> = path.ancestors().take_while(|p| !p.exists()).collect();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(fail)?;
    for dir in created.iter().rev() {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            berm_durable::sync_dir(parent).map_err(fail)?;
        }
    }
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(fail)
}

/// Writes `bytes` to `path` so that a crash at any moment leaves either the
/// old file or the new one, never a mix ([`berm_durable::write_atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HomeError> {
    berm_durable::write_atomic(path, bytes).map_err(|source| HomeError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Why a secret file of bermd's own ([`secret_file`]) could not be had.
#[derive(Debug)]
pub enum SecretFileError {
    /// It could not be read or written.
    Io(std::io::Error),
    /// It exists but others could read or replace it.
    Insecure {
        /// What is wrong with it.
        problem: String,
        /// The command that fixes it.
        fix: String,
    },
}

/// The text of the secret file `path` in `$BERM_HOME` (the HTTP token, the ask key), made
/// when there is none: `bytes` random bytes as hex, written atomically with mode 0600. An
/// existing file is reused, so what was made once survives restarts, but only if it is a
/// regular file owned by this user and closed to group and others; anything else is refused
/// with the command that fixes it, since a secret others can read guards nothing.
pub fn secret_file(path: &Path, bytes: usize) -> Result<String, SecretFileError> {
    use std::os::unix::fs::MetadataExt;
    let insecure = |problem: String, fix: String| SecretFileError::Insecure { problem, fix };
    let remove = format!(
        "remove it (`rm {}`) and bermd makes a new one",
        path.display()
    );
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_file() {
                return Err(insecure("it is not a regular file".into(), remove));
            }
            let me = rustix::process::geteuid().as_raw();
            if meta.uid() != me {
                return Err(insecure(
                    format!("it is owned by uid {}, not by you (uid {me})", meta.uid()),
                    remove,
                ));
            }
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(insecure(
                    format!("its mode is {mode:04o}, open to group or others"),
                    format!("fix it with `chmod 600 {}`, or {remove}", path.display()),
                ));
            }
            fs::read_to_string(path).map_err(SecretFileError::Io)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut random = vec![0u8; bytes];
            getrandom::fill(&mut random)
                .map_err(|e| SecretFileError::Io(std::io::Error::other(e.to_string())))?;
            let text = hex::encode(random);
            berm_durable::write_atomic(path, format!("{text}\n").as_bytes())
                .map_err(SecretFileError::Io)?;
            Ok(text)
        }
        Err(e) => Err(SecretFileError::Io(e)),
    }
}

/// Removes `path` (if it exists) durably: unlink, fsync the directory.
pub fn remove_durably(path: &Path) -> Result<(), HomeError> {
    berm_durable::remove_durably(path).map_err(|source| HomeError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::create(&dir.path().join("home")).unwrap();
        let mode = fs::metadata(home.root()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let path = home.deployments().join("x.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(home.deployments())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.json")]);
        remove_durably(&path).unwrap();
        remove_durably(&path).unwrap();
        assert!(!path.exists());
    }
}
