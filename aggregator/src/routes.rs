//! HTTP API: `POST /v1/report`, `GET /v1/weights[?cluster=]`, `GET /metrics`, `/healthz`, `/readyz`.
//! Every 4xx body is one line of text naming the problem.

use crate::metrics::RejectReason;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;
use tailweight_core::wire::{self, ReportError};

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(wire::REPORT_PATH, post(report))
        .route("/v1/weights", get(weights))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .method_not_allowed_fallback(|| async {
            text(StatusCode::METHOD_NOT_ALLOWED, "method: not allowed on this path")
        })
        .fallback(|| async {
            text(StatusCode::NOT_FOUND, "path: not found (see /v1/report, /v1/weights, /metrics, /healthz, /readyz)")
        })
        .with_state(state)
}

/// A 4xx (or 5xx) with a one-line text body.
fn text(status: StatusCode, line: impl Into<String>) -> Response {
    let mut line: String = line.into().replace(['\r', '\n'], " ");
    line.push('\n');
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], line).into_response()
}

fn json(body: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

async fn report(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let response = match handle_report(&state, &headers, body).await {
        Ok(reply) => {
            state.metrics.reports_accepted.inc();
            json(reply)
        }
        Err((reason, status, line)) => {
            state.metrics.rejected(reason);
            text(status, line)
        }
    };
    state.metrics.report_seconds.observe(started.elapsed().as_secs_f64());
    response
}

type Refusal = (RejectReason, StatusCode, String);

async fn handle_report(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Refusal> {
    let bytes = read_limited(headers, body, state.max_body_bytes).await?;
    let report = wire::parse_report(&bytes, &state.limits).map_err(|e| {
        let reason = match e {
            ReportError::Malformed(_) => RejectReason::Malformed,
            ReportError::UnsupportedVersion(_) => RejectReason::UnsupportedVersion,
            ReportError::Invalid(_) => RejectReason::Invalid,
        };
        (reason, StatusCode::BAD_REQUEST, e.to_string())
    })?;
    let now = state.now_us();
    // The reply is mostly JSON prepared at the last recompute: a copy plus one number per endpoint.
    let mut reply = Vec::with_capacity(bytes.len());
    let mut book = state.book();
    book.ingest(&report, now)
        .map_err(|r| (RejectReason::Cap(r), StatusCode::TOO_MANY_REQUESTS, format!("{}: {r}", r.as_str())))?;
    book.reply_json(&report.reporter, report.clusters.iter().map(|c| c.name.as_str()), now, &mut reply);
    Ok(reply)
}

/// The body, or 413 if it is (or says it will be) larger than `limit`.
async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Refusal> {
    let too_large = || {
        (RejectReason::TooLarge, StatusCode::PAYLOAD_TOO_LARGE, format!("body: larger than the limit of {limit} bytes"))
    };
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err((RejectReason::Malformed, StatusCode::BAD_REQUEST, format!("body: could not be read: {e}"))),
    }
}

#[derive(Deserialize)]
struct WeightsQuery {
    cluster: Option<String>,
}

async fn weights(
    State(state): State<Arc<AppState>>,
    query: Result<Query<WeightsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return text(StatusCode::BAD_REQUEST, "query: expected at most `cluster=<name>`");
    };
    let (decisions, counts, now) = {
        let book = state.book();
        (book.decisions(q.cluster.as_deref()), book.counts(), state.now_us())
    };
    if let Some(name) = &q.cluster {
        if decisions.is_empty() {
            return text(StatusCode::NOT_FOUND, format!("cluster: {name:?} is not tracked"));
        }
    }
    let body = serde_json::json!({ "now_us": now, "counts": counts, "clusters": decisions });
    match serde_json::to_vec_pretty(&body) {
        Ok(bytes) => json(bytes),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("weights: {e}")),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let counts = state.book().counts();
    state.metrics.set_counts(&counts);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"))],
        state.metrics.render(),
    )
        .into_response()
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.is_ready() {
        text(StatusCode::OK, "ready")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "not ready: starting or shutting down")
    }
}
