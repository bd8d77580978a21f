//! The one rule for a host directory whose contents berm trusts because nobody else could
//! have written them: a directory (not a link to one), owned by the user, with no access for
//! group or others.
//!
//! berm-vmm applies it to a `--run-dir` it reuses and to its code cache; `berm vm logs` and
//! `berm attest NAME` apply it again to a recorded run dir before they read it, since the
//! directory a pid file names may be gone and made again by someone else since. The check is
//! on metadata the caller read (`symlink_metadata`, so a link is seen as one) and the user it
//! must belong to, so the caller names the directory in its own words.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// Why a directory is not private to the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotPrivate {
    /// It is a symbolic link (to whatever it names).
    #[error("is a symbolic link")]
    Symlink,
    /// It is something else than a directory.
    #[error("is not a directory")]
    NotADirectory,
    /// Another user owns it.
    #[error("belongs to uid {owner}, not to this user (uid {user})")]
    NotOwned {
        /// Its owner.
        owner: u32,
        /// The user it must belong to.
        user: u32,
    },
    /// Group or others have some access to it.
    #[error("has mode {mode:o}, open to group or others")]
    Open {
        /// Its permission bits (with setuid, setgid and sticky).
        mode: u32,
    },
}

/// Checks that `meta` (from `symlink_metadata`) is a directory owned by `user` with no
/// access for group or others.
///
/// # Errors
/// The first rule it breaks, in the order above.
pub fn check(meta: &Metadata, user: u32) -> Result<(), NotPrivate> {
    if meta.file_type().is_symlink() {
        return Err(NotPrivate::Symlink);
    }
    if !meta.is_dir() {
        return Err(NotPrivate::NotADirectory);
    }
    if meta.uid() != user {
        return Err(NotPrivate::NotOwned {
            owner: meta.uid(),
            user,
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(NotPrivate::Open {
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_directory_of_the_user_passes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        let me = meta.uid();
        assert_eq!(check(&meta, me), Ok(()));
        assert_eq!(
            check(&meta, me + 1),
            Err(NotPrivate::NotOwned {
                owner: me,
                user: me + 1
            })
        );
        for (mode, shown) in [(0o750, "750"), (0o705, "705"), (0o1777, "1777")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = check(&std::fs::symlink_metadata(&dir).unwrap(), me).unwrap_err();
            assert_eq!(err, NotPrivate::Open { mode });
            assert!(err.to_string().contains(&format!("mode {shown}")), "{err}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert_eq!(
            check(&std::fs::symlink_metadata(&link).unwrap(), me),
            Err(NotPrivate::Symlink)
        );
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(
            check(&std::fs::symlink_metadata(&file).unwrap(), me),
            Err(NotPrivate::NotADirectory)
        );
    }
}
