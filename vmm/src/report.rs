//! The JSON lines berm-vmm writes on stderr. Every line is one JSON object with
//! `"source":"berm-vmm"` (or `"berm-init"` for guest events it relays, re-serialized from the
//! parsed line, never copied raw), so the CLI can read stderr line by line.

use std::io::Write;

use serde_json::{Map, Value};

/// Writes one `{"source":"berm-vmm","event":EVENT,...fields}` line to stderr.
pub fn line(event: &str, fields: Value) {
    let mut object = Map::new();
    object.insert("source".into(), "berm-vmm".into());
    object.insert("event".into(), event.into());
    if let Value::Object(fields) = fields {
        object.extend(fields);
    }
    emit(Value::Object(object));
}

/// Relays a parsed guest line, marked as coming from berm-init.
pub fn guest(line: &berm_vm_protocol::GuestLine) {
    let Ok(Value::Object(fields)) = serde_json::to_value(line) else {
        return;
    };
    let mut object = Map::new();
    object.insert("source".into(), "berm-init".into());
    object.extend(fields);
    emit(Value::Object(object));
}

fn emit(value: Value) {
    let mut text = value.to_string();
    text.push('\n');
    // stderr is unbuffered; one write per line keeps lines whole between threads.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
