//! `tools/call` as a task (the MCP tasks extension): started at once, run with the task's
//! deadline on the target its request resolved, asking for input through the task.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};

use super::asking::{Refusal, input_requests};
use super::results::call_result;
use crate::calls::{CallError, CallExtras, CallOutcome};
use crate::registry::Target;
use crate::service::Service;

/// Starts `call` as a task of `client` and answers with its handle at once (once every
/// replica would find it, when tasks are shared); a task runs with neither the session's log
/// nor its progress token, since it outlives the session.
pub(crate) async fn start_task(
    service: &Arc<Service>,
    client: crate::tasks::open::Client,
    call: TaskCall,
    spec: berm_manifest::TaskSpec,
) -> Result<CallToolResponse, McpError> {
    let program_deadline = call.target.entry.deadline;
    let tasks = service.tasks();
    let slot = match tasks.admit(client) {
        Ok(slot) => slot,
        Err(full) => {
            return Ok(CallToolResult::error(vec![ContentBlock::text(full.to_string())]).into());
        }
    };
    let deadline = tasks.deadline(&spec, program_deadline);
    let ttl = crate::tasks::Tasks::ttl(deadline);
    let service = service.clone();
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

/// What a task runs: the tool, its arguments, what the client that started it declared,
/// the trace its request continued, and for an `ask_first` tool the answers and opened
/// state its first rounds gathered.
pub(crate) struct TaskCall {
    pub target: Target,
    pub args: serde_json::Value,
    pub capabilities: Option<rmcp::model::ClientCapabilities>,
    pub trace_parent: Option<crate::otel::TraceParent>,
    pub input: Option<(Vec<u8>, Vec<u8>)>,
    /// Who asked for it, over HTTP with OAuth: recorded in each round's receipt.
    pub principal: Option<Arc<berm_oauth::Principal>>,
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
        target,
        args,
        capabilities,
        trace_parent,
        input,
        principal,
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
            principal: principal.clone(),
        };
        let outcome = tokio::select! {
            outcome = service.call_target(&target, &args, None, extras) => outcome,
            () = task.cancelled() => return Err(TaskExit::Cancelled),
        };
        let ask = match outcome {
            CallOutcome::Asked { ask, .. } => ask,
            outcome => return task_result(&service, outcome, ttl),
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
    outcome: CallOutcome,
    ttl: std::time::Duration,
) -> Result<CallToolResult, rmcp::task_manager::TaskExit> {
    use rmcp::task_manager::TaskExit;
    if let CallOutcome::Error(
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
