//! Reports to the aggregator (one HTTP call per destination cluster, under the shard header so
//! replicas behind consistent hashing each see whole clusters) and the handling of its replies:
//! a valid reply is stored in shared data for every worker's next tick; anything else is counted
//! and ignored, so the aggregator can never fail or slow a request.

use crate::abi::LogLevel;
use crate::host;
use crate::metrics::{self, Metrics};
use crate::shared::{self, StoredView};
use tailweight_picker::config::AggregatorConfig;
use tailweight_wire::protocol::{self, Limits};
use tailweight_wire::reply::read::read_reply;
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::{ClusterReport, Report};

/// Largest reply body read: a bigger one is refused before a byte of it is copied into the VM.
const MAX_REPLY_BYTES: usize = 4 << 20;
/// Of a refusal's body, the bytes quoted in the log line.
const MAX_REASON_BYTES: usize = 200;
/// Log the first failure and then every n-th, so a dead aggregator does not flood the log.
const LOG_EVERY: u64 = 100;

pub struct Reporter {
    id: String,
    incarnation: u64,
    /// Calls under way: token and cluster (a few at a time: a vector).
    pending: Vec<(u32, String)>,
    failures: u64,
}

impl Reporter {
    pub fn new(id: String, incarnation: u64) -> Self {
        Reporter { id, incarnation, pending: Vec::new(), failures: 0 }
    }

    /// Send `clusters` as this period's report; `period_ms` is the report period it was sent at.
    pub fn send(
        &mut self,
        aggregator: &AggregatorConfig,
        period_ms: u64,
        clusters: Vec<ClusterReport>,
        metrics: &Metrics,
    ) {
        // Calls time out well before the next period; more pending than this means the host lost some.
        if self.pending.len() > 4 * clusters.len().max(1) {
            self.pending.clear();
        }
        for cluster in clusters {
            let name = cluster.name.clone();
            let report = Report {
                version: protocol::VERSION,
                reporter: self.id.clone(),
                incarnation: self.incarnation,
                interval_ms: u32::try_from(period_ms).unwrap_or(u32::MAX),
                clusters: vec![cluster],
            };
            let body = write_report(&report);
            // Replicas behind consistent hashing each see whole clusters (see protocol::shard_authority).
            let authority = protocol::shard_authority(&name, &aggregator.authority);
            let headers = [
                (":method", "POST"),
                (":path", aggregator.path.as_str()),
                (":authority", authority.as_str()),
                ("content-type", "application/json"),
                (aggregator.shard_header.as_str(), name.as_str()),
            ];
            match host::http_call(&aggregator.cluster, &headers, &body, aggregator.timeout_ms) {
                Ok(token) => {
                    self.pending.push((token, name));
                    metrics::inc(metrics.reports_sent);
                }
                Err(status) => self.fail(
                    metrics,
                    &format!(
                        "cannot call aggregator cluster {}: {} (is the cluster defined?)",
                        tailweight_wire::json::quoted(&aggregator.cluster),
                        status
                    ),
                ),
            }
        }
    }

    /// A reply (or a failed call: no headers) to call `token`.
    pub fn on_response(&mut self, token: u32, body_size: usize, metrics: &Metrics, now_us: u64) {
        let Some(at) = self.pending.iter().position(|(t, _)| *t == token) else { return };
        let (_, cluster) = self.pending.swap_remove(at);
        match host::call_response_header(":status").as_deref() {
            Some("200") => {}
            Some(code) => {
                let body = host::call_response_body(body_size.min(MAX_REASON_BYTES));
                let reason = String::from_utf8_lossy(&body).replace('\n', " ");
                return self.fail(metrics, &format!("aggregator answered {code} for {cluster}: {reason}"));
            }
            None => return self.fail(metrics, &format!("aggregator call for {cluster} failed or timed out")),
        }
        if body_size > MAX_REPLY_BYTES {
            let problem = format!("{body_size} bytes, over the limit of {MAX_REPLY_BYTES}");
            return self.fail(metrics, &format!("ignoring aggregator reply for {cluster}: {problem}"));
        }
        let body = host::call_response_body(body_size);
        let reply = match read_reply(&body, &Limits::default()) {
            Ok(reply) => reply,
            Err(reason) => return self.fail(metrics, &format!("ignoring aggregator reply for {cluster}: {reason}")),
        };
        // A report names one cluster, and the reply answers for it: views of others (which only a
        // faulty or hostile aggregator sends) would fill shared data with clusters this proxy
        // does not steer.
        if let Some(other) = reply.clusters.iter().find(|v| v.name != cluster) {
            let other = tailweight_wire::json::quoted(&other.name);
            return self.fail(metrics, &format!("ignoring aggregator reply for {cluster}: it has a view of {other}"));
        }
        for view in reply.clusters {
            shared::store_view(&StoredView { received_us: now_us, ttl_ms: reply.ttl_ms, view });
        }
        shared::views_stored();
        metrics::inc(metrics.reports_ok);
    }

    fn fail(&mut self, metrics: &Metrics, message: &str) {
        metrics::inc(metrics.reports_failed);
        if self.failures % LOG_EVERY == 0 {
            host::log(LogLevel::Warn, &format!("{message} (local-only decisions meanwhile)"));
        }
        self.failures += 1;
    }
}
