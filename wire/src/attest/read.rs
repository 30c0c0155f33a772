//! The aggregator's attestation reader: the size checked before anything is parsed, then
//! serde_json into `Attestation`, then `Attestation::validate`.

use super::{Attestation, MAX_ATTESTATION_BYTES};
use crate::validate::Invalid;

/// Why an attestation body was refused; displays as one line naming the problem (and the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttestationError {
    /// Longer than `MAX_ATTESTATION_BYTES` (checked before parsing).
    TooLarge(usize),
    /// Not UTF-8, not JSON, or not shaped like an attestation (the parser's reason).
    Malformed(String),
    /// Well-formed but refused (a version this side does not speak, or a bad field).
    Invalid(Invalid),
}

impl std::fmt::Display for AttestationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttestationError::TooLarge(n) => {
                write!(f, "attestation of {n} bytes is larger than the limit of {MAX_ATTESTATION_BYTES}")
            }
            AttestationError::Malformed(reason) => write!(f, "malformed attestation: {reason}"),
            AttestationError::Invalid(invalid) => invalid.fmt(f),
        }
    }
}

impl std::error::Error for AttestationError {}

/// Parse and validate an attestation. The size bound comes first, so the parse's transient cost is
/// bounded by it (serde builds the typed value directly, no tree; `sources` grows with the input).
pub fn parse_attestation(body: &[u8]) -> Result<Attestation, AttestationError> {
    if body.len() > MAX_ATTESTATION_BYTES {
        return Err(AttestationError::TooLarge(body.len()));
    }
    let text = std::str::from_utf8(body).map_err(|e| AttestationError::Malformed(format!("not UTF-8: {e}")))?;
    let a: Attestation = serde_json::from_str(text).map_err(|e| AttestationError::Malformed(e.to_string()))?;
    a.validate().map_err(AttestationError::Invalid)?;
    Ok(a)
}
