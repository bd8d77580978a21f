//! berm-vmm's exit codes: a documented enum (docs/vm.md), so callers can tell a refused
//! configuration from a failed boot from a crash without parsing messages.

/// What `berm-vmm run` ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitStatus {
    /// The guest reported `power_off` with exit code 0, then the VM ended.
    Clean = 0,
    /// berm-vmm failed in a way not listed here (the message says how).
    Internal = 1,
    /// Bad command-line arguments.
    Usage = 2,
    /// The kernel or rootfs is not where berm-vmm looks for it.
    ArtifactMissing = 3,
    /// The kernel or rootfs differs from the pins compiled into berm-vmm.
    PinMismatch = 4,
    /// The configuration was refused before boot: guest settings, app folders, run dir,
    /// state disk, command-line length.
    Refused = 5,
    /// No hypervisor can run the guest here (or the requested one cannot).
    NoHypervisor = 6,
    /// The hypervisor (or vhost-device-vsock) could not be started.
    HypervisorFailed = 7,
    /// The guest did not greet on the control port within the boot timeout.
    BootTimeout = 8,
    /// The guest reported `boot_failed` and powered off.
    BootFailed = 10,
    /// The guest powered off with a non-zero exit code other than a boot failure.
    GuestError = 11,
    /// The VM ended without a `power_off` line: a guest crash, a kernel panic or a killed
    /// hypervisor.
    Crashed = 12,
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The snake_case name used in berm-vmm's `exit` line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Internal => "internal",
            Self::Usage => "usage",
            Self::ArtifactMissing => "artifact_missing",
            Self::PinMismatch => "pin_mismatch",
            Self::Refused => "refused",
            Self::NoHypervisor => "no_hypervisor",
            Self::HypervisorFailed => "hypervisor_failed",
            Self::BootTimeout => "boot_timeout",
            Self::BootFailed => "boot_failed",
            Self::GuestError => "guest_error",
            Self::Crashed => "crashed",
        }
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
