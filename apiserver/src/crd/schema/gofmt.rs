//! Upstream's text for field errors: `field.Error`'s constructors and Go's formatting of the
//! bad value (`%q` for strings, `%v` for numbers, `%#v` for maps and slices), so messages read
//! exactly as kube-apiserver prints them.

use serde_json::Value;

use crate::error::FieldError;

/// Go's `strconv.Quote`.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a `float64` (shortest digits; exponent form below 1e-4 and from 1e21 on is
/// JSON's rule, but `%v` switches at an exponent of 6 or more: `1e+06`).
pub(super) fn float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".to_owned()
        } else if f > 0.0 {
            "+Inf".to_owned()
        } else {
            "-Inf".to_owned()
        };
    }
    // Rust's `{:e}` gives the shortest round-tripping digits: `-1.2345e6`.
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = exp as usize + 1;
        if digits.len() <= point {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
    out
}

/// A JSON number as upstream's unstructured decoding holds it: `int64` when it is one, else
/// `float64`.
pub(super) fn number(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => float(n.as_f64().unwrap_or(0.0)),
    }
}

/// How `field.Error` prints a bad value: strings quoted, numbers and booleans bare, `null` as
/// `"null"`, maps and slices in Go's `%#v` form.
pub(super) fn bad_value(v: &Value) -> String {
    match v {
        Value::Null => quote("null"),
        Value::String(s) => quote(s),
        Value::Number(n) => number(n),
        Value::Bool(b) => b.to_string(),
        Value::Array(_) | Value::Object(_) => sharp_v(v),
    }
}

/// Go's `%#v` of a JSON value held as `interface{}`.
fn sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::String(s) => quote(s),
        Value::Number(n) => number(n),
        Value::Bool(b) => b.to_string(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(sharp_v).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", quote(k), sharp_v(&o[k.as_str()])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", items.join(", "))
        }
    }
}

fn with_detail(mut s: String, detail: &str) -> String {
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

/// `field.Required`.
pub(super) fn required(field: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueRequired",
        field: field.to_owned(),
        message: with_detail("Required value".to_owned(), detail),
    }
}

/// `field.Invalid` with the bad value already formatted.
pub(super) fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.to_owned(),
        message: with_detail(format!("Invalid value: {value}"), detail),
    }
}

/// `field.TypeInvalid` with the bad value already formatted.
pub(super) fn type_invalid(field: &str, value: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueTypeInvalid",
        field: field.to_owned(),
        message: with_detail(format!("Invalid value: {value}"), detail),
    }
}

/// `field.Forbidden`.
pub(super) fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueForbidden",
        field: field.to_owned(),
        message: with_detail("Forbidden".to_owned(), detail),
    }
}

/// `field.NotSupported` with the bad value already formatted.
pub(super) fn not_supported(field: &str, value: &str, supported: &[String]) -> FieldError {
    let quoted: Vec<String> = supported.iter().map(|s| quote(s)).collect();
    let detail = if quoted.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", quoted.join(", "))
    };
    FieldError {
        reason: "FieldValueNotSupported",
        field: field.to_owned(),
        message: with_detail(format!("Unsupported value: {value}"), &detail),
    }
}

/// `field.TooLong` (the detail counts bytes even where the limit is in characters, as
/// upstream).
pub(super) fn too_long(field: &str, max: i64) -> FieldError {
    FieldError {
        reason: "FieldValueTooLong",
        field: field.to_owned(),
        message: format!("Too long: may not be more than {max} bytes"),
    }
}

/// `field.TooMany`.
pub(super) fn too_many(field: &str, actual: i64, max: i64) -> FieldError {
    FieldError {
        reason: "FieldValueTooMany",
        field: field.to_owned(),
        message: format!("Too many: {actual}: must have at most {max} items"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn floats_print_as_go_percent_v() {
        for (f, want) in [
            (1.5, "1.5"),
            (2.0, "2"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (123456789.0, "1.23456789e+08"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1.8446744073709552e19, "1.8446744073709552e+19"),
        ] {
            assert_eq!(float(f), want, "{f}");
        }
    }

    #[test]
    fn bad_values_print_as_field_error_does() {
        assert_eq!(bad_value(&json!("a\"b")), r#""a\"b""#);
        assert_eq!(bad_value(&json!(null)), r#""null""#);
        assert_eq!(bad_value(&json!(3)), "3");
        assert_eq!(bad_value(&json!(true)), "true");
        assert_eq!(
            bad_value(&json!({"b": [1, "x"], "a": null})),
            r#"map[string]interface {}{"a":interface {}(nil), "b":[]interface {}{1, "x"}}"#
        );
    }
}
