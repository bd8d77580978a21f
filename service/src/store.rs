//! Deployment records and images on disk: what a restart brings back.
//!
//! A record is `deployments/<name>.json` naming the image by digest with its
//! grants and limits; the image is `images/<hex>.wasm`. Both are written with
//! [`crate::home::write_atomic`], image first, so a record never names an
//! image that is not there.

use std::fs;
use std::path::PathBuf;

use berm::Digest;
use berm_control::{Grant, LimitsSpec};
use serde::{Deserialize, Serialize};

use crate::home::{self, Home, HomeError};

/// One deployment as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The program's name.
    pub name: String,
    /// `sha256:<hex>` of its image.
    pub digest: String,
    /// What it may reach.
    pub grants: Vec<Grant>,
    /// The bounds asked for at deploy.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// The app folder (canonical) it was deployed from by `berm deploy --app`; absent for a
    /// plain deploy and in records written before berm kept it, which count as plain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_dir: Option<PathBuf>,
    /// The names MCP clients see for some of its tools, by tool ([`berm_control::DeployRequest::serve_as`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub serve_as: std::collections::BTreeMap<String, String>,
}

/// A record that could not be brought back, and why; bermd reports it and
/// restores the rest.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The record could not be read.
    #[error("could not read deployment record {}", path.display())]
    Read {
        /// The record.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The record is not valid JSON of the right shape.
    #[error("deployment record {} is corrupt: {message}", path.display())]
    Corrupt {
        /// The record.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The image the record names is missing or does not hash to its digest.
    #[error("image {} for `{name}` is missing or does not match {digest}", path.display())]
    Image {
        /// The program.
        name: String,
        /// The digest the record names.
        digest: String,
        /// The image file.
        path: PathBuf,
    },
}

/// Records and images under a [`Home`].
#[derive(Debug, Clone)]
pub struct Store {
    home: Home,
}

impl Store {
    /// The store in `home`.
    pub fn new(home: Home) -> Store {
        Store { home }
    }

    fn image_path(&self, digest: &Digest) -> PathBuf {
        self.home.images().join(format!("{}.wasm", digest.hex()))
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.home.deployments().join(format!("{name}.json"))
    }

    /// Saves `image` (once per digest) and then `record`.
    pub fn save(&self, record: &Record, digest: &Digest, image: &[u8]) -> Result<(), HomeError> {
        let image_path = self.image_path(digest);
        if fs::read(&image_path).map(|b| Digest::of(&b)).ok() != Some(*digest) {
            home::write_atomic(&image_path, image)?;
        }
        // Records are small JSON; serializing one cannot fail.
        let json = serde_json::to_vec_pretty(record).unwrap_or_default();
        home::write_atomic(&self.record_path(&record.name), &json)
    }

    /// Deletes a record. The image stays: another name may use it, and
    /// keeping it makes a redeploy a cache hit.
    pub fn delete(&self, name: &str) -> Result<(), HomeError> {
        home::remove_durably(&self.record_path(name))
    }

    /// Every record with its image, sorted by name, and the ones that could
    /// not be loaded.
    pub fn load_all(&self) -> (Vec<(Record, Vec<u8>)>, Vec<LoadError>) {
        let mut loaded = Vec::new();
        let mut problems = Vec::new();
        let entries = match fs::read_dir(self.home.deployments()) {
            Ok(entries) => entries,
            Err(source) => {
                problems.push(LoadError::Read {
                    path: self.home.deployments(),
                    source,
                });
                return (loaded, problems);
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        for path in paths {
            match self.load(&path) {
                Ok(pair) => loaded.push(pair),
                Err(e) => problems.push(e),
            }
        }
        (loaded, problems)
    }

    fn load(&self, path: &std::path::Path) -> Result<(Record, Vec<u8>), LoadError> {
        let bytes = fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let corrupt = |message: String| LoadError::Corrupt {
            path: path.to_path_buf(),
            message,
        };
        let record: Record = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if path
            .file_stem()
            .is_none_or(|s| s.to_string_lossy() != record.name)
        {
            return Err(corrupt(format!(
                "it names `{}`, not its file name",
                record.name
            )));
        }
        let digest: Digest = record
            .digest
            .parse()
            .map_err(|e| corrupt(format!("digest: {e}")))?;
        let image_path = self.image_path(&digest);
        match fs::read(&image_path) {
            Ok(image) if Digest::of(&image) == digest => Ok((record, image)),
            _ => Err(LoadError::Image {
                name: record.name,
                digest: record.digest,
                path: image_path,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::create(&dir.path().join("home")).unwrap();
        (dir, Store::new(home))
    }

    #[test]
    fn a_record_keeps_the_app_folder_it_came_from() {
        let (_dir, store) = store();
        let image = b"\0asm\x01\0\0\0";
        let digest = Digest::of(image);
        let record = Record {
            name: "notes".into(),
            digest: digest.to_string(),
            grants: vec![Grant::Kv],
            limits: LimitsSpec::default(),
            app_dir: Some(PathBuf::from("/apps/notes")),
            serve_as: Default::default(),
        };
        store.save(&record, &digest, image).unwrap();
        let (loaded, problems) = store.load_all();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(loaded[0].0, record);
    }

    /// Records written before berm kept the folder have no `app_dir`: they load, and count
    /// as plain deploys.
    #[test]
    fn an_older_record_without_an_app_folder_is_a_plain_deploy() {
        let record: Record = serde_json::from_str(
            r#"{"name":"notes","digest":"sha256:00","grants":["kv"],"limits":{}}"#,
        )
        .unwrap();
        assert_eq!(record.app_dir, None);
        // And a plain deploy writes no `app_dir` at all.
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("app_dir"), "{json}");
    }
}
