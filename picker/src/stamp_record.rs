//! What one worker knows from the load stamps it got (`tailweight_wire::stamp`): per endpoint, the
//! latest stamp and what this worker sent there since (see `balancer`).

use tailweight_wire::stamp::LoadStamp;

/// One worker's latest stamp of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StampRecord {
    pub rif: u32,
    pub at_us: u64,
    /// Requests this worker sent there since the stamp (the stamp already counts earlier ones
    /// still at the endpoint).
    pub sent_since: u32,
}

impl StampRecord {
    pub fn new(stamp: LoadStamp, at_us: u64) -> Self {
        StampRecord { rif: stamp.rif, at_us, sent_since: 0 }
    }

    /// Requests at the endpoint as far as this worker knows: `max(rif + sent_since, own)`, the
    /// stamp's plus what this worker sent there since, never below `own`, the requests this proxy
    /// has in flight there by its own counts (see `Endpoint::load`). The stamp is the endpoint's
    /// word, its own counts are facts: a destination that claims an empty queue is still charged
    /// for every request of this proxy it holds, so a lie can at most hide the other proxies' load.
    pub fn queue(&self, own: f64) -> f64 {
        f64::from(self.rif.saturating_add(self.sent_since)).max(own)
    }

    pub fn fresh(&self, now_us: u64, max_age_us: u64) -> bool {
        now_us.saturating_sub(self.at_us) < max_age_us
    }

    pub fn sent(&mut self) {
        self.sent_since = self.sent_since.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_counts_what_was_sent_since_and_ages() {
        let mut r = StampRecord::new(LoadStamp { rif: 2 }, 1_000);
        r.sent();
        r.sent();
        assert_eq!(r.queue(0.0), 4.0);
        assert!(r.fresh(1_000 + 49_999, 50_000));
        assert!(!r.fresh(1_000 + 50_000, 50_000));
    }

    #[test]
    fn a_stamp_never_claims_fewer_requests_than_this_proxy_has_in_flight_there() {
        // A lying endpoint: rif 0 on every response, while this proxy still waits on five there.
        let mut lie = StampRecord::new(LoadStamp { rif: 0 }, 0);
        assert_eq!(lie.queue(5.0), 5.0);
        lie.sent();
        assert_eq!(lie.queue(6.0), 6.0);
        // An honest stamp that counts more (other proxies' requests) stands.
        assert_eq!(StampRecord::new(LoadStamp { rif: 9 }, 0).queue(5.0), 9.0);
    }
}
