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

use crate::view::Seen;

/// Largest `/proc/PID/status` read (a real one is about 1.5 KiB).
pub const MAX_STATUS: usize = 16 << 10;
/// Largest report line a child may send (the longest it can write is 127 bytes).
pub const MAX_REPORT: usize = 192;

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
            outside: None,
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
    // Every line fits: the longest Landlock word, five ten-digit numbers and the view's word
    // stay under MAX_REPORT; should one not, the line is cut, and refused by its reader.
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
/// it got and its own `/proc/self/status`; the libkrun child (the vsock device) also what it
/// saw of the filesystem and what its connect to a socket outside every policy gave. On the
/// wire, one line (no newline):
/// `confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1`, the
/// libkrun child's followed by ` connect_outside=2 view=policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfReport {
    /// What `landlock_restrict_self` gave.
    pub landlock: Landlock,
    /// Its `/proc/self/status` after confining.
    pub status: ProcStatus,
    /// The libkrun child only: the errno of its connect outside (0: connected) and its view.
    pub outside: Option<(u32, Seen)>,
}

impl SelfReport {
    /// The line, in `buf`. Allocates nothing.
    pub fn encode<'b>(&self, buf: &'b mut [u8; MAX_REPORT]) -> &'b [u8] {
        let (landlock, nnp) = (self.landlock.name(), u8::from(self.status.no_new_privs));
        let (seccomp, filters) = (self.status.seccomp.number(), self.status.seccomp_filters);
        match self.outside {
            None => fixed(
                buf,
                format_args!(
                    "confined landlock={landlock} no_new_privs={nnp} seccomp={seccomp} seccomp_filters={filters}"
                ),
            ),
            Some((connect, seen)) => fixed(
                buf,
                format_args!(
                    "confined landlock={landlock} no_new_privs={nnp} seccomp={seccomp} seccomp_filters={filters} connect_outside={connect} view={}",
                    seen.wire()
                ),
            ),
        }
    }

    /// Parses a line strictly: exactly the words [`SelfReport::encode`] writes, in its
    /// order, with values it can write; anything else is refused.
    pub fn decode(line: &[u8]) -> Result<Self, Refused> {
        const KEYS: [&[u8]; 4] = [b"landlock", b"no_new_privs", b"seccomp", b"seccomp_filters"];
        let (words, outside) = match words(
            line,
            b"confined",
            [
                KEYS[0],
                KEYS[1],
                KEYS[2],
                KEYS[3],
                b"connect_outside",
                b"view",
            ],
        ) {
            Ok([a, b, c, d, connect, view]) => {
                let connect = number(connect).ok_or(Refused("connect_outside is not a number"))?;
                let seen = Seen::of_wire(view).ok_or(Refused("view is not policy or host"))?;
                ([a, b, c, d], Some((connect, seen)))
            }
            Err(_) => (words(line, b"confined", KEYS)?, None),
        };
        let [landlock, nnp, seccomp, filters] = words;
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
            outside,
        })
    }
}

/// A listening Unix socket outside every child's policy (in the temp dir, beside rather than
/// in the run dir), made before the hypervisor children start: each probe, and the libkrun
/// child itself, tries to connect to it once confined (`connect_outside`), which shows
/// whether a connect by pathname can leave the child's policy. Removed when dropped, before
/// berm-vmm confines itself.
pub struct OutsideSocket {
    pub(crate) path: std::path::PathBuf,
    pub(crate) _listener: std::os::unix::net::UnixListener,
    pub(crate) address: crate::sys::UnixAddress,
}

impl OutsideSocket {
    /// Binds it at a fresh random name in the temp dir (or beside `run_dir`, should the temp
    /// dir lie inside it).
    pub fn bind(run_dir: &std::path::Path) -> std::io::Result<Self> {
        let mut random = [0u8; 6];
        getrandom::fill(&mut random).map_err(std::io::Error::other)?;
        let temp = std::env::temp_dir();
        let dir = match run_dir.parent() {
            Some(parent) if temp.starts_with(run_dir) => parent.to_owned(),
            _ => temp,
        };
        let path = dir.join(format!("berm-vmm-probe-{}.sock", hex::encode(random)));
        let address = crate::sys::UnixAddress::new(&path).ok_or_else(|| {
            std::io::Error::other(format!(
                "{} is too long for a Unix socket path; set TMPDIR to a shorter directory",
                path.display()
            ))
        })?;
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        Ok(Self {
            path,
            _listener: listener,
            address,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Its address, for a child that must not allocate.
    pub(crate) fn address(&self) -> &crate::sys::UnixAddress {
        &self.address
    }
}

impl Drop for OutsideSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The path the probe tries to read: no policy grants `/` itself.
pub const PROBE_OUTSIDE: &std::ffi::CStr = c"/";

/// What the probe of an exec'd child's confinement found: the Landlock status the same
/// ruleset got, the errno of opening [`PROBE_OUTSIDE`] under it (0: it opened), the errno of
/// connecting to a Unix socket outside every policy (0: it connected), and what it saw of the
/// filesystem. On the wire:
/// `probe landlock=fully_enforced read_outside=13 connect_outside=2 view=policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    /// What `landlock_restrict_self` gave the probe.
    pub landlock: Landlock,
    /// The errno of the denied read, 0 if it was allowed.
    pub read_outside: u32,
    /// The errno of the connect to the socket outside (`socket`'s, if that was refused), 0
    /// if it connected.
    pub connect_outside: u32,
    /// Whether it ran in the view of its policy's paths (`view.rs`).
    pub seen: Seen,
}

/// An errno as the host line words an outcome: `allowed` (0), `EACCES`, `EPERM`, `ENOENT`,
/// or `errno N`.
pub fn outcome(errno: u32) -> String {
    match errno as i32 {
        0 => "allowed".into(),
        libc::EACCES => "EACCES".into(),
        libc::EPERM => "EPERM".into(),
        libc::ENOENT => "ENOENT".into(),
        _ => format!("errno {errno}"),
    }
}

impl ProbeReport {
    /// The line, in `buf`. Allocates nothing.
    pub fn encode<'b>(&self, buf: &'b mut [u8; MAX_REPORT]) -> &'b [u8] {
        fixed(
            buf,
            format_args!(
                "probe landlock={} read_outside={} connect_outside={} view={}",
                self.landlock.name(),
                self.read_outside,
                self.connect_outside,
                self.seen.wire()
            ),
        )
    }

    /// Parses a line strictly, like [`SelfReport::decode`].
    pub fn decode(line: &[u8]) -> Result<Self, Refused> {
        let [landlock, read, connect, view] = words(
            line,
            b"probe",
            [b"landlock", b"read_outside", b"connect_outside", b"view"],
        )?;
        Ok(Self {
            landlock: landlock_named(landlock).ok_or(Refused("an unknown Landlock status"))?,
            read_outside: number(read).ok_or(Refused("read_outside is not a number"))?,
            connect_outside: number(connect).ok_or(Refused("connect_outside is not a number"))?,
            seen: Seen::of_wire(view).ok_or(Refused("view is not policy or host"))?,
        })
    }

    /// The read's outcome as the host line words it ([`outcome`]).
    pub fn outcome(&self) -> String {
        outcome(self.read_outside)
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
            outside: None,
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

        // The libkrun child's, with its connect outside and its view; the longest it can be
        // fits.
        let krun = SelfReport {
            landlock: Landlock::PartiallyEnforced,
            status: ProcStatus {
                seccomp_filters: u32::MAX,
                ..report.status
            },
            outside: Some((u32::MAX, Seen::PolicyPaths)),
        };
        let line = krun.encode(&mut buf).to_vec();
        assert!(line.ends_with(b" connect_outside=4294967295 view=policy"));
        assert_eq!(SelfReport::decode(&line), Ok(krun));
        let host = SelfReport {
            outside: Some((0, Seen::Host)),
            ..report
        };
        assert_eq!(
            SelfReport::decode(host.encode(&mut buf)),
            Ok(host),
            "{:?}",
            String::from_utf8_lossy(host.encode(&mut buf))
        );
        for bad in [
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1 connect_outside=2",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1 connect_outside=2 view=all",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1 connect_outside=-2 view=policy",
            "confined landlock=fully_enforced no_new_privs=1 seccomp=2 seccomp_filters=1 view=policy connect_outside=2",
        ] {
            assert!(SelfReport::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_probe_report_round_trips_and_a_read_that_was_not_refused_is_not_enforced() {
        let probe = ProbeReport {
            landlock: Landlock::FullyEnforced,
            read_outside: 13,
            connect_outside: 2,
            seen: Seen::PolicyPaths,
        };
        let mut buf = [0u8; MAX_REPORT];
        let line = probe.encode(&mut buf);
        assert_eq!(
            line,
            b"probe landlock=fully_enforced read_outside=13 connect_outside=2 view=policy"
        );
        assert_eq!(ProbeReport::decode(line), Ok(probe));
        assert_eq!(probe.outcome(), "EACCES");
        assert_eq!(probe.landlock(), Landlock::FullyEnforced);
        let open = ProbeReport {
            read_outside: 0,
            ..probe
        };
        assert_eq!(open.outcome(), "allowed");
        assert_eq!(open.landlock(), Landlock::NotEnforced);
        assert_eq!(outcome(probe.connect_outside), "ENOENT");
        assert_eq!(outcome(1), "EPERM");
        assert_eq!(outcome(111), "errno 111");
        for bad in [
            "probe landlock=fully_enforced read_outside=-1 connect_outside=2 view=policy",
            "probe landlock=fully_enforced read_outside=13",
            "probe landlock=fully_enforced read_outside=13 connect_outside=2",
            "probe landlock=fully_enforced read_outside=13 connect_outside=x view=policy",
            "probe landlock=fully_enforced read_outside=13 connect_outside=2 view=everything",
            "probe landlock=fully_enforced",
        ] {
            assert!(ProbeReport::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
