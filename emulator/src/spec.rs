//! Command line and admin events, parsed and checked with one-line errors.
//!
//! ```text
//! tailweight-emulator --admin-port 9000 [--seed 1] \
//!     --backend port=18001,workers=2,base_ms=10,speed=1.0,jitter=0.2,payload_bytes=1024,protocol=grpc ...
//! POST /event?backends=0,3&action=speed&value=5
//!     (admin port; action: speed | fail | shed | stop | recover | join)
//! ```

pub const USAGE: &str =
    "usage: tailweight-emulator --admin-port PORT [--seed N] [--ready-file PATH] --backend SPEC [--backend SPEC ...]
  SPEC: port=P,workers=K,base_ms=MS[,speed=X][,jitter=SIGMA][,payload_bytes=N][,protocol=http|grpc]
        [,cold_factor=F][,cold_s=S][,absent=0|1][,load_stamps=0|1]
  Every backend listens on 127.0.0.1:P (HTTP/1.1, or gRPC over cleartext HTTP/2);
  service time = base_ms x speed x cold x LogNormal(mean 1, sigma), where cold goes linearly from
  cold_factor down to 1 over the first cold_s seconds of serving. absent=1: not listening until `join`.
  load_stamps=1 (HTTP only): every response carries x-tailweight-load: 1;rif=N, N = the backend's
  requests in service and queued once it left, as a server-role tailweight sidecar would write it.
  Port 0 (admin or backend) lets the OS pick a free port; --ready-file then tells which: once every
  port is bound and listens (an absent backend's is only bound), PATH is written (atomically) with {\"admin\": P, \"backends\": [P0, P1, ..]}.
  Admin on 127.0.0.1:PORT: GET /metrics (Prometheus text), GET /healthz,
  POST /event?backends=I[,J..]&action=speed&value=X | fail | shed | stop | recover | join";

/// How a backend speaks to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1, any method and path.
    Http,
    /// gRPC over cleartext HTTP/2 (h2c): fgrpc.PingServer/Ping and tailweight.emulator.v1.Streamer/Ticks.
    Grpc,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BackendSpec {
    pub port: u16,
    pub workers: u32,
    pub base_ms: f64,
    pub speed: f64,
    pub jitter: f64,
    pub payload_bytes: usize,
    pub protocol: Protocol,
    /// Service time multiplier when the backend starts serving (>= 1; see service_time::cold_multiplier).
    pub cold_factor: f64,
    /// Seconds the cold multiplier takes to come down to 1.
    pub cold_s: f64,
    /// Not listening until a `join` event.
    pub absent: bool,
    /// Write the load stamp a server-role sidecar would write (`x-tailweight-load`) into every
    /// HTTP response: the harness's stand-in for a sidecar per backend where that many Envoys do
    /// not fit on the machine.
    pub load_stamps: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub admin_port: u16,
    pub seed: u64,
    /// Where to write the bound ports once listening (see USAGE).
    pub ready_file: Option<String>,
    pub backends: Vec<BackendSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// New service time multiplier.
    Speed(f64),
    /// Answer at once with an error: HTTP 503, gRPC UNAVAILABLE.
    Fail,
    /// Load shedding, answer at once: HTTP 429, gRPC RESOURCE_EXHAUSTED.
    Shed,
    /// Close the listener and every connection (gRPC: GOAWAY first): connection refused.
    Stop,
    /// Back to the start settings (speed, answering) and listening again, unless the backend is
    /// absent (it stays absent until `join`).
    Recover,
    /// Start settings, listening, and a new cold period starting now: a new pod.
    Join,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub backends: Vec<usize>,
    pub action: Action,
}

const MAX_BACKENDS: usize = 1_000;
const MAX_PAYLOAD: usize = 16 << 20;

pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Config, String> {
    let mut admin_port = None;
    let mut seed = 1u64;
    let mut ready_file = None;
    let mut backends = Vec::new();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name}: missing value"));
        match flag.as_str() {
            "--admin-port" => admin_port = Some(parse_port("--admin-port", &value("--admin-port")?)?),
            "--seed" => {
                let v = value("--seed")?;
                seed = v.parse().map_err(|_| format!("--seed: expected a non-negative integer, got {v:?}"))?;
            }
            "--ready-file" => ready_file = Some(value("--ready-file")?),
            "--backend" => backends.push(parse_backend(&value("--backend")?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let admin_port = admin_port.ok_or("--admin-port is required")?;
    if backends.is_empty() {
        return Err("at least one --backend is required".into());
    }
    if backends.len() > MAX_BACKENDS {
        return Err(format!("at most {MAX_BACKENDS} backends, got {}", backends.len()));
    }
    // Port 0 asks the OS for a free port: any number of them can be 0.
    let mut ports: Vec<u16> = backends.iter().map(|b| b.port).filter(|p| *p != 0).collect();
    ports.extend((admin_port != 0).then_some(admin_port));
    ports.sort_unstable();
    if let Some(w) = ports.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("port {} is used twice", w[0]));
    }
    Ok(Config { admin_port, seed, ready_file, backends })
}

fn parse_port(what: &str, s: &str) -> Result<u16, String> {
    s.parse::<u16>().map_err(|_| format!("{what}: expected a port in 0..=65535 (0: any free port), got {s:?}"))
}

fn parse_number(what: &str, s: &str, min: f64, max: f64) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= min && x <= max => Ok(x),
        _ => Err(format!("{what}: expected a number in {min}..={max}, got {s:?}")),
    }
}

pub fn parse_backend(spec: &str) -> Result<BackendSpec, String> {
    let mut port = None;
    let mut workers = None;
    let mut base_ms = None;
    let mut speed = 1.0;
    let mut jitter = 0.0;
    let mut payload_bytes = 0usize;
    let mut protocol = Protocol::Http;
    let mut cold_factor = 1.0;
    let mut cold_s = 0.0;
    let mut absent = false;
    let mut load_stamps = false;
    for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) =
            pair.split_once('=').ok_or_else(|| format!("--backend {spec:?}: {pair:?} is not key=value"))?;
        let what = format!("--backend {key}");
        match key {
            "port" => port = Some(parse_port(&what, value)?),
            "workers" => {
                workers = Some(match value.parse::<u32>() {
                    Ok(k) if (1..=10_000).contains(&k) => k,
                    _ => return Err(format!("{what}: expected an integer in 1..=10000, got {value:?}")),
                })
            }
            "base_ms" => base_ms = Some(parse_number(&what, value, 0.0, 600_000.0)?),
            "speed" => speed = parse_number(&what, value, 0.001, 1_000.0)?,
            "jitter" => jitter = parse_number(&what, value, 0.0, 3.0)?,
            "payload_bytes" => {
                payload_bytes = match value.parse::<usize>() {
                    Ok(n) if n <= MAX_PAYLOAD => n,
                    _ => return Err(format!("{what}: expected an integer in 0..={MAX_PAYLOAD}, got {value:?}")),
                }
            }
            "protocol" => {
                protocol = match value {
                    "http" => Protocol::Http,
                    "grpc" => Protocol::Grpc,
                    _ => return Err(format!("{what}: expected http or grpc, got {value:?}")),
                }
            }
            "cold_factor" => cold_factor = parse_number(&what, value, 1.0, 1_000.0)?,
            "cold_s" => cold_s = parse_number(&what, value, 0.0, 86_400.0)?,
            "absent" => absent = parse_flag(&what, value)?,
            "load_stamps" => load_stamps = parse_flag(&what, value)?,
            _ => {
                return Err(format!(
                    "--backend {spec:?}: unknown key {key:?} (known: port, workers, base_ms, speed, jitter, \
                     payload_bytes, protocol, cold_factor, cold_s, absent, load_stamps)"
                ))
            }
        }
    }
    if load_stamps && protocol == Protocol::Grpc {
        return Err(format!("--backend {spec:?}: load_stamps=1 is for protocol=http only"));
    }
    let missing = |k: &str| format!("--backend {spec:?}: {k} is required");
    Ok(BackendSpec {
        port: port.ok_or_else(|| missing("port"))?,
        workers: workers.ok_or_else(|| missing("workers"))?,
        base_ms: base_ms.ok_or_else(|| missing("base_ms"))?,
        speed,
        jitter,
        payload_bytes,
        protocol,
        cold_factor,
        cold_s,
        absent,
        load_stamps,
    })
}

fn parse_flag(what: &str, value: &str) -> Result<bool, String> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("{what}: expected 0 or 1, got {value:?}")),
    }
}

/// Parses the query of `POST /event` against `n` backends (form-encoded: `backends=2%2C5` is `2,5`).
pub fn parse_event(query: &str, n: usize) -> Result<Event, String> {
    let mut backends = None;
    let mut action = None;
    let mut value = None;
    for (key, v) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "backends" => {
                let list: Result<Vec<usize>, String> = v
                    .split(',')
                    .map(|i| match i.trim().parse::<usize>() {
                        Ok(i) if i < n => Ok(i),
                        _ => Err(format!("backends: expected indices in 0..{n}, got {i:?}")),
                    })
                    .collect();
                backends = Some(list?);
            }
            "action" => action = Some(v.into_owned()),
            "value" => value = Some(v.into_owned()),
            _ => return Err(format!("unknown parameter {key:?} (known: backends, action, value)")),
        }
    }
    let backends = backends.ok_or("backends is required")?;
    let action = match action.as_deref() {
        Some("speed") => {
            let v = value.ok_or("action=speed needs value")?;
            Action::Speed(parse_number("value", &v, 0.001, 1_000.0)?)
        }
        Some(other) if value.is_some() => return Err(format!("action={other} takes no value")),
        Some("fail") => Action::Fail,
        Some("shed") => Action::Shed,
        Some("stop") => Action::Stop,
        Some("recover") => Action::Recover,
        Some("join") => Action::Join,
        Some(other) => return Err(format!("action: expected speed, fail, shed, stop, recover or join, got {other:?}")),
        None => return Err("action is required".into()),
    };
    Ok(Event { backends, action })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn full_command_line() {
        let c = parse_args(args(
            "--admin-port 9000 --seed 7 --backend port=18001,workers=2,base_ms=10,speed=1.618,jitter=0.2,payload_bytes=1024 \
             --backend port=18002,workers=1,base_ms=5",
        ))
        .unwrap();
        assert_eq!(c.admin_port, 9000);
        assert_eq!(c.seed, 7);
        assert_eq!(
            c.backends[0],
            BackendSpec {
                port: 18001,
                workers: 2,
                base_ms: 10.0,
                speed: 1.618,
                jitter: 0.2,
                payload_bytes: 1024,
                protocol: Protocol::Http,
                cold_factor: 1.0,
                cold_s: 0.0,
                absent: false,
                load_stamps: false,
            }
        );
        assert_eq!(
            c.backends[1],
            BackendSpec {
                port: 18002,
                workers: 1,
                base_ms: 5.0,
                speed: 1.0,
                jitter: 0.0,
                payload_bytes: 0,
                protocol: Protocol::Http,
                cold_factor: 1.0,
                cold_s: 0.0,
                absent: false,
                load_stamps: false,
            }
        );
        assert_eq!(c.ready_file, None);
    }

    #[test]
    fn grpc_and_lifecycle_keys() {
        let b = parse_backend("port=0,workers=1,base_ms=5,protocol=grpc,cold_factor=4,cold_s=30,absent=1").unwrap();
        assert_eq!((b.protocol, b.cold_factor, b.cold_s, b.absent), (Protocol::Grpc, 4.0, 30.0, true));
        let b = parse_backend("port=0,workers=1,base_ms=5,protocol=http,absent=0").unwrap();
        assert_eq!((b.protocol, b.absent), (Protocol::Http, false));
        let b = parse_backend("port=0,workers=1,base_ms=5,load_stamps=1").unwrap();
        assert!(b.load_stamps);
    }

    #[test]
    fn port_zero_may_repeat_and_the_ready_file_is_kept() {
        let c = parse_args(args(
            "--admin-port 0 --ready-file /tmp/r.json --backend port=0,workers=1,base_ms=1 --backend port=0,workers=1,base_ms=1",
        ))
        .unwrap();
        assert_eq!((c.admin_port, c.backends[0].port, c.backends[1].port), (0, 0, 0));
        assert_eq!(c.ready_file.as_deref(), Some("/tmp/r.json"));
    }

    #[test]
    fn bad_command_lines_say_why() {
        for (line, needle) in [
            ("", "--admin-port is required"),
            ("--admin-port 9000", "at least one --backend"),
            ("--admin-port x --backend port=1,workers=1,base_ms=1", "--admin-port: expected a port"),
            ("--admin-port 9000 --backend port=9000,workers=1,base_ms=1", "port 9000 is used twice"),
            ("--admin-port 9000 --backend port=1,workers=0,base_ms=1", "--backend workers: expected an integer"),
            ("--admin-port 9000 --backend port=1,workers=1", "base_ms is required"),
            ("--admin-port 9000 --backend port=1,workers=1,base_ms=-1", "--backend base_ms: expected a number"),
            ("--admin-port 9000 --backend port=1,workers=1,base_ms=1,speed=0", "--backend speed"),
            ("--admin-port 9000 --backend port=1,workers=1,base_ms=1,jiter=1", "unknown key \"jiter\""),
            ("--admin-port 9000 --backend port", "is not key=value"),
            (
                "--admin-port 9000 --backend port=1,workers=1,base_ms=1,protocol=h2",
                "--backend protocol: expected http or grpc",
            ),
            (
                "--admin-port 9000 --backend port=1,workers=1,base_ms=1,cold_factor=0.5",
                "--backend cold_factor: expected",
            ),
            ("--admin-port 9000 --backend port=1,workers=1,base_ms=1,cold_s=-1", "--backend cold_s: expected"),
            ("--admin-port 9000 --backend port=1,workers=1,base_ms=1,absent=yes", "--backend absent: expected 0 or 1"),
            (
                "--admin-port 9000 --backend port=1,workers=1,base_ms=1,load_stamps=2",
                "--backend load_stamps: expected 0 or 1",
            ),
            (
                "--admin-port 9000 --backend port=1,workers=1,base_ms=1,protocol=grpc,load_stamps=1",
                "load_stamps=1 is for protocol=http only",
            ),
            ("--admin-port 9000 --seed x", "--seed: expected"),
            ("--admin-port", "--admin-port: missing value"),
            ("--verbose", "unknown argument"),
        ] {
            let err = parse_args(args(line)).unwrap_err();
            assert!(err.contains(needle), "{line:?} -> {err}");
        }
    }

    #[test]
    fn events() {
        assert_eq!(
            parse_event("backends=0,3&action=speed&value=5", 4),
            Ok(Event { backends: vec![0, 3], action: Action::Speed(5.0) })
        );
        assert_eq!(parse_event("action=fail&backends=1", 2), Ok(Event { backends: vec![1], action: Action::Fail }));
        assert_eq!(parse_event("backends=1&action=stop", 2).unwrap().action, Action::Stop);
        assert_eq!(parse_event("backends=1&action=recover", 2).unwrap().action, Action::Recover);
        assert_eq!(parse_event("backends=1&action=shed", 2).unwrap().action, Action::Shed);
        assert_eq!(
            parse_event("backends=0,1&action=join", 2),
            Ok(Event { backends: vec![0, 1], action: Action::Join })
        );
        // As an HTTP client sends a list: the comma percent-encoded.
        assert_eq!(
            parse_event("backends=0%2C2&action=fail", 3),
            Ok(Event { backends: vec![0, 2], action: Action::Fail })
        );
    }

    #[test]
    fn bad_events_say_why() {
        for (query, needle) in [
            ("action=fail", "backends is required"),
            ("backends=2&action=fail", "indices in 0..2"),
            ("backends=x&action=fail", "indices in 0..2"),
            ("backends=0", "action is required"),
            ("backends=0&action=explode", "expected speed, fail, shed, stop, recover or join"),
            ("backends=0&action=join&value=1", "takes no value"),
            ("backends=0&action=speed", "needs value"),
            ("backends=0&action=speed&value=-2", "value: expected a number"),
            ("backends=0&action=speed&value=NaN", "value: expected a number"),
            ("backends=0&action=fail&value=1", "takes no value"),
            ("backends=0&action=fail&when=now", "unknown parameter"),
        ] {
            let err = parse_event(query, 2).unwrap_err();
            assert!(err.contains(needle), "{query:?} -> {err}");
        }
    }
}
