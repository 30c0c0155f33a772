//! One emulated backend, whatever protocol it speaks: k workers behind a FIFO queue (a fair
//! semaphore), sleep-based service times slowed by speed and warm-up, how it answers (normally,
//! failing, shedding), whether its port listens (listening, stopped, absent), and the meters behind
//! /metrics and ORCA. The front ends (http.rs, grpc.rs) only translate an `Answer` into their protocol.

use crate::orca::BackendLoad;
use crate::service_time::{cold_multiplier, service_us};
use crate::spec::{Action, BackendSpec};
use crate::window::{BusyMeter, SlidingWindow};
use bytes::Bytes;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tailweight_math::rng::Rng;
use tokio::sync::{watch, Semaphore};

/// Meters look back one second in ten buckets.
const BUCKET_US: u64 = 100_000;
const BUCKETS: usize = 10;

/// Microseconds since the process started: the clock of every meter.
pub fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// What /metrics reports as `emulator_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Serving = 0,
    Failing = 1,
    Stopped = 2,
    Absent = 3,
    Shedding = 4,
}

/// How a listening backend answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answering {
    /// Queue for a worker and sleep the service time.
    Normally,
    /// An error at once (HTTP 503, gRPC UNAVAILABLE).
    Failing,
    /// A load-shedding refusal at once (HTTP 429, gRPC RESOURCE_EXHAUSTED).
    Shedding,
}

/// Whether the backend's port accepts connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Listening,
    /// Closed by `stop`: connection refused until `recover` or `join`.
    Stopped,
    /// Never listened yet (spec absent=1): connection refused until `join`.
    Absent,
}

/// What server.rs follows: the presence, and how many times the port was closed, so a connection
/// accepted before a stop ends even if a `recover` follows before it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortState {
    pub presence: Presence,
    pub closings: u64,
}

/// How one request was answered; the front end turns it into its protocol's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Served,
    Failed,
    Shed,
}

struct State {
    speed: f64,
    answering: Answering,
    /// Start of the current cold period (process start or the last `join`), on the now_us clock.
    warming_since_us: u64,
    rng: Rng,
    busy: BusyMeter,
    /// Completed successful requests and errors (fail and shed), for the ORCA rps/eps.
    ok: SlidingWindow,
    errors: SlidingWindow,
    requests_total: u64,
    errors_total: u64,
    shed_total: u64,
    connections_total: u64,
    queued: u32,
}

pub struct Backend {
    pub index: usize,
    pub spec: BackendSpec,
    pub address: String,
    /// The response body of a served request (`payload_bytes` bytes).
    pub payload: Bytes,
    workers: Semaphore,
    state: Mutex<State>,
    /// Followed by the accept loop and every connection (server.rs).
    pub port: watch::Sender<PortState>,
    /// Whether the accept loop has a listener now (it follows `port`).
    pub listening: watch::Sender<bool>,
}

/// What /metrics shows for one backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub index: usize,
    pub address: String,
    pub workers: u32,
    pub speed: f64,
    pub cold_multiplier: f64,
    pub mode: Mode,
    pub requests_total: u64,
    pub errors_total: u64,
    pub shed_total: u64,
    pub connections_total: u64,
    pub busy_seconds_total: f64,
    pub utilisation: f64,
    pub inflight: u32,
    pub queued: u32,
}

impl Backend {
    pub fn new(index: usize, spec: BackendSpec, seed: u64) -> Self {
        // Distinct, reproducible jitter stream per backend.
        let rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let presence = if spec.absent { Presence::Absent } else { Presence::Listening };
        Backend {
            index,
            address: format!("127.0.0.1:{}", spec.port),
            payload: Bytes::from(vec![b'x'; spec.payload_bytes]),
            workers: Semaphore::new(spec.workers as usize),
            state: Mutex::new(State {
                speed: spec.speed,
                answering: Answering::Normally,
                warming_since_us: now_us(),
                rng,
                busy: BusyMeter::new(BUCKET_US, BUCKETS),
                ok: SlidingWindow::new(BUCKET_US, BUCKETS),
                errors: SlidingWindow::new(BUCKET_US, BUCKETS),
                requests_total: 0,
                errors_total: 0,
                shed_total: 0,
                connections_total: 0,
                queued: 0,
            }),
            port: watch::channel(PortState { presence, closings: 0 }).0,
            listening: watch::channel(false).0,
            spec,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave these counters inconsistent in a way that matters.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn apply(&self, action: Action) {
        match action {
            Action::Speed(x) => self.state().speed = x,
            Action::Fail => self.state().answering = Answering::Failing,
            Action::Shed => self.state().answering = Answering::Shedding,
            Action::Stop => {
                self.port.send_if_modified(|p| match p.presence {
                    Presence::Listening => {
                        *p = PortState { presence: Presence::Stopped, closings: p.closings + 1 };
                        true
                    }
                    Presence::Stopped | Presence::Absent => false,
                });
            }
            Action::Recover => {
                self.restore_start_settings();
                self.port.send_if_modified(|p| match p.presence {
                    Presence::Stopped => {
                        p.presence = Presence::Listening;
                        true
                    }
                    Presence::Listening | Presence::Absent => false,
                });
            }
            Action::Join => {
                self.restore_start_settings();
                self.state().warming_since_us = now_us();
                self.port.send_if_modified(|p| {
                    let changed = p.presence != Presence::Listening;
                    p.presence = Presence::Listening;
                    changed
                });
            }
        }
    }

    fn restore_start_settings(&self) {
        let mut s = self.state();
        s.speed = self.spec.speed;
        s.answering = Answering::Normally;
    }

    fn mode(&self, answering: Answering) -> Mode {
        match (self.port.borrow().presence, answering) {
            (Presence::Absent, _) => Mode::Absent,
            (Presence::Stopped, _) => Mode::Stopped,
            (Presence::Listening, Answering::Normally) => Mode::Serving,
            (Presence::Listening, Answering::Failing) => Mode::Failing,
            (Presence::Listening, Answering::Shedding) => Mode::Shedding,
        }
    }

    fn cold_multiplier(&self, s: &State, now: u64) -> f64 {
        let serving_s = now.saturating_sub(s.warming_since_us) as f64 / 1e6;
        cold_multiplier(self.spec.cold_factor, self.spec.cold_s, serving_s)
    }

    pub fn connection_accepted(&self) {
        self.state().connections_total += 1;
    }

    pub fn snapshot(&self) -> Snapshot {
        let now = now_us();
        let mut s = self.state();
        Snapshot {
            index: self.index,
            address: self.address.clone(),
            workers: self.spec.workers,
            speed: s.speed,
            cold_multiplier: self.cold_multiplier(&s, now),
            mode: self.mode(s.answering),
            requests_total: s.requests_total,
            errors_total: s.errors_total,
            shed_total: s.shed_total,
            connections_total: s.connections_total,
            busy_seconds_total: s.busy.total_busy_seconds(now),
            utilisation: s.busy.utilisation(now, self.spec.workers),
            inflight: s.busy.busy(),
            queued: s.queued,
        }
    }

    /// The load this backend reports in ORCA right now.
    pub fn load(&self) -> BackendLoad {
        let now = now_us();
        let mut s = self.state();
        BackendLoad {
            utilisation: s.busy.utilisation(now, self.spec.workers),
            rps: s.ok.rate_per_s(now),
            eps: s.errors.rate_per_s(now),
        }
    }

    /// Requests in service and queued here now (what a load stamp reports).
    pub fn requests_in_flight(&self) -> u32 {
        let s = self.state();
        s.busy.busy().saturating_add(s.queued)
    }

    /// The error a request would get now (fail or shed mode), without counting a request: a running
    /// stream checks it before each message.
    pub fn refusal(&self) -> Option<Answer> {
        match self.state().answering {
            Answering::Failing => Some(Answer::Failed),
            Answering::Shedding => Some(Answer::Shed),
            Answering::Normally => None,
        }
    }

    /// One request's work: an error at once when failing or shedding, else queue for a worker and
    /// sleep the service time. Dropping the future (connection closed) leaves the queue or frees
    /// the worker.
    pub async fn serve(&self) -> Answer {
        let answering = {
            let mut s = self.state();
            s.requests_total += 1;
            s.answering
        };
        match answering {
            Answering::Failing => return self.refuse(Answer::Failed),
            Answering::Shedding => return self.refuse(Answer::Shed),
            Answering::Normally => {}
        }
        let waiting = Waiting::new(self);
        // The semaphore is never closed; were it, the request fails like in fail mode.
        let Ok(worker) = self.workers.acquire().await else {
            return self.refuse(Answer::Failed);
        };
        drop(waiting);
        let busy = Busy::new(self);
        tokio::time::sleep(Duration::from_micros(busy.service_us)).await;
        drop(busy);
        drop(worker);
        self.state().ok.add(now_us(), 1.0);
        Answer::Served
    }

    fn refuse(&self, answer: Answer) -> Answer {
        let mut s = self.state();
        s.errors_total += 1;
        if answer == Answer::Shed {
            s.shed_total += 1;
        }
        s.errors.add(now_us(), 1.0);
        answer
    }
}

/// Counts a request in the queue until it gets a worker (or its connection is dropped).
struct Waiting<'a>(&'a Backend);

impl<'a> Waiting<'a> {
    fn new(backend: &'a Backend) -> Self {
        backend.state().queued += 1;
        Waiting(backend)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.queued = s.queued.saturating_sub(1);
    }
}

/// Marks a worker busy from the start of service until the end (or until the connection is dropped).
struct Busy<'a> {
    backend: &'a Backend,
    service_us: u64,
}

impl<'a> Busy<'a> {
    fn new(backend: &'a Backend) -> Self {
        let now = now_us();
        let mut s = backend.state();
        s.busy.start(now);
        let slowdown = s.speed * backend.cold_multiplier(&s, now);
        let service_us = service_us(&mut s.rng, backend.spec.base_ms, slowdown, backend.spec.jitter);
        drop(s);
        Busy { backend, service_us }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.backend.state().busy.finish(now_us());
    }
}

/// Resolves once the port that opened after `opened` closings closes: the presence is no longer
/// Listening, or another stop happened (even if a recover followed before this looked). Never
/// resolves if the sender is gone (it lives as long as the backend).
pub async fn closed(port: &mut watch::Receiver<PortState>, opened: u64) {
    loop {
        let now = *port.borrow_and_update();
        if now.presence != Presence::Listening || now.closings != opened {
            return;
        }
        if port.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_backend;

    fn backend(spec: &str) -> Backend {
        Backend::new(0, parse_backend(spec).unwrap(), 1)
    }

    #[test]
    fn events_change_mode_and_recover_restores_the_start_settings() {
        let b = backend("port=1,workers=2,base_ms=10,speed=1.5");
        assert_eq!(b.snapshot().mode, Mode::Serving);
        b.apply(Action::Speed(5.0));
        assert_eq!(b.snapshot().speed, 5.0);
        b.apply(Action::Fail);
        assert_eq!(b.snapshot().mode, Mode::Failing);
        b.apply(Action::Shed);
        assert_eq!(b.snapshot().mode, Mode::Shedding);
        b.apply(Action::Stop);
        assert_eq!(b.snapshot().mode, Mode::Stopped);
        assert_eq!(*b.port.borrow(), PortState { presence: Presence::Stopped, closings: 1 });
        b.apply(Action::Recover);
        let s = b.snapshot();
        assert_eq!((s.mode, s.speed), (Mode::Serving, 1.5));
        assert_eq!(*b.port.borrow(), PortState { presence: Presence::Listening, closings: 1 });
    }

    #[test]
    fn an_absent_backend_waits_for_join_and_then_starts_cold() {
        let b = backend("port=1,workers=1,base_ms=10,absent=1,cold_factor=4,cold_s=60");
        assert_eq!(b.snapshot().mode, Mode::Absent);
        b.apply(Action::Recover);
        b.apply(Action::Stop);
        assert_eq!(b.snapshot().mode, Mode::Absent, "recover and stop leave an absent backend absent");
        assert_eq!(b.port.borrow().closings, 0);
        b.apply(Action::Fail);
        b.apply(Action::Join);
        let s = b.snapshot();
        assert_eq!(s.mode, Mode::Serving, "join starts with the start settings");
        // Joined a moment ago out of 60 s: nearly the full factor.
        assert!(s.cold_multiplier > 3.9 && s.cold_multiplier <= 4.0, "{}", s.cold_multiplier);
    }

    #[test]
    fn join_of_a_stopped_backend_listens_again() {
        let b = backend("port=1,workers=1,base_ms=10");
        assert_eq!(b.snapshot().cold_multiplier, 1.0);
        b.apply(Action::Stop);
        b.apply(Action::Join);
        assert_eq!(*b.port.borrow(), PortState { presence: Presence::Listening, closings: 1 });
    }

    #[tokio::test(flavor = "current_thread")]
    async fn fail_and_shed_answer_at_once_and_count_as_errors() {
        let b = backend("port=1,workers=1,base_ms=1");
        b.apply(Action::Fail);
        assert_eq!(b.serve().await, Answer::Failed);
        b.apply(Action::Shed);
        assert_eq!(b.serve().await, Answer::Shed);
        assert_eq!(b.serve().await, Answer::Shed);
        let s = b.snapshot();
        assert_eq!((s.requests_total, s.errors_total, s.shed_total), (3, 3, 2));
        assert_eq!((s.inflight, s.queued), (0, 0));
        let load = b.load();
        assert!(load.eps > 0.0 && load.rps == 0.0, "{load:?}");
    }
}
