//! The checks reports, attestations and replies share (version, names, intervals, caps, addresses,
//! counters, number ranges), and the typed error they give: a message that parsed but says
//! something this side refuses.

use crate::address::is_endpoint_address;
use crate::json;
use crate::protocol::{Limits, INTERVAL_MS, MAX_NAME_LEN, VERSION};
use std::collections::BinaryHeap;

/// Why a well-formed report or reply was refused; displays as one line naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// A `version` this side does not speak.
    UnsupportedVersion(u32),
    /// A field (its path, e.g. `clusters[0].endpoints[1].cpu`) and what is wrong with it.
    Field { field: String, problem: String },
}

impl Invalid {
    pub(crate) fn field(field: impl Into<String>, problem: String) -> Invalid {
        Invalid::Field { field: field.into(), problem }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::UnsupportedVersion(version) => {
                write!(f, "version: {version} is not supported (this side speaks {VERSION})")
            }
            Invalid::Field { field, problem } => {
                f.write_str(field)?;
                f.write_str(": ")?;
                f.write_str(problem)
            }
        }
    }
}

impl std::error::Error for Invalid {}

pub(crate) fn check_version(version: u32) -> Result<(), Invalid> {
    if version == VERSION {
        Ok(())
    } else {
        Err(Invalid::UnsupportedVersion(version))
    }
}

/// The sender's tick, within `INTERVAL_MS`.
pub(crate) fn check_interval(interval_ms: u32) -> Result<(), Invalid> {
    if INTERVAL_MS.contains(&interval_ms) {
        return Ok(());
    }
    let (lo, hi) = (INTERVAL_MS.start(), INTERVAL_MS.end());
    Err(Invalid::field("interval_ms", format!("{interval_ms} is outside {lo}..={hi}")))
}

/// `field` holds `count` items, more than its cap `limit`.
pub(crate) fn over_limit(field: impl Into<String>, count: usize, limit: usize) -> Invalid {
    Invalid::field(field, format!("{count} is more than the limit of {limit}"))
}

/// Cumulative counters where the failures are more than the requests (`field`: whose they are).
pub(crate) fn errors_exceed_requests(field: impl Into<String>, errors: u64, requests: u64) -> Invalid {
    Invalid::field(field, format!("errors ({errors}) exceed requests ({requests})"))
}

/// `name`, the value of `field`, is one an earlier item has already (see `first_repeat`).
pub(crate) fn appears_twice(field: String, name: &str) -> Invalid {
    Invalid::field(field, format!("{} appears twice", json::quoted(name)))
}

/// `address` is an endpoint address, `ip:port` (`field` is formatted only for the error).
pub(crate) fn check_address(field: impl FnOnce() -> String, address: &str) -> Result<(), Invalid> {
    if is_endpoint_address(address) {
        return Ok(());
    }
    Err(Invalid::field(field(), format!("{} is not ip:port", json::quoted(json::clip(address, 64)))))
}

/// What `check_name` accepts, without formatting anything.
fn name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.chars().any(char::is_control)
}

pub(crate) fn check_name(field: &str, name: &str) -> Result<(), Invalid> {
    let problem = if name.is_empty() {
        "must not be empty".into()
    } else if name.len() > MAX_NAME_LEN {
        format!("longer than {MAX_NAME_LEN} bytes")
    } else if name.chars().any(char::is_control) {
        "contains control characters".into()
    } else {
        return Ok(());
    };
    Err(Invalid::field(field, problem))
}

/// The clusters' count, names (valid, none twice) and endpoint counts against `limits`.
pub(crate) fn check_clusters<'a>(
    clusters: impl ExactSizeIterator<Item = (&'a String, usize)> + Clone,
    limits: &Limits,
) -> Result<(), Invalid> {
    if clusters.len() > limits.max_clusters {
        return Err(over_limit("clusters", clusters.len(), limits.max_clusters));
    }
    let repeated = first_repeat(clusters.clone().map(|(name, _)| name.as_str()));
    for (ci, (name, endpoints)) in clusters.enumerate() {
        if !name_ok(name) {
            check_name(&format!("clusters[{ci}].name"), name)?;
        }
        if repeated == Some(ci) {
            return Err(appears_twice(format!("clusters[{ci}].name"), name));
        }
        if endpoints > limits.max_endpoints_per_cluster {
            return Err(over_limit(format!("clusters[{ci}].endpoints"), endpoints, limits.max_endpoints_per_cluster));
        }
    }
    Ok(())
}

/// Every endpoint address of cluster `ci` is `ip:port`, none twice.
pub(crate) fn check_unique_addresses<'a>(
    ci: usize,
    mut addresses: impl Iterator<Item = &'a String> + Clone,
) -> Result<(), Invalid> {
    for (ei, address) in addresses.clone().enumerate() {
        check_address(|| format!("clusters[{ci}].endpoints[{ei}].address"), address)?;
    }
    if let Some(ei) = first_repeat(addresses.clone().map(String::as_str)) {
        let dup = addresses.nth(ei).map_or("", String::as_str);
        return Err(Invalid::field(format!("clusters[{ci}].endpoints[{ei}].address"), format!("{dup} appears twice")));
    }
    Ok(())
}

/// The position of the earliest second occurrence in `names` (what a scan in order would find
/// first). Sorted, duplicates are neighbours: cheaper than hashing every name of every message.
/// Sorted by a heap (`BinaryHeap::into_sorted_vec`), not `sort_unstable`: the same O(n log n),
/// and the filter's module (which checks every aggregator reply) carries a heap's sift instead of
/// pattern-defeating quicksort's ~4.6 KB for this one element type.
pub(crate) fn first_repeat<'a>(names: impl Iterator<Item = &'a str>) -> Option<usize> {
    let pairs: BinaryHeap<(&str, usize)> = names.enumerate().map(|(at, name)| (name, at)).collect();
    let sorted = pairs.into_sorted_vec();
    sorted.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1).min()
}

pub(crate) fn in_range(value: f64, max: f64) -> bool {
    value.is_finite() && (0.0..=max).contains(&value)
}

pub(crate) fn check_range(field: &str, value: f64, max: f64) -> Result<(), Invalid> {
    if in_range(value, max) {
        Ok(())
    } else {
        Err(Invalid::field(field, format!("{} is outside 0..={}", json::number_text(value), json::number_text(max))))
    }
}
