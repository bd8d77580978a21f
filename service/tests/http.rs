//! MCP over Streamable HTTP against a real bermd: the bearer token (given,
//! or generated into `$BERM_HOME/http-token`, or off with `--no-auth`), the
//! `Host` and `Origin` checks, and the refusals at start.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Bermd;

const TOKEN: &str = "0123456789abcdef0123456789abcdef-right";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn token_file(dir: &Path, contents: &str) -> String {
    let path = dir.join("token");
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

/// What bermd answered: the status code and the whole response head, and
/// the body of a refusal (a 4xx or 5xx).
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// Sends an MCP `initialize` to `http://{connect}/mcp` with `Host: {host}`
/// and the extra `headers`, retrying the connection while bermd starts.
fn initialize(connect: &str, host: &str, headers: &[(&str, &str)]) -> Answer {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"http-test","version":"0"}}}"#;
    post(connect, host, headers, body)
}

/// POSTs `body` to `http://{connect}/mcp`, as [`initialize`] does.
fn post(connect: &str, host: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let addr = connect.to_socket_addrs().unwrap().next().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stream = loop {
        match TcpStream::connect(addr) {
            Ok(stream) => break stream,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{connect}: {e}"),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let mut body = String::new();
    if status >= 400 {
        // Refusals are short and end with the connection.
        stream.read_to_string(&mut body).unwrap();
    } else if head
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream")
    {
        // A stateless answer: the stream carries the one response and ends; read up to it.
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&bytes).contains("\"id\"") {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
        body = String::from_utf8_lossy(&bytes).into_owned();
    }
    Answer { status, head, body }
}

#[test]
fn the_bearer_token_host_and_origin_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let bermd = Bermd::start(&[
        "--http",
        &addr,
        "--http-token-file",
        &token_file(dir.path(), &format!("{TOKEN}\n")),
    ]);
    let bearer = format!("Bearer {TOKEN}");
    let host = format!("localhost:{port}");

    let right = initialize(&addr, &host, &[("Authorization", &bearer)]);
    assert_eq!(right.status, 200, "{}", right.head);

    let wrong_token = format!("Bearer {}", TOKEN.replace("right", "wrong"));
    let short_token = format!("Bearer {}", &TOKEN[..5]);
    for (case, headers) in [
        ("no header", vec![]),
        ("wrong token", vec![("Authorization", wrong_token.as_str())]),
        (
            "wrong-length token",
            vec![("Authorization", short_token.as_str())],
        ),
        ("not a bearer", vec![("Authorization", TOKEN)]),
    ] {
        let answer = initialize(&addr, &host, &headers);
        assert_eq!(answer.status, 401, "{case}: {}", answer.head);
        assert!(
            answer
                .head
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{case}: {}",
            answer.head
        );
    }

    let evil_host = initialize(&addr, "evil.example", &[("Authorization", &bearer)]);
    assert_eq!(evil_host.status, 403, "{}", evil_host.head);
    let evil_origin = initialize(
        &addr,
        &host,
        &[
            ("Authorization", &bearer),
            ("Origin", "https://evil.example"),
        ],
    );
    assert_eq!(evil_origin.status, 403, "{}", evil_origin.head);
    let own_origin = format!("http://localhost:{port}");
    let good_origin = initialize(
        &addr,
        &host,
        &[("Authorization", &bearer), ("Origin", &own_origin)],
    );
    assert_eq!(good_origin.status, 200, "{}", good_origin.head);
    drop(bermd);
}

#[test]
fn a_wildcard_bind_answers_to_the_machines_host_name() {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let bermd = Bermd::start(&[
        "--http",
        &format!("0.0.0.0:{port}"),
        "--http-allow-remote",
        "--http-token-file",
        &token_file(dir.path(), TOKEN),
        "--allowed-host",
        &hostname,
    ]);
    let bearer = format!("Bearer {TOKEN}");
    let reached = format!("{hostname}:{port}");
    let answer = initialize(&reached, &reached, &[("Authorization", &bearer)]);
    assert_eq!(answer.status, 200, "{}", answer.head);
    let evil = initialize(&reached, "evil.example", &[("Authorization", &bearer)]);
    assert_eq!(evil.status, 403, "{}", evil.head);
    drop(bermd);
}

fn refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_bermd"))
        .args(args)
        .env("BERM_HOME", dir.path().join("home"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn weak_tokens_and_unnamed_remote_hosts_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    for contents in ["", "  \n", "too-short-by-one-0123456789abcd"] {
        let file = token_file(dir.path(), contents);
        let stderr = refused(&["--http", &addr, "--http-token-file", &file]);
        assert!(
            stderr.contains("at least 32 are required"),
            "{contents:?}: {stderr}"
        );
    }
    let file = token_file(dir.path(), TOKEN);
    let stderr = refused(&[
        "--http",
        &format!("0.0.0.0:{port}"),
        "--http-allow-remote",
        "--http-token-file",
        &file,
    ]);
    assert!(
        stderr.contains("name the host clients reach it by with --allowed-host NAME"),
        "{stderr}"
    );
}

/// `Authorization: Bearer …` with the token bermd generated into its home.
fn home_bearer(bermd: &Bermd) -> String {
    let token = std::fs::read_to_string(bermd.home.join("http-token")).unwrap();
    format!("Bearer {}", token.trim())
}

/// Stops bermd with SIGTERM, as a supervisor does, and waits for it.
fn stop(mut bermd: Bermd) {
    berm_fixtures::terminate(&bermd.child);
    assert!(
        bermd.child.wait().unwrap().success(),
        "{}",
        bermd.log_text()
    );
}

#[test]
fn without_a_token_file_bermd_makes_one_mode_0600_and_reuses_it_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = Bermd::start_in(&home, &["--http", &addr]);
    let token_file = home.join("http-token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let bearer = home_bearer(&bermd);
    // 32 random bytes, hex.
    assert_eq!(bearer.len(), "Bearer ".len() + 64, "{bearer}");
    let url = format!("http://{addr}/mcp");
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join("http.json")).unwrap()).unwrap();
    assert_eq!(
        info,
        serde_json::json!({"url": url, "token_file": token_file.display().to_string()})
    );
    let log = bermd.log_text();
    assert!(
        log.contains(&format!("url={url} token_file={}", token_file.display())),
        "{log}"
    );

    for (case, headers) in [
        ("no token", vec![]),
        (
            "wrong token",
            vec![("Authorization", "Bearer not-the-token")],
        ),
    ] {
        let answer = initialize(&addr, &addr, &headers);
        assert_eq!(answer.status, 401, "{case}: {}", answer.head);
        assert_eq!(answer.body, "missing or wrong bearer token", "{case}");
    }
    let right = initialize(&addr, &addr, &[("Authorization", &bearer)]);
    assert_eq!(right.status, 200, "{}", right.head);

    // A clean stop removes http.json; the token stays for the next start.
    stop(bermd);
    assert!(!home.join("http.json").exists());
    let bermd = Bermd::start_in(&home, &["--http", &addr]);
    assert_eq!(home_bearer(&bermd), bearer);
    let again = initialize(&addr, &addr, &[("Authorization", &bearer)]);
    assert_eq!(again.status, 200, "{}", again.head);
    drop(bermd);
}

#[test]
fn a_token_file_open_to_others_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let file = home.join("http-token");
    std::fs::write(&file, "k".repeat(64)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_bermd"))
        .args(["--http", &format!("127.0.0.1:{}", free_port())])
        .env("BERM_HOME", &home)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let path = file.display();
    assert_eq!(
        String::from_utf8_lossy(&run.stderr).lines().last().unwrap(),
        format!(
            "bermd: refusing the token file {path}: its mode is 0644, open to group or others; \
             fix it with `chmod 600 {path}`, or remove it (`rm {path}`) and bermd makes a new one"
        )
    );
}

#[test]
fn no_auth_warns_and_serves_without_a_token() {
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = Bermd::start(&["--http", &addr, "--no-auth"]);
    let log = bermd.log_text();
    assert!(
        log.starts_with(
            "bermd: WARNING: --no-auth: MCP over HTTP takes requests with no token; any process \
             on this machine, of any user, can call every tool"
        ),
        "{log}"
    );
    let answer = initialize(&addr, &addr, &[]);
    assert_eq!(answer.status, 200, "{}", answer.head);
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bermd.home.join("http.json")).unwrap()).unwrap();
    assert_eq!(info["token_file"], serde_json::Value::Null);
    assert!(!bermd.home.join("http-token").exists());
    drop(bermd);
}

#[test]
fn no_auth_is_refused_with_a_token_file_or_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let file = token_file(dir.path(), TOKEN);
    let stderr = refused(&[
        "--http",
        &format!("127.0.0.1:{port}"),
        "--no-auth",
        "--http-token-file",
        &file,
    ]);
    assert!(
        stderr.starts_with(
            "error: the argument '--no-auth' cannot be used with '--http-token-file <FILE>'"
        ),
        "{stderr}"
    );
    let stderr = refused(&["--no-auth"]);
    assert!(
        stderr.contains("the following required arguments were not provided:\n  --http <ADDR>"),
        "{stderr}"
    );
    let stderr = refused(&[
        "--http",
        &format!("0.0.0.0:{port}"),
        "--http-allow-remote",
        "--allowed-host",
        "example.org",
        "--no-auth",
    ]);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "bermd: refusing --no-auth on 0.0.0.0:{port}: it is not a loopback address; a \
             listener other machines reach needs a bearer token (--http-token-file)"
        )
    );
}

/// bermd on HTTP with `cap_flag` set to 1, and two sessions initialized one after the other:
/// the first is served, the second refused with `refused_status`. Returns bermd, its
/// address (also the Host it is reached by), its bearer and both answers.
fn second_session_refused(
    cap_flag: &str,
    refused_status: u16,
) -> (Bermd, String, String, Answer, Answer) {
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = Bermd::start(&["--http", &addr, cap_flag, "1"]);
    let bearer = home_bearer(&bermd);
    let auth = [("Authorization", bearer.as_str())];
    let first = initialize(&addr, &addr, &auth);
    assert_eq!(first.status, 200, "{}", first.head);
    let second = initialize(&addr, &addr, &auth);
    assert_eq!(second.status, refused_status, "{}", second.head);
    (bermd, addr, bearer, first, second)
}

#[test]
fn past_the_session_cap_an_http_client_gets_503() {
    let (bermd, ..) = second_session_refused("--max-connections", 503);
    drop(bermd);
}

#[test]
fn past_the_session_rate_an_http_client_gets_429_and_sessions_go_on() {
    let (bermd, addr, bearer, first, second) = second_session_refused("--max-session-rate", 429);
    let host = addr.clone();
    assert!(
        second.head.to_lowercase().contains("retry-after: 1"),
        "{}",
        second.head
    );
    assert_eq!(
        second.body,
        "bermd starts at most 1 new HTTP sessions a second, its cap (bermd --max-session-rate); \
         try again in a second"
    );
    // The session already open is served as before.
    let session = first
        .head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id: {}", first.head));
    let headers = [
        ("Mcp-Session-Id", session.as_str()),
        ("Authorization", bearer.as_str()),
    ];
    let initialized = post(
        &addr,
        &host,
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(initialized.status, 202, "{}", initialized.head);
    let list = post(
        &addr,
        &host,
        &headers,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
    );
    assert_eq!(list.status, 200, "{}", list.head);
    // A second later the rate lets a new session in.
    std::thread::sleep(Duration::from_millis(1100));
    let later = initialize(&addr, &host, &[("Authorization", &bearer)]);
    assert_eq!(later.status, 200, "{}", later.head);
    drop(bermd);
}

/// A 2026-07-28 client opens no session: each call is a POST without a session id, and none
/// of them counts against the session rate or cap, which bound `initialize` alone.
#[test]
fn stateless_calls_do_not_count_as_new_sessions() {
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = Bermd::start(&[
        "--http",
        &addr,
        "--max-session-rate",
        "1",
        "--max-connections",
        "1",
    ]);
    let bearer = home_bearer(&bermd);
    let headers = [
        ("Authorization", bearer.as_str()),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    for id in 1..=10 {
        let list = post(
            &addr,
            &addr,
            &headers,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
            ),
        );
        assert_eq!(
            list.status, 200,
            "stateless call {id}: {}{}",
            list.head, list.body
        );
        assert!(
            !list.head.to_lowercase().contains("mcp-session-id"),
            "{}",
            list.head
        );
    }
    // An initialize still opens a session, and the next one within the second is refused.
    let auth = [("Authorization", bearer.as_str())];
    let first = initialize(&addr, &addr, &auth);
    assert_eq!(first.status, 200, "{}", first.head);
    let second = initialize(&addr, &addr, &auth);
    assert!(
        [429, 503].contains(&second.status),
        "{}{}",
        second.head,
        second.body
    );
    drop(bermd);
}

/// GETs `path` from `http://{connect}` with `Host: {host}` and no token: the status and body.
fn get(connect: &str, host: &str, path: &str) -> (u16, String) {
    get_with(connect, host, path, &[])
}

/// [`get`] with the extra `headers`.
fn get_with(connect: &str, host: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = TcpStream::connect(connect).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

/// bermd serving the ready-made app folder `app` (scripts/build-apps.sh) over HTTP on `addr`,
/// with the test's token (its file in `dir`), once it listens: it serves HTTP only after the
/// folder's programs are deployed.
fn bermd_with_app(dir: &Path, addr: &str, app: &str) -> Bermd {
    bermd_with_app_env(dir, addr, app, &[])
}

/// [`bermd_with_app`] with `env` set.
fn bermd_with_app_env(dir: &Path, addr: &str, app: &str, env: &[(&str, &str)]) -> Bermd {
    bermd_with_app_args(dir, addr, app, &[], env)
}

/// [`bermd_with_app`] with more arguments and `env` set.
fn bermd_with_app_args(
    dir: &Path,
    addr: &str,
    app: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Bermd {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/apps")
        .join(app);
    assert!(
        folder.join("berm.toml").exists(),
        "{} is missing — run scripts/build-apps.sh first",
        folder.display()
    );
    let token = token_file(dir, &format!("{TOKEN}\n"));
    let mut all = vec![
        "--http",
        addr,
        "--http-token-file",
        &token,
        "--app",
        folder.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let bermd = Bermd::start_with_env(&all, env);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "bermd never listened on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    bermd
}

#[test]
fn health_and_readiness_answer_probes_without_a_token_and_say_only_a_status() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let bermd = bermd_with_app(dir.path(), &addr, "notes");
    // A kubelet names the pod by its IP, not a host bermd allows, and has no token.
    for host in [format!("localhost:{port}"), format!("10.1.2.3:{port}")] {
        assert_eq!(
            get(&addr, &host, "/healthz"),
            (200, "ok\n".into()),
            "{host}"
        );
        assert_eq!(
            get(&addr, &host, "/readyz"),
            (200, "ready\n".into()),
            "{host}"
        );
    }
    // /mcp itself still needs the token.
    let host = format!("localhost:{port}");
    assert_eq!(initialize(&addr, &host, &[]).status, 401);

    // The folder's program replaced by other bytes: not ready, and nothing says which.
    bermd.deploy("notes", "echo", &[], Default::default());
    assert_eq!(get(&addr, &host, "/readyz"), (503, "not ready\n".into()));
    assert_eq!(get(&addr, &host, "/healthz"), (200, "ok\n".into()));
    drop(bermd);
}

/// The MCP server card (SEP-2127) is discovery: served without a token, naming the
/// Streamable HTTP URL and the static token as the way in; the catalog's tools only with
/// `--server-card-tools`, and then without their `_meta`; nothing of a program's digest.
#[test]
fn the_server_card_is_public_and_lists_tools_only_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let host = format!("localhost:{port}");
    let bermd = bermd_with_app(dir.path(), &addr, "notes");
    for path in [
        "/.well-known/mcp/server-card.json",
        "/.well-known/mcp/server-card",
    ] {
        let (status, body) = get(&addr, &host, path);
        assert_eq!(status, 200, "{path}: {body}");
        let card: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(card["name"], "io.github.berm-os/bermd", "{card}");
        assert_eq!(card["remotes"][0]["type"], "streamable-http");
        assert_eq!(card["remotes"][0]["url"], format!("http://{addr}/mcp"));
        assert_eq!(
            card["remotes"][0]["authentication"],
            serde_json::json!({"required": true, "schemes": ["bearer"]})
        );
        assert!(
            card["remotes"][0]["supportedProtocolVersions"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!("2025-11-25")),
            "{card}"
        );
        assert_eq!(card["capabilities"]["tools"]["listChanged"], true);
        assert!(card.get("tools").is_none(), "{card}");
        assert!(!body.contains(TOKEN));
    }
    // A foreign Host is refused here as on /mcp (DNS rebinding).
    assert_eq!(
        get(&addr, "evil.example", "/.well-known/mcp/server-card.json").0,
        403
    );
    drop(bermd);

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let bermd = bermd_with_app_args(dir.path(), &addr, "notes", &["--server-card-tools"], &[]);
    let (status, body) = get(
        &addr,
        &format!("localhost:{port}"),
        "/.well-known/mcp/server-card.json",
    );
    assert_eq!(status, 200, "{body}");
    let card: serde_json::Value = serde_json::from_str(&body).unwrap();
    let tools = card["tools"].as_array().unwrap();
    assert!(
        !tools.is_empty()
            && tools
                .iter()
                .all(|t| t["name"].as_str().unwrap().starts_with("notes_")
                    && t["inputSchema"].is_object()
                    && t.get("_meta").is_none()),
        "{card}"
    );
    let digest = common::block_on(bermd.control().get("notes"))
        .unwrap()
        .digest;
    let hex = digest.trim_start_matches("sha256:");
    assert!(!hex.is_empty() && !body.contains(hex), "{body}");
    drop(bermd);
}

/// `bermd --metrics ADDR` answers only to the hosts the MCP listener would (DNS rebinding: a
/// page whose name the attacker points at 127.0.0.1 must not read program and tool names),
/// and the MCP listener's own `/metrics` checks the Host too, token or not.
#[test]
fn metrics_refuses_a_foreign_host() {
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let addr = format!("127.0.0.1:{port}");
    let metrics = format!("127.0.0.1:{metrics_port}");
    let bermd = Bermd::start(&[
        "--http",
        &addr,
        "--http-token-file",
        &token_file(dir.path(), TOKEN),
        "--metrics",
        &metrics,
    ]);
    let scraped = |host: &str, headers: &[(&str, &str)]| {
        let (status, body) = get_with(&metrics, host, "/metrics", headers);
        (status, body.contains("berm_calls_in_flight"))
    };
    for host in [
        format!("localhost:{metrics_port}"),
        format!("127.0.0.1:{metrics_port}"),
        format!("[::1]:{metrics_port}"),
        "LOCALHOST".to_string(),
    ] {
        assert_eq!(scraped(&host, &[]), (200, true), "{host}");
    }
    let own = format!("localhost:{metrics_port}");
    for (host, origin) in [
        (format!("evil.example:{metrics_port}"), None),
        ("evil.example".to_string(), None),
        ("10.1.2.3".to_string(), None),
        (own.clone(), Some("http://evil.example")),
        (own.clone(), Some("null")),
    ] {
        let headers: Vec<_> = origin.iter().map(|o| ("Origin", *o)).collect();
        assert_eq!(scraped(&host, &headers), (403, false), "{host} {origin:?}");
    }
    let own_origin = format!("http://localhost:{metrics_port}");
    assert_eq!(scraped(&own, &[("Origin", &own_origin)]), (200, true));
    // The MCP listener's /metrics: the token and the Host.
    let bearer = format!("Bearer {TOKEN}");
    let on_mcp = |host: &str| get_with(&addr, host, "/metrics", &[("Authorization", &bearer)]).0;
    assert_eq!(on_mcp(&format!("localhost:{port}")), 200);
    assert_eq!(on_mcp("evil.example"), 403);
    drop(bermd);

    // Off loopback (--metrics-allow-remote): a scraper names the pod by its address, or by a
    // name given with --allowed-host; a name of anyone else's is refused.
    let metrics = format!("0.0.0.0:{metrics_port}");
    let bermd = Bermd::start(&[
        "--metrics",
        &metrics,
        "--metrics-allow-remote",
        "--allowed-host",
        "bermd.cluster.local",
    ]);
    let reach = format!("127.0.0.1:{metrics_port}");
    let scraped = |host: &str| get(&reach, host, "/metrics").0;
    assert_eq!(scraped(&format!("10.1.2.3:{metrics_port}")), 200);
    assert_eq!(scraped(&format!("[fd00::1]:{metrics_port}")), 200);
    assert_eq!(scraped(&format!("bermd.cluster.local:{metrics_port}")), 200);
    assert_eq!(scraped(&format!("evil.example:{metrics_port}")), 403);
    assert_eq!(scraped("localhost"), 403);
    drop(bermd);
}

/// SEP-2243 on the server side: a 2026-07-28 `tools/call` of a tool whose argument is
/// mirrored into a header (`x-mcp-header`) runs only when the header says what the body says;
/// otherwise HTTP 400 with JSON-RPC error -32020, and the program never runs.
#[test]
fn mirrored_argument_headers_must_match_the_body() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app(dir.path(), &addr, "conformance");
    let bearer = format!("Bearer {TOKEN}");
    let call = |region: &str, header: Option<&str>| {
        let mut headers = vec![
            ("Authorization", bearer.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "test_routed"),
        ];
        if let Some(value) = header {
            headers.push(("Mcp-Param-Region", value));
        }
        post(
            &addr,
            &addr,
            &headers,
            &format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"test_routed","arguments":{{"region":"{region}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
            ),
        )
    };
    // The tool lists its header, as the manifest declares it.
    let ok = call("Hello", Some("Hello"));
    assert_eq!(ok.status, 200, "{}{}", ok.head, ok.body);
    assert!(ok.body.contains("routed to Hello"), "{}", ok.body);
    // Base64 of the same text, with whitespace around it.
    let ok = call("Hello", Some(" =?base64?SGVsbG8=?= "));
    assert_eq!(ok.status, 200, "{}{}", ok.head, ok.body);
    assert!(ok.body.contains("routed to Hello"), "{}", ok.body);
    for (header, why) in [
        (None, "header Mcp-Param-Region is missing"),
        (Some("Elsewhere"), "does not match argument `region`"),
        (Some("=?base64?SGVsbG8?="), " is not valid Base64"),
        (Some("=?base64?SGVs!!!bG8=?="), " is not valid Base64"),
    ] {
        let refused = call("Hello", header);
        assert_eq!(
            refused.status, 400,
            "{header:?}: {}{}",
            refused.head, refused.body
        );
        let body: serde_json::Value = serde_json::from_str(refused.body.trim()).unwrap();
        assert_eq!(body["error"]["code"], -32020, "{body}");
        assert_eq!(body["id"], 7, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{header:?}: {message}");
    }
    drop(bermd);
}

/// A 2026-07-28 request over HTTP with the routing headers it needs: its JSON-RPC answer.
fn modern(
    addr: &str,
    id: u64,
    method: &str,
    name: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
        ("Mcp-Name", name),
    ];
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answer = post(addr, addr, &headers, &body.to_string());
    serde_json::from_str(common::http_message(&answer.body))
        .unwrap_or_else(|e| panic!("{e}: {}{}", answer.head, answer.body))
}

/// The first key of a result's `inputRequests`.
fn first_key(requests: &serde_json::Value) -> String {
    requests.as_object().unwrap().keys().next().unwrap().clone()
}

/// Polls `get` (a task as `tasks/get` shows it) until its status is `status`, for up to 40 s;
/// `what` names the task in the failure.
fn until_status(
    status: &str,
    what: &str,
    get: impl Fn() -> serde_json::Value,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let now = get();
        if now["status"] == status {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what} never became {status}: {now}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `_meta` of a 2026-07-28 request from a client with `capabilities`.
fn meta(capabilities: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "http-test", "version": "0"},
    })
}

#[test]
fn tasks_outlive_their_request_ask_through_the_task_and_end_as_told() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app(dir.path(), &addr, "conformance");
    let tasks =
        meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}));
    let call = |id, tool: &str, args: serde_json::Value, meta: &serde_json::Value| {
        modern(
            &addr,
            id,
            "tools/call",
            tool,
            json!({"name": tool, "arguments": args, "_meta": meta}),
        )
    };
    let get = |task: &str| {
        modern(
            &addr,
            90,
            "tasks/get",
            task,
            json!({"taskId": task, "_meta": tasks}),
        )["result"]
            .clone()
    };
    let until = |task: &str, status: &str| until_status(status, task, || get(task));

    // A task handle at once, the result later.
    let started = call(
        1,
        "slow_compute",
        json!({"seconds": 1, "label": "t"}),
        &tasks,
    );
    assert_eq!(started["result"]["resultType"], "task", "{started}");
    let id = started["result"]["taskId"].as_str().unwrap().to_string();
    let done = until(&id, "completed");
    assert_eq!(
        done["result"]["content"][0]["text"], "Computed for 1 s (t)",
        "{done}"
    );

    // A client that does not speak tasks: an optional task tool runs as a plain call, a
    // required one is refused with the extension's code.
    let plain = meta(json!({}));
    let sync = call(2, "slow_compute", json!({"seconds": 0}), &plain);
    assert_eq!(
        sync["result"]["content"][0]["text"], "Computed for 0 s (unlabelled)",
        "{sync}"
    );
    let refused = call(3, "failing_job", json!({}), &plain);
    assert_eq!(refused["error"]["code"], -32021, "{refused}");

    // A program's failure completes its task with isError; a trap fails it.
    let failing = call(4, "failing_job", json!({}), &tasks)["result"]["taskId"].clone();
    let failed = until(failing.as_str().unwrap(), "completed");
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let trap = call(5, "protocol_error_job", json!({}), &tasks)["result"]["taskId"].clone();
    let trapped = until(trap.as_str().unwrap(), "failed");
    assert!(
        trapped["error"]["message"]
            .as_str()
            .unwrap()
            .contains("panicked"),
        "{trapped}"
    );

    // A question from inside a task: the task waits for tasks/update, then runs on.
    let asking =
        call(6, "confirm_delete", json!({"filename": "a.txt"}), &tasks)["result"]["taskId"]
            .as_str()
            .unwrap()
            .to_string();
    let waiting = until(&asking, "input_required");
    let keys: Vec<&String> = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys.len(), 1, "{waiting}");
    assert_eq!(
        waiting["inputRequests"][keys[0]]["params"]["message"],
        "Delete a.txt?"
    );
    let answer = json!({keys[0].as_str(): {"action": "accept", "content": {"ok": true}}});
    let ack = modern(
        &addr,
        7,
        "tasks/update",
        &asking,
        json!({"taskId": asking, "inputResponses": answer, "_meta": tasks}),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let deleted = until(&asking, "completed");
    assert_eq!(
        deleted["result"]["content"][0]["text"], "Deleted a.txt.",
        "{deleted}"
    );

    // Cancelling stops the program; an unknown task is -32602.
    let long = call(8, "slow_compute", json!({"seconds": 60}), &tasks)["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let ack = modern(
        &addr,
        9,
        "tasks/cancel",
        &long,
        json!({"taskId": long, "_meta": tasks}),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    until(&long, "cancelled");
    let unknown = modern(
        &addr,
        10,
        "tasks/get",
        "nope",
        json!({"taskId": "nope", "_meta": tasks}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // `ask_first`: the question is an input-required result, and the call that brings the
    // answer (with the sealed state, checked) becomes the task.
    let asked = call(11, "test_tool_with_task", json!({}), &tasks);
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert!(asked["result"].get("taskId").is_none(), "{asked}");
    let key = first_key(&asked["result"]["inputRequests"]);
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let answered = |id, state: &str| {
        modern(
            &addr,
            id,
            "tools/call",
            "test_tool_with_task",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "inputResponses": {key.as_str(): {"action": "accept", "content": {"name": "Alice"}}},
                "requestState": state,
                "_meta": tasks,
            }),
        )
    };
    let mut tampered = state.clone().into_bytes();
    tampered[10] ^= 1;
    let refused = answered(12, std::str::from_utf8(&tampered).unwrap());
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let started = answered(13, &state);
    assert_eq!(started["result"]["resultType"], "task", "{started}");
    assert!(started["result"].get("requestState").is_none(), "{started}");
    let greeted = until(started["result"]["taskId"].as_str().unwrap(), "completed");
    assert_eq!(
        greeted["result"]["content"][0]["text"], "Hello, Alice!",
        "{greeted}"
    );
    drop(bermd);
}

/// With the kv in PostgreSQL, replicas share their tasks: a task one replica runs, another
/// answers `tasks/get` for at once, and passes on its `tasks/update` and `tasks/cancel`; a
/// task whose replica was killed is reported failed.
#[test]
fn any_replica_answers_for_a_task_another_runs() {
    use serde_json::json;
    let Ok(pg) = berm_fixtures::postgres::Postgres::start().map_err(|why| {
        println!("SKIPPED: {why}");
    }) else {
        return;
    };
    let url = pg.url();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    // Replicas that share tasks share the key that seals them.
    let key = ask_key_file(dir.path(), "shared.key");
    let shared = ["--ask-key", key.as_str()];
    let env = [("BERM_KV_URL", url.as_str())];
    let replica_a = bermd_with_app_args(dir.path(), &a, "conformance", &shared, &env);
    let _replica_b = bermd_with_app_args(dir.path(), &b, "conformance", &shared, &env);
    let tasks =
        meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}));
    let start = |tool: &str, args: serde_json::Value| {
        let started = modern(
            &a,
            1,
            "tools/call",
            tool,
            json!({"name": tool, "arguments": args, "_meta": tasks}),
        );
        started["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{started}"))
            .to_string()
    };
    let on = |addr: &str, method: &str, task: &str, extra: serde_json::Value| {
        let mut params = json!({"taskId": task, "_meta": tasks});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        modern(addr, 2, method, task, params)
    };
    let until = |addr: &str, task: &str, status: &str| {
        until_status(status, &format!("{task} on {addr}"), || {
            on(addr, "tasks/get", task, json!({}))["result"].clone()
        })
    };

    // Created durably: the other replica knows it as soon as the handle is out.
    let id = start("slow_compute", json!({"seconds": 1, "label": "shared"}));
    let first = on(&b, "tasks/get", &id, json!({}));
    assert_eq!(first["result"]["taskId"], id.as_str(), "{first}");
    let done = until(&b, &id, "completed");
    assert_eq!(
        done["result"]["content"][0]["text"], "Computed for 1 s (shared)",
        "{done}"
    );

    // A question asked on one replica, answered through the other.
    let asking = start("confirm_delete", json!({"filename": "b.txt"}));
    let waiting = until(&b, &asking, "input_required");
    let key = first_key(&waiting["inputRequests"]);
    let answer = json!({key: {"action": "accept", "content": {"ok": true}}});
    let ack = on(
        &b,
        "tasks/update",
        &asking,
        json!({"inputResponses": answer}),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let deleted = until(&b, &asking, "completed");
    assert_eq!(deleted["result"]["content"][0]["text"], "Deleted b.txt.");

    // Cancelled through the other replica: the program is stopped where it runs.
    let long = start("slow_compute", json!({"seconds": 60}));
    let ack = on(&b, "tasks/cancel", &long, json!({}));
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    until(&a, &long, "cancelled");
    until(&b, &long, "cancelled");
    let unknown = on(&b, "tasks/get", "nope", json!({}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let unknown = on(&b, "tasks/cancel", "nope", json!({}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // A task does not survive its replica: the other one says so.
    let orphan = start("slow_compute", json!({"seconds": 60}));
    until(&b, &orphan, "working");
    replica_a.kill9();
    let failed = until(&b, &orphan, "failed");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("has not been heard from"), "{failed}");
}

/// A key file for `bermd --ask-key` in `dir`: 64 random hex digits, mode 0600.
fn ask_key_file(dir: &Path, name: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{}\n", hex::encode(key))).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// The text of an error result, or a panic naming what came instead.
fn error_text(answer: &serde_json::Value) -> String {
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Item 10, the per-session cap: one session (a connection, or an HTTP client that
/// initialized) holds at most `--max-tasks-per-session` tasks open, requests outside a session
/// share one such cap, and past it a call gets an error result naming the cap while other
/// sessions still start theirs; a task that ends gives its place back.
#[test]
fn tasks_are_capped_per_session_beside_bermds_cap() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app_args(
        dir.path(),
        &addr,
        "conformance",
        &["--max-tasks-per-session", "2"],
        &[],
    );
    let tasks_meta = json!({
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let start = |session: &mut common::Session| {
        session.request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 600}, "_meta": tasks_meta}),
        )
    };
    let task_id = |answer: &serde_json::Value| {
        answer["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("not a task: {answer}"))
            .to_string()
    };
    let (mut one, mut two) = (bermd.session(), bermd.session());
    let first = task_id(&start(&mut one));
    task_id(&start(&mut one));
    let refused = error_text(&start(&mut one));
    assert_eq!(
        refused,
        "this session has 2 tasks open, its cap (bermd --max-tasks-per-session): wait for one \
         to finish, or cancel one"
    );
    // Another session is not held up by the first.
    task_id(&start(&mut two));

    // Requests outside a session (2026-07-28 over HTTP) share one cap.
    let modern_meta =
        meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}));
    let call = |id| {
        modern(
            &addr,
            id,
            "tools/call",
            "slow_compute",
            json!({"name": "slow_compute", "arguments": {"seconds": 600}, "_meta": modern_meta}),
        )
    };
    task_id(&call(1));
    task_id(&call(2));
    let refused = error_text(&call(3));
    assert!(
        refused.starts_with(
            "requests outside a session have 2 tasks open together, their cap (bermd \
             --max-tasks-per-session)"
        ),
        "{refused}"
    );

    // A task that ends (here, cancelled) gives its place back to its session: once it reads
    // `cancelled`, the session starts another (its work winds down just after).
    let ack = one.request(
        "tasks/cancel",
        json!({"taskId": first, "_meta": tasks_meta}),
    );
    assert!(ack.get("error").is_none(), "{ack}");
    let deadline = Instant::now() + Duration::from_secs(40);
    let again = loop {
        let status = one.request("tasks/get", json!({"taskId": first, "_meta": tasks_meta}));
        if status["result"]["status"] == "cancelled" {
            let again = start(&mut one);
            if again["result"].get("taskId").is_some() {
                break again;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the cancelled task's place never came back: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    task_id(&again);
    drop(bermd);
}

/// Item 10, ended tasks: a task that has completed (or failed, or been cancelled) takes no
/// more answers (`tasks/update` is `-32602` saying it has ended, and how), and a cancel
/// changes nothing: it is acknowledged as on an active task, as SEP-2663 makes a cancel
/// idempotent, and the task stays as it ended.
#[test]
fn a_finished_task_refuses_answers_and_a_cancel_changes_nothing() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app(dir.path(), &addr, "conformance");
    let tasks =
        meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}));
    let on = |method: &str, task: &str, extra: serde_json::Value| {
        let mut params = json!({"taskId": task, "_meta": tasks});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        modern(&addr, 2, method, task, params)
    };
    let started = modern(
        &addr,
        1,
        "tools/call",
        "slow_compute",
        json!({"name": "slow_compute", "arguments": {"seconds": 0}, "_meta": tasks}),
    );
    let id = started["result"]["taskId"].as_str().unwrap().to_string();
    until_status("completed", &id, || {
        on("tasks/get", &id, json!({}))["result"].clone()
    });
    let answers = json!({"inputResponses": {"r0.confirm": {"action": "accept"}}});
    let answer = on("tasks/update", &id, answers);
    assert_eq!(answer["error"]["code"], -32602, "tasks/update: {answer}");
    assert_eq!(
        answer["error"]["message"],
        format!("task {id} has already ended (completed): it takes no more answers"),
    );
    // A cancel is acknowledged as on an active task (SEP-2663: idempotent) and changes
    // nothing.
    let cancel = on("tasks/cancel", &id, json!({}));
    assert!(cancel.get("error").is_none(), "tasks/cancel: {cancel}");
    // The task is as it was.
    let done = on("tasks/get", &id, json!({}));
    assert_eq!(done["result"]["status"], "completed", "{done}");
    drop(bermd);
}

/// Item 10, tasks at rest: with replicas sharing tasks in PostgreSQL, the database holds a
/// task's result only sealed (a replica with the same `--ask-key` reads it; one with another
/// key says so, naming the flag), and a task that has ended refuses answers on any
/// replica (a cancel of it is acknowledged and changes nothing, as SEP-2663 asks).
#[test]
fn shared_tasks_are_sealed_at_rest_and_refuse_answers_once_ended_on_any_replica() {
    use serde_json::json;
    let Ok(pg) = berm_fixtures::postgres::Postgres::start().map_err(|why| {
        println!("SKIPPED: {why}");
    }) else {
        return;
    };
    let url = pg.url();
    let dir = tempfile::tempdir().unwrap();
    let key = ask_key_file(dir.path(), "shared.key");
    let other_key = ask_key_file(dir.path(), "other.key");
    let env = [("BERM_KV_URL", url.as_str())];
    let (a, b, c) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let _replica_a = bermd_with_app_args(dir.path(), &a, "conformance", &["--ask-key", &key], &env);
    let _replica_b = bermd_with_app_args(dir.path(), &b, "conformance", &["--ask-key", &key], &env);
    let _stranger = bermd_with_app_args(
        dir.path(),
        &c,
        "conformance",
        &["--ask-key", &other_key],
        &env,
    );
    let tasks =
        meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}));
    let on = |addr: &str, method: &str, task: &str, extra: serde_json::Value| {
        let mut params = json!({"taskId": task, "_meta": tasks});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        modern(addr, 2, method, task, params)
    };
    const MARK: &str = "a-result-only-its-client-may-read";
    let started = modern(
        &a,
        1,
        "tools/call",
        "slow_compute",
        json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": MARK}, "_meta": tasks}),
    );
    let id = started["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    let done = until_status("completed", &format!("{id} on {b}"), || {
        on(&b, "tasks/get", &id, json!({}))["result"].clone()
    });
    assert_eq!(
        done["result"]["content"][0]["text"],
        format!("Computed for 0 s ({MARK})"),
        "{done}"
    );

    // What the database holds: the task's row, its result nowhere in the clear.
    let rows = pg
        .psql(
            "berm",
            &format!("SELECT count(*) FROM berm_tasks WHERE id = '{id}' AND terminal"),
        )
        .unwrap();
    assert_eq!(rows, "1");
    let clear = pg
        .psql(
            "berm",
            &format!(
                "SELECT count(*) FROM berm_tasks WHERE position('{MARK}' IN detail::text) > 0 \
                 OR position('{}' IN detail::text) > 0",
                hex::encode(MARK)
            ),
        )
        .unwrap();
    assert_eq!(clear, "0", "the result is in the database in the clear");

    // A replica with another key cannot read it, and says why.
    let refused = on(&c, "tasks/get", &id, json!({}));
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("sealed by a replica with another key")
            && message.contains("bermd --ask-key FILE"),
        "{refused}"
    );

    // Ended: no answers, and a cancel that changes nothing, through the other replica.
    let answers = json!({"inputResponses": {"r0.confirm": {"action": "accept"}}});
    let answer = on(&b, "tasks/update", &id, answers);
    assert_eq!(answer["error"]["code"], -32602, "tasks/update: {answer}");
    assert_eq!(
        answer["error"]["message"],
        format!("task {id} has already ended (completed): it takes no more answers"),
    );
    let cancel = on(&b, "tasks/cancel", &id, json!({}));
    assert!(cancel.get("error").is_none(), "tasks/cancel: {cancel}");
    let done = on(&b, "tasks/get", &id, json!({}));
    assert_eq!(done["result"]["status"], "completed", "{done}");
}

#[test]
fn a_sealed_state_opens_unchanged_across_a_restart_and_a_changed_one_is_refused() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let home = dir.path().join("home");
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/apps/conformance");
    let token = token_file(dir.path(), &format!("{TOKEN}\n"));
    let start = || {
        let bermd = Bermd::start_in(
            &home,
            &[
                "--http",
                &addr,
                "--http-token-file",
                &token,
                "--app",
                folder.to_str().unwrap(),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "bermd never listened on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        bermd
    };
    let tool = "test_input_required_result_request_state";
    let client = meta(json!({"elicitation": {}}));
    let call = |id, extra: serde_json::Value| {
        let mut params = json!({"name": tool, "arguments": {}, "_meta": client});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        modern(&addr, id, "tools/call", tool, params)
    };
    let bermd = start();
    let asked = call(1, json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    // The state is sealed: the program's bytes do not show.
    assert!(
        !state.contains("confirm") && !state.contains("round"),
        "{state}"
    );
    let key = std::fs::read_to_string(home.join("ask.key")).unwrap();
    assert_eq!(key.trim().len(), 64);
    stop(bermd);

    let bermd = start();
    let answers = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    let tampered = call(
        2,
        json!({"inputResponses": answers, "requestState": format!("{state}x")}),
    );
    assert_eq!(tampered["error"]["code"], -32602, "{tampered}");
    assert!(
        tampered["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed its integrity check"),
        "{tampered}"
    );
    let done = call(3, json!({"inputResponses": answers, "requestState": state}));
    assert_eq!(
        done["result"]["content"][0]["text"], "Confirmed: state-ok",
        "{done}"
    );
    drop(bermd);
}

/// Item 5 of "Boundaries, round 3": a sealed `requestState` opens only for the request it was
/// sealed for — the same method, served name and arguments (their canonical JSON: key order
/// and spacing aside), or for a read the same URI. The answers a person gave to "delete
/// a.txt?" do not delete b.txt, and a confirmation to read `/1/guarded` reads no other id.
#[test]
fn a_sealed_state_opens_only_for_the_same_method_name_and_arguments() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app(dir.path(), &addr, "conformance");
    let client = meta(json!({"elicitation": {}}));
    let accept = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    let refused_for = |answer: &serde_json::Value, what: &str| {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(what), "{message}");
    };

    // A tool's call: sealed for its arguments.
    let delete = |id, arguments: serde_json::Value, answered: serde_json::Value| {
        let mut params = json!({"name": "confirm_delete", "arguments": arguments, "_meta": client});
        params
            .as_object_mut()
            .unwrap()
            .extend(answered.as_object().unwrap().clone());
        modern(&addr, id, "tools/call", "confirm_delete", params)
    };
    let asked = delete(1, json!({"filename": "a.txt"}), json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let answered = json!({"inputResponses": accept, "requestState": state});
    for other in [
        json!({"filename": "b.txt"}),
        json!({}),
        json!({"filename": "a.txt", "x": 1}),
    ] {
        let replayed = delete(2, other, answered.clone());
        refused_for(
            &replayed,
            "sealed for a tools/call of `confirm_delete` with other arguments than this one",
        );
    }
    // The same arguments open it (key order and spacing aside: `ask`'s unit tests).
    let done = delete(3, json!({"filename": "a.txt"}), answered.clone());
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted a.txt.",
        "{done}"
    );
    // Another tool's call does not.
    let mut params = json!({"name": "test_input_required_result_request_state", "arguments": {"filename": "a.txt"}, "_meta": client});
    params
        .as_object_mut()
        .unwrap()
        .extend(answered.as_object().unwrap().clone());
    let elsewhere = modern(
        &addr,
        4,
        "tools/call",
        "test_input_required_result_request_state",
        params,
    );
    refused_for(&elsewhere, "failed its integrity check");

    // A read of a template: sealed for the URI read.
    let read = |id, uri: &str, answered: serde_json::Value| {
        let mut params = json!({"uri": uri, "_meta": client});
        params
            .as_object_mut()
            .unwrap()
            .extend(answered.as_object().unwrap().clone());
        modern(&addr, id, "resources/read", uri, params)
    };
    let asked = read(5, "test://template/1/guarded", json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let answered = json!({"inputResponses": accept, "requestState": state});
    let replayed = read(6, "test://template/2/guarded", answered.clone());
    refused_for(
        &replayed,
        "sealed for a resources/read of `test_guarded_data` with another URI than this one",
    );
    let done = read(7, "test://template/1/guarded", answered);
    assert_eq!(
        done["result"]["contents"][0]["text"], "Guarded data for ID: 1",
        "{done}"
    );
    drop(bermd);
}

/// Item 7 of "Boundaries, round 3": a read's contents carry the URI read. A program that
/// labels its bytes as another program's resource (`test://static-text`) or as a host file
/// (`file:///etc/passwd`) has that label replaced: it answers only for the URI it serves.
#[test]
fn a_read_answers_only_for_the_uri_read() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app(dir.path(), &addr, "impostor");
    let uri = "impostor://forged";
    let read = modern(
        &addr,
        1,
        "resources/read",
        uri,
        json!({"uri": uri, "_meta": meta(json!({}))}),
    );
    let contents = read["result"]["contents"]
        .as_array()
        .unwrap_or_else(|| panic!("{read}"));
    assert_eq!(contents.len(), 2, "{read}");
    for content in contents {
        assert_eq!(content["uri"], uri, "{read}");
    }
    assert_eq!(contents[0]["text"], "forged text", "{read}");
    assert_eq!(contents[0]["mimeType"], "text/plain", "{read}");
    assert!(contents[1]["blob"].is_string(), "{read}");
    drop(bermd);
}

/// Item 6 of "Boundaries, round 3": `Mcp-Param-*` headers are checked whatever protocol
/// version the request claims — a header sent twice is refused, one that differs from the
/// body is refused on a 2025 session too — and a body bermd cannot read (an argument written
/// twice) is refused rather than passed on unchecked. Only a missing header is asked of
/// 2026-07-28 clients alone: older ones do not know to send it.
#[test]
fn mirrored_argument_headers_are_checked_whatever_version_the_request_claims() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let bermd = bermd_with_app(dir.path(), &addr, "conformance");
    let bearer = format!("Bearer {TOKEN}");
    let modern_body = |arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"test_routed","arguments":{arguments},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        )
    };
    let modern_call = |regions: &[&str], body: &str| {
        let mut headers = vec![
            ("Authorization", bearer.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "test_routed"),
        ];
        headers.extend(regions.iter().map(|r| ("Mcp-Param-Region", *r)));
        post(&addr, &addr, &headers, body)
    };
    let refused = |answer: &Answer, code: i64, why: &str| {
        assert_eq!(answer.status, 400, "{}{}", answer.head, answer.body);
        let body: serde_json::Value = serde_json::from_str(answer.body.trim()).unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
    };
    let hello = modern_body(r#"{"region":"Hello"}"#);
    let ok = modern_call(&["Hello"], &hello);
    assert!(
        ok.body.contains("routed to Hello"),
        "{}{}",
        ok.head,
        ok.body
    );
    // The header twice, the first one matching: a proxy may have routed on the second.
    for twice in [["Hello", "Elsewhere"], ["Hello", "Hello"]] {
        refused(
            &modern_call(&twice, &hello),
            -32020,
            "header Mcp-Param-Region is sent 2 times",
        );
    }
    // An argument written twice: a proxy reading the first would route on "Elsewhere".
    refused(
        &modern_call(
            &["Hello"],
            &modern_body(r#"{"region":"Elsewhere","region":"Hello"}"#),
        ),
        -32600,
        "argument `region` is written twice",
    );

    // A 2025 session: its client does not mirror arguments, but a header it sends is checked.
    let opened = initialize(&addr, &addr, &[("Authorization", &bearer)]);
    assert_eq!(opened.status, 200, "{}", opened.head);
    let session = opened
        .head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id: {}", opened.head));
    let in_session = |extra: &[(&str, &str)], body: &str| {
        let mut headers = vec![
            ("Mcp-Session-Id", session.as_str()),
            ("Authorization", bearer.as_str()),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        headers.extend_from_slice(extra);
        post(&addr, &addr, &headers, body)
    };
    let initialized = in_session(
        &[],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(initialized.status, 202, "{}", initialized.head);
    let old_body = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"test_routed","arguments":{"region":"Hello"}}}"#;
    refused(
        &in_session(&[("Mcp-Param-Region", "Elsewhere")], old_body),
        -32020,
        "header Mcp-Param-Region does not match argument `region`",
    );
    refused(
        &in_session(
            &[
                ("Mcp-Param-Region", "Hello"),
                ("Mcp-Param-Region", "Elsewhere"),
            ],
            old_body,
        ),
        -32020,
        "is sent 2 times",
    );
    refused(
        &in_session(
            &[("Mcp-Param-Region", "Hello")],
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"test_simple_text","arguments":{}},"params":{"name":"test_routed","arguments":{"region":"Elsewhere"}}}"#,
        ),
        -32600,
        "duplicate field `params`",
    );
    // Without the header, as a 2025 client sends it, and with it matching: the call runs.
    for extra in [&[][..], &[("Mcp-Param-Region", "Hello")][..]] {
        let ran = in_session(extra, old_body);
        assert_eq!(ran.status, 200, "{}{}", ran.head, ran.body);
        assert!(
            ran.body.contains("routed to Hello"),
            "{}{}",
            ran.head,
            ran.body
        );
    }
    drop(bermd);
}
