//! The shape every program must have, checked from its bytes alone.
//!
//! Deploy and [`crate::Engine::precompile`] must refuse the same modules
//! with the same errors, but a precompiling engine may target another
//! platform (the microVM's), where Wasmtime cannot build a [`wasmtime::Module`]
//! to look at. So the checks on import and export types are made here, on
//! the parsed sections, before anything is compiled; the linker repeats them
//! on the compiled module only as a second line.

use berm_abi::{CONVENTION_MODULE, MEMORY_EXPORT, TOOL_EXPORT_PREFIX, convention};
use wasmparser::{CompositeInnerType, ExternalKind, FuncType, Parser, Payload, TypeRef, ValType};

use crate::DeployError;

/// Checks that every import is a function of berm's uniform type (and every
/// `berm.*` import part of the calling convention) and that every tool
/// export is a function of type `() -> ()`.
///
/// Bytes that do not parse are left to the compiler, which reports them with
/// its own validation message, the same one deploy gives.
pub(crate) fn check(wasm: &[u8]) -> Result<(), DeployError> {
    let Ok(module) = Sections::read(wasm) else {
        return Ok(());
    };
    for (module_name, name, ty) in &module.imports {
        let Some(ty) = ty else {
            // Imports that are not functions: Manifest::check names them.
            continue;
        };
        let uniform = ty.params() == [ValType::I32, ValType::I32] && ty.results() == [ValType::I64];
        if !uniform {
            return Err(DeployError::ImportType {
                import: format!("{module_name}.{name}"),
                found: signature(ty.params(), ty.results()),
            });
        }
        if module_name == CONVENTION_MODULE && !convention::ALL.contains(&name.as_str()) {
            return Err(DeployError::UnknownConvention(name.clone()));
        }
    }
    for (name, ty) in &module.tool_exports {
        let is_unit = matches!(ty, Some(ty) if ty.params().is_empty() && ty.results().is_empty());
        if !is_unit {
            return Err(DeployError::Export {
                export: name.clone(),
                problem: "must be a function of type () -> ()".into(),
            });
        }
    }
    if !module.exports_memory {
        return Err(crate::ManifestError::NoMemory.into());
    }
    Ok(())
}

/// A function type as errors show it, `(i32, i32) -> i64`; shared with the
/// linker, which reads the same types from Wasmtime's side.
pub(crate) fn signature<T: std::fmt::Display>(params: &[T], results: &[T]) -> String {
    let join = |types: &[T]| {
        types
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match results {
        [one] => format!("({}) -> {one}", join(params)),
        many => format!("({}) -> ({})", join(params), join(many)),
    }
}

/// What [`check`] needs from a module's sections.
#[derive(Default)]
struct Sections {
    /// `(module, name, type)`; the type is `None` for non-function imports.
    imports: Vec<(String, String, Option<FuncType>)>,
    /// Exports named `berm_tool_*`, with their function type (`None` when
    /// the export is not a function).
    tool_exports: Vec<(String, Option<FuncType>)>,
    exports_memory: bool,
}

impl Sections {
    fn read(wasm: &[u8]) -> Result<Sections, wasmparser::BinaryReaderError> {
        let mut types: Vec<Option<FuncType>> = Vec::new();
        let mut functions: Vec<u32> = Vec::new();
        let mut sections = Sections::default();
        let mut exports = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::TypeSection(reader) => {
                    for group in reader {
                        for sub in group?.into_types() {
                            types.push(match sub.composite_type.inner {
                                CompositeInnerType::Func(f) => Some(f),
                                _ => None,
                            });
                        }
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import?;
                        let ty = match import.ty {
                            TypeRef::Func(index) | TypeRef::FuncExact(index) => {
                                functions.push(index);
                                Some(type_at(&types, index))
                            }
                            _ => None,
                        };
                        sections.imports.push((
                            import.module.to_string(),
                            import.name.to_string(),
                            ty.flatten(),
                        ));
                    }
                }
                Payload::FunctionSection(reader) => {
                    for index in reader {
                        functions.push(index?);
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        exports.push((export.name.to_string(), export.kind, export.index));
                    }
                }
                _ => {}
            }
        }
        for (name, kind, index) in exports {
            if name.starts_with(TOOL_EXPORT_PREFIX) {
                let ty = match kind {
                    ExternalKind::Func | ExternalKind::FuncExact => functions
                        .get(index as usize)
                        .and_then(|&ty| type_at(&types, ty)),
                    _ => None,
                };
                sections.tool_exports.push((name, ty));
            } else if name == MEMORY_EXPORT && kind == ExternalKind::Memory {
                sections.exports_memory = true;
            }
        }
        Ok(sections)
    }
}

fn type_at(types: &[Option<FuncType>], index: u32) -> Option<FuncType> {
    types.get(index as usize).cloned().flatten()
}
