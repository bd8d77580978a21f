//! Arbitrary text as the `berm.manifest` section of a program image (the JSON the SDK writes,
//! which a hostile publisher writes as it likes), wrapped in an otherwise valid module so
//! that every input reaches the manifest reader rather than wasmparser's first refusal.
//!
//! Input: the section's bytes, then optionally a `0xff` byte and a URI a client asks to read.
//! Checked: reading and checking never panic; a manifest compared with itself shows no
//! change (what `berm deploy` and `bermd --app` show a person before an upgrade); and for a
//! resource template that passed the check, a URI it matches is exactly the template with
//! the matched values put back, each one non-empty and never crossing `/`, `?` or `#`.
#![no_main]

use berm_manifest::Manifest;
use berm_manifest::serves::{Segment, Serves, match_template, template_segments};
use libfuzzer_sys::fuzz_target;

/// A module holding nothing but one custom section named `name` with `data`.
fn module_with_section(name: &str, data: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut payload = Vec::with_capacity(data.len() + name.len() + 5);
    leb128(name.len(), &mut payload);
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    module.push(0);
    leb128(payload.len(), &mut module);
    module.extend_from_slice(&payload);
    module
}

fuzz_target!(|data: &[u8]| {
    let (section, uri) = match data.iter().position(|&b| b == 0xff) {
        Some(at) => (&data[..at], std::str::from_utf8(&data[at + 1..]).ok()),
        None => (data, None),
    };
    let module = module_with_section(berm_abi::MANIFEST_SECTION, section);
    let Ok(mut manifest) = Manifest::from_image(&module) else {
        return;
    };
    // The module exports what the manifest declares, so that `check` goes on to the
    // manifest's own rules (names, schemas, resources, prompts, calls).
    manifest.tool_exports = manifest.tools.iter().map(|t| t.name.clone()).collect();
    manifest.exports_memory = true;
    let checked = manifest.check();
    let changes = berm_manifest::upgrade::compare(&manifest, &manifest, None);
    assert!(
        changes.is_empty(),
        "a manifest differs from itself: {changes:?}"
    );
    let (Ok(()), Some(uri)) = (checked, uri) else {
        return;
    };
    for tool in &manifest.tools {
        let Some(Serves::ResourceTemplate { uri_template, .. }) = &tool.serves else {
            continue;
        };
        let segments = template_segments(uri_template)
            .unwrap_or_else(|e| panic!("checked template {uri_template:?} does not parse: {e}"));
        let Some(values) = match_template(&segments, uri) else {
            continue;
        };
        let mut expanded = String::with_capacity(uri.len());
        let mut next = values.iter();
        for segment in &segments {
            match segment {
                Segment::Literal(text) => expanded.push_str(text),
                Segment::Variable(_) => {
                    let value = next.next().expect("one value per variable");
                    assert!(
                        !value.is_empty() && !value.contains(['/', '?', '#']),
                        "{uri_template:?} matched {uri:?} with value {value:?}"
                    );
                    expanded.push_str(value);
                }
            }
        }
        assert!(next.next().is_none(), "more values than variables");
        assert_eq!(expanded, uri, "{uri_template:?} matched {uri:?}");
    }
});
