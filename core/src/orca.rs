//! ORCA load reports carried in the `endpoint-load-metrics` response header (the form Envoy's
//! client-side WRR reads): `TEXT cpu_utilization=0.3, rps_fractional=10, eps=0` or
//! `JSON {"cpu_utilization": 0.3, ...}`. Unknown keys are ignored; bad values reject the report.
//! (The binary `BIN`/`-bin` form is not parsed.)

pub const HEADER: &str = "endpoint-load-metrics";

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
        }
    }
}

impl std::error::Error for OrcaError {}

pub fn parse(header: &str) -> Result<OrcaLoad, OrcaError> {
    let header = header.trim();
    let (format, body) = header.split_once(char::is_whitespace).unwrap_or((header, ""));
    match format {
        "TEXT" => parse_text(body),
        "JSON" => parse_json(body),
        _ => Err(OrcaError::UnknownFormat(truncate(header, 40).to_string())),
    }
}

fn parse_text(body: &str) -> Result<OrcaLoad, OrcaError> {
    let mut load = OrcaLoad::default();
    for pair in body.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) =
            pair.split_once('=').ok_or_else(|| OrcaError::NotKeyValue(truncate(pair, 40).to_string()))?;
        let value: f64 = value.trim().parse().map_err(|_| OrcaError::NotANumber(key.trim().to_string()))?;
        set(&mut load, key.trim(), value)?;
    }
    Ok(load)
}

fn parse_json(body: &str) -> Result<OrcaLoad, OrcaError> {
    let value: serde_json::Value = serde_json::from_str(body).map_err(|e| OrcaError::BadJson(e.to_string()))?;
    let object = value.as_object().ok_or(OrcaError::NotAnObject)?;
    let mut load = OrcaLoad::default();
    for (key, value) in object {
        if let Some(number) = value.as_f64() {
            set(&mut load, key, number)?;
        }
    }
    Ok(load)
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

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
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
            ("TEXT cpu_utilization=NaN", "out of range"),
            ("TEXT cpu_utilization=inf", "out of range"),
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
        assert_eq!(parse("BIN abc"), Err(OrcaError::UnknownFormat("BIN abc".into())));
    }

    #[test]
    fn empty_text_report_is_empty() {
        assert_eq!(parse("TEXT "), Ok(OrcaLoad::default()));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let err = parse(&"é".repeat(100)).unwrap_err().to_string();
        assert!(err.len() < 200);
    }
}
