//! The libkrun backend.
//!
//! libkrun's `krun_start_enter` never returns: libkrun exits the process when the guest
//! resets, with exit code 0 for a clean reset and a panic alike. So berm-vmm runs it in a
//! child process — itself, re-executed as `berm-vmm krun-enter CONFIG` — and stays the
//! supervisor that reads the control stream and decides the exit code, exactly as on the QEMU
//! path. libkrun listens on the run dir's sockets itself (`krun_add_vsock_port2`, listen
//! mode), so clients connect straight to it.

use std::process::{Child, Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::log_cap::HypervisorOutput;
use crate::spec::VmSpec;
use crate::sys;

/// What the child is told; passed as one JSON argument.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KrunConfig {
    /// The VM.
    pub vm: VmSpec,
    /// The host sandbox the child applies to itself just before `krun_start_enter`
    /// (`None` with `--no-host-sandbox`).
    pub host_sandbox: Option<crate::sandbox::Policy>,
}

/// Why the libkrun child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnKrunError {
    /// Spawning `/proc/self/exe` failed.
    #[error("starting the libkrun child process failed")]
    Spawn(#[source] std::io::Error),
    /// Its output could not be pointed at the hypervisor log's pipe.
    #[error("connecting the libkrun child's output to hypervisor.log failed")]
    Log(#[source] std::io::Error),
}

/// Starts `berm-vmm krun-enter` with its output into `output` (relayed into `hypervisor.log`).
pub fn spawn(config: &KrunConfig, output: &HypervisorOutput) -> Result<Child, SpawnKrunError> {
    let (out, err) = output.stdio().map_err(SpawnKrunError::Log)?;
    // Serializing paths and numbers cannot fail.
    let json = serde_json::to_string(config).unwrap_or_default();
    let mut command = Command::new("/proc/self/exe");
    command
        .arg("krun-enter")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    sys::kill_with_parent(&mut command);
    command.spawn().map_err(SpawnKrunError::Spawn)
}

/// The child's side: configure libkrun and enter the VM. Returns only on failure.
pub fn enter(config: &KrunConfig) -> sys::KrunError {
    match sys::krun_enter(&config.vm) {
        Err(e) => e,
        Ok(never) => match never {},
    }
}
