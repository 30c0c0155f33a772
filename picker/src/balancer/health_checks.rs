//! The balancer's side of out-of-band health checks (see `health_check`): what they are sent with,
//! the checks due, and their answers.

use super::Balancer;
use crate::health::HealthChange;
use crate::health_check::{check_share, CheckProtocol, CheckRound, CheckVerdict, DueHealthCheck};

impl Balancer {
    /// A user request to `cluster_name` at `now_us` spoke `protocol` (see `CheckTarget::note`;
    /// `read_authority` reads its `:authority`). Nothing, not even the lookup, with health checks off.
    pub fn note_user_request(
        &mut self,
        cluster_name: &str,
        protocol: CheckProtocol,
        now_us: u64,
        read_authority: impl FnOnce() -> Option<String>,
    ) {
        if self.settings.health_checks.is_none() {
            return;
        }
        if let Some(cluster) = self.clusters.get_mut(cluster_name) {
            cluster.check_target.note(protocol, now_us, read_authority);
        }
    }

    /// Of the clusters checked out of band (`Settings::checks_out_of_band`): the suspended endpoints whose
    /// probe is due, each marked as probed (the next is due a probe wait later, see `health`), into
    /// `due`, at most `max` of them. Other clusters' endpoints are probed by users' requests.
    ///
    /// While a fresh view says how many callers report the cluster, a due endpoint that some caller's
    /// users were answered well by since its suspension here is readmitted without a check, and the
    /// others are checked with the chance `check_share` (at the probe interval, without backing off).
    pub fn due_health_checks(&mut self, now_us: u64, max: usize, due: &mut Vec<DueHealthCheck>) -> CheckRound {
        let Balancer { settings, clusters, rng, revision, .. } = self;
        let mut round = CheckRound::default();
        let Some(scope) = &settings.health_checks else { return round };
        for (name, cluster) in clusters.list.iter_mut().filter(|(_, c)| settings.checks_out_of_band(c, now_us)) {
            let Some(protocol) = cluster.check_target.protocol() else { continue };
            let fleet = cluster.fleet_reporters(now_us);
            while due.len() < max {
                let Some(slot) = cluster.take_due_probe(now_us, &settings.pick) else { break };
                let endpoint = cluster.endpoint_mut(slot);
                if let Some(reporters) = fleet {
                    if endpoint.served_since_suspension() {
                        let change = endpoint.readmit_on_served_evidence(now_us, &settings.pick);
                        cluster.health_changed(change);
                        *revision += 1;
                        round.readmitted_on_evidence += 1;
                        continue;
                    }
                    let wait_us = endpoint.health.probe_due_us().unwrap_or(now_us).saturating_sub(now_us);
                    if !rng.chance(check_share(scope.fleet_rate_per_s, wait_us, reporters)) {
                        round.left_to_others += 1;
                        continue;
                    }
                }
                let address = endpoint.address.clone();
                let authority = match cluster.check_target.authority() {
                    "" => address.clone(),
                    known => known.to_string(),
                };
                let back_off = fleet.is_none();
                due.push(DueHealthCheck {
                    cluster: name.clone(),
                    address,
                    authority,
                    protocol,
                    sent_us: now_us,
                    back_off,
                });
            }
        }
        round
    }

    /// The answer to `check` came at `now_us` saying `verdict`. Unanswerable: the cluster's checks
    /// pause (`CheckTarget::pause_checks`) and the endpoint's next probe, a probe wait later, is a
    /// user's request. Else, for an endpoint still suspended, what a probe's answer at `now - sent`
    /// would do (a pass ends the suspension with a recovery ramp; a failure doubles the wait), and
    /// nothing for one that recovered meanwhile or was forgotten. Returns the health change.
    pub fn health_check_answered(
        &mut self,
        check: &DueHealthCheck,
        verdict: CheckVerdict,
        now_us: u64,
    ) -> HealthChange {
        let p = &self.settings.pick;
        let Some(cluster) = self.clusters.get_mut(&check.cluster) else { return HealthChange::None };
        let passed = match verdict {
            CheckVerdict::Passed => true,
            CheckVerdict::Failed => false,
            CheckVerdict::Unanswerable => {
                cluster.check_target.pause_checks(now_us);
                return HealthChange::None;
            }
        };
        let Some(slot) = cluster.slot_of(&check.address) else { return HealthChange::None };
        let endpoint = cluster.endpoint_mut(slot);
        if endpoint.health.probe_due_us().is_none() {
            return HealthChange::None;
        }
        let latency_us = now_us.saturating_sub(check.sent_us);
        let change = endpoint.record_health_check(passed, latency_us, now_us, p, check.back_off);
        cluster.health_changed(change);
        self.revision += 1;
        change
    }
}
