//! One call on a fresh instance: what its store holds ([`CallState`]), the bounds it runs
//! under (the memory limiter and the epoch deadline) and how its end is named ([`classify`]).
//!
//! `call.rs` (the runtime's programs by name) and `linker.rs` (the imports a program is
//! linked with) both build on this module and on nothing of each other: a call between
//! programs goes back to the runtime through the [`Programs`] trait object the state holds.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Extern, InstancePre, Memory, ModuleExport, ResourceLimiter, Store, UpdateDeadline};

use crate::host_memory::{HostMemory, Reservation};
use crate::program::ProgramInfo;
use crate::{Content, Engine, Error, Failure, Output, ProgressSink};

/// A call's two levels of result: the host's error outside, the program's failure inside.
pub(crate) type CallResult = Result<Result<Output, Failure>, Error>;

/// A program ready to be called: compiled, linked and pre-instantiated. `name` is
/// `info.name`, shared cheaply with every call it makes.
pub(crate) struct Program {
    pub name: Arc<str>,
    pub info: ProgramInfo,
    pub code: Code,
    pub data: Option<Arc<dyn Any + Send + Sync>>,
    /// Its host memory budget, shared by all its calls.
    pub host_memory: Arc<HostMemory>,
    /// For a component granted `fs=DIR` that imports `wasi:filesystem`: the directory, its
    /// one preopen.
    pub wasi_preopen: Option<std::path::PathBuf>,
    /// For a component granted `net=`: the host's `http.fetch`, which sends its `wasi:http`
    /// requests.
    pub http_fetch: Option<crate::Syscall>,
}

/// A program's code, linked and pre-instantiated: a core module or a component.
pub(crate) enum Code {
    Module {
        pre: InstancePre<CallState>,
        tools: HashMap<String, ModuleExport>,
        memory: ModuleExport,
    },
    Component {
        pre: wasmtime::component::InstancePre<CallState>,
        tools: HashMap<String, Arc<crate::component::ComponentTool>>,
    },
}

/// How one tool is entered.
#[derive(Clone)]
pub(crate) enum Export {
    Module(ModuleExport),
    Component(Arc<crate::component::ComponentTool>),
}

/// One call to run: of `program`, `tool` with `args`.
pub(crate) struct Invocation {
    pub program: Arc<Program>,
    pub tool: String,
    pub args: Vec<u8>,
    pub caller: Option<Arc<str>>,
    pub depth: u32,
    pub deadline: Instant,
    pub budget: Duration,
    /// The host's record of this call ([`crate::CallTrace`]); a nested call starts with its
    /// caller's, which the gate replaces with the callee's own.
    pub trace: Option<crate::CallTrace>,
    /// Where its `berm.progress` reports go: only a call from outside has one.
    pub progress: Option<Arc<dyn ProgressSink>>,
    /// What `berm.input` hands over: only a call from outside has it.
    pub input: Option<Arc<[u8]>>,
}

/// A tool resolved once: its program as deployed and the tool's export. A host resolves a
/// name at its edge ([`crate::Berm::resolve`]) and hands the target down, so nothing on the
/// way to the instance looks the name up again; a call in flight keeps the program it was
/// resolved to, even if the name is deployed anew meanwhile.
#[derive(Clone)]
pub struct Target {
    pub(crate) program: Arc<Program>,
    pub(crate) tool: String,
    pub(crate) export: Export,
}

impl Target {
    /// `tool` of `program`, or the error naming the tools it has.
    pub(crate) fn of(program: Arc<Program>, tool: &str) -> Result<Target, Error> {
        let export = match &program.code {
            Code::Module { tools, .. } => tools.get(tool).cloned().map(Export::Module),
            Code::Component { tools, .. } => tools.get(tool).cloned().map(Export::Component),
        };
        let Some(export) = export else {
            let mut available: Vec<&str> = match &program.code {
                Code::Module { tools, .. } => tools.keys().map(String::as_str).collect(),
                Code::Component { tools, .. } => tools.keys().map(String::as_str).collect(),
            };
            available.sort_unstable();
            return Err(Error::NoSuchTool {
                program: program.name.to_string(),
                tool: tool.to_string(),
                available: available.join(", "),
            });
        };
        Ok(Target {
            program,
            tool: tool.to_string(),
            export,
        })
    }

    /// The program's name.
    pub fn program(&self) -> &str {
        &self.program.name
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The program as deployed: its digest, manifest and limits.
    pub fn info(&self) -> &ProgramInfo {
        &self.program.info
    }

    /// `args` within the program's argument cap: the one check of it on a call's way in.
    ///
    /// # Errors
    /// [`Error::ArgsTooLarge`].
    pub fn check_args(&self, args: Vec<u8>) -> Result<CheckedArgs, Error> {
        check_args(&self.program.info, &self.tool, args)
    }
}

/// Arguments checked against their program's cap ([`Target::check_args`]): a call runs only
/// with such, so no path reaches an instance with the cap unchecked, or checks it twice.
#[derive(Debug, Clone)]
pub struct CheckedArgs(Vec<u8>);

impl CheckedArgs {
    /// The argument bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Arguments of `size` bytes for `tool` of `program`, within its argument cap: the one
/// place the cap is checked, before the arguments are copied or parsed.
fn within_cap(program: &ProgramInfo, tool: &str, size: usize) -> Result<(), Error> {
    let cap = program.limits.max_args_bytes;
    if size > cap {
        return Err(Error::ArgsTooLarge {
            program: program.name.clone(),
            tool: tool.to_string(),
            size,
            cap,
        });
    }
    Ok(())
}

/// `args` for `tool` of `program`, within its argument cap.
pub(crate) fn check_args(
    program: &ProgramInfo,
    tool: &str,
    args: Vec<u8>,
) -> Result<CheckedArgs, Error> {
    within_cap(program, tool, args.len())?;
    Ok(CheckedArgs(args))
}

/// `args` in a caller's memory for `tool` of `program`, copied once they are known to fit its
/// argument cap.
pub(crate) fn copy_checked_args(
    program: &ProgramInfo,
    tool: &str,
    args: &[u8],
) -> Result<CheckedArgs, Error> {
    within_cap(program, tool, args.len())?;
    Ok(CheckedArgs(args.to_vec()))
}

/// The running program's way to the others: the runtime finds `program` by name, and runs
/// the call (boxed: the call may nest again).
pub(crate) trait Programs: Send + Sync {
    /// The program deployed as `name`, looked up once for a nested call: its argument cap
    /// is checked before the arguments are copied, and the call runs on it.
    fn program(&self, name: &str) -> Option<Arc<Program>>;

    /// Runs a call one program makes to another, its arguments checked.
    fn call_nested(
        self: Arc<Self>,
        invocation: Invocation,
    ) -> Pin<Box<dyn Future<Output = CallResult> + Send>>;
}

/// What the tool said before returning.
pub(crate) enum Outcome {
    Done(Vec<u8>),
    Failed(Vec<u8>),
    Asked(crate::Ask),
}

/// The program broke the calling convention; carried as a trap.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Violation(pub String);

/// Marks a trap whose real cause is recorded in [`CallState::fault`].
#[derive(Debug, thiserror::Error)]
#[error("the host stopped the call")]
struct Faulted;

#[derive(Debug, thiserror::Error)]
#[error("deadline reached")]
struct DeadlineReached;

/// Everything one call's store holds. Dropped with the store when the call
/// ends: nothing survives it.
pub(crate) struct CallState {
    pub call: Invocation,
    pub outcome: Option<Outcome>,
    /// Blocks added with `berm.content`, and their bytes, which count against the result cap.
    pub content: Vec<Content>,
    pub content_bytes: usize,
    /// The last `berm.progress` value, and how many reports were made.
    pub progress: Option<f64>,
    pub progress_reports: u32,
    pub staged: Staged,
    pub memory: Option<Memory>,
    pub panic: Option<String>,
    pub programs: Arc<dyn Programs>,
    /// A component's WASI state; `None` for a core module.
    pub component: Option<Box<crate::component_wasi::ComponentCtx>>,
    fault: Option<Error>,
    timed_out: bool,
    limiter: MemoryLimiter,
}

impl CallState {
    /// The guest region `(ptr, len)`, or a trap naming the bad pointer.
    pub fn region<'m>(
        &self,
        memory: &'m mut [u8],
        ptr: i32,
        len: i32,
    ) -> wasmtime::Result<&'m mut [u8]> {
        let start = ptr as u32 as usize;
        let end = start.checked_add(len as u32 as usize);
        match end {
            Some(end) if end <= memory.len() => Ok(&mut memory[start..end]),
            _ => Err(self.violation(&format!(
                "pointer {start:#x} + length {} is outside its {}-byte memory",
                len as u32,
                memory.len()
            ))),
        }
    }

    /// Records `error` as the outer result and returns the trap that stops
    /// the guest.
    pub fn fault(&mut self, error: Error) -> wasmtime::Error {
        self.fault.get_or_insert(error);
        wasmtime::Error::new(Faulted)
    }

    /// Whether the host has recorded why the call stops.
    pub fn faulted(&self) -> bool {
        self.fault.is_some()
    }

    /// A component's WASI state, made at its first use: a call that uses no WASI pays
    /// nothing for it.
    fn wasi_state(&mut self) -> &mut crate::component_wasi::ComponentCtx {
        let call = &self.call;
        self.component.get_or_insert_with(|| {
            Box::new(crate::component_wasi::ComponentCtx::new(
                &call.program,
                call.deadline,
                call.trace.clone(),
            ))
        })
    }

    /// `wasi:clocks`, for the linker.
    pub fn wasi_clocks(&mut self) -> wasmtime_wasi::clocks::WasiClocksCtxView<'_> {
        wasmtime_wasi::clocks::WasiClocksView::clocks(self)
    }

    /// `wasi:random`, for the linker.
    pub fn wasi_random(&mut self) -> &mut wasmtime_wasi::random::WasiRandomCtx {
        self.wasi_state().wasi.random()
    }

    /// `wasi:filesystem`, for the linker.
    pub fn wasi_filesystem(&mut self) -> wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_> {
        wasmtime_wasi::filesystem::WasiFilesystemView::filesystem(self)
    }

    /// `wasi:cli`, for the linker.
    pub fn wasi_cli(&mut self) -> wasmtime_wasi::cli::WasiCliCtxView<'_> {
        wasmtime_wasi::cli::WasiCliView::cli(self)
    }

    /// `wasi:http`, for the linker.
    pub fn wasi_http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        let state = self.wasi_state();
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut state.http,
            table: &mut state.table,
            hooks: &mut state.hooks,
        }
    }

    /// A calling-convention violation, as a trap.
    pub fn violation(&self, message: &str) -> wasmtime::Error {
        wasmtime::Error::new(Violation(message.to_string()))
    }

    /// A call this program makes to `program` (looked up once), from inside this one: one
    /// level deeper, under the same deadline, attributed to this program.
    pub fn nested(&self, program: Arc<Program>, tool: String, args: CheckedArgs) -> Invocation {
        Invocation {
            program,
            tool,
            args: args.into_bytes(),
            caller: Some(self.call.program.name.clone()),
            depth: self.call.depth + 1,
            deadline: self.call.deadline,
            budget: self.call.budget,
            trace: self.call.trace.clone(),
            progress: None,
            input: None,
        }
    }
}

impl wasmtime_wasi::WasiView for CallState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        let state = self.wasi_state();
        wasmtime_wasi::WasiCtxView {
            ctx: &mut state.wasi,
            table: &mut state.table,
        }
    }
}

impl wasmtime_wasi_io::IoView for CallState {
    fn table(&mut self) -> &mut wasmtime::component::ResourceTable {
        &mut self.wasi_state().table
    }
}

/// What `berm.reply` hands over next: the last syscall's reply or error message. A reply
/// holds its bytes of the program's host memory until it is pulled, replaced, or the call
/// ends (the store, and so this, is dropped however the call ends).
#[derive(Default)]
pub(crate) struct Staged {
    pub bytes: Vec<u8>,
    _held: Option<Reservation>,
}

impl Staged {
    /// An error message: the host's own text, a few KiB at most, uncounted.
    pub fn message(message: String) -> Staged {
        Staged {
            bytes: message.into_bytes(),
            _held: None,
        }
    }
}

impl CallState {
    /// Stages `bytes` as `syscall`'s reply, held against the program's host memory: by
    /// `held` when the handler reserved them already (resized to their length), else by a
    /// reservation made now. The previous reply is released first, since this one replaces
    /// it. Past the budget the reply is dropped and the refusal's message staged instead;
    /// the error is the word the program gets.
    pub fn stage(
        &mut self,
        syscall: &str,
        bytes: Vec<u8>,
        held: Option<Reservation>,
    ) -> Result<(), i64> {
        self.staged = Staged::default();
        let held = match held {
            Some(mut held) => held.resize(syscall, bytes.len()).map(|()| held),
            None => self.call.program.host_memory.reserve(syscall, bytes.len()),
        };
        match held {
            Ok(held) => {
                self.staged = Staged {
                    bytes,
                    _held: Some(held),
                };
                Ok(())
            }
            Err(over) => {
                self.staged = Staged::message(over.to_string());
                Err(berm_abi::word::ErrorCode::TooLarge.word())
            }
        }
    }
}

/// Caps memory growth and remembers whether it refused, so the outer error
/// can say "memory cap" rather than "unreachable".
/// The cap covers all of an instance's memories together: a component's core modules each
/// have their own.
struct MemoryLimiter {
    cap: usize,
    used: usize,
    denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        let allowed = total <= self.cap;
        if allowed {
            self.used = total;
        }
        self.denied |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// Runs `invocation` on a fresh instance of its program, calling `export` (its tool's,
/// resolved once by the caller, as were its arguments checked); nested calls reach other
/// programs through `programs`. The depth was checked by the caller.
pub(crate) async fn invoke(
    engine: &Engine,
    programs: Arc<dyn Programs>,
    invocation: Invocation,
    export: &Export,
) -> CallResult {
    let program = invocation.program.clone();
    let mut store = store(engine, programs, invocation);
    let result = match (export, &program.code) {
        (Export::Module(export), Code::Module { pre, memory, .. }) => {
            run(&mut store, pre, memory, export).await
        }
        (Export::Component(tool), Code::Component { pre, .. }) => {
            match crate::component::run(&mut store, pre, tool).await {
                Ok(()) => Ok(()),
                Err(crate::component::Stop::Instantiate(message)) => {
                    Err(Stop::Instantiate(message))
                }
                // `ask` ends the call with its outcome recorded: not a failure.
                Err(crate::component::Stop::Trap(e))
                    if e.is::<crate::component_link::Asked>()
                        && matches!(store.data().outcome, Some(Outcome::Asked(_))) =>
                {
                    Ok(())
                }
                Err(crate::component::Stop::Trap(e)) => Err(Stop::Trap(e)),
            }
        }
        _ => Err(Stop::Instantiate(
            "the tool's export is not of its program's kind".into(),
        )),
    };
    if let Some(component) = &store.data().component {
        let state = store.data();
        component
            .output
            .flush(&state.call.program.name, &state.call.tool);
    }
    let mut state = store.into_data();
    // Names for an error are only built when there is one: the success
    // path is the hot one.
    let tool = std::mem::take(&mut state.call.tool);
    let name = || program.name.to_string();
    match result {
        Ok(()) => match state.outcome.take() {
            Some(Outcome::Done(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => Ok(Ok(Output {
                    text,
                    content: state.content,
                    ask: None,
                })),
                Err(_) => Err(Error::Convention {
                    program: name(),
                    tool,
                    message: "its result is not UTF-8".into(),
                }),
            },
            Some(Outcome::Failed(bytes)) => Ok(Err(Failure {
                message: String::from_utf8_lossy(&bytes).into_owned(),
            })),
            Some(Outcome::Asked(ask)) => Ok(Ok(Output {
                text: String::new(),
                content: state.content,
                ask: Some(ask),
            })),
            None => Err(Error::Convention {
                program: name(),
                tool,
                message: "the tool returned without calling `berm.done` or `berm.fail`".into(),
            }),
        },
        Err(Stop::Instantiate(message)) => Err(Error::Instantiate {
            program: name(),
            tool,
            message,
        }),
        Err(Stop::Trap(error)) => {
            let stack = engine.config().max_wasm_stack;
            Err(classify(error, state, name(), tool, stack))
        }
    }
}

/// The store one call runs in, with its memory cap and its deadline.
fn store(engine: &Engine, programs: Arc<dyn Programs>, invocation: Invocation) -> Store<CallState> {
    let deadline = invocation.deadline;
    let limiter = MemoryLimiter {
        cap: invocation.program.info.limits.memory_bytes,
        used: 0,
        denied: false,
    };

    let state = CallState {
        call: invocation,
        outcome: None,
        content: Vec::new(),
        content_bytes: 0,
        progress: None,
        progress_reports: 0,
        staged: Staged::default(),
        memory: None,
        panic: None,
        programs,
        component: None,
        fault: None,
        timed_out: false,
        limiter,
    };
    let mut store = Store::new(engine.wasmtime(), state);
    store.limiter(|state| &mut state.limiter);
    // The first check comes at the next tick; from then on every tick
    // yields to the executor (so a busy program cannot starve others on
    // the same thread) until the deadline, which stops the call.
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut store| {
        if Instant::now() >= deadline {
            store.data_mut().timed_out = true;
            Err(wasmtime::Error::new(DeadlineReached))
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    store
}

enum Stop {
    Instantiate(String),
    Trap(wasmtime::Error),
}

async fn run(
    store: &mut Store<CallState>,
    pre: &InstancePre<CallState>,
    memory: &ModuleExport,
    export: &wasmtime::ModuleExport,
) -> Result<(), Stop> {
    let instance = pre.instantiate_async(&mut *store).await.map_err(|e| {
        // A start function that traps or breaks the convention fails
        // instantiation; anything else (a full pool) is the host's.
        if e.is::<wasmtime::Trap>() || e.is::<Violation>() || e.is::<Faulted>() {
            Stop::Trap(e)
        } else {
            Stop::Instantiate(format!("{e:#}"))
        }
    })?;
    let memory = match instance.get_module_export(&mut *store, memory) {
        Some(Extern::Memory(memory)) => memory,
        // Deploy checked the export is a memory; an index from the same
        // module always resolves.
        _ => {
            return Err(Stop::Instantiate(
                "the module's memory export is missing".into(),
            ));
        }
    };
    store.data_mut().memory = Some(memory);
    let func = match instance.get_module_export(&mut *store, export) {
        Some(Extern::Func(func)) => func,
        _ => return Err(Stop::Instantiate("the tool's export is missing".into())),
    };
    let func = func
        .typed::<(), ()>(&*store)
        .map_err(|e| Stop::Instantiate(format!("{e:#}")))?;
    func.call_async(&mut *store, ()).await.map_err(Stop::Trap)
}

/// Names the real reason a call trapped, in order of certainty: what the
/// host recorded, the deadline, a panic message, the stack, the memory cap.
fn classify(
    error: wasmtime::Error,
    mut state: CallState,
    program: String,
    tool: String,
    stack_limit: usize,
) -> Error {
    if let Some(fault) = state.fault.take() {
        return fault;
    }
    if state.timed_out {
        return Error::Timeout {
            program,
            tool,
            deadline: state.call.budget,
        };
    }
    if let Some(message) = state.panic.take() {
        return Error::Panicked {
            program,
            tool,
            message,
        };
    }
    if let Some(Violation(message)) = error.downcast_ref::<Violation>() {
        return Error::Convention {
            program,
            tool,
            message: message.clone(),
        };
    }
    if let Some(wasmtime::Trap::StackOverflow) = error.downcast_ref::<wasmtime::Trap>() {
        return Error::StackOverflow {
            program,
            tool,
            limit: stack_limit,
        };
    }
    if state.limiter.denied {
        return Error::MemoryCap {
            program,
            tool,
            cap: state.limiter.cap,
        };
    }
    let message = match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    Error::Trap {
        program,
        tool,
        message,
    }
}
