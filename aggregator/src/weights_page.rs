//! `GET /v1/weights[?cluster=|?after=&limit=]`: what the last recompute decided, a page at a time,
//! with its copies and its JSON paid for from the memory budget, and its work from its requester's
//! page rate (`page_rate.rs`), before they are made.

use crate::admission::Reservation;
use crate::answer::{json, retry_later, slow_down, text, RETRY_AFTER_S};
use crate::budget::{WEIGHTS_BYTES_PER_CLUSTER, WEIGHTS_BYTES_PER_ENDPOINT};
use crate::page_rate::{RetryAfterMs, ALL_PAGE_UNITS_PER_S, PAGE_UNITS_PER_S};
use crate::state::AppState;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tailweight_weights::{ClusterDecision, Counts};

/// Pages: clusters by name, at most this many per page by default, at most `MAX_PAGE_CLUSTERS` on
/// request, and no more clusters once a page holds `PAGE_ENDPOINTS` endpoints (a page holds at
/// least one cluster, whatever its size).
const PAGE_CLUSTERS: usize = 64;
const MAX_PAGE_CLUSTERS: usize = 1_024;
const PAGE_ENDPOINTS: usize = 8_192;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightsQuery {
    cluster: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

#[derive(Serialize)]
struct Page<'a> {
    now_us: u64,
    counts: Counts,
    clusters: &'a [ClusterDecision],
    next: Option<&'a str>,
}

/// The first clusters of `page` that fit `PAGE_ENDPOINTS` (at least one): how many, what they
/// cost in bytes, and their clusters and endpoints in all (the units of `page_rate.rs`).
fn fitting(page: &[(&str, usize)]) -> (usize, usize, usize) {
    let (mut taken, mut endpoints) = (0, 0);
    for &(_, n) in page {
        if taken > 0 && endpoints + n > PAGE_ENDPOINTS {
            break;
        }
        taken += 1;
        endpoints += n;
    }
    (taken, taken * WEIGHTS_BYTES_PER_CLUSTER + endpoints * WEIGHTS_BYTES_PER_ENDPOINT, taken + endpoints)
}

/// Cluster names a page query's scan of the book compares per unit of `page_rate.rs` (a unit is
/// about what copying one endpoint's decision costs; a name takes a comparison and maybe a heap
/// push).
const SCANNED_CLUSTERS_PER_UNIT: usize = 64;

/// What finding a page by name costs in units, taken before the book's lock: `ceil(clusters /
/// SCANNED_CLUSTERS_PER_UNIT)`, at least 1, where `clusters` is the book's count at the last
/// recompute (`Book::cluster_page` looks at every name). So `?limit=1` polled back to back
/// scans the book within the requester's page rate.
pub fn scan_units(clusters: usize) -> usize {
    clusters.div_ceil(SCANNED_CLUSTERS_PER_UNIT).max(1)
}

/// Pages of more clusters and endpoints than this are serialised off the request's worker
/// (`spawn_blocking`), so that the reports behind it on this worker do not wait the milliseconds
/// it takes.
const SERIALISE_ELSEWHERE_UNITS: usize = 256;

/// What one page holds once copied: its clusters, the book's counts, whether more follow, and the
/// memory reserved for it (held until it is answered).
struct Copied {
    decisions: Vec<ClusterDecision>,
    counts: Counts,
    more: bool,
    units: usize,
    _reservation: Reservation,
}

/// One cluster (`?cluster=`), or a page of clusters by name after `?after=` (`?limit=`, default
/// 64, at most 1,024; fewer once the page holds 8,192 endpoints) with the name to ask `after` next
/// (`next`, null on the last page): copied (`copy`), then its JSON (off the worker if large).
pub async fn weights(state: &AppState, requester: &str, query: Option<WeightsQuery>) -> Response {
    let copied = match copy(state, requester, query, state.now_us()) {
        Ok(copied) => copied,
        Err(refused) => return *refused,
    };
    let (now_us, units) = (state.now_us(), copied.units);
    let render = move || {
        let Copied { decisions, counts, more, .. } = &copied;
        let next = more.then(|| decisions.last().map(|d| d.name.as_str())).flatten();
        serde_json::to_vec(&Page { now_us, counts: *counts, clusters: decisions, next })
    };
    let rendered = if units > SERIALISE_ELSEWHERE_UNITS {
        tokio::task::spawn_blocking(render).await.map_err(|e| e.to_string())
    } else {
        Ok(render())
    };
    match rendered {
        Ok(Ok(bytes)) => json(bytes),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("weights: {e}")),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("weights: the serialiser failed: {e}")),
    }
}

/// The page a query asks for at `now_us`: a page by name first takes its scan's units
/// (`scan_units`) from `requester`'s page rate, before the book's lock; then, under the lock,
/// once its names and sizes are known, the reservation of what its copies and JSON cost (503 if
/// the budget has not that much free), then its units from the page rate (429 with Retry-After
/// while they are not there), then the copy. Err: the answer instead (400, 404, 429, 503).
fn copy(state: &AppState, requester: &str, query: Option<WeightsQuery>, now_us: u64) -> Result<Copied, Box<Response>> {
    let Some(q) = query else {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "query: expected `cluster=<name>`, or `after=<name>` and `limit=<count>`",
        )));
    };
    let limit = q.limit.unwrap_or(PAGE_CLUSTERS);
    if limit == 0 || limit > MAX_PAGE_CLUSTERS {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            format!("limit: {limit} is outside 1..={MAX_PAGE_CLUSTERS}"),
        )));
    }
    if q.cluster.is_none() {
        let scan = scan_units(state.metrics.clusters_tracked());
        state.pages.take(requester, scan, now_us).map_err(|retry| past_the_page_rate(state, requester, retry))?;
    }
    let book = state.book();
    let (page, more) = match &q.cluster {
        Some(name) => match book.cluster_endpoints(name) {
            Some(n) => (vec![(name.as_str(), n)], false),
            None => return Err(Box::new(text(StatusCode::NOT_FOUND, format!("cluster: {name:?} is not tracked")))),
        },
        None => book.cluster_page(q.after.as_deref().unwrap_or(""), limit),
    };
    let (taken, cost, units) = fitting(&page);
    let Some(reservation) = state.memory.reserve(cost) else {
        state.metrics.shed("memory");
        return Err(Box::new(retry_later(format!(
            "memory: a page of {cost} bytes does not fit the requests' budget now; retry after {RETRY_AFTER_S} s"
        ))));
    };
    state.pages.take(requester, units, now_us).map_err(|retry| past_the_page_rate(state, requester, retry))?;
    let decisions = book.decisions_of(page[..taken].iter().map(|(name, _)| *name));
    Ok(Copied { decisions, counts: book.counts(), more: more || taken < page.len(), units, _reservation: reservation })
}

/// 429 with Retry-After: `requester` is past its page rate (counted as shed, `page_rate`).
fn past_the_page_rate(state: &AppState, requester: &str, RetryAfterMs(ms): RetryAfterMs) -> Box<Response> {
    state.metrics.shed("page_rate");
    Box::new(slow_down(
        ms.div_ceil(1_000),
        format!(
            "weights: past the page rate of {requester:?} ({PAGE_UNITS_PER_S} clusters and endpoints a second, \
             {ALL_PAGE_UNITS_PER_S} for all requesters); retry after {ms} ms"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServiceConfig;
    use clap::Parser;
    use tailweight_wire::report::{ClusterReport, EndpointReport, Report};

    /// An aggregator's state whose book holds 1,024 clusters of one endpoint (four principals'),
    /// counted as at a recompute.
    fn book_of_1024_clusters() -> std::sync::Arc<AppState> {
        let config = ServiceConfig::parse_from(["tailweight-aggregator", "--identity", "report"]);
        let state = crate::state_from(&config).unwrap();
        for p in 0..4 {
            let clusters = (0..256)
                .map(|c| ClusterReport {
                    name: format!("c{p}-{c}"),
                    endpoints: vec![EndpointReport { address: "10.0.0.1:80".into(), ..EndpointReport::default() }],
                })
                .collect();
            let report = Report { version: 1, reporter: format!("r{p}"), incarnation: 1, interval_ms: 1000, clusters };
            state.book().ingest_as(&report, &format!("sa-{p}"), 1).unwrap();
        }
        let counts = state.book().counts();
        state.metrics.set_counts(&counts);
        assert_eq!(state.metrics.clusters_tracked(), 1_024);
        state
    }

    #[test]
    fn a_page_by_name_pays_for_its_scan_of_the_book_before_the_lock() {
        let state = book_of_1024_clusters();
        let query = |q: &str| serde_json::from_str::<WeightsQuery>(q).ok();
        // ?limit=1 costs the scan (1,024 / 64 = 16 units) and its page (a cluster and an endpoint):
        // a requester's burst of 2 x 8,320 units holds 924 of them at one instant (8,320 without
        // the scan's units).
        let mut served = 0;
        while copy(&state, "poller", query(r#"{"limit": 1}"#), 5).is_ok() {
            served += 1;
            assert!(served <= 8_320, "the scan is not charged");
        }
        assert_eq!(served, (2 * PAGE_UNITS_PER_S as usize) / (scan_units(1_024) + 2));
        assert_eq!((scan_units(1_024), served), (16, 924));
        // One cluster by name scans nothing: another requester's burst holds 8,320 of those.
        let mut by_name = 0;
        while copy(&state, "inspector", query(r#"{"cluster": "c0-0"}"#), 5).is_ok() {
            by_name += 1;
        }
        assert_eq!(by_name, 8_320);
        assert_eq!(scan_units(0), 1);
    }

    #[test]
    fn a_page_takes_clusters_while_their_endpoints_fit_and_at_least_one() {
        assert_eq!(fitting(&[]), (0, 0, 0));
        let huge = [("a", PAGE_ENDPOINTS * 2), ("b", 1)];
        assert_eq!(fitting(&huge).0, 1);
        let small = [("a", 10), ("b", PAGE_ENDPOINTS - 10), ("c", 1)];
        let (taken, cost, units) = fitting(&small);
        assert_eq!((taken, cost), (2, 2 * WEIGHTS_BYTES_PER_CLUSTER + PAGE_ENDPOINTS * WEIGHTS_BYTES_PER_ENDPOINT));
        assert_eq!(units, 2 + PAGE_ENDPOINTS);
    }
}
