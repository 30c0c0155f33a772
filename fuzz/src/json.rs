//! The filter's hand-written JSON parser (`tailweight_wire::json`) against serde_json, the
//! reference: the same texts accepted and refused, the same values. Its deliberate differences,
//! documented in `tailweight_wire::json` and allowed here, and only these:
//! - nesting: it refuses arrays and objects nested deeper than `MAX_DEPTH` (64); serde_json's
//!   limit is 128;
//! - numbers: read to within a few units in the last place, not correctly rounded (checked here to
//!   `ULPS` units of the reference's value, which serde_json itself reads to within one); at
//!   `EDGE` and above in magnitude it may refuse a number as out of range that the reference
//!   reads, or read one the reference refuses;
//! - a repeated key keeps both members in order (the reference below keeps them too; serde_json's
//!   own `Value` keeps the last).

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use tailweight_wire::json::{self, Value, MAX_DEPTH};

/// Units in the last place the parser's numbers may be off from the reference's.
const ULPS: f64 = 8.0;
/// The magnitude from which the parser may overflow where the reference does not, or not where
/// it does (`decimal_value`'s doc comment).
const EDGE: f64 = 1e300;

/// serde_json's reading of a text, shaped like the parser's: members in order (repeated keys
/// too), numbers typed as serde_json types them (u64 if a non-negative integer fits, i64 if a
/// negative one does, f64 otherwise).
#[derive(Debug, PartialEq)]
enum Reference {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    String(String),
    Array(Vec<Reference>),
    Object(Vec<(String, Reference)>),
}

impl<'de> Deserialize<'de> for Reference {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ReferenceVisitor)
    }
}

struct ReferenceVisitor;

impl<'de> Visitor<'de> for ReferenceVisitor {
    type Value = Reference;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Reference, E> {
        Ok(Reference::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Reference, E> {
        Ok(Reference::Bool(b))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Reference, E> {
        Ok(Reference::U64(n))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Reference, E> {
        Ok(Reference::I64(n))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Reference, E> {
        Ok(Reference::F64(n))
    }
    fn visit_str<E>(self, s: &str) -> Result<Reference, E> {
        Ok(Reference::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Reference, E> {
        Ok(Reference::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Reference, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Reference::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Reference, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, Reference>()? {
            members.push(member);
        }
        Ok(Reference::Object(members))
    }
}

impl Reference {
    /// Nesting of arrays and objects (a scalar is 0).
    fn depth(&self) -> usize {
        match self {
            Reference::Array(items) => 1 + items.iter().map(Reference::depth).max().unwrap_or(0),
            Reference::Object(members) => 1 + members.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// The largest magnitude of a number in it.
    fn largest(&self) -> f64 {
        match self {
            Reference::U64(n) => *n as f64,
            Reference::I64(n) => (*n as f64).abs(),
            Reference::F64(n) => n.abs(),
            Reference::Array(items) => items.iter().map(Reference::largest).fold(0.0, f64::max),
            Reference::Object(members) => members.iter().map(|(_, v)| v.largest()).fold(0.0, f64::max),
            _ => 0.0,
        }
    }
}

/// The largest magnitude of a number in a parsed value.
fn largest(value: &Value) -> f64 {
    match value {
        Value::Number(n) => n.as_f64().abs(),
        Value::Array(items) => items.iter().map(largest).fold(0.0, f64::max),
        Value::Object(members) => members.iter().map(|(_, v)| largest(v)).fold(0.0, f64::max),
        _ => 0.0,
    }
}

/// Within `ULPS` units in the last place of `reference` (of the smallest normal number's, below it).
fn close(ours: f64, reference: f64) -> bool {
    let unit = reference.abs().max(f64::MIN_POSITIVE) * f64::EPSILON;
    ours == reference || (ours - reference).abs() <= ULPS * unit
}

/// Where the parser's value differs from the reference's (None: the same).
fn difference(ours: &Value, reference: &Reference, at: &str) -> Option<String> {
    let same = match (ours, reference) {
        (Value::Null, Reference::Null) => true,
        (Value::Bool(a), Reference::Bool(b)) => a == b,
        // An integer is one exactly when serde_json reads it as a u64.
        (Value::Number(n), Reference::U64(r)) => n.as_u64() == Some(*r) && close(n.as_f64(), *r as f64),
        (Value::Number(n), Reference::I64(r)) => n.as_u64().is_none() && close(n.as_f64(), *r as f64),
        (Value::Number(n), Reference::F64(r)) => n.as_u64().is_none() && close(n.as_f64(), *r),
        (Value::String(a), Reference::String(b)) => a == b,
        (Value::Array(a), Reference::Array(b)) if a.len() == b.len() => {
            return a.iter().zip(b).enumerate().find_map(|(i, (x, y))| difference(x, y, &format!("{at}[{i}]")));
        }
        (Value::Object(a), Reference::Object(b)) if a.len() == b.len() => {
            return a.iter().zip(b).find_map(|((ka, va), (kb, vb))| {
                if ka != kb {
                    return Some(format!("{at}: key {ka:?} against {kb:?}"));
                }
                difference(va, vb, &format!("{at}.{ka}"))
            });
        }
        _ => false,
    };
    (!same).then(|| format!("{at}: {ours:?} against {reference:?}"))
}

/// Parse with both; the same verdict and the same values, up to the documented differences. What
/// parses is written back (`write_value`) and parses again to the same value.
pub fn json_diff(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        // The parser takes text; serde_json refuses bytes that are not UTF-8 as JSON too.
        assert!(serde_json::from_slice::<Reference>(data).is_err(), "serde_json read invalid UTF-8");
        return;
    };
    let ours = json::parse(text);
    let reference = serde_json::from_str::<Reference>(text);
    match (&ours, &reference) {
        (Ok(value), Ok(expected)) => {
            if let Some(d) = difference(value, expected, "$") {
                panic!("parsed differently from serde_json at {d}");
            }
        }
        (Err(e), Err(_)) => assert!(!e.to_string().contains('\n'), "not one line: {e}"),
        (Err(e), Ok(expected)) => {
            let deep = e.what == "nested too deeply" && expected.depth() > MAX_DEPTH;
            let edge = e.what == "number out of range" && expected.largest() >= EDGE;
            assert!(deep || edge, "refused what serde_json reads ({e}): {expected:?}");
        }
        (Ok(value), Err(e)) => {
            let edge = e.to_string().starts_with("number out of range") && largest(value) >= EDGE;
            assert!(edge, "read what serde_json refuses ({e}): {value:?}");
        }
    }
    if let Ok(value) = ours {
        let mut written = Vec::new();
        json::write_value(&mut written, &value);
        let again = std::str::from_utf8(&written).expect("written JSON is UTF-8");
        assert_eq!(json::parse(again).as_ref(), Ok(&value), "{again}");
    }
}
