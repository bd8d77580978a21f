//! Moves berm programs through OCI registries.
//!
//! A program is one WebAssembly module, so it travels as an OCI artifact with
//! exactly one layer, and that layer **is** the module: no tarball, no
//! compression. The registry therefore addresses the layer by the same
//! `sha256:<hex>` that `berm ls` prints, and a pull can be checked against
//! the program's identity, not just against the transport.
//!
//! The layout follows the CNCF wasm OCI artifact layout where it fits
//! (`application/wasm` layer, `application/vnd.wasm.config.v0+json` config);
//! berm's own manifest (description, usage, tools with schemas, calls,
//! syscalls) rides in the config under the key `berm`, and the description
//! and tool names are repeated as manifest annotations, so a registry listing
//! or `berm index add` describes a program without downloading the layer.
//!
//! Nothing pulled is trusted: the manifest is parsed strictly (an index,
//! several layers or a foreign media type are refused, naming what was
//! found), every blob is size-capped and hashed against its descriptor
//! before it is returned, and the module must hold a manifest that would
//! deploy. bermd never talks to a registry; the CLI pulls with this crate and
//! hands bermd the verified bytes.
//!
//! A program's cosign signatures live beside it under cosign's `sha256-<hex>.sig` tag (the
//! `signature` module moves them; berm-trust checks them).
//!
//! The microVM's pinned kernel and rootfs travel the same way (the `vm` module): one artifact
//! with two layers that are the files themselves, pushed by `berm vm push` and fetched back
//! blob by blob by the pinned digests, never trusting a manifest.

#![forbid(unsafe_code)]

mod artifact;
mod auth;
mod error;
mod files;
mod pull;
mod push;
mod registry;
mod signature;
mod vm;

pub use artifact::{
    BERM_CONFIG_KEY, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES, MAX_PROGRAM_BYTES, WasmConfig,
};
pub use auth::CredentialSource;
pub use berm_manifest::{Digest, Manifest};
pub use error::{PullError, PushError, RegistryError};
pub use files::{is_reference, pull_to, push_file};
pub use pull::{Described, Pulled, describe, pull};
pub use push::{Published, Pushed, push};
pub use registry::{RegistryOptions, is_loopback_host, parse_reference};
pub use signature::{
    MAX_PAYLOAD_BYTES, MAX_SIGNATURES, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE,
    SignatureError, StoredSignature, StoredSignatures, attach_signature, signature_reference,
    signatures,
};
pub use vm::{
    ANNOTATION_VM_ARCH, ANNOTATION_VM_KERNEL, ANNOTATION_VM_ROOTFS, BlobProgress, Fetched,
    PushedVm, RESUME_ATTEMPTS, VM_ARTIFACT_TYPE, VM_CONFIG_MEDIA_TYPE, VM_KERNEL_MEDIA_TYPE,
    VM_ROOTFS_MEDIA_TYPE, VmConfig, VmFetchError, VmFile, VmLayer, install_blob, push_vm, vm_tag,
};
