//! What can go wrong moving a program, one enum per operation. Every
//! variant names the reference, registry or path involved and says what to
//! do about it.

use std::path::PathBuf;

use berm_manifest::ManifestError;
use oci_client::errors::{OciDistributionError, OciErrorCode};

/// Talking to a registry failed, whatever the operation.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The reference does not parse.
    #[error(
        "`{reference}` is not an OCI reference ({message}); write e.g. `ghcr.io/org/name:tag` or `host:port/name@sha256:<hex>`"
    )]
    Reference {
        /// What was given.
        reference: String,
        /// Why it does not parse.
        message: String,
    },
    /// A repository was wanted (`berm vm push`, `--from oci://`) but a tag or digest was given.
    #[error(
        "`{reference}` names a tag or digest; a VM repository is `host[:port]/repo` without either: the tag is derived from the pins and blobs are fetched by their pinned digests"
    )]
    NotARepository {
        /// What was given.
        reference: String,
    },
    /// The credentials could not be read.
    #[error("credentials for `{registry}`: {message}")]
    Credentials {
        /// The registry.
        registry: String,
        /// What is wrong.
        message: String,
    },
    /// The registry refused us (HTTP 401/403).
    #[error("registry `{registry}` refused access to `{reference}` ({detail}); {hint}")]
    Unauthorized {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
        /// What the registry said.
        detail: String,
        /// What to do next: depends on whether credentials were sent.
        hint: &'static str,
    },
    /// The repository, tag, digest or blob does not exist there.
    #[error("`{reference}` was not found on registry `{registry}` ({detail})")]
    NotFound {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
        /// What the registry said.
        detail: String,
    },
    /// No connection could be made (refused, timed out, TLS failed).
    #[error("cannot reach registry `{registry}` over {scheme}: {cause}{hint}")]
    Unreachable {
        /// The registry.
        registry: String,
        /// `https` or `http`.
        scheme: &'static str,
        /// The transport's message, with its causes.
        cause: String,
        /// A suggestion, starting with `; ` when there is one.
        hint: &'static str,
    },
    /// The registry answered, but not as the distribution spec says.
    #[error("registry `{registry}` failed on `{reference}`: {cause}")]
    Protocol {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
        /// What went wrong, with its causes.
        cause: String,
    },
}

/// Hint for a 401 when no credentials were sent.
pub(crate) const HINT_NO_CREDENTIALS: &str = "it needs credentials: set BERM_REGISTRY_USER and BERM_REGISTRY_PASSWORD, or add `auths.<host>.auth` to ~/.docker/config.json";
/// Hint for a 401 when credentials were sent.
pub(crate) const HINT_BAD_CREDENTIALS: &str = "check the user and password in BERM_REGISTRY_USER/BERM_REGISTRY_PASSWORD or ~/.docker/config.json, and that they may push or pull this repository";

impl RegistryError {
    /// Sorts an oci-client error into what a user can act on.
    pub(crate) fn from_oci(
        err: OciDistributionError,
        registry: &str,
        reference: &str,
        scheme: &'static str,
        sent_credentials: bool,
    ) -> RegistryError {
        let registry = registry.to_string();
        let reference = reference.to_string();
        let hint = if sent_credentials {
            HINT_BAD_CREDENTIALS
        } else {
            HINT_NO_CREDENTIALS
        };
        let unauthorized = |detail: String| RegistryError::Unauthorized {
            registry: registry.clone(),
            reference: reference.clone(),
            detail,
            hint,
        };
        match err {
            OciDistributionError::UnauthorizedError { .. } => unauthorized("HTTP 401".into()),
            OciDistributionError::AuthenticationFailure(reason) => {
                unauthorized(format!("token request failed: {}", reason.trim()))
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                let detail = envelope
                    .errors
                    .iter()
                    .map(|e| format!("{:?}: {}", e.code, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                let code = envelope.errors.first().map(|e| &e.code);
                match code {
                    Some(
                        OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound,
                    ) => RegistryError::NotFound {
                        registry,
                        reference,
                        detail,
                    },
                    Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => unauthorized(detail),
                    _ => RegistryError::Protocol {
                        registry,
                        reference,
                        cause: detail,
                    },
                }
            }
            OciDistributionError::ServerError { code, message, .. } => match code {
                401 | 403 => unauthorized(format!("HTTP {code}")),
                404 => RegistryError::NotFound {
                    registry,
                    reference,
                    detail: format!("HTTP 404 {}", message.trim()),
                },
                _ => RegistryError::Protocol {
                    registry,
                    reference,
                    cause: format!("HTTP {code}: {}", message.trim()),
                },
            },
            OciDistributionError::RequestError(e)
                if matches!(e.status().map(|s| s.as_u16()), Some(401 | 403)) =>
            {
                unauthorized(format!("HTTP {}", e.status().map_or(0, |s| s.as_u16())))
            }
            OciDistributionError::RequestError(e)
                if e.status().is_some_and(|s| s.as_u16() == 404) =>
            {
                RegistryError::NotFound {
                    registry,
                    reference,
                    detail: "HTTP 404".into(),
                }
            }
            OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
                RegistryError::Unreachable {
                    registry,
                    scheme,
                    cause: berm_errors::chain(&e),
                    hint: if scheme == "https" {
                        "; if this registry speaks only plain HTTP and you trust the network, pass --insecure"
                    } else {
                        ""
                    },
                }
            }
            other => RegistryError::Protocol {
                registry,
                reference,
                cause: berm_errors::chain(&other),
            },
        }
    }
}

/// `berm push` failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The file could not be read.
    #[error("cannot read `{path}`")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The module is larger than [`crate::MAX_PROGRAM_BYTES`].
    #[error("`{what}` is {size} bytes, over the cap of {cap} bytes for a program")]
    TooLarge {
        /// The file or reference.
        what: String,
        /// Its size.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// The module would not deploy, so it is not pushed.
    #[error("`{what}` would not deploy, so it was not pushed")]
    WouldNotDeploy {
        /// The file or reference.
        what: String,
        /// What is wrong with it.
        #[source]
        source: ManifestError,
    },
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// `berm pull` (or a pull before deploy) failed. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The reference names an image index (or Docker manifest list).
    #[error(
        "`{reference}` is an image index ({media_type}), not a berm program: a program is one manifest with one `application/wasm` layer; pull one of the index's manifests by digest"
    )]
    Index {
        /// The reference.
        reference: String,
        /// The media type found.
        media_type: String,
    },
    /// The manifest is not an OCI image manifest.
    #[error(
        "`{reference}` has manifest media type `{media_type}`; a berm program's is `{}`",
        crate::MANIFEST_MEDIA_TYPE
    )]
    ManifestMediaType {
        /// The reference.
        reference: String,
        /// The media type found (or `none`).
        media_type: String,
    },
    /// The manifest does not parse.
    #[error("`{reference}`: the registry sent a manifest that does not parse: {message}")]
    ManifestJson {
        /// The reference.
        reference: String,
        /// The parser's message.
        message: String,
    },
    /// The manifest is bigger than [`crate::MAX_MANIFEST_BYTES`].
    #[error(
        "`{reference}`: the registry sent a {size}-byte manifest, over the cap of {}",
        crate::MAX_MANIFEST_BYTES
    )]
    ManifestTooLarge {
        /// The reference.
        reference: String,
        /// Its size.
        size: usize,
    },
    /// Not exactly one layer.
    #[error(
        "`{reference}` has {count} layers ({media_types}); a berm program has exactly one, the `application/wasm` module"
    )]
    LayerCount {
        /// The reference.
        reference: String,
        /// How many.
        count: usize,
        /// Their media types, comma-separated.
        media_types: String,
    },
    /// The layer is not `application/wasm`.
    #[error(
        "`{reference}` has a layer of media type `{media_type}`; a berm program's layer is `{}`",
        crate::LAYER_MEDIA_TYPE
    )]
    LayerMediaType {
        /// The reference.
        reference: String,
        /// The media type found.
        media_type: String,
    },
    /// The config is not `application/vnd.wasm.config.v0+json`.
    #[error(
        "`{reference}` has a config of media type `{media_type}`; a berm program's config is `{}`",
        crate::CONFIG_MEDIA_TYPE
    )]
    ConfigMediaType {
        /// The reference.
        reference: String,
        /// The media type found.
        media_type: String,
    },
    /// A blob is announced or sent larger than its cap.
    #[error("`{reference}`: the {what} is {size} bytes, over the cap of {cap}")]
    TooLarge {
        /// The reference.
        reference: String,
        /// `layer` or `config`.
        what: &'static str,
        /// Its announced or received size.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// A blob's bytes do not hash to the digest its descriptor names.
    #[error(
        "`{reference}`: the {what} the registry sent does not match its digest (expected {expected}, got {actual}); it was refused and nothing was written — the registry's copy is corrupt or was tampered with"
    )]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// `layer`, `config` or `manifest`.
        what: &'static str,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// The number of bytes differs from the descriptor's size.
    #[error("`{reference}`: the {what} is {actual} bytes but its descriptor says {expected}")]
    SizeMismatch {
        /// The reference.
        reference: String,
        /// `layer` or `config`.
        what: &'static str,
        /// The descriptor's size.
        expected: u64,
        /// What came.
        actual: u64,
    },
    /// The registry sent more bytes than the descriptor announced; the rest
    /// was not read.
    #[error(
        "`{reference}`: the registry sent more than the {announced} bytes the {what}'s descriptor announces; refused"
    )]
    Overlong {
        /// The reference.
        reference: String,
        /// `layer` or `config`.
        what: &'static str,
        /// The descriptor's size.
        announced: u64,
    },
    /// The config is not the wasm config berm writes.
    #[error("`{reference}`: the config is not a berm program config: {message}")]
    Config {
        /// The reference.
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// The verified module would not deploy.
    #[error("`{reference}` would not deploy")]
    WouldNotDeploy {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        #[source]
        source: ManifestError,
    },
    /// The config's description of the program disagrees with the module.
    #[error(
        "`{reference}`: the manifest in the config disagrees with the module's own; the artifact was not pushed by berm, or was altered"
    )]
    ConfigDisagrees {
        /// The reference.
        reference: String,
    },
    /// The pulled file could not be written.
    #[error("cannot write `{path}`")]
    Write {
        /// The destination.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
