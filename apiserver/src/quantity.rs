//! Resource quantities (`resource.Quantity`) as kube-apiserver v1.33 reads and writes them.
//!
//! Upstream decodes every quantity field of a request body with `ParseQuantity`
//! (`k8s.io/apimachinery/pkg/api/resource`): a malformed string fails the whole request, and
//! the value is written back in canonical form. This module reproduces that on strings:
//!
//! - [`Quantity::parse`] is `ParseQuantity`: an optional sign, digits with at most one
//!   decimal point, and a suffix — decimal SI (`n u m "" k M G T P E`), binary SI
//!   (`Ki Mi Gi Ti Pi Ei`) or a decimal exponent (`e3`, `E-2`). The value is exact (no floating
//!   point); non-zero values are rounded up (away from zero) to a multiple of 10⁻⁹, and binary
//!   SI magnitudes are capped at 2⁶³−1.
//! - [`Quantity::round_up_milli`] is `RoundUp(-3)`, which upstream's `SetDefaults_ResourceList`
//!   applies to every value of a `ResourceList` (requests, limits, capacities, quota, …), so
//!   `0.0001` there reads back as `1m` while an `emptyDir.sizeLimit` of `0.0001` is `100u`.
//! - [`Quantity`]'s `Display` is `Quantity.String()`/`MarshalJSON`: the format of the suffix
//!   that was parsed, with the largest suffix that keeps the mantissa an integer (`1.5` →
//!   `1500m`, `1000` → `1k`, `1.5Gi` → `1536Mi`, `1e3` → `1e3`). Binary SI falls back to
//!   decimal SI below 1024 or when the value is not an integer (`0.5Ki` → `512`).
//!
//! Two upstream quirks are kept on purpose, because clients see them:
//!
//! - When parsing takes upstream's int64 fast path and the input already "looks canonical",
//!   upstream keeps the input text and serializes it verbatim: `+1` stays `+1`, `1.100` stays
//!   `1.100`, `1E3` stays `1E3`, `3.Ki` stays `3.Ki` (see [`Quantity::parse`] for the exact
//!   test). `RoundUp(-3)` drops that text again when it changes the scale.
//! - Decimal SI has no suffix beyond `E` (10¹⁸): v1.33 then prints the mantissa without any
//!   suffix, so `1000E` reads back as `1` (fixed upstream after v1.33 by switching to an
//!   exponent).
//!
//! [`canonicalize`] applies all this to the quantity fields of the built-in kinds (`fields`).

mod fields;

pub use fields::canonicalize;

use std::cmp::Ordering;
use std::fmt;

/// Why a string is not a quantity; the texts are upstream's `ErrFormatWrong`, `ErrNumeric`
/// and `ErrSuffix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not have the shape of a quantity.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// The number has no digits.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is not one upstream knows.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// How a quantity is written: the kind of suffix it was parsed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `12e6`.
    DecimalExponent,
    /// `12Mi` (12 × 2²⁰).
    BinarySI,
    /// `12M` (12 × 10⁶).
    DecimalSI,
}

/// The largest magnitude a binary SI quantity may have: 2⁶³−1 (upstream's `maxAllowed`).
const MAX_BINARY: &[u8] = &[9, 2, 2, 3, 3, 7, 2, 0, 3, 6, 8, 5, 4, 7, 7, 5, 8, 0, 7];

/// Decimal SI suffixes by power of ten.
const DECIMAL_SUFFIXES: [(i64, &str); 10] = [
    (-9, "n"),
    (-6, "u"),
    (-3, "m"),
    (0, ""),
    (3, "k"),
    (6, "M"),
    (9, "G"),
    (12, "T"),
    (15, "P"),
    (18, "E"),
];

/// Binary SI suffixes by power of two.
const BINARY_SUFFIXES: [(i32, &str); 6] = [
    (10, "Ki"),
    (20, "Mi"),
    (30, "Gi"),
    (40, "Ti"),
    (50, "Pi"),
    (60, "Ei"),
];

/// A parsed quantity: `±digits × 10^exp` exactly, with the format to write it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    /// Whether the value is below zero (never set for zero).
    negative: bool,
    /// Decimal digits of the magnitude, most significant first, without leading zeros;
    /// empty for zero.
    digits: Vec<u8>,
    /// Power of ten the digits are scaled by.
    exp: i64,
    /// The format the value is written in.
    format: Format,
    /// The power of ten of upstream's int64 representation, when parsing took its fast path.
    fast_scale: Option<i64>,
    /// Text upstream keeps and writes back unchanged (its cached string).
    verbatim: Option<String>,
}

/// The pieces of a quantity string (upstream's `parseQuantityString`).
struct Scanned<'a> {
    positive: bool,
    /// Sign and number as written (leading zeros kept), without the suffix.
    value: &'a str,
    /// Integer digits without leading zeros (`"0"` when there are none).
    num: &'a str,
    /// Fraction digits.
    denom: &'a str,
    suffix: &'a str,
}

/// Splits a quantity string into sign, number and suffix, or fails when its shape is wrong.
fn scan(s: &str) -> Result<Scanned<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut positive = true;
    let mut pos = 0;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos == end {
        // Only a sign and zeros (or nothing at all after the sign): zero.
        return Ok(Scanned {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let int_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos == end {
        return Ok(Scanned {
            positive,
            value: s,
            num: &s[int_start..],
            denom: "",
            suffix: "",
        });
    }
    let num = if pos == int_start {
        "0"
    } else {
        &s[int_start..pos]
    };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let frac_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[frac_start..pos];
        if pos == end {
            return Ok(Scanned {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::Format);
    }
    Ok(Scanned {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// The base, exponent and format a suffix stands for (upstream's `interpret`).
fn interpret(suffix: &str) -> Option<(u32, i64, Format)> {
    if let Some(&(e, _)) = DECIMAL_SUFFIXES.iter().find(|(_, s)| *s == suffix) {
        return Some((10, e, Format::DecimalSI));
    }
    if let Some(&(e, _)) = BINARY_SUFFIXES.iter().find(|(_, s)| *s == suffix) {
        return Some((2, i64::from(e), Format::BinarySI));
    }
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    if rest.is_empty() {
        return None;
    }
    // Go's strconv.ParseInt(rest, 10, 64) accepts the same texts as i64's FromStr (an
    // optional sign, then digits); upstream then converts to int32, truncating.
    let parsed: i64 = rest.parse().ok()?;
    Some((10, i64::from(parsed as i32), Format::DecimalExponent))
}

/// The digits of `s` as values 0–9, leading zeros removed.
fn digit_values(s: &str) -> Vec<u8> {
    s.bytes()
        .skip_while(|&c| c == b'0')
        .map(|c| c - b'0')
        .collect()
}

impl Quantity {
    /// Zero, as upstream's zero value (`"0"`).
    pub fn zero() -> Self {
        Quantity {
            negative: false,
            digits: Vec::new(),
            exp: 0,
            format: Format::DecimalSI,
            fast_scale: Some(0),
            verbatim: None,
        }
    }

    /// Parses `s` as upstream's `ParseQuantity` does (no surrounding whitespace allowed;
    /// JSON decoding trims it first, see [`Quantity::from_json`]).
    ///
    /// Like upstream, the input text itself is kept as the serialized form when parsing took
    /// the int64 fast path (decimal: at most 18 digits and a power of ten ≥ −9; binary: no
    /// fraction and few enough digits for the suffix) and
    /// - decimal: the power of ten is a multiple of 3, the digits do not end in `000` and do
    ///   not start with `0`;
    /// - binary: the integer is not a multiple of 8.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::Format);
        }
        if s == "0" {
            let mut zero = Quantity::zero();
            zero.verbatim = Some(s.to_owned());
            return Ok(zero);
        }
        let sc = scan(s)?;
        let (base, exponent, format) = interpret(sc.suffix).ok_or(QuantityError::Suffix)?;
        let num_len = sc.num.len() as i64;
        let denom_len = sc.denom.len() as i64;
        let fast = match format {
            // At most 18 digits, and no finer than nano.
            Format::DecimalExponent | Format::DecimalSI => {
                num_len + denom_len <= 18 && exponent - denom_len >= -9
            }
            // No fraction, and 15 − digits − exponent·3/10 − 1 ≥ 0: 11 digits for Ki, 8 for
            // Mi, 5 for Gi, 2 for Ti, none for Pi and Ei.
            Format::BinarySI => denom_len == 0 && num_len + exponent * 3 / 10 <= 14,
        };
        let mut digits = digit_values(sc.num);
        digits.extend(sc.denom.bytes().map(|c| c - b'0'));
        if digits.first() == Some(&0) {
            digits = digits.into_iter().skip_while(|&d| d == 0).collect();
        }
        let mut q = Quantity {
            negative: !sc.positive,
            digits,
            exp: -denom_len,
            format,
            fast_scale: None,
            verbatim: None,
        };
        if base == 10 {
            q.exp += exponent;
        } else {
            q.mul_pow2(exponent);
        }
        if fast {
            q.fast_scale = Some(if base == 10 { q.exp } else { 0 });
            let keep = if base == 2 {
                // The integer (before the suffix) is not a multiple of 8.
                sc.num
                    .bytes()
                    .rev()
                    .take(3)
                    .fold((0u32, 1u32), |(acc, mul), c| {
                        (acc + u32::from(c - b'0') * mul, mul * 10)
                    })
                    .0
                    % 8
                    != 0
            } else {
                let shifted = format!("{}{}", sc.num, sc.denom);
                q.exp % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
            };
            if keep {
                q.verbatim = Some(s.to_owned());
            }
        } else {
            if !sc.value.bytes().any(|c| c.is_ascii_digit()) {
                return Err(QuantityError::Numeric);
            }
            q.round_up_to(-9);
            if format == Format::BinarySI {
                if cmp_magnitude(&q.digits, q.exp, MAX_BINARY, 0) == Ordering::Greater {
                    q.digits = MAX_BINARY.to_vec();
                    q.exp = 0;
                }
                if !q.is_zero() && cmp_magnitude(&q.digits, q.exp, &[1], 0) == Ordering::Less {
                    q.format = Format::DecimalSI;
                }
            }
        }
        if q.is_zero() {
            q.negative = false;
        }
        Ok(q)
    }

    /// Decodes a quantity from its JSON form as upstream's `UnmarshalJSON` does: a string
    /// (surrounding whitespace ignored) or a bare number (its text); `null` is zero.
    ///
    /// Upstream trims the raw JSON text between the quotes without unescaping it, so a
    /// string that JSON can only carry escaped (a control character such as `\t` or `\n`, a
    /// quote or a backslash) never parses there; such strings are rejected here too.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, QuantityError> {
        match v {
            serde_json::Value::String(s) => {
                if s.chars().any(|c| c < ' ' || c == '"' || c == '\\') {
                    return Err(QuantityError::Format);
                }
                Quantity::parse(s.trim())
            }
            serde_json::Value::Number(n) => Quantity::parse(&n.to_string()),
            serde_json::Value::Null => Ok(Quantity::zero()),
            _ => Err(QuantityError::Format),
        }
    }

    /// The format the quantity is written in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Rounds the value away from zero to a multiple of 10⁻³ (upstream's `RoundUp(-3)`, as
    /// `SetDefaults_ResourceList` does for every value of a resource list).
    pub fn round_up_milli(&mut self) {
        if self.fast_scale.is_some_and(|s| s >= -3) {
            return; // upstream's int64 form is already at milli scale or coarser
        }
        self.verbatim = None;
        self.round_up_to(-3);
    }

    /// Rounds the magnitude up to a multiple of 10^`min_exp`.
    fn round_up_to(&mut self, min_exp: i64) {
        if self.is_zero() || self.exp >= min_exp {
            return;
        }
        let cut = min_exp - self.exp;
        let len = self.digits.len() as i64;
        self.exp = min_exp;
        if self.fast_scale.is_some() {
            self.fast_scale = Some(min_exp);
        }
        if cut >= len {
            // Every digit is below the new unit, and some digit is non-zero.
            self.digits = vec![1];
            return;
        }
        let keep = (len - cut) as usize;
        let dropped_nonzero = self.digits[keep..].iter().any(|&d| d != 0);
        self.digits.truncate(keep);
        if dropped_nonzero {
            increment(&mut self.digits);
        }
    }

    /// Multiplies the magnitude by 2^`k` (`k` ≤ 60).
    fn mul_pow2(&mut self, k: i64) {
        if self.is_zero() || k <= 0 {
            return;
        }
        let factor = 1u128 << k.min(64);
        let mut carry = 0u128;
        for d in self.digits.iter_mut().rev() {
            let v = u128::from(*d) * factor + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        let mut front = Vec::new();
        while carry > 0 {
            front.push((carry % 10) as u8);
            carry /= 10;
        }
        front.reverse();
        front.append(&mut self.digits);
        self.digits = front;
    }

    /// Whether the value is a whole number.
    fn is_integer(&self) -> bool {
        if self.exp >= 0 {
            return true;
        }
        let frac = self.exp.unsigned_abs();
        let len = self.digits.len() as u64;
        if frac >= len {
            return self.is_zero();
        }
        self.digits[(len - frac) as usize..].iter().all(|&d| d == 0)
    }

    /// The magnitude as an integer; only for whole values that fit (binary SI values, which
    /// are at most 2⁶³−1).
    fn magnitude_u64(&self) -> Option<u64> {
        let mut v: u64 = 0;
        let int_len = (self.digits.len() as i64 + self.exp.min(0)).max(0) as usize;
        for &d in &self.digits[..int_len] {
            v = v.checked_mul(10)?.checked_add(u64::from(d))?;
        }
        for _ in 0..self.exp.max(0) {
            v = v.checked_mul(10)?;
        }
        Some(v)
    }

    /// The canonical form (upstream's `CanonicalizeBytes`), ignoring any verbatim text.
    fn canonical(&self) -> String {
        if self.is_zero() {
            return "0".to_owned();
        }
        let sign = if self.negative { "-" } else { "" };
        let mut format = self.format;
        if format == Format::BinarySI {
            let below_1024 =
                cmp_magnitude(&self.digits, self.exp, &[1, 0, 2, 4], 0) == Ordering::Less;
            match self.magnitude_u64() {
                Some(mut v) if !below_1024 && self.is_integer() => {
                    let mut power = 0;
                    while v >= 1024 && v % 1024 == 0 {
                        v /= 1024;
                        power += 10;
                    }
                    let suffix = BINARY_SUFFIXES
                        .iter()
                        .find(|(p, _)| *p == power)
                        .map_or("", |(_, s)| *s);
                    return format!("{sign}{v}{suffix}");
                }
                _ => format = Format::DecimalSI,
            }
        }
        // Move trailing zeros into the exponent, then lower the exponent to a multiple of 3.
        let zeros = self.digits.iter().rev().take_while(|&&d| d == 0).count();
        let mut mantissa: String = self.digits[..self.digits.len() - zeros]
            .iter()
            .map(|&d| char::from(b'0' + d))
            .collect();
        let mut exp = self.exp + zeros as i64;
        let pad = exp.rem_euclid(3);
        for _ in 0..pad {
            mantissa.push('0');
        }
        exp -= pad;
        let suffix = match format {
            Format::DecimalExponent if exp == 0 => String::new(),
            Format::DecimalExponent => format!("e{exp}"),
            // v1.33 has no decimal SI suffix past E and then writes no suffix at all.
            _ => DECIMAL_SUFFIXES
                .iter()
                .find(|(p, _)| *p == exp)
                .map_or("", |(_, s)| *s)
                .to_owned(),
        };
        format!("{sign}{mantissa}{suffix}")
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verbatim {
            Some(text) => f.write_str(text),
            None => f.write_str(&self.canonical()),
        }
    }
}

/// Adds one to a decimal digit string (most significant first).
fn increment(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == 9 {
            *d = 0;
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, 1);
}

/// Compares two non-negative values `a × 10^a_exp` and `b × 10^b_exp` whose digit strings
/// have no leading zeros.
fn cmp_magnitude(a: &[u8], a_exp: i64, b: &[u8], b_exp: i64) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        (false, false) => {}
    }
    // The power of ten just above the leading digit decides, then the digits in turn.
    let top = (a.len() as i64 + a_exp).cmp(&(b.len() as i64 + b_exp));
    if top != Ordering::Equal {
        return top;
    }
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (
            a.get(i).copied().unwrap_or(0),
            b.get(i).copied().unwrap_or(0),
        );
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

/// Parses `s` and returns the text upstream writes back for it.
pub fn canonical(s: &str) -> Result<String, QuantityError> {
    Ok(Quantity::parse(s)?.to_string())
}

#[cfg(test)]
mod tests;
