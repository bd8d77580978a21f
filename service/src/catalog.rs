//! Every deployed tool as MCP sees it, with its argument validator, and the resources,
//! resource templates and prompts that tools marked `serves` offer: rebuilt on each deploy
//! and remove, read without locking on every call.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use berm::ProgramInfo;
use berm_manifest::Serves;
use berm_manifest::serves::{Segment, match_template, template_segments};
use jsonschema::Validator;
use rmcp::model::{
    JsonObject, Prompt, PromptArgument, Resource, ResourceTemplate, Tool, ToolAnnotations,
};

/// One tool of one program.
pub struct ToolEntry {
    /// The program.
    pub program: String,
    /// Its digest: a resource a client watches changed when this did.
    pub digest: berm::Digest,
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
    /// Whether the program imports `berm.input`: only its calls are handed what the
    /// client answered and declared (the rest never read it, so it is not built for them).
    pub reads_input: bool,
    /// The arguments a 2026-07-28 client mirrors into `Mcp-Param-*` headers, which bermd's
    /// HTTP listener checks against the body ([`crate::param_headers`]).
    pub headers: Vec<crate::param_headers::ParamHeader>,
    /// The resource, template or prompt this entry serves; such an entry is not a tool
    /// `tools/list` shows or `tools/call` runs.
    pub serves: Option<Serves>,
    /// Set for a tool that runs as a task for a client that speaks the tasks extension.
    pub task: Option<berm_manifest::TaskSpec>,
    /// The program's call deadline.
    pub deadline: std::time::Duration,
}

/// A resource template and the entry that reads what it matches.
struct TemplateEntry {
    /// As declared: `scheme://…/{var}/…`.
    template: String,
    /// The served name of the entry that reads it.
    served: String,
}

/// All entries, by served name (`{program}_{tool}`, [`berm_abi::served_name`]), and the
/// lists MCP pages through.
#[derive(Default)]
pub struct Catalog {
    tools: BTreeMap<String, Arc<ToolEntry>>,
    list: Arc<Vec<Tool>>,
    /// Static resources by URI: the served name of the entry that reads each.
    resources: BTreeMap<String, String>,
    resource_list: Arc<Vec<Resource>>,
    templates: Vec<TemplateEntry>,
    template_list: Arc<Vec<ResourceTemplate>>,
    prompt_list: Arc<Vec<Prompt>>,
    /// The validators the entries use, handed to the next rebuild.
    validators: Validators,
}

/// Compiled validators by their schema's JSON text. The catalog is rebuilt on every deploy
/// and remove, and a deploy checks its schemas by compiling them: without this, every
/// schema was compiled again each time, twice per deploy and once per program for each
/// program of an app deployed after it. Compiling is the costly step of an app's start
/// under emulation (docs/perf-vm.md).
#[derive(Clone, Default)]
pub struct Validators(HashMap<String, Arc<Validator>>);

impl Validators {
    /// The validator of `schema`: the one already compiled, else compiled now and kept.
    pub fn get_or_compile(&mut self, schema: &serde_json::Value) -> Result<Arc<Validator>, String> {
        self.get_or_take(schema, &Validators::default())
    }

    /// As [`Self::get_or_compile`], but one `known` already has is taken from it.
    fn get_or_take(
        &mut self,
        schema: &serde_json::Value,
        known: &Validators,
    ) -> Result<Arc<Validator>, String> {
        let key = schema.to_string();
        let validator = match self.0.get(&key).or_else(|| known.0.get(&key)) {
            Some(compiled) => compiled.clone(),
            None => Arc::new(validator_for(schema)?),
        };
        self.0.insert(key, validator.clone());
        Ok(validator)
    }
}

/// What a `resources/read` URI resolves to.
pub struct ResourceRead<'c> {
    /// The entry that reads it.
    pub entry: &'c Arc<ToolEntry>,
    /// Its served name, for [`crate::Service::call`].
    pub served: &'c str,
    /// The arguments: a template's variables, percent-decoded and each one path segment
    /// ([`match_template`]); empty for a fixed URI.
    pub args: serde_json::Value,
    /// The declared media type (empty when none was declared).
    pub mime_type: &'c str,
}

impl Catalog {
    /// The catalog of `programs`. A tool whose schema does not compile as a
    /// JSON Schema is left out and reported (deploy refuses such programs,
    /// so this is only reachable for records from another version).
    /// Validators `known` has are reused; the new catalog keeps only those its entries use.
    pub fn build(
        programs: &[ProgramInfo],
        serve_as: &HashMap<String, BTreeMap<String, String>>,
        known: &Validators,
    ) -> Catalog {
        let mut used = Validators::default();
        let mut validator = |schema: &serde_json::Value| used.get_or_take(schema, known);
        let mut tools = BTreeMap::new();
        let mut resources = BTreeMap::new();
        let mut resource_list = Vec::new();
        let mut templates = Vec::new();
        let mut template_list = Vec::new();
        let mut prompt_list = Vec::new();
        for program in programs {
            let starts_inline = never_waits(&program.manifest);
            let logs = program.manifest.syscalls.iter().any(|s| s.module == "log");
            let reads_input = program.manifest.reads_input;
            let aliases = serve_as.get(&program.name);
            for tool in &program.manifest.tools {
                let name = match aliases.and_then(|a| a.get(&tool.name)) {
                    Some(alias) => alias.clone(),
                    None => berm_abi::served_name(&program.name, &tool.name),
                };
                // Deploy refuses a name another program serves; a record from another
                // version keeps the first.
                if tools.contains_key(&name) {
                    tracing::warn!(tool = %name, program = %program.name, "served name taken by another program; not served here");
                    continue;
                }
                let input = match validator(&tool.input_schema) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(tool = %name, "input schema does not compile, tool not served: {e}");
                        continue;
                    }
                };
                let output = match tool.output_schema.as_ref().map(&mut validator) {
                    None => None,
                    Some(Ok(v)) => Some(v),
                    Some(Err(e)) => {
                        tracing::warn!(tool = %name, "output schema does not compile, tool not served: {e}");
                        continue;
                    }
                };
                let mcp = mcp_tool(&name, program, tool);
                let headers = crate::param_headers::of_schema(&tool.input_schema);
                let about = || {
                    let own = tool.description.trim();
                    if own.is_empty() {
                        program.manifest.description.trim().to_string()
                    } else {
                        own.to_string()
                    }
                };
                match &tool.serves {
                    None => {}
                    Some(Serves::Resource { uri, mime_type }) => {
                        // Deploy refuses a URI another program serves; a record from
                        // another version keeps the first program's.
                        if resources.contains_key(uri) {
                            tracing::warn!(tool = %name, %uri, "resource served by another program too; not served here");
                            continue;
                        }
                        let mut listed =
                            Resource::new(uri.clone(), name.clone()).with_description(about());
                        if !mime_type.is_empty() {
                            listed = listed.with_mime_type(mime_type.clone());
                        }
                        resource_list.push(listed);
                        resources.insert(uri.clone(), name.clone());
                    }
                    Some(Serves::ResourceTemplate {
                        uri_template,
                        mime_type,
                    }) => {
                        if templates
                            .iter()
                            .any(|t: &TemplateEntry| &t.template == uri_template)
                        {
                            tracing::warn!(tool = %name, %uri_template, "template served by another program too; not served here");
                            continue;
                        }
                        let mut listed = ResourceTemplate::new(uri_template.clone(), name.clone())
                            .with_description(about());
                        if !mime_type.is_empty() {
                            listed = listed.with_mime_type(mime_type.clone());
                        }
                        template_list.push(listed);
                        templates.push(TemplateEntry {
                            template: uri_template.clone(),
                            served: name.clone(),
                        });
                    }
                    Some(Serves::Prompt {}) => {
                        prompt_list.push(Prompt::new(
                            name.clone(),
                            Some(about()),
                            prompt_arguments(&tool.input_schema),
                        ));
                    }
                }
                tools.insert(
                    name,
                    Arc::new(ToolEntry {
                        program: program.name.clone(),
                        digest: program.digest,
                        tool: tool.name.clone(),
                        mcp,
                        validator: input,
                        output,
                        starts_inline,
                        logs,
                        reads_input,
                        headers,
                        serves: tool.serves.clone(),
                        task: tool.task,
                        deadline: program.limits.deadline,
                    }),
                );
            }
        }
        let list = tools
            .values()
            .filter(|t| t.serves.is_none())
            .map(|t| t.mcp.clone())
            .collect();
        resource_list.sort_by(|a, b| a.uri.cmp(&b.uri));
        template_list.sort_by(|a, b| a.uri_template.cmp(&b.uri_template));
        templates.sort_by(|a, b| a.template.cmp(&b.template));
        prompt_list.sort_by(|a, b| a.name.cmp(&b.name));
        Catalog {
            tools,
            list: Arc::new(list),
            resources,
            resource_list: Arc::new(resource_list),
            templates,
            template_list: Arc::new(template_list),
            prompt_list: Arc::new(prompt_list),
            validators: used,
        }
    }

    /// The validators this catalog's entries use, for the next rebuild.
    pub fn validators(&self) -> &Validators {
        &self.validators
    }

    /// The entry that reads `uri` and the arguments it takes: a fixed resource first, then
    /// the first template (in sorted order) that matches. A URI longer than any a program
    /// may declare ([`berm_abi::content::MAX_URI`]) matches nothing.
    pub fn resource(&self, uri: &str) -> Option<ResourceRead<'_>> {
        if uri.len() > berm_abi::content::MAX_URI {
            return None;
        }
        let read = |served: &'_ str, args: serde_json::Map<String, serde_json::Value>| {
            let (served, entry) = self.tools.get_key_value(served)?;
            let mime_type = match &entry.serves {
                Some(Serves::Resource { mime_type, .. })
                | Some(Serves::ResourceTemplate { mime_type, .. }) => mime_type.as_str(),
                _ => "",
            };
            Some(ResourceRead {
                entry,
                served,
                args: serde_json::Value::Object(args),
                mime_type,
            })
        };
        if let Some(served) = self.resources.get(uri) {
            return read(served, serde_json::Map::new());
        }
        self.templates.iter().find_map(|t| {
            let segments = template_segments(&t.template).ok()?;
            let values = match_template(&segments, uri)?;
            let names = segments.iter().filter_map(|s| match s {
                Segment::Variable(name) => Some(*name),
                Segment::Literal(_) => None,
            });
            // Decoded and checked as one path segment each by `match_template`.
            let args = names
                .zip(values)
                .map(|(name, value)| (name.to_string(), serde_json::Value::from(value)))
                .collect();
            read(&t.served, args)
        })
    }

    /// Which program, at which digest, serves `uri` (fixed, or matched by a template): what
    /// a subscription to the URI watches.
    pub fn resource_owner(&self, uri: &str) -> Option<(String, berm::Digest)> {
        self.resource(uri)
            .map(|r| (r.entry.program.clone(), r.entry.digest))
    }

    /// The entry serving the resource template `template`, as declared.
    pub fn template_entry(&self, template: &str) -> Option<&ToolEntry> {
        let t = self.templates.iter().find(|t| t.template == template)?;
        self.tools.get(&t.served).map(|entry| &**entry)
    }

    /// Every static resource, sorted by URI (for noticing that the list changed).
    pub fn resources(&self) -> Arc<Vec<Resource>> {
        self.resource_list.clone()
    }

    /// Every resource template, sorted.
    pub fn templates(&self) -> Arc<Vec<ResourceTemplate>> {
        self.template_list.clone()
    }

    /// Every prompt, sorted by name.
    pub fn prompts(&self) -> Arc<Vec<Prompt>> {
        self.prompt_list.clone()
    }

    /// A page of `resources/list`, as [`Catalog::page`] pages tools (cursor: a URI).
    pub fn resource_page(
        &self,
        cursor: Option<&str>,
        size: usize,
    ) -> (Vec<Resource>, Option<String>) {
        page(&self.resource_list, |r| &r.uri, cursor, size)
    }

    /// A page of `resources/templates/list` (cursor: a template).
    pub fn template_page(
        &self,
        cursor: Option<&str>,
        size: usize,
    ) -> (Vec<ResourceTemplate>, Option<String>) {
        page(&self.template_list, |t| &t.uri_template, cursor, size)
    }

    /// A page of `prompts/list` (cursor: a prompt's name).
    pub fn prompt_page(&self, cursor: Option<&str>, size: usize) -> (Vec<Prompt>, Option<String>) {
        page(&self.prompt_list, |p| &p.name, cursor, size)
    }

    /// A tool by its MCP name.
    pub fn get(&self, name: &str) -> Option<&Arc<ToolEntry>> {
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
        page(&self.list, |t| t.name.as_ref(), cursor, size)
    }
}

/// At most `size` items of `list` (sorted by `key`) whose keys sort after `cursor`, and the
/// cursor of the next page when more follow: the last key of this one.
fn page<T: Clone>(
    list: &[T],
    key: impl Fn(&T) -> &str,
    cursor: Option<&str>,
    size: usize,
) -> (Vec<T>, Option<String>) {
    let start = match cursor {
        Some(after) => list.partition_point(|t| key(t) <= after),
        None => 0,
    };
    let end = start.saturating_add(size.max(1)).min(list.len());
    let items = list[start..end].to_vec();
    let next = (end < list.len()).then(|| key(&list[end - 1]).to_string());
    (items, next)
}

/// A prompt's arguments as MCP lists them: the tool's (string) properties in the schema's
/// order, each with its description and whether it is required.
fn prompt_arguments(schema: &serde_json::Value) -> Option<Vec<PromptArgument>> {
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let arguments: Vec<PromptArgument> = properties
        .iter()
        .map(|(name, property)| {
            let mut argument =
                PromptArgument::new(name.clone()).with_required(required.contains(&name.as_str()));
            if let Some(text) = property.get("description").and_then(|d| d.as_str()) {
                argument = argument.with_description(text);
            }
            argument
        })
        .collect();
    (!arguments.is_empty()).then_some(arguments)
}

/// Most values `completion/complete` returns, as MCP allows.
pub const MAX_COMPLETIONS: usize = 100;

/// The completions of argument `argument` of `entry` (a prompt's argument or a template's
/// variable) for what the user typed so far: the `enum` values its schema declares that
/// start with `typed` (ignoring case), at most [`MAX_COMPLETIONS`], and how many matched.
/// An argument without an `enum` has no completions: bermd does not start an instance to
/// suggest values.
pub fn completions(entry: &ToolEntry, argument: &str, typed: &str) -> (Vec<String>, usize) {
    let schema = entry
        .mcp
        .input_schema
        .get("properties")
        .and_then(|p| p.get(argument));
    let Some(values) = schema
        .and_then(|s| s.get("enum"))
        .and_then(|e| e.as_array())
    else {
        return (Vec::new(), 0);
    };
    let typed = typed.to_lowercase();
    let matched: Vec<String> = values
        .iter()
        .filter_map(|v| v.as_str())
        .filter(|v| v.to_lowercase().starts_with(&typed))
        .map(str::to_string)
        .collect();
    let total = matched.len();
    (matched.into_iter().take(MAX_COMPLETIONS).collect(), total)
}

/// Checks that no other program than `program` serves a URI or template `manifest` declares,
/// so a `resources/read` has one answer.
pub fn check_resource_uris(
    program: &str,
    manifest: &berm::Manifest,
    catalog: &Catalog,
) -> Result<(), String> {
    for tool in &manifest.tools {
        let taken = match &tool.serves {
            Some(Serves::Resource { uri, .. }) => catalog
                .resources
                .get(uri)
                .map(|served| (uri, served.as_str())),
            Some(Serves::ResourceTemplate { uri_template, .. }) => catalog
                .templates
                .iter()
                .find(|t| &t.template == uri_template)
                .map(|t| (uri_template, t.served.as_str())),
            _ => None,
        };
        if let Some((uri, served)) = taken
            && let Some(other) = catalog.get(served).map(|e| e.program.as_str())
            && other != program
        {
            return Err(format!(
                "tool `{}` serves `{uri}`, which program `{other}` already serves; a URI has one server on an endpoint: remove `{other}` or change the URI",
                tool.name
            ));
        }
    }
    Ok(())
}

/// Whether nothing a program can reach makes it wait: it imports no syscall
/// but the clock's time and random bytes, so no disk (`kv`, `fs`), no log pipe, no
/// sleep and no other program (`berm.call`). Such a program's call starts on the
/// serving thread and leaves it at its first epoch tick at the latest; any
/// other call goes straight to the call threads, so a slow disk never holds
/// the threads that read requests.
pub fn never_waits(manifest: &berm::Manifest) -> bool {
    manifest.syscalls.iter().all(|s| {
        matches!(
            (s.module.as_str(), s.name.as_str()),
            ("clock", "now") | ("random", _)
        )
    })
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
/// what MCP could not validate against in bounded time. What compiles is kept in
/// `validators`, for the catalog the deploy then builds.
pub fn check_schemas(manifest: &berm::Manifest, validators: &mut Validators) -> Result<(), String> {
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
        validators.get_or_compile(&tool.input_schema).map_err(|e| {
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
            validators.get_or_compile(schema).map_err(|e| {
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
/// shorten. Two `{program}_{tool}` names cannot collide: program names have no `_`, so
/// the first `_` of a served name is always the separator and distinct
/// (program, tool) pairs give distinct names. A name given in `serve_as` must name one of
/// the program's tools and be served by no other program on the endpoint.
pub fn check_served_names(
    program: &str,
    manifest: &berm::Manifest,
    serve_as: &BTreeMap<String, String>,
    catalog: &Catalog,
) -> Result<(), String> {
    let max = berm_abi::MAX_SERVED_NAME;
    for (tool, alias) in serve_as {
        if manifest.tool(tool).is_none() {
            return Err(format!(
                "`serve_as` names tool `{tool}`, which `{program}` does not have"
            ));
        }
        if !berm_abi::is_valid_name(alias) {
            return Err(format!(
                "`serve_as` gives tool `{tool}` the name `{alias}`, which is not a valid served name (1-64 of a-z, 0-9, `_`, `-`)"
            ));
        }
        let own = berm_abi::split_served_name(alias)
            .is_some_and(|(p, t)| p == program && manifest.tool(t).is_some());
        let taken = catalog
            .get(alias)
            .map(|e| e.program.as_str())
            .filter(|other| *other != program);
        if let Some(other) = taken {
            return Err(format!(
                "`serve_as` gives tool `{tool}` the name `{alias}`, which program `{other}` already serves: a served name is unique on an endpoint"
            ));
        }
        if own && !serve_as.contains_key(&alias[program.len() + 1..]) {
            return Err(format!(
                "`serve_as` gives tool `{tool}` the name `{alias}`, which is `{program}`'s own name for another of its tools"
            ));
        }
    }
    for tool in &manifest.tools {
        if serve_as.contains_key(&tool.name) {
            continue;
        }
        let served = berm_abi::served_name(program, &tool.name);
        if let Some(other) = catalog
            .get(&served)
            .map(|e| e.program.as_str())
            .filter(|other| *other != program)
        {
            return Err(format!(
                "tool `{}` of `{program}` would be served as `{served}`, a name program `{other}` serves through `serve_as`: remove that program or change its `serve_as`",
                tool.name
            ));
        }
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
                    name: if *m == "clock" { "now" } else { "x" }.into(),
                })
                .collect(),
            tool_exports: vec![],
            exports_memory: true,
            other_imports: vec![],
            reads_input: false,
            component: None,
        }
    }

    #[test]
    fn a_schema_the_deploy_checked_is_not_compiled_again() {
        use serde_json::json;
        let schema =
            json!({"type": "object", "properties": {"q": {"type": "string", "pattern": "^a+$"}}});
        let mut validators = Validators::default();
        check_schemas(&with_schema(schema.clone()), &mut validators).unwrap();
        let kept = validators
            .0
            .get(&schema.to_string())
            .cloned()
            .expect("kept by the check");
        assert!(Arc::ptr_eq(
            &kept,
            &validators.get_or_compile(&schema).unwrap()
        ));
        let other = json!({"type": "object"});
        assert!(!Arc::ptr_eq(
            &kept,
            &validators.get_or_compile(&other).unwrap()
        ));
        assert_eq!(validators.0.len(), 2);
        // A refused schema leaves nothing behind.
        let before = validators.0.len();
        assert!(check_schemas(&with_schema(json!({"type": 7})), &mut validators).is_err());
        assert_eq!(validators.0.len(), before);
    }

    fn check(manifest: &berm::Manifest) -> Result<(), String> {
        check_schemas(manifest, &mut Validators::default())
    }

    fn with_schema(schema: serde_json::Value) -> berm::Manifest {
        let mut manifest = importing(&[]);
        manifest.tools.push(berm_manifest::Tool {
            name: "t".into(),
            description: String::new(),
            input_schema: schema,
            output_schema: None,
            annotations: None,
            serves: None,
            task: None,
        });
        manifest
    }

    #[test]
    fn schemas_are_bounded_at_deploy() {
        use serde_json::json;
        let ok = json!({"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}});
        check(&with_schema(ok)).unwrap();

        let lookaround = json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "^(?=a)a$"}}});
        let err = check(&with_schema(lookaround)).unwrap_err();
        assert!(
            err.starts_with(
                "tool `t`: input_schema is not a valid JSON Schema bermd can check in bounded time"
            ),
            "{err}"
        );
        let huge = json!({"type": "string", "pattern": "(a{1000}){1000}"});
        assert!(check(&with_schema(huge)).is_err());

        let mut deep = json!({"type": "object"});
        for _ in 0..40 {
            deep = json!({"type": "array", "items": deep});
        }
        assert_eq!(
            check(&with_schema(deep)).unwrap_err(),
            "tool `t`: input_schema nests 41 levels deep, over the cap of 32"
        );
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let err = check(&with_schema(big)).unwrap_err();
        assert!(err.contains("over the cap of 65536"), "{err}");
    }

    #[test]
    fn only_programs_that_cannot_wait_start_inline() {
        assert!(never_waits(&importing(&[])));
        assert!(never_waits(&importing(&["clock", "random"])));
        for waits in ["kv", "fs", "log", "berm"] {
            assert!(!never_waits(&importing(&["clock", waits])), "{waits}");
        }
        let mut sleeps = importing(&["clock"]);
        sleeps.syscalls.push(berm_manifest::Import {
            module: "clock".into(),
            name: "sleep".into(),
        });
        assert!(!never_waits(&sleeps));
    }
}
