//! Arbitrary bytes as a program image: reading the manifest must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(manifest) = berm_manifest::Manifest::from_image(data) {
        let _ = manifest.check();
    }
});
