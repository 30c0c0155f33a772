//! Range checks shared by the scenario schema and the simulator's resolved settings: each
//! mistake is one line naming the field.

/// `value` if it is a number in lo..=hi.
pub fn number(field: &str, value: f64, lo: f64, hi: f64) -> Result<f64, String> {
    if lo <= value && value <= hi {
        Ok(value)
    } else {
        Err(format!("{field}: expected a number in {lo}..{hi}, got {value}"))
    }
}

/// `value` if it is in lo..=hi.
pub fn integer(field: &str, value: u64, lo: u64, hi: u64) -> Result<u64, String> {
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{field}: expected an integer in {lo}..{hi}, got {value}"))
    }
}

/// A finite number > 0 (or >= 0 with `zero_ok`) below 1e9: the simulator's own settings.
pub fn positive(field: &str, value: f64, zero_ok: bool) -> Result<(), String> {
    let ok = value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0)) && value < 1e9;
    if ok {
        Ok(())
    } else {
        let expected = if zero_ok { "a finite number >= 0" } else { "a finite number > 0" };
        Err(format!("{field}: expected {expected}, got {value}"))
    }
}

/// A (parser's) message on one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
