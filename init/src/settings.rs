//! The guest settings berm-vmm passes on the kernel command line, which the kernel hands to
//! PID 1 as environment variables.
//!
//! berm-vmm already refuses names and values that could escape the command line; this is the
//! guest's own check of what the values mean. Every `BERM_*` variable must be one berm-init
//! knows, with a valid value: an unknown or malformed one fails the boot (`boot_failed`,
//! step `settings`) rather than being ignored.

use std::time::Duration;

use berm_vm_protocol::LogLevel;

/// The most apps one guest serves.
pub const MAX_APPS: u32 = 64;

/// Settings after validation.
#[derive(Debug)]
pub struct Settings {
    /// How many apps berm-vmm mapped (`BERM_APPS`, default 0).
    pub apps: u32,
    /// The state disk's device name (`BERM_STATE`, e.g. `vdb`), if one is attached.
    pub state: Option<String>,
    /// Least severe log level sent on the logs port (`BERM_LOG`, default `info`).
    pub log_level: LogLevel,
    /// How long children get between SIGTERM and SIGKILL at shutdown (`BERM_STOP_GRACE_MS`).
    pub stop_grace: Duration,
    /// Test boots only: run the enforcement probe (disk serial `probe`) under the confinement
    /// of this app (`BERM_PROBE=<index>`).
    pub probe: Option<u32>,
    /// Accept what the app folders changed since they last ran on this state disk
    /// (`BERM_ACCEPT=1`, berm-vmm's `--accept`): each bermd starts with `--accept`.
    pub accept: bool,
}

/// Reads and checks every `BERM_*` variable in `vars`.
pub fn parse(vars: impl IntoIterator<Item = (String, String)>) -> Result<Settings, String> {
    let mut settings = Settings {
        apps: 0,
        state: None,
        log_level: LogLevel::Info,
        stop_grace: Duration::from_millis(2000),
        probe: None,
        accept: false,
    };
    for (name, value) in vars {
        if !name.starts_with("BERM_") {
            continue;
        }
        match name.as_str() {
            "BERM_APPS" => {
                settings.apps = value
                    .parse()
                    .ok()
                    .filter(|&n| n <= MAX_APPS)
                    .ok_or_else(|| {
                        format!("BERM_APPS={value:?} is not a number from 0 to {MAX_APPS}")
                    })?;
            }
            "BERM_STATE" => {
                let ok = value.len() <= 16
                    && value.starts_with("vd")
                    && value[2..].bytes().all(|b| b.is_ascii_lowercase());
                if !ok || value.len() < 3 {
                    return Err(format!(
                        "BERM_STATE={value:?} is not a virtio disk name like vdb"
                    ));
                }
                settings.state = Some(value);
            }
            "BERM_LOG" => {
                settings.log_level = match value.as_str() {
                    "debug" => LogLevel::Debug,
                    "info" => LogLevel::Info,
                    "warn" => LogLevel::Warn,
                    "error" => LogLevel::Error,
                    _ => {
                        return Err(format!(
                            "BERM_LOG={value:?} is not one of debug, info, warn, error"
                        ));
                    }
                };
            }
            "BERM_STOP_GRACE_MS" => {
                let ms: u64 = value
                    .parse()
                    .ok()
                    .filter(|&ms| ms <= 60_000)
                    .ok_or_else(|| format!("BERM_STOP_GRACE_MS={value:?} is not a number of milliseconds up to 60000"))?;
                settings.stop_grace = Duration::from_millis(ms);
            }
            "BERM_PROBE" => {
                settings.probe = Some(value.parse().ok().filter(|&n| n < MAX_APPS).ok_or_else(
                    || format!("BERM_PROBE={value:?} is not an app index below {MAX_APPS}"),
                )?);
            }
            "BERM_ACCEPT" if value == "1" => settings.accept = true,
            "BERM_ACCEPT" => return Err(format!("BERM_ACCEPT={value:?} is not 1")),
            // Informational: which backend berm-vmm chose.
            "BERM_HYPERVISOR" if matches!(value.as_str(), "krun" | "qemu") => {}
            "BERM_HYPERVISOR" => {
                return Err(format!("BERM_HYPERVISOR={value:?} is not krun or qemu"));
            }
            _ => return Err(format!("unknown guest setting {name}")),
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_known_settings() {
        let s = parse(vars(&[("HOME", "/"), ("TERM", "linux")])).unwrap();
        assert_eq!((s.apps, s.state, s.log_level), (0, None, LogLevel::Info));
        let s = parse(vars(&[
            ("BERM_APPS", "2"),
            ("BERM_STATE", "vdb"),
            ("BERM_LOG", "debug"),
        ]))
        .unwrap();
        assert_eq!(
            (s.apps, s.state.as_deref(), s.log_level),
            (2, Some("vdb"), LogLevel::Debug)
        );
        assert_eq!(parse(vars(&[("BERM_PROBE", "1")])).unwrap().probe, Some(1));
        assert!(!s.accept);
        assert!(parse(vars(&[("BERM_ACCEPT", "1")])).unwrap().accept);
        assert!(parse(vars(&[("BERM_ACCEPT", "yes")])).is_err());
    }

    #[test]
    fn bad_settings_are_named() {
        for (name, value, want) in [
            ("BERM_LOG", "loud", "BERM_LOG=\"loud\""),
            ("BERM_APPS", "65", "BERM_APPS=\"65\""),
            ("BERM_STATE", "sda", "BERM_STATE=\"sda\""),
            ("BERM_STATE", "vd", "BERM_STATE=\"vd\""),
            ("BERM_FOO", "1", "unknown guest setting BERM_FOO"),
            ("BERM_STOP_GRACE_MS", "-1", "BERM_STOP_GRACE_MS"),
            ("BERM_PROBE", "64", "BERM_PROBE=\"64\""),
            ("BERM_PROBE", "x", "BERM_PROBE=\"x\""),
        ] {
            let err = parse(vars(&[(name, value)])).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }
}
