//! One module per subcommand.

pub mod attest;
pub mod call;
pub mod completions;
pub mod deploy;
pub mod deploy_app;
pub mod dist;
pub mod doctor;
pub mod inspect;
pub mod ls;
pub mod mcp;
pub mod new;
pub mod rm;
pub mod secret;
pub mod vm;

use std::path::Path;

use berm_control::Client;

/// The control client for `home`.
pub fn client(home: &Path) -> Client {
    Client::from_home(home)
}

/// A digest shortened for tables: `sha256:` and 12 hex digits.
pub fn short_digest(digest: &str) -> String {
    digest.chars().take("sha256:".len() + 12).collect()
}
