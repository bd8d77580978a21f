//! `tools/call` over HTTP with an OAuth access token (a JWT, the issuer's keys held) against
//! the static bearer token, in one run.
//!
//! Run: `scripts/build-apps.sh && cargo bench -p berm-service --bench oauth`. Two bermds (the
//! release binary, each on a temporary home, `--http` on loopback) serve echo's `echo`: one
//! with its static token, one with `--oauth-issuer` naming an issuer this bench serves on
//! loopback (RFC 8414 metadata and a JWKS with one ES256 key; tokens minted here with
//! `jsonwebtoken`). Each line is one client making stateless (2026-07-28) calls, one after
//! another, on one kept-alive connection:
//! - the static token;
//! - the static token again, on a third bermd like the first: the control, whose difference
//!   from the first line is what two processes differ by on this machine with no change at
//!   all (the noise floor of the comparison);
//! - one JWT presented on every call (bermd has checked it once; see `berm_oauth`'s verified
//!   token cache);
//! - a fresh JWT on every call (each signature checked: the cost a first call pays).
//!
//! The lines take turns, [`ROUNDS`] rounds of [`SAMPLES`] calls each, so that drift in the
//! machine's load falls on all of them; besides each line's p50 over all its calls, the median
//! over the rounds of (its p50 in the round − the static token's p50 in the round) says what the
//! token costs with the drift between rounds taken out. The figures go in
//! docs/perf-service.md; nothing here asserts a speed.

use std::time::{Duration, Instant, SystemTime};

mod common;

use base64::Engine as _;
use berm_control::{DeployRequest, LimitsSpec};
use common::{Bermd, Stats};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

const SAMPLES: usize = 250;
const ROUNDS: usize = 20;
const WARMUP: usize = 300;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The issuer's ES256 key: its PKCS#8 for signing and its JWK for the JWKS.
struct Key {
    pkcs8: Vec<u8>,
    jwk: Value,
}

impl Key {
    fn new() -> Key {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("key pair");
        let point = pair.public_key().as_ref();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "bench",
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        });
        Key {
            pkcs8: pkcs8.as_ref().to_vec(),
            jwk,
        }
    }

    /// An access token for `resource` from `issuer`, valid for an hour; `n` makes each unique.
    fn mint(&self, issuer: &str, resource: &str, n: usize) -> String {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let claims = json!({
            "iss": issuer, "aud": resource, "sub": format!("user-{n}"), "client_id": "bench",
            "scope": "berm:read berm:call", "iat": now, "exp": now + 3600, "jti": n.to_string(),
        });
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("bench".into());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_der(&self.pkcs8))
            .expect("sign")
    }
}

/// Serves the issuer's metadata and JWKS on loopback, on a thread of its own; its URL.
fn serve_issuer(key: &Key) -> String {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks"),
        "authorization_endpoint": format!("{url}/auth"), "token_endpoint": format!("{url}/token")});
    let jwks = json!({"keys": [key.jwk]});
    let router = axum::Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(move || async move { axum::Json(metadata) }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || async move { axum::Json(jwks) }),
        );
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("issuer port");
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            axum::serve(listener, router).await.expect("issuer");
        });
    });
    url
}

/// A bermd serving echo over HTTP on a fresh home: the process, the home, its `/mcp` URL.
fn bermd(
    extra: &[&str],
    port: u16,
    runtime: &tokio::runtime::Runtime,
) -> (Bermd, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["--http", addr.as_str()];
    args.extend_from_slice(extra);
    let bermd = Bermd::start(dir.path(), &args);
    runtime
        .block_on(berm_control::Client::from_home(dir.path()).deploy(
            "echo",
            &DeployRequest::new(
                &berm_fixtures::example("echo"),
                vec![],
                LimitsSpec::default(),
            ),
        ))
        .expect("deploy");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "bermd's HTTP listener did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (bermd, dir)
}

/// One stateless `tools/call` of echo's `echo` with `bearer`; checks the answer.
async fn echo(http: &reqwest::Client, url: &str, bearer: &str, id: u64) {
    let params = json!({"name": "echo_echo", "arguments": {"message": "hello"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let answer = http
        .post(url)
        .header("Authorization", bearer)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "echo_echo")
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("tools/call");
    let status = answer.status();
    let bytes = answer.text().await.expect("body");
    assert_eq!(status, 200, "{bytes}");
    let answer: Value = serde_json::from_str(common::http_message(&bytes)).expect("answer");
    assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
}

/// One line: where it calls, and the bearer of each call.
struct Line {
    label: &'static str,
    url: String,
    bearers: Box<dyn Fn(usize) -> String>,
    times: Vec<Duration>,
    /// Its p50 in each round, in µs.
    round_p50: Vec<f64>,
    calls: usize,
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let key = Key::new();
    let issuer = serve_issuer(&key);

    let static_port = free_port();
    let (static_bermd, static_home) = bermd(&[], static_port, &runtime);
    let token = std::fs::read_to_string(static_home.path().join("http-token")).expect("token");
    let static_bearer = format!("Bearer {}", token.trim());

    let control_port = free_port();
    let (control_bermd, control_home) = bermd(&[], control_port, &runtime);
    let token = std::fs::read_to_string(control_home.path().join("http-token")).expect("token");
    let control_bearer = format!("Bearer {}", token.trim());

    let oauth_port = free_port();
    let resource = format!("http://127.0.0.1:{oauth_port}/mcp");
    let (oauth_bermd, _oauth_home) = bermd(
        &["--oauth-issuer", &issuer, "--oauth-resource", &resource],
        oauth_port,
        &runtime,
    );

    let one_jwt = format!("Bearer {}", key.mint(&issuer, &resource, 0));
    let total = WARMUP + ROUNDS * SAMPLES;
    let fresh: Vec<String> = (1..=total)
        .map(|n| format!("Bearer {}", key.mint(&issuer, &resource, n)))
        .collect();
    println!(
        "machine: {} cores; {ROUNDS} rounds of {SAMPLES} sequential calls per line after {WARMUP} warm-up; \
         tool echo_echo over HTTP 2026-07-28; JWT ES256 ({} bytes)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        one_jwt.len() - "Bearer ".len(),
    );

    let mut lines = [
        Line {
            label: "static token          ",
            url: format!("http://127.0.0.1:{static_port}/mcp"),
            bearers: Box::new(move |_| static_bearer.clone()),
            times: Vec::new(),
            round_p50: Vec::new(),
            calls: 0,
        },
        Line {
            label: "static token (control)",
            url: format!("http://127.0.0.1:{control_port}/mcp"),
            bearers: Box::new(move |_| control_bearer.clone()),
            times: Vec::new(),
            round_p50: Vec::new(),
            calls: 0,
        },
        Line {
            label: "JWT, same token       ",
            url: resource.clone(),
            bearers: Box::new(move |_| one_jwt.clone()),
            times: Vec::new(),
            round_p50: Vec::new(),
            calls: 0,
        },
        Line {
            label: "JWT, fresh every call ",
            url: resource.clone(),
            bearers: Box::new(move |n| fresh[n].clone()),
            times: Vec::new(),
            round_p50: Vec::new(),
            calls: 0,
        },
    ];
    runtime.block_on(async {
        let clients: Vec<reqwest::Client> = lines.iter().map(|_| reqwest::Client::new()).collect();
        for (line, http) in lines.iter_mut().zip(&clients) {
            for _ in 0..WARMUP {
                echo(
                    http,
                    &line.url,
                    &(line.bearers)(line.calls),
                    line.calls as u64,
                )
                .await;
                line.calls += 1;
            }
        }
        for _ in 0..ROUNDS {
            for (line, http) in lines.iter_mut().zip(&clients) {
                let mut round = Vec::with_capacity(SAMPLES);
                for _ in 0..SAMPLES {
                    let bearer = (line.bearers)(line.calls);
                    let start = Instant::now();
                    echo(http, &line.url, &bearer, line.calls as u64).await;
                    round.push(start.elapsed());
                    line.calls += 1;
                }
                line.times.extend_from_slice(&round);
                line.round_p50.push(Stats::of(round).p50);
            }
        }
    });
    let stats: Vec<Stats> = lines
        .iter()
        .map(|line| Stats::of(line.times.clone()))
        .collect();
    let base = stats[0].p50;
    for (i, (line, line_stats)) in lines.iter().zip(&stats).enumerate() {
        let versus = if i == 0 {
            String::new()
        } else {
            let mut deltas: Vec<f64> = line
                .round_p50
                .iter()
                .zip(&lines[0].round_p50)
                .map(|(own, static_token)| own - static_token)
                .collect();
            deltas.sort_by(f64::total_cmp);
            format!(
                "  (p50 {:+.1} µs, {:.2}x of the static token; median of the rounds' differences {:+.1} µs)",
                line_stats.p50 - base,
                line_stats.p50 / base,
                deltas[deltas.len() / 2]
            )
        };
        println!(
            "{}  tools/call  p50 {:>8.1} µs  p99 {:>8.1} µs{versus}",
            line.label, line_stats.p50, line_stats.p99
        );
    }
    drop((static_bermd, control_bermd, oauth_bermd));
}
