//! `berm push`, `pull`, `search` and `index`: the flags, and thin calls into berm-oci and
//! berm-index (which take typed options and know nothing of clap). The CLI pulls and
//! verifies; bermd never talks to a registry.
//!
//! ```text
//! berm push REF FILE [--sign-key KEY] [--insecure]
//! berm pull REF -o FILE [--verify-key PUB]… [--insecure]
//! berm search TEXT… [--limit N] [--index-dir DIR]
//! berm index update [--index URL|PATH] [--index-dir DIR]
//! berm index add REF [--name NAME] [--publisher WHO] [--index-dir DIR] [--insecure]
//! ```

use std::path::PathBuf;

use anyhow::Context;

use berm_index::{DEFAULT_INDEX_URL, default_index_dir};
use berm_oci::RegistryOptions;

use crate::Exit;

use super::registry::RegistryArgs;

/// `berm push REF FILE`: publish a program to a registry.
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// Where to push, e.g. `ghcr.io/org/echo:v1` or `127.0.0.1:5000/echo:v1`.
    #[arg(value_name = "REF")]
    reference: String,
    /// The program: a `.wasm` module built with berm-guest.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Sign what was pushed with this cosign private key ($COSIGN_PASSWORD), as
    /// `berm trust sign` does; the key is read before anything is pushed.
    #[arg(long, value_name = "KEY")]
    sign_key: Option<PathBuf>,
    /// Print what was pushed as one JSON object.
    #[arg(long)]
    json: bool,
    /// Registry access.
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `berm pull REF -o FILE`: fetch a program and write it, verified.
#[derive(Debug, Clone, clap::Args)]
pub struct PullArgs {
    /// What to pull: `host/repo:tag` or `host/repo@sha256:<manifest digest>`.
    #[arg(
        value_name = "REF",
        required_unless_present = "app",
        conflicts_with = "app"
    )]
    reference: Option<String>,
    /// Where to write the module; replaced atomically, untouched on failure.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        required_unless_present = "app"
    )]
    output: Option<PathBuf>,
    /// Instead of one REF: every program the app folder's berm.toml names by `image`, into
    /// the program store (--store), verified, so that bermd --app and berm-vmm (which never
    /// talk to a registry) find them. What the store already holds, verified, is kept; it is
    /// held to --verify-key and the trust policy all the same.
    #[arg(long, value_name = "DIR", conflicts_with = "output")]
    app: Option<PathBuf>,
    /// The program store --app fills [default: $BERM_HOME/programs, where bermd looks].
    #[arg(long, value_name = "DIR", requires = "app")]
    store: Option<PathBuf>,
    /// Refuse the program unless one of these public keys (`cosign.pub`) signed it; the
    /// trust policy's rules apply as well.
    #[arg(long = "verify-key", value_name = "PUB")]
    verify_keys: Vec<PathBuf>,
    /// Print what was pulled as one JSON object.
    #[arg(long)]
    json: bool,
    /// Registry access.
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Where the local clone of the index is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IndexDirArgs {
    /// The local clone [default: $BERM_HOME/index, else ~/.berm/index].
    #[arg(long = "index-dir", value_name = "DIR", env = "BERM_INDEX_DIR")]
    index_dir: Option<PathBuf>,
}

impl IndexDirArgs {
    /// The directory chosen, or the default.
    fn dir(&self) -> PathBuf {
        self.index_dir.clone().unwrap_or_else(default_index_dir)
    }
}

/// `berm search TEXT…`: ranked search of the local clone.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchArgs {
    /// What to look for, in words: "read a file", "key value store".
    #[arg(value_name = "TEXT", required = true, num_args = 1..)]
    text: Vec<String>,
    /// At most this many results.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Print the results as a JSON array, best first (entry fields and `score`).
    #[arg(long)]
    json: bool,
    /// The clone to search.
    #[command(flatten)]
    index: IndexDirArgs,
}

/// `berm index …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum IndexCommand {
    /// Clone the index, or fast-forward the local clone.
    Update(UpdateArgs),
    /// Write the entry for a pushed program into the local clone.
    Add(AddArgs),
}

/// `berm index update`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpdateArgs {
    /// The index repository: a git URL or a local path.
    #[arg(long = "index", value_name = "URL|PATH", env = "BERM_INDEX_URL", default_value = DEFAULT_INDEX_URL)]
    source: String,
    /// Where the clone goes.
    #[command(flatten)]
    index: IndexDirArgs,
}

/// `berm index add REF`.
#[derive(Debug, Clone, clap::Args)]
pub struct AddArgs {
    /// The pushed program, e.g. `ghcr.io/org/echo:v1` (the entry pins its digest).
    #[arg(value_name = "REF")]
    reference: String,
    /// The program's name in the index [default: the repository's last segment].
    #[arg(long)]
    name: Option<String>,
    /// Who publishes it [default: the registry host and namespace].
    #[arg(long)]
    publisher: Option<String>,
    /// The clone to write into.
    #[command(flatten)]
    index: IndexDirArgs,
    /// Registry access.
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `berm push REF FILE`: refuses a module that would not deploy, pushes it.
pub async fn push(args: PushArgs) -> anyhow::Result<Exit> {
    let key = match &args.sign_key {
        Some(path) => Some(super::trust::load_signing_key(path)?),
        None => None,
    };
    let options = args.registry.options();
    let pushed = berm_oci::push_file(&args.reference, &args.file, &options).await?;
    let signed = match &key {
        Some(key) => Some(
            berm_trust::sign(&pushed, key, &options)
                .await
                .with_context(|| format!("pushed {}, but signing it failed", pushed.pinned))?,
        ),
        None => None,
    };
    if args.json {
        let mut value = serde_json::to_value(&pushed)?;
        if let Some(signed) = &signed {
            value["signed"] = serde_json::to_value(signed)?;
        }
        super::print_json(&value)?;
    } else {
        crate::outln!("{pushed}");
        if let Some(signed) = &signed {
            crate::outln!("signed   {} ({})", signed.signatures, signed.key);
        }
    }
    Ok(Exit::Ok)
}

/// `berm pull REF -o FILE`: on any error the output file is left as it was.
pub async fn pull(args: PullArgs) -> anyhow::Result<Exit> {
    let options = args.registry.options();
    if let Some(dir) = &args.app {
        let app = berm_app::load(dir)?;
        let store = berm_app::ProgramStore::new(args.store.clone().unwrap_or_else(default_store));
        let pulled = pull_images(&app, &store, &args.verify_keys, &options).await?;
        if args.json {
            super::print_json(&serde_json::json!({
                "store": store.dir(),
                "programs": pulled,
            }))?;
        } else if pulled.is_empty() {
            crate::outln!("{}: no program is named by image", app.dir.display());
        } else {
            for p in &pulled {
                crate::outln!(
                    "{:<8} {} {} ({})",
                    p.status,
                    p.program,
                    p.reference,
                    p.sha256
                );
            }
        }
        return Ok(Exit::Ok);
    }
    let (Some(reference), Some(output)) = (&args.reference, &args.output) else {
        anyhow::bail!("give REF and -o FILE, or --app DIR");
    };
    let checked = super::trust::checked_reference(reference, &args.verify_keys, &options).await?;
    let pulled = berm_oci::pull_to(&checked.reference, output, &options).await?;
    if args.json {
        // The module itself is in the output file; the object says what it is.
        super::print_json(&serde_json::json!({
            "output": output,
            "pulled": pulled.described,
        }))?;
    } else {
        crate::outln!("{pulled}");
    }
    Ok(Exit::Ok)
}

/// The program store bermd reads by default: `$BERM_HOME/programs`.
pub fn default_store() -> PathBuf {
    berm_control::home::berm_home().join(berm_app::store::DEFAULT_DIR)
}

/// Before a VM boots the app folders `dirs`: every program they name by image, in the
/// default program store ([`default_store`]), pulled where missing (registry access from
/// the environment; the trust policy applies). Says on stderr what it pulled.
pub async fn pull_folders(dirs: &[PathBuf]) -> anyhow::Result<()> {
    let store = berm_app::ProgramStore::new(default_store());
    let options = RegistryOptions::from_environment(false);
    for dir in dirs {
        let app = berm_app::load(dir)?;
        for pulled in pull_images(&app, &store, &[], &options).await? {
            if pulled.status == "pulled" {
                eprintln!(
                    "pulled {} {} ({})",
                    pulled.program, pulled.reference, pulled.sha256
                );
            }
        }
    }
    Ok(())
}

/// One program of a folder, in the store.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PulledImage {
    /// The program's name in the folder.
    pub program: String,
    /// Its reference, as berm.toml pins it.
    pub reference: String,
    /// The module's sha256 (`sha256:<hex>`).
    pub sha256: String,
    /// `pulled`, or `present` when the store already held it, verified.
    pub status: &'static str,
}

/// Brings every program `app` names by image into `store`, each held to the trust policy
/// (and `verify_keys`) whether or not the store already holds it: kept when the store holds
/// it, it verifies (manifest and module) and every required signature holds (recorded for
/// its repository, else read from the registry: [`super::trust::check_stored`]); else pulled
/// by its pinned reference once the signatures hold, verified, stored, and the signatures
/// recorded beside it. Nothing of a program that fails is stored.
pub async fn pull_images(
    app: &berm_app::App,
    store: &berm_app::ProgramStore,
    verify_keys: &[PathBuf],
    options: &berm_oci::RegistryOptions,
) -> anyhow::Result<Vec<PulledImage>> {
    let mut pulled = Vec::new();
    for (program, image) in app.images() {
        let entry = |sha256: &str, status| PulledImage {
            program: program.name.clone(),
            reference: image.reference.clone(),
            sha256: format!("sha256:{sha256}"),
            status,
        };
        let mut held = program.clone();
        if let Ok(stored) = store.get(image) {
            held.wasm = stored.wasm;
            held.expected_sha256 = Some(stored.sha256.clone());
            if held.read().is_ok() {
                super::trust::check_stored(image, &store.provenance(image), verify_keys, options)
                    .await
                    .with_context(|| format!("program `{}`", program.name))?;
                pulled.push(entry(&stored.sha256, "present"));
                continue;
            }
        }
        let checked = super::trust::checked_reference(&image.reference, verify_keys, options)
            .await
            .with_context(|| format!("program `{}`", program.name))?;
        let reference = checked.reference;
        let got = berm_oci::pull(&reference, options)
            .await
            .with_context(|| format!("program `{}`: pulling {reference}", program.name))?;
        if got.described.manifest_digest != image.manifest_digest() {
            anyhow::bail!(
                "program `{}`: {reference} is the manifest {}, not the {} berm.toml pins",
                program.name,
                got.described.manifest_digest,
                image.manifest_digest()
            );
        }
        let stored = store
            .put(image, &got.manifest_bytes, &got.bytes)
            .with_context(|| format!("program `{}`", program.name))?;
        super::trust::record_pulled(
            &image.reference,
            &store.provenance(image),
            &checked.verified,
        )
        .with_context(|| format!("program `{}`", program.name))?;
        pulled.push(entry(&stored.sha256, "pulled"));
    }
    Ok(pulled)
}

/// `berm search TEXT…`: ranked results on stdout, skipped entries on stderr.
pub fn search(args: SearchArgs) -> anyhow::Result<Exit> {
    let (dir, query) = (args.index.dir(), args.text.join(" "));
    let (out, warnings) = if args.json {
        let (found, warnings) = berm_index::search(&dir, &query, args.limit)?;
        (format!("{}\n", serde_json::to_string(&found)?), warnings)
    } else {
        berm_index::search_text(&dir, &query, args.limit)?
    };
    for warning in warnings {
        eprintln!("berm: {warning}");
    }
    crate::out!("{out}");
    Ok(Exit::Ok)
}

/// `berm index update|add`.
pub async fn index(command: IndexCommand) -> anyhow::Result<Exit> {
    match command {
        IndexCommand::Update(args) => {
            crate::outln!("{}", berm_index::update(&args.source, &args.index.dir())?)
        }
        IndexCommand::Add(args) => {
            let (dir, options) = (args.index.dir(), args.registry.options());
            let added = berm_index::add(
                &args.reference,
                args.name.as_deref(),
                args.publisher.as_deref(),
                &dir,
                &options,
            );
            crate::outln!("{}", added.await?)
        }
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    enum Cmd {
        Push(PushArgs),
        Pull(PullArgs),
    }

    #[test]
    fn flags_parse() {
        let Cmd::Pull(p) = Cmd::parse_from(["t", "pull", "h/r:t", "-o", "x.wasm", "--insecure"])
        else {
            panic!("not pull")
        };
        assert!(p.registry.insecure);
        assert_eq!(p.output, Some(PathBuf::from("x.wasm")));
        let Cmd::Push(p) = Cmd::parse_from(["t", "push", "h/r:t", "f.wasm"]) else {
            panic!("not push")
        };
        assert!(!p.registry.insecure);
        assert_eq!(p.reference, "h/r:t");
    }
}
