//! Which hypervisor can run the guest here, and why.
//!
//! libkrun needs hardware KVM. On machines whose `/dev/kvm` comes from `kvm_pvm`, a stock
//! kernel boots only by emulation and faults at the guest's first user-space system call
//! (docs/design/microvm-findings.md), so `auto` picks QEMU there: with KVM when QEMU can use
//! hardware KVM, otherwise TCG, and vhost-device-vsock for the guest's vsock.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// What `--hypervisor` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Requested {
    /// libkrun where it can run guest user space, else QEMU, else an error.
    Auto,
    /// libkrun (hardware KVM).
    Krun,
    /// QEMU `-machine microvm` with vhost-device-vsock.
    Qemu,
}

/// The backend that will run the VM (named in lines as berm-vm-protocol says).
pub use berm_vm_protocol::host::Backend;

/// What this host offers.
#[derive(Clone, Debug, Serialize)]
pub struct Detection {
    /// `/dev/kvm` opens read-write.
    pub kvm_usable: bool,
    /// `/dev/kvm` is provided by `kvm_pvm` (cannot run guest user space).
    pub kvm_pvm: bool,
    /// `kvm_intel` or `kvm_amd` is loaded: hardware virtualization.
    pub kvm_hardware: bool,
    /// `qemu-system-x86_64`, if found.
    pub qemu: Option<PathBuf>,
    /// `vhost-device-vsock`, if found.
    pub vhost_device_vsock: Option<PathBuf>,
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
    /// Looks at this host. `$BERM_QEMU` and `$BERM_VHOST_DEVICE_VSOCK` override the search;
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
        Self {
            kvm_usable: std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
                .is_ok(),
            kvm_pvm: Path::new("/sys/module/kvm_pvm").exists(),
            kvm_hardware: Path::new("/sys/module/kvm_intel").exists()
                || Path::new("/sys/module/kvm_amd").exists(),
            qemu: env_path("BERM_QEMU").or_else(|| find_in_path("qemu-system-x86_64")),
            vhost_device_vsock: env_path("BERM_VHOST_DEVICE_VSOCK")
                .or_else(|| find_in_path("vhost-device-vsock"))
                .or_else(|| tools_bin.filter(|p| p.is_file())),
        }
    }

    /// libkrun can run guest user space: usable hardware KVM that is not PVM.
    pub fn krun_runs_user_space(&self) -> bool {
        self.kvm_usable && !self.kvm_pvm
    }

    fn qemu_missing(&self) -> Option<String> {
        match (&self.qemu, &self.vhost_device_vsock) {
            (Some(_), Some(_)) => None,
            (None, Some(_)) => Some("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)".into()),
            (Some(_), None) => Some(
                "vhost-device-vsock is not installed (cargo install vhost-device-vsock --version 0.3.0 --locked)".into(),
            ),
            (None, None) => Some("neither qemu-system-x86_64 nor vhost-device-vsock is installed".into()),
        }
    }

    fn kvm_story(&self) -> &'static str {
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

    /// Picks the backend for `requested`.
    pub fn choose(&self, requested: Requested) -> Result<Choice, DetectError> {
        let qemu = |why: String| Choice {
            backend: Backend::Qemu,
            accel: Some(self.qemu_accel()),
            reason: why,
        };
        match requested {
            Requested::Auto if self.krun_runs_user_space() => Ok(Choice {
                backend: Backend::Krun,
                accel: None,
                reason: "auto: /dev/kvm is hardware KVM, so libkrun".into(),
            }),
            Requested::Auto => match self.qemu_missing() {
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
            Requested::Qemu => match self.qemu_missing() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn host(kvm_usable: bool, kvm_pvm: bool, qemu: bool, vhost: bool) -> Detection {
        Detection {
            kvm_usable,
            kvm_pvm,
            kvm_hardware: kvm_usable && !kvm_pvm,
            qemu: qemu.then(|| PathBuf::from("/usr/bin/qemu-system-x86_64")),
            vhost_device_vsock: vhost.then(|| PathBuf::from("/x/vhost-device-vsock")),
        }
    }

    #[test]
    fn auto_prefers_libkrun_only_on_hardware_kvm() {
        assert_eq!(
            host(true, false, true, true)
                .choose(Requested::Auto)
                .unwrap()
                .backend,
            Backend::Krun
        );
        let pvm = host(true, true, true, true)
            .choose(Requested::Auto)
            .unwrap();
        assert_eq!((pvm.backend, pvm.accel), (Backend::Qemu, Some("tcg")));
        assert!(pvm.reason.contains("kvm_pvm"), "{}", pvm.reason);
        let no_kvm = host(false, false, true, true)
            .choose(Requested::Auto)
            .unwrap();
        assert_eq!((no_kvm.backend, no_kvm.accel), (Backend::Qemu, Some("tcg")));
        let err = host(true, true, true, false)
            .choose(Requested::Auto)
            .unwrap_err()
            .to_string();
        assert!(err.contains("vhost-device-vsock is not installed"), "{err}");
    }

    #[test]
    fn requests_are_honoured_or_refused_with_the_reason() {
        assert!(
            host(false, false, true, true)
                .choose(Requested::Krun)
                .unwrap_err()
                .to_string()
                .contains("not accessible")
        );
        assert!(
            host(true, true, true, true)
                .choose(Requested::Krun)
                .unwrap()
                .reason
                .contains("not berm-init")
        );
        assert_eq!(
            host(true, false, true, true)
                .choose(Requested::Qemu)
                .unwrap()
                .accel,
            Some("kvm")
        );
        assert!(
            host(true, false, false, true)
                .choose(Requested::Qemu)
                .unwrap_err()
                .to_string()
                .contains("qemu-system-x86_64")
        );
    }
}
