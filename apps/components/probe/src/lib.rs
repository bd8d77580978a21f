//! A component carrying berm's manifest, for the runtime's tests: one tool per grant rule
//! (berm's interfaces and WASI's), and one that counts its calls.

wit_bindgen::generate!({ path: "../../../wit", world: "berm:program/program" });

use std::sync::atomic::{AtomicU32, Ordering};

use berm::program::{http, kv, log};
use exports::berm::program::tools::{Guest, ToolError};
use serde_json::Value;

/// Module-level state: a fresh instance per call means it reads 1 every time.
static CALLS: AtomicU32 = AtomicU32::new(0);

struct Probe;

fn fail(message: impl ToString) -> ToolError {
    ToolError {
        message: message.to_string(),
    }
}

fn text(args: &Value, key: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl Guest for Probe {
    fn call(tool: String, arguments: String) -> Result<String, ToolError> {
        let args: Value = serde_json::from_str(&arguments).map_err(fail)?;
        match tool.as_str() {
            "counter" => Ok((CALLS.fetch_add(1, Ordering::SeqCst) + 1).to_string()),
            "kv" => {
                let key = text(&args, "key");
                kv::put(&key, text(&args, "value").as_bytes()).map_err(|e| fail(e.message))?;
                let value = kv::get(&key).map_err(|e| fail(e.message))?;
                Ok(String::from_utf8_lossy(&value.unwrap_or_default()).into_owned())
            }
            "log" => {
                log::write(log::Level::Info, &text(&args, "message"));
                Ok("logged".into())
            }
            "read-file" => std::fs::read_to_string(text(&args, "path")).map_err(fail),
            "write-file" => std::fs::write(text(&args, "path"), b"written")
                .map(|()| "written".to_string())
                .map_err(fail),
            "flood" => {
                let lines = args.get("lines").and_then(Value::as_u64).unwrap_or(0);
                for i in 0..lines {
                    println!("line {i} {}", "x".repeat(100));
                }
                Ok("flooded".into())
            }
            "clock" => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs().to_string())
                .map_err(fail),
            "memory" => {
                let mib = args.get("mib").and_then(Value::as_u64).unwrap_or(0) as usize;
                let block = vec![1u8; mib << 20];
                Ok(block.iter().map(|b| *b as usize).sum::<usize>().to_string())
            }
            "spin" => loop {
                std::hint::spin_loop();
            },
            "fetch" => {
                let request = http::Request {
                    method: "GET".into(),
                    url: text(&args, "url"),
                    headers: header(&args),
                    body: vec![],
                };
                let response = http::fetch(&request).map_err(|e| fail(e.message))?;
                Ok(format!(
                    "{} {}",
                    response.status,
                    String::from_utf8_lossy(&response.body)
                ))
            }
            "wasi-fetch" => wasi_fetch(&text(&args, "url"), header(&args)).map_err(fail),
            other => Err(fail(format!("no tool {other}"))),
        }
    }
}

fn header(args: &Value) -> Vec<(String, String)> {
    match args.get("header").and_then(Value::as_array) {
        Some(pair) if pair.len() == 2 => vec![(
            pair[0].as_str().unwrap_or_default().to_string(),
            pair[1].as_str().unwrap_or_default().to_string(),
        )],
        _ => vec![],
    }
}

/// GET `url` through `wasi:http/outgoing-handler`.
fn wasi_fetch(url: &str, headers: Vec<(String, String)>) -> Result<String, String> {
    use wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
    let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let fields: Vec<(String, Vec<u8>)> = headers
        .into_iter()
        .map(|(n, v)| (n, v.into_bytes()))
        .collect();
    let fields = Fields::from_list(&fields).map_err(|e| format!("{e:?}"))?;
    let request = OutgoingRequest::new(fields);
    let _ = request.set_method(&Method::Get);
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let _ = request.set_scheme(Some(&scheme));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let body = request.body().map_err(|()| "no body")?;
    let future =
        wasi::http::outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    wasi::http::types::OutgoingBody::finish(body, None).map_err(|e| format!("{e:?}"))?;
    future.subscribe().block();
    let response = future
        .get()
        .ok_or("no response")?
        .map_err(|()| "taken")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no stream")?;
    let mut bytes = Vec::new();
    while let Ok(chunk) = stream.blocking_read(64 << 10) {
        bytes.extend(chunk);
    }
    Ok(format!("{status} {}", String::from_utf8_lossy(&bytes)))
}

export!(Probe);
