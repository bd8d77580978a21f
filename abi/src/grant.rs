//! Grants: which of bermd's syscall modules a deployment may use, typed once.
//!
//! Every crate that reads a grant (the control API, `berm.toml`, bermd, the microVM's
//! launch and measurement, the host dialer, the attestation record) uses this one type and
//! its one parser, so the host's check and the guest's check accept exactly the same set.
//! It lives in berm-abi, below all of them, beside [`NetRule`].
//!
//! Nothing is granted by default. The text form is what `berm deploy --grant`
//! takes and what `berm ls` prints, and it is also the JSON form, so a record
//! on disk reads the way a person typed it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::net::{NetRule, SecretRule};

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
    /// `fs=DIR[:ro|:rw][:bytes=N][:entries=N]`: files beneath one
    /// directory, within a quota.
    Fs {
        /// The directory (absolute once bermd has it).
        dir: PathBuf,
        /// Whether writes and removals are refused.
        read_only: bool,
        /// How much the program may keep there.
        quota: FsQuota,
    },
    /// `net=HOST[:PORT]`: `http.fetch` may reach this host (`*.example.com`
    /// wildcards; without a port, the scheme's default). Repeatable.
    Net(NetRule),
    /// `secret:NAME=HOST[:PORT]`: the program's secret `NAME` is written
    /// into requests to this host where the program puts `{{secret:NAME}}`,
    /// and requests holding it to any other host are refused. Over HTTPS
    /// only, unless written `secret:NAME=http://HOST[:PORT]` ([`SecretRule`]).
    /// Repeatable; the value is set apart (`berm secret set`) and never shown.
    Secret {
        /// The secret's name.
        name: String,
        /// A host it may be sent to, and the scheme.
        rule: SecretRule,
    },
    /// `call=PROGRAM` or `call=PROGRAM_TOOL`: `berm.call` may reach every tool of
    /// `PROGRAM`, or only its tool `TOOL`. Repeatable. The names are the callee's own
    /// (its deployed program name and the tool name in its manifest), never an MCP alias.
    /// Without any, `berm.call` is not linked: the callee runs with its own grants, so a
    /// call is a capability like every other syscall (see docs/threat-model.md).
    Call {
        /// The program that may be called.
        program: String,
        /// Its one tool that may be called; `None` allows all of them.
        tool: Option<String>,
    },
    /// `ask`: `berm.ask` may end a call asking the client for input (elicitation, sampling,
    /// roots), which the host relays and answers by running the tool again. Without it
    /// `berm.ask` is not linked: asking a person is a capability like the others.
    Ask,
}

/// How much a program may keep beneath its `fs` directory. Unset fields
/// take bermd's defaults ([`FsQuota::DEFAULT_BYTES`],
/// [`FsQuota::DEFAULT_ENTRIES`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FsQuota {
    /// Total size of the files, in bytes (`:bytes=N`).
    pub bytes: Option<u64>,
    /// Number of files, directories and other entries (`:entries=N`).
    pub entries: Option<u64>,
}

impl FsQuota {
    /// The size quota when the grant sets none: 1 GiB.
    pub const DEFAULT_BYTES: u64 = 1 << 30;
    /// The entry quota when the grant sets none.
    pub const DEFAULT_ENTRIES: u64 = 100_000;

    /// The size quota in force.
    pub fn max_bytes(&self) -> u64 {
        self.bytes.unwrap_or(FsQuota::DEFAULT_BYTES)
    }

    /// The entry quota in force.
    pub fn max_entries(&self) -> u64 {
        self.entries.unwrap_or(FsQuota::DEFAULT_ENTRIES)
    }
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
            Grant::Net(_) | Grant::Secret { .. } => "http",
            Grant::Call { .. } => crate::CONVENTION_MODULE,
            // Opens `berm.ask`; a module of its own so that it never opens `berm.call`.
            Grant::Ask => "ask",
        }
    }

    /// Whether this grant lets a program call tool `tool` of program `program`.
    pub fn allows_call(&self, program: &str, tool: &str) -> bool {
        match self {
            Grant::Call {
                program: granted,
                tool: only,
            } => granted == program && only.as_deref().is_none_or(|only| only == tool),
            _ => false,
        }
    }

    /// Whether the grant goes in an app's measurement line and attestation record: it
    /// reaches past the program's own state inside the microVM (egress, which the host's
    /// dialer enforces; calls to other programs, which run with their own grants). `fs` and
    /// `kv` stay inside the VM's disk, which is measured whole.
    pub fn is_measured(&self) -> bool {
        matches!(
            self,
            Grant::Net(_) | Grant::Secret { .. } | Grant::Call { .. }
        )
    }
}

/// Why a grant's text form could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantParseError {
    /// Not one of the grant names.
    #[error(
        "unknown grant `{0}`: use log, clock, random, kv, fs=DIR[:ro|:rw][:bytes=N][:entries=N], net=HOST[:PORT], secret:NAME=HOST[:PORT], call=PROGRAM[_TOOL] or ask"
    )]
    Unknown(String),
    /// A `call=` grant whose names break the naming rules.
    #[error(
        "grant `{0}`: write call=PROGRAM or call=PROGRAM_TOOL with the callee's own names \
         (its program name, [a-z0-9][a-z0-9-]{{0,63}}, and a tool name of its manifest), \
         not an MCP alias"
    )]
    Call(String),
    /// A `net=` or `secret:` host that is not a valid rule.
    #[error("grant `{grant}`: {problem}")]
    Net {
        /// The grant.
        grant: String,
        /// What is wrong with its host.
        problem: crate::net::NetRuleError,
    },
    /// A `secret:` grant whose name breaks the rule.
    #[error(
        "grant `{0}`: write secret:NAME=HOST[:PORT], NAME being 1 to 64 of A-Z, a-z, 0-9, `_`, `-`"
    )]
    SecretName(String),
    /// `fs` without a directory.
    #[error("grant `{0}` needs a directory: fs=DIR[:ro|:rw][:bytes=N][:entries=N]")]
    FsWithoutDir(String),
    /// A grant that takes no value was given one.
    #[error("grant `{0}` takes no value")]
    UnexpectedValue(String),
    /// An `fs` option given twice, or a quota that does not fit.
    #[error("grant `{grant}`: {problem}")]
    FsOption {
        /// The grant.
        grant: String,
        /// What is wrong.
        problem: String,
    },
}

impl FromStr for Grant {
    type Err = GrantParseError;

    fn from_str(text: &str) -> Result<Grant, GrantParseError> {
        let net = |rule: &str| {
            rule.parse::<NetRule>()
                .map_err(|problem| GrantParseError::Net {
                    grant: text.to_string(),
                    problem,
                })
        };
        if let Some(binding) = text.strip_prefix("secret:") {
            let (name, rule) = binding
                .split_once('=')
                .filter(|(name, _)| crate::net::is_valid_secret_name(name))
                .ok_or_else(|| GrantParseError::SecretName(text.to_string()))?;
            return Ok(Grant::Secret {
                name: name.to_string(),
                rule: rule.parse().map_err(|problem| GrantParseError::Net {
                    grant: text.to_string(),
                    problem,
                })?,
            });
        }
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
            "ask" => simple(Grant::Ask),
            "fs" => {
                let value = value
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| GrantParseError::FsWithoutDir(text.to_string()))?;
                let (dir, options) = crate::split_fs_grant(value);
                if dir.is_empty() {
                    return Err(GrantParseError::FsWithoutDir(text.to_string()));
                }
                let problem = |problem: String| GrantParseError::FsOption {
                    grant: text.to_string(),
                    problem,
                };
                let (mut mode, mut quota) = (None, FsQuota::default());
                for option in options.split(':').filter(|o| !o.is_empty()) {
                    let (key, slot) = match option.split_once('=') {
                        Some(("bytes", n)) => ("bytes", Some((&mut quota.bytes, n))),
                        Some(("entries", n)) => ("entries", Some((&mut quota.entries, n))),
                        _ => ("mode", None),
                    };
                    match slot {
                        Some((slot, n)) => {
                            let n: u64 = n.parse().map_err(|_| {
                                problem(format!("{key}={n} does not fit in 64 bits"))
                            })?;
                            if slot.replace(n).is_some() {
                                return Err(problem(format!("{key}= is given twice")));
                            }
                        }
                        None => {
                            if mode.replace(option == "ro").is_some() {
                                return Err(problem("give at most one of :ro and :rw".into()));
                            }
                        }
                    }
                }
                Ok(Grant::Fs {
                    dir: PathBuf::from(dir),
                    read_only: mode.unwrap_or(false),
                    quota,
                })
            }
            "net" => Ok(Grant::Net(net(value.unwrap_or_default())?)),
            "call" => {
                let value = value.unwrap_or_default();
                let (program, tool) = match value.split_once(crate::SERVED_NAME_SEPARATOR) {
                    Some((program, tool)) => (program, Some(tool)),
                    None => (value, None),
                };
                if !crate::is_valid_program_name(program)
                    || tool.is_some_and(|tool| !crate::is_valid_name(tool))
                {
                    return Err(GrantParseError::Call(text.to_string()));
                }
                Ok(Grant::Call {
                    program: program.to_string(),
                    tool: tool.map(str::to_string),
                })
            }
            _ => Err(GrantParseError::Unknown(text.to_string())),
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Fs {
                dir,
                read_only,
                quota,
            } => {
                let mode = if *read_only { "ro" } else { "rw" };
                write!(f, "fs={}:{mode}", dir.display())?;
                if let Some(bytes) = quota.bytes {
                    write!(f, ":bytes={bytes}")?;
                }
                if let Some(entries) = quota.entries {
                    write!(f, ":entries={entries}")?;
                }
                Ok(())
            }
            Grant::Net(rule) => write!(f, "net={rule}"),
            Grant::Secret { name, rule } => write!(f, "secret:{name}={rule}"),
            Grant::Call { program, tool } => match tool {
                Some(tool) => write!(f, "call={}", crate::served_name(program, tool)),
                None => write!(f, "call={program}"),
            },
            other => f.write_str(other.module()),
        }
    }
}

crate::serde_as_text!(Grant);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_grants_allow_their_program_or_their_one_tool() {
        let program: Grant = "call=echo".parse().unwrap();
        let tool: Grant = "call=files_read".parse().unwrap();
        assert!(program.allows_call("echo", "echo") && program.allows_call("echo", "other"));
        assert!(!program.allows_call("files", "echo"));
        assert!(tool.allows_call("files", "read"));
        assert!(!tool.allows_call("files", "write") && !tool.allows_call("echo", "read"));
        assert!(!Grant::Kv.allows_call("echo", "echo"));
        assert_eq!(program.module(), "berm");
    }

    #[test]
    fn grants_round_trip_through_text() {
        for text in [
            "log",
            "clock",
            "random",
            "kv",
            "fs=/srv/data:ro",
            "fs=/srv/data:rw",
            "fs=/srv/data:rw:bytes=1048576",
            "fs=/srv/data:rw:bytes=1048576:entries=10",
            "fs=/srv/data:ro:entries=3",
            "net=api.github.com",
            "net=*.example.com:8443",
            "net=127.0.0.1:8080",
            "net=[::1]:9",
            "secret:GITHUB_TOKEN=api.github.com",
            "secret:t=127.0.0.1:8443",
            "secret:t=http://127.0.0.1:8080",
            "call=echo",
            "call=echo_echo",
            "call=files_read_all",
        ] {
            let grant: Grant = text.parse().unwrap();
            assert_eq!(grant.to_string(), text);
        }
        assert_eq!(
            "call=files_read_all".parse::<Grant>().unwrap(),
            Grant::Call {
                program: "files".into(),
                tool: Some("read_all".into()),
            }
        );
        assert_eq!(
            "fs=/tmp/x".parse::<Grant>().unwrap(),
            Grant::Fs {
                dir: "/tmp/x".into(),
                read_only: false,
                quota: FsQuota::default(),
            }
        );
        assert_eq!(
            "fs=/a:b:ro".parse::<Grant>().unwrap(),
            Grant::Fs {
                dir: "/a:b".into(),
                read_only: true,
                quota: FsQuota::default(),
            }
        );
        assert_eq!(
            "fs=/a:entries=5:ro:bytes=9".parse::<Grant>().unwrap(),
            Grant::Fs {
                dir: "/a".into(),
                read_only: true,
                quota: FsQuota {
                    bytes: Some(9),
                    entries: Some(5),
                },
            }
        );
        // A malformed option is part of the directory's name.
        assert_eq!(
            "fs=/a:bytes=x".parse::<Grant>().unwrap().to_string(),
            "fs=/a:bytes=x:rw"
        );
    }

    #[test]
    fn bad_grants_are_refused_with_the_reason() {
        for (text, error) in [
            (
                "web",
                GrantParseError::Unknown as fn(String) -> GrantParseError,
            ),
            ("fs", GrantParseError::FsWithoutDir),
            ("secret:a b=x.com", GrantParseError::SecretName),
            ("secret:tok", GrantParseError::SecretName),
            ("fs=:ro", GrantParseError::FsWithoutDir),
            ("kv=1", GrantParseError::UnexpectedValue),
            ("call", GrantParseError::Call),
            ("call=", GrantParseError::Call),
            ("call=Echo", GrantParseError::Call),
            ("call=echo_", GrantParseError::Call),
            ("call=_echo", GrantParseError::Call),
            ("call=echo.echo", GrantParseError::Call),
        ] {
            assert_eq!(text.parse::<Grant>(), Err(error(text.into())), "{text}");
        }
        assert_eq!(
            "net=127.0.0.1".parse::<Grant>().unwrap_err().to_string(),
            "grant `net=127.0.0.1`: `127.0.0.1`: 127.0.0.1 is a loopback (127.0.0.0/8) address: \
             granting one needs its port too (ADDRESS:PORT); write HOST[:PORT], e.g. \
             api.github.com, *.example.com:8443, 127.0.0.1:8080 or [::1]:8080"
        );
        assert!(
            "net"
                .parse::<Grant>()
                .unwrap_err()
                .to_string()
                .contains("the host is empty")
        );
        for (text, message) in [
            (
                "fs=/a:bytes=1:bytes=2",
                "grant `fs=/a:bytes=1:bytes=2`: bytes= is given twice",
            ),
            (
                "fs=/a:ro:rw",
                "grant `fs=/a:ro:rw`: give at most one of :ro and :rw",
            ),
            (
                "fs=/a:bytes=99999999999999999999",
                "grant `fs=/a:bytes=99999999999999999999`: bytes=99999999999999999999 does not fit in 64 bits",
            ),
        ] {
            assert_eq!(text.parse::<Grant>().unwrap_err().to_string(), message);
        }
    }

    /// Text that looks like a grant: every grant's shape, with pieces that are sometimes
    /// wrong (a bad host, a repeated option, a name that breaks the rule).
    fn grant_like() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let host = prop_oneof![
            Just("api.github.com".to_string()),
            Just("*.example.com".to_string()),
            Just("127.0.0.1".to_string()),
            Just("[::1]".to_string()),
            Just("10.0.0.1".to_string()),
            "[a-zA-Z0-9.*-]{0,12}",
        ];
        let port = prop_oneof![
            Just(String::new()),
            (0u32..70_000).prop_map(|p| format!(":{p}"))
        ];
        let rule = (host, port).prop_map(|(h, p)| format!("{h}{p}"));
        let option = prop_oneof![
            Just(":ro".to_string()),
            Just(":rw".to_string()),
            any::<u64>().prop_map(|n| format!(":bytes={n}")),
            any::<u64>().prop_map(|n| format!(":entries={n}")),
            Just(":bytes=99999999999999999999".to_string()),
            "[:a-z=0-9]{0,6}",
        ];
        let fs = ("[/a-z.:]{0,10}", proptest::collection::vec(option, 0..4))
            .prop_map(|(dir, options)| format!("fs={dir}{}", options.concat()));
        prop_oneof![
            Just("log".to_string()),
            Just("clock".to_string()),
            Just("random".to_string()),
            Just("kv".to_string()),
            "(log|clock|random|kv|net|fs|secret|call)[=:]?[a-z0-9_=.:]{0,8}",
            "call=[a-zA-Z0-9_.-]{0,10}",
            fs,
            rule.clone().prop_map(|r| format!("net={r}")),
            ("[A-Za-z0-9_ -]{0,6}", rule).prop_map(|(n, r)| format!("secret:{n}={r}")),
        ]
    }

    proptest::proptest! {
        /// Every accepted string reads back as the same grant from its text form, and
        /// that text form is a fixed point: what `berm ls` prints, `--grant` takes.
        #[test]
        fn every_accepted_grant_round_trips(text in grant_like()) {
            if let Ok(grant) = text.parse::<Grant>() {
                let shown = grant.to_string();
                proptest::prop_assert_eq!(shown.parse::<Grant>(), Ok(grant.clone()));
                let json = serde_json::to_string(&grant).unwrap();
                proptest::prop_assert_eq!(serde_json::from_str::<Grant>(&json).unwrap(), grant);
            }
        }

        /// Any text at all: the parser answers (never panics), and what it accepts
        /// round-trips.
        #[test]
        fn any_text_is_refused_or_round_trips(text in ".{0,40}") {
            if let Ok(grant) = text.parse::<Grant>() {
                proptest::prop_assert_eq!(grant.to_string().parse::<Grant>(), Ok(grant));
            }
        }
    }
}
