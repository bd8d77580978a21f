//! Secrets: values a program uses without ever holding them.
//!
//! A program writes `{{secret:NAME}}` in a header value or its body. The
//! host replaces it with the value only on a request to one of the hosts
//! `NAME` is bound to (`secret:NAME=HOST[:PORT]`), after the request itself
//! is known to be allowed; a request holding the placeholder toward any
//! other host is refused whole. The value is read from its file when a
//! request needs it and goes into the outgoing request only: never into the
//! program's memory, a log line or an error message. Responses are passed
//! back as the server sent them (not scrubbed): a server that echoes the
//! value gives it to the program, so bind a secret only to hosts that do
//! not.
//!
//! Values live one file each (mode 0600) in a directory per program
//! ([`SecretStore`]); `berm secret set|ls|rm` manages them through bermd.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use berm_abi::net::{SECRET_CLOSE, SECRET_OPEN, SecretRule, Target, is_valid_secret_name};

use crate::{ErrorCode, FetchError};

/// Largest secret value.
pub const MAX_SECRET_BYTES: usize = 8 << 10;

/// A secret's name and one host it may be sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The secret.
    pub name: String,
    /// A host it may go to, and over which scheme.
    pub rule: SecretRule,
}

/// Where one hop of a request goes, as the secret check needs it.
#[derive(Debug, Clone)]
pub struct Dest<'a> {
    /// The URL's host.
    pub target: Target<'a>,
    /// The port it connects to.
    pub port: u16,
    /// The scheme's default port (443 for https, 80 for http).
    pub default_port: u16,
    /// Whether it is HTTPS.
    pub tls: bool,
    /// The host as messages name it.
    pub host_text: &'a str,
}

/// Why a secret could not be stored, listed or removed.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The name breaks the rule.
    #[error("secret name {0:?}: use 1 to 64 of A-Z, a-z, 0-9, `_`, `-`")]
    Name(String),
    /// The value cannot be sent in a header.
    #[error(
        "the value of secret `{name}` {problem}; a secret is at most {MAX_SECRET_BYTES} bytes of text without line breaks or NUL"
    )]
    Value {
        /// The secret.
        name: String,
        /// What is wrong with the value (never the value itself).
        problem: &'static str,
    },
    /// The program's name breaks the rule.
    #[error("program name {0:?} is not valid: use 1-64 of a-z, 0-9, `-`")]
    Program(String),
    /// No such secret.
    #[error("no secret `{0}` is set")]
    NotSet(String),
    /// A value file that is not the user's own and private, or is one of berm's own files
    /// or lies in one of its directories: refused, as ssh refuses an open key
    /// ([`berm_app::secret_file`]).
    #[error("secret `{name}`: {source}")]
    File {
        /// The secret.
        name: String,
        /// Why the file is refused, naming it and what to run (boxed: it is large, and
        /// every other result of the store is small).
        source: Box<berm_app::secret_file::SecretFileError>,
    },
    /// The store could not be read or written.
    #[error("secret store {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One program's secret values: `DIR/NAME`, mode 0600, in a directory of
/// mode 0700, and any value files the program's `[program.secrets]` names, which take
/// precedence.
#[derive(Debug, Clone)]
pub struct SecretStore {
    dir: PathBuf,
    files: BTreeMap<String, PathBuf>,
}

impl SecretStore {
    /// The store in `dir` (created on the first `set`).
    pub fn new(dir: impl Into<PathBuf>) -> SecretStore {
        SecretStore {
            dir: dir.into(),
            files: BTreeMap::new(),
        }
    }

    /// The store in `dir`, with `files` read for their names instead (an
    /// program's `[program.secrets]`: the user keeps each value in a file of their own).
    pub fn with_files(dir: impl Into<PathBuf>, files: BTreeMap<String, PathBuf>) -> SecretStore {
        SecretStore {
            dir: dir.into(),
            files,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `value` under `name`, replacing it, durably.
    pub fn set(&self, name: &str, value: &[u8]) -> Result<(), SecretError> {
        check_name(name)?;
        check_value(name, value)?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SecretError::Io { path, source }
        };
        create_private_dir(&self.dir).map_err(io(&self.dir))?;
        let path = self.dir.join(name);
        berm_durable::write_atomic(&path, value).map_err(io(&path))
    }

    /// The names set, sorted.
    pub fn list(&self) -> Result<Vec<String>, SecretError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SecretError::Io {
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| is_valid_secret_name(name))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes `name`.
    pub fn remove(&self, name: &str) -> Result<(), SecretError> {
        check_name(name)?;
        let path = self.dir.join(name);
        if !path.exists() {
            return Err(SecretError::NotSet(name.to_string()));
        }
        berm_durable::remove_durably(&path).map_err(|source| SecretError::Io { path, source })
    }

    /// The value of `name`, if set. A value file an app names is read
    /// now (so a rotated file takes effect on the next request), must not
    /// be readable by group or others, and loses one trailing line break.
    pub fn get(&self, name: &str) -> Result<Option<Vec<u8>>, SecretError> {
        check_name(name)?;
        if let Some(path) = self.files.get(name) {
            return read_value_file(name, path).map(Some);
        }
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(value) => Ok(Some(value)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SecretError::Io { path, source }),
        }
    }
}

/// The value in `path`, a file a program's `[program.secrets]` names for
/// `name`: refused unless it is the user's own, private and none of berm's
/// own, judged on the opened file ([`berm_app::secret_file::open`]), or when it is not one
/// line of at most [`MAX_SECRET_BYTES`]; one trailing line break is dropped.
pub fn read_value_file(name: &str, path: &Path) -> Result<Vec<u8>, SecretError> {
    let file = berm_app::secret_file::open(path).map_err(|source| SecretError::File {
        name: name.to_string(),
        source: Box::new(source),
    })?;
    // One byte past the cap (and a line break) is enough to refuse a wrong
    // file without reading it whole.
    let mut value = Vec::new();
    file.take(MAX_SECRET_BYTES as u64 + 3)
        .read_to_end(&mut value)
        .map_err(|source| SecretError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    for end in [b"\n".as_slice(), b"\r"] {
        if value.ends_with(end) {
            value.pop();
        }
    }
    check_value(name, &value)?;
    Ok(value)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn check_name(name: &str) -> Result<(), SecretError> {
    if is_valid_secret_name(name) {
        Ok(())
    } else {
        Err(SecretError::Name(name.chars().take(80).collect()))
    }
}

/// A value must fit in a header: no line breaks, no NUL, not empty.
pub fn check_value(name: &str, value: &[u8]) -> Result<(), SecretError> {
    let problem = if value.is_empty() {
        Some("is empty")
    } else if value.len() > MAX_SECRET_BYTES {
        Some("is too long")
    } else if value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        Some("holds a line break or NUL")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(SecretError::Value {
            name: name.to_string(),
            problem,
        }),
        None => Ok(()),
    }
}

/// The secret names `bytes` holds placeholders for, in order of first
/// appearance, added to `names`. Anything starting with `{{secret:` must be
/// a whole placeholder with a valid name, so a typo is refused rather than
/// sent as is.
pub fn placeholders<'a>(bytes: &'a [u8], names: &mut Vec<&'a str>) -> Result<(), FetchError> {
    let mut rest = bytes;
    while let Some(at) = find(rest, SECRET_OPEN.as_bytes()) {
        let after = &rest[at + SECRET_OPEN.len()..];
        let name = find(after, SECRET_CLOSE.as_bytes())
            .and_then(|end| std::str::from_utf8(&after[..end]).ok())
            .filter(|name| is_valid_secret_name(name))
            .ok_or_else(|| {
                FetchError::new(
                    ErrorCode::Invalid,
                    "a `{{secret:` is not followed by a secret name and `}}` \
                     (write {{secret:NAME}}, NAME being 1 to 64 of A-Z, a-z, 0-9, `_`, `-`)",
                )
            })?;
        if !names.contains(&name) {
            names.push(name);
        }
        rest = &after[name.len() + SECRET_CLOSE.len()..];
    }
    Ok(())
}

/// `bytes` with every placeholder replaced by its value from `values`
/// (which holds every name [`placeholders`] found). Borrowed when there is
/// none.
pub fn substitute<'a>(bytes: &'a [u8], values: &[(&str, Vec<u8>)]) -> Cow<'a, [u8]> {
    if find(bytes, SECRET_OPEN.as_bytes()).is_none() {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest, SECRET_OPEN.as_bytes()) {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + SECRET_OPEN.len()..];
        let end = find(after, SECRET_CLOSE.as_bytes()).unwrap_or(after.len());
        let name = &after[..end];
        match values.iter().find(|(n, _)| n.as_bytes() == name) {
            Some((_, value)) => out.extend_from_slice(value),
            // placeholders() checked every name first; keep the text as is
            // rather than panic should that ever not hold.
            None => out.extend_from_slice(&rest[at..at + SECRET_OPEN.len() + end]),
        }
        rest = after.get(end + SECRET_CLOSE.len()..).unwrap_or_default();
    }
    out.extend_from_slice(rest);
    Cow::Owned(out)
}

/// Checks that every secret in `names` may go to `target`, and reads their
/// values. Refused (`denied`) when a name is not bound to this program, is
/// bound only to other hosts, or has no value.
pub fn values_for<'a>(
    names: &[&'a str],
    bindings: &[Binding],
    store: Option<&SecretStore>,
    dest: &Dest<'_>,
) -> Result<Vec<(&'a str, Vec<u8>)>, FetchError> {
    check_bound(names, bindings, dest)?;
    let mut values = Vec::with_capacity(names.len());
    for name in names {
        let value = store
            .map(|store| store.get(name))
            .transpose()
            .map_err(|e| {
                // The operator's log gets the path and the reason; the
                // program only learns that the host could not read it.
                tracing::warn!(secret = *name, error = %e, "secret value unreadable");
                FetchError::new(
                    ErrorCode::Io,
                    format!("secret `{name}` could not be read on the host (see its log)"),
                )
            })?
            .flatten()
            .ok_or_else(|| {
                FetchError::new(
                    ErrorCode::Denied,
                    format!(
                        "secret `{name}` has no value: set it with `berm secret set PROGRAM {name}`"
                    ),
                )
            })?;
        values.push((*name, value));
    }
    Ok(values)
}

/// Checks that every secret in `names` is bound to this program and may go to `dest`,
/// without reading a value: all a side that holds no secrets (a microVM's bermd) can check.
/// A binding without a scheme allows HTTPS only: the same host over `http://` is refused,
/// saying how to name cleartext.
pub fn check_bound(
    names: &[&str],
    bindings: &[Binding],
    dest: &Dest<'_>,
) -> Result<(), FetchError> {
    let Dest {
        target,
        port,
        default_port,
        tls,
        host_text,
    } = dest;
    let (port, default_port, tls) = (*port, *default_port, *tls);
    for name in names {
        let hosts: Vec<&Binding> = bindings.iter().filter(|b| b.name == *name).collect();
        if hosts.is_empty() {
            return Err(FetchError::new(
                ErrorCode::Denied,
                format!(
                    "the request holds {{{{secret:{name}}}}}, and no secret `{name}` is bound \
                     to this program (deploy it with --secret {name}=HOST)"
                ),
            ));
        }
        if hosts
            .iter()
            .any(|b| b.rule.allows(target, port, default_port, tls))
        {
            continue;
        }
        if let Some(https_only) = hosts
            .iter()
            .find(|b| !tls && !b.rule.cleartext && b.rule.rule.allows(target, port, default_port))
        {
            return Err(FetchError::new(
                ErrorCode::Denied,
                format!(
                    "the request holds {{{{secret:{name}}}}} and goes to {host_text} over \
                     cleartext http://; secret `{name}` is bound to {}, which means HTTPS \
                     only: use https://, or bind it as secret:{name}=http://{} to send it \
                     in cleartext",
                    https_only.rule, https_only.rule.rule
                ),
            ));
        }
        let list: Vec<String> = hosts.iter().map(|b| b.rule.to_string()).collect();
        return Err(FetchError::new(
            ErrorCode::Denied,
            format!(
                "the request holds {{{{secret:{name}}}}}, which may be sent only to {}, \
                 not to {host_text}",
                list.join(", ")
            ),
        ));
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_found_and_replaced() {
        let text = b"Bearer {{secret:tok}} and {{secret:b}} and {{secret:tok}}";
        let mut names = Vec::new();
        placeholders(text, &mut names).unwrap();
        assert_eq!(names, ["tok", "b"]);
        let values = [("tok", b"T".to_vec()), ("b", b"BB".to_vec())];
        assert_eq!(&*substitute(text, &values), b"Bearer T and BB and T");
        assert!(matches!(
            substitute(b"plain", &values),
            Cow::Borrowed(b"plain")
        ));
        for bad in [&b"{{secret:"[..], b"{{secret:a b}}", b"{{secret:}}"] {
            let err = placeholders(bad, &mut Vec::new()).unwrap_err();
            assert_eq!(err.code, ErrorCode::Invalid);
        }
    }

    #[test]
    fn a_store_keeps_values_private_and_lists_names_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path().join("p"));
        assert_eq!(store.list().unwrap(), Vec::<String>::new());
        store.set("tok", b"v1").unwrap();
        store.set("tok", b"v2").unwrap();
        assert_eq!(store.get("tok").unwrap(), Some(b"v2".to_vec()));
        assert_eq!(store.list().unwrap(), ["tok"]);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("p/tok")), 0o600);
        assert_eq!(mode(&dir.path().join("p")), 0o700);
        let err = store.set("tok", b"a\nb").unwrap_err().to_string();
        assert!(err.contains("line break") && !err.contains("a\nb"), "{err}");
        assert!(store.set("../x", b"v").is_err());
        store.remove("tok").unwrap();
        assert!(matches!(store.remove("tok"), Err(SecretError::NotSet(_))));
    }

    #[test]
    fn an_apps_value_files_are_read_private_and_first() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let chmod =
            |mode| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let store = SecretStore::with_files(
            dir.path().join("store"),
            BTreeMap::from([("tok".to_string(), file.clone())]),
        );
        store.set("tok", b"from-the-store").unwrap();
        store.set("other", b"kept").unwrap();
        // A missing file is an error naming it, not a fall-back to the store.
        let err = store.get("tok").unwrap_err().to_string();
        assert!(err.contains(&file.display().to_string()), "{err}");
        // `echo value > file` leaves a line break; it is not part of the value.
        std::fs::write(&file, "from-the-file\n").unwrap();
        chmod(0o600);
        assert_eq!(store.get("tok").unwrap(), Some(b"from-the-file".to_vec()));
        assert_eq!(store.get("other").unwrap(), Some(b"kept".to_vec()));
        // Rotated: read again on the next request.
        std::fs::write(&file, "rotated\r\n").unwrap();
        assert_eq!(store.get("tok").unwrap(), Some(b"rotated".to_vec()));
        // Readable by others: refused, naming the fix and never the value.
        chmod(0o644);
        let err = store.get("tok").unwrap_err().to_string();
        assert!(
            err.contains("mode 644") && err.contains("chmod 600"),
            "{err}"
        );
        assert!(err.starts_with("secret `tok`: "), "{err}");
        assert!(!err.contains("rotated"), "{err}");
        // A file that is not a value (too long, two lines) is refused.
        chmod(0o600);
        std::fs::write(&file, vec![b'x'; MAX_SECRET_BYTES * 4]).unwrap();
        assert!(
            store
                .get("tok")
                .unwrap_err()
                .to_string()
                .contains("too long")
        );
        std::fs::write(&file, "a\nb\n").unwrap();
        assert!(
            store
                .get("tok")
                .unwrap_err()
                .to_string()
                .contains("line break")
        );
    }

    #[test]
    fn a_secret_goes_only_to_its_hosts() {
        let bindings = [Binding {
            name: "tok".into(),
            rule: "api.example.com".parse().unwrap(),
        }];
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path());
        store.set("tok", b"v").unwrap();
        let dest = |host: &'static str, tls: bool| Dest {
            target: Target::Name(host),
            port: if tls { 443 } else { 80 },
            default_port: if tls { 443 } else { 80 },
            tls,
            host_text: host,
        };
        let get = |names: &[&'static str], bindings: &[Binding], host, tls| {
            values_for(names, bindings, Some(&store), &dest(host, tls))
        };
        let to = |host| get(&["tok"], &bindings, host, true);
        assert_eq!(to("api.example.com").unwrap(), [("tok", b"v".to_vec())]);
        let err = to("evil.example.com").unwrap_err();
        assert_eq!(err.code, ErrorCode::Denied);
        assert!(err.message.contains("only to api.example.com"), "{err}");
        assert!(!err.message.contains(" v "));
        let err = get(&["other"], &bindings, "api.example.com", true).unwrap_err();
        assert!(err.message.contains("no secret `other` is bound"), "{err}");
        // Bound without a scheme: HTTPS only; the same host over http:// is refused, naming
        // both ways out, and no value is read.
        let err = get(&["tok"], &bindings, "api.example.com", false).unwrap_err();
        assert_eq!(err.code, ErrorCode::Denied);
        assert_eq!(
            err.message,
            "the request holds {{secret:tok}} and goes to api.example.com over cleartext \
             http://; secret `tok` is bound to api.example.com, which means HTTPS only: use \
             https://, or bind it as secret:tok=http://api.example.com to send it in cleartext"
        );
        // Named http://: cleartext only.
        let clear = [Binding {
            name: "tok".into(),
            rule: "http://api.example.com".parse().unwrap(),
        }];
        assert!(get(&["tok"], &clear, "api.example.com", false).is_ok());
        let err = get(&["tok"], &clear, "api.example.com", true).unwrap_err();
        assert!(
            err.message.contains("only to http://api.example.com"),
            "{err}"
        );
    }
}
