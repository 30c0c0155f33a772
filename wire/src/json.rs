//! The JSON the filter reads (its plugin configuration, the aggregator's replies, ORCA's JSON form)
//! and writes (its reports), without serde: a small value tree and a writer. Hand-written because
//! every sidecar pays for the filter's code size at start-up (V8 compiles the whole module before
//! the listener is ready, about 0.5 ms per KB here): serde_json with its derived (de)serializers
//! was ~170 KB of the module, miniserde's value parser 19 KB, this a few KB. The aggregator and the
//! tools keep serde_json.
//!
//! Numbers keep their text: integers are read exactly, other numbers with `str::parse::<f64>`, and
//! messages quote what was written. Nesting is bounded; nothing panics on any input.

use std::fmt;

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    /// Members in document order (a repeated key keeps both; `get` finds the first).
    Object(Vec<(String, Value)>),
}

/// A JSON number as written, and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Number {
    pub text: String,
    value: f64,
    /// Set when the text is a non-negative integer that fits.
    integer: Option<u64>,
}

impl Number {
    pub fn as_f64(&self) -> f64 {
        self.value
    }

    pub fn as_u64(&self) -> Option<u64> {
        self.integer
    }
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(n.as_f64()),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// What kind of value it is, for messages ("a string", "an object"...).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// The value as JSON text (numbers as written), for messages.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Vec::new();
        write_value(&mut out, self);
        f.write_str(&String::from_utf8_lossy(&out))
    }
}

/// Where and why a text is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub line: usize,
    pub column: usize,
    pub what: &'static str,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at line {} column {}", self.what, self.line, self.column)
    }
}

impl std::error::Error for JsonError {}

/// Parse one JSON value (with optional whitespace around it).
pub fn parse(text: &str) -> Result<Value, JsonError> {
    let mut p = Parser { bytes: text.as_bytes(), text, at: 0 };
    p.whitespace();
    let value = p.value(0)?;
    p.whitespace();
    if p.at != p.bytes.len() {
        return Err(p.error("trailing characters"));
    }
    Ok(value)
}

struct Parser<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &'static str) -> JsonError {
        let before = &self.bytes[..self.at.min(self.bytes.len())];
        let line = 1 + before.iter().filter(|b| **b == b'\n').count();
        let column = 1 + before.iter().rev().take_while(|b| **b != b'\n').count();
        JsonError { line, column, what }
    }

    fn error_at(&self, at: usize, what: &'static str) -> JsonError {
        Parser { bytes: self.bytes, text: self.text, at }.error(what)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// The text between two positions the parser stopped at. They are at ASCII bytes, so always
    /// character boundaries; `get` leaves out the slicing panic and the formatting code it carries.
    fn text_between(&self, from: usize, to: usize) -> &'a str {
        self.text.get(from..to).unwrap_or_default()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &'static [u8], value: Value) -> Result<Value, JsonError> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        match self.peek() {
            None => Err(self.error("unexpected end")),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'"') => self.string().map(Value::String),
            Some(b'[' | b'{') if depth >= MAX_DEPTH => Err(self.error("nested too deeply")),
            Some(b'[') => self.array(depth),
            Some(b'{') => self.object(depth),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a value")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.at += 1;
        let mut items = Vec::new();
        self.whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.whitespace();
            items.push(self.value(depth + 1)?);
            self.whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.error("unexpected end")),
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.at += 1;
        let mut members = Vec::new();
        self.whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.whitespace();
            match self.peek() {
                Some(b'"') => {}
                None => return Err(self.error("unexpected end")),
                Some(_) => return Err(self.error("expected a key")),
            }
            let key = self.string()?;
            self.whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':'"));
            }
            self.at += 1;
            self.whitespace();
            members.push((key, self.value(depth + 1)?));
            self.whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                None => return Err(self.error("unexpected end")),
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.at += 1;
        let mut out = String::new();
        let mut run = self.at;
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    out.push_str(self.text_between(run, self.at));
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    out.push_str(self.text_between(run, self.at));
                    let escape = self.bytes.get(self.at + 1).copied();
                    // Past the backslash and the escape's letter.
                    self.at += 2;
                    let c = match escape {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => {
                            self.at -= 1;
                            return Err(self.error("bad escape"));
                        }
                    };
                    out.push(c);
                    run = self.at;
                }
                Some(0..=0x1f) => return Err(self.error("control character in a string")),
                Some(_) => self.at += 1,
            }
        }
    }

    /// After `\u`: four hex digits, and a low surrogate after a high one. Leaves `at` after them.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let high = self.hex4()?;
        let code = if (0xd800..0xdc00).contains(&high) {
            if !self.bytes[self.at..].starts_with(b"\\u") {
                return Err(self.error("lone surrogate"));
            }
            self.at += 2;
            let low = self.hex4()?;
            if !(0xdc00..0xe000).contains(&low) {
                return Err(self.error("lone surrogate"));
            }
            0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
        } else {
            high
        };
        char::from_u32(code).ok_or_else(|| self.error("lone surrogate"))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self.bytes.get(self.at..self.at + 4).ok_or_else(|| self.error("bad escape"))?;
        let mut n = 0;
        for d in digits {
            n = n * 16 + char::from(*d).to_digit(16).ok_or_else(|| self.error("bad escape"))?;
        }
        self.at += 4;
        Ok(n)
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.at += 1;
            }
            p.at - from
        };
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let int_start = self.at;
        if digits(self) == 0 || (self.bytes[int_start] == b'0' && self.at - int_start > 1) {
            return Err(self.error_at(start, "bad number"));
        }
        let mut integer = self.bytes[start] != b'-';
        if self.peek() == Some(b'.') {
            self.at += 1;
            integer = false;
            if digits(self) == 0 {
                return Err(self.error_at(start, "bad number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            integer = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.error_at(start, "bad number"));
            }
        }
        let text = self.text_between(start, self.at);
        let value = decimal_value(text);
        if !value.is_finite() {
            return Err(self.error_at(start, "number out of range"));
        }
        let integer = if integer { text.parse::<u64>().ok() } else { None };
        Ok(Value::Number(Number { text: text.to_string(), value, integer }))
    }
}

/// 10^0 ..= 10^22, each exactly representable as an f64.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// A JSON number (the whole of `text`, nothing around it), or None.
pub fn number(text: &str) -> Option<f64> {
    let mut p = Parser { bytes: text.as_bytes(), text, at: 0 };
    match p.number() {
        Ok(Value::Number(n)) if p.at == text.len() => Some(n.as_f64()),
        _ => None,
    }
}

/// The value of a JSON number's text (already checked against the grammar): its first 19
/// significant digits as an integer, times a power of ten. Within a few ulps of the correctly
/// rounded value (below 1e300 in magnitude: nearer f64::MAX it may overflow to infinity, which is
/// refused as out of range), which is all the filter needs (weights, ratios, times);
/// `str::parse::<f64>` would be exact but carries ~14 KB of code and tables.
fn decimal_value(text: &str) -> f64 {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (digits_part, exponent_part) = rest.split_once(['e', 'E']).unwrap_or((rest, ""));
    let mut mantissa = 0u64;
    let mut exponent = 0i64;
    let mut significant = 0u32;
    let mut after_point = false;
    for b in digits_part.bytes() {
        match b {
            b'.' => after_point = true,
            b'0'..=b'9' => {
                if significant < 19 {
                    mantissa = mantissa * 10 + u64::from(b - b'0');
                    if mantissa > 0 {
                        significant += 1;
                    }
                    if after_point {
                        exponent -= 1;
                    }
                } else if !after_point {
                    exponent += 1;
                }
            }
            _ => {}
        }
    }
    // An exponent too long for i64 is far beyond the range anyway.
    let written: i64 = match exponent_part {
        "" => 0,
        e => e.parse::<i64>().unwrap_or(if e.starts_with('-') { -10_000 } else { 10_000 }),
    };
    let exponent = exponent.saturating_add(written).clamp(-400, 400) as i32;
    let value = if mantissa < 1 << 53 && exponent.unsigned_abs() < EXACT_POWERS.len() as u32 {
        // Both exact, and one correctly rounded operation: the correctly rounded value (Clinger's
        // fast path, which covers what the aggregator and configurations write).
        let power = EXACT_POWERS[exponent.unsigned_abs() as usize];
        if exponent < 0 {
            mantissa as f64 / power
        } else {
            mantissa as f64 * power
        }
    } else {
        // Two steps so that 10^exponent does not overflow or vanish before the multiplication.
        let half = exponent / 2;
        mantissa as f64 * 10f64.powi(half) * 10f64.powi(exponent - half)
    };
    if negative {
        -value
    } else {
        value
    }
}

/// Append `value` as compact JSON (numbers as written).
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(n.text.as_bytes()),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(members) => {
            out.push(b'{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, v);
            }
            out.push(b'}');
        }
    }
}

/// Append `s` as a JSON string: `"` and `\` escaped, control characters as `\u00XX`.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// A number for messages, without the float formatting machinery: an integer as one, else up to 6
/// decimals without trailing zeros; `-` for negatives, `NaN`, `inf`.
pub fn number_text(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    if x.is_infinite() {
        return format!("{sign}inf");
    }
    let mut out = Vec::new();
    write_decimal6(&mut out, x.abs());
    let text = String::from_utf8_lossy(&out).into_owned();
    format!("{sign}{}", text.trim_end_matches('0').trim_end_matches('.'))
}

/// The first `max_chars` characters of `s`, for messages.
pub fn clip(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars).and_then(|(i, _)| s.split_at_checked(i)) {
        Some((head, _)) => head,
        None => s,
    }
}

/// The first `max_chars` characters of `s`, escaped for a one-line message (`char::escape_default`,
/// not `escape_debug`, whose Unicode tables the module would carry).
pub fn escaped(s: &str, max_chars: usize) -> String {
    // A loop, not `flat_map(..).collect()`: that collect's size-hint machinery is ~1 KB of module.
    let mut out = String::with_capacity(s.len().min(max_chars));
    for c in s.chars().take(max_chars) {
        for e in c.escape_default() {
            out.push(e);
        }
    }
    out
}

/// `s` as a JSON string, for messages (instead of `{:?}`, which pulls in Unicode tables).
pub fn quoted(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_str(&mut out, s);
    String::from_utf8_lossy(&out).into_owned()
}

/// Append the decimal digits of `n`.
pub fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Append a non-negative finite `x` with 6 decimals (rounded), e.g. a utilisation `0.625000`; other
/// values as `0`. (Without the float formatting machinery, which the filter does not need otherwise.)
pub fn write_decimal6(out: &mut Vec<u8>, x: f64) {
    let micros = if x.is_finite() && x > 0.0 { (x * 1e6).round().min(u64::MAX as f64) as u64 } else { 0 };
    write_u64(out, micros / 1_000_000);
    let fraction = micros % 1_000_000;
    out.push(b'.');
    let mut digits = [b'0'; 6];
    let mut f = fraction;
    for d in digits.iter_mut().rev() {
        *d = b'0' + (f % 10) as u8;
        f /= 10;
    }
    out.extend_from_slice(&digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Value {
        match parse(text).unwrap() {
            v @ Value::Number(_) => v,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_and_their_text() {
        let v = parse(r#" {"a": [1, -2.5e3, true, false, null], "b": {"c": "d\"\\\n\u00e9\ud83d\ude00"}} "#).unwrap();
        assert_eq!(
            v.get("a").and_then(|a| if let Value::Array(x) = a { x.first() } else { None }).unwrap().as_u64(),
            Some(1)
        );
        assert_eq!(v.get("b").unwrap().get("c").unwrap().as_str(), Some("d\"\\\né😀"));
        assert_eq!(v.to_string(), r#"{"a":[1,-2.5e3,true,false,null],"b":{"c":"d\"\\\u000aé😀"}}"#);
        assert_eq!(parse(&v.to_string()).unwrap(), v, "what it writes, it reads");
        assert_eq!(n("18446744073709551615").as_u64(), Some(u64::MAX));
        assert_eq!(n("18446744073709551616").as_u64(), None, "too big for u64: a float");
        assert_eq!(n("1.5").as_u64(), None);
        assert_eq!(n("-1").as_u64(), None);
        assert_eq!(n("1e2").as_f64(), Some(100.0));
        assert_eq!(n("0").as_u64(), Some(0));
        assert_eq!(parse("[]").unwrap(), Value::Array(vec![]));
        assert_eq!(parse("{}").unwrap(), Value::Object(vec![]));
    }

    #[test]
    fn what_is_not_json_says_where() {
        for (text, what, line, column) in [
            ("", "unexpected end", 1, 1),
            ("{", "unexpected end", 1, 2),
            ("{1}", "expected a key", 1, 2),
            ("[1", "unexpected end", 1, 3),
            ("{\"a\" 1}", "expected ':'", 1, 6),
            ("[1,]", "expected a value", 1, 4),
            ("[1 2]", "expected ',' or ']'", 1, 4),
            ("{\n \"a\": tru}", "expected a value", 2, 7),
            ("01", "bad number", 1, 1),
            ("[1.]", "bad number", 1, 2),
            ("-", "bad number", 1, 1),
            ("1e", "bad number", 1, 1),
            ("1e999", "number out of range", 1, 1),
            ("NaN", "expected a value", 1, 1),
            ("\"a", "unterminated string", 1, 3),
            ("\"\\x\"", "bad escape", 1, 3),
            ("\"\\u12\"", "bad escape", 1, 4),
            ("\"\\ud800\"", "lone surrogate", 1, 8),
            ("\"\\ud800\\u0041\"", "lone surrogate", 1, 14),
            ("\"\u{1}\"", "control character in a string", 1, 2),
            ("1 2", "trailing characters", 1, 3),
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!((err.what, err.line, err.column), (what, line, column), "{text:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(parse(&deep).unwrap_err().what, "nested too deeply");
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
        assert_eq!(parse("[1,").unwrap_err().to_string(), "unexpected end at line 1 column 4");
    }

    #[test]
    fn reads_what_serde_json_writes_and_serde_json_reads_what_it_writes() {
        let doc = serde_json::json!({"s": "tab\t quote\" ctrl\u{1} é 😀", "n": [0, 1, u64::MAX, -7, 0.1, 1e-300, 12345.678],
                                     "o": {"x": null, "y": [true, false]}});
        let text = serde_json::to_string(&doc).unwrap();
        let ours = parse(&text).unwrap();
        assert_eq!(parse(&ours.to_string()).unwrap(), ours);
        let back: serde_json::Value = serde_json::from_str(&ours.to_string()).unwrap();
        assert_eq!(back, doc);
        let mut out = Vec::new();
        write_str(&mut out, "tab\t quote\" ctrl\u{1} é 😀");
        assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), "tab\t quote\" ctrl\u{1} é 😀");
    }

    #[test]
    fn number_values_are_within_a_few_ulps_of_the_exact_ones() {
        let mut rng = tailweight_math::rng::Rng::new(5);
        let mut texts: Vec<String> = [
            "0",
            "-0",
            "1",
            "0.1",
            "1e-300",
            "1.5e300",
            "123456789012345678901234",
            "0.000000000000000000000000001234",
            "2.5e-10",
            "-7.25E+3",
            "1e400",
            "1e-400",
            "0.62",
            "1.4203",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for _ in 0..2_000 {
            let x = f64::from_bits(rng.next_u64() >> 2) * if rng.chance(0.5) { 1.0 } else { -1.0 };
            // Within a factor 1e8 of f64::MAX the approximation may overflow: nothing the filter reads.
            if x.is_finite() && x.abs() < 1e300 {
                texts.push(format!("{x:e}"));
                texts.push(serde_json::to_string(&x).unwrap());
            }
        }
        for text in texts {
            let exact: f64 = text.parse().unwrap();
            let ours = decimal_value(&text);
            if exact.is_infinite() || exact.abs() < 1e-300 {
                assert!(ours.is_infinite() == exact.is_infinite() || ours.abs() < 1e-290, "{text}: {ours} vs {exact}");
                continue;
            }
            let error = ((ours - exact) / exact).abs();
            assert!(error < 1e-14, "{text}: {ours} vs {exact} ({error:e})");
        }
        // What the aggregator writes (short decimals) comes out exact.
        for text in ["1.4203", "0.62", "17.5", "0.05", "123.456789", "1e-3", "0.333333333333"] {
            assert_eq!(decimal_value(text), text.parse::<f64>().unwrap(), "{text}");
        }
        assert_eq!(number("2.5"), Some(2.5));
        assert_eq!(number(" 2.5"), None);
        assert_eq!(number("NaN"), None);
        assert_eq!(number("1e999"), None);
    }

    #[test]
    fn integers_and_decimals() {
        let mut out = Vec::new();
        for x in [0u64, 7, 10, 1_234_567_890, u64::MAX] {
            out.clear();
            write_u64(&mut out, x);
            assert_eq!(out, x.to_string().as_bytes());
        }
        for (x, text) in [
            (0.625, "0.625000"),
            (0.0, "0.000000"),
            (999.9999996, "1000.000000"),
            (1e-7, "0.000000"),
            (1.2345678, "1.234568"),
            (f64::NAN, "0.000000"),
            (-1.0, "0.000000"),
        ] {
            out.clear();
            write_decimal6(&mut out, x);
            assert_eq!(std::str::from_utf8(&out).unwrap(), text, "{x}");
        }
    }
}
