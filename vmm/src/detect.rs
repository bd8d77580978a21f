//! Which hypervisor can run the guest here, and why.
//!
//! libkrun needs hardware KVM. On machines whose `/dev/kvm` comes from `kvm_pvm`, a stock
//! kernel boots only by emulation and faults at the guest's first user-space system call
//! (docs/design/microvm-findings.md), so `auto` picks QEMU there: with KVM when QEMU can use
//! hardware KVM, otherwise TCG, and vhost-device-vsock for the guest's vsock. A guest of
//! another architecture than the host's (`--arch aarch64` on x86_64) runs only under QEMU's
//! emulation: `qemu-system-aarch64 -machine virt` with TCG.

use std::path::{Path, PathBuf};

use berm::GuestArch;
use berm_vm_protocol::host_event::HostDetection;
use serde::Serialize;

/// What `--hypervisor` asked for (in the configuration, which lives in `berm-vm-launch`).
pub use berm_vm_launch::config::Requested;

/// The backend that will run the VM (named in lines as berm-vm-protocol says).
pub use berm_vm_protocol::host::Backend;

/// What this host offers: the fields the `vm_config` line lists, with the choosing done here.
#[derive(Clone, Debug, Serialize)]
pub struct Detection(pub HostDetection);

impl std::ops::Deref for Detection {
    type Target = HostDetection;

    fn deref(&self) -> &HostDetection {
        &self.0
    }
}

impl Detection {
    /// As the `vm_config` line lists it.
    pub fn line(&self) -> HostDetection {
        self.0.clone()
    }
}

/// The decision and its reason, for the one stderr line and `vm_config`.
#[derive(Clone, Debug, Serialize)]
pub struct Choice {
    /// The backend.
    pub backend: Backend,
    /// QEMU's accelerator (`kvm` or `tcg`); `None` for libkrun.
    pub accel: Option<&'static str>,
    /// Why, in a sentence.
    pub reason: String,
}

/// Why no backend can run.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// Nothing usable.
    #[error("no hypervisor can run the guest here: {0}")]
    NoneUsable(String),
    /// The requested one is not usable.
    #[error("--hypervisor {requested} cannot run here: {why}")]
    RequestedUnusable {
        /// `krun` or `qemu`.
        requested: &'static str,
        /// What is missing.
        why: String,
    },
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

impl Detection {
    /// Looks at this host. `$BERM_QEMU` (qemu-system-x86_64), `$BERM_QEMU_AARCH64` and
    /// `$BERM_VHOST_DEVICE_VSOCK` override the search;
    /// vhost-device-vsock is also looked for where scripts/test-vm installs it
    /// (`$BERM_CACHE` or `~/.cache/berm`, then `tools/bin`).
    pub fn probe() -> Self {
        let env_path = |name: &str| {
            std::env::var_os(name)
                .map(PathBuf::from)
                .filter(|p| p.is_file())
        };
        let tools_bin = std::env::var_os("BERM_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("berm")))
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/berm")))
            .map(|cache| cache.join("tools/bin/vhost-device-vsock"));
        Self(HostDetection {
            kvm_usable: std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
                .is_ok(),
            kvm_pvm: Path::new("/sys/module/kvm_pvm").exists(),
            kvm_hardware: Path::new("/sys/module/kvm_intel").exists()
                || Path::new("/sys/module/kvm_amd").exists(),
            hvf: hvf_supported(),
            qemu: env_path("BERM_QEMU").or_else(|| find_in_path("qemu-system-x86_64")),
            qemu_aarch64: env_path("BERM_QEMU_AARCH64")
                .or_else(|| find_in_path("qemu-system-aarch64")),
            vhost_device_vsock: env_path("BERM_VHOST_DEVICE_VSOCK")
                .or_else(|| find_in_path("vhost-device-vsock"))
                .or_else(|| tools_bin.filter(|p| p.is_file())),
        })
    }

    /// libkrun can run guest user space: usable hardware KVM that is not PVM, or Apple's
    /// Hypervisor framework.
    pub fn krun_runs_user_space(&self) -> bool {
        (self.kvm_usable && !self.kvm_pvm) || self.hvf
    }

    /// The QEMU that runs a guest of architecture `arch`.
    pub fn qemu_for(&self, arch: GuestArch) -> Option<&PathBuf> {
        match arch {
            GuestArch::X86_64 => self.qemu.as_ref(),
            GuestArch::Aarch64 => self.qemu_aarch64.as_ref(),
        }
    }

    fn qemu_missing(&self, arch: GuestArch) -> Option<String> {
        let (program, package) = match arch {
            GuestArch::X86_64 => ("qemu-system-x86_64", "qemu-system-x86"),
            GuestArch::Aarch64 => ("qemu-system-aarch64", "qemu-system-arm"),
        };
        match (self.qemu_for(arch), &self.vhost_device_vsock) {
            (Some(_), Some(_)) => None,
            (None, Some(_)) => Some(format!("{program} is not installed (apt-get install {package})")),
            (Some(_), None) => Some(
                "vhost-device-vsock is not installed (cargo install vhost-device-vsock --version 0.3.0 --locked)".into(),
            ),
            (None, None) => Some(format!("neither {program} nor vhost-device-vsock is installed")),
        }
    }

    fn kvm_story(&self) -> &'static str {
        if self.hvf {
            return "Apple's Hypervisor framework is available";
        }
        match (self.kvm_usable, self.kvm_pvm) {
            (true, true) => {
                "/dev/kvm is kvm_pvm, which boots the kernel only by emulation and faults at guest user space"
            }
            (true, false) => "/dev/kvm is hardware KVM",
            (false, _) => "/dev/kvm is missing or not accessible",
        }
    }

    fn qemu_accel(&self) -> &'static str {
        if self.kvm_usable && !self.kvm_pvm {
            "kvm"
        } else {
            "tcg"
        }
    }

    /// Picks the backend for `requested` and a guest of architecture `arch`.
    pub fn choose(&self, requested: Requested, arch: GuestArch) -> Result<Choice, DetectError> {
        if arch != GuestArch::HOST {
            return self.choose_foreign(requested, arch);
        }
        let qemu = |why: String| Choice {
            backend: Backend::Qemu,
            accel: Some(self.qemu_accel()),
            reason: why,
        };
        match requested {
            Requested::Auto if self.krun_runs_user_space() => Ok(Choice {
                backend: Backend::Krun,
                accel: None,
                reason: format!("auto: {}, so libkrun", self.kvm_story()),
            }),
            Requested::Auto => match self.qemu_missing(arch) {
                None => Ok(qemu(format!(
                    "auto: {}, so QEMU ({})",
                    self.kvm_story(),
                    self.qemu_accel()
                ))),
                Some(missing) => Err(DetectError::NoneUsable(format!(
                    "{}, and {missing}",
                    self.kvm_story()
                ))),
            },
            Requested::Krun if self.hvf => Ok(Choice {
                backend: Backend::Krun,
                accel: None,
                reason: "requested: libkrun on Apple's Hypervisor framework".into(),
            }),
            Requested::Krun if !self.kvm_usable => Err(DetectError::RequestedUnusable {
                requested: "krun",
                why: self.kvm_story().into(),
            }),
            Requested::Krun if self.kvm_pvm => Ok(Choice {
                backend: Backend::Krun,
                accel: None,
                reason: format!(
                    "requested: libkrun, although {}: expect the kernel to boot but not berm-init",
                    self.kvm_story()
                ),
            }),
            Requested::Krun => Ok(Choice {
                backend: Backend::Krun,
                accel: None,
                reason: "requested: libkrun on hardware KVM".into(),
            }),
            Requested::Qemu => match self.qemu_missing(arch) {
                None => Ok(qemu(format!(
                    "requested: QEMU ({}); {}",
                    self.qemu_accel(),
                    self.kvm_story()
                ))),
                Some(why) => Err(DetectError::RequestedUnusable {
                    requested: "qemu",
                    why,
                }),
            },
        }
    }
}

/// Whether Apple's Hypervisor framework is usable here (`sysctl -n kern.hv_support` prints 1).
#[cfg(target_os = "macos")]
pub fn hvf_supported() -> bool {
    std::process::Command::new("/usr/sbin/sysctl")
        .args(["-n", "kern.hv_support"])
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == b"1")
}

/// Whether Apple's Hypervisor framework is usable here: never, off macOS.
#[cfg(not(target_os = "macos"))]
pub fn hvf_supported() -> bool {
    false
}

impl Detection {
    /// A guest of another architecture: hardware virtualization (libkrun, QEMU's KVM) runs
    /// only the host's own, so QEMU emulates it (TCG) or nothing does.
    fn choose_foreign(&self, requested: Requested, arch: GuestArch) -> Result<Choice, DetectError> {
        let host = GuestArch::HOST;
        if requested == Requested::Krun {
            return Err(DetectError::RequestedUnusable {
                requested: "krun",
                why: format!(
                    "libkrun runs only {host} guests on this {host} host; an {arch} guest needs QEMU (TCG)"
                ),
            });
        }
        let asked = if requested == Requested::Qemu {
            "requested"
        } else {
            "auto"
        };
        match self.qemu_missing(arch) {
            None => Ok(Choice {
                backend: Backend::Qemu,
                accel: Some("tcg"),
                reason: format!(
                    "{asked}: an {arch} guest on this {host} host, so QEMU's emulation (tcg)"
                ),
            }),
            Some(missing) if requested == Requested::Qemu => Err(DetectError::RequestedUnusable {
                requested: "qemu",
                why: missing,
            }),
            Some(missing) => Err(DetectError::NoneUsable(format!(
                "an {arch} guest on this {host} host needs QEMU's emulation, and {missing}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `detection` chooses for `requested` and the host's own guest; it must choose.
    fn choice(detection: Detection, requested: Requested) -> Choice {
        detection.choose(requested, GuestArch::HOST).unwrap()
    }

    /// Why `detection` refuses `requested` for the host's own guest.
    fn refusal(detection: Detection, requested: Requested) -> String {
        detection
            .choose(requested, GuestArch::HOST)
            .unwrap_err()
            .to_string()
    }

    fn host(kvm_usable: bool, kvm_pvm: bool, qemu: bool, vhost: bool) -> Detection {
        Detection(HostDetection {
            kvm_usable,
            kvm_pvm,
            kvm_hardware: kvm_usable && !kvm_pvm,
            hvf: false,
            qemu: qemu.then(|| PathBuf::from("/usr/bin/qemu-system-x86_64")),
            qemu_aarch64: qemu.then(|| PathBuf::from("/usr/bin/qemu-system-aarch64")),
            vhost_device_vsock: vhost.then(|| PathBuf::from("/x/vhost-device-vsock")),
        })
    }

    #[test]
    fn auto_prefers_libkrun_only_on_hardware_kvm() {
        assert_eq!(
            choice(host(true, false, true, true), Requested::Auto).backend,
            Backend::Krun
        );
        let pvm = choice(host(true, true, true, true), Requested::Auto);
        assert_eq!((pvm.backend, pvm.accel), (Backend::Qemu, Some("tcg")));
        assert!(pvm.reason.contains("kvm_pvm"), "{}", pvm.reason);
        let no_kvm = choice(host(false, false, true, true), Requested::Auto);
        assert_eq!((no_kvm.backend, no_kvm.accel), (Backend::Qemu, Some("tcg")));
        let err = refusal(host(true, true, true, false), Requested::Auto);
        assert!(err.contains("vhost-device-vsock is not installed"), "{err}");
    }

    #[test]
    fn requests_are_honoured_or_refused_with_the_reason() {
        assert!(
            refusal(host(false, false, true, true), Requested::Krun).contains("not accessible")
        );
        assert!(
            choice(host(true, true, true, true), Requested::Krun)
                .reason
                .contains("not berm-init")
        );
        assert_eq!(
            choice(host(true, false, true, true), Requested::Qemu).accel,
            Some("kvm")
        );
        assert!(
            refusal(host(true, false, false, true), Requested::Qemu).contains("qemu-system-x86_64")
        );
    }

    #[test]
    fn a_foreign_guest_runs_only_under_qemu_emulation() {
        let foreign = match GuestArch::HOST {
            GuestArch::X86_64 => GuestArch::Aarch64,
            GuestArch::Aarch64 => GuestArch::X86_64,
        };
        // Even on hardware KVM, where the host's own guest would get libkrun.
        let auto = host(true, false, true, true)
            .choose(Requested::Auto, foreign)
            .unwrap();
        assert_eq!((auto.backend, auto.accel), (Backend::Qemu, Some("tcg")));
        assert!(auto.reason.contains(foreign.name()), "{}", auto.reason);
        let err = host(true, false, true, true)
            .choose(Requested::Krun, foreign)
            .unwrap_err()
            .to_string();
        assert!(err.contains("libkrun runs only"), "{err}");
        let err = host(true, false, false, true)
            .choose(Requested::Auto, foreign)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not installed"), "{err}");
    }
}
