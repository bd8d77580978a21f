//! conformance: the tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls, plus structured results.
//! Deployed as program `test`, its tools are served as `test_simple_text`,
//! `test_error_handling` and `test_tool_with_logging`: the names the suite's
//! scenarios ask for, with `test_image_content`, `test_audio_content`,
//! `test_embedded_resource`, `test_multiple_content_types` (content blocks) and
//! `test_tool_with_progress`; `test_routed` mirrors its argument into a header for the
//! 2026-07-28 custom-header scenario. It serves the suite's resources (`test://static-text`,
//! `test://static-binary`, `test://watched-resource`, the template
//! `test://template/{id}/data`; and `test://template/{id}/guarded`, which asks first) and
//! prompts (`test_simple_prompt`, `test_prompt_with_arguments`,
//! `test_prompt_with_embedded_resource`, `test_prompt_with_image`) through tools marked
//! `resource`, `resource_template` or `prompt`.

/// Tools for testing MCP clients and servers against the specification.
///
/// # Usage
/// Reach for these only to check that an MCP client and berm agree: plain
/// text, an error result, log messages during a call, structured results, content
/// blocks, progress, resources and prompts, questions to the client, and tasks.
#[berm_guest::program]
mod conformance {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    /// Counts of a text.
    #[derive(Serialize)]
    pub struct TextStats {
        /// Characters (Unicode scalar values).
        pub chars: u64,
        /// Words, split at whitespace.
        pub words: u64,
        /// Lines.
        pub lines: u64,
        /// The longest word, when there is one.
        pub longest: Option<String>,
    }

    /// A rectangle.
    #[derive(Deserialize)]
    pub struct Rect {
        /// Width.
        pub width: f64,
        /// Height.
        pub height: f64,
    }

    /// The area and perimeter of a rectangle.
    #[derive(Serialize)]
    pub struct Measure {
        /// width × height.
        pub area: f64,
        /// 2 × (width + height).
        pub perimeter: f64,
    }

    /// Return a fixed text: the simplest tool result.
    #[berm(read_only, idempotent)]
    pub fn simple_text() -> String {
        "This is a simple text response for testing.".to_string()
    }

    /// Fail on purpose: a result marked as an error, which the model reads.
    #[berm(read_only, idempotent)]
    pub fn error_handling() -> Result<String, String> {
        Err("This tool intentionally returns an error for testing".to_string())
    }

    /// Write three log messages while running; an MCP client receives them
    /// as notifications/message from logger `test`.
    #[berm(read_only)]
    pub fn tool_with_logging() -> String {
        berm_guest::log::info("Tool execution started");
        berm_guest::log::info("Tool processing data");
        berm_guest::log::info("Tool execution completed");
        "Logged three messages.".to_string()
    }

    /// Write a message to the log `count` times (to see the per-call cap).
    ///
    /// # Arguments
    /// - `message`: what to write
    /// - `count`: how many times
    #[berm(read_only)]
    pub fn log_lines(message: String, count: u32) -> String {
        for _ in 0..count {
            berm_guest::log::info(&message);
        }
        format!("Logged {count} messages.")
    }

    /// Count the characters, words and lines of a text (a structured
    /// result with an output schema).
    ///
    /// # Arguments
    /// - `text`: the text to count
    #[berm(read_only, idempotent)]
    pub fn text_stats(text: String) -> TextStats {
        TextStats {
            chars: text.chars().count() as u64,
            words: text.split_whitespace().count() as u64,
            lines: text.lines().count() as u64,
            longest: text
                .split_whitespace()
                .max_by_key(|w| w.chars().count())
                .map(str::to_string),
        }
    }

    /// How often each word occurs in a text (a map result).
    ///
    /// # Arguments
    /// - `text`: the text to count
    #[berm(read_only, idempotent)]
    pub fn word_counts(text: String) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for word in text.split_whitespace() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
        counts
    }

    /// Say which region a request was routed to: its `region` is mirrored into the HTTP
    /// header `Mcp-Param-Region` by a 2026-07-28 client (`x-mcp-header`), which bermd checks
    /// against the body.
    ///
    /// # Arguments
    /// - `region`: where the request is routed
    #[berm(read_only, idempotent, header(region = "Region"))]
    pub fn routed(region: String) -> String {
        format!("routed to {region}")
    }

    /// A 1×1 red PNG.
    const RED_PIXEL: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0d\x49\x44\x41\x54\x78\xda\x63\xfc\xcf\xc0\xf0\x1f\x00\x05\x05\x02\x00\x5f\xc8\xf1\xd2\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

    /// One millisecond of silence: a WAV file of 8 unsigned 8-bit samples at 8 kHz.
    const SILENCE: &[u8] = b"\x52\x49\x46\x46\x2c\x00\x00\x00\x57\x41\x56\x45\x66\x6d\x74\x20\x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x40\x1f\x00\x00\x01\x00\x08\x00\x64\x61\x74\x61\x08\x00\x00\x00\x80\x80\x80\x80\x80\x80\x80\x80";

    /// Return an image (a 1×1 red PNG) as the whole result: an image content block.
    #[berm(read_only, idempotent)]
    pub fn image_content() -> String {
        berm_guest::content::image("image/png", RED_PIXEL);
        String::new()
    }

    /// Return audio (a millisecond of silence, audio/wav) as the whole result.
    #[berm(read_only, idempotent)]
    pub fn audio_content() -> String {
        berm_guest::content::audio("audio/wav", SILENCE);
        String::new()
    }

    /// Return an embedded text resource beside a line of text.
    #[berm(read_only, idempotent)]
    pub fn embedded_resource() -> String {
        berm_guest::content::resource_text(
            "test://embedded-resource",
            "text/plain",
            "This is an embedded resource content.",
        );
        "An embedded resource follows.".to_string()
    }

    /// Return text, an image and an embedded resource in one result.
    #[berm(read_only, idempotent)]
    pub fn multiple_content_types() -> String {
        berm_guest::content::image("image/png", RED_PIXEL);
        berm_guest::content::resource_text(
            "test://mixed-content-resource",
            "application/json",
            r#"{"test":"data","value":123}"#,
        );
        "Multiple content types test:".to_string()
    }

    /// Report progress three times (0, 50 and 100 of 100) while running; an MCP client that
    /// sent a progress token receives them as notifications/progress.
    #[berm(read_only)]
    pub fn tool_with_progress() -> Result<String, String> {
        for (step, message) in [(0.0, "started"), (50.0, "half way"), (100.0, "done")] {
            berm_guest::progress::report(step, Some(100.0), Some(message))
                .map_err(|e| e.to_string())?;
        }
        Ok("Progress reported three times.".to_string())
    }

    /// A fixed text resource, served as `test://static-text`.
    #[berm(resource = "test://static-text", mime_type = "text/plain")]
    pub fn static_text() -> String {
        "This is the content of the static text resource.".to_string()
    }

    /// A fixed binary resource (a 1×1 red PNG), served as `test://static-binary`.
    #[berm(resource = "test://static-binary", mime_type = "image/png")]
    pub fn static_binary() -> String {
        berm_guest::content::resource_blob("test://static-binary", "image/png", RED_PIXEL);
        String::new()
    }

    /// A resource a client may subscribe to, served as `test://watched-resource`.
    #[berm(resource = "test://watched-resource", mime_type = "text/plain")]
    pub fn watched_resource() -> String {
        "This resource changes when the program serving it is deployed again.".to_string()
    }

    /// Data for one id, from the template `test://template/{id}/data`.
    ///
    /// # Arguments
    /// - `id`: the id in the URI
    #[berm(
        resource_template = "test://template/{id}/data",
        mime_type = "application/json"
    )]
    pub fn template_data(id: String) -> String {
        serde_json::json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
            .to_string()
    }

    /// Data for one id, from the template `test://template/{id}/guarded`, given only once the
    /// user confirms the read (an elicitation): the state of the question is sealed for the
    /// URI read, so a confirmation for one id reads no other.
    ///
    /// # Arguments
    /// - `id`: the id in the URI
    #[berm(
        resource_template = "test://template/{id}/guarded",
        mime_type = "text/plain"
    )]
    pub fn guarded_data(id: String) -> String {
        ask_once(
            "confirm",
            elicit(
                &format!("Read the guarded data of {id}?"),
                &[("ok", "boolean")],
            ),
            |answer| match answer["action"].as_str() {
                Some("accept") => format!("Guarded data for ID: {id}"),
                _ => "The read was not confirmed.".to_string(),
            },
        )
    }

    /// A simple prompt with no arguments.
    #[berm(prompt)]
    pub fn simple_prompt() -> String {
        "This is a simple prompt for testing.".to_string()
    }

    /// A prompt that repeats its two arguments.
    ///
    /// # Arguments
    /// - `arg1`: First test argument
    /// - `arg2`: Second test argument
    #[berm(prompt)]
    pub fn prompt_with_arguments(arg1: String, arg2: String) -> String {
        format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")
    }

    /// A prompt that embeds a resource, then asks to process it.
    ///
    /// # Arguments
    /// - `resourceUri`: URI of the resource to embed
    #[berm(prompt)]
    #[allow(non_snake_case)]
    pub fn prompt_with_embedded_resource(resourceUri: String) -> String {
        berm_guest::content::resource_text(
            &resourceUri,
            "text/plain",
            "Embedded resource content for testing.",
        );
        berm_guest::content::text("Please process the embedded resource above.");
        String::new()
    }

    /// A prompt that shows an image (a 1×1 red PNG), then asks to analyze it.
    #[berm(prompt)]
    pub fn prompt_with_image() -> String {
        berm_guest::content::image("image/png", RED_PIXEL);
        berm_guest::content::text("Please analyze the image above.");
        String::new()
    }

    /// One elicitation request: `{"method": "elicitation/create", ...}` asking for the
    /// string properties named.
    fn elicit(message: &str, fields: &[(&str, &str)]) -> serde_json::Value {
        let properties: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .map(|(name, ty)| (name.to_string(), serde_json::json!({ "type": ty })))
            .collect();
        let required: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
        serde_json::json!({"method": "elicitation/create", "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties, "required": required},
        }})
    }

    /// One sampling request for `text`.
    fn sample(text: &str, max_tokens: u32) -> serde_json::Value {
        serde_json::json!({"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": max_tokens,
        }})
    }

    /// The text of a sampling answer, or of an elicitation's field `field`.
    fn answer_text(answer: &serde_json::Value, field: &str) -> String {
        let text = answer["content"][field]
            .as_str()
            .or_else(|| answer["content"]["text"].as_str())
            .unwrap_or_default();
        text.to_string()
    }

    /// Asks `request` under `key` on the first run; on the run with the answer, `finish`es
    /// with it.
    fn ask_once(
        key: &str,
        request: serde_json::Value,
        finish: impl FnOnce(&serde_json::Value) -> String,
    ) -> String {
        match berm_guest::ask::input().response(key) {
            Some(answer) => finish(answer),
            None => {
                berm_guest::ask::ask(&serde_json::json!({ key: request }), b"");
                String::new()
            }
        }
    }

    /// What the SEP-1034 and SEP-1330 tools say of an elicitation's answer.
    fn elicitation_completed(answer: &serde_json::Value) -> String {
        format!(
            "Elicitation completed: action={}, content={}",
            answer["action"].as_str().unwrap_or("?"),
            answer["content"]
        )
    }

    /// Ask the client for a name (an elicitation), then greet it.
    #[berm(read_only)]
    pub fn input_required_result_elicitation() -> String {
        ask_once(
            "user_name",
            elicit("What is your name?", &[("name", "string")]),
            |answer| format!("Hello, {}!", answer_text(answer, "name")),
        )
    }

    /// Ask the client's model a question (sampling), then return its answer.
    #[berm(read_only)]
    pub fn input_required_result_sampling() -> String {
        ask_once(
            "capital_question",
            sample("What is the capital of France?", 100),
            |answer| format!("The model said: {}", answer_text(answer, "text")),
        )
    }

    /// Ask the client for its roots, then list them.
    #[berm(read_only)]
    pub fn input_required_result_list_roots() -> String {
        ask_once(
            "client_roots",
            serde_json::json!({"method": "roots/list", "params": {}}),
            |answer| {
                let uris: Vec<&str> = answer["roots"]
                    .as_array()
                    .map(|roots| roots.iter().filter_map(|r| r["uri"].as_str()).collect())
                    .unwrap_or_default();
                format!("The client's roots: {}", uris.join(", "))
            },
        )
    }

    /// Ask only for what the client declared it can answer: a name (elicitation), a greeting
    /// (sampling), its roots.
    #[berm(read_only)]
    pub fn input_required_result_capabilities() -> String {
        let input = berm_guest::ask::input();
        if !input.responses.is_empty() {
            let keys: Vec<&str> = input.responses.keys().map(String::as_str).collect();
            return format!("Answered: {}", keys.join(", "));
        }
        let mut requests = serde_json::Map::new();
        if input.supports("elicitation") {
            requests.insert(
                "user_name".into(),
                elicit("What is your name?", &[("name", "string")]),
            );
        }
        if input.supports("sampling") {
            requests.insert("greeting".into(), sample("Generate a greeting", 50));
        }
        if input.supports("roots") {
            requests.insert(
                "client_roots".into(),
                serde_json::json!({"method": "roots/list", "params": {}}),
            );
        }
        if requests.is_empty() {
            return "The client can answer nothing this tool would ask.".to_string();
        }
        berm_guest::ask::ask(&serde_json::Value::Object(requests), b"");
        String::new()
    }

    /// Ask three things at once (a name, a greeting, the roots), then say what came back.
    #[berm(read_only)]
    pub fn input_required_result_multiple_inputs() -> String {
        let input = berm_guest::ask::input();
        let keys = ["user_name", "greeting", "client_roots"];
        if keys.iter().all(|k| input.response(k).is_some()) && input.state == b"three" {
            let name = answer_text(&input.responses["user_name"], "name");
            return format!("Hello, {name}: all three answers arrived.");
        }
        let requests = serde_json::json!({
            "user_name": elicit("What is your name?", &[("name", "string")]),
            "greeting": sample("Generate a greeting", 50),
            "client_roots": {"method": "roots/list", "params": {}},
        });
        berm_guest::ask::ask(&requests, b"three");
        String::new()
    }

    /// Ask for a confirmation with a state, and check the state came back unchanged.
    #[berm(read_only)]
    pub fn input_required_result_request_state() -> String {
        confirm_with_state()
    }

    /// The same as `input_required_result_request_state`: the host refuses a state the client
    /// changed, before this runs again.
    #[berm(read_only)]
    pub fn input_required_result_tampered_state() -> String {
        confirm_with_state()
    }

    fn confirm_with_state() -> String {
        const STATE: &[u8] = b"confirm:round-1";
        let input = berm_guest::ask::input();
        match input.response("confirm") {
            Some(_) if input.state == STATE => "Confirmed: state-ok".to_string(),
            Some(_) => "Confirmed, but the state did not come back".to_string(),
            None => {
                let requests = serde_json::json!({
                    "confirm": elicit("Please confirm", &[("ok", "boolean")]),
                });
                berm_guest::ask::ask(&requests, STATE);
                String::new()
            }
        }
    }

    /// Two rounds of questions (a name, then a colour), the name carried in the state.
    #[berm(read_only)]
    pub fn input_required_result_multi_round() -> String {
        let input = berm_guest::ask::input();
        if let (Some(answer), Some(name)) =
            (input.response("step2"), input.state.strip_prefix(b"name:"))
        {
            let name = String::from_utf8_lossy(name);
            return format!("{name} likes {}.", answer_text(answer, "color"));
        }
        if let Some(answer) = input.response("step1") {
            let name = answer_text(answer, "name");
            let requests = serde_json::json!({
                "step2": elicit("Step 2: What is your favorite color?", &[("color", "string")]),
            });
            berm_guest::ask::ask(&requests, format!("name:{name}").as_bytes());
            return String::new();
        }
        let requests = serde_json::json!({
            "step1": elicit("Step 1: What is your name?", &[("name", "string")]),
        });
        berm_guest::ask::ask(&requests, b"");
        String::new()
    }

    /// A prompt that first asks the user what context to use.
    #[berm(prompt)]
    pub fn input_required_result_prompt() -> String {
        ask_once(
            "user_context",
            elicit(
                "What context should the prompt use?",
                &[("context", "string")],
            ),
            |answer| {
                format!(
                    "Answer with this context in mind: {}",
                    answer_text(answer, "context")
                )
            },
        )
    }

    /// Ask the user for a username and an email (an elicitation), then say what came back.
    ///
    /// # Arguments
    /// - `message`: The message to show the user
    #[berm(read_only)]
    pub fn elicitation(message: String) -> String {
        let request = serde_json::json!({"method": "elicitation/create", "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            }, "required": ["username", "email"]},
        }});
        ask_once("user", request, |answer| format!("User response: {answer}"))
    }

    /// Ask the client's model (sampling), then return its answer.
    ///
    /// # Arguments
    /// - `prompt`: The prompt to send to the LLM
    #[berm(read_only)]
    pub fn sampling(prompt: String) -> String {
        ask_once("answer", sample(&prompt, 100), |answer| {
            format!("LLM response: {}", answer_text(answer, "text"))
        })
    }

    /// Ask with a default value for every primitive type (SEP-1034).
    #[berm(read_only)]
    pub fn elicitation_sep1034_defaults() -> String {
        let request = serde_json::json!({"method": "elicitation/create", "params": {
            "message": "Check these defaults",
            "requestedSchema": {"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
            }},
        }});
        ask_once("defaults", request, elicitation_completed)
    }

    /// Ask with each of the five enum forms (SEP-1330).
    #[berm(read_only)]
    pub fn elicitation_sep1330_enums() -> String {
        let request = serde_json::json!({"method": "elicitation/create", "params": {
            "message": "Pick some options",
            "requestedSchema": {"type": "object", "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]}},
            }},
        }});
        ask_once("enums", request, elicitation_completed)
    }

    /// Tool with JSON Schema 2020-12 features: its input schema is written as is (`$schema`,
    /// `$defs` with an `$anchor`, `allOf`/`anyOf`, `if`/`then`/`else`), and bermd checks
    /// arguments against it. Served as `json_schema_2020_12_tool` (the app's `serve_as`).
    #[berm(
        read_only,
        idempotent,
        input_schema = r##"{
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        }"##
    )]
    #[allow(non_snake_case)]
    pub fn json_schema_2020_12_tool(
        name: Option<String>,
        address: Option<serde_json::Value>,
        contactMethod: Option<String>,
        phone: Option<String>,
        email: Option<String>,
    ) -> String {
        let reach = match contactMethod.as_deref() {
            Some("phone") => phone.unwrap_or_default(),
            _ => email.or(phone).unwrap_or_default(),
        };
        let city = address
            .as_ref()
            .and_then(|a| a["city"].as_str())
            .unwrap_or("somewhere");
        format!(
            "{} in {city}, reachable at {reach}",
            name.as_deref().unwrap_or("Someone")
        )
    }

    /// Greet someone: a plain, quick tool.
    ///
    /// # Arguments
    /// - `name`: who to greet
    #[berm(read_only, idempotent)]
    pub fn greet(name: String) -> String {
        format!("Hello, {name}!")
    }

    /// Work for `seconds` seconds (a sleep, which uses no CPU), then say so: long-running
    /// work a client may run as a task.
    ///
    /// # Arguments
    /// - `seconds`: how long to work
    /// - `label`: a name for the run, repeated in the result
    #[berm(read_only, task, task_deadline_ms = 120000)]
    pub fn slow_compute(seconds: u64, label: Option<String>) -> Result<String, String> {
        berm_guest::clock::sleep(seconds.min(3600).saturating_mul(1000))
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "Computed for {seconds} s ({})",
            label.as_deref().unwrap_or("unlabelled")
        ))
    }

    /// Fail on purpose, and only as a task: its failure is the task's (completed) result.
    #[berm(task = "required")]
    pub fn failing_job() -> Result<String, String> {
        Err("This job fails on purpose".to_string())
    }

    /// Stop with a trap, as a task: a host error fails the task.
    #[berm(task)]
    pub fn protocol_error_job() -> String {
        panic!("this job traps on purpose")
    }

    /// Ask the user to confirm a deletion, from inside a task.
    ///
    /// # Arguments
    /// - `filename`: what would be deleted (nothing is)
    #[berm(destructive, task)]
    pub fn confirm_delete(filename: Option<String>) -> String {
        let input = berm_guest::ask::input();
        let what = filename.unwrap_or_else(|| "the item".to_string());
        match input.response("confirm") {
            Some(answer) if answer["action"] == "accept" => format!("Deleted {what}."),
            Some(_) => "Nothing was deleted.".to_string(),
            None => {
                let requests = serde_json::json!({
                    "confirm": elicit(&format!("Delete {what}?"), &[("ok", "boolean")]),
                });
                berm_guest::ask::ask(&requests, b"");
                String::new()
            }
        }
    }

    /// Ask two things at once from inside a task; a client may answer them one by one.
    #[berm(task)]
    pub fn multi_input() -> String {
        let input = berm_guest::ask::input();
        match (input.response("first"), input.response("second")) {
            (Some(first), Some(second)) => format!(
                "Got {} and {}",
                answer_text(first, "value"),
                answer_text(second, "value")
            ),
            _ => {
                let requests = serde_json::json!({
                    "first": elicit("First value?", &[("value", "string")]),
                    "second": elicit("Second value?", &[("value", "string")]),
                });
                berm_guest::ask::ask(&requests, b"");
                String::new()
            }
        }
    }

    /// Ask for a name, then greet it, only as a task: the question comes first, as an
    /// input-required result, and the round that brings the answer becomes the task.
    #[berm(task = "required", ask_first)]
    pub fn tool_with_task() -> String {
        ask_once(
            "user_name",
            elicit("What is your name?", &[("name", "string")]),
            |answer| format!("Hello, {}!", answer_text(answer, "name")),
        )
    }

    /// Ask the client's model, whether or not the client declared sampling: bermd refuses
    /// with MCP's missing-capability error when it did not (the suite's diagnostic tool).
    #[berm(read_only)]
    pub fn missing_capability() -> String {
        ask_once("sample", sample("Say hello", 20), |answer| {
            format!("The model said: {}", answer_text(answer, "text"))
        })
    }

    /// Ask the user a question: on 2026-07-28 the answer is an input-required result, never
    /// a request of bermd's own on the response stream (the suite's diagnostic tool).
    #[berm(read_only)]
    pub fn streaming_elicitation() -> String {
        ask_once(
            "user_name",
            elicit("What is your name?", &[("name", "string")]),
            |answer| format!("Hello, {}!", answer_text(answer, "name")),
        )
    }

    /// Write a log message while running: a client that set no log level gets none (the
    /// suite's diagnostic tool).
    #[berm(read_only)]
    pub fn logging_tool() -> String {
        berm_guest::log::info("logging_tool ran");
        "Logged one message.".to_string()
    }

    /// Measure a rectangle (a struct argument and a struct result).
    ///
    /// # Arguments
    /// - `rect`: the rectangle
    #[berm(read_only, idempotent)]
    pub fn measure(rect: Rect) -> Result<Measure, String> {
        if rect.width < 0.0 || rect.height < 0.0 {
            return Err("a rectangle's sides cannot be negative".to_string());
        }
        Ok(Measure {
            area: rect.width * rect.height,
            perimeter: 2.0 * (rect.width + rect.height),
        })
    }
}
