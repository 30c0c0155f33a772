//! Probes on the network, for the policies that probe servers out of the requests' path (Prequal;
//! tailweight's research variant `probe_stamps`): a probe sent at t reaches its server at t + d,
//! which answers with its state then; the answer reaches the client at t + 2d. Every probe takes
//! the same delay, so both legs are FIFO queues in time order. The policy sets a timer at t + d
//! (`arrive`) and collects delivered answers before it decides (`deliver`).

use std::collections::VecDeque;

/// A probe on its way to its server, or its answer on its way back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeAnswer {
    /// When it reaches the server (outbound) or the client (inbound).
    pub at_ns: u64,
    pub client: u32,
    pub endpoint: u32,
    /// The server's requests in flight and latency estimate when it answered.
    pub rif: u32,
    pub latency_ns: f64,
}

#[derive(Debug, Clone, Default)]
pub struct ProbeTransit {
    outbound: VecDeque<ProbeAnswer>,
    inbound: VecDeque<ProbeAnswer>,
}

impl ProbeTransit {
    /// A probe from `client` to `endpoint`, sent now, reaching the server at `at_server_ns`.
    pub fn send(&mut self, client: u32, endpoint: u32, at_server_ns: u64) {
        self.outbound.push_back(ProbeAnswer { at_ns: at_server_ns, client, endpoint, rif: 0, latency_ns: 0.0 });
    }

    /// An answer already made (the server's state at sending), reaching the client at `answer.at_ns`.
    pub fn send_answered(&mut self, answer: ProbeAnswer) {
        self.inbound.push_back(answer);
    }

    /// The probes that reached their servers by `now_ns` are answered with `answer(endpoint)`
    /// (None: the server does not answer, the probe is lost) and start back, arriving `delay_ns`
    /// later.
    pub fn arrive(&mut self, now_ns: u64, delay_ns: u64, mut answer: impl FnMut(u32) -> Option<(u32, f64)>) {
        while self.outbound.front().is_some_and(|p| p.at_ns <= now_ns) {
            let Some(mut p) = self.outbound.pop_front() else { break };
            if let Some((rif, latency_ns)) = answer(p.endpoint) {
                (p.rif, p.latency_ns, p.at_ns) = (rif, latency_ns, now_ns + delay_ns);
                self.inbound.push_back(p);
            }
        }
    }

    /// The next answer that reached its client by `now_ns`, oldest first.
    pub fn deliver(&mut self, now_ns: u64) -> Option<ProbeAnswer> {
        self.inbound.front().is_some_and(|a| a.at_ns <= now_ns).then(|| self.inbound.pop_front()).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_the_state_at_arrival_and_come_back_in_order_a_round_trip_later() {
        let mut t = ProbeTransit::default();
        t.send(0, 5, 100);
        t.send(1, 6, 100);
        t.send(0, 7, 300);
        t.arrive(100, 100, |e| (e != 6).then_some((e * 10, 1.0)));
        assert_eq!(t.deliver(199), None, "still on the way back");
        let a = t.deliver(200).unwrap();
        assert_eq!((a.client, a.endpoint, a.rif, a.at_ns), (0, 5, 50, 200));
        assert_eq!(t.deliver(200), None, "endpoint 6 did not answer; 7 has not reached its server");
        t.arrive(300, 100, |_| Some((1, 2.0)));
        assert_eq!(t.deliver(1_000).map(|a| (a.endpoint, a.rif)), Some((7, 1)));
        t.send_answered(ProbeAnswer { at_ns: 1_100, client: 2, endpoint: 9, rif: 4, latency_ns: 3.0 });
        assert_eq!(t.deliver(1_099), None);
        assert_eq!(t.deliver(1_100).map(|a| a.endpoint), Some(9));
    }
}
