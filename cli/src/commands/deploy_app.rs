//! `berm deploy --app DIR`: every program of an app folder, to the running
//! bermd.
//!
//! All or nothing from the user's point of view: the whole folder (berm.toml,
//! every wasm file and its manifest) is read and checked before the first
//! deploy, and if bermd still refuses a program, the programs this command
//! had newly deployed are removed again and the message names the program.
//!
//! A folder deployed over names that hold what it did not create (a plain deploy,
//! another folder's deployment, state a removed deployment left) is refused before
//! anything is written, listing it, unless `--accept` is given ([`berm_control::inherit`]).
//! Each deployment is recorded with the folder it came from, so redeploying the same
//! folder needs nothing. A program whose new version changes what the model reads or what
//! it may reach is refused the same way, unless `--accept` (see `berm deploy NAME`).

use std::path::Path;

use anyhow::Context;
use berm_control::inherit::{Leftovers, Takeover};
use berm_control::{Client, DeployRequest, Grant, LimitsSpec, SecretValue};

use crate::Exit;

/// One program of the folder, read and checked, ready to send.
struct Prepared {
    name: String,
    image: Vec<u8>,
    /// berm.toml's `accept` names exactly these bytes.
    accepted: bool,
    /// berm.toml's `accept`, when it names other bytes: a stale acceptance.
    stale_accept: Option<String>,
    grants: Vec<Grant>,
    limits: LimitsSpec,
    /// berm.toml's `[program.serve_as]`.
    serve_as: std::collections::BTreeMap<String, String>,
}

/// Deploys every program of the folder `dir` and prints what happened (as one JSON object
/// when `json`).
pub async fn run(
    home: &Path,
    dir: &Path,
    accept: bool,
    json: bool,
    options: &berm_oci::RegistryOptions,
) -> anyhow::Result<Exit> {
    let mut app = berm_app::load(dir)?;
    // Programs named by `image` are pulled (the trust policy applies) into the program
    // store bermd reads, $BERM_HOME/programs, and read from there, verified.
    let store = berm_app::ProgramStore::new(home.join(berm_app::store::DEFAULT_DIR));
    for pulled in super::dist::pull_images(&app, &store, &[], options).await? {
        if pulled.status == "pulled" && !json {
            eprintln!(
                "pulled {} {} ({})",
                pulled.program, pulled.reference, pulled.sha256
            );
        }
    }
    app.resolve_images(&store)?;
    // Where bermd keeps an app's files: `fs=DIR` means `$BERM_HOME/data/DIR`,
    // as under `bermd --app`.
    let prepared = prepare(&app, &home.join("data"))?;
    let secrets = secret_values(&app)?;
    let client = super::client(home);
    let takeover = takeover(&client, &app).await?.check(accept)?;
    let upgrades = upgrades(&client, &prepared).await?;
    // A program whose berm.toml `accept` names its bytes needs no --accept.
    let accepted_in_folder = |name: &str| prepared.iter().any(|p| p.name == name && p.accepted);
    let needing: Vec<String> = upgrades
        .iter()
        .filter(|(name, _)| !accepted_in_folder(name))
        .flat_map(|(name, changes)| {
            changes
                .iter()
                .filter(|c| c.needs_acceptance())
                .map(move |c| format!("  - {name}: {c}"))
        })
        .collect();
    if !needing.is_empty() && !accept {
        let stale: Vec<String> = prepared
            .iter()
            .filter(|p| upgrades.iter().any(|(name, _)| name == &p.name))
            .filter_map(|p| {
                let named = p.stale_accept.as_ref()?;
                Some(format!(
                    "  berm.toml's `accept` for `{}` names sha256:{named}, not this version, sha256:{}",
                    p.name,
                    berm_app::sha256_hex(&p.image)
                ))
            })
            .collect();
        let stale = if stale.is_empty() {
            String::new()
        } else {
            format!("\n{}", stale.join("\n"))
        };
        anyhow::bail!(
            "app `{}` changes what the model reads or what its programs may reach, compared with what runs now; nothing was deployed:\n{}{stale}\nReview it, then deploy again with --accept, or record the acceptance in berm.toml: accept = \"sha256:<the new version>\" in the program's [[program]].",
            app.name,
            needing.join("\n")
        );
    }
    if !takeover.is_empty() && !json {
        println!("{}", takeover.notice());
    }
    for (name, changes) in &upgrades {
        super::upgrade::print_changes(&format!("{name}: "), changes);
    }
    // bermd wants fs directories to exist; create them only once the whole
    // folder has been checked.
    for program in &prepared {
        for grant in &program.grants {
            if let Grant::Fs { dir, .. } = grant {
                std::fs::create_dir_all(dir).with_context(|| {
                    format!("creating {} for `{}`", dir.display(), program.name)
                })?;
            }
        }
    }

    for (program, name, value) in secrets {
        client
            .set_secret(&program, &name, &SecretValue { value })
            .await
            .with_context(|| format!("app `{}`: setting secret {name} of {program}", app.name))?;
        if !json {
            crate::outln!("set secret {name} of {program} from [program.secrets]");
        }
    }
    let mut added = Vec::new();
    let mut replaced = Vec::new();
    let mut responses = Vec::new();
    for program in prepared {
        let mut request =
            DeployRequest::new(&program.image, program.grants, program.limits).from_app(&app.dir);
        request.serve_as = program.serve_as;
        match client.deploy(&program.name, &request).await {
            Ok(deployed) => {
                let view = &deployed.program;
                if !json {
                    crate::outln!(
                        "deployed {} {} ({})",
                        view.name,
                        view.digest,
                        view.code_source
                    );
                }
                match &deployed.replaced {
                    Some(old) => {
                        if !json {
                            crate::outln!("  replaced {old}");
                        }
                        replaced.push(program.name);
                    }
                    None => added.push(program.name),
                }
                responses.push(deployed);
            }
            Err(e) => {
                let mut undone = Vec::new();
                for name in &added {
                    if client.remove(name).await.is_ok() {
                        undone.push(name.as_str());
                    }
                }
                let mut message = format!(
                    "app `{}`: program `{}` was refused: {e}",
                    app.name, program.name
                );
                if !undone.is_empty() {
                    message.push_str(&format!("; removed again: {}", undone.join(", ")));
                }
                if !replaced.is_empty() {
                    message.push_str(&format!(
                        "; already replaced (now the folder's version): {}",
                        replaced.join(", ")
                    ));
                }
                anyhow::bail!(message);
            }
        }
    }
    if json {
        let deployed: Vec<_> = responses.iter().map(super::DeployedJson::new).collect();
        super::print_json(&serde_json::json!({
            "app": app.name,
            "dir": app.dir,
            "accepted": takeover.programs,
            "deployed": deployed,
        }))?;
        return Ok(Exit::Ok);
    }
    crate::outln!(
        "app {}: {} program(s) deployed from {}",
        app.name,
        added.len() + replaced.len(),
        app.dir.display()
    );
    Ok(Exit::Ok)
}

/// What `app`'s programs would take over under their names in bermd's home. Its
/// deployments are recorded with the folder, so state with no deployment behind it was left
/// by a removed deployment, not by this folder ([`Leftovers::Foreign`]).
async fn takeover(client: &Client, app: &berm_app::App) -> anyhow::Result<Takeover> {
    let mut takeover = Takeover::new(&app.name, &app.dir);
    for program in &app.programs {
        // The folder's [program.secrets] replace the stored values of those names.
        let sets: Vec<&str> = program.secret_files.keys().map(String::as_str).collect();
        let state = client.state(&program.name).await.with_context(|| {
            format!("app `{}`: what `{}` holds in bermd", app.name, program.name)
        })?;
        takeover.add(&state, &sets, Leftovers::Foreign);
    }
    Ok(takeover)
}

/// For each program of the folder already deployed, what its new version changes.
async fn upgrades(
    client: &Client,
    prepared: &[Prepared],
) -> anyhow::Result<Vec<(String, Vec<berm_manifest::upgrade::Change>)>> {
    let mut all = Vec::new();
    for program in prepared {
        if let Some((_, changes)) =
            super::upgrade::upgrade_changes(client, &program.name, &program.image, &program.grants)
                .await?
            && !changes.is_empty()
        {
            all.push((program.name.clone(), changes));
        }
    }
    Ok(all)
}

/// Reads and checks every program of `app` and resolves its grants against `data`, before
/// anything is deployed.
fn prepare(app: &berm_app::App, data: &Path) -> anyhow::Result<Vec<Prepared>> {
    let mut prepared = Vec::with_capacity(app.programs.len());
    for program in &app.programs {
        let image = program.read()?;
        berm_manifest::Manifest::from_image(&image)
            .and_then(|m| m.check())
            .with_context(|| {
                format!(
                    "app `{}`: program `{}` ({}) cannot be deployed; nothing was deployed",
                    app.name,
                    program.name,
                    program.wasm.display()
                )
            })?;
        let grants = program.resolve_grants(data);
        let digest = berm_app::sha256_hex(&image);
        prepared.push(Prepared {
            name: program.name.clone(),
            accepted: program.accept.as_deref() == Some(digest.as_str()),
            stale_accept: program.accept.clone().filter(|a| *a != digest),
            image,
            grants,
            limits: LimitsSpec {
                deadline_ms: app.call_deadline_ms,
                memory_bytes: program.memory_mb.map(|mb| mb << 20),
            },
            serve_as: program.serve_as.clone(),
        });
    }
    Ok(prepared)
}

/// The values each program's `[program.secrets]` names, read from their
/// files (checked as bermd checks them) before anything is deployed:
/// `(program, name, value)`, each program with its own.
fn secret_values(app: &berm_app::App) -> anyhow::Result<Vec<(String, String, String)>> {
    let mut values = Vec::new();
    for program in &app.programs {
        for (name, path) in &program.secret_files {
            let value = berm_egress::secret::read_value_file(name, path).with_context(|| {
                format!(
                    "app `{}`: program `{}`: [program.secrets] {name}; nothing was deployed",
                    app.name, program.name
                )
            })?;
            let value = String::from_utf8(value).map_err(|_| {
                anyhow::anyhow!(
                    "app `{}`: program `{}`: [program.secrets] {name}: {} is not UTF-8 text; \
                     nothing was deployed",
                    app.name,
                    program.name,
                    path.display()
                )
            })?;
            values.push((program.name.clone(), name.clone(), value));
        }
    }
    Ok(values)
}
