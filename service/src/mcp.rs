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
//! Errors cross into MCP in exactly one place, [`results::call_result`]. A request's name is
//! resolved once, here, to the [`crate::registry::Target`] its call carries down.
//!
//! A `notifications/cancelled` for a running `tools/call` cancels the
//! request's token; the call's future is then dropped, which stops the
//! program at its next epoch tick and returns its instance to the pool, and
//! rmcp sends nothing for the cancelled id.

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated
// in rmcp by SEP-2577 but is what clients up to 2025-11-25 speak.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use berm_manifest::Serves;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Reference, Resource, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast::error::RecvError;

use crate::calls::{CallError, CallOutcome};
use crate::catalog::Catalog;
use crate::logs::SessionLog;
use crate::service::Service;

mod asking;
mod results;
mod task_calls;

pub use asking::{ASK_TIMEOUT, MAX_ASK_ROUNDS};
use asking::{Asked, Run, Session, trace_parent};
use results::{call_result, prompt_messages, resource_contents};
use task_calls::{TaskCall, start_task};

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

    /// What this session's requests run with.
    fn session(&self) -> Session<'_> {
        Session {
            service: &self.service,
            log: &self.log,
        }
    }
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
        context: RequestContext<RoleServer>,
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
        let (mut tools, next) = self
            .service
            .catalog()
            .page(cursor.as_deref(), self.service.tools_page_size());
        // Over HTTP with OAuth, only the tools the token's scopes let it call (a page may
        // then hold fewer than the page size; its cursor still leads on).
        if let Some(principal) = crate::resource_server::principal_of(&context.extensions) {
            tools.retain(|tool| principal.scopes.may_call(&tool.name));
        }
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
        // The one lookup of the call: everything below runs on this target.
        let target = match self.service.resolve(&request.name) {
            Ok(target) => target,
            Err(error) => return call_result(CallOutcome::Error(error)),
        };
        if let Some(serves) = &target.entry.serves {
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
        if let Some(spec) = target.entry.task {
            let speaks_tasks = context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
            let answered = request.input_responses.is_some() || request.request_state.is_some();
            // An `ask_first` tool's rounds before its answers are plain calls (below).
            if speaks_tasks && (answered || !spec.ask_first) {
                let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
                let input = if spec.ask_first {
                    // The state of its first rounds, sealed for this tools/call.
                    let run = Run {
                        method: "tools/call",
                        name: &request.name,
                        args: &args,
                        sent: &args,
                    };
                    Some(self.session().answered_input(
                        &run.sealed_for(&target.entry.digest),
                        request.input_responses,
                        request.request_state.as_deref(),
                    )?)
                } else {
                    None
                };
                let call = TaskCall {
                    target,
                    args,
                    capabilities: context.client_capabilities(),
                    trace_parent: trace_parent(&self.service, &context),
                    input,
                    principal: crate::resource_server::principal_of(&context.extensions),
                };
                return start_task(&self.service, self.client(), call, spec).await;
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
            .session()
            .run_asking(
                run,
                &target,
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
        let (served, entry, args) = (read.served.to_string(), read.entry.clone(), read.args);
        drop(catalog);
        let target = match self.service.registry().target_of(&served, entry) {
            Ok(target) => target,
            Err(_) => return Err(not_found(&uri)),
        };
        // A state is bound to the URI read, not to the variables it decodes to.
        let sent = serde_json::Value::String(uri.clone());
        let run = Run {
            method: "resources/read",
            name: &served,
            args: &args,
            sent: &sent,
        };
        let asked = self
            .session()
            .run_asking(
                run,
                &target,
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
        let done = match outcome.into_result() {
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
        let unknown = |name: &str| {
            McpError::invalid_params(
                format!("no prompt `{name}` is served (list them with prompts/list)"),
                None,
            )
        };
        let entry = self
            .service
            .catalog()
            .get(&name)
            .filter(|e| e.serves == Some(Serves::Prompt {}))
            .cloned();
        let Some(entry) = entry else {
            return Err(unknown(&name));
        };
        let target = match self.service.registry().target_of(&name, entry) {
            Ok(target) => target,
            Err(_) => return Err(unknown(&name)),
        };
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let run = Run {
            method: "prompts/get",
            name: &name,
            args: &args,
            sent: &args,
        };
        let asked = self
            .session()
            .run_asking(
                run,
                &target,
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
        match outcome.into_result() {
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
                .map(Arc::as_ref)
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
