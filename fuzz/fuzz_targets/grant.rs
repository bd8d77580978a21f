//! Arbitrary text as a grant (`berm deploy --grant`, `berm.toml`'s `grants`, a deployment
//! record, the microVM's measurement line): parsing must never panic, and whatever parses
//! must read back as the same grant from the text it prints and from its JSON form, since
//! the host, the guest and the record all go through that text.
#![no_main]

use berm_abi::grant::Grant;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(grant) = text.parse::<Grant>() else {
        return;
    };
    let printed = grant.to_string();
    let again: Grant = printed.parse().unwrap_or_else(|e| {
        panic!("{text:?} parsed, but its printed form {printed:?} does not: {e}")
    });
    assert_eq!(again, grant, "{text:?} printed as {printed:?}");
    let json = serde_json::to_string(&grant).expect("a grant serializes");
    let back: Grant = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("{text:?}: its JSON {json} does not read back: {e}"));
    assert_eq!(back, grant, "{text:?} through JSON {json}");
    // What a grant opens and what it says about calls must not depend on its spelling.
    assert_eq!(again.module(), grant.module());
    assert_eq!(again.is_measured(), grant.is_measured());
});
