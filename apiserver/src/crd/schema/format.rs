//! String formats a CRD schema may check (`apiextensions-apiserver/pkg/apiserver/validation/
//! formats.go`: the formats kube-openapi's `strfmt.Default` knows that CRDs keep; any other
//! `format`, such as `int32` or `float`, is stripped before validation and checks nothing).
//! Each check follows the upstream validator named in its comment.

use std::net::Ipv6Addr;
use std::sync::LazyLock;

use regex::Regex;

/// Whether `s` is valid for `format`; `None` when the format checks nothing (unknown, or not
/// one CRDs keep). Names compare without dashes (`date-time` is `datetime`), as go-openapi.
pub(super) fn check(format: &str, s: &str) -> Option<bool> {
    let name = format.replace('-', "");
    Some(match name.as_str() {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => is_ipv4(s),
        "ipv6" => s.contains(':') && parse_ip(s),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" => matches(&UUID, s),
        "uuid3" => matches(&UUID3, s),
        "uuid4" => matches(&UUID4, s),
        "uuid5" => matches(&UUID5, s),
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => is_credit_card(s),
        "ssn" => s.len() == 11 && matches(&SSN, s),
        "hexcolor" => matches(&HEXCOLOR, s),
        "rgbcolor" => matches(&RGBCOLOR, s),
        "byte" => matches(&BASE64, s),
        "password" => true,
        "date" => is_date(s),
        "duration" => is_duration(s),
        "datetime" => is_date_time(s),
        _ => return None,
    })
}

fn re(p: &str) -> Option<Regex> {
    Regex::new(p).ok()
}

fn matches(r: &Option<Regex>, s: &str) -> bool {
    r.as_ref().is_some_and(|r| r.is_match(s))
}

static UUID: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
static UUID3: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID4: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static UUID5: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static SSN: LazyLock<Option<Regex>> = LazyLock::new(|| re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static HEXCOLOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGBCOLOR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let c = r"(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])";
    re(&format!(r"^rgb\(\s*{c}\s*,\s*{c}\s*,\s*{c}\s*\)$"))
});
static BASE64: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
});
static HOSTNAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(concat!(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|",
        r"([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}",
        r"([a-zA-Z\p{L}]){2,63})$"
    ))
});
static TIME_OF_DAY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
});
static DURATION_PART: LazyLock<Option<Regex>> = LazyLock::new(|| re(r"((\d+)\s*([A-Za-zµ]+))"));

/// strfmt `IsHostname`.
fn is_hostname(s: &str) -> bool {
    matches(&HOSTNAME, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// Go's `net.ParseIP` accepting an IPv4 with leading zeros (`ParseIPSloppy`).
fn parse_ipv4_sloppy(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 3
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u16>().is_ok_and(|n| n <= 255)
        })
}

fn parse_ip(s: &str) -> bool {
    parse_ipv4_sloppy(s) || s.parse::<Ipv6Addr>().is_ok()
}

/// strfmt `isIPv4`: any IP (also an IPv6 with an embedded IPv4) that has a dot.
fn is_ipv4(s: &str) -> bool {
    s.contains('.') && parse_ip(s)
}

/// `netutils.ParseCIDRSloppy`.
fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let max = if parse_ipv4_sloppy(ip) {
        32
    } else if ip.parse::<Ipv6Addr>().is_ok() {
        128
    } else {
        return false;
    };
    !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|b| b.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|n| n <= max)
}

/// Go's `net.ParseMAC`: 6, 8 or 20 octets as `xx:xx:…`, `xx-xx-…` or `xxxx.xxxx.…`.
fn is_mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let octets_ok = |n: usize| n == 6 || n == 8 || n == 20;
    if s.len() < 14 {
        return false;
    }
    for sep in [':', '-'] {
        if s.as_bytes().get(2) == Some(&(sep as u8)) {
            let parts: Vec<&str> = s.split(sep).collect();
            return octets_ok(parts.len()) && parts.iter().all(|p| hex(p, 2));
        }
    }
    if s.as_bytes().get(4) == Some(&b'.') {
        let parts: Vec<&str> = s.split('.').collect();
        return octets_ok(parts.len() * 2) && parts.iter().all(|p| hex(p, 4));
    }
    false
}

/// govalidator `IsISBN(s, 10)`.
fn is_isbn10(s: &str) -> bool {
    let d: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'-')
        .collect();
    if d.len() != 10
        || !d[..9].iter().all(u8::is_ascii_digit)
        || !(d[9].is_ascii_digit() || d[9] == b'X')
    {
        return false;
    }
    let mut sum: u32 = (0..9)
        .map(|i| (i as u32 + 1) * u32::from(d[i] - b'0'))
        .sum();
    sum += 10
        * if d[9] == b'X' {
            10
        } else {
            u32::from(d[9] - b'0')
        };
    sum.is_multiple_of(11)
}

/// govalidator `IsISBN(s, 13)`.
fn is_isbn13(s: &str) -> bool {
    let d: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'-')
        .collect();
    if d.len() != 13 || !d.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = (0..12)
        .map(|i| [1, 3][i % 2] * u32::from(d[i] - b'0'))
        .sum();
    u32::from(d[12] - b'0') == (10 - sum % 10) % 10
}

static CREDIT_CARD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(concat!(
        r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|",
        r"3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$"
    ))
});

/// govalidator `IsCreditCard`: the digits match a card pattern and pass Luhn.
fn is_credit_card(s: &str) -> bool {
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    if !matches(&CREDIT_CARD, &digits) {
        return false;
    }
    let mut sum = 0;
    for (i, b) in digits.bytes().rev().enumerate() {
        let mut n = u32::from(b - b'0');
        if i % 2 == 1 {
            n *= 2;
            if n >= 10 {
                n = n % 10 + 1;
            }
        }
        sum += n;
    }
    sum.is_multiple_of(10)
}

/// Go's `time.Parse("2006-01-02", s)`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let p = &s[r];
        p.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| p.parse().ok())
            .flatten()
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400));
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// strfmt `IsDateTime`: a date, a `t`, and a time of day with a zone.
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(caps) = TIME_OF_DAY.as_ref().and_then(|r| r.captures(parts[1])) else {
        return false;
    };
    let g = |i: usize| caps.get(i).map_or("", |m| m.as_str());
    g(1) <= "23" && g(2) <= "59" && g(3) <= "59"
}

/// strfmt `ParseDuration`: Go's `time.ParseDuration`, else any `<digits><unit>` part with a
/// known unit (`3 days`, `2w`).
fn is_duration(s: &str) -> bool {
    if is_go_duration(s) {
        return true;
    }
    let Some(r) = DURATION_PART.as_ref() else {
        return false;
    };
    const UNITS: [&[&str]; 8] = [
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    r.captures_iter(s).any(|c| {
        let unit = c.get(3).map_or("", |m| m.as_str()).trim().to_lowercase();
        c.get(2).is_some_and(|n| n.as_str().parse::<i64>().is_ok())
            && UNITS.iter().any(|variants| {
                let last = variants.len() - 1;
                variants
                    .iter()
                    .enumerate()
                    .any(|(i, v)| (i == last && unit.starts_with(v)) || unit == *v)
            })
    })
}

/// Go's `time.ParseDuration` syntax: `[-+]?(\d*(\.\d*)?unit)+` or `0`.
fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut i = int_len;
        let mut frac_len = 0;
        if rest.as_bytes().get(i) == Some(&b'.') {
            i += 1;
            frac_len = rest[i..].bytes().take_while(u8::is_ascii_digit).count();
            i += frac_len;
        }
        if int_len == 0 && frac_len == 0 {
            return false;
        }
        rest = &rest[i..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(j, _)| j);
        let unit = &rest[..unit_len];
        if !["ns", "us", "µs", "μs", "ms", "s", "m", "h"].contains(&unit) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

/// Go's `url.ParseRequestURI`: an absolute URI or an absolute path.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return false;
    }
    if s == "*" {
        return true;
    }
    let mut rest = s;
    // Scheme: a letter, then letters, digits, `+`, `-`, `.`, up to a colon.
    if let Some(colon) = s.find(':') {
        let scheme = &s[..colon];
        let valid = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if colon == 0 {
            return false;
        }
        if valid {
            rest = &s[colon + 1..];
            if !rest.starts_with('/') {
                return true;
            }
        }
    }
    if !rest.starts_with('/') {
        return false;
    }
    // Drop the query; the fragment is part of the path for a request URI.
    let rest = rest.split_once('?').map_or(rest, |(p, _)| p);
    let path = if let Some(after) = rest
        .strip_prefix("//")
        .filter(|_| rest.len() < 3 || !rest[2..].starts_with('/'))
    {
        let (authority, path) = after.find('/').map_or((after, ""), |i| after.split_at(i));
        if !valid_authority(authority) {
            return false;
        }
        path
    } else {
        rest
    };
    valid_escapes(path)
}

fn valid_authority(a: &str) -> bool {
    let host = a.rsplit_once('@').map_or(a, |(_, h)| h);
    let (host, port) = if host.starts_with('[') {
        match host.find(']') {
            Some(i) => (&host[..=i], &host[i + 1..]),
            None => return false,
        }
    } else {
        match host.rfind(':') {
            Some(i) => (&host[..i], &host[i..]),
            None => (host, ""),
        }
    };
    if !(port.is_empty() || port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    valid_escapes(host)
        && host.chars().all(|c| {
            c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=[]:%".contains(c) || !c.is_ascii()
        })
}

/// Every `%` starts a two-digit hex escape.
fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// Go's `net/mail.ParseAddress` (the common forms): `local@domain` or `Name <local@domain>`.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.ends_with('>')) {
        (Some(i), true) => &s[i + 1..s.len() - 1],
        (None, false) => s,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let dot_atom =
        |p: &str| !p.is_empty() && p.split('.').all(|a| !a.is_empty() && a.chars().all(atext));
    let local_ok = if local.len() >= 2 && local.starts_with('"') && local.ends_with('"') {
        true
    } else {
        dot_atom(local)
    };
    let domain_ok = if domain.starts_with('[') && domain.ends_with(']') {
        true
    } else {
        dot_atom(domain)
    };
    local_ok && domain_ok
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn formats_accept_and_refuse_as_upstream() {
        let cases: &[(&str, &str, bool)] = &[
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid", "123e4567e89b12d3a456426614174000", true),
            ("uuid", "nope", false),
            ("uuid4", "123e4567-e89b-42d3-a456-426614174000", true),
            ("uuid4", "123e4567-e89b-12d3-a456-426614174000", false),
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date", "2024-2-01", false),
            ("date-time", "2024-01-02T03:04:05Z", true),
            ("date-time", "2024-01-02T03:04:05.123+02:00", true),
            ("date-time", "2024-01-02 03:04:05Z", false),
            ("date-time", "2024-01-02T24:04:05Z", false),
            ("datetime", "2024-01-02t03:04:05z", true),
            ("duration", "1h30m", true),
            ("duration", "1.5s", true),
            ("duration", "3 days", true),
            ("duration", "soon", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "", false),
            ("byte", "hello", false),
            ("email", "a.b@example.com", true),
            ("email", "Jane <jane@example.com>", true),
            ("email", "no-at-sign", false),
            ("hostname", "example.com", true),
            ("hostname", "exa_mple.com", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "010.0.0.1", true),
            ("ipv4", "10.0.0.256", false),
            ("ipv4", "::1", false),
            ("ipv6", "::1", true),
            ("ipv6", "fe80::1:2", true),
            ("ipv6", "10.0.0.1", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "fd00::/64", true),
            ("cidr", "10.0.0.0/33", false),
            ("cidr", "10.0.0.0", false),
            ("mac", "01:23:45:67:89:ab", true),
            ("mac", "01-23-45-67-89-ab", true),
            ("mac", "0123.4567.89ab", true),
            ("mac", "01:23:45:67:89", false),
            ("uri", "https://example.com/a?b=c", true),
            ("uri", "/just/a/path", true),
            ("uri", "mailto:a@b.c", true),
            ("uri", "relative/path", false),
            ("uri", "http://exa mple.com", false),
            ("uri", "/bad%zzescape", false),
            ("isbn10", "0321751043", true),
            ("isbn13", "978-0321751041", true),
            ("isbn", "0321751044", false),
            ("creditcard", "4111 1111 1111 1111", true),
            ("creditcard", "4111 1111 1111 1112", false),
            ("ssn", "123-45-6789", true),
            ("hexcolor", "#fff", true),
            ("rgbcolor", "rgb(255, 0, 10)", true),
            ("rgbcolor", "rgb(256, 0, 10)", false),
            ("bsonobjectid", "507f1f77bcf86cd799439011", true),
            ("password", "anything", true),
        ];
        for (format, s, ok) in cases {
            assert_eq!(check(format, s), Some(*ok), "{format} {s:?}");
        }
        assert_eq!(check("int32", "x"), None);
        assert_eq!(check("float", "x"), None);
    }
}
