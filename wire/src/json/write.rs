//! Values and strings as JSON text, and the short texts messages quote, without the float
//! formatting machinery (which the filter does not need otherwise).

use super::value::Value;
use std::fmt;

/// The value as JSON text (numbers as written), for messages.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Vec::new();
        write_value(&mut out, self);
        f.write_str(&String::from_utf8_lossy(&out))
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
    let mut out = Vec::new();
    if x < 0.0 {
        out.push(b'-');
    }
    if x.is_infinite() {
        out.extend_from_slice(b"inf");
    } else {
        // Trailing zeros go, then the point if nothing is left after it.
        write_decimal6(&mut out, x.abs());
        while out.last() == Some(&b'0') {
            out.pop();
        }
        if out.last() == Some(&b'.') {
            out.pop();
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

/// Append a member's `key` (its separator, name and colon, e.g. `,"requests":`) and the integer `n`.
pub fn write_u64_member(out: &mut Vec<u8>, key: &[u8], n: u64) {
    out.extend_from_slice(key);
    write_u64(out, n);
}

/// Append a member's `key` (as `write_u64_member`'s) and the string `s`.
pub fn write_str_member(out: &mut Vec<u8>, key: &[u8], s: &str) {
    out.extend_from_slice(key);
    write_str(out, s);
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
