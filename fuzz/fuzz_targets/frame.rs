//! Arbitrary bytes as a framed request from a guest: decoding must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = berm_abi::frame::decode(data);
    let _ = berm_abi::frame::decode_exact::<3>(data);
});
