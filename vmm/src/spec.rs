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
    /// ELF vmlinux (already checked against the pin).
    pub kernel: PathBuf,
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
    /// Where the guest console goes.
    pub console: PathBuf,
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
