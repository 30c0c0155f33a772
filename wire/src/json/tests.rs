use super::parse::decimal_value;
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

#[test]
fn numbers_for_messages_are_short() {
    for (x, text) in [
        (0.0, "0"),
        (-0.0, "0"),
        (7.0, "7"),
        (100.0, "100"),
        (0.5, "0.5"),
        (1.4203, "1.4203"),
        (-2.25, "-2.25"),
        (1e-7, "0"),
        (123.4567891, "123.456789"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
    ] {
        assert_eq!(number_text(x), text, "{x}");
    }
    // Whatever the value, what `{:.6}` prints with its trailing zeros (and a bare point) cut.
    let mut rng = tailweight_math::rng::Rng::new(11);
    for _ in 0..2_000 {
        let x = (rng.next_f64() - 0.5) * 10f64.powi(rng.below(12) as i32 - 4);
        let six = format!("{:.6}", x.abs());
        let cut = six.trim_end_matches('0').trim_end_matches('.');
        let sign = if x < 0.0 { "-" } else { "" };
        assert_eq!(number_text(x), format!("{sign}{cut}"), "{x}");
    }
}
