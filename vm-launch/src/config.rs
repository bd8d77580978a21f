//! [`VmConfig`]: everything one VM run is told, in one typed, serde value (after
//! cloud-hypervisor's `VmConfig` and Firecracker's `VmResources`). Whoever starts a VM writes
//! it once: it *is* `berm-vmm run`'s flags (clap parses them into it), and
//! `berm-vmm run --config FILE` reads the same value as JSON, so a VM started from a file and
//! one started from flags cannot differ.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berm::GuestArch;
use serde::{Deserialize, Serialize};

use berm_vm_protocol::host_event::RequestedBackend;

/// What `--hypervisor` asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Requested {
    /// libkrun where it can run guest user space, else QEMU, else an error.
    #[default]
    Auto,
    /// libkrun (hardware KVM).
    Krun,
    /// QEMU `-machine microvm` with vhost-device-vsock.
    Qemu,
}

impl Requested {
    /// As the `vm_config` line names it.
    pub fn line(self) -> RequestedBackend {
        match self {
            Self::Auto => RequestedBackend::Auto,
            Self::Krun => RequestedBackend::Krun,
            Self::Qemu => RequestedBackend::Qemu,
        }
    }

    /// The name `--hypervisor` takes and the launch record keeps (`auto`, `krun`, `qemu`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Krun => "krun",
            Self::Qemu => "qemu",
        }
    }
}

/// Everything a VM run is told: `berm-vmm run`'s flags (each field's doc is its help), or
/// the same fields read from a `--config` file, where a field left out takes its flag's
/// default (`boot_timeout` is whole seconds there, `host_sandbox: false` is
/// `--no-host-sandbox`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    /// An app folder (repeatable); app i is served on rpc-<i>.sock (vsock 5000+i).
    #[arg(long = "app", value_name = "DIR")]
    #[serde(default)]
    pub apps: Vec<PathBuf>,
    /// The program store the apps' `image = "…@sha256:…"` programs are read from,
    /// verified against their pins (`berm pull --app DIR` fills it; berm vm up passes
    /// $BERM_HOME/programs). berm-vmm never talks to a registry.
    #[arg(long, value_name = "DIR")]
    #[serde(default)]
    pub programs: Option<PathBuf>,
    /// Accept what the app folders changed since they last ran on this state disk (a
    /// tool's description or schema, a tool or program added or removed, a syscall or
    /// grant not held before); without it such an app is refused at boot, naming each
    /// change (berm.toml's `accept = "sha256:…"` accepts one program's new bytes).
    #[arg(long)]
    #[serde(default)]
    pub accept: bool,
    /// The state disk (vdb); created and formatted ext4 if missing.
    #[arg(long, value_name = "DISK")]
    #[serde(default)]
    pub state: Option<PathBuf>,
    /// Where the sockets and console.log go (mode 0700).
    #[arg(long, value_name = "DIR")]
    #[serde(default)]
    pub run_dir: Option<PathBuf>,
    /// vCPUs.
    #[arg(long, default_value_t = 1)]
    #[serde(default = "one_cpu")]
    pub cpus: u8,
    /// Guest memory in MiB (64-16384) [default: the apps' memory.max added up, plus
    /// 96 MiB for the kernel, berm-init and the page cache, rounded up to 32 MiB].
    #[arg(long = "memory", value_name = "MiB")]
    #[serde(default)]
    pub memory_mib: Option<u32>,
    /// Which backend: libkrun, QEMU, or the best one here.
    #[arg(long, value_enum, default_value_t = Requested::Auto)]
    #[serde(default)]
    pub hypervisor: Requested,
    /// The guest's architecture (x86_64 or aarch64): its pinned kernel and rootfs, and
    /// programs compiled for it. Another than this host's boots under QEMU's emulation.
    #[arg(long, value_name = "ARCH", default_value = GuestArch::HOST.name())]
    #[serde(default = "host_arch", with = "arch_name")]
    pub arch: GuestArch,
    /// Boot this kernel instead of the pinned one (reported "pinned": false).
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub kernel: Option<PathBuf>,
    /// Boot this rootfs instead of the pinned one (reported "pinned": false).
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub rootfs: Option<PathBuf>,
    /// A guest setting NAME=VALUE (repeatable), passed on the kernel command line.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds the guest may take to greet on the control port.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = seconds::parse)]
    #[serde(default = "boot_timeout", with = "seconds")]
    pub boot_timeout: Duration,
    /// Test boots only: run this static enforcement-probe binary (berm-probe) inside the
    /// guest under the confinement of app --test-probe-app; the measurement line reports it.
    #[arg(long, value_name = "FILE", hide_short_help = true)]
    #[serde(default)]
    pub test_probe: Option<PathBuf>,
    /// The app (its index) whose confinement the probe runs under.
    #[arg(
        long,
        value_name = "INDEX",
        default_value_t = 0,
        requires = "test_probe",
        hide_short_help = true
    )]
    #[serde(default)]
    pub test_probe_app: u32,
    /// Run unconfined: no Landlock and no seccomp deny list on berm-vmm (reported in the
    /// host_sandbox line and in `berm attest` records).
    #[arg(long = "no-host-sandbox", action = clap::ArgAction::SetFalse)]
    #[serde(default = "confined")]
    pub host_sandbox: bool,
    /// Once confined, try to read, write and create beside FILE and to exec, and report
    /// the outcome as a host_sandbox_probe line (tests; nothing is changed if it holds).
    #[arg(long, value_name = "FILE", hide = true)]
    #[serde(default)]
    pub sandbox_probe: Option<PathBuf>,
    /// The host key the run's record is signed with (ed25519, PKCS#8 PEM, mode 0600),
    /// created on first use; default $XDG_CONFIG_HOME/berm/host-key.pem, else
    /// ~/.config/berm/host-key.pem.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// The flags' defaults, for a file that leaves a field out.
fn one_cpu() -> u8 {
    1
}

fn host_arch() -> GuestArch {
    GuestArch::HOST
}

fn boot_timeout() -> Duration {
    Duration::from_secs(60)
}

fn confined() -> bool {
    true
}

impl Default for VmConfig {
    /// The flags' defaults: no app, one vCPU, the host's architecture, the best hypervisor
    /// here, confined.
    fn default() -> Self {
        Self {
            apps: Vec::new(),
            programs: None,
            accept: false,
            state: None,
            run_dir: None,
            cpus: one_cpu(),
            memory_mib: None,
            hypervisor: Requested::Auto,
            arch: host_arch(),
            kernel: None,
            rootfs: None,
            env: Vec::new(),
            boot_timeout: boot_timeout(),
            test_probe: None,
            test_probe_app: 0,
            host_sandbox: confined(),
            sandbox_probe: None,
            key: None,
        }
    }
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadVmConfigError {
    /// The file could not be read.
    #[error("reading the VM configuration {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a VM configuration.
    #[error("the VM configuration {} is not valid", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A configuration that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing the VM configuration {}", path.display())]
pub struct WriteVmConfigError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Bytes a configuration file may hold: paths and settings, never data.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl VmConfig {
    /// Reads the JSON configuration at `path` (at most 1 MiB), refusing unknown fields.
    pub fn read(path: &Path) -> Result<Self, ReadVmConfigError> {
        use std::io::Read;
        let read = |source| ReadVmConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let mut text = Vec::new();
        std::fs::File::open(path)
            .map_err(read)?
            .take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(read(std::io::Error::other("it is larger than 1 MiB")));
        }
        serde_json::from_slice(&text).map_err(|source| ReadVmConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Writes it as JSON to `path`, atomically and durably, mode 0600 (it names the user's
    /// files and key): what `berm-vmm run --config FILE` reads.
    pub fn write(&self, path: &Path) -> Result<(), WriteVmConfigError> {
        let error = |source| WriteVmConfigError {
            path: path.to_owned(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| error(e.into()))?;
        berm_durable::write_atomic(path, &bytes).map_err(error)
    }
}

/// [`GuestArch`] as its name (`x86_64`, `aarch64`).
mod arch_name {
    use berm::GuestArch;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(arch: &GuestArch, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(arch.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<GuestArch, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A [`std::time::Duration`] as whole seconds.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(duration.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }

    /// `--boot-timeout`'s value: whole seconds.
    pub fn parse(text: &str) -> Result<Duration, std::num::ParseIntError> {
        text.parse().map(Duration::from_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_names_only_an_app_takes_every_flag_default() {
        let config: VmConfig = serde_json::from_str(r#"{"apps": ["notes"]}"#).unwrap();
        assert_eq!(config.apps, vec![PathBuf::from("notes")]);
        assert_eq!(config.cpus, 1);
        assert_eq!(config.hypervisor, Requested::Auto);
        assert_eq!(config.arch, GuestArch::HOST);
        assert_eq!(config.boot_timeout, Duration::from_secs(60));
        assert!(config.host_sandbox);
    }

    #[test]
    fn a_configuration_round_trips_and_refuses_unknown_fields() {
        let config: VmConfig = serde_json::from_str(
            r#"{"apps": ["a", "b"], "cpus": 2, "memory_mib": 512, "hypervisor": "qemu",
                "arch": "aarch64", "boot_timeout": 5, "host_sandbox": false}"#,
        )
        .unwrap();
        let again: VmConfig =
            serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
        assert_eq!(config, again);
        assert_eq!(again.arch, GuestArch::Aarch64);
        assert!(serde_json::from_str::<VmConfig>(r#"{"cpu": 2}"#).is_err());
    }

    #[test]
    fn a_written_configuration_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vmm.json");
        let config = VmConfig {
            apps: vec![PathBuf::from("/a")],
            env: vec!["BERM_X=1".into()],
            memory_mib: Some(512),
            ..VmConfig::default()
        };
        config.write(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(VmConfig::read(&path).unwrap(), config);
        // The defaults are the flags': a file that leaves everything out is the default.
        assert_eq!(
            serde_json::from_str::<VmConfig>("{}").unwrap(),
            VmConfig::default()
        );
    }
}
