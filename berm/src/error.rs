//! The two levels of result, and why a deploy was refused.

use std::fmt;
use std::time::Duration;

use crate::manifest::ManifestError;

/// A tool's successful result: the text it gave `berm.done`, and the content blocks it added
/// beside it with `berm.content` (images, audio, resources), in the order it added them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// The result text (JSON by the SDK's convention for structured results). May be empty
    /// when the blocks are the result.
    pub text: String,
    /// The blocks, each checked by [`berm_abi::content::parse`]; empty for most tools.
    pub content: Vec<Content>,
    /// Set when the tool ended asking its client for input (`berm.ask`) instead of giving a
    /// result: the host asks and runs the tool again with the answers.
    pub ask: Option<Ask>,
}

impl Output {
    /// A result of text alone.
    pub fn text(text: impl Into<String>) -> Output {
        Output {
            text: text.into(),
            content: Vec::new(),
            ask: None,
        }
    }
}

/// What a tool asked its client with `berm.ask`, checked ([`berm_abi::ask`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// The requests by key: each `{"method", "params"}`, the method one of
    /// [`berm_abi::ask::METHODS`] and `params` an object.
    pub requests: serde_json::Map<String, serde_json::Value>,
    /// What the tool wants back on the next run.
    pub state: Vec<u8>,
}

impl fmt::Display for Output {
    /// The text; blocks are not text, so they are left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One content block of an [`Output`], owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// What it is.
    pub kind: berm_abi::content::Kind,
    /// The resource's URI; empty for text, image and audio.
    pub uri: String,
    /// The media type; empty for text and where a resource gives none.
    pub mime_type: String,
    /// The text (UTF-8 for text, resource text and a link's name) or the bytes.
    pub body: Vec<u8>,
}

/// A program ran and reported that it could not do what was asked. This is a
/// *result*: an MCP client shows it to the model as a tool result with
/// `isError`, not as a protocol error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The program's own words.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Why the host could not produce a result for a call: the outer level of
/// [`crate::Berm::call`]. Every variant names the program and tool involved,
/// the tool as MCP clients see it (`{program}_{tool}`,
/// [`berm_abi::served_name`]), since these messages reach the model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing is deployed under that name.
    #[error("no program named `{0}` is deployed")]
    NoSuchProgram(String),
    /// The program has no such tool.
    #[error("program `{program}` has no tool `{tool}` (its tools: {available})")]
    NoSuchTool {
        /// The program.
        program: String,
        /// The tool asked for.
        tool: String,
        /// The tools it does have, comma-separated.
        available: String,
    },
    /// Nested calls went deeper than the limit.
    #[error("call depth limit of {limit} reached: `{program}_{tool}` was not called")]
    DepthExceeded {
        /// The program that would have been called.
        program: String,
        /// Its tool.
        tool: String,
        /// The limit.
        limit: u32,
    },
    /// The arguments exceed the program's cap.
    #[error("arguments to `{program}_{tool}` are {size} bytes, over the cap of {cap} bytes")]
    ArgsTooLarge {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// Size of the arguments.
        size: usize,
        /// The cap.
        cap: usize,
    },
    /// A program called a tool of another program that none of its `call=` grants names;
    /// nothing ran. The callee would have run with its own grants, so reaching it is a
    /// grant like any other syscall.
    #[error(
        "`{program}_{tool}` called `{callee}_{callee_tool}`, which is not granted to `{program}` \
         (grant `call={callee}` or `call={callee}_{callee_tool}` to allow it)"
    )]
    CallNotGranted {
        /// The calling program.
        program: String,
        /// Its tool that made the call.
        tool: String,
        /// The program it called.
        callee: String,
        /// The tool it called.
        callee_tool: String,
    },
    /// A program called a program its manifest's `calls` does not declare; nothing ran.
    /// What a program may call is part of what `berm inspect` shows before it runs.
    #[error(
        "`{program}_{tool}` called `{callee}`, which `{program}` does not declare in its \
         manifest's `calls` ({declared}); a program calls only the programs it declares"
    )]
    CallNotDeclared {
        /// The calling program.
        program: String,
        /// Its tool that made the call.
        tool: String,
        /// The program it called.
        callee: String,
        /// What the manifest declares, for the message (`declares none` or `declares a, b`).
        declared: String,
    },
    /// The arguments do not match the tool's input schema; nothing ran. The same check,
    /// and message, for a call from outside and a call between programs.
    #[error("invalid arguments for `{program}_{tool}`: {message}")]
    InvalidArguments {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// Which field, and what is wrong with it.
        message: String,
    },
    /// The program already runs as many calls as it may (from outside and from other
    /// programs alike); nothing ran.
    #[error(
        "`{program}` already has {cap} calls running, its cap (bermd --max-calls-per-program); \
         try again when one ends"
    )]
    Busy {
        /// The program.
        program: String,
        /// The cap.
        cap: usize,
    },
    /// The result or failure message exceeds the program's cap.
    #[error("`{program}_{tool}` produced {size} bytes, over the result cap of {cap} bytes")]
    ResultTooLarge {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// Size of what it produced.
        size: usize,
        /// The cap.
        cap: usize,
    },
    /// The call ran past its deadline and was stopped.
    #[error("`{program}_{tool}` ran past its deadline of {deadline:?} and was stopped")]
    Timeout {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// The deadline it was given (shared with the calls it made).
        deadline: Duration,
    },
    /// The program tried to grow its memory past the cap.
    #[error("`{program}_{tool}` tried to grow its memory past the cap of {cap} bytes")]
    MemoryCap {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// The cap.
        cap: usize,
    },
    /// The program exhausted its wasm stack.
    #[error("`{program}_{tool}` exhausted its stack of {limit} bytes (unbounded recursion?)")]
    StackOverflow {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// The stack limit.
        limit: usize,
    },
    /// The program panicked.
    #[error("`{program}_{tool}` panicked: {message}")]
    Panicked {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// The panic message.
        message: String,
    },
    /// The program called an import this host's syscall table does not serve.
    #[error("`{program}_{tool}` called `{syscall}`, which this host does not serve")]
    MissingSyscall {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// `module.name` of the import.
        syscall: String,
    },
    /// The program called a syscall the host serves but did not grant it.
    #[error(
        "`{program}_{tool}` called `{syscall}`, which is not granted to `{program}` (grant `{grant}` to allow it)"
    )]
    NotGranted {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// `module.name` of the import.
        syscall: String,
        /// The grant that would allow it.
        grant: String,
    },
    /// A syscall ended the call (the host decided the program must stop).
    #[error("`{program}_{tool}` was stopped by `{syscall}`: {message}")]
    Syscall {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// `module.name` of the syscall.
        syscall: String,
        /// What the syscall said.
        message: String,
    },
    /// The program broke the calling convention (bad pointer, no result…).
    #[error("`{program}_{tool}` broke the calling convention: {message}")]
    Convention {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// What it did.
        message: String,
    },
    /// Any other trap.
    #[error("`{program}_{tool}` trapped: {message}")]
    Trap {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// Wasmtime's description of the trap.
        message: String,
    },
    /// No instance could be created (e.g. every pool slot is busy).
    #[error("could not start `{program}_{tool}`: {message}")]
    Instantiate {
        /// The program.
        program: String,
        /// The tool.
        tool: String,
        /// Why.
        message: String,
    },
}

impl Error {
    /// Whether nothing ran: the call was refused before the program started
    /// (no such program or tool, depth, argument size). A program calling
    /// another sees this distinction.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::NoSuchProgram(_)
                | Error::NoSuchTool { .. }
                | Error::DepthExceeded { .. }
                | Error::ArgsTooLarge { .. }
                | Error::CallNotGranted { .. }
                | Error::CallNotDeclared { .. }
                | Error::InvalidArguments { .. }
                | Error::Busy { .. }
        )
    }
}

/// Why a deploy was refused. Nothing is deployed when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The program name breaks the naming rule.
    #[error(
        "`{0}` is not a valid program name: use 1-64 of a-z, 0-9, `-`, starting with a letter or digit (no `_`: it separates program and tool in the names MCP clients see, e.g. `notes_add`)"
    )]
    InvalidName(String),
    /// The image's manifest could not be read or is inconsistent.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Wasmtime rejected the module (validation or compilation).
    #[error("the module does not compile: {0}")]
    Compile(String),
    /// An import has a type that does not match berm's uniform signature.
    #[error("import `{import}` has type {found}; berm imports are (i32, i32) -> i64")]
    ImportType {
        /// `module.name` of the import.
        import: String,
        /// The type found.
        found: String,
    },
    /// The module imports a `berm.*` name the calling convention lacks.
    #[error("import `berm.{0}` is not part of berm's calling convention (ABI v{v})", v = berm_abi::ABI_VERSION)]
    UnknownConvention(String),
    /// A tool export or the memory export has the wrong type.
    #[error("export `{export}` {problem}")]
    Export {
        /// The export's name.
        export: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The program's limits exceed what this engine allows.
    #[error("memory cap of {cap} bytes exceeds this engine's maximum of {max} bytes")]
    Limits {
        /// The cap asked for.
        cap: usize,
        /// The engine's maximum.
        max: usize,
    },
    /// Reading or writing the compiled-code cache failed in a way that
    /// matters (a failed read simply recompiles).
    #[error("compiled-code cache at {path}: {message}")]
    Cache {
        /// The cache file or directory.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
}
