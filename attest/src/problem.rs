//! The problems a verification reports: a closed list of stable codes, each with its detail.
//!
//! Below both the verifier (`verify.rs`) and the native-code check (`code.rs`),
//! which report problems of the same list.

use std::fmt;

use serde::Serialize;

/// Every problem [`verify`](crate::verify()) can report: a closed list, each with a stable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// Not a JSON object of the record's shape (missing, extra or mistyped fields).
    RecordMalformed,
    /// `format` is not one this verifier knows.
    FormatUnsupported,
    /// `record_sha256` does not cover the record as it is: edited after hashing.
    RecordHashMismatch,
    /// A digest field is not 64 lowercase hex digits.
    DigestMalformed,
    /// The kernel's sha256 or size differs from the pins.
    KernelUnpinned,
    /// The rootfs's sha256 or size differs from the pins.
    RootfsUnpinned,
    /// The command line is not the pinned one plus validated guest settings.
    CmdlineMismatch,
    /// berm-vmm wrote no `host_sandbox` line.
    HostSandboxMissing,
    /// berm-vmm ran unconfined (`--no-host-sandbox`).
    HostSandboxDisabled,
    /// berm-vmm's Landlock was not fully enforced, or seccomp was not its allow list.
    HostSandboxWeak,
    /// A confined run's record lacks a measurement of a child berm-vmm starts, or names one
    /// measured in a way that child cannot be.
    HostChildUnmeasured,
    /// A child of berm-vmm was measured running without fully enforced Landlock,
    /// `no_new_privs` or its role's seccomp filter.
    HostChildWeak,
    /// The guest reported nothing (no `boot_start`).
    GuestMissing,
    /// A guest event carries another boot id than the greeting's (or there is none).
    BootIdMismatch,
    /// The guest reported `boot_failed`.
    BootFailed,
    /// A measured app was refused by the guest.
    AppRefused,
    /// A measured app has no `app_started` (and so no enforcement report).
    EnforcementMissing,
    /// An app ran without fully enforced Landlock, `no_new_privs` or its seccomp filter.
    EnforcementWeak,
    /// An app's enforcement report has no policy digest.
    PolicyDigestMissing,
    /// An app's policy digest is not the one the pinned build's apps report.
    PolicyMismatch,
    /// A measured app exited while the VM ran (a crash, or a kill from inside the guest).
    AppExited,
    /// berm-vmm or the guest ended with a nonzero exit status.
    ExitFailed,
    /// A started app never reported `app_ready`.
    AppNotReady,
    /// A program the guest loaded differs from the one measured on the host (or is absent).
    ProgramDigestMismatch,
    /// The guest loaded a program the host never measured.
    ProgramUnmeasured,
    /// The guest reported an app the host never measured.
    AppUnmeasured,
    /// The boot attached the test-only enforcement probe: a test boot, not one to trust.
    TestProbePresent,
    /// The guest mapped other code for a program than the host measured (or reports none).
    CodeDigestMismatch,
    /// Compiling the program with the record's engine and target gives other code than the
    /// record measured (`--programs`).
    CodeNotReproduced,
    /// A warning: a code digest was not re-derived from its program (no `--programs`, the
    /// program is not there, or this berm's engine is not the record's). `--strict` refuses it.
    CodeUnverified,
    /// The input is not a DSSE envelope holding an in-toto statement of a berm record.
    EnvelopeMalformed,
    /// `--key` was given but the input is a bare record, not a signed envelope.
    SignatureMissing,
    /// No signature of the envelope verifies with the given key.
    SignatureInvalid,
    /// The signed statement's subjects are not the ones its record names.
    SubjectMismatch,
    /// The state disk's digest is not the one the verifier expected (`--expect state=`).
    StateUnexpected,
    /// An app image's digest is not the one the verifier expected (`--expect app/NAME/image=`).
    AppImageUnexpected,
}

impl Code {
    /// Every code, in a fixed order (for documentation and tests).
    pub const ALL: [Code; 36] = [
        Code::RecordMalformed,
        Code::FormatUnsupported,
        Code::RecordHashMismatch,
        Code::DigestMalformed,
        Code::KernelUnpinned,
        Code::RootfsUnpinned,
        Code::CmdlineMismatch,
        Code::HostSandboxMissing,
        Code::HostSandboxDisabled,
        Code::HostSandboxWeak,
        Code::HostChildUnmeasured,
        Code::HostChildWeak,
        Code::GuestMissing,
        Code::BootIdMismatch,
        Code::BootFailed,
        Code::AppRefused,
        Code::EnforcementMissing,
        Code::EnforcementWeak,
        Code::PolicyDigestMissing,
        Code::PolicyMismatch,
        Code::AppExited,
        Code::ExitFailed,
        Code::AppNotReady,
        Code::ProgramDigestMismatch,
        Code::ProgramUnmeasured,
        Code::AppUnmeasured,
        Code::TestProbePresent,
        Code::CodeDigestMismatch,
        Code::CodeNotReproduced,
        Code::CodeUnverified,
        Code::EnvelopeMalformed,
        Code::SignatureMissing,
        Code::SignatureInvalid,
        Code::SubjectMismatch,
        Code::StateUnexpected,
        Code::AppImageUnexpected,
    ];

    /// Whether the code is a warning: reported, but the record is refused for it only under
    /// [`Verdict::strict`](crate::Verdict::strict).
    pub fn is_warning(self) -> bool {
        matches!(self, Code::CodeUnverified)
    }

    /// The code as written in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::RecordMalformed => "record_malformed",
            Code::FormatUnsupported => "format_unsupported",
            Code::RecordHashMismatch => "record_hash_mismatch",
            Code::DigestMalformed => "digest_malformed",
            Code::KernelUnpinned => "kernel_unpinned",
            Code::RootfsUnpinned => "rootfs_unpinned",
            Code::CmdlineMismatch => "cmdline_mismatch",
            Code::HostSandboxMissing => "host_sandbox_missing",
            Code::HostSandboxDisabled => "host_sandbox_disabled",
            Code::HostSandboxWeak => "host_sandbox_weak",
            Code::HostChildUnmeasured => "host_child_unmeasured",
            Code::HostChildWeak => "host_child_weak",
            Code::GuestMissing => "guest_missing",
            Code::BootIdMismatch => "boot_id_mismatch",
            Code::BootFailed => "boot_failed",
            Code::AppRefused => "app_refused",
            Code::EnforcementMissing => "enforcement_missing",
            Code::EnforcementWeak => "enforcement_weak",
            Code::PolicyDigestMissing => "policy_digest_missing",
            Code::PolicyMismatch => "policy_mismatch",
            Code::AppExited => "app_exited",
            Code::ExitFailed => "exit_failed",
            Code::AppNotReady => "app_not_ready",
            Code::ProgramDigestMismatch => "program_digest_mismatch",
            Code::ProgramUnmeasured => "program_unmeasured",
            Code::AppUnmeasured => "app_unmeasured",
            Code::TestProbePresent => "test_probe_present",
            Code::CodeDigestMismatch => "code_digest_mismatch",
            Code::CodeNotReproduced => "code_not_reproduced",
            Code::CodeUnverified => "code_unverified",
            Code::EnvelopeMalformed => "envelope_malformed",
            Code::SignatureMissing => "signature_missing",
            Code::SignatureInvalid => "signature_invalid",
            Code::SubjectMismatch => "subject_mismatch",
            Code::StateUnexpected => "state_unexpected",
            Code::AppImageUnexpected => "app_image_unexpected",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem: its code and what exactly was wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The code.
    pub code: Code,
    /// A sentence naming the field and values involved.
    pub detail: String,
}
