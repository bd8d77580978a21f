//! `berm http`: what an MCP client needs to reach bermd over Streamable
//! HTTP — the URL, the `Authorization` header, and commands ready to paste.
//!
//! It reads `$BERM_HOME/http.json`, which a bermd started with `--http`
//! writes at start and removes on a clean stop, and the token file it names
//! (bermd's generated `$BERM_HOME/http-token`, or `--http-token-file`).

use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use berm_control::home::{HTTP_INFO, HttpInfo};

use crate::Exit;

/// `berm http` arguments.
#[derive(clap::Args)]
#[command(
    long_about = "Print what an MCP client needs to reach bermd over Streamable HTTP: the URL, \
                  the Authorization header with bermd's token, and commands ready to paste \
                  (Claude Code, the MCP Inspector).\n\n\
                  bermd serves HTTP only when started with --http ADDR; it then records its \
                  URL and token file in $BERM_HOME/http.json. The output holds the token: \
                  anyone who reads it can call every tool."
)]
pub struct Args {
    /// Print one JSON object: {"url", "token_file", "headers"} (`headers`
    /// is the map an MCP client's config takes; empty under --no-auth).
    #[arg(long)]
    json: bool,
}

/// What `--json` prints.
#[derive(serde::Serialize)]
struct Output<'a> {
    url: &'a str,
    token_file: Option<&'a Path>,
    headers: serde_json::Map<String, serde_json::Value>,
}

/// Prints the URL, the header and the client commands.
pub fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let path = home.join(HTTP_INFO);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "bermd is not serving MCP over HTTP ({} does not exist): start it with \
             `bermd --http 127.0.0.1:8765 &`",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let info: HttpInfo =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    if !answers(&info.url) {
        bail!(
            "bermd recorded {} in {} but nothing answers there: it is not running (or did not \
             stop cleanly); start it with `bermd --http ADDR &`",
            info.url,
            path.display()
        );
    }
    let token = match &info.token_file {
        Some(file) => {
            let contents = std::fs::read_to_string(file)
                .with_context(|| format!("reading bermd's token file {}", file.display()))?;
            Some(contents.trim().to_string())
        }
        None => None,
    };
    let header = token.as_ref().map(|t| format!("Authorization: Bearer {t}"));
    if args.json {
        let mut headers = serde_json::Map::new();
        if let Some(token) = &token {
            headers.insert("Authorization".into(), format!("Bearer {token}").into());
        }
        super::print_json(&Output {
            url: &info.url,
            token_file: info.token_file.as_deref(),
            headers,
        })?;
        return Ok(Exit::Ok);
    }
    let url = &info.url;
    crate::outln!("URL:    {url}");
    let flag = match (&header, &info.token_file) {
        (Some(header), Some(file)) => {
            crate::outln!("Header: {header}");
            crate::outln!("        (the token is in {})", file.display());
            format!(" --header \"{header}\"")
        }
        _ => {
            crate::outln!("Header: none: bermd runs with --no-auth, so any local process gets in");
            String::new()
        }
    };
    crate::outln!();
    crate::outln!("Claude Code:");
    crate::outln!("  claude mcp add --transport http berm {url}{flag}");
    crate::outln!("MCP Inspector:");
    crate::outln!(
        "  npx @modelcontextprotocol/inspector --cli {url} --transport http{flag} --method tools/list"
    );
    Ok(Exit::Ok)
}

/// Whether something accepts a TCP connection at `url`'s host and port: a
/// bermd that was killed leaves its http.json behind.
fn answers(url: &str) -> bool {
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    let Ok(addrs) = authority.to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok())
}
