//! `GET /v1/weights[?cluster=|?after=&limit=]`: what the last recompute decided, a page at a time,
//! with its copies and its JSON paid for from the memory budget before they are made.

use crate::answer::{json, retry_later, text, RETRY_AFTER_S};
use crate::budget::{WEIGHTS_BYTES_PER_CLUSTER, WEIGHTS_BYTES_PER_ENDPOINT};
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

/// The first clusters of `page` that fit `PAGE_ENDPOINTS` (at least one), and what they cost.
fn fitting(page: &[(&str, usize)]) -> (usize, usize) {
    let (mut taken, mut endpoints) = (0, 0);
    for &(_, n) in page {
        if taken > 0 && endpoints + n > PAGE_ENDPOINTS {
            break;
        }
        taken += 1;
        endpoints += n;
    }
    (taken, taken * WEIGHTS_BYTES_PER_CLUSTER + endpoints * WEIGHTS_BYTES_PER_ENDPOINT)
}

/// One cluster (`?cluster=`), or a page of clusters by name after `?after=` (`?limit=`, default
/// 64, at most 1,024; fewer once the page holds 8,192 endpoints) with the name to ask `after` next
/// (`next`, null on the last page). Under the book's lock: the page's names and sizes, the
/// reservation of what its copies and JSON cost (503 if the budget has not that much free), the
/// copies; the JSON after.
pub fn weights(state: &AppState, query: Option<WeightsQuery>) -> Response {
    let Some(q) = query else {
        return text(
            StatusCode::BAD_REQUEST,
            "query: expected `cluster=<name>`, or `after=<name>` and `limit=<count>`",
        );
    };
    let limit = q.limit.unwrap_or(PAGE_CLUSTERS);
    if limit == 0 || limit > MAX_PAGE_CLUSTERS {
        return text(StatusCode::BAD_REQUEST, format!("limit: {limit} is outside 1..={MAX_PAGE_CLUSTERS}"));
    }
    let (decisions, counts, more, _reservation) = {
        let book = state.book();
        let (page, more) = match &q.cluster {
            Some(name) => match book.cluster_endpoints(name) {
                Some(n) => (vec![(name.as_str(), n)], false),
                None => return text(StatusCode::NOT_FOUND, format!("cluster: {name:?} is not tracked")),
            },
            None => book.cluster_page(q.after.as_deref().unwrap_or(""), limit),
        };
        let (taken, cost) = fitting(&page);
        let Some(reservation) = state.memory.reserve(cost) else {
            state.metrics.shed("memory");
            return retry_later(format!(
                "memory: a page of {cost} bytes does not fit the requests' budget now; retry after {RETRY_AFTER_S} s"
            ));
        };
        let decisions = book.decisions_of(page[..taken].iter().map(|(name, _)| *name));
        (decisions, book.counts(), more || taken < page.len(), reservation)
    };
    let next = more.then(|| decisions.last().map(|d| d.name.as_str())).flatten();
    let page = Page { now_us: state.now_us(), counts, clusters: &decisions, next };
    match serde_json::to_vec(&page) {
        Ok(bytes) => json(bytes),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("weights: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_takes_clusters_while_their_endpoints_fit_and_at_least_one() {
        assert_eq!(fitting(&[]), (0, 0));
        let huge = [("a", PAGE_ENDPOINTS * 2), ("b", 1)];
        assert_eq!(fitting(&huge).0, 1);
        let small = [("a", 10), ("b", PAGE_ENDPOINTS - 10), ("c", 1)];
        let (taken, cost) = fitting(&small);
        assert_eq!((taken, cost), (2, 2 * WEIGHTS_BYTES_PER_CLUSTER + PAGE_ENDPOINTS * WEIGHTS_BYTES_PER_ENDPOINT));
    }
}
