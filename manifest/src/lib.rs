//! What an image claims to be and what it will reach, read without compiling
//! or running it.
//!
//! The claim comes from the `berm.manifest` custom section (JSON written by
//! the SDK at compile time); the reach comes from the import section, which is
//! fact: a program can call nothing it does not import. [`Manifest::check`]
//! holds the two against the export section.
//!
//! A crate of its own so that the CLI, the registry client and the index can
//! read manifests without linking a WebAssembly compiler. [`Digest`] lives
//! here for the same reason: `berm ls`, the registry client and the index
//! must print a program's identity from one definition. [`upgrade`] compares
//! two versions here too, so bermd (which links no signing code) checks an
//! app folder that changed between two starts the way `berm deploy` checks an
//! upgrade.

pub mod component;
mod digest;
pub mod schema;
pub mod serves;
pub mod upgrade;

use std::collections::BTreeSet;

use berm_abi::{
    ABI_VERSION, CONVENTION_MODULE, MANIFEST_SECTION, MEMORY_EXPORT, TOOL_EXPORT_PREFIX,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmparser::{ExternalKind, Parser, Payload, TypeRef};

/// Re-exported from berm-abi, where it lives so that grants can use it too.
pub use berm_abi::serde_as_text;
pub use component::{ComponentImport, ComponentShape, ExportedTool, ToolsFrom};
pub use digest::{Digest, DigestParseError};
pub use serves::Serves;

/// Largest manifest section accepted; a bigger one is refused, not parsed.
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// Why an image's manifest could not be read, or does not match the module.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The bytes are not a WebAssembly core module.
    #[error("not a WebAssembly module: {0}")]
    NotWasm(String),
    /// The module has no `berm.manifest` section.
    #[error(
        "the module has no `{MANIFEST_SECTION}` section: build it with berm-guest, or see docs/design/abi.md"
    )]
    Missing,
    /// The module has more than one manifest section.
    #[error("the module has {0} `{MANIFEST_SECTION}` sections; exactly one is allowed")]
    Duplicate(usize),
    /// The section is larger than [`MAX_MANIFEST_BYTES`].
    #[error("the `{MANIFEST_SECTION}` section is {0} bytes, over the cap of {MAX_MANIFEST_BYTES}")]
    TooLarge(usize),
    /// The section is not the JSON the ABI describes.
    #[error("the `{MANIFEST_SECTION}` section is not valid: {0}")]
    Json(String),
    /// The manifest was written for another ABI.
    #[error("the module was built for berm ABI v{found}; this host speaks v{ABI_VERSION}")]
    AbiVersion {
        /// The version in the manifest.
        found: u32,
    },
    /// The manifest names no tools.
    #[error("the module declares no tools")]
    NoTools,
    /// A tool name breaks the naming rule.
    #[error(
        "tool name `{0}` is not valid: use 1-64 of a-z, 0-9, `_`, `-`, starting with a letter or digit (no dots)"
    )]
    InvalidToolName(String),
    /// A program named in `calls` breaks the naming rule.
    #[error("`calls` names `{0}`, which is not a valid program name")]
    InvalidCallName(String),
    /// Two tools share a name.
    #[error("tool `{0}` is declared twice")]
    DuplicateTool(String),
    /// A tool in the manifest has no export.
    #[error(
        "the manifest declares tool `{0}` but the module does not export `{TOOL_EXPORT_PREFIX}{0}`"
    )]
    MissingExport(String),
    /// An export looks like a tool but the manifest does not declare it.
    #[error(
        "the module exports `{TOOL_EXPORT_PREFIX}{0}` but the manifest does not declare tool `{0}`"
    )]
    UndeclaredExport(String),
    /// A tool's input schema is not a JSON object schema.
    #[error("tool `{tool}`: input_schema must be a JSON Schema object with \"type\": \"object\"")]
    BadSchema {
        /// The tool.
        tool: String,
    },
    /// The module imports something other than a function.
    #[error("import `{import}` is a {kind}; programs may import only functions")]
    ImportKind {
        /// `module.name` of the import.
        import: String,
        /// What kind of import it is.
        kind: String,
    },
    /// The module does not export its memory.
    #[error("the module does not export its linear memory as `{MEMORY_EXPORT}`")]
    NoMemory,
    /// A component berm does not run: an import it does not offer, a nested component, a
    /// start function, no tools (docs/components.md).
    #[error("the component cannot be a berm program: {0}")]
    Component(String),
    /// A tool's `serves` does not fit the tool, or repeats another tool's URI.
    #[error("tool `{tool}` serves a resource or prompt that is not valid: {problem}")]
    Serves {
        /// The tool.
        tool: String,
        /// What is wrong.
        problem: String,
    },
}

/// One tool, as the manifest declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// The tool's name; MCP sees it as `{program}.{name}`.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// JSON Schema of the result, when the result is structured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP tool annotations (`readOnlyHint`, `destructiveHint`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// A resource, resource template or prompt this tool serves instead of being offered
    /// as a tool ([`serves`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serves: Option<Serves>,
    /// That the tool is long-running work a client may run as an MCP task (the tasks
    /// extension): a call returns a task handle at once, and the result comes later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskSpec>,
}

/// How a tool runs as a task ([`Tool::task`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Whether it may also run as a plain call.
    pub support: TaskSupport,
    /// Its deadline as a task, in milliseconds, when longer than the program's call
    /// deadline; the host caps it (bermd: an hour by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// That a call first runs as a plain call, which may ask its client for input
    /// (input-required results), and becomes a task on the round that brings the answers:
    /// the tasks extension's composition of the two, for a tool that must ask before the
    /// long work starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask_first: bool,
}

/// Whether a task tool may run as a plain call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskSupport {
    /// A task for a client that speaks the tasks extension, a plain call for one that
    /// does not.
    Optional,
    /// Only as a task: a client that does not speak the tasks extension is refused.
    Required,
}

/// The JSON in the `berm.manifest` section (see `docs/design/abi.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// ABI version the program was built for.
    pub abi: u32,
    /// What the program is, for people and models.
    #[serde(default)]
    pub description: String,
    /// When to reach for it: the usage notes a model should read.
    #[serde(default)]
    pub usage: String,
    /// Programs it declares it calls by name.
    #[serde(default)]
    pub calls: Vec<String>,
    /// Its tools.
    pub tools: Vec<Tool>,
}

/// One function import: a syscall the program may reach for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Import {
    /// Import module (`kv`, `fs`, `berm`, …).
    pub module: String,
    /// Import name.
    pub name: String,
}

impl Import {
    /// `module.name`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.module, self.name)
    }
}

/// An import that is not a function (a memory, table, global or tag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherImport {
    /// `module.name`.
    pub import: String,
    /// `memory`, `table`, `global` or `tag`.
    pub kind: String,
}

/// What an image claims and reaches, read by [`Manifest::from_image`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// ABI version.
    pub abi: u32,
    /// What the program is.
    pub description: String,
    /// When to reach for it.
    pub usage: String,
    /// Its tools, as declared.
    pub tools: Vec<Tool>,
    /// Programs it declares it calls.
    pub calls: Vec<String>,
    /// Every function it imports outside the calling convention: the
    /// syscalls it can reach (including `berm.call` when it calls others).
    pub syscalls: Vec<Import>,
    /// Tool names found among the exports (`berm_tool_*`).
    pub tool_exports: Vec<String>,
    /// Whether it exports its memory as `memory`.
    pub exports_memory: bool,
    /// Imports that are not functions, which deploy refuses.
    pub other_imports: Vec<OtherImport>,
    /// Whether it imports `berm.input` (the calling convention's, so not among `syscalls`):
    /// a host hands what a client answered and declared only to a program that reads it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reads_input: bool,
    /// For a program that is a WebAssembly component: its imported interfaces and how its
    /// tools are reached. `None` for a core module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentShape>,
}

impl Manifest {
    /// Reads the manifest section, imports and exports of `bytes` without
    /// compiling or running anything. Never panics, whatever the bytes.
    ///
    /// # Errors
    /// [`ManifestError::NotWasm`] for bytes that are not a WebAssembly module;
    /// [`ManifestError::Missing`], [`ManifestError::Duplicate`] or
    /// [`ManifestError::TooLarge`] for the manifest section; [`ManifestError::Json`] and
    /// [`ManifestError::AbiVersion`] for its contents.
    pub fn from_image(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let not_wasm =
            |e: wasmparser::BinaryReaderError| ManifestError::NotWasm(e.message().to_string());
        if !bytes.starts_with(b"\0asm") {
            return Err(ManifestError::NotWasm(
                "missing the `\\0asm` magic number at the start".into(),
            ));
        }
        let mut sections = Vec::new();
        let mut syscalls = BTreeSet::new();
        let mut other_imports = Vec::new();
        let mut tool_exports = Vec::new();
        let mut exports_memory = false;
        let mut reads_input = false;
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(not_wasm)? {
                Payload::Version { encoding, .. } if encoding != wasmparser::Encoding::Module => {
                    return component::read(bytes);
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.map_err(not_wasm)?;
                        match import.ty {
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => {
                                let is_convention = import.module == CONVENTION_MODULE
                                    && !berm_abi::convention::GRANTED.contains(&import.name)
                                    && berm_abi::convention::ALL.contains(&import.name);
                                reads_input |= import.module == CONVENTION_MODULE
                                    && import.name == berm_abi::convention::INPUT;
                                if !is_convention {
                                    syscalls.insert(Import {
                                        module: import.module.to_string(),
                                        name: import.name.to_string(),
                                    });
                                }
                            }
                            other => other_imports.push(OtherImport {
                                import: format!("{}.{}", import.module, import.name),
                                kind: match other {
                                    TypeRef::Memory(_) => "memory",
                                    TypeRef::Table(_) => "table",
                                    TypeRef::Global(_) => "global",
                                    _ => "tag",
                                }
                                .into(),
                            }),
                        }
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.map_err(not_wasm)?;
                        if let Some(tool) = export.name.strip_prefix(TOOL_EXPORT_PREFIX) {
                            tool_exports.push(tool.to_string());
                        } else if export.name == MEMORY_EXPORT
                            && export.kind == ExternalKind::Memory
                        {
                            exports_memory = true;
                        }
                    }
                }
                Payload::CustomSection(reader) if reader.name() == MANIFEST_SECTION => {
                    sections.push(reader.data());
                }
                _ => {}
            }
        }
        let section = match sections.as_slice() {
            [] => return Err(ManifestError::Missing),
            [one] => *one,
            many => return Err(ManifestError::Duplicate(many.len())),
        };
        if section.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge(section.len()));
        }
        let section: Section =
            serde_json::from_slice(section).map_err(|e| ManifestError::Json(e.to_string()))?;
        if section.abi != ABI_VERSION {
            return Err(ManifestError::AbiVersion { found: section.abi });
        }
        Ok(Manifest {
            abi: section.abi,
            description: section.description,
            usage: section.usage,
            tools: section.tools,
            calls: section.calls,
            syscalls: syscalls.into_iter().collect(),
            tool_exports,
            exports_memory,
            other_imports,
            reads_input,
            component: None,
        })
    }

    /// Holds the manifest against the module: at least one tool, valid and
    /// unique names, every declared tool exported and every tool export
    /// declared, object input schemas, resources and prompts that fit their
    /// tools (with no URI served twice), an exported memory. Deploy and push
    /// refuse an image that fails this.
    ///
    /// # Errors
    /// The first [`ManifestError`] found, naming the tool, call, export or import at fault.
    pub fn check(&self) -> Result<(), ManifestError> {
        if let Some(other) = self.other_imports.first() {
            return Err(ManifestError::ImportKind {
                import: other.import.clone(),
                kind: other.kind.clone(),
            });
        }
        if self.tools.is_empty() {
            return Err(ManifestError::NoTools);
        }
        let mut seen = BTreeSet::new();
        let mut uris = BTreeSet::new();
        for tool in &self.tools {
            if !berm_abi::is_valid_name(&tool.name) {
                return Err(ManifestError::InvalidToolName(tool.name.clone()));
            }
            if !seen.insert(tool.name.as_str()) {
                return Err(ManifestError::DuplicateTool(tool.name.clone()));
            }
            if tool.input_schema.get("type") != Some(&Value::from("object")) {
                return Err(ManifestError::BadSchema {
                    tool: tool.name.clone(),
                });
            }
            if !self.tool_exports.contains(&tool.name) {
                return Err(ManifestError::MissingExport(tool.name.clone()));
            }
            if tool.task.is_some() && tool.serves.is_some() {
                return Err(ManifestError::Serves {
                    tool: tool.name.clone(),
                    problem: "a resource or prompt cannot run as a task: drop `task`".into(),
                });
            }
            if let Some(serves) = &tool.serves {
                let refuse = |problem: String| ManifestError::Serves {
                    tool: tool.name.clone(),
                    problem,
                };
                serves::check(serves, &tool.input_schema, tool.output_schema.as_ref())
                    .map_err(refuse)?;
                let uri = match serves {
                    Serves::Resource { uri, .. } => Some(uri),
                    Serves::ResourceTemplate { uri_template, .. } => Some(uri_template),
                    Serves::Prompt {} => None,
                };
                if let Some(uri) = uri
                    && !uris.insert(uri.as_str())
                {
                    return Err(refuse(format!("`{uri}` is served by another tool too")));
                }
            }
        }
        if let Some(extra) = self
            .tool_exports
            .iter()
            .find(|e| !seen.contains(e.as_str()))
        {
            return Err(ManifestError::UndeclaredExport(extra.clone()));
        }
        if let Some(bad) = self
            .calls
            .iter()
            .find(|c| !berm_abi::is_valid_program_name(c))
        {
            return Err(ManifestError::InvalidCallName(bad.clone()));
        }
        if !self.exports_memory {
            return Err(ManifestError::NoMemory);
        }
        Ok(())
    }

    /// Whether the program is a WebAssembly component rather than a core module.
    pub fn is_component(&self) -> bool {
        self.component.is_some()
    }

    /// The tool named `name`, if declared.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::{TaskSpec, TaskSupport};

    #[test]
    fn a_task_spec_reads_ask_first_and_leaves_it_out_when_unset() {
        let spec: TaskSpec =
            serde_json::from_str(r#"{"support":"required","ask_first":true}"#).unwrap();
        assert!(spec.ask_first && spec.support == TaskSupport::Required);
        let plain: TaskSpec = serde_json::from_str(r#"{"support":"optional"}"#).unwrap();
        assert!(!plain.ask_first);
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"support":"optional"}"#
        );
        assert!(serde_json::from_str::<TaskSpec>(r#"{"support":"optional","later":1}"#).is_err());
    }
}
