//! Framing through a VM's relayed MCP socket, booted for real: every hostile line of
//! `berm_fixtures::hostile`, sent with valid requests around it in one write and in one write
//! per line, gets exactly its own answer through `rpc-0.sock`, and no valid request is lost.
//! The same check runs on `berm mcp`'s stdio (cli/tests/cli.rs) and on bermd's own
//! `mcp.sock` (service/tests/bermd.rs).
//!
//! Like vm.rs, the test prints `SKIPPED: <why>` only where nothing can boot the guest, and
//! fails instead under `BERM_VM_REQUIRE=1`.

mod common;

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use berm::GuestArch;
use berm_fixtures::hostile;
use common::{boot_notes, scratch_to_boot};

/// The guest's bermd runs with bermd's default frame cap (berm-init passes no
/// `--max-frame-bytes`): `berm_service::transport::DEFAULT_MAX_FRAME_BYTES`.
const GUEST_FRAME_CAP: usize = 4 << 20;

#[test]
fn each_hostile_line_through_the_relay_costs_only_itself() {
    let Some(tmp) = scratch_to_boot(GuestArch::HOST) else {
        return;
    };
    let mut vmm = boot_notes(tmp.path());
    let socket = vmm.run_dir.join("rpc-0.sock");
    let stream = UnixStream::connect(&socket)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
    // A lost answer would leave the test reading forever: the read times out instead, and
    // the fixture's assertion says what was answered.
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut write = stream.try_clone().unwrap();
    let mut read = BufReader::new(stream);
    hostile::initialize(&mut write, &mut read);
    // Two rounds: one write for everything, then one write per line.
    hostile::assert_each_costs_only_itself_under(GUEST_FRAME_CAP, &mut write, &mut read, 2);
    drop(write);
    drop(read);
    vmm.shut_down();
}
