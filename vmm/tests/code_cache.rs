//! The code cache (`<artifact store>/code`) through `berm-vmm run`: the guest maps what is
//! cached there as native code, so berm-vmm uses only a directory nobody but the user could
//! have written, and refuses a run with apps otherwise (exit 5), before it looks for a
//! hypervisor, makes the run dir or compiles anything.
//!
//! Nothing here boots: the kernel and rootfs are placeholders, and `--hypervisor qemu` is
//! asked for with neither QEMU nor vhost-device-vsock to be found (an empty `PATH`, no
//! `BERM_QEMU`, `BERM_VHOST_DEVICE_VSOCK` or cache), so a run the cache lets through ends at
//! `no_hypervisor` (6).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Vmm, first_host_event, host_event};

/// Where a run's inputs are: an app folder, placeholder artifacts, a host key, an empty
/// `PATH` directory.
struct Inputs {
    tmp: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let app = tmp.path().join("notes");
        std::fs::create_dir(&app).unwrap();
        std::fs::write(
            app.join("notes.wasm"),
            berm_fixtures::wat_program(&["add"], &[], ""),
        )
        .unwrap();
        std::fs::write(
            app.join("berm.toml"),
            "name = \"notes\"\n\n[[program]]\nname = \"notes\"\nwasm = \"notes.wasm\"\n",
        )
        .unwrap();
        for file in ["vmlinux", "rootfs.erofs"] {
            std::fs::write(tmp.path().join(file), b"not a kernel or a rootfs").unwrap();
        }
        std::fs::create_dir(tmp.path().join("bin")).unwrap();
        Self { tmp }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `berm-vmm run --app notes` with `envs` (and without the variables that name a store
    /// unless `envs` sets them), to its end: its exit code and its `exit` line's message.
    fn run(&self, envs: &[(&str, &Path)]) -> (i32, String, Vmm) {
        let (app, kernel, rootfs, key) = (
            self.path("notes"),
            self.path("vmlinux"),
            self.path("rootfs.erofs"),
            self.path("host-key.pem"),
        );
        let args: [&std::ffi::OsStr; 10] = [
            "--app".as_ref(),
            app.as_os_str(),
            "--kernel".as_ref(),
            kernel.as_os_str(),
            "--rootfs".as_ref(),
            rootfs.as_os_str(),
            "--key".as_ref(),
            key.as_os_str(),
            "--hypervisor".as_ref(),
            "qemu".as_ref(),
        ];
        let bin = self.path("bin");
        let envs: Vec<(&str, &Path)> = [("PATH", bin.as_path())]
            .into_iter()
            .chain(envs.iter().copied())
            .collect();
        let mut vmm = Vmm::start_in_without(
            tempfile::tempdir().unwrap(),
            &args,
            &envs,
            &[
                "HOME",
                "XDG_CACHE_HOME",
                "BERM_VM_ARTIFACTS",
                "BERM_CACHE",
                "BERM_QEMU",
                "BERM_VHOST_DEVICE_VSOCK",
            ],
        );
        let code = vmm.wait(Duration::from_secs(60));
        let message = first_host_event!(vmm, Exit).message;
        (code, message, vmm)
    }

    /// Runs with the artifact store `store`, which berm-vmm must refuse before anything
    /// starts: the `exit` line's message.
    fn refused(&self, store: &Path) -> String {
        let (code, message, vmm) = self.run(&[("BERM_VM_ARTIFACTS", store)]);
        assert_eq!(code, 5, "{}", vmm.stderr());
        assert!(
            host_event!(vmm.host_events(), Endpoints).is_empty(),
            "refused before the run dir: {}",
            vmm.stderr()
        );
        assert!(!vmm.run_dir.exists(), "no run dir is made");
        message
    }
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The item: the code cache lives only in a directory owned by the user, mode 0700, in a
/// path nobody else can swap; anything else is refused, naming the directory, what is wrong
/// with it and what to do — and there is no shared fallback.
#[test]
fn the_code_cache_lives_only_in_a_private_directory_of_the_user() {
    let inputs = Inputs::new();

    // No store named at all: refused, never /tmp/berm-vmm-code.
    let (code, message, vmm) = inputs.run(&[]);
    assert_eq!(code, 5, "{}", vmm.stderr());
    assert!(
        message.contains("none of BERM_VM_ARTIFACTS, XDG_CACHE_HOME or HOME is set")
            && message.contains("never falls back to a shared directory"),
        "{message}"
    );
    assert!(host_event!(vmm.host_events(), Endpoints).is_empty());

    // A fresh store: the cache is made 0700, and the run goes on (to no_hypervisor here).
    let store = inputs.path("store");
    let (code, message, vmm) = inputs.run(&[("BERM_VM_ARTIFACTS", store.as_path())]);
    assert_eq!(code, 6, "{message}: {}", vmm.stderr());
    let cache = store.join("code");
    assert_eq!(berm_fixtures::mode(&cache), 0o700);

    // Writable by others: refused and left as it is, with what was planted in it.
    set_mode(&cache, 0o777);
    let planted = cache.join("planted.cwasm");
    std::fs::write(&planted, b"native code of someone else's").unwrap();
    let message = inputs.refused(&store);
    assert!(
        message.contains(&format!("code cache {} has mode 777", cache.display()))
            && message.contains("remove it"),
        "{message}"
    );
    assert_eq!(berm_fixtures::mode(&cache), 0o777);
    assert!(planted.exists());
    std::fs::remove_file(&planted).unwrap();

    // Only readable by others (what an older berm-vmm made): nobody else could write in it,
    // so it is narrowed to 0700 and used.
    set_mode(&cache, 0o755);
    let (code, message, vmm) = inputs.run(&[("BERM_VM_ARTIFACTS", store.as_path())]);
    assert_eq!(code, 6, "{message}: {}", vmm.stderr());
    assert_eq!(berm_fixtures::mode(&cache), 0o700);

    // A link to a private directory: refused.
    let elsewhere = inputs.path("elsewhere");
    std::fs::rename(&cache, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &cache).unwrap();
    let message = inputs.refused(&store);
    assert!(message.contains("is a symbolic link"), "{message}");
    std::fs::remove_file(&cache).unwrap();
    std::fs::rename(&elsewhere, &cache).unwrap();

    // A private cache in a store others can write (they could swap the cache): refused,
    // naming the store.
    set_mode(&store, 0o777);
    let message = inputs.refused(&store);
    assert!(
        message.contains(&format!(
            "the directory above it, {}, has mode 777",
            store.display()
        )),
        "{message}"
    );
    set_mode(&store, 0o755);

    // Another user's cache (as root: handed to nobody, 65534), however private.
    if std::fs::metadata(inputs.tmp.path()).unwrap().uid() == 0 {
        std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
        let message = inputs.refused(&store);
        assert!(
            message.contains("belongs to uid 65534, not to this user (uid 0)"),
            "{message}"
        );
        assert_eq!(std::fs::metadata(&cache).unwrap().uid(), 65534);
    }
}
