//! berm-attest: what a berm-vmm run booted, as one canonical JSON record, and its offline
//! verification.
//!
//! berm-vmm writes every line it prints to `<run-dir>/vmm.jsonl`: its own measurements (the
//! kernel, rootfs, command line, state disk and every app's files and programs), the host
//! sandbox it applied, and every event the guest reported (the boot id, each app's
//! enforcement and the programs it loaded). [`Record::from_run_dir`] turns that into a
//! [`Record`] whose `recordSha256` covers its canonical form; [`verify`] re-derives the verdict
//! from the record alone and a set of [`Pins`] — nothing from the run dir, the guest or the
//! record's own claims of being "pinned" is taken on trust — and reports every problem with a
//! [`Code`] from a closed list.
//!
//! The record is evidence, not a signature: anyone who can edit it can recompute
//! `recordSha256`. The hash detects edits made without recomputing it (and fixes the exact
//! bytes a signature would later cover); every other check is a consistency check against the
//! pins and between the host's measurements and the guest's reports.
#![forbid(unsafe_code)]

mod canonical;
mod record;
mod verify;

pub use canonical::{canonical_json, record_sha256};
pub use record::{
    App, BuildError, Enforcement, Exit, FORMAT, Guest, GuestEvent, HostSandbox, Hypervisor, Kernel,
    MeasuredCode, MeasuredImage, MeasuredProgram, ReadyProgram, Record, Rootfs, State, TestProbe,
};
pub use verify::{Code, Pins, PinsError, Problem, Verdict, verify};
