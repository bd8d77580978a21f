//! Deploys one program file and calls one of its tools: the smallest host
//! there is, and what `scripts/demo` runs before bermd exists.
//!
//! `cargo run -p berm --example run -- PROGRAM.wasm TOOL [JSON] [OTHER.wasm…]`
//! Other program files are deployed beside it, so calls between programs
//! work (e.g. compose_shout calling echo).

use std::path::Path;

use berm::{Berm, Engine, EngineConfig, Manifest, call};

fn name_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().replace('_', "-"))
        .unwrap_or_default()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [program, tool, rest @ ..] = args.as_slice() else {
        eprintln!("usage: run PROGRAM.wasm TOOL [JSON] [OTHER.wasm…]");
        std::process::exit(2);
    };
    let (json, others) = match rest.split_first() {
        Some((json, others)) if !json.ends_with(".wasm") => (json.clone(), others),
        _ => ("{}".to_string(), rest),
    };

    let engine = Engine::new(&EngineConfig::default())?;
    let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
    for path in others.iter().chain(std::iter::once(program)) {
        let path = Path::new(path);
        let wasm = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let manifest = Manifest::from_image(&wasm)?;
        let deployed = berm.deploy(&name_of(path), &wasm)?;
        let tools: Vec<&str> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
        eprintln!(
            "deployed {} {} ({:?}): tools {}",
            name_of(path),
            deployed.digest,
            deployed.source,
            tools.join(", ")
        );
    }
    let name = name_of(Path::new(program));
    match berm.call(None, &name, tool, json.into_bytes()).await? {
        Ok(result) => println!("{result}"),
        Err(failure) => {
            eprintln!("{name}.{tool} failed: {failure}");
            std::process::exit(1);
        }
    }
    Ok(())
}
