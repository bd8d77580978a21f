//! Running a request's target for one MCP session: the call with the session's log, progress
//! and cancellation ([`Session::run`]), and a program's questions to its client
//! (`berm.ask`): sealed into an input-required result on 2026-07-28, relayed over the session
//! before that ([`Session::run_asking`]).

use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use rmcp::model::{InputRequest, InputRequiredResult, ServerRequest};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::calls::{CallExtras, CallOutcome, LogTo};
use crate::logs::SessionLog;
use crate::registry::Target;
use crate::service::Service;

/// What one session's requests run with: the service and the session's log.
#[derive(Clone, Copy)]
pub(crate) struct Session<'a> {
    /// The service.
    pub service: &'a Arc<Service>,
    /// The session's logging state.
    pub log: &'a SessionLog,
}

/// The trace a request continues, when bermd exports traces.
pub(crate) fn trace_parent(
    service: &Service,
    context: &RequestContext<RoleServer>,
) -> Option<crate::otel::TraceParent> {
    if !service.traced() {
        return None;
    }
    crate::otel::TraceParent::from_meta(&context.meta.0.0)
}

/// One request that runs an entry: what runs, and what a state sealed for it is bound to.
#[derive(Clone, Copy)]
pub(crate) struct Run<'a> {
    /// The MCP method, named in the call's span and bound into a sealed state.
    pub method: &'static str,
    /// The entry's served name.
    pub name: &'a str,
    /// The arguments the program gets.
    pub args: &'a serde_json::Value,
    /// What the request named, bound into a sealed state ([`crate::ask::SealedFor::sent`]):
    /// a call's or a prompt's arguments, a read's URI.
    pub sent: &'a serde_json::Value,
}

impl<'a> Run<'a> {
    /// The request a state of this run is sealed for, when its program is `digest`.
    pub fn sealed_for(&self, digest: &'a berm::Digest) -> crate::ask::SealedFor<'a> {
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
pub(crate) enum Asked {
    /// A result, a failure or a host error, as any call.
    Outcome(CallOutcome),
    /// On 2026-07-28: the requests and the sealed state, for the client to answer.
    Input(InputRequiredResult),
    /// The program asked for what cannot be asked (a method the client did not declare, a
    /// malformed request), or the client did not answer; the words say which.
    Refused(String),
}

impl Session<'_> {
    /// Runs `target` for a tools/call, a resource read or a prompt, with the session's
    /// log, the request's progress token and what `berm.input` hands over; `Err` when the
    /// client cancelled the request.
    async fn run(
        &self,
        method: &'static str,
        target: &Target,
        args: &serde_json::Value,
        input: Option<&[u8]>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallOutcome, McpError> {
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
            session: self.log,
            peer: &context.peer,
            progress: progress.as_ref(),
            level,
        };
        let extras = CallExtras {
            input: input.map(Arc::<[u8]>::from),
            deadline: None,
            trace_parent: trace_parent(self.service, context),
            method: Some(method),
            principal: crate::resource_server::principal_of(&context.extensions),
        };
        let mut call = pin!(self.service.call_target(target, args, Some(log), extras));
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

    /// What a 2026-07-28 client sent back with `request`: its input responses as JSON and
    /// the state it returned, opened (`-32602` when it does not open for this request).
    pub fn answered_input(
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

    /// Runs the entry `run` names, and when its program asks for input (`berm.ask`): on
    /// 2026-07-28 returns the input-required result with its state sealed for this request;
    /// on older sessions asks the client over the session and runs the entry again with the
    /// answers, up to [`MAX_ASK_ROUNDS`] times. `answered` is what a 2026-07-28 client sent
    /// back, its responses and the sealed state (a state that does not open for this request
    /// is `-32602`); `target` is what the request's name resolved to, once.
    pub async fn run_asking(
        &self,
        run: Run<'_>,
        target: &Target,
        answered: (Option<rmcp::model::InputResponses>, Option<&str>),
        context: &RequestContext<RoleServer>,
    ) -> Result<Asked, McpError> {
        let Run { method, args, .. } = run;
        let (responses, sealed) = answered;
        let digest = target.entry.digest;
        // What the client declared goes to a program that reads its input only: building it
        // is the one part of a call that grows with the client's capabilities.
        let reads_input = target.entry.reads_input;
        let capabilities_json = if reads_input {
            context
                .client_capabilities()
                .and_then(|c| serde_json::to_vec(&c).ok())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let (mut responses, mut state) =
            self.answered_input(&run.sealed_for(&digest), responses, sealed)?;
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        for _ in 0..MAX_ASK_ROUNDS {
            let input = reads_input
                .then(|| berm_abi::frame::encode(&[&responses, &state, &capabilities_json]));
            let outcome = self
                .run(method, target, args, input.as_deref(), context)
                .await?;
            let ask = match outcome {
                CallOutcome::Asked { ask, .. } => ask,
                outcome => return Ok(Asked::Outcome(outcome)),
            };
            let capabilities = context.client_capabilities();
            let requests = match input_requests(ask.requests, capabilities.as_ref()) {
                Ok(requests) => requests,
                Err(Refusal::Undeclared(error)) => return Err(error),
                Err(Refusal::Malformed(problem)) => return Ok(Asked::Refused(problem)),
            };
            if modern {
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

/// Why a program's questions are not sent.
pub(crate) enum Refusal {
    /// It asked for a method whose capability the client did not declare: MCP's
    /// `-32021` (missing required client capability), naming the capability.
    Undeclared(McpError),
    /// A request is not its method's MCP form: the program's fault, an error result.
    Malformed(String),
}

/// A program's `berm.ask` requests as MCP's, refusing any the client cannot answer: a method
/// whose capability the client did not declare (when its capabilities are known), or
/// parameters that are not that method's.
pub(crate) fn input_requests(
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
