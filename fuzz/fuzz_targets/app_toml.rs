//! Arbitrary bytes as an app folder's `berm.toml` (app folders are hostile: a folder
//! someone shared, a repository cloned): reading it must never panic, and what it accepts
//! must keep the folder's promises: every wasm file resolves inside the folder through
//! links, every `fs=` directory is relative, without `..` and not the data directory
//! itself, every grant reads back from the text it prints, and the limits are in range.
//!
//! The folder is made once per process under `$TMPDIR`, holding a regular file `a.wasm`, a
//! directory `sub/` with `b.wasm`, a link `out.wasm` to a file outside the folder and a link
//! `loop.wasm` to itself, so that inputs naming them reach the path checks.
#![no_main]

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use berm_abi::grant::Grant;
use libfuzzer_sys::fuzz_target;

fn folder() -> &'static Path {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("berm-fuzz-app-{}", std::process::id()));
        let dir = root.join("app");
        std::fs::create_dir_all(dir.join("sub")).expect("make the fuzz folder");
        std::fs::write(dir.join("a.wasm"), b"\0asm").expect("write a.wasm");
        std::fs::write(dir.join("sub/b.wasm"), b"\0asm").expect("write sub/b.wasm");
        std::fs::write(root.join("outside.wasm"), b"\0asm").expect("write outside.wasm");
        let _ = std::os::unix::fs::symlink("../outside.wasm", dir.join("out.wasm"));
        let _ = std::os::unix::fs::symlink("loop.wasm", dir.join("loop.wasm"));
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = folder();
    std::fs::write(dir.join(berm_app::MANIFEST), data).expect("write berm.toml");
    let Ok(app) = berm_app::load(dir) else {
        return;
    };
    // The limits become the app's cgroup: within the documented ranges, so the kernel
    // takes them (cpu.max's quota is at least 1 ms of its 100 ms period).
    let (limits, d) = (app.limits, &berm_app::defaults::CPU_MIN);
    let millicores = f64::from(limits.cpu_millicores);
    assert!(
        millicores >= d * 1000.0 && millicores <= berm_app::defaults::CPU_MAX * 1000.0,
        "cpu {millicores} millicores"
    );
    assert!(
        (berm_app::defaults::MEMORY_MB_MIN..=berm_app::defaults::MEMORY_MB_MAX)
            .contains(&limits.memory_mb)
    );
    assert!((berm_app::defaults::PIDS_MIN..=berm_app::defaults::PIDS_MAX).contains(&limits.pids));
    for program in &app.programs {
        if program.image.is_none() {
            let real = std::fs::canonicalize(&program.wasm).expect("an accepted wasm file exists");
            assert!(
                real.starts_with(&app.dir) && real.is_file(),
                "{}: {} resolves to {}, outside {}",
                program.name,
                program.wasm.display(),
                real.display(),
                app.dir.display()
            );
        }
        for grant in &program.grants {
            let again: Grant = grant
                .to_string()
                .parse()
                .expect("an accepted grant reads back");
            assert_eq!(&again, grant);
            if let Grant::Fs { dir, .. } = grant {
                assert!(
                    dir.is_relative()
                        && !dir.components().any(|c| c == Component::ParentDir)
                        && dir.components().any(|c| matches!(c, Component::Normal(_))),
                    "{}: fs={} was accepted",
                    program.name,
                    dir.display()
                );
            }
        }
    }
});
