//! HTTP API: `POST /v1/report`, `POST /v1/attest` (`attest.rs`), `GET /v1/weights[?cluster=|?after=&limit=]`, `GET /metrics`,
//! `/healthz`, `/readyz`. Every 4xx and 5xx body is one line of text naming the problem; 503s carry
//! `Retry-After`. Reports and weight queries share `--max-concurrent-requests` (beyond: shed at
//! once) and the `--body-timeout-ms` deadline.

use crate::metrics::RejectReason;
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::error_handling::HandleErrorLayer;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;
use tailweight_wire::attest::MAX_ATTESTATION_BYTES;
use tailweight_wire::protocol::{ATTEST_PATH, REPORT_PATH};
use tailweight_wire::report::read::{parse_report, ReportError};
use tailweight_wire::validate::Invalid;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{BoxError, ServiceBuilder};

/// Seconds a shed request is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

pub fn router(state: Arc<AppState>) -> Router {
    let shed_state = state.clone();
    let limits = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(move |e: BoxError| {
            let state = shed_state.clone();
            async move { refused_before_handling(&state, e) }
        }))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::new(state.limits.max_concurrent_requests))
        .timeout(state.limits.body_timeout);
    let limited = Router::new()
        .route(REPORT_PATH, post(report))
        .route(ATTEST_PATH, post(attest))
        .route("/v1/weights", get(weights))
        .layer(limits);
    Router::new()
        .merge(limited)
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .method_not_allowed_fallback(|| async {
            text(StatusCode::METHOD_NOT_ALLOWED, "method: not allowed on this path")
        })
        .fallback(|| async {
            text(
                StatusCode::NOT_FOUND,
                "path: not found (see /v1/report, /v1/attest, /v1/weights, /metrics, /healthz, /readyz)",
            )
        })
        .with_state(state)
}

/// 503 with Retry-After when `--max-concurrent-requests` are in progress, 408 past
/// `--body-timeout-ms`.
fn refused_before_handling(state: &AppState, e: BoxError) -> Response {
    if e.is::<tower::load_shed::error::Overloaded>() {
        state.metrics.shed("overloaded");
        return retry_later(format!(
            "overloaded: {} requests in progress; retry after {RETRY_AFTER_S} s",
            state.limits.max_concurrent_requests
        ));
    }
    if e.is::<tower::timeout::error::Elapsed>() {
        state.metrics.shed("timeout");
        return text(
            StatusCode::REQUEST_TIMEOUT,
            format!("request: not complete within {} ms", state.limits.body_timeout.as_millis()),
        );
    }
    text(StatusCode::INTERNAL_SERVER_ERROR, format!("request: {e}"))
}

/// 503 with `Retry-After` and a one-line reason.
fn retry_later(line: String) -> Response {
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, line);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
    response
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
        Err(refusal) => refuse(&state, refusal),
    };
    state.metrics.report_seconds.observe(started.elapsed().as_secs_f64());
    response
}

type Refusal = (RejectReason, StatusCode, String);

/// A refusal counted and answered: 503 with Retry-After, else its status with the line.
fn refuse(state: &AppState, (reason, status, line): Refusal) -> Response {
    state.metrics.rejected(reason);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        retry_later(line)
    } else {
        text(status, line)
    }
}

/// Bodies larger than this are parsed off the request's worker (`spawn_blocking`).
const PARSE_ELSEWHERE_BYTES: usize = 64 * 1024;

/// Identity, body, parse, merge (under the book's lock, with what the reply needs), reply (after).
async fn handle_report(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Refusal> {
    let vouched = state
        .identity
        .principal(headers)
        .map_err(|e| (RejectReason::NoIdentity, StatusCode::FORBIDDEN, e.to_string()))?;
    let _slot = match &vouched {
        Some(principal) => Some(state.enter(principal).ok_or_else(|| {
            let line = format!(
                "principal: {} reports of {principal:?} in progress; retry after {RETRY_AFTER_S} s",
                state.limits.max_requests_per_principal
            );
            (RejectReason::PrincipalBusy, StatusCode::SERVICE_UNAVAILABLE, line)
        })?),
        None => None,
    };
    let bytes = read_limited(headers, body, state.limits.max_body_bytes).await?;
    // A large body is parsed on the blocking pool, so that the reports behind it on this worker
    // do not wait the milliseconds it takes.
    let parsed = if bytes.len() > PARSE_ELSEWHERE_BYTES {
        let wire_limits = state.limits.wire;
        tokio::task::spawn_blocking(move || parse_report(&bytes, &wire_limits))
            .await
            .unwrap_or_else(|e| Err(ReportError::Malformed(format!("the parser failed: {e}"))))
    } else {
        parse_report(&bytes, &state.limits.wire)
    };
    let report = parsed.map_err(|e| {
        let reason = match e {
            ReportError::Malformed(_) => RejectReason::Malformed,
            ReportError::Invalid(Invalid::UnsupportedVersion(_)) => RejectReason::UnsupportedVersion,
            ReportError::Invalid(Invalid::Field { .. }) => RejectReason::Invalid,
        };
        (reason, StatusCode::BAD_REQUEST, e.to_string())
    })?;
    let principal = vouched.as_deref().unwrap_or(&report.reporter);
    let now = state.now_us();
    let names = report.clusters.iter().map(|c| c.name.as_str());
    let plan = {
        let mut book = state.book();
        book.ingest_as(&report, principal, now)
            .map_err(|r| (RejectReason::Cap(r), StatusCode::TOO_MANY_REQUESTS, format!("{}: {r}", r.as_str())))?;
        book.reply_plan(principal, &report.reporter, names, now, state.limits.max_reply_endpoints)
    };
    let mut reply = Vec::with_capacity(64 + 200 * plan.endpoints());
    plan.render(&mut reply);
    Ok(reply)
}

/// `POST /v1/attest`: identity and slot as a report's, the body (at most `MAX_ATTESTATION_BYTES`),
/// held to `--attest-rule` (`attest::accept`), into the book. 204 when taken.
async fn attest(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let handled = async {
        let vouched = state
            .identity
            .principal(&headers)
            .map_err(|e| (RejectReason::NoIdentity, StatusCode::FORBIDDEN, e.to_string()))?;
        let _slot = match &vouched {
            Some(principal) => Some(state.enter(principal).ok_or_else(|| {
                let line = format!("principal: requests of {principal:?} in progress; retry after {RETRY_AFTER_S} s");
                (RejectReason::PrincipalBusy, StatusCode::SERVICE_UNAVAILABLE, line)
            })?),
            None => None,
        };
        let bytes = read_limited(&headers, body, MAX_ATTESTATION_BYTES.min(state.limits.max_body_bytes)).await?;
        let attestation = crate::attest::accept(state.limits.attest_rule, vouched.as_deref(), &bytes)?;
        let now = state.now_us();
        state
            .book()
            .attest(&attestation, now)
            .map_err(|r| (RejectReason::Cap(r), StatusCode::TOO_MANY_REQUESTS, format!("{}: {r}", r.as_str())))
    };
    match handled.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(refusal) => refuse(&state, refusal),
    }
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

/// `GET /v1/weights` pages: clusters by name, at most this many per page by default, at most
/// `MAX_PAGE_CLUSTERS` on request, and no more clusters once a page holds `PAGE_ENDPOINTS` endpoints.
const PAGE_CLUSTERS: usize = 64;
const MAX_PAGE_CLUSTERS: usize = 1_024;
const PAGE_ENDPOINTS: usize = 8_192;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightsQuery {
    cluster: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

/// One cluster (`?cluster=`), or a page of clusters by name after `?after=` (`?limit=`, default 64,
/// at most 1,024; fewer once the page holds 8,192 endpoints) with the name to ask `after` next
/// (`next`, null on the last page). The book's lock is held to copy the names, then the page.
async fn weights(
    State(state): State<Arc<AppState>>,
    query: Result<Query<WeightsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return text(
            StatusCode::BAD_REQUEST,
            "query: expected `cluster=<name>`, or `after=<name>` and `limit=<count>`",
        );
    };
    let limit = q.limit.unwrap_or(PAGE_CLUSTERS);
    if limit == 0 || limit > MAX_PAGE_CLUSTERS {
        return text(StatusCode::BAD_REQUEST, format!("limit: {limit} is outside 1..={MAX_PAGE_CLUSTERS}"));
    }
    let (mut names, counts) = match &q.cluster {
        Some(name) => (vec![name.clone()], state.book().counts()),
        None => {
            let book = state.book();
            (book.cluster_names(), book.counts())
        }
    };
    names.sort_unstable();
    let after = q.after.as_deref().unwrap_or("");
    let page: Vec<&str> =
        names.iter().map(String::as_str).filter(|n| q.cluster.is_some() || *n > after).take(limit).collect();
    let (mut decisions, now) = {
        let book = state.book();
        (book.decisions_of(page.iter().copied()), state.now_us())
    };
    if let Some(name) = &q.cluster {
        if decisions.is_empty() {
            return text(StatusCode::NOT_FOUND, format!("cluster: {name:?} is not tracked"));
        }
    }
    let mut endpoints = 0;
    let fits = decisions
        .iter()
        .position(|d| {
            endpoints += d.endpoints.len();
            endpoints > PAGE_ENDPOINTS
        })
        .map_or(decisions.len(), |at| at.max(1));
    decisions.truncate(fits);
    let more = q.cluster.is_none() && names.iter().filter(|n| n.as_str() > after).count() > decisions.len();
    let next = more.then(|| decisions.last().map(|d| d.name.clone())).flatten();
    let body = serde_json::json!({ "now_us": now, "counts": counts, "clusters": decisions, "next": next });
    match serde_json::to_vec_pretty(&body) {
        Ok(bytes) => json(bytes),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("weights: {e}")),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"))],
        crate::scrape::page(&state),
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
