//! MCP: every deployed program's tools on one endpoint, served with rmcp.
//!
//! The handler is written by hand because the tools are dynamic: they come
//! from the catalog, which changes on every deploy and remove. Clients hear
//! about changes through `notifications/tools/list_changed` — sent on the
//! session's peer for clients that `initialize` (up to 2025-11-25), and on a
//! `subscriptions/listen` stream for 2026-07-28 clients.
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

use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast::error::RecvError;

use crate::logs::SessionLog;
use crate::service::{CallError, Done, LogTo, Service};

/// The MCP face of a [`Service`]; one per session, cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    service: Arc<Service>,
    log: SessionLog,
}

impl McpServer {
    /// A handler for one MCP session.
    pub fn new(service: Arc<Service>) -> McpServer {
        McpServer {
            service,
            log: SessionLog::default(),
        }
    }
}

const INSTRUCTIONS: &str = "berm serves every deployed program's tools, named \
`{program}_{tool}` (a program's name has no `_`, so the first `_` ends it). \
Each tool's description ends with what its program is and when to reach for \
it. The list changes when programs are deployed or removed.";

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("bermd", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        if let Some(cursor) = &cursor
            && berm_abi::split_served_name(cursor).is_none()
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
        self.service.catalog().get(name).map(|t| t.mcp.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let progress = context.meta.get_progress_token();
        let log = LogTo {
            session: &self.log,
            peer: &context.peer,
            progress: progress.as_ref(),
        };
        let mut call = pin!(self.service.call(&request.name, &args, Some(log)));
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
        call_result(outcome)
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
        tokio::spawn(async move {
            let mut check = tokio::time::interval(CHECK_PERIOD);
            loop {
                tokio::select! {
                    change = changes.recv() => match change {
                        Ok(()) | Err(RecvError::Lagged(_)) => {
                            if peer.notify_tool_list_changed().await.is_err() {
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
        if context.accepted().tools_list_changed != Some(true) {
            context.cancelled().await;
            return Ok(());
        }
        let mut changes = self.service.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(RecvError::Lagged(_)) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
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
