//! conformance: the tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls, plus structured results.
//! Deployed as program `test`, its tools are served as `test_simple_text`,
//! `test_error_handling` and `test_tool_with_logging`: the names the suite's
//! scenarios ask for, with `test_image_content`, `test_audio_content`,
//! `test_embedded_resource`, `test_multiple_content_types` (content blocks) and
//! `test_tool_with_progress`; `test_routed` mirrors its argument into a header for the
//! 2026-07-28 custom-header scenario. It serves the suite's resources (`test://static-text`,
//! `test://static-binary`, `test://watched-resource`, the template
//! `test://template/{id}/data`) and prompts (`test_simple_prompt`,
//! `test_prompt_with_arguments`, `test_prompt_with_embedded_resource`,
//! `test_prompt_with_image`) through tools marked `resource`, `resource_template` or `prompt`.

/// Tools for testing MCP clients and servers against the specification.
///
/// # Usage
/// Reach for these only to check that an MCP client and berm agree: plain
/// text, an error result, log messages during a call, structured results.
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
    #[berm(resource_template = "test://template/{id}/data", mime_type = "application/json")]
    pub fn template_data(id: String) -> String {
        serde_json::json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
            .to_string()
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
