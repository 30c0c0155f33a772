//! The balancer's side of out-of-band health checks (see `health_check`): what they are sent with,
//! the checks due, and their answers.

use super::Balancer;
use crate::health::HealthChange;
use crate::health_check::{CheckProtocol, CheckVerdict, DueHealthCheck};

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
    pub fn due_health_checks(&mut self, now_us: u64, max: usize, due: &mut Vec<DueHealthCheck>) {
        let settings = &self.settings;
        for (name, cluster) in self.clusters.list.iter_mut().filter(|(_, c)| settings.checks_out_of_band(c, now_us)) {
            let Some(protocol) = cluster.check_target.protocol() else { continue };
            while due.len() < max {
                let Some(slot) = cluster.take_due_probe(now_us, &settings.pick) else { break };
                let address = cluster.endpoints()[slot].address.clone();
                let authority = match cluster.check_target.authority() {
                    "" => address.clone(),
                    known => known.to_string(),
                };
                due.push(DueHealthCheck { cluster: name.clone(), address, authority, protocol, sent_us: now_us });
            }
        }
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
        let change = endpoint.record_health_check(passed, now_us.saturating_sub(check.sent_us), now_us, p);
        cluster.health_changed(change);
        self.revision += 1;
        change
    }
}
