//! Typed fields of one JSON object (`json::Value`), read one by one with their bounds, so that a
//! mistake is reported as ``field `x`: expected ..., got ...``, the first bad field in the order of
//! the text, and unknown (or misspelt) fields are named. Used by the filter's two JSON readers: its
//! plugin configuration (`tailweight_picker::config`) and the aggregator's replies (`reply::read`).

use crate::json::{self, escaped, Value};
use std::fmt;

/// Why a field of an object was refused: its path and the problem, e.g. field
/// `aggregator.timeout_ms`, "expected an integer in 10..=60000, got 1".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for FieldError {}

/// Reads typed fields out of one JSON object, remembering which were read so that unknown (or
/// misspelt) fields can be reported. A field that is `null` counts as absent.
///
/// A bad field does not stop the reading: its reader returns the default (or nothing), the first
/// bad field is kept, and `finish` or `reject_unknown` reports it, so the error is the one a reading
/// stopped at the first bad field would give. An object of many fields then reads without an early
/// return after each one (a branch, and drops of what was read before: ~3.5 KB of the filter's
/// module for its configuration and the aggregator's replies).
pub struct Fields<'a> {
    prefix: String,
    members: &'a [(String, Value)],
    read: Vec<&'static str>,
    first_error: Option<FieldError>,
}

impl<'a> Fields<'a> {
    /// `prefix` goes before every field name in messages (e.g. `aggregator.`).
    pub fn new(prefix: impl Into<String>, members: &'a [(String, Value)]) -> Self {
        Fields { prefix: prefix.into(), members, read: Vec::new(), first_error: None }
    }

    pub fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.read.push(key);
        self.members.iter().find(|(k, _)| k == key).map(|(_, v)| v).filter(|v| **v != Value::Null)
    }

    pub fn error(&self, key: &str, problem: String) -> FieldError {
        FieldError { field: format!("{}{key}", self.prefix), problem }
    }

    /// "expected <expected>, got <what it is>" (long strings summarised).
    pub fn unexpected(&self, key: &str, expected: &str, got: &Value) -> FieldError {
        let got = match got {
            Value::String(s) if s.len() > 60 => format!("a string of {} bytes", s.len()),
            other => other.to_string(),
        };
        self.error(key, format!("expected {expected}, got {got}"))
    }

    /// Note a bad field (only the first is reported).
    pub fn fail(&mut self, error: FieldError) {
        self.first_error.get_or_insert(error);
    }

    /// What a reader of its own returned: the value, or None with the error noted (see `fail`).
    pub fn kept<T>(&mut self, read: Result<T, FieldError>) -> Option<T> {
        read.map_err(|e| self.fail(e)).ok()
    }

    /// The first bad field, if any.
    pub fn finish(&mut self) -> Result<(), FieldError> {
        self.first_error.take().map_or(Ok(()), Err)
    }

    pub fn boolean(&mut self, key: &'static str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.fail(self.unexpected(key, "true or false", other));
                default
            }
        }
    }

    pub fn integer(&mut self, key: &'static str, default: u64, range: std::ops::RangeInclusive<u64>) -> u64 {
        match self.get(key) {
            None => default,
            Some(v) => match v.as_u64() {
                Some(n) if range.contains(&n) => n,
                _ => {
                    self.fail(self.unexpected(key, &format!("an integer in {}..={}", range.start(), range.end()), v));
                    default
                }
            },
        }
    }

    pub fn number(&mut self, key: &'static str, default: f64, min: f64, max: f64) -> f64 {
        match self.get(key) {
            None => default,
            Some(v) => match v.as_f64() {
                Some(x) if x >= min && x <= max => x,
                _ => {
                    self.fail(self.unexpected(
                        key,
                        &format!("a number in {}..={}", json::number_text(min), json::number_text(max)),
                        v,
                    ));
                    default
                }
            },
        }
    }

    pub fn string(&mut self, key: &'static str, default: &str, max_len: usize) -> String {
        self.optional_string(key, max_len).unwrap_or_else(|| default.to_string())
    }

    /// The string, or an empty one when it is missing or bad.
    pub fn required_string(&mut self, key: &'static str, max_len: usize) -> String {
        self.checked_required_string(key, max_len).unwrap_or_default().to_string()
    }

    /// `required_string`, not copied (None: missing or bad, the error noted).
    pub fn checked_required_string(&mut self, key: &'static str, max_len: usize) -> Option<&'a str> {
        let value = self.checked_string(key, max_len);
        if value.is_none() {
            // Present but bad: that error was noted first and stays.
            self.fail(self.error(key, "required".into()));
        }
        value
    }

    /// A non-empty string of at most `max_len` bytes without control characters.
    pub fn optional_string(&mut self, key: &'static str, max_len: usize) -> Option<String> {
        self.checked_string(key, max_len).map(str::to_string)
    }

    /// `optional_string`, not copied.
    pub fn checked_string(&mut self, key: &'static str, max_len: usize) -> Option<&'a str> {
        match self.get(key) {
            None => None,
            Some(Value::String(s)) if !s.is_empty() && s.len() <= max_len && !s.chars().any(char::is_control) => {
                Some(s)
            }
            Some(other) => {
                self.fail(self.unexpected(key, &format!("a non-empty string of at most {max_len} bytes"), other));
                None
            }
        }
    }

    pub fn string_list(&mut self, key: &'static str, max_items: usize) -> Vec<String> {
        let expected = format!("a list of at most {max_items} non-empty strings");
        let bad = match self.get(key) {
            None => return vec![],
            Some(Value::Array(items)) if items.len() <= max_items => {
                match items.iter().find(|item| !matches!(item, Value::String(s) if !s.is_empty() && s.len() <= 512)) {
                    None => return items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
                    Some(bad) => bad,
                }
            }
            Some(other) => other,
        };
        self.fail(self.unexpected(key, &expected, bad));
        vec![]
    }

    pub fn object(&mut self, key: &'static str) -> Option<&'a [(String, Value)]> {
        match self.get(key) {
            None => None,
            Some(Value::Object(members)) => Some(members),
            Some(other) => {
                self.fail(self.unexpected(key, "an object", other));
                None
            }
        }
    }

    pub fn array(&mut self, key: &'static str) -> Option<&'a [Value]> {
        match self.get(key) {
            None => None,
            Some(Value::Array(items)) => Some(items),
            Some(other) => {
                self.fail(self.unexpected(key, "an array", other));
                None
            }
        }
    }

    /// The first bad field, else the first field nobody read.
    pub fn reject_unknown(&mut self) -> Result<(), FieldError> {
        self.finish()?;
        match self.members.iter().map(|(k, _)| k).find(|k| !self.read.contains(&k.as_str())) {
            None => Ok(()),
            // The known fields in the order they were read (sorting them is code the filter carries).
            Some(unknown) => {
                // The name is the user's: escaped (the error stays one line) and cut short.
                Err(self.error(&escaped(unknown, 64), format!("unknown field (known: {})", self.read.join(", "))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;

    #[test]
    fn fields_are_read_typed_and_unknown_ones_named() {
        let doc =
            parse(r#"{"a": true, "n": 7, "x": 0.25, "s": "hi", "l": ["p", "q"], "o": {}, "z": null, "u": 1}"#).unwrap();
        let Value::Object(members) = &doc else { unreachable!() };
        let mut f = Fields::new("top.", members);
        assert!(f.boolean("a", false));
        assert_eq!(f.integer("n", 0, 1..=9), 7);
        assert_eq!(f.number("x", 0.0, 0.0, 0.5), 0.25);
        assert_eq!(f.string("s", "d", 10), "hi");
        assert_eq!(f.string_list("l", 4), vec!["p".to_string(), "q".to_string()]);
        assert_eq!(f.object("o").map(<[_]>::len), Some(0));
        assert_eq!(f.integer("z", 3, 0..=9), 3, "null is absent");
        assert!(f.boolean("missing", true));
        assert_eq!(f.finish(), Ok(()));
        assert_eq!(
            f.reject_unknown().unwrap_err().to_string(),
            "field `top.u`: unknown field (known: a, n, x, s, l, o, z, missing)"
        );
    }

    #[test]
    fn the_first_bad_field_is_reported_and_the_reading_goes_on() {
        let doc = parse(r#"{"n": 7, "x": 0.25, "u": 1}"#).unwrap();
        let Value::Object(members) = &doc else { unreachable!() };
        let mut f = Fields::new("top.", members);
        assert_eq!(f.number("n", 0.5, 0.01, 0.5), 0.5, "a bad field reads as its default");
        assert_eq!(f.integer("x", 3, 10..=600_000), 3);
        assert_eq!(f.required_string("nothing", 5), "");
        let err = f.reject_unknown().unwrap_err();
        assert_eq!(err.to_string(), "field `top.n`: expected a number in 0.01..=0.5, got 7", "the first, not `u`");
        assert_eq!(f.finish(), Ok(()), "reported once");
        f.fail(f.error("later", "x".into()));
        assert_eq!(f.finish().unwrap_err().field, "top.later");
        let mut f = Fields::new("top.", members);
        assert_eq!(f.integer("x", 3, 10..=600_000), 3);
        assert_eq!(f.finish().unwrap_err().to_string(), "field `top.x`: expected an integer in 10..=600000, got 0.25");
        let mut f = Fields::new("top.", members);
        assert_eq!(f.required_string("nothing", 5), "");
        assert_eq!(f.finish().unwrap_err().problem, "required");
    }
}
