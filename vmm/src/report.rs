//! The JSON lines berm-vmm writes on stderr, each a [`VmmLine`] of berm-vm-protocol: one of
//! its own [`HostEvent`]s (`"source":"berm-vmm"`) or a guest event it relays (`"berm-init"`,
//! re-serialized from the parsed line, never copied raw), so every reader parses stderr line
//! by line with the same types.
//!
//! Every line is also appended to `<run-dir>/vmm.jsonl` (mode 0600), the run's record that
//! `berm attest RUN_DIR` reads after the fact. Lines written before the run dir exists are
//! buffered and written there first, once [`record_to`] names it, so the file holds the whole
//! run in order.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use berm_vm_protocol::host_event::RecordCappedLine;
use berm_vm_protocol::{HostEvent, VmmLine};

/// The record file's name inside the run dir.
pub const RECORD_FILE: &str = "vmm.jsonl";

/// Where lines go besides stderr: a buffer until the run dir exists, then the file.
enum Record {
    Buffer(Vec<String>),
    File(File),
}

static RECORD: Mutex<Record> = Mutex::new(Record::Buffer(Vec::new()));
/// The run dir [`record_to`] named, once it did.
static RUN_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The run dir whose `vmm.jsonl` this process writes, once [`record_to`] succeeded: a run
/// refused before that has no record (and a stale `vmm.jsonl` there is not this run's).
pub fn recording_to() -> Option<PathBuf> {
    RUN_DIR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// Why the run record could not be started.
#[derive(Debug, thiserror::Error)]
#[error("writing the run record {path} failed")]
pub struct StartRecordError {
    /// `<run-dir>/vmm.jsonl`.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// Starts `<run_dir>/vmm.jsonl` (truncated, mode 0600) with every line written so far; every
/// later line is appended as it is written.
pub fn record_to(run_dir: &Path) -> Result<(), StartRecordError> {
    let path = run_dir.join(RECORD_FILE);
    let fail = |source| StartRecordError {
        path: path.clone(),
        source,
    };
    let mut file = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(fail)?;
    // An existing file keeps its mode through open(); make it 0600 whatever it was.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(fail)?;
    let mut record = RECORD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Record::Buffer(lines) = &*record {
        file.write_all(lines.concat().as_bytes()).map_err(fail)?;
    }
    *record = Record::File(file);
    *RUN_DIR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(run_dir.to_owned());
    Ok(())
}

/// Writes one of berm-vmm's own lines: `{"source":"berm-vmm","event":…,…}`. Every line
/// berm-vmm writes about itself goes through here, as a [`HostEvent`].
pub fn host(event: HostEvent) {
    emit(VmmLine::Host(event).to_line());
}

/// Writes one line for a person on stderr (a warning, the last words). Unlike `eprintln!` it
/// never panics: a reader that closed berm-vmm's stderr (`2>&1 >/dev/null | head -1`) does
/// not stop the run or turn its exit code into a panic's.
pub fn say(text: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Bytes of guest events relayed so far ([`crate::log_cap::RECORD_GUEST_CAP`] at most).
static GUEST_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Relays a parsed guest line, marked as coming from berm-init, while the guest's share of
/// the record is under its cap; past it, one `record_capped` line says so and the rest of
/// the guest's events are dropped (berm-vmm's own lines still go out).
pub fn guest(line: &berm_vm_protocol::GuestLine) {
    use std::sync::atomic::Ordering;
    let text = VmmLine::Guest(line.clone()).to_line();
    let size = text.len() as u64;
    let before = GUEST_BYTES.fetch_add(size, Ordering::SeqCst);
    let cap = crate::log_cap::RECORD_GUEST_CAP;
    if before + size > cap {
        if before <= cap {
            host(HostEvent::RecordCapped(RecordCappedLine {
                guest_bytes: before,
                cap,
            }));
        }
        return;
    }
    emit(text);
}

fn emit(text: String) {
    // One lock for both writes keeps the two streams in the same order.
    let mut record = RECORD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // stderr is unbuffered; one write per line keeps lines whole between threads.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
    match &mut *record {
        Record::Buffer(lines) => lines.push(text),
        // A failed append cannot be reported anywhere better than the stderr line just
        // written; the record then lacks the line, which `berm attest` reports as missing.
        Record::File(file) => drop(file.write_all(text.as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use berm_vm_protocol::host::Landlock;
    use berm_vm_protocol::{HostEvent, VmmLine};

    #[test]
    fn the_host_sandbox_report_reads_back_as_the_line_type() {
        let report = crate::sandbox::Report::disabled("--no-host-sandbox");
        let text = VmmLine::Host(HostEvent::HostSandbox(report.line())).to_line();
        let Ok(VmmLine::Host(HostEvent::HostSandbox(line))) = VmmLine::parse(text.trim_end())
        else {
            panic!("{text}")
        };
        assert!(!line.enabled);
        assert_eq!(line.landlock, Landlock::NotEnforced);
        assert_eq!(line.seccomp, report.seccomp);
        assert_eq!(line.reason.as_deref(), Some("--no-host-sandbox"));
    }
}
