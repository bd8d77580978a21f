//! What can go wrong with the index, one enum per operation.

use std::path::PathBuf;

/// Reading a clone's entries failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadIndexError {
    /// There is no clone (no `entries/` folder) there.
    #[error(
        "no index at `{dir}` (no `entries/` folder): run `berm index update` first, or point --index-dir/BERM_INDEX_DIR at a clone"
    )]
    NoIndex {
        /// The directory looked in.
        dir: PathBuf,
    },
    /// The entries folder could not be listed.
    #[error("cannot read `{path}`")]
    Read {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// `berm index update` failed.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// `git` could not be run.
    #[error("cannot run `git`: install git (apt-get install git)")]
    Spawn {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A git command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Git {
        /// The command.
        command: String,
        /// Its exit status.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// The directory exists, is not empty, and is not a clone.
    #[error("`{dir}` exists and is not a git clone: remove it or choose another --index-dir")]
    NotAClone {
        /// The directory.
        dir: PathBuf,
    },
    /// The clone's parent folder could not be created.
    #[error("cannot create `{dir}`")]
    CreateDir {
        /// The folder.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// `berm index add` failed.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The registry could not describe the reference.
    #[error(transparent)]
    Describe(#[from] berm_oci::PullError),
    /// The name (given, or taken from the repository) is not a program name.
    #[error("`{name}` is not a valid program name (1-64 of a-z, 0-9, `-`); pass --name")]
    InvalidName {
        /// The name.
        name: String,
    },
    /// There is no clone to write into.
    #[error(transparent)]
    Load(#[from] LoadIndexError),
    /// The entry could not be written.
    #[error("cannot write `{path}`")]
    Write {
        /// The entry file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
