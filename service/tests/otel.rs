//! Traces (`OTEL_EXPORTER_OTLP_ENDPOINT`): a real bermd exports its spans over OTLP/HTTP to a
//! receiver of this test's own, which decodes them with the OpenTelemetry project's protobuf
//! types. A call continues the trace its request names in `_meta.traceparent`, with a child
//! span for its `http.fetch` and for its `berm.call`.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berm_control::LimitsSpec;
use berm_egress::testing::{Reply, TestServer};
use common::Bermd;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;
use serde_json::{Value, json};

/// One span as the receiver got it.
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    kind: i32,
    status: i32,
    attributes: BTreeMap<String, String>,
    service: String,
}

/// An OTLP/HTTP receiver on loopback: every span posted to `/v1/traces`.
struct Receiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<Received>>>,
    posts: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let posts = Arc::new(Mutex::new(Vec::new()));
        let (seen, types) = (spans.clone(), posts.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (seen, types) = (seen.clone(), types.clone());
                    async move {
                        let content_type = headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        types.lock().unwrap().push(content_type);
                        let request = ExportTraceServiceRequest::decode(body).unwrap();
                        seen.lock().unwrap().extend(spans_of(request));
                        // An empty ExportTraceServiceResponse: every span accepted.
                        (
                            [("content-type", "application/x-protobuf")],
                            Vec::<u8>::new(),
                        )
                    }
                },
            ),
        );
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            endpoint,
            spans,
            posts,
            _runtime: runtime,
        }
    }

    /// The spans received so far.
    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits until the spans received so far satisfy `done`.
    fn wait_until(&self, done: impl Fn(&[Received]) -> bool) {
        berm_fixtures::wait_until(
            Duration::from_secs(30),
            Duration::from_millis(20),
            || done(&self.spans()),
            || format!("the spans never came; got {:#?}", self.spans()),
        );
    }

    /// Waits until a span named `name` has arrived, and returns it.
    fn wait_for(&self, name: &str) -> Received {
        self.wait_until(|spans| spans.iter().any(|s| s.name == name));
        self.spans().into_iter().find(|s| s.name == name).unwrap()
    }
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<Received> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .map(|v| text(v.value.as_ref()))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                out.push(Received {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    kind: span.kind,
                    status: span.status.map_or(0, |s| s.code),
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|kv| (kv.key, text(kv.value.and_then(|v| v.value).as_ref())))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

fn text(value: Option<&Any>) -> String {
    match value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// OTLP's span kinds and status codes, as the protobuf numbers them.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const STATUS_ERROR: i32 = 2;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traced_call(session: &mut common::Session, tool: &str, args: Value, meta: Value) -> Value {
    session.request(
        "tools/call",
        json!({"name": tool, "arguments": args, "_meta": meta}),
    )
}

fn bermd_tracing_to(receiver: &Receiver) -> Bermd {
    Bermd::start_with_env(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            // Sent within 50 ms rather than 5 s, so the test does not wait.
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
}

/// The acceptance: a `traceparent` in `_meta` continues into one span per call,
/// naming the program, tool, digest and outcome, with child spans for `http.fetch` (the
/// host, the status; never the path) and `berm.call` (the program called).
#[test]
fn a_call_continues_its_clients_trace_with_children_for_fetch_and_call() {
    let receiver = Receiver::start();
    let page = TestServer::http(|_| Reply::ok("a page"));
    let bermd = bermd_tracing_to(&receiver);
    let net = format!("net=127.0.0.1:{}", page.port());
    bermd.deploy("fetch", "fetch", &[&net], LimitsSpec::default());
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    bermd.deploy("compose", "compose", &["call=echo"], LimitsSpec::default());
    let mut session = bermd.session();

    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let url = format!("{}/secret-path?token=abc", page.origin(false));
    let answer = traced_call(
        &mut session,
        "fetch_get",
        json!({"url": url}),
        json!({"traceparent": traceparent, "tracestate": "vendor=1"}),
    );
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let call = receiver.wait_for("tools/call fetch_get");
    assert_eq!(
        (call.trace_id.as_str(), call.parent.as_str()),
        (TRACE, PARENT)
    );
    assert_eq!(call.kind, SERVER);
    assert_eq!(call.service, "bermd");
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "fetch_get"),
        ("gen_ai.operation.name", "execute_tool"),
        ("berm.program", "fetch"),
        ("berm.tool", "get"),
        ("berm.outcome", "ok"),
    ] {
        assert_eq!(
            call.attributes.get(key).map(String::as_str),
            Some(value),
            "{key}: {call:#?}"
        );
    }
    let digest = call.attributes["berm.program.digest"]
        .strip_prefix("sha256:")
        .unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    let fetch = receiver.wait_for("http.fetch");
    assert_eq!(
        (fetch.trace_id.as_str(), fetch.parent.as_str()),
        (TRACE, call.span_id.as_str())
    );
    assert_eq!(fetch.kind, CLIENT);
    assert_eq!(
        fetch.attributes["server.address"],
        format!("127.0.0.1:{}", page.port())
    );
    assert_eq!(fetch.attributes["http.request.method"], "GET");
    assert_eq!(fetch.attributes["http.response.status_code"], "200");
    assert!(
        !format!("{fetch:?}").contains("secret-path") && !format!("{fetch:?}").contains("token"),
        "a fetch span names the host only: {fetch:#?}"
    );

    // A call between programs: the callee's span is the caller's child.
    let other_parent = "1111111111111111";
    let answer = traced_call(
        &mut session,
        "compose_shout",
        json!({"message": "hi"}),
        json!({"traceparent": format!("00-{TRACE}-{other_parent}-01")}),
    );
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let shout = receiver.wait_for("tools/call compose_shout");
    assert_eq!(shout.parent, other_parent);
    let nested = receiver.wait_for("berm.call");
    assert_eq!(
        (nested.trace_id.as_str(), nested.parent.as_str()),
        (TRACE, shout.span_id.as_str())
    );
    assert_eq!(nested.attributes["gen_ai.tool.name"], "echo_echo");
    assert_eq!(nested.attributes["berm.program"], "echo");
    assert_eq!(nested.attributes["berm.outcome"], "ok");

    // No traceparent, or one that does not parse: the call starts a trace of its own.
    session.call("echo_echo", json!({"message": "plain"}));
    let answer = traced_call(
        &mut session,
        "echo_echo",
        json!({"message": "odd"}),
        json!({"traceparent": "00-not-a-trace-01"}),
    );
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    receiver.wait_until(|spans| {
        spans
            .iter()
            .filter(|s| s.name == "tools/call echo_echo")
            .count()
            == 2
    });
    for span in receiver
        .spans()
        .iter()
        .filter(|s| s.name == "tools/call echo_echo")
    {
        assert!(
            span.parent.is_empty() && span.trace_id != TRACE,
            "{span:#?}"
        );
    }

    // A fetch the grants refuse: the fetch span and the call's both say so.
    let answer = traced_call(
        &mut session,
        "fetch_get",
        json!({"url": "http://127.0.0.1:9/"}),
        json!({"traceparent": format!("00-{TRACE}-2222222222222222-01")}),
    );
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    receiver.wait_until(|spans| spans.iter().any(|s| s.parent == "2222222222222222"));
    let spans = receiver.spans();
    let failed = spans
        .iter()
        .find(|s| s.parent == "2222222222222222")
        .unwrap();
    assert_eq!(failed.attributes["berm.outcome"], "failed", "{failed:#?}");
    assert_eq!(failed.attributes["error.type"], "tool_error");
    assert_eq!(failed.status, STATUS_ERROR);
    let refused = spans
        .iter()
        .find(|s| s.name == "http.fetch" && s.parent == failed.span_id)
        .unwrap_or_else(|| panic!("no fetch span under the failed call: {spans:#?}"));
    assert_eq!(refused.attributes["error.type"], "denied", "{refused:#?}");
    assert!(
        receiver
            .posts
            .lock()
            .unwrap()
            .iter()
            .all(|t| t == "application/x-protobuf")
    );
}

/// bermd sends what it still holds when it stops: a span queued for a minute reaches the
/// collector at SIGTERM.
#[test]
fn the_last_spans_go_out_when_bermd_stops() {
    let receiver = Receiver::start();
    let mut bermd = Bermd::start_with_env(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    );
    bermd.deploy("echo", "echo", &[], LimitsSpec::default());
    let answer = bermd
        .session()
        .call("echo_echo", json!({"message": "last"}));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert!(receiver.spans().is_empty());
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&bermd.child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = bermd.child.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", bermd.log_text());
    let span = receiver.wait_for("tools/call echo_echo");
    assert_eq!(span.attributes["berm.outcome"], "ok");
}

/// What bermd cannot do is said at start, naming the variable: it exports OTLP as
/// http/protobuf only.
#[test]
fn a_protocol_bermd_does_not_speak_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (variable, value) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ("OTEL_TRACES_EXPORTER", "zipkin"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_bermd"))
            .env("BERM_HOME", dir.path().join("home"))
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
            .env(variable, value)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{variable}: {stderr}");
        assert!(stderr.contains(&format!("{variable}={value}")), "{stderr}");
        assert!(stderr.contains("OTLP"), "{stderr}");
    }
}
