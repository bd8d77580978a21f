//! A client's `requestState` (MCP 2026-07-28 `berm.ask`): text a client made up must be
//! refused, never opened and never a panic. The harness is bermd's own
//! (`berm_service::fuzzing::sealed_state`): one call into its opening of a sealed state.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| berm_service::fuzzing::sealed_state(data));
