//! What a call's outcome becomes in MCP: a tool's result, a resource's contents, a prompt's
//! messages. Errors cross into MCP in exactly one place, [`call_result`].

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, PromptMessage, Resource, ResourceContents, Role,
};

use crate::calls::{CallError, CallOutcome, Done};

/// A block a program added (`berm.content`, checked by the runtime) as MCP content; bytes
/// go out in Base64.
pub(crate) fn content_block(block: berm::Content) -> ContentBlock {
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

/// What a resource read returned as `resources/read` contents: its text first (unless empty
/// while blocks follow) as the resource `uri` in its declared media type, then each block —
/// text as more text of `uri`, images, audio and embedded resources as its bytes or text in
/// their own media type. Every content carries `uri`, the URI that was read: a program answers
/// for the URI it serves, and the URI it wrote on an embedded resource is not kept, so it
/// cannot label its bytes as another program's resource or as `file:///…`. A resource link
/// points elsewhere, which a read cannot carry.
pub(crate) fn resource_contents(
    uri: &str,
    mime_type: &str,
    done: Done,
) -> Result<Vec<ResourceContents>, String> {
    use base64::Engine as _;
    use berm_abi::content::Kind;
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let declared = (!mime_type.is_empty()).then(|| mime_type.to_string());
    let text_of =
        |text: String, mime_type: Option<String>| ResourceContents::TextResourceContents {
            uri: uri.to_string(),
            mime_type,
            text,
            meta: None,
        };
    let mut contents = Vec::new();
    if !done.text.is_empty() || done.content.is_empty() {
        contents.push(text_of(done.text, declared.clone()));
    }
    for block in done.content {
        let mime = (!block.mime_type.is_empty()).then(|| block.mime_type.clone());
        let utf8 = |bytes: Vec<u8>| {
            String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        };
        contents.push(match block.kind {
            Kind::Text => text_of(utf8(block.body), declared.clone()),
            Kind::Image | Kind::Audio => ResourceContents::BlobResourceContents {
                uri: uri.to_string(),
                mime_type: mime,
                blob: base64(&block.body),
                meta: None,
            },
            Kind::ResourceText => ResourceContents::TextResourceContents {
                uri: uri.to_string(),
                mime_type: mime,
                text: utf8(block.body),
                meta: None,
            },
            Kind::ResourceBlob => ResourceContents::BlobResourceContents {
                uri: uri.to_string(),
                mime_type: mime,
                blob: base64(&block.body),
                meta: None,
            },
            Kind::ResourceLink => {
                return Err(format!(
                    "the program returned a link to `{}`, which resources/read cannot carry: return the contents",
                    block.uri
                ));
            }
        });
    }
    Ok(contents)
}

/// What a prompt returned as its messages, every one from the user: its text first (unless
/// empty), then one message per block, in order.
pub(crate) fn prompt_messages(done: Done) -> Vec<PromptMessage> {
    let text = (!done.text.is_empty()).then(|| PromptMessage::new_text(Role::User, done.text));
    text.into_iter()
        .chain(
            done.content
                .into_iter()
                .map(|block| PromptMessage::new(Role::User, content_block(block))),
        )
        .collect()
}

/// The one place a call's outcome becomes MCP. What the model should read
/// is a result: the text (and `structuredContent` when the tool declares an
/// output schema); with `isError`, the program's failure, arguments that
/// break the input schema (naming the field and the rule), a result that
/// breaks the output schema, and every host error of the call (trap,
/// deadline, memory cap), whose message names the bound and nothing
/// internal. Only an unknown tool is a protocol error (`invalid_params`), as
/// are malformed requests, which rmcp refuses before they get here.
pub(crate) fn call_result(outcome: CallOutcome) -> Result<CallToolResponse, McpError> {
    let error_result =
        |message: String| Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
    let (text, structured, content) = match outcome {
        CallOutcome::Done(Done {
            text,
            structured,
            content,
        }) => (text, structured, content),
        // A question is answered before it gets here; had it not been, it reads as its blocks.
        CallOutcome::Asked { content, .. } => (String::new(), None, content),
        CallOutcome::Failed(failure) => return error_result(failure.message),
        CallOutcome::Error(error) => return error_of(error),
    };
    // The text comes first, unless the blocks are the whole result.
    let text = (!text.is_empty() || content.is_empty()).then(|| ContentBlock::text(text));
    let blocks = text
        .into_iter()
        .chain(content.into_iter().map(content_block));
    let mut result = CallToolResult::success(blocks.collect());
    result.structured_content = structured;
    Ok(result.into())
}

/// A host error of a call as MCP: an unknown tool is `invalid_params`; anything else an
/// error result.
fn error_of(error: CallError) -> Result<CallToolResponse, McpError> {
    let error_result =
        |message: String| Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
    match error {
        error @ CallError::NoSuchTool(_) => Err(McpError::invalid_params(error.to_string(), None)),
        error @ CallError::Host(berm::Error::InvalidArguments { .. }) => {
            error_result(error.to_string())
        }
        error @ (CallError::Host(_)
        | CallError::Lost(_)
        | CallError::InvalidOutput { .. }
        | CallError::Receipt(_)) => {
            tracing::warn!("tools/call: {error}");
            error_result(error.to_string())
        }
    }
}
