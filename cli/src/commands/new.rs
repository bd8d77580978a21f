//! `berm new NAME`: a program crate that builds with
//! `cargo build --target wasm32-unknown-unknown` and deploys as is.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::Exit;

/// Where the SDK is when berm runs from a source checkout.
const CHECKOUT_GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest");

/// Arguments of `berm new`.
#[derive(clap::Args)]
pub struct Args {
    /// The program's name (a-z, 0-9, `-`); also the directory created.
    name: String,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    path: Option<PathBuf>,
    /// The berm-guest SDK's directory (default: the one in berm's checkout).
    #[arg(long, env = "BERM_GUEST_PATH")]
    guest: Option<PathBuf>,
}

/// Writes the crate.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    let name = &args.name;
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        bail!(
            "`{name}` is not a valid program name: use 1-64 of a-z, 0-9, `-`, starting with a letter or digit (no `_`: it separates program and tool in served tool names)"
        );
    }
    let dir = args.path.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let guest = args.guest.unwrap_or_else(|| PathBuf::from(CHECKOUT_GUEST));
    let guest = std::fs::canonicalize(&guest).with_context(|| {
        format!("the berm-guest SDK is not at {}: pass --guest DIR (the guest/ folder of a berm checkout)", guest.display())
    })?;
    let module = name.replace('-', "_");
    write(&dir.join("Cargo.toml"), &cargo_toml(name, &guest))?;
    write(&dir.join("src/lib.rs"), &lib_rs(&module))?;
    write(&dir.join(".gitignore"), "/target\n")?;
    crate::outln!("created {}", dir.display());
    crate::outln!(
        "  build:  cd {} && cargo build --release --target wasm32-unknown-unknown",
        dir.display()
    );
    crate::outln!(
        "  deploy: berm deploy {name} target/wasm32-unknown-unknown/release/{module}.wasm"
    );
    Ok(Exit::Ok)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn cargo_toml(name: &str, guest: &Path) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
berm-guest = {{ path = "{guest}" }}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

# A program is its own workspace: it never builds for the host.
[workspace]

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
panic = "abort"
strip = "debuginfo"
"#,
        guest = guest.display()
    )
}

fn lib_rs(module: &str) -> String {
    format!(
        r#"//! {module}: a berm program.

/// What this program is, for people and models.
///
/// # Usage
/// When a model should reach for it.
#[berm_guest::program]
mod {module} {{
    /// Greet someone by name.
    ///
    /// # Arguments
    /// - `name`: who to greet
    #[berm(read_only, idempotent)]
    pub fn hello(name: String) -> String {{
        format!("hello, {{name}}")
    }}
}}
"#
    )
}
