//! The control API: HTTP/1.1 over `$BERM_HOME/control.sock`, the CLI's way
//! in. Routes and bodies are defined in `berm-control`; errors are always a
//! JSON [`ErrorBody`].

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use berm_control::{
    CallOutcome, CallResponse, ContentSummary, DeployRequest, ErrorBody, SecretList, SecretValue,
};
use berm_egress::secret::SecretError;
use tokio::net::UnixListener;

use crate::service::{CallError, InstallError, RemoveError, Service, StateError, error_chain};

/// Largest request body: an image of up to ~48 MiB, base64-encoded.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// The router, for serving and for tests.
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/programs", get(list))
        .route("/programs/{name}", get(show).put(deploy).delete(remove))
        .route("/state/{program}", get(name_state))
        .route("/secrets/{program}", get(list_secrets))
        .route(
            "/secrets/{program}/{name}",
            axum::routing::put(set_secret).delete(remove_secret),
        )
        .route("/tools/{tool}", post(call))
        .fallback(|| async {
            failure(
                StatusCode::NOT_FOUND,
                "no such route; see docs/service.md".into(),
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(service)
}

/// Serves the control API on `listener` until the process ends.
pub async fn serve(listener: UnixListener, service: Arc<Service>) -> std::io::Result<()> {
    axum::serve(listener, router(service)).await
}

fn failure(status: StatusCode, error: String) -> Response {
    (status, axum::Json(ErrorBody { error })).into_response()
}

fn ok<T: serde::Serialize>(body: T) -> Response {
    axum::Json(body).into_response()
}

async fn list(State(service): State<Arc<Service>>) -> Response {
    ok(service.list())
}

async fn show(State(service): State<Arc<Service>>, Path(name): Path<String>) -> Response {
    match service.view(&name) {
        Some(view) => ok(view),
        None => failure(
            StatusCode::NOT_FOUND,
            format!("no program named `{name}` is deployed"),
        ),
    }
}

async fn deploy(
    State(service): State<Arc<Service>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let request: DeployRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return failure(
                StatusCode::BAD_REQUEST,
                format!("deploy request is not valid: {e}"),
            );
        }
    };
    let image = match request.image_bytes() {
        Ok(image) => image,
        Err(e) => {
            return failure(
                StatusCode::BAD_REQUEST,
                format!("image is not valid base64: {e}"),
            );
        }
    };
    // Deploying may compile for a while; keep it off the async workers.
    let outcome = tokio::task::spawn_blocking(move || {
        service.deploy_from(
            &name,
            &image,
            request.grants,
            request.limits,
            request.app_dir,
            request.serve_as,
        )
    })
    .await;
    match outcome {
        Ok(Ok(deployed)) => ok(deployed),
        Ok(Err(e)) => {
            let status = match e {
                InstallError::Persist { .. }
                | InstallError::Home(_)
                | InstallError::State { .. } => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            };
            failure(status, error_chain(&e))
        }
        Err(e) => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("deploy task failed: {e}"),
        ),
    }
}

async fn remove(State(service): State<Arc<Service>>, Path(name): Path<String>) -> Response {
    match service.remove(&name) {
        Ok(removed) => ok(removed),
        Err(e @ RemoveError::NotDeployed(_)) => failure(StatusCode::NOT_FOUND, e.to_string()),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e)),
    }
}

async fn call(
    State(service): State<Arc<Service>>,
    Path(tool): Path<String>,
    body: Bytes,
) -> Response {
    let args = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(Default::default())
    } else {
        match serde_json::from_slice(&body) {
            Ok(args) => args,
            Err(e) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    format!("arguments are not valid JSON: {e}"),
                );
            }
        }
    };
    // A client that hangs up drops this future, which stops the call.
    match service.call(&tool, &args, None).await {
        Ok(Ok(done)) => ok(CallResponse {
            outcome: CallOutcome::Done,
            text: done.text,
            content: done
                .content
                .iter()
                .map(|block| ContentSummary {
                    kind: block.kind.name().to_string(),
                    uri: (!block.uri.is_empty()).then(|| block.uri.clone()),
                    mime_type: (!block.mime_type.is_empty()).then(|| block.mime_type.clone()),
                    bytes: block.body.len(),
                })
                .collect(),
        }),
        Ok(Err(failed)) => ok(CallResponse {
            outcome: CallOutcome::Failed,
            text: failed.message,
            content: Vec::new(),
        }),
        Err(e @ CallError::NoSuchTool(_)) => failure(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ CallError::Host(berm::Error::InvalidArguments { .. })) => {
            failure(StatusCode::BAD_REQUEST, e.to_string())
        }
        Err(e @ CallError::Host(berm::Error::Busy { .. })) => {
            failure(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(
            e @ (CallError::Host(_)
            | CallError::Lost(_)
            | CallError::InvalidOutput { .. }
            | CallError::Receipt(_)),
        ) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn name_state(State(service): State<Arc<Service>>, Path(name): Path<String>) -> Response {
    match service.name_state(&name) {
        Ok(state) => ok(state),
        Err(StateError::Secrets(e)) => secret_failure(e),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e)),
    }
}

fn secret_failure(error: SecretError) -> Response {
    let status = match error {
        SecretError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        SecretError::NotSet(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    failure(status, error.to_string())
}

fn secret_names(service: &Service, program: String) -> Response {
    match service.list_secrets(&program) {
        Ok(names) => ok(SecretList { program, names }),
        Err(e) => secret_failure(e),
    }
}

async fn list_secrets(
    State(service): State<Arc<Service>>,
    Path(program): Path<String>,
) -> Response {
    secret_names(&service, program)
}

async fn set_secret(
    State(service): State<Arc<Service>>,
    Path((program, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    // The body's text is never quoted back: a JSON error could show it.
    let Ok(SecretValue { value }) = serde_json::from_slice(&body) else {
        return failure(
            StatusCode::BAD_REQUEST,
            "the body must be {\"value\": \"...\"}".into(),
        );
    };
    match service.set_secret(&program, &name, value.as_bytes()) {
        Ok(()) => secret_names(&service, program),
        Err(e) => secret_failure(e),
    }
}

async fn remove_secret(
    State(service): State<Arc<Service>>,
    Path((program, name)): Path<(String, String)>,
) -> Response {
    match service.remove_secret(&program, &name) {
        Ok(()) => secret_names(&service, program),
        Err(e) => secret_failure(e),
    }
}
