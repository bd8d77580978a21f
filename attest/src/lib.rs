//! berm-attest: what a berm-vmm run booted, as one canonical JSON record, and its offline
//! verification.
//!
//! berm-vmm writes every line it prints to `<run-dir>/vmm.jsonl`: its own measurements (the
//! kernel, rootfs, command line, state disk and every app's files and programs), the host
//! sandbox it applied, and every event the guest reported (the boot id, each app's
//! enforcement and the programs it loaded). [`Record::from_run_dir`] turns that into a
//! [`Record`] whose `record_sha256` covers its canonical form; [`verify`] re-derives the verdict
//! from the record alone and a set of [`Pins`] — nothing from the run dir, the guest or the
//! record's own claims of being "pinned" is taken on trust — and reports every problem with a
//! [`Code`] from a closed list.
//!
//! The record alone is evidence, not a signature: anyone who can edit it can recompute
//! `record_sha256`. The hash detects edits made without recomputing it; every other check is a
//! consistency check against the pins, between the host's measurements and the guest's
//! reports, and (given the programs, [`Programs`]) between each program and the native code
//! compiled from it. [`dsse`] signs the record with the host's key, so that a verifier holding
//! the public key refuses any change at all.
#![forbid(unsafe_code)]

mod canonical;
mod code;
pub mod dsse;
mod folder;
mod problem;
mod record;
mod verify;

pub use berm_dsse::canonical_json;
pub use canonical::record_sha256;
pub use code::{Programs, ProgramsError, arch_of_target, engine as code_engine};
pub use folder::{FolderError, folder_digest};
pub use problem::{Code, Problem};
pub use record::{BuildError, FORMAT, FORMAT_V1, Guest, Record, ShapeError, is_kept};
pub use verify::{
    ArchPins, Options, Pins, PinsError, Verdict, is_expectation, verify, verify_with,
};
