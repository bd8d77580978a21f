//! How each confined child of berm-vmm is confined, measured rather than stated.
//!
//! berm-vmm starts up to five confined children: its connector (a fork), the egress dialer and
//! the libkrun child (`berm-vmm dial` and `berm-vmm krun-enter`, itself re-executed), QEMU and
//! vhost-device-vsock. The `host_sandbox` line reports each one's confinement as measured:
//!
//! - **`self_report`** — the children that run berm's own code (the connector, the dialer,
//!   krun-enter). Each opens `/proc/self/status` before it confines itself (Landlock grants it
//!   no `/proc`), applies Landlock and seccomp, then reads the kernel's view of itself from
//!   that descriptor (`Seccomp:`, `Seccomp_filters:`, `NoNewPrivs:`) and adds the Landlock
//!   status `landlock_restrict_self` gave it. It sends that to berm-vmm as one short line
//!   ([`SelfReport`]) over a channel it already has (the connector's socket pair, the dialer's
//!   stdout) or one made for it (krun-enter's report pipe). berm-vmm parses the line strictly
//!   and bounded; a child that does not report is a failed start.
//! - **`proc_status+probe`** — the third-party programs (QEMU, vhost-device-vsock), which
//!   cannot say anything themselves. Right after the spawn (which returns once the program
//!   is executing) berm-vmm reads `/proc/PID/status` of the child: its seccomp mode, filter
//!   count and `no_new_privs`, as the kernel keeps them. Landlock has no such field, so before
//!   the spawn berm-vmm forks a probe that applies the same ruleset and the same role's filter
//!   (a [`crate::sandbox::ChildSandbox`] prepared from the same policy), tries to open `/`
//!   (which no policy grants) and reports the Landlock status it got and the outcome
//!   ([`ProbeReport`]).
//!
//! Everything here that runs in a child after its filter is loaded allocates nothing: the
//! connector's allow list has no memory calls at all.

use berm_vm_protocol::host::Landlock;

/// Largest `/proc/PID/status` read (a real one is about 1.5 KiB).
pub const MAX_STATUS: usize = 16 << 10;
/// Largest report line a child may send.
pub const MAX_REPORT: usize = 128;

/// A process's seccomp mode, as `/proc/PID/status` gives it (`Seccomp:` 0, 1, 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeccompMode {
    /// 0: no seccomp.
    Disabled,
    /// 1: strict mode.
    Strict,
    /// 2: one or more filters.
    Filter,
}

impl SeccompMode {
    /// The word used in lines: `disabled`, `strict`, `filter`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Strict => "strict",
            Self::Filter => "filter",
        }
    }

    fn number(self) -> u32 {
        match self {
            Self::Disabled => 0,
            Self::Strict => 1,
            Self::Filter => 2,
        }
    }

    fn of(number: u32) -> Option<Self> {
        match number {
            0 => Some(Self::Disabled),
            1 => Some(Self::Strict),
            2 => Some(Self::Filter),
            _ => None,
        }
    }
}

/// What `/proc/PID/status` says about a process's confinement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStatus {
    /// `Seccomp:`.
    pub seccomp: SeccompMode,
    /// `Seccomp_filters:` (Linux 5.9+, older than any Landlock kernel).
    pub seccomp_filters: u32,
    /// `NoNewPrivs:`.
    pub no_new_privs: bool,
}

/// Why a status text or a report line was refused (a fixed sentence: made without
/// allocating, in a child whose filter has no memory calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub &'static str);

/// A decimal `u32` of 1 to 10 ASCII digits, nothing else.
fn number(text: &[u8]) -> Option<u32> {
    if text.is_empty() || text.len() > 10 {
        return None;
    }
    let mut n: u32 = 0;
    for &b in text {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u32::from(b - b'0'))?;
    }
    Some(n)
}

impl ProcStatus {
    /// Parses a `/proc/PID/status` text: `Seccomp`, `Seccomp_filters` and `NoNewPrivs` must
    /// each appear exactly once, as `Key:` then tabs or spaces then a decimal number and
    /// nothing else, with values the kernel can give and that agree with each other. Other
    /// lines are passed over (the kernel adds fields); a NUL byte or a text longer than
    /// [`MAX_STATUS`] is refused. Allocates nothing.
    pub fn parse(text: &[u8]) -> Result<Self, Refused> {
        if text.len() > MAX_STATUS {
            return Err(Refused("the status is longer than 16 KiB"));
        }
        if text.contains(&0) {
            return Err(Refused("the status holds a NUL byte"));
        }
        let (mut seccomp, mut filters, mut nnp) = (None, None, None);
        for line in text.split(|&b| b == b'\n') {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (key, value) = (&line[..colon], &line[colon + 1..]);
            let slot = match key {
                b"Seccomp" => &mut seccomp,
                b"Seccomp_filters" => &mut filters,
                b"NoNewPrivs" => &mut nnp,
                _ => continue,
            };
            if slot.is_some() {
                return Err(Refused("a confinement field appears twice in the status"));
            }
            let start = value
                .iter()
                .position(|&b| b != b'\t' && b != b' ')
                .unwrap_or(value.len());
            let value = number(&value[start..])
                .ok_or(Refused("a confinement field of the status is not a number"))?;
            *slot = Some(value);
        }
        let (Some(seccomp), Some(filters), Some(nnp)) = (seccomp, filters, nnp) else {
            return Err(Refused(
                "the status lacks Seccomp, Seccomp_filters or NoNewPrivs",
            ));
        };
        let seccomp = SeccompMode::of(seccomp).ok_or(Refused("Seccomp is not 0, 1 or 2"))?;
        let no_new_privs = match nnp {
            0 => false,
            1 => true,
            _ => return Err(Refused("NoNewPrivs is not 0 or 1")),
        };
        if (seccomp == SeccompMode::Filter) != (filters > 0) {
            return Err(Refused("Seccomp_filters disagrees with Seccomp"));
        }
        Ok(Self {
            seccomp,
            seccomp_filters: filters,
            no_new_privs,
        })
    }

    /// `/proc/PID/status` of `pid`, read and parsed (berm-vmm's reading of a child).
    pub fn of_pid(pid: u32) -> Result<Self, String> {
        use std::io::Read;
        let path = format!("/proc/{pid}/status");
        let mut text = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_STATUS as u64 + 1).read_to_end(&mut text))
            .map_err(|e| format!("reading {path}: {e}"))?;
        Self::parse(&text).map_err(|e| format!("{path}: {e}"))
    }
}

/// `/proc/self/status`, opened before the process confines itself (its Landlock grants no
/// `/proc`) and read after: the kernel generates the text at the read, so it shows the
/// confinement in force then.
pub struct OwnStatus(std::fs::File);

impl OwnStatus {
    /// Opens it: before confining.
    pub fn open() -> std::io::Result<Self> {
        std::fs::File::open("/proc/self/status").map(Self)
    }

    /// Reads and parses it: after confining. `landlock` is what `landlock_restrict_self`
    /// gave. Allocates nothing; only `read` and `close` are called.
    pub fn measure(mut self, landlock: Landlock) -> Result<SelfReport, Refused> {
        use std::io::Read;
        let mut text = [0u8; MAX_STATUS + 1];
        let mut len = 0;
        while len < text.len() {
            match self.0.read(&mut text[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Refused("reading /proc/self/status failed")),
            }
        }
        Ok(SelfReport {
            landlock,
            status: ProcStatus::parse(&text[..len])?,
        })
    }
}

/// Writes into a fixed buffer: `core::fmt` without allocating.
struct Fixed<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl std::fmt::Write for Fixed<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn fixed<'b>(buf: &'b mut [u8; MAX_REPORT], args: std::fmt::Arguments<'_>) -> &'b [u8] {
    let mut out = Fixed {
        buf: &mut buf[..],
        len: 0,
    };
    // Every line fits: the longest Landlock word and four ten-digit numbers stay far under
    // MAX_REPORT; should one not, the line is cut, and refused by its reader.
    let _ = std::fmt::Write::write_fmt(&mut out, args);
    let len = out.len;
    &buf[..len]
}

/// The `key=value` words of a report line after its first word, in exactly this order.
fn words<'a, const N: usize>(
    line: &'a [u8],
    first: &[u8],
    keys: [&[u8]; N],
) -> Result<[&'a [u8]; N], Refused> {
    let shape = Refused("the report line is not of the expected shape");
    if line.len() > MAX_REPORT || !line.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        return Err(shape);
    }
    let mut parts = line.split(|&b| b == b' ');
    if parts.next() != Some(first) {
        return Err(shape);
    }
    let mut values = [&line[..0]; N];
    for (value, key) in values.iter_mut().zip(keys) {
        let word = parts.next().ok_or(shape)?;
        *value = word
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(b"="))
            .ok_or(shape)?;
    }
    if parts.next().is_some() {
        return Err(shape);
    }
    Ok(values)
}

/// A Landlock status by its word.
pub fn landlock_named(name: &[u8]) -> Option<Landlock> {
    [
        Landlock::FullyEnforced,
        Landlock::PartiallyEnforced,
        Landlock::NotEnforced,
    ]
    .into_iter()
    .find(|l| l.name().as_bytes() == name)
}

/// What a child that runs berm's code says about itself once confined: the Landlock status
/// it got and its own `/proc/self/status`. On the wire, one line (no newline):
/// `confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfReport {
    /// What `landlock_restrict_self` gave.
    pub landlock: Landlock,
    /// Its `/proc/self/status` after confining.
    pub status: ProcStatus,
}

impl SelfReport {
    /// The line, in `buf`. Allocates nothing.
    pub fn encode<'b>(&self, buf: &'b mut [u8; MAX_REPORT]) -> &'b [u8] {
        fixed(
            buf,
            format_args!(
                "confined landlock={} no_new_privs={} seccomp={} seccomp_filters={}",
                self.landlock.name(),
                u8::from(self.status.no_new_privs),
                self.status.seccomp.number(),
                self.status.seccomp_filters
            ),
        )
    }

    /// Parses a line strictly: exactly the words [`SelfReport::encode`] writes, in its
    /// order, with values it can write; anything else is refused.
    pub fn decode(line: &[u8]) -> Result<Self, Refused> {
        let [landlock, nnp, seccomp, filters] = words(
            line,
            b"confined",
            [b"landlock", b"no_new_privs", b"seccomp", b"seccomp_filters"],
        )?;
        let landlock = landlock_named(landlock).ok_or(Refused("an unknown Landlock status"))?;
        let no_new_privs = match nnp {
            b"0" => false,
            b"1" => true,
            _ => return Err(Refused("no_new_privs is not 0 or 1")),
        };
        let seccomp = number(seccomp)
            .and_then(SeccompMode::of)
            .ok_or(Refused("seccomp is not 0, 1 or 2"))?;
        let seccomp_filters = number(filters).ok_or(Refused("seccomp_filters is not a number"))?;
        if (seccomp == SeccompMode::Filter) != (seccomp_filters > 0) {
            return Err(Refused("seccomp_filters disagrees with seccomp"));
        }
        Ok(Self {
            landlock,
            status: ProcStatus {
                seccomp,
                seccomp_filters,
                no_new_privs,
            },
        })
    }
}

/// The path the probe tries to read: no policy grants `/` itself.
pub const PROBE_OUTSIDE: &std::ffi::CStr = c"/";

/// What the Landlock probe of an exec'd child's policy found: the Landlock status the same
/// ruleset got, and the errno of opening [`PROBE_OUTSIDE`] under it (0: it opened). On the
/// wire: `probe landlock=fully_enforced read_outside=13`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    /// What `landlock_restrict_self` gave the probe.
    pub landlock: Landlock,
    /// The errno of the denied read, 0 if it was allowed.
    pub read_outside: u32,
}

impl ProbeReport {
    /// The line, in `buf`. Allocates nothing.
    pub fn encode<'b>(&self, buf: &'b mut [u8; MAX_REPORT]) -> &'b [u8] {
        fixed(
            buf,
            format_args!(
                "probe landlock={} read_outside={}",
                self.landlock.name(),
                self.read_outside
            ),
        )
    }

    /// Parses a line strictly, like [`SelfReport::decode`].
    pub fn decode(line: &[u8]) -> Result<Self, Refused> {
        let [landlock, read] = words(line, b"probe", [b"landlock", b"read_outside"])?;
        Ok(Self {
            landlock: landlock_named(landlock).ok_or(Refused("an unknown Landlock status"))?,
            read_outside: number(read).ok_or(Refused("read_outside is not a number"))?,
        })
    }

    /// The outcome as the host line words it: `EACCES`, `allowed`, or `errno N`.
    pub fn outcome(&self) -> String {
        match self.read_outside {
            0 => "allowed".into(),
            13 => "EACCES".into(),
            n => format!("errno {n}"),
        }
    }

    /// The Landlock status this shows: the probe's, unless the read it must refuse was
    /// not refused by Landlock (`EACCES`), which is `not_enforced` whatever the status said.
    pub fn landlock(&self) -> Landlock {
        if self.read_outside == libc::EACCES as u32 {
            self.landlock
        } else {
            Landlock::NotEnforced
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "Name:\tqemu-system-x86\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\nSpeculation_Store_Bypass:\tthread vulnerable\nCpus_allowed_list:\t0-1\nvoluntary_ctxt_switches:\t3\n";

    #[test]
    fn a_real_status_parses() {
        assert_eq!(
            ProcStatus::parse(REAL.as_bytes()),
            Ok(ProcStatus {
                seccomp: SeccompMode::Filter,
                seccomp_filters: 2,
                no_new_privs: true,
            })
        );
        let unconfined = "NoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
        assert_eq!(
            ProcStatus::parse(unconfined.as_bytes()).unwrap(),
            ProcStatus {
                seccomp: SeccompMode::Disabled,
                seccomp_filters: 0,
                no_new_privs: false,
            }
        );
        // This very process, read the way a child reads itself.
        let own = OwnStatus::open().unwrap().measure(Landlock::NotEnforced);
        assert!(own.is_ok(), "{own:?}");
    }

    #[test]
    fn a_hostile_or_garbled_status_is_refused() {
        let refused = |text: &str| ProcStatus::parse(text.as_bytes()).unwrap_err().0;
        let cases = [
            // A field repeated, e.g. by a process name made to look like a line.
            (
                format!("{REAL}Seccomp:\t0\n"),
                "a confinement field appears twice in the status",
            ),
            (
                REAL.replace("Seccomp:\t2", "Seccomp:\t2 "),
                "a confinement field of the status is not a number",
            ),
            (
                REAL.replace("Seccomp:\t2", "Seccomp:\t+2"),
                "a confinement field of the status is not a number",
            ),
            (
                REAL.replace("Seccomp:\t2", "Seccomp:"),
                "a confinement field of the status is not a number",
            ),
            (
                REAL.replace("Seccomp_filters:\t2", "Seccomp_filters:\t99999999999"),
                "a confinement field of the status is not a number",
            ),
            (
                REAL.replace("Seccomp_filters:\t2", "Seccomp_filters:\t4294967296"),
                "a confinement field of the status is not a number",
            ),
            (
                REAL.replace("Seccomp:\t2", "Seccomp:\t3"),
                "Seccomp is not 0, 1 or 2",
            ),
            (
                REAL.replace("NoNewPrivs:\t1", "NoNewPrivs:\t2"),
                "NoNewPrivs is not 0 or 1",
            ),
            (
                REAL.replace("Seccomp_filters:\t2", "Seccomp_filters:\t0"),
                "Seccomp_filters disagrees with Seccomp",
            ),
            (
                REAL.replace("Seccomp:\t2", "seccomp:\t2"),
                "the status lacks Seccomp, Seccomp_filters or NoNewPrivs",
            ),
            (
                REAL.replace("Seccomp:\t2", " Seccomp:\t2"),
                "the status lacks Seccomp, Seccomp_filters or NoNewPrivs",
            ),
            (
                REAL.replace("NoNewPrivs:\t1\n", ""),
                "the status lacks Seccomp, Seccomp_filters or NoNewPrivs",
            ),
            (
                String::new(),
                "the status lacks Seccomp, Seccomp_filters or NoNewPrivs",
            ),
            (
                REAL.replace("Umask", "Um\0sk"),
                "the status holds a NUL byte",
            ),
            (
                format!("{REAL}{}", "x".repeat(MAX_STATUS)),
                "the status is longer than 16 KiB",
            ),
        ];
        for (text, why) in cases {
            assert_eq!(refused(&text), why, "{text:?}");
        }
        // Bytes that are not UTF-8 anywhere else are passed over, not trusted or fatal.
        let mut odd = REAL.as_bytes().to_vec();
        odd.extend_from_slice(b"Name:\t\xff\xfe\n");
        assert!(ProcStatus::parse(&odd).is_ok());
    }

    #[test]
    fn a_self_report_round_trips_and_nothing_else_is_taken() {
        let report = SelfReport {
            landlock: Landlock::FullyEnforced,
            status: ProcStatus {
                seccomp: SeccompMode::Filter,
                seccomp_filters: 1,
                no_new_privs: true,
            },
        };
        let mut buf = [0u8; MAX_REPORT];
        let line = report.encode(&mut buf);
        assert_eq!(
            line,
            b"confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1"
        );
        assert_eq!(SelfReport::decode(line), Ok(report));
        for bad in [
            "",
            "confined",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1 ",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1\n",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1 x=1",
            "confined no_new_privs=1 landlock=fully_enforced seccomp=2 seccomp_filters=1",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2",
            "confined landlock=mostly no_new_privs=1 seccomp=2 seccomp_filters=1",
            "confined landlock=fully_enforced no_new_privs=yes seccomp=2 seccomp_filters=1",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=0",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=0 seccomp_filters=1",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=7 seccomp_filters=1",
            "confined  landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1",
            "probe landlock=fully_enforced read_outside=13",
        ] {
            assert!(SelfReport::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(SelfReport::decode(&[b'x'; MAX_REPORT + 1]).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_of_a_childs_ruleset_is_refused_outside_it() {
        use crate::sandbox::{ChildSandbox, Policy, Role};
        let policy = Policy::default().for_program(std::path::Path::new("/bin/true"));
        let sandbox = ChildSandbox::prepare(&policy, Role::Qemu).unwrap();
        let line = crate::sys::probe_child(sandbox, std::time::Duration::from_secs(5)).unwrap();
        let probe = ProbeReport::decode(&line).unwrap();
        assert_eq!(probe.outcome(), "EACCES", "{probe:?}");
        assert_ne!(probe.landlock(), Landlock::NotEnforced, "{probe:?}");
    }

    #[test]
    fn a_probe_report_round_trips_and_a_read_that_was_not_refused_is_not_enforced() {
        let probe = ProbeReport {
            landlock: Landlock::FullyEnforced,
            read_outside: 13,
        };
        let mut buf = [0u8; MAX_REPORT];
        let line = probe.encode(&mut buf);
        assert_eq!(line, b"probe landlock=fully_enforced read_outside=13");
        assert_eq!(ProbeReport::decode(line), Ok(probe));
        assert_eq!(probe.outcome(), "EACCES");
        assert_eq!(probe.landlock(), Landlock::FullyEnforced);
        let open = ProbeReport {
            read_outside: 0,
            ..probe
        };
        assert_eq!(open.outcome(), "allowed");
        assert_eq!(open.landlock(), Landlock::NotEnforced);
        assert!(ProbeReport::decode(b"probe landlock=fully_enforced read_outside=-1").is_err());
        assert!(ProbeReport::decode(b"probe landlock=fully_enforced").is_err());
    }
}
