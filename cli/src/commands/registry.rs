//! The flags shared by every command that talks to a registry (push, pull, trust, deploy,
//! inspect, diff, vm up), and the registry options they select. Below both `dist` and
//! `trust`, which each take these flags.

use berm_oci::RegistryOptions;

/// Options shared by every command that talks to a registry.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP to a registry that is not on this machine's loopback
    /// (loopback registries are always spoken to over HTTP). Credentials and
    /// bytes then cross the network in the clear; pulled bytes are still
    /// verified against their digests.
    #[arg(long)]
    pub insecure: bool,
}

impl RegistryArgs {
    /// The options these flags and the environment select
    /// (`BERM_REGISTRY_USER`, `BERM_REGISTRY_PASSWORD`, `DOCKER_CONFIG`).
    pub fn options(&self) -> RegistryOptions {
        RegistryOptions::from_environment(self.insecure)
    }
}
