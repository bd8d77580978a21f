//! The call path: a call from its resolved [`Target`] to its outcome — admitted (a call
//! slot, the argument cap, the input schema), timed in the metrics, traced, run on the serving
//! thread or the call threads, checked against its output schema, and given its receipt. It
//! reads the registry only through the target its edge resolved ([`Calls::resolve`]); a call
//! between programs passes the same admission ([`crate::nested`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use berm::Failure;
use tokio::sync::OwnedSemaphorePermit;

use crate::call_threads::CallThreads;
use crate::logs::{self, SessionLog};
use crate::registry::{Registry, ResolveError, Target};
use berm_errors::chain as error_chain;

/// Why a call produced no result: the host's side of the two levels.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No deployed program has that tool.
    #[error("no tool `{0}` is deployed (list them with tools/list or `berm ls`)")]
    NoSuchTool(String),
    /// The tool declares an output schema and its result does not match it.
    #[error("the result of `{tool}` does not match its output schema: {message}")]
    InvalidOutput {
        /// The served name, `{program}_{tool}`.
        tool: String,
        /// Which field, and what is wrong with it.
        message: String,
    },
    /// The runtime stopped or refused the call (trap, deadline, memory cap…), or
    /// [`Calls::admit`] refused it (arguments, call slots): the same errors a call between
    /// programs gets.
    #[error(transparent)]
    Host(#[from] berm::Error),
    /// The task running the call ended without an answer (bermd is
    /// shutting down, or the runtime panicked).
    #[error("the call was lost: {0}")]
    Lost(String),
    /// The call ran but its receipt could not be written (`bermd --receipts`): no result
    /// is given without one.
    #[error("the call ran, but its receipt could not be written, so its result is withheld: {0}")]
    Receipt(String),
}

impl From<ResolveError> for CallError {
    fn from(error: ResolveError) -> CallError {
        match error {
            ResolveError::NotServed(name) => CallError::NoSuchTool(name),
            ResolveError::Runtime(error) => CallError::Host(error),
        }
    }
}

/// A tool's successful result.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// The result as the program wrote it.
    pub text: String,
    /// The same result parsed, when the tool declares an output schema (it
    /// has been checked against it): MCP's `structuredContent`.
    pub structured: Option<serde_json::Value>,
    /// The content blocks the program added beside its text (`berm.content`).
    pub content: Vec<berm::Content>,
}

/// How a call ended, in one type for every edge: a result, the program's question to its
/// client, its failure, or the host's error.
#[derive(Debug)]
pub enum CallOutcome {
    /// A result.
    Done(Done),
    /// The program asked its client for input (`berm.ask`) instead of giving a result,
    /// with the blocks it added before asking.
    Asked {
        /// What it asked, and the state to run it again with.
        ask: berm::Ask,
        /// The blocks it added (`berm.content`).
        content: Vec<berm::Content>,
    },
    /// The program reported failure: a result the model should read.
    Failed(Failure),
    /// The host refused or stopped the call.
    Error(CallError),
}

impl CallOutcome {
    /// The outcome as the runtime's two levels: a question is a result with no text.
    pub fn into_result(self) -> Result<Result<Done, Failure>, CallError> {
        match self {
            CallOutcome::Done(done) => Ok(Ok(done)),
            CallOutcome::Asked { content, .. } => Ok(Ok(Done {
                text: String::new(),
                structured: None,
                content,
            })),
            CallOutcome::Failed(failure) => Ok(Err(failure)),
            CallOutcome::Error(error) => Err(error),
        }
    }
}

impl From<CallError> for CallOutcome {
    fn from(error: CallError) -> CallOutcome {
        CallOutcome::Error(error)
    }
}

/// Where a call's program logs and progress go besides bermd's log: an MCP session.
#[derive(Clone, Copy)]
pub struct LogTo<'a> {
    /// The session's logging state.
    pub session: &'a SessionLog,
    /// The session's peer.
    pub peer: &'a rmcp::service::Peer<rmcp::RoleServer>,
    /// The request's progress token, when it asked for progress: the program's
    /// `berm.progress` reports then go to the peer as `notifications/progress`.
    pub progress: Option<&'a rmcp::model::ProgressToken>,
    /// Which level the call's log messages are held to.
    pub level: logs::CallLevel,
}

/// What a call carries besides its arguments.
#[derive(Default, Clone)]
pub struct CallExtras {
    /// What `berm.input` hands the program: frames `[responses, state,
    /// client_capabilities]` ([`berm_abi::ask`]).
    pub input: Option<Arc<[u8]>>,
    /// A deadline instead of the program's own: a task's.
    pub deadline: Option<std::time::Duration>,
    /// The trace the request continues (its `_meta.traceparent`), when traces are exported.
    pub trace_parent: Option<crate::otel::TraceParent>,
    /// The MCP method that asked for the call, for its span's name; `None` is `tools/call`.
    pub method: Option<&'static str>,
    /// Who called, over HTTP with OAuth: recorded in the call's receipt.
    pub principal: Option<Arc<berm_oauth::Principal>>,
}

/// The call path's own state: the call threads, the metrics, the receipts and the traces,
/// beside the registry it reads.
pub struct Calls {
    registry: Arc<Registry>,
    threads: CallThreads,
    metrics: crate::metrics::Metrics,
    pub(crate) receipts: Option<crate::receipts::Receipts>,
    tracing: Option<crate::otel::Tracing>,
}

impl Calls {
    /// The call path of `registry`'s programs, with its own call threads.
    pub(crate) fn start(
        registry: Arc<Registry>,
        receipts: Option<Arc<berm_receipts::ReceiptLog>>,
        tracing: Option<crate::otel::Tracing>,
    ) -> std::io::Result<Calls> {
        Ok(Calls {
            registry,
            threads: CallThreads::start()?,
            metrics: crate::metrics::Metrics::new(),
            receipts: receipts.map(crate::receipts::Receipts::new),
            tracing,
        })
    }

    /// The registry this call path reads.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The served name `name` as its call's target: the one lookup a call makes, at its
    /// edge. A name nothing serves is counted in the metrics.
    ///
    /// # Errors
    /// [`CallError::NoSuchTool`]; [`CallError::Host`] when its program went away meanwhile.
    pub fn resolve(&self, name: &str) -> Result<Target, CallError> {
        self.registry.resolve(name).map_err(|e| {
            if let ResolveError::NotServed(_) = e {
                self.metrics.unknown_tool();
            }
            e.into()
        })
    }

    /// Calls `target` with `args` after checking them against the tool's input schema; a
    /// result of a tool with an output schema is checked against that.
    ///
    /// Dropping the returned future stops the call within one epoch tick: that is how a
    /// cancelled request or a client that went away frees its instance.
    ///
    /// With `log`, the program's `log.write` lines also go to that MCP session as
    /// `notifications/message`.
    pub async fn call(
        &self,
        target: &Target,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
    ) -> CallOutcome {
        let entry = &target.entry;
        // Both dropped with the call's future when it is cancelled: they then count as such.
        let timer = self.metrics.start(&entry.program, &entry.tool);
        let span = self.tracing.as_ref().map(|tracing| {
            let call = crate::otel::CallAttributes {
                method: extras.method.unwrap_or("tools/call"),
                served: &target.served,
                program: &entry.program,
                tool: &entry.tool,
                digest: &entry.digest,
            };
            tracing.call(extras.trace_parent.as_ref(), call)
        });
        let handle = span.as_ref().map(crate::otel::Span::handle);
        let outcome = self.call_counted(target, args, log, extras, handle).await;
        timer.finish(match &outcome {
            CallOutcome::Done(_) | CallOutcome::Asked { .. } => crate::metrics::Outcome::Ok,
            CallOutcome::Failed(_) => crate::metrics::Outcome::Failed,
            CallOutcome::Error(_) => crate::metrics::Outcome::Error,
        });
        if let Some(span) = span {
            match &outcome {
                CallOutcome::Asked { .. } => span.end("input_required", None),
                CallOutcome::Done(_) => span.end("ok", None),
                // MCP's conventions name a result with `isError` so.
                CallOutcome::Failed(_) => span.end("failed", Some("tool_error")),
                CallOutcome::Error(e) => span.end("error", Some(call_error_type(e))),
            }
        }
        outcome
    }

    /// Calls, metrics aside, with its receipt when receipts are written: see
    /// [`Calls::call`]. The receipt is written before this returns, so before the reply.
    async fn call_counted(
        &self,
        target: &Target,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
        span: Option<crate::otel::SpanHandle>,
    ) -> CallOutcome {
        let (Some(receipts), Some(facts)) = (&self.receipts, &target.deployment.facts) else {
            let trace = crate::trace::CallTrace::of(None, span);
            return self.call_traced(target, args, log, extras, trace).await;
        };
        let entry = &target.entry;
        let pending = receipts.begin(
            &entry.program,
            &entry.tool,
            facts.clone(),
            berm_receipts::arguments_sha256(args),
            None,
            extras.principal.clone(),
        );
        let trace = crate::trace::CallTrace::of(Some(pending.record()), span);
        let outcome = self.call_traced(target, args, log, extras, trace).await;
        let (kind, text) = receipt_of(&outcome);
        let content = match &outcome {
            CallOutcome::Done(done) => done.content.as_slice(),
            CallOutcome::Asked { content, .. } => content.as_slice(),
            _ => &[],
        };
        match pending.finish(kind, &text, content) {
            Ok(_) => outcome,
            Err(e) => CallError::Receipt(error_chain(&e)).into(),
        }
    }

    /// Runs the call, with `trace` handed to its syscalls.
    async fn call_traced(
        &self,
        target: &Target,
        args: &serde_json::Value,
        log: Option<LogTo<'_>>,
        extras: CallExtras,
        trace: Option<berm::CallTrace>,
    ) -> CallOutcome {
        // Serializing a Value cannot fail.
        let bytes = serde_json::to_vec(args).unwrap_or_default();
        let (slot, bytes) = match self.admit(target, bytes, Some(args)) {
            Ok(admitted) => admitted,
            Err(e) => return CallError::Host(e).into(),
        };
        let entry = &target.entry;
        let (berm, runtime) = (self.registry.berm().clone(), target.runtime.clone());
        let progress = log.and_then(|to| {
            let token = to.progress?.clone();
            let sink = to.session.progress_for_call(to.peer, token);
            Some(Arc::new(sink) as Arc<dyn berm::ProgressSink>)
        });
        let run = async move {
            // Held until the call ends, even when its client has gone.
            let _slot = slot;
            let options = berm::CallOptions {
                deadline: extras.deadline,
                trace,
                progress,
                input: extras.input,
            };
            berm.call_target(None, &runtime, bytes, &options).await
        };
        let mut run: Pin<Box<dyn Future<Output = _> + Send>> = match log {
            Some(to) if entry.logs => {
                Box::pin(logs::scope(to.session.for_call(to.peer, to.level), run))
            }
            _ => Box::pin(run),
        };
        if entry.starts_inline {
            // One poll here, on the serving task: a short call (most are a
            // few µs) is done before it would have reached a call thread,
            // and costs no cross-thread wake-up either way. A call still
            // running at its first epoch tick yields, and moves on.
            let first = std::future::poll_fn(|cx| Poll::Ready(run.as_mut().poll(cx))).await;
            if let Poll::Ready(outcome) = first {
                return checked(target, outcome);
            }
        }
        match self.threads.run(run).await {
            Ok(outcome) => checked(target, outcome),
            Err(e) => CallError::Lost(e.to_string()).into(),
        }
    }

    /// Whether calls make spans (traces are exported).
    pub fn traced(&self) -> bool {
        self.tracing.is_some()
    }

    /// The receipt log, when receipts are written.
    pub fn receipt_log(&self) -> Option<&Arc<berm_receipts::ReceiptLog>> {
        self.receipts.as_ref().map(|r| r.log())
    }

    /// Calls and their outcomes, for `/metrics`.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// The gate a call from outside passes before its program runs: a running-call slot of
    /// the program, the argument cap (the one check of it, [`berm::Target::check_args`]),
    /// then the tool's input schema (`args` when the caller has the arguments parsed; else
    /// they are parsed from `bytes`). The slot is held until the call ends. A call between
    /// programs passes the same slot and schema ([`Calls::admit_checked`]), its cap checked
    /// by the runtime.
    ///
    /// # Errors
    /// [`berm::Error::Busy`], [`berm::Error::ArgsTooLarge`], [`berm::Error::InvalidArguments`].
    pub(crate) fn admit(
        &self,
        target: &Target,
        bytes: Vec<u8>,
        args: Option<&serde_json::Value>,
    ) -> Result<(OwnedSemaphorePermit, berm::CheckedArgs), berm::Error> {
        let slot = self.slot(target)?;
        // Refused before validation, so validating is bounded work.
        let checked = target.runtime.check_args(bytes)?;
        self.validate(target, checked.as_bytes(), args)?;
        Ok((slot, checked))
    }

    /// [`Calls::admit`] of arguments whose cap the runtime has checked: a call between
    /// programs.
    ///
    /// # Errors
    /// [`berm::Error::Busy`], [`berm::Error::InvalidArguments`].
    pub(crate) fn admit_checked(
        &self,
        target: &Target,
        bytes: &[u8],
        args: Option<&serde_json::Value>,
    ) -> Result<OwnedSemaphorePermit, berm::Error> {
        let slot = self.slot(target)?;
        self.validate(target, bytes, args)?;
        Ok(slot)
    }

    /// One of the program's running-call slots.
    fn slot(&self, target: &Target) -> Result<OwnedSemaphorePermit, berm::Error> {
        target
            .deployment
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| berm::Error::Busy {
                program: target.entry.program.clone(),
                cap: self.registry.max_calls_per_program(),
            })
    }

    /// The arguments against the tool's input schema.
    fn validate(
        &self,
        target: &Target,
        bytes: &[u8],
        args: Option<&serde_json::Value>,
    ) -> Result<(), berm::Error> {
        let (program, tool) = (&target.entry.program, &target.entry.tool);
        let invalid = |message: String| berm::Error::InvalidArguments {
            program: program.clone(),
            tool: tool.clone(),
            message,
        };
        let parsed;
        let args = match args {
            Some(args) => args,
            None => {
                parsed = serde_json::from_slice(bytes)
                    .map_err(|e| invalid(format!("the arguments are not JSON ({e})")))?;
                &parsed
            }
        };
        let problems = schema_problems(&target.entry.validator, args);
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        Ok(())
    }
}

/// A successful result, checked against the tool's output schema when it
/// declares one. Tools without one (most) pay nothing here.
fn checked(
    target: &Target,
    outcome: Result<Result<berm::Output, Failure>, berm::Error>,
) -> CallOutcome {
    let berm::Output { text, content, ask } = match outcome {
        Ok(Ok(output)) => output,
        Ok(Err(failure)) => return CallOutcome::Failed(failure),
        Err(error) => return CallError::Host(error).into(),
    };
    if let Some(ask) = ask {
        // A question is not a result: there is nothing to check yet.
        return CallOutcome::Asked { ask, content };
    }
    let Some(output) = &target.entry.output else {
        return CallOutcome::Done(Done {
            text,
            structured: None,
            content,
        });
    };
    let invalid = |message: String| {
        CallOutcome::Error(CallError::InvalidOutput {
            tool: target.served.to_string(),
            message,
        })
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(e) => return invalid(format!("the result is not JSON ({e})")),
    };
    let problems = schema_problems(output, &value);
    if !problems.is_empty() {
        return invalid(problems);
    }
    CallOutcome::Done(Done {
        text,
        structured: Some(value),
        content,
    })
}

/// How a receipt names an outcome, and the text the client gets for it (what
/// `mcp::call_result` puts in the result's content).
fn receipt_of(outcome: &CallOutcome) -> (berm_receipts::Outcome, std::borrow::Cow<'_, str>) {
    match outcome {
        // A run that ended asking: what it asked stands for its text.
        CallOutcome::Asked { ask, .. } => (
            berm_receipts::Outcome::Ok,
            serde_json::Value::Object(ask.requests.clone())
                .to_string()
                .into(),
        ),
        CallOutcome::Done(done) => (berm_receipts::Outcome::Ok, done.text.as_str().into()),
        CallOutcome::Failed(failure) => (
            berm_receipts::Outcome::Failed,
            failure.message.as_str().into(),
        ),
        CallOutcome::Error(e) => (berm_receipts::Outcome::Error, e.to_string().into()),
    }
}

/// A span's `error.type` for a call bermd refused or stopped.
fn call_error_type(error: &CallError) -> &'static str {
    match error {
        CallError::NoSuchTool(_) => "no_such_tool",
        CallError::InvalidOutput { .. } => "invalid_output",
        CallError::Host(e) => host_error_type(e),
        CallError::Lost(_) => "lost",
        CallError::Receipt(_) => "receipt",
    }
}

/// A span's `error.type` for what the runtime refused or stopped.
pub(crate) fn host_error_type(error: &berm::Error) -> &'static str {
    use berm::Error;
    match error {
        Error::Timeout { .. } => "timeout",
        Error::MemoryCap { .. } => "memory_cap",
        Error::Busy { .. } => "busy",
        Error::InvalidArguments { .. } => "invalid_arguments",
        Error::ArgsTooLarge { .. } => "args_too_large",
        Error::ResultTooLarge { .. } => "result_too_large",
        Error::Trap { .. } | Error::StackOverflow { .. } | Error::Panicked { .. } => "trap",
        Error::NotGranted { .. } | Error::CallNotGranted { .. } | Error::CallNotDeclared { .. } => {
            "not_granted"
        }
        Error::DepthExceeded { .. } => "depth_exceeded",
        Error::NoSuchProgram(_) | Error::NoSuchTool { .. } => "no_such_tool",
        _ => "host_error",
    }
}

/// What is wrong with `value` by `schema`, naming each field (at most five
/// problems), or an empty string when nothing is.
pub(crate) fn schema_problems(schema: &jsonschema::Validator, value: &serde_json::Value) -> String {
    let problems: Vec<String> = schema
        .iter_errors(value)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("`{}`: {e}", at.trim_start_matches('/').replace('/', "."))
            }
        })
        .collect();
    problems.join("; ")
}
