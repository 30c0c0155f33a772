//! JSON text into a `Value`: a recursive-descent parser that says where and why a text is not
//! JSON, and numbers read without the standard library's float parser.

use super::value::{JsonError, Number, Value};

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

/// Parse one JSON value (with optional whitespace around it).
pub fn parse(text: &str) -> Result<Value, JsonError> {
    let mut p = Parser::new(text);
    let value = p.value(0)?;
    p.end()?;
    Ok(value)
}

pub(super) struct Parser<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    /// At the first value of `text` (past any whitespace).
    pub(super) fn new(text: &'a str) -> Self {
        let mut p = Parser { bytes: text.as_bytes(), text, at: 0 };
        p.whitespace();
        p
    }

    fn error(&self, what: &'static str) -> JsonError {
        let before = &self.bytes[..self.at.min(self.bytes.len())];
        let line = 1 + before.iter().filter(|b| **b == b'\n').count();
        let column = 1 + before.iter().rev().take_while(|b| **b != b'\n').count();
        JsonError { line, column, what }
    }

    fn error_at(&self, at: usize, what: &'static str) -> JsonError {
        Parser { bytes: self.bytes, text: self.text, at }.error(what)
    }

    /// Nothing but whitespace is left.
    pub(super) fn end(&mut self) -> Result<(), JsonError> {
        self.whitespace();
        if self.at != self.bytes.len() {
            return Err(self.error("trailing characters"));
        }
        Ok(())
    }

    pub(super) fn peek(&self) -> Option<u8> {
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

    pub(super) fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        match self.peek() {
            None => Err(self.error("unexpected end")),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'"') => self.string().map(Value::String),
            Some(b'[') => {
                self.enter(depth)?;
                let (mut items, mut first) = (Vec::new(), true);
                while self.next_item(&mut first)? {
                    items.push(self.value(depth + 1)?);
                }
                Ok(Value::Array(items))
            }
            Some(b'{') => {
                self.enter(depth)?;
                let (mut members, mut first) = (Vec::new(), true);
                let mut key = String::new();
                while self.next_key(&mut first, &mut key)? {
                    members.push((std::mem::take(&mut key), self.value(depth + 1)?));
                }
                Ok(Value::Object(members))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a value")),
        }
    }

    /// The text of the value here, checked (see `skip`).
    pub(super) fn skipped(&mut self, depth: usize) -> Result<&'a str, JsonError> {
        let from = self.at;
        self.skip(depth)?;
        Ok(self.text_between(from, self.at))
    }

    /// Check the value here without keeping it (no tree; strings not copied).
    pub(super) fn skip(&mut self, depth: usize) -> Result<(), JsonError> {
        match self.peek() {
            Some(b'"') => self.string_into(None),
            Some(b'[') => {
                self.enter(depth)?;
                let mut first = true;
                while self.next_item(&mut first)? {
                    self.skip(depth + 1)?;
                }
                Ok(())
            }
            Some(b'{') => {
                self.enter(depth)?;
                let mut first = true;
                while self.next_key_into(&mut first, None)? {
                    self.skip(depth + 1)?;
                }
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => self.number_checked().map(drop),
            _ => self.value(depth).map(drop),
        }
    }

    /// Into the array or object that starts here (at depth `depth`), past its bracket.
    pub(super) fn enter(&mut self, depth: usize) -> Result<(), JsonError> {
        if depth >= MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.at += 1;
        self.whitespace();
        Ok(())
    }

    /// Whether the array entered has another item (then the parser is at it); `first` starts true.
    pub(super) fn next_item(&mut self, first: &mut bool) -> Result<bool, JsonError> {
        self.next(first, b']')
    }

    fn next(&mut self, first: &mut bool, close: u8) -> Result<bool, JsonError> {
        if std::mem::take(first) {
            if self.peek() == Some(close) {
                self.at += 1;
                return Ok(false);
            }
            return Ok(true);
        }
        self.whitespace();
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                self.whitespace();
                Ok(true)
            }
            Some(c) if c == close => {
                self.at += 1;
                Ok(false)
            }
            None => Err(self.error("unexpected end")),
            _ if close == b']' => Err(self.error("expected ',' or ']'")),
            _ => Err(self.error("expected ',' or '}'")),
        }
    }

    /// Whether the object entered has another member: then its key is in `key` and the parser at
    /// its value.
    pub(super) fn next_key(&mut self, first: &mut bool, key: &mut String) -> Result<bool, JsonError> {
        key.clear();
        self.next_key_into(first, Some(key))
    }

    fn next_key_into(&mut self, first: &mut bool, key: Option<&mut String>) -> Result<bool, JsonError> {
        if !self.next(first, b'}')? {
            return Ok(false);
        }
        match self.peek() {
            Some(b'"') => {}
            None => return Err(self.error("unexpected end")),
            Some(_) => return Err(self.error("expected a key")),
        }
        self.string_into(key)?;
        self.whitespace();
        if self.peek() != Some(b':') {
            return Err(self.error("expected ':'"));
        }
        self.at += 1;
        self.whitespace();
        Ok(true)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        let mut out = String::new();
        self.string_into(Some(&mut out))?;
        Ok(out)
    }

    /// The string here, appended to `out` (or only checked).
    fn string_into(&mut self, mut out: Option<&mut String>) -> Result<(), JsonError> {
        self.at += 1;
        let mut run = self.at;
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    if let Some(out) = out.as_deref_mut() {
                        out.push_str(self.text_between(run, self.at));
                    }
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    if let Some(out) = out.as_deref_mut() {
                        out.push_str(self.text_between(run, self.at));
                    }
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
                    if let Some(out) = out.as_deref_mut() {
                        out.push(c);
                    }
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
        let (text, value, integer) = self.number_checked()?;
        let integer = if integer { text.parse::<u64>().ok() } else { None };
        Ok(Value::Number(Number { text: text.to_string(), value, integer }))
    }

    /// The number here: its text, its value, and whether it is written as a non-negative integer.
    fn number_checked(&mut self) -> Result<(&'a str, f64, bool), JsonError> {
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
        Ok((text, value, integer))
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
    match p.number_checked() {
        Ok((_, value, _)) if p.at == text.len() => Some(value),
        _ => None,
    }
}

/// The value of a JSON number's text (already checked against the grammar): its first 19
/// significant digits as an integer, times a power of ten. Within a few ulps of the correctly
/// rounded value (below 1e300 in magnitude: nearer f64::MAX it may overflow to infinity, which is
/// refused as out of range), which is all the filter needs (weights, ratios, times);
/// `str::parse::<f64>` would be exact but carries ~14 KB of code and tables.
pub(super) fn decimal_value(text: &str) -> f64 {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    // The exponent's letter is ASCII, so its index splits the text (`get`: no panic path, whose
    // message formatting would add kilobytes to the filter).
    let at = rest.bytes().position(|b| matches!(b, b'e' | b'E')).unwrap_or(rest.len());
    let digits_part = rest.get(..at).unwrap_or(rest);
    let exponent_part = rest.get(at + 1..).unwrap_or("");
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
