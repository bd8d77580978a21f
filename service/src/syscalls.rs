//! The syscalls bermd offers programs: `log`, `clock`, `random`, `kv`, `fs`
//! — exactly the table in `berm_abi::SYSCALLS`.
//!
//! Every one is linked for every program; whether a deployment may use it is
//! its grants (the runtime turns an ungranted one into a trap that names the
//! grant). What a granted syscall reaches — which keyspace, which directory —
//! is the deployment's [`ProgramHost`], attached at deploy, so a handler
//! never looks a program up by name.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use berm::{Reply, Syscall, SyscallContext, SyscallError};
use berm_abi::frame;
use berm_abi::word::ErrorCode;

use crate::fs::FsRoot;
use crate::kv::{KvError, KvStore};

/// Longest log line a program may write; longer lines are cut.
pub const MAX_LOG_BYTES: usize = 8 << 10;
/// Most random bytes one `random.fill` provides.
pub const MAX_RANDOM_BYTES: usize = 1 << 20;

/// What a deployment's granted syscalls reach.
#[derive(Default)]
pub struct ProgramHost {
    /// Its keyspace, when `kv` is granted.
    pub kv: Option<Arc<KvStore>>,
    /// Its directory, when `fs` is granted.
    pub fs: Option<Arc<FsRoot>>,
}

/// The whole table, one [`Syscall`] per entry of `berm_abi::SYSCALLS`.
pub fn table() -> Vec<Syscall> {
    vec![
        Syscall::new("log", "write", log_write),
        Syscall::new("clock", "now", clock_now),
        Syscall::new("random", "fill", random_fill),
        Syscall::new("kv", "get", |cx, req| {
            let [key] = fields::<1>(req)?;
            match kv(cx)?.get(key) {
                Some(value) => Ok(Reply::Staged(value)),
                None => Err(SyscallError::code(ErrorCode::NotFound, "no such key")),
            }
        }),
        Syscall::new("kv", "put", |cx, req| {
            let [key, value] = fields::<2>(req)?;
            kv(cx)?.put(key, value).map_err(kv_error)?;
            Ok(Reply::Word(0))
        }),
        Syscall::new("kv", "delete", |cx, req| {
            let [key] = fields::<1>(req)?;
            match kv(cx)?.delete(key).map_err(kv_error)? {
                true => Ok(Reply::Word(0)),
                false => Err(SyscallError::code(ErrorCode::NotFound, "no such key")),
            }
        }),
        Syscall::new("kv", "list", |cx, req| {
            let [prefix] = fields::<1>(req)?;
            let mut reply = Vec::new();
            for key in kv(cx)?.list(prefix) {
                frame::push(&mut reply, &key);
            }
            Ok(Reply::Staged(reply))
        }),
        Syscall::new("fs", "read", |cx, req| {
            let [path] = fields::<1>(req)?;
            Ok(Reply::Staged(fs(cx)?.read(text(path)?).map_err(fs_error)?))
        }),
        Syscall::new("fs", "write", |cx, req| {
            let [path, contents] = fields::<2>(req)?;
            fs(cx)?.write(text(path)?, contents).map_err(fs_error)?;
            Ok(Reply::Word(0))
        }),
        Syscall::new("fs", "list", |cx, req| {
            let [path] = fields::<1>(req)?;
            let entries = fs(cx)?.list(text(path)?).map_err(fs_error)?;
            let json = serde_json::to_vec(&entries)
                .map_err(|e| SyscallError::code(ErrorCode::Io, e.to_string()))?;
            Ok(Reply::Staged(json))
        }),
        Syscall::new("fs", "remove", |cx, req| {
            let [path] = fields::<1>(req)?;
            fs(cx)?.remove(text(path)?).map_err(fs_error)?;
            Ok(Reply::Word(0))
        }),
    ]
}

fn fields<const N: usize>(request: &[u8]) -> Result<[&[u8]; N], SyscallError> {
    frame::decode_exact::<N>(request)
        .map_err(|e| SyscallError::code(ErrorCode::Invalid, e.to_string()))
}

fn text(bytes: &[u8]) -> Result<&str, SyscallError> {
    std::str::from_utf8(bytes)
        .map_err(|_| SyscallError::code(ErrorCode::Invalid, "the path is not valid UTF-8"))
}

fn host<'a>(cx: &'a SyscallContext<'_>) -> Result<&'a ProgramHost, SyscallError> {
    // Every deployment bermd makes carries a ProgramHost; a missing one is a
    // bermd bug, and stopping the call is the safe answer.
    cx.data::<ProgramHost>()
        .ok_or_else(|| SyscallError::Trap("bermd attached no host data to this program".into()))
}

fn kv<'a>(cx: &'a SyscallContext<'_>) -> Result<&'a KvStore, SyscallError> {
    host(cx)?
        .kv
        .as_deref()
        .ok_or_else(|| SyscallError::Trap("kv is granted but no keyspace is open".into()))
}

fn fs<'a>(cx: &'a SyscallContext<'_>) -> Result<&'a FsRoot, SyscallError> {
    host(cx)?
        .fs
        .as_deref()
        .ok_or_else(|| SyscallError::Trap("fs is granted but no directory is open".into()))
}

fn kv_error(error: KvError) -> SyscallError {
    let code = match error {
        KvError::TooLarge { .. } => ErrorCode::TooLarge,
        KvError::Open { .. } | KvError::Write { .. } => ErrorCode::Io,
    };
    tracing::warn!("kv: {error}");
    SyscallError::code(code, error.to_string())
}

fn fs_error(error: crate::fs::FsError) -> SyscallError {
    SyscallError::code(error.code, error.message)
}

fn log_write(cx: &SyscallContext<'_>, request: &mut [u8]) -> Result<Reply, SyscallError> {
    let [level, message] = fields::<2>(request)?;
    let cut = message.len().min(MAX_LOG_BYTES);
    let message = String::from_utf8_lossy(&message[..cut]);
    // Escaped, so a program cannot forge lines in bermd's log or a client's.
    let message = crate::logs::escape(&message);
    let program = cx.program;
    let tool = cx.tool;
    match level {
        b"error" => tracing::error!(target: "program", program, tool, "{message}"),
        b"warn" => tracing::warn!(target: "program", program, tool, "{message}"),
        b"info" => tracing::info!(target: "program", program, tool, "{message}"),
        b"debug" => tracing::debug!(target: "program", program, tool, "{message}"),
        b"trace" => tracing::trace!(target: "program", program, tool, "{message}"),
        _ => {
            return Err(SyscallError::code(
                ErrorCode::Invalid,
                "log level must be one of error, warn, info, debug, trace",
            ));
        }
    }
    crate::logs::forward(program, level, &message);
    Ok(Reply::Word(0))
}

fn clock_now(_: &SyscallContext<'_>, _: &mut [u8]) -> Result<Reply, SyscallError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| SyscallError::code(ErrorCode::Io, "the system clock is before 1970"))?;
    // i64 nanoseconds last until the year 2262.
    Ok(Reply::Word(now.as_nanos() as i64))
}

fn random_fill(_: &SyscallContext<'_>, buffer: &mut [u8]) -> Result<Reply, SyscallError> {
    if buffer.len() > MAX_RANDOM_BYTES {
        return Err(SyscallError::code(
            ErrorCode::TooLarge,
            format!(
                "random.fill of {} bytes is over the cap of {MAX_RANDOM_BYTES}",
                buffer.len()
            ),
        ));
    }
    getrandom::fill(buffer).map_err(|e| SyscallError::code(ErrorCode::Io, e.to_string()))?;
    Ok(Reply::Word(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_abi_syscall_is_served_exactly_once() {
        let served: Vec<String> = table()
            .iter()
            .map(|s| format!("{}.{}", s.module(), s.name()))
            .collect();
        let listed: Vec<String> = berm_abi::SYSCALLS.iter().map(|s| s.qualified()).collect();
        assert_eq!(served, listed);
    }
}
