//! `berm doctor`: can this host run berm, and if not, the one thing to do about each gap:
//! KVM (hardware or PVM) — on macOS Apple's Hypervisor framework instead —, the host sandbox
//! (Landlock), the pinned artifacts, the QEMU fallback, the wasm32 target, bermd.
//!
//! Each check prints one line — `ok`, `warn` (works, with a caveat) or `fail` — and, unless
//! it is ok, a one-line fix. Exit 0 when nothing fails, 2 otherwise. `--json` prints the same
//! as one JSON array for scripts.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berm_pins::{ArtifactKind, ArtifactStore, ImagePin, KernelPins, RootfsPins};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::Exit;

/// Arguments of `berm doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the checks as JSON.
    #[arg(long)]
    json: bool,
}

/// One check's outcome.
#[derive(Debug, Serialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    fix: Option<String>,
}

fn check(name: &'static str, status: Status, detail: String, fix: Option<&str>) -> Check {
    Check {
        name,
        status,
        detail,
        fix: fix.map(str::to_owned),
    }
}

/// Runs `berm doctor`.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let hypervisor = if cfg!(target_os = "macos") {
        hvf()
    } else {
        kvm()
    };
    let mut checks = vec![hypervisor, host_sandbox()];
    checks.extend(artifacts());
    checks.extend(qemu());
    checks.push(wasm_target());
    checks.push(bermd(home).await);
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            let status = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            crate::outln!("{status} {:<10} {}", c.name, c.detail);
            if let Some(fix) = &c.fix {
                crate::outln!("     {:<10} fix: {fix}", "");
            }
        }
    }
    Ok(if checks.iter().any(|c| c.status == Status::Fail) {
        Exit::Error
    } else {
        Exit::Ok
    })
}

/// What `program args` printed, trimmed, when it ran and succeeded.
fn stdout_of(program: &str, args: &[&str]) -> Option<String> {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// macOS: libkrun runs the guest on Apple's Hypervisor framework, which must be present
/// (`sysctl kern.hv_support` is 1) on Apple silicon (the guest is aarch64).
fn hvf() -> Check {
    let support = stdout_of("/usr/sbin/sysctl", &["-n", "kern.hv_support"]);
    match support.as_deref() {
        Some("1") if std::env::consts::ARCH == "aarch64" => check(
            "hvf",
            Status::Ok,
            "Apple's Hypervisor framework is available (kern.hv_support = 1): libkrun runs the aarch64 guest".into(),
            None,
        ),
        Some("1") => check(
            "hvf",
            Status::Fail,
            format!(
                "Apple's Hypervisor framework is available, but this Mac is {}: berm's macOS guest is aarch64 (Apple silicon)",
                std::env::consts::ARCH
            ),
            Some("run berm on an Apple silicon Mac"),
        ),
        Some(other) => check(
            "hvf",
            Status::Fail,
            format!("Apple's Hypervisor framework is not available (kern.hv_support = {other})"),
            Some("run on macOS 11 or later on Apple silicon, outside a VM without nested virtualization"),
        ),
        None => check(
            "hvf",
            Status::Fail,
            "sysctl kern.hv_support could not be read".into(),
            Some("run /usr/sbin/sysctl kern.hv_support to see why"),
        ),
    }
}

fn kvm() -> Check {
    let dev = Path::new("/dev/kvm");
    let pvm = Path::new("/sys/module/kvm_pvm").exists();
    let hardware =
        Path::new("/sys/module/kvm_intel").exists() || Path::new("/sys/module/kvm_amd").exists();
    if !dev.exists() {
        return check(
            "kvm",
            Status::Warn,
            "/dev/kvm is absent: VMs run under QEMU/TCG (slow)".into(),
            Some(
                "enable virtualization in the firmware and load kvm_intel or kvm_amd (modprobe kvm_intel)",
            ),
        );
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .is_err()
    {
        return check(
            "kvm",
            Status::Warn,
            "/dev/kvm exists but this user cannot open it read-write".into(),
            Some("add yourself to the kvm group (sudo usermod -aG kvm $USER) and log in again"),
        );
    }
    if pvm {
        return check(
            "kvm",
            Status::Warn,
            "/dev/kvm is kvm_pvm (PVM), which cannot run guest user space: berm-vmm uses QEMU here"
                .into(),
            Some(
                "for the fast libkrun path run on hardware KVM (a bare-metal host or nested virtualization)",
            ),
        );
    }
    let kind = if hardware {
        "hardware KVM"
    } else {
        "KVM (module unknown)"
    };
    check(
        "kvm",
        Status::Ok,
        format!("/dev/kvm is usable, {kind}: berm-vmm uses libkrun"),
        None,
    )
}

/// Whether berm-vmm can confine itself here (vmm/src/sandbox.rs needs Landlock; ABI 5 for
/// every right it asks for).
fn host_sandbox() -> Check {
    #[cfg(target_os = "linux")]
    {
        use landlock::{ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};
        let with = |abi: ABI| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(abi))
                .and_then(|ruleset| ruleset.create())
                .is_ok()
        };
        if with(ABI::V5) {
            check(
                "sandbox",
                Status::Ok,
                "Landlock ABI 5+ is enabled: berm-vmm confines itself fully".into(),
                None,
            )
        } else if with(ABI::V1) {
            check(
                "sandbox",
                Status::Warn,
                "Landlock is older than ABI 5: berm-vmm's sandbox is partially enforced (attest refuses it)".into(),
                Some("run a Linux 6.10 or newer kernel"),
            )
        } else {
            check(
                "sandbox",
                Status::Fail,
                "Landlock is not enabled: berm-vmm refuses to run unconfined".into(),
                Some(
                    "boot with landlock in lsm= (CONFIG_SECURITY_LANDLOCK), or pass --no-host-sandbox to berm-vmm run",
                ),
            )
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        check(
            "sandbox",
            Status::Warn,
            "berm-vmm has no host sandbox on this OS yet (docs/macos.md)".into(),
            Some("run berm-vmm run --no-host-sandbox; see docs/macos.md"),
        )
    }
}

fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

/// One check per guest architecture: the host's own is the one `berm-vmm run` boots by default
/// (missing is a failure); the other boots only when asked (`--arch`), so missing is a warning.
fn artifacts() -> Vec<Check> {
    let Some(store) = ArtifactStore::from_env() else {
        return vec![check(
            "artifacts",
            Status::Fail,
            "no artifact store: none of BERM_VM_ARTIFACTS, XDG_CACHE_HOME, HOME is set".into(),
            Some("set HOME (or BERM_VM_ARTIFACTS), then run berm vm install"),
        )];
    };
    GUEST_ARCHES
        .iter()
        .map(|&arch| artifacts_for(&store, arch))
        .collect()
}

/// The guest architectures berm has pins for ([`berm_pins::ARCHES`]), the host's own first.
const GUEST_ARCHES: [&str; 2] = if cfg!(target_arch = "aarch64") {
    [berm_pins::ARCHES[1], berm_pins::ARCHES[0]]
} else {
    berm_pins::ARCHES
};

fn artifacts_for(store: &ArtifactStore, arch: &'static str) -> Check {
    let pins: Vec<(ArtifactKind, Option<(ImagePin, &'static str)>)> = vec![
        (
            ArtifactKind::Kernel,
            KernelPins::compiled_in_for(arch)
                .ok()
                .map(|p| (p.image, p.file)),
        ),
        (
            ArtifactKind::Rootfs,
            RootfsPins::compiled_in_for(arch)
                .ok()
                .map(|p| (p.image, ArtifactKind::Rootfs.file())),
        ),
    ];
    let mut problems = Vec::new();
    for (kind, pin) in pins {
        let Some((pin, file)) = pin else {
            problems.push(format!(
                "the {arch} {} pins compiled into berm are broken",
                kind.name()
            ));
            continue;
        };
        let path = kind.path_named(store, &pin.sha256, file);
        match sha256_of(&path) {
            Err(_) => problems.push(format!("{} missing ({})", kind.name(), path.display())),
            Ok(sha) if sha != pin.sha256.as_str() => problems.push(format!(
                "{} at {} has sha256 {sha}, not the pinned {}",
                kind.name(),
                path.display(),
                pin.sha256
            )),
            Ok(_) => {}
        }
    }
    let host = arch == GUEST_ARCHES[0];
    if problems.is_empty() {
        let role = if host {
            "the guest berm-vmm boots by default"
        } else {
            "booted with berm-vmm run --arch"
        };
        return check(
            "artifacts",
            Status::Ok,
            format!(
                "{arch}: the pinned kernel and rootfs are in {} ({role})",
                store.root().display()
            ),
            None,
        );
    }
    let (status, why) = if host {
        (Status::Fail, "")
    } else {
        (Status::Warn, " (needed only to boot this guest)")
    };
    Check {
        name: "artifacts",
        status,
        detail: format!("{arch}: {}{why}", problems.join("; ")),
        fix: Some(format!(
            "berm vm install --arch {arch} (or, in a clone of berm: scripts/setup-vm --arch {arch})"
        )),
    }
}

fn in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn env_file(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.is_file())
}

/// The QEMU fallback for each guest architecture, as berm-vmm finds it (vmm/src/detect.rs:
/// `$BERM_QEMU` / `$BERM_QEMU_AARCH64`, else the PATH), with its version and the Debian
/// suite it came from: bookworm's 7.2 and bookworm-backports' 10.0 both work, and a machine
/// that has one cannot take the other's packages (scripts/lib/apt.sh).
fn qemu() -> Vec<Check> {
    let cache = std::env::var_os("BERM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("berm")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/berm")));
    let vhost = env_file("BERM_VHOST_DEVICE_VSOCK")
        .or_else(|| in_path("vhost-device-vsock"))
        .or_else(|| {
            cache
                .map(|c| c.join("tools/bin/vhost-device-vsock"))
                .filter(|p| p.is_file())
        });
    let codename = os_codename();
    let mut checks: Vec<Check> = GUEST_ARCHES
        .iter()
        .map(|&arch| qemu_for(arch, codename.as_deref()))
        .collect();
    checks.push(match vhost {
        Some(v) => check(
            "vhost",
            Status::Ok,
            format!(
                "vhost-device-vsock: {} (the QEMU backend's vsock)",
                v.display()
            ),
            None,
        ),
        None => check(
            "vhost",
            Status::Warn,
            "vhost-device-vsock not found: QEMU cannot serve the guest's vsock".into(),
            Some("cargo install vhost-device-vsock --version 0.3.0 --locked"),
        ),
    });
    checks
}

fn qemu_for(arch: &'static str, codename: Option<&str>) -> Check {
    let (binary, variable, package) = match arch {
        "aarch64" => (
            "qemu-system-aarch64",
            "BERM_QEMU_AARCH64",
            "qemu-system-arm",
        ),
        _ => ("qemu-system-x86_64", "BERM_QEMU", "qemu-system-x86"),
    };
    let Some(path) = env_file(variable).or_else(|| in_path(binary)) else {
        let fix = match codename {
            Some(_) => format!(
                "in a clone of berm: scripts/setup-vm --arch {arch} (it picks the Debian suite your QEMU packages need), or apt-get install {package}; or set {variable}"
            ),
            None => format!("install QEMU ({binary}) with your package manager, or set {variable}"),
        };
        return Check {
            name: "qemu",
            status: Status::Warn,
            detail: format!("{arch}: {binary} not found: no QEMU fallback for this guest"),
            fix: Some(fix),
        };
    };
    let path_text = path.display().to_string();
    let version = stdout_of(&path_text, &["--version"])
        .and_then(|out| out.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "version unknown (--version failed)".into());
    let debian =
        stdout_of("dpkg-query", &["-W", "-f=${Version}", package]).filter(|v| !v.is_empty());
    check(
        "qemu",
        Status::Ok,
        format!(
            "{arch}: {path_text}, {version}, {}",
            qemu_suite(debian.as_deref(), codename)
        ),
        None,
    )
}

/// Where an installed QEMU package came from, from its Debian version: backports versions
/// carry `~bpoNN`. `None` when dpkg does not know the package (built by hand, or not Debian).
fn qemu_suite(debian_version: Option<&str>, codename: Option<&str>) -> String {
    let codename = codename.unwrap_or("debian");
    match debian_version {
        None => "not from a Debian package".into(),
        Some(v) if v.contains("~bpo") => format!("from {codename}-backports (Debian {v})"),
        Some(v) => format!("from {codename} (Debian {v})"),
    }
}

/// `VERSION_CODENAME` of /etc/os-release (e.g. `bookworm`), where there is one.
fn os_codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

fn wasm_target() -> Check {
    let sysroot = stdout_of("rustc", &["--print", "sysroot"]).map(PathBuf::from);
    match sysroot {
        None => check(
            "wasm32",
            Status::Warn,
            "rustc not found: programs cannot be built here (running them needs no Rust)".into(),
            Some("install Rust from https://rustup.rs, then rustup target add wasm32-unknown-unknown"),
        ),
        Some(root) if root.join("lib/rustlib/wasm32-unknown-unknown").is_dir() => check(
            "wasm32",
            Status::Ok,
            "the wasm32-unknown-unknown target is installed: berm new / cargo build can build programs".into(),
            None,
        ),
        Some(_) => check(
            "wasm32",
            Status::Warn,
            "the wasm32-unknown-unknown target is missing: programs cannot be built".into(),
            Some("rustup target add wasm32-unknown-unknown"),
        ),
    }
}

async fn bermd(home: &Path) -> Check {
    let client = super::client(home);
    let socket = client.socket().display().to_string();
    match tokio::time::timeout(Duration::from_secs(3), client.list()).await {
        Ok(Ok(programs)) => check(
            "bermd",
            Status::Ok,
            format!(
                "bermd answers on {socket} ({} programs deployed)",
                programs.len()
            ),
            None,
        ),
        Ok(Err(e)) => check(
            "bermd",
            Status::Fail,
            format!("bermd is not reachable on {socket}: {e}"),
            Some("start it: bermd (or set BERM_HOME / --home to the data directory it uses)"),
        ),
        Err(_) => check(
            "bermd",
            Status::Fail,
            format!("bermd did not answer on {socket} within 3 s"),
            Some("restart bermd; if it is busy, try again"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::qemu_suite;

    #[test]
    fn qemu_suite_names_backports_from_the_version() {
        assert_eq!(
            qemu_suite(Some("1:10.0.2+ds-2+deb13u1~bpo12+1"), Some("bookworm")),
            "from bookworm-backports (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"
        );
        assert_eq!(
            qemu_suite(Some("1:7.2+dfsg-7+deb12u18+b3"), Some("bookworm")),
            "from bookworm (Debian 1:7.2+dfsg-7+deb12u18+b3)"
        );
        assert_eq!(
            qemu_suite(None, Some("bookworm")),
            "not from a Debian package"
        );
    }
}
