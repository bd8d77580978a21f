//! berm-vm-launch: a berm microVM's configuration and its lifecycle on the host, with no
//! hypervisor in it.
//!
//! [`config::VmConfig`] is the one configuration of a VM run: `berm-vmm run` parses its flags
//! into it or reads it from `--config FILE`, and the lifecycle here writes it. The lifecycle
//! is what `berm vm up`, `ls`, `stop`, `logs`, `berm mcp --app` and `berm attest NAME` share
//! about a named VM: where its files live and its name rules ([`layout`]), its lock
//! ([`lock`]), its launch record and whether its berm-vmm still runs ([`record`]), what
//! berm-vmm's host lines say ([`host_lines`], [`view`]), the app folders' measurement
//! ([`measure`]), the state disk's owners ([`state`]), keeping or booting it ([`launch`]) and
//! stopping it ([`stop`]).
//!
//! The CLI links this crate and not `berm-vmm`, which links libkrun: it starts berm-vmm as a
//! program of its own, detached, with the configuration in a file.
#![deny(unsafe_code)]

pub mod config;
pub mod files;
pub mod host_lines;
pub mod launch;
pub mod layout;
pub mod lock;
pub mod measure;
pub mod record;
pub mod state;
pub mod stop;
/// The calls into libc (`geteuid`, `kill`, `setsid`), the crate's only `unsafe` code.
#[allow(unsafe_code)]
pub mod sys;
pub mod view;
