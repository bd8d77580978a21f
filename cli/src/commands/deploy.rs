//! `berm deploy NAME FILE [--grant …]`, and `berm deploy --app DIR`
//! (in [`super::deploy_app`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use berm_control::{DeployRequest, Grant, LimitsSpec};

use super::upgrade::{print_changes, upgrade_changes, with_fs_dir};
use crate::Exit;

/// Arguments of `berm deploy`.
#[derive(clap::Args)]
pub struct Args {
    /// The name to deploy under (tools become NAME_TOOL).
    #[arg(required_unless_present = "app")]
    name: Option<String>,
    /// The program image: a .wasm file, or an OCI reference
    /// (`registry/repo:tag` or `…@sha256:…`) pulled and verified first.
    #[arg(required_unless_present = "app")]
    source: Option<String>,
    /// Deploy every program of this app folder (berm.toml) instead, under
    /// the names, grants and bounds it gives; the whole folder is checked
    /// before the first deploy.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["name", "source", "grants", "secrets", "deadline_ms", "memory_mb"])]
    app: Option<PathBuf>,
    /// With --app: deploy even over program names that hold what the folder did not create
    /// (a plain deploy, another folder's deployment, or the keyspace and stored secrets a
    /// removed one left), taking that state over. Without it such a folder is refused with
    /// the list, and nothing is deployed; with it the same list is printed.
    ///
    /// With NAME, or with --app for each program the folder replaces: deploy even when the
    /// new version changes what the model reads (the
    /// program's or a tool's description, a tool added or removed, a schema) or what it may
    /// reach (syscalls, programs called, grants not held before) compared with what NAME
    /// runs now. Without it such a deploy is refused with the list (`berm diff` shows it).
    #[arg(long)]
    accept: bool,
    /// Registry access, when SOURCE is a reference (or, with --app, for the programs the
    /// folder names by `image`).
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
    /// When SOURCE is a reference: refuse it, before anything is deployed, unless one of
    /// these public keys (`cosign.pub`) signed it. The trust policy
    /// (~/.config/berm/trust.toml) applies as well.
    #[arg(long = "verify-key", value_name = "PUB", conflicts_with = "app")]
    verify_keys: Vec<PathBuf>,
    /// What the program may reach: log, clock, random, kv,
    /// fs=DIR[:ro|:rw][:bytes=N][:entries=N], net=HOST[:PORT] (`*.example.com`
    /// wildcards; without a port, 80 for http and 443 for https),
    /// call=PROGRAM or call=PROGRAM_TOOL (the callee's own names: `berm.call`
    /// reaches only these, among the programs the manifest declares).
    /// Repeat for several; nothing is granted by default.
    #[arg(long = "grant", value_name = "GRANT")]
    grants: Vec<Grant>,
    /// Bind secret NAME to HOST[:PORT]: where the program writes
    /// `{{secret:NAME}}`, the value (set with `berm secret set`) is sent to
    /// this host only, over HTTPS only; NAME=http://HOST[:PORT] sends it over
    /// cleartext HTTP instead. Repeat for several hosts or secrets.
    #[arg(long = "secret", value_name = "NAME=HOST", value_parser = secret_binding)]
    secrets: Vec<Grant>,
    /// Wall-clock deadline of one call, in milliseconds.
    #[arg(long)]
    deadline_ms: Option<u64>,
    /// Memory cap, in MiB.
    #[arg(long)]
    memory_mb: Option<u64>,
    /// Print what was deployed as one JSON object: the program as bermd
    /// shows it, what it replaced and its served tool names (with --app, one
    /// such object per program under `deployed`).
    #[arg(long)]
    json: bool,
}

/// Deploys and prints what happened.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let (name, source) = match (args.app, args.name, args.source) {
        (Some(dir), _, _) => {
            let options = args.registry.options();
            return super::deploy_app::run(home, &dir, args.accept, args.json, &options).await;
        }
        (None, Some(name), Some(source)) => (name, source),
        // clap requires NAME and SOURCE unless --app is given.
        _ => anyhow::bail!("berm deploy needs NAME and FILE, or --app DIR"),
    };
    let image = if berm_oci::is_reference(&source) {
        let options = args.registry.options();
        let checked = super::trust::checked_reference(&source, &args.verify_keys, &options).await?;
        let pulled = berm_oci::pull(&checked.reference, &options)
            .await
            .with_context(|| format!("pulling {source}"))?;
        eprintln!("{pulled}");
        pulled.bytes
    } else {
        anyhow::ensure!(
            args.verify_keys.is_empty(),
            "--verify-key checks a signature on a registry, and `{source}` is a file: deploy it by reference, or without --verify-key"
        );
        let file = PathBuf::from(&source);
        std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?
    };
    // bermd resolves fs directories itself; relative ones are relative to
    // where the command ran, so make them absolute here.
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let grants: Vec<Grant> = args
        .grants
        .into_iter()
        .chain(args.secrets)
        .map(|grant| with_fs_dir(grant, |dir| cwd.join(dir)))
        .collect();
    let limits = LimitsSpec {
        deadline_ms: args.deadline_ms,
        memory_bytes: args.memory_mb.map(|mb| mb << 20),
    };
    check_upgrade(home, &name, &image, &grants, args.accept).await?;
    let deployed = super::client(home)
        .deploy(&name, &DeployRequest::new(&image, grants, limits))
        .await?;
    if args.json {
        super::print_json(&super::DeployedJson::new(&deployed))?;
        return Ok(Exit::Ok);
    }
    let program = &deployed.program;
    let tools = super::served_tools(program);
    crate::outln!(
        "deployed {} {} ({})",
        program.name,
        program.digest,
        program.code_source
    );
    if let Some(old) = &deployed.replaced {
        crate::outln!("  replaced {old}");
    }
    crate::outln!("  tools: {}", tools.join(", "));
    crate::outln!("  grants: {}", super::ls::grants_text(&program.grants));
    Ok(Exit::Ok)
}

/// Refuses, unless `accept`, a deploy over `name` that changes what the model reads or what
/// the program may reach; prints what changed either way.
async fn check_upgrade(
    home: &Path,
    name: &str,
    image: &[u8],
    grants: &[Grant],
    accept: bool,
) -> anyhow::Result<()> {
    let Some((digest, changes)) =
        upgrade_changes(&super::client(home), name, image, grants).await?
    else {
        return Ok(());
    };
    let needing: Vec<String> = changes
        .iter()
        .filter(|c| c.needs_acceptance())
        .map(|c| format!("  - {c}"))
        .collect();
    if !needing.is_empty() && !accept {
        anyhow::bail!(
            "deploying over `{name}` ({digest}) changes what the model reads or what it may reach; nothing was deployed:\n{}\nReview it (`berm diff {name} NEW` shows the same), then deploy again with --accept.",
            needing.join("\n")
        );
    }
    print_changes("", &changes);
    Ok(())
}

/// `--secret NAME=HOST[:PORT]` as the grant it is.
fn secret_binding(text: &str) -> Result<Grant, String> {
    format!("secret:{text}")
        .parse()
        .map_err(|e: berm_control::GrantParseError| e.to_string())
}
