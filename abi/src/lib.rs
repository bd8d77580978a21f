//! The berm ABI, declared once.
//!
//! Everything that the host (`berm`, `bermd`) and the guest SDK (`berm-guest`)
//! must agree on lives here: the names of the calling-convention imports, the
//! export and section names, the encoding of the one `i64` word every import
//! returns, the framing of multi-part requests, and the table of syscalls a
//! host may offer. The guest's import stubs are generated from
//! [`for_each_syscall!`] and the host checks its definitions against
//! [`SYSCALLS`], so the two sides cannot drift. `docs/design/abi.md` is the
//! prose version of this file.
#![forbid(unsafe_code)]

pub mod ask;
pub mod codes;
pub mod content;
pub mod frame;
pub mod grant;
pub mod net;
mod text;
pub mod word;

/// Version of the ABI a program was built against; a manifest with another
/// version is refused at deploy.
pub const ABI_VERSION: u32 = 1;

/// Name of the custom section that holds the program's manifest (JSON).
pub const MANIFEST_SECTION: &str = "berm.manifest";

/// Prefix of every tool export: tool `echo` is the export `berm_tool_echo`,
/// of type `() -> ()`.
pub const TOOL_EXPORT_PREFIX: &str = "berm_tool_";

/// The linear memory every program exports; requests and replies live in it.
pub const MEMORY_EXPORT: &str = "memory";

/// The import module of the calling convention and of `call`, the one syscall
/// berm serves itself.
pub const CONVENTION_MODULE: &str = "berm";

/// Imports of the calling convention. Every one has the uniform signature
/// `(ptr: i32, len: i32) -> i64`.
pub mod convention {
    /// Copies the call's arguments to `ptr` when `len` is large enough; always
    /// returns their total length, so a guest asks with `len = 0` first.
    pub const ARGS: &str = "args";
    /// Ends the call with the result at `(ptr, len)` (UTF-8).
    pub const DONE: &str = "done";
    /// Ends the call with a failure message at `(ptr, len)` (UTF-8): the
    /// program ran and says it could not do what was asked.
    pub const FAIL: &str = "fail";
    /// Copies the staged reply of the last syscall to `ptr` (at most `len`
    /// bytes) and returns how many bytes were copied.
    pub const REPLY: &str = "reply";
    /// Records a panic message before the guest traps, so the host error can
    /// say what went wrong.
    pub const PANIC: &str = "panic";
    /// Calls another deployed program's tool by name: the one syscall berm
    /// serves itself. Request: frames `[program, tool, args]`. Linked only for a
    /// program with a `call=` grant, and a call reaches only what those grants and the
    /// manifest's `calls` both name.
    pub const CALL: &str = "call";
    /// Adds one content block to the call's result, beside the text `done` gives: an image,
    /// audio, an embedded resource, a resource link or more text (MCP's content blocks).
    /// Request: frames [`crate::content`]. Always linked: it reaches only the caller.
    pub const CONTENT: &str = "content";
    /// Reports how far the call has got: frames `[progress, total, message]`, the numbers as
    /// decimal text (`total` and `message` may be empty). Reaches only the caller, as MCP's
    /// `notifications/progress` when its request asked for progress, so it is always linked;
    /// in a call from another program it goes nowhere.
    pub const PROGRESS: &str = "progress";
    /// Ends the call asking the client for input: frames `[requests, state]`, the requests
    /// as a JSON object of MCP input requests by key ([`crate::ask`]). The host asks the
    /// client and runs the tool again, in a fresh instance, with the answers and the state
    /// ([`INPUT`]). Linked only for a program with the `ask` grant.
    pub const ASK: &str = "ask";
    /// Copies what the call carries from an earlier `ask` to `ptr` when `len` is large enough
    /// (frames `[responses, state, client_capabilities]`, [`crate::ask`]); returns its total
    /// length, `0` when the call carries nothing. Always linked: it reads only the call.
    pub const INPUT: &str = "input";

    /// All calling-convention import names.
    pub const ALL: [&str; 10] = [
        ARGS, DONE, FAIL, REPLY, PANIC, CALL, CONTENT, PROGRESS, ASK, INPUT,
    ];

    /// The convention imports a grant opens, which a manifest lists among its syscalls.
    pub const GRANTED: [&str; 2] = [CALL, ASK];
}

/// One syscall a host may offer: an import `module.name` with the uniform
/// signature `(ptr: i32, len: i32) -> i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyscallSpec {
    /// Import module, which is also the unit of granting (`--grant kv`).
    pub module: &'static str,
    /// Import name within the module.
    pub name: &'static str,
    /// What `(ptr, len)` points at.
    pub request: &'static str,
    /// What the returned word and the staged reply mean on success.
    pub reply: &'static str,
}

impl SyscallSpec {
    /// `module.name`, the form used in manifests, errors and `berm inspect`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.module, self.name)
    }
}

/// Invokes `$callback! { (module, name, rust_ident, request, reply), ... }`
/// with every syscall a host may offer. The guest SDK generates its import
/// stubs from this, and [`SYSCALLS`] is built from it, so there is exactly one
/// list.
#[macro_export]
macro_rules! for_each_syscall {
    ($callback:ident) => {
        $callback! {
            ("log", "write", log_write,
                "frames [level, message]; level is one of error, warn, info, debug, trace",
                "0"),
            ("clock", "now", clock_now,
                "ignored (pass 0, 0)",
                "the wall-clock time in nanoseconds since the Unix epoch"),
            ("clock", "sleep", clock_sleep,
                "frames [milliseconds], as decimal text",
                "0 once that long has passed, or at the call's deadline if that comes first"),
            ("random", "fill", random_fill,
                "a buffer the host fills with cryptographically secure random bytes",
                "0"),
            ("kv", "get", kv_get,
                "frames [key]",
                "the value's length; the value is staged"),
            ("kv", "put", kv_put,
                "frames [key, value]",
                "0"),
            ("kv", "delete", kv_delete,
                "frames [key]",
                "0, or not_found"),
            ("kv", "list", kv_list,
                "frames [prefix]",
                "the staged reply's length; the reply is frames, one key each, sorted"),
            ("fs", "read", fs_read,
                "frames [path]",
                "the file's length; the contents are staged"),
            ("fs", "write", fs_write,
                "frames [path, contents]",
                "0"),
            ("fs", "list", fs_list,
                "frames [path]",
                "the staged reply's length; the reply is a JSON array of {name, kind, size}"),
            ("fs", "remove", fs_remove,
                "frames [path]",
                "0"),
            ("http", "fetch", http_fetch,
                "frames [method, url, headers, body]; headers is frames [name, value, name, value, ...]",
                "the staged reply's length; the reply is frames [status (decimal text), headers (frames as in the request), body]"),
        }
    };
}

macro_rules! syscall_table {
    ($(($module:tt, $name:tt, $ident:ident, $request:tt, $reply:tt)),* $(,)?) => {
        /// Every syscall a host may offer, in one table.
        pub const SYSCALLS: &[SyscallSpec] = &[
            $(SyscallSpec { module: $module, name: $name, request: $request, reply: $reply }),*
        ];
    };
}
for_each_syscall!(syscall_table);

/// The grant that allows `module`'s syscalls, as `berm deploy --grant` spells it, for
/// messages that tell a user what to grant: the module's own name, except where the grant
/// names what it reaches (`fs=DIR`, `net=HOST[:PORT]` for `http`, `call=PROGRAM` for
/// `berm.call`).
pub fn grant_for(module: &str) -> &str {
    match module {
        "fs" => "fs=DIR",
        "http" => "net=HOST[:PORT]",
        CONVENTION_MODULE => "call=PROGRAM",
        other => other,
    }
}

/// Looks a syscall up by module and name.
pub fn syscall(module: &str, name: &str) -> Option<&'static SyscallSpec> {
    SYSCALLS
        .iter()
        .find(|spec| spec.module == module && spec.name == name)
}

/// Splits the value of an `fs=` grant (`DIR[:ro|:rw][:bytes=N][:entries=N]`)
/// into its directory and its options, kept as written with their leading
/// colon. Options are taken from the right while they are well formed, so
/// a directory name may itself hold a colon. `berm.toml` (berm-app, which
/// resolves the directory) and the control API's grants (which read the
/// options) share this one rule.
pub fn split_fs_grant(value: &str) -> (&str, &str) {
    let mut dir = value;
    while let Some((head, option)) = dir.rsplit_once(':') {
        let numeric = |key: &str| {
            option
                .strip_prefix(key)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        if option == "ro" || option == "rw" || numeric("bytes=") || numeric("entries=") {
            dir = head;
        } else {
            break;
        }
    }
    (dir, &value[dir.len()..])
}

/// Whether `name` is a valid tool name: `[a-z0-9][a-z0-9_-]{0,63}`. No dots:
/// MCP clients accept only `^[a-zA-Z0-9_-]{1,64}$` in the names they see.
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// The property keyword (in a tool's input schema) that asks a 2026-07-28 client to mirror
/// an argument into the HTTP header `Mcp-Param-<NAME>` (SEP-2243), so that proxies and
/// gateways can route on it without reading the body.
pub const MCP_HEADER_KEYWORD: &str = "x-mcp-header";

/// Whether `name` may follow `Mcp-Param-` in a header name: 1 to 64 of HTTP's token
/// characters (RFC 9110 `tchar`: letters, digits and ``!#$%&'*+-.^_`|~``), so no space, colon,
/// control character or non-ASCII, which SEP-2243 forbids.
pub fn is_valid_mcp_header_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `name` is a valid program name: `[a-z0-9][a-z0-9-]{0,63}`, a tool
/// name without `_`. bermd serves tool `t` of program `p` as `p_t`
/// ([`served_name`]); with no `_` in `p`, the first `_` of a served name is
/// the separator, so every served name maps back to one (program, tool).
pub fn is_valid_program_name(name: &str) -> bool {
    is_valid_name(name) && !name.contains('_')
}

/// The separator between program and tool in a served tool name.
pub const SERVED_NAME_SEPARATOR: char = '_';

/// The longest served tool name: what Claude Desktop and claude.ai accept
/// (`^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_SERVED_NAME: usize = 64;

/// The name MCP clients see for tool `tool` of program `program`:
/// `{program}_{tool}`.
pub fn served_name(program: &str, tool: &str) -> String {
    let mut name = String::with_capacity(program.len() + 1 + tool.len());
    name.push_str(program);
    name.push(SERVED_NAME_SEPARATOR);
    name.push_str(tool);
    name
}

/// Splits a served name into (program, tool) at its first `_`; `None` when it
/// has none. The inverse of [`served_name`] for valid program names.
pub fn split_served_name(name: &str) -> Option<(&str, &str)> {
    name.split_once(SERVED_NAME_SEPARATOR)
}

/// Whether `name` is a valid app name: `[a-z][a-z0-9-]{0,30}`. An app's name is also its
/// tag, its cgroup (`/berm/apps/<name>`) and its workspace directory inside the microVM, so it
/// is shorter and plainer than a program name. The one rule berm-app checks `berm.toml` with
/// and berm-init checks `launch.json` with.
pub fn is_valid_app_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=31).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_grants_split_at_their_options() {
        assert_eq!(split_fs_grant("data"), ("data", ""));
        assert_eq!(split_fs_grant("a:b:ro"), ("a:b", ":ro"));
        assert_eq!(
            split_fs_grant("/d:rw:bytes=10:entries=2"),
            ("/d", ":rw:bytes=10:entries=2")
        );
        assert_eq!(split_fs_grant("/d:bytes=x"), ("/d:bytes=x", ""));
        assert_eq!(split_fs_grant("/d:bytes="), ("/d:bytes=", ""));
    }

    #[test]
    fn names_follow_the_rule() {
        for ok in ["echo", "a", "0x", "read_file", "my-tool", &"a".repeat(64)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "Echo", "_x", "-x", "a.b", "a b", "é", &"a".repeat(65)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn program_names_have_no_separator_so_served_names_split_back() {
        assert!(is_valid_program_name("my-notes"));
        assert!(!is_valid_program_name("my_notes"));
        for (program, tool) in [("echo", "echo"), ("files", "read_file"), ("a-b", "c_d-e")] {
            let served = served_name(program, tool);
            assert_eq!(split_served_name(&served), Some((program, tool)));
        }
        assert_eq!(split_served_name("echo.echo"), None);
    }

    #[test]
    fn app_names_follow_their_rule() {
        for ok in ["notes", "a", "a-1", &"a".repeat(31)] {
            assert!(is_valid_app_name(ok), "{ok}");
        }
        for bad in ["", "0x", "Notes", "a_b", "-a", "a.b", "é", &"a".repeat(32)] {
            assert!(!is_valid_app_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_table_has_no_duplicates_and_no_convention_names() {
        for (i, a) in SYSCALLS.iter().enumerate() {
            assert_ne!(a.module, CONVENTION_MODULE);
            for b in &SYSCALLS[i + 1..] {
                assert!(
                    a.module != b.module || a.name != b.name,
                    "{}",
                    a.qualified()
                );
            }
        }
        assert_eq!(
            syscall("kv", "get").map(|s| s.qualified()),
            Some("kv.get".into())
        );
        assert!(syscall("fs", "chmod").is_none());
    }
}
