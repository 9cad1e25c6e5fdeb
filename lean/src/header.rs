//! Request-header authentication's extra keys (`X-Remote-Extra-<key>`): the front proxy
//! percent-escapes a key (upstream's `headerKeyEscape`); the API server and the metrics
//! server both read them back with [`unescape_extra_key`].

/// Percent-decoding of an extra key; an invalid escape is kept as written.
pub fn unescape_extra_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_decoded_and_bad_ones_kept() {
        assert_eq!(unescape_extra_key("scopes%2Fread"), "scopes/read");
        assert_eq!(unescape_extra_key("a%zz%4"), "a%zz%4");
        assert_eq!(unescape_extra_key("plain"), "plain");
    }
}
