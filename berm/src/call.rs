//! Calling programs: a fresh instance per call, bounded in time, memory,
//! stack and size, and calls between programs by name.

use std::any::Any;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;

use wasmtime::{Linker, Module};

use crate::cache::{CodeCache, Compiled};
use crate::invocation::{
    self, CallResult, CallState, CheckedArgs, Code, Invocation, Program, Programs, Target,
};
use crate::linker::{self, SyscallTable};
use crate::program::{CompileSource, DeployOptions, Deployed, ProgramInfo};
pub use crate::progress::{MAX_PROGRESS_MESSAGE, MAX_PROGRESS_REPORTS, Progress, ProgressSink};
use crate::{DeployError, Digest, Engine, Error, Failure, Manifest, Output, Syscall};

/// How deep calls between programs may nest: a program called from outside
/// is at depth 1, a program it calls at depth 2, and so on.
pub const DEFAULT_CALL_DEPTH: u32 = 8;

/// The host's own record of one call, opaque to the runtime: its syscalls add to it
/// ([`crate::SyscallContext::trace`]), and the [`CallGate`] sees the caller's when a program
/// calls another. berm-service keeps a call's receipt in it.
pub type CallTrace = Arc<dyn Any + Send + Sync>;

/// Options for one call from outside.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// The deadline for this call (and the calls it makes), instead of the
    /// program's own.
    pub deadline: Option<Duration>,
    /// The host's record of this call, handed to its syscalls.
    pub trace: Option<CallTrace>,
    /// Where the program's `berm.progress` reports go; without one they go nowhere.
    pub progress: Option<Arc<dyn ProgressSink>>,
    /// What `berm.input` gives the program: frames `[responses, state, client_capabilities]`
    /// ([`berm_abi::ask`]); without it `berm.input` gives nothing.
    pub input: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("deadline", &self.deadline)
            .field("trace", &self.trace.is_some())
            .field("progress", &self.progress.is_some())
            .field("input", &self.input.as_ref().map(|i| i.len()))
            .finish()
    }
}

/// What a [`CallGate`] let through: what it holds until the call ends (a call slot) and
/// the host's record of the call between programs, if it keeps one.
#[derive(Default)]
pub struct Admitted {
    /// Held until the call ends, then dropped.
    pub hold: Option<Box<dyn Any + Send>>,
    /// The callee's [`CallTrace`], handed to its syscalls and back to
    /// [`CallGate::finished`].
    pub trace: Option<CallTrace>,
}

/// What a host checks before a call between programs starts, the same checks it makes
/// before a call from outside (berm-service: the per-program call slots and the tool's input
/// schema), so that no call reaches a program by a path with fewer checks. Installed with
/// [`Berm::set_call_gate`]; the runtime has already checked depth, the caller's `call=`
/// grants and manifest `calls`, and the argument cap, and resolved the callee: the gate sees
/// the [`Target`] the call runs on.
pub trait CallGate: Send + Sync {
    /// Admits a call of `target` with `args`, made by the call whose trace is `caller`, or
    /// refuses it with the error a call from outside would get.
    ///
    /// # Errors
    /// The refusal ([`Error::InvalidArguments`], [`Error::Busy`], …); nothing runs.
    fn admit(
        &self,
        target: &Target,
        args: &[u8],
        caller: Option<&CallTrace>,
    ) -> Result<Admitted, Error>;

    /// Hears how an admitted call ended, before its caller does. Not called when the call
    /// is dropped unfinished (its caller stopped): `admitted` is dropped then.
    fn finished(&self, admitted: Admitted, result: &Result<Result<Output, Failure>, Error>) {
        let _ = (admitted, result);
    }
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
    modules: Mutex<HashMap<Digest, Compiled>>,
    precompiled: Option<CodeCache>,
    cache: Option<CodeCache>,
    gate: OnceLock<Arc<dyn CallGate>>,
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
                gate: OnceLock::new(),
            }),
        }
    }

    /// Deploys `wasm` under `name` with every syscall in the table granted,
    /// replacing what the name held.
    ///
    /// # Errors
    /// As [`Berm::deploy_with`].
    pub fn deploy(&self, name: &str, wasm: &[u8]) -> Result<Deployed, DeployError> {
        self.deploy_with(name, wasm, DeployOptions::default())
    }

    /// Deploys `wasm` under `name`: reads and checks the manifest, compiles
    /// once per digest (or loads compiled code from the cache), links the
    /// imports and pre-instantiates. Nothing changes if it fails.
    ///
    /// # Errors
    /// [`DeployError::InvalidName`] for a name outside the rule; a [`crate::ManifestError`]
    /// when the image's manifest is missing, malformed or disagrees with its exports;
    /// [`DeployError::Limits`] for a memory cap above the engine's; [`DeployError::Compile`]
    /// when Wasmtime refuses the module; [`DeployError::ImportType`] or
    /// [`DeployError::UnknownConvention`] for an import berm cannot link;
    /// [`DeployError::Export`] for a tool export of the wrong type; [`DeployError::Cache`]
    /// when compiled code cannot be stored.
    pub fn deploy_with(
        &self,
        name: &str,
        wasm: &[u8],
        options: DeployOptions,
    ) -> Result<Deployed, DeployError> {
        if !berm_abi::is_valid_program_name(name) {
            return Err(DeployError::InvalidName(name.chars().take(80).collect()));
        }
        let manifest = Manifest::from_image(wasm)?;
        manifest.check()?;
        if !manifest.is_component() {
            crate::shape::check(wasm)?;
        }
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
        let (compiled, source) = self.inner.module(digest, wasm, manifest.is_component())?;
        let code_time = started.elapsed();
        let code = match compiled {
            Compiled::Module(module) => self.module_code(&module, &manifest, &options.grants)?,
            Compiled::Component(component) => {
                let engine = self.inner.engine.wasmtime();
                let linker = crate::component_link::component_linker(
                    engine,
                    &component,
                    &manifest,
                    &self.inner.table,
                    &options.grants,
                )?;
                let pre = linker
                    .instantiate_pre(&component)
                    .map_err(|e| DeployError::Compile(format!("{e:#}")))?;
                let tools = crate::component::tools(engine, &component, &manifest)?;
                Code::Component { pre, tools }
            }
        };
        let (wasi_preopen, http_fetch) = self.component_reach(&code, &manifest, &options.grants);

        let manifest = Arc::new(manifest);
        let host_memory_bytes = options
            .host_memory_bytes
            .unwrap_or(crate::DEFAULT_HOST_MEMORY_BYTES);
        let program = Arc::new(Program {
            name: name.into(),
            host_memory: crate::HostMemory::new(name, host_memory_bytes),
            info: ProgramInfo {
                name: name.into(),
                digest,
                manifest: manifest.clone(),
                grants: options.grants,
                limits,
                source,
                code_time,
            },
            code,
            data: options.data,
            wasi_preopen,
            http_fetch,
        });
        let replaced = self
            .inner
            .programs
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_string(), program)
            .map(|old| old.info.digest);
        Ok(Deployed {
            digest,
            manifest,
            source,
            code_time,
            replaced,
        })
    }

    /// A core module linked by its grants and pre-instantiated, with its tools' exports.
    fn module_code(
        &self,
        module: &Module,
        manifest: &Manifest,
        grants: &crate::Grants,
    ) -> Result<Code, DeployError> {
        let linker = linker::program_linker(
            &self.inner.base,
            module,
            &self.inner.table,
            grants,
            &manifest.calls,
        )?;
        let pre = linker
            .instantiate_pre(module)
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
        Ok(Code::Module { pre, tools, memory })
    }

    /// What a component's WASI reaches by its grants: the `fs=` directory as its preopen when
    /// it imports `wasi:filesystem`, and the host's `http.fetch` when it is granted `net=`.
    fn component_reach(
        &self,
        code: &Code,
        manifest: &Manifest,
        grants: &crate::Grants,
    ) -> (Option<std::path::PathBuf>, Option<Syscall>) {
        let (Code::Component { .. }, Some(shape)) = (code, &manifest.component) else {
            return (None, None);
        };
        let imports = |prefix: &str| shape.imports.iter().any(|i| i.name.starts_with(prefix));
        let preopen = match grants {
            crate::Grants::Only(set) if imports("wasi:filesystem/") => {
                set.iter().find_map(|g| match g {
                    crate::Grant::Fs { dir, .. } => Some(dir.clone()),
                    _ => None,
                })
            }
            _ => None,
        };
        let fetch = match grants.allows("http") && imports("wasi:http/outgoing-handler") {
            true => self
                .inner
                .table
                .get(&("http".to_string(), "fetch".to_string()))
                .cloned(),
            false => None,
        };
        (preopen, fetch)
    }

    /// Removes a program; returns its digest if it was deployed. Calls in
    /// flight finish on the instance they started with.
    pub fn remove(&self, name: &str) -> Option<Digest> {
        self.inner
            .programs
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name)
            .map(|p| p.info.digest)
    }

    /// Every deployed program, sorted by name.
    pub fn list(&self) -> Vec<ProgramInfo> {
        let programs = self
            .inner
            .programs
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut list: Vec<_> = programs.values().map(|p| p.info.clone()).collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// One deployed program.
    pub fn get(&self, name: &str) -> Option<ProgramInfo> {
        self.inner.program(name).map(|p| p.info.clone())
    }

    /// sha256 (hex) of the native code `name` runs, as the `.cwasm` file it was or would be
    /// loaded from holds it: what a receipt names as the code that ran. Serializes the
    /// compiled code, so a host asks once per deployment; `None` when nothing is deployed
    /// under the name or the code cannot be serialized.
    pub fn code_sha256(&self, name: &str) -> Option<String> {
        use sha2::Digest as _;
        let program = self.inner.program(name)?;
        let code = match &program.code {
            Code::Module { pre, .. } => pre.module().serialize().ok()?,
            Code::Component { pre, .. } => pre.component().serialize().ok()?,
        };
        Some(hex::encode(sha2::Sha256::digest(&code)))
    }

    /// Calls `program.tool` with `args` (JSON bytes, by the SDK's
    /// convention) on a fresh instance. `caller` names who is asking, for
    /// syscalls that attribute work.
    ///
    /// The outer error is the host's; the inner one is the program's own
    /// failure.
    ///
    /// # Errors
    /// The outer [`Error`] when the host stopped the call: no such program or tool, depth
    /// exceeded, arguments too large, a trap, the deadline, the memory cap, the stack, a
    /// calling-convention violation, a missing syscall or grant.
    pub async fn call(
        &self,
        caller: Option<&str>,
        program: &str,
        tool: &str,
        args: Vec<u8>,
    ) -> Result<Result<Output, Failure>, Error> {
        self.call_with(caller, program, tool, args, &CallOptions::default())
            .await
    }

    /// [`Berm::call`] with options.
    ///
    /// # Errors
    /// As [`Berm::call`].
    pub async fn call_with(
        &self,
        caller: Option<&str>,
        program: &str,
        tool: &str,
        args: Vec<u8>,
        options: &CallOptions,
    ) -> Result<Result<Output, Failure>, Error> {
        self.inner.check_depth(1, program, tool)?;
        let target = self.resolve(program, tool)?;
        let args = target.check_args(args)?;
        self.run(caller, &target, args, options).await
    }

    /// `program.tool` resolved once, for [`Berm::call_target`]: what a host does at its edge,
    /// so that the call's way down looks nothing up again.
    ///
    /// # Errors
    /// [`Error::NoSuchProgram`], [`Error::NoSuchTool`].
    pub fn resolve(&self, program: &str, tool: &str) -> Result<Target, Error> {
        let program = self
            .inner
            .program(program)
            .ok_or_else(|| Error::NoSuchProgram(program.to_string()))?;
        Target::of(program, tool)
    }

    /// [`Berm::call_with`] of a resolved `target`, with arguments checked against its cap
    /// ([`Target::check_args`]).
    ///
    /// # Errors
    /// As [`Berm::call`], apart from the lookups and the argument cap done already.
    pub async fn call_target(
        &self,
        caller: Option<&str>,
        target: &Target,
        args: CheckedArgs,
        options: &CallOptions,
    ) -> Result<Result<Output, Failure>, Error> {
        self.inner.check_depth(1, target.program(), target.tool())?;
        self.run(caller, target, args, options).await
    }

    /// Runs a call from outside on a fresh instance of `target`.
    async fn run(
        &self,
        caller: Option<&str>,
        target: &Target,
        args: CheckedArgs,
        options: &CallOptions,
    ) -> CallResult {
        let budget = options
            .deadline
            .unwrap_or(target.program.info.limits.deadline);
        let invocation = Invocation {
            program: target.program.clone(),
            tool: target.tool.clone(),
            args: args.into_bytes(),
            caller: caller.map(Arc::from),
            depth: 1,
            deadline: Instant::now() + budget,
            budget,
            trace: options.trace.clone(),
            progress: options.progress.clone(),
            input: options.input.clone(),
        };
        invocation::invoke(
            &self.inner.engine,
            self.inner.clone(),
            invocation,
            &target.export,
        )
        .await
    }

    /// Installs the host's checks of every call between programs (see [`CallGate`]); the
    /// first one installed stays. Without one, only the runtime's own checks apply.
    pub fn set_call_gate(&self, gate: Arc<dyn CallGate>) {
        let _ = self.inner.gate.set(gate);
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
    fn module(
        &self,
        digest: Digest,
        wasm: &[u8],
        component: bool,
    ) -> Result<(Compiled, CompileSource), DeployError> {
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
            .and_then(|c| c.load(engine, &digest, component));
        let cached = || {
            self.cache
                .as_ref()
                .and_then(|c| c.load(engine, &digest, component))
        };
        let (module, source) = match precompiled {
            Some(module) => (module, CompileSource::Precompiled),
            None => match cached() {
                Some(module) => (module, CompileSource::DiskCache),
                None => {
                    let compile_error = |e: wasmtime::Error| DeployError::Compile(format!("{e:#}"));
                    let module = match component {
                        false => Compiled::Module(
                            Module::from_binary(engine, wasm).map_err(compile_error)?,
                        ),
                        true => Compiled::Component(
                            wasmtime::component::Component::from_binary(engine, wasm)
                                .map_err(compile_error)?,
                        ),
                    };
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

    /// Refuses a call nested deeper than the runtime allows, before anything is looked up.
    fn check_depth(&self, depth: u32, program: &str, tool: &str) -> Result<(), Error> {
        if depth > self.max_depth {
            return Err(Error::DepthExceeded {
                program: program.to_string(),
                tool: tool.to_string(),
                limit: self.max_depth,
            });
        }
        Ok(())
    }
}

impl Programs for Inner {
    fn program(&self, name: &str) -> Option<Arc<Program>> {
        Inner::program(self, name)
    }

    fn call_nested(
        self: Arc<Self>,
        invocation: Invocation,
    ) -> Pin<Box<dyn Future<Output = CallResult> + Send>> {
        Box::pin(async move {
            self.check_depth(invocation.depth, &invocation.program.name, &invocation.tool)?;
            let target = Target::of(invocation.program.clone(), &invocation.tool)?;
            let gate = self.gate.get().cloned();
            let admitted = match &gate {
                Some(gate) => gate.admit(&target, &invocation.args, invocation.trace.as_ref())?,
                None => Admitted::default(),
            };
            // The callee's own deadline applies as it does to a call from outside, within
            // what is left of the caller's.
            let mut invocation = invocation;
            let own = Instant::now() + target.program.info.limits.deadline;
            if own < invocation.deadline {
                invocation.deadline = own;
                invocation.budget = target.program.info.limits.deadline;
            }
            invocation.trace = admitted.trace.clone();
            let engine = self.engine.clone();
            let result = invocation::invoke(&engine, self, invocation, &target.export).await;
            if let Some(gate) = gate {
                gate.finished(admitted, &result);
            }
            result
        })
    }
}
