//! A WebAssembly component under a real bermd, held to every grant rule a core module is held
//! to (docs/components.md): an ungranted interface traps naming its grant, the `fs=`
//! directory is the one read-only preopen and cannot be left, `wasi:http` reaches only
//! granted hosts through bermd's egress (no private address, no redirect elsewhere, a secret
//! only to its bound host), stdout floods are cut, and nothing survives a call.
//!
//! The probe component is built by scripts/build-apps.sh (`apps/components/probe`).

mod common;

use berm_abi::grant::Grant;
use berm_control::{CallOutcome, DeployRequest, LimitsSpec, SecretValue};
use berm_egress::testing::{Reply, TestServer};
use common::{Bermd, block_on};
use serde_json::{Value, json};

/// The probe with a manifest listing its tools, appended as an SDK appends it.
fn probe() -> Vec<u8> {
    let tools: Vec<Value> = [
        "counter",
        "kv",
        "read-file",
        "write-file",
        "flood",
        "fetch",
        "wasi-fetch",
    ]
    .iter()
    .map(|name| json!({"name": name, "description": name, "input_schema": {"type": "object"}}))
    .collect();
    let manifest = json!({"abi": 1, "description": "the probe", "tools": tools});
    berm_fixtures::with_section(
        &berm_fixtures::component("probe"),
        berm_abi::MANIFEST_SECTION,
        manifest.to_string().as_bytes(),
    )
}

/// Calls `tool` with `args`: `Ok(text)` when it succeeded, `Err(text)` when it reported a
/// failure, `Err("host: …")` when bermd stopped it.
fn call(bermd: &Bermd, tool: &str, args: Value) -> Result<String, String> {
    match block_on(bermd.control().call(tool, args.to_string().into_bytes())) {
        Ok(answer) if answer.outcome == CallOutcome::Done => Ok(answer.text),
        Ok(answer) => Err(answer.text),
        Err(error) => Err(format!("host: {error}")),
    }
}

#[test]
fn a_component_is_held_to_every_grant_rule() {
    let bermd = Bermd::start(&[]);
    let granted = TestServer::http(|seen| match seen.path.as_str() {
        "/away" => Reply::redirect(302, seen.header("x-to").unwrap_or_default()),
        _ => Reply::ok(format!(
            "seen {}",
            seen.header("authorization").unwrap_or("nothing")
        )),
    });
    let other = TestServer::http(|seen| {
        Reply::ok(format!(
            "other saw {}",
            seen.header("authorization").unwrap_or("nothing")
        ))
    });
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);

    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("inside.txt"), "inside").unwrap();
    std::fs::write(root.path().join("outside.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(root.path().join("outside.txt"), dir.join("link")).unwrap();

    let grants: Vec<Grant> = [
        "kv".to_string(),
        format!("fs={}", dir.display()),
        format!("net=127.0.0.1:{}", granted.port()),
        format!("net=127.0.0.1:{}", other.port()),
        format!("net=localhost:{}", granted.port()),
        format!("secret:TOKEN=http://127.0.0.1:{}", granted.port()),
    ]
    .iter()
    .map(|g| g.parse().unwrap())
    .collect();
    let control = bermd.control();
    let image = probe();
    block_on(control.deploy(
        "probe",
        &DeployRequest::new(&image, grants, LimitsSpec::default()),
    ))
    .unwrap();
    block_on(control.deploy(
        "bare",
        &DeployRequest::new(&image, vec![], LimitsSpec::default()),
    ))
    .unwrap();
    block_on(control.set_secret(
        "probe",
        "TOKEN",
        &SecretValue {
            value: "s3cret".into(),
        },
    ))
    .unwrap();

    // Nothing survives a call.
    for _ in 0..2 {
        assert_eq!(call(&bermd, "probe_counter", json!({})).unwrap(), "1");
    }

    // A granted interface works; an ungranted one traps naming the grant.
    let kv = json!({"key": "k", "value": "v"});
    assert_eq!(call(&bermd, "probe_kv", kv.clone()).unwrap(), "v");
    let refused = call(&bermd, "bare_kv", kv).unwrap_err();
    assert!(
        refused.contains("`berm:program/kv@1.0.0#put`, which is not granted to `bare` (grant `kv`"),
        "{refused}"
    );
    let refused = call(&bermd, "bare_read-file", json!({"path": "/inside.txt"})).unwrap_err();
    assert!(refused.contains("grant `fs=DIR`"), "{refused}");
    let refused = call(
        &bermd,
        "bare_wasi-fetch",
        json!({"url": "http://127.0.0.1:9/"}),
    )
    .unwrap_err();
    assert!(
        refused.contains("wasi:http/outgoing-handler") && refused.contains("grant `net="),
        "{refused}"
    );

    // The fs= directory is the one preopen, read-only, and cannot be left.
    let read = |path: &str| call(&bermd, "probe_read-file", json!({ "path": path }));
    assert_eq!(read("/inside.txt").unwrap(), "inside");
    assert_eq!(read("inside.txt").unwrap(), "inside");
    for escape in [
        "/../outside.txt".to_string(),
        "../outside.txt".to_string(),
        "/link".to_string(),
        root.path().join("outside.txt").display().to_string(),
        "/etc/passwd".to_string(),
    ] {
        let refused = read(&escape).unwrap_err();
        assert!(!refused.contains("outside"), "{escape}: {refused}");
        assert!(!refused.starts_with("host:"), "{escape}: {refused}");
    }
    let refused = call(&bermd, "probe_write-file", json!({"path": "/new.txt"})).unwrap_err();
    assert!(!refused.starts_with("host:"), "{refused}");
    assert!(!dir.join("new.txt").exists());

    // wasi:http goes through the egress: a granted host answers, and the secret reaches it.
    let fetch = |url: String, header: Option<(&str, &str)>| {
        let mut args = json!({ "url": url });
        if let Some((name, value)) = header {
            args["header"] = json!([name, value]);
        }
        call(&bermd, "probe_wasi-fetch", args)
    };
    let base = format!("http://127.0.0.1:{}", granted.port());
    assert_eq!(fetch(format!("{base}/"), None).unwrap(), "200 seen nothing");
    let bearer = ("authorization", "Bearer {{secret:TOKEN}}");
    assert_eq!(
        fetch(format!("{base}/"), Some(bearer)).unwrap(),
        "200 seen Bearer s3cret"
    );
    // The secret toward another granted host is refused, and never sent.
    let refused = fetch(format!("http://127.0.0.1:{}/", other.port()), Some(bearer)).unwrap_err();
    assert!(refused.contains("HttpRequestDenied"), "{refused}");
    // An ungranted host, a name resolving to a private address, a redirect to either.
    let ungranted = format!("http://127.0.0.1:{closed_port}/");
    let private = format!("http://localhost:{}/", granted.port());
    for url in [ungranted.clone(), private.clone()] {
        let refused = fetch(url.clone(), None).unwrap_err();
        assert!(refused.contains("HttpRequestDenied"), "{url}: {refused}");
    }
    for to in [ungranted, private] {
        let refused = fetch(format!("{base}/away"), Some(("x-to", to.as_str()))).unwrap_err();
        assert!(refused.contains("HttpRequestDenied"), "{to}: {refused}");
    }
    // berm:program/http keeps the same rules.
    assert_eq!(
        call(&bermd, "probe_fetch", json!({"url": format!("{base}/")})).unwrap(),
        "200 seen nothing"
    );
    let refused = call(
        &bermd,
        "probe_fetch",
        json!({"url": format!("http://127.0.0.1:{closed_port}/")}),
    )
    .unwrap_err();
    assert!(
        refused.contains("is not in this program's net grants"),
        "{refused}"
    );

    // A flood of stdout is cut; the call goes on and the log says so.
    assert_eq!(
        call(&bermd, "probe_flood", json!({"lines": 2000})).unwrap(),
        "flooded"
    );
    let log = bermd.log_text();
    assert!(log.contains("line 0 xxx"), "{log}");
    assert!(log.contains("bytes of stdout/stderr dropped"), "{log}");
}
