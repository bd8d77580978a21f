//! A typed read of the message a session sends most: a `tools/call` request.
//!
//! rmcp reads every message through serde's buffered `untagged` path: the line is first
//! parsed into serde's generic content tree, checked for its shape, then tried against each
//! of the twenty-two client request types in turn (`tools/call` is the fourteenth), each
//! miss building an error message, and its `params` are buffered once more to split off
//! `_meta`. For a small program that costs more than the program's call. This reads a line
//! that is plainly a `tools/call` request — its keys exactly `jsonrpc`, `id`, `method` and
//! `params`, its method `tools/call`, its params rmcp's `CallToolRequestParams` — straight
//! into the message rmcp's own parse makes of it. Any other line, and any line this read
//! fails on, goes to rmcp's parse, so what is accepted and what is refused stays rmcp's.
//!
//! Hand-written because rmcp has no typed entry point for one method; the tests below hold
//! the two reads equal.

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, JsonRpcMessage, JsonRpcVersion2_0,
    RequestId,
};
use rmcp::service::RxJsonRpcMessage;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The top level of a request line, its params left unread until the method is known
/// (a client may send `params` before `method`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestLine<'a> {
    #[expect(dead_code, reason = "read only to check that it is \"2.0\"")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    /// Borrowed: a method written with escapes fails here and goes to rmcp's parse.
    method: &'a str,
    #[serde(borrow)]
    params: &'a RawValue,
}

/// `line` as rmcp would read it, when it is plainly a `tools/call` request; `None` for
/// every other line, which rmcp's own parse then reads.
pub(super) fn read(line: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
    let request: RequestLine<'_> = serde_json::from_slice(line).ok()?;
    if request.method != "tools/call" {
        return None;
    }
    let mut params: CallToolRequestParams = serde_json::from_str(request.params.get()).ok()?;
    // rmcp keeps a request's `_meta` beside its params, among its extensions, not in them.
    let meta = params.meta.take();
    let mut call = CallToolRequest::new(params);
    if let Some(meta) = meta {
        call.extensions.insert(meta);
    }
    Some(JsonRpcMessage::request(
        ClientRequest::CallToolRequest(call),
        request.id,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What rmcp's own parse makes of `line`, for comparison.
    fn rmcp_reads(line: &str) -> Option<RxJsonRpcMessage<RoleServer>> {
        serde_json::from_str(line).ok()
    }

    /// Both reads, written back out and printed whole: equal when the messages are.
    fn shown(message: &RxJsonRpcMessage<RoleServer>) -> (String, String) {
        let JsonRpcMessage::Request(request) = message else {
            panic!("not a request: {message:?}");
        };
        let ClientRequest::CallToolRequest(call) = &request.request else {
            panic!("not a tools/call: {message:?}");
        };
        (
            serde_json::to_string(message).expect("serialize"),
            format!(
                "{:?} {:?} {:?} {:?}",
                request.id,
                call.params,
                call.extensions.get::<rmcp::model::RequestMetaObject>(),
                call.extensions.len()
            ),
        )
    }

    #[test]
    fn a_plain_tools_call_reads_as_rmcp_reads_it() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo_echo","arguments":{"message":"hello"}}}"#,
            r#"{"jsonrpc":"2.0","id":"a-string-id","method":"tools/call","params":{"name":"echo_echo"}}"#,
            r#"{"params":{"arguments":{"n":[1,2,{"x":null}]},"name":"kv_get"},"method":"tools/call","id":-7,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t","arguments":{},"_meta":{"progressToken":"p1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":{"progressToken":9},"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"t","_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"t","inputResponses":{"k":{"action":"accept","content":{"a":1}}},"requestState":"sealed"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","unknownParam":true}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"caf\u00e9","arguments":{"s":"line\nbreak \"quoted\""}}}"#,
            "  {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"t\"}}  ",
        ];
        for line in lines {
            let fast = read(line.as_bytes()).unwrap_or_else(|| panic!("not read: {line}"));
            let rmcp = rmcp_reads(line).unwrap_or_else(|| panic!("rmcp refuses: {line}"));
            assert_eq!(shown(&fast), shown(&rmcp), "{line}");
        }
    }

    #[test]
    fn every_other_line_is_left_to_rmcp() {
        let lines = [
            // Other methods, and messages that are not requests.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // A key besides the four: rmcp refuses `result` beside `method`, and reads others.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"extra":1}"#,
            // Written with escapes, or wrong in a way rmcp should be the one to say.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}} trailing"#,
            "not json",
        ];
        for line in lines {
            assert!(read(line.as_bytes()).is_none(), "read: {line}");
        }
    }
}
