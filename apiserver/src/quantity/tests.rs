//! Parsing and formatting, checked against the tables of upstream's `quantity_test.go`
//! (apimachinery v0.33) and the behaviour of its parser traced by hand.

use super::*;

/// The value of `q` as (signed mantissa without trailing zeros, power of ten).
fn value(q: &Quantity) -> (i128, i64) {
    if q.is_zero() {
        return (0, 0);
    }
    let zeros = q.digits.iter().rev().take_while(|&&d| d == 0).count();
    let m = q.digits[..q.digits.len() - zeros]
        .iter()
        .fold(0i128, |acc, &d| acc * 10 + i128::from(d));
    (if q.negative { -m } else { m }, q.exp + zeros as i64)
}

/// `m × 10^e` normalized as [`value`] does.
fn norm(mut m: i128, mut e: i64) -> (i128, i64) {
    if m == 0 {
        return (0, 0);
    }
    while m % 10 == 0 {
        m /= 10;
        e += 1;
    }
    (m, e)
}

use Format::{BinarySI as Bin, DecimalExponent as Exp, DecimalSI as Dec};

/// Upstream's `TestQuantityParse` table: input → value and format.
const PARSE: &[(&str, i128, i64, Format)] = &[
    ("0", 0, 0, Dec),
    ("0n", 0, 0, Dec),
    ("0u", 0, 0, Dec),
    ("0m", 0, 0, Dec),
    ("0Ki", 0, 0, Bin),
    ("0k", 0, 0, Dec),
    ("0Mi", 0, 0, Bin),
    ("0M", 0, 0, Dec),
    ("0Gi", 0, 0, Bin),
    ("0G", 0, 0, Dec),
    ("0Ti", 0, 0, Bin),
    ("0T", 0, 0, Dec),
    ("1", 1, 0, Dec),
    ("1Ki", 1024, 0, Bin),
    ("8Ki", 8 * 1024, 0, Bin),
    ("7Mi", 7 << 20, 0, Bin),
    ("6Gi", 6 << 30, 0, Bin),
    ("5Ti", 5 << 40, 0, Bin),
    ("4Pi", 4 << 50, 0, Bin),
    ("3Ei", 3 << 60, 0, Bin),
    ("10Ti", 10 << 40, 0, Bin),
    ("100Ti", 100 << 40, 0, Bin),
    ("5n", 5, -9, Dec),
    ("4u", 4, -6, Dec),
    ("3m", 3, -3, Dec),
    ("9", 9, 0, Dec),
    ("8k", 8, 3, Dec),
    ("50k", 5, 4, Dec),
    ("7M", 7, 6, Dec),
    ("6G", 6, 9, Dec),
    ("5T", 5, 12, Dec),
    ("40T", 4, 13, Dec),
    ("300T", 3, 14, Dec),
    ("2P", 2, 15, Dec),
    ("1E", 1, 18, Dec),
    ("1E-3", 1, -3, Exp),
    ("1e3", 1, 3, Exp),
    ("1E6", 1, 6, Exp),
    ("1e9", 1, 9, Exp),
    ("1E12", 1, 12, Exp),
    ("1e15", 1, 15, Exp),
    ("1E18", 1, 18, Exp),
    ("1e14", 1, 14, Exp),
    ("1e13", 1, 13, Exp),
    ("100.035k", 100035, 0, Dec),
    ("0.001", 1, -3, Dec),
    ("0.0005k", 5, -1, Dec),
    ("0.005", 5, -3, Dec),
    ("0.05", 5, -2, Dec),
    ("0.5", 5, -1, Dec),
    ("0.00050k", 5, -1, Dec),
    ("0.00500", 5, -3, Dec),
    ("0.05000", 5, -2, Dec),
    ("0.50000", 5, -1, Dec),
    ("0.5e0", 5, -1, Exp),
    ("0.5e-1", 5, -2, Exp),
    ("0.5e-2", 5, -3, Exp),
    ("10.035M", 10035, 3, Dec),
    ("1.2e3", 12, 2, Exp),
    ("1.3E+6", 13, 5, Exp),
    ("1.40e9", 14, 8, Exp),
    ("1.53E12", 153, 10, Exp),
    ("1.6e15", 16, 14, Exp),
    ("1.7E18", 17, 17, Exp),
    ("9.01", 901, -2, Dec),
    ("8.1k", 81, 2, Dec),
    ("7.123456M", 7123456, 0, Dec),
    ("6.987654321G", 6987654321, 0, Dec),
    ("5.444T", 5444, 9, Dec),
    ("40.1T", 401, 11, Dec),
    ("300.2T", 3002, 11, Dec),
    ("2.5P", 25, 14, Dec),
    ("1.01E", 101, 16, Dec),
    // Things that saturate or round.
    ("3.001n", 4, -9, Dec),
    ("1.1E-9", 2, -9, Exp),
    ("0.0000000001", 1, -9, Dec),
    ("0.0000000005", 1, -9, Dec),
    ("0.00000000050", 1, -9, Dec),
    ("0.5e-9", 1, -9, Exp),
    ("0.9n", 1, -9, Dec),
    ("0.00000012345", 124, -9, Dec),
    ("0.00000012354", 124, -9, Dec),
    ("9Ei", i64::MAX as i128, 0, Bin),
    ("9223372036854775807Ki", i64::MAX as i128, 0, Bin),
    ("12E", 12, 18, Dec),
    // Fractional binary.
    ("100.035Ki", 10243584, -2, Bin),
    ("0.5Mi", 524288, 0, Bin),
    ("0.05Gi", 536870912, -1, Bin),
    ("0.025Ti", 274877906944, -1, Bin),
    // "Things written by trolls".
    ("0.000000000001Ki", 2, -9, Dec),
    (".001", 1, -3, Dec),
    (".0001k", 100, -3, Dec),
    ("1.", 1, 0, Dec),
    ("1.G", 1, 9, Dec),
];

#[test]
fn parse_values_and_formats_match_upstream() {
    for &(input, m, e, format) in PARSE {
        let q = Quantity::parse(input).unwrap_or_else(|err| panic!("{input}: {err}"));
        assert_eq!(value(&q), norm(m, e), "{input}");
        assert_eq!(q.format(), format, "{input}");
        // Upstream's test also parses every entry with an explicit sign.
        let neg = Quantity::parse(&format!("-{input}")).unwrap();
        assert_eq!(value(&neg), norm(-m, e), "-{input}");
        assert_eq!(neg.format(), format, "-{input}");
        let pos = Quantity::parse(&format!("+{input}")).unwrap();
        assert_eq!(value(&pos), norm(m, e), "+{input}");
        assert_eq!(pos.format(), format, "+{input}");
    }
}

#[test]
fn malformed_quantities_are_rejected_with_upstreams_errors() {
    let cases = [
        ("", QuantityError::Format),
        ("1.1.M", QuantityError::Format),
        ("1+1.0M", QuantityError::Format),
        ("0.1mi", QuantityError::Suffix),
        ("0.1am", QuantityError::Format),
        ("aoeu", QuantityError::Format),
        (".5i", QuantityError::Suffix),
        ("1i", QuantityError::Suffix),
        ("-3.01i", QuantityError::Suffix),
        ("-3.01e-", QuantityError::Suffix),
        (" 1", QuantityError::Format),
        ("1 ", QuantityError::Format),
        ("1 core", QuantityError::Format),
        ("32MMi", QuantityError::Suffix),
        ("1e", QuantityError::Suffix),
        ("1k3", QuantityError::Suffix),
        ("1e99999999999999999999", QuantityError::Suffix),
        ("25%", QuantityError::Format),
        ("1Gb", QuantityError::Format),
        ("½", QuantityError::Format),
        // The slow path needs digits; the fast path reads "no digits" as zero.
        (".e-10", QuantityError::Numeric),
        ("Pi", QuantityError::Numeric),
        ("-.Ei", QuantityError::Numeric),
    ];
    for (input, want) in cases {
        assert_eq!(Quantity::parse(input), Err(want), "{input:?}");
    }
    assert_eq!(
        QuantityError::Format.to_string(),
        "quantities must match the regular expression \
         '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(
        QuantityError::Numeric.to_string(),
        "unable to parse numeric part of quantity"
    );
    assert_eq!(
        QuantityError::Suffix.to_string(),
        "unable to parse quantity's suffix"
    );
}

/// Upstream's `TestQuantityString`: the canonical text, which parses back to itself (and is
/// kept verbatim), and an alternate spelling that is canonicalized to it.
#[test]
fn canonical_strings_match_upstream() {
    let table: &[(&str, &str)] = &[
        ("1Gi", "1024Mi"),
        ("300Mi", "307200Ki"),
        ("6Ki", ""),
        ("1001Gi", "1025024Mi"),
        ("1Ti", "1024Gi"),
        ("5", "5000m"),
        ("500m", "0.5"),
        ("1G", "1000M"),
        ("1G", "0.001T"),
        ("1m", "1000u"),
        ("80m", ""),
        ("1080m", "1.08"),
        ("1080m", "1080000000n"),
        ("300M", ""),
        ("1T", ""),
        ("1234567M", ""),
        ("1234567m", ""),
        ("3k", ""),
        ("1025", ""),
        ("0", "00"),
        ("1e9", ".001e12"),
        ("1e-3", "0.001e0"),
        ("1e-9", "1000e-12"),
        ("80e-3", ""),
        ("300e6", ""),
        ("1e12", ""),
        ("1e3", ""),
        ("3e3", ""),
        ("1n", ""),
        ("80n", ""),
        ("1080n", ""),
        ("1u", ""),
        ("80u", ""),
        ("1080u", ""),
    ];
    for &(canonical, alternate) in table {
        let q = Quantity::parse(canonical).unwrap();
        assert_eq!(q.to_string(), canonical);
        assert_eq!(
            q.verbatim.as_deref(),
            Some(canonical),
            "{canonical} keeps its text"
        );
        assert_eq!(q.canonical(), canonical, "{canonical} is canonical");
        if q.is_zero() {
            continue;
        }
        let neg = Quantity::parse(&format!("-{canonical}")).unwrap();
        assert_eq!(neg.to_string(), format!("-{canonical}"));
        if alternate.is_empty() {
            continue;
        }
        let q = Quantity::parse(alternate).unwrap();
        assert_eq!(q.verbatim, None, "{alternate} is not canonical");
        assert_eq!(q.to_string(), canonical, "{alternate}");
    }
}

/// Upstream's `TestQuantityParseEmit`, with and without a minus sign.
#[test]
fn parse_then_emit_matches_upstream() {
    let table = [
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
    ];
    for (input, want) in table {
        assert_eq!(canonical(input).unwrap(), want, "{input}");
        assert_eq!(
            canonical(&format!("-{input}")).unwrap(),
            format!("-{want}"),
            "-{input}"
        );
    }
}

#[test]
fn everyday_values() {
    let table = [
        ("0.5", "500m"),
        ("1000m", "1"),
        ("1.5", "1500m"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("2000000", "2M"),
        ("1.5Gi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1024Mi", "1Gi"),
        ("1.5Ki", "1536"),
        ("0.5Ki", "512"),
        ("2048Ki", "2Mi"),
        ("1536Ki", "1536Ki"),
        ("1e3", "1e3"),
        ("1000e0", "1e3"),
        ("1.5e0", "1500e-3"),
        ("100M", "100M"),
        ("0", "0"),
        ("-1", "-1"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("0.0001", "100u"),
        ("250m", "250m"),
        ("0.25", "250m"),
        ("128974848", "128974848"),
        ("129e6", "129e6"),
        ("123Mi", "123Mi"),
        ("1.0001Ki", "1024102400u"),
        ("7Ei", "7Ei"),
        ("8Ei", "9223372036854775807"),
        ("10000P", "10E"),
        ("1.5e300", "1500e297"),
        ("1e-1000000000", "1e-9"),
        ("1e2000000000", "100e1999999998"),
    ];
    for (input, want) in table {
        assert_eq!(canonical(input).unwrap(), want, "{input}");
    }
}

/// Upstream keeps the input text when its int64 fast path thinks it is canonical.
#[test]
fn upstream_keeps_some_non_canonical_spellings() {
    let kept = [
        "+1", "01", "1.100", "1.500k", "12.345k", "100.m", "1E3", "1e+3", "100e0", "3.Ki", "+3Ki",
        "03Ki", "1025Ki",
    ];
    for input in kept {
        assert_eq!(canonical(input).unwrap(), input, "{input}");
    }
    // ... but not when the digits end in 000, start with 0, or the scale is not a multiple
    // of three, or (binary) the number is a multiple of 8.
    let rewritten = [
        ("1.000", "1"),
        ("1.0", "1"),
        ("0.100", "100m"),
        ("+1000", "1k"),
        ("+1.5", "1500m"),
        ("+8Ki", "8Ki"),
        ("+1024Ki", "1Mi"),
    ];
    for (input, want) in rewritten {
        assert_eq!(canonical(input).unwrap(), want, "{input}");
    }
}

#[test]
fn upstream_v1_33_oddities() {
    // A number with no digits on the fast path is zero.
    for input in [".", "-", "+", "-.", "Ki", "m", "k", "e5", "E"] {
        assert_eq!(canonical(input).unwrap(), "0", "{input:?}");
    }
    // Decimal SI has no suffix past E: v1.33 drops the suffix altogether.
    assert_eq!(canonical("1000E").unwrap(), "1");
    assert_eq!(canonical("5000E").unwrap(), "5");
    // The exponent is truncated to 32 bits.
    assert_eq!(canonical("1e4294967297").unwrap(), "10");
}

#[test]
fn json_values_decode_as_upstream() {
    use serde_json::json;
    let cases = [
        (json!(" 1"), "1"),
        (json!("1 "), "1"),
        (json!(1), "1"),
        (json!(10), "10"),
        (json!(-1), "-1"),
        (json!(1.5), "1500m"),
        (json!(0.5), "500m"),
        (json!(2147483648_u64), "2147483648"),
        (json!("\u{a0}100m "), "100m"),
        (serde_json::Value::Null, "0"),
    ];
    for (v, want) in cases {
        assert_eq!(Quantity::from_json(&v).unwrap().to_string(), want, "{v}");
    }
    // JSON escapes are not undone upstream: "\t2Gi" is a backslash, a t, then 2Gi there.
    for v in [
        json!(true),
        json!({}),
        json!([]),
        json!(""),
        json!("\t2Gi"),
        json!("2Gi\n"),
        json!("\"1\""),
    ] {
        assert_eq!(Quantity::from_json(&v), Err(QuantityError::Format), "{v}");
    }
}

/// `RoundUp(-3)`, as `SetDefaults_ResourceList` applies it.
#[test]
fn resource_lists_round_up_to_milli() {
    let table = [
        ("9.01", "9010m"),
        ("-9.01", "-9010m"),
        ("0.0001", "1m"),
        ("-0.0001", "-1m"),
        ("0.0000000001", "1m"),
        ("1.5n", "1m"),
        ("1001u", "2m"),
        ("1000u", "1m"),
        ("1.100m", "2m"),
        ("100m", "100m"),
        ("+1", "+1"),
        ("1.100", "1.100"),
        ("0.0005k", "500m"),
        ("1.0001Ki", "1024103m"),
        ("0.000000000001Ki", "1m"),
        ("1.5Gi", "1536Mi"),
        ("0", "0"),
    ];
    for (input, want) in table {
        let mut q = Quantity::parse(input).unwrap();
        q.round_up_milli();
        assert_eq!(q.to_string(), want, "{input}");
    }
}
