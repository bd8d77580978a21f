//! libkrun's C API (linked statically from the `libkrun` crate), one safe method per call.
//! It takes C strings and numbers, never berm's own types: `krun.rs` turns a
//! [`crate::spec::VmSpec`] into these calls, in the order that works.

use std::ffi::CStr;
use std::io;

/// A libkrun call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {}", io::Error::from_raw_os_error(-*.code))]
pub struct KrunError {
    /// The function.
    pub call: &'static str,
    /// Its negative errno.
    pub code: i32,
}

fn ok(call: &'static str, ret: i32) -> Result<i32, KrunError> {
    if ret < 0 {
        Err(KrunError { call, code: ret })
    } else {
        Ok(ret)
    }
}

/// A libkrun context being configured. libkrun copies every string it is given, so each
/// need only outlive its call.
pub struct Context(u32);

impl Context {
    /// Sets libkrun's log level to warnings (they go to stderr) and creates a context.
    pub fn create() -> Result<Self, KrunError> {
        ok("krun_set_log_level", ::krun::krun_set_log_level(2))?;
        let ctx = ok("krun_create_ctx", ::krun::krun_create_ctx())?;
        // A context id is non-negative: `ok` refused the negative errnos.
        Ok(Self(ctx.unsigned_abs()))
    }

    /// The VM's vCPUs and memory.
    pub fn set_vm_config(&self, cpus: u8, memory_mib: u32) -> Result<(), KrunError> {
        ok(
            "krun_set_vm_config",
            ::krun::krun_set_vm_config(self.0, cpus, memory_mib),
        )
        .map(drop)
    }

    /// Turns off the implicit vsock (it turns on TSI, which needs libkrunfw's patched kernel).
    pub fn disable_implicit_vsock(&self) -> Result<(), KrunError> {
        ok(
            "krun_disable_implicit_vsock",
            ::krun::krun_disable_implicit_vsock(self.0),
        )
        .map(drop)
    }

    /// Adds an explicit vsock device with the TSI features `tsi`.
    pub fn add_vsock(&self, tsi: u32) -> Result<(), KrunError> {
        ok("krun_add_vsock", ::krun::krun_add_vsock(self.0, tsi)).map(drop)
    }

    /// The kernel at `kernel`, of libkrun format `format`, with no initramfs.
    pub fn set_kernel(&self, kernel: &CStr, format: u32, cmdline: &CStr) -> Result<(), KrunError> {
        // SAFETY: `kernel` and `cmdline` are valid NUL-terminated strings alive for the call
        // (libkrun copies them); a null initramfs is documented as none.
        ok("krun_set_kernel", unsafe {
            ::krun::krun_set_kernel(
                self.0,
                kernel.as_ptr(),
                format,
                std::ptr::null(),
                cmdline.as_ptr(),
            )
        })
        .map(drop)
    }

    /// A raw disk image at `path`, whose serial (what the guest reads from
    /// `/sys/block/*/serial`) is `id`; `call` names it in an error.
    pub fn add_disk(
        &self,
        call: &'static str,
        id: &CStr,
        path: &CStr,
        read_only: bool,
    ) -> Result<(), KrunError> {
        // SAFETY: both strings are valid NUL-terminated strings that outlive the call; format
        // 0 is raw.
        ok(call, unsafe {
            ::krun::krun_add_disk2(self.0, id.as_ptr(), path.as_ptr(), 0, read_only)
        })
        .map(drop)
    }

    /// Maps guest vsock port `port` to the Unix socket at `path`: libkrun listens there
    /// (`listen`), or connects to it when the guest connects; `call` names it in an error.
    pub fn add_vsock_port(
        &self,
        call: &'static str,
        port: u32,
        path: &CStr,
        listen: bool,
    ) -> Result<(), KrunError> {
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        ok(call, unsafe {
            ::krun::krun_add_vsock_port2(self.0, port, path.as_ptr(), listen)
        })
        .map(drop)
    }

    /// Writes the guest's console to the file at `path`.
    pub fn set_console_output(&self, path: &CStr) -> Result<(), KrunError> {
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        ok("krun_set_console_output", unsafe {
            ::krun::krun_set_console_output(self.0, path.as_ptr())
        })
        .map(drop)
    }

    /// Enters the VM. On success this never returns: libkrun exits the process when the
    /// guest resets. So it returns only the error.
    pub fn start_enter(self) -> KrunError {
        let ret = ::krun::krun_start_enter(self.0);
        KrunError {
            call: "krun_start_enter",
            code: if ret < 0 { ret } else { -libc::EIO },
        }
    }
}
