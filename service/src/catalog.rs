//! Every deployed tool as MCP sees it, with its argument validator: rebuilt
//! on each deploy and remove, read without locking on every call.

use std::collections::BTreeMap;
use std::sync::Arc;

use berm::ProgramInfo;
use jsonschema::Validator;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};

/// One tool of one program.
pub struct ToolEntry {
    /// The program.
    pub program: String,
    /// The tool within it.
    pub tool: String,
    /// The tool as `tools/list` shows it.
    pub mcp: Tool,
    /// Checks arguments against the tool's input schema before it runs.
    pub validator: Arc<Validator>,
    /// Checks a successful result against the tool's output schema, when it
    /// declares one; the result then also goes out as `structuredContent`.
    pub output: Option<Arc<Validator>>,
    /// Whether a call may start on the thread that read the request: see
    /// [`never_waits`].
    pub starts_inline: bool,
    /// Whether the program imports `log.write`: only its calls carry a
    /// session's log (see [`crate::logs`]).
    pub logs: bool,
    /// The arguments a 2026-07-28 client mirrors into `Mcp-Param-*` headers, which bermd's
    /// HTTP listener checks against the body ([`crate::param_headers`]).
    pub headers: Vec<crate::param_headers::ParamHeader>,
}

/// All tools, by served name (`{program}_{tool}`, [`berm_abi::served_name`]).
#[derive(Default)]
pub struct Catalog {
    tools: BTreeMap<String, ToolEntry>,
    list: Arc<Vec<Tool>>,
}

impl Catalog {
    /// The catalog of `programs`. A tool whose schema does not compile as a
    /// JSON Schema is left out and reported (deploy refuses such programs,
    /// so this is only reachable for records from another version).
    pub fn build(programs: &[ProgramInfo]) -> Catalog {
        let mut tools = BTreeMap::new();
        for program in programs {
            let starts_inline = never_waits(&program.manifest);
            let logs = program.manifest.syscalls.iter().any(|s| s.module == "log");
            for tool in &program.manifest.tools {
                let name = berm_abi::served_name(&program.name, &tool.name);
                let validator = match validator_for(&tool.input_schema) {
                    Ok(v) => Arc::new(v),
                    Err(e) => {
                        tracing::warn!(tool = %name, "input schema does not compile, tool not served: {e}");
                        continue;
                    }
                };
                let output = match tool.output_schema.as_ref().map(validator_for) {
                    None => None,
                    Some(Ok(v)) => Some(Arc::new(v)),
                    Some(Err(e)) => {
                        tracing::warn!(tool = %name, "output schema does not compile, tool not served: {e}");
                        continue;
                    }
                };
                let mcp = mcp_tool(&name, program, tool);
                let headers = crate::param_headers::of_schema(&tool.input_schema);
                tools.insert(
                    name,
                    ToolEntry {
                        program: program.name.clone(),
                        tool: tool.name.clone(),
                        mcp,
                        validator,
                        output,
                        starts_inline,
                        logs,
                        headers,
                    },
                );
            }
        }
        let list = Arc::new(tools.values().map(|t| t.mcp.clone()).collect());
        Catalog { tools, list }
    }

    /// A tool by its MCP name.
    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.tools.get(name)
    }

    /// Every tool, sorted by name.
    pub fn list(&self) -> Arc<Vec<Tool>> {
        self.list.clone()
    }

    /// One page of `tools/list`: at most `size` tools whose names sort after
    /// `cursor`, and the cursor of the next page when more follow. The cursor
    /// is the last name of the page before, so a deploy or remove between
    /// two pages neither repeats nor skips a tool that stayed.
    pub fn page(&self, cursor: Option<&str>, size: usize) -> (Vec<Tool>, Option<String>) {
        let start = match cursor {
            Some(after) => self.list.partition_point(|t| t.name.as_ref() <= after),
            None => 0,
        };
        let end = start.saturating_add(size.max(1)).min(self.list.len());
        let page = self.list[start..end].to_vec();
        let next = (end < self.list.len()).then(|| self.list[end - 1].name.to_string());
        (page, next)
    }
}

/// Whether nothing a program can reach makes it wait: it imports no syscall
/// but the clock and random bytes, so no disk (`kv`, `fs`), no log pipe and
/// no other program (`berm.call`). Such a program's call starts on the
/// serving thread and leaves it at its first epoch tick at the latest; any
/// other call goes straight to the call threads, so a slow disk never holds
/// the threads that read requests.
pub fn never_waits(manifest: &berm::Manifest) -> bool {
    manifest
        .syscalls
        .iter()
        .all(|s| matches!(s.module.as_str(), "clock" | "random"))
}

/// Largest input schema a tool may have, as JSON text.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// Deepest nesting of objects and arrays in an input schema.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Largest compiled `pattern` regex (and its lazy DFA cache), in bytes.
const MAX_REGEX_BYTES: usize = 1 << 20;

/// Compiles a tool's input schema the one way bermd validates with:
/// `pattern`s use the `regex` engine, which runs in time linear in the
/// input (no backtracking, so no lookaround or backreferences: such a
/// pattern does not compile) and is capped in size. With the schema's own
/// size and depth capped at deploy and the arguments' size capped before
/// validation, checking arguments is bounded work on the serving thread.
pub fn validator_for(schema: &serde_json::Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(MAX_REGEX_BYTES)
                .dfa_size_limit(MAX_REGEX_BYTES),
        )
        .build(schema)
        .map_err(|e| e.to_string())
}

/// Checks a manifest's schemas are bounded and compile, so deploy refuses
/// what MCP could not validate against in bounded time.
pub fn check_schemas(manifest: &berm::Manifest) -> Result<(), String> {
    for tool in &manifest.tools {
        let refuse = |problem: String| format!("tool `{}`: input_schema {problem}", tool.name);
        let size = serde_json::to_vec(&tool.input_schema).map_or(0, |v| v.len());
        if size > MAX_SCHEMA_BYTES {
            return Err(refuse(format!(
                "is {size} bytes of JSON, over the cap of {MAX_SCHEMA_BYTES}"
            )));
        }
        let depth = depth(&tool.input_schema);
        if depth > MAX_SCHEMA_DEPTH {
            return Err(refuse(format!(
                "nests {depth} levels deep, over the cap of {MAX_SCHEMA_DEPTH}"
            )));
        }
        validator_for(&tool.input_schema).map_err(|e| {
            refuse(format!(
                "is not a valid JSON Schema bermd can check in bounded time \
                 (patterns must be linear-time regexes: no lookaround or backreferences): {e}"
            ))
        })?;
        crate::param_headers::check_schema(&tool.input_schema).map_err(refuse)?;
        if let Some(schema) = &tool.output_schema {
            if schema.get("type") != Some(&serde_json::Value::from("object")) {
                return Err(format!(
                    "tool `{}`: output_schema must be a JSON Schema object with \"type\": \"object\" (MCP's structuredContent is an object)",
                    tool.name
                ));
            }
            validator_for(schema).map_err(|e| {
                format!(
                    "tool `{}`: output_schema is not a valid JSON Schema: {e}",
                    tool.name
                )
            })?;
        }
    }
    Ok(())
}

/// Checks every name `program`'s tools would be served under fits what MCP
/// clients accept (`^[a-zA-Z0-9_-]{1,64}$`); the message says what to
/// shorten. Two served names cannot collide: program names have no `_`, so
/// the first `_` of a served name is always the separator and distinct
/// (program, tool) pairs give distinct names.
pub fn check_served_names(program: &str, manifest: &berm::Manifest) -> Result<(), String> {
    let max = berm_abi::MAX_SERVED_NAME;
    for tool in &manifest.tools {
        let served = berm_abi::served_name(program, &tool.name);
        if served.len() > max {
            let program_room = max.saturating_sub(tool.name.len() + 1);
            let tool_room = max.saturating_sub(program.len() + 1);
            let rename = match (program_room, tool_room) {
                (0, 0) => "shorten both the program's and the tool's name".to_string(),
                (0, room) => format!("shorten the tool's name to at most {room} characters"),
                (room, _) => format!(
                    "deploy under a program name of at most {room} characters, or shorten the tool's name"
                ),
            };
            return Err(format!(
                "tool `{}` of `{program}` would be served as `{served}`, {} characters; MCP clients accept at most {max}: {rename}",
                tool.name,
                served.len(),
            ));
        }
    }
    Ok(())
}

/// How deeply objects and arrays nest in `value`, without recursing (a
/// hostile manifest could nest deeper than the stack).
fn depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match value {
            serde_json::Value::Object(map) => Box::new(map.values()),
            serde_json::Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        deepest = deepest.max(level);
        stack.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

/// The usage notes reach the model through the tool description: the tool's
/// own description, then what the program is and when to reach for it. A
/// model reads descriptions when it picks a tool; it rarely reads resources.
fn mcp_tool(name: &str, program: &ProgramInfo, tool: &berm_manifest::Tool) -> Tool {
    let mut description = tool.description.trim().to_string();
    let about = program.manifest.description.trim();
    let usage = program.manifest.usage.trim();
    if !about.is_empty() {
        description.push_str(&format!("\n\nProgram `{}`: {about}", program.name));
    }
    if !usage.is_empty() {
        description.push_str(&format!("\n\nUsage: {usage}"));
    }
    let schema: JsonObject = match &tool.input_schema {
        serde_json::Value::Object(map) => map.clone(),
        // Manifest::check refuses a non-object schema at deploy.
        _ => JsonObject::new(),
    };
    let mut mcp = Tool::new(name.to_string(), description, Arc::new(schema));
    if let Some(serde_json::Value::Object(out)) = &tool.output_schema {
        mcp = mcp.with_raw_output_schema(Arc::new(out.clone()));
    }
    if let Some(annotations) = &tool.annotations
        && let Ok(annotations) = serde_json::from_value::<ToolAnnotations>(annotations.clone())
    {
        mcp = mcp.with_annotations(annotations);
    }
    mcp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn importing(modules: &[&str]) -> berm::Manifest {
        berm::Manifest {
            abi: 1,
            description: String::new(),
            usage: String::new(),
            tools: vec![],
            calls: vec![],
            syscalls: modules
                .iter()
                .map(|m| berm_manifest::Import {
                    module: m.to_string(),
                    name: "x".into(),
                })
                .collect(),
            tool_exports: vec![],
            exports_memory: true,
            other_imports: vec![],
        }
    }

    fn with_schema(schema: serde_json::Value) -> berm::Manifest {
        let mut manifest = importing(&[]);
        manifest.tools.push(berm_manifest::Tool {
            name: "t".into(),
            description: String::new(),
            input_schema: schema,
            output_schema: None,
            annotations: None,
        });
        manifest
    }

    #[test]
    fn schemas_are_bounded_at_deploy() {
        use serde_json::json;
        let ok = json!({"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}});
        check_schemas(&with_schema(ok)).unwrap();

        let lookaround = json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "^(?=a)a$"}}});
        let err = check_schemas(&with_schema(lookaround)).unwrap_err();
        assert!(
            err.starts_with(
                "tool `t`: input_schema is not a valid JSON Schema bermd can check in bounded time"
            ),
            "{err}"
        );
        let huge = json!({"type": "string", "pattern": "(a{1000}){1000}"});
        assert!(check_schemas(&with_schema(huge)).is_err());

        let mut deep = json!({"type": "object"});
        for _ in 0..40 {
            deep = json!({"type": "array", "items": deep});
        }
        assert_eq!(
            check_schemas(&with_schema(deep)).unwrap_err(),
            "tool `t`: input_schema nests 41 levels deep, over the cap of 32"
        );
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let err = check_schemas(&with_schema(big)).unwrap_err();
        assert!(err.contains("over the cap of 65536"), "{err}");
    }

    #[test]
    fn only_programs_that_cannot_wait_start_inline() {
        assert!(never_waits(&importing(&[])));
        assert!(never_waits(&importing(&["clock", "random"])));
        for waits in ["kv", "fs", "log", "berm"] {
            assert!(!never_waits(&importing(&["clock", waits])), "{waits}");
        }
    }
}
