//! Offline verification: the verdict re-derived from a record and the pins, nothing else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use berm_pins::{ImagePin, KernelPins, ParsePinsError, RootfsPins};
use serde::Serialize;
use serde_json::Value;

use crate::canonical::{is_sha256, record_sha256};
use crate::code::{Programs, check_code};
use crate::problem::{Code, Problem};
use berm_vm_protocol::host::{AppMeasurement, Backend, HostChild};
use berm_vm_protocol::{AppProgram, AppReady, AppRefused, AppStarted, Event, Landlock, Seccomp};

use crate::record::{FORMAT, FORMAT_V1, Record};

/// Extra kernel words berm-vmm adds for libkrun on kvm_pvm hosts (vmm/src/run.rs).
const PVM_WORDS: &str = " noxsave clearcpuid=popcnt,smap";

/// The outcome of [`verify`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// True when there is no problem.
    pub ok: bool,
    /// Every problem found (all checks run; none stops the others).
    pub problems: Vec<Problem>,
    /// Warning-level findings ([`Code::is_warning`]): reported, not refused.
    pub warnings: Vec<Problem>,
}

impl Verdict {
    /// A verdict of these problems, warnings set apart.
    pub fn of(found: Vec<Problem>) -> Verdict {
        let (warnings, problems): (Vec<Problem>, Vec<Problem>) =
            found.into_iter().partition(|p| p.code.is_warning());
        Verdict {
            ok: problems.is_empty(),
            problems,
            warnings,
        }
    }

    /// The verdict of `--strict`: every warning refuses the record too.
    pub fn strict(mut self) -> Verdict {
        self.problems.append(&mut self.warnings);
        self.ok = self.problems.is_empty();
        self
    }

    /// The distinct codes, sorted.
    pub fn codes(&self) -> Vec<Code> {
        let mut codes: Vec<Code> = self.problems.iter().map(|p| p.code).collect();
        codes.sort();
        codes.dedup();
        codes
    }
}

/// The pins a record is verified against: one kernel and rootfs per guest architecture; a
/// record is checked against those of the architecture it names (`kernel.arch`).
#[derive(Clone, Debug)]
pub struct Pins {
    /// By architecture name (`x86_64`, `aarch64`).
    pub by_arch: BTreeMap<String, ArchPins>,
}

/// One architecture's pins.
#[derive(Clone, Debug)]
pub struct ArchPins {
    /// The kernel's.
    pub kernel: KernelPins,
    /// The rootfs's.
    pub rootfs: RootfsPins,
}

/// Why pins could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PinsError {
    /// A manifest could not be read.
    #[error("reading {path} failed")]
    Read {
        /// The manifest.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A manifest is not a valid pins manifest.
    #[error(transparent)]
    Parse(#[from] ParsePinsError),
}

impl Pins {
    /// The pins compiled into this binary (the same crate berm-vmm compiles in).
    pub fn compiled_in() -> Result<Self, PinsError> {
        Self::parse(berm_pins::KERNEL_MANIFEST, berm_pins::ROOTFS_MANIFEST)
    }

    /// The pins in `dir/kernel/manifest.toml` and `dir/rootfs/manifest.toml` (a checkout of
    /// the release the record claims to come from).
    pub fn from_dir(dir: &Path) -> Result<Self, PinsError> {
        let read = |relative: &str| {
            let path = dir.join(relative);
            std::fs::read_to_string(&path).map_err(|source| PinsError::Read { path, source })
        };
        Self::parse(
            &read("kernel/manifest.toml")?,
            &read("rootfs/manifest.toml")?,
        )
    }

    /// Every architecture berm builds, each of which the manifests must pin.
    fn parse(kernel: &str, rootfs: &str) -> Result<Self, PinsError> {
        let mut by_arch = BTreeMap::new();
        for arch in berm_pins::ARCHES {
            let pins = ArchPins {
                kernel: KernelPins::parse_for(kernel, arch)?,
                rootfs: RootfsPins::parse_for(rootfs, arch)?,
            };
            by_arch.insert(arch.to_owned(), pins);
        }
        Ok(Self { by_arch })
    }

    /// The pins of the host's own architecture.
    pub fn host(&self) -> Option<&ArchPins> {
        self.by_arch.get(berm_pins::HOST_ARCH)
    }
}

struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, code: Code, detail: impl Into<String>) {
        self.0.push(Problem {
            code,
            detail: detail.into(),
        });
    }
}

/// A guest setting word as berm-vmm validates it: an upper-case identifier, `=`, and a value
/// without whitespace, quotes, backslashes or control characters.
fn is_setting_word(word: &str) -> bool {
    let Some((name, value)) = word.split_once('=') else {
        return false;
    };
    let mut name_bytes = name.bytes();
    name_bytes
        .next()
        .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && name_bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'\\'))
}

/// Whether `cmdline` is the pinned one, then at most one set of backend words (libkrun on
/// kvm_pvm, or the pinned TCG words), then only guest settings.
fn cmdline_ok(cmdline: &str, kernel: &KernelPins) -> bool {
    let Some(rest) = cmdline.strip_prefix(kernel.cmdline.as_str()) else {
        return false;
    };
    let tcg_words = (!kernel.tcg_cmdline.is_empty())
        .then(|| {
            rest.strip_prefix(' ')?
                .strip_prefix(kernel.tcg_cmdline.as_str())
        })
        .flatten();
    let rest = rest.strip_prefix(PVM_WORDS).or(tcg_words).unwrap_or(rest);
    if rest.is_empty() {
        return true;
    }
    rest.strip_prefix(' ')
        .is_some_and(|words| words.split(' ').all(is_setting_word))
}

/// What [`verify_with`] checks beyond the record and the pins.
#[derive(Default)]
pub struct Options<'a> {
    /// The programs, to re-derive every code digest from; without them each code digest is
    /// [`Code::CodeUnverified`].
    pub programs: Option<&'a Programs>,
    /// Digests the verifier expects of what no pin covers: `state` (the state disk's chunked
    /// sha256) and `app/NAME/image` (an app's image). Only the verifier knows these (the
    /// state it left behind, the images it built), so only it can hold a record to them.
    pub expect: BTreeMap<String, String>,
}

/// Whether `key` names something [`Options::expect`] can hold a record to.
pub fn is_expectation(key: &str) -> bool {
    key == "state"
        || key
            .strip_prefix("app/")
            .and_then(|rest| rest.strip_suffix("/image"))
            .is_some_and(|name| !name.is_empty())
}

/// Verifies a record (as parsed JSON) against `pins`, offline, without re-deriving code.
pub fn verify(record: &Value, pins: &Pins) -> Verdict {
    verify_with(record, pins, &Options::default())
}

/// Verifies a record (as parsed JSON) against `pins` and what `options` give, offline.
pub fn verify_with(record: &Value, pins: &Pins, options: &Options<'_>) -> Verdict {
    let mut problems = Problems(Vec::new());
    if let Some(record) = check(record, pins, &mut problems) {
        check_code(&record, options.programs, &mut problems.0);
        check_expected(&record, &options.expect, &mut problems);
    }
    Verdict::of(problems.0)
}

fn check(value: &Value, pins: &Pins, p: &mut Problems) -> Option<Record> {
    // `record_sha256` since version 2, `recordSha256` before; the shape check below refuses
    // a record with the other version's.
    let Some(claimed) = ["record_sha256", "recordSha256"]
        .into_iter()
        .find_map(|field| value.get(field).and_then(Value::as_str))
    else {
        p.add(
            Code::RecordMalformed,
            "the record has no record_sha256 string",
        );
        return None;
    };
    let actual = record_sha256(value);
    if claimed != actual {
        p.add(
            Code::RecordHashMismatch,
            format!("record_sha256 is {claimed}, but the record hashes to {actual}"),
        );
    }
    if let Some(format) = value.get("format").and_then(Value::as_str)
        && format != FORMAT
        && format != FORMAT_V1
    {
        p.add(
            Code::FormatUnsupported,
            format!("format {format:?} is neither {FORMAT:?} nor {FORMAT_V1:?}"),
        );
        return None;
    }
    let record = match Record::from_value(value) {
        Ok(record) => record,
        Err(e) => {
            p.add(Code::RecordMalformed, format!("the record's shape: {e}"));
            return None;
        }
    };
    check_digests(&record, p);
    if let Some(probe) = &record.test_probe {
        p.add(
            Code::TestProbePresent,
            format!(
                "the test-only enforcement probe (image {}) ran under app {}'s confinement",
                probe.image.sha256, probe.app
            ),
        );
    }
    // BERM_PROBE is berm-vmm's own setting (a user cannot pass it); on the command line it
    // means a test boot even if the probe's measurement was taken out of the record.
    if record.test_probe.is_none()
        && record
            .kernel
            .cmdline
            .split(' ')
            .any(|word| word.starts_with("BERM_PROBE="))
    {
        p.add(
            Code::TestProbePresent,
            "the command line sets BERM_PROBE: a test boot",
        );
    }
    let Some(pins) = pins.by_arch.get(&record.kernel.arch) else {
        p.add(
            Code::KernelUnpinned,
            format!(
                "the record is of an {:?} guest, for which these pins pin no kernel or rootfs",
                record.kernel.arch
            ),
        );
        return Some(record);
    };
    check_artifacts(&record, pins, p);
    check_host_sandbox(&record, p);
    check_guest(&record, pins, p);
    check_exit(&record, p);
    Some(record)
}

/// A run that ended with a nonzero status (berm-vmm's `exit` line, or the guest's
/// `power_off`) did not do what it was asked, whatever else it reported.
fn check_exit(r: &Record, p: &mut Problems) {
    if let Some(exit) = &r.exit
        && exit.code != 0
    {
        p.add(
            Code::ExitFailed,
            format!("berm-vmm exited {} ({})", exit.code, exit.status),
        );
    }
    for line in &r.guest.events {
        if let Event::PowerOff(off) = &line.event
            && off.exit_code != 0
        {
            p.add(
                Code::ExitFailed,
                format!(
                    "the guest powered off with exit code {} ({})",
                    off.exit_code, off.reason
                ),
            );
        }
    }
}

fn check_digests(r: &Record, p: &mut Problems) {
    let mut digests: Vec<(String, &str)> = vec![
        ("kernel.sha256".into(), &r.kernel.sha256),
        ("rootfs.sha256".into(), &r.rootfs.sha256),
    ];
    if let Some(state) = &r.state {
        digests.push(("state.chunked_sha256".into(), &state.chunked_sha256));
    }
    for app in &r.apps {
        digests.push((format!("apps[{}].sha256", app.index), &app.sha256));
        for program in &app.programs {
            digests.push((
                format!("apps[{}].programs[{}].sha256", app.index, program.name),
                &program.sha256,
            ));
        }
        digests.push((
            format!("apps[{}].image.sha256", app.index),
            &app.image.sha256,
        ));
        for code in &app.code {
            digests.push((
                format!("apps[{}].code[{}].sha256", app.index, code.program),
                &code.sha256,
            ));
        }
    }
    for child in r.host_sandbox.iter().flat_map(|h| &h.children) {
        digests.push((
            format!("host_sandbox.children[{}].policy_sha256", child.program),
            &child.policy_sha256,
        ));
    }
    for line in &r.guest.events {
        if let Event::AppReady(ready) = &line.event {
            for program in &ready.programs {
                if let Some(code) = &program.code_sha256 {
                    digests.push((
                        format!(
                            "app_ready[{}].programs[{}].code_sha256",
                            ready.index, program.name
                        ),
                        code,
                    ));
                }
            }
        }
    }
    for (field, digest) in digests {
        if !is_sha256(digest) {
            p.add(
                Code::DigestMalformed,
                format!("{field} is {digest:?}, not a sha256"),
            );
        }
    }
}

/// A booted image, `(sha256, size)` as recorded, against its pin: `code` when they differ.
fn check_image(
    p: &mut Problems,
    code: Code,
    what: &str,
    (sha256, size): (&str, u64),
    pin: &ImagePin,
) {
    if sha256 != pin.sha256.as_str() || size != pin.size {
        p.add(
            code,
            format!(
                "{what} sha256 {sha256} ({size} bytes) is not the pinned {} ({} bytes)",
                pin.sha256, pin.size
            ),
        );
    }
}

fn check_artifacts(r: &Record, pins: &ArchPins, p: &mut Problems) {
    let kernel = (r.kernel.sha256.as_str(), r.kernel.size);
    check_image(
        p,
        Code::KernelUnpinned,
        "kernel",
        kernel,
        &pins.kernel.image,
    );
    let rootfs = (r.rootfs.sha256.as_str(), r.rootfs.size);
    check_image(
        p,
        Code::RootfsUnpinned,
        "rootfs",
        rootfs,
        &pins.rootfs.image,
    );
    if !cmdline_ok(&r.kernel.cmdline, &pins.kernel) {
        p.add(
            Code::CmdlineMismatch,
            format!(
                "kernel.cmdline {:?} is not the pinned command line followed only by guest settings (NAME=VALUE)",
                r.kernel.cmdline
            ),
        );
    }
}

fn check_host_sandbox(r: &Record, p: &mut Problems) {
    let Some(sandbox) = &r.host_sandbox else {
        p.add(
            Code::HostSandboxMissing,
            "berm-vmm reported no host_sandbox line",
        );
        return;
    };
    if !sandbox.enabled {
        p.add(
            Code::HostSandboxDisabled,
            format!(
                "berm-vmm ran unconfined ({})",
                sandbox.reason.as_deref().unwrap_or("no reason given")
            ),
        );
        return;
    }
    if sandbox.landlock != Landlock::FullyEnforced
        || sandbox.seccomp != "allow_list"
        || sandbox.allowed.is_empty()
        || !is_sha256(&sandbox.policy_sha256)
    {
        p.add(
            Code::HostSandboxWeak,
            format!(
                "berm-vmm's Landlock is {:?} and its seccomp {:?} ({} syscalls allowed)",
                sandbox.landlock.name(),
                sandbox.seccomp,
                sandbox.allowed.len()
            ),
        );
    }
    check_host_children(r, &sandbox.children, p);
}

/// The children that run berm's code measure themselves; QEMU and vhost-device-vsock are
/// measured by berm-vmm (vmm/src/measure.rs).
const SELF_REPORTED: &[&str] = &[
    "berm-vmm-connector",
    "berm-vmm-dialer",
    "krun-enter",
    "krun-enter-egress",
];
const PROBED: &[&str] = &["qemu", "vhost-device-vsock", "vhost-device-vsock-egress"];
/// The hypervisor children, whose connect to a socket outside every policy is measured.
const HYPERVISOR: &[&str] = &[
    "qemu",
    "vhost-device-vsock",
    "vhost-device-vsock-egress",
    "krun-enter",
    "krun-enter-egress",
];
/// The vsock device of a run with egress: its list has `connect`, so it must run in the view
/// of its policy's paths (vmm/src/view.rs).
const CONNECTS_BY_PATH: &[&str] = &["vhost-device-vsock-egress", "krun-enter-egress"];

/// Every child a confined run starts must be there, measured the way it can be, and measured
/// confined as its policy requires: Landlock fully enforced (for a probed child, the probe's
/// read outside refused), `no_new_privs`, and a seccomp filter, its role's allow list.
fn check_host_children(r: &Record, children: &[HostChild], p: &mut Problems) {
    let has = |roles: &[&str]| children.iter().any(|c| roles.contains(&c.role.as_str()));
    let egress = r.apps.iter().flat_map(|a| &a.programs).any(|program| {
        program.grants.iter().any(|g| {
            matches!(
                g,
                berm_abi::grant::Grant::Net(_) | berm_abi::grant::Grant::Secret { .. }
            )
        })
    });
    let mut expected: Vec<(&str, &[&str])> = vec![("the connector", &["berm-vmm-connector"])];
    match r.hypervisor.as_ref().map(|h| h.chosen) {
        Some(Backend::Qemu) => {
            expected.push(("QEMU", &["qemu"]));
            expected.push((
                "vhost-device-vsock",
                &["vhost-device-vsock", "vhost-device-vsock-egress"],
            ));
        }
        Some(Backend::Krun) => {
            expected.push(("the libkrun child", &["krun-enter", "krun-enter-egress"]))
        }
        _ => {}
    }
    if egress {
        expected.push(("the egress dialer", &["berm-vmm-dialer"]));
    }
    for (what, roles) in expected {
        if !has(roles) {
            p.add(
                Code::HostChildUnmeasured,
                format!(
                    "the record has no measurement of {what} (role {}), which this run starts",
                    roles.join(" or ")
                ),
            );
        }
    }
    for c in children {
        let how = match c.measured_by.as_str() {
            "self_report" => SELF_REPORTED,
            "proc_status+probe" => PROBED,
            _ => &[],
        };
        if !how.contains(&c.role.as_str()) {
            p.add(
                Code::HostChildUnmeasured,
                format!(
                    "berm-vmm's child {} (role {}) is measured by {:?}, which is not how a child of that role is measured",
                    c.program, c.role, c.measured_by
                ),
            );
            continue;
        }
        let filter = format!("allow_list {}", c.role);
        let own_filter = c.seccomp == filter || c.seccomp.starts_with(&format!("{filter} and "));
        if c.landlock != Landlock::FullyEnforced
            || !c.no_new_privs
            || c.seccomp_mode != "filter"
            || c.seccomp_filters == 0
            || !own_filter
        {
            p.add(
                Code::HostChildWeak,
                format!(
                    "berm-vmm's child {} (role {}, measured by {}) ran with Landlock {:?}, no_new_privs {}, seccomp mode {:?} ({} filters), filter {:?}",
                    c.program,
                    c.role,
                    c.measured_by,
                    c.landlock.name(),
                    c.no_new_privs,
                    c.seccomp_mode,
                    c.seccomp_filters,
                    c.seccomp
                ),
            );
        }
        if r.format != FORMAT_V1 {
            check_connect_outside(c, p);
        }
        if c.measured_by == "proc_status+probe" && c.read_outside.as_deref() != Some("EACCES") {
            p.add(
                Code::HostChildWeak,
                format!(
                    "berm-vmm's child {} (role {}): the probe of its ruleset read outside it with {}, not EACCES",
                    c.program,
                    c.role,
                    c.read_outside.as_deref().unwrap_or("no outcome")
                ),
            );
        }
    }
}

/// A hypervisor child's connect to a Unix socket outside every policy must have been
/// measured and refused; the vsock device of a run with egress, whose list has `connect`,
/// must also have run in the view of its policy's paths.
fn check_connect_outside(c: &HostChild, p: &mut Problems) {
    if !HYPERVISOR.contains(&c.role.as_str()) {
        return;
    }
    let name = format!("berm-vmm's child {} (role {})", c.program, c.role);
    match c.connect_outside.as_deref() {
        None => p.add(
            Code::HostChildUnmeasured,
            format!("{name}: its connect to a Unix socket outside its policy was not measured"),
        ),
        Some("ENOENT" | "EACCES" | "EPERM") => {}
        Some(outcome) => p.add(
            Code::HostChildWeak,
            format!(
                "{name} connected to a Unix socket outside its policy ({outcome}), so it could reach any socket of the host's user"
            ),
        ),
    }
    if CONNECTS_BY_PATH.contains(&c.role.as_str()) && c.view.as_deref() != Some("policy_paths") {
        p.add(
            Code::HostChildWeak,
            format!(
                "{name} may connect by pathname but saw the filesystem view {:?}, not only its policy's paths (policy_paths)",
                c.view.as_deref().unwrap_or("unmeasured")
            ),
        );
    }
}

/// What the guest said about one app index.
#[derive(Default)]
struct AppReports<'a> {
    started: Vec<&'a AppStarted>,
    ready: Vec<&'a AppReady>,
    refused: Vec<&'a AppRefused>,
}

fn check_guest(r: &Record, pins: &ArchPins, p: &mut Problems) {
    let events = &r.guest.events;
    if !events
        .iter()
        .any(|l| matches!(l.event, Event::BootStart(_)))
    {
        p.add(Code::GuestMissing, "the guest reported no boot_start");
    }
    match &r.guest.boot_id {
        None => {
            if !events.is_empty() {
                p.add(Code::BootIdMismatch, "the record names no boot id");
            }
        }
        Some(boot_id) => {
            for line in events {
                if line.boot_id != *boot_id {
                    p.add(
                        Code::BootIdMismatch,
                        format!(
                            "a guest event carries boot id {}, not the greeting's {boot_id}",
                            line.boot_id
                        ),
                    );
                }
            }
        }
    }
    let mut by_index: BTreeMap<u32, AppReports<'_>> = BTreeMap::new();
    for line in events {
        match &line.event {
            Event::BootFailed(failed) => p.add(
                Code::BootFailed,
                format!(
                    "the guest's boot failed at {}: {}",
                    failed.step, failed.message
                ),
            ),
            Event::AppStarted(started) => by_index
                .entry(started.index)
                .or_default()
                .started
                .push(started),
            Event::AppReady(ready) => by_index.entry(ready.index).or_default().ready.push(ready),
            Event::AppRefused(refused) => by_index
                .entry(refused.index)
                .or_default()
                .refused
                .push(refused),
            Event::AppExited(exited) => p.add(
                Code::AppExited,
                format!(
                    "app {} ({}) exited while the VM ran (code {}, signal {})",
                    exited.index,
                    exited.app,
                    exited.code.map_or("none".into(), |c| c.to_string()),
                    exited.signal.map_or("none".into(), |s| s.to_string())
                ),
            ),
            _ => {}
        }
    }
    for index in by_index.keys() {
        if !r.apps.iter().any(|a| a.index == *index) {
            p.add(
                Code::AppUnmeasured,
                format!("the guest reported app {index}, which the host never measured"),
            );
        }
    }
    let none = AppReports::default();
    for app in &r.apps {
        let reports = by_index.get(&app.index).unwrap_or(&none);
        // A version-1 record may name no app (its conversion leaves the name empty).
        let label = if app.name.is_empty() {
            app.path.display().to_string()
        } else {
            app.name.clone()
        };
        check_app(app.index, &label, app, reports, pins, p);
    }
}

fn check_app(
    index: u32,
    label: &str,
    app: &AppMeasurement,
    reports: &AppReports<'_>,
    pins: &ArchPins,
    p: &mut Problems,
) {
    for refused in &reports.refused {
        p.add(
            Code::AppRefused,
            format!(
                "app {index} ({label}) was refused by the guest: {}",
                refused.reason
            ),
        );
    }
    if !reports.refused.is_empty() {
        return;
    }
    if reports.started.is_empty() {
        p.add(
            Code::EnforcementMissing,
            format!("app {index} ({label}) has no app_started, so no enforcement report"),
        );
        return;
    }
    for started in &reports.started {
        let e = &started.enforcement;
        if e.landlock != Landlock::FullyEnforced
            || !e.no_new_privs
            || e.seccomp != Seccomp::AllowList
        {
            p.add(
                Code::EnforcementWeak,
                format!(
                    "app {index} ({label}) ran with Landlock {:?}, no_new_privs {}, seccomp {:?}",
                    e.landlock.name(),
                    e.no_new_privs,
                    e.seccomp.name()
                ),
            );
        }
        let pinned = pins.rootfs.app_policy_sha256.as_str();
        if !is_sha256(&e.policy_sha256) {
            p.add(
                Code::PolicyDigestMissing,
                format!(
                    "app {index} ({label}) reported policy digest {:?}",
                    e.policy_sha256
                ),
            );
        } else if e.policy_sha256 != pinned {
            p.add(
                Code::PolicyMismatch,
                format!(
                    "app {index} ({label}) ran under policy {}, but the pinned build's apps report {pinned}",
                    e.policy_sha256
                ),
            );
        }
    }
    let Some(AppReady { programs, .. }) = reports.ready.last() else {
        p.add(
            Code::AppNotReady,
            format!("app {index} ({label}) started but never reported app_ready"),
        );
        return;
    };
    for measured in &app.programs {
        match programs.iter().find(|loaded| loaded.name == measured.name) {
            Some(loaded) if loaded.sha256 == measured.sha256 => {}
            Some(loaded) => p.add(
                Code::ProgramDigestMismatch,
                format!(
                    "app {index} ({label}) loaded program {} with sha256 {}, measured {}",
                    measured.name, loaded.sha256, measured.sha256
                ),
            ),
            None => p.add(
                Code::ProgramDigestMismatch,
                format!(
                    "app {index} ({label}) did not load the measured program {} ({})",
                    measured.name, measured.sha256
                ),
            ),
        }
    }
    check_mapped_code(index, label, app, programs, p);
    for loaded in programs {
        if !app.programs.iter().any(|m| m.name == loaded.name) {
            p.add(
                Code::ProgramUnmeasured,
                format!(
                    "app {index} ({label}) loaded program {} ({}), which the host never measured",
                    loaded.name, loaded.sha256
                ),
            );
        }
    }
}

/// The code the guest says it mapped for each program must be the code the host measured.
fn check_mapped_code(
    index: u32,
    label: &str,
    app: &AppMeasurement,
    loaded: &[AppProgram],
    p: &mut Problems,
) {
    for program in loaded {
        if !app.programs.iter().any(|m| m.name == program.name) {
            continue; // program_unmeasured says it
        }
        let measured = app.code.iter().find(|c| c.program == program.name);
        match (measured, &program.code_sha256) {
            (Some(m), Some(mapped)) if *mapped == m.sha256 => {}
            (Some(m), Some(mapped)) => p.add(
                Code::CodeDigestMismatch,
                format!(
                    "app {index} ({label}) mapped code {mapped} for program {}, but the host measured {}",
                    program.name, m.sha256
                ),
            ),
            (Some(m), None) => p.add(
                Code::CodeDigestMismatch,
                format!(
                    "app {index} ({label}) reports no digest for the code of program {} (code: {}), so it did not map the measured {}",
                    program.name,
                    serde_json::to_value(program.code).map_or("null".into(), |c| c.to_string()),
                    m.sha256
                ),
            ),
            (None, _) => p.add(
                Code::CodeDigestMismatch,
                format!(
                    "app {index} ({label}) runs program {}, for which the host measured no code",
                    program.name
                ),
            ),
        }
    }
}

fn check_expected(r: &Record, expect: &BTreeMap<String, String>, p: &mut Problems) {
    for (key, expected) in expect {
        if key == "state" {
            let actual = r.state.as_ref().map(|s| s.chunked_sha256.as_str());
            if actual != Some(expected.as_str()) {
                p.add(
                    Code::StateUnexpected,
                    format!(
                        "state.chunked_sha256 is {}, the verifier expects {expected}",
                        actual.unwrap_or("absent (no state disk)")
                    ),
                );
            }
        } else if let Some(name) = key
            .strip_prefix("app/")
            .and_then(|rest| rest.strip_suffix("/image"))
        {
            let actual = r
                .apps
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.image.sha256.as_str());
            if actual != Some(expected.as_str()) {
                p.add(
                    Code::AppImageUnexpected,
                    format!(
                        "app {name}'s image is {}, the verifier expects {expected}",
                        actual.unwrap_or("absent")
                    ),
                );
            }
        }
    }
}
