//! The filter's report writer: a `Report` as JSON, by hand with `json`'s writers instead of serde,
//! for the size of the sidecar's module (see `json`). The aggregator reads it with `report::read`;
//! a round-trip test holds the two to each other.

use super::Report;
use crate::json;

/// The report as JSON, fields in `Report`'s order, utilisation with 6 decimals.
pub fn write_report(report: &Report) -> Vec<u8> {
    let endpoints: usize = report.clusters.iter().map(|c| c.endpoints.len()).sum();
    let mut out = Vec::with_capacity(128 + report.clusters.len() * 64 + endpoints * 200);
    json::write_u64_member(&mut out, b"{\"version\":", u64::from(report.version));
    json::write_str_member(&mut out, b",\"reporter\":", &report.reporter);
    json::write_u64_member(&mut out, b",\"incarnation\":", report.incarnation);
    json::write_u64_member(&mut out, b",\"interval_ms\":", u64::from(report.interval_ms));
    out.extend_from_slice(b",\"clusters\":[");
    for (ci, c) in report.clusters.iter().enumerate() {
        if ci > 0 {
            out.push(b',');
        }
        json::write_str_member(&mut out, b"{\"name\":", &c.name);
        out.extend_from_slice(b",\"endpoints\":[");
        for (ei, e) in c.endpoints.iter().enumerate() {
            if ei > 0 {
                out.push(b',');
            }
            json::write_str_member(&mut out, b"{\"address\":", &e.address);
            for (key, n) in [
                (&b",\"requests\":"[..], e.requests),
                (b",\"errors\":", e.errors),
                (b",\"latency_sum_us\":", e.latency_sum_us),
                (b",\"inflight\":", u64::from(e.inflight)),
                (b",\"latency_ewma_us\":", e.latency_ewma_us),
                (b",\"latency_age_ms\":", e.latency_age_ms),
            ] {
                json::write_u64_member(&mut out, key, n);
            }
            if let Some(cpu) = e.cpu {
                out.extend_from_slice(b",\"cpu\":");
                json::write_decimal6(&mut out, cpu);
            }
            for (key, n) in [
                (&b",\"cpu_age_ms\":"[..], e.cpu_age_ms),
                (b",\"seen_age_ms\":", e.seen_age_ms),
                (b",\"counted_ms\":", e.counted_ms),
            ] {
                if let Some(n) = n {
                    json::write_u64_member(&mut out, key, n);
                }
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}");
    out
}
