//! `http.fetch`'s rules against real servers on loopback: an HTTP one and an
//! HTTPS one whose CA is made by the test.

use std::time::{Duration, Instant};

use berm_egress::secret::{Binding, SecretStore};
use berm_egress::testing::{Reply, TestCa, TestServer};
use berm_egress::{Caps, Egress, EgressConfig, ErrorCode, FetchError, Request, Response, Trust};

fn egress(
    rules: &[String],
    secrets: &[(&str, String)],
    store: Option<SecretStore>,
    caps: Caps,
    trust: Trust,
) -> Egress {
    Egress::new(EgressConfig {
        rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
        secrets: secrets
            .iter()
            .map(|(name, rule)| Binding {
                name: name.to_string(),
                rule: rule.parse().unwrap(),
            })
            .collect(),
        store,
        caps,
        trust,
        forward: None,
    })
}

fn trust(ca: &TestCa) -> Trust {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.pem");
    ca.write_ca(&path);
    Trust::only(&path).unwrap()
}

fn get(url: &str) -> Request {
    Request {
        method: "GET".into(),
        url: url.into(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

fn fetch(egress: &Egress, request: Request) -> Result<Response, FetchError> {
    fetch_within(egress, request, Duration::from_secs(10))
}

fn fetch_within(
    egress: &Egress,
    request: Request,
    within: Duration,
) -> Result<Response, FetchError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(egress.fetch(request, Instant::now() + within))
}

fn grant(server: &TestServer) -> String {
    format!("127.0.0.1:{}", server.port())
}

#[test]
fn an_allowed_host_answers_over_http_and_https() {
    let ca = TestCa::new();
    let http = TestServer::http(|seen| Reply::ok(format!("hello {}", seen.path)));
    let https = TestServer::https(&ca, |_| Reply::ok("secure hello"));
    let egress = egress(
        &[grant(&http), grant(&https)],
        &[],
        None,
        Caps::default(),
        trust(&ca),
    );
    let response = fetch(&egress, get(&format!("{}/a?b=c", http.origin(false)))).unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"hello /a?b=c");
    let response = fetch(&egress, get(&format!("{}/", https.origin(true)))).unwrap();
    assert_eq!(
        (response.status, &response.body[..]),
        (200, &b"secure hello"[..])
    );
    assert_eq!(
        http.seen()[0].header("host"),
        Some(format!("127.0.0.1:{}", http.port()).as_str())
    );
}

#[test]
fn https_is_always_verified() {
    let ca = TestCa::new();
    let https = TestServer::https(&ca, |_| Reply::ok("x"));
    // Another CA than the one that signed the server's certificate.
    let egress = egress(
        &[grant(&https)],
        &[],
        None,
        Caps::default(),
        trust(&TestCa::new()),
    );
    let err = fetch(&egress, get(&format!("{}/", https.origin(true)))).unwrap_err();
    assert_eq!(err.code, ErrorCode::Io, "{err}");
    assert!(err.message.contains("TLS"), "{err}");
    assert!(https.seen().is_empty());
}

#[test]
fn a_host_outside_the_grant_is_denied_before_any_connection() {
    let allowed = TestServer::http(|_| Reply::ok("a"));
    let other = TestServer::http(|_| Reply::ok("b"));
    let egress = egress(
        &[grant(&allowed)],
        &[],
        None,
        Caps::default(),
        Trust::none(),
    );
    let err = fetch(&egress, get(&format!("{}/", other.origin(false)))).unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied);
    assert!(
        err.message.contains("is not in this program's net grants"),
        "{err}"
    );
    assert_eq!(other.connections(), 0);
    // The same address on another port, and a name not granted.
    let err = fetch(&egress, get("http://example.invalid/")).unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied, "{err}");
    assert_eq!(
        fetch(&egress, get("ftp://127.0.0.1/")).unwrap_err().code,
        ErrorCode::Denied
    );
    assert_eq!(
        fetch(&egress, get(&format!("http://u:p@{}/", allowed.addr)))
            .unwrap_err()
            .code,
        ErrorCode::Invalid
    );
    assert_eq!(allowed.connections(), 0);
}

#[test]
fn an_allowed_name_resolving_to_loopback_is_denied() {
    let server = TestServer::http(|_| Reply::ok("local"));
    let egress = egress(
        &[format!("localhost:{}", server.port())],
        &[],
        None,
        Caps::default(),
        Trust::none(),
    );
    let err = fetch(
        &egress,
        get(&format!("http://localhost:{}/", server.port())),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied, "{err}");
    assert!(err.message.contains("resolves to"), "{err}");
    assert!(err.message.contains("loopback"), "{err}");
    assert_eq!(server.connections(), 0);
}

#[test]
fn redirects_are_followed_only_to_allowed_hosts_and_at_most_five() {
    let outside = TestServer::http(|_| Reply::ok("outside"));
    let target = TestServer::http(|_| Reply::ok("arrived"));
    let (outside_url, target_url) = (outside.origin(false), target.origin(false));
    let redirector = TestServer::http(move |seen| match seen.path.as_str() {
        "/out" => Reply::redirect(302, &format!("{outside_url}/")),
        "/in" => Reply::redirect(307, &format!("{target_url}/")),
        "/loop" => Reply::redirect(301, "/loop"),
        "/see-other" => Reply::redirect(303, "/in"),
        _ => Reply::ok("?"),
    });
    let egress = egress(
        &[grant(&redirector), grant(&target)],
        &[],
        None,
        Caps::default(),
        Trust::none(),
    );
    let at = |path: &str| format!("{}{path}", redirector.origin(false));
    let err = fetch(&egress, get(&at("/out"))).unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied, "{err}");
    assert_eq!(outside.connections(), 0);
    assert_eq!(fetch(&egress, get(&at("/in"))).unwrap().body, b"arrived");
    let mut post = get(&at("/see-other"));
    post.method = "POST".into();
    post.body = b"data".to_vec();
    assert_eq!(fetch(&egress, post).unwrap().body, b"arrived");
    let last = target.seen().pop().unwrap();
    assert_eq!((last.method.as_str(), last.body.len()), ("GET", 0));
    let before = redirector.seen().len();
    let err = fetch(&egress, get(&at("/loop"))).unwrap_err();
    assert_eq!(err.code, ErrorCode::Io, "{err}");
    assert!(err.message.contains("more than 5 redirects"), "{err}");
    assert_eq!(redirector.seen().len() - before, 6);
}

#[test]
fn an_oversized_response_is_too_large_and_a_slow_server_ends_in_the_deadline() {
    let server = TestServer::http(|seen| match seen.path.as_str() {
        "/big" => Reply::ok(vec![b'x'; 2000]),
        "/slow" => Reply {
            delay: Some(Duration::from_secs(30)),
            ..Reply::ok("late")
        },
        _ => Reply::ok(vec![b'x'; 1000]),
    });
    let caps = Caps {
        max_response_bytes: 1000,
        ..Caps::default()
    };
    let egress = egress(&[grant(&server)], &[], None, caps, Trust::none());
    let url = |path: &str| format!("{}{path}", server.origin(false));
    assert_eq!(fetch(&egress, get(&url("/fits"))).unwrap().body.len(), 1000);
    let err = fetch(&egress, get(&url("/big"))).unwrap_err();
    assert_eq!(err.code, ErrorCode::TooLarge, "{err}");
    let started = Instant::now();
    let err = fetch_within(&egress, get(&url("/slow")), Duration::from_millis(600)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    // Before the call's deadline, so the program can still answer.
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_secret_arrives_only_at_its_host() {
    let ca = TestCa::new();
    let api = TestServer::https(&ca, |seen| match seen.header("authorization") {
        Some("Bearer s3cret-value") => Reply::ok("authorized"),
        _ => Reply {
            status: 401,
            ..Reply::ok("who are you")
        },
    });
    let other = TestServer::https(&ca, |_| Reply::ok("other"));
    let dir = tempfile::tempdir().unwrap();
    let store = SecretStore::new(dir.path());
    store.set("token", b"s3cret-value").unwrap();
    let egress = egress(
        &[grant(&api), grant(&other)],
        &[("token", grant(&api))],
        Some(store),
        Caps::default(),
        trust(&ca),
    );
    let with_token = |origin: String| Request {
        headers: vec![("authorization".into(), b"Bearer {{secret:token}}".to_vec())],
        body: b"{\"t\":\"{{secret:token}}\"}".to_vec(),
        method: "POST".into(),
        ..get(&format!("{origin}/"))
    };
    let response = fetch(&egress, with_token(api.origin(true))).unwrap();
    assert_eq!(response.body, b"authorized");
    assert_eq!(api.seen()[0].body, b"{\"t\":\"s3cret-value\"}");
    let err = fetch(&egress, with_token(other.origin(true))).unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied, "{err}");
    assert!(!err.message.contains("s3cret"), "{err}");
    assert_eq!(other.connections(), 0);
    // A secret not bound to the program, and a malformed placeholder.
    let mut unbound = get(&format!("{}/", api.origin(true)));
    unbound.headers = vec![("x".into(), b"{{secret:other}}".to_vec())];
    assert_eq!(fetch(&egress, unbound).unwrap_err().code, ErrorCode::Denied);
    let mut typo = get(&format!("{}/", api.origin(true)));
    typo.headers = vec![("x".into(), b"{{secret:token".to_vec())];
    assert_eq!(fetch(&egress, typo).unwrap_err().code, ErrorCode::Invalid);
    // A redirect from the secret's host elsewhere does not carry it along.
    let other_url = other.origin(true);
    let bouncer = TestServer::https(&ca, move |_| Reply::redirect(307, &format!("{other_url}/")));
    let egress2 = egress_with_bouncer(&api, &other, &bouncer, &ca, dir.path());
    let err = fetch(&egress2, with_token(bouncer.origin(true))).unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied, "{err}");
    assert_eq!(other.connections(), 0);
}

fn egress_with_bouncer(
    api: &TestServer,
    other: &TestServer,
    bouncer: &TestServer,
    ca: &TestCa,
    dir: &std::path::Path,
) -> Egress {
    egress(
        &[grant(api), grant(other), grant(bouncer)],
        &[("token", grant(api)), ("token", grant(bouncer))],
        Some(SecretStore::new(dir)),
        Caps::default(),
        trust(ca),
    )
}

#[test]
fn headers_the_host_sets_are_refused() {
    let server = TestServer::http(|_| Reply::ok("x"));
    let egress = egress(&[grant(&server)], &[], None, Caps::default(), Trust::none());
    for name in ["host", "content-length", "transfer-encoding", "connection"] {
        let mut request = get(&format!("{}/", server.origin(false)));
        request.headers = vec![(name.into(), b"x".to_vec())];
        let err = fetch(&egress, request).unwrap_err();
        assert_eq!(err.code, ErrorCode::Invalid, "{name}: {err}");
    }
    let mut request = get(&format!("{}/", server.origin(false)));
    request.headers = vec![("x-a".into(), b"a\r\nb: c".to_vec())];
    assert_eq!(
        fetch(&egress, request).unwrap_err().code,
        ErrorCode::Invalid
    );
    assert_eq!(server.connections(), 0);
}

/// A secret bound without a scheme goes over HTTPS only: the same host over http:// is
/// refused before anything is sent, saying how to name cleartext; bound as http:// it goes.
#[test]
fn a_secret_bound_without_a_scheme_is_refused_over_http() {
    let api = TestServer::http(|seen| Reply::ok(seen.header("authorization").unwrap_or("-")));
    let dir = tempfile::tempdir().unwrap();
    let store = SecretStore::new(dir.path());
    store.set("token", b"s3cret-value").unwrap();
    let request = || Request {
        headers: vec![("authorization".into(), b"{{secret:token}}".to_vec())],
        ..get(&format!("{}/", api.origin(false)))
    };
    let bare = egress(
        &[grant(&api)],
        &[("token", grant(&api))],
        Some(store.clone()),
        Caps::default(),
        Trust::none(),
    );
    let err = fetch(&bare, request()).unwrap_err();
    assert_eq!(err.code, ErrorCode::Denied);
    assert_eq!(
        err.message,
        format!(
            "the request holds {{{{secret:token}}}} and goes to {host} over cleartext http://; \
             secret `token` is bound to {host}, which means HTTPS only: use https://, or bind \
             it as secret:token=http://{host} to send it in cleartext",
            host = grant(&api)
        )
    );
    assert_eq!(api.connections(), 0);
    let cleartext = egress(
        &[grant(&api)],
        &[("token", format!("http://{}", grant(&api)))],
        Some(store),
        Caps::default(),
        Trust::none(),
    );
    assert_eq!(fetch(&cleartext, request()).unwrap().body, b"s3cret-value");
}

/// A URL holding CR, LF, tab or another control character is refused as written, never
/// rewritten and sent.
#[test]
fn a_url_with_a_control_character_is_refused_not_rewritten() {
    let server = TestServer::http(|_| Reply::ok("must not be reached"));
    let egress = egress(&[grant(&server)], &[], None, Caps::default(), Trust::none());
    for (url, c) in [
        (
            format!("{}/a\r\nX-Injected: 1", server.origin(false)),
            "'\\r'",
        ),
        (format!("{}/a\nb", server.origin(false)), "'\\n'"),
        (format!("{}/a\tb", server.origin(false)), "'\\t'"),
        (format!("{}/a\u{7f}", server.origin(false)), "'\\u{7f}'"),
    ] {
        let err = fetch(&egress, get(&url)).unwrap_err();
        assert_eq!(err.code, ErrorCode::Invalid, "{url:?}");
        assert_eq!(
            err.message,
            format!(
                "the URL is not valid: it holds the control character {c}; a URL is sent as \
                 written or not at all (percent-encode it, e.g. %0D%0A)"
            )
        );
    }
    assert_eq!(server.connections(), 0);
}

/// The response head (status line and headers) is capped at 64 KiB: a 100 KiB one is
/// `too_large`, naming its size.
#[test]
fn a_response_head_over_its_cap_is_refused() {
    let big = TestServer::http(|_| Reply {
        headers: vec![("x-big".into(), "a".repeat(100 << 10))],
        ..Reply::ok("body")
    });
    let fits = TestServer::http(|_| Reply {
        headers: vec![("x-big".into(), "a".repeat(60 << 10))],
        ..Reply::ok("body")
    });
    let egress = egress(
        &[grant(&big), grant(&fits)],
        &[],
        None,
        Caps::default(),
        Trust::none(),
    );
    let err = fetch(&egress, get(&format!("{}/", big.origin(false)))).unwrap_err();
    assert_eq!(err.code, ErrorCode::TooLarge, "{err}");
    assert!(
        err.message
            .starts_with(&format!("the response head from {} is ", grant(&big)))
            && err.message.ends_with(" bytes, over the cap of 65536 bytes"),
        "{err}"
    );
    assert_eq!(
        fetch(&egress, get(&format!("{}/", fits.origin(false))))
            .unwrap()
            .body,
        b"body"
    );
}
