//! An error and its causes on one line, for logs, reports and the control API's answers: a
//! module of its own, below everything that reports errors, so none of them imports the
//! service for it.

/// An error and its causes, joined, for logs and reports.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
