//! The record and how it is built from a run dir's `vmm.jsonl`.
//!
//! A record is made of berm-vmm's lines, and since format `berm-attest/2` it holds them as
//! the very types their writers serialize (`berm_vm_protocol`'s [`MeasurementsLine`] parts,
//! [`HypervisorLine`], [`HostSandboxLine`], [`ExitLine`] and the relayed [`GuestLine`]s), in
//! their own snake_case, rather than a second set of types that mirror them. So a field a
//! line gains cannot be forgotten by the record, and the record's JSON is the lines' JSON
//! (`docs/vm.md`, "Attestation").
//!
//! Why not mirror types any more: version 1 re-declared about 18 types, camelCase, each a
//! subset of its line type with the guest's enums as strings, converted field by field. That
//! kept the record small and closed (`deny_unknown_fields`), but every line change had to be
//! made twice, and nothing but review kept the two in step. The line types ignore fields a
//! later writer adds (a reader of lines must), so the record's own closure is kept another
//! way: [`Record::from_value`] refuses a record holding any field its types do not write
//! ([`unknown_field`]), so a verifier still sees exactly the evidence that was hashed. The
//! guest's enums (Landlock, seccomp, code source, boot step) are typed too: a record saying
//! something berm-init cannot say is malformed, not weak.
//!
//! Version-1 records still verify: [`Record::from_value`] reads one into its own legacy shape
//! ([`v1`], refusing unknown fields as before) and converts it, while the hash is checked over
//! the JSON as it was signed (`verify`). Building is lenient about what it does not need
//! (lines of other kinds, fields a later berm-vmm or berm-init adds) and strict about the
//! shape of what it keeps.

use std::path::{Path, PathBuf};

use berm_vm_protocol::host::{
    AppMeasurement, EngineMeasurement, ExitLine, HostSandboxLine, HypervisorLine,
    KernelMeasurement, MeasurementsLine, ProbeMeasurement, RootfsMeasurement, StateMeasurement,
};
use berm_vm_protocol::{Event, GuestLine, HostEvent, VmmLine, VmmLineError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod v1;

use crate::canonical::record_sha256;

/// The record format this crate writes and verifies. Version 2 holds the lines' own types
/// (snake_case, with every field the lines carry) and each hypervisor child's
/// `connect_outside` and `view`, which `verify` requires of it.
pub const FORMAT: &str = "berm-attest/2";

/// The format before [`FORMAT`], still verified: its records predate the measurement of the
/// hypervisor children's connect outside their policy, which is therefore not required of
/// them (and the rest is checked as for version 2).
pub const FORMAT_V1: &str = "berm-attest/1";

/// The run file berm-vmm writes (vmm/src/report.rs).
const RUN_RECORD: &str = "vmm.jsonl";
/// A run record larger than this is refused rather than read.
const MAX_RUN_RECORD: u64 = 64 << 20;

/// What one berm-vmm run booted and what its guest reported: the lines of the run it is
/// made of, each as the type its writer serialized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// [`FORMAT`] (or [`FORMAT_V1`] for a version-1 record read by [`Record::from_value`]).
    pub format: String,
    /// The run dir the record was built from.
    pub run_dir: String,
    /// The kernel berm-vmm booted (`measurements.kernel`).
    pub kernel: KernelMeasurement,
    /// The root filesystem (`measurements.rootfs`).
    pub rootfs: RootfsMeasurement,
    /// The state disk, measured before the guest could write it (`measurements.state`).
    pub state: Option<StateMeasurement>,
    /// Every app, in port order, as berm-vmm measured it (`measurements.apps`).
    pub apps: Vec<AppMeasurement>,
    /// The test-only enforcement probe, if this boot attached one (`--test-probe`).
    pub test_probe: Option<ProbeMeasurement>,
    /// The engine berm-vmm compiled every program's code with (absent without apps).
    pub code_engine: Option<EngineMeasurement>,
    /// The backend that ran the VM (the `hypervisor` line).
    pub hypervisor: Option<HypervisorLine>,
    /// How berm-vmm confined itself and its children (`None`: it never said).
    pub host_sandbox: Option<HostSandboxLine>,
    /// What the guest reported.
    pub guest: Guest,
    /// How the run ended (the `exit` line), if it had ended when the record was made.
    pub exit: Option<ExitLine>,
    /// sha256 of the canonical JSON of this record without this field.
    pub record_sha256: String,
}

/// What the guest reported, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guest {
    /// The boot id of the control connection's greeting.
    pub boot_id: Option<String>,
    /// The lifecycle events that matter to the verdict ([`is_kept`]), as berm-vmm relayed them.
    pub events: Vec<GuestLine>,
}

/// Whether a record keeps a guest event of this kind: the lifecycle events the verdict is
/// made of, not logs, replies or the probe's report.
pub fn is_kept(event: &Event) -> bool {
    matches!(
        event,
        Event::BootStart(_)
            | Event::AppStarted(_)
            | Event::AppReady(_)
            | Event::AppRefused(_)
            | Event::AppExited(_)
            | Event::BootComplete(_)
            | Event::BootFailed(_)
            | Event::PowerOff(_)
    )
}

/// Why a JSON value is not a record ([`Record::from_value`]): the field and what is wrong
/// with it, which `verify` reports as `record_malformed`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(String);

/// Why a record could not be built from a run dir.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `vmm.jsonl` could not be read.
    #[error("reading {path} failed (is this a berm-vmm run dir?)")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `vmm.jsonl` is larger than a run writes.
    #[error("{path} is {size} bytes, more than the {MAX_RUN_RECORD} bytes a run record may have")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// No `measurements` line: the run stopped before berm-vmm measured anything.
    #[error("{0} has no measurements line: the run stopped before berm-vmm measured what it boots")]
    NoMeasurements(PathBuf),
    /// A line berm-vmm writes has the wrong shape.
    #[error("{path} line {line}: the {event} line {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Which event.
        event: String,
        /// What is wrong.
        problem: String,
    },
}

impl Record {
    /// Builds the record of the run in `run_dir` from its `vmm.jsonl`.
    pub fn from_run_dir(run_dir: &Path) -> Result<Self, BuildError> {
        let path = run_dir.join(RUN_RECORD);
        let read = |source| BuildError::Read {
            path: path.clone(),
            source,
        };
        let size = std::fs::metadata(&path).map_err(read)?.len();
        if size > MAX_RUN_RECORD {
            return Err(BuildError::TooLarge { path, size });
        }
        let text = std::fs::read_to_string(&path).map_err(read)?;
        Self::from_lines(run_dir, &path, &text)
    }

    fn from_lines(run_dir: &Path, path: &Path, text: &str) -> Result<Self, BuildError> {
        let mut lines = Lines::default();
        let mut malformed = None;
        for (i, line) in text.lines().enumerate() {
            if let Err((event, problem)) = lines.keep(line) {
                malformed.get_or_insert(BuildError::Malformed {
                    path: path.to_owned(),
                    line: i + 1,
                    event,
                    problem,
                });
            }
        }
        // A run dir without any measurements line says more than a bad line of another kind.
        let m = match (lines.measurements.take(), malformed) {
            (Some(m), None) => m,
            (None, _) if !lines.saw_measurements => {
                return Err(BuildError::NoMeasurements(path.to_owned()));
            }
            (_, Some(error)) => return Err(error),
            (None, None) => return Err(BuildError::NoMeasurements(path.to_owned())),
        };
        let boot_id = lines
            .greeted_boot_id
            .or_else(|| lines.events.first().map(|e| e.boot_id.clone()));
        let mut record = Record {
            format: FORMAT.into(),
            run_dir: run_dir.display().to_string(),
            kernel: m.kernel,
            rootfs: m.rootfs,
            state: m.state,
            apps: m.apps,
            test_probe: m.test_probe,
            code_engine: m.engine,
            hypervisor: lines.hypervisor,
            host_sandbox: lines.host_sandbox,
            guest: Guest {
                boot_id,
                events: lines.events,
            },
            exit: lines.exit,
            record_sha256: String::new(),
        };
        record.seal();
        Ok(record)
    }

    /// Sets `record_sha256` to the hash of everything else.
    pub fn seal(&mut self) {
        self.record_sha256 = record_sha256(&self.to_value());
    }

    /// A record as JSON, of either format: a version-1 record is read in its own shape and
    /// converted ([`v1`]).
    pub fn from_value(value: &Value) -> Result<Self, ShapeError> {
        let shape = |e: serde_json::Error| ShapeError(e.to_string());
        if value.get("format").and_then(Value::as_str) == Some(FORMAT_V1) {
            let old: v1::Record = serde_json::from_value(value.clone()).map_err(shape)?;
            return old.convert().map_err(ShapeError);
        }
        let record: Record = serde_json::from_value(value.clone()).map_err(shape)?;
        if let Some(field) = unknown_field(value, &record.to_value(), "") {
            return Err(ShapeError(format!("unknown field `{field}`")));
        }
        if let Some(line) = record.guest.events.iter().find(|l| !is_kept(&l.event)) {
            return Err(ShapeError(format!(
                "guest.events holds a {} event, which a record does not keep",
                line.event.name()
            )));
        }
        Ok(record)
    }

    /// The record as a JSON value.
    pub fn to_value(&self) -> Value {
        // A record holds only strings, integers, booleans, arrays and maps: serializing it
        // cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The first field of `given` that `typed` (the same record as its types write it) lacks, as
/// a path: the record's types ignore fields they do not know (line readers must), so this is
/// how a record keeps refusing them.
fn unknown_field(given: &Value, typed: &Value, at: &str) -> Option<String> {
    match (given, typed) {
        (Value::Object(given), Value::Object(typed)) => given.iter().find_map(|(key, value)| {
            let path = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            match typed.get(key) {
                None => Some(path),
                Some(typed) => unknown_field(value, typed, &path),
            }
        }),
        (Value::Array(given), Value::Array(typed)) => given
            .iter()
            .zip(typed)
            .enumerate()
            .find_map(|(i, (given, typed))| unknown_field(given, typed, &format!("{at}[{i}]"))),
        _ => None,
    }
}

/// The lines of a run that the record is made of, each parsed with the type its writer used.
#[derive(Default)]
struct Lines {
    saw_measurements: bool,
    measurements: Option<MeasurementsLine>,
    hypervisor: Option<HypervisorLine>,
    host_sandbox: Option<HostSandboxLine>,
    greeted_boot_id: Option<String>,
    exit: Option<ExitLine>,
    events: Vec<GuestLine>,
}

impl Lines {
    /// Keeps what `line` contributes; lines of other kinds (berm-vmm's words for a person, a
    /// torn last line, events a later berm-vmm adds) are passed over. On a line of a kept kind
    /// that does not parse: the event's name and what is wrong with it.
    fn keep(&mut self, line: &str) -> Result<(), (String, String)> {
        match VmmLine::parse(line) {
            Ok(VmmLine::Host(event)) => match event {
                HostEvent::Measurements(m) => {
                    self.saw_measurements = true;
                    self.measurements = Some(m);
                }
                HostEvent::Hypervisor(h) => self.hypervisor = Some(h),
                HostEvent::HostSandbox(h) => self.host_sandbox = Some(h),
                HostEvent::GuestGreeted(g) => self.greeted_boot_id = Some(g.boot_id),
                HostEvent::Exit(e) => self.exit = Some(e),
                _ => {}
            },
            Ok(VmmLine::Guest(line)) => {
                if is_kept(&line.event) {
                    self.events.push(line);
                }
            }
            Err(VmmLineError::Shape { event, message }) => {
                if event == "measurements" {
                    self.saw_measurements = true;
                }
                if KEPT.contains(&event.as_str()) {
                    return Err((event, message));
                }
            }
            Err(VmmLineError::Guest(e)) => return Err(("guest".into(), e.to_string())),
            Err(_) => {}
        }
        Ok(())
    }
}

/// berm-vmm's events the record is made of: one of these that does not parse spoils the
/// record; another kind's does not.
const KEPT: [&str; 5] = [
    "measurements",
    "hypervisor",
    "host_sandbox",
    "guest_greeted",
    "exit",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_measurement_is_kept_and_a_child_without_one_is_malformed() {
        let measurements = r#"{"source":"berm-vmm","event":"measurements","kernel":{"sha256":"k","size":1,"pinned":true,"path":"/k","linux":"6.12","config_sha256":"c","cmdline":"x","hash_ms":0},"rootfs":{"sha256":"r","size":1,"pinned":true,"path":"/r","fstype":"erofs","read_only":true,"hash_ms":0},"state":null,"apps":[],"test_probe":null}"#;
        let child = r#"{"program":"berm-vmm connector","pid":7,"role":"berm-vmm-connector","landlock":"fully_enforced","no_new_privs":true,"seccomp":"allow_list berm-vmm-connector","seccomp_mode":"filter","seccomp_filters":1,"policy_sha256":"p","measured_by":"self_report"}"#;
        let sandbox = |children: &str| {
            format!(
                r#"{{"source":"berm-vmm","event":"host_sandbox","enabled":true,"landlock_abi":7,"landlock":"fully_enforced","no_new_privs":true,"seccomp":"allow_list","allowed":["read"],"policy_sha256":"p","reason":null,"children":{children}}}"#
            )
        };
        let build = |children: &str| {
            Record::from_lines(
                Path::new("/run"),
                Path::new("vmm.jsonl"),
                &format!("{measurements}\n{}\n", sandbox(children)),
            )
        };
        let record = build(&format!("[{child}]")).unwrap();
        let kept = &record.host_sandbox.unwrap().children;
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].measured_by, "self_report");
        assert_eq!(kept[0].seccomp_filters, 1);
        // A child as an older berm-vmm stated it, without a measurement, is not taken.
        let stated = r#"[{"program":"berm-vmm connector","landlock":"fully_enforced","seccomp":"allow_list berm-vmm-connector","policy_sha256":"p"}]"#;
        let err = build(stated).unwrap_err().to_string();
        assert!(
            err.contains("the host_sandbox line missing field `pid`"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_field_in_a_kept_line_is_an_error_never_empty() {
        let measurements = r#"{"source":"berm-vmm","event":"measurements","kernel":{"size":1,"pinned":true,"path":"/k","linux":"6.12","config_sha256":"c","cmdline":"x","hash_ms":0},"rootfs":{"sha256":"r","size":1,"pinned":true,"path":"/r","fstype":"erofs","read_only":true,"hash_ms":0},"state":null,"apps":[],"test_probe":null}"#;
        let err = Record::from_lines(Path::new("/run"), Path::new("vmm.jsonl"), measurements)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the measurements line missing field `sha256`"),
            "{err}"
        );
        let fixed = measurements.replace(r#""kernel":{"#, r#""kernel":{"sha256":"k","#);
        let exit = r#"{"source":"berm-vmm","event":"exit","status":"clean","code":0}"#;
        let err = Record::from_lines(
            Path::new("/run"),
            Path::new("vmm.jsonl"),
            &format!("{fixed}\n{exit}\n"),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("line 2: the exit line missing field `message`"),
            "{err}"
        );
    }
}
