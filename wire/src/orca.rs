//! ORCA load reports in the two forms Envoy's client-side WRR reads:
//! - the `endpoint-load-metrics` response header of HTTP backends: `TEXT cpu_utilization=0.3,
//!   rps_fractional=10, eps=0` or `JSON {"cpu_utilization": 0.3, ...}`;
//! - `endpoint-load-metrics-bin`, what gRPC servers send in their trailers (grpc-go's orca package):
//!   standard base64 of a serialized `xds.data.orca.v3.OrcaLoadReport`.
//!
//! Unknown keys and fields are ignored; bad values reject the report.

use crate::protobuf::{self, FieldValue, ProtobufError};

pub const HEADER: &str = "endpoint-load-metrics";
pub const BIN_HEADER: &str = "endpoint-load-metrics-bin";

/// Upper bound for utilisation values: ORCA allows values above 1 (several CPUs), not absurd ones.
const MAX_UTILIZATION: f64 = 1_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OrcaLoad {
    pub cpu_utilization: Option<f64>,
    pub application_utilization: Option<f64>,
    pub rps_fractional: Option<f64>,
    pub eps: Option<f64>,
}

impl OrcaLoad {
    /// The utilisation to use for capacity: application utilisation when given, else CPU
    /// (the preference Envoy's client-side WRR applies).
    pub fn utilization(&self) -> Option<f64> {
        self.application_utilization.filter(|u| *u > 0.0).or(self.cpu_utilization)
    }
}

/// Why a load report was not used; displays as one line starting with the header's name.
#[derive(Debug, Clone, PartialEq)]
pub enum OrcaError {
    /// Neither `TEXT ...` nor `JSON ...` (the start of the header, at most 40 characters).
    UnknownFormat(String),
    /// A TEXT entry without `=` (at most 40 characters of it).
    NotKeyValue(String),
    /// A TEXT value that does not parse as a number (its key).
    NotANumber(String),
    /// The JSON parser's reason.
    BadJson(String),
    NotAnObject,
    /// A known key with a negative, non-finite or absurd value.
    OutOfRange {
        key: String,
        value: f64,
    },
    /// The binary form: not base64, cut short, a varint over 10 bytes, an unknown wire type.
    NotBase64,
    Truncated,
    LongVarint,
    WireType {
        field: u64,
        wire_type: u64,
    },
}

impl std::fmt::Display for OrcaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrcaError::UnknownFormat(start) => write!(f, "{HEADER}: expected a TEXT or JSON report, got {start:?}"),
            OrcaError::NotKeyValue(pair) => write!(f, "{HEADER}: {pair:?} is not key=value"),
            OrcaError::NotANumber(key) => write!(f, "{HEADER}: {key} is not a number"),
            OrcaError::BadJson(reason) => write!(f, "{HEADER}: bad JSON: {reason}"),
            OrcaError::NotAnObject => write!(f, "{HEADER}: JSON report is not an object"),
            OrcaError::OutOfRange { key, value } => write!(f, "{HEADER}: {key}={value} is out of range"),
            OrcaError::NotBase64 => write!(f, "{BIN_HEADER}: not base64"),
            OrcaError::Truncated => write!(f, "{BIN_HEADER}: the report is cut short"),
            OrcaError::LongVarint => write!(f, "{BIN_HEADER}: a varint longer than 10 bytes"),
            OrcaError::WireType { field, wire_type } => {
                write!(f, "{BIN_HEADER}: field {field} has wire type {wire_type}, not one of 0, 1, 2, 5")
            }
        }
    }
}

impl std::error::Error for OrcaError {}

impl From<ProtobufError> for OrcaError {
    fn from(e: ProtobufError) -> Self {
        match e {
            ProtobufError::Truncated => OrcaError::Truncated,
            ProtobufError::LongVarint => OrcaError::LongVarint,
            ProtobufError::WireType { field, wire_type } => OrcaError::WireType { field, wire_type },
        }
    }
}

/// A report in its TEXT or JSON form. Whitespace is HTTP's (ASCII): a header value has no other.
pub fn parse(header: &str) -> Result<OrcaLoad, OrcaError> {
    let header = header.trim_ascii();
    let (format, body) = header.split_once(|c: char| c.is_ascii_whitespace()).unwrap_or((header, ""));
    match format {
        "TEXT" => parse_text(body),
        "JSON" => parse_json(body),
        _ => Err(OrcaError::UnknownFormat(crate::json::clip(header, 40).to_string())),
    }
}

fn parse_text(body: &str) -> Result<OrcaLoad, OrcaError> {
    let mut load = OrcaLoad::default();
    for pair in split_at_ascii(body, b',').map(str::trim_ascii).filter(|p| !p.is_empty()) {
        let (key, value) = split_once_ascii(pair, b'=')
            .ok_or_else(|| OrcaError::NotKeyValue(crate::json::clip(pair, 40).to_string()))?;
        let key = key.trim_ascii();
        // The key goes into a one-line error: escaped (a newline stays visible) and cut short.
        let not_a_number = || OrcaError::NotANumber(crate::json::escaped(key, 40));
        let value = crate::json::number(value.trim_ascii()).ok_or_else(not_a_number)?;
        set(&mut load, key, value)?;
    }
    Ok(load)
}

/// `text.split_once(separator)` for an ASCII byte, by a plain byte scan: a report is a few dozen
/// bytes, too short for `memchr`'s set-up to pay off. An ASCII byte is a character of its own, so
/// both sides are whole UTF-8 (`get`: no panic path, whose formatting would add kilobytes to the
/// filter).
fn split_once_ascii(text: &str, separator: u8) -> Option<(&str, &str)> {
    debug_assert!(separator.is_ascii());
    let at = text.bytes().position(|b| b == separator)?;
    Some((text.get(..at)?, text.get(at + 1..)?))
}

/// The parts of `text` between the ASCII byte `separator`s, as `str::split` (`split_once_ascii`).
fn split_at_ascii(text: &str, separator: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let part = rest?;
        match split_once_ascii(part, separator) {
            Some((head, tail)) => {
                rest = Some(tail);
                Some(head)
            }
            None => {
                rest = None;
                Some(part)
            }
        }
    })
}

fn parse_json(body: &str) -> Result<OrcaLoad, OrcaError> {
    let value = crate::json::parse(body).map_err(|e| OrcaError::BadJson(e.to_string()))?;
    let crate::json::Value::Object(members) = value else {
        return Err(OrcaError::NotAnObject);
    };
    let mut load = OrcaLoad::default();
    for (key, value) in &members {
        if let Some(number) = value.as_f64() {
            set(&mut load, key, number)?;
        }
    }
    Ok(load)
}

/// The binary form: base64 (padded or not), then the protobuf fields we use. Hand-written rather than
/// with a base64 and a protobuf crate: four `double` fields are all we read, and every sidecar pays
/// for the filter's code size at start-up (V8 compiles the whole module before the listener is ready).
pub fn parse_bin(value: &str) -> Result<OrcaLoad, OrcaError> {
    let bytes = decode_base64(value.trim()).ok_or(OrcaError::NotBase64)?;
    let mut load = OrcaLoad::default();
    for field in protobuf::fields(&bytes) {
        let (field, value) = field?;
        let name = match field {
            1 => "cpu_utilization",
            6 => "rps_fractional",
            7 => "eps",
            9 => "application_utilization",
            _ => continue,
        };
        if let FieldValue::Fixed64(raw) = value {
            set(&mut load, name, f64::from_le_bytes(raw))?;
        }
    }
    Ok(load)
}

/// Standard base64 (RFC 4648 alphabet), with or without `=` padding; None on anything else.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // A lone sixth character cannot end a valid encoding.
    (bits < 6).then_some(out)
}

fn set(load: &mut OrcaLoad, key: &str, value: f64) -> Result<(), OrcaError> {
    let slot = match key {
        "cpu_utilization" => &mut load.cpu_utilization,
        "application_utilization" => &mut load.application_utilization,
        "rps_fractional" => &mut load.rps_fractional,
        "eps" => &mut load.eps,
        _ => return Ok(()),
    };
    let utilisation = matches!(key, "cpu_utilization" | "application_utilization");
    let valid = value.is_finite() && value >= 0.0 && (!utilisation || value <= MAX_UTILIZATION);
    if !valid {
        return Err(OrcaError::OutOfRange { key: key.to_string(), value });
    }
    *slot = Some(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_report_as_envoy_cswrr_reads_it() {
        let l = parse("TEXT cpu_utilization=0.9, rps_fractional=100, eps=0").unwrap();
        assert_eq!(l.cpu_utilization, Some(0.9));
        assert_eq!(l.rps_fractional, Some(100.0));
        assert_eq!(l.eps, Some(0.0));
        assert_eq!(l.utilization(), Some(0.9));
    }

    #[test]
    fn json_report() {
        let l = parse(r#"JSON {"cpu_utilization": 0.25, "application_utilization": 0.5, "named_metrics": {"x": 1}}"#)
            .unwrap();
        assert_eq!(l.cpu_utilization, Some(0.25));
        assert_eq!(l.utilization(), Some(0.5), "application utilisation wins when set");
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let l = parse("TEXT mem_utilization=0.5,named_metrics.foo=3,cpu_utilization=0.1").unwrap();
        assert_eq!(l.cpu_utilization, Some(0.1));
    }

    #[test]
    fn bad_reports_are_rejected_with_a_reason() {
        for (input, needle) in [
            ("cpu_utilization=0.1", "TEXT or JSON"),
            ("TEXT cpu_utilization", "key=value"),
            ("TEXT cpu_utilization=abc", "not a number"),
            ("TEXT cpu_utilization=-1", "out of range"),
            ("TEXT cpu_utilization=NaN", "cpu_utilization is not a number"),
            ("TEXT cpu_utilization=inf", "cpu_utilization is not a number"),
            ("TEXT cpu_utilization=1e9", "out of range"),
            ("JSON [1,2]", "not an object"),
            ("JSON {", "bad JSON"),
        ] {
            let err = parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?} -> {err}");
        }
    }

    #[test]
    fn errors_keep_what_was_wrong() {
        assert_eq!(
            parse("TEXT cpu_utilization=-1"),
            Err(OrcaError::OutOfRange { key: "cpu_utilization".into(), value: -1.0 })
        );
        assert_eq!(parse("TEXT eps=x").unwrap_err().to_string(), "endpoint-load-metrics: eps is not a number");
        // Found by fuzzing: a key with a newline made a two-line error.
        assert_eq!(parse("TEXT a\nb=x").unwrap_err().to_string(), "endpoint-load-metrics: a\\nb is not a number");
        assert_eq!(parse("BIN abc"), Err(OrcaError::UnknownFormat("BIN abc".into())));
    }

    #[test]
    fn split_at_ascii_is_str_split() {
        for text in ["", ",", "a", "a,b", ",a,,b,", "ü,é=ß,,"] {
            let ours: Vec<&str> = split_at_ascii(text, b',').collect();
            let std: Vec<&str> = text.split(',').collect();
            assert_eq!(ours, std, "{text:?}");
        }
    }

    #[test]
    fn whitespace_is_http_whitespace() {
        let l = parse(" \tTEXT\tcpu_utilization = 0.5 ,\teps=\t2\r\n").unwrap();
        assert_eq!((l.cpu_utilization, l.eps), (Some(0.5), Some(2.0)));
        // A no-break space is not HTTP whitespace: part of the value, which is then no number.
        assert_eq!(parse("TEXT eps=\u{a0}2"), Err(OrcaError::NotANumber("eps".into())));
        assert!(matches!(parse("TEXT\u{a0}eps=2"), Err(OrcaError::UnknownFormat(_))));
    }

    #[test]
    fn empty_text_report_is_empty() {
        assert_eq!(parse("TEXT "), Ok(OrcaLoad::default()));
    }

    /// The protobuf encoding of an OrcaLoadReport with cpu 0.5 (field 1), rps_fractional 120
    /// (field 6), eps 2 (field 7), a mem_utilization (2) and a named_metrics map entry (8) to skip.
    fn orca_bytes() -> Vec<u8> {
        let mut b = vec![];
        for (field, value) in [(1u8, 0.5f64), (2, 0.25), (6, 120.0), (7, 2.0)] {
            b.push(field << 3 | 1);
            b.extend_from_slice(&value.to_le_bytes());
        }
        b.extend_from_slice(&[8 << 3 | 2, 5, 10, 1, b'x', 17, 0]);
        b.extend_from_slice(&[3 << 3, 0x96, 0x01]); // rps (varint 150), deprecated
        b
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
            }
        }
        out
    }

    #[test]
    fn binary_report_as_grpc_servers_send_it() {
        let text = base64(&orca_bytes());
        let l = parse_bin(&text).unwrap();
        assert_eq!((l.cpu_utilization, l.rps_fractional, l.eps), (Some(0.5), Some(120.0), Some(2.0)));
        assert_eq!(l.utilization(), Some(0.5));
        assert_eq!(parse_bin(text.trim_end_matches('=')), Ok(l), "unpadded too");
        assert_eq!(parse_bin(""), Ok(OrcaLoad::default()));
    }

    #[test]
    fn bad_binary_reports_are_rejected_with_a_reason() {
        let good = orca_bytes();
        let mut out_of_range = good.clone();
        out_of_range[1..9].copy_from_slice(&f64::NAN.to_le_bytes());
        for (input, needle) in [
            ("not base64!".to_string(), "not base64"),
            ("QQ=".to_string() + "=x", "not base64"),
            (base64(&good[..good.len() - 2]), "cut short"),
            (base64(&good[..5]), "cut short"),
            (base64(&[0x0b]), "wire type 3"),
            (base64(&[0x80; 11]), "longer than 10 bytes"),
            (base64(&out_of_range), "cpu_utilization=NaN is out of range"),
        ] {
            let err = parse_bin(&input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?} -> {err}");
        }
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let err = parse(&"é".repeat(100)).unwrap_err().to_string();
        assert!(err.len() < 200);
    }
}
