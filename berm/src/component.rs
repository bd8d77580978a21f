//! Programs that are WebAssembly components (docs/components.md): their tools, found at
//! deploy, and one call on a fresh instance of one.
//!
//! A component with berm's manifest serves every tool through `berm:program/tools#call`
//! (the tool's name and its JSON arguments in, its text result or failure out); one without
//! serves each tool as a plain exported function, its arguments and result converted by
//! [`crate::component_json`].

use std::collections::HashMap;
use std::sync::Arc;

use berm_manifest::{Manifest, ToolsFrom};
use serde_json::Value;
use wasmtime::Store;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{
    Component, ComponentExportIndex, ComponentType, InstancePre, Lift, Lower, Type, Val,
};

use crate::DeployError;
use crate::invocation::{CallState, Outcome};

/// How one tool of a component is reached.
pub(crate) struct ComponentTool {
    /// The exported function.
    pub func: ComponentExportIndex,
    pub kind: ToolKind,
}

pub(crate) enum ToolKind {
    /// `berm:program/tools#call`, with this tool's name.
    Dispatch,
    /// A plain exported function with these parameters and this result.
    Plain {
        params: Vec<(String, Type)>,
        result: Option<Type>,
    },
}

/// The failure record of `berm:program/tools#call`.
#[derive(ComponentType, Lift, Lower, Debug)]
#[component(record)]
pub(crate) struct ToolError {
    message: String,
}

/// The tools of `component` as `manifest` lists them, each resolved to its export.
pub(crate) fn tools(
    engine: &wasmtime::Engine,
    component: &Component,
    manifest: &Manifest,
) -> Result<HashMap<String, Arc<ComponentTool>>, DeployError> {
    let shape = manifest
        .component
        .as_ref()
        .ok_or_else(|| DeployError::Compile("not a component".into()))?;
    let ty = component.component_type();
    let mut tools = HashMap::new();
    match shape.tools_from {
        ToolsFrom::Manifest => {
            let (instance_name, instance) = ty
                .exports(engine)
                .map(|(n, e)| (n, e.ty))
                .find(|(name, _)| {
                    name.split_once('@').map_or(*name, |(p, _)| p)
                        == berm_manifest::component::TOOLS_INTERFACE
                })
                .ok_or_else(|| export_problem("berm:program/tools", "is not exported"))?;
            let ComponentItem::ComponentInstance(instance) = instance else {
                return Err(export_problem(instance_name, "is not an instance"));
            };
            let Some((_, ComponentItem::ComponentFunc(call))) = instance
                .exports(engine)
                .map(|(n, e)| (n, e.ty))
                .find(|(name, _)| *name == berm_manifest::component::TOOLS_CALL)
            else {
                return Err(export_problem(instance_name, "does not export `call`"));
            };
            let params: Vec<Type> = call.params().map(|(_, t)| t).collect();
            let results: Vec<Type> = call.results().collect();
            let dispatcher_shape = matches!(params.as_slice(), [Type::String, Type::String])
                && matches!(results.as_slice(), [Type::Result(_)]);
            if !dispatcher_shape {
                return Err(export_problem(
                    instance_name,
                    "has a `call` of another type than func(tool: string, arguments: string) -> result<string, tool-error>",
                ));
            }
            let index = component
                .get_export_index(None, instance_name)
                .and_then(|i| component.get_export_index(Some(&i), "call"))
                .ok_or_else(|| export_problem(instance_name, "cannot be found"))?;
            for tool in &manifest.tools {
                tools.insert(
                    tool.name.clone(),
                    Arc::new(ComponentTool {
                        func: index,
                        kind: ToolKind::Dispatch,
                    }),
                );
            }
        }
        ToolsFrom::Exports => {
            for export in &shape.exports {
                let (index, item) = match &export.interface {
                    Some(interface) => {
                        let outer = component
                            .get_export_index(None, interface.as_str())
                            .ok_or_else(|| export_problem(interface, "cannot be found"))?;
                        let item = ty
                            .exports(engine)
                            .map(|(n, e)| (n, e.ty))
                            .find(|(n, _)| n == interface)
                            .and_then(|(_, item)| match item {
                                ComponentItem::ComponentInstance(i) => i
                                    .exports(engine)
                                    .map(|(n, e)| (n, e.ty))
                                    .find(|(n, _)| *n == export.function)
                                    .map(|(_, item)| item),
                                _ => None,
                            });
                        (
                            component.get_export_index(Some(&outer), export.function.as_str()),
                            item,
                        )
                    }
                    None => (
                        component.get_export_index(None, export.function.as_str()),
                        ty.exports(engine)
                            .map(|(n, e)| (n, e.ty))
                            .find(|(n, _)| *n == export.function)
                            .map(|(_, item)| item),
                    ),
                };
                let (Some(index), Some(ComponentItem::ComponentFunc(func))) = (index, item) else {
                    return Err(export_problem(
                        &export.function,
                        "is not an exported function",
                    ));
                };
                tools.insert(
                    export.tool.clone(),
                    Arc::new(ComponentTool {
                        func: index,
                        kind: ToolKind::Plain {
                            params: func.params().map(|(n, t)| (n.to_string(), t)).collect(),
                            result: func.results().next(),
                        },
                    }),
                );
            }
        }
    }
    Ok(tools)
}

fn export_problem(export: &str, problem: &str) -> DeployError {
    DeployError::Export {
        export: export.to_string(),
        problem: problem.to_string(),
    }
}

/// Why a component's call stopped before its tool returned.
pub(crate) enum Stop {
    Instantiate(String),
    Trap(wasmtime::Error),
}

/// Instantiates `pre` afresh and runs `tool` on it, leaving its result in the state's
/// outcome.
pub(crate) async fn run(
    store: &mut Store<CallState>,
    pre: &InstancePre<CallState>,
    tool: &ComponentTool,
) -> Result<(), Stop> {
    let instance = pre.instantiate_async(&mut *store).await.map_err(|e| {
        if e.is::<wasmtime::Trap>() || store.data().faulted() {
            Stop::Trap(e)
        } else {
            Stop::Instantiate(format!("{e:#}"))
        }
    })?;
    let Some(func) = instance.get_func(&mut *store, tool.func) else {
        return Err(Stop::Instantiate("the tool's export is missing".into()));
    };
    match &tool.kind {
        ToolKind::Dispatch => {
            let typed = func
                .typed::<(String, String), (Result<String, ToolError>,)>(&*store)
                .map_err(|e| Stop::Instantiate(format!("{e:#}")))?;
            let state = store.data_mut();
            let name = state.call.tool.clone();
            let args = String::from_utf8(std::mem::take(&mut state.call.args))
                .map_err(|_| Stop::Trap(state.violation("the arguments are not UTF-8")))?;
            let (result,) = typed
                .call_async(&mut *store, (name, args))
                .await
                .map_err(Stop::Trap)?;
            let outcome = match result {
                Ok(text) => Outcome::Done(text.into_bytes()),
                Err(ToolError { message }) => Outcome::Failed(message.into_bytes()),
            };
            finish(store, outcome)
        }
        ToolKind::Plain { params, result } => {
            let state = store.data_mut();
            let args: Value = match serde_json::from_slice(&state.call.args) {
                Ok(Value::Object(args)) => Value::Object(args),
                _ => Value::Object(Default::default()),
            };
            let mut values = Vec::with_capacity(params.len());
            for (name, ty) in params {
                let value = match args.get(name) {
                    Some(v) => crate::component_json::to_val(ty, v, name),
                    None if matches!(ty, Type::Option(_)) => Ok(Val::Option(None)),
                    None => Err(format!("{name}: missing")),
                };
                match value {
                    Ok(value) => values.push(value),
                    Err(e) => {
                        return finish(
                            store,
                            Outcome::Failed(format!("invalid arguments: {e}").into_bytes()),
                        );
                    }
                }
            }
            let mut results = vec![Val::Bool(false); usize::from(result.is_some())];
            func.call_async(&mut *store, &values, &mut results)
                .await
                .map_err(Stop::Trap)?;
            let outcome = match results.pop() {
                None => Outcome::Done(b"null".to_vec()),
                Some(Val::Result(Err(err))) if matches!(result, Some(Type::Result(_))) => {
                    let json = err
                        .as_deref()
                        .map_or(Ok(Value::Null), crate::component_json::to_json);
                    match json {
                        Ok(json) => Outcome::Failed(json.to_string().into_bytes()),
                        Err(e) => Outcome::Failed(e.into_bytes()),
                    }
                }
                Some(value) => {
                    let value = match value {
                        Val::Result(Ok(ok)) => ok
                            .as_deref()
                            .map_or(Ok(Value::Null), crate::component_json::to_json),
                        other => crate::component_json::to_json(&other),
                    };
                    match value {
                        Ok(value) => Outcome::Done(
                            serde_json::json!({"result": value})
                                .to_string()
                                .into_bytes(),
                        ),
                        Err(e) => {
                            let state = store.data_mut();
                            return Err(Stop::Trap(state.violation(&format!("its result: {e}"))));
                        }
                    }
                }
            };
            finish(store, outcome)
        }
    }
}

/// Records the tool's outcome, within the result cap; an `ask` made during the call stays.
fn finish(store: &mut Store<CallState>, outcome: Outcome) -> Result<(), Stop> {
    let state = store.data_mut();
    if state.outcome.is_some() {
        return Ok(());
    }
    if let Outcome::Done(text) = &outcome {
        let size = text.len() + state.content_bytes;
        crate::linker::check_result_size(state, size).map_err(Stop::Trap)?;
    }
    state.outcome = Some(outcome);
    Ok(())
}
