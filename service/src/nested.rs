//! Calls between programs (`berm.call`): the runtime resolves the callee and checks its depth,
//! grants and argument cap; [`NestedCalls`] then admits it through the same call slots and
//! input schema as a call from outside, keeping the runtime's target, and gives it its receipt
//! and span as the caller's child.

use berm::Failure;
use tokio::sync::OwnedSemaphorePermit;

use crate::calls::{Calls, host_error_type};
use crate::registry::ResolveError;

/// The call path's checks of a call between programs ([`Calls::admit_checked`]), installed
/// in the runtime: a weak reference, since the runtime is the registry's, which the call
/// path holds.
pub(crate) struct NestedCalls(pub std::sync::Weak<Calls>);

impl berm::CallGate for NestedCalls {
    fn admit(
        &self,
        target: &berm::Target,
        args: &[u8],
        caller: Option<&berm::CallTrace>,
    ) -> Result<berm::Admitted, berm::Error> {
        let Some(calls) = self.0.upgrade() else {
            return Ok(berm::Admitted::default());
        };
        let (program, tool) = (target.program(), target.tool());
        let served = berm_abi::served_name(program, tool);
        let Some(entry) = calls.registry().catalog().get(&served).cloned() else {
            // A tool that is not served is not deployed: the runtime names it as for any call.
            return Ok(berm::Admitted::default());
        };
        let target = calls
            .registry()
            .target_with(&served, entry, target.clone())
            .map_err(|e| match e {
                ResolveError::Runtime(e) => e,
                ResolveError::NotServed(_) => berm::Error::NoSuchProgram(program.to_string()),
            })?;
        // With receipts the arguments are parsed once, here, for the schema and the hash (the
        // runtime has checked their size); arguments that are not JSON are left to the
        // admission, which refuses them as for any call.
        let parsed = calls
            .receipts
            .as_ref()
            .and_then(|_| serde_json::from_slice::<serde_json::Value>(args).ok());
        let slot = calls.admit_checked(&target, args, parsed.as_ref())?;
        let caller = caller.and_then(crate::trace::CallTrace::from_runtime);
        let pending = match (&calls.receipts, &target.deployment.facts, &parsed) {
            (Some(receipts), Some(facts), Some(value)) => {
                let parent = caller.as_ref().and_then(|c| c.receipt.clone());
                Some(receipts.begin(
                    program,
                    tool,
                    facts.clone(),
                    berm_receipts::arguments_sha256(value),
                    parent,
                    // A call between programs is the calling program's; its caller's
                    // receipt names who called from outside.
                    None,
                ))
            }
            _ => None,
        };
        // The callee's span is the caller's child: the caller waits on it.
        let span = caller.as_ref().and_then(|c| c.span.as_ref()).map(|parent| {
            use opentelemetry::KeyValue;
            parent.child(
                "berm.call",
                vec![
                    KeyValue::new("gen_ai.tool.name", served.clone()),
                    KeyValue::new("berm.program", program.to_string()),
                    KeyValue::new("berm.tool", tool.to_string()),
                    KeyValue::new("berm.program.digest", target.entry.digest.to_string()),
                ],
            )
        });
        Ok(berm::Admitted {
            trace: crate::trace::CallTrace::of(
                pending.as_ref().map(crate::receipts::Pending::record),
                span.as_ref().map(crate::otel::Span::handle),
            ),
            hold: Some(Box::new(NestedHold {
                _slot: slot,
                pending,
                span,
            })),
        })
    }

    fn finished(
        &self,
        admitted: berm::Admitted,
        result: &Result<Result<berm::Output, Failure>, berm::Error>,
    ) {
        let Some(hold) = admitted
            .hold
            .and_then(|hold| hold.downcast::<NestedHold>().ok())
        else {
            return;
        };
        if let Some(span) = hold.span {
            match result {
                Ok(Ok(_)) => span.end("ok", None),
                Ok(Err(_)) => span.end("failed", Some("tool_error")),
                Err(e) => span.end("error", Some(host_error_type(e))),
            }
        }
        if let Some(pending) = hold.pending {
            // A program calling another reads its text only: that is what its receipt names.
            let (kind, text): (_, std::borrow::Cow<'_, str>) = match result {
                Ok(Ok(output)) => (berm_receipts::Outcome::Ok, output.text.as_str().into()),
                Ok(Err(failure)) => (
                    berm_receipts::Outcome::Failed,
                    failure.message.as_str().into(),
                ),
                Err(e) => (berm_receipts::Outcome::Error, e.to_string().into()),
            };
            // A failure is logged where it happens; the caller's own receipt still comes.
            let _ = pending.finish(kind, &text, &[]);
        }
    }
}

/// What a call between programs holds until it ends: its call slot, and its receipt
/// while it is not written.
pub(crate) struct NestedHold {
    _slot: OwnedSemaphorePermit,
    pending: Option<crate::receipts::Pending>,
    span: Option<crate::otel::Span>,
}
