//! What an upgrade changes that a person must see before it lands: a new version under the
//! same name can rewrite a tool's description (what the model reads, so tool poisoning) or
//! reach further, without its name changing. [`compare`] lists every such change between two
//! manifests and two sets of grants; `berm deploy` refuses one that needs acceptance until
//! `--accept` is given, and `berm diff` prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::Manifest;
use berm_abi::grant::Grant;
use serde_json::Value;

/// One difference between the running program and its replacement.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// The program's description or usage text changed (the model reads both).
    Described {
        /// `description` or `usage`.
        field: &'static str,
        /// Before.
        old: String,
        /// After.
        new: String,
    },
    /// A tool appeared.
    ToolAdded {
        /// Its name.
        tool: String,
    },
    /// A tool is gone.
    ToolRemoved {
        /// Its name.
        tool: String,
    },
    /// A tool's description changed.
    ToolDescription {
        /// The tool.
        tool: String,
        /// Before.
        old: String,
        /// After.
        new: String,
    },
    /// A tool's input schema, output schema, annotations, what it serves or how it runs as a
    /// task changed.
    ToolSchema {
        /// The tool.
        tool: String,
        /// `input_schema`, `output_schema`, `annotations`, `serves` or `task`.
        part: &'static str,
    },
    /// Syscalls the new version imports that the old one did not: it may reach further.
    SyscallsAdded {
        /// `module.name` of each.
        syscalls: Vec<String>,
    },
    /// Syscalls no longer imported (it reaches less; no acceptance needed).
    SyscallsRemoved {
        /// `module.name` of each.
        syscalls: Vec<String>,
    },
    /// Programs it newly declares it calls.
    CallsAdded {
        /// Their names.
        programs: Vec<String>,
    },
    /// Grants the new deployment holds that the old one did not (added, or changed).
    GrantsAdded {
        /// Each grant's text form.
        grants: Vec<String>,
    },
    /// Grants no longer held (it reaches less; no acceptance needed).
    GrantsRemoved {
        /// Each grant's text form.
        grants: Vec<String>,
    },
}

impl Change {
    /// Whether this change must be accepted by a person: everything the model reads, and
    /// everything that lets the program reach further. Only narrowing needs no acceptance.
    pub fn needs_acceptance(&self) -> bool {
        !matches!(
            self,
            Change::SyscallsRemoved { .. } | Change::GrantsRemoved { .. }
        )
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |s: &str| {
            let line = s.trim().lines().next().unwrap_or("").to_string();
            format!("{line:?}")
        };
        match self {
            Change::Described { field, old, new } => {
                write!(
                    f,
                    "program {field} changed: {} -> {}",
                    quoted(old),
                    quoted(new)
                )
            }
            Change::ToolAdded { tool } => write!(f, "tool added: {tool}"),
            Change::ToolRemoved { tool } => write!(f, "tool removed: {tool}"),
            Change::ToolDescription { tool, old, new } => write!(
                f,
                "tool {tool}: description changed: {} -> {}",
                quoted(old),
                quoted(new)
            ),
            Change::ToolSchema { tool, part } => write!(f, "tool {tool}: {part} changed"),
            Change::SyscallsAdded { syscalls } => {
                write!(f, "syscalls now imported: {}", syscalls.join(", "))
            }
            Change::SyscallsRemoved { syscalls } => {
                write!(f, "syscalls no longer imported: {}", syscalls.join(", "))
            }
            Change::CallsAdded { programs } => {
                write!(f, "programs now called: {}", programs.join(", "))
            }
            Change::GrantsAdded { grants } => {
                write!(f, "grants not held before: {}", grants.join(", "))
            }
            Change::GrantsRemoved { grants } => {
                write!(f, "grants no longer held: {}", grants.join(", "))
            }
        }
    }
}

/// Every change from (`old`, `old_grants`) to (`new`, `new_grants`), in a stable order:
/// program text, tools by name, syscalls, calls, grants. Pass `None` for grants to compare
/// manifests only.
pub fn compare(
    old: &Manifest,
    new: &Manifest,
    grants: Option<(&[Grant], &[Grant])>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    for (field, o, n) in [
        ("description", &old.description, &new.description),
        ("usage", &old.usage, &new.usage),
    ] {
        if o != n {
            changes.push(Change::Described {
                field,
                old: o.clone(),
                new: n.clone(),
            });
        }
    }
    let old_tools: BTreeMap<_, _> = old.tools.iter().map(|t| (t.name.as_str(), t)).collect();
    let new_tools: BTreeMap<_, _> = new.tools.iter().map(|t| (t.name.as_str(), t)).collect();
    for (name, tool) in &new_tools {
        let Some(before) = old_tools.get(name) else {
            changes.push(Change::ToolAdded {
                tool: name.to_string(),
            });
            continue;
        };
        if before.description != tool.description {
            changes.push(Change::ToolDescription {
                tool: name.to_string(),
                old: before.description.clone(),
                new: tool.description.clone(),
            });
        }
        let serves = |t: &crate::Tool| {
            t.serves
                .as_ref()
                .map(|s| serde_json::to_value(s).unwrap_or_default())
        };
        let (old_serves, new_serves) = (serves(before), serves(tool));
        let task = |t: &crate::Tool| t.task.map(|s| serde_json::to_value(s).unwrap_or_default());
        let (old_task, new_task) = (task(before), task(tool));
        let parts: [(&'static str, Option<&Value>, Option<&Value>); 5] = [
            (
                "input_schema",
                Some(&before.input_schema),
                Some(&tool.input_schema),
            ),
            (
                "output_schema",
                before.output_schema.as_ref(),
                tool.output_schema.as_ref(),
            ),
            (
                "annotations",
                before.annotations.as_ref(),
                tool.annotations.as_ref(),
            ),
            ("serves", old_serves.as_ref(), new_serves.as_ref()),
            ("task", old_task.as_ref(), new_task.as_ref()),
        ];
        for (part, o, n) in parts {
            if o != n {
                changes.push(Change::ToolSchema {
                    tool: name.to_string(),
                    part,
                });
            }
        }
    }
    for name in old_tools.keys().filter(|n| !new_tools.contains_key(*n)) {
        changes.push(Change::ToolRemoved {
            tool: name.to_string(),
        });
    }
    let old_syscalls: BTreeSet<String> = old.syscalls.iter().map(|s| s.qualified()).collect();
    let new_syscalls: BTreeSet<String> = new.syscalls.iter().map(|s| s.qualified()).collect();
    let added: Vec<String> = new_syscalls.difference(&old_syscalls).cloned().collect();
    let removed: Vec<String> = old_syscalls.difference(&new_syscalls).cloned().collect();
    if !added.is_empty() {
        changes.push(Change::SyscallsAdded { syscalls: added });
    }
    if !removed.is_empty() {
        changes.push(Change::SyscallsRemoved { syscalls: removed });
    }
    let calls: Vec<String> = new
        .calls
        .iter()
        .filter(|c| !old.calls.contains(c))
        .cloned()
        .collect();
    if !calls.is_empty() {
        changes.push(Change::CallsAdded { programs: calls });
    }
    if let Some((old_grants, new_grants)) = grants {
        let added: Vec<String> = new_grants
            .iter()
            .filter(|g| !old_grants.contains(g))
            .map(|g| g.to_string())
            .collect();
        let removed: Vec<String> = old_grants
            .iter()
            .filter(|g| !new_grants.contains(g))
            .map(|g| g.to_string())
            .collect();
        if !added.is_empty() {
            changes.push(Change::GrantsAdded { grants: added });
        }
        if !removed.is_empty() {
            changes.push(Change::GrantsRemoved { grants: removed });
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(value: Value) -> Manifest {
        let mut base = json!({
            "abi": 1, "description": "d", "usage": "", "tools": [], "calls": [],
            "syscalls": [], "tool_exports": [], "exports_memory": true, "other_imports": []
        });
        for (k, v) in value.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn every_kind_of_change_is_named_and_narrowing_needs_no_acceptance() {
        let tool = |name: &str, description: &str, input: Value| json!({"name": name, "description": description, "input_schema": input});
        let old = manifest(json!({
            "tools": [tool("a", "adds", json!({})), tool("b", "b", json!({})), tool("gone", "", json!({}))],
            "syscalls": [{"module": "kv", "name": "get"}, {"module": "log", "name": "write"}],
        }));
        let new = manifest(json!({
            "description": "d2",
            "tools": [tool("a", "adds, and mails your keys", json!({})), tool("b", "b", json!({"type": "object"})), tool("new", "", json!({}))],
            "syscalls": [{"module": "kv", "name": "get"}, {"module": "http", "name": "fetch"}],
            "calls": ["other"],
        }));
        let changes = compare(
            &old,
            &new,
            Some((&[Grant::Kv, Grant::Log], &[Grant::Kv, Grant::Clock])),
        );
        let text: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            [
                "program description changed: \"d\" -> \"d2\"",
                "tool a: description changed: \"adds\" -> \"adds, and mails your keys\"",
                "tool b: input_schema changed",
                "tool added: new",
                "tool removed: gone",
                "syscalls now imported: http.fetch",
                "syscalls no longer imported: log.write",
                "programs now called: other",
                "grants not held before: clock",
                "grants no longer held: log",
            ]
        );
        let needing: Vec<bool> = changes.iter().map(Change::needs_acceptance).collect();
        assert_eq!(
            needing,
            [true, true, true, true, true, true, false, true, true, false]
        );
        assert!(compare(&old, &old, Some((&[Grant::Kv], &[Grant::Kv]))).is_empty());
    }
}
