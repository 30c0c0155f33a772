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

    /// Requests at the endpoint as far as this worker knows: the stamp's plus its own sent since.
    pub fn queue(&self) -> u32 {
        self.rif.saturating_add(self.sent_since)
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
        assert_eq!(r.queue(), 4);
        assert!(r.fresh(1_000 + 49_999, 50_000));
        assert!(!r.fresh(1_000 + 50_000, 50_000));
    }
}
