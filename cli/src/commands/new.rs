//! `berm new [--lang LANG] NAME`: a program project that builds with one command and
//! deploys as is: a core-module crate for the Rust SDK (the default, `rust-core`), or a
//! WebAssembly component written in Rust (wit-bindgen), TypeScript (sdk/ts) or Python
//! (sdk/python). The component templates are compiled into berm (`cli/templates/`); the
//! TypeScript and Python ones build with the SDK of berm's checkout, as `rust-core` does.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::Exit;

/// Where the SDK is when berm runs from a source checkout.
const CHECKOUT_GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest");
/// Where the TypeScript and Python SDKs are when berm runs from a source checkout.
const CHECKOUT_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");
/// berm's WIT package, copied into a Rust component's `wit/deps/`.
const PROGRAM_WIT: &str = include_str!("../../../wit/program.wit");

/// The language a program is written in, and so what it is built into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A core module with the Rust SDK (berm-guest), for wasm32-unknown-unknown.
    RustCore,
    /// A component in Rust with wit-bindgen, for wasm32-wasip2; tools are its WIT exports.
    Rust,
    /// A component in TypeScript with sdk/ts (componentize-js).
    Ts,
    /// A component in Python with sdk/python (componentize-py).
    Python,
}

/// Arguments of `berm new`.
#[derive(clap::Args)]
pub struct Args {
    /// The program's name (a-z, 0-9, `-`); also the directory created.
    name: String,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    path: Option<PathBuf>,
    /// The language: rust-core (the default), rust, ts or python.
    #[arg(long, value_enum, default_value = "rust-core")]
    lang: Lang,
    /// The berm-guest SDK's directory, for rust-core (default: the one in berm's checkout).
    #[arg(long, env = "BERM_GUEST_PATH")]
    guest: Option<PathBuf>,
    /// The sdk/ directory of berm's checkout, for ts and python (default: this berm's).
    #[arg(long, env = "BERM_SDK_PATH")]
    sdk: Option<PathBuf>,
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
    let dir = args.path.clone().unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let module = name.replace('-', "_");
    let build = match args.lang {
        Lang::RustCore => rust_core(&args, &dir, &module)?,
        Lang::Rust => rust_component(&args, &dir, &module)?,
        Lang::Ts | Lang::Python => scripted(&args, &dir, &module)?,
    };
    crate::outln!("created {}", dir.display());
    crate::outln!("  build:  cd {} && {}", dir.display(), build.command);
    crate::outln!(
        "  deploy: berm deploy {name} {}{}",
        build.output,
        build.grants
    );
    Ok(Exit::Ok)
}

/// How a scaffolded project is built: its one command, the file it makes, and the grants
/// its program needs whatever it does.
struct Build {
    command: &'static str,
    output: String,
    grants: &'static str,
}

fn rust_core(args: &Args, dir: &Path, module: &str) -> anyhow::Result<Build> {
    let guest = args
        .guest
        .clone()
        .unwrap_or_else(|| PathBuf::from(CHECKOUT_GUEST));
    let guest = std::fs::canonicalize(&guest).with_context(|| {
        format!("the berm-guest SDK is not at {}: pass --guest DIR (the guest/ folder of a berm checkout)", guest.display())
    })?;
    write(&dir.join("Cargo.toml"), &cargo_toml(&args.name, &guest))?;
    write(&dir.join("src/lib.rs"), &lib_rs(module))?;
    write(&dir.join(".gitignore"), "/target\n")?;
    Ok(Build {
        command: "cargo build --release --target wasm32-unknown-unknown",
        output: format!("target/wasm32-unknown-unknown/release/{module}.wasm"),
        grants: "",
    })
}

fn rust_component(args: &Args, dir: &Path, module: &str) -> anyhow::Result<Build> {
    let fill = |t: &str| fill(t, &args.name, module, Path::new(""));
    write(
        &dir.join("Cargo.toml"),
        &fill(include_str!("../../templates/rust/Cargo.toml")),
    )?;
    write(
        &dir.join("src/lib.rs"),
        &fill(include_str!("../../templates/rust/lib.rs")),
    )?;
    write(
        &dir.join("wit/world.wit"),
        include_str!("../../templates/rust/world.wit"),
    )?;
    write(&dir.join("wit/deps/berm/program.wit"), PROGRAM_WIT)?;
    write(
        &dir.join(".gitignore"),
        include_str!("../../templates/rust/gitignore"),
    )?;
    Ok(Build {
        command: "cargo build --release --target wasm32-wasip2",
        output: format!("target/wasm32-wasip2/release/{module}.wasm"),
        grants: "",
    })
}

/// The TypeScript and Python projects: built by the SDK's build script in berm's checkout.
fn scripted(args: &Args, dir: &Path, module: &str) -> anyhow::Result<Build> {
    let sdk = args
        .sdk
        .clone()
        .unwrap_or_else(|| PathBuf::from(CHECKOUT_SDK));
    let sdk = std::fs::canonicalize(&sdk).with_context(|| {
        format!(
            "berm's SDKs are not at {}: pass --sdk DIR (the sdk/ folder of a berm checkout)",
            sdk.display()
        )
    })?;
    let fill = |t: &str| fill(t, &args.name, module, &sdk);
    let name = &args.name;
    if args.lang == Lang::Ts {
        write(
            &dir.join("package.json"),
            &fill(include_str!("../../templates/ts/package.json")),
        )?;
        write(
            &dir.join("tsconfig.json"),
            &fill(include_str!("../../templates/ts/tsconfig.json")),
        )?;
        write(
            &dir.join(format!("src/{name}.ts")),
            &fill(include_str!("../../templates/ts/program.ts")),
        )?;
        write(
            &dir.join(".gitignore"),
            &fill(include_str!("../../templates/ts/gitignore")),
        )?;
        return Ok(Build {
            command: "npm run build",
            output: format!("{name}.wasm"),
            grants: "",
        });
    }
    write(
        &dir.join(format!("{module}.py")),
        &fill(include_str!("../../templates/python/program.py")),
    )?;
    let build = dir.join("build");
    write(&build, &fill(include_str!("../../templates/python/build")))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", build.display()))?;
    write(
        &dir.join(".gitignore"),
        &fill(include_str!("../../templates/python/gitignore")),
    )?;
    Ok(Build {
        command: "./build",
        output: format!("{name}.wasm"),
        // CPython reseeds itself from wasi:random at every call (componentize-py does, so
        // that no seed is baked into the build).
        grants: " --grant random",
    })
}

/// A template with its placeholders filled in.
fn fill(template: &str, name: &str, module: &str, sdk: &Path) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{module}}", module)
        .replace("{{sdk}}", &sdk.display().to_string())
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
