//! The backend's load report in the two ORCA forms Envoy reads (source/common/orca/orca_parser.cc,
//! called by the router on upstream headers and again on trailers until one carries a report):
//! - HTTP/1.1 responses: `endpoint-load-metrics: TEXT cpu_utilization=.., rps_fractional=.., eps=..`;
//! - gRPC calls, as grpc-go's orca package sends them: `endpoint-load-metrics-bin` = base64 of a
//!   serialized `xds.data.orca.v3.OrcaLoadReport`, in the trailers (or in the headers of a
//!   trailers-only answer).

use base64::Engine;
use hyper::header::HeaderValue;
use prost::Message;

/// Header of the binary form (a gRPC `-bin` metadata key).
pub const BIN_HEADER: &str = "endpoint-load-metrics-bin";

/// What a backend reports: busy worker time / (workers x 1 s), and successes and errors per second
/// over the last second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackendLoad {
    pub utilisation: f64,
    pub rps: f64,
    pub eps: f64,
}

/// The fields of `xds.data.orca.v3.OrcaLoadReport` (cncf/xds, xds/data/orca/v3/orca_load_report.proto)
/// the emulator fills, under their upstream field numbers, so any decoder of the full message reads
/// them. Declared with prost's derive rather than compiled from the upstream file: that file imports
/// buf/validate annotations we would have to vendor as well, for three scalar fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OrcaLoadReport {
    #[prost(double, tag = "1")]
    pub cpu_utilization: f64,
    #[prost(double, tag = "6")]
    pub rps_fractional: f64,
    #[prost(double, tag = "7")]
    pub eps: f64,
}

/// The TEXT form (Envoy's client-side WRR ignores reports without rps_fractional).
pub fn text_header(load: BackendLoad) -> String {
    format!("TEXT cpu_utilization={:.4}, rps_fractional={:.2}, eps={:.2}", load.utilisation, load.rps, load.eps)
}

pub fn report(load: BackendLoad) -> OrcaLoadReport {
    OrcaLoadReport { cpu_utilization: load.utilisation, rps_fractional: load.rps, eps: load.eps }
}

/// The binary form's header value: standard base64 *with* padding. gRPC receivers must accept padded
/// and unpadded values, but Envoy's Base64::decode (what orca_parser.cc calls) rejects a length that
/// is not a multiple of 4, and tonic's binary metadata encoder writes unpadded values, so the value is
/// built here.
pub fn bin_header_value(load: BackendLoad) -> HeaderValue {
    let encoded = base64::engine::general_purpose::STANDARD.encode(report(load).encode_to_vec());
    // Base64 is ASCII: always a valid header value.
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOAD: BackendLoad = BackendLoad { utilisation: 0.42, rps: 38.5, eps: 1.25 };

    #[test]
    fn text_header_is_what_the_filter_and_envoy_parse() {
        let h = text_header(BackendLoad { eps: 0.0, ..LOAD });
        assert_eq!(h, "TEXT cpu_utilization=0.4200, rps_fractional=38.50, eps=0.00");
        let load = tailweight_wire::orca::parse(&h).unwrap();
        assert_eq!(load.cpu_utilization, Some(0.42));
        assert_eq!(load.rps_fractional, Some(38.5));
        assert_eq!(load.eps, Some(0.0));
    }

    #[test]
    fn binary_report_decodes_to_what_was_encoded() {
        let value = bin_header_value(LOAD);
        let text = value.to_str().unwrap();
        assert_eq!(text.len() % 4, 0, "padded: {text}");
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).unwrap();
        assert_eq!(OrcaLoadReport::decode(bytes.as_slice()).unwrap(), report(LOAD));
    }

    #[test]
    fn binary_report_uses_the_upstream_field_numbers() {
        // Wire format without prost: each double is tag byte (field << 3 | 1 = fixed64) + 8 bytes LE.
        let bytes = report(LOAD).encode_to_vec();
        let mut expected = Vec::new();
        for (field, value) in [(1u8, 0.42f64), (6, 38.5), (7, 1.25)] {
            expected.push(field << 3 | 1);
            expected.extend_from_slice(&value.to_le_bytes());
        }
        assert_eq!(bytes, expected);
    }

    #[test]
    fn zero_fields_are_left_out() {
        let idle = report(BackendLoad { utilisation: 0.0, rps: 0.0, eps: 0.0 });
        assert!(idle.encode_to_vec().is_empty());
    }
}
