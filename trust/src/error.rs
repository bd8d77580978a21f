//! What can go wrong signing or verifying; each says what to do.

use std::path::PathBuf;

/// Signing, verifying or reading keys and policy failed.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// No password to encrypt or decrypt a private key with.
    #[error(
        "set {} to the private key's password (cosign's variable; set it empty for a key without one)",
        crate::PASSWORD_ENV
    )]
    NoPassword,
    /// A key file could not be read.
    #[error("cannot read key `{path}`")]
    ReadKey {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A key file does not hold a usable key.
    #[error("`{path}`: {message}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `keygen` would overwrite a file.
    #[error("`{path}` exists; move it away first (keygen never overwrites a key)")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A key file could not be written.
    #[error("cannot write `{path}`")]
    WriteKey {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Signing itself failed.
    #[error("cannot sign: {0}")]
    Sign(String),
    /// The registry failed, or sent something malformed.
    #[error(transparent)]
    Registry(#[from] berm_oci::SignatureError),
    /// The program could not be described or pulled.
    #[error(transparent)]
    Pull(#[from] berm_oci::PullError),
    /// The program has no signature at all.
    #[error(
        "`{reference}` is not signed: {signatures} holds no signature; sign it with `berm trust sign {reference} --key cosign.key`"
    )]
    Unsigned {
        /// The program.
        reference: String,
        /// Where its signatures would be.
        signatures: String,
    },
    /// Signatures exist, but none holds for what was required.
    #[error(
        "`{reference}` ({manifest_digest}) has no valid signature by {wanted}:\n  {}",
        reasons.join("\n  ")
    )]
    NotTrusted {
        /// The program.
        reference: String,
        /// Its manifest digest, which a signature must name.
        manifest_digest: String,
        /// The keys (or rule) that were required.
        wanted: String,
        /// What each stored signature failed on.
        reasons: Vec<String>,
    },
    /// A reference does not parse, so no policy rule can be matched against it.
    #[error("`{reference}` is not a reference the trust policy can match: {message}")]
    Reference {
        /// The reference, as given (at most 200 characters).
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// A program store's record of verified signatures cannot be read or written.
    #[error(
        "the signatures recorded for a stored program in `{path}`: {message}; remove the file, and the next `berm pull --app` checks the registry and records them again"
    )]
    Provenance {
        /// The record file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The trust policy could not be read or does not parse.
    #[error("trust policy `{path}`: {message}")]
    Policy {
        /// The policy file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}
