//! A receipt for every call (`bermd --receipts DIR`): what each call did, gathered while it
//! runs and appended to the receipt log before its reply (berm-receipts has the format, the
//! chain and the sealing).
//!
//! A call from outside gets its record on the call path (`calls.rs`); a call
//! between programs gets one from the call gate, which links it to its caller's. The
//! syscalls add to the record of the call they serve ([`berm::SyscallContext::trace`]):
//! `http.fetch` its host, status and the secrets its request names.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use berm_receipts::{
    Call, Callee, Fetch, LogError, MAX_LISTED, Outcome, ReceiptLog, ReceiptRef, rfc3339,
};

/// What a receipt says of the program, fixed at deploy: computed once, not per call.
#[derive(Debug, Clone)]
pub(crate) struct ProgramFacts {
    pub program_sha256: String,
    pub code_sha256: Option<String>,
    pub grants: Vec<String>,
}

/// One call's record while it runs, in the call's [`crate::trace::CallTrace`].
pub(crate) struct CallRecord {
    program: String,
    tool: String,
    caller: Option<String>,
    /// Who called, by the OAuth access token's subject and client id (never the token).
    principal: Option<Arc<berm_oauth::Principal>>,
    arguments_sha256: String,
    facts: Arc<ProgramFacts>,
    started: SystemTime,
    start: Instant,
    events: Mutex<Events>,
    /// The caller's record, for a call between programs: it lists this call's receipt.
    parent: Option<Arc<CallRecord>>,
}

#[derive(Default)]
struct Events {
    http: Vec<Fetch>,
    secrets: BTreeSet<String>,
    calls: Vec<Callee>,
    omitted: u64,
}

impl CallRecord {
    /// A fetch the call made: the requested URL's host, the status or the error code, and
    /// the secrets its request named.
    pub fn fetch(&self, url: &str, result: Result<u16, String>, secrets: Vec<String>) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        // Only names the program's own bindings allow end up sent; every name a request
        // asked for is listed, bounded like the rest.
        for name in secrets {
            if events.secrets.len() < MAX_LISTED {
                events.secrets.insert(name);
            }
        }
        if events.http.len() >= MAX_LISTED {
            events.omitted += 1;
            return;
        }
        let (status, error) = match result {
            Ok(status) => (Some(status), None),
            Err(code) => (None, Some(code)),
        };
        events.http.push(Fetch {
            host: host_of(url),
            status,
            error,
        });
    }

    fn callee(&self, callee: Callee) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.calls.len() >= MAX_LISTED {
            events.omitted += 1;
        } else {
            events.calls.push(callee);
        }
    }
}

/// The host of a URL as a program wrote it (scheme, userinfo, path and query left out);
/// bounded, since the program chose it.
pub(crate) fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    host.chars().take(255).collect()
}

/// The receipt log of a service.
pub(crate) struct Receipts {
    log: Arc<ReceiptLog>,
}

impl Receipts {
    pub fn new(log: Arc<ReceiptLog>) -> Receipts {
        Receipts { log }
    }

    pub fn log(&self) -> &Arc<ReceiptLog> {
        &self.log
    }

    /// Starts the record of a call of `program.tool` with arguments whose receipt sha256
    /// is `arguments_sha256`. Dropped unfinished, it writes the call's receipt as
    /// cancelled.
    pub fn begin(
        &self,
        program: &str,
        tool: &str,
        facts: Arc<ProgramFacts>,
        arguments_sha256: String,
        parent: Option<Arc<CallRecord>>,
        principal: Option<Arc<berm_oauth::Principal>>,
    ) -> Pending {
        let record = Arc::new(CallRecord {
            program: program.to_string(),
            tool: tool.to_string(),
            caller: parent.as_ref().map(|p| p.program.clone()),
            principal,
            arguments_sha256,
            facts,
            started: SystemTime::now(),
            start: Instant::now(),
            events: Mutex::new(Events::default()),
            parent,
        });
        Pending {
            log: self.log.clone(),
            record,
            finished: false,
        }
    }
}

/// A call whose receipt is not written yet.
pub(crate) struct Pending {
    log: Arc<ReceiptLog>,
    record: Arc<CallRecord>,
    finished: bool,
}

impl Pending {
    /// The record, for the call's trace.
    pub fn record(&self) -> Arc<CallRecord> {
        self.record.clone()
    }

    /// Writes the receipt of a call that ended with `outcome`, its client having got
    /// `text`; a call between programs is then listed in its caller's record.
    /// `content` is the result's content blocks, if it had any.
    pub fn finish(
        mut self,
        outcome: Outcome,
        text: &str,
        content: &[berm::Content],
    ) -> Result<ReceiptRef, LogError> {
        self.finished = true;
        let content_sha256 = (!content.is_empty()).then(|| {
            use sha2::Digest as _;
            let mut hash = sha2::Sha256::new();
            for block in content {
                let uri = block.uri.as_str();
                hash.update(berm_abi::content::encode(
                    block.kind,
                    uri,
                    &block.mime_type,
                    &block.body,
                ));
            }
            hex::encode(hash.finalize())
        });
        self.write(outcome, berm_receipts::text_sha256(text), content_sha256)
    }

    fn write(
        &self,
        outcome: Outcome,
        result_sha256: String,
        content_sha256: Option<String>,
    ) -> Result<ReceiptRef, LogError> {
        let record = &self.record;
        let events = std::mem::take(&mut *record.events.lock().unwrap_or_else(|p| p.into_inner()));
        let call = Call {
            program: record.program.clone(),
            program_sha256: record.facts.program_sha256.clone(),
            code_sha256: record.facts.code_sha256.clone(),
            tool: record.tool.clone(),
            grants: record.facts.grants.clone(),
            caller: record.caller.clone(),
            subject: record.principal.as_ref().and_then(|p| p.subject.clone()),
            client_id: record.principal.as_ref().and_then(|p| p.client_id.clone()),
            arguments_sha256: record.arguments_sha256.clone(),
            result_sha256,
            content_sha256,
            outcome,
            http: events.http,
            secrets: events.secrets.into_iter().collect(),
            calls: events.calls,
            omitted: events.omitted,
            started: rfc3339(record.started),
            duration_us: record.start.elapsed().as_micros() as u64,
        };
        let written = self.log.append(call);
        match &written {
            Ok(receipt) => {
                if let Some(parent) = &record.parent {
                    parent.callee(Callee {
                        program: record.program.clone(),
                        tool: record.tool.clone(),
                        receipt: receipt.sha256.clone(),
                    });
                }
            }
            Err(e) => tracing::error!(
                program = %record.program,
                tool = %record.tool,
                "the call's receipt could not be written: {}",
                berm_errors::chain(e)
            ),
        }
        written
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.finished {
            // Its caller went away: no client got a result, so the text is empty.
            let _ = self.write(Outcome::Cancelled, berm_receipts::text_sha256(""), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_what_sits_between_the_scheme_and_the_path() {
        assert_eq!(host_of("https://api.example.com/v1?q=1"), "api.example.com");
        assert_eq!(host_of("http://user:pw@h.test:8080/x"), "h.test:8080");
        assert_eq!(host_of("https://h.test#frag"), "h.test");
        assert_eq!(host_of(&format!("https://{}", "a".repeat(1000))).len(), 255);
    }
}
