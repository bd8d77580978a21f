//! Content blocks a tool adds to its result with `berm.content`: what MCP calls image, audio,
//! embedded resource and resource link content, and more text. A model would rather look at a
//! plot than read about it.
//!
//! A request is four frames, `[kind, uri, mime_type, body]`, the same four for every kind so
//! a guest in any language writes one shape. Which of them a kind uses:
//!
//! | kind | `uri` | `mime_type` | `body` |
//! |---|---|---|---|
//! | `text` | empty | empty | the text (UTF-8) |
//! | `image` | empty | `image/…` | the image's bytes (the host encodes them in Base64) |
//! | `audio` | empty | `audio/…` | the audio's bytes |
//! | `resource_text` | the resource's URI | its media type, or empty | its text (UTF-8) |
//! | `resource_blob` | the resource's URI | its media type, or empty | its bytes |
//! | `resource_link` | the resource's URI | its media type, or empty | its name (UTF-8) |
//!
//! Checked here, once, for the host; the result's size cap and the count cap are the host's.

use crate::frame::{self, FrameError};

/// Content blocks one call may add.
pub const MAX_BLOCKS: usize = 64;

/// Longest URI of a resource block, in bytes.
pub const MAX_URI: usize = 2048;

/// Longest media type, in bytes (RFC 6838 allows 127 for type and subtype each, with
/// parameters this is plenty).
pub const MAX_MIME_TYPE: usize = 255;

/// Longest name of a resource link, in bytes.
pub const MAX_NAME: usize = 1024;

/// What a content block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// More text.
    Text,
    /// An image, as bytes of `mime_type`.
    Image,
    /// Audio, as bytes of `mime_type`.
    Audio,
    /// A resource's contents, as text.
    ResourceText,
    /// A resource's contents, as bytes.
    ResourceBlob,
    /// A link to a resource the client may read.
    ResourceLink,
}

impl Kind {
    /// Every kind, in the order errors list them.
    pub const ALL: [Kind; 6] = [
        Kind::Text,
        Kind::Image,
        Kind::Audio,
        Kind::ResourceText,
        Kind::ResourceBlob,
        Kind::ResourceLink,
    ];

    /// The kind's name in the request's first frame.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Image => "image",
            Kind::Audio => "audio",
            Kind::ResourceText => "resource_text",
            Kind::ResourceBlob => "resource_blob",
            Kind::ResourceLink => "resource_link",
        }
    }

    fn from_name(name: &[u8]) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name().as_bytes() == name)
    }
}

/// One checked content block, borrowing the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block<'a> {
    /// What it is.
    pub kind: Kind,
    /// The resource's URI; empty for text, image and audio.
    pub uri: &'a str,
    /// The media type; empty for text, and where a resource gives none.
    pub mime_type: &'a str,
    /// The text, the bytes or the link's name, as the table above says.
    pub body: &'a [u8],
}

/// Why a `berm.content` request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentError {
    /// Not four frames.
    Frame(FrameError),
    /// The first frame names no kind.
    UnknownKind(String),
    /// A field this kind does not use was given, or one it needs is missing or malformed.
    Field {
        /// The block's kind.
        kind: &'static str,
        /// Which field.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl core::fmt::Display for ContentError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ContentError::Frame(e) => {
                write!(f, "{e} (a content block is [kind, uri, mime_type, body])")
            }
            ContentError::UnknownKind(kind) => {
                write!(f, "content kind `{kind}` is not one of ")?;
                for (i, k) in Kind::ALL.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", k.name())?;
                }
                Ok(())
            }
            ContentError::Field {
                kind,
                field,
                problem,
            } => write!(f, "{kind} content block: `{field}` {problem}"),
        }
    }
}

impl std::error::Error for ContentError {}

/// Encodes one block's request, for a guest.
pub fn encode(kind: Kind, uri: &str, mime_type: &str, body: &[u8]) -> Vec<u8> {
    frame::encode(&[
        kind.name().as_bytes(),
        uri.as_bytes(),
        mime_type.as_bytes(),
        body,
    ])
}

/// Reads and checks one block's request.
///
/// # Errors
/// [`ContentError`] naming the field and what is wrong with it.
pub fn parse(request: &[u8]) -> Result<Block<'_>, ContentError> {
    let [kind, uri, mime_type, body] =
        frame::decode_exact::<4>(request).map_err(ContentError::Frame)?;
    let kind = Kind::from_name(kind)
        .ok_or_else(|| ContentError::UnknownKind(String::from_utf8_lossy(kind).into_owned()))?;
    let fail = |field, problem| ContentError::Field {
        kind: kind.name(),
        field,
        problem,
    };
    let text = |field, bytes| core::str::from_utf8(bytes).map_err(|_| fail(field, "is not UTF-8"));
    let uri = text("uri", uri)?;
    let mime_type = text("mime_type", mime_type)?;
    let (needs_uri, mime_prefix) = match kind {
        Kind::Text => (false, None),
        Kind::Image => (false, Some("image/")),
        Kind::Audio => (false, Some("audio/")),
        Kind::ResourceText | Kind::ResourceBlob | Kind::ResourceLink => (true, None),
    };
    match (needs_uri, uri.is_empty()) {
        (false, false) => return Err(fail("uri", "must be empty for this kind")),
        (true, true) => return Err(fail("uri", "is missing")),
        (true, false) if !is_uri(uri) => {
            return Err(fail(
                "uri",
                "is not a URI of at most 2048 bytes (scheme:rest, no spaces or control characters)",
            ));
        }
        _ => {}
    }
    match (kind, mime_prefix) {
        (Kind::Text, _) if !mime_type.is_empty() => {
            return Err(fail("mime_type", "must be empty for this kind"));
        }
        (_, Some(prefix)) if !mime_type.starts_with(prefix) => {
            return Err(fail(
                "mime_type",
                "must be of its kind (image/… or audio/…)",
            ));
        }
        _ if !mime_type.is_empty() && !is_media_type(mime_type) => {
            return Err(fail(
                "mime_type",
                "is not a media type (type/subtype of token characters, at most 255 bytes)",
            ));
        }
        _ => {}
    }
    match kind {
        Kind::Text | Kind::ResourceText => {
            text("body", body)?;
        }
        Kind::Image | Kind::Audio if body.is_empty() => return Err(fail("body", "is empty")),
        Kind::ResourceLink => {
            let name = text("body", body)?;
            if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
                return Err(fail(
                    "body",
                    "(the link's name) must be 1 to 1024 bytes without control characters",
                ));
            }
        }
        _ => {}
    }
    Ok(Block {
        kind,
        uri,
        mime_type,
        body,
    })
}

/// `scheme:rest`, the scheme as RFC 3986 spells it, nothing a client could misread; public
/// so that the manifest holds a resource's URI to the same rule as a block's.
pub fn is_uri(uri: &str) -> bool {
    let Some((scheme, _)) = uri.split_once(':') else {
        return false;
    };
    uri.len() <= MAX_URI
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        && !uri.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// `type/subtype`, each of HTTP token characters, then optional `; parameters` of printable
/// ASCII; public so that a resource's declared media type meets the same rule.
pub fn is_media_type(mime: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let (essence, params) = mime.split_once(';').unwrap_or((mime, ""));
    let Some((ty, subtype)) = essence.trim_end().split_once('/') else {
        return false;
    };
    mime.len() <= MAX_MIME_TYPE
        && token(ty)
        && token(subtype)
        && params.bytes().all(|b| (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: &str, uri: &str, mime: &str, body: &[u8]) -> Result<Kind, ContentError> {
        let request = frame::encode(&[kind.as_bytes(), uri.as_bytes(), mime.as_bytes(), body]);
        parse(&request).map(|b| b.kind)
    }

    #[test]
    fn every_kind_reads_back() {
        assert_eq!(block("text", "", "", b"hi"), Ok(Kind::Text));
        assert_eq!(block("image", "", "image/png", b"\x89PNG"), Ok(Kind::Image));
        assert_eq!(block("audio", "", "audio/wav", b"RIFF"), Ok(Kind::Audio));
        let text = block(
            "resource_text",
            "file:///a.txt",
            "text/plain; charset=utf-8",
            b"a",
        );
        assert_eq!(text, Ok(Kind::ResourceText));
        let blob = block("resource_blob", "test://blob", "", b"\0\xff");
        assert_eq!(blob, Ok(Kind::ResourceBlob));
        let link = block("resource_link", "https://x.test/a", "text/html", b"a page");
        assert_eq!(link, Ok(Kind::ResourceLink));
        let encoded = encode(Kind::Image, "", "image/png", b"x");
        assert_eq!(parse(&encoded).unwrap().body, b"x");
    }

    #[test]
    fn bad_blocks_say_what_is_wrong() {
        let message = |r: Result<Kind, ContentError>| r.unwrap_err().to_string();
        assert!(message(block("video", "", "", b"")).contains("`video` is not one of text, image"));
        assert!(message(block("text", "x:y", "", b"")).contains("`uri` must be empty"));
        assert!(message(block("text", "", "", b"\xff")).contains("`body` is not UTF-8"));
        assert!(message(block("image", "", "audio/wav", b"x")).contains("`mime_type` must be"));
        assert!(message(block("image", "", "image/", b"x")).contains("not a media type"));
        assert!(message(block("image", "", "image/png", b"")).contains("`body` is empty"));
        for uri in ["", "no-scheme", "1x:y", "a b:c", "x:\n"] {
            let error = message(block("resource_text", uri, "", b"t"));
            assert!(error.contains("`uri`"), "{uri:?}: {error}");
        }
        let long = format!("x:{}", "a".repeat(MAX_URI));
        assert!(message(block("resource_blob", &long, "", b"")).contains("2048"));
        assert!(message(block("resource_link", "x:y", "", b"")).contains("link's name"));
        let three = frame::encode(&[b"text", b"", b""]);
        assert!(
            parse(&three)
                .unwrap_err()
                .to_string()
                .contains("[kind, uri, mime_type, body]")
        );
    }
}
