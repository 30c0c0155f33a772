//! HTTP API: `POST /v1/report`, `POST /v1/attest` (`attest.rs`), `GET /v1/weights[?cluster=|?after=&limit=]`, `GET /metrics`,
//! `/healthz`, `/readyz`; the read-only listener serves all but the report and the attestation. Every 4xx and 5xx body
//! is one line of text naming the problem; 503s carry `Retry-After`. Reports, weight queries and
//! metrics each take a slot of their principal (`admission.rs`; beyond: shed at once) and are held
//! to the `--body-timeout-ms` deadline; a report reserves what it may cost from the memory budget
//! before its body is read, and a weights page before it is copied.

use crate::admission::SlotRefusal;
use crate::body::{declared_length, read_body, BodyError};
use crate::metrics::RejectReason;
use crate::state::AppState;
use crate::weights_page::{self, WeightsQuery};
use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tailweight_weights::Rejection;
use tailweight_wire::attest::MAX_ATTESTATION_BYTES;
use tailweight_wire::protocol::{ATTEST_PATH, REPORT_PATH};
use tailweight_wire::report::read::{parse_report, ReportError};
use tailweight_wire::validate::Invalid;
use tower::{BoxError, ServiceBuilder};

pub use crate::answer::RETRY_AFTER_S;
use crate::answer::{json, retry_later, slow_down, text};
use crate::page_rate::RetryAfterMs;
use crate::scrape::Refused;

/// The address a request's connection comes from (a request extension set per connection).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Which listener a router serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen`: reports, and everything else.
    Reports,
    /// `--read-only-listen`: weights, metrics and probes; never a report, and no header names a
    /// principal there (a caller that reaches it around the sidecar could write any).
    ReadOnly,
}

pub fn router(state: Arc<AppState>, listener: Listener) -> Router {
    let timeout_state = state.clone();
    let deadline = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(move |e: BoxError| {
            let state = timeout_state.clone();
            async move { refused_before_handling(&state, e) }
        }))
        .timeout(state.limits.body_timeout);
    let mut limited = Router::new().route("/v1/weights", get(weights)).route("/metrics", get(metrics));
    limited = match listener {
        Listener::Reports => limited.route(REPORT_PATH, post(report)).route(ATTEST_PATH, post(attest)),
        Listener::ReadOnly => {
            let read_only = || async {
                text(
                    StatusCode::FORBIDDEN,
                    "listener: read-only (reports and attestations go to --listen, through the sidecar)",
                )
            };
            limited.route(REPORT_PATH, post(read_only)).route(ATTEST_PATH, post(read_only))
        }
    };
    let limited = limited.layer(axum::middleware::map_response(crate::answer::held_back)).layer(deadline);
    let limited = match listener {
        Listener::Reports => limited,
        Listener::ReadOnly => limited.layer(Extension(listener)),
    };
    Router::new()
        .merge(limited)
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

/// 408 past `--body-timeout-ms`.
fn refused_before_handling(state: &AppState, e: BoxError) -> Response {
    if e.is::<tower::timeout::error::Elapsed>() {
        state.metrics.shed("timeout");
        return text(
            StatusCode::REQUEST_TIMEOUT,
            format!("request: not complete within {} ms", state.limits.body_timeout.as_millis()),
        );
    }
    text(StatusCode::INTERNAL_SERVER_ERROR, format!("request: {e}"))
}

/// Who a request counts against: the principal `--identity` names (on the report listener), else
/// the peer's IP address.
fn requester(state: &AppState, headers: &HeaderMap, peer: Option<&Peer>, read_only: bool) -> String {
    let vouched = if read_only { None } else { state.identity.principal(headers).ok().flatten() };
    vouched.unwrap_or_else(|| match peer {
        Some(Peer(addr)) => format!("peer:{}", addr.ip()),
        None => "peer:unknown".to_string(),
    })
}

/// The slot a request of `principal` takes, or its 503 (counted as shed).
fn slot_or_503(state: &AppState, principal: &str) -> Result<crate::admission::Slot, (&'static str, String)> {
    state.enter(principal).map_err(|refusal| match refusal {
        SlotRefusal::Full => (
            "overloaded",
            format!(
                "overloaded: {} requests in progress; retry after {RETRY_AFTER_S} s",
                state.limits.max_concurrent_requests
            ),
        ),
        SlotRefusal::PrincipalBusy => (
            "principal_busy",
            format!("principal: {principal:?} holds its share of the request slots; retry after {RETRY_AFTER_S} s"),
        ),
    })
}

/// The slot of a GET's requester (weights, metrics), or its 503 (counted as shed); and who that
/// requester is.
fn get_slot(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<Extension<Peer>>,
    listener: Option<Extension<Listener>>,
) -> Result<(crate::admission::Slot, String), Box<Response>> {
    let read_only = listener.is_some_and(|Extension(l)| l == Listener::ReadOnly);
    let principal = requester(state, headers, peer.as_ref().map(|Extension(p)| p), read_only);
    match slot_or_503(state, &principal) {
        Ok(slot) => Ok((slot, principal)),
        Err((reason, line)) => {
            state.metrics.shed(reason);
            Err(Box::new(retry_later(line)))
        }
    }
}

async fn report(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    peer: Option<Extension<Peer>>,
    body: Body,
) -> Response {
    let started = Instant::now();
    let response = match handle_report(&state, &headers, peer.as_ref().map(|Extension(p)| p), body).await {
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

/// What a POST (a report or an attestation) is handled with once admitted: the identity
/// `--identity` vouches for and the body, read while its slot and memory reservation were held
/// (and held until this is dropped).
struct Admitted {
    vouched: Option<String>,
    bytes: Vec<u8>,
    _slot: crate::admission::Slot,
    _reservation: crate::admission::Reservation,
}

/// Identity, slot, memory, then the body of a POST (at most `limit` bytes; `what` it is, for the
/// 503): nothing of the body is read before the slot and the bytes it may cost are held.
async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<&Peer>,
    body: Body,
    limit: usize,
    what: &str,
) -> Result<Admitted, Refusal> {
    let vouched = vouched_identity(state, headers)?;
    let slot = post_slot(state, headers, peer)?;
    let (reservation, bytes) = reserved_body(state, headers, body, limit, what).await?;
    Ok(Admitted { vouched, bytes, _slot: slot, _reservation: reservation })
}

/// The identity `--identity` vouches for (403 without one where it is required).
fn vouched_identity(state: &AppState, headers: &HeaderMap) -> Result<Option<String>, Refusal> {
    state.identity.principal(headers).map_err(|e| (RejectReason::NoIdentity, StatusCode::FORBIDDEN, e.to_string()))
}

/// The slot of a POST's requester (503 when its share or every slot is taken).
fn post_slot(state: &AppState, headers: &HeaderMap, peer: Option<&Peer>) -> Result<crate::admission::Slot, Refusal> {
    let principal = requester(state, headers, peer, false);
    slot_or_503(state, &principal).map_err(|(reason, line)| {
        state.metrics.shed(reason);
        let reason = if reason == "overloaded" { RejectReason::Overloaded } else { RejectReason::PrincipalBusy };
        (reason, StatusCode::SERVICE_UNAVAILABLE, line)
    })
}

/// The body, at most `limit` bytes, after reserving what a body of its declared length (else
/// `limit`) may cost from the requests' memory budget (`report_cost`; held by the returned
/// reservation while the request is handled).
async fn reserved_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    what: &str,
) -> Result<(crate::admission::Reservation, Vec<u8>), Refusal> {
    let declared = declared_length(headers);
    let cost = state.limits.report_cost(declared.unwrap_or(limit).min(limit));
    let Some(reservation) = state.memory.reserve(cost) else {
        state.metrics.shed("memory");
        let line = format!(
            "memory: {what} of up to {cost} bytes does not fit the requests' budget now; retry after {RETRY_AFTER_S} s"
        );
        return Err((RejectReason::Memory, StatusCode::SERVICE_UNAVAILABLE, line));
    };
    let bytes = read_body(body, declared, limit, state.limits.min_body_rate).await.map_err(|e| match e {
        BodyError::TooLarge { .. } => (RejectReason::TooLarge, StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
        BodyError::TooSlow { .. } => {
            state.metrics.shed("slow_body");
            (RejectReason::Timeout, StatusCode::REQUEST_TIMEOUT, e.to_string())
        }
        BodyError::Broken(_) => (RejectReason::Malformed, StatusCode::BAD_REQUEST, e.to_string()),
    })?;
    Ok((reservation, bytes))
}

/// A cap of the book's that a report or an attestation would pass: 429 naming it.
fn over_cap(rejection: Rejection) -> Refusal {
    (RejectReason::Cap(rejection), StatusCode::TOO_MANY_REQUESTS, format!("{}: {rejection}", rejection.as_str()))
}

/// `POST /v1/attest`: admitted as a report is (`admit`; the body at most `MAX_ATTESTATION_BYTES`),
/// held to `--attest-rule` (`attest::accept`) and `--attest-address` (`attest_address`), into the book. 204 when taken.
async fn attest(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    peer: Option<Extension<Peer>>,
    body: Body,
) -> Response {
    let handled = async {
        let limit = MAX_ATTESTATION_BYTES.min(state.limits.max_body_bytes);
        let peer = peer.as_ref().map(|Extension(p)| p);
        let admitted = admit(&state, &headers, peer, body, limit, "an attestation").await?;
        let attestation =
            crate::attest::accept(state.limits.attest_rule, admitted.vouched.as_deref(), &admitted.bytes)?;
        let sender = peer.map(|Peer(addr)| *addr);
        state
            .limits
            .attest_address
            .allows(&headers, sender, &attestation.endpoint)
            .map_err(|line| (RejectReason::NotSendersAddress, StatusCode::FORBIDDEN, line))?;
        let now = state.now_us();
        // Charged to the attesting sidecar's principal (the trusted one without `--identity`
        // naming principals).
        let principal = admitted.vouched.as_deref().unwrap_or(tailweight_weights::TRUSTED_PRINCIPAL);
        state.book().attest_as(principal, &attestation, now).map_err(over_cap)
    };
    match handled.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(refusal) => refuse(&state, refusal),
    }
}

/// Bodies larger than this are parsed off the request's worker (`spawn_blocking`).
const PARSE_ELSEWHERE_BYTES: usize = 64 * 1024;

/// Admission (`admit`), parse, merge (under the book's lock, with what the reply needs), reply
/// (after).
async fn handle_report(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<&Peer>,
    body: Body,
) -> Result<Vec<u8>, Refusal> {
    let admitted = admit(state, headers, peer, body, state.limits.max_body_bytes, "a report").await?;
    let bytes = admitted.bytes;
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
    let principal = admitted.vouched.as_deref().unwrap_or(&report.reporter);
    let now = state.now_us();
    let names = report.clusters.iter().map(|c| c.name.as_str());
    let plan = {
        let mut book = state.book();
        book.ingest_as(&report, principal, now).map_err(over_cap)?;
        book.reply_plan(principal, &report.reporter, names, now, state.limits.max_reply_endpoints)
    };
    state.metrics.reply_endpoints_omitted.inc_by(plan.omitted() as u64);
    let mut reply = Vec::with_capacity(64 + 200 * plan.endpoints());
    plan.render(&mut reply);
    Ok(reply)
}

async fn weights(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    peer: Option<Extension<Peer>>,
    listener: Option<Extension<Listener>>,
    query: Result<Query<WeightsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match get_slot(&state, &headers, peer, listener) {
        Ok((_slot, requester)) => weights_page::weights(&state, &requester, query.ok().map(|Query(q)| q)).await,
        Err(refused) => *refused,
    }
}

async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    peer: Option<Extension<Peer>>,
    listener: Option<Extension<Listener>>,
) -> Response {
    let (_slot, requester) = match get_slot(&state, &headers, peer, listener) {
        Ok(slot) => slot,
        Err(refused) => return *refused,
    };
    // Off the runtime's workers: the book's lock and the encoding, so the reports behind it on this
    // worker do not wait for them.
    let (page_state, page_requester, now) = (state.clone(), requester.clone(), state.now_us());
    let built = tokio::task::spawn_blocking(move || crate::scrape::page(&page_state, &page_requester, now)).await;
    match built {
        Ok(Ok(page)) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"))], page)
                .into_response()
        }
        Ok(Err(Refused::Memory(cost))) => {
            state.metrics.shed("memory");
            retry_later(format!(
                "memory: a metrics page of {cost} bytes does not fit the requests' budget now; retry after {RETRY_AFTER_S} s"
            ))
        }
        Ok(Err(Refused::Rate(RetryAfterMs(ms)))) => {
            state.metrics.shed("page_rate");
            slow_down(ms.div_ceil(1_000), format!("metrics: past the page rate of {requester:?}; retry after {ms} ms"))
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("metrics: the page failed: {e}")),
    }
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.is_ready() {
        text(StatusCode::OK, "ready")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "not ready: starting, shutting down, or the last recompute failed")
    }
}
