//! The program store: programs a `berm.toml` names by image reference
//! (`image = "REGISTRY/REPO@sha256:<manifest digest>"`), pulled and verified by whatever
//! prepares the folder (`berm pull --app`, `berm deploy --app`, `berm vm run/up`, an init
//! container), read by hosts that never talk to a registry (bermd, berm-vmm).
//!
//! ```text
//! STORE/sha256/<manifest hex>/manifest.json     the OCI manifest, byte for byte
//! STORE/sha256/<manifest hex>/program.wasm      its one layer: the program
//! STORE/sha256/<manifest hex>/provenance.json   signatures that held, and where (optional)
//! ```
//!
//! The store proves itself: the manifest's bytes must hash to the digest the folder pins,
//! and the program's to the layer digest that manifest names, every time it is read, so a
//! store edited or damaged since the pull is refused rather than run. `manifest.json` is
//! written last: an entry without one was never finished and does not count.
//!
//! `provenance.json` is the CLI's (berm-trust's `Provenance`): each signature that held when
//! the program was pulled or checked, with the repository it was found in, so that the trust
//! policy in force at each later use is checked without a registry. Hosts do not read it.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::sha256_hex;

/// The store's directory under `$BERM_HOME`, where bermd looks unless told otherwise.
pub const DEFAULT_DIR: &str = "programs";

/// Largest manifest kept; an OCI manifest of one layer is well under a kilobyte.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// A program named by image reference, pinned by its OCI manifest's digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// The reference as written: `REGISTRY/REPO@sha256:<hex>` (a tag before the `@` is
    /// allowed and ignored by the pin).
    pub reference: String,
    /// The manifest digest's 64 lowercase hex digits.
    pub manifest_hex: String,
}

impl ImageRef {
    /// Reads `image = "…"`: a reference pinned by digest, nothing else (a tag alone could
    /// change under the folder).
    ///
    /// # Errors
    /// What is wrong with it, in words a person can fix.
    pub fn parse(text: &str) -> Result<ImageRef, String> {
        let Some((name, digest)) = text.rsplit_once('@') else {
            return Err(
                "not pinned by digest: name it as REGISTRY/REPO@sha256:<64 hex digits> \
                 (`berm push` and `berm pull` print it)"
                    .into(),
            );
        };
        if !digest.starts_with("sha256:") {
            return Err(format!("`{digest}`: only sha256 digests are taken"));
        }
        let Some(hex) = crate::sha256_digits(digest) else {
            return Err(format!(
                "`{digest}`: a sha256 digest is 64 lowercase hex digits"
            ));
        };
        if name.is_empty()
            || !name.contains('/')
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "`{name}` is not a registry reference (REGISTRY/REPO, e.g. ghcr.io/me/notes)"
            ));
        }
        Ok(ImageRef {
            reference: text.to_string(),
            manifest_hex: hex.to_string(),
        })
    }

    /// `sha256:<hex>`.
    pub fn manifest_digest(&self) -> String {
        format!("sha256:{}", self.manifest_hex)
    }
}

/// A program found in the store, its manifest verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The program file.
    pub wasm: PathBuf,
    /// The sha256 (hex) its bytes must have: the manifest's layer digest.
    pub sha256: String,
}

/// Why the store could not give or keep a program.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The program is not in the store (or its entry was never finished).
    #[error(
        "{reference} is not in the program store {}: pull it first with `berm pull --app FOLDER` \
         (hosts never talk to a registry)",
        store.display()
    )]
    Missing {
        /// The reference.
        reference: String,
        /// The store.
        store: PathBuf,
    },
    /// An entry does not verify: edited, damaged, or not what the pin names.
    #[error("the program store entry {} does not verify: {problem}; remove it and pull again", entry.display())]
    Corrupt {
        /// The entry's directory.
        entry: PathBuf,
        /// What does not match.
        problem: String,
    },
    /// Reading or writing failed.
    #[error("the program store {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A program store at a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramStore {
    dir: PathBuf,
}

#[derive(Deserialize)]
struct OciManifest {
    layers: Vec<OciLayer>,
}

#[derive(Deserialize)]
struct OciLayer {
    digest: String,
}

impl ProgramStore {
    /// The store at `dir` (which need not exist yet).
    pub fn new(dir: impl Into<PathBuf>) -> ProgramStore {
        ProgramStore { dir: dir.into() }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry directory of `image`.
    pub fn entry(&self, image: &ImageRef) -> PathBuf {
        self.dir.join("sha256").join(&image.manifest_hex)
    }

    /// Where the signatures that held for `image` are recorded, with the repository each was
    /// found in (written and read by the CLI's trust checks, not by hosts).
    pub fn provenance(&self, image: &ImageRef) -> PathBuf {
        self.entry(image).join("provenance.json")
    }

    /// `image`'s program, once its manifest hashes to the pin and names exactly one layer.
    /// The program's own bytes are checked against [`Stored::sha256`] when read
    /// ([`crate::Program::read`]).
    ///
    /// # Errors
    /// [`StoreError::Missing`] when it was never pulled here, [`StoreError::Corrupt`] when
    /// the manifest does not verify.
    pub fn get(&self, image: &ImageRef) -> Result<Stored, StoreError> {
        let entry = self.entry(image);
        let manifest_path = entry.join("manifest.json");
        let manifest = match read_capped(&manifest_path, MAX_MANIFEST_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing {
                    reference: image.reference.clone(),
                    store: self.dir.clone(),
                });
            }
            Err(source) => {
                return Err(StoreError::Io {
                    path: manifest_path,
                    source,
                });
            }
        };
        let sha256 = layer_of(image, &manifest).map_err(|problem| StoreError::Corrupt {
            entry: entry.clone(),
            problem,
        })?;
        Ok(Stored {
            wasm: entry.join("program.wasm"),
            sha256,
        })
    }

    /// Keeps a pulled program: `manifest` must hash to `image`'s pin and name exactly one
    /// layer, and `wasm` must hash to that layer's digest; nothing is written otherwise.
    /// The program is written (and synced) before the manifest, so an entry is whole or
    /// does not count.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the bytes are not what the pin names, [`StoreError::Io`]
    /// when writing fails.
    pub fn put(
        &self,
        image: &ImageRef,
        manifest: &[u8],
        wasm: &[u8],
    ) -> Result<Stored, StoreError> {
        let entry = self.entry(image);
        let corrupt = |problem: String| StoreError::Corrupt {
            entry: entry.clone(),
            problem,
        };
        let sha256 = layer_of(image, manifest).map_err(corrupt)?;
        let actual = sha256_hex(wasm);
        if actual != sha256 {
            return Err(corrupt(format!(
                "the program hashes to sha256:{actual}, not the layer's sha256:{sha256}"
            )));
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        fs::create_dir_all(&entry).map_err(io(&entry))?;
        let program = entry.join("program.wasm");
        berm_durable::write_atomic(&program, wasm).map_err(io(&program))?;
        let manifest_path = entry.join("manifest.json");
        berm_durable::write_atomic(&manifest_path, manifest).map_err(io(&manifest_path))?;
        Ok(Stored {
            wasm: program,
            sha256,
        })
    }
}

/// The sha256 (hex) of the one layer `manifest` names, once the manifest hashes to the pin.
fn layer_of(image: &ImageRef, manifest: &[u8]) -> Result<String, String> {
    let actual = sha256_hex(manifest);
    if actual != image.manifest_hex {
        return Err(format!(
            "the manifest hashes to sha256:{actual}, not the pinned {}",
            image.manifest_digest()
        ));
    }
    let parsed: OciManifest = serde_json::from_slice(manifest)
        .map_err(|e| format!("the manifest is not an OCI image manifest: {e}"))?;
    let [layer] = parsed.layers.as_slice() else {
        return Err(format!(
            "the manifest names {} layers; a berm program is exactly one",
            parsed.layers.len()
        ));
    };
    let hex = crate::sha256_digits(&layer.digest)
        .ok_or_else(|| format!("the layer digest `{}` is not a sha256 digest", layer.digest))?;
    Ok(hex.to_string())
}

fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(cap + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::other(format!("larger than {cap} bytes")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_for(wasm: &[u8]) -> Vec<u8> {
        format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"application/vnd.wasm.config.v0+json","digest":"sha256:{}","size":2}},"layers":[{{"mediaType":"application/wasm","digest":"sha256:{}","size":{}}}]}}"#,
            sha256_hex(b"{}"),
            sha256_hex(wasm),
            wasm.len()
        )
        .into_bytes()
    }

    #[test]
    fn references_must_be_pinned_by_a_sha256_digest() {
        let hex = "a".repeat(64);
        let ok = ImageRef::parse(&format!("ghcr.io/me/notes@sha256:{hex}")).unwrap();
        assert_eq!(ok.manifest_hex, hex);
        assert!(ImageRef::parse(&format!("ghcr.io/me/notes:v1@sha256:{hex}")).is_ok());
        for bad in [
            "ghcr.io/me/notes:v1",
            "ghcr.io/me/notes@sha512:abcd",
            "ghcr.io/me/notes@sha256:ABC",
            &format!("notes@sha256:{hex}"),
            &format!("ghcr.io/me/no tes@sha256:{hex}"),
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad}");
        }
        let why = ImageRef::parse("ghcr.io/me/notes:v1").unwrap_err();
        assert!(why.contains("not pinned by digest"), "{why}");
    }

    #[test]
    fn a_stored_program_verifies_and_a_tampered_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = ProgramStore::new(dir.path());
        let wasm = b"\0asm\x01\0\0\0".to_vec();
        let manifest = manifest_for(&wasm);
        let image = ImageRef::parse(&format!(
            "registry.test/me/p@sha256:{}",
            sha256_hex(&manifest)
        ))
        .unwrap();
        let missing = store.get(&image).unwrap_err();
        assert!(matches!(missing, StoreError::Missing { .. }), "{missing}");
        assert!(missing.to_string().contains("berm pull --app"), "{missing}");
        // Bytes that are not what the pin names are never written.
        let wrong = store.put(&image, &manifest, b"\0asm other").unwrap_err();
        assert!(matches!(wrong, StoreError::Corrupt { .. }), "{wrong}");
        assert!(!store.entry(&image).join("manifest.json").exists());
        let stored = store.put(&image, &manifest, &wasm).unwrap();
        assert_eq!(store.get(&image).unwrap(), stored);
        assert_eq!(stored.sha256, sha256_hex(&wasm));
        // An edited manifest no longer hashes to the pin.
        let mut edited = manifest.clone();
        edited.push(b' ');
        std::fs::write(store.entry(&image).join("manifest.json"), &edited).unwrap();
        let corrupt = store.get(&image).unwrap_err();
        assert!(corrupt.to_string().contains("does not verify"), "{corrupt}");
    }
}
