//! `berm registry-json` against the MCP Registry's real `server.json` schema (2025-12-11,
//! vendored in tests/registry/ with its source and digest): what it prints validates, for a
//! remote behind OAuth and one behind the static token; what the schema forbids is refused by
//! the same validator, so the check can fail; a URL that is not one is refused by berm.

use std::process::Command;

use sha2::Digest as _;

/// The digest of the live schema file, from its source (tests/registry/README.md).
const SCHEMA_SHA256: &str = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0";

fn validator() -> jsonschema::Validator {
    let bytes = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/registry/server.schema.2025-12-11.json"),
    )
    .unwrap();
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), SCHEMA_SHA256);
    let schema: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        schema["$id"],
        "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
    );
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap()
}

fn registry_json(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_berm"))
        .arg("registry-json")
        .args(args)
        .output()
        .unwrap()
}

fn errors(validator: &jsonschema::Validator, doc: &serde_json::Value) -> Vec<String> {
    validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn the_document_validates_against_the_registrys_schema() {
    let validator = validator();
    for (auth, header) in [("oauth", false), ("bearer", true)] {
        let out = registry_json(&["--url", "https://mcp.example.com/mcp", "--auth", auth]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let problems = errors(&validator, &doc);
        assert!(problems.is_empty(), "{auth}: {problems:#?}\n{doc:#}");
        assert_eq!(doc["$schema"], validator_id());
        assert_eq!(doc["name"], "io.github.berm-os/bermd");
        assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
        let remote = &doc["remotes"][0];
        assert_eq!(remote["type"], "streamable-http");
        assert_eq!(remote["url"], "https://mcp.example.com/mcp");
        assert_eq!(remote.get("headers").is_some(), header, "{auth}: {remote}");
        let package = &doc["packages"][0];
        assert_eq!(package["registryType"], "oci");
        assert_eq!(
            package["identifier"],
            format!("ghcr.io/berm-os/bermd:v{}", env!("CARGO_PKG_VERSION"))
        );
    }
    let out = registry_json(&[
        "--url",
        "https://mcp.example.com/mcp",
        "--image",
        "ghcr.io/me/bermd@sha256:0123",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["packages"][0]["identifier"],
        "ghcr.io/me/bermd@sha256:0123"
    );
    assert!(errors(&validator, &doc).is_empty());
}

fn validator_id() -> &'static str {
    "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
}

#[test]
fn what_the_schema_forbids_is_refused() {
    let validator = validator();
    let out = registry_json(&["--url", "https://mcp.example.com/mcp"]);
    let good: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut bad_name = good.clone();
    bad_name["name"] = "bermd".into();
    let mut long = good.clone();
    long["description"] = "x".repeat(101).into();
    let mut latest = good.clone();
    latest["packages"][0]["version"] = "latest".into();
    let mut no_url = good.clone();
    no_url["remotes"][0].as_object_mut().unwrap().remove("url");
    for (what, doc) in [
        ("a name without a namespace", bad_name),
        ("a 101-character description", long),
        ("a package version `latest`", latest),
        ("a remote without a URL", no_url),
    ] {
        assert!(!errors(&validator, &doc).is_empty(), "{what} passed");
    }
}

#[test]
fn a_url_that_is_not_one_is_refused() {
    for url in [
        "mcp.example.com/mcp",
        "ftp://mcp.example.com/mcp",
        "https://",
    ] {
        let out = registry_json(&["--url", url]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--url"),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
