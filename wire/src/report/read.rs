//! The aggregator's report reader: serde_json into `Report`, then `Report::validate`. serde here,
//! not the filter's hand-written JSON: the aggregator reads every sidecar's reports, and serde's
//! typed deserializer builds no value tree (it is several times faster). Only the aggregator's side
//! builds it (the `serde` feature), so no serde reaches the filter's module.

use super::Report;
use crate::protocol::{Limits, VERSION};
use crate::validate::Invalid;

/// Why a report body was refused; displays as one line naming the problem (and the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// Not UTF-8, not JSON, or not shaped like a report (the parser's reason).
    Malformed(String),
    /// Well-formed but refused: a `version` this side does not speak (whether or not the rest parses
    /// as v1), or a bad field.
    Invalid(Invalid),
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportError::Malformed(reason) => write!(f, "malformed report: {reason}"),
            ReportError::Invalid(invalid) => invalid.fmt(f),
        }
    }
}

impl std::error::Error for ReportError {}

/// Parse and validate a report.
pub fn parse_report(body: &[u8], limits: &Limits) -> Result<Report, ReportError> {
    // A future version may not even parse as v1: say what is wrong, not what failed.
    let malformed = |reason: String| match peek_version(body) {
        Some(version) if version != VERSION => ReportError::Invalid(Invalid::UnsupportedVersion(version)),
        _ => ReportError::Malformed(reason),
    };
    // UTF-8 checked once for the whole body (a word at a time), not string by string inside the
    // parser: from a &str serde_json takes every string as it is.
    let text = std::str::from_utf8(body).map_err(|e| malformed(format!("not UTF-8: {e}")))?;
    let report: Report = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    report.validate(limits).map_err(ReportError::Invalid)?;
    Ok(report)
}

/// The `version` of a JSON object whatever else it holds (None: not an object with a version).
fn peek_version(body: &[u8]) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    serde_json::from_slice::<VersionOnly>(body).ok().map(|v| v.version)
}
