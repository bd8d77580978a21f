//! Bounded output: every file a guest can make grow has a cap (sizes in docs/vm.md).
//!
//! A guest decides how much it prints, so nothing it prints may fill the host's disk:
//!
//! - `guest.log` (written by berm-vmm from the log port) rotates: past [`GUEST_LOG_CAP`] it
//!   becomes `guest.log.1` (replacing an older one) and a fresh file starts with a marker
//!   line, so the newest lines are always there and the two files hold at most twice the cap;
//! - `console.log` (written by the hypervisor itself) is watched: past [`CONSOLE_LOG_CAP`] it
//!   is truncated and a marker line written (QEMU opens it with `append=on`, so its writes
//!   then land after the marker);
//! - `hypervisor.log` (QEMU's, vhost-device-vsock's or libkrun's own output, which a guest can
//!   provoke) rotates like `guest.log` at [`HYPERVISOR_LOG_CAP`]: the children write into a
//!   pipe, never the file, and berm-vmm's [`relay`] thread copies it into the capped log;
//! - `vmm.jsonl` keeps berm-vmm's own lines always, and the guest's events only up to
//!   [`RECORD_GUEST_CAP`] bytes (see `report.rs`).
//!
//! None of this blocks the guest: the log port is read as fast as it comes, and what is over
//! the cap is dropped, never waited on.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes `guest.log` holds before it rotates to `guest.log.1`.
pub const GUEST_LOG_CAP: u64 = 16 << 20;
/// Bytes `hypervisor.log` holds before it rotates to `hypervisor.log.1`.
pub const HYPERVISOR_LOG_CAP: u64 = 8 << 20;
/// The pipe the hypervisor children write into holds this much before a write would wait
/// (the relay starts only once berm-vmm is confined, a few milliseconds after them).
const HYPERVISOR_PIPE: i32 = 1 << 20;
/// Bytes `console.log` may reach before it is truncated.
pub const CONSOLE_LOG_CAP: u64 = 8 << 20;
/// Bytes of one app's receipt log berm-vmm keeps per boot; past it the rest are dropped (and
/// `berm receipts verify` reports them missing or unsealed), said once in `guest.log`.
pub const RECEIPTS_CAP: u64 = 256 << 20;
/// Apps whose receipts one boot keeps (an app index is below this).
pub const RECEIPT_APPS: usize = 64;
/// Bytes of guest events `vmm.jsonl` (and stderr) carries before the rest are dropped.
pub const RECORD_GUEST_CAP: u64 = 4 << 20;
/// How often `console.log`'s size is looked at.
const CONSOLE_CHECK: Duration = Duration::from_millis(250);

/// A log berm-vmm appends to, rotated at a cap.
pub struct CappedLog {
    path: PathBuf,
    file: File,
    written: u64,
    cap: u64,
}

impl CappedLog {
    /// Opens `path` for appending (its current size counts towards the cap).
    pub fn open(path: &Path, cap: u64) -> std::io::Result<Self> {
        let file = File::options().create(true).append(true).open(path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            file,
            written,
            cap,
        })
    }

    /// Appends `text`, rotating first if it would pass the cap.
    pub fn write(&mut self, text: &[u8]) -> std::io::Result<()> {
        if self.written + text.len() as u64 > self.cap {
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            std::fs::rename(&self.path, &rotated)?;
            self.file = File::options().create(true).append(true).open(&self.path)?;
            let marker = format!(
                "[berm-vmm] {} reached {} bytes; the older lines are in {}\n",
                self.path.display(),
                self.cap,
                Path::new(&rotated).display()
            );
            self.file.write_all(marker.as_bytes())?;
            self.written = marker.len() as u64;
        }
        self.file.write_all(text)?;
        self.written += text.len() as u64;
        Ok(())
    }
}

/// The guest apps' receipt logs, as their bermds wrote them (docs/receipts.md), in
/// `<run-dir>/receipts/<boot id>/<app>/receipts-00000000000000000000.jsonl`: one directory per
/// boot, since each boot's bermds sign with keys of their own, named in that boot's record.
/// Bounded per app ([`RECEIPTS_CAP`]) and in apps ([`RECEIPT_APPS`]); names the guest sent
/// are checked before they become paths.
pub struct ReceiptFiles {
    root: PathBuf,
    open: std::collections::HashMap<String, (File, u64)>,
    full: std::collections::HashSet<String>,
}

impl ReceiptFiles {
    /// Receipts under `root` (`<run-dir>/receipts`).
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            open: std::collections::HashMap::new(),
            full: std::collections::HashSet::new(),
        }
    }

    /// Appends `line` to `app`'s log of boot `boot_id`. `Ok(Some(why))` when it was dropped
    /// (said once per app and reason).
    pub fn write(
        &mut self,
        boot_id: &str,
        app: &str,
        line: &str,
    ) -> std::io::Result<Option<String>> {
        let boot_ok = !boot_id.is_empty()
            && boot_id.len() <= 64
            && boot_id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if !boot_ok || !berm_abi::is_valid_app_name(app) {
            return Ok(self.drop_once(
                "names",
                format!("receipts of a boot or app with a name berm-vmm will not use as a path ({app:?}) are dropped"),
            ));
        }
        let key = format!("{boot_id}/{app}");
        if self.full.contains(&key) {
            return Ok(None);
        }
        if !self.open.contains_key(&key) {
            if self.open.len() >= RECEIPT_APPS {
                return Ok(self.drop_once(
                    "apps",
                    format!("receipts of more than {RECEIPT_APPS} apps are dropped"),
                ));
            }
            let dir = self.root.join(boot_id).join(app);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)?;
            let file = File::options()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(dir.join("receipts-00000000000000000000.jsonl"))?;
            let written = file.metadata()?.len();
            self.open.insert(key.clone(), (file, written));
        }
        let Some((file, written)) = self.open.get_mut(&key) else {
            return Ok(None);
        };
        if *written + line.len() as u64 + 1 > RECEIPTS_CAP {
            self.full.insert(key);
            return Ok(Some(format!(
                "app {app}'s receipts reached {RECEIPTS_CAP} bytes; the rest of this boot's are dropped"
            )));
        }
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        file.write_all(&bytes)?;
        *written += bytes.len() as u64;
        Ok(None)
    }

    fn drop_once(&mut self, what: &str, why: String) -> Option<String> {
        self.full.insert(format!("!{what}")).then_some(why)
    }
}

/// Where the hypervisor children's stdout and stderr go: a pipe whose read end [`relay`]
/// copies into `hypervisor.log`, so no child ever holds the file (and cannot grow it past the
/// cap).
pub struct HypervisorOutput {
    reader: std::io::PipeReader,
    writer: std::io::PipeWriter,
}

impl HypervisorOutput {
    /// A fresh pipe, as large as the kernel lets an unprivileged process make it.
    pub fn new() -> std::io::Result<Self> {
        let (reader, writer) = std::io::pipe()?;
        crate::sys::grow_pipe(&writer, HYPERVISOR_PIPE);
        Ok(Self { reader, writer })
    }

    /// A child's stdout and stderr: both the pipe's write end.
    pub fn stdio(&self) -> std::io::Result<(std::process::Stdio, std::process::Stdio)> {
        Ok((
            self.writer.try_clone()?.into(),
            self.writer.try_clone()?.into(),
        ))
    }

    /// Once every child is started: berm-vmm's own copy of the write end is closed (so the
    /// relay ends when the last child has), and the read end is what is left to relay.
    pub fn into_reader(self) -> std::io::PipeReader {
        self.reader
    }
}

/// Copies `output` into `path`, capped at `cap` (rotated like `guest.log`), until every writer
/// has closed it. It reads as fast as the children write whatever happens to the file: a
/// write that fails drops that chunk, so a child never waits on the disk.
pub fn relay(mut output: impl std::io::Read, path: &Path, cap: u64) {
    let mut log = CappedLog::open(path, cap).ok();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        match output.read(&mut buffer) {
            Ok(0) => return,
            Ok(n) => {
                // Pieces of at most half the cap, so one read cannot make a file pass it.
                let piece = usize::try_from(cap / 2).unwrap_or(usize::MAX).max(1);
                for chunk in buffer[..n].chunks(piece) {
                    if let Some(file) = &mut log
                        && file.write(chunk).is_err()
                    {
                        log = None;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Truncates `path` with a marker line whenever it passes `cap`; runs until the file can no
/// longer be opened (the run dir is gone) — in practice for the life of berm-vmm.
pub fn watch_console(path: &Path, cap: u64) {
    loop {
        std::thread::sleep(CONSOLE_CHECK);
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.len() > cap {
            let _ = truncate_with_marker(path, meta.len());
        }
    }
}

fn truncate_with_marker(path: &Path, size: u64) -> std::io::Result<()> {
    let mut file = File::options().write(true).open(path)?;
    file.set_len(0)?;
    let marker = format!("[berm-vmm] console.log reached {size} bytes and was truncated here\n");
    file.write_all(marker.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_land_per_boot_and_app_and_hostile_names_never_become_paths() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ReceiptFiles::new(dir.path().join("receipts"));
        let boot = "0b5c6c1e-1f1a-4c1e-9d1a-1234567890ab";
        assert_eq!(files.write(boot, "notes", "{\"a\":1}").unwrap(), None);
        assert_eq!(files.write(boot, "notes", "{\"a\":2}").unwrap(), None);
        let kept = dir
            .path()
            .join("receipts")
            .join(boot)
            .join("notes")
            .join("receipts-00000000000000000000.jsonl");
        assert_eq!(
            std::fs::read_to_string(&kept).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
        for (boot, app) in [
            ("../..", "notes"),
            (boot, "../x"),
            (boot, "a/b"),
            ("", "notes"),
        ] {
            let said = files.write(boot, app, "{}").unwrap();
            // Said once, then dropped quietly.
            let _ = said;
        }
        assert_eq!(
            std::fs::read_dir(dir.path().join("receipts"))
                .unwrap()
                .count(),
            1,
            "nothing but the one boot's directory"
        );
        assert!(!dir.path().join("x").exists());
    }

    /// Checks that the log at `path` rotated into `<path>.1`, both within `cap`, the current
    /// one starting with berm-vmm's truncation marker; returns the current one.
    fn rotated_once(path: &Path, cap: usize) -> String {
        let now = std::fs::read_to_string(path).unwrap();
        let old = std::fs::read_to_string(path.with_extension("log.1")).unwrap();
        assert!(
            now.len() <= cap && old.len() <= cap,
            "{} {}",
            now.len(),
            old.len()
        );
        assert!(now.starts_with("[berm-vmm] "), "{now}");
        now
    }

    #[test]
    fn a_capped_log_rotates_once_past_its_cap_and_keeps_the_newest_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("guest.log");
        let mut log = CappedLog::open(&path, 1000).unwrap();
        for i in 0..100 {
            log.write(format!("line {i:04} {}\n", "x".repeat(40)).as_bytes())
                .unwrap();
        }
        let now = rotated_once(&path, 1000);
        assert!(now.contains("line 0099"), "{now}");
        assert!(!now.contains("line 0000"));
    }

    #[test]
    fn the_hypervisor_relay_caps_its_log_and_keeps_draining() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("hypervisor.log");
        let output = HypervisorOutput::new().unwrap();
        let (out, _err) = output.stdio().unwrap();
        let reader = output.into_reader();
        let relay_path = path.clone();
        let relay = std::thread::spawn(move || relay(reader, &relay_path, 4096));
        // A real child process writes 64 KiB, 16 times the cap, and exits: it never waits.
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", "i=0; while [ $i -lt 1024 ]; do echo \"line $i $(printf '%040d' 0)\"; i=$((i+1)); done"])
            .stdout(out)
            .status()
            .unwrap();
        assert!(status.success());
        drop(_err);
        relay.join().unwrap();
        let now = rotated_once(&path, 4096);
        assert!(now.contains("line 1023 "), "{now}");
    }

    #[test]
    fn an_appended_console_is_truncated_with_a_marker() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("console.log");
        // The hypervisor's view: an O_APPEND descriptor that keeps writing.
        let mut writer = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        writer.write_all(&vec![b'a'; 5000]).unwrap();
        truncate_with_marker(&path, 5000).unwrap();
        writer.write_all(b"after\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("[berm-vmm] console.log reached 5000 bytes"),
            "{text}"
        );
        assert!(text.ends_with("here\nafter\n"), "{text}");
    }
}
