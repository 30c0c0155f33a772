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
    let copied = match copy(state, requester, query) {
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

/// The page a query asks for, copied under the book's lock after its names and sizes are known:
/// the reservation of what its copies and JSON cost (503 if the budget has not that much free),
/// then its units from `requester`'s page rate (429 with Retry-After while they are not there).
/// Err: the answer instead (400, 404, 429, 503).
fn copy(state: &AppState, requester: &str, query: Option<WeightsQuery>) -> Result<Copied, Box<Response>> {
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
    if let Err(RetryAfterMs(ms)) = state.pages.take(requester, units, state.now_us()) {
        state.metrics.shed("page_rate");
        return Err(Box::new(slow_down(
            ms.div_ceil(1_000),
            format!(
                "weights: past the page rate of {requester:?} ({PAGE_UNITS_PER_S} clusters and endpoints a second, \
                 {ALL_PAGE_UNITS_PER_S} for all requesters); retry after {ms} ms"
            ),
        )));
    }
    let decisions = book.decisions_of(page[..taken].iter().map(|(name, _)| *name));
    Ok(Copied { decisions, counts: book.counts(), more: more || taken < page.len(), units, _reservation: reservation })
}

#[cfg(test)]
mod tests {
    use super::*;

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
