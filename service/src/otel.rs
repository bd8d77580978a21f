//! Traces over OTLP: one span per call, continuing the trace a client names in the request's
//! `_meta.traceparent`, with a child span for each `http.fetch` and each `berm.call`.
//!
//! Off unless the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set:
//! with no exporter a call makes no span at all, so tracing costs nothing then. Spans follow
//! OpenTelemetry's conventions for MCP servers (`mcp.method.name`, `gen_ai.tool.name`,
//! `error.type`) with berm's own `berm.*` attributes beside them, and leave through the
//! OpenTelemetry SDK's batch processor (a bounded queue: spans past it are dropped, never
//! held) and its OTLP/HTTP exporter, on bermd's own hyper and rustls.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// The longest `tracestate` taken from a request: W3C Trace Context's own bound (32 members
/// of at most 256 bytes) is larger than any real one; 512 is what it asks propagators to
/// keep at least.
const MAX_TRACESTATE_BYTES: usize = 512;

/// Why traces could not be set up from the environment.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// A standard variable asks for what bermd does not do.
    #[error("{variable}={value}: {problem}")]
    Unsupported {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What bermd does instead.
        problem: &'static str,
    },
    /// The exporter could not be built (a malformed endpoint, header or timeout).
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
    /// The CAs an `https` collector is verified against.
    #[error("the CAs the OTLP collector's TLS is verified against: {0}")]
    Trust(#[from] berm_egress::TrustError),
}

/// Where a service's spans go: an OTLP exporter behind the SDK's batch processor. Cheap to
/// clone (both halves share one provider).
#[derive(Clone, Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracing {
    /// Traces as the standard `OTEL_*` variables say, or `None` when no OTLP endpoint is set
    /// (or `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`). `extra_ca` is added to
    /// the system's CAs for an `https` collector. The exporter sends on `runtime`.
    ///
    /// # Errors
    /// A protocol other than `http/protobuf`, an exporter other than `otlp`, or an endpoint,
    /// header or timeout the exporter refuses.
    pub fn from_env(
        runtime: &tokio::runtime::Handle,
        extra_ca: &[std::path::PathBuf],
    ) -> Result<Option<Tracing>, TracingError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if let Some(exporter) = var("OTEL_TRACES_EXPORTER") {
            match exporter.trim() {
                "none" => return Ok(None),
                "otlp" => {}
                _ => {
                    return Err(TracingError::Unsupported {
                        variable: "OTEL_TRACES_EXPORTER",
                        value: exporter,
                        problem: "bermd exports traces over OTLP only: unset it or set `otlp`",
                    });
                }
            }
        }
        if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
            && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = var(variable)
                && value.trim() != "http/protobuf"
            {
                return Err(TracingError::Unsupported {
                    variable,
                    value,
                    problem: "bermd exports OTLP as http/protobuf only (a collector takes it on port 4318): unset it or set `http/protobuf`",
                });
            }
        }
        let trust = berm_egress::Trust::new(extra_ca)?;
        // The exporter reads the endpoint, headers and timeout from the same variables.
        Tracing::build(runtime, &trust).map(Some)
    }

    fn build(
        runtime: &tokio::runtime::Handle,
        trust: &berm_egress::Trust,
    ) -> Result<Tracing, TracingError> {
        use opentelemetry_otlp::WithHttpConfig as _;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(trust.client_config())
            .https_or_http()
            .enable_http1()
            .build();
        let client = OnRuntime {
            client: opentelemetry_http::hyper::HyperClient::new(
                connector,
                // The exporter bounds each export by its own timeout as well.
                Duration::from_secs(10),
                None,
            ),
            runtime: runtime.clone(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .build()
            .map_err(|e| TracingError::Exporter(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("bermd");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let scope = opentelemetry::InstrumentationScope::builder("bermd")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Ok(Tracing { provider, tracer })
    }

    /// Sends what is queued and stops the exporter: at bermd's exit, so the last calls'
    /// spans are not lost. Bounded by the exporter's timeout.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("flushing the last spans to the OTLP collector: {e}");
        }
    }

    /// Starts the span of a call of `served` (program `program`, tool `tool`, digest
    /// `digest`) that MCP method `method` asked for, under `parent` when the request named
    /// one.
    pub(crate) fn call(&self, parent: Option<&TraceParent>, call: CallAttributes<'_>) -> Span {
        let parent = parent.map_or_else(Context::new, TraceParent::context);
        let name = format!("{} {}", call.method, call.served);
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("mcp.method.name", call.method),
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", call.served.to_string()),
                KeyValue::new("berm.program", call.program.to_string()),
                KeyValue::new("berm.tool", call.tool.to_string()),
                KeyValue::new("berm.program.digest", call.digest.to_string()),
            ])
            .start_with_context(&self.tracer, &parent);
        Span::new(self.tracer.clone(), parent.with_span(span))
    }
}

/// What a call's span names.
pub(crate) struct CallAttributes<'a> {
    /// The MCP method that ran it: `tools/call`, `resources/read`, `prompts/get`.
    pub method: &'static str,
    /// The name the client used.
    pub served: &'a str,
    pub program: &'a str,
    pub tool: &'a str,
    pub digest: &'a berm::Digest,
}

/// The trace context a request named in `_meta` (`traceparent`, and `tracestate` beside
/// it), as MCP's trace-context convention puts them.
#[derive(Debug, Clone)]
pub struct TraceParent {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceParent {
    /// The context in `meta`, if it has a `traceparent` of the right length; a malformed one
    /// is dropped when it is read (the call then starts a trace of its own).
    pub fn from_meta(meta: &serde_json::Map<String, serde_json::Value>) -> Option<TraceParent> {
        // "00-" 32 hex "-" 16 hex "-" 2 hex; later versions may append fields.
        let traceparent = meta.get("traceparent")?.as_str()?;
        if traceparent.len() < 55 || traceparent.len() > 256 {
            return None;
        }
        let tracestate = meta
            .get("tracestate")
            .and_then(serde_json::Value::as_str)
            .filter(|s| s.len() <= MAX_TRACESTATE_BYTES)
            .map(str::to_string);
        Some(TraceParent {
            traceparent: traceparent.to_string(),
            tracestate,
        })
    }

    fn context(&self) -> Context {
        TraceContextPropagator::new().extract(self)
    }
}

impl Extractor for TraceParent {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(&self.traceparent),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// A handle on a running span: what its children start under. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SpanHandle {
    tracer: SdkTracer,
    cx: Context,
}

impl SpanHandle {
    /// A child span, of kind `Client`: what the call reaches out to.
    pub fn child(&self, name: &'static str, attributes: Vec<KeyValue>) -> Span {
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.cx);
        Span::new(self.tracer.clone(), self.cx.with_span(span))
    }
}

/// A span while it runs. Ended by [`Span::end`] with an outcome; dropped unended (a call
/// whose client went away), it ends as `cancelled`.
pub(crate) struct Span {
    handle: SpanHandle,
    ended: bool,
}

impl Span {
    fn new(tracer: SdkTracer, cx: Context) -> Span {
        Span {
            handle: SpanHandle { tracer, cx },
            ended: false,
        }
    }

    /// What its children start under.
    pub fn handle(&self) -> SpanHandle {
        self.handle.clone()
    }

    /// Adds an attribute.
    pub fn set(&self, attribute: KeyValue) {
        self.handle.cx.span().set_attribute(attribute);
    }

    /// Ends the span with `outcome` (`berm.outcome`): `ok`, or a failure of type
    /// `error_type` (`error.type`, and the status's description). Never a message: a
    /// program's error text, or bermd's about its arguments, may hold what the call carried.
    pub fn end(mut self, outcome: &'static str, error_type: Option<&'static str>) {
        let span = self.handle.cx.span();
        span.set_attribute(KeyValue::new("berm.outcome", outcome));
        if let Some(error_type) = error_type {
            span.set_attribute(KeyValue::new("error.type", error_type));
            span.set_status(Status::error(error_type));
        }
        span.end();
        self.ended = true;
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if !self.ended {
            let span = self.handle.cx.span();
            span.set_attribute(KeyValue::new("berm.outcome", "cancelled"));
            span.set_attribute(KeyValue::new("error.type", "cancelled"));
            span.end();
        }
    }
}

/// The exporter's HTTP client, sending on bermd's runtime: the SDK's batch processor exports
/// from a thread of its own, where hyper has no reactor.
#[derive(Debug, Clone)]
struct OnRuntime {
    client: opentelemetry_http::hyper::HyperClient<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_well_formed_traceparent_is_continued() {
        let parent = TraceParent::from_meta(&meta(serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "vendor=value",
        })))
        .unwrap();
        let cx = parent.context();
        let span = cx.span();
        let context = span.span_context();
        assert!(context.is_valid() && context.is_remote());
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(context.trace_state().header(), "vendor=value");
    }

    #[test]
    fn a_malformed_traceparent_starts_no_trace() {
        for bad in [
            serde_json::json!({"traceparent": "00-xyz"}),
            serde_json::json!({"traceparent": 7}),
            serde_json::json!({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}),
            serde_json::json!({"traceparent": "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
            serde_json::json!({"traceparent": "x".repeat(100_000)}),
        ] {
            let valid = TraceParent::from_meta(&meta(bad.clone()))
                .is_some_and(|p| p.context().span().span_context().is_valid());
            assert!(!valid, "{bad}");
        }
    }

    #[test]
    fn an_oversized_tracestate_is_dropped() {
        let parent = TraceParent::from_meta(&meta(serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": format!("a={}", "b".repeat(MAX_TRACESTATE_BYTES)),
        })))
        .unwrap();
        assert!(parent.tracestate.is_none());
    }
}
