//! Fuzzes everything the host parses from a guest line stream: the bounded line splitter,
//! then each line as a control line, a logs line and (for berm-init's side) a host request.
//! Run: `cargo +nightly fuzz run vm_lines` from this folder.
#![no_main]

use berm_vm_protocol::framing::LineReader;
use berm_vm_protocol::{GuestLine, MAX_LINE_BYTES, Request, Service};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = LineReader::new(data);
    let mut lines = 0usize;
    while let Ok(Some(line)) = reader.read_line() {
        assert!(line.len() < MAX_LINE_BYTES);
        lines += 1;
        assert!(lines <= data.len() + 1);
        for service in [Service::Control, Service::Logs] {
            if let Ok(parsed) = GuestLine::parse(service, &line) {
                // Whatever parses must be allowed on its port and survive a round trip.
                assert!(parsed.event.allowed_on(service));
                let again = GuestLine::parse(service, parsed.to_line().trim_end().as_bytes())
                    .expect("a parsed line re-serializes to a valid line");
                assert_eq!(again, parsed);
            }
        }
        let _ = Request::parse(&line);
    }
});
