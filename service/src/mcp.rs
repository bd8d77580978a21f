//! MCP: every deployed program's tools, resources and prompts on one endpoint, served with
//! rmcp.
//!
//! The handler is written by hand because the tools are dynamic: they come
//! from the catalog, which changes on every deploy and remove. Clients hear
//! about changes through `notifications/{tools,prompts,resources}/list_changed`
//! and `notifications/resources/updated` — sent on the session's peer for
//! clients that `initialize` (up to 2025-11-25), and on a `subscriptions/listen`
//! stream for 2026-07-28 clients.
//!
//! A resource read and a prompt run the tool that serves them, in a fresh
//! instance like any call ([`berm_manifest::serves`]).
//!
//! Errors cross into MCP in exactly one place, [`call_result`].
//!
//! A `notifications/cancelled` for a running `tools/call` cancels the
//! request's token; the call's future is then dropped, which stops the
//! program at its next epoch tick and returns its instance to the pool, and
//! rmcp sends nothing for the cancelled id.

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated
// in rmcp by SEP-2577 but is what clients up to 2025-11-25 speak.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use berm_manifest::Serves;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, InputRequest, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    PromptMessage, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference,
    Resource, ResourceContents, Role, ServerCapabilities, ServerConfig, ServerRequest,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast::error::RecvError;

use crate::catalog::Catalog;
use crate::logs::SessionLog;
use crate::service::{CallError, CallExtras, Done, LogTo, Service};

/// Most resources one session may subscribe to with `resources/subscribe`.
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// The MCP face of a [`Service`]; one per session, cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    service: Arc<Service>,
    log: SessionLog,
    /// The URIs this session subscribed to (2025-11-25 `resources/subscribe`), each with
    /// the program and digest that served it when last seen.
    subscribed: Arc<Mutex<Watched>>,
    /// Whose tasks this handler's requests count against: its session, once it is one.
    client: Arc<std::sync::OnceLock<crate::tasks::open::Client>>,
}

impl McpServer {
    /// A handler for one MCP session: a connection (a socket, stdio), a session of its own
    /// however its client speaks.
    pub fn new(service: Arc<Service>) -> McpServer {
        let server = McpServer::over_http(service);
        let _ = server.client.set(crate::tasks::open::Client::new_session());
        server
    }

    /// A handler rmcp's HTTP service makes for a session (an `initialize`) or for one
    /// request outside any session: a session of its own only once it is initialized.
    pub fn over_http(service: Arc<Service>) -> McpServer {
        McpServer {
            service,
            log: SessionLog::default(),
            subscribed: Arc::default(),
            client: Arc::default(),
        }
    }

    /// Whose tasks this handler's requests count against.
    fn client(&self) -> crate::tasks::open::Client {
        self.client
            .get()
            .copied()
            .unwrap_or(crate::tasks::open::Client::Sessionless)
    }

    /// Runs entry `name` for a tools/call, a resource read or a prompt, with the session's
    /// log, the request's progress token and what `berm.input` hands over; `Err` when the
    /// client cancelled the request.
    async fn run(
        &self,
        method: &'static str,
        name: &str,
        args: &serde_json::Value,
        input: Option<&[u8]>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Result<Result<Done, berm::Failure>, CallError>, McpError> {
        let progress = context.meta.get_progress_token();
        // On 2026-07-28 a request says its own log level, and without one gets no messages.
        let modern = context
            .meta
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let level = if modern {
            crate::logs::CallLevel::Request(context.meta.log_level())
        } else {
            crate::logs::CallLevel::Session
        };
        let log = LogTo {
            session: &self.log,
            peer: &context.peer,
            progress: progress.as_ref(),
            level,
        };
        let extras = CallExtras {
            input: input.map(Arc::<[u8]>::from),
            deadline: None,
            trace_parent: self.trace_parent(context),
            method: Some(method),
        };
        let mut call = pin!(self.service.call_with(name, args, Some(log), extras));
        // The first poll runs a short call to its end; only a call still
        // running listens for its cancellation (which would otherwise cost a
        // registration on every call).
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        let outcome = match first {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => tokio::select! {
                biased;
                outcome = call => outcome,
                () = context.ct.cancelled() => {
                    // Dropping the call stops it; rmcp sends nothing for a
                    // cancelled id, so this error goes nowhere.
                    return Err(McpError::internal_error("the call was cancelled", None));
                }
            },
        };
        self.log.flush().await;
        Ok(outcome)
    }
}

impl McpServer {
    /// What a 2026-07-28 client sent back with `request`: its input responses as JSON and
    /// the state it returned, opened (`-32602` when it does not open for this request).
    fn answered_input(
        &self,
        request: &crate::ask::SealedFor<'_>,
        responses: Option<rmcp::model::InputResponses>,
        sealed: Option<&str>,
    ) -> Result<(Vec<u8>, Vec<u8>), McpError> {
        let state = match sealed {
            Some(sealed) => self
                .service
                .ask_key()
                .open(request, sealed)
                .map_err(|e| McpError::invalid_params(e.to_string(), None))?,
            None => Vec::new(),
        };
        let responses = responses
            .and_then(|r| serde_json::to_vec(&r).ok())
            .unwrap_or_default();
        Ok((responses, state))
    }

    /// The trace a request continues, when bermd exports traces.
    fn trace_parent(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Option<crate::otel::TraceParent> {
        if !self.service.traced() {
            return None;
        }
        crate::otel::TraceParent::from_meta(&context.meta.0.0)
    }
}

/// What a request's handler found of its entry in the catalog, for the run.
#[derive(Clone, Copy)]
struct Found {
    /// The program's digest, which a sealed state is bound to.
    digest: berm::Digest,
    /// Whether the program reads what `berm.input` hands it.
    reads_input: bool,
}

impl Found {
    fn of(entry: &crate::catalog::ToolEntry) -> Found {
        Found {
            digest: entry.digest,
            reads_input: entry.reads_input,
        }
    }
}

/// One request that runs an entry: what runs, and what a state sealed for it is bound to.
#[derive(Clone, Copy)]
struct Run<'a> {
    /// The MCP method, named in the call's span and bound into a sealed state.
    method: &'static str,
    /// The entry's served name.
    name: &'a str,
    /// The arguments the program gets.
    args: &'a serde_json::Value,
    /// What the request named, bound into a sealed state ([`crate::ask::SealedFor::sent`]):
    /// a call's or a prompt's arguments, a read's URI.
    sent: &'a serde_json::Value,
}

impl<'a> Run<'a> {
    /// The request a state of this run is sealed for, when its program is `digest`.
    fn sealed_for(&self, digest: &'a berm::Digest) -> crate::ask::SealedFor<'a> {
        crate::ask::SealedFor {
            digest,
            method: self.method,
            served: self.name,
            sent: self.sent,
        }
    }
}

/// Most times one request's program may ask a 2025-11-25 client before it must give a result.
pub const MAX_ASK_ROUNDS: usize = 8;

/// How long bermd waits for a 2025-11-25 client to answer one request a program asked.
pub const ASK_TIMEOUT: std::time::Duration = crate::ask::MAX_AGE;

/// What a run of a program that may ask its client for input came to.
enum Asked {
    /// A result, a failure or a host error, as any call.
    Outcome(Result<Result<Done, berm::Failure>, CallError>),
    /// On 2026-07-28: the requests and the sealed state, for the client to answer.
    Input(InputRequiredResult),
    /// The program asked for what cannot be asked (a method the client did not declare, a
    /// malformed request), or the client did not answer; the words say which.
    Refused(String),
}

impl McpServer {
    /// Runs the entry `run` names, and when its program asks for input (`berm.ask`): on
    /// 2026-07-28 returns the input-required result with its state sealed for this request;
    /// on older sessions asks the client over the session and runs the entry again with the
    /// answers, up to [`MAX_ASK_ROUNDS`] times. `answered` is what a 2026-07-28 client sent
    /// back, its responses and the sealed state (a state that does not open for this request
    /// is `-32602`); `entry` is what the caller found of it in the catalog (`None`: not
    /// served, which the run then says).
    async fn run_asking(
        &self,
        run: Run<'_>,
        entry: Option<Found>,
        answered: (Option<rmcp::model::InputResponses>, Option<&str>),
        context: &RequestContext<RoleServer>,
    ) -> Result<Asked, McpError> {
        let Run {
            method, name, args, ..
        } = run;
        let (responses, sealed) = answered;
        let digest = entry.map(|e| e.digest);
        // What the client declared goes to a program that reads its input only: building it
        // is the one part of a call that grows with the client's capabilities.
        let reads_input = entry.is_some_and(|e| e.reads_input);
        let capabilities_json = if reads_input {
            context
                .client_capabilities()
                .and_then(|c| serde_json::to_vec(&c).ok())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let (mut responses, mut state) = match &digest {
            Some(digest) => self.answered_input(&run.sealed_for(digest), responses, sealed)?,
            None => Default::default(),
        };
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        for _ in 0..MAX_ASK_ROUNDS {
            let input = reads_input
                .then(|| berm_abi::frame::encode(&[&responses, &state, &capabilities_json]));
            let mut outcome = self
                .run(method, name, args, input.as_deref(), context)
                .await?;
            let ask = match &mut outcome {
                Ok(Ok(done)) => done.ask.take(),
                _ => None,
            };
            let Some(ask) = ask else {
                return Ok(Asked::Outcome(outcome));
            };
            let capabilities = context.client_capabilities();
            let requests = match input_requests(ask.requests, capabilities.as_ref()) {
                Ok(requests) => requests,
                Err(Refusal::Undeclared(error)) => return Err(error),
                Err(Refusal::Malformed(problem)) => return Ok(Asked::Refused(problem)),
            };
            if modern {
                let Some(digest) = digest else {
                    return Ok(Asked::Outcome(Err(CallError::NoSuchTool(name.to_string()))));
                };
                let sealed = self
                    .service
                    .ask_key()
                    .seal(&run.sealed_for(&digest), &ask.state)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                return Ok(Asked::Input(InputRequiredResult::new(
                    Some(requests),
                    Some(sealed),
                )));
            }
            let mut answers = serde_json::Map::new();
            for (key, request) in requests {
                let request = match request {
                    InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
                    InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
                    InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
                    // `input_requests` read only the three methods a program may ask.
                    other => {
                        return Ok(Asked::Refused(format!(
                            "request `{key}` is not one bermd can relay to this client: {other:?}"
                        )));
                    }
                };
                let answer =
                    tokio::time::timeout(ASK_TIMEOUT, context.peer.send_request(request)).await;
                let answer = match answer {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(e)) => {
                        return Ok(Asked::Refused(format!(
                            "the client did not answer request `{key}` the program asked: {e}"
                        )));
                    }
                    Err(_) => {
                        return Ok(Asked::Refused(format!(
                            "the client did not answer request `{key}` within {} s",
                            ASK_TIMEOUT.as_secs()
                        )));
                    }
                };
                answers.insert(key, serde_json::to_value(answer).unwrap_or_default());
            }
            responses = serde_json::to_vec(&answers).unwrap_or_default();
            state = ask.state;
        }
        Ok(Asked::Refused(format!(
            "the program asked for input {MAX_ASK_ROUNDS} times in one request without giving a result"
        )))
    }
}

impl McpServer {
    /// Starts `name` as a task and answers with its handle at once (once every replica
    /// would find it, when tasks are shared); a task runs with neither the session's log
    /// nor its progress token, since it outlives the session.
    async fn start_task(
        &self,
        call: TaskCall,
        spec: berm_manifest::TaskSpec,
        program_deadline: std::time::Duration,
    ) -> Result<CallToolResponse, McpError> {
        let tasks = self.service.tasks();
        let slot = match tasks.admit(self.client()) {
            Ok(slot) => slot,
            Err(full) => {
                return Ok(
                    CallToolResult::error(vec![ContentBlock::text(full.to_string())]).into(),
                );
            }
        };
        let deadline = tasks.deadline(&spec, program_deadline);
        let ttl = crate::tasks::Tasks::ttl(deadline);
        let service = self.service.clone();
        let options = rmcp::task_manager::TaskOptions::new()
            .with_ttl_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        // The slot is the task's work's: it is given back when the work ends, however it ends
        // (a result, a failure, a cancel, its TTL).
        let task = tasks.manager().spawn(options, move |task| {
            Box::pin(async move {
                let _slot = slot;
                run_task(service, call, (deadline, ttl), task).await
            })
        });
        if let Err(e) = tasks.started(&task.task_id, ttl).await {
            let _ = tasks.manager().cancel_task(&task.task_id);
            return Err(McpError::internal_error(
                format!(
                    "the task could not be recorded for the other replicas, so it was cancelled: {e}"
                ),
                None,
            ));
        }
        Ok(CallToolResponse::Task(rmcp::model::CreateTaskResult::new(
            task,
        )))
    }
}

/// What a task runs: the tool, its arguments, what the client that started it declared,
/// the trace its request continued, and for an `ask_first` tool the answers and opened
/// state its first rounds gathered.
struct TaskCall {
    name: String,
    args: serde_json::Value,
    capabilities: Option<rmcp::model::ClientCapabilities>,
    trace_parent: Option<crate::otel::TraceParent>,
    input: Option<(Vec<u8>, Vec<u8>)>,
}

/// A task's work: runs the tool with the task's deadline, and when its program asks for
/// input, asks through the task (the task shows `input_required` until every request is
/// answered with `tasks/update`) and runs it again with the answers. A result of the
/// program's own, a failure included, completes the task; a host error (trap, deadline,
/// memory) fails it.
async fn run_task(
    service: Arc<Service>,
    call: TaskCall,
    (deadline, ttl): (std::time::Duration, std::time::Duration),
    task: rmcp::task_manager::TaskContext,
) -> Result<CallToolResult, rmcp::task_manager::TaskExit> {
    use rmcp::task_manager::TaskExit;
    let TaskCall {
        name,
        args,
        capabilities,
        trace_parent,
        input,
    } = call;
    let capabilities_json = capabilities
        .as_ref()
        .and_then(|c| serde_json::to_vec(c).ok())
        .unwrap_or_default();
    let (mut responses, mut state) = input.unwrap_or_default();
    for round in 0..crate::tasks::MAX_TASK_ROUNDS {
        let extras = CallExtras {
            input: Some(berm_abi::frame::encode(&[&responses, &state, &capabilities_json]).into()),
            deadline: Some(deadline),
            trace_parent: trace_parent.clone(),
            method: Some("tools/call"),
        };
        let mut outcome = tokio::select! {
            outcome = service.call_with(&name, &args, None, extras) => outcome,
            () = task.cancelled() => return Err(TaskExit::Cancelled),
        };
        let ask = match &mut outcome {
            Ok(Ok(done)) => done.ask.take(),
            _ => None,
        };
        let Some(ask) = ask else {
            return task_result(&service, outcome, ttl);
        };
        let requests = match input_requests(ask.requests, capabilities.as_ref()) {
            Ok(requests) => requests,
            Err(Refusal::Undeclared(error)) => return Err(TaskExit::Error(error)),
            Err(Refusal::Malformed(problem)) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(problem)]));
            }
        };
        // Keys are the task's own for its lifetime: each round's get a prefix.
        let waits = requests.into_iter().map(|(key, request)| {
            let task = task.clone();
            async move {
                let answer = task.request_input(format!("r{round}.{key}"), request).await;
                (key, answer)
            }
        });
        let answers = tokio::select! {
            answers = futures_util::future::join_all(waits) => answers,
            () = task.cancelled() => return Err(TaskExit::Cancelled),
        };
        let mut answered = serde_json::Map::new();
        for (key, answer) in answers {
            answered.insert(key, answer?);
        }
        responses = serde_json::to_vec(&answered).unwrap_or_default();
        state = ask.state;
    }
    Ok(CallToolResult::error(vec![ContentBlock::text(format!(
        "the program asked for input {} times in one task without giving a result",
        crate::tasks::MAX_TASK_ROUNDS
    ))]))
}

/// A task's end: its result as a plain call would have it, except that a host error fails
/// the task with that error (a JSON-RPC error object), and a result past what bermd may
/// hold for tasks is replaced by an error saying so.
fn task_result(
    service: &Service,
    outcome: Result<Result<Done, berm::Failure>, CallError>,
    ttl: std::time::Duration,
) -> Result<CallToolResult, rmcp::task_manager::TaskExit> {
    use rmcp::task_manager::TaskExit;
    if let Err(
        error @ (CallError::Host(_)
        | CallError::Lost(_)
        | CallError::InvalidOutput { .. }
        | CallError::Receipt(_)),
    ) = &outcome
        && !matches!(error, CallError::Host(berm::Error::InvalidArguments { .. }))
    {
        return Err(TaskExit::Error(McpError::internal_error(
            error.to_string(),
            None,
        )));
    }
    let result = match call_result(outcome) {
        Ok(CallToolResponse::Complete(result)) => result,
        Ok(_) => {
            return Err(TaskExit::Error(McpError::internal_error(
                "not a result",
                None,
            )));
        }
        Err(error) => return Err(TaskExit::Error(error)),
    };
    let bytes = serde_json::to_vec(&result).map_or(0, |v| v.len());
    if !service.tasks().hold(bytes, ttl) {
        return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "the result ({bytes} bytes) was dropped: bermd holds at most {} MiB of task results at once",
            crate::tasks::MAX_HELD_RESULT_BYTES >> 20
        ))]));
    }
    Ok(result)
}

/// Why a program's questions are not sent.
enum Refusal {
    /// It asked for a method whose capability the client did not declare: MCP's
    /// `-32021` (missing required client capability), naming the capability.
    Undeclared(McpError),
    /// A request is not its method's MCP form: the program's fault, an error result.
    Malformed(String),
}

/// A program's `berm.ask` requests as MCP's, refusing any the client cannot answer: a method
/// whose capability the client did not declare (when its capabilities are known), or
/// parameters that are not that method's.
fn input_requests(
    requests: serde_json::Map<String, serde_json::Value>,
    capabilities: Option<&rmcp::model::ClientCapabilities>,
) -> Result<rmcp::model::InputRequests, Refusal> {
    let mut typed = rmcp::model::InputRequests::new();
    for (key, request) in requests {
        let method = request["method"].as_str().unwrap_or_default().to_string();
        if let Some(capabilities) = capabilities {
            let declared = match method.as_str() {
                "elicitation/create" => capabilities.elicitation.is_some(),
                "sampling/createMessage" => capabilities.sampling.is_some(),
                _ => capabilities.roots.is_some(),
            };
            if !declared {
                let capability = berm_abi::ask::capability_for(&method).unwrap_or("?");
                return Err(Refusal::Undeclared(McpError::new(
                    rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    format!(
                        "Missing required client capability: the program asked the client for `{method}` (request `{key}`), but the client did not declare the `{capability}` capability"
                    ),
                    Some(serde_json::json!({"requiredCapabilities": {capability: {}}})),
                )));
            }
        }
        let parsed: InputRequest = serde_json::from_value(request).map_err(|e| {
            Refusal::Malformed(format!(
                "the program's request `{key}` is not a valid MCP `{method}` request: {e}"
            ))
        })?;
        typed.insert(key, parsed);
    }
    Ok(typed)
}

/// Subscribed URIs, each with who served it when last seen (`None`: nobody).
type Watched = BTreeMap<String, Option<(String, berm::Digest)>>;

/// What a session has been told, to say only what changed after a deploy or remove.
struct Seen {
    resources: Arc<Vec<Resource>>,
    templates: Arc<Vec<rmcp::model::ResourceTemplate>>,
    prompts: Arc<Vec<rmcp::model::Prompt>>,
}

impl Seen {
    fn of(catalog: &Catalog) -> Seen {
        Seen {
            resources: catalog.resources(),
            templates: catalog.templates(),
            prompts: catalog.prompts(),
        }
    }

    /// Whether the resource lists and the prompt list changed since last seen.
    fn update(&mut self, catalog: &Catalog) -> (bool, bool) {
        let now = Seen::of(catalog);
        let resources = now.resources != self.resources || now.templates != self.templates;
        let prompts = now.prompts != self.prompts;
        *self = now;
        (resources, prompts)
    }
}

/// The watched URIs whose server (program or digest) changed, updating `watched`.
fn updated(watched: &mut Watched, catalog: &Catalog) -> Vec<String> {
    let mut changed = Vec::new();
    for (uri, owner) in watched.iter_mut() {
        let now = catalog.resource_owner(uri);
        if now != *owner {
            *owner = now;
            changed.push(uri.clone());
        }
    }
    changed
}

const INSTRUCTIONS: &str = "berm serves every deployed program's tools, named \
`{program}_{tool}` (a program's name has no `_`, so the first `_` ends it). \
Each tool's description ends with what its program is and when to reach for \
it. Programs may also serve resources and prompts (prompts are named like \
tools). The lists change when programs are deployed or removed.";

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_completions()
                .enable_prompts()
                .enable_resources()
                .enable_tools()
                .enable_prompts_list_changed()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("bermd", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, McpError> {
        // An HTTP client that initializes has a session from now on: its tasks count
        // against a cap of its own (a connection's handler is one already).
        let _ = self.client.set(crate::tasks::open::Client::new_session());
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        if let Some(cursor) = &cursor
            && !berm_abi::is_valid_name(cursor)
        {
            return Err(McpError::invalid_params(
                format!(
                    "`{cursor}` is not a cursor this server gave out (pass the nextCursor of the page before)"
                ),
                None,
            ));
        }
        let (tools, next) = self
            .service
            .catalog()
            .page(cursor.as_deref(), self.service.tools_page_size());
        let mut result = ListToolsResult::with_all_items(tools);
        result.next_cursor = next;
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let catalog = self.service.catalog();
        let entry = catalog.get(name)?;
        entry.serves.is_none().then(|| entry.mcp.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // One catalog lookup for everything the call needs to know of its entry.
        let (serves, task, found) = match self.service.catalog().get(&request.name) {
            Some(e) => (
                e.serves.clone(),
                e.task.map(|t| (t, e.deadline)),
                Some(Found::of(e)),
            ),
            None => (None, None, None),
        };
        let digest = found.map(|f| f.digest);
        if let Some(serves) = serves {
            let how = match serves {
                Serves::Prompt {} => "a prompt: get it with prompts/get".to_string(),
                Serves::Resource { uri, .. } => {
                    format!("the resource `{uri}`: read it with resources/read")
                }
                Serves::ResourceTemplate { uri_template, .. } => format!(
                    "the resource template `{uri_template}`: read a URI it matches with resources/read"
                ),
            };
            return Err(McpError::invalid_params(
                format!("`{}` is not a tool; it serves {how}", request.name),
                None,
            ));
        }
        if let Some((spec, program_deadline)) = task {
            let speaks_tasks = context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
            let answered = request.input_responses.is_some() || request.request_state.is_some();
            // An `ask_first` tool's rounds before its answers are plain calls (below).
            if speaks_tasks && (answered || !spec.ask_first) {
                let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
                let input = match (spec.ask_first, &digest) {
                    (true, Some(digest)) => {
                        // The state of its first rounds, sealed for this tools/call.
                        let run = Run {
                            method: "tools/call",
                            name: &request.name,
                            args: &args,
                            sent: &args,
                        };
                        Some(self.answered_input(
                            &run.sealed_for(digest),
                            request.input_responses,
                            request.request_state.as_deref(),
                        )?)
                    }
                    _ => None,
                };
                return self
                    .start_task(
                        TaskCall {
                            name: request.name.to_string(),
                            args,
                            capabilities: context.client_capabilities(),
                            trace_parent: self.trace_parent(&context),
                            input,
                        },
                        spec,
                        program_deadline,
                    )
                    .await;
            }
            if !speaks_tasks && spec.support == berm_manifest::TaskSupport::Required {
                return Err(McpError::missing_required_client_capability(
                    rmcp::model::ClientCapabilities::builder()
                        .enable_tasks()
                        .build(),
                ));
            }
        }
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let run = Run {
            method: "tools/call",
            name: &request.name,
            args: &args,
            sent: &args,
        };
        let asked = self
            .run_asking(
                run,
                found,
                (request.input_responses, request.request_state.as_deref()),
                &context,
            )
            .await?;
        match asked {
            Asked::Outcome(outcome) => call_result(outcome),
            Asked::Input(input) => Ok(CallToolResponse::InputRequired(input)),
            Asked::Refused(message) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into())
            }
        }
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        let task = self.service.tasks().get(&request.task_id).await?;
        Ok(rmcp::model::GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.service
            .tasks()
            .update(&request.task_id, request.input_responses)
            .await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.service.tasks().cancel(&request.task_id).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let (resources, next) = self
            .service
            .catalog()
            .resource_page(cursor.as_deref(), self.service.tools_page_size());
        let mut result = ListResourcesResult::with_all_items(resources);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let (templates, next) = self
            .service
            .catalog()
            .template_page(cursor.as_deref(), self.service.tools_page_size());
        let mut result = ListResourceTemplatesResult::with_all_items(templates);
        result.next_cursor = next;
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let not_found = |uri: &str| {
            McpError::resource_not_found(
                format!(
                    "Resource not found: no program serves `{uri}` (list them with resources/list and resources/templates/list; a template's variable matches one path segment: once percent-decoded, not empty, `.` or `..`, and without `/`, `?`, `#` or NUL)"
                ),
                Some(serde_json::json!({ "uri": uri })),
            )
        };
        let catalog = self.service.catalog();
        let Some(read) = catalog.resource(&uri) else {
            return Err(not_found(&uri));
        };
        let mime_type = read.mime_type.to_string();
        let (served, found, args) = (read.served.to_string(), Found::of(read.entry), read.args);
        drop(catalog);
        // A state is bound to the URI read, not to the variables it decodes to.
        let sent = serde_json::Value::String(uri.clone());
        let run = Run {
            method: "resources/read",
            name: &served,
            args: &args,
            sent: &sent,
        };
        let asked = self
            .run_asking(
                run,
                Some(found),
                (request.input_responses, request.request_state.as_deref()),
                &context,
            )
            .await?;
        let outcome = match asked {
            Asked::Outcome(outcome) => outcome,
            Asked::Input(input) => return Ok(ReadResourceResponse::InputRequired(input)),
            Asked::Refused(message) => {
                return Err(McpError::internal_error(
                    format!("reading `{uri}` failed: {message}"),
                    None,
                ));
            }
        };
        let done = match outcome {
            Ok(Ok(done)) => done,
            Ok(Err(failure)) => {
                return Err(McpError::internal_error(
                    format!("reading `{uri}` failed: {}", failure.message),
                    None,
                ));
            }
            Err(CallError::NoSuchTool(_)) => return Err(not_found(&uri)),
            Err(error @ CallError::Host(berm::Error::InvalidArguments { .. })) => {
                return Err(McpError::invalid_params(
                    format!("`{uri}` matches a template, but {error}"),
                    Some(serde_json::json!({ "uri": uri })),
                ));
            }
            Err(error) => {
                tracing::warn!("resources/read: {error}");
                return Err(McpError::internal_error(
                    format!("reading `{uri}` failed: {error}"),
                    None,
                ));
            }
        };
        let contents = resource_contents(&uri, &mime_type, done).map_err(|problem| {
            McpError::internal_error(format!("reading `{uri}` failed: {problem}"), None)
        })?;
        Ok(ReadResourceResult::new(contents).into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if request.uri.len() > berm_abi::content::MAX_URI {
            return Err(McpError::invalid_params(
                format!(
                    "a resource URI is at most {} bytes; this one is {}",
                    berm_abi::content::MAX_URI,
                    request.uri.len()
                ),
                None,
            ));
        }
        let owner = self.service.catalog().resource_owner(&request.uri);
        if owner.is_none() {
            return Err(McpError::resource_not_found(
                format!("Resource not found: no program serves `{}`", request.uri),
                Some(serde_json::json!({ "uri": request.uri })),
            ));
        }
        let mut subscribed = self.subscribed.lock().unwrap_or_else(|p| p.into_inner());
        if subscribed.len() >= MAX_SUBSCRIPTIONS && !subscribed.contains_key(&request.uri) {
            return Err(McpError::invalid_params(
                format!(
                    "this session already watches {MAX_SUBSCRIPTIONS} resources, the cap: unsubscribe from one first"
                ),
                None,
            ));
        }
        subscribed.insert(request.uri, owner);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let (prompts, next) = self
            .service
            .catalog()
            .prompt_page(cursor.as_deref(), self.service.tools_page_size());
        let mut result = ListPromptsResult::with_all_items(prompts);
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let name = request.name;
        let found = self
            .service
            .catalog()
            .get(&name)
            .filter(|e| e.serves == Some(Serves::Prompt {}))
            .map(Found::of);
        let unknown = |name: &str| {
            McpError::invalid_params(
                format!("no prompt `{name}` is served (list them with prompts/list)"),
                None,
            )
        };
        if found.is_none() {
            return Err(unknown(&name));
        }
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let run = Run {
            method: "prompts/get",
            name: &name,
            args: &args,
            sent: &args,
        };
        let asked = self
            .run_asking(
                run,
                found,
                (request.input_responses, request.request_state.as_deref()),
                &context,
            )
            .await?;
        let outcome = match asked {
            Asked::Outcome(outcome) => outcome,
            Asked::Input(input) => return Ok(GetPromptResponse::InputRequired(input)),
            Asked::Refused(message) => {
                return Err(McpError::internal_error(
                    format!("prompt `{name}` failed: {message}"),
                    None,
                ));
            }
        };
        match outcome {
            Ok(Ok(done)) => Ok(GetPromptResult::new(prompt_messages(done)).into()),
            Ok(Err(failure)) => Err(McpError::internal_error(
                format!("prompt `{name}` failed: {}", failure.message),
                None,
            )),
            Err(CallError::NoSuchTool(_)) => Err(unknown(&name)),
            Err(error @ CallError::Host(berm::Error::InvalidArguments { .. })) => {
                Err(McpError::invalid_params(error.to_string(), None))
            }
            Err(error) => {
                tracing::warn!("prompts/get: {error}");
                Err(McpError::internal_error(
                    format!("prompt `{name}` failed: {error}"),
                    None,
                ))
            }
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let catalog = self.service.catalog();
        let entry = match &request.r#ref {
            Reference::Prompt(prompt) => catalog
                .get(&prompt.name)
                .filter(|e| e.serves == Some(Serves::Prompt {}))
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!("no prompt `{}` is served (list them with prompts/list)", prompt.name),
                        None,
                    )
                })?,
            Reference::Resource(template) => {
                catalog.template_entry(&template.uri).ok_or_else(|| {
                    McpError::invalid_params(
                        format!(
                            "no resource template `{}` is served (list them with resources/templates/list)",
                            template.uri
                        ),
                        None,
                    )
                })?
            }
            _ => {
                return Err(McpError::invalid_params(
                    "completion/complete: ref must be ref/prompt or ref/resource",
                    None,
                ));
            }
        };
        let argument = &request.argument;
        let known = entry
            .mcp
            .input_schema
            .get("properties")
            .and_then(|p| p.get(&argument.name))
            .is_some();
        if !known {
            return Err(McpError::invalid_params(
                format!("`{}` has no argument `{}`", entry.mcp.name, argument.name),
                None,
            ));
        }
        let (values, total) = crate::catalog::completions(entry, &argument.name, &argument.value);
        let more = total > values.len();
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        let completion = CompletionInfo::with_pagination(values, Some(total), more)
            .map_err(|e| McpError::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log.set_level(request.level);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Sessions that initialized get list_changed on their peer until the
        // peer goes away; a closed session is noticed within a check period
        // even when nothing changes, so its task does not linger.
        const CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);
        let peer = context.peer;
        let mut changes = self.service.subscribe();
        let service = self.service.clone();
        let subscribed = self.subscribed.clone();
        let mut seen = Seen::of(&service.catalog());
        tokio::spawn(async move {
            let mut check = tokio::time::interval(CHECK_PERIOD);
            loop {
                tokio::select! {
                    change = changes.recv() => match change {
                        Ok(()) | Err(RecvError::Lagged(_)) => {
                            let catalog = service.catalog();
                            let (resources, prompts) = seen.update(&catalog);
                            let updated = updated(
                                &mut subscribed.lock().unwrap_or_else(|p| p.into_inner()),
                                &catalog,
                            );
                            let mut sent = peer.notify_tool_list_changed().await;
                            if resources {
                                sent = sent.and(peer.notify_resource_list_changed().await);
                            }
                            if prompts {
                                sent = sent.and(peer.notify_prompt_list_changed().await);
                            }
                            for uri in updated {
                                let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                                sent = sent.and(peer.notify_resource_updated(param).await);
                            }
                            if sent.is_err() {
                                break;
                            }
                        }
                        Err(RecvError::Closed) => break,
                    },
                    _ = check.tick() => {
                        if peer.is_transport_closed() {
                            break;
                        }
                    }
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let accepted = context.accepted().clone();
        let wants = |flag: Option<bool>| flag == Some(true);
        let mut watched: Watched = BTreeMap::new();
        let catalog = self.service.catalog();
        for uri in accepted
            .resource_subscriptions
            .iter()
            .flatten()
            .take(MAX_SUBSCRIPTIONS)
        {
            watched.insert(uri.clone(), catalog.resource_owner(uri));
        }
        let mut seen = Seen::of(&catalog);
        drop(catalog);
        let listens = wants(accepted.tools_list_changed)
            || wants(accepted.prompts_list_changed)
            || wants(accepted.resources_list_changed)
            || !watched.is_empty();
        if !listens {
            context.cancelled().await;
            return Ok(());
        }
        let mut changes = self.service.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(RecvError::Lagged(_)) => {
                        let catalog = self.service.catalog();
                        let (resources, prompts) = seen.update(&catalog);
                        let sink = context.sink();
                        let mut sent = Ok(());
                        if wants(accepted.tools_list_changed) {
                            sent = sent.and(sink.notify_tool_list_changed().await);
                        }
                        if resources && wants(accepted.resources_list_changed) {
                            sent = sent.and(sink.notify_resource_list_changed().await);
                        }
                        if prompts && wants(accepted.prompts_list_changed) {
                            sent = sent.and(sink.notify_prompt_list_changed().await);
                        }
                        for uri in updated(&mut watched, &catalog) {
                            sent = sent.and(sink.notify_resource_updated(uri).await);
                        }
                        if sent.is_err() {
                            return Ok(());
                        }
                    }
                    Err(RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}

/// A block a program added (`berm.content`, checked by the runtime) as MCP content; bytes
/// go out in Base64.
fn content_block(block: berm::Content) -> ContentBlock {
    use base64::Engine as _;
    use berm_abi::content::Kind;
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mime_type = (!block.mime_type.is_empty()).then_some(block.mime_type.clone());
    // The runtime checked that text, resource text and a link's name are UTF-8.
    let text = |bytes: Vec<u8>| {
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    };
    match block.kind {
        Kind::Text => ContentBlock::text(text(block.body)),
        Kind::Image => ContentBlock::image(base64(&block.body), block.mime_type),
        Kind::Audio => ContentBlock::audio(base64(&block.body), block.mime_type),
        Kind::ResourceText => ContentBlock::resource(ResourceContents::TextResourceContents {
            uri: block.uri,
            mime_type,
            text: text(block.body),
            meta: None,
        }),
        Kind::ResourceBlob => ContentBlock::resource(ResourceContents::BlobResourceContents {
            uri: block.uri,
            mime_type,
            blob: base64(&block.body),
            meta: None,
        }),
        Kind::ResourceLink => {
            let mut link = Resource::new(block.uri, text(block.body));
            link.mime_type = mime_type;
            ContentBlock::resource_link(link)
        }
    }
}

/// What a resource read returned as `resources/read` contents: its text first (unless empty
/// while blocks follow) as the resource `uri` in its declared media type, then each block —
/// text as more text of `uri`, images, audio and embedded resources as its bytes or text in
/// their own media type. Every content carries `uri`, the URI that was read: a program answers
/// for the URI it serves, and the URI it wrote on an embedded resource is not kept, so it
/// cannot label its bytes as another program's resource or as `file:///…`. A resource link
/// points elsewhere, which a read cannot carry.
fn resource_contents(
    uri: &str,
    mime_type: &str,
    done: Done,
) -> Result<Vec<ResourceContents>, String> {
    use base64::Engine as _;
    use berm_abi::content::Kind;
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let declared = (!mime_type.is_empty()).then(|| mime_type.to_string());
    let text_of =
        |text: String, mime_type: Option<String>| ResourceContents::TextResourceContents {
            uri: uri.to_string(),
            mime_type,
            text,
            meta: None,
        };
    let mut contents = Vec::new();
    if !done.text.is_empty() || done.content.is_empty() {
        contents.push(text_of(done.text, declared.clone()));
    }
    for block in done.content {
        let mime = (!block.mime_type.is_empty()).then(|| block.mime_type.clone());
        let utf8 = |bytes: Vec<u8>| {
            String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        };
        contents.push(match block.kind {
            Kind::Text => text_of(utf8(block.body), declared.clone()),
            Kind::Image | Kind::Audio => ResourceContents::BlobResourceContents {
                uri: uri.to_string(),
                mime_type: mime,
                blob: base64(&block.body),
                meta: None,
            },
            Kind::ResourceText => ResourceContents::TextResourceContents {
                uri: uri.to_string(),
                mime_type: mime,
                text: utf8(block.body),
                meta: None,
            },
            Kind::ResourceBlob => ResourceContents::BlobResourceContents {
                uri: uri.to_string(),
                mime_type: mime,
                blob: base64(&block.body),
                meta: None,
            },
            Kind::ResourceLink => {
                return Err(format!(
                    "the program returned a link to `{}`, which resources/read cannot carry: return the contents",
                    block.uri
                ));
            }
        });
    }
    Ok(contents)
}

/// What a prompt returned as its messages, every one from the user: its text first (unless
/// empty), then one message per block, in order.
fn prompt_messages(done: Done) -> Vec<PromptMessage> {
    let text = (!done.text.is_empty()).then(|| PromptMessage::new_text(Role::User, done.text));
    text.into_iter()
        .chain(
            done.content
                .into_iter()
                .map(|block| PromptMessage::new(Role::User, content_block(block))),
        )
        .collect()
}

/// The one place a call's outcome becomes MCP. What the model should read
/// is a result: the text (and `structuredContent` when the tool declares an
/// output schema); with `isError`, the program's failure, arguments that
/// break the input schema (naming the field and the rule), a result that
/// breaks the output schema, and every host error of the call (trap,
/// deadline, memory cap), whose message names the bound and nothing
/// internal. Only an unknown tool is a protocol error (`invalid_params`), as
/// are malformed requests, which rmcp refuses before they get here.
fn call_result(
    outcome: Result<Result<Done, berm::Failure>, CallError>,
) -> Result<CallToolResponse, McpError> {
    let error_result =
        |message: String| Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
    match outcome {
        Ok(Ok(Done {
            text,
            structured,
            content,
            ..
        })) => {
            // The text comes first, unless the blocks are the whole result.
            let text = (!text.is_empty() || content.is_empty()).then(|| ContentBlock::text(text));
            let blocks = text
                .into_iter()
                .chain(content.into_iter().map(content_block));
            let mut result = CallToolResult::success(blocks.collect());
            result.structured_content = structured;
            Ok(result.into())
        }
        Ok(Err(failure)) => error_result(failure.message),
        Err(error @ CallError::NoSuchTool(_)) => {
            Err(McpError::invalid_params(error.to_string(), None))
        }
        Err(error @ CallError::Host(berm::Error::InvalidArguments { .. })) => {
            error_result(error.to_string())
        }
        Err(
            error @ (CallError::Host(_)
            | CallError::Lost(_)
            | CallError::InvalidOutput { .. }
            | CallError::Receipt(_)),
        ) => {
            tracing::warn!("tools/call: {error}");
            error_result(error.to_string())
        }
    }
}
