//! Where a secret's value may be kept on the host: the files `[program.secrets]` names.
//!
//! A value file must be the user's own (owned by the user who runs berm), private (no bit
//! for group or others, as ssh wants of a key: 0600 and 0400 both pass), of one name (no
//! second hard link), and none of berm's own ([`crate::own_paths`]): not in berm's home
//! however it was given (`--home`, `$BERM_HOME`, `~/.berm`), nor in the directory of the
//! host's signing key, nor any file berm reads for itself (`bermd --ask-key`,
//! `--http-token-file`, `--extra-ca`, …). A `berm.toml` must not be able to send those, or
//! another program's stored secret, to a host of its choosing. The owner and mode are those
//! of the file a path finally leads to, so a Kubernetes Secret volume (`defaultMode: 0400`,
//! files reached through kubelet's `..data` links) is admitted as it is mounted.
//!
//! [`check_path`] is what can be said of the path alone (at load, before the file exists).
//! [`open`] judges the opened file itself, each time a value is read: the path is resolved
//! once, the directory it leads to is opened and the file opened in it without following a
//! link; then the file, and every directory above it — walked up by `..` from the opened
//! directory, never by name — are compared by (device, inode) with berm's own, and its real
//! place (`/proc/self/fd`) by path. A link swapped in after the resolving leads to a file
//! that is refused, not read, and a bind mount of berm's home is berm's home still.

use std::fs::{File, Metadata};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags};

use crate::own_paths::{self, OwnPath};

/// Whether a value file as kubelet writes a Secret volume for a pod that runs berm as a
/// non-root user with `fsGroup` is admitted: see [`admit_pod_secret_volumes`].
static POD_SECRET_VOLUMES: AtomicBool = AtomicBool::new(false);

/// How a directory is opened to walk up from it: by `O_PATH` where there is one, which
/// needs no read permission and which Landlock does not count as reading it.
#[cfg(any(target_os = "linux", target_os = "android"))]
const DIR: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// How a value file is opened: never through a link (the path was resolved already), and
/// without waiting on a FIFO put in its place (it is then refused as not a regular file).
const FILE: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Most directories walked up from a value file to the root; past it the file is refused.
const MAX_DEPTH: usize = 4096;

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
        what: String,
    },
    /// The file is one berm reads for itself (a key, a token, a CA bundle, …).
    #[error(
        "{}{via} is {} ({what}), a file berm reads for itself: keep each secret's value in a \
         file of its own, e.g. in ~/.secrets/ (`mkdir -m 700 ~/.secrets`), and name that",
        path.display(),
        own.display()
    )]
    BermsOwn {
        /// The file as named.
        path: PathBuf,
        /// ` (through links: TARGET)` when the path leads elsewhere, else empty.
        via: String,
        /// berm's file, as berm names it.
        own: PathBuf,
        /// What that file is.
        what: String,
    },
    /// The file has more than one name, so it may be a second name for a file of berm's own.
    #[error(
        "{}{via} has {links} names (hard links), so it may be another name for a file of \
         berm's own: copy the value into a file with one name (`cp {} NEW && rm {}`, then \
         name NEW)",
        path.display(),
        path.display(),
        path.display()
    )]
    Linked {
        /// The file as named.
        path: PathBuf,
        /// ` (through links: TARGET)` when the path leads elsewhere, else empty.
        via: String,
        /// How many names it has.
        links: u64,
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

/// ` (through links: TARGET)` when `real` is not `path`.
fn via(path: &Path, real: &Path) -> String {
    if real == path {
        String::new()
    } else {
        format!(" (through links: {})", real.display())
    }
}

/// A file's identity: (device, inode), which no second name, link or bind mount changes.
type Id = (u64, u64);

fn id(meta: &Metadata) -> Id {
    (meta.dev(), meta.ino())
}

/// berm's own paths that exist, by identity.
fn own_ids(own: &[OwnPath]) -> Vec<(Id, &OwnPath)> {
    own.iter()
        .filter_map(|o| std::fs::metadata(&o.path).ok().map(|meta| (id(&meta), o)))
        .collect()
}

/// Refuses `path`, which really is `real`, when it is one of `own` or lies under one, by
/// path: as named, and as the links lead.
fn refuse_by_path(path: &Path, real: &Path, own: &[OwnPath]) -> Result<(), SecretFileError> {
    for o in own {
        let real_own = std::fs::canonicalize(&o.path).unwrap_or_else(|_| o.path.clone());
        let is_dir = std::fs::metadata(&real_own).is_ok_and(|m| m.is_dir());
        if !is_dir && (path == o.path || real == real_own) {
            return Err(SecretFileError::BermsOwn {
                path: path.to_path_buf(),
                via: via(path, real),
                own: o.path.clone(),
                what: o.what.clone(),
            });
        }
        if path.starts_with(&o.path) || real.starts_with(&real_own) || real.starts_with(&o.path) {
            return Err(SecretFileError::InsideBerm {
                path: path.to_path_buf(),
                via: via(path, real),
                dir: o.path.clone(),
                what: o.what.clone(),
            });
        }
    }
    Ok(())
}

/// Refuses `path`, which really is `real`, when it is one of `own` or lies in one of them,
/// by path and, as far as it exists, by identity (which a bind mount or a second name for a
/// directory does not change). A file that does not exist yet is judged by its path.
pub fn check_path_in(path: &Path, own: &[OwnPath]) -> Result<(), SecretFileError> {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    refuse_by_path(path, &real, own)?;
    let Ok(meta) = std::fs::metadata(&real) else {
        return Ok(());
    };
    let ids = own_ids(own);
    let find = |wanted: Id| ids.iter().find(|(i, _)| *i == wanted).map(|(_, o)| *o);
    if let Some(o) = find(id(&meta)).filter(|_| !meta.is_dir()) {
        return Err(SecretFileError::BermsOwn {
            path: path.to_path_buf(),
            via: via(path, &real),
            own: o.path.clone(),
            what: o.what.clone(),
        });
    }
    for dir in real.ancestors() {
        if let Some(o) = std::fs::metadata(dir).ok().and_then(|m| find(id(&m))) {
            return Err(SecretFileError::InsideBerm {
                path: path.to_path_buf(),
                via: via(path, &real),
                dir: o.path.clone(),
                what: o.what.clone(),
            });
        }
    }
    Ok(())
}

/// [`check_path_in`] berm's own paths ([`own_paths::all`]).
pub fn check_path(path: &Path) -> Result<(), SecretFileError> {
    check_path_in(path, &own_paths::all())
}

/// Opens the value file `path` for reading once it is known to be a regular file of one
/// name, none of berm's own ([`own_paths::all`]) nor in any of berm's own directories,
/// owned by the user who runs berm and with no bit for group or others. All of it is judged
/// on the opened file (see the module's doc), so what is checked is what is read.
pub fn open(path: &Path) -> Result<File, SecretFileError> {
    open_in(path, &own_paths::all(), || {})
}

/// [`open`] against `own`, running `between` once the path is resolved and before anything
/// is opened: where a link swapped in would fool a check made on the path.
fn open_in(path: &Path, own: &[OwnPath], between: impl FnOnce()) -> Result<File, SecretFileError> {
    // What the path alone says, for the clearest message; the rule is held below.
    check_path_in(path, own)?;
    let io = |source: std::io::Error| SecretFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let real = std::fs::canonicalize(path).map_err(io)?;
    let not_file = |real: &Path| SecretFileError::NotFile {
        path: path.to_path_buf(),
        via: via(path, real),
    };
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(not_file(&real));
    };
    between();
    let dir = rustix::fs::open(parent, DIR, Mode::empty()).map_err(|e| io(e.into()))?;
    let file = match rustix::fs::openat(&dir, name, FILE, Mode::empty()) {
        Ok(file) => File::from(file),
        // A link put where the resolved file was.
        Err(rustix::io::Errno::LOOP) => return Err(not_file(&real)),
        Err(e) => return Err(io(e.into())),
    };
    let meta = file.metadata().map_err(io)?;
    let real = location(&file).unwrap_or(real);
    let via = via(path, &real);
    if !meta.is_file() {
        return Err(not_file(&real));
    }
    refuse_by_path(path, &real, own)?;
    refuse_by_identity(path, &via, &meta, dir, own)?;
    let path = path.to_path_buf();
    if meta.nlink() > 1 {
        return Err(SecretFileError::Linked {
            path,
            via,
            links: meta.nlink(),
        });
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

/// Refuses the opened file `file` (named `path`), found in the opened directory `dir`, when
/// it is one of `own` or when `dir` or any directory above it is: walked up by `..` from the
/// descriptor, so no name can be changed underneath, to the root (whose `..` is itself).
fn refuse_by_identity(
    path: &Path,
    via: &str,
    file: &Metadata,
    dir: OwnedFd,
    own: &[OwnPath],
) -> Result<(), SecretFileError> {
    let ids = own_ids(own);
    let find = |wanted: Id| ids.iter().find(|(i, _)| *i == wanted).map(|(_, o)| *o);
    if let Some(o) = find(id(file)) {
        return Err(SecretFileError::BermsOwn {
            path: path.to_path_buf(),
            via: via.to_string(),
            own: o.path.clone(),
            what: o.what.clone(),
        });
    }
    let io = |source: std::io::Error| SecretFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut dir = File::from(dir);
    let mut below = None;
    for _ in 0..MAX_DEPTH {
        let here = id(&dir.metadata().map_err(io)?);
        if below == Some(here) {
            return Ok(());
        }
        if let Some(o) = find(here) {
            return Err(SecretFileError::InsideBerm {
                path: path.to_path_buf(),
                via: via.to_string(),
                dir: o.path.clone(),
                what: o.what.clone(),
            });
        }
        below = Some(here);
        dir = File::from(
            rustix::fs::openat(&dir, "..", DIR, Mode::empty()).map_err(|e| io(e.into()))?,
        );
    }
    Err(io(std::io::Error::other(format!(
        "more than {MAX_DEPTH} directories above it"
    ))))
}

/// Where the opened `file` really is, as the kernel says (`/proc/self/fd`); `None` where it
/// cannot say, and the resolved path stands.
#[cfg(target_os = "linux")]
fn location(file: &File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
        .filter(|p| p.is_absolute())
}

/// Where the opened file really is: not asked outside Linux, where the resolved path stands
/// (the identities are compared all the same).
#[cfg(not(target_os = "linux"))]
fn location(_file: &File) -> Option<PathBuf> {
    None
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn own(path: &Path, what: &str) -> OwnPath {
        OwnPath {
            path: path.to_path_buf(),
            what: what.to_string(),
        }
    }

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
        let dirs = [own(mount.path(), "bermd's state and its secret store")];
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
        let dirs = [own(
            &config,
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

    /// A home given any way (here: a directory registered as bermd's `--home` would be)
    /// holds another program's stored secret: refused by path, through a link, and when
    /// the path is resolved before a link is swapped in on the way to it.
    #[test]
    fn a_link_swapped_after_the_check_is_refused() {
        use std::os::unix::fs::symlink;
        let top = tempfile::tempdir().unwrap();
        let home = top.path().join("home");
        let stored = home.join("secrets/other");
        std::fs::create_dir_all(&stored).unwrap();
        write(&stored.join("TOKEN"), 0o600);
        let own = [own(&home, "bermd's state and its secret store")];
        // The user's own directory, reached through a link the folder's author controls.
        let mine = top.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        write(&mine.join("TOKEN"), 0o600);
        let link = top.path().join("link");
        symlink(&mine, &link).unwrap();
        let named = link.join("TOKEN");
        open_in(&named, &own, || {}).unwrap();
        // Between resolving (to mine/TOKEN) and opening, `mine` becomes a link into the home.
        let swap = || {
            std::fs::rename(&mine, top.path().join("mine-away")).unwrap();
            symlink(&stored, &mine).unwrap();
        };
        let err = open_in(&named, &own, swap).unwrap_err();
        assert!(
            matches!(&err, SecretFileError::InsideBerm { dir, .. } if *dir == home),
            "{err}"
        );
        assert!(
            err.to_string().starts_with(&format!(
                "{} (through links: {}) is inside {} (bermd's state and its secret store)",
                named.display(),
                std::fs::canonicalize(stored.join("TOKEN"))
                    .unwrap()
                    .display(),
                home.display()
            )),
            "{err}"
        );
    }

    /// A file berm reads for itself (a registered `--ask-key`, say) is refused by name,
    /// through a link and through a second hard link; a second hard link to a file in berm's
    /// home is refused as having two names.
    #[test]
    fn berms_own_files_and_hard_links_are_refused() {
        let top = tempfile::tempdir().unwrap();
        let key = top.path().join("ask.key");
        write(&key, 0o600);
        let home = top.path().join("home");
        std::fs::create_dir_all(home.join("secrets/other")).unwrap();
        let stored = home.join("secrets/other/TOKEN");
        write(&stored, 0o600);
        let own = [
            own(&key, "the ask key (--ask-key)"),
            own(&home, "bermd's state and its secret store"),
        ];
        assert_eq!(
            open_in(&key, &own, || {}).unwrap_err().to_string(),
            format!(
                "{} is {} (the ask key (--ask-key)), a file berm reads for itself: keep each \
                 secret's value in a file of its own, e.g. in ~/.secrets/ (`mkdir -m 700 \
                 ~/.secrets`), and name that",
                key.display(),
                key.display()
            )
        );
        let link = top.path().join("soft");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        assert!(matches!(
            open_in(&link, &own, || {}),
            Err(SecretFileError::BermsOwn { .. })
        ));
        let hard = top.path().join("hard");
        std::fs::hard_link(&key, &hard).unwrap();
        assert!(matches!(
            open_in(&hard, &own, || {}),
            Err(SecretFileError::BermsOwn { .. })
        ));
        let hard = top.path().join("hard-stored");
        std::fs::hard_link(&stored, &hard).unwrap();
        assert_eq!(
            open_in(&hard, &own, || {}).unwrap_err().to_string(),
            format!(
                "{} has 2 names (hard links), so it may be another name for a file of berm's \
                 own: copy the value into a file with one name (`cp {} NEW && rm {}`, then \
                 name NEW)",
                hard.display(),
                hard.display(),
                hard.display()
            )
        );
    }

    /// A FIFO put where a value file was is refused without waiting for a writer.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("token");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert_eq!(
            open(&fifo).unwrap_err().to_string(),
            format!("{}: not a regular file", fifo.display())
        );
    }
}
