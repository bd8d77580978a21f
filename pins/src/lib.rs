//! The pins of berm's guest kernel and rootfs, compiled in.
//!
//! `kernel/manifest.toml` and `rootfs/manifest.toml` are the single source of truth for which
//! artifacts a berm-vmm build accepts. They are compiled into every binary that depends on this
//! crate with `include_str!`, so a binary and the artifacts it boots cannot drift apart
//! silently: a rebuilt artifact whose hash differs is refused until the manifest (and therefore
//! the binary) is updated. The build scripts read the same files.
//!
//! This crate also fixes the artifact cache layout (see [`ArtifactStore`]) that the build
//! scripts and `berm vm install` install into and berm-vmm reads from, and where
//! `berm vm install` fetches from by default ([`DEFAULT_URL_TEMPLATE`]).
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The kernel manifest exactly as committed.
pub const KERNEL_MANIFEST: &str = include_str!("../../kernel/manifest.toml");
/// The rootfs manifest exactly as committed.
pub const ROOTFS_MANIFEST: &str = include_str!("../../rootfs/manifest.toml");

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParsePinsError {
    /// The manifest is not valid TOML of the expected shape.
    #[error("{manifest} is not a valid pins manifest")]
    Toml {
        /// Which manifest.
        manifest: &'static str,
        /// What the TOML parser said.
        #[source]
        source: toml::de::Error,
    },
    /// A sha256 field does not hold 64 lowercase hex digits (for example `unpinned`).
    #[error("{manifest}: {field} is {value:?}, not a sha256 (64 lowercase hex digits)")]
    NotASha256 {
        /// Which manifest.
        manifest: &'static str,
        /// The dotted field name.
        field: &'static str,
        /// The value found.
        value: String,
    },
}

/// A sha256 digest: 64 lowercase hex digits, checked on construction.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Sha256Hex(String);

impl Sha256Hex {
    /// Accepts exactly 64 lowercase hex digits, the form `sha256sum` prints.
    pub fn parse(value: &str) -> Option<Self> {
        let ok = value.len() == 64
            && value
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| Self(value.to_owned()))
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// One pinned file: what it must hash to and how long it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImagePin {
    /// The sha256 of the file's bytes.
    pub sha256: Sha256Hex,
    /// Its size in bytes.
    pub size: u64,
}

/// The pins of the guest kernel (`kernel/manifest.toml`).
#[derive(Clone, Debug)]
pub struct KernelPins {
    /// Debian's source package version the kernel is built from (e.g. `6.12.117-1~deb12u1`).
    pub debian_version: String,
    /// The upstream Linux version (e.g. `6.12.117`).
    pub linux: String,
    /// sha256 of the `.config` the build produced.
    pub config_sha256: Sha256Hex,
    /// The vmlinux itself.
    pub image: ImagePin,
    /// The one command line both backends boot with.
    pub cmdline: String,
}

/// The pins of the erofs root filesystem (`rootfs/manifest.toml`).
#[derive(Clone, Debug)]
pub struct RootfsPins {
    /// The image itself.
    pub image: ImagePin,
    /// The filesystem type the kernel mounts it as (`erofs`).
    pub fstype: String,
    /// sha256 of the `berm-init` binary inside the image.
    pub berm_init_sha256: Sha256Hex,
    /// sha256 of the `bermd` binary inside the image (one runs per app).
    pub bermd_sha256: Sha256Hex,
    /// The policy digest every app of this build reports in `app_started` (Landlock rules as
    /// templates and the bermd allow list; `berm-init policy-sha256`).
    pub app_policy_sha256: Sha256Hex,
}

#[derive(Deserialize)]
struct KernelFile {
    source: KernelSourceFile,
    config: KernelConfigFile,
    image: ImageFile,
    boot: BootFile,
}

#[derive(Deserialize)]
struct KernelSourceFile {
    version: String,
    linux: String,
}

#[derive(Deserialize)]
struct KernelConfigFile {
    config_sha256: String,
}

#[derive(Deserialize)]
struct ImageFile {
    sha256: String,
    size: u64,
}

#[derive(Deserialize)]
struct BootFile {
    cmdline: String,
}

#[derive(Deserialize)]
struct RootfsFile {
    image: RootfsImageFile,
    contents: RootfsContentsFile,
}

#[derive(Deserialize)]
struct RootfsImageFile {
    sha256: String,
    size: u64,
    fstype: String,
}

#[derive(Deserialize)]
struct RootfsContentsFile {
    berm_init_sha256: String,
    bermd_sha256: String,
    app_policy_sha256: String,
}

fn sha(
    manifest: &'static str,
    field: &'static str,
    value: &str,
) -> Result<Sha256Hex, ParsePinsError> {
    Sha256Hex::parse(value).ok_or_else(|| ParsePinsError::NotASha256 {
        manifest,
        field,
        value: value.to_owned(),
    })
}

impl KernelPins {
    /// Parses a kernel manifest; [`KernelPins::compiled_in`] is the one berm-vmm uses.
    pub fn parse(text: &str) -> Result<Self, ParsePinsError> {
        const NAME: &str = "kernel/manifest.toml";
        let file: KernelFile = toml::from_str(text).map_err(|source| ParsePinsError::Toml {
            manifest: NAME,
            source,
        })?;
        Ok(Self {
            debian_version: file.source.version,
            linux: file.source.linux,
            config_sha256: sha(NAME, "config.config_sha256", &file.config.config_sha256)?,
            image: ImagePin {
                sha256: sha(NAME, "image.sha256", &file.image.sha256)?,
                size: file.image.size,
            },
            cmdline: file.boot.cmdline,
        })
    }

    /// The pins compiled into this binary.
    pub fn compiled_in() -> Result<Self, ParsePinsError> {
        Self::parse(KERNEL_MANIFEST)
    }
}

impl RootfsPins {
    /// Parses a rootfs manifest; [`RootfsPins::compiled_in`] is the one berm-vmm uses.
    pub fn parse(text: &str) -> Result<Self, ParsePinsError> {
        const NAME: &str = "rootfs/manifest.toml";
        let file: RootfsFile = toml::from_str(text).map_err(|source| ParsePinsError::Toml {
            manifest: NAME,
            source,
        })?;
        Ok(Self {
            image: ImagePin {
                sha256: sha(NAME, "image.sha256", &file.image.sha256)?,
                size: file.image.size,
            },
            fstype: file.image.fstype,
            berm_init_sha256: sha(
                NAME,
                "contents.berm_init_sha256",
                &file.contents.berm_init_sha256,
            )?,
            bermd_sha256: sha(NAME, "contents.bermd_sha256", &file.contents.bermd_sha256)?,
            app_policy_sha256: sha(
                NAME,
                "contents.app_policy_sha256",
                &file.contents.app_policy_sha256,
            )?,
        })
    }

    /// The pins compiled into this binary.
    pub fn compiled_in() -> Result<Self, ParsePinsError> {
        Self::parse(ROOTFS_MANIFEST)
    }
}

/// Where pinned artifacts live on the host, addressed by their sha256.
///
/// Layout: `<root>/kernel/<sha256>/vmlinux` and `<root>/rootfs/<sha256>/rootfs.erofs`.
/// `scripts/build-kernel.sh` and `scripts/build-rootfs.sh` install there once a build matches
/// its pin; berm-vmm reads from there unless given `--kernel`/`--rootfs`.
#[derive(Clone, Debug)]
pub struct ArtifactStore {
    root: PathBuf,
}

impl ArtifactStore {
    /// A store at an explicit root.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The default store: `$BERM_VM_ARTIFACTS`, else `$XDG_CACHE_HOME/berm/vm`, else
    /// `$HOME/.cache/berm/vm` — the same rule as `scripts/lib-pins.sh`. `None` when none of
    /// those variables is set.
    pub fn from_env() -> Option<Self> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(root) = var("BERM_VM_ARTIFACTS") {
            return Some(Self::at(root));
        }
        let cache =
            var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|home| home.join(".cache")))?;
        Some(Self::at(cache.join("berm").join("vm")))
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the kernel with this digest is installed.
    pub fn kernel(&self, sha256: &Sha256Hex) -> PathBuf {
        self.root
            .join("kernel")
            .join(sha256.as_str())
            .join("vmlinux")
    }

    /// Where the rootfs with this digest is installed.
    pub fn rootfs(&self, sha256: &Sha256Hex) -> PathBuf {
        self.root
            .join("rootfs")
            .join(sha256.as_str())
            .join("rootfs.erofs")
    }
}

/// Where `berm vm install` fetches the pinned artifacts by default: the public repository's
/// `vm-artifacts` release, one asset per artifact named by its sha256 (see docs/vm.md).
/// Placeholders: `{kind}` (`kernel`, `rootfs`), `{sha256}`, `{file}` (`vmlinux`, `rootfs.erofs`).
pub const DEFAULT_URL_TEMPLATE: &str =
    "https://github.com/berm-os/berm/releases/download/vm-artifacts/{kind}-{sha256}-{file}";

/// The two pinned artifacts, named the way the store, the URL template and messages name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactKind {
    /// The ELF vmlinux.
    Kernel,
    /// The erofs image.
    Rootfs,
}

impl ArtifactKind {
    /// Both, in install order.
    pub const ALL: [ArtifactKind; 2] = [ArtifactKind::Kernel, ArtifactKind::Rootfs];

    /// `kernel` or `rootfs`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Rootfs => "rootfs",
        }
    }

    /// The file name inside the store: `vmlinux` or `rootfs.erofs`.
    pub fn file(self) -> &'static str {
        match self {
            Self::Kernel => "vmlinux",
            Self::Rootfs => "rootfs.erofs",
        }
    }

    /// Where the store keeps the artifact with this digest.
    pub fn path_in(self, store: &ArtifactStore, sha256: &Sha256Hex) -> PathBuf {
        match self {
            Self::Kernel => store.kernel(sha256),
            Self::Rootfs => store.rootfs(sha256),
        }
    }

    /// The URL of the artifact with this digest under `template`.
    pub fn url(self, template: &str, sha256: &Sha256Hex) -> String {
        template
            .replace("{kind}", self.name())
            .replace("{sha256}", sha256.as_str())
            .replace("{file}", self.file())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_in_manifests_parse() {
        let kernel = KernelPins::compiled_in().expect("kernel/manifest.toml must be pinned");
        assert!(kernel.cmdline.contains("init=/sbin/berm-init"));
        assert!(kernel.cmdline.contains("reboot=k"));
        let rootfs = RootfsPins::compiled_in().expect("rootfs/manifest.toml must be pinned");
        assert_eq!(rootfs.fstype, "erofs");
    }

    #[test]
    fn unpinned_values_are_refused_by_name() {
        let text = KERNEL_MANIFEST.replacen("\nsha256 = \"", "\nsha256 = \"unpinned", 1);
        let err = KernelPins::parse(&text).unwrap_err().to_string();
        assert!(err.contains("not a sha256"), "{err}");
    }

    #[test]
    fn sha256_hex_is_strict() {
        assert!(Sha256Hex::parse(&"a".repeat(64)).is_some());
        assert!(Sha256Hex::parse(&"A".repeat(64)).is_none());
        assert!(Sha256Hex::parse(&"a".repeat(63)).is_none());
        assert!(Sha256Hex::parse(&"g".repeat(64)).is_none());
    }

    #[test]
    fn url_templates_fill_every_placeholder() {
        let digest = Sha256Hex::parse(&"1".repeat(64)).unwrap();
        let url = ArtifactKind::Rootfs.url(DEFAULT_URL_TEMPLATE, &digest);
        assert_eq!(
            url,
            format!(
                "https://github.com/berm-os/berm/releases/download/vm-artifacts/rootfs-{}-rootfs.erofs",
                "1".repeat(64)
            )
        );
        assert!(!url.contains('{'));
    }

    #[test]
    fn store_layout_is_content_addressed() {
        let store = ArtifactStore::at("/x");
        let digest = Sha256Hex::parse(&"0".repeat(64)).unwrap();
        assert_eq!(
            store.kernel(&digest),
            Path::new(&format!("/x/kernel/{}/vmlinux", "0".repeat(64)))
        );
        assert_eq!(
            store.rootfs(&digest),
            Path::new(&format!("/x/rootfs/{}/rootfs.erofs", "0".repeat(64)))
        );
    }
}
