//! What a deploy over a running program changes: compared before `berm deploy` and
//! `berm deploy --app` send anything, and printed the same way by both.

use std::path::PathBuf;

use berm_control::Grant;

/// The changes from what `name` runs now to (`image`, `grants`): none when nothing is
/// deployed under `name`, or for an image bermd will refuse anyway.
pub async fn upgrade_changes(
    client: &berm_control::Client,
    name: &str,
    image: &[u8],
    grants: &[Grant],
) -> anyhow::Result<Option<(String, Vec<berm_manifest::upgrade::Change>)>> {
    let running = match client.get(name).await {
        Ok(view) => view,
        Err(berm_control::ClientError::Api { status: 404, .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Ok(new) = berm_manifest::Manifest::from_image(image) else {
        return Ok(None);
    };
    // bermd keeps an fs grant's directory canonical; compare the new one the same way, so
    // `fs=./data` over `fs=/home/me/data` is no change.
    let grants: Vec<Grant> = grants
        .iter()
        .map(|grant| {
            with_fs_dir(grant.clone(), |dir| {
                std::fs::canonicalize(&dir).unwrap_or(dir)
            })
        })
        .collect();
    let changes =
        berm_manifest::upgrade::compare(&running.manifest, &new, Some((&running.grants, &grants)));
    Ok(Some((running.digest, changes)))
}

/// Prints each change, marked accepted or narrower.
pub fn print_changes(prefix: &str, changes: &[berm_manifest::upgrade::Change]) {
    for change in changes {
        let kind = if change.needs_acceptance() {
            "accepted"
        } else {
            "narrower"
        };
        eprintln!("{prefix}{kind}: {change}");
    }
}

/// `grant` with its directory passed through `f` when it is an fs grant; any other as is.
pub fn with_fs_dir(grant: Grant, f: impl FnOnce(PathBuf) -> PathBuf) -> Grant {
    match grant {
        Grant::Fs {
            dir,
            read_only,
            quota,
        } => Grant::Fs {
            dir: f(dir),
            read_only,
            quota,
        },
        other => other,
    }
}
