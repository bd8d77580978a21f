//! The one description of a VM that both backends take: what to boot, with which disks and
//! vsock ports, where the console goes. berm-vmm builds it once in `run`; the QEMU backend
//! turns it into arguments, the libkrun child into libkrun calls.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::run_dir::RunDir;

/// One VM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSpec {
    /// vCPUs.
    pub cpus: u8,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// The kernel (already checked against the pin).
    pub kernel: PathBuf,
    /// What kind of file the kernel is.
    pub kernel_format: KernelFormat,
    /// The complete kernel command line.
    pub cmdline: String,
    /// Read-only root disk (vda).
    pub rootfs: PathBuf,
    /// Optional writable state disk (vdb).
    pub state: Option<PathBuf>,
    /// Read-only disks after those: (serial, image); the guest finds each by its serial.
    pub disks: Vec<(String, PathBuf)>,
    /// vsock port → the Unix socket in the run dir a host connects to.
    pub ports: Vec<(u32, PathBuf)>,
    /// vsock port → the Unix socket in the run dir the guest's connections go to (the egress
    /// dialer's, 6000+i).
    #[serde(default)]
    pub egress: Vec<(u32, PathBuf)>,
    /// Where the guest console goes.
    pub console: PathBuf,
}

impl VmSpec {
    /// The allow-list role of the process that runs the vsock device (`krun-enter` or
    /// vhost-device-vsock): its `…-egress` variant, which may also `connect`, only when the
    /// guest has egress ports to connect out on.
    pub fn vsock_role(&self, role: berm_confine::Role) -> berm_confine::Role {
        use berm_confine::Role;
        match (role, self.egress.is_empty()) {
            (Role::KrunEnter, false) => Role::KrunEnterEgress,
            (Role::VhostDeviceVsock, false) => Role::VhostDeviceVsockEgress,
            (role, _) => role,
        }
    }
}

/// The two kernel files berm pins: what libkrun is told (`krun_set_kernel`'s format) and
/// what QEMU's `-kernel` takes as is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelFormat {
    /// An ELF `vmlinux` (x86_64): libkrun format 1, QEMU microvm through its PVH note.
    Elf,
    /// A raw arm64 `Image` (aarch64): libkrun format 0, QEMU virt's `-kernel`.
    Raw,
}

impl KernelFormat {
    /// The format of the kernel file its pins name (`vmlinux` or `Image`).
    pub fn of(pins: &berm_pins::KernelPins) -> Self {
        if pins.file == "Image" {
            Self::Raw
        } else {
            Self::Elf
        }
    }

    /// libkrun's number for it (`KRUN_KERNEL_FORMAT_RAW` 0, `_ELF` 1).
    pub fn krun(self) -> u32 {
        match self {
            Self::Raw => 0,
            Self::Elf => 1,
        }
    }
}

/// The port plan, in one place: control (1024), logs (1025), then app i's MCP on 5000+i, each
/// on its socket in the run dir.
pub fn ports(run: &RunDir) -> Vec<(u32, PathBuf)> {
    let mut ports = vec![
        (berm_vm_protocol::CONTROL_PORT, run.control.clone()),
        (berm_vm_protocol::LOGS_PORT, run.logs.clone()),
    ];
    for (i, rpc) in run.rpc.iter().enumerate() {
        ports.push((berm_vm_protocol::RPC_PORT_BASE + i as u32, rpc.clone()));
    }
    ports
}
