//! One emulated backend: k workers behind a FIFO queue (a fair semaphore), sleep-based service
//! times, a mode (serving, failing with 503, stopped), and the meters behind /metrics and ORCA.

use crate::service_time::service_us;
use crate::spec::{Action, BackendSpec};
use crate::window::{BusyMeter, SlidingWindow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tailweight_core::rng::Rng;
use tokio::sync::{watch, Semaphore};

/// Meters look back one second in ten buckets.
const BUCKET_US: u64 = 100_000;
const BUCKETS: usize = 10;
/// Request bodies are read (so keep-alive works) up to this size and dropped.
const MAX_REQUEST_BODY: usize = 1 << 20;

/// Microseconds since the process started: the clock of every meter.
pub fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Serving = 0,
    Failing = 1,
    Stopped = 2,
}

struct State {
    speed: f64,
    failing: bool,
    rng: Rng,
    busy: BusyMeter,
    /// Completed successful requests and 503s, for the ORCA rps/eps.
    ok: SlidingWindow,
    errors: SlidingWindow,
    requests_total: u64,
    errors_total: u64,
    queued: u32,
}

pub struct Backend {
    pub index: usize,
    pub spec: BackendSpec,
    pub address: String,
    workers: Semaphore,
    state: Mutex<State>,
    /// false = stopped: the listener and every connection close (see server.rs).
    pub running: watch::Sender<bool>,
    payload: Bytes,
}

/// What /metrics shows for one backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub index: usize,
    pub address: String,
    pub workers: u32,
    pub speed: f64,
    pub mode: Mode,
    pub requests_total: u64,
    pub errors_total: u64,
    pub busy_seconds_total: f64,
    pub utilisation: f64,
    pub inflight: u32,
    pub queued: u32,
}

/// The ORCA report Envoy's client-side WRR reads (it ignores reports without rps_fractional).
pub fn orca_header(utilisation: f64, rps: f64, eps: f64) -> String {
    format!("TEXT cpu_utilization={utilisation:.4}, rps_fractional={rps:.2}, eps={eps:.2}")
}

impl Backend {
    pub fn new(index: usize, spec: BackendSpec, seed: u64) -> Self {
        // Distinct, reproducible jitter stream per backend.
        let rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Backend {
            index,
            address: format!("127.0.0.1:{}", spec.port),
            workers: Semaphore::new(spec.workers as usize),
            state: Mutex::new(State {
                speed: spec.speed,
                failing: false,
                rng,
                busy: BusyMeter::new(BUCKET_US, BUCKETS),
                ok: SlidingWindow::new(BUCKET_US, BUCKETS),
                errors: SlidingWindow::new(BUCKET_US, BUCKETS),
                requests_total: 0,
                errors_total: 0,
                queued: 0,
            }),
            running: watch::channel(true).0,
            payload: Bytes::from(vec![b'x'; spec.payload_bytes]),
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
            Action::Fail => self.state().failing = true,
            Action::Stop => {
                self.running.send_replace(false);
            }
            Action::Recover => {
                {
                    let mut s = self.state();
                    s.speed = self.spec.speed;
                    s.failing = false;
                }
                self.running.send_replace(true);
            }
        }
    }

    pub fn mode(&self, failing: bool) -> Mode {
        if !*self.running.borrow() {
            Mode::Stopped
        } else if failing {
            Mode::Failing
        } else {
            Mode::Serving
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let now = now_us();
        let mut s = self.state();
        let failing = s.failing;
        Snapshot {
            index: self.index,
            address: self.address.clone(),
            workers: self.spec.workers,
            speed: s.speed,
            mode: self.mode(failing),
            requests_total: s.requests_total,
            errors_total: s.errors_total,
            busy_seconds_total: s.busy.total_busy_seconds(now),
            utilisation: s.busy.utilisation(now, self.spec.workers),
            inflight: s.busy.busy(),
            queued: s.queued,
        }
    }

    /// Serves one request: 503 at once when failing, else queue for a worker and sleep the service time.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        // Read (and drop) the body so the connection can be reused; a broken body changes nothing.
        let _ = Limited::new(request.into_body(), MAX_REQUEST_BODY).collect().await;
        let failing = {
            let mut s = self.state();
            s.requests_total += 1;
            s.failing
        };
        if failing {
            let mut s = self.state();
            s.errors_total += 1;
            s.errors.add(now_us(), 1.0);
            drop(s);
            return Ok(self.response(StatusCode::SERVICE_UNAVAILABLE, Bytes::new()));
        }
        let waiting = Waiting::new(&self);
        let Ok(worker) = self.workers.acquire().await else {
            return Ok(self.response(StatusCode::SERVICE_UNAVAILABLE, Bytes::new()));
        };
        drop(waiting);
        let busy = Busy::new(&self);
        tokio::time::sleep(Duration::from_micros(busy.service_us)).await;
        drop(busy);
        drop(worker);
        self.state().ok.add(now_us(), 1.0);
        Ok(self.response(StatusCode::OK, self.payload.clone()))
    }

    fn response(&self, status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
        let now = now_us();
        let orca = {
            let mut s = self.state();
            let utilisation = s.busy.utilisation(now, self.spec.workers);
            let (rps, eps) = (s.ok.rate_per_s(now), s.errors.rate_per_s(now));
            orca_header(utilisation, rps, eps)
        };
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert("content-type", hyper::header::HeaderValue::from_static("text/plain"));
        // Both values are ASCII we formatted ourselves; a failure would only drop the header.
        if let Ok(v) = self.address.parse() {
            headers.insert("x-served-by", v);
        }
        if let Ok(v) = orca.parse() {
            headers.insert(tailweight_core::orca::HEADER, v);
        }
        response
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
        let mut s = backend.state();
        s.busy.start(now_us());
        let (speed, jitter) = (s.speed, backend.spec.jitter);
        let service_us = service_us(&mut s.rng, backend.spec.base_ms, speed, jitter);
        drop(s);
        Busy { backend, service_us }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.backend.state().busy.finish(now_us());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orca_header_is_what_core_and_envoy_parse() {
        let h = orca_header(0.42, 38.5, 0.0);
        assert_eq!(h, "TEXT cpu_utilization=0.4200, rps_fractional=38.50, eps=0.00");
        let load = tailweight_core::orca::parse(&h).unwrap();
        assert_eq!(load.cpu_utilization, Some(0.42));
        assert_eq!(load.rps_fractional, Some(38.5));
        assert_eq!(load.eps, Some(0.0));
    }

    #[test]
    fn events_change_mode_and_recover_restores_the_start_settings() {
        let spec = BackendSpec { port: 1, workers: 2, base_ms: 10.0, speed: 1.5, jitter: 0.0, payload_bytes: 0 };
        let b = Backend::new(0, spec, 1);
        assert_eq!(b.snapshot().mode, Mode::Serving);
        b.apply(Action::Speed(5.0));
        assert_eq!(b.snapshot().speed, 5.0);
        b.apply(Action::Fail);
        assert_eq!(b.snapshot().mode, Mode::Failing);
        b.apply(Action::Stop);
        assert_eq!(b.snapshot().mode, Mode::Stopped);
        b.apply(Action::Recover);
        let s = b.snapshot();
        assert_eq!((s.mode, s.speed), (Mode::Serving, 1.5));
    }
}
