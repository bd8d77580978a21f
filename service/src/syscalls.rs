//! The syscalls bermd offers programs: `log`, `clock`, `random`, `kv`, `fs`,
//! `http` — exactly the table in `berm_abi::SYSCALLS`.
//!
//! Every one is linked for every program; whether a deployment may use it is
//! its grants (the runtime turns an ungranted one into a trap that names the
//! grant). What a granted syscall reaches — which keyspace, which directory —
//! is the deployment's [`ProgramHost`], attached at deploy, so a handler
//! never looks a program up by name.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use berm::{Pending, Reply, Syscall, SyscallContext, SyscallError};
use berm_abi::frame;
use berm_abi::word::ErrorCode;

use tokio::sync::Semaphore;

use crate::fs::{FsError, FsRoot, MAX_PATH_BYTES, MAX_WRITE_BYTES};
pub use crate::kv::Keyspace;
use crate::kv::{KeyspaceError, KvError};
use crate::trace::CallTrace;

/// Longest log line a program may write; longer lines are cut.
pub const MAX_LOG_BYTES: usize = 8 << 10;
/// Most random bytes one `random.fill` provides.
pub const MAX_RANDOM_BYTES: usize = 1 << 20;

/// How many host operations (disk reads and writes) one program may have
/// in flight, across all its calls, unless `bermd --max-host-ops` says
/// otherwise.
pub const DEFAULT_MAX_HOST_OPS: usize = 4;

/// What a deployment's granted syscalls reach.
pub struct ProgramHost {
    /// Its keyspace, when `kv` is granted.
    pub kv: Option<Keyspace>,
    /// Its directory, when `fs` is granted.
    pub fs: Option<Arc<FsRoot>>,
    /// Its egress, when `http` is granted (`net=` or `secret:` grants).
    pub net: Option<Arc<berm_egress::Egress>>,
    /// Its host operations in flight. A stuck one keeps its permit until it
    /// ends, so a program whose disk hangs ties up at most this many
    /// blocking threads, and its further calls fail at their deadline
    /// instead of queueing without bound.
    pub ops: Arc<Semaphore>,
    max_ops: usize,
}

impl ProgramHost {
    /// Nothing granted yet; at most `max_ops` host operations in flight.
    pub fn new(max_ops: usize) -> ProgramHost {
        let max_ops = max_ops.max(1);
        ProgramHost {
            kv: None,
            fs: None,
            net: None,
            ops: Arc::new(Semaphore::new(max_ops)),
            max_ops,
        }
    }
}

impl Default for ProgramHost {
    fn default() -> Self {
        ProgramHost::new(DEFAULT_MAX_HOST_OPS)
    }
}

/// The whole table, one [`Syscall`] per entry of `berm_abi::SYSCALLS`.
///
/// What touches the disk is a [`Syscall::blocking`] syscall: the work runs on
/// tokio's blocking threads, bounded per program by [`ProgramHost::ops`] and
/// in time by the call's deadline, so a slow disk or a stuck file holds only
/// the call that reached for it. Reads of a keyspace in its log never wait on
/// the disk and are answered in place; with `kv_reads_wait` (the keyspaces are in
/// PostgreSQL) they are blocking syscalls too.
pub fn table(kv_reads_wait: bool) -> Vec<Syscall> {
    vec![
        Syscall::new("log", "write", log_write),
        Syscall::new("clock", "now", clock_now),
        Syscall::blocking("clock", "sleep", |cx, req| {
            let [millis] = fields::<1>(req)?;
            let millis: u64 = std::str::from_utf8(millis)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .ok_or_else(|| {
                    SyscallError::code(
                        ErrorCode::Invalid,
                        "clock.sleep takes a whole number of milliseconds, as decimal text",
                    )
                })?;
            // No host-op permit: a sleep holds nothing but its call's slot, and ends by the
            // call's deadline, when the call ends anyway.
            let deadline = tokio::time::Instant::from_std(cx.deadline);
            let until = tokio::time::Instant::now()
                .checked_add(std::time::Duration::from_millis(millis))
                .map_or(deadline, |until| until.min(deadline));
            Ok(Box::pin(async move {
                tokio::time::sleep_until(until).await;
                Ok(Reply::Word(0))
            }))
        }),
        Syscall::new("random", "fill", random_fill),
        kv_read("get", kv_get, kv_reads_wait),
        Syscall::blocking("kv", "put", |cx, req| {
            let [key, value] = fields::<2>(req)?;
            let keyspace = kv(cx)?.clone();
            keyspace.check(key, Some(value)).map_err(kv_error)?;
            let held = cx.reserve("kv.put", key.len() + value.len())?;
            let (key, value) = (key.to_vec(), value.to_vec());
            match keyspace {
                // On a blocking thread that keeps the permit while the disk holds it.
                Keyspace::Log(kv) => offload(cx, "kv.put", move || {
                    let _held = held;
                    kv.put(&key, &value).map_err(kv_error)?;
                    Ok(Reply::Word(0))
                }),
                keyspace => host_op(cx, "kv.put", move |permit| async move {
                    let (_permit, _held) = (permit, held);
                    keyspace.put(key, value).await?;
                    Ok(Reply::Word(0))
                }),
            }
        }),
        Syscall::blocking("kv", "delete", |cx, req| {
            let [key] = fields::<1>(req)?;
            let keyspace = kv(cx)?.clone();
            keyspace.check(key, None).map_err(kv_error)?;
            let key = key.to_vec();
            let deleted = |existed: bool| match existed {
                true => Ok(Reply::Word(0)),
                false => Err(SyscallError::code(ErrorCode::NotFound, "no such key")),
            };
            match keyspace {
                Keyspace::Log(kv) => offload(cx, "kv.delete", move || {
                    deleted(kv.delete(&key).map_err(kv_error)?)
                }),
                keyspace => host_op(cx, "kv.delete", move |permit| async move {
                    let _permit = permit;
                    deleted(keyspace.delete(key).await?)
                }),
            }
        }),
        kv_read("list", kv_list, kv_reads_wait),
        Syscall::blocking("fs", "read", |cx, req| {
            let [path] = fields::<1>(req)?;
            let (fs, path) = (fs(cx)?, path_of(path)?);
            let memory = cx.host_memory().clone();
            offload(cx, "fs.read", move || {
                // Reserved once the file's size is known, before a byte of it is read.
                let (contents, held) = fs
                    .read_admitted(&path, |size| {
                        memory
                            .reserve("fs.read", size)
                            .map_err(|over| FsError::new(ErrorCode::TooLarge, over.to_string()))
                    })
                    .map_err(fs_error)?;
                Ok(Reply::Reserved(contents, held))
            })
        }),
        Syscall::blocking("fs", "write", |cx, req| {
            let [path, contents] = fields::<2>(req)?;
            let (fs, path) = (fs(cx)?, path_of(path)?);
            if contents.len() > MAX_WRITE_BYTES {
                return Err(SyscallError::code(
                    ErrorCode::TooLarge,
                    format!(
                        "`{path}`: {} bytes is over the fs.write cap of {MAX_WRITE_BYTES} bytes",
                        contents.len()
                    ),
                ));
            }
            let held = cx.reserve("fs.write", contents.len())?;
            let contents = contents.to_vec();
            offload(cx, "fs.write", move || {
                let _held = held;
                fs.write(&path, &contents).map_err(fs_error)?;
                Ok(Reply::Word(0))
            })
        }),
        Syscall::blocking("fs", "list", |cx, req| {
            let [path] = fields::<1>(req)?;
            let (fs, path) = (fs(cx)?, path_of(path)?);
            offload(cx, "fs.list", move || {
                let entries = fs.list(&path).map_err(fs_error)?;
                let json = serde_json::to_vec(&entries)
                    .map_err(|e| SyscallError::code(ErrorCode::Io, e.to_string()))?;
                Ok(Reply::Staged(json))
            })
        }),
        Syscall::blocking("fs", "remove", |cx, req| {
            let [path] = fields::<1>(req)?;
            let (fs, path) = (fs(cx)?, path_of(path)?);
            offload(cx, "fs.remove", move || {
                fs.remove(&path).map_err(fs_error)?;
                Ok(Reply::Word(0))
            })
        }),
        Syscall::blocking("http", "fetch", http_fetch),
    ]
}

/// A kv read's answer: at once from a log, or work to wait for from the database.
enum KvRead {
    Now(Reply),
    Later(Pending),
}

/// A kv read, `kv.{name}`: answered in place where keyspaces are logs, a blocking syscall
/// where they are in the database ([`table`]).
fn kv_read(
    name: &'static str,
    read: fn(&SyscallContext<'_>, &[u8]) -> Result<KvRead, SyscallError>,
    waits: bool,
) -> Syscall {
    if waits {
        return Syscall::blocking("kv", name, move |cx, req| match read(cx, req)? {
            KvRead::Now(reply) => done(Ok(reply)),
            KvRead::Later(pending) => Ok(pending),
        });
    }
    Syscall::new("kv", name, move |cx, req| match read(cx, req)? {
        KvRead::Now(reply) => Ok(reply),
        KvRead::Later(_) => Err(SyscallError::Trap(format!(
            "kv.{name} is served in place, but this keyspace is in the database: a bermd bug"
        ))),
    })
}

/// `kv.get`: from a log in place, from the database as host work.
fn kv_get(cx: &SyscallContext<'_>, req: &[u8]) -> Result<KvRead, SyscallError> {
    let [key] = fields::<1>(req)?;
    let found = |value: Option<Vec<u8>>| match value {
        Some(value) => Ok(Reply::Staged(value)),
        None => Err(SyscallError::code(ErrorCode::NotFound, "no such key")),
    };
    let keyspace = kv(cx)?;
    if let Keyspace::Log(kv) = keyspace {
        return found(kv.get(key)).map(KvRead::Now);
    }
    let (keyspace, key) = (keyspace.clone(), key.to_vec());
    host_op(cx, "kv.get", move |permit| async move {
        let _permit = permit;
        found(keyspace.get(&key).await?)
    })
    .map(KvRead::Later)
}

/// `kv.list`: the keys with a prefix, each a 4-byte length and its bytes, reserved before
/// the reply is framed.
fn kv_list(cx: &SyscallContext<'_>, req: &[u8]) -> Result<KvRead, SyscallError> {
    let [prefix] = fields::<1>(req)?;
    let framed = |keys: Vec<Vec<u8>>, memory: &Arc<berm::HostMemory>| {
        let size = keys.iter().map(|key| 4 + key.len()).sum();
        let held = memory.reserve("kv.list", size)?;
        let mut reply = Vec::with_capacity(size);
        for key in keys {
            frame::push(&mut reply, &key);
        }
        Ok(Reply::Reserved(reply, held))
    };
    let keyspace = kv(cx)?;
    if let Keyspace::Log(kv) = keyspace {
        return framed(kv.list(prefix), cx.host_memory()).map(KvRead::Now);
    }
    let (keyspace, prefix) = (keyspace.clone(), prefix.to_vec());
    let memory = cx.host_memory().clone();
    host_op(cx, "kv.list", move |permit| async move {
        let _permit = permit;
        framed(keyspace.list(&prefix).await?, &memory)
    })
    .map(KvRead::Later)
}

/// Runs `job` on a blocking thread once the program has a free host-op
/// permit, and gives up at the call's deadline. A job that outlives it
/// keeps its permit until it ends; the call goes on and meets its deadline.
fn offload(
    cx: &SyscallContext<'_>,
    what: &'static str,
    job: impl FnOnce() -> Result<Reply, SyscallError> + Send + 'static,
) -> Result<Pending, SyscallError> {
    host_op(cx, what, move |permit| async move {
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(SyscallError::Trap(format!("`{what}` failed in bermd: {e}"))),
        }
    })
}

/// Runs `work` once the program has a free host-op permit (the bound on its disk and
/// database operations in flight), and gives up at the call's deadline. `work` gets the
/// permit and holds it as long as its operation can run: a blocking job takes it onto its
/// thread ([`offload`]); a database operation holds it in its future, and one that outlives
/// the deadline ends in the database on its own, within the connection pool's bound.
fn host_op<F>(
    cx: &SyscallContext<'_>,
    what: &'static str,
    work: impl FnOnce(tokio::sync::OwnedSemaphorePermit) -> F + Send + 'static,
) -> Result<Pending, SyscallError>
where
    F: Future<Output = Result<Reply, SyscallError>> + Send + 'static,
{
    let host = host(cx)?;
    let (ops, max_ops) = (host.ops.clone(), host.max_ops);
    let program = cx.program.to_string();
    let deadline = tokio::time::Instant::from_std(cx.deadline);
    Ok(Box::pin(async move {
        let permit = permit(&ops, max_ops, deadline, what, &program).await?;
        match tokio::time::timeout_at(deadline, work(permit)).await {
            Ok(result) => result,
            Err(_) => Err(SyscallError::code(
                ErrorCode::Io,
                format!("`{what}` did not finish before the call's deadline"),
            )),
        }
    }))
}

/// One of the program's host-op permits, waited for until the call's deadline.
async fn permit(
    ops: &Arc<Semaphore>,
    max_ops: usize,
    deadline: tokio::time::Instant,
    what: &str,
    program: &str,
) -> Result<tokio::sync::OwnedSemaphorePermit, SyscallError> {
    match tokio::time::timeout_at(deadline, ops.clone().acquire_owned()).await {
        Ok(Ok(permit)) => Ok(permit),
        Ok(Err(_)) => Err(SyscallError::Trap(
            "bermd is shutting down this program's host operations".into(),
        )),
        Err(_) => Err(SyscallError::code(
            ErrorCode::Io,
            format!(
                "`{what}`: `{program}` already has {max_ops} host operations in flight \
                 (the cap, bermd --max-host-ops) and none finished before the call's deadline"
            ),
        )),
    }
}

/// A path from the program, copied once it is known to be short and UTF-8.
fn path_of(bytes: &[u8]) -> Result<String, SyscallError> {
    if bytes.len() > MAX_PATH_BYTES {
        return Err(SyscallError::code(
            ErrorCode::Invalid,
            format!(
                "the path is {} bytes, longer than {MAX_PATH_BYTES}",
                bytes.len()
            ),
        ));
    }
    text(bytes).map(str::to_string)
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

/// The program's keyspace, if it is served.
fn kv<'a>(cx: &'a SyscallContext<'_>) -> Result<&'a Keyspace, SyscallError> {
    match &host(cx)?.kv {
        Some(Keyspace::Unavailable(why)) => Err(SyscallError::code(ErrorCode::Io, why.as_ref())),
        Some(keyspace) => Ok(keyspace),
        None => Err(SyscallError::Trap(
            "kv is granted but no keyspace is open".into(),
        )),
    }
}

/// A syscall answered in place, as a [`Syscall::blocking`] one's answer.
fn done(reply: Result<Reply, SyscallError>) -> Result<Pending, SyscallError> {
    Ok(Box::pin(std::future::ready(reply)))
}

impl From<KeyspaceError> for SyscallError {
    fn from(error: KeyspaceError) -> Self {
        if error.code == ErrorCode::Io {
            tracing::warn!("kv: {}", error.message);
        }
        SyscallError::code(error.code, error.message)
    }
}

fn fs(cx: &SyscallContext<'_>) -> Result<Arc<FsRoot>, SyscallError> {
    host(cx)?
        .fs
        .clone()
        .ok_or_else(|| SyscallError::Trap("fs is granted but no directory is open".into()))
}

fn kv_error(error: KvError) -> SyscallError {
    KeyspaceError::from(error).into()
}

fn fs_error(error: crate::fs::FsError) -> SyscallError {
    SyscallError::code(error.code, error.message)
}

/// The bytes of one `http.fetch` response, held against the program's host memory budget
/// from the first byte received (the egress counts them before it keeps them) until the
/// reply is pulled, or given back when the fetch fails or the call ends.
struct ResponseHeld(Mutex<Option<berm::Reservation>>);

impl berm_egress::Holding for ResponseHeld {
    fn hold(&self, bytes: usize) -> Result<(), String> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_mut() {
            Some(held) => held.resize("http.fetch", bytes).map_err(|e| e.to_string()),
            // Already taken for the reply: the fetch is over.
            None => Ok(()),
        }
    }
}

/// `http.fetch`: the request is copied once it is known to fit the caps,
/// and the exchange runs without holding the guest's memory; it ends before
/// the call's deadline with `timeout` at the latest. The response counts against the
/// program's host memory budget as it arrives ([`ResponseHeld`]), and its reply is made in
/// the body's own allocation.
fn http_fetch(cx: &SyscallContext<'_>, request: &mut [u8]) -> Result<Pending, SyscallError> {
    let net = host(cx)?
        .net
        .clone()
        .ok_or_else(|| SyscallError::Trap("http is granted but no egress is set up".into()))?;
    // The request's region bounds what decoding copied of it, held until the exchange ends.
    let size = request.len();
    let request = berm_egress::Request::decode(request, net.caps())
        .map_err(|e| SyscallError::code(e.code, e.message))?;
    let held = cx.reserve("http.fetch", size)?;
    let response_held = Arc::new(ResponseHeld(Mutex::new(Some(cx.reserve("http.fetch", 0)?))));
    let deadline = cx.deadline;
    let trace = cx.trace::<CallTrace>();
    // With receipts: the host asked for, and the secrets the request names (by name only).
    let receipt = trace
        .as_ref()
        .and_then(|t| t.receipt.clone())
        .map(|record| {
            let mut names = Vec::new();
            for (_, value) in &request.headers {
                let _ = berm_egress::secret::placeholders(value, &mut names);
            }
            let _ = berm_egress::secret::placeholders(&request.body, &mut names);
            let names: Vec<String> = names.into_iter().map(str::to_string).collect();
            (record, request.url.clone(), names)
        });
    // With traces: a child span naming the method and the host, never the path or query
    // (where tokens travel).
    let span = trace.as_ref().and_then(|t| t.span.as_ref()).map(|parent| {
        use opentelemetry::KeyValue;
        parent.child(
            "http.fetch",
            vec![
                KeyValue::new("http.request.method", request.method.clone()),
                KeyValue::new("server.address", crate::receipts::host_of(&request.url)),
            ],
        )
    });
    Ok(Box::pin(async move {
        let fetched = net
            .fetch_holding(request, deadline, response_held.clone())
            .await;
        drop(held);
        if let Some((record, url, secrets)) = receipt {
            let result = match &fetched {
                Ok(response) => Ok(response.status),
                Err(e) => Err(e.code.name().to_string()),
            };
            record.fetch(&url, result, secrets);
        }
        if let Some(span) = span {
            match &fetched {
                Ok(response) => {
                    span.set(opentelemetry::KeyValue::new(
                        "http.response.status_code",
                        i64::from(response.status),
                    ));
                    span.end("ok", None);
                }
                Err(e) => span.end("error", Some(e.code.name())),
            }
        }
        let response_held = response_held
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match (fetched, response_held) {
            (Ok(response), Some(held)) => Ok(Reply::Reserved(response.into_encoded(), held)),
            (Ok(response), None) => Ok(Reply::Staged(response.into_encoded())),
            (Err(e), _) => Err(SyscallError::code(e.code, e.message)),
        }
    }))
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
        let served: Vec<String> = table(false)
            .iter()
            .map(|s| format!("{}.{}", s.module(), s.name()))
            .collect();
        let listed: Vec<String> = berm_abi::SYSCALLS.iter().map(|s| s.qualified()).collect();
        assert_eq!(served, listed);
    }
}
