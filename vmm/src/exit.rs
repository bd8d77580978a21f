//! berm-vmm's exit codes: a documented enum (docs/vm.md), so callers can tell a refused
//! configuration from a failed boot from a crash without parsing messages.

berm_abi::codes! {
    /// What `berm-vmm run` ended with: the process exit code, and the snake_case name used in
    /// berm-vmm's `exit` line.
    pub enum ExitStatus: u8 {
        /// The guest reported `power_off` with exit code 0, then the VM ended.
        Clean = 0 => "clean",
        /// berm-vmm failed in a way not listed here (the message says how).
        Internal = 1 => "internal",
        /// Bad command-line arguments.
        Usage = 2 => "usage",
        /// The kernel or rootfs is not where berm-vmm looks for it.
        ArtifactMissing = 3 => "artifact_missing",
        /// The kernel or rootfs differs from the pins compiled into berm-vmm.
        PinMismatch = 4 => "pin_mismatch",
        /// The configuration was refused before boot: guest settings, app folders, run dir,
        /// state disk, command-line length.
        Refused = 5 => "refused",
        /// No hypervisor can run the guest here (or the requested one cannot).
        NoHypervisor = 6 => "no_hypervisor",
        /// The hypervisor (or vhost-device-vsock) could not be started.
        HypervisorFailed = 7 => "hypervisor_failed",
        /// The guest did not greet on the control port within the boot timeout.
        BootTimeout = 8 => "boot_timeout",
        /// The guest reported `boot_failed` and powered off.
        BootFailed = 10 => "boot_failed",
        /// The guest powered off with a non-zero exit code other than a boot failure.
        GuestError = 11 => "guest_error",
        /// The VM ended without a `power_off` line: a guest crash, a kernel panic or a killed
        /// hypervisor.
        Crashed = 12 => "crashed",
    }
}

#[cfg(test)]
mod tests {
    use super::ExitStatus::*;

    #[test]
    fn every_status_is_documented_in_docs_vm_md() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/vm.md")).unwrap();
        for status in [
            Clean,
            Internal,
            Usage,
            ArtifactMissing,
            PinMismatch,
            Refused,
            NoHypervisor,
            HypervisorFailed,
            BootTimeout,
            BootFailed,
            GuestError,
            Crashed,
        ] {
            let row = format!("| {} | `{}` |", status.code(), status.name());
            assert!(doc.contains(&row), "docs/vm.md lacks the row {row}");
        }
    }
}
