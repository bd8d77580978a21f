//! conformance: the tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls, plus structured results.
//! Deployed as program `test`, its tools are served as `test_simple_text`,
//! `test_error_handling` and `test_tool_with_logging`: the names the suite's
//! scenarios ask for; `test_routed` mirrors its argument into a header for the
//! 2026-07-28 custom-header scenario.

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
