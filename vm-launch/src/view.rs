//! One VM as `berm vm ls` and `berm vm up --json` describe it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::files::now_unix;
use crate::host_lines::HostLines;
use crate::layout::{HOST_LINES, STOPPING};
use crate::record::{Launch, Liveness};

/// A VM's status, as `ls` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// berm-vmm runs; not every app is ready yet.
    Booting,
    /// Every app is ready.
    Ready,
    /// `stop` (or a signal, or the guest) is stopping it.
    Stopping,
    /// Its berm-vmm is gone or is another process now.
    Stale,
}

impl Status {
    /// The word `ls` prints.
    pub fn name(self) -> &'static str {
        match self {
            Self::Booting => "booting",
            Self::Ready => "ready",
            Self::Stopping => "stopping",
            Self::Stale => "stale",
        }
    }
}

/// One VM as `ls` and `up --json` describe it.
#[derive(Debug, Serialize)]
pub struct View {
    /// Its name.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// Why it is stale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// berm-vmm's pid.
    pub pid: u32,
    /// Seconds since `up` started it.
    pub uptime_s: u64,
    /// The guest's architecture.
    pub arch: String,
    /// The hypervisor: as chosen once berm-vmm said, else as asked.
    pub hypervisor: String,
    /// The state disk, if any.
    pub state: Option<PathBuf>,
    /// The run dir, once known.
    pub run_dir: Option<PathBuf>,
    /// The apps and their sockets.
    pub apps: Vec<AppView>,
}

/// One app of a [`View`].
#[derive(Debug, Serialize)]
pub struct AppView {
    /// App i.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Whether it reported `app_ready`.
    pub ready: bool,
    /// Its MCP socket (`berm mcp --socket` or `berm mcp --vm`).
    pub socket: Option<PathBuf>,
}

impl View {
    /// The view of the VM in `vm_dir` started by `launch`.
    pub fn of(vm_dir: &Path, launch: &Launch) -> Self {
        let lines = HostLines::read(&vm_dir.join(HOST_LINES));
        let liveness = launch.liveness();
        let status = if liveness != Liveness::Running {
            Status::Stale
        } else if vm_dir.join(STOPPING).exists() || lines.stopping {
            Status::Stopping
        } else if launch
            .apps
            .iter()
            .all(|app| lines.ready.contains(&app.index))
        {
            Status::Ready
        } else {
            Status::Booting
        };
        let run_dir = launch
            .run_dir
            .clone()
            .or_else(|| lines.endpoints.as_ref().map(|e| e.run_dir.clone()));
        Self {
            name: launch.name.clone(),
            status,
            stale: (status == Status::Stale).then(|| liveness.why(launch.pid)),
            pid: launch.pid,
            uptime_s: now_unix().saturating_sub(launch.started_unix),
            arch: launch.arch.clone(),
            hypervisor: lines
                .hypervisor_text()
                .unwrap_or_else(|| launch.hypervisor.clone()),
            state: launch.state.clone(),
            apps: launch
                .apps
                .iter()
                .map(|app| AppView {
                    index: app.index,
                    name: app.name.clone(),
                    ready: lines.ready.contains(&app.index),
                    socket: run_dir
                        .as_ref()
                        .map(|dir| dir.join(format!("rpc-{}.sock", app.index))),
                })
                .collect(),
            run_dir,
        }
    }
}

/// `12s`, `3m04s`, `2h05m`, `3d04h`.
pub fn uptime_text(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_in_two_units() {
        assert_eq!(uptime_text(12), "12s");
        assert_eq!(uptime_text(184), "3m04s");
        assert_eq!(uptime_text(3725), "1h02m");
        assert_eq!(uptime_text(3 * 86_400 + 4 * 3600), "3d04h");
    }
}
