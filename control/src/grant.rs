//! Grants: which of bermd's syscall modules a deployment may use.
//!
//! Nothing is granted by default. The text form is what `berm deploy --grant`
//! takes and what `berm ls` prints, and it is also the JSON form, so a record
//! on disk reads the way a person typed it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grant {
    /// `log`: lines in bermd's log, tagged with the program.
    Log,
    /// `clock`: wall-clock time.
    Clock,
    /// `random`: cryptographically secure random bytes.
    Random,
    /// `kv`: the program's own persistent keyspace.
    Kv,
    /// `fs=DIR[:ro|:rw]`: files beneath one directory.
    Fs {
        /// The directory (absolute once bermd has it).
        dir: PathBuf,
        /// Whether writes and removals are refused.
        read_only: bool,
    },
}

impl Grant {
    /// The syscall import module this grant opens.
    pub fn module(&self) -> &'static str {
        match self {
            Grant::Log => "log",
            Grant::Clock => "clock",
            Grant::Random => "random",
            Grant::Kv => "kv",
            Grant::Fs { .. } => "fs",
        }
    }
}

/// Why a grant's text form could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantParseError {
    /// Not one of the grant names.
    #[error("unknown grant `{0}`: use log, clock, random, kv or fs=DIR[:ro|:rw]")]
    Unknown(String),
    /// `fs` without a directory.
    #[error("grant `{0}` needs a directory: fs=DIR[:ro|:rw]")]
    FsWithoutDir(String),
    /// A grant that takes no value was given one.
    #[error("grant `{0}` takes no value")]
    UnexpectedValue(String),
}

impl FromStr for Grant {
    type Err = GrantParseError;

    fn from_str(text: &str) -> Result<Grant, GrantParseError> {
        let (name, value) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (text, None),
        };
        let simple = |grant: Grant| match value {
            None => Ok(grant),
            Some(_) => Err(GrantParseError::UnexpectedValue(text.to_string())),
        };
        match name {
            "log" => simple(Grant::Log),
            "clock" => simple(Grant::Clock),
            "random" => simple(Grant::Random),
            "kv" => simple(Grant::Kv),
            "fs" => {
                let value = value
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| GrantParseError::FsWithoutDir(text.to_string()))?;
                let (dir, read_only) = if let Some(dir) = value.strip_suffix(":ro") {
                    (dir, true)
                } else if let Some(dir) = value.strip_suffix(":rw") {
                    (dir, false)
                } else {
                    (value, false)
                };
                if dir.is_empty() {
                    return Err(GrantParseError::FsWithoutDir(text.to_string()));
                }
                Ok(Grant::Fs {
                    dir: PathBuf::from(dir),
                    read_only,
                })
            }
            _ => Err(GrantParseError::Unknown(text.to_string())),
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Fs { dir, read_only } => {
                let mode = if *read_only { "ro" } else { "rw" };
                write!(f, "fs={}:{mode}", dir.display())
            }
            other => f.write_str(other.module()),
        }
    }
}

impl serde::Serialize for Grant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Grant {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Grant, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_round_trip_through_text() {
        for text in [
            "log",
            "clock",
            "random",
            "kv",
            "fs=/srv/data:ro",
            "fs=/srv/data:rw",
        ] {
            let grant: Grant = text.parse().unwrap();
            assert_eq!(grant.to_string(), text);
        }
        assert_eq!(
            "fs=/tmp/x".parse::<Grant>().unwrap(),
            Grant::Fs {
                dir: "/tmp/x".into(),
                read_only: false
            }
        );
        assert_eq!(
            "fs=/a:b:ro".parse::<Grant>().unwrap(),
            Grant::Fs {
                dir: "/a:b".into(),
                read_only: true
            }
        );
    }

    #[test]
    fn bad_grants_are_refused_with_the_reason() {
        assert_eq!(
            "net".parse::<Grant>(),
            Err(GrantParseError::Unknown("net".into()))
        );
        assert_eq!(
            "fs".parse::<Grant>(),
            Err(GrantParseError::FsWithoutDir("fs".into()))
        );
        assert_eq!(
            "fs=:ro".parse::<Grant>(),
            Err(GrantParseError::FsWithoutDir("fs=:ro".into()))
        );
        assert_eq!(
            "kv=1".parse::<Grant>(),
            Err(GrantParseError::UnexpectedValue("kv=1".into()))
        );
    }
}
