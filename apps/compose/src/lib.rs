//! compose: calls other programs by name.

/// Builds on other deployed programs by calling them by name.
///
/// # Usage
/// Reach for compose to see calls between programs: `shout` calls
/// `echo_echo`, `relay` calls a tool of a program it declares and reports how
/// it went. A call reaches only what its `call=` grants name: deploy it with
/// `--grant call=echo` for `shout`.
#[berm_guest::program(calls = ["echo", "compose", "hostile", "files"])]
mod compose {
    use berm_guest::CallError;

    /// Echo a message through the `echo` program, in capitals.
    ///
    /// # Arguments
    /// - `message`: the text to shout
    pub fn shout(message: String) -> Result<String, CallError> {
        let echoed = berm_guest::call("echo", "echo", &serde_json::json!({ "message": message }))?;
        Ok(echoed.to_uppercase())
    }

    /// Call `program.tool` (one of echo, compose, hostile, files, as granted)
    /// with `args` and report what happened, as JSON:
    /// `{"outcome": "done" | "failed" | "refused" | "fault", "text": …}`.
    ///
    /// # Arguments
    /// - `program`: the program to call
    /// - `tool`: its tool
    /// - `args`: the arguments object
    pub fn relay(program: String, tool: String, args: serde_json::Value) -> serde_json::Value {
        let (outcome, text, code) = match berm_guest::call(&program, &tool, &args) {
            Ok(text) => ("done", text, None),
            Err(CallError::Failed(text)) => ("failed", text, None),
            Err(CallError::Refused { code, message }) => ("refused", message, Some(code.name())),
            Err(CallError::Fault(text)) => ("fault", text, None),
        };
        serde_json::json!({ "outcome": outcome, "text": text, "code": code })
    }

    /// Call itself `depth` more times (or forever when `depth` is absent):
    /// shows the call-depth limit.
    ///
    /// # Arguments
    /// - `depth`: how many more levels to go
    pub fn recurse(depth: Option<u32>) -> Result<String, CallError> {
        match depth {
            Some(0) => Ok("bottom".into()),
            _ => berm_guest::call(
                "compose",
                "recurse",
                &serde_json::json!({ "depth": depth.map(|d| d - 1) }),
            ),
        }
    }
}
