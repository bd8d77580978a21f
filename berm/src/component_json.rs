//! Values of a component's plain exported functions as JSON, both ways, by Wasmtime's view
//! of their WIT types: the same mapping as `berm_manifest::schema` derives schemas with
//! (docs/components.md has the table). The host checks arguments against the derived schema
//! before a call; what is refused here is what a schema cannot say (a float's range).

use serde_json::{Map, Number, Value};
use wasmtime::component::{Type, Val};

/// Why a value does not fit its type; the message names where.
pub(crate) type Mismatch = String;

/// The value of type `ty` that `json` spells. `at` names the place, for the message.
pub(crate) fn to_val(ty: &Type, json: &Value, at: &str) -> Result<Val, Mismatch> {
    let wrong = |what: &str| Err(format!("{at}: expected {what}, found {json}"));
    macro_rules! int {
        ($variant:ident, $t:ty) => {
            match json.as_i64().and_then(|n| <$t>::try_from(n).ok()) {
                Some(n) => Ok(Val::$variant(n)),
                None => match json.as_u64().and_then(|n| <$t>::try_from(n).ok()) {
                    Some(n) => Ok(Val::$variant(n)),
                    None => wrong(concat!("an integer that fits ", stringify!($t))),
                },
            }
        };
    }
    match ty {
        Type::Bool => json
            .as_bool()
            .map(Val::Bool)
            .map_or_else(|| wrong("a boolean"), Ok),
        Type::S8 => int!(S8, i8),
        Type::U8 => int!(U8, u8),
        Type::S16 => int!(S16, i16),
        Type::U16 => int!(U16, u16),
        Type::S32 => int!(S32, i32),
        Type::U32 => int!(U32, u32),
        Type::S64 => int!(S64, i64),
        Type::U64 => int!(U64, u64),
        Type::Float32 => match json.as_f64() {
            Some(n) if n.is_finite() && (n as f32).is_finite() => Ok(Val::Float32(n as f32)),
            _ => wrong("a number that fits f32"),
        },
        Type::Float64 => json
            .as_f64()
            .map(Val::Float64)
            .map_or_else(|| wrong("a number"), Ok),
        Type::Char => {
            let mut chars = json.as_str().unwrap_or("").chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Ok(Val::Char(c)),
                _ => wrong("one character"),
            }
        }
        Type::String => match json.as_str() {
            Some(s) => Ok(Val::String(s.to_string())),
            None => wrong("a string"),
        },
        Type::List(list) => {
            let Some(items) = json.as_array() else {
                return wrong("an array");
            };
            let item = list.ty();
            items
                .iter()
                .enumerate()
                .map(|(i, v)| to_val(&item, v, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()
                .map(Val::List)
        }
        Type::FixedLengthList(list) => {
            let Some(items) = json.as_array().filter(|a| a.len() == list.len() as usize) else {
                return wrong(&format!("an array of {}", list.len()));
            };
            let item = list.ty();
            items
                .iter()
                .enumerate()
                .map(|(i, v)| to_val(&item, v, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()
                .map(Val::FixedLengthList)
        }
        Type::Tuple(tuple) => {
            let Some(items) = json.as_array().filter(|a| a.len() == tuple.types().len()) else {
                return wrong(&format!("an array of {}", tuple.types().len()));
            };
            tuple
                .types()
                .zip(items)
                .enumerate()
                .map(|(i, (ty, v))| to_val(&ty, v, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()
                .map(Val::Tuple)
        }
        Type::Record(record) => {
            let Some(object) = json.as_object() else {
                return wrong("an object");
            };
            if let Some(extra) = object
                .keys()
                .find(|k| !record.fields().any(|f| f.name == k.as_str()))
            {
                return Err(format!("{at}: unknown field `{extra}`"));
            }
            let mut fields = Vec::new();
            for field in record.fields() {
                let at = format!("{at}.{}", field.name);
                let value = match object.get(field.name) {
                    Some(v) => to_val(&field.ty, v, &at)?,
                    None if matches!(field.ty, Type::Option(_)) => Val::Option(None),
                    None => return Err(format!("{at}: missing")),
                };
                fields.push((field.name.to_string(), value));
            }
            Ok(Val::Record(fields))
        }
        Type::Variant(variant) => {
            let (name, payload) = match json {
                Value::String(name) => (name.as_str(), None),
                Value::Object(o) if o.len() == 1 => {
                    let (k, v) = o
                        .iter()
                        .next()
                        .map(|(k, v)| (k.as_str(), v))
                        .unwrap_or(("", json));
                    (k, Some(v))
                }
                _ => return wrong("a case name, or an object of one case and its value"),
            };
            let Some(case) = variant.cases().find(|c| c.name == name) else {
                return Err(format!("{at}: no case `{name}`"));
            };
            let value = match (&case.ty, payload) {
                (Some(ty), Some(v)) => Some(Box::new(to_val(ty, v, &format!("{at}.{name}"))?)),
                (None, None) => None,
                (Some(_), None) => return Err(format!("{at}: case `{name}` carries a value")),
                (None, Some(_)) => return Err(format!("{at}: case `{name}` carries no value")),
            };
            Ok(Val::Variant(name.to_string(), value))
        }
        Type::Enum(e) => match json.as_str().filter(|s| e.names().any(|n| n == *s)) {
            Some(s) => Ok(Val::Enum(s.to_string())),
            None => wrong("one of the enum's names"),
        },
        Type::Option(option) => {
            let inner = option.ty();
            match json {
                Value::Null => Ok(Val::Option(None)),
                _ if matches!(inner, Type::Option(_)) => {
                    match json.as_object().and_then(|o| o.get("some")) {
                        Some(v) => Ok(Val::Option(Some(Box::new(to_val(&inner, v, at)?)))),
                        None => wrong("null or {\"some\": …}"),
                    }
                }
                _ => Ok(Val::Option(Some(Box::new(to_val(&inner, json, at)?)))),
            }
        }
        Type::Result(result) => {
            let object = json.as_object().filter(|o| o.len() == 1);
            let side = |ty: Option<Type>, v: &Value, at: &str| match ty {
                Some(ty) => to_val(&ty, v, at).map(|v| Some(Box::new(v))),
                None => Ok(None),
            };
            match object.and_then(|o| o.iter().next()) {
                Some((k, v)) if k == "ok" => {
                    Ok(Val::Result(Ok(side(result.ok(), v, &format!("{at}.ok"))?)))
                }
                Some((k, v)) if k == "err" => Ok(Val::Result(Err(side(
                    result.err(),
                    v,
                    &format!("{at}.err"),
                )?))),
                _ => wrong("{\"ok\": …} or {\"err\": …}"),
            }
        }
        Type::Flags(flags) => {
            let Some(items) = json.as_array() else {
                return wrong("an array of flag names");
            };
            let mut set = Vec::new();
            for item in items {
                match item.as_str().filter(|s| flags.names().any(|n| n == *s)) {
                    Some(s) => set.push(s.to_string()),
                    None => return Err(format!("{at}: `{item}` is not a flag")),
                }
            }
            Ok(Val::Flags(set))
        }
        Type::Map(_)
        | Type::Own(_)
        | Type::Borrow(_)
        | Type::Future(_)
        | Type::Stream(_)
        | Type::ErrorContext => Err(format!("{at}: this type has no JSON form")),
    }
}

/// The JSON of `val`.
pub(crate) fn to_json(val: &Val) -> Result<Value, Mismatch> {
    Ok(match val {
        Val::Bool(b) => Value::Bool(*b),
        Val::S8(n) => Value::from(*n),
        Val::U8(n) => Value::from(*n),
        Val::S16(n) => Value::from(*n),
        Val::U16(n) => Value::from(*n),
        Val::S32(n) => Value::from(*n),
        Val::U32(n) => Value::from(*n),
        Val::S64(n) => Value::from(*n),
        Val::U64(n) => Value::from(*n),
        Val::Float32(n) => float(f64::from(*n))?,
        Val::Float64(n) => float(*n)?,
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s.clone()),
        Val::List(items) | Val::FixedLengthList(items) | Val::Tuple(items) => {
            Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Val::Record(fields) => {
            let mut object = Map::new();
            for (name, value) in fields {
                object.insert(name.clone(), to_json(value)?);
            }
            Value::Object(object)
        }
        Val::Variant(name, None) | Val::Enum(name) => Value::String(name.clone()),
        Val::Variant(name, Some(value)) => one(name, to_json(value)?),
        Val::Option(None) => Value::Null,
        Val::Option(Some(inner)) => match &**inner {
            Val::Option(_) => one("some", to_json(inner)?),
            other => to_json(other)?,
        },
        Val::Result(Ok(v)) => one("ok", v.as_deref().map_or(Ok(Value::Null), to_json)?),
        Val::Result(Err(v)) => one("err", v.as_deref().map_or(Ok(Value::Null), to_json)?),
        Val::Flags(names) => Value::Array(names.iter().cloned().map(Value::String).collect()),
        Val::Map(_) | Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => {
            return Err("a value with no JSON form".into());
        }
    })
}

fn one(key: &str, value: Value) -> Value {
    let mut object = Map::new();
    object.insert(key.to_string(), value);
    Value::Object(object)
}

fn float(n: f64) -> Result<Value, Mismatch> {
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| format!("the result holds {n}, which JSON cannot carry"))
}
