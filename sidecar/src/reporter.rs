//! Reports to the aggregator (one HTTP call per destination cluster, under the shard header so
//! replicas behind consistent hashing each see whole clusters) and the handling of its replies:
//! a valid reply is stored in shared data for every worker's next tick; anything else is counted
//! and ignored, so the aggregator can never fail or slow a request.

use crate::config::AggregatorConfig;
use crate::host::{CallAnswer, CallToken, Host, LogLevel, OutgoingCall};
use crate::metrics::Metrics;
use crate::shared::SharedData;
use crate::slot::StoredView;
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
    /// Calls under way: token, cluster and when it was sent (a few at a time: a vector).
    pending: Vec<(CallToken, String, u64)>,
    failures: u64,
}

impl Reporter {
    pub fn new(id: String, incarnation: u64) -> Self {
        Reporter { id, incarnation, pending: Vec::new(), failures: 0 }
    }

    /// Send `clusters` as this period's report at `now_us`; `period_ms` is the report period it
    /// was sent at.
    pub fn send(
        &mut self,
        host: &impl Host,
        aggregator: &AggregatorConfig,
        period_ms: u64,
        clusters: Vec<ClusterReport>,
        metrics: &Metrics,
        now_us: u64,
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
            let call = OutgoingCall {
                cluster: &aggregator.cluster,
                headers: &headers,
                body: &body,
                timeout_ms: aggregator.timeout_ms,
            };
            match host.http_call(&call) {
                Ok(token) => {
                    self.pending.push((token, name, now_us));
                    metrics.reports_sent.inc(host);
                }
                Err(status) => self.fail(
                    host,
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

    /// The answer to call `token`, if it is a report's (false: not ours). A valid reply's views
    /// are stored for every worker's next tick.
    pub fn on_answer(
        &mut self,
        host: &impl Host,
        token: CallToken,
        answer: &impl CallAnswer,
        metrics: &Metrics,
    ) -> bool {
        let Some(at) = self.pending.iter().position(|(t, _, _)| *t == token) else { return false };
        let (_, cluster, sent_us) = self.pending.swap_remove(at);
        let body_size = answer.body_size();
        match answer.header(":status").as_deref() {
            Some("200") => {}
            Some(code) => {
                let body = answer.body(body_size.min(MAX_REASON_BYTES));
                let reason = String::from_utf8_lossy(&body).replace('\n', " ");
                self.fail(host, metrics, &format!("aggregator answered {code} for {cluster}: {reason}"));
                return true;
            }
            None => {
                self.fail(host, metrics, &format!("aggregator call for {cluster} failed or timed out"));
                return true;
            }
        }
        if body_size > MAX_REPLY_BYTES {
            let problem = format!("{body_size} bytes, over the limit of {MAX_REPLY_BYTES}");
            self.fail(host, metrics, &format!("ignoring aggregator reply for {cluster}: {problem}"));
            return true;
        }
        let body = answer.body(body_size);
        let reply = match read_reply(&body, &Limits::default()) {
            Ok(reply) => reply,
            Err(reason) => {
                self.fail(host, metrics, &format!("ignoring aggregator reply for {cluster}: {reason}"));
                return true;
            }
        };
        // A report names one cluster, and the reply answers for it: views of others (which only a
        // faulty or hostile aggregator sends) would fill shared data with clusters this proxy
        // does not steer.
        if let Some(other) = reply.clusters.iter().find(|v| v.name != cluster) {
            let other = tailweight_wire::json::quoted(&other.name);
            self.fail(host, metrics, &format!("ignoring aggregator reply for {cluster}: it has a view of {other}"));
            return true;
        }
        let shared = SharedData(host);
        let mut stored = false;
        for view in reply.clusters {
            stored |= shared.store_view(&StoredView { as_of_us: sent_us, ttl_ms: reply.ttl_ms, view });
        }
        if stored {
            shared.views_stored();
        }
        metrics.reports_ok.inc(host);
        true
    }

    fn fail(&mut self, host: &impl Host, metrics: &Metrics, message: &str) {
        metrics.reports_failed.inc(host);
        if self.failures % LOG_EVERY == 0 {
            host.log(LogLevel::Warn, &format!("{message} (local-only decisions meanwhile)"));
        }
        self.failures += 1;
    }
}
