//! What an app's bermd may reach in the guest: the paths PID 1 lays out for apps, and the
//! Landlock rules built from them. Below both the launcher ([`crate::apps`]), which lays the
//! paths out, and [`crate::confine`], which enforces the rules and digests their template.

/// Where app disks are mounted.
pub const APPS_DIR: &str = "/run/apps";

/// Every app's workspace lives under this.
pub const WORKSPACE: &str = "/workspace";

/// bermd in the rootfs.
pub const BERMD: &str = "/usr/bin/bermd";

/// What an app's bermd may read, execute and write (Landlock), by index and name: one place
/// for the plan PID 1 hands over and for the policy digest the rootfs pins
/// (`berm-init policy-sha256`).
pub struct AppRules {
    /// Read only: the app's share.
    pub read: Vec<String>,
    /// Read and execute: bermd itself, nothing else.
    pub exec: Vec<String>,
    /// Read and write, never execute: the app's workspace.
    pub write: Vec<String>,
}

impl AppRules {
    /// The rules of app `index` named `name`.
    pub fn of(index: u32, name: &str) -> Self {
        Self::with(&index.to_string(), name)
    }

    /// The rules of any app, `<index>` and `<app>` standing for its index and name: what the
    /// policy digest covers, so that every app of one build has the same digest.
    pub fn template() -> Self {
        Self::with("<index>", "<app>")
    }

    fn with(index: &str, name: &str) -> Self {
        Self {
            read: vec![format!("{APPS_DIR}/{index}")],
            exec: vec![BERMD.into()],
            write: vec![format!("{WORKSPACE}/{name}")],
        }
    }
}
