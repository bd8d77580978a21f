//! The linker a component is instantiated with (docs/components.md): berm's interfaces and
//! WASI 0.2's, each only when the program holds its grant, and for every other import of
//! the component a function that stops the call naming the grant it lacks.
//!
//! berm's interfaces are ABI 1's syscalls typed: each host function here encodes its
//! arguments as the syscall's frames and runs the same handler from the host's table, so a
//! component and a core module meet the same caps, quotas, egress and messages.

use std::collections::BTreeSet;
use std::sync::Arc;

use berm_abi::word::ErrorCode;
use berm_abi::{content, frame};
use berm_manifest::Manifest;
use wasmtime::StoreContextMut;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{
    Component, ComponentType, Lift, Linker, LinkerInstance, Lower, ResourceType,
};

use crate::DeployError;
use crate::error::{Content, Error};
use crate::invocation::{CallState, Outcome};
use crate::linker::{self, SyscallTable};
use crate::program::Grants;
use crate::syscall::{Kind, Reply, Syscall, SyscallError};

/// `berm:program/types#error-code`.
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
enum WitErrorCode {
    #[component(name = "invalid")]
    Invalid,
    #[component(name = "not-found")]
    NotFound,
    #[component(name = "denied")]
    Denied,
    #[component(name = "too-large")]
    TooLarge,
    #[component(name = "io")]
    Io,
    #[component(name = "depth")]
    Depth,
    #[component(name = "fault")]
    Fault,
    #[component(name = "conflict")]
    Conflict,
    #[component(name = "timeout")]
    Timeout,
}

/// `berm:program/types#error`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
struct WitError {
    code: WitErrorCode,
    message: String,
}

impl WitError {
    fn new(code: ErrorCode, message: String) -> WitError {
        let code = match code {
            ErrorCode::Invalid => WitErrorCode::Invalid,
            ErrorCode::NotFound => WitErrorCode::NotFound,
            ErrorCode::Denied => WitErrorCode::Denied,
            ErrorCode::TooLarge => WitErrorCode::TooLarge,
            ErrorCode::Io => WitErrorCode::Io,
            ErrorCode::Depth => WitErrorCode::Depth,
            ErrorCode::Fault => WitErrorCode::Fault,
            ErrorCode::Conflict => WitErrorCode::Conflict,
            ErrorCode::Timeout => WitErrorCode::Timeout,
        };
        WitError { code, message }
    }

    fn invalid(message: String) -> WitError {
        WitError::new(ErrorCode::Invalid, message)
    }
}

/// `berm:program/log#level`.
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
#[expect(
    dead_code,
    reason = "its values are made by Wasmtime, lifting the guest's"
)]
enum Level {
    #[component(name = "error")]
    Error,
    #[component(name = "warn")]
    Warn,
    #[component(name = "info")]
    Info,
    #[component(name = "debug")]
    Debug,
    #[component(name = "trace")]
    Trace,
}

/// `berm:program/fs#entry-kind`.
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
enum EntryKind {
    #[component(name = "file")]
    File,
    #[component(name = "dir")]
    Dir,
    #[component(name = "symlink")]
    Symlink,
    #[component(name = "other")]
    Other,
}

/// `berm:program/fs#entry`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
struct Entry {
    name: String,
    kind: EntryKind,
    size: u64,
}

/// `berm:program/http#request`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
struct HttpRequest {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// `berm:program/http#response`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// `berm:program/content#kind`.
#[derive(ComponentType, Lift, Lower, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
#[expect(
    dead_code,
    reason = "its values are made by Wasmtime, lifting the guest's"
)]
enum ContentKind {
    #[component(name = "text")]
    Text,
    #[component(name = "image")]
    Image,
    #[component(name = "audio")]
    Audio,
    #[component(name = "resource-text")]
    ResourceText,
    #[component(name = "resource-blob")]
    ResourceBlob,
    #[component(name = "resource-link")]
    ResourceLink,
}

/// `berm:program/content#block`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
struct Block {
    kind: ContentKind,
    uri: String,
    #[component(name = "mime-type")]
    mime_type: String,
    body: Vec<u8>,
}

/// `berm:program/call#outcome`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(variant)]
enum CallOutcome {
    #[component(name = "done")]
    Done(String),
    #[component(name = "failed")]
    Failed(String),
}

/// `berm:program/ask#resumed`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
struct Resumed {
    responses: String,
    state: Vec<u8>,
    #[component(name = "client-capabilities")]
    client_capabilities: String,
}

/// Marks the trap that ends a call after `ask`: not a failure.
#[derive(Debug, thiserror::Error)]
#[error("the tool asked the client for input")]
pub(crate) struct Asked;

/// Builds the linker for `component`, deployed with `grants`.
pub(crate) fn component_linker(
    engine: &wasmtime::Engine,
    component: &Component,
    manifest: &Manifest,
    table: &SyscallTable,
    grants: &Grants,
) -> Result<Linker<CallState>, DeployError> {
    let shape = manifest
        .component
        .as_ref()
        .ok_or_else(|| DeployError::Compile("not a component".into()))?;
    let mut linker = Linker::new(engine);
    let mut added = BTreeSet::new();
    let link_error = |name: &str, e: wasmtime::Error| {
        DeployError::Compile(format!("could not link `{name}`: {e:#}"))
    };
    for import in &shape.imports {
        let name = import.name.as_str();
        let (package_interface, _) = name.split_once('@').unwrap_or((name, ""));
        let granted = match import.grant.as_deref() {
            None => true,
            Some(berm_manifest::component::SOCKETS) => false,
            Some(module) => grants.allows(module),
        };
        if !granted {
            let grant = match import.grant.as_deref() {
                Some(berm_manifest::component::SOCKETS) => {
                    "none: berm gives programs no sockets; use wasi:http or berm:program/http with `net=HOST`".to_string()
                }
                Some(berm_abi::CONVENTION_MODULE) => match manifest.calls.as_slice() {
                    [only] => format!("call={only}"),
                    _ => berm_abi::grant_for(berm_abi::CONVENTION_MODULE).to_string(),
                },
                Some(module) => berm_abi::grant_for(module).to_string(),
                None => String::new(),
            };
            define_traps(engine, component, &mut linker, name, Missing::Grant(grant))
                .map_err(|e| link_error(name, e))?;
            continue;
        }
        let defined = match package_interface {
            "berm:program/types" => Ok(()),
            "berm:program/progress" => {
                define_progress(&mut linker.instance(name).map_err(|e| link_error(name, e))?)
            }
            "berm:program/content" => {
                define_content(&mut linker.instance(name).map_err(|e| link_error(name, e))?)
            }
            "berm:program/call" => {
                define_call(&mut linker.instance(name).map_err(|e| link_error(name, e))?)
            }
            "berm:program/ask" => {
                define_ask(&mut linker.instance(name).map_err(|e| link_error(name, e))?)
            }
            berm if berm.starts_with("berm:program/") => {
                let module = import.grant.as_deref().unwrap_or_default();
                let syscalls: Vec<(String, Syscall)> = table
                    .iter()
                    .filter(|((m, _), _)| m == module)
                    .map(|((_, n), s)| (n.clone(), s.clone()))
                    .collect();
                if syscalls.is_empty() {
                    define_traps(engine, component, &mut linker, name, Missing::Syscall)
                } else {
                    let mut instance = linker.instance(name).map_err(|e| link_error(name, e))?;
                    define_berm(&mut instance, module, &syscalls)
                }
            }
            wasi => {
                let group = wasi.split_once('/').map_or(wasi, |(p, _)| p);
                let group = if group == "wasi:cli" || group == "wasi:http" {
                    wasi
                } else {
                    group
                };
                if added.insert(group.to_string()) {
                    define_wasi(&mut linker, group)
                } else {
                    Ok(())
                }
            }
        };
        defined.map_err(|e| link_error(name, e))?;
    }
    Ok(linker)
}

/// Adds WASI's implementation of `interface` (of all of `wasi:io`, `wasi:clocks`, `wasi:random`
/// or `wasi:filesystem`, whose interfaces share resources).
fn define_wasi(linker: &mut Linker<CallState>, interface: &str) -> wasmtime::Result<()> {
    use wasmtime_wasi::cli::WasiCli;
    use wasmtime_wasi::clocks::WasiClocks;
    use wasmtime_wasi::filesystem::WasiFilesystem;
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random};
    use wasmtime_wasi::random::WasiRandom;
    use wasmtime_wasi_http::WasiHttp;
    let l = linker;
    match interface {
        "wasi:io" => wasmtime_wasi_io::add_to_linker_async(l),
        "wasi:clocks" => {
            clocks::wall_clock::add_to_linker::<CallState, WasiClocks>(l, CallState::wasi_clocks)?;
            clocks::monotonic_clock::add_to_linker::<CallState, WasiClocks>(
                l,
                CallState::wasi_clocks,
            )
        }
        "wasi:random" => {
            random::random::add_to_linker::<CallState, WasiRandom>(l, CallState::wasi_random)?;
            random::insecure::add_to_linker::<CallState, WasiRandom>(l, CallState::wasi_random)?;
            random::insecure_seed::add_to_linker::<CallState, WasiRandom>(l, CallState::wasi_random)
        }
        "wasi:filesystem" => {
            filesystem::types::add_to_linker::<CallState, WasiFilesystem>(
                l,
                CallState::wasi_filesystem,
            )?;
            filesystem::preopens::add_to_linker::<CallState, WasiFilesystem>(
                l,
                CallState::wasi_filesystem,
            )
        }
        "wasi:cli/environment" => {
            cli::environment::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/exit" => cli::exit::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli),
        "wasi:cli/stdin" => cli::stdin::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli),
        "wasi:cli/stdout" => {
            cli::stdout::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/stderr" => {
            cli::stderr::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/terminal-input" => {
            cli::terminal_input::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/terminal-output" => {
            cli::terminal_output::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/terminal-stdin" => {
            cli::terminal_stdin::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/terminal-stdout" => {
            cli::terminal_stdout::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:cli/terminal-stderr" => {
            cli::terminal_stderr::add_to_linker::<CallState, WasiCli>(l, CallState::wasi_cli)
        }
        "wasi:http/types" => wasmtime_wasi_http::p2::bindings::http::types::add_to_linker::<
            CallState,
            WasiHttp,
        >(l, &Default::default(), CallState::wasi_http),
        "wasi:http/outgoing-handler" => {
            wasmtime_wasi_http::p2::bindings::http::outgoing_handler::add_to_linker::<
                CallState,
                WasiHttp,
            >(l, CallState::wasi_http)
        }
        other => Err(wasmtime::Error::msg(format!(
            "berm does not offer `{other}`"
        ))),
    }
}

/// Why an import is a trap.
#[derive(Clone)]
enum Missing {
    /// The host's table has no such syscall.
    Syscall,
    /// The program lacks this grant.
    Grant(String),
}

/// Defines every function of the imported instance `name` as a trap naming what is missing,
/// and its resources as opaque host types (nothing can make one).
fn define_traps(
    engine: &wasmtime::Engine,
    component: &Component,
    linker: &mut Linker<CallState>,
    name: &str,
    missing: Missing,
) -> wasmtime::Result<()> {
    let ty = component.component_type();
    // The resources of the imports before this one: one this interface only `use`s is
    // defined there, and must not be defined again here.
    let mut earlier = Vec::new();
    let mut found = None;
    for (import, item) in ty.imports(engine).map(|(n, e)| (n, e.ty)) {
        let ComponentItem::ComponentInstance(instance) = item else {
            continue;
        };
        if import == name {
            found = Some(instance);
            break;
        }
        earlier.extend(instance.exports(engine).filter_map(|(_, e)| match e.ty {
            ComponentItem::Resource(r) => Some(r),
            _ => None,
        }));
    }
    let Some(instance) = found else {
        return Ok(());
    };
    let mut linker = linker.instance(name)?;
    for (export, item) in instance.exports(engine).map(|(n, e)| (n, e.ty)) {
        match item {
            ComponentItem::ComponentFunc(_) => {
                let qualified = format!("{name}#{export}");
                let missing = missing.clone();
                linker.func_new(export, move |mut store, _, _, _| {
                    let state = store.data_mut();
                    let program = state.call.program.name.to_string();
                    let tool = state.call.tool.clone();
                    let syscall = qualified.clone();
                    Err(state.fault(match &missing {
                        Missing::Syscall => Error::MissingSyscall {
                            program,
                            tool,
                            syscall,
                        },
                        Missing::Grant(grant) => Error::NotGranted {
                            program,
                            tool,
                            syscall,
                            grant: grant.clone(),
                        },
                    }))
                })?;
            }
            ComponentItem::Resource(resource) if !earlier.contains(&resource) => {
                linker.resource(export, ResourceType::host::<Opaque>(), |_, _| Ok(()))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The host type behind the resources of an interface linked as traps.
struct Opaque;

/// The functions of a berm interface backed by table syscalls of `module`.
fn define_berm(
    instance: &mut LinkerInstance<'_, CallState>,
    module: &str,
    syscalls: &[(String, Syscall)],
) -> wasmtime::Result<()> {
    let get = |name: &str| {
        syscalls
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| Arc::new(s.clone()))
    };
    match module {
        "log" => {
            if let Some(write) = get("write") {
                instance.func_wrap_async(
                    "write",
                    move |mut store, (level, message): (Level, String)| {
                        let write = write.clone();
                        Box::new(async move {
                            let level = match level {
                                Level::Error => "error",
                                Level::Warn => "warn",
                                Level::Info => "info",
                                Level::Debug => "debug",
                                Level::Trace => "trace",
                            };
                            let request = frame::encode(&[level.as_bytes(), message.as_bytes()]);
                            let _ = run(&mut store, &write, request).await?;
                            Ok(())
                        })
                    },
                )?;
            }
        }
        "clock" => {
            if let Some(now) = get("now") {
                instance.func_wrap_async("now", move |mut store, (): ()| {
                    let now = now.clone();
                    Box::new(async move {
                        Ok((match run(&mut store, &now, Vec::new()).await? {
                            Ok(Reply::Word(ns)) => ns as u64,
                            _ => 0,
                        },))
                    })
                })?;
            }
            if let Some(sleep) = get("sleep") {
                instance.func_wrap_async("sleep", move |mut store, (ms,): (u64,)| {
                    let sleep = sleep.clone();
                    Box::new(async move {
                        let request = frame::encode(&[ms.to_string().as_bytes()]);
                        let _ = run(&mut store, &sleep, request).await?;
                        Ok(())
                    })
                })?;
            }
        }
        "random" => {
            if let Some(fill) = get("fill") {
                instance.func_wrap_async("bytes", move |mut store, (len,): (u32,)| {
                    let fill = fill.clone();
                    Box::new(async move {
                        let len = (len as usize).min(64 << 10);
                        let mut buffer = vec![0u8; len];
                        let reply = run_in(&mut store, &fill, &mut buffer).await?;
                        Ok((match reply {
                            Ok(_) => buffer,
                            Err(_) => Vec::new(),
                        },))
                    })
                })?;
            }
        }
        "kv" => {
            if let Some(s) = get("get") {
                instance.func_wrap_async("get", move |mut store, (key,): (String,)| {
                    let s = s.clone();
                    Box::new(async move {
                        let reply = run(&mut store, &s, frame::encode(&[key.as_bytes()])).await?;
                        Ok((match reply {
                            Ok(reply) => Ok(Some(bytes_of(reply))),
                            Err(e) if e.0 == ErrorCode::NotFound => Ok(None),
                            Err(e) => Err(e.into_wit()),
                        },))
                    })
                })?;
            }
            if let Some(s) = get("put") {
                instance.func_wrap_async(
                    "put",
                    move |mut store, (key, value): (String, Vec<u8>)| {
                        let s = s.clone();
                        Box::new(async move {
                            let reply =
                                run(&mut store, &s, frame::encode(&[key.as_bytes(), &value]))
                                    .await?;
                            Ok((reply.map(drop).map_err(Refused::into_wit),))
                        })
                    },
                )?;
            }
            if let Some(s) = get("delete") {
                instance.func_wrap_async("delete", move |mut store, (key,): (String,)| {
                    let s = s.clone();
                    Box::new(async move {
                        let reply = run(&mut store, &s, frame::encode(&[key.as_bytes()])).await?;
                        Ok((match reply {
                            Ok(_) => Ok(true),
                            Err(e) if e.0 == ErrorCode::NotFound => Ok(false),
                            Err(e) => Err(e.into_wit()),
                        },))
                    })
                })?;
            }
            if let Some(s) = get("list") {
                instance.func_wrap_async("list", move |mut store, (prefix,): (String,)| {
                    let s = s.clone();
                    Box::new(async move {
                        let reply =
                            run(&mut store, &s, frame::encode(&[prefix.as_bytes()])).await?;
                        Ok((reply.map_err(Refused::into_wit).and_then(|reply| {
                            let bytes = bytes_of(reply);
                            let keys = frame::decode(&bytes)
                                .map_err(|e| WitError::invalid(format!("kv.list reply: {e}")))?;
                            Ok(keys
                                .into_iter()
                                .map(|k| String::from_utf8_lossy(k).into_owned())
                                .collect::<Vec<_>>())
                        }),))
                    })
                })?;
            }
        }
        "fs" => {
            if let Some(s) = get("read") {
                instance.func_wrap_async("read", move |mut store, (path,): (String,)| {
                    let s = s.clone();
                    Box::new(async move {
                        let reply = run(&mut store, &s, frame::encode(&[path.as_bytes()])).await?;
                        Ok((reply.map(bytes_of).map_err(Refused::into_wit),))
                    })
                })?;
            }
            if let Some(s) = get("write") {
                instance.func_wrap_async(
                    "write",
                    move |mut store, (path, contents): (String, Vec<u8>)| {
                        let s = s.clone();
                        Box::new(async move {
                            let reply =
                                run(&mut store, &s, frame::encode(&[path.as_bytes(), &contents]))
                                    .await?;
                            Ok((reply.map(drop).map_err(Refused::into_wit),))
                        })
                    },
                )?;
            }
            if let Some(s) = get("list") {
                instance.func_wrap_async("list", move |mut store, (path,): (String,)| {
                    let s = s.clone();
                    Box::new(async move {
                        let reply = run(&mut store, &s, frame::encode(&[path.as_bytes()])).await?;
                        Ok((reply
                            .map_err(Refused::into_wit)
                            .and_then(|reply| entries(&bytes_of(reply))),))
                    })
                })?;
            }
            if let Some(s) = get("remove") {
                instance.func_wrap_async("remove", move |mut store, (path,): (String,)| {
                    let s = s.clone();
                    Box::new(async move {
                        let reply = run(&mut store, &s, frame::encode(&[path.as_bytes()])).await?;
                        Ok((reply.map(drop).map_err(Refused::into_wit),))
                    })
                })?;
            }
        }
        "http" => {
            if let Some(s) = get("fetch") {
                instance.func_wrap_async(
                    "fetch",
                    move |mut store, (request,): (HttpRequest,)| {
                        let s = s.clone();
                        Box::new(async move {
                            let mut headers: Vec<&[u8]> = Vec::new();
                            for (name, value) in &request.headers {
                                headers.push(name.as_bytes());
                                headers.push(value.as_bytes());
                            }
                            let headers = frame::encode(&headers);
                            let frames = frame::encode(&[
                                request.method.as_bytes(),
                                request.url.as_bytes(),
                                &headers,
                                &request.body,
                            ]);
                            let reply = run(&mut store, &s, frames).await?;
                            Ok((reply
                                .map_err(Refused::into_wit)
                                .and_then(|reply| response(&bytes_of(reply))),))
                        })
                    },
                )?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A syscall's refusal: its code and message.
struct Refused(ErrorCode, String);

impl Refused {
    fn into_wit(self) -> WitError {
        WitError::new(self.0, self.1)
    }
}

fn bytes_of(reply: Reply) -> Vec<u8> {
    match reply {
        Reply::Staged(bytes) | Reply::Reserved(bytes, _) => bytes,
        Reply::Word(_) => Vec::new(),
    }
}

/// `fs.list`'s JSON reply as entries.
fn entries(reply: &[u8]) -> Result<Vec<Entry>, WitError> {
    #[derive(serde::Deserialize)]
    struct Listed {
        name: String,
        kind: String,
        size: u64,
    }
    let listed: Vec<Listed> = serde_json::from_slice(reply)
        .map_err(|e| WitError::invalid(format!("fs.list reply: {e}")))?;
    Ok(listed
        .into_iter()
        .map(|l| Entry {
            name: l.name,
            kind: match l.kind.as_str() {
                "file" => EntryKind::File,
                "dir" => EntryKind::Dir,
                "symlink" => EntryKind::Symlink,
                _ => EntryKind::Other,
            },
            size: l.size,
        })
        .collect())
}

/// `http.fetch`'s reply, frames `[status, headers, body]`, as a response.
fn response(reply: &[u8]) -> Result<HttpResponse, WitError> {
    let bad = |e: String| WitError::invalid(format!("http.fetch reply: {e}"));
    let [status, headers, body] =
        frame::decode_exact::<3>(reply).map_err(|e| bad(e.to_string()))?;
    let status = std::str::from_utf8(status)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status".into()))?;
    let fields = frame::decode(headers).map_err(|e| bad(e.to_string()))?;
    let headers = fields
        .chunks(2)
        .filter_map(|pair| match pair {
            [name, value] => Some((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            )),
            _ => None,
        })
        .collect();
    Ok(HttpResponse {
        status,
        headers,
        body: body.to_vec(),
    })
}

/// Runs `syscall` on `request` as a core module's import would, for a component's call.
async fn run(
    store: &mut StoreContextMut<'_, CallState>,
    syscall: &Syscall,
    mut request: Vec<u8>,
) -> wasmtime::Result<Result<Reply, Refused>> {
    run_in(store, syscall, &mut request).await
}

async fn run_in(
    store: &mut StoreContextMut<'_, CallState>,
    syscall: &Syscall,
    region: &mut [u8],
) -> wasmtime::Result<Result<Reply, Refused>> {
    let result = match &syscall.kind {
        Kind::Immediate(handler) => handler(&linker::context(store.data()), region),
        Kind::Blocking(handler) => {
            let pending = handler(&linker::context(store.data()), region);
            match pending {
                Ok(pending) => pending.await,
                Err(e) => Err(e),
            }
        }
    };
    let state = store.data_mut();
    match result {
        Ok(Reply::Word(word)) if word < 0 => Err(state.fault(Error::Syscall {
            program: state.call.program.name.to_string(),
            tool: state.call.tool.clone(),
            syscall: format!("{}.{}", syscall.module, syscall.name),
            message: format!("host bug: negative success word {word}"),
        })),
        Ok(reply) => Ok(Ok(reply)),
        Err(SyscallError::Code { code, message }) => Ok(Err(Refused(code, message))),
        Err(SyscallError::Trap(message)) => Err(state.fault(Error::Syscall {
            program: state.call.program.name.to_string(),
            tool: state.call.tool.clone(),
            syscall: format!("{}.{}", syscall.module, syscall.name),
            message,
        })),
    }
}

/// `berm:program/progress`: ABI 1's `berm.progress`; a report it would refuse is dropped.
fn define_progress(instance: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    instance.func_wrap(
        "report",
        |mut store: StoreContextMut<'_, CallState>,
         (progress, total, message): (f64, Option<f64>, Option<String>)| {
            let request = frame::encode(&[
                progress.to_string().as_bytes(),
                total.map(|t| t.to_string()).unwrap_or_default().as_bytes(),
                message.as_deref().unwrap_or("").as_bytes(),
            ]);
            let state = store.data_mut();
            match linker::parse_progress(&request, state.progress) {
                Ok(report) => {
                    state.progress = Some(report.progress);
                    state.progress_reports += 1;
                    if let Some(sink) = &state.call.progress
                        && state.progress_reports <= crate::progress::MAX_PROGRESS_REPORTS
                    {
                        sink.report(&state.call.program.name, &report);
                    }
                }
                Err(message) => tracing::debug!(target: "program", program = %state.call.program.name, "{message}"),
            }
            Ok(())
        },
    )
}

/// `berm:program/content`: ABI 1's `berm.content`, with the same checks and caps.
fn define_content(instance: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    instance.func_wrap(
        "add",
        |mut store: StoreContextMut<'_, CallState>, (block,): (Block,)| {
            let state = store.data_mut();
            if state.content.len() >= content::MAX_BLOCKS {
                return Ok((Err(WitError::new(
                    ErrorCode::TooLarge,
                    format!("more than {} content blocks", content::MAX_BLOCKS),
                )),));
            }
            let kind = match block.kind {
                ContentKind::Text => content::Kind::Text,
                ContentKind::Image => content::Kind::Image,
                ContentKind::Audio => content::Kind::Audio,
                ContentKind::ResourceText => content::Kind::ResourceText,
                ContentKind::ResourceBlob => content::Kind::ResourceBlob,
                ContentKind::ResourceLink => content::Kind::ResourceLink,
            };
            let request = content::encode(kind, &block.uri, &block.mime_type, &block.body);
            if let Err(e) = content::parse(&request) {
                return Ok((Err(WitError::invalid(e.to_string())),));
            }
            let size =
                state.content_bytes + block.uri.len() + block.mime_type.len() + block.body.len();
            linker::check_result_size(state, size)?;
            state.content_bytes = size;
            state.content.push(Content {
                kind,
                uri: block.uri,
                mime_type: block.mime_type,
                body: block.body,
            });
            Ok((Ok(()),))
        },
    )
}

/// `berm:program/call`: ABI 1's `berm.call`, checked the same way before anything runs.
fn define_call(instance: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    instance.func_wrap_async(
        "call",
        |mut store: StoreContextMut<'_, CallState>, (program, tool, args): (String, String, String)| {
            Box::new(async move {
                let request = frame::encode(&[program.as_bytes(), tool.as_bytes(), args.as_bytes()]);
                let state = store.data_mut();
                let parsed = linker::parse_call(&request, &state.call, state.programs.as_ref()).and_then(
                    |(program, tool, args)| {
                        let memory = &state.call.program.host_memory;
                        match memory.reserve(linker::BERM_CALL, args.as_bytes().len()) {
                            Ok(held) => Ok((state.nested(program, tool, args), held)),
                            Err(over) => Err((ErrorCode::TooLarge, over.to_string())),
                        }
                    },
                );
                let (invocation, _held) = match parsed {
                    Ok(parsed) => parsed,
                    Err((code, message)) => return Ok((Err(WitError::new(code, message)),)),
                };
                let result = state.programs.clone().call_nested(invocation).await;
                Ok((match result {
                    Ok(Ok(output)) if output.ask.is_some() => Ok(CallOutcome::Failed(
                        "the callee asked for the client's input, which a call from another program cannot give".into(),
                    )),
                    Ok(Ok(output)) => Ok(CallOutcome::Done(output.text)),
                    Ok(Err(failure)) => Ok(CallOutcome::Failed(failure.message)),
                    Err(error) => Err(WitError::new(linker::call_error_code(&error), error.to_string())),
                },))
            })
        },
    )
}

/// `berm:program/ask`: `ask` is ABI 1's `berm.ask` and ends the call; `input` is
/// `berm.input`.
fn define_ask(instance: &mut LinkerInstance<'_, CallState>) -> wasmtime::Result<()> {
    instance.func_wrap(
        "ask",
        |mut store: StoreContextMut<'_, CallState>,
         (requests, asked_state): (String, Vec<u8>)|
         -> wasmtime::Result<()> {
            let state = store.data_mut();
            if state.outcome.is_some() {
                return Err(state.violation("ask after the tool gave its result"));
            }
            let size = state.content_bytes + requests.len() + asked_state.len();
            linker::check_result_size(state, size)?;
            let request = frame::encode(&[requests.as_bytes(), &asked_state]);
            let ask =
                linker::parse_ask(&request).map_err(|e| state.violation(&format!("ask: {e}")))?;
            state.outcome = Some(Outcome::Asked(ask));
            Err(wasmtime::Error::new(Asked))
        },
    )?;
    instance.func_wrap(
        "input",
        |store: StoreContextMut<'_, CallState>, (): ()| -> wasmtime::Result<(Option<Resumed>,)> {
            let Some(input) = store.data().call.input.clone() else {
                return Ok((None,));
            };
            let resumed = frame::decode_exact::<3>(&input)
                .ok()
                .map(|[responses, state, caps]| Resumed {
                    responses: String::from_utf8_lossy(responses).into_owned(),
                    state: state.to_vec(),
                    client_capabilities: String::from_utf8_lossy(caps).into_owned(),
                });
            Ok((resumed,))
        },
    )?;
    Ok(())
}
