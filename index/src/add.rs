//! `berm index add REF`: write the entry for a pushed program from what the
//! registry says about it (OCI manifest and config; the module itself is not
//! downloaded), ready to commit to the index repository.

use std::fmt;
use std::path::{Path, PathBuf};

use berm_oci::{Described, RegistryOptions};

use crate::entry::{ENTRIES_DIR, Entry, ToolEntry};
use crate::error::{AddError, LoadIndexError};

/// The entry written, and where.
#[derive(Debug, Clone)]
pub struct Added {
    /// The index clone.
    pub dir: PathBuf,
    /// `entries/<name>.toml`, relative to `dir`.
    pub file: PathBuf,
    /// What was written.
    pub entry: Entry,
}

impl fmt::Display for Added {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.dir.display();
        let file = self.file.display();
        writeln!(f, "wrote {dir}/{file} for {}", self.entry.reference)?;
        write!(
            f,
            "commit it: git -C {dir} add {file} && git -C {dir} commit -m 'add {}'",
            self.entry.name
        )
    }
}

/// The entry for a described program: `name` defaults to the repository's
/// last path segment, `publisher` to `host/namespace`.
///
/// # Errors
/// [`AddError::InvalidName`] when the name is not a valid program name.
pub fn entry_from(
    described: &Described,
    name: Option<&str>,
    publisher: Option<&str>,
) -> Result<Entry, AddError> {
    let (repository, _) = described
        .pinned
        .rsplit_once('@')
        .unwrap_or((described.pinned.as_str(), ""));
    let (owner, last) = repository.rsplit_once('/').unwrap_or(("", repository));
    let name = name.unwrap_or(last).to_string();
    if !berm_abi::is_valid_program_name(&name) {
        return Err(AddError::InvalidName { name });
    }
    let manifest = &described.manifest;
    Ok(Entry {
        name,
        reference: described.pinned.clone(),
        digest: described.digest.to_string(),
        publisher: publisher.unwrap_or(owner).to_string(),
        description: manifest.description.clone(),
        usage: manifest.usage.clone(),
        tools: manifest
            .tools
            .iter()
            .map(|t| ToolEntry {
                name: t.name.clone(),
                description: t.description.clone(),
            })
            .collect(),
    })
}

/// Describes `reference` on its registry and writes its entry into the
/// clone at `dir` (atomically, replacing an older entry of the same name).
///
/// # Errors
/// See [`AddError`].
pub async fn add(
    reference: &str,
    name: Option<&str>,
    publisher: Option<&str>,
    dir: &Path,
    options: &RegistryOptions,
) -> Result<Added, AddError> {
    if !dir.is_dir() {
        return Err(LoadIndexError::NoIndex {
            dir: dir.to_path_buf(),
        }
        .into());
    }
    let described = berm_oci::describe(reference, options).await?;
    let entry = entry_from(&described, name, publisher)?;
    let file = Path::new(ENTRIES_DIR).join(format!("{}.toml", entry.name));
    let path = dir.join(&file);
    let write_error = |source| AddError::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir.join(ENTRIES_DIR)).map_err(write_error)?;
    berm_durable::write_atomic(&path, entry.to_toml().as_bytes()).map_err(write_error)?;
    Ok(Added {
        dir: dir.to_path_buf(),
        file,
        entry,
    })
}
