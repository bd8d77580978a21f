//! The shape of a berm program as an OCI artifact: media types, the config
//! blob, the annotations, and the caps applied to everything pulled.

use std::collections::BTreeMap;

use berm_manifest::Manifest;
use serde::{Deserialize, Serialize};

/// Media type of the image manifest berm pushes. Set explicitly: oci-client
/// leaves it out unless told, and its built-in wasm constants are the old
/// `vnd.wasm.*.v1` ones, not the CNCF layout.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// Media type of the one layer: the module itself (CNCF wasm OCI layout).
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// Media type of the config blob (CNCF wasm OCI layout), which also carries
/// berm's manifest under [`BERM_CONFIG_KEY`].
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// Key of the config object that holds berm's [`Manifest`]. Other tools that
/// read the CNCF layout ignore it; berm reads it to describe a program
/// without downloading the layer.
pub const BERM_CONFIG_KEY: &str = "berm";

/// Largest program accepted, pushed or pulled. A registry that announces or
/// sends more is refused before the bytes are kept.
pub const MAX_PROGRAM_BYTES: u64 = 64 << 20;

/// Largest config blob accepted: berm's manifest section is capped at 1 MiB
/// (`berm_manifest::MAX_MANIFEST_BYTES`), and the config adds little to it.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Largest OCI manifest accepted; berm's are under 2 KiB.
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// `created` in the config. Fixed, so that pushing the same module always
/// yields the same config and manifest digests (as reproducible builds do);
/// when a program was built is the business of its git history.
const CREATED: &str = "1970-01-01T00:00:00Z";

/// Manifest annotation holding the program's description.
pub(crate) const ANNOTATION_DESCRIPTION: &str = "org.opencontainers.image.description";
/// Manifest annotation holding the comma-separated tool names.
pub(crate) const ANNOTATION_TOOLS: &str = "dev.berm.tools";
/// Layer annotation holding the file name.
pub(crate) const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";

/// The config blob: the CNCF `application/vnd.wasm.config.v0+json` fields
/// plus berm's manifest, so that one small blob describes the program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// RFC 3339 time, fixed at the Unix epoch (see the crate docs).
    pub created: String,
    /// Who pushed it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Always `wasm`.
    pub architecture: String,
    /// `wasip1` as the layout asks for core modules; berm programs use no
    /// WASI, only berm's own syscalls, which the manifest lists.
    pub os: String,
    /// The layer digests, in manifest order (here: the program's digest).
    pub layer_digests: Vec<String>,
    /// berm's manifest, as `Manifest::from_image` read it before the push.
    pub berm: Manifest,
}

impl WasmConfig {
    /// The config for a module with `manifest` whose bytes hash to `digest`.
    pub(crate) fn for_program(manifest: Manifest, digest: &str) -> WasmConfig {
        WasmConfig {
            created: CREATED.to_string(),
            author: None,
            architecture: "wasm".to_string(),
            os: "wasip1".to_string(),
            layer_digests: vec![digest.to_string()],
            berm: manifest,
        }
    }
}

/// The manifest annotations: enough for a registry UI to say what the
/// program is without fetching any blob.
pub(crate) fn manifest_annotations(manifest: &Manifest) -> BTreeMap<String, String> {
    let tools: Vec<&str> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
    BTreeMap::from([
        (
            ANNOTATION_DESCRIPTION.to_string(),
            manifest.description.clone(),
        ),
        (ANNOTATION_TOOLS.to_string(), tools.join(",")),
    ])
}

/// `sha256:<hex>` of `bytes`, the OCI digest form (the same text as
/// [`berm_manifest::Digest`]'s `Display`).
pub(crate) fn oci_digest(bytes: &[u8]) -> String {
    berm_manifest::Digest::of(bytes).to_string()
}
