//! bermd as an OAuth resource server (`--oauth-issuer`), against an issuer the test runs on
//! loopback and controls: its keys, what its JWKS endpoint does (answer, hang, flood, lie),
//! and the tokens, good and bad, minted here with `jsonwebtoken` and ring's keys. Each
//! refusal is checked for its status and `WWW-Authenticate`, and for running nothing (the
//! receipt log holds only the calls that were let through). The whole flow with a real
//! authorization server and the SDK's OAuth client is tests/e2e/oauth.test.mjs.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use berm_control::LimitsSpec;
use common::Bermd;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An ES256 signing key with its JWK.
struct Key {
    kid: String,
    pkcs8: Vec<u8>,
    jwk: Value,
    /// The public point, as an attacker would HMAC with it.
    public: Vec<u8>,
}

impl Key {
    fn new(kid: &str) -> Key {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        });
        Key {
            kid: kid.into(),
            pkcs8: pkcs8.as_ref().to_vec(),
            jwk,
            public: point,
        }
    }

    fn sign(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.into());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(&self.pkcs8)).unwrap()
    }
}

/// What the test issuer's JWKS endpoint does.
const SERVE: u8 = 0;
const HANG: u8 = 1;
const HUGE: u8 = 2;
const GARBAGE: u8 = 3;
const ROTATED: u8 = 4;

/// An issuer on loopback: RFC 8414 metadata and a JWKS holding `first` (and `second` once
/// rotated), whose behaviour the test switches.
struct Issuer {
    url: String,
    mode: Arc<AtomicU8>,
    fetches: Arc<AtomicUsize>,
}

impl Issuer {
    fn start(first: &Key, second: &Key) -> Issuer {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mode = Arc::new(AtomicU8::new(SERVE));
        let fetches = Arc::new(AtomicUsize::new(0));
        let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/auth"), "token_endpoint": format!("{url}/token")});
        let one = json!({"keys": [first.jwk]});
        let both = json!({"keys": [first.jwk, second.jwk]});
        let (m, f) = (mode.clone(), fetches.clone());
        let router = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || {
                    let (mode, one, both) = (m.load(Ordering::SeqCst), one.clone(), both.clone());
                    f.fetch_add(1, Ordering::SeqCst);
                    async move {
                        match mode {
                            HANG => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                String::new()
                            }
                            HUGE => format!(
                                "{{\"keys\":[{}]}}",
                                vec![one["keys"][0].to_string(); 20_000].join(",")
                            ),
                            GARBAGE => "<html>not a JWKS</html>".into(),
                            ROTATED => both.to_string(),
                            _ => one.to_string(),
                        }
                    }
                }),
            );
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, router).await.unwrap();
            });
        });
        Issuer { url, mode, fetches }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// What bermd answered.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn challenge(&self) -> String {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix("www-authenticate: "))
            .unwrap_or_default()
            .to_string()
    }
}

/// Sends `request` (a whole HTTP/1.1 request) to `addr` and reads the answer to its end.
fn exchange(addr: &str, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    // A peer that answers before reading it all may reset the rest: the answer still counts.
    let _ = stream.write_all(request);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// A stateless (2026-07-28) JSON-RPC request to `/mcp` with `token`, if any.
fn request(addr: &str, token: Option<&str>, method: &str, params: Value) -> Answer {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "oauth-test", "version": "0"}});
    let mut params = params;
    params["_meta"] = meta;
    let name = params["name"].as_str().unwrap_or_default().to_string();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let name = if name.is_empty() {
        String::new()
    } else {
        format!("Mcp-Name: {name}\r\n")
    };
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: {method}\r\n{name}{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, request.as_bytes())
}

/// The JSON-RPC result of an answer (plain JSON or one SSE event).
fn result(answer: &Answer) -> Value {
    let value: Value = serde_json::from_str(common::http_message(&answer.body))
        .unwrap_or_else(|e| panic!("{e}: {} {}", answer.head, answer.body));
    value["result"].clone()
}

fn get(addr: &str, path: &str) -> Answer {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// The calls of the receipt log in `dir`, in order.
fn receipts(dir: &Path) -> Vec<Value> {
    let mut calls = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let value: Value = serde_json::from_str(line).unwrap();
            if value["predicate"].get("call").is_some() {
                calls.push(value["predicate"]["call"].clone());
            }
        }
    }
    calls
}

/// bermd with `--oauth-issuer`, `echo` and `hostile` deployed, receipts into `receipts`.
fn bermd(addr: &str, issuer: &Issuer, receipts: &Path, more: &[&str]) -> Bermd {
    let receipts = receipts.to_str().unwrap();
    let mut args = vec![
        "--http",
        addr,
        "--oauth-issuer",
        &issuer.url,
        "--receipts",
        receipts,
    ];
    args.extend_from_slice(more);
    let bermd = Bermd::start(&args);
    bermd.deploy_echo_and_hostile(LimitsSpec::default());
    bermd
}

#[test]
fn tokens_are_checked_for_this_resource_and_refusals_run_nothing() {
    let (key, stranger) = (Key::new("k1"), Key::new("k2"));
    let issuer = Issuer::start(&key, &stranger);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let resource = format!("http://{addr}/mcp");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("receipts");
    let mut bermd = bermd(&addr, &issuer, &log, &[]);
    let metadata = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");
    let claims = |scope: &str| {
        json!({"iss": issuer.url, "aud": resource, "sub": "alice", "client_id": "test-client",
               "scope": scope, "exp": now() + 300, "iat": now()})
    };

    // No token: the challenge names the metadata and the scope to ask for.
    let none = request(&addr, None, "tools/list", json!({}));
    assert_eq!(none.status, 401, "{}", none.head);
    assert_eq!(
        none.challenge(),
        format!("bearer resource_metadata=\"{metadata}\", scope=\"berm:read berm:call\"")
    );
    // The metadata, at the path-suffixed and the plain well-known path, without a token.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let doc = get(&addr, path);
        assert_eq!(doc.status, 200, "{path}: {}", doc.head);
        let doc: Value = serde_json::from_str(&doc.body).unwrap();
        assert_eq!(doc["resource"], resource.as_str());
        assert_eq!(doc["authorization_servers"], json!([issuer.url]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
        // bermd signs no response: RFC 9728 has the member omitted, not empty.
        assert!(
            doc.get("resource_signing_alg_values_supported").is_none(),
            "{doc}"
        );
        let scopes = doc["scopes_supported"].as_array().unwrap();
        for scope in [
            "berm:read",
            "berm:call",
            "berm:call:echo",
            "berm:call:hostile",
        ] {
            assert!(scopes.contains(&json!(scope)), "{scope}: {doc}");
        }
    }

    // The server card too, naming OAuth as the way in and no tool (they depend on the token).
    let card = get(&addr, "/.well-known/mcp/server-card.json");
    assert_eq!(card.status, 200, "{}", card.head);
    let card: Value = serde_json::from_str(&card.body).unwrap();
    assert_eq!(card["remotes"][0]["url"], resource.as_str());
    assert_eq!(
        card["remotes"][0]["authentication"],
        json!({"required": true, "schemes": ["oauth2"]})
    );
    assert!(card.get("tools").is_none(), "{card}");

    // A token for echo alone: tools/list shows echo's tools only, and a call of one runs.
    let echo_only = key.sign("k1", &claims("openid berm:call:echo"));
    let list = request(&addr, Some(&echo_only), "tools/list", json!({}));
    assert_eq!(list.status, 200, "{} {}", list.head, list.body);
    let names: Vec<String> = result(&list)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("echo_")),
        "{names:?}"
    );
    let call = |token: &str, tool: &str| {
        request(
            &addr,
            Some(token),
            "tools/call",
            json!({"name": tool, "arguments": {"message": "hi"}}),
        )
    };
    let ok = call(&echo_only, "echo_echo");
    assert_eq!(ok.status, 200, "{} {}", ok.head, ok.body);
    assert_eq!(result(&ok)["content"][0]["text"], "hi");
    assert_eq!(receipts(&log).len(), 1);

    // Refused tokens: 401 with error="invalid_token", and nothing runs.
    let mut other_aud = claims("berm:call");
    other_aud["aud"] = json!("https://elsewhere.example/mcp");
    let mut expired = claims("berm:call");
    expired["exp"] = json!(now() - 3600);
    let mut early = claims("berm:call");
    early["nbf"] = json!(now() + 3600);
    let mut wrong_iss = claims("berm:call");
    wrong_iss["iss"] = json!("http://127.0.0.1:1");
    let unsigned = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(claims("berm:call").to_string().as_bytes())
    );
    let mut hs_header = Header::new(Algorithm::HS256);
    hs_header.kid = Some("k1".into());
    let hs256 = jsonwebtoken::encode(
        &hs_header,
        &claims("berm:call"),
        &EncodingKey::from_secret(&key.public).unwrap(),
    )
    .unwrap();
    let hs256_jwk = jsonwebtoken::encode(
        &hs_header,
        &claims("berm:call"),
        &EncodingKey::from_secret(key.jwk.to_string().as_bytes()).unwrap(),
    )
    .unwrap();
    let cases = [
        (
            "another audience",
            key.sign("k1", &other_aud),
            "another resource",
        ),
        ("expired", key.sign("k1", &expired), "expired"),
        ("not yet valid", key.sign("k1", &early), "not valid yet"),
        (
            "another issuer",
            key.sign("k1", &wrong_iss),
            "another issuer",
        ),
        ("alg none", unsigned, "header does not parse"),
        (
            "unknown key",
            stranger.sign("k2", &claims("berm:call")),
            "does not publish",
        ),
        (
            "a known kid, another key",
            stranger.sign("k1", &claims("berm:call")),
            "signature does not verify",
        ),
        (
            "HS256 with the public key",
            hs256,
            "algorithm is not allowed",
        ),
        ("HS256 with the JWK", hs256_jwk, "algorithm is not allowed"),
        ("100 KiB", "a".repeat(100 * 1024), "longer than"),
        ("not a token", "no:t a token".into(), "not an RFC 6750"),
    ];
    for (what, token, why) in cases {
        let refused = call(&token, "echo_echo");
        assert_eq!(
            refused.status, 401,
            "{what}: {} {}",
            refused.head, refused.body
        );
        let challenge = refused.challenge();
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata}\""))
                && challenge.contains("error=\"invalid_token\"")
                && challenge.contains(&why.to_ascii_lowercase()),
            "{what}: {challenge}"
        );
    }
    // A 1 MB token is refused before anything reads it as one: hyper's cap on a request
    // head (431) or bermd's on a token (401).
    let huge = call(&"a".repeat(1 << 20), "echo_echo");
    assert!([401, 431].contains(&huge.status), "1 MB: {}", huge.head);

    // A missing scope: 403 with a step-up that keeps what the token had, and nothing runs;
    // a token with the scope asked for then calls it.
    let denied = call(&echo_only, "hostile_spin");
    assert_eq!(denied.status, 403, "{} {}", denied.head, denied.body);
    assert_eq!(
        denied.challenge(),
        format!(
            "bearer error=\"insufficient_scope\", scope=\"berm:call:echo berm:call:hostile_spin\", \
             resource_metadata=\"{metadata}\", error_description=\"this request needs the scope berm:call:hostile_spin\""
        )
    );
    let read = request(&addr, Some(&echo_only), "resources/list", json!({}));
    assert_eq!(read.status, 403, "{}", read.head);
    assert!(
        read.challenge()
            .contains("scope=\"berm:call:echo berm:read\""),
        "{}",
        read.challenge()
    );
    assert_eq!(receipts(&log).len(), 1, "a refused request ran something");
    let stepped_up = key.sign(
        "k1",
        &claims("berm:call:echo berm:call:hostile_spin berm:read"),
    );
    assert_eq!(
        request(&addr, Some(&stepped_up), "resources/list", json!({})).status,
        200
    );
    let names: Vec<Value> =
        result(&request(&addr, Some(&stepped_up), "tools/list", json!({})))["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].clone())
            .collect();
    assert!(names.contains(&json!("hostile_spin")) && names.contains(&json!("echo_echo")));

    // The receipt names who called, never the token.
    let written = receipts(&log);
    assert_eq!(written[0]["subject"], "alice");
    assert_eq!(written[0]["client_id"], "test-client");
    let all = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect::<String>();
    assert!(!all.contains(&echo_only) && !bermd.log_text().contains(&echo_only));
    assert!(bermd.alive());
}

#[test]
fn a_jwks_that_hangs_floods_or_lies_leaves_known_keys_working() {
    let (key, next) = (Key::new("k1"), Key::new("k2"));
    let issuer = Issuer::start(&key, &next);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let resource = format!("http://{addr}/mcp");
    let dir = tempfile::tempdir().unwrap();
    // Every unknown key refetches (no rate bound), each fetch bounded by 20 s.
    let mut bermd = bermd(
        &addr,
        &issuer,
        &dir.path().join("receipts"),
        &[
            "--oauth-min-refresh-ms",
            "0",
            "--oauth-fetch-timeout-ms",
            "20000",
        ],
    );
    let claims = json!({"iss": issuer.url, "aud": resource, "sub": "bob", "scope": "berm:call",
                        "exp": now() + 300});
    let known = key.sign(&key.kid, &claims);
    let rotated = next.sign(&next.kid, &claims);
    let call = |token: &str| {
        request(
            &addr,
            Some(token),
            "tools/call",
            json!({"name": "echo_echo", "arguments": {"message": "hi"}}),
        )
    };
    assert_eq!(call(&known).status, 200);

    // A JWKS that hangs: the token naming a new key waits on the fetch; one naming a held
    // key is answered meanwhile.
    issuer.mode.store(HANG, Ordering::SeqCst);
    let waiting = {
        let (addr, rotated) = (addr.clone(), rotated.clone());
        std::thread::spawn(move || {
            request(
                &addr,
                Some(&rotated),
                "tools/call",
                json!({"name": "echo_echo", "arguments": {"message": "hi"}}),
            )
        })
    };
    let fetches = issuer.fetches.load(Ordering::SeqCst);
    berm_fixtures::wait_until(
        Duration::from_secs(30),
        Duration::from_millis(10),
        || issuer.fetches.load(Ordering::SeqCst) > fetches,
        || "bermd never refetched the keys".into(),
    );
    assert_eq!(
        call(&known).status,
        200,
        "a held key waited on a hanging JWKS"
    );
    assert!(
        !waiting.is_finished(),
        "the fetch of a hanging JWKS ended early"
    );
    assert_eq!(waiting.join().unwrap().status, 401);

    // A JWKS too large, then one that is not JSON: refused, the held keys kept.
    for mode in [HUGE, GARBAGE] {
        issuer.mode.store(mode, Ordering::SeqCst);
        let refused = call(&rotated);
        assert_eq!(refused.status, 401, "mode {mode}");
        assert!(
            refused.challenge().contains("does not publish"),
            "{}",
            refused.challenge()
        );
        assert_eq!(call(&known).status, 200, "mode {mode}");
    }
    // Rotated: the new key is fetched on first sight.
    issuer.mode.store(ROTATED, Ordering::SeqCst);
    assert_eq!(call(&rotated).status, 200);
    assert!(bermd.alive());
}

#[test]
fn unknown_keys_refetch_the_jwks_at_most_once_per_interval() {
    let (key, stranger) = (Key::new("k1"), Key::new("k2"));
    let issuer = Issuer::start(&key, &stranger);
    let addr = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let _bermd = bermd(
        &addr,
        &issuer,
        &dir.path().join("receipts"),
        &["--oauth-min-refresh-ms", "600000"],
    );
    let claims = json!({"iss": issuer.url, "aud": format!("http://{addr}/mcp"), "scope": "berm:call",
                        "exp": now() + 300});
    for i in 0..20 {
        let forged = stranger.sign(&format!("unknown-{i}"), &claims);
        assert_eq!(
            request(&addr, Some(&forged), "tools/list", json!({})).status,
            401
        );
    }
    assert_eq!(
        request(
            &addr,
            Some(&key.sign("k1", &claims)),
            "tools/list",
            json!({})
        )
        .status,
        200
    );
    // The fetch at start and none after: twenty unknown keys within the interval cost nothing.
    assert_eq!(issuer.fetches.load(Ordering::SeqCst), 1);
}
