//! The balancer's side of out-of-band health checks (see `health_check`): the authority they use,
//! the checks due, and their answers.

use super::Balancer;
use crate::health::HealthChange;
use crate::health_check::DueHealthCheck;

impl Balancer {
    /// A user request to `cluster_name` carried `authority` (only needed with health checks on).
    pub fn note_authority(&mut self, cluster_name: &str, authority: &str) {
        if let Some(cluster) = self.clusters.get_mut(cluster_name) {
            cluster.note_authority(authority);
        }
    }

    /// Of the health-checked clusters (`Settings::health_checks`): the suspended endpoints whose probe
    /// is due, each marked as probed (the next is due a probe wait later, see `health`), into `due`,
    /// at most `max` of them. Other clusters' endpoints are probed by users' requests.
    pub fn due_health_checks(&mut self, now_us: u64, max: usize, due: &mut Vec<DueHealthCheck>) {
        let p = &self.settings.pick;
        for (name, cluster) in self.clusters.list.iter_mut().filter(|(_, c)| c.health_checked) {
            while due.len() < max {
                let Some(slot) = cluster.take_due_probe(now_us, p) else { break };
                let address = cluster.endpoints()[slot].address.clone();
                let authority = match cluster.authority() {
                    "" => address.clone(),
                    known => known.to_string(),
                };
                due.push(DueHealthCheck { cluster: name.clone(), address, authority, sent_us: now_us });
            }
        }
    }

    /// The answer to `check` (`passed`: see `health_check::check_passed`) came at `now_us`: for an
    /// endpoint still suspended, what a probe's answer at `now - sent` would do (a pass ends the
    /// suspension with a recovery ramp; a failure doubles the wait). Else (recovered meanwhile, or
    /// forgotten) nothing. Returns the health change.
    pub fn health_check_answered(&mut self, check: &DueHealthCheck, passed: bool, now_us: u64) -> HealthChange {
        let p = &self.settings.pick;
        let Some(cluster) = self.clusters.get_mut(&check.cluster) else { return HealthChange::None };
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
