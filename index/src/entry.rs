//! One program in the index, and the loading of a clone's entries.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::LoadIndexError;

/// Folder of the index repository that holds one `<name>.toml` per program.
pub const ENTRIES_DIR: &str = "entries";

/// Largest entry file read; an entry is a few KiB.
const MAX_ENTRY_BYTES: u64 = 256 << 10;

/// One published program, as `entries/<name>.toml` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The program's name; also the file's stem.
    pub name: String,
    /// Where to pull it, pinned: `host/repo@sha256:<manifest digest>`.
    pub reference: String,
    /// The program's digest (the layer's; what `berm ls` prints).
    pub digest: String,
    /// Who publishes it.
    pub publisher: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// When to reach for it.
    #[serde(default)]
    pub usage: String,
    /// Its tools.
    #[serde(default)]
    pub tools: Vec<ToolEntry>,
}

/// A tool of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolEntry {
    /// The tool's name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
}

/// An entry file that could not be used, and why: reported, not fatal.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// The entries of a local clone.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Valid entries, sorted by name.
    pub entries: Vec<Entry>,
    /// Files that were not valid entries.
    pub skipped: Vec<Skipped>,
}

impl Entry {
    /// Parses and checks one entry; `stem` is its file's name without
    /// `.toml`, which must equal `name`.
    pub fn parse(text: &str, stem: &str) -> Result<Entry, String> {
        let entry: Entry = toml::from_str(text).map_err(|e| e.message().to_string())?;
        if !berm_abi::is_valid_program_name(&entry.name) {
            return Err(format!("`{}` is not a valid program name", entry.name));
        }
        if entry.name != stem {
            return Err(format!(
                "names `{}` but the file is `{stem}.toml`",
                entry.name
            ));
        }
        if entry.digest.parse::<berm_oci::Digest>().is_err() {
            return Err(format!(
                "digest `{}` is not `sha256:<64 hex>`",
                entry.digest
            ));
        }
        if !entry.reference.contains("@sha256:")
            || berm_oci::parse_reference(&entry.reference).is_err()
        {
            return Err(format!(
                "reference `{}` is not pinned by digest (`host/repo@sha256:<hex>`)",
                entry.reference
            ));
        }
        Ok(entry)
    }

    /// The entry as TOML, as `berm index add` writes it.
    pub fn to_toml(&self) -> String {
        // Serializing plain strings and arrays of tables cannot fail.
        toml::to_string(self).unwrap_or_default()
    }
}

impl Index {
    /// Reads `dir/entries/*.toml`. A missing `entries` folder is an error
    /// (the clone is not there); a bad file is skipped and reported.
    ///
    /// # Errors
    /// [`LoadIndexError::NoIndex`] when `dir/entries` does not exist;
    /// [`LoadIndexError::Read`] when it cannot be listed.
    pub fn load(dir: &Path) -> Result<Index, LoadIndexError> {
        let entries_dir = dir.join(ENTRIES_DIR);
        let listing = match std::fs::read_dir(&entries_dir) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LoadIndexError::NoIndex {
                    dir: dir.to_path_buf(),
                });
            }
            Err(source) => {
                return Err(LoadIndexError::Read {
                    path: entries_dir,
                    source,
                });
            }
        };
        let mut index = Index::default();
        for item in listing {
            let item = item.map_err(|source| LoadIndexError::Read {
                path: entries_dir.clone(),
                source,
            })?;
            let path = item.path();
            let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".toml"))
            else {
                continue;
            };
            match read_entry(&path, stem) {
                Ok(entry) => index.entries.push(entry),
                Err(reason) => index.skipped.push(Skipped { path, reason }),
            }
        }
        index.entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(index)
    }
}

fn read_entry(path: &Path, stem: &str) -> Result<Entry, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_ENTRY_BYTES {
        return Err(format!(
            "{} bytes, over the cap of {MAX_ENTRY_BYTES}",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    Entry::parse(&text, stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry {
            name: name.into(),
            reference: format!("r.example/{name}@sha256:{}", "a".repeat(64)),
            digest: format!("sha256:{}", "b".repeat(64)),
            publisher: "p".into(),
            description: "d".into(),
            usage: "u".into(),
            tools: vec![ToolEntry {
                name: "t".into(),
                description: "td".into(),
            }],
        }
    }

    #[test]
    fn entries_round_trip_through_toml() {
        let e = entry("echo");
        assert_eq!(Entry::parse(&e.to_toml(), "echo").unwrap(), e);
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        let e = entry("echo");
        let mut bad = e.clone();
        bad.name = "../x".into();
        let mut unpinned = e.clone();
        unpinned.reference = "r.example/echo:v1".into();
        for (entry, file, why) in [
            (&e, "other", "other.toml"),
            (&bad, "../x", "valid program name"),
            (&unpinned, "echo", "pinned"),
        ] {
            let err = Entry::parse(&entry.to_toml(), file).unwrap_err();
            assert!(err.contains(why), "{file}: {err}");
        }
        assert!(Entry::parse("name = 1", "echo").is_err());
        assert!(Entry::parse(&format!("{}\nextra = 1\n", e.to_toml()), "echo").is_err());
    }

    #[test]
    fn load_skips_and_reports_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let entries = dir.path().join(ENTRIES_DIR);
        std::fs::create_dir(&entries).unwrap();
        std::fs::write(entries.join("echo.toml"), entry("echo").to_toml()).unwrap();
        std::fs::write(entries.join("broken.toml"), "not toml [").unwrap();
        std::fs::write(entries.join("README.md"), "ignored").unwrap();
        let index = Index::load(dir.path()).unwrap();
        assert_eq!(index.entries.len(), 1);
        assert_eq!(index.skipped.len(), 1);
        assert!(index.skipped[0].path.ends_with("broken.toml"));
        let missing = Index::load(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("berm index update"), "{missing}");
    }
}
