//! `berm inspect FILE|NAME`: what an image claims (description, tools with
//! schemas, programs it calls) and reaches (the syscalls it imports), read
//! with `Manifest::from_image` without compiling, and the grants it runs with
//! where it is deployed.

use std::path::Path;

use anyhow::Context;
use berm_control::{ClientError, Grant, ProgramView};
use berm_manifest::Manifest;
use sha2::{Digest as _, Sha256};

use crate::Exit;

/// Arguments of `berm inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// An image file, the name of a deployed program, or a registry reference
    /// (`host/repo:tag`, `host/repo@sha256:…`: pulled and verified, then shown with its
    /// signatures).
    target: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// For a reference: check its signatures against this public key (`cosign.pub`; repeat
    /// for several) and show which holds. The trust policy's rules for it are checked too.
    #[arg(long = "verify-key", value_name = "PUB")]
    verify_keys: Vec<std::path::PathBuf>,
    /// Registry access, for a reference.
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
}

/// Who signed a program on a registry, as far as can be checked: `signatures` stored, and
/// for each required signer (`--verify-key`, the trust policy) the key that verified or why
/// none did.
#[derive(serde::Serialize)]
struct Signatures {
    stored_at: String,
    count: usize,
    verified: Vec<berm_trust::Verified>,
    failed: Vec<String>,
}

/// Prints the inspection.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let client = super::client(home);
    let path = Path::new(&args.target);
    let mut signatures = None;
    let (digest, manifest, deployments) = if !path.is_file() && berm_oci::is_reference(&args.target)
    {
        let options = args.registry.options();
        let pulled = berm_oci::pull(&args.target, &options)
            .await
            .with_context(|| format!("pulling {}", args.target))?;
        let described = pulled.described;
        let stored = berm_oci::signatures(&described, &options).await?;
        let mut checked = Signatures {
            stored_at: stored.reference,
            count: stored.signatures.len(),
            verified: Vec::new(),
            failed: Vec::new(),
        };
        for signer in super::trust::signers_for(&described.pinned, &args.verify_keys)? {
            match berm_trust::verify(&described, &signer, &options).await {
                Ok(v) => checked.verified.push(v),
                Err(e) => checked.failed.push(e.to_string()),
            }
        }
        signatures = Some(checked);
        let deployments: Vec<ProgramView> = match client.list().await {
            Ok(list) => list
                .into_iter()
                .filter(|p| p.digest == described.digest.to_string())
                .collect(),
            Err(ClientError::NotRunning { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        (
            described.digest.to_string(),
            described.manifest,
            deployments,
        )
    } else if path.is_file() {
        let image = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&image)));
        let manifest =
            Manifest::from_image(&image).with_context(|| format!("reading {}", path.display()))?;
        manifest
            .check()
            .with_context(|| format!("checking {}", path.display()))?;
        // Grants belong to deployments: show those of this image, if bermd
        // runs; an image on its own has none.
        let deployments: Vec<ProgramView> = match client.list().await {
            Ok(list) => list.into_iter().filter(|p| p.digest == digest).collect(),
            Err(ClientError::NotRunning { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        (digest, manifest, deployments)
    } else {
        let view = client.get(&args.target).await.with_context(|| {
            format!(
                "`{}` is neither an image file nor a deployed program",
                args.target
            )
        })?;
        (view.digest.clone(), view.manifest.clone(), vec![view])
    };
    if args.json {
        let grants: serde_json::Map<String, serde_json::Value> = deployments
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    serde_json::to_value(&d.grants).unwrap_or_default(),
                )
            })
            .collect();
        let out = serde_json::json!({
            "digest": digest,
            "description": manifest.description,
            "usage": manifest.usage,
            "tools": manifest.tools,
            "syscalls": manifest.syscalls.iter().map(|s| s.qualified()).collect::<Vec<_>>(),
            "calls": manifest.calls,
            "grants": grants,
            "signatures": signatures,
            "component": manifest.component,
        });
        crate::outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(Exit::Ok);
    }
    crate::outln!("digest: {digest}");
    if let Some(signatures) = &signatures {
        crate::outln!(
            "signatures: {} stored at {}",
            signatures.count,
            signatures.stored_at
        );
        for v in &signatures.verified {
            crate::outln!("  signed by {} ({})", v.key_source, v.key);
        }
        for failed in &signatures.failed {
            crate::outln!("  NOT verified: {failed}");
        }
        if signatures.verified.is_empty() && signatures.failed.is_empty() && signatures.count > 0 {
            crate::outln!("  (who signed is checked against keys: pass --verify-key cosign.pub)");
        }
    }
    crate::outln!("description: {}", manifest.description.trim());
    if !manifest.usage.trim().is_empty() {
        crate::outln!("usage: {}", manifest.usage.trim());
    }
    let syscalls: Vec<_> = manifest.syscalls.iter().map(|s| s.qualified()).collect();
    crate::outln!(
        "syscalls imported: {}",
        if syscalls.is_empty() {
            "none".into()
        } else {
            syscalls.join(", ")
        }
    );
    if let Some(component) = &manifest.component {
        crate::outln!("a WebAssembly component (docs/components.md); it imports:");
        if component.imports.is_empty() {
            crate::outln!("  nothing");
        }
        for import in &component.imports {
            let needs = match import.grant.as_deref() {
                None => "always linked: reaches nothing outside the call".to_string(),
                Some(berm_manifest::component::SOCKETS) => "never linked: no sockets".to_string(),
                Some(module) => format!("needs `{}`", berm_abi::grant_for(module)),
            };
            crate::outln!("  {} ({needs})", import.name);
        }
        if component.tools_from == berm_manifest::ToolsFrom::Exports {
            crate::outln!("tools: its exported functions (it carries no berm manifest)");
        }
        for skipped in &component.skipped {
            crate::outln!("  not a tool: {skipped}");
        }
    }
    // The manifest's `calls` is enforced: a call to any other program is refused, whatever
    // the grants, so this is the most it can ever reach by `berm.call`.
    crate::outln!(
        "programs called: {}",
        if manifest.calls.is_empty() {
            "none".into()
        } else {
            format!(
                "{} (only these, and only as granted by call=)",
                manifest.calls.join(", ")
            )
        }
    );
    if deployments.is_empty() {
        crate::outln!("grants: not deployed");
    }
    for deployment in &deployments {
        crate::outln!(
            "grants ({}): {}",
            deployment.name,
            super::ls::grants_text(&deployment.grants)
        );
        let missing = missing_grants(&manifest, &deployment.grants);
        if !missing.is_empty() {
            crate::outln!(
                "  imported but not granted (these trap when called): {}",
                missing.join(", ")
            );
        }
    }
    crate::outln!("tools:");
    for tool in &manifest.tools {
        crate::outln!(
            "  {} — {}",
            tool.name,
            tool.description.lines().next().unwrap_or("")
        );
        crate::outln!("    input: {}", serde_json::to_string(&tool.input_schema)?);
        if let Some(output) = &tool.output_schema {
            crate::outln!("    output: {}", serde_json::to_string(output)?);
        }
        if let Some(serves) = &tool.serves {
            crate::outln!(
                "    serves: {} (not offered as a tool)",
                serves_text(serves)
            );
        }
    }
    Ok(Exit::Ok)
}

/// What a tool serves, in a line: `resource test://x (text/plain)`, `prompt`.
fn serves_text(serves: &berm_manifest::Serves) -> String {
    use berm_manifest::Serves;
    let with_type = |what: &str, uri: &str, mime: &str| match mime {
        "" => format!("{what} {uri}"),
        mime => format!("{what} {uri} ({mime})"),
    };
    match serves {
        Serves::Resource { uri, mime_type } => with_type("resource", uri, mime_type),
        Serves::ResourceTemplate {
            uri_template,
            mime_type,
        } => with_type("resource template", uri_template, mime_type),
        Serves::Prompt {} => "prompt".to_string(),
    }
}

/// What the image imports that `grants` does not open: syscall modules, and for `berm.call`
/// each declared program no `call=` grant names (calls to it are refused).
fn missing_grants(manifest: &Manifest, grants: &[Grant]) -> Vec<String> {
    let mut missing: Vec<String> = manifest
        .syscalls
        .iter()
        .filter(|s| s.module != "berm" && !grants.iter().any(|g| g.module() == s.module))
        .map(|s| s.module.clone())
        .collect();
    missing.dedup();
    let asks = manifest
        .syscalls
        .iter()
        .any(|s| s.module == "berm" && s.name == berm_abi::convention::ASK);
    if asks && !grants.contains(&Grant::Ask) {
        missing.push(Grant::Ask.to_string());
    }
    if manifest
        .syscalls
        .iter()
        .any(|s| s.module == "berm" && s.name == berm_abi::convention::CALL)
    {
        let granted = |program: &str| {
            grants
                .iter()
                .any(|g| matches!(g, Grant::Call { program: p, .. } if p == program))
        };
        missing.extend(
            manifest
                .calls
                .iter()
                .filter(|p| !granted(p))
                .map(|p| format!("call={p}")),
        );
    }
    missing
}
