//! The pins of berm's guest kernel and rootfs, compiled in, one set per guest architecture.
//!
//! `kernel/manifest.toml` and `rootfs/manifest.toml` are the single source of truth for which
//! artifacts a berm-vmm build accepts. They are compiled into every binary that depends on this
//! crate with `include_str!`, so a binary and the artifacts it boots cannot drift apart
//! silently: a rebuilt artifact whose hash differs is refused until the manifest (and therefore
//! the binary) is updated. The build scripts read the same files.
//!
//! This crate also fixes the artifact cache layout (see [`ArtifactStore`]) that the build
//! scripts and `berm vm install` install into and berm-vmm reads from, the one writer every
//! install goes through ([`StoreWriter`]), and where `berm vm install` fetches from by default
//! ([`DEFAULT_SOURCE`]).
#![forbid(unsafe_code)]

mod install;

pub use install::{InstallError, StoreWriter};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The kernel manifest exactly as committed.
pub const KERNEL_MANIFEST: &str = include_str!("../../kernel/manifest.toml");
/// The rootfs manifest exactly as committed.
pub const ROOTFS_MANIFEST: &str = include_str!("../../rootfs/manifest.toml");

/// The guest architecture a host boots unless told otherwise: its own (Rust's `target_arch`
/// name, which is also the manifests' table name: `x86_64`, `aarch64`).
pub const HOST_ARCH: &str = std::env::consts::ARCH;

/// Every guest architecture the manifests pin, in the order tools list them.
pub const ARCHES: [&str; 2] = ["x86_64", "aarch64"];

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
    #[error("{manifest}: {arch}.{field} is {value:?}, not a sha256 (64 lowercase hex digits)")]
    NotASha256 {
        /// Which manifest.
        manifest: &'static str,
        /// The architecture's table.
        arch: String,
        /// The dotted field name within it.
        field: &'static str,
        /// The value found.
        value: String,
    },
    /// The manifest pins nothing for this architecture.
    #[error(
        "{manifest} pins no {arch} guest (it has [{pinned}]); berm builds x86_64 and aarch64 guests"
    )]
    NoArch {
        /// Which manifest.
        manifest: &'static str,
        /// The architecture asked for.
        arch: String,
        /// The architectures it does pin.
        pinned: String,
    },
    /// The kernel's image format is not one berm knows how to boot.
    #[error(
        "{manifest}: {arch}.image.format is {format:?}; berm boots elf-vmlinux (x86_64) and arm64-image (aarch64)"
    )]
    Format {
        /// Which manifest.
        manifest: &'static str,
        /// The architecture's table.
        arch: String,
        /// The format found.
        format: String,
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

/// The pins of the guest kernel for one architecture (`kernel/manifest.toml`).
#[derive(Clone, Debug)]
pub struct KernelPins {
    /// The guest architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// The file the kernel is: `vmlinux` (an ELF, x86_64) or `Image` (a raw arm64 Image), as
    /// the artifact store and `berm vm install` name it.
    pub file: &'static str,
    /// Debian's source package version the kernel is built from (e.g. `6.12.117-1~deb12u1`).
    pub debian_version: String,
    /// The upstream Linux version (e.g. `6.12.117`).
    pub linux: String,
    /// sha256 of the `.config` the build produced.
    pub config_sha256: Sha256Hex,
    /// The kernel file itself.
    pub image: ImagePin,
    /// The one command line both backends boot with.
    pub cmdline: String,
    /// Words the QEMU backend appends under TCG (full emulation) and nowhere else: boot-time
    /// calibrations that real hardware answers at once but an emulated CPU spends a third of
    /// a second on (`docs/perf-vm.md`). Empty when the manifest names none.
    pub tcg_cmdline: String,
}

/// The pins of the erofs root filesystem for one architecture (`rootfs/manifest.toml`).
#[derive(Clone, Debug)]
pub struct RootfsPins {
    /// The guest architecture (`x86_64`, `aarch64`).
    pub arch: String,
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
    #[serde(flatten)]
    arches: BTreeMap<String, KernelArchFile>,
}

#[derive(Deserialize)]
struct KernelArchFile {
    config: KernelConfigFile,
    image: KernelImageFile,
    boot: BootFile,
}

#[derive(Deserialize)]
struct KernelImageFile {
    format: String,
    sha256: String,
    size: u64,
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
struct BootFile {
    cmdline: String,
    #[serde(default)]
    tcg_cmdline: String,
}

#[derive(Deserialize)]
struct RootfsFile {
    image: RootfsRecipeFile,
    #[serde(flatten)]
    arches: BTreeMap<String, RootfsArchFile>,
}

#[derive(Deserialize)]
struct RootfsRecipeFile {
    fstype: String,
}

#[derive(Deserialize)]
struct RootfsArchFile {
    image: RootfsImageFile,
    contents: RootfsContentsFile,
}

#[derive(Deserialize)]
struct RootfsImageFile {
    sha256: String,
    size: u64,
}

#[derive(Deserialize)]
struct RootfsContentsFile {
    berm_init_sha256: String,
    bermd_sha256: String,
    app_policy_sha256: String,
}

/// Takes `arch`'s table out of a manifest's per-architecture tables.
fn arch_table<T>(
    manifest: &'static str,
    mut arches: BTreeMap<String, T>,
    arch: &str,
) -> Result<T, ParsePinsError> {
    let pinned = arches.keys().cloned().collect::<Vec<_>>().join("], [");
    arches.remove(arch).ok_or_else(|| ParsePinsError::NoArch {
        manifest,
        arch: arch.to_owned(),
        pinned,
    })
}

/// A sha256 field of `arch`'s table, checked.
fn sha(
    manifest: &'static str,
    arch: &str,
    field: &'static str,
    value: &str,
) -> Result<Sha256Hex, ParsePinsError> {
    Sha256Hex::parse(value).ok_or_else(|| ParsePinsError::NotASha256 {
        manifest,
        arch: arch.to_owned(),
        field,
        value: value.to_owned(),
    })
}

/// Reads a manifest's TOML into its file type.
fn toml_file<F: serde::de::DeserializeOwned>(
    manifest: &'static str,
    text: &str,
) -> Result<F, ParsePinsError> {
    toml::from_str(text).map_err(|source| ParsePinsError::Toml { manifest, source })
}

/// What [`KernelPins`] and [`RootfsPins`] share besides `parse_for`: the host's own
/// architecture, and the manifest compiled into this binary.
macro_rules! pins_from_manifest {
    ($pins:ident, $compiled:ident) => {
        impl $pins {
            /// Parses the pins of the host's own architecture ([`HOST_ARCH`]) from the
            /// manifest's text.
            pub fn parse(text: &str) -> Result<Self, ParsePinsError> {
                Self::parse_for(text, HOST_ARCH)
            }

            /// The host architecture's pins compiled into this binary.
            pub fn compiled_in() -> Result<Self, ParsePinsError> {
                Self::parse($compiled)
            }

            /// `arch`'s pins compiled into this binary.
            pub fn compiled_in_for(arch: &str) -> Result<Self, ParsePinsError> {
                Self::parse_for($compiled, arch)
            }
        }
    };
}

pins_from_manifest!(KernelPins, KERNEL_MANIFEST);
pins_from_manifest!(RootfsPins, ROOTFS_MANIFEST);

impl KernelPins {
    /// Parses `arch`'s pins from a kernel manifest; [`KernelPins::compiled_in_for`] is the
    /// one berm-vmm uses. Only `arch`'s tables are checked, so another architecture being
    /// re-pinned does not break this one.
    pub fn parse_for(text: &str, arch: &str) -> Result<Self, ParsePinsError> {
        const NAME: &str = "kernel/manifest.toml";
        let file: KernelFile = toml_file(NAME, text)?;
        let table = arch_table(NAME, file.arches, arch)?;
        let file_name = match table.image.format.as_str() {
            "elf-vmlinux" => "vmlinux",
            "arm64-image" => "Image",
            _ => {
                return Err(ParsePinsError::Format {
                    manifest: NAME,
                    arch: arch.to_owned(),
                    format: table.image.format,
                });
            }
        };
        Ok(Self {
            arch: arch.to_owned(),
            file: file_name,
            debian_version: file.source.version,
            linux: file.source.linux,
            config_sha256: sha(
                NAME,
                arch,
                "config.config_sha256",
                &table.config.config_sha256,
            )?,
            image: ImagePin {
                sha256: sha(NAME, arch, "image.sha256", &table.image.sha256)?,
                size: table.image.size,
            },
            cmdline: table.boot.cmdline,
            tcg_cmdline: table.boot.tcg_cmdline,
        })
    }
}

impl RootfsPins {
    /// Parses `arch`'s pins from a rootfs manifest; [`RootfsPins::compiled_in_for`] is the
    /// one berm-vmm uses. Only `arch`'s tables are checked.
    pub fn parse_for(text: &str, arch: &str) -> Result<Self, ParsePinsError> {
        const NAME: &str = "rootfs/manifest.toml";
        let file: RootfsFile = toml_file(NAME, text)?;
        let table = arch_table(NAME, file.arches, arch)?;
        let contents = &table.contents;
        Ok(Self {
            arch: arch.to_owned(),
            image: ImagePin {
                sha256: sha(NAME, arch, "image.sha256", &table.image.sha256)?,
                size: table.image.size,
            },
            fstype: file.image.fstype,
            berm_init_sha256: sha(
                NAME,
                arch,
                "contents.berm_init_sha256",
                &contents.berm_init_sha256,
            )?,
            bermd_sha256: sha(NAME, arch, "contents.bermd_sha256", &contents.bermd_sha256)?,
            app_policy_sha256: sha(
                NAME,
                arch,
                "contents.app_policy_sha256",
                &contents.app_policy_sha256,
            )?,
        })
    }
}

/// Where pinned artifacts live on the host, addressed by their sha256.
///
/// Layout: `<root>/kernel/<sha256>/vmlinux` (x86_64) or `<root>/kernel/<sha256>/Image`
/// (aarch64), and `<root>/rootfs/<sha256>/rootfs.erofs`.
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

    /// Where the x86_64 kernel (a `vmlinux`) with this digest is installed.
    pub fn kernel(&self, sha256: &Sha256Hex) -> PathBuf {
        self.kernel_file(sha256, "vmlinux")
    }

    /// Where the kernel with this digest is installed under the file name its pins give
    /// ([`KernelPins::file`]).
    pub fn kernel_file(&self, sha256: &Sha256Hex, file: &str) -> PathBuf {
        self.root.join("kernel").join(sha256.as_str()).join(file)
    }

    /// Where the kernel `pins` names is installed.
    pub fn kernel_for(&self, pins: &KernelPins) -> PathBuf {
        self.kernel_file(&pins.image.sha256, pins.file)
    }

    /// Where the rootfs with this digest is installed.
    pub fn rootfs(&self, sha256: &Sha256Hex) -> PathBuf {
        self.root
            .join("rootfs")
            .join(sha256.as_str())
            .join("rootfs.erofs")
    }
}

/// Where `berm vm install` fetches the pinned artifacts when neither `--from` nor
/// `$BERM_VM_MIRROR` says otherwise: the OCI repository the release pushes them to with
/// `berm vm push` (docs/vm.md). Blobs are fetched by their pinned digests, so any registry or
/// mirror holding them serves as well.
pub const DEFAULT_SOURCE: &str = "oci://ghcr.io/berm-os/vm";

/// The environment variable that replaces [`DEFAULT_SOURCE`] (any `--from` form).
pub const MIRROR_VAR: &str = "BERM_VM_MIRROR";

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

    /// The file name inside the store: `vmlinux` (an x86_64 kernel; see
    /// [`KernelPins::file`] for another architecture's) or `rootfs.erofs`.
    pub fn file(self) -> &'static str {
        match self {
            Self::Kernel => "vmlinux",
            Self::Rootfs => "rootfs.erofs",
        }
    }

    /// Where the store keeps the artifact with this digest.
    pub fn path_in(self, store: &ArtifactStore, sha256: &Sha256Hex) -> PathBuf {
        self.path_named(store, sha256, self.file())
    }

    /// Where the store keeps the artifact with this digest under the file name `file` (an
    /// aarch64 kernel is an `Image`, [`KernelPins::file`]).
    pub fn path_named(self, store: &ArtifactStore, sha256: &Sha256Hex, file: &str) -> PathBuf {
        store
            .root()
            .join(self.name())
            .join(sha256.as_str())
            .join(file)
    }

    /// The URL of the artifact with this digest under `template`.
    pub fn url(self, template: &str, sha256: &Sha256Hex) -> String {
        self.url_named(template, sha256, self.file())
    }

    /// The URL of the artifact with this digest and file name under `template`.
    pub fn url_named(self, template: &str, sha256: &Sha256Hex, file: &str) -> String {
        template
            .replace("{kind}", self.name())
            .replace("{sha256}", sha256.as_str())
            .replace("{file}", file)
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
        let err = KernelPins::parse_for(&text, "x86_64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("x86_64.image.sha256"), "{err}");
        assert!(err.contains("not a sha256"), "{err}");
    }

    #[test]
    fn every_architecture_is_pinned_with_its_own_image_and_command_line() {
        let x86 = KernelPins::compiled_in_for("x86_64").unwrap();
        let arm = KernelPins::compiled_in_for("aarch64").unwrap();
        assert_eq!((x86.file, arm.file), ("vmlinux", "Image"));
        assert_ne!(x86.image.sha256, arm.image.sha256);
        assert!(arm.cmdline.contains("init=/sbin/berm-init"));
        // x86-only words would reach berm-init as arguments on arm64.
        for word in ["reboot=k", "no-kvmapf", "no_timer_check"] {
            assert!(!arm.cmdline.contains(word), "{word}");
        }
        let x86_root = RootfsPins::compiled_in_for("x86_64").unwrap();
        let arm_root = RootfsPins::compiled_in_for("aarch64").unwrap();
        assert_ne!(x86_root.image.sha256, arm_root.image.sha256);
        assert_ne!(x86_root.bermd_sha256, arm_root.bermd_sha256);
        for arch in ARCHES {
            assert!(KernelPins::compiled_in_for(arch).is_ok(), "{arch}");
        }
    }

    #[test]
    fn an_unknown_architecture_is_refused_naming_the_pinned_ones() {
        let err = KernelPins::compiled_in_for("riscv64")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pins no riscv64 guest"), "{err}");
        assert!(err.contains("[aarch64], [x86_64]"), "{err}");
        let err = RootfsPins::compiled_in_for("s390x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pins no s390x guest"), "{err}");
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
        let url = ArtifactKind::Rootfs.url("https://example.org/{kind}-{sha256}-{file}", &digest);
        assert_eq!(
            url,
            format!("https://example.org/rootfs-{}-rootfs.erofs", "1".repeat(64))
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
