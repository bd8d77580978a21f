//! `#[berm_guest::program]`: turns a module of plain Rust functions into a
//! berm program.
//!
//! Everything the host reads is produced here at compile time: one export per
//! tool, the JSON Schema of each tool's arguments, and the `berm.manifest`
//! custom section. The schemas are derived from the parameter types by
//! syntax (a proc macro sees tokens, not types), so the supported types are
//! the ones listed in [`schema_for`] and structs with named fields declared
//! in the program's module; anything else is a compile error that names the
//! type. A tool returning such a struct or a map also gets an output schema,
//! so bermd can send its results as MCP `structuredContent`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use serde_json::{Map, Value, json};
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Item, ItemFn, ItemMod, Lit, LitStr, Meta,
    Pat, PathArguments, ReturnType, Type, parse_macro_input,
};

/// Makes the `pub fn`s of an inline module the tools of a berm program.
///
/// Arguments: `calls = ["program", …]` declares the programs it calls by
/// name. The module's doc comment is the program's description; a `# Usage`
/// section in it holds the usage notes (when to reach for it). Each tool's
/// doc comment is its description; a `# Arguments` section with lines like
/// ``- `name`: what it is`` describes the parameters. `#[berm(header(param = "Name"))]` asks a
/// 2026-07-28 client to mirror argument `param` into the HTTP header `Mcp-Param-Name`
/// (`x-mcp-header` in its schema). `#[berm(read_only)]`,
/// `#[berm(destructive)]`, `#[berm(idempotent)]`, `#[berm(open_world)]` on a
/// tool set its MCP annotations.
#[proc_macro_attribute]
pub fn program(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut calls = Vec::new();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("calls") {
            let value = meta.value()?;
            let array: syn::ExprArray = value.parse()?;
            for elem in array.elems {
                match elem {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(s), ..
                    }) => calls.push(s.value()),
                    other => {
                        return Err(syn::Error::new_spanned(other, "expected a string literal"));
                    }
                }
            }
            Ok(())
        } else {
            Err(meta.error("unknown argument; expected `calls = [\"program\", …]`"))
        }
    });
    parse_macro_input!(attr with parser);
    let module = parse_macro_input!(item as ItemMod);
    match expand(module, calls) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(mut module: ItemMod, calls: Vec<String>) -> syn::Result<proc_macro2::TokenStream> {
    let Some((_, items)) = module.content.as_mut() else {
        return Err(syn::Error::new_spanned(
            &module,
            "#[berm_guest::program] needs an inline module: `mod name { … }`",
        ));
    };
    for call in &calls {
        if !berm_abi::is_valid_program_name(call) {
            return Err(syn::Error::new(
                Span::call_site(),
                format!("`calls` names `{call}`, which is not a valid program name"),
            ));
        }
    }
    let (description, sections) = split_doc(&doc_lines(&module.attrs));
    let usage = sections
        .iter()
        .find(|(heading, _)| heading.eq_ignore_ascii_case("usage"))
        .map(|(_, body)| body.clone())
        .unwrap_or_default();

    let mod_ident = module.ident.clone();
    let structs: Vec<syn::ItemStruct> = items
        .iter()
        .filter_map(|item| match item {
            Item::Struct(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    let mut tools = Vec::new();
    let mut exports = Vec::new();
    for item in items.iter_mut() {
        let Item::Fn(func) = item else { continue };
        if !matches!(func.vis, syn::Visibility::Public(_)) {
            continue;
        }
        let attributes = take_annotations(func)?;
        let schemas = Schemas {
            structs: &structs,
            within: Vec::new(),
        };
        let (tool, export) = tool(func, &mod_ident, attributes, schemas)?;
        tools.push(tool);
        exports.push(export);
    }
    if tools.is_empty() {
        return Err(syn::Error::new_spanned(
            &module.ident,
            "a berm program needs at least one tool: a `pub fn` in this module",
        ));
    }
    let manifest = json!({
        "abi": berm_abi::ABI_VERSION,
        "description": description,
        "usage": usage,
        "calls": calls,
        "tools": tools,
    })
    .to_string();
    let section = LitStr::new(&manifest, Span::call_site());
    let len = manifest.len();
    let section_name = berm_abi::MANIFEST_SECTION;
    Ok(quote! {
        #module

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #(#exports)*

            #[unsafe(link_section = #section_name)]
            #[used]
            static BERM_MANIFEST: [u8; #len] = ::berm_guest::__private::concat::<#len>(&[#section]);
        };
    })
}

/// The lines of `///` comments, with the one leading space removed.
fn doc_lines(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|s| s.lines().map(str::to_string).collect::<Vec<_>>())
        .map(|line| line.strip_prefix(' ').map(str::to_string).unwrap_or(line))
        .collect()
}

/// Splits doc lines into the text before the first `# Heading` and the
/// sections after it.
fn split_doc(lines: &[String]) -> (String, Vec<(String, String)>) {
    let mut description = Vec::new();
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in lines {
        if let Some(heading) = line.trim().strip_prefix("# ") {
            sections.push((heading.trim().to_string(), Vec::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push(line.clone());
        } else {
            description.push(line.clone());
        }
    }
    let join = |lines: &[String]| lines.join("\n").trim().to_string();
    (
        join(&description),
        sections
            .into_iter()
            .map(|(heading, body)| (heading, join(&body)))
            .collect(),
    )
}

/// Parameter descriptions from an `# Arguments` section: lines like
/// ``- `name`: text`` or ``* `name` - text``.
fn argument_docs(sections: &[(String, String)]) -> Map<String, Value> {
    let mut out = Map::new();
    let Some((_, body)) = sections
        .iter()
        .find(|(heading, _)| heading.eq_ignore_ascii_case("arguments"))
    else {
        return out;
    };
    for line in body.lines() {
        let line = line.trim().trim_start_matches(['-', '*']).trim();
        let Some(rest) = line.strip_prefix('`') else {
            continue;
        };
        let Some((name, text)) = rest.split_once('`') else {
            continue;
        };
        let text = text.trim_start().trim_start_matches([':', '-']).trim();
        out.insert(name.to_string(), Value::from(text));
    }
    out
}

/// The `#[berm(header(PARAM = "Name"))]` of a tool: each parameter a 2026-07-28 client mirrors
/// into the HTTP header `Mcp-Param-Name`.
type Headers = Vec<(syn::Ident, syn::LitStr)>;

/// What `#[berm(...)]` says of a tool.
#[derive(Default)]
struct Attributes {
    /// MCP annotations (`readOnlyHint`, …).
    annotations: Option<Value>,
    /// Parameters mirrored into `Mcp-Param-*` headers.
    headers: Headers,
    /// The manifest's `serves`: a resource, resource template or prompt.
    serves: Option<Value>,
    /// `input_schema = "JSON"`: the tool's input schema as written, instead of the one
    /// derived from its parameters (for keywords the derivation does not write).
    input_schema: Option<Value>,
    /// `task` or `task = "required"`, with `task_deadline_ms = N` and `ask_first`: the
    /// manifest's `task`.
    task: Option<Value>,
}

/// Removes `#[berm(...)]` from a tool and returns what it said.
fn take_annotations(func: &mut ItemFn) -> syn::Result<Attributes> {
    let mut annotations = Map::new();
    let mut headers = Headers::new();
    let mut serves: Option<(&'static str, Option<syn::LitStr>)> = None;
    let mut mime_type: Option<syn::LitStr> = None;
    let mut input_schema: Option<Value> = None;
    let mut task: Option<Value> = None;
    let mut task_deadline: Option<u64> = None;
    let mut ask_first = false;
    let mut error = None;
    func.attrs.retain(|attr| {
        if !attr.path().is_ident("berm") {
            return true;
        }
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("header") {
                return meta.parse_nested_meta(|param| {
                    let Some(ident) = param.path.get_ident().cloned() else {
                        return Err(param.error("expected a parameter name"));
                    };
                    let name: syn::LitStr = param.value()?.parse()?;
                    if !berm_abi::is_valid_mcp_header_name(&name.value()) {
                        return Err(syn::Error::new_spanned(
                            &name,
                            "a header name is 1 to 64 of HTTP's token characters: no space, colon or non-ASCII",
                        ));
                    }
                    headers.push((ident, name));
                    Ok(())
                });
            }
            for (kind, takes_uri) in [
                ("resource", true),
                ("resource_template", true),
                ("prompt", false),
            ] {
                if meta.path.is_ident(kind) {
                    if serves.is_some() {
                        return Err(meta.error(
                            "a tool serves at most one of resource, resource_template, prompt",
                        ));
                    }
                    let uri = if takes_uri {
                        Some(meta.value()?.parse::<syn::LitStr>()?)
                    } else {
                        None
                    };
                    serves = Some((kind, uri));
                    return Ok(());
                }
            }
            if meta.path.is_ident("mime_type") {
                mime_type = Some(meta.value()?.parse()?);
                return Ok(());
            }
            if meta.path.is_ident("task") {
                let support = if meta.input.peek(syn::Token![=]) {
                    let value: syn::LitStr = meta.value()?.parse()?;
                    match value.value().as_str() {
                        "optional" | "required" => value.value(),
                        _ => {
                            return Err(syn::Error::new_spanned(
                                value,
                                "task is \"optional\" (the default) or \"required\"",
                            ));
                        }
                    }
                } else {
                    "optional".to_string()
                };
                task = Some(json!({ "support": support }));
                return Ok(());
            }
            if meta.path.is_ident("ask_first") {
                ask_first = true;
                return Ok(());
            }
            if meta.path.is_ident("task_deadline_ms") {
                let value: syn::LitInt = meta.value()?.parse()?;
                task_deadline = Some(value.base10_parse()?);
                return Ok(());
            }
            if meta.path.is_ident("input_schema") {
                let text: syn::LitStr = meta.value()?.parse()?;
                let schema: Value = serde_json::from_str(&text.value()).map_err(|e| {
                    syn::Error::new_spanned(&text, format!("input_schema is not JSON: {e}"))
                })?;
                if schema.get("type") != Some(&Value::from("object")) {
                    return Err(syn::Error::new_spanned(
                        &text,
                        "input_schema must be a JSON Schema object with \"type\": \"object\"",
                    ));
                }
                input_schema = Some(schema);
                return Ok(());
            }
            let key = if meta.path.is_ident("read_only") {
                "readOnlyHint"
            } else if meta.path.is_ident("destructive") {
                "destructiveHint"
            } else if meta.path.is_ident("idempotent") {
                "idempotentHint"
            } else if meta.path.is_ident("open_world") {
                "openWorldHint"
            } else {
                return Err(meta.error(
                    "expected one of read_only, destructive, idempotent, open_world, header(PARAM = \"Name\"), \
                     resource = \"URI\", resource_template = \"TEMPLATE\", prompt, mime_type = \"TYPE\", \
                     input_schema = \"JSON\", task, task = \"required\", task_deadline_ms = N, ask_first",
                ));
            };
            annotations.insert(key.into(), Value::Bool(true));
            Ok(())
        });
        if let Err(e) = parsed {
            error = Some(e);
        }
        false
    });
    if let Some(e) = error {
        return Err(e);
    }
    let serves = match (serves, mime_type) {
        (None, None) => None,
        (None | Some(("prompt", _)), Some(mime)) => {
            return Err(syn::Error::new_spanned(
                mime,
                "mime_type belongs with resource = \"URI\" or resource_template = \"TEMPLATE\"",
            ));
        }
        (Some((kind, uri)), mime) => {
            let mut body = Map::new();
            if let Some(uri) = uri {
                let key = if kind == "resource" {
                    "uri"
                } else {
                    "uri_template"
                };
                body.insert(key.into(), Value::from(uri.value()));
            }
            if let Some(mime) = mime {
                body.insert("mime_type".into(), Value::from(mime.value()));
            }
            Some(json!({ kind: body }))
        }
    };
    if ask_first {
        let Some(task) = task.as_mut() else {
            return Err(syn::Error::new_spanned(
                &func.sig.ident,
                "ask_first belongs with task",
            ));
        };
        task["ask_first"] = json!(true);
    }
    Ok(Attributes {
        annotations: (!annotations.is_empty()).then_some(Value::Object(annotations)),
        headers,
        serves,
        input_schema,
        task: match (task, task_deadline) {
            (Some(mut task), Some(ms)) => {
                task["deadline_ms"] = json!(ms);
                Some(task)
            }
            (None, Some(_)) => {
                return Err(syn::Error::new_spanned(
                    &func.sig.ident,
                    "task_deadline_ms belongs with task",
                ));
            }
            (task, None) => task,
        },
    })
}

/// How a tool's return value becomes the result text.
enum Output {
    /// No return value: an empty result.
    Unit,
    /// `String`: passed through.
    Text,
    /// `Result<String, E>`.
    TextResult,
    /// `Result<T, E>`: JSON.
    JsonResult,
    /// `T`: JSON.
    Json,
}

fn output_kind(ret: &ReturnType) -> Output {
    let ReturnType::Type(_, ty) = ret else {
        return Output::Unit;
    };
    match last_segment(ty) {
        Some(("String", _)) => Output::Text,
        Some(("Result", Some(args))) => match args.first() {
            Some(GenericArgument::Type(inner))
                if matches!(last_segment(inner), Some(("String", _))) =>
            {
                Output::TextResult
            }
            _ => Output::JsonResult,
        },
        _ => Output::Json,
    }
}

/// The last path segment of a type and its generic arguments.
fn last_segment(ty: &Type) -> Option<(&'static str, Option<Vec<GenericArgument>>)> {
    let Type::Path(path) = ty else { return None };
    let segment = path.path.segments.last()?;
    let name = segment.ident.to_string();
    let args = match &segment.arguments {
        PathArguments::AngleBracketed(a) => Some(a.args.iter().cloned().collect()),
        _ => None,
    };
    // Leak-free static names for the handful we match on.
    let name: &'static str = match name.as_str() {
        "String" => "String",
        "Result" => "Result",
        "Option" => "Option",
        "Vec" => "Vec",
        "HashMap" => "HashMap",
        "BTreeMap" => "BTreeMap",
        "Value" => "Value",
        "bool" => "bool",
        "f32" => "f32",
        "f64" => "f64",
        "i8" | "i16" | "i32" | "i64" | "isize" => "signed",
        "u8" | "u16" | "u32" | "u64" | "usize" => "unsigned",
        _ => "other",
    };
    Some((name, args))
}

fn first_type(args: &Option<Vec<GenericArgument>>, index: usize) -> Option<&Type> {
    match args.as_ref()?.get(index)? {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    }
}

/// `schema`, also allowing `null`: as `anyOf` branches of one `type` each,
/// the spelling that maps onto the most clients' schema dialects.
fn or_null(schema: Value) -> Value {
    if schema.as_object().is_some_and(|m| m.is_empty()) {
        // `{}` allows anything already.
        return schema;
    }
    json!({"anyOf": [schema, {"type": "null"}]})
}

/// Derives schemas: the program module's structs, and the ones being
/// derived (a struct that contains itself has no finite schema).
#[derive(Clone)]
struct Schemas<'a> {
    structs: &'a [syn::ItemStruct],
    within: Vec<String>,
}

impl Schemas<'_> {
    /// The JSON Schema for a type, and whether a field of it is required.
    ///
    /// Supported: `String`, `bool`, the integer types, `f32`/`f64`, `Vec<T>`,
    /// `Option<T>` (not required), `HashMap`/`BTreeMap<String, T>`,
    /// `serde_json::Value` (anything) and structs with named fields declared
    /// in the program's module (an object with exactly those fields).
    fn schema_for(&self, ty: &Type) -> syn::Result<(Value, bool)> {
        let unsupported = || {
            syn::Error::new_spanned(
                ty,
                "berm_guest cannot derive a JSON Schema for this type; use String, bool, an integer, \
                 f32/f64, Vec<T>, Option<T>, HashMap<String, T>, BTreeMap<String, T>, serde_json::Value \
                 or a struct with named fields declared in the program's module",
            )
        };
        let (name, args) = last_segment(ty).ok_or_else(unsupported)?;
        let schema = match name {
            "String" => json!({"type": "string"}),
            "bool" => json!({"type": "boolean"}),
            "signed" => json!({"type": "integer"}),
            "unsigned" => json!({"type": "integer", "minimum": 0}),
            "f32" | "f64" => json!({"type": "number"}),
            "Value" => json!({}),
            "Vec" => {
                let inner = first_type(&args, 0).ok_or_else(unsupported)?;
                json!({"type": "array", "items": self.schema_for(inner)?.0})
            }
            "Option" => {
                // Not required, and `null` (what serde writes for `None`).
                let inner = first_type(&args, 0).ok_or_else(unsupported)?;
                return Ok((or_null(self.schema_for(inner)?.0), false));
            }
            "HashMap" | "BTreeMap" => {
                let value = first_type(&args, 1).ok_or_else(unsupported)?;
                json!({"type": "object", "additionalProperties": self.schema_for(value)?.0})
            }
            _ => {
                let item = self.module_struct(ty).ok_or_else(unsupported)?;
                self.struct_schema(ty, item)?
            }
        };
        Ok((schema, true))
    }

    /// The struct of the program's module a type names (a bare identifier).
    fn module_struct(&self, ty: &Type) -> Option<&syn::ItemStruct> {
        let Type::Path(path) = ty else { return None };
        let ident = path.path.get_ident()?;
        self.structs.iter().find(|s| s.ident == *ident)
    }

    /// An object with the struct's fields: the required ones are those not
    /// `Option`, and no others are allowed. Field doc comments describe the
    /// properties.
    fn struct_schema(&self, ty: &Type, item: &syn::ItemStruct) -> syn::Result<Value> {
        let name = item.ident.to_string();
        if self.within.contains(&name) {
            return Err(syn::Error::new_spanned(
                ty,
                format!(
                    "`{name}` contains itself; berm_guest cannot derive a finite JSON Schema for it"
                ),
            ));
        }
        if !item.generics.params.is_empty() {
            return Err(syn::Error::new_spanned(
                &item.ident,
                "berm_guest derives schemas of structs without generic parameters",
            ));
        }
        let syn::Fields::Named(fields) = &item.fields else {
            return Err(syn::Error::new_spanned(
                &item.ident,
                "berm_guest derives schemas of structs with named fields",
            ));
        };
        // The schema is derived from the fields as written: serde attributes
        // that rename or reshape them would make it lie.
        let serde_attr = item
            .attrs
            .iter()
            .chain(fields.named.iter().flat_map(|f| f.attrs.iter()))
            .find(|a| a.path().is_ident("serde"));
        if let Some(attr) = serde_attr {
            return Err(syn::Error::new_spanned(
                attr,
                "berm_guest derives the JSON Schema from the fields as written; #[serde(...)] attributes \
                 on a struct used by a tool are not supported",
            ));
        }
        let mut inner = self.clone();
        inner.within.push(name);
        let mut properties = Map::new();
        let mut required = Vec::new();
        for field in &fields.named {
            let Some(ident) = &field.ident else { continue };
            let field_name = ident.to_string();
            let (mut schema, is_required) = inner.schema_for(&field.ty)?;
            let (doc, _) = split_doc(&doc_lines(&field.attrs));
            if let (false, Value::Object(map)) = (doc.is_empty(), &mut schema) {
                map.insert("description".into(), Value::from(doc));
            }
            properties.insert(field_name.clone(), schema);
            if is_required {
                required.push(Value::from(field_name));
            }
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
        });
        if !required.is_empty() {
            schema["required"] = Value::Array(required);
        }
        Ok(schema)
    }

    /// The output schema of a tool: for a return type (or the `Ok` of a
    /// `Result`) that is a struct of the module or a map; MCP's
    /// `structuredContent` is always an object, so nothing else has one.
    fn output_schema(&self, ret: &ReturnType) -> syn::Result<Option<Value>> {
        let ReturnType::Type(_, ty) = ret else {
            return Ok(None);
        };
        let ty = match last_segment(ty) {
            Some(("Result", args)) => match first_type(&args, 0) {
                Some(inner) => inner.clone(),
                None => return Ok(None),
            },
            _ => (**ty).clone(),
        };
        let is_object = matches!(last_segment(&ty), Some(("HashMap" | "BTreeMap", _)))
            || self.module_struct(&ty).is_some();
        if !is_object {
            return Ok(None);
        }
        Ok(Some(self.schema_for(&ty)?.0))
    }
}

fn tool(
    func: &ItemFn,
    mod_ident: &syn::Ident,
    attributes: Attributes,
    schemas: Schemas<'_>,
) -> syn::Result<(Value, proc_macro2::TokenStream)> {
    let Attributes {
        annotations,
        headers,
        serves,
        input_schema: raw_schema,
        task,
    } = attributes;
    let headers = &headers;
    let name = func.sig.ident.to_string();
    if !berm_abi::is_valid_name(&name) {
        return Err(syn::Error::new_spanned(
            &func.sig.ident,
            "tool names must match [a-z0-9][a-z0-9_-]{0,63}",
        ));
    }
    if func.sig.asyncness.is_some() || !func.sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &func.sig,
            "a tool is a plain, non-generic, non-async function",
        ));
    }
    let (description, sections) = split_doc(&doc_lines(&func.attrs));
    let arg_docs = argument_docs(&sections);

    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut fields = Vec::new();
    let mut idents = Vec::new();
    for input in &func.sig.inputs {
        let FnArg::Typed(typed) = input else {
            return Err(syn::Error::new_spanned(input, "a tool takes no `self`"));
        };
        let Pat::Ident(pat) = typed.pat.as_ref() else {
            return Err(syn::Error::new_spanned(
                &typed.pat,
                "tool parameters must be plain names",
            ));
        };
        let ident = pat.ident.clone();
        let field = ident.to_string();
        if raw_schema.is_some() {
            // The schema is as written; the host checks arguments against it before the
            // call, and an absent `Option` parameter reads as `None`.
            let ty = &typed.ty;
            fields.push(quote! { #ident: #ty });
            idents.push(ident);
            continue;
        }
        let (mut schema, is_required) = schemas.schema_for(&typed.ty)?;
        if let (Some(text), Value::Object(map)) = (arg_docs.get(&field), &mut schema) {
            map.insert("description".into(), text.clone());
        }
        properties.insert(field.clone(), schema);
        let ty = &typed.ty;
        if is_required {
            required.push(field);
            fields.push(quote! { #ident: #ty });
        } else {
            fields.push(quote! { #[serde(default)] #ident: #ty });
        }
        idents.push(ident);
    }
    for (param, header) in headers {
        let Some(Value::Object(schema)) = properties.get_mut(&param.to_string()) else {
            return Err(syn::Error::new_spanned(
                param,
                "no parameter of this tool has this name",
            ));
        };
        // bermd refuses the rest at deploy (a number, an object, a duplicate); a string,
        // an integer or a bool is what SEP-2243 mirrors.
        schema.insert(
            berm_abi::MCP_HEADER_KEYWORD.into(),
            Value::from(header.value()),
        );
    }
    let mut input_schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        input_schema["required"] = json!(required);
    }
    if let Some(raw) = raw_schema {
        if !headers.is_empty() {
            return Err(syn::Error::new_spanned(
                &func.sig.ident,
                "with input_schema, write `x-mcp-header` into the schema itself",
            ));
        }
        input_schema = raw;
    }
    let mut manifest_tool = json!({
        "name": name,
        "description": description,
        "input_schema": input_schema,
    });
    if let Some(output) = schemas.output_schema(&func.sig.output)? {
        manifest_tool["output_schema"] = output;
    }
    if let Some(annotations) = annotations {
        manifest_tool["annotations"] = annotations;
    }
    if let Some(serves) = serves {
        manifest_tool["serves"] = serves;
    }
    if let Some(task) = task {
        manifest_tool["task"] = task;
    }

    let fn_ident = &func.sig.ident;
    let export_name = format!("{}{}", berm_abi::TOOL_EXPORT_PREFIX, name);
    let wrapper = format_ident!("__berm_tool_{}", name.replace('-', "_"));
    let invoke = quote! { #mod_ident::#fn_ident(#(#idents),*) };
    let produce = match output_kind(&func.sig.output) {
        Output::Unit => quote! { { #invoke; Ok(::std::string::String::new()) } },
        Output::Text => {
            quote! { ::berm_guest::__private::text(Ok::<_, ::core::convert::Infallible>(#invoke)) }
        }
        Output::TextResult => quote! { ::berm_guest::__private::text(#invoke) },
        Output::JsonResult => quote! { ::berm_guest::__private::json(#invoke) },
        Output::Json => {
            quote! { ::berm_guest::__private::json(Ok::<_, ::core::convert::Infallible>(#invoke)) }
        }
    };
    let export = quote! {
        #[unsafe(export_name = #export_name)]
        // Parameters keep the names MCP gives them (a prompt's `resourceUri`).
        #[allow(non_snake_case)]
        extern "C" fn #wrapper() {
            // The parameter types as written in the module: its structs.
            #[allow(unused_imports)]
            use self::#mod_ident::*;
            #[derive(::berm_guest::__private::serde::Deserialize)]
            #[serde(crate = "::berm_guest::__private::serde", deny_unknown_fields)]
            struct Args { #(#fields),* }
            ::berm_guest::__private::run(|bytes| {
                let Args { #(#idents),* } = ::berm_guest::__private::parse_args(bytes)?;
                #produce
            });
        }
    };
    Ok((manifest_tool, export))
}
