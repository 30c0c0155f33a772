//! The aggregator's report reader: serde_json into `Report`, then `Report::validate`. serde here,
//! not the filter's hand-written JSON: the aggregator reads every sidecar's reports, and serde's
//! typed deserializer builds no value tree (it is several times faster). Only the aggregator's side
//! builds it (the `serde` feature), so no serde reaches the filter's module.
//!
//! The caps on clusters per report and endpoints per cluster hold while parsing (the seeds below
//! carry them): a body of 19,000 empty clusters is refused at the one past the limit, before the
//! rest is read, so what a report holds parsed is bounded by the caps as well as by its size.

use super::{ClusterReport, EndpointReport, Report};
use crate::protocol::{Limits, VERSION};
use crate::validate::Invalid;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

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
    let over = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = ReportSeed { limits, over: &over }.deserialize(&mut de).and_then(|r| de.end().map(|()| r));
    let report = match (parsed, over.into_inner()) {
        (_, Some(invalid)) => return Err(malformed_or(body, invalid)),
        (Err(e), None) => return Err(malformed(e.to_string())),
        (Ok(report), None) => report,
    };
    report.validate(limits).map_err(ReportError::Invalid)?;
    Ok(report)
}

/// A cap exceeded while parsing, unless the body is of another version.
fn malformed_or(body: &[u8], invalid: Invalid) -> ReportError {
    match peek_version(body) {
        Some(version) if version != VERSION => ReportError::Invalid(Invalid::UnsupportedVersion(version)),
        _ => ReportError::Invalid(invalid),
    }
}

/// The `version` of a JSON object whatever else it holds (None: not an object with a version).
fn peek_version(body: &[u8]) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    serde_json::from_slice::<VersionOnly>(body).ok().map(|v| v.version)
}

/// The limits, and where a seed leaves the cap it found exceeded (the parse then stops with a
/// serde error, which `parse_report` replaces by this).
#[derive(Clone, Copy)]
struct ReportSeed<'a> {
    limits: &'a Limits,
    over: &'a RefCell<Option<Invalid>>,
}

impl ReportSeed<'_> {
    fn exceeded<E: serde::de::Error>(&self, field: String, limit: usize) -> E {
        let problem = format!("more than the limit of {limit} (refused at number {})", limit + 1);
        *self.over.borrow_mut() = Some(Invalid::field(field, problem));
        E::custom("a cap is exceeded")
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ReportField {
    Version,
    Reporter,
    Incarnation,
    IntervalMs,
    Clusters,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ClusterField {
    Name,
    Endpoints,
    #[serde(other)]
    Other,
}

/// A field read once: a repeated key is an error, as with serde's derive.
fn once<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    slot: &mut Option<T>,
    map: &mut A,
    name: &'static str,
) -> Result<(), A::Error> {
    once_seeded(slot, map, name, PhantomData)
}

/// A field read once with `seed` (one that carries the caps), as `once`.
fn once_seeded<'de, S: DeserializeSeed<'de>, A: MapAccess<'de>>(
    slot: &mut Option<S::Value>,
    map: &mut A,
    name: &'static str,
    seed: S,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(A::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value_seed(seed)?);
    Ok(())
}

/// The elements of a list, each read by `next` (given its index), at most `limit` of them: the
/// one past it is refused (`ReportSeed::exceeded`, naming the list, `field`) before the rest is read.
fn capped<'de, T, A: SeqAccess<'de>>(
    report: ReportSeed<'_>,
    mut seq: A,
    limit: usize,
    field: impl FnOnce() -> String,
    mut next: impl FnMut(&mut A, usize) -> Result<Option<T>, A::Error>,
) -> Result<Vec<T>, A::Error> {
    let mut items = Vec::new();
    while let Some(item) = next(&mut seq, items.len())? {
        if items.len() == limit {
            return Err(report.exceeded(field(), limit));
        }
        items.push(item);
    }
    Ok(items)
}

impl<'de> DeserializeSeed<'de> for ReportSeed<'_> {
    type Value = Report;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Report, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReportSeed<'_> {
    type Value = Report;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a report object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Report, A::Error> {
        let (mut version, mut reporter, mut incarnation, mut interval_ms, mut clusters) =
            (None, None, None, None, None);
        while let Some(key) = map.next_key::<ReportField>()? {
            match key {
                ReportField::Version => once(&mut version, &mut map, "version")?,
                ReportField::Reporter => once(&mut reporter, &mut map, "reporter")?,
                ReportField::Incarnation => once(&mut incarnation, &mut map, "incarnation")?,
                ReportField::IntervalMs => once(&mut interval_ms, &mut map, "interval_ms")?,
                ReportField::Clusters => once_seeded(&mut clusters, &mut map, "clusters", ClustersSeed(self))?,
                ReportField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Report {
            version: version.ok_or_else(|| A::Error::missing_field("version"))?,
            reporter: reporter.ok_or_else(|| A::Error::missing_field("reporter"))?,
            incarnation: incarnation.ok_or_else(|| A::Error::missing_field("incarnation"))?,
            interval_ms: interval_ms.ok_or_else(|| A::Error::missing_field("interval_ms"))?,
            clusters: clusters.ok_or_else(|| A::Error::missing_field("clusters"))?,
        })
    }
}

/// The clusters, at most `max_clusters`.
struct ClustersSeed<'a>(ReportSeed<'a>);

impl<'de> DeserializeSeed<'de> for ClustersSeed<'_> {
    type Value = Vec<ClusterReport>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ClustersSeed<'_> {
    type Value = Vec<ClusterReport>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of clusters")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let report = self.0;
        capped(
            report,
            seq,
            report.limits.max_clusters,
            || "clusters".into(),
            |seq, index| seq.next_element_seed(ClusterSeed { report, index }),
        )
    }
}

/// One cluster, with at most `max_endpoints_per_cluster` endpoints.
struct ClusterSeed<'a> {
    report: ReportSeed<'a>,
    index: usize,
}

impl<'de> DeserializeSeed<'de> for ClusterSeed<'_> {
    type Value = ClusterReport;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ClusterSeed<'_> {
    type Value = ClusterReport;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a cluster object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // The cluster past the limit is refused before its fields are read.
        if self.index == self.report.limits.max_clusters {
            return Err(self.report.exceeded("clusters".into(), self.index));
        }
        let (mut name, mut endpoints) = (None, None);
        while let Some(key) = map.next_key::<ClusterField>()? {
            match key {
                ClusterField::Name => once(&mut name, &mut map, "name")?,
                ClusterField::Endpoints => {
                    let seed = EndpointsSeed { report: self.report, cluster: self.index };
                    once_seeded(&mut endpoints, &mut map, "endpoints", seed)?;
                }
                ClusterField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ClusterReport {
            name: name.ok_or_else(|| A::Error::missing_field("name"))?,
            endpoints: endpoints.ok_or_else(|| A::Error::missing_field("endpoints"))?,
        })
    }
}

/// A cluster's endpoints, at most `max_endpoints_per_cluster`; an empty list allocates nothing.
struct EndpointsSeed<'a> {
    report: ReportSeed<'a>,
    cluster: usize,
}

impl<'de> DeserializeSeed<'de> for EndpointsSeed<'_> {
    type Value = Vec<EndpointReport>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EndpointsSeed<'_> {
    type Value = Vec<EndpointReport>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of endpoints")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let limit = self.report.limits.max_endpoints_per_cluster;
        let field = || format!("clusters[{}].endpoints", self.cluster);
        capped(self.report, seq, limit, field, |seq, _| seq.next_element::<EndpointReport>())
    }
}
