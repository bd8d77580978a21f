//! The request and reply of `http.fetch` as framed bytes (docs/design/abi.md):
//! request frames `[method, url, headers, body]`, reply frames
//! `[status, headers, body]`, headers being frames `[name, value, …]`.

use berm_abi::frame;

use crate::{Caps, ErrorCode, FetchError};

/// A request as the program wrote it (placeholders not yet substituted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, … (uppercase token).
    pub method: String,
    /// An absolute `http` or `https` URL.
    pub url: String,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body; empty for none.
    pub body: Vec<u8>,
}

/// A response, whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Most headers one request may carry.
pub const MAX_HEADERS: usize = 100;

fn invalid(message: impl Into<String>) -> FetchError {
    FetchError::new(ErrorCode::Invalid, message)
}

impl Request {
    /// Reads a framed request, checking its size against `caps` before
    /// copying anything: a region of any size costs the host no more than
    /// the cap.
    pub fn decode(bytes: &[u8], caps: &Caps) -> Result<Request, FetchError> {
        if bytes.len() > caps.max_request_bytes + 4 * (4 + 2 * MAX_HEADERS) {
            return Err(FetchError::new(
                ErrorCode::TooLarge,
                format!(
                    "the request is {} bytes, over the cap of {} bytes",
                    bytes.len(),
                    caps.max_request_bytes
                ),
            ));
        }
        let [method, url, headers, body] = frame::decode_exact::<4>(bytes).map_err(|e| {
            invalid(format!(
                "http.fetch: {e}; expected frames [method, url, headers, body]"
            ))
        })?;
        let method = std::str::from_utf8(method)
            .ok()
            .filter(|m| !m.is_empty() && m.len() <= 16 && m.bytes().all(|b| b.is_ascii_uppercase()))
            .ok_or_else(|| invalid("the method must be 1 to 16 uppercase letters (GET, POST, …)"))?
            .to_string();
        let url = std::str::from_utf8(url)
            .map_err(|_| invalid("the URL is not valid UTF-8"))?
            .to_string();
        let mut pairs = Vec::new();
        let mut fields = frame::fields(headers);
        while let Some(name) = fields.next() {
            let name = name.map_err(|e| invalid(format!("headers: {e}")))?;
            let value = match fields.next() {
                Some(value) => value.map_err(|e| invalid(format!("headers: {e}")))?,
                None => return Err(invalid("headers: a name without a value")),
            };
            if pairs.len() == MAX_HEADERS {
                return Err(invalid(format!("more than {MAX_HEADERS} headers")));
            }
            let name = std::str::from_utf8(name)
                .map_err(|_| invalid("a header name is not valid UTF-8"))?
                .to_ascii_lowercase();
            pairs.push((name, value.to_vec()));
        }
        let request = Request {
            method,
            url,
            headers: pairs,
            body: body.to_vec(),
        };
        if request.size() > caps.max_request_bytes {
            return Err(FetchError::new(
                ErrorCode::TooLarge,
                format!(
                    "the request is {} bytes, over the cap of {} bytes",
                    request.size(),
                    caps.max_request_bytes
                ),
            ));
        }
        Ok(request)
    }

    /// The request as frames, for the guest side (the SDK) and for
    /// forwarding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size() + 64);
        frame::push(&mut out, self.method.as_bytes());
        frame::push(&mut out, self.url.as_bytes());
        frame::push(&mut out, &encode_headers(&self.headers));
        frame::push(&mut out, &self.body);
        out
    }

    /// URL, headers and body, in bytes.
    pub fn size(&self) -> usize {
        self.url.len()
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
            + self.body.len()
    }
}

impl Response {
    /// The reply as frames: `[status, headers, body]`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.head();
        out.reserve(self.body.len() + 4);
        frame::push(&mut out, &self.body);
        out
    }

    /// [`Response::encode`], in the body's own allocation: the body is moved up to make
    /// room for the frames before it, so a large response is never held twice.
    pub fn into_encoded(self) -> Vec<u8> {
        let mut head = self.head();
        // As `frame::push` would write it: a body cannot reach 4 GiB under any cap.
        let len = u32::try_from(self.body.len()).expect("a response body is smaller than 4 GiB");
        head.extend_from_slice(&len.to_le_bytes());
        let mut out = self.body;
        let body = out.len();
        out.resize(body + head.len(), 0);
        out.copy_within(0..body, head.len());
        out[..head.len()].copy_from_slice(&head);
        out
    }

    /// The status and headers frames.
    fn head(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        frame::push(&mut out, self.status.to_string().as_bytes());
        frame::push(&mut out, &encode_headers(&self.headers));
        out
    }

    /// Reads a framed reply.
    pub fn decode(bytes: &[u8]) -> Result<Response, FetchError> {
        let (status, headers, body) = Response::parts(bytes)?;
        Ok(Response {
            status,
            headers,
            body: bytes[body].to_vec(),
        })
    }

    /// [`Response::decode`], keeping the body in `bytes`' own allocation (moved down over
    /// the frames before it), so a large reply is never held twice.
    pub fn decode_owned(mut bytes: Vec<u8>) -> Result<Response, FetchError> {
        let (status, headers, body) = Response::parts(&bytes)?;
        bytes.truncate(body.end);
        bytes.drain(..body.start);
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }

    /// A framed reply's status, headers, and where its body is in `bytes`.
    #[allow(clippy::type_complexity)]
    fn parts(
        bytes: &[u8],
    ) -> Result<(u16, Vec<(String, Vec<u8>)>, std::ops::Range<usize>), FetchError> {
        let [status, headers, body] = frame::decode_exact::<3>(bytes)
            .map_err(|e| invalid(format!("http.fetch reply: {e}")))?;
        let status = std::str::from_utf8(status)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid("http.fetch reply: the status is not a number"))?;
        let fields = frame::decode(headers).map_err(|e| invalid(format!("headers: {e}")))?;
        let headers = fields
            .chunks(2)
            .filter_map(|pair| match pair {
                [name, value] => Some((String::from_utf8_lossy(name).into_owned(), value.to_vec())),
                _ => None,
            })
            .collect();
        // Where the body field lies in `bytes`: it is a slice of it.
        let start = body.as_ptr() as usize - bytes.as_ptr() as usize;
        Ok((status, headers, start..start + body.len()))
    }
}

fn encode_headers(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        frame::push(&mut out, name.as_bytes());
        frame::push(&mut out, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let request = Request {
            method: "POST".into(),
            url: "https://example.com/x".into(),
            headers: vec![("accept".into(), b"*/*".to_vec())],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            Request::decode(&request.encode(), &Caps::default()),
            Ok(request)
        );
        let response = Response {
            status: 404,
            headers: vec![("content-type".into(), b"text/plain".to_vec())],
            body: b"no".to_vec(),
        };
        assert_eq!(Response::decode(&response.encode()), Ok(response.clone()));
        // Encoded in the body's allocation, and read back into the frames' own: the same.
        let encoded = response.clone().into_encoded();
        assert_eq!(encoded, response.encode());
        assert_eq!(Response::decode_owned(encoded), Ok(response));
        let empty = Response {
            status: 204,
            headers: Vec::new(),
            body: Vec::new(),
        };
        assert_eq!(empty.clone().into_encoded(), empty.encode());
        assert_eq!(Response::decode_owned(empty.encode()), Ok(empty));
    }

    #[test]
    fn bad_requests_are_refused_with_the_reason() {
        let caps = Caps::default();
        let bad = |fields: &[&[u8]]| Request::decode(&frame::encode(fields), &caps).unwrap_err();
        assert!(bad(&[b"GET", b"u"]).message.contains("expected frames"));
        assert!(bad(&[b"get", b"u", b"", b""]).message.contains("uppercase"));
        assert!(
            bad(&[b"GET", b"\xff", b"", b""])
                .message
                .contains("not valid UTF-8")
        );
        let odd = frame::encode(&[b"accept"]);
        assert!(
            bad(&[b"GET", b"u", &odd, b""])
                .message
                .contains("without a value")
        );
        let big = vec![0u8; caps.max_request_bytes + 1];
        assert_eq!(bad(&[b"GET", b"u", b"", &big]).code, ErrorCode::TooLarge);
        let mut many = Vec::new();
        for _ in 0..=MAX_HEADERS {
            frame::push(&mut many, b"a");
            frame::push(&mut many, b"b");
        }
        assert!(
            bad(&[b"GET", b"u", &many, b""])
                .message
                .contains("more than 100")
        );
    }
}
