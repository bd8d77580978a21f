//! Who published a berm program, checked before it is deployed.
//!
//! A program on a registry is pinned by digest, which says *what* it is but not *who* stands
//! behind it. berm signs and verifies the way cosign does, so the ecosystem's tools and berm
//! read each other's signatures: an ECDSA P-256 key pair in cosign's files (`cosign.key`,
//! encrypted with `COSIGN_PASSWORD`; `cosign.pub`), a simple-signing payload naming the
//! program's OCI manifest digest, and the signature stored under cosign's `sha256-<hex>.sig`
//! tag (berm-oci moves it). The formats come from the `sigstore` crate.
//!
//! A trust policy ([`Policy`], `~/.config/berm/trust.toml`) says which registries and
//! repositories must be signed, and by whom; the CLI applies it to every pull and deploy,
//! matching each reference by its one normalised name ([`PolicyName`]). Signatures that held
//! for a program kept in a program store are recorded beside it ([`Provenance`]), with the
//! repository they were found in, so that each later use is checked against the policy and
//! keys in force then.
//!
//! Keyless signing (a Fulcio certificate for an OIDC identity, logged in Rekor) needs the
//! public Sigstore services, which berm's test machines cannot reach: it is not built. Its
//! place is a second kind of [`Signer`] requirement in the policy (an identity and issuer
//! instead of a key), checked from the certificate and Rekor bundle that cosign stores in the
//! same layer's annotations.

#![forbid(unsafe_code)]

mod error;
mod keys;
mod name;
mod policy;
mod provenance;
mod verify;

pub use error::SigningError;
pub use keys::{PASSWORD_ENV, PublicKey, SigningKey, password_from_env, write_key_pair};
pub use name::PolicyName;
pub use policy::{Policy, Requirement, default_policy_path};
pub use provenance::Provenance;
pub use verify::{Signed, Signer, Verified, sign, verify};
