//! JSON Schemas of WIT types: the input and output schemas of a component's plain exported
//! functions, which carry no berm manifest (docs/components.md has the table this follows).
//!
//! The runtime (`berm`) converts values with the same rules, from Wasmtime's view of the same
//! types; `berm/tests` holds the two to each other on a component exporting every type.

use serde_json::{Map, Value, json};
use wit_parser::{Docs, Function, Handle, Resolve, Type, TypeDefKind};

/// Why a function has no JSON form, so it is not a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrepresentable(pub String);

/// The input schema of `function`: an object with one property per parameter, all required
/// but `option<…>` ones.
///
/// # Errors
/// [`Unrepresentable`] when a parameter's type has no JSON form (a resource, a future, …).
pub fn input_schema(resolve: &Resolve, function: &Function) -> Result<Value, Unrepresentable> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for param in &function.params {
        properties.insert(param.name.clone(), schema(resolve, &param.ty)?);
        if !is_option(resolve, &param.ty) {
            required.push(Value::from(param.name.clone()));
        }
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

/// The output schema of `function`: `{"result": <its type>}`, where a top-level `result<T, E>`
/// contributes `T` (its `E` is the tool's failure); `None` for a function returning nothing.
///
/// # Errors
/// [`Unrepresentable`] when the return type has no JSON form.
pub fn output_schema(
    resolve: &Resolve,
    function: &Function,
) -> Result<Option<Value>, Unrepresentable> {
    let Some(ty) = &function.result else {
        // Still checked: a function whose failure type has no JSON form is no tool.
        return Ok(None);
    };
    let result = match top_level_result(resolve, ty) {
        Some((ok, err)) => {
            if let Some(err) = err {
                schema(resolve, &err)?;
            }
            match ok {
                Some(ok) => schema(resolve, &ok)?,
                None => json!({"type": "null"}),
            }
        }
        None => schema(resolve, ty)?,
    };
    Ok(Some(json!({
        "type": "object",
        "properties": {"result": result},
        "required": ["result"],
        "additionalProperties": false,
    })))
}

/// `(ok, err)` when `ty` is a `result` (through aliases).
pub fn top_level_result(resolve: &Resolve, ty: &Type) -> Option<(Option<Type>, Option<Type>)> {
    match resolved(resolve, ty) {
        Some(TypeDefKind::Result(r)) => Some((r.ok, r.err)),
        _ => None,
    }
}

/// The definition behind `ty`, through aliases; `None` for a primitive.
fn resolved<'a>(resolve: &'a Resolve, ty: &Type) -> Option<&'a TypeDefKind> {
    let mut ty = *ty;
    loop {
        let Type::Id(id) = ty else { return None };
        match &resolve.types[id].kind {
            TypeDefKind::Type(inner) => ty = *inner,
            kind => return Some(kind),
        }
    }
}

/// Whether `ty` is an `option<…>` (through aliases).
fn is_option(resolve: &Resolve, ty: &Type) -> bool {
    matches!(resolved(resolve, ty), Some(TypeDefKind::Option(_)))
}

/// Whether a value of `ty` may be JSON `null`: an option, or a result/tuple-less unit never
/// is; so `option<option<T>>` needs the inner level spelled `{"some": …}`.
pub fn may_be_null(resolve: &Resolve, ty: &Type) -> bool {
    is_option(resolve, ty)
}

/// The JSON Schema of `ty`, with the type's docs as its `description`.
///
/// # Errors
/// [`Unrepresentable`] for resources, futures, streams, error contexts and maps.
pub fn schema(resolve: &Resolve, ty: &Type) -> Result<Value, Unrepresentable> {
    let integer = |min: i128, max: i128| json!({"type": "integer", "minimum": min, "maximum": max});
    Ok(match ty {
        Type::Bool => json!({"type": "boolean"}),
        Type::U8 => integer(0, u8::MAX.into()),
        Type::U16 => integer(0, u16::MAX.into()),
        Type::U32 => integer(0, u32::MAX.into()),
        Type::U64 => integer(0, u64::MAX.into()),
        Type::S8 => integer(i8::MIN.into(), i8::MAX.into()),
        Type::S16 => integer(i16::MIN.into(), i16::MAX.into()),
        Type::S32 => integer(i32::MIN.into(), i32::MAX.into()),
        Type::S64 => integer(i64::MIN.into(), i64::MAX.into()),
        Type::F32 | Type::F64 => json!({"type": "number"}),
        Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
        Type::String => json!({"type": "string"}),
        Type::ErrorContext => return Err(Unrepresentable("an error-context".into())),
        Type::Id(id) => {
            let def = &resolve.types[*id];
            let mut schema = definition(resolve, &def.kind)?;
            described(&mut schema, &def.docs);
            schema
        }
    })
}

fn definition(resolve: &Resolve, kind: &TypeDefKind) -> Result<Value, Unrepresentable> {
    let object_with = |key: &str, value: Value| {
        json!({
            "type": "object",
            "properties": {key: value},
            "required": [key],
            "additionalProperties": false,
        })
    };
    Ok(match kind {
        TypeDefKind::Type(inner) => schema(resolve, inner)?,
        TypeDefKind::Record(record) => {
            let mut properties = Map::new();
            let mut required = Vec::new();
            for field in &record.fields {
                let mut field_schema = schema(resolve, &field.ty)?;
                described(&mut field_schema, &field.docs);
                properties.insert(field.name.clone(), field_schema);
                if !is_option(resolve, &field.ty) {
                    required.push(Value::from(field.name.clone()));
                }
            }
            json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            })
        }
        TypeDefKind::Variant(variant) => {
            let mut cases = Vec::new();
            for case in &variant.cases {
                let mut case_schema = match &case.ty {
                    Some(ty) => object_with(&case.name, schema(resolve, ty)?),
                    None => json!({"const": case.name}),
                };
                described(&mut case_schema, &case.docs);
                cases.push(case_schema);
            }
            json!({"oneOf": cases})
        }
        TypeDefKind::Enum(e) => {
            let names: Vec<&str> = e.cases.iter().map(|c| c.name.as_str()).collect();
            json!({"type": "string", "enum": names})
        }
        TypeDefKind::Flags(flags) => {
            let names: Vec<&str> = flags.flags.iter().map(|f| f.name.as_str()).collect();
            json!({"type": "array", "items": {"enum": names}, "uniqueItems": true})
        }
        TypeDefKind::Tuple(tuple) => {
            let items = tuple
                .types
                .iter()
                .map(|ty| schema(resolve, ty))
                .collect::<Result<Vec<_>, _>>()?;
            let n = items.len();
            json!({"type": "array", "prefixItems": items, "items": false, "minItems": n, "maxItems": n})
        }
        TypeDefKind::Option(inner) => {
            let inner_schema = schema(resolve, inner)?;
            let some = if may_be_null(resolve, inner) {
                object_with("some", inner_schema)
            } else {
                inner_schema
            };
            json!({"anyOf": [some, {"type": "null"}]})
        }
        TypeDefKind::Result(r) => {
            let side = |ty: &Option<Type>| match ty {
                Some(ty) => schema(resolve, ty),
                None => Ok(json!({"type": "null"})),
            };
            json!({"oneOf": [object_with("ok", side(&r.ok)?), object_with("err", side(&r.err)?)]})
        }
        TypeDefKind::List(inner) => json!({"type": "array", "items": schema(resolve, inner)?}),
        TypeDefKind::FixedLengthList(inner, n) => json!({
            "type": "array", "items": schema(resolve, inner)?, "minItems": n, "maxItems": n,
        }),
        TypeDefKind::Resource | TypeDefKind::Handle(Handle::Own(_) | Handle::Borrow(_)) => {
            return Err(Unrepresentable("a resource".into()));
        }
        TypeDefKind::Future(_) => return Err(Unrepresentable("a future".into())),
        TypeDefKind::Stream(_) => return Err(Unrepresentable("a stream".into())),
        TypeDefKind::Map(..) => return Err(Unrepresentable("a map".into())),
        TypeDefKind::Unknown => return Err(Unrepresentable("a type of unknown shape".into())),
    })
}

/// Adds `docs` as the schema's `description`, when there are any.
fn described(schema: &mut Value, docs: &Docs) {
    if let (Some(text), Some(object)) = (docs.contents.as_deref(), schema.as_object_mut()) {
        let text = text.trim();
        if !text.is_empty() {
            object.insert("description".into(), Value::from(text));
        }
    }
}
