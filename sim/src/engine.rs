//! The discrete-event engine: requests arrive at client proxies, the policy picks an endpoint, the
//! endpoint serves them FIFO on its workers, responses go back to the policy. Time is integer
//! nanoseconds; the next arrival is kept apart from the event heap (one pending arrival at a time),
//! requests live in a slab, and nothing is allocated per request once queues have grown.
//!
//! With `Policy::CENTRAL` (the ideal bound) there is no pick: requests wait in one FIFO queue and
//! go to an idle worker, the fastest endpoint's first.

use crate::arrivals::{Arrival, Arrivals};
use crate::histogram::Histogram;
use crate::policy::{Choice, Ctx, Outcome, Policy};
use crate::queue::{timer_of, Queue, EV_DONE, EV_REJECT, EV_SCENARIO, EV_TIMER, EV_WINDOW};
use crate::server::{Server, Status};
use crate::setup::{EventAction, Setup};
use crate::steady::{OPENING_NS, SECOND_NS};
use std::collections::{BTreeSet, VecDeque};

/// How long a refused or failing endpoint takes to answer (a 503 or a connection refused).
pub const FAIL_LATENCY_NS: u64 = 200_000;
/// Servers close their utilisation window this often (the ORCA and CPU figures).
pub const SERVER_WINDOW_NS: u64 = 1_000_000_000;
/// Width of the time series windows used for reaction times.
pub const SERIES_WINDOW_NS: u64 = 100_000_000;

/// 32 bytes: the slab is walked in random order, so its size is cache misses.
#[derive(Debug, Clone, Copy, Default)]
struct TrackedRequest {
    arrived_ns: u64,
    sent_ns: u64,
    draw: f32,
    client: u32,
    /// The endpoint; NOT_LIVE once answered.
    endpoint: u32,
    token: u32,
}

const NOT_LIVE: u32 = u32::MAX;

impl TrackedRequest {
    fn live(&self) -> bool {
        self.endpoint != NOT_LIVE
    }
}

/// What a run measured (latencies in nanoseconds). Requests count when they arrived in the
/// recorded part (after the warm-up).
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub latency: Histogram,
    pub recorded: u64,
    pub errors: u64,
    /// Requests sent to each endpoint (recorded part), and in the run's opening (`OPENING_NS`).
    pub per_endpoint: Vec<u64>,
    pub opening_per_endpoint: Vec<u64>,
    /// Time waited in the endpoint's queue before service, and service time (recorded part).
    pub wait_sum_ns: f64,
    pub service_sum_ns: f64,
    pub served: u64,
    /// The same per endpoint: time waited in its queue, requests started.
    pub per_endpoint_wait_ns: Vec<f64>,
    pub per_endpoint_served: Vec<u64>,
    /// Every request of the run: arrived, answered, and answers for requests not in flight.
    pub arrivals: u64,
    pub completions: u64,
    pub anomalies: u64,
    /// Requests that had to wait in their client for a free connection, and the longest backlog.
    pub delayed: u64,
    pub max_backlog: usize,
    /// Per series window: requests sent, requests sent to each event's endpoints.
    pub sent_series: Vec<u32>,
    pub event_series: Vec<Vec<u32>>,
    /// Simulated time at which the last request was answered.
    pub end_ns: u64,
    /// Latencies by the second their requests arrived in, warm-up included (see `steady`).
    pub per_second: Vec<Histogram>,
}

pub struct Engine<'s, P: Policy> {
    setup: &'s Setup,
    policy: P,
    servers: Vec<Server>,
    queue: Queue,
    arrivals: Arrivals,
    requests: Vec<TrackedRequest>,
    free: Vec<u32>,
    in_flight: Vec<u32>,
    backlog: Vec<VecDeque<u32>>,
    central: VecDeque<u32>,
    /// Endpoints with an idle worker, fastest first (central mode only).
    idle: BTreeSet<(u64, u32)>,
    /// Per endpoint: bit i set when scenario event i names it.
    event_mask: Vec<u64>,
    outstanding: u64,
    m: Measured,
}

/// Order key of an endpoint for "fastest first": its mean service time's bits (positive f64 bits
/// order like the numbers).
fn speed_key(s: &Server) -> u64 {
    s.mean_service_ns().to_bits()
}

impl<'s, P: Policy> Engine<'s, P> {
    pub fn new(setup: &'s Setup, policy: P, arrivals: Arrivals) -> Self {
        let servers: Vec<Server> = setup.endpoints.iter().cloned().map(Server::new).collect();
        let n = servers.len();
        let mut event_mask = vec![0u64; n];
        for (i, ev) in setup.events.iter().enumerate().take(64) {
            for &e in &ev.endpoints {
                event_mask[e as usize] |= 1 << i;
            }
        }
        let windows = (setup.end_ns() / SERIES_WINDOW_NS + 1) as usize;
        let idle = if P::CENTRAL {
            servers.iter().enumerate().map(|(i, s)| (speed_key(s), i as u32)).collect()
        } else {
            BTreeSet::new()
        };
        Engine {
            setup,
            policy,
            servers,
            queue: Queue::default(),
            arrivals,
            requests: Vec::new(),
            free: Vec::new(),
            in_flight: vec![0; setup.clients as usize],
            backlog: vec![VecDeque::new(); if setup.connection_limit { setup.clients as usize } else { 0 }],
            central: VecDeque::new(),
            idle,
            event_mask,
            outstanding: 0,
            m: Measured {
                per_endpoint: vec![0; n],
                opening_per_endpoint: vec![0; n],
                per_endpoint_wait_ns: vec![0.0; n],
                per_endpoint_served: vec![0; n],
                sent_series: vec![0; windows],
                event_series: vec![vec![0; windows]; setup.events.len().min(64)],
                per_second: vec![Histogram::default(); setup.end_ns().div_ceil(SECOND_NS) as usize],
                ..Default::default()
            },
        }
    }

    pub fn into_policy(self) -> P {
        self.policy
    }

    /// Run to the end: arrivals stop at the end of the recorded part, then every request still in
    /// flight is answered. Returns what was measured.
    pub fn run(&mut self) -> Measured {
        {
            let mut ctx = Ctx {
                now_ns: 0,
                servers: &self.servers,
                queue: &mut self.queue,
                network_delay_ns: self.setup.network_delay_ns,
            };
            self.policy.start(&mut ctx);
        }
        self.queue.push(SERVER_WINDOW_NS, EV_WINDOW, 0);
        for (i, ev) in self.setup.events.iter().enumerate() {
            self.queue.push(ev.at_ns, EV_SCENARIO, i as u64);
        }
        let mut next = self.arrivals.next();
        loop {
            let event_first = match (next, self.queue.peek_time()) {
                (Some(a), Some(t)) => t < a.at_ns,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (None, None) => break,
            };
            if event_first {
                let Some((now, kind, value)) = self.queue.pop() else { break };
                self.event(now, kind, value);
            } else if let Some(a) = next {
                self.arrive(a);
                next = self.arrivals.next();
            }
            if next.is_none() && self.outstanding == 0 {
                break;
            }
        }
        std::mem::take(&mut self.m)
    }

    fn event(&mut self, now: u64, kind: u64, value: u64) {
        match kind {
            EV_DONE => self.done(value as u32, now),
            EV_REJECT => self.respond(value as u32, now, true),
            EV_TIMER => {
                let mut ctx = Ctx {
                    now_ns: now,
                    servers: &self.servers,
                    queue: &mut self.queue,
                    network_delay_ns: self.setup.network_delay_ns,
                };
                self.policy.timer(timer_of(value), &mut ctx);
            }
            EV_WINDOW => {
                for s in &mut self.servers {
                    s.close_window(now, SERVER_WINDOW_NS);
                }
                self.queue.push(now + SERVER_WINDOW_NS, EV_WINDOW, 0);
            }
            EV_SCENARIO => self.scenario_event(value as usize, now),
            _ => self.m.anomalies += 1,
        }
    }

    fn arrive(&mut self, a: Arrival) {
        self.m.arrivals += 1;
        self.outstanding += 1;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.requests.push(TrackedRequest::default());
                (self.requests.len() - 1) as u32
            }
        };
        self.requests[slot as usize] = TrackedRequest {
            arrived_ns: a.at_ns,
            sent_ns: a.at_ns,
            draw: a.draw as f32,
            client: a.client,
            endpoint: 0,
            token: 0,
        };
        if self.setup.connection_limit && self.in_flight[a.client as usize] >= self.setup.connections {
            let backlog = &mut self.backlog[a.client as usize];
            backlog.push_back(slot);
            self.m.delayed += 1;
            self.m.max_backlog = self.m.max_backlog.max(backlog.len());
            return;
        }
        self.send(slot, a.at_ns);
    }

    fn send(&mut self, slot: u32, now: u64) {
        let client = self.requests[slot as usize].client;
        self.in_flight[client as usize] += 1;
        if P::CENTRAL {
            self.requests[slot as usize].sent_ns = now;
            match self.idle.first().copied() {
                Some((_, e)) => self.start(slot, e, now),
                None => self.central.push_back(slot),
            }
            return;
        }
        let choice = {
            let mut ctx = Ctx {
                now_ns: now,
                servers: &self.servers,
                queue: &mut self.queue,
                network_delay_ns: self.setup.network_delay_ns,
            };
            self.policy.pick(client, &mut ctx)
        };
        let e = choice.endpoint.min(self.servers.len() as u32 - 1);
        let r = &mut self.requests[slot as usize];
        (r.sent_ns, r.endpoint, r.token) = (now, e, choice.token);
        self.note_sent(e, now);
        let s = &mut self.servers[e as usize];
        match s.status {
            Status::Up if s.has_idle_worker() => self.start(slot, e, now),
            Status::Up => s.queue.push_back(slot),
            Status::Failing | Status::Stopped => self.queue.push(now + FAIL_LATENCY_NS, EV_REJECT, slot as u64),
        }
    }

    fn note_sent(&mut self, e: u32, now: u64) {
        let w = ((now / SERIES_WINDOW_NS) as usize).min(self.m.sent_series.len() - 1);
        self.m.sent_series[w] += 1;
        if now < OPENING_NS {
            self.m.opening_per_endpoint[e as usize] += 1;
        }
        let mut mask = self.event_mask[e as usize];
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            self.m.event_series[i][w] += 1;
            mask &= mask - 1;
        }
    }

    /// Begin serving `slot` on a worker of endpoint `e` (which has one idle).
    fn start(&mut self, slot: u32, e: u32, now: u64) {
        let r = &mut self.requests[slot as usize];
        r.endpoint = e;
        let s = &mut self.servers[e as usize];
        s.add_busy(now, 1);
        if P::CENTRAL {
            self.note_sent(e, now);
            if !self.servers[e as usize].has_idle_worker() {
                self.idle.remove(&(speed_key(&self.servers[e as usize]), e));
            }
        }
        let (r, s) = (&self.requests[slot as usize], &self.servers[e as usize]);
        let factor = Arrival::service_factor(r.draw as f64, self.setup.service, s.spec.jitter);
        let service = (s.mean_service_ns() * factor).max(1.0) as u64;
        if self.recorded(r) {
            self.m.wait_sum_ns += now.saturating_sub(r.sent_ns) as f64;
            self.m.per_endpoint_wait_ns[e as usize] += now.saturating_sub(r.sent_ns) as f64;
            self.m.per_endpoint_served[e as usize] += 1;
            self.m.service_sum_ns += service as f64;
            self.m.served += 1;
        }
        self.queue.push(now + service, EV_DONE, slot as u64);
    }

    fn recorded(&self, r: &TrackedRequest) -> bool {
        r.arrived_ns >= self.setup.warmup_ns && r.arrived_ns < self.setup.end_ns()
    }

    /// A worker of the request's endpoint finished it: serve the next in line, answer the client.
    fn done(&mut self, slot: u32, now: u64) {
        let Some(r) = self.requests.get(slot as usize).copied().filter(TrackedRequest::live) else {
            self.m.anomalies += 1;
            return;
        };
        let e = r.endpoint;
        let s = &mut self.servers[e as usize];
        s.add_busy(now, -1);
        s.served += 1;
        if P::CENTRAL {
            match (s.status, self.central.pop_front()) {
                (Status::Up, Some(next)) => self.start(next, e, now),
                (Status::Up, None) => {
                    self.idle.insert((speed_key(s), e));
                }
                (_, Some(next)) => self.central.push_front(next),
                _ => {}
            }
        } else if let Some(next) = s.queue.pop_front() {
            self.start(next, e, now);
        }
        self.respond(slot, now, false);
    }

    /// The client proxy gets the response (or the failure) for `slot`.
    fn respond(&mut self, slot: u32, now: u64, failed: bool) {
        let Some(r) = self.requests.get(slot as usize).copied().filter(TrackedRequest::live) else {
            self.m.anomalies += 1;
            return;
        };
        self.requests[slot as usize].endpoint = NOT_LIVE;
        self.free.push(slot);
        self.outstanding -= 1;
        self.m.completions += 1;
        self.m.end_ns = now;
        let latency_ns = now - r.sent_ns;
        let s = &mut self.servers[r.endpoint as usize];
        if failed {
            s.errors += 1;
        }
        if let Some(h) = self.m.per_second.get_mut((r.arrived_ns / SECOND_NS) as usize) {
            h.record(latency_ns);
        }
        if self.recorded(&r) {
            self.m.recorded += 1;
            self.m.latency.record(latency_ns);
            self.m.per_endpoint[r.endpoint as usize] += 1;
            self.m.errors += failed as u64;
        }
        let in_flight = &mut self.in_flight[r.client as usize];
        *in_flight = in_flight.saturating_sub(1);
        if !P::CENTRAL {
            let server = &self.servers[r.endpoint as usize];
            let outcome = Outcome { latency_ns, failed, orca: server.orca, rif: server.in_flight() };
            let choice = Choice { endpoint: r.endpoint, token: r.token };
            let mut ctx = Ctx {
                now_ns: now,
                servers: &self.servers,
                queue: &mut self.queue,
                network_delay_ns: self.setup.network_delay_ns,
            };
            self.policy.complete(r.client, choice, &outcome, &mut ctx);
        }
        if self.setup.connection_limit {
            if let Some(next) = self.backlog[r.client as usize].pop_front() {
                self.send(next, now);
            }
        }
    }

    fn scenario_event(&mut self, i: usize, now: u64) {
        let setup = self.setup;
        let Some(ev) = setup.events.get(i) else { return };
        for &e in &ev.endpoints {
            let s = &mut self.servers[e as usize];
            let old_key = speed_key(s);
            let was_idle = P::CENTRAL && self.idle.remove(&(old_key, e));
            match ev.action {
                EventAction::Speed => s.speed = ev.value.unwrap_or(s.speed),
                EventAction::Fail => s.status = Status::Failing,
                EventAction::Stop => s.status = Status::Stopped,
                EventAction::Recover => {
                    s.status = Status::Up;
                    s.speed = s.spec.speed;
                }
            }
            if s.status == Status::Stopped {
                // Connections refused: what waits in its queue fails now.
                let dropped: Vec<u32> = s.queue.drain(..).collect();
                for slot in dropped {
                    self.queue.push(now, EV_REJECT, slot as u64);
                }
            }
            let s = &self.servers[e as usize];
            if P::CENTRAL && s.status == Status::Up && (was_idle || s.has_idle_worker()) {
                self.idle.insert((speed_key(s), e));
                // A recovered endpoint takes work waiting in the central queue.
                while self.servers[e as usize].has_idle_worker() {
                    let Some(next) = self.central.pop_front() else { break };
                    self.start(next, e, now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
