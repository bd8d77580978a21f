//! Calling programs: a fresh instance per call, bounded in time, memory,
//! stack and size, and calls between programs by name.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use wasmtime::{Extern, Linker, Memory, Module, ResourceLimiter, Store, UpdateDeadline};

use crate::cache::CodeCache;
use crate::linker::{self, SyscallTable};
use crate::program::{CompileSource, DeployOptions, Deployed, Program, ProgramInfo};
use crate::{DeployError, Digest, Engine, Error, Failure, Manifest, Syscall};

/// How deep calls between programs may nest: a program called from outside
/// is at depth 1, a program it calls at depth 2, and so on.
pub const DEFAULT_CALL_DEPTH: u32 = 8;

/// Options for one call from outside.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The deadline for this call (and the calls it makes), instead of the
    /// program's own.
    pub deadline: Option<Duration>,
}

/// Where a [`Berm`] looks for compiled code before compiling: first the
/// read-only `precompiled` directory, then the writable `cache` (where what
/// it compiles is stored). Files in both are named
/// `<digest hex>-<engine fingerprint>.cwasm` ([`crate::Precompiled::file_name`]),
/// so code from an engine with other settings is never picked up.
#[derive(Debug, Clone, Default)]
pub struct CodeDirs {
    /// The writable compiled-code cache; `None` keeps compiled code in
    /// memory only.
    pub cache: Option<PathBuf>,
    /// A read-only directory of [`crate::Engine::precompile`] output from an
    /// engine with the same configuration. Never written to: a file there
    /// Wasmtime refuses is logged and skipped, and the code is compiled.
    pub precompiled: Option<PathBuf>,
}

/// The runtime: programs deployed by name, each called on a fresh instance.
/// Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Berm {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    engine: Engine,
    max_depth: u32,
    table: SyscallTable,
    base: Linker<CallState>,
    programs: RwLock<HashMap<String, Arc<Program>>>,
    modules: Mutex<HashMap<Digest, Module>>,
    precompiled: Option<CodeCache>,
    cache: Option<CodeCache>,
}

impl Berm {
    /// A runtime on `engine` whose programs may reach exactly `syscalls`
    /// (beyond the calling convention and calls between programs), with
    /// calls nested at most `max_depth` deep. A syscall listed twice is
    /// served by the last entry.
    pub fn new(engine: &Engine, max_depth: u32, syscalls: Vec<Syscall>) -> Berm {
        Berm::with_code_dirs(engine, max_depth, syscalls, CodeDirs::default())
    }

    /// Like [`Berm::new`], with compiled code stored in and loaded from
    /// `cache_dir`, so that a restart deploys without compiling.
    pub fn with_code_cache(
        engine: &Engine,
        max_depth: u32,
        syscalls: Vec<Syscall>,
        cache_dir: PathBuf,
    ) -> Berm {
        let dirs = CodeDirs {
            cache: Some(cache_dir),
            precompiled: None,
        };
        Berm::with_code_dirs(engine, max_depth, syscalls, dirs)
    }

    /// Like [`Berm::new`], with compiled code looked for in `dirs` (the
    /// read-only precompiled directory first, then the cache) before
    /// anything is compiled.
    pub fn with_code_dirs(
        engine: &Engine,
        max_depth: u32,
        syscalls: Vec<Syscall>,
        dirs: CodeDirs,
    ) -> Berm {
        let table = syscalls
            .into_iter()
            .map(|s| ((s.module.clone(), s.name.clone()), s))
            .collect();
        Berm {
            inner: Arc::new(Inner {
                engine: engine.clone(),
                max_depth,
                table,
                base: linker::convention_linker(engine.wasmtime()),
                programs: RwLock::new(HashMap::new()),
                modules: Mutex::new(HashMap::new()),
                precompiled: dirs
                    .precompiled
                    .map(|dir| CodeCache::read_only(dir, engine.fingerprint())),
                cache: dirs
                    .cache
                    .map(|dir| CodeCache::writable(dir, engine.fingerprint())),
            }),
        }
    }

    /// Deploys `wasm` under `name` with every syscall in the table granted,
    /// replacing what the name held.
    pub fn deploy(&self, name: &str, wasm: &[u8]) -> Result<Deployed, DeployError> {
        self.deploy_with(name, wasm, DeployOptions::default())
    }

    /// Deploys `wasm` under `name`: reads and checks the manifest, compiles
    /// once per digest (or loads compiled code from the cache), links the
    /// imports and pre-instantiates. Nothing changes if it fails.
    pub fn deploy_with(
        &self,
        name: &str,
        wasm: &[u8],
        options: DeployOptions,
    ) -> Result<Deployed, DeployError> {
        if !berm_abi::is_valid_name(name) {
            return Err(DeployError::InvalidName(name.chars().take(80).collect()));
        }
        let manifest = Manifest::from_image(wasm)?;
        manifest.check()?;
        crate::shape::check(wasm)?;
        let limits = options
            .limits
            .unwrap_or_else(|| self.inner.engine.config().limits.clone());
        let max = self.inner.engine.config().max_memory_bytes;
        if limits.memory_bytes > max {
            return Err(DeployError::Limits {
                cap: limits.memory_bytes,
                max,
            });
        }
        let digest = Digest::of(wasm);
        let started = Instant::now();
        let (module, source) = self.inner.module(digest, wasm)?;
        let code_time = started.elapsed();
        let linker = linker::program_linker(
            &self.inner.base,
            &module,
            &self.inner.table,
            &options.grants,
        )?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| DeployError::Compile(format!("{e:#}")))?;

        let memory = module
            .get_export_index(berm_abi::MEMORY_EXPORT)
            .ok_or(crate::ManifestError::NoMemory)?;
        let mut tools = HashMap::new();
        for tool in &manifest.tools {
            let export_name = format!("{}{}", berm_abi::TOOL_EXPORT_PREFIX, tool.name);
            let ty = module.get_export(&export_name);
            let is_unit_func = matches!(
                &ty,
                Some(wasmtime::ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0
            );
            if !is_unit_func {
                return Err(DeployError::Export {
                    export: export_name,
                    problem: "must be a function of type () -> ()".into(),
                });
            }
            let index = module
                .get_export_index(&export_name)
                .ok_or_else(|| crate::ManifestError::MissingExport(tool.name.clone()))?;
            tools.insert(tool.name.clone(), index);
        }

        let manifest = Arc::new(manifest);
        let program = Arc::new(Program {
            name: name.into(),
            digest,
            manifest: manifest.clone(),
            grants: options.grants,
            limits,
            source,
            code_time,
            pre,
            tools,
            memory,
            data: options.data,
        });
        let replaced = self
            .inner
            .programs
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_string(), program)
            .map(|old| old.digest);
        Ok(Deployed {
            digest,
            manifest,
            source,
            code_time,
            replaced,
        })
    }

    /// Removes a program; returns its digest if it was deployed. Calls in
    /// flight finish on the instance they started with.
    pub fn remove(&self, name: &str) -> Option<Digest> {
        self.inner
            .programs
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name)
            .map(|p| p.digest)
    }

    /// Every deployed program, sorted by name.
    pub fn list(&self) -> Vec<ProgramInfo> {
        let programs = self
            .inner
            .programs
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut list: Vec<_> = programs.values().map(|p| p.info()).collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// One deployed program.
    pub fn get(&self, name: &str) -> Option<ProgramInfo> {
        self.inner.program(name).map(|p| p.info())
    }

    /// Calls `program.tool` with `args` (JSON bytes, by the SDK's
    /// convention) on a fresh instance. `caller` names who is asking, for
    /// syscalls that attribute work.
    ///
    /// The outer error is the host's; the inner one is the program's own
    /// failure.
    pub async fn call(
        &self,
        caller: Option<&str>,
        program: &str,
        tool: &str,
        args: Vec<u8>,
    ) -> Result<Result<String, Failure>, Error> {
        self.call_with(caller, program, tool, args, &CallOptions::default())
            .await
    }

    /// [`Berm::call`] with options.
    pub async fn call_with(
        &self,
        caller: Option<&str>,
        program: &str,
        tool: &str,
        args: Vec<u8>,
        options: &CallOptions,
    ) -> Result<Result<String, Failure>, Error> {
        let budget = match options.deadline {
            Some(deadline) => deadline,
            None => {
                self.inner
                    .program(program)
                    .ok_or_else(|| Error::NoSuchProgram(program.to_string()))?
                    .limits
                    .deadline
            }
        };
        let invocation = Invocation {
            program: program.to_string(),
            tool: tool.to_string(),
            args,
            caller: caller.map(Arc::from),
            depth: 1,
            deadline: Instant::now() + budget,
            budget,
        };
        self.inner.clone().invoke(invocation).await
    }

    /// The engine this runtime runs on.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The file code for `digest` is loaded from when it comes from the read-only precompiled
    /// directory ([`CompileSource::Precompiled`]), so a host can report the digest of the
    /// code it maps; `None` without such a directory.
    pub fn precompiled_file(&self, digest: &Digest) -> Option<std::path::PathBuf> {
        self.inner.precompiled.as_ref().map(|c| c.path(digest))
    }
}

/// One call to run.
pub(crate) struct Invocation {
    pub program: String,
    pub tool: String,
    pub args: Vec<u8>,
    pub caller: Option<Arc<str>>,
    pub depth: u32,
    pub deadline: Instant,
    pub budget: Duration,
}

/// What the tool said before returning.
pub(crate) enum Outcome {
    Done(Vec<u8>),
    Failed(Vec<u8>),
}

/// The program broke the calling convention; carried as a trap.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Violation(pub String);

/// Marks a trap whose real cause is recorded in [`CallState::fault`].
#[derive(Debug, thiserror::Error)]
#[error("the host stopped the call")]
struct Faulted;

/// Everything one call's store holds. Dropped with the store when the call
/// ends: nothing survives it.
pub(crate) struct CallState {
    pub program: Arc<Program>,
    pub tool: String,
    pub args: Vec<u8>,
    pub caller: Option<Arc<str>>,
    pub depth: u32,
    pub deadline: Instant,
    pub budget: Duration,
    pub outcome: Option<Outcome>,
    pub staged: Vec<u8>,
    pub memory: Option<Memory>,
    pub panic: Option<String>,
    pub berm: Arc<Inner>,
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

    /// A calling-convention violation, as a trap.
    pub fn violation(&self, message: &str) -> wasmtime::Error {
        wasmtime::Error::new(Violation(message.to_string()))
    }
}

/// Caps memory growth and remembers whether it refused, so the outer error
/// can say "memory cap" rather than "unreachable".
struct MemoryLimiter {
    cap: usize,
    denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.cap;
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

#[derive(Debug, thiserror::Error)]
#[error("deadline reached")]
struct DeadlineReached;

impl Inner {
    pub(crate) fn program(&self, name: &str) -> Option<Arc<Program>> {
        self.programs
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
    }

    /// The compiled module for `digest`: from memory, the disk cache, or a
    /// fresh compile (then stored in both).
    fn module(&self, digest: Digest, wasm: &[u8]) -> Result<(Module, CompileSource), DeployError> {
        let mut modules = self
            .modules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(module) = modules.get(&digest) {
            return Ok((module.clone(), CompileSource::Memory));
        }
        let engine = self.engine.wasmtime();
        let precompiled = self
            .precompiled
            .as_ref()
            .and_then(|c| c.load(engine, &digest));
        let cached = || self.cache.as_ref().and_then(|c| c.load(engine, &digest));
        let (module, source) = match precompiled {
            Some(module) => (module, CompileSource::Precompiled),
            None => match cached() {
                Some(module) => (module, CompileSource::DiskCache),
                None => {
                    let module = Module::from_binary(engine, wasm)
                        .map_err(|e| DeployError::Compile(format!("{e:#}")))?;
                    if let Some(cache) = &self.cache {
                        cache.store(&digest, &module)?;
                    }
                    (module, CompileSource::Compiled)
                }
            },
        };
        modules.insert(digest, module.clone());
        Ok((module, source))
    }

    /// Runs one call on a fresh instance.
    pub(crate) async fn invoke(
        self: Arc<Self>,
        invocation: Invocation,
    ) -> Result<Result<String, Failure>, Error> {
        let Invocation {
            program: name,
            tool,
            args,
            caller,
            depth,
            deadline,
            budget,
        } = invocation;
        if depth > self.max_depth {
            return Err(Error::DepthExceeded {
                program: name,
                tool,
                limit: self.max_depth,
            });
        }
        let program = self.program(&name).ok_or(Error::NoSuchProgram(name))?;
        let Some(export) = program.tools.get(&tool).cloned() else {
            let mut available: Vec<&str> = program.tools.keys().map(String::as_str).collect();
            available.sort_unstable();
            return Err(Error::NoSuchTool {
                program: program.name.to_string(),
                tool,
                available: available.join(", "),
            });
        };
        if args.len() > program.limits.max_args_bytes {
            return Err(Error::ArgsTooLarge {
                program: program.name.to_string(),
                tool,
                size: args.len(),
                cap: program.limits.max_args_bytes,
            });
        }

        let limiter = MemoryLimiter {
            cap: program.limits.memory_bytes,
            denied: false,
        };
        let state = CallState {
            program: program.clone(),
            tool,
            args,
            caller,
            depth,
            deadline,
            budget,
            outcome: None,
            staged: Vec::new(),
            memory: None,
            panic: None,
            berm: self.clone(),
            fault: None,
            timed_out: false,
            limiter,
        };
        let mut store = Store::new(self.engine.wasmtime(), state);
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

        let result = run(&mut store, &program, &export).await;
        let mut state = store.into_data();
        // Names for an error are only built when there is one: the success
        // path is the hot one.
        let program = state.program.clone();
        let tool = std::mem::take(&mut state.tool);
        match result {
            Ok(()) => match state.outcome.take() {
                Some(Outcome::Done(bytes)) => {
                    String::from_utf8(bytes)
                        .map(Ok)
                        .map_err(|_| Error::Convention {
                            program: program.name.to_string(),
                            tool,
                            message: "its result is not UTF-8".into(),
                        })
                }
                Some(Outcome::Failed(bytes)) => Ok(Err(Failure {
                    message: String::from_utf8_lossy(&bytes).into_owned(),
                })),
                None => Err(Error::Convention {
                    program: program.name.to_string(),
                    tool,
                    message: "the tool returned without calling `berm.done` or `berm.fail`".into(),
                }),
            },
            Err(Stop::Instantiate(message)) => Err(Error::Instantiate {
                program: program.name.to_string(),
                tool,
                message,
            }),
            Err(Stop::Trap(error)) => Err(classify(error, state, program.name.to_string(), tool)),
        }
    }
}

enum Stop {
    Instantiate(String),
    Trap(wasmtime::Error),
}

async fn run(
    store: &mut Store<CallState>,
    program: &Program,
    export: &wasmtime::ModuleExport,
) -> Result<(), Stop> {
    let instance = program
        .pre
        .instantiate_async(&mut *store)
        .await
        .map_err(|e| {
            // A start function that traps or breaks the convention fails
            // instantiation; anything else (a full pool) is the host's.
            if e.is::<wasmtime::Trap>() || e.is::<Violation>() || e.is::<Faulted>() {
                Stop::Trap(e)
            } else {
                Stop::Instantiate(format!("{e:#}"))
            }
        })?;
    let memory = match instance.get_module_export(&mut *store, &program.memory) {
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
fn classify(error: wasmtime::Error, mut state: CallState, program: String, tool: String) -> Error {
    if let Some(fault) = state.fault.take() {
        return fault;
    }
    if state.timed_out {
        return Error::Timeout {
            program,
            tool,
            deadline: state.budget,
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
            limit: state.berm.engine.config().max_wasm_stack,
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
