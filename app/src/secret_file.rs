//! Where a secret's value may be kept on the host: the files `[program.secrets]` names.
//!
//! A value file must be the user's own (owned by the user who runs berm), private (no bit
//! for group or others, as ssh wants of a key: 0600 and 0400 both pass) and outside berm's
//! own directories, which hold the host's signing key (`$XDG_CONFIG_HOME/berm`, default
//! `~/.config/berm`) and bermd's state and secret store (`$BERM_HOME`, default `~/.berm`):
//! a `berm.toml` must not be able to send those, or another program's stored secret,
//! to a host of its choosing. The owner and mode are those of the file a path finally leads
//! to, so a Kubernetes Secret volume (`defaultMode: 0400`, files reached through kubelet's
//! `..data` links) is admitted as it is mounted.
//!
//! [`check_path`] is what can be said of the path alone (at load, before the file exists);
//! [`open`] checks the opened file itself, each time a value is read.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a value file as kubelet writes a Secret volume for a pod that runs berm as a
/// non-root user with `fsGroup` is admitted: see [`admit_pod_secret_volumes`].
static POD_SECRET_VOLUMES: AtomicBool = AtomicBool::new(false);

/// Also admit, from now on in this process, a value file as kubelet writes a Secret volume
/// for a pod whose user is not root and whose `fsGroup` is berm's own group (`bermd
/// --pod-secret-volumes`): owned by root, its group berm's effective gid, mode 0440 at most
/// (read for root and that group; write and others nothing). kubelet can write no file a
/// non-root pod user owns, so without this such a pod cannot be given secret files at all.
/// Off by default: outside a pod a root-owned file readable by one's group is not one's own
/// private file. Never for berm run as root, which owns its files already.
pub fn admit_pod_secret_volumes(admit: bool) {
    POD_SECRET_VOLUMES.store(admit, Ordering::Relaxed);
}

/// Why a secret's value file is refused. Every message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file lies in one of berm's own directories.
    #[error(
        "{}{via} is inside {dir} ({what}): keep secret values out of berm's own directories, \
         e.g. run `mkdir -m 700 ~/.secrets && mv {} ~/.secrets/` and name the file there",
        path.display(),
        path.display(),
        dir = dir.display()
    )]
    InsideBerm {
        /// The file as named.
        path: PathBuf,
        /// ` (through links: TARGET)` when the path leads elsewhere, else empty.
        via: String,
        /// The berm directory it is in.
        dir: PathBuf,
        /// What that directory holds.
        what: &'static str,
    },
    /// The file cannot be opened or examined.
    #[error("{}: cannot read it: {source}", path.display())]
    Io {
        /// The file as named.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory or a special file.
    #[error("{}{via}: not a regular file", path.display())]
    NotFile {
        /// The file as named.
        path: PathBuf,
        /// ` (through links: TARGET)` when the path leads elsewhere, else empty.
        via: String,
    },
    /// Someone else's file.
    #[error(
        "{}{via} is owned by uid {owner}, not by uid {user}, who runs berm: run `chown {user} {}` \
         (or keep the value in a file of your own)",
        path.display(),
        path.display()
    )]
    NotOwned {
        /// The file as named.
        path: PathBuf,
        /// ` (through links: TARGET)` when the path leads elsewhere, else empty.
        via: String,
        /// Its owner.
        owner: u32,
        /// The user running berm.
        user: u32,
    },
    /// Group or others may read (or write) it.
    #[error(
        "{}{via} has mode {mode:03o}, open to group or others: run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Open {
        /// The file as named.
        path: PathBuf,
        /// ` (through links: TARGET)` when the path leads elsewhere, else empty.
        via: String,
        /// Its permission bits.
        mode: u32,
    },
}

/// berm's own directories, each with what it holds: both the configured and the default
/// place of each (`$XDG_CONFIG_HOME/berm` and `~/.config/berm`; `$BERM_HOME` and `~/.berm`),
/// since berm run one way or another may keep its key or state in either.
pub fn berm_dirs() -> Vec<(PathBuf, &'static str)> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let home = var("HOME");
    const KEY: &str = "berm's configuration and the host's signing key";
    const STATE: &str = "bermd's state and its secret store";
    let mut dirs = Vec::new();
    if let Some(config) = var("XDG_CONFIG_HOME") {
        dirs.push((config.join("berm"), KEY));
    }
    if let Some(home) = &home {
        dirs.push((home.join(".config").join("berm"), KEY));
        dirs.push((home.join(".berm"), STATE));
    }
    if let Some(state) = var("BERM_HOME") {
        dirs.push((state, STATE));
    }
    dirs
}

/// ` (through links: TARGET)` when `real` is not `path`.
fn via(path: &Path, real: &Path) -> String {
    if real == path {
        String::new()
    } else {
        format!(" (through links: {})", real.display())
    }
}

/// Refuses a `path` that is, or leads through links to, a file inside one of `dirs`
/// ([`berm_dirs`]). A file that does not exist yet is judged by its path.
pub fn check_path_in(path: &Path, dirs: &[(PathBuf, &'static str)]) -> Result<(), SecretFileError> {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for (dir, what) in dirs {
        let real_dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        if path.starts_with(dir) || real.starts_with(&real_dir) || real.starts_with(dir) {
            return Err(SecretFileError::InsideBerm {
                path: path.to_path_buf(),
                via: via(path, &real),
                dir: dir.clone(),
                what,
            });
        }
    }
    Ok(())
}

/// [`check_path_in`] berm's own directories as the environment names them.
pub fn check_path(path: &Path) -> Result<(), SecretFileError> {
    check_path_in(path, &berm_dirs())
}

/// Opens the value file `path` for reading once it is known to be a regular file, outside
/// berm's own directories, owned by the user who runs berm and with no bit for group or
/// others. Owner and mode are read from the opened file, so what is checked is what is read.
pub fn open(path: &Path) -> Result<File, SecretFileError> {
    check_path(path)?;
    let io = |source| SecretFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let via = via(path, &real);
    let path = path.to_path_buf();
    if !meta.is_file() {
        return Err(SecretFileError::NotFile { path, via });
    }
    let user = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o777;
    if POD_SECRET_VOLUMES.load(Ordering::Relaxed)
        && user != 0
        && meta.uid() == 0
        && meta.gid() == rustix::process::getegid().as_raw()
        && mode & !0o440 == 0
    {
        return Ok(file);
    }
    if meta.uid() != user {
        return Err(SecretFileError::NotOwned {
            path,
            via,
            owner: meta.uid(),
            user,
        });
    }
    if mode & 0o077 != 0 {
        return Err(SecretFileError::Open { path, via, mode });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn write(path: &Path, mode: u32) {
        std::fs::write(path, "value\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_private_file_of_the_user_is_admitted() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o600, 0o400] {
            let file = dir.path().join(format!("token-{mode:o}"));
            write(&file, mode);
            open(&file).unwrap();
        }
    }

    #[test]
    fn a_file_open_to_group_or_others_is_refused_saying_chmod() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        for mode in [0o640, 0o604, 0o620] {
            write(&file, mode);
            assert_eq!(
                open(&file).unwrap_err().to_string(),
                format!(
                    "{} has mode {mode:03o}, open to group or others: run `chmod 600 {}`",
                    file.display(),
                    file.display()
                )
            );
        }
    }

    #[test]
    fn a_file_of_another_user_is_refused_saying_chown() {
        let user = rustix::process::geteuid().as_raw();
        if user != 0 {
            // Only root can give a file away; the rule is the same for everyone.
            eprintln!("skipped: needs root to chown a file to another uid");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        write(&file, 0o600);
        std::os::unix::fs::chown(&file, Some(12345), None).unwrap();
        assert_eq!(
            open(&file).unwrap_err().to_string(),
            format!(
                "{} is owned by uid 12345, not by uid 0, who runs berm: run `chown 0 {}` (or keep \
                 the value in a file of your own)",
                file.display(),
                file.display()
            )
        );
    }

    /// A Kubernetes Secret volume holding `TOKEN` as kubelet lays it out: the mount, the
    /// timestamped directory, and `mount/TOKEN -> ..data/TOKEN` with
    /// `..data -> ..<timestamp>`; the file of mode 0400, owned by the current uid.
    fn kubelet_volume() -> (tempfile::TempDir, PathBuf, PathBuf) {
        use std::os::unix::fs::symlink;
        let mount = tempfile::tempdir().unwrap();
        let stamp = mount.path().join("..2026_01_01_00_00_00.123456789");
        std::fs::create_dir(&stamp).unwrap();
        write(&stamp.join("TOKEN"), 0o400);
        symlink(
            "..2026_01_01_00_00_00.123456789",
            mount.path().join("..data"),
        )
        .unwrap();
        let token = mount.path().join("TOKEN");
        symlink("..data/TOKEN", &token).unwrap();
        (mount, stamp, token)
    }

    /// A Kubernetes Secret volume as kubelet lays it out: `NAME -> ..data/NAME`,
    /// `..data -> ..<timestamp>`, the file of `defaultMode: 0400` owned by the pod's uid.
    #[test]
    fn a_kubernetes_secret_volume_of_mode_0400_is_admitted() {
        let (mount, stamp, token) = kubelet_volume();
        let mut value = String::new();
        std::io::Read::read_to_string(&mut open(&token).unwrap(), &mut value).unwrap();
        assert_eq!(value, "value\n");
        // The target's mode decides, not the link's (0777): an open target is refused, named.
        std::fs::set_permissions(stamp.join("TOKEN"), std::fs::Permissions::from_mode(0o440))
            .unwrap();
        let real = std::fs::canonicalize(stamp.join("TOKEN")).unwrap();
        assert_eq!(
            open(&token).unwrap_err().to_string(),
            format!(
                "{} (through links: {}) has mode 440, open to group or others: run `chmod 600 {}`",
                token.display(),
                real.display(),
                token.display()
            )
        );
        // A volume mounted inside berm's own directories is refused like any file there.
        let dirs = [(
            mount.path().to_path_buf(),
            "bermd's state and its secret store",
        )];
        assert_eq!(
            check_path_in(&token, &dirs).unwrap_err().to_string(),
            format!(
                "{} (through links: {}) is inside {} (bermd's state and its secret store): keep \
                 secret values out of berm's own directories, e.g. run `mkdir -m 700 ~/.secrets \
                 && mv {} ~/.secrets/` and name the file there",
                token.display(),
                real.display(),
                mount.path().display(),
                token.display()
            )
        );
    }

    /// The volume's file as kubelet writes it is owned by whoever kubelet runs as; berm run
    /// by another uid refuses it, naming both uids.
    #[test]
    fn a_kubernetes_secret_volume_of_another_uid_is_refused_saying_chown() {
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("skipped: needs root to chown a file to another uid");
            return;
        }
        let (_mount, stamp, token) = kubelet_volume();
        std::os::unix::fs::chown(stamp.join("TOKEN"), Some(10000), None).unwrap();
        let real = std::fs::canonicalize(&token).unwrap();
        assert_eq!(
            open(&token).unwrap_err().to_string(),
            format!(
                "{} (through links: {}) is owned by uid 10000, not by uid 0, who runs berm: run \
                 `chown 0 {}` (or keep the value in a file of your own)",
                token.display(),
                real.display(),
                token.display()
            )
        );
    }

    /// kubelet's Secret volume for a non-root pod with `fsGroup`: root's file, the pod's
    /// group, 0440. Admitted only with the opt-in, only as that shape, never to root.
    #[test]
    fn a_pod_secret_volume_is_admitted_only_when_asked_and_only_as_kubelet_writes_it() {
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("skipped: needs root to make a file root's and to change uids");
            return;
        }
        let (_mount, stamp, token) = kubelet_volume();
        let file = stamp.join("TOKEN");
        std::os::unix::fs::chown(&file, Some(0), Some(4242)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o440)).unwrap();
        // The volume is reachable by the child's uid, as kubelet's mounts are.
        std::fs::set_permissions(_mount.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let check = |admit: bool, gid: u32, mode: u32| {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            child_admits(&token, admit, gid)
        };
        assert!(!check(false, 4242, 0o440), "off by default");
        assert!(check(true, 4242, 0o440));
        assert!(check(true, 4242, 0o040), "group read only");
        assert!(!check(true, 4243, 0o440), "another group's file");
        assert!(!check(true, 4242, 0o460), "group may write");
        assert!(!check(true, 4242, 0o444), "others may read");
    }

    /// Whether `open(token)` admits the file in a child test process running as uid 4000
    /// and gid `gid` (the opt-in and the ids are process-wide), with the opt-in `admit`.
    fn child_admits(token: &Path, admit: bool, gid: u32) -> bool {
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "secret_file::tests::pod_volume_child",
                "--nocapture",
                "--include-ignored",
            ])
            .env("BERM_TEST_POD_TOKEN", token)
            .env("BERM_TEST_POD_ADMIT", if admit { "1" } else { "0" })
            .uid(4000)
            .gid(gid)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("pod-volume:"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout.contains("pod-volume: admitted")
    }

    /// The child half of the test above: run only through it.
    #[test]
    #[ignore = "run by a_pod_secret_volume_is_admitted_only_when_asked_and_only_as_kubelet_writes_it"]
    fn pod_volume_child() {
        let Ok(token) = std::env::var("BERM_TEST_POD_TOKEN") else {
            return;
        };
        admit_pod_secret_volumes(std::env::var("BERM_TEST_POD_ADMIT").as_deref() == Ok("1"));
        match open(Path::new(&token)) {
            Ok(_) => println!("pod-volume: admitted"),
            Err(e) => println!("pod-volume: refused: {e}"),
        }
    }

    #[test]
    fn a_directory_is_refused_as_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            open(dir.path()).unwrap_err().to_string(),
            format!("{}: not a regular file", dir.path().display())
        );
    }

    #[test]
    fn a_file_in_berms_own_directories_is_refused_also_through_links() {
        let home = tempfile::tempdir().unwrap();
        let config = home.path().join(".config/berm");
        std::fs::create_dir_all(&config).unwrap();
        let key = config.join("host-key.pem");
        write(&key, 0o600);
        let dirs = [(
            config.clone(),
            "berm's configuration and the host's signing key",
        )];
        assert!(matches!(
            check_path_in(&key, &dirs),
            Err(SecretFileError::InsideBerm { .. })
        ));
        let link = home.path().join("innocent");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        let err = check_path_in(&link, &dirs).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "{} (through links: {}) is inside {}",
                link.display(),
                key.display(),
                config.display()
            )),
            "{err}"
        );
        check_path_in(&home.path().join("elsewhere"), &dirs).unwrap();
    }
}
