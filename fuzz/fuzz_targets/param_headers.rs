//! `Mcp-Param-*` headers against a tool's `x-mcp-header` schema and a call's arguments: the
//! check must never panic, must pass a conforming client, and must pass a made-up header
//! exactly when it says what the body says. The harness is bermd's own
//! (`berm_service::fuzzing::param_headers`), which says how the bytes are read.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| berm_service::fuzzing::param_headers(data));
