//! Resource quantities read as floats (`"500m"` → 0.5, `"1Gi"` → 2^30): what the clients
//! that do arithmetic on requests and usage (the HPA controller, the metrics server, the
//! API server's request-vs-limit check) need; exact decimal handling lives in the API
//! server's `quantity` module.

/// A quantity's value in base units (cores, bytes), if it parses: decimal suffixes
/// `n u m k M G T P E`, binary `Ki … Ei`, and exponents (`1e3`).
pub fn to_f64(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

#[cfg(test)]
mod tests {
    use super::to_f64;

    #[test]
    fn suffixes_and_exponents() {
        assert_eq!(to_f64("250m"), Some(0.25));
        assert_eq!(to_f64("2"), Some(2.0));
        assert_eq!(to_f64("64Mi"), Some(64.0 * 1024.0 * 1024.0));
        assert_eq!(to_f64("250000000n"), Some(0.25));
        assert_eq!(to_f64("1e3"), Some(1000.0));
        assert_eq!(to_f64(" 1k "), Some(1000.0));
        assert_eq!(to_f64("x"), None);
        assert_eq!(to_f64("1Zi"), None);
    }
}
