//! `berm registry-json`: bermd's `server.json` for the MCP Registry (schema 2025-12-11): the
//! server's name, version and source, the URL a deployment serves MCP at (`remotes`, one
//! Streamable HTTP endpoint) and how to run it yourself (`packages`, bermd's OCI image).
//! Published with the registry's own `mcp-publisher`; this only writes the document.

use anyhow::bail;

/// The schema the document follows.
pub const SCHEMA: &str =
    "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json";

/// bermd's name in the registry: reverse DNS of the GitHub organisation, as the registry
/// verifies `io.github.*` names by GitHub login.
pub const NAME: &str = "io.github.berm-os/bermd";

/// Where bermd's release images are pushed (docs/image.md).
const IMAGE: &str = "ghcr.io/berm-os/bermd";

/// `berm registry-json` arguments.
#[derive(clap::Args)]
#[command(
    long_about = "Print bermd's server.json for the MCP Registry (schema 2025-12-11): a remote \
                  Streamable HTTP endpoint at --url, and bermd's OCI image as a package. \
                  Publish it with the registry's mcp-publisher."
)]
pub struct Args {
    /// The URL clients reach the deployment's MCP endpoint by (https://HOST/mcp).
    #[arg(long, value_name = "URL")]
    url: String,
    /// How clients authenticate there: `oauth` (bermd --oauth-issuer; clients discover the
    /// issuer themselves) or `bearer` (the static token, which each user is asked for).
    #[arg(long, value_enum, default_value_t = Auth::Oauth)]
    auth: Auth,
    /// The image the package names (default: this release's, ghcr.io/berm-os/bermd:vVERSION).
    #[arg(long, value_name = "REF")]
    image: Option<String>,
}

/// How a remote's clients authenticate.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Auth {
    /// OAuth 2.1 access tokens.
    Oauth,
    /// The static bearer token.
    Bearer,
}

/// The document for `args`.
pub fn document(url: &str, bearer: bool, image: Option<&str>) -> anyhow::Result<serde_json::Value> {
    let parsed = url.parse::<reqwest::Url>();
    if !matches!(&parsed, Ok(u) if matches!(u.scheme(), "https" | "http") && u.host().is_some()) {
        bail!(
            "--url {url}: give the http(s) URL clients reach /mcp by, such as https://mcp.example.com/mcp"
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    let mut remote = serde_json::json!({"type": "streamable-http", "url": url});
    let token_header = serde_json::json!([{
        "name": "Authorization",
        "description": "Bearer TOKEN: the deployment's static token (`berm http` prints it)",
        "isRequired": true,
        "isSecret": true,
    }]);
    if bearer {
        remote["headers"] = token_header.clone();
    }
    let image = image.map_or_else(|| format!("{IMAGE}:v{version}"), str::to_string);
    Ok(serde_json::json!({
        "$schema": SCHEMA,
        "name": NAME,
        "title": "bermd",
        "description": "MCP tools that are WebAssembly programs pinned by sha256, reaching only what they are granted",
        "version": version,
        "websiteUrl": "https://github.com/berm-os/berm",
        "repository": {"url": "https://github.com/berm-os/berm", "source": "github"},
        "remotes": [remote],
        "packages": [{
            "registryType": "oci",
            "identifier": image,
            "runtimeHint": "docker",
            "runtimeArguments": [
                {"type": "named", "name": "-p", "value": "127.0.0.1:8080:8080",
                 "description": "bermd's HTTP port, on this machine's loopback"},
            ],
            "packageArguments": [
                {"type": "named", "name": "--http", "value": "0.0.0.0:8080"},
                {"type": "positional", "value": "--http-allow-remote"},
                {"type": "named", "name": "--allowed-host", "value": "localhost"},
            ],
            "transport": {
                "type": "streamable-http",
                "url": "http://localhost:8080/mcp",
                "headers": token_header,
            },
        }],
    }))
}

/// Prints the document.
pub fn run(args: Args) -> anyhow::Result<crate::Exit> {
    let doc = document(
        &args.url,
        matches!(args.auth, Auth::Bearer),
        args.image.as_deref(),
    )?;
    crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(crate::Exit::Ok)
}
