//! What bermd keeps of one call while it runs, handed to its syscalls as the runtime's
//! [`berm::CallTrace`]: its receipt record when receipts are written, and its span when
//! traces are exported. With neither there is no trace, and a call allocates nothing for it.

use std::sync::Arc;

use crate::otel::SpanHandle;
use crate::receipts::CallRecord;

/// One call's record and span.
pub(crate) struct CallTrace {
    /// Its receipt's record (`bermd --receipts`).
    pub receipt: Option<Arc<CallRecord>>,
    /// Its span (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub span: Option<SpanHandle>,
}

impl CallTrace {
    /// The runtime's trace of a call with this record and span; `None` with neither.
    pub fn of(
        receipt: Option<Arc<CallRecord>>,
        span: Option<SpanHandle>,
    ) -> Option<berm::CallTrace> {
        if receipt.is_none() && span.is_none() {
            return None;
        }
        Some(Arc::new(CallTrace { receipt, span }))
    }

    /// The trace of the call a syscall serves, or of a caller, when the host keeps one.
    pub fn from_runtime(trace: &berm::CallTrace) -> Option<Arc<CallTrace>> {
        Arc::clone(trace).downcast::<CallTrace>().ok()
    }
}
