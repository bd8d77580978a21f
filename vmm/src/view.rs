//! What a vsock device sees of the host's filesystem: only the paths its policy grants.
//!
//! The process that runs the guest's vsock device (vhost-device-vsock on the QEMU path,
//! `berm-vmm krun-enter` on the libkrun path) connects to the egress dialer's sockets in the
//! run dir (`vsock.sock_<6000+i>`) whenever the guest connects out, so its allow list has
//! `connect`. Landlock does not govern connecting to a pathname Unix socket before ABI 9
//! (`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`, Linux 7.1), and seccomp cannot read the path, so on
//! the kernels berm runs on that `connect` would reach any socket of the user's: a session
//! bus, an agent, a container runtime.
//!
//! So the device runs in a mount namespace of its own, in a user namespace it owns (no
//! privilege needed, as bubblewrap does it), whose root is a fresh tmpfs holding a bind
//! mount of each path its Landlock policy grants, at the same path, and nothing else: every
//! other pathname, and with it every other socket, does not exist there (`ENOENT`). Landlock
//! still decides what it may do with the paths it sees, since its rules are on the inodes,
//! which the bind mounts keep.
//!
//! This module plans the view ([`View::of`], pure and tested) and prepares it in the parent
//! ([`PreparedView`]: C strings), so that the child applies it between fork and exec, or
//! before it confines itself, without allocating ([`isolate`]). Where the
//! kernel refuses unprivileged user namespaces (a sysctl, AppArmor's
//! `apparmor_restrict_unprivileged_userns`, a container's seccomp profile) the device runs
//! without the view, and its measurement says so (`view: host`, and the probe's connect to a
//! socket outside its policy `allowed`), which `berm attest verify` refuses.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use berm_confine::Role;
use berm_vm_protocol::host::SandboxGrants;

/// The namespace and mount calls that put a child into its view: the only `unsafe` code of
/// this feature.
#[allow(unsafe_code)]
mod sys;

/// Whether `role` runs in a [`View`]: the roles that connect to a Unix socket by pathname
/// (the vsock device of a run with an egress dialer). Every other role either has no
/// `connect` at all or connects only through descriptors it holds.
pub fn isolated(role: Role) -> bool {
    matches!(role, Role::VhostDeviceVsockEgress | Role::KrunEnterEgress)
}

/// What a confined child saw of the filesystem, as its measurement reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Only its policy's paths (the [`View`] was applied).
    PolicyPaths,
    /// The host's whole tree (no view, or it could not be applied).
    Host,
}

impl Seen {
    /// The word in the `host_sandbox` line: `policy_paths` or `host`.
    pub fn name(self) -> &'static str {
        match self {
            Self::PolicyPaths => "policy_paths",
            Self::Host => "host",
        }
    }

    /// The short word of a report line (`policy`, `host`).
    pub fn wire(self) -> &'static str {
        match self {
            Self::PolicyPaths => "policy",
            Self::Host => "host",
        }
    }

    /// A report line's word, parsed.
    pub fn of_wire(word: &[u8]) -> Option<Self> {
        match word {
            b"policy" => Some(Self::PolicyPaths),
            b"host" => Some(Self::Host),
            _ => None,
        }
    }
}

/// Why a view could not be planned or prepared.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The current directory is needed to make a relative path absolute.
    #[error("the current directory cannot be read to place {0} in the vsock device's view")]
    Cwd(PathBuf, #[source] std::io::Error),
    /// A path holds a NUL byte.
    #[error("{0} holds a NUL byte and cannot be mounted")]
    Nul(PathBuf),
    /// More paths than a view holds.
    #[error("the vsock device's policy grants {0} paths; its view holds at most {MAX_MOUNTS}")]
    TooMany(usize),
}

/// One path of the view: bind-mounted from the host at the same path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The path, absolute.
    pub path: PathBuf,
    /// Whether it is a directory (else a file or device, mounted on an empty file).
    pub dir: bool,
}

/// The planned view: the tmpfs that becomes the root is mounted on `stage` (a directory of
/// the policy, so no other place is touched), then each mount is bound into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Where the new root is put together (the run dir; only the child sees the tmpfs).
    pub stage: PathBuf,
    /// The granted paths that exist, none beneath another (a bind of the upper one already
    /// shows it), sorted.
    pub mounts: Vec<Mount>,
}

/// Whether `inner` is `outer` or beneath it, by whole components.
fn beneath(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

impl View {
    /// The view of `policy`: every path it grants (read, read-write, devices, execute) that
    /// exists, made absolute against the current directory without resolving symlinks (the
    /// child names them as the parent does), dropping any beneath another.
    pub fn of(policy: &SandboxGrants, stage: &Path) -> Result<View, ViewError> {
        let absolute =
            |p: &Path| std::path::absolute(p).map_err(|e| ViewError::Cwd(p.to_owned(), e));
        let mut paths: Vec<PathBuf> = policy
            .read
            .iter()
            .chain(&policy.read_write)
            .chain(&policy.devices)
            .chain(&policy.execute)
            .filter(|p| p.exists())
            .map(|p| absolute(p))
            .collect::<Result<_, _>>()?;
        paths.sort();
        paths.dedup();
        let mut mounts: Vec<Mount> = Vec::new();
        for path in paths {
            // Sorted: an ancestor comes before what is beneath it.
            if mounts.iter().any(|m| beneath(&path, &m.path)) {
                continue;
            }
            let dir = path.is_dir();
            mounts.push(Mount { path, dir });
        }
        Ok(View {
            stage: absolute(stage)?,
            mounts,
        })
    }

    /// The directories to make in the new root, parents first: every ancestor of each mount,
    /// and each directory mount itself. None is beneath a mount, so each is made in the tmpfs.
    pub fn directories(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for mount in &self.mounts {
            let mut at = PathBuf::from("/");
            let components: Vec<Component<'_>> = mount.path.components().collect();
            let last = components.len().saturating_sub(1);
            for (i, component) in components.into_iter().enumerate() {
                if component == Component::RootDir || (i == last && !mount.dir) {
                    continue;
                }
                at.push(component);
                if !dirs.contains(&at) {
                    dirs.push(at.clone());
                }
            }
        }
        dirs
    }
}

/// `path` beneath `stage`: where it is made before the tmpfs becomes the root.
fn staged(stage: &Path, path: &Path) -> Result<CString, ViewError> {
    let mut bytes = stage.as_os_str().as_bytes().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    CString::new(bytes).map_err(|_| ViewError::Nul(path.to_owned()))
}

fn c(path: &Path) -> Result<CString, ViewError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ViewError::Nul(path.to_owned()))
}

pub use sys::{IsolateError, MAX_MOUNTS, PreparedView, isolate, isolate_child};

impl PreparedView {
    /// Builds `view`'s strings.
    pub fn prepare(view: &View) -> Result<PreparedView, ViewError> {
        if view.mounts.len() > MAX_MOUNTS {
            return Err(ViewError::TooMany(view.mounts.len()));
        }
        let binds = view
            .mounts
            .iter()
            .map(|m| Ok((c(&m.path)?, staged(&view.stage, &m.path)?, m.dir)))
            .collect::<Result<_, ViewError>>()?;
        let dirs = view
            .directories()
            .iter()
            .map(|d| staged(&view.stage, d))
            .collect::<Result<_, _>>()?;
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let (uid, gid) = crate::sys::ids();
        // Digits and spaces hold no NUL: the defaults are never taken.
        Ok(PreparedView {
            binds,
            dirs,
            stage: c(&view.stage)?,
            cwd: c(&cwd)?,
            uid_map: CString::new(format!("{uid} {uid} 1")).unwrap_or_default(),
            gid_map: CString::new(format!("{gid} {gid} 1")).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_roles_that_connect_by_pathname_are_isolated() {
        let isolated_roles: Vec<Role> = Role::ALL.into_iter().filter(|&r| isolated(r)).collect();
        assert_eq!(
            isolated_roles,
            [Role::VhostDeviceVsockEgress, Role::KrunEnterEgress]
        );
    }

    #[test]
    fn a_view_holds_each_existing_granted_path_once_and_nothing_beneath_another() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("console.log"), b"").unwrap();
        let program = tmp.path().join("bin/device");
        std::fs::create_dir(tmp.path().join("bin")).unwrap();
        std::fs::write(&program, b"").unwrap();
        let policy = SandboxGrants {
            read: vec![tmp.path().join("absent"), run.join("console.log")],
            read_write: vec![run.clone(), run.clone()],
            devices: vec![PathBuf::from("/dev/null")],
            execute: vec![program.clone()],
            connect_tcp: false,
        };
        let view = View::of(&policy, &run).unwrap();
        assert_eq!(view.stage, run);
        let mut expected = vec![
            Mount {
                path: PathBuf::from("/dev/null"),
                dir: false,
            },
            Mount {
                path: program.clone(),
                dir: false,
            },
            Mount {
                path: run.clone(),
                dir: true,
            },
        ];
        expected.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(view.mounts, expected);
        // Every ancestor, parents first; a file mount's own name is not a directory.
        let dirs = view.directories();
        assert_eq!(dirs[0], PathBuf::from("/dev"));
        assert!(dirs.contains(&run));
        assert!(dirs.contains(&tmp.path().join("bin")));
        assert!(!dirs.contains(&program));
        assert!(!dirs.contains(&PathBuf::from("/dev/null")));
        for (i, dir) in dirs.iter().enumerate() {
            if let Some(parent) = dir.parent().filter(|p| *p != Path::new("/")) {
                let at = dirs.iter().position(|d| d == parent).unwrap();
                assert!(at < i, "{parent:?} after {dir:?}");
            }
        }
    }

    #[test]
    fn a_relative_path_is_placed_where_the_parent_sees_it() {
        let policy = SandboxGrants {
            read: vec![PathBuf::from("Cargo.toml")],
            ..SandboxGrants::default()
        };
        let view = View::of(&policy, Path::new("/")).unwrap();
        assert_eq!(
            view.mounts,
            [Mount {
                path: std::env::current_dir().unwrap().join("Cargo.toml"),
                dir: false
            }]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_names_its_landlock_abi() {
        // The host sandbox needs Landlock, and the tests run where it is.
        let abi = crate::sys::landlock_abi();
        assert!((1..100).contains(&abi), "{abi}");
    }

    #[test]
    fn a_view_of_more_paths_than_the_child_can_hold_is_refused() {
        let view = View {
            stage: PathBuf::from("/run"),
            mounts: (0..=MAX_MOUNTS)
                .map(|i| Mount {
                    path: PathBuf::from(format!("/p{i}")),
                    dir: true,
                })
                .collect(),
        };
        let err = PreparedView::prepare(&view).err().unwrap().to_string();
        assert_eq!(
            err,
            "the vsock device's policy grants 33 paths; its view holds at most 32"
        );
        let one = View {
            mounts: view.mounts[..1].to_vec(),
            ..view
        };
        let prepared = PreparedView::prepare(&one).unwrap();
        assert_eq!(prepared.binds[0].1.as_bytes(), b"/run/p0");
        assert_eq!(prepared.dirs, [CString::new("/run/p0").unwrap()]);
    }

    #[test]
    fn beneath_compares_whole_components() {
        assert!(beneath(Path::new("/usr/lib/x"), Path::new("/usr/lib")));
        assert!(beneath(Path::new("/usr/lib"), Path::new("/usr/lib")));
        assert!(!beneath(Path::new("/usr/lib64"), Path::new("/usr/lib")));
    }
}
