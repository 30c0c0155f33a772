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

/// Whether the two readings agree, up to the documented differences (Err: how they differ).
fn agree(
    ours: &Result<Value, json::JsonError>,
    reference: &Result<Reference, serde_json::Error>,
) -> Result<(), String> {
    match (ours, reference) {
        (Ok(value), Ok(expected)) => match difference(value, expected, "$") {
            Some(d) => Err(format!("parsed differently from serde_json at {d}")),
            None => Ok(()),
        },
        (Err(e), Err(_)) if e.to_string().contains('\n') => Err(format!("not one line: {e}")),
        (Err(_), Err(_)) => Ok(()),
        (Err(e), Ok(expected)) => {
            let deep = e.what == "nested too deeply" && expected.depth() > MAX_DEPTH;
            let edge = e.what == "number out of range" && expected.largest() >= EDGE;
            if deep || edge {
                Ok(())
            } else {
                Err(format!("refused what serde_json reads ({e}): {expected:?}"))
            }
        }
        (Ok(value), Err(e)) => {
            if e.to_string().starts_with("number out of range") && largest(value) >= EDGE {
                Ok(())
            } else {
                Err(format!("read what serde_json refuses ({e}): {value:?}"))
            }
        }
    }
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
    if let Err(why) = agree(&ours, &serde_json::from_str::<Reference>(text)) {
        panic!("{why}");
    }
    if let Ok(value) = ours {
        let mut written = Vec::new();
        json::write_value(&mut written, &value);
        let again = std::str::from_utf8(&written).expect("written JSON is UTF-8");
        assert_eq!(json::parse(again).as_ref(), Ok(&value), "{again}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> Reference {
        serde_json::from_str(text).expect("serde_json reads it")
    }

    #[test]
    fn a_different_value_type_or_member_is_a_difference() {
        let ours = json::parse(r#"{"a":[1,-2,0.5,"x",null,true]}"#).expect("JSON");
        assert_eq!(difference(&ours, &reference(r#"{"a":[1,-2,0.5,"x",null,true]}"#), "$"), None);
        for other in [
            r#"{"a":[2,-2,0.5,"x",null,true]}"#,
            r#"{"a":[1.0,-2,0.5,"x",null,true]}"#,
            r#"{"a":[1,-2,0.5000001,"x",null,true]}"#,
            r#"{"a":[1,-2,0.5,"y",null,true]}"#,
            r#"{"a":[1,-2,0.5,"x",false,true]}"#,
            r#"{"a":[1,-2,0.5,"x",null]}"#,
            r#"{"b":[1,-2,0.5,"x",null,true]}"#,
        ] {
            assert!(difference(&ours, &reference(other), "$").is_some(), "{other}");
        }
    }

    #[test]
    fn numbers_at_the_edges_agree() {
        for text in [
            "9007199254740993",
            "1.5e-310",
            "4.9e-324",
            "2.4e-324",
            "1e-330",
            "123456789012345678901234567890e-330",
            "0.000000000000000000000000000000000000001e39",
            "1.7976931348623157e307",
            "-0",
            "[-9223372036854775808,-9223372036854775809,18446744073709551616]",
        ] {
            json_diff(text.as_bytes());
        }
        assert!(close(1.0 + 8.0 * f64::EPSILON, 1.0) && !close(1.0 + 9.0 * f64::EPSILON, 1.0));
    }

    #[test]
    fn only_the_documented_differences_are_allowed() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let too_deep = || Err(json::parse(&nested(MAX_DEPTH + 1)).unwrap_err());
        assert_eq!(too_deep().as_ref().unwrap_err().what, "nested too deeply");
        assert!(agree(&too_deep(), &serde_json::from_str(&nested(MAX_DEPTH + 1))).is_ok());
        assert!(agree(&too_deep(), &serde_json::from_str(&nested(MAX_DEPTH))).is_err());
        let out_of_range = || Err(json::parse("1e400").unwrap_err());
        assert!(agree(&out_of_range(), &serde_json::from_str("1.7e308")).is_ok());
        assert!(agree(&out_of_range(), &serde_json::from_str("1e299")).is_err());
        assert!(agree(&json::parse("1.7e308"), &serde_json::from_str("1e400")).is_ok());
        assert!(agree(&json::parse("1e299"), &serde_json::from_str("[")).is_err());
        assert!(agree(&json::parse("[1]"), &serde_json::from_str("[1,2]")).is_err());
    }
}
