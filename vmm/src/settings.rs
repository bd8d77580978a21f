//! Guest settings: `NAME=VALUE` words appended to the pinned kernel command line, which the
//! kernel passes to berm-init as environment variables.
//!
//! The kernel's command-line parser honours double quotes, so a value holding `"` could end
//! its word and append kernel parameters of its own: the Berth write-up's
//! `--env 'X=1" lsm="yama'` booted with Landlock off. Everything that could change how the
//! kernel splits or reads the line is refused here, before anything starts: names are
//! uppercase identifiers (kernel parameters are lowercase, so a setting can never be one),
//! values are printable ASCII without whitespace, quotes or backslashes, at most
//! [`MAX_SETTINGS`] words (the kernel panics past 31 environment words), and the whole line
//! must leave room for the hypervisor's own device entries within the kernel's 2048 bytes.

/// Most settings one boot may carry (berm-vmm's own included).
pub const MAX_SETTINGS: usize = 20;
/// x86's COMMAND_LINE_SIZE.
pub const COMMAND_LINE_SIZE: usize = 2048;
/// Bytes left for what libkrun or QEMU append (`virtio_mmio.device=…` per device, ` -- `).
pub const HYPERVISOR_RESERVE: usize = 512;
/// Longest setting name.
pub const MAX_NAME: usize = 64;

/// Names berm-vmm sets itself; `--env` may not.
pub const RESERVED: [&str; 5] = [
    "BERM_APPS",
    "BERM_STATE",
    "BERM_HYPERVISOR",
    "BERM_PROBE",
    "BERM_ACCEPT",
];

/// One validated `NAME=VALUE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestSetting {
    name: String,
    value: String,
}

/// Why a guest setting or the command line was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    /// The argument has no `=`.
    #[error("guest setting {0:?} is not NAME=VALUE")]
    NotNameValue(String),
    /// The name is not an uppercase identifier.
    #[error(
        "guest setting name {0:?} is not an uppercase identifier ([A-Z][A-Z0-9_]*, at most 64 characters)"
    )]
    BadName(String),
    /// The value holds a character that could change how the kernel reads the line.
    #[error("guest setting {name}: value holds {what}, which could escape the kernel command line")]
    BadValue {
        /// The setting.
        name: String,
        /// What was found (`a double quote`, `whitespace`, …).
        what: &'static str,
    },
    /// A name berm-vmm sets itself.
    #[error("guest setting {0} is set by berm-vmm itself")]
    Reserved(String),
    /// The same name twice.
    #[error("guest setting {0} is given twice")]
    Duplicate(String),
    /// More than [`MAX_SETTINGS`].
    #[error("{0} guest settings; at most {MAX_SETTINGS} are allowed")]
    TooMany(usize),
    /// The command line would not fit.
    #[error(
        "the kernel command line would be {0} bytes; with {HYPERVISOR_RESERVE} bytes kept for the \
         hypervisor's device entries it must stay within {COMMAND_LINE_SIZE}"
    )]
    TooLong(usize),
}

impl GuestSetting {
    /// Parses and checks one `NAME=VALUE` argument from `--env`.
    pub fn parse_user(arg: &str) -> Result<Self, SettingError> {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| SettingError::NotNameValue(arg.to_owned()))?;
        let setting = Self::new(name, value)?;
        if RESERVED.contains(&name) {
            return Err(SettingError::Reserved(name.to_owned()));
        }
        Ok(setting)
    }

    /// A setting from its parts, checked.
    pub fn new(name: &str, value: &str) -> Result<Self, SettingError> {
        let mut chars = name.chars();
        let name_ok = name.len() <= MAX_NAME
            && chars.next().is_some_and(|c| c.is_ascii_uppercase())
            && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !name_ok {
            return Err(SettingError::BadName(name.to_owned()));
        }
        for c in value.chars() {
            let what = match c {
                '"' => "a double quote",
                '\'' => "a single quote",
                '\\' => "a backslash",
                c if c.is_whitespace() => "whitespace",
                c if c.is_control() => "a control character",
                c if !c.is_ascii() => "a non-ASCII character",
                _ => continue,
            };
            return Err(SettingError::BadValue {
                name: name.to_owned(),
                what,
            });
        }
        Ok(Self {
            name: name.to_owned(),
            value: value.to_owned(),
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// The pinned command line plus the settings, checked as a whole.
pub fn command_line(pinned: &str, settings: &[GuestSetting]) -> Result<String, SettingError> {
    if settings.len() > MAX_SETTINGS {
        return Err(SettingError::TooMany(settings.len()));
    }
    for (i, setting) in settings.iter().enumerate() {
        if settings[..i]
            .iter()
            .any(|earlier| earlier.name == setting.name)
        {
            return Err(SettingError::Duplicate(setting.name.clone()));
        }
    }
    let mut line = pinned.to_owned();
    for setting in settings {
        line.push(' ');
        line.push_str(&setting.name);
        line.push('=');
        line.push_str(&setting.value);
    }
    if line.len() + HYPERVISOR_RESERVE > COMMAND_LINE_SIZE {
        return Err(SettingError::TooLong(line.len()));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_ups_injection_and_its_relatives_are_refused() {
        let cases = [
            (
                "X=1\" lsm=\"yama",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "a double quote",
                },
            ),
            (
                "X=1 init=/bin/sh",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "whitespace",
                },
            ),
            (
                "X=1\tinit=/bin/sh",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "whitespace",
                },
            ),
            (
                "X=1\ninit=/bin/sh",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "whitespace",
                },
            ),
            (
                "X='a b'",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "a single quote",
                },
            ),
            (
                "X=a\\\"b",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "a backslash",
                },
            ),
            (
                "X=\u{1b}[2J",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "a control character",
                },
            ),
            (
                "X=\u{0}",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "a control character",
                },
            ),
            (
                "X=é",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "a non-ASCII character",
                },
            ),
            (
                "X=a\u{a0}b",
                SettingError::BadValue {
                    name: "X".into(),
                    what: "whitespace",
                },
            ),
            ("init=/bin/sh", SettingError::BadName("init".into())),
            ("lsm=yama", SettingError::BadName("lsm".into())),
            (
                "virtio_mmio.device=4K@0x1:5",
                SettingError::BadName("virtio_mmio.device".into()),
            ),
            ("1X=a", SettingError::BadName("1X".into())),
            ("X-Y=a", SettingError::BadName("X-Y".into())),
            ("=a", SettingError::BadName(String::new())),
            ("--", SettingError::NotNameValue("--".into())),
            ("BERM_APPS=9", SettingError::Reserved("BERM_APPS".into())),
        ];
        for (arg, want) in cases {
            assert_eq!(GuestSetting::parse_user(arg), Err(want), "{arg:?}");
        }
        assert_eq!(
            GuestSetting::parse_user(&format!("{}=1", "A".repeat(65))),
            Err(SettingError::BadName("A".repeat(65)))
        );
        // Every setting berm-vmm makes itself, BERM_PROBE above all (`--env BERM_PROBE=0`
        // would otherwise run the enforcement probe in place of an app).
        for name in RESERVED {
            assert_eq!(
                GuestSetting::parse_user(&format!("{name}=0")),
                Err(SettingError::Reserved(name.into())),
                "{name}"
            );
        }
    }

    #[test]
    fn plain_settings_pass_and_are_appended() {
        let settings = [
            GuestSetting::parse_user("BERM_LOG=debug").unwrap(),
            GuestSetting::parse_user("X=a=b,c:1/2").unwrap(),
        ];
        assert_eq!(
            command_line("ro init=/sbin/berm-init", &settings).unwrap(),
            "ro init=/sbin/berm-init BERM_LOG=debug X=a=b,c:1/2"
        );
        assert!(GuestSetting::parse_user("EMPTY=").is_ok());
    }

    #[test]
    fn count_duplicates_and_length_are_capped() {
        let many: Vec<_> = (0..21)
            .map(|i| GuestSetting::new(&format!("S{i}"), "1").unwrap())
            .collect();
        assert_eq!(command_line("x", &many), Err(SettingError::TooMany(21)));
        assert!(command_line("x", &many[..20]).is_ok());
        let twice = [
            GuestSetting::new("A", "1").unwrap(),
            GuestSetting::new("A", "2").unwrap(),
        ];
        assert_eq!(
            command_line("x", &twice),
            Err(SettingError::Duplicate("A".into()))
        );
        let long = [GuestSetting::new("A", &"v".repeat(1600)).unwrap()];
        assert_eq!(
            command_line("pinned", &long),
            Err(SettingError::TooLong(1609))
        );
    }
}
