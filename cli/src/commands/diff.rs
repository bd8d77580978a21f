//! `berm diff A B`: what deploying B over A would change that a person must see — the same
//! comparison `berm deploy NAME …` refuses without `--accept`. A and B are each an image
//! file, a registry reference (pulled and verified) or a deployed program's name; grants are
//! compared when both are deployed.

use std::path::Path;

use anyhow::Context;
use berm_control::{ClientError, Grant};
use berm_manifest::Manifest;

use crate::Exit;

/// Arguments of `berm diff`.
#[derive(clap::Args)]
pub struct Args {
    /// What runs now (or the older version): a file, a reference or a deployed name.
    old: String,
    /// Its replacement: a file, a reference or a deployed name.
    new: String,
    /// Print the changes as a JSON array, each with `needs_acceptance`.
    #[arg(long)]
    json: bool,
    /// Registry access, for references.
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
}

/// One side of the comparison.
struct Side {
    digest: String,
    manifest: Manifest,
    grants: Option<Vec<Grant>>,
}

async fn side(
    home: &Path,
    target: &str,
    registry: &super::registry::RegistryArgs,
) -> anyhow::Result<Side> {
    let path = Path::new(target);
    if path.is_file() {
        let image = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let manifest =
            Manifest::from_image(&image).with_context(|| format!("reading {}", path.display()))?;
        return Ok(Side {
            digest: berm_manifest::Digest::of(&image).to_string(),
            manifest,
            grants: None,
        });
    }
    if berm_oci::is_reference(target) {
        let pulled = berm_oci::pull(target, &registry.options())
            .await
            .with_context(|| format!("pulling {target}"))?;
        return Ok(Side {
            digest: pulled.described.digest.to_string(),
            manifest: pulled.described.manifest,
            grants: None,
        });
    }
    match super::client(home).get(target).await {
        Ok(view) => Ok(Side {
            digest: view.digest,
            manifest: view.manifest,
            grants: Some(view.grants),
        }),
        Err(ClientError::Api { status: 404, .. }) => anyhow::bail!(
            "`{target}` is neither an image file, a registry reference nor a deployed program"
        ),
        Err(e) => Err(e).with_context(|| format!("looking up the deployed program `{target}`")),
    }
}

/// Prints the comparison; exit 0 whatever it finds.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    let old = side(home, &args.old, &args.registry).await?;
    let new = side(home, &args.new, &args.registry).await?;
    let grants = match (&old.grants, &new.grants) {
        (Some(o), Some(n)) => Some((o.as_slice(), n.as_slice())),
        _ => None,
    };
    let changes = berm_manifest::upgrade::compare(&old.manifest, &new.manifest, grants);
    if args.json {
        let list: Vec<serde_json::Value> = changes
            .iter()
            .map(|c| {
                let mut value = serde_json::to_value(c).unwrap_or_default();
                value["needs_acceptance"] = c.needs_acceptance().into();
                value
            })
            .collect();
        super::print_json(&list)?;
        return Ok(Exit::Ok);
    }
    crate::outln!("{} {}", args.old, old.digest);
    crate::outln!("{} {}", args.new, new.digest);
    if changes.is_empty() {
        crate::outln!("no change the model reads or that reaches further");
    }
    for change in &changes {
        let mark = if change.needs_acceptance() {
            "needs --accept"
        } else {
            "narrower"
        };
        crate::outln!("  {change}  [{mark}]");
    }
    if grants.is_none() {
        crate::outln!("(grants compared only between two deployed programs)");
    }
    Ok(Exit::Ok)
}
