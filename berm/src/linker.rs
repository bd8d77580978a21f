//! The linker a program is instantiated with: the calling convention, the
//! granted syscalls, and a trap for every other import.
//!
//! A program's imports are resolved once, at deploy. Each one becomes either
//! a calling-convention function, a syscall from the host's table, or a
//! function that stops the call with an error naming the import and what is
//! missing (the syscall, or its grant). So a program whose one tool needs
//! `fs.read` still deploys into a host without `fs`, and its other tools work.

use std::collections::HashMap;
use std::sync::Arc;

use berm_abi::word::{self, ErrorCode};
use berm_abi::{CONVENTION_MODULE, content, convention, frame};
use wasmtime::{Caller, ExternType, Linker, Module, ValType};

use crate::DeployError;
use crate::error::{Content, Error};
use crate::invocation::{
    CallState, CheckedArgs, Invocation, Outcome, Program, Programs, Staged, Violation,
    copy_checked_args,
};
use crate::program::Grants;
use crate::progress::{MAX_PROGRESS_MESSAGE, MAX_PROGRESS_REPORTS, Progress};
use crate::syscall::{Kind, Reply, Syscall, SyscallContext, SyscallError};

/// Syscalls by `(module, name)`.
pub(crate) type SyscallTable = HashMap<(String, String), Syscall>;

/// `berm.call`, as a budget refusal names it.
pub(crate) const BERM_CALL: &str = "berm.call";

/// Largest panic message kept; the rest is cut.
const MAX_PANIC_MESSAGE: usize = 16 << 10;

/// The calling convention, shared by every program (`berm.call` is linked per program, by
/// grant: [`program_linker`]).
pub(crate) fn convention_linker(engine: &wasmtime::Engine) -> Linker<CallState> {
    let mut linker = Linker::new(engine);
    // Each name is defined once on a fresh linker, so defining cannot fail:
    // `func_wrap` only errors on a duplicate definition.
    let defined = define_convention(&mut linker);
    debug_assert!(defined.is_ok(), "{defined:?}");
    linker
}

fn define_convention(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    define_region(linker, convention::ARGS, |memory, state, ptr, len| {
        let (word, _) = hand_over(state, memory, ptr, len, &state.call.args)?;
        Ok(word)
    })?;
    for (name, failed) in [(convention::DONE, false), (convention::FAIL, true)] {
        define_region(linker, name, move |memory, state, ptr, len| {
            if state.outcome.is_some() {
                return Err(state.violation("the tool gave its result twice"));
            }
            let size = len as u32 as usize + if failed { 0 } else { state.content_bytes };
            check_result_size(state, size)?;
            let bytes = state.region(memory, ptr, len)?.to_vec();
            state.outcome = Some(if failed {
                Outcome::Failed(bytes)
            } else {
                Outcome::Done(bytes)
            });
            Ok(0)
        })?;
    }
    define_region(linker, convention::CONTENT, |memory, state, ptr, len| {
        if state.outcome.is_some() {
            return Err(state.violation("berm.content after the tool gave its result"));
        }
        if state.content.len() >= content::MAX_BLOCKS {
            return Err(state.violation(&format!(
                "berm.content: more than {} content blocks",
                content::MAX_BLOCKS
            )));
        }
        let block = match content::parse(state.region(memory, ptr, len)?) {
            Ok(block) => block,
            Err(e) => return Err(state.violation(&format!("berm.content: {e}"))),
        };
        // Checked before anything is copied.
        let size = state.content_bytes + block.uri.len() + block.mime_type.len() + block.body.len();
        check_result_size(state, size)?;
        let block = Content {
            kind: block.kind,
            uri: block.uri.to_string(),
            mime_type: block.mime_type.to_string(),
            body: block.body.to_vec(),
        };
        state.content_bytes = size;
        state.content.push(block);
        Ok(0)
    })?;
    define_region(linker, convention::PROGRESS, |memory, state, ptr, len| {
        let request = state.region(memory, ptr, len)?;
        let report = match parse_progress(request, state.progress) {
            Ok(report) => report,
            Err(message) => {
                state.staged = Staged::message(message);
                return Ok(ErrorCode::Invalid.word());
            }
        };
        state.progress = Some(report.progress);
        state.progress_reports += 1;
        if let Some(sink) = &state.call.progress
            && state.progress_reports <= MAX_PROGRESS_REPORTS
        {
            sink.report(&state.call.program.name, &report);
        }
        Ok(0)
    })?;
    define_region(linker, convention::INPUT, |memory, state, ptr, len| {
        let Some(input) = state.call.input.clone() else {
            return Ok(word::success(0, 0));
        };
        let (word, _) = hand_over(state, memory, ptr, len, &input)?;
        Ok(word)
    })?;
    define_region(linker, convention::REPLY, |memory, state, ptr, len| {
        // Pulled, the reply is dropped and its host memory given back.
        let staged = std::mem::take(&mut state.staged);
        let (word, copied) = hand_over(state, memory, ptr, len, &staged.bytes)?;
        if !copied {
            state.staged = staged;
        }
        Ok(word)
    })?;
    define_region(linker, convention::PANIC, |memory, state, ptr, len| {
        let len = (len as u32).min(MAX_PANIC_MESSAGE as u32) as i32;
        let message = String::from_utf8_lossy(state.region(memory, ptr, len)?).into_owned();
        state.panic = Some(message);
        Ok(0)
    })?;
    Ok(())
}

/// Stops the call when its result (text and content blocks) would be `size` bytes, past the
/// program's result cap.
pub(crate) fn check_result_size(state: &mut CallState, size: usize) -> wasmtime::Result<()> {
    let cap = state.call.program.info.limits.max_result_bytes;
    if size > cap {
        return Err(state.fault(Error::ResultTooLarge {
            program: state.call.program.name.to_string(),
            tool: state.call.tool.clone(),
            size,
            cap,
        }));
    }
    Ok(())
}

/// Reads a `berm.progress` request, frames `[progress, total, message]`, against the call's
/// last report: the message is what the program gets back when it is refused.
pub(crate) fn parse_progress(request: &[u8], last: Option<f64>) -> Result<Progress<'_>, String> {
    let [progress, total, message] = frame::decode_exact::<3>(request)
        .map_err(|e| format!("berm.progress: {e} (expected [progress, total, message])"))?;
    let number = |field: &str, text: &[u8]| {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| {
                format!(
                    "berm.progress: {field} `{}` is not a finite number of at least 0",
                    String::from_utf8_lossy(&text[..text.len().min(64)])
                )
            })
    };
    let progress = number("progress", progress)?;
    if let Some(last) = last
        && progress < last
    {
        return Err(format!(
            "berm.progress: progress {progress} is less than the last report's {last}; it must not go back"
        ));
    }
    let total = match total {
        [] => None,
        text => Some(number("total", text)?),
    };
    let message = match message {
        [] => None,
        bytes => {
            let cut = &bytes[..bytes.len().min(MAX_PROGRESS_MESSAGE)];
            let text = match std::str::from_utf8(cut) {
                Ok(text) => text,
                // Cut inside a character: keep the characters before it.
                Err(e) if cut.len() < bytes.len() && e.error_len().is_none() => {
                    std::str::from_utf8(&cut[..e.valid_up_to()]).unwrap_or_default()
                }
                Err(_) => return Err("berm.progress: the message is not UTF-8".into()),
            };
            Some(text)
        }
    };
    Ok(Progress {
        progress,
        total,
        message,
    })
}

/// `berm.ask`, for a program with the `ask` grant: ends the call asking the client for input
/// ([`parse_ask`]).
fn define_ask(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    define_region(linker, convention::ASK, |memory, state, ptr, len| {
        if state.outcome.is_some() {
            return Err(state.violation("berm.ask after the tool gave its result"));
        }
        let size = state.content_bytes + len as u32 as usize;
        check_result_size(state, size)?;
        let ask = match parse_ask(state.region(memory, ptr, len)?) {
            Ok(ask) => ask,
            Err(e) => return Err(state.violation(&format!("berm.ask: {e}"))),
        };
        state.outcome = Some(Outcome::Asked(ask));
        Ok(0)
    })
}

/// Reads a `berm.ask` request, frames `[requests, state]`: at most
/// [`berm_abi::ask::MAX_REQUESTS`] requests by valid keys, each an object with a `method`
/// a program may ask and an object `params` (`{}` when left out), and a state of at most
/// [`berm_abi::ask::MAX_STATE_BYTES`].
pub(crate) fn parse_ask(request: &[u8]) -> Result<crate::Ask, String> {
    use berm_abi::ask;
    let [requests, state] = frame::decode_exact::<2>(request)
        .map_err(|e| format!("{e} (expected [requests, state])"))?;
    if requests.len() > ask::MAX_REQUESTS_BYTES {
        return Err(format!(
            "the requests are {} bytes of JSON, over the cap of {}",
            requests.len(),
            ask::MAX_REQUESTS_BYTES
        ));
    }
    if state.len() > ask::MAX_STATE_BYTES {
        return Err(format!(
            "the state is {} bytes, over the cap of {}",
            state.len(),
            ask::MAX_STATE_BYTES
        ));
    }
    let serde_json::Value::Object(mut requests) =
        serde_json::from_slice(requests).map_err(|e| format!("the requests are not JSON: {e}"))?
    else {
        return Err("the requests must be a JSON object of requests by key".into());
    };
    if requests.is_empty() || requests.len() > ask::MAX_REQUESTS {
        return Err(format!(
            "{} requests; ask for 1 to {}",
            requests.len(),
            ask::MAX_REQUESTS
        ));
    }
    for (key, request) in requests.iter_mut() {
        if !ask::is_valid_key(key) {
            return Err(format!(
                "request key `{}` is not 1 to {} of A-Z, a-z, 0-9, `_`, `-`, `.`",
                key.chars().take(80).collect::<String>(),
                ask::MAX_KEY
            ));
        }
        let Some(fields) = request.as_object_mut() else {
            return Err(format!("request `{key}` is not an object"));
        };
        let method = fields.get("method").and_then(|m| m.as_str()).unwrap_or("");
        if ask::capability_for(method).is_none() {
            let methods: Vec<&str> = ask::METHODS.iter().map(|(m, _)| *m).collect();
            return Err(format!(
                "request `{key}`: method `{method}` is not one a program may ask (one of {})",
                methods.join(", ")
            ));
        }
        match fields.get("params") {
            None => {
                fields.insert("params".into(), serde_json::json!({}));
            }
            Some(serde_json::Value::Object(_)) => {}
            Some(_) => return Err(format!("request `{key}`: params must be an object")),
        }
        if let Some(extra) = fields.keys().find(|k| *k != "method" && *k != "params") {
            return Err(format!("request `{key}` has unknown field `{extra}`"));
        }
    }
    Ok(crate::Ask {
        requests,
        state: state.to_vec(),
    })
}

/// `berm.call`, for a program with a `call=` grant: each call is checked against the
/// caller's grants and manifest ([`parse_call`]) before anything of the callee is looked up.
fn define_call(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        CONVENTION_MODULE,
        convention::CALL,
        |mut caller: Caller<'_, CallState>, (ptr, len): (i32, i32)| {
            Box::new(async move {
                let (memory, state) = guest_memory(&mut caller)?;
                let request = state.region(memory, ptr, len)?;
                let parsed = parse_call(request, &state.call, state.programs.as_ref()).and_then(
                    |(program, tool, args)| {
                        // The arguments are held, copied, until the nested call ends.
                        let memory = &state.call.program.host_memory;
                        match memory.reserve(BERM_CALL, args.as_bytes().len()) {
                            Ok(held) => Ok((state.nested(program, tool, args), held)),
                            Err(over) => Err((ErrorCode::TooLarge, over.to_string())),
                        }
                    },
                );
                let (invocation, _args_held) = match parsed {
                    Ok(parsed) => parsed,
                    Err((code, message)) => {
                        state.staged = Staged::message(message);
                        return Ok(code.word());
                    }
                };
                let result = state.programs.clone().call_nested(invocation).await;
                let state = caller.data_mut();
                let (status, text) = match result {
                    Ok(Ok(output)) if output.ask.is_some() => (
                        word::STATUS_FAILED,
                        "the callee asked for the client's input, which a call from another program cannot give".to_string(),
                    ),
                    // The callee's content blocks are for an MCP client; a program reads text.
                    Ok(Ok(output)) => (word::STATUS_DONE, output.text),
                    Ok(Err(failure)) => (word::STATUS_FAILED, failure.message),
                    Err(error) => {
                        let code = call_error_code(&error);
                        state.staged = Staged::message(error.to_string());
                        return Ok(code.word());
                    }
                };
                stage(state, BERM_CALL, status, text.into_bytes(), None)
            })
        },
    )?;
    Ok(())
}

/// The code a caller gets for a call between programs that the host stopped.
pub(crate) fn call_error_code(error: &Error) -> ErrorCode {
    match error {
        Error::NoSuchProgram(_) | Error::NoSuchTool { .. } => ErrorCode::NotFound,
        Error::DepthExceeded { .. } => ErrorCode::Depth,
        Error::ArgsTooLarge { .. } => ErrorCode::TooLarge,
        Error::InvalidArguments { .. } => ErrorCode::Invalid,
        Error::CallNotGranted { .. } | Error::CallNotDeclared { .. } | Error::Busy { .. } => {
            ErrorCode::Denied
        }
        _ => ErrorCode::Fault,
    }
}

/// Reads a `berm.call` request in place and copies only what the call
/// keeps: two names (checked against the naming rule, so at most 64 bytes
/// each) and the arguments, once they are known to fit the callee's cap. A
/// region of any size costs the host no more than that. A callee outside the caller's
/// manifest `calls` or `call=` grants is refused before it is looked up, so an ungranted
/// program cannot even learn which programs exist.
pub(crate) fn parse_call(
    request: &[u8],
    call: &Invocation,
    programs: &dyn Programs,
) -> Result<(Arc<Program>, String, CheckedArgs), (ErrorCode, String)> {
    let invalid = |message: String| (ErrorCode::Invalid, message);
    let [program, tool, args] = frame::decode_exact::<3>(request).map_err(|e| {
        invalid(format!(
            "berm.call: {e}; expected frames [program, tool, args]"
        ))
    })?;
    let name = |field: &[u8], what: &str| match std::str::from_utf8(field) {
        Ok(name) if berm_abi::is_valid_name(name) => Ok(name.to_string()),
        _ => Err(invalid(format!(
            "berm.call: the {what} name is not a valid name ([a-z0-9][a-z0-9_-]{{0,63}})"
        ))),
    };
    let (program, tool) = (name(program, "program")?, name(tool, "tool")?);
    reachable(call, &program, &tool).map_err(|e| (ErrorCode::Denied, e.to_string()))?;
    let Some(callee) = programs.program(&program) else {
        return Err((
            ErrorCode::NotFound,
            Error::NoSuchProgram(program).to_string(),
        ));
    };
    let args = copy_checked_args(&callee.info, &tool, args)
        .map_err(|e| (ErrorCode::TooLarge, e.to_string()))?;
    Ok((callee, tool, args))
}

/// Whether the program making `call` may call `program.tool`: its manifest declares
/// `program` in `calls`, and one of its `call=` grants names it (or that one tool).
fn reachable(call: &Invocation, program: &str, tool: &str) -> Result<(), Error> {
    let info = &call.program.info;
    let declared = &info.manifest.calls;
    if !declared.iter().any(|d| d == program) {
        return Err(Error::CallNotDeclared {
            program: info.name.clone(),
            tool: call.tool.clone(),
            callee: program.to_string(),
            declared: match declared.is_empty() {
                true => "it declares none".into(),
                false => format!("it declares {}", declared.join(", ")),
            },
        });
    }
    if !info.grants.allows_call(program, tool) {
        return Err(Error::CallNotGranted {
            program: info.name.clone(),
            tool: call.tool.clone(),
            callee: program.to_string(),
            callee_tool: tool.to_string(),
        });
    }
    Ok(())
}

/// Defines the convention import `name` (`(ptr: i32, len: i32) -> i64`), whose handler gets
/// the program's memory, the call's state and the `(ptr, len)` it passed.
fn define_region(
    linker: &mut Linker<CallState>,
    name: &str,
    handler: impl Fn(&mut [u8], &mut CallState, i32, i32) -> wasmtime::Result<i64>
    + Send
    + Sync
    + 'static,
) -> wasmtime::Result<()> {
    linker.func_wrap(
        CONVENTION_MODULE,
        name,
        move |mut caller: Caller<'_, CallState>, ptr: i32, len: i32| -> wasmtime::Result<i64> {
            let (memory, state) = guest_memory(&mut caller)?;
            handler(memory, state, ptr, len)
        },
    )?;
    Ok(())
}

/// Copies `bytes` into the program's `(ptr, len)` buffer when they fit. The word carries their
/// length either way, so a program can ask again with a buffer that fits; the flag says
/// whether they were copied.
fn hand_over(
    state: &CallState,
    memory: &mut [u8],
    ptr: i32,
    len: i32,
    bytes: &[u8],
) -> wasmtime::Result<(i64, bool)> {
    let total = bytes.len();
    let fits = (len as u32 as usize) >= total;
    if fits {
        state
            .region(memory, ptr, total as i32)?
            .copy_from_slice(bytes);
    }
    Ok((word::success(0, total as u32), fits))
}

/// Stages a syscall's reply: the word is `status` and its length, or `too_large` past the
/// budget.
fn stage(
    state: &mut CallState,
    qualified: &str,
    status: u32,
    bytes: Vec<u8>,
    held: Option<crate::Reservation>,
) -> wasmtime::Result<i64> {
    let len = bytes.len() as u32;
    Ok(match state.stage(qualified, bytes, held) {
        Ok(()) => word::success(status, len),
        Err(refused) => refused,
    })
}

fn guest_memory<'a>(
    caller: &'a mut Caller<'_, CallState>,
) -> wasmtime::Result<(&'a mut [u8], &'a mut CallState)> {
    let Some(memory) = caller.data().memory else {
        // The memory is set right after instantiation, before any export
        // runs; a start function calling an import gets here.
        return Err(wasmtime::Error::new(Violation(
            "an import was called before the call started (from a start function?)".into(),
        )));
    };
    Ok(memory.data_and_store_mut(caller))
}

/// Resolves every import of `module`: convention, granted syscall, or trap. `berm.call` is
/// linked only with a `call=` grant; without one it is a trap naming the grant, `call=P`
/// when the manifest's `calls` declares the one program `P`.
pub(crate) fn program_linker(
    base: &Linker<CallState>,
    module: &Module,
    table: &SyscallTable,
    grants: &Grants,
    calls: &[String],
) -> Result<Linker<CallState>, DeployError> {
    let mut linker = base.clone();
    for import in module.imports() {
        let qualified = format!("{}.{}", import.module(), import.name());
        let ty = match import.ty() {
            ExternType::Func(ty) => ty,
            other => {
                let kind = match other {
                    ExternType::Memory(_) => "memory",
                    ExternType::Table(_) => "table",
                    ExternType::Global(_) => "global",
                    _ => "tag",
                };
                // Manifest::check refuses these first; kept so the linker
                // never depends on that order.
                return Err(crate::ManifestError::ImportKind {
                    import: qualified,
                    kind: kind.into(),
                }
                .into());
            }
        };
        let params: Vec<ValType> = ty.params().collect();
        let results: Vec<ValType> = ty.results().collect();
        let uniform = matches!(params.as_slice(), [ValType::I32, ValType::I32])
            && matches!(results.as_slice(), [ValType::I64]);
        if !uniform {
            return Err(DeployError::ImportType {
                import: qualified,
                found: crate::shape::signature(&params, &results),
            });
        }
        if import.module() == CONVENTION_MODULE {
            if !convention::ALL.contains(&import.name()) {
                return Err(DeployError::UnknownConvention(import.name().to_string()));
            }
            if import.name() == convention::ASK {
                let key = (import.module().to_string(), import.name().to_string());
                let defined = if grants.allows(berm_abi::grant::Grant::Ask.module()) {
                    define_ask(&mut linker)
                } else {
                    define_trap(
                        &mut linker,
                        &key,
                        Missing::Grant(berm_abi::grant::Grant::Ask.to_string()),
                    )
                };
                defined.map_err(|e| {
                    DeployError::Compile(format!("could not link `{qualified}`: {e}"))
                })?;
                continue;
            }
            if import.name() != convention::CALL {
                continue;
            }
        }
        let key = (import.module().to_string(), import.name().to_string());
        let missing_grant = Missing::Grant(match calls {
            [only] if import.module() == CONVENTION_MODULE => format!("call={only}"),
            _ => berm_abi::grant_for(import.module()).to_string(),
        });
        let granted = grants.allows(import.module());
        let defined = match table.get(&key) {
            _ if import.module() == CONVENTION_MODULE && granted => define_call(&mut linker),
            _ if import.module() == CONVENTION_MODULE => {
                define_trap(&mut linker, &key, missing_grant)
            }
            Some(syscall) if granted => define_syscall(&mut linker, syscall),
            Some(_) => define_trap(&mut linker, &key, missing_grant),
            None => define_trap(&mut linker, &key, Missing::Syscall),
        };
        defined.map_err(|e| DeployError::Compile(format!("could not link `{qualified}`: {e}")))?;
    }
    Ok(linker)
}

/// Why an import is a trap: the host does not serve it, or the program lacks this grant.
enum Missing {
    Syscall,
    Grant(String),
}

fn define_trap(
    linker: &mut Linker<CallState>,
    (module, name): &(String, String),
    missing: Missing,
) -> wasmtime::Result<()> {
    let syscall = format!("{module}.{name}");
    linker.func_wrap(
        module,
        name,
        move |mut caller: Caller<'_, CallState>, _: i32, _: i32| -> wasmtime::Result<i64> {
            let state = caller.data_mut();
            let program = state.call.program.name.to_string();
            let tool = state.call.tool.clone();
            let syscall = syscall.clone();
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
        },
    )?;
    Ok(())
}

fn define_syscall(linker: &mut Linker<CallState>, syscall: &Syscall) -> wasmtime::Result<()> {
    let qualified: Arc<str> = format!("{}.{}", syscall.module, syscall.name).into();
    match &syscall.kind {
        Kind::Immediate(handler) => {
            let handler = handler.clone();
            linker.func_wrap(
                &syscall.module,
                &syscall.name,
                move |mut caller: Caller<'_, CallState>, ptr: i32, len: i32| {
                    let (memory, state) = guest_memory(&mut caller)?;
                    let region = state.region(memory, ptr, len)?;
                    let result = handler(&context(state), region);
                    answer(state, &qualified, result)
                },
            )?;
        }
        Kind::Blocking(handler) => {
            let handler = handler.clone();
            linker.func_wrap_async(
                &syscall.module,
                &syscall.name,
                move |mut caller: Caller<'_, CallState>, (ptr, len): (i32, i32)| {
                    let handler = handler.clone();
                    let qualified = qualified.clone();
                    Box::new(async move {
                        let pending = {
                            let (memory, state) = guest_memory(&mut caller)?;
                            let region = state.region(memory, ptr, len)?;
                            handler(&context(state), region)
                        };
                        let result = match pending {
                            Ok(pending) => pending.await,
                            Err(error) => Err(error),
                        };
                        answer(caller.data_mut(), &qualified, result)
                    })
                },
            )?;
        }
    }
    Ok(())
}

pub(crate) fn context(state: &CallState) -> SyscallContext<'_> {
    SyscallContext {
        program: &state.call.program.name,
        tool: &state.call.tool,
        digest: &state.call.program.info.digest,
        caller: state.call.caller.as_deref(),
        deadline: state.call.deadline,
        data: state.call.program.data.as_deref(),
        trace: state.call.trace.as_ref(),
        host_memory: &state.call.program.host_memory,
    }
}

/// Turns a handler's result into the word the guest gets (staging a reply
/// or message), or the trap that stops the call.
fn answer(
    state: &mut CallState,
    qualified: &str,
    result: Result<Reply, SyscallError>,
) -> wasmtime::Result<i64> {
    match result {
        Ok(Reply::Word(word)) if word >= 0 => Ok(word),
        Ok(Reply::Word(word)) => Err(state.fault(Error::Syscall {
            program: state.call.program.name.to_string(),
            tool: state.call.tool.clone(),
            syscall: qualified.to_string(),
            message: format!("host bug: negative success word {word}"),
        })),
        Ok(Reply::Staged(bytes)) => stage(state, qualified, 0, bytes, None),
        Ok(Reply::Reserved(bytes, held)) => stage(state, qualified, 0, bytes, Some(held)),
        Err(SyscallError::Code { code, message }) => {
            state.staged = Staged::message(message);
            Ok(code.word())
        }
        Err(SyscallError::Trap(message)) => Err(state.fault(Error::Syscall {
            program: state.call.program.name.to_string(),
            tool: state.call.tool.clone(),
            syscall: qualified.to_string(),
            message,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(requests: &str, state: &[u8]) -> Result<crate::Ask, String> {
        parse_ask(&frame::encode(&[requests.as_bytes(), state]))
    }

    #[test]
    fn an_ask_is_checked_before_the_host_relays_it() {
        let ok = ask(
            r#"{"roots": {"method": "roots/list"}, "name": {"method": "elicitation/create", "params": {"message": "?"}}}"#,
            b"state",
        )
        .unwrap();
        assert_eq!(ok.state, b"state");
        // A left-out params is an empty object.
        assert_eq!(ok.requests["roots"]["params"], serde_json::json!({}));

        for (requests, says) in [
            ("[]", "must be a JSON object"),
            ("{}", "0 requests"),
            ("not json", "not JSON"),
            (r#"{"a b": {"method": "roots/list"}}"#, "request key `a b`"),
            (
                r#"{"x": {"method": "tools/call"}}"#,
                "method `tools/call` is not one a program may ask",
            ),
            (
                r#"{"x": {"method": "roots/list", "params": 1}}"#,
                "params must be an object",
            ),
            (
                r#"{"x": {"method": "roots/list", "id": 1}}"#,
                "unknown field `id`",
            ),
            (r#"{"x": 1}"#, "request `x` is not an object"),
        ] {
            let err = ask(requests, b"").unwrap_err();
            assert!(err.contains(says), "{requests}: {err}");
        }
        let many: serde_json::Map<String, serde_json::Value> = (0..17)
            .map(|i| (format!("k{i}"), serde_json::json!({"method": "roots/list"})))
            .collect();
        let err = ask(&serde_json::Value::Object(many).to_string(), b"").unwrap_err();
        assert!(err.contains("17 requests; ask for 1 to 16"), "{err}");
        let big = vec![0u8; berm_abi::ask::MAX_STATE_BYTES + 1];
        let err = ask(r#"{"x": {"method": "roots/list"}}"#, &big).unwrap_err();
        assert!(err.contains("over the cap of 16384"), "{err}");
        let err = parse_ask(&frame::encode(&[b"{}"])).unwrap_err();
        assert!(err.contains("expected [requests, state]"), "{err}");
    }
}
