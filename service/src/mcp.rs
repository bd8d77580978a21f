//! MCP: every deployed program's tools on one endpoint, served with rmcp.
//!
//! The handler is written by hand because the tools are dynamic: they come
//! from the catalog, which changes on every deploy and remove. Clients hear
//! about changes through `notifications/tools/list_changed` — sent on the
//! session's peer for clients that `initialize` (up to 2025-11-25), and on a
//! `subscriptions/listen` stream for 2026-07-28 clients.
//!
//! Errors cross into MCP in exactly one place, [`call_result`].

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter,
    Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast::error::RecvError;

use crate::service::{CallError, Service};

/// The MCP face of a [`Service`]; one per session, cheap to clone.
#[derive(Clone)]
pub struct McpServer {
    service: Arc<Service>,
}

impl McpServer {
    /// A handler for one MCP session.
    pub fn new(service: Arc<Service>) -> McpServer {
        McpServer { service }
    }
}

const INSTRUCTIONS: &str = "berm serves every deployed program's tools, named \
`{program}.{tool}`. Each tool's description ends with what its program is and \
when to reach for it. The list changes when programs are deployed or removed.";

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("bermd", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.service.catalog().list().as_ref().clone(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.service.catalog().get(name).map(|t| t.mcp.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some((program, tool)) = request.name.split_once('.') else {
            return call_result(Err(CallError::NoSuchTool(request.name.to_string())));
        };
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        call_result(self.service.call(program, tool, &args).await)
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

/// The one place a call's outcome becomes MCP: the result is text; the
/// program's failure is a result with `isError`; bad arguments and unknown
/// tools are `invalid_params`; every host error (trap, deadline, memory cap)
/// is `internal_error` with the runtime's message, which names the program,
/// the tool and the bound.
fn call_result(
    outcome: Result<Result<String, berm::Failure>, CallError>,
) -> Result<CallToolResponse, McpError> {
    match outcome {
        Ok(Ok(text)) => Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into()),
        Ok(Err(failure)) => {
            Ok(CallToolResult::error(vec![ContentBlock::text(failure.message)]).into())
        }
        Err(error @ (CallError::NoSuchTool(_) | CallError::InvalidArguments { .. })) => {
            Err(McpError::invalid_params(error.to_string(), None))
        }
        Err(error @ (CallError::Host(_) | CallError::Lost(_) | CallError::Busy { .. })) => {
            tracing::warn!("tools/call: {error}");
            Err(McpError::internal_error(error.to_string(), None))
        }
    }
}
