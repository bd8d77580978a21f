//! berm-vmm: the host side of berm's microVM.
//!
//! `berm-vmm run` checks the pinned kernel and rootfs, validates everything that will reach
//! the guest's kernel command line, prepares the run directory, reports what it is about to
//! boot (`endpoints`, `vm_config`, `measurements` on stderr), then runs the VM on one of two
//! backends — libkrun (hardware KVM) or QEMU with vhost-device-vsock (everywhere else) — and
//! presents the same run dir, sockets, lines and exit behaviour whichever one runs. The binary
//! only parses arguments; everything lives here so tests can reach it.
#![deny(unsafe_code)]

pub mod apps;
pub mod artifacts;
pub mod code;
/// [`VmConfig`](config::VmConfig): the one configuration of a run, shared with whoever starts
/// one (`berm-vm-launch`, which the CLI links without a hypervisor).
pub use berm_vm_launch::config;
pub mod connector;
pub mod detect;
pub mod dialer;
pub mod exit;
pub mod krun;
pub mod log_cap;
pub mod measure;
pub mod probe;
pub mod qemu;
pub mod report;
pub mod run;
pub mod run_dir;
pub mod sandbox;
pub mod settings;
pub mod sign;
pub mod spec;
pub mod state;
/// The operating system primitives several features share; each feature keeps its own
/// `unsafe` code in a `sys` module beside it.
#[allow(unsafe_code)]
mod sys;
pub mod view;

pub use sys::catch_stop_signals;
pub(crate) use sys::{may_signal, parent, x32_call_in_child};
