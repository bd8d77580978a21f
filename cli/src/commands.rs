//! One module per subcommand.

pub mod attest;
pub mod call;
pub mod completions;
pub mod deploy;
pub mod deploy_app;
pub mod diff;
pub mod dist;
pub mod doctor;
pub mod http;
pub mod inspect;
pub mod ls;
pub mod mcp;
pub mod mcp_lines;
pub mod new;
pub mod receipts;
pub mod registry;
pub mod registry_json;
pub mod rm;
pub mod secret;
pub mod trust;
pub mod upgrade;
pub mod vm;
pub mod vm_app;
pub mod vm_run;

use std::path::Path;

use berm_control::Client;

/// The control client for `home`.
pub fn client(home: &Path) -> Client {
    Client::from_home(home)
}

/// A deployed program's tools by the names MCP clients and `berm call` use.
pub fn served_tools(program: &berm_control::ProgramView) -> Vec<String> {
    program
        .manifest
        .tools
        .iter()
        .map(|t| match program.serve_as.get(&t.name) {
            Some(alias) => alias.clone(),
            None => berm_abi::served_name(&program.name, &t.name),
        })
        .collect()
}

/// What `--json` prints for one deployed program.
#[derive(serde::Serialize)]
pub struct DeployedJson<'a> {
    #[serde(flatten)]
    deployed: &'a berm_control::DeployResponse,
    /// The names MCP clients call: `{program}_{tool}`.
    tools: Vec<String>,
}

impl<'a> DeployedJson<'a> {
    /// Pairs bermd's answer with the served tool names.
    pub fn new(deployed: &'a berm_control::DeployResponse) -> Self {
        Self {
            tools: served_tools(&deployed.program),
            deployed,
        }
    }
}

/// Prints `value` as one line of JSON on stdout: what `--json` gives scripts.
///
/// # Errors
/// When `value` cannot be serialized (a map with non-string keys).
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    crate::outln!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// A digest shortened for tables: `sha256:` and 12 hex digits.
pub fn short_digest(digest: &str) -> String {
    digest.chars().take("sha256:".len() + 12).collect()
}
