//! What an app folder offers, measured once when its VM boots: the folder's digest decides
//! a reboot, and what its programs offer (grants, tools, manifests) decides whether the
//! reboot needs `--accept`. The measurement is kept in the VM's launch record (`vm.json`), so the
//! next `berm vm up` or `berm mcp --app` compares against what really booted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One app folder as measured when its VM booted: its digest decides a reboot, what it
/// offers decides whether the reboot needs `--accept`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The folder digest, as berm-vmm's measurement line states it.
    pub digest: String,
    /// What each program offers clients, in the order of berm.toml.
    pub programs: Vec<Offered>,
}

/// What one program offers: its grants and its tools (names, descriptions, schemas).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offered {
    /// The program's name.
    pub name: String,
    /// Its grants, as text, sorted.
    pub grants: Vec<String>,
    /// Its tools, as its manifest declares them.
    pub tools: Vec<berm_manifest::Tool>,
    /// Its whole manifest, compared as `berm deploy` compares an upgrade (descriptions,
    /// schemas, syscalls, programs called); absent in a pid file an older berm wrote.
    #[serde(default)]
    pub manifest: Option<berm_manifest::Manifest>,
    /// The sha256 of its bytes.
    #[serde(default)]
    pub sha256: String,
    /// berm.toml's `accept` names exactly these bytes: their changes need no --accept.
    #[serde(default)]
    pub accepted: bool,
}

/// An app folder that could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The folder, its programs or their images could not be read.
    #[error(transparent)]
    App(#[from] berm_app::AppError),
    /// The folder could not be digested.
    #[error(transparent)]
    Digest(#[from] berm_attest::FolderError),
    /// A program's manifest could not be read.
    #[error("reading the manifest of program `{program}` ({})", wasm.display())]
    Manifest {
        /// The program.
        program: String,
        /// Its file.
        wasm: PathBuf,
        /// Why.
        #[source]
        source: berm_manifest::ManifestError,
    },
}

/// Loads and measures the app folder `dir`, its programs named by image read from the
/// program store `store`.
pub fn measure(dir: &Path, store: &Path) -> Result<(berm_app::App, Measured), MeasureError> {
    let mut app = berm_app::load(dir)?;
    app.resolve_images(&berm_app::ProgramStore::new(store))?;
    let (digest, _) = berm_attest::folder_digest(&app.dir)?;
    let mut programs = Vec::new();
    for program in &app.programs {
        let bytes = program.read()?;
        let manifest = berm_manifest::Manifest::from_image(&bytes).map_err(|source| {
            MeasureError::Manifest {
                program: program.name.clone(),
                wasm: program.wasm.clone(),
                source,
            }
        })?;
        let mut grants: Vec<String> = program.grants.iter().map(ToString::to_string).collect();
        grants.sort();
        let sha256 = berm_app::sha256_hex(&bytes);
        programs.push(Offered {
            name: program.name.clone(),
            grants,
            tools: manifest.tools.clone(),
            manifest: Some(manifest),
            accepted: program.accept.as_deref() == Some(sha256.as_str()),
            sha256,
        });
    }
    Ok((app, Measured { digest, programs }))
}

/// `None` when every folder of the running VM, measured as `old` when it booted, is
/// unchanged (the apps `names`, measured now as `measured`); else the changes that need
/// `--accept`, one line each (empty when the change is in nothing a client is offered).
pub fn changes<'a>(
    old: &[Measured],
    names: impl IntoIterator<Item = &'a str>,
    measured: &[Measured],
) -> Option<Vec<String>> {
    let digests = |m: &[Measured]| m.iter().map(|m| m.digest.clone()).collect::<Vec<_>>();
    if digests(old) == digests(measured) {
        return None;
    }
    let mut out = Vec::new();
    for (i, (name, now)) in names.into_iter().zip(measured).enumerate() {
        match old.get(i) {
            Some(was) => offered_changes(name, &was.programs, &now.programs, &mut out),
            None => out.push(format!(
                "  app `{name}`: what the running VM offers was not recorded"
            )),
        }
    }
    Some(out)
}

fn offered_changes(app: &str, was: &[Offered], now: &[Offered], out: &mut Vec<String>) {
    for gone in was.iter().filter(|p| !now.iter().any(|n| n.name == p.name)) {
        out.push(format!("  app `{app}`: program `{}` removed", gone.name));
    }
    // A program whose berm.toml `accept` names its bytes was reviewed: its changes need
    // no --accept (and do not stop an automatic reboot).
    for program in now.iter().filter(|p| !p.accepted) {
        let Some(before) = was.iter().find(|p| p.name == program.name) else {
            out.push(format!("  app `{app}`: program `{}` added", program.name));
            continue;
        };
        let at = format!("  app `{app}`, program `{}`", program.name);
        for (from, to, what) in [
            (&program.grants, &before.grants, "added"),
            (&before.grants, &program.grants, "removed"),
        ] {
            for grant in from.iter().filter(|g| !to.contains(g)) {
                out.push(format!("{at}: grant `{grant}` {what}"));
            }
        }
        // What the guest's bermd checks at boot against its record on the state disk, so a
        // reboot this lets through is not refused there.
        if let (Some(was), Some(now)) = (&before.manifest, &program.manifest) {
            for change in berm_manifest::upgrade::compare(was, now, None)
                .iter()
                .filter(|c| c.needs_acceptance())
            {
                out.push(format!("{at}: {change}"));
            }
            continue;
        }
        for tool in &before.tools {
            if !program.tools.iter().any(|t| t.name == tool.name) {
                out.push(format!("{at}: tool `{}` removed", tool.name));
            }
        }
        for tool in &program.tools {
            let Some(old) = before.tools.iter().find(|t| t.name == tool.name) else {
                out.push(format!("{at}: tool `{}` added", tool.name));
                continue;
            };
            let what: Vec<&str> = [
                (old.description != tool.description, "description"),
                (old.input_schema != tool.input_schema, "input schema"),
                (old.output_schema != tool.output_schema, "output schema"),
                (old.annotations != tool.annotations, "annotations"),
                (old.serves != tool.serves, "what it serves"),
                (old.task != tool.task, "how it runs as a task"),
            ]
            .into_iter()
            .filter_map(|(changed, what)| changed.then_some(what))
            .collect();
            if !what.is_empty() {
                out.push(format!(
                    "{at}: tool `{}`: {} changed",
                    tool.name,
                    what.join(", ")
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn tool(name: &str, description: &str) -> berm_manifest::Tool {
        berm_manifest::Tool {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            serves: None,
            task: None,
        }
    }

    #[test]
    fn changes_list_what_a_client_is_offered() {
        let was = vec![Offered {
            name: "notes".into(),
            grants: vec!["kv".into()],
            tools: vec![tool("add", "Adds"), tool("list", "Lists")],
            manifest: None,
            sha256: "1".repeat(64),
            accepted: false,
        }];
        let mut now = was.clone();
        let mut out = Vec::new();
        offered_changes("notes", &was, &now, &mut out);
        assert!(out.is_empty(), "{out:?}");
        now[0].grants.push("clock".into());
        now[0].tools[0].description = "Adds a note".into();
        now[0].tools[1].name = "all".into();
        now.push(Offered {
            name: "tags".into(),
            grants: vec![],
            tools: vec![],
            manifest: None,
            sha256: "2".repeat(64),
            accepted: false,
        });
        offered_changes("notes", &was, &now, &mut out);
        assert_eq!(
            out,
            [
                "  app `notes`, program `notes`: grant `clock` added",
                "  app `notes`, program `notes`: tool `list` removed",
                "  app `notes`, program `notes`: tool `add`: description changed",
                "  app `notes`, program `notes`: tool `all` added",
                "  app `notes`: program `tags` added",
            ]
        );
        // berm.toml's `accept` naming a program's bytes takes its changes off the list.
        now[0].accepted = true;
        let mut out = Vec::new();
        offered_changes("notes", &was, &now, &mut out);
        assert_eq!(out, ["  app `notes`: program `tags` added"]);

        // With the manifests recorded, the comparison is `berm deploy`'s, which the guest's
        // bermd makes at boot too: a syscall newly imported needs acceptance.
        let manifest = |syscalls: Value| -> berm_manifest::Manifest {
            serde_json::from_value(json!({
                "abi": 1, "description": "d", "usage": "", "tools": [], "calls": [],
                "syscalls": syscalls, "tool_exports": [], "exports_memory": true,
                "other_imports": []
            }))
            .unwrap()
        };
        let mut was = was;
        was[0].manifest = Some(manifest(json!([])));
        let mut now = was.clone();
        let mut out = Vec::new();
        offered_changes("notes", &was, &now, &mut out);
        assert!(out.is_empty(), "{out:?}");
        now[0].manifest = Some(manifest(json!([{"module": "http", "name": "fetch"}])));
        offered_changes("notes", &was, &now, &mut out);
        assert_eq!(
            out,
            ["  app `notes`, program `notes`: syscalls now imported: http.fetch"]
        );
    }
}
