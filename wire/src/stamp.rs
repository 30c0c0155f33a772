//! Server-side load stamps (used by the pick only when `load_stamp_max_age_ms` is set, and only
//! from the clusters in `load_stamp_clusters`, whose destinations run the server role): the
//! destination's own sidecar writes into each response the endpoint's requests in flight right
//! after that response, `x-tailweight-load: 1;rif=<n>` (version 1; later fields are `;key=value`
//! pairs a version-1 reader skips). The client proxy that gets the response learns that endpoint's
//! queue at no extra request, and only that proxy learns it: no two proxies act on the same stamp
//! (join-the-idle-queue's property: no herd), unlike a view every proxy shares. A stamp is only
//! worth a few service times (other proxies keep sending there), so the pick uses it while younger
//! than `load_stamp_max_age_ms`, together with what this worker sent there since (see
//! `tailweight_picker::stamp_record`).

/// The response header the server-side filter writes and the client-side filter reads.
pub const LOAD_STAMP_HEADER: &str = "x-tailweight-load";
/// The format version this code writes and reads.
pub const LOAD_STAMP_VERSION: u32 = 1;
/// Larger request counts are read as this (a stamp cannot claim an endless queue).
pub const MAX_STAMP_RIF: u32 = 1_000_000;

/// What one response's stamp says about the endpoint that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadStamp {
    /// Requests at the endpoint (in service and queued) right after this response left.
    pub rif: u32,
}

/// Why a stamp header was not read; displays as one line naming the part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StampError {
    /// The leading version is not a number, or one this code does not read.
    Version(String),
    /// `rif` is missing or not a non-negative integer.
    Rif(String),
}

impl std::fmt::Display for StampError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StampError::Version(got) => {
                write!(f, "{LOAD_STAMP_HEADER}: expected version {LOAD_STAMP_VERSION}, got {got:?}")
            }
            StampError::Rif(got) => write!(f, "{LOAD_STAMP_HEADER}: field `rif`: expected an integer, got {got:?}"),
        }
    }
}

impl std::error::Error for StampError {}

impl LoadStamp {
    /// The header value: `1;rif=<n>`.
    pub fn header_value(&self) -> String {
        format!("{LOAD_STAMP_VERSION};rif={}", self.rif)
    }

    /// Read a header value written by `header_value` (unknown `;key=value` pairs are skipped).
    pub fn parse(value: &str) -> Result<LoadStamp, StampError> {
        // The first 40 characters, for the message (`clip`: no char-by-char collecting in the module).
        let short = |s: &str| crate::json::clip(s, 40).to_string();
        let mut parts = value.trim().split(';');
        let version = parts.next().unwrap_or_default().trim();
        if version.parse::<u32>().ok() != Some(LOAD_STAMP_VERSION) {
            return Err(StampError::Version(short(version)));
        }
        let rif = parts
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == "rif")
            .map(|(_, v)| v.trim())
            .ok_or_else(|| StampError::Rif(String::new()))?;
        let rif: u64 = rif.parse().map_err(|_| StampError::Rif(short(rif)))?;
        Ok(LoadStamp { rif: rif.min(u64::from(MAX_STAMP_RIF)) as u32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_skips_later_fields() {
        let s = LoadStamp { rif: 7 };
        assert_eq!(s.header_value(), "1;rif=7");
        assert_eq!(LoadStamp::parse(&s.header_value()), Ok(s));
        assert_eq!(LoadStamp::parse(" 1; lat=30 ; rif = 3 "), Ok(LoadStamp { rif: 3 }));
        assert_eq!(LoadStamp::parse("1;rif=99999999999"), Ok(LoadStamp { rif: MAX_STAMP_RIF }));
    }

    #[test]
    fn bad_stamps_are_refused_naming_the_part() {
        assert_eq!(LoadStamp::parse("2;rif=3"), Err(StampError::Version("2".into())));
        assert_eq!(LoadStamp::parse("rif=3"), Err(StampError::Version("rif=3".into())));
        assert_eq!(LoadStamp::parse("1"), Err(StampError::Rif(String::new())));
        assert_eq!(LoadStamp::parse("1;rif=-1"), Err(StampError::Rif("-1".into())));
        let e = LoadStamp::parse("1;rif=x").unwrap_err().to_string();
        assert_eq!(e, "x-tailweight-load: field `rif`: expected an integer, got \"x\"");
    }
}
