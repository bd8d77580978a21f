//! `Manifest::from_image` on the example programs, and on hostile bytes.

use berm_manifest::{Import, Manifest};
use proptest::prelude::*;

use berm_fixtures::example as app;

fn import(module: &str, name: &str) -> Import {
    Import {
        module: module.into(),
        name: name.into(),
    }
}

#[test]
fn echo_declares_its_tools_and_reaches_for_nothing() {
    let m = Manifest::from_image(&app("echo")).unwrap();
    m.check().unwrap();
    assert_eq!(m.abi, 1);
    assert_eq!(m.description, "Says back what it is given.");
    assert!(
        m.usage.starts_with("Reach for echo to check"),
        "{}",
        m.usage
    );
    let names: Vec<&str> = m.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "reverse", "fail"]);
    // It never reads what a client answered; the conformance app's asking tools do.
    assert!(!m.reads_input);
    assert!(
        Manifest::from_image(&app("conformance"))
            .unwrap()
            .reads_input
    );
    let echo = m.tool("echo").unwrap();
    assert_eq!(echo.description, "Repeat a message, unchanged.");
    assert_eq!(
        echo.input_schema,
        serde_json::json!({
            "type": "object",
            "properties": {"message": {"type": "string", "description": "the text to repeat"}},
            "required": ["message"],
            "additionalProperties": false
        })
    );
    assert_eq!(
        echo.annotations,
        Some(serde_json::json!({"readOnlyHint": true, "idempotentHint": true}))
    );
    assert!(m.syscalls.is_empty(), "{:?}", m.syscalls);
    assert!(m.calls.is_empty());
}

#[test]
fn imports_are_reported_as_fact() {
    let hostile = Manifest::from_image(&app("hostile")).unwrap();
    assert_eq!(hostile.syscalls, [import("fs", "read")]);
    let flood = hostile.tool("flood").unwrap();
    assert_eq!(
        flood.input_schema["properties"]["bytes"],
        serde_json::json!({"type": "integer", "minimum": 0, "description": "how much to return"})
    );

    let compose = Manifest::from_image(&app("compose")).unwrap();
    assert_eq!(compose.syscalls, [import("berm", "call")]);
    assert_eq!(compose.calls, ["echo", "compose", "hostile", "files"]);
    let recurse = compose.tool("recurse").unwrap();
    assert_eq!(
        recurse.input_schema.get("required"),
        None,
        "Option parameters are not required"
    );
    let relay = compose.tool("relay").unwrap();
    assert_eq!(
        relay.input_schema["properties"]["args"]["description"],
        "the arguments object"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Manifest::from_image(&bytes);
        let mut with_magic = b"\0asm\x01\0\0\0".to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = Manifest::from_image(&with_magic);
    }

    #[test]
    fn truncated_and_corrupted_programs_never_panic(cut in 0usize..1_000_000, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        let mut image = app("echo");
        for (at, value) in flips {
            let at = at % image.len();
            image[at] = value;
        }
        image.truncate(cut % (image.len() + 1));
        if let Ok(m) = Manifest::from_image(&image) {
            let _ = m.check();
        }
    }
}
