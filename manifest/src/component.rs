//! Programs that are WebAssembly components (docs/components.md): what a component imports,
//! which grant each import needs, and where its tools come from (its `berm.manifest` section,
//! or its plain exported functions with schemas from their WIT types), read without compiling
//! or running it. A component berm would not run is refused here, before anything else.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use wasmparser::{Parser, Payload};
use wit_parser::decoding::DecodedWasm;
use wit_parser::{Resolve, WorldItem, WorldKey};

use crate::{Import, Manifest, ManifestError, Section, Tool};

/// The package of berm's own interfaces (`wit/program.wit`).
pub const PACKAGE: &str = "berm:program";

/// The major version of [`PACKAGE`] this berm serves: ABI 1's.
pub const PACKAGE_MAJOR: u64 = 1;

/// The interface a component with a `berm.manifest` section serves its tools through.
pub const TOOLS_INTERFACE: &str = "berm:program/tools";

/// The function of [`TOOLS_INTERFACE`] that runs a tool.
pub const TOOLS_CALL: &str = "call";

/// What a component is made of, as far as berm cares: its imports with their grants, and
/// how its tools are reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentShape {
    /// Every interface it imports, as it names it, with the grant it needs.
    pub imports: Vec<ComponentImport>,
    /// Where its tools come from.
    pub tools_from: ToolsFrom,
    /// For [`ToolsFrom::Exports`]: which exported function each tool is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exports: Vec<ExportedTool>,
    /// Exported functions that are not tools, and why (a resource has no JSON form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// One imported interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentImport {
    /// Its name as imported: `wasi:cli/stdout@0.2.6`, `berm:program/kv@1.0.0`.
    pub name: String,
    /// The grant module that opens it (`kv`, `fs`, `http`, `berm` for `call=`…), or `None`
    /// when berm always links it (it reaches nothing outside the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    /// The functions it imports from the interface.
    pub functions: Vec<String>,
}

/// Where a component's tools come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolsFrom {
    /// Its `berm.manifest` section, served through `berm:program/tools#call`.
    Manifest,
    /// Its exported functions, one tool each.
    Exports,
}

/// A tool that is an exported function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedTool {
    /// The tool's name.
    pub tool: String,
    /// The exported interface holding the function (`local:demo/greet`), or `None` for a
    /// function exported at the top of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The function's name.
    pub function: String,
}

/// How berm treats one imported interface: the grant module it needs (`None`: always linked),
/// or why it is refused.
pub fn import_grant(name: &str) -> Result<Option<&'static str>, String> {
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    let Some((package, interface)) = path.split_once('/') else {
        return Err(format!(
            "`{name}` is not an interface; berm offers interfaces of {PACKAGE} and wasi:*@0.2"
        ));
    };
    let major_minor = |v: &str| {
        let mut parts = v.split('.');
        let major = parts.next().and_then(|p| p.parse::<u64>().ok());
        let minor = parts.next().and_then(|p| p.parse::<u64>().ok());
        (major, minor)
    };
    if package == PACKAGE {
        if major_minor(version).0 != Some(PACKAGE_MAJOR) {
            return Err(format!(
                "`{name}`: this berm serves {PACKAGE}@{PACKAGE_MAJOR}.x (ABI {PACKAGE_MAJOR})"
            ));
        }
        return match interface {
            "types" | "progress" | "content" => Ok(None),
            "log" => Ok(Some("log")),
            "clock" => Ok(Some("clock")),
            "random" => Ok(Some("random")),
            "kv" => Ok(Some("kv")),
            "fs" => Ok(Some("fs")),
            "http" => Ok(Some("http")),
            "call" => Ok(Some(berm_abi::CONVENTION_MODULE)),
            "ask" => Ok(Some("ask")),
            _ => Err(format!("`{name}` is not an interface of {PACKAGE}")),
        };
    }
    let wasi = |grant| {
        if major_minor(version) == (Some(0), Some(2)) {
            Ok(grant)
        } else {
            Err(format!("`{name}`: berm offers WASI 0.2 (wasi:*@0.2.x)"))
        }
    };
    match (package, interface) {
        ("wasi:io", "poll" | "streams" | "error") => wasi(None),
        (
            "wasi:cli",
            "environment" | "exit" | "stdin" | "stdout" | "stderr" | "terminal-input"
            | "terminal-output" | "terminal-stdin" | "terminal-stdout" | "terminal-stderr",
        ) => wasi(None),
        ("wasi:clocks", "wall-clock" | "monotonic-clock") => wasi(Some("clock")),
        ("wasi:random", "random" | "insecure" | "insecure-seed") => wasi(Some("random")),
        ("wasi:filesystem", "types" | "preopens") => wasi(Some("fs")),
        ("wasi:http", "types") => wasi(None),
        ("wasi:http", "outgoing-handler") => wasi(Some("http")),
        // Linked as traps that point at wasi:http: berm gives programs no sockets.
        ("wasi:sockets", _) => wasi(Some(SOCKETS)),
        _ => Err(format!(
            "`{name}` is not an interface berm offers (see docs/components.md)"
        )),
    }
}

/// The pseudo-grant of `wasi:sockets`: no grant opens it.
pub const SOCKETS: &str = "sockets";

/// Reads a component: refuses nested components and start functions, decodes its WIT,
/// classifies its imports and finds its tools.
pub(crate) fn read(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    let sections = structure(bytes)?;
    let (resolve, world) = decode(bytes)?;
    let world = &resolve.worlds[world];

    let mut imports = Vec::new();
    let mut syscalls = BTreeSet::new();
    let mut reads_input = false;
    for (key, item) in &world.imports {
        match item {
            WorldItem::Interface { id, .. } => {
                let name = resolve.name_world_key(key);
                let grant = import_grant(&name).map_err(ManifestError::Component)?;
                let functions: Vec<String> =
                    resolve.interfaces[*id].functions.keys().cloned().collect();
                if let Some(module) = grant {
                    for function in &functions {
                        syscalls.insert(syscall_of(&name, module, function));
                    }
                }
                reads_input |=
                    name.starts_with("berm:program/ask@") && functions.iter().any(|f| f == "input");
                imports.push(ComponentImport {
                    name,
                    grant: grant.map(str::to_string),
                    functions,
                });
            }
            WorldItem::Function(f) => {
                return Err(ManifestError::Component(format!(
                    "it imports the function `{}`; berm offers interfaces of {PACKAGE} and wasi:*@0.2",
                    f.name
                )));
            }
            // Types imported on their own carry no authority.
            WorldItem::Type { .. } => {}
        }
    }

    let exports_tools = world.exports.keys().any(|key| {
        let name = resolve.name_world_key(key);
        name.split_once('@').map_or(name.as_str(), |(p, _)| p) == TOOLS_INTERFACE
    });
    let (section, tools_from, exports, skipped, tools) = match sections {
        Some(section) => {
            if !exports_tools {
                return Err(ManifestError::Component(format!(
                    "it carries a berm manifest but does not export {TOOLS_INTERFACE}@{PACKAGE_MAJOR}.x"
                )));
            }
            let tools = section.tools.clone();
            (section, ToolsFrom::Manifest, vec![], vec![], tools)
        }
        None => {
            let found = exported_tools(&resolve, &world.exports)?;
            let section = Section {
                abi: berm_abi::ABI_VERSION,
                description: world.docs.contents.clone().unwrap_or_default(),
                usage: String::new(),
                calls: vec![],
                tools: found.tools,
            };
            let tools = section.tools.clone();
            (
                section,
                ToolsFrom::Exports,
                found.exports,
                found.skipped,
                tools,
            )
        }
    };
    Ok(Manifest {
        abi: section.abi,
        description: section.description,
        usage: section.usage,
        tool_exports: tools.iter().map(|t| t.name.clone()).collect(),
        tools,
        calls: section.calls,
        syscalls: syscalls.into_iter().collect(),
        exports_memory: true,
        other_imports: vec![],
        reads_input,
        component: Some(ComponentShape {
            imports,
            tools_from,
            exports,
            skipped,
        }),
    })
}

/// The component's WIT, with the docs of its `package-docs` section where they fit.
/// Toolchains write the docs of the package they started from, whose world is not the
/// component's own (`root`) and whose interfaces live in packages of their own; the decoder
/// would put them on the root package only, and refuse them there. So the section is set
/// aside, the rest decoded, and the docs offered to every package, the world's to the
/// component's world: docs never cost a deploy.
fn decode(bytes: &[u8]) -> Result<(Resolve, wit_parser::WorldId), ManifestError> {
    let (without, docs) = match without_docs(bytes) {
        Some((without, docs)) => (Some(without), Some(docs)),
        None => (None, None),
    };
    let decoded = wit_parser::decoding::decode(without.as_deref().unwrap_or(bytes))
        .map_err(|e| ManifestError::NotWasm(format!("{e:#}")))?;
    let (mut resolve, world) = match decoded {
        DecodedWasm::Component(resolve, world) => (resolve, world),
        DecodedWasm::WitPackage(..) => {
            return Err(ManifestError::Component(
                "it is a WIT package, not a component".into(),
            ));
        }
    };
    if let Some(docs) = docs {
        apply_docs(&mut resolve, world, &docs);
    }
    Ok((resolve, world))
}

/// Puts the docs of a `package-docs` section on the packages and the world they fit.
fn apply_docs(resolve: &mut Resolve, world: wit_parser::WorldId, data: &[u8]) {
    use wit_parser::PackageMetadata;
    let Ok(metadata) = PackageMetadata::decode(data) else {
        return;
    };
    let Ok(serde_json::Value::Object(mut parts)) = serde_json::to_value(&metadata) else {
        return;
    };
    let worlds = parts.remove("worlds");
    if let Ok(interfaces) = serde_json::from_value::<PackageMetadata>(parts.into()) {
        let packages: Vec<_> = resolve.packages.iter().map(|(id, _)| id).collect();
        for package in packages {
            // Fits one package, or none: the others refuse it, which is expected.
            let _ = interfaces.inject(resolve, package);
        }
    }
    if let Some(serde_json::Value::Object(worlds)) = worlds
        && let (1, Some(package)) = (worlds.len(), resolve.worlds[world].package)
    {
        let name = resolve.worlds[world].name.clone();
        let one = serde_json::json!({ "worlds": { name: worlds.values().next() } });
        if let Ok(world_docs) = serde_json::from_value::<PackageMetadata>(one) {
            let _ = world_docs.inject(resolve, package);
        }
    }
}

/// `bytes` without their top-level `package-docs` custom section, and that section's data;
/// `None` when there is none.
fn without_docs(bytes: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.ok()?;
        match &payload {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(reader)
                if depth == 1 && reader.name() == wit_parser::PackageMetadata::SECTION_NAME =>
            {
                let (_, range) = payload.as_section()?;
                // The section's id byte and its size, as LEB128, come before its contents.
                let mut size_len = 1;
                let mut size = range.len() >> 7;
                while size > 0 {
                    size_len += 1;
                    size >>= 7;
                }
                let start = range.start.checked_sub(1 + size_len)?;
                let mut without = bytes[..start].to_vec();
                without.extend_from_slice(&bytes[range.end..]);
                return Some((without, reader.data().to_vec()));
            }
            _ => {}
        }
    }
    None
}

/// The manifest's syscall entry for `function` of an imported interface: ABI 1's own name
/// for berm's interfaces (`kv.get`, `berm.call`), the interface's for WASI's
/// (`http.wasi:http/outgoing-handler@0.2.6#handle`), so grants read the same for both kinds.
fn syscall_of(interface: &str, module: &str, function: &str) -> Import {
    if interface.starts_with("berm:program/") {
        Import {
            module: module.to_string(),
            name: function.to_string(),
        }
    } else {
        Import {
            module: module.to_string(),
            name: format!("{interface}#{function}"),
        }
    }
}

/// Walks the component's sections: refuses a nested component that holds code (toolchains
/// nest only type shims, which re-export the exports with their WIT types), a component
/// `start`, and a core module that has a start function and imports functions (its start
/// could reach them before any call); returns the `berm.manifest` section, if there is one.
fn structure(bytes: &[u8]) -> Result<Option<Section>, ManifestError> {
    let not_wasm = |e: wasmparser::BinaryReaderError| ManifestError::NotWasm(e.message().into());
    let refuse = |why: &str| Err(ManifestError::Component(why.to_string()));
    let mut manifests = Vec::new();
    // What is being read, outermost first: `None` a component, `Some((start, imports))` a core
    // module with whether it has a start function and function imports.
    let mut stack: Vec<Option<(bool, bool)>> = Vec::new();
    let mut next_is_module = false;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(not_wasm)?;
        let nested_component = stack.iter().filter(|s| s.is_none()).count() > 1;
        match payload {
            Payload::Version { .. } => {
                stack.push(next_is_module.then_some((false, false)));
                next_is_module = false;
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. }
                if nested_component =>
            {
                return refuse(
                    "it nests a component that holds code; berm runs one component of core modules",
                );
            }
            Payload::ModuleSection { .. } => next_is_module = true,
            Payload::ComponentSection { .. } => {}
            Payload::ComponentStartSection { .. } => {
                return refuse("it has a start function, which would run outside any call");
            }
            Payload::StartSection { .. } => {
                if let Some(Some(module)) = stack.last_mut() {
                    module.0 = true;
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(not_wasm)?;
                    let func = matches!(
                        import.ty,
                        wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                    );
                    if let (true, Some(Some(module))) = (func, stack.last_mut()) {
                        module.1 = true;
                    }
                }
            }
            Payload::End(_) => {
                if let Some(Some((true, true))) = stack.pop() {
                    return refuse(
                        "a core module in it has a start function that can call imports; start functions would run outside any call",
                    );
                }
            }
            Payload::CustomSection(reader)
                if stack.len() == 1 && reader.name() == berm_abi::MANIFEST_SECTION =>
            {
                manifests.push(reader.data());
            }
            _ => {}
        }
    }
    let section = match manifests.as_slice() {
        [] => return Ok(None),
        [one] => *one,
        many => return Err(ManifestError::Duplicate(many.len())),
    };
    if section.len() > crate::MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(section.len()));
    }
    let section: Section =
        serde_json::from_slice(section).map_err(|e| ManifestError::Json(e.to_string()))?;
    if section.abi != berm_abi::ABI_VERSION {
        return Err(ManifestError::AbiVersion { found: section.abi });
    }
    Ok(Some(section))
}

struct Found {
    tools: Vec<Tool>,
    exports: Vec<ExportedTool>,
    skipped: Vec<String>,
}

/// Whether `function` of the export `interface` is the initializer componentize-py adds to
/// every Python component (`exports#init(app-name, symbols, stub-wasi)`): it runs once at
/// build time, when the interpreter is snapshotted, and is never a tool.
fn is_componentize_py_init(interface: &str, function: &wit_parser::Function) -> bool {
    let params: Vec<&str> = function.params.iter().map(|p| p.name.as_str()).collect();
    interface == "exports"
        && function.name == "init"
        && params == ["app-name", "symbols", "stub-wasi"]
}

/// The tools of a component without a manifest: its exported functions.
fn exported_tools(
    resolve: &Resolve,
    exports: &wit_parser::IndexMap<WorldKey, WorldItem>,
) -> Result<Found, ManifestError> {
    let mut found = Found {
        tools: vec![],
        exports: vec![],
        skipped: vec![],
    };
    let mut add = |interface: Option<(String, &str)>, function: &wit_parser::Function| {
        let (tool, qualified) = match &interface {
            Some((name, short)) => (
                format!("{short}_{}", function.name),
                format!("{name}#{}", function.name),
            ),
            None => (function.name.clone(), function.name.clone()),
        };
        let schemas = crate::schema::input_schema(resolve, function).and_then(|input| {
            crate::schema::output_schema(resolve, function).map(|output| (input, output))
        });
        let (input_schema, output_schema) = match schemas {
            Ok(schemas) => schemas,
            Err(crate::schema::Unrepresentable(what)) => {
                found
                    .skipped
                    .push(format!("{qualified}: takes or returns {what}"));
                return Ok(());
            }
        };
        if !matches!(function.kind, wit_parser::FunctionKind::Freestanding) {
            found
                .skipped
                .push(format!("{qualified}: a resource's function"));
            return Ok(());
        }
        if !berm_abi::is_valid_name(&tool) {
            return Err(ManifestError::InvalidToolName(tool));
        }
        found.tools.push(Tool {
            name: tool.clone(),
            description: function
                .docs
                .contents
                .as_deref()
                .unwrap_or("")
                .trim()
                .to_string(),
            input_schema,
            output_schema,
            annotations: None,
            serves: None,
            task: None,
        });
        found.exports.push(ExportedTool {
            tool,
            interface: interface.map(|(name, _)| name),
            function: function.name.clone(),
        });
        Ok(())
    };
    let mut initializers = vec![];
    for (key, item) in exports {
        match item {
            WorldItem::Function(function) => add(None, function)?,
            WorldItem::Interface { id, .. } => {
                let name = resolve.name_world_key(key);
                let interface = &resolve.interfaces[*id];
                let short = interface.name.clone().unwrap_or_else(|| name.clone());
                for function in interface.functions.values() {
                    if is_componentize_py_init(&name, function) {
                        initializers.push(format!(
                            "{name}#{}: componentize-py's build-time initializer, not a tool",
                            function.name
                        ));
                        continue;
                    }
                    add(Some((name.clone(), short.as_str())), function)?;
                }
            }
            WorldItem::Type { .. } => {}
        }
    }
    found.skipped.extend(initializers);
    if found.tools.is_empty() {
        return Err(ManifestError::Component(format!(
            "it carries no berm manifest and exports no function that can be a tool{}",
            match found.skipped.is_empty() {
                true => String::new(),
                false => format!(" (skipped: {})", found.skipped.join("; ")),
            }
        )));
    }
    Ok(found)
}
