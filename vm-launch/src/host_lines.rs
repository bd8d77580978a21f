//! What berm-vmm's host lines (its stderr, `vmm.stderr`) said so far: the hypervisor it
//! chose, its endpoints, which apps are ready, and its reason when it ended.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use berm_vm_protocol::host::{ExitLine, HypervisorLine};
use berm_vm_protocol::{
    AppExited, AppRefused, BootFailed, Event, HostEvent, VmmLine, VmmLineError,
};

/// The `endpoints` line: the run's sockets.
pub use berm_vm_protocol::host_event::EndpointsLine as Endpoints;

/// What berm-vmm's stderr said so far.
#[derive(Default)]
pub struct HostLines {
    /// The `hypervisor` line.
    pub hypervisor: Option<HypervisorLine>,
    /// The `endpoints` line.
    pub endpoints: Option<Endpoints>,
    /// Apps that reported `app_ready`, by index.
    pub ready: BTreeSet<u32>,
    /// The first app refused.
    pub refused: Option<AppRefused>,
    /// The first app that exited.
    pub exited: Option<AppExited>,
    /// The guest's `boot_failed`.
    pub boot_failed: Option<BootFailed>,
    /// A stop is under way (`stop_signal`, `shutting_down`, `power_off`).
    pub stopping: bool,
    /// berm-vmm's `exit` line.
    pub exit: Option<ExitLine>,
    /// Lines that are not JSON: berm-vmm's warnings and its last words.
    pub words: Vec<String>,
    partial: Vec<u8>,
}

impl HostLines {
    /// Reads all of `path` (empty when missing).
    pub fn read(path: &Path) -> Self {
        let mut lines = Self::default();
        if let Ok(bytes) = fs::read(path) {
            lines.feed(&bytes);
            lines.finish();
        }
        lines
    }

    /// Takes more of the stream; a line is read once its newline arrives.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.line(&String::from_utf8_lossy(&line[..end]));
        }
    }

    /// Takes a last line without its newline.
    pub fn finish(&mut self) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&String::from_utf8_lossy(&line));
        }
    }

    fn line(&mut self, line: &str) {
        match VmmLine::parse(line) {
            Ok(VmmLine::Host(event)) => match event {
                HostEvent::Hypervisor(hypervisor) => self.hypervisor = Some(hypervisor),
                HostEvent::Endpoints(endpoints) => self.endpoints = Some(endpoints),
                HostEvent::Exit(exit) => self.exit = Some(exit),
                HostEvent::StopSignal(_) => self.stopping = true,
                _ => {}
            },
            Ok(VmmLine::Guest(guest)) => match guest.event {
                Event::AppReady(ready) => {
                    self.ready.insert(ready.index);
                }
                Event::AppRefused(refused) => {
                    self.refused.get_or_insert(refused);
                }
                Event::AppExited(exited) => {
                    self.exited.get_or_insert(exited);
                }
                Event::BootFailed(failed) => self.boot_failed = Some(failed),
                Event::ShuttingDown(_) | Event::PowerOff(_) => self.stopping = true,
                _ => {}
            },
            // berm-vmm's lines for a person: its warnings and last words.
            Err(VmmLineError::NotJson) if !line.trim().is_empty() => {
                self.words.push(line.to_owned());
            }
            // A later berm-vmm's event, or a line that does not parse: nothing to act on.
            Err(_) => {}
        }
    }

    /// berm-vmm's own reason for ending: its `exit` line's message, else its last words.
    pub fn reason(&self) -> Option<String> {
        self.exit
            .as_ref()
            .map(|exit| {
                format!(
                    "{} (berm-vmm exit {}, {})",
                    exit.message, exit.code, exit.status
                )
            })
            .or_else(|| self.words.last().cloned())
    }

    /// The hypervisor as chosen (`qemu (tcg)`, `krun`), once berm-vmm said.
    pub fn hypervisor_text(&self) -> Option<String> {
        self.hypervisor.as_ref().map(|h| match &h.accel {
            Some(accel) => format!("{} ({accel})", h.chosen.name()),
            None => h.chosen.name().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lines_are_read_with_the_protocol_types() {
        let mut lines = HostLines::default();
        lines.feed(br#"{"source":"berm-vmm","event":"hypervisor","chosen":"qemu","accel":"tcg","reason":"r"}
{"source":"berm-vmm","event":"endpoints","run_dir":"/r","control":"/r/control.sock","logs":"/r/logs.sock","console":"/r/console.log","hypervisor_log":"/r/hypervisor.log","rpc":[],"egress":[]}
{"source":"berm-init","boot_id":"ab-12","uptime_ms":5,"event":"app_ready","app":"notes","index":0,"pid":7,"ms":3,"tools":2,"programs":[]}
not json
{"source":"berm-vmm","event":"exit","status":"refused","code":5,"mess"#);
        assert_eq!(lines.hypervisor_text().as_deref(), Some("qemu (tcg)"));
        assert_eq!(lines.endpoints.as_ref().unwrap().run_dir, Path::new("/r"));
        assert!(lines.ready.contains(&0));
        assert!(lines.exit.is_none());
        lines.feed(b"age\":\"no\"}\nberm-vmm: no\n");
        assert_eq!(lines.exit.as_ref().unwrap().code, 5);
        assert_eq!(lines.words, ["not json", "berm-vmm: no"]);
        assert_eq!(
            lines.reason().as_deref(),
            Some("no (berm-vmm exit 5, refused)")
        );
    }
}
