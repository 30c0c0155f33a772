//! The fuzz targets' bodies. Each takes arbitrary bytes, runs one parser the way the product runs
//! it, hands what parses to the code that consumes it, and checks what must hold (a panic, an
//! overflow or a failed check is a finding). libFuzzer drives them (fuzz/libfuzzer, `make fuzz`),
//! and `cargo test` replays the corpus kept in fuzz/corpus (tests/corpus.rs), no nightly needed.

mod aggregator;
mod check;
mod json;

pub use aggregator::{attest, prometheus, xfcc};
pub use json::json_diff;

use check::one_line;
use tailweight_picker::{
    merge_snapshots, Balancer, Pick, RequestOutcome, ResponseClass, Settings, SnapshotPart as Part,
};
use tailweight_sidecar::{FilterConfig, Slot, StoredView};
use tailweight_weights::{WeightBook, WeightParams};
use tailweight_wire::orca::{self, OrcaLoad};
use tailweight_wire::protocol::{Limits, VERSION};
use tailweight_wire::reply::read::read_reply;
use tailweight_wire::reply::write::write_reply;
use tailweight_wire::reply::ClusterView;
use tailweight_wire::report::read::parse_report;
use tailweight_wire::report::write::write_report;
use tailweight_wire::report::Report;
use tailweight_wire::stamp::{LoadStamp, MAX_STAMP_RIF};
use tailweight_wire::{grpc_health, protobuf};

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target by name (the name is its corpus directory and its libFuzzer binary).
pub const TARGETS: [(&str, Target); 13] = [
    ("report", report),
    ("reply", reply),
    ("filter_config", filter_config),
    ("orca_text", orca_text),
    ("orca_bin", orca_bin),
    ("shared_data", shared_data),
    ("scenario", scenario),
    ("json_diff", json_diff),
    ("stamp", stamp),
    ("xfcc", xfcc),
    ("prometheus", prometheus),
    ("attest", attest),
    ("grpc_health", grpc_health),
];

/// The aggregator's path: parse and validate a report; what passes round-trips through the filter's
/// writer, merges into a weight book (twice, from two principals, with recomputes), and the reply
/// the book renders is one the filter's reader accepts, the typed reply's JSON byte for byte, with
/// finite weights, those that count of mean 1.
pub fn report(data: &[u8]) {
    let limits = Limits::default();
    let report = match parse_report(data, &limits) {
        Ok(r) => r,
        Err(e) => return one_line(e),
    };
    // A parsed report round-trips through the filter's writer (which writes utilisation with 6
    // decimals: the CPU values are compared with that margin).
    let mut again = parse_report(&write_report(&report), &limits).expect("a written report parses again");
    for (a, b) in
        again.clusters.iter_mut().flat_map(|c| &mut c.endpoints).zip(report.clusters.iter().flat_map(|c| &c.endpoints))
    {
        if let (Some(x), Some(y)) = (a.cpu, b.cpu) {
            assert!((x - y).abs() <= 5.000_001e-7, "{x} vs {y}");
            a.cpu = b.cpu;
        }
    }
    assert_eq!(again, report, "a parsed report round-trips");
    let mut book = WeightBook::new(WeightParams::default());
    let names = || report.clusters.iter().map(|c| c.name.as_str());
    for (principal, now) in [("a", 1_000_000), ("b", 1_500_000), ("a", 2_500_000)] {
        if let Err(e) = book.ingest_as(&report, principal, now) {
            return one_line(e);
        }
        book.recompute(now);
    }
    let now = 2_500_000;
    let mut rendered = Vec::new();
    book.reply_plan("a", &report.reporter, names(), now, usize::MAX).render(&mut rendered);
    let reply = read_reply(&rendered, &limits).expect("the filter accepts the aggregator's reply");
    let typed = book.reply_as("a", &report.reporter, names(), now);
    assert_eq!(rendered, write_reply(&typed), "the rendered reply is the typed one");
    assert_eq!(reply.clusters.len(), book.decisions_of(names()).len());
    for cluster in book.decisions_of(names()) {
        let weights: Vec<f64> = cluster.endpoints.iter().filter(|e| e.counted).map(|e| e.weight).collect();
        assert!(cluster.endpoints.iter().all(|e| e.weight.is_finite() && e.weight >= 0.0));
        if !weights.is_empty() {
            let mean = weights.iter().sum::<f64>() / weights.len() as f64;
            assert!((mean - 1.0).abs() < 1e-6, "weights {weights:?}");
        }
    }
}

/// A balancer that knows `views`' clusters and endpoints (as the filter does once it has served
/// requests), so that views apply.
fn balancer_knowing<'a>(views: impl Iterator<Item = &'a ClusterView>, now: u64) -> Balancer {
    let mut b = Balancer::new(Settings::from(&FilterConfig::default()), 7);
    for view in views {
        b.pick(&view.name, now);
        for e in view.endpoints.iter().take(64) {
            let outcome = outcome(Some(&e.address), ResponseClass::Success, None);
            b.complete(&view.name, None, &outcome, now);
        }
    }
    b
}

fn outcome(served: Option<&str>, class: ResponseClass, load: Option<OrcaLoad>) -> RequestOutcome<'_> {
    RequestOutcome { served, attempts: 1, latency_us: 5_000, class, load }
}

/// Steer a few requests of each cluster and complete them.
fn exercise(b: &mut Balancer, clusters: &[String], now: u64) {
    for name in clusters {
        for k in 0..4u64 {
            if let Pick::Steer { header, first_len, epoch } = b.pick(name, now + k) {
                let chosen = header[..first_len].to_string();
                b.release(name, &chosen, epoch);
                b.complete(name, Some(&chosen), &outcome(Some(&chosen), ResponseClass::Success, None), now + k);
            }
        }
    }
    b.tick(now + 10_000_000);
}

/// The filter's path for an aggregator reply (sidecar/src/reporter.rs, worker.rs): read and validate
/// with the filter's own reader (`reply::read`, no serde), store each view as shared data, read it
/// back as every worker does (the same view), apply the views and pick.
pub fn reply(data: &[u8]) {
    let reply = match read_reply(data, &Limits::default()) {
        Ok(r) => r,
        Err(e) => return one_line(e),
    };
    let now = 1_000_000;
    let mut b = balancer_knowing(reply.clusters.iter(), now);
    for view in &reply.clusters {
        let stored = StoredView { as_of_us: now, ttl_ms: reply.ttl_ms, view: view.clone() };
        let shared = StoredView::decode(&stored.encode()).expect("a stored view reads back");
        assert!(shared == stored || shared.encode() == stored.encode(), "a stored view survives");
        b.apply_view(&shared.view, shared.as_of_us, u64::from(shared.ttl_ms) * 1_000);
    }
    let names: Vec<String> = reply.clusters.iter().map(|c| c.name.clone()).collect();
    exercise(&mut b, &names, now);
}

/// The plugin configuration: parse, build the balancer it configures, pick.
pub fn filter_config(data: &[u8]) {
    let config = match FilterConfig::parse(data) {
        Ok(c) => c,
        Err(e) => return one_line(e),
    };
    let mut b = Balancer::new(Settings::from(&config), 1);
    let cluster = config.clusters.first().cloned().unwrap_or_else(|| "c".to_string());
    b.complete(&cluster, None, &outcome(Some("10.0.0.1:80"), ResponseClass::Success, None), 1_000);
    exercise(&mut b, &[cluster], 2_000);
}

/// An ORCA load from a parsed header value, used as the filter uses it: a completion's load.
fn use_load(load: OrcaLoad) {
    for v in [load.cpu_utilization, load.application_utilization, load.rps_fractional, load.eps].into_iter().flatten() {
        assert!(v.is_finite() && v >= 0.0, "{load:?}");
    }
    let mut b = Balancer::new(Settings::from(&FilterConfig::default()), 3);
    b.complete("c", None, &outcome(Some("10.0.0.1:80"), ResponseClass::Success, Some(load)), 1_000);
    exercise(&mut b, &["c".to_string()], 2_000);
}

/// The `endpoint-load-metrics` header (TEXT or JSON).
pub fn orca_text(data: &[u8]) {
    match orca::parse(&String::from_utf8_lossy(data)) {
        Ok(load) => use_load(load),
        Err(e) => one_line(e),
    }
}

/// The `endpoint-load-metrics-bin` trailer (base64 protobuf).
pub fn orca_bin(data: &[u8]) {
    match orca::parse_bin(&String::from_utf8_lossy(data)) {
        Ok(load) => use_load(load),
        Err(e) => one_line(e),
    }
}

/// A gRPC health Check answer's body, as the filter's health checks read it (at most 64 bytes):
/// a status or a one-line reason, never a panic. What reads as a status is exactly one
/// uncompressed message, and the status, framed again on its own, reads back as itself.
pub fn grpc_health(data: &[u8]) {
    let status = match grpc_health::read_check_response(data) {
        Ok(status) => status,
        Err(e) => return one_line(e),
    };
    assert_eq!(data.first(), Some(&0), "uncompressed");
    let announced = data.get(1..5).map(|len| u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize);
    assert_eq!(announced, Some(data.len() - 5), "one message, all of the body");
    let value = match status {
        grpc_health::ServingStatus::Unknown => 0,
        grpc_health::ServingStatus::Serving => 1,
        grpc_health::ServingStatus::NotServing => 2,
        grpc_health::ServingStatus::ServiceUnknown => 3,
        grpc_health::ServingStatus::Other(other) => other,
    };
    let mut message = vec![0x08];
    protobuf::write_varint(&mut message, value);
    let mut again = vec![0];
    again.extend((message.len() as u32).to_be_bytes());
    again.extend(message);
    assert_eq!(grpc_health::read_check_response(&again), Ok(status), "a status round-trips");
}

/// A response's `x-tailweight-load` value, as the client-side filter takes it: parsed, its count
/// capped, written back the same; noted for the endpoint that served it, which the next picks
/// (stamps on) may then prefer.
pub fn stamp(data: &[u8]) {
    let stamp = match LoadStamp::parse(&String::from_utf8_lossy(data)) {
        Ok(stamp) => stamp,
        Err(e) => return one_line(e),
    };
    assert!(stamp.rif <= MAX_STAMP_RIF, "{stamp:?}");
    assert_eq!(LoadStamp::parse(&stamp.header_value()), Ok(stamp), "a stamp round-trips");
    let mut config = FilterConfig::default();
    config.pick.load_stamp_max_age_us = 1_000_000;
    let mut b = Balancer::new(Settings::from(&config), 5);
    let now = 1_000_000;
    for address in ["10.0.0.1:80", "10.0.0.2:80"] {
        b.complete("c", None, &outcome(Some(address), ResponseClass::Success, None), now);
    }
    b.note_stamp("c", "10.0.0.1:80", stamp, now);
    exercise(&mut b, &["c".to_string()], now + 1);
}

/// The filter's shared data: the same bytes read as a sibling's slot (folded into a balancer and
/// merged into a report, as worker.rs does with every sibling's) and as a stored view (applied).
/// What decodes encodes back to the same bytes' meaning.
pub fn shared_data(data: &[u8]) {
    let now = 5_000_000;
    match Slot::decode(data) {
        Ok(slot) => {
            // Equal, or equally encoded where a NaN (not equal to itself) is in it.
            let again = Slot::decode(&slot.encode()).expect("an encoded slot decodes");
            assert!(again == slot || again.encode() == slot.encode(), "a slot survives a round trip");
            fold_slot(&slot, now);
        }
        Err(e) => one_line(e),
    }
    match StoredView::decode(data) {
        Ok(stored) => {
            let again = StoredView::decode(&stored.encode()).expect("an encoded view decodes");
            assert!(again == stored || again.encode() == stored.encode(), "a view survives a round trip");
            let mut b = balancer_knowing(std::iter::once(&stored.view), now);
            b.apply_view(&stored.view, stored.as_of_us, u64::from(stored.ttl_ms) * 1_000);
            exercise(&mut b, std::slice::from_ref(&stored.view.name), now);
        }
        Err(e) => one_line(e),
    }
}

fn fold_slot(slot: &Slot, now: u64) {
    let views: Vec<ClusterView> = slot
        .clusters
        .iter()
        .map(|c| ClusterView { name: c.name.clone(), reporters: None, endpoints: vec![] })
        .collect();
    let mut b = balancer_knowing(views.iter(), now);
    // Four live workers that wrote the same, and one that is gone.
    let gone = Slot { written_us: slot.written_us / 2, clusters: slot.clusters.clone() };
    let mut parts = vec![Part { written_us: slot.written_us, live: true, clusters: &slot.clusters }; 4];
    parts.push(Part { written_us: gone.written_us, live: false, clusters: &gone.clusters });
    b.apply_siblings(&parts, now);
    // Workers' snapshots that would each be a valid report merge into a valid report.
    let as_report =
        |clusters| Report { version: VERSION, reporter: "r".into(), incarnation: 1, interval_ms: 1_000, clusters };
    if as_report(slot.clusters.clone()).validate(&Limits::default()).is_ok() {
        let merged = as_report(merge_snapshots(&parts, now));
        if let Err(e) = merged.validate(&Limits::default()) {
            panic!("valid snapshots merged into an invalid report: {e}");
        }
    }
    let names: Vec<String> = views.into_iter().map(|v| v.name).collect();
    exercise(&mut b, &names, now);
}

/// The simulator's scenario file (YAML).
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match tailweight_sim::scenario::Scenario::parse(text) {
        Ok(s) => assert!(s.backend_count() > 0),
        Err(e) => one_line(e),
    }
}
