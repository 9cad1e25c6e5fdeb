//! Container image references, parsed as far as the `imagePullPolicy` default needs.
//!
//! Upstream (`SetDefaults_Container`) parses the image with the Docker reference grammar
//! (`ParseNormalizedNamed` of `github.com/distribution/reference`): `Always` when the tag is
//! `latest` or when there is neither a tag nor a digest (the tag then defaults to `latest`),
//! `IfNotPresent` otherwise — including digest-only references, references whose tag is not
//! `latest`, and anything that does not parse (the parse error is ignored there).

/// The pull policy upstream defaults for a container running `image`.
pub(super) fn default_pull_policy(image: &str) -> &'static str {
    match parse(image) {
        Some(Reference {
            tag: Some("latest"),
            ..
        })
        | Some(Reference {
            tag: None,
            digest: false,
        }) => "Always",
        _ => "IfNotPresent",
    }
}

/// The parts of a valid reference the pull policy depends on.
#[derive(Debug, PartialEq, Eq)]
struct Reference<'a> {
    /// The tag, if one is given.
    tag: Option<&'a str>,
    /// Whether a digest is given.
    digest: bool,
}

/// Most characters a repository name may have (domain included, after normalization).
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// Parses `s` like `ParseNormalizedNamed`; `None` when it is not a valid reference.
fn parse(s: &str) -> Option<Reference<'_>> {
    // A bare 64-hex string is an image id, not a name.
    if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    // The domain is the first component when it looks like one (has `.` or `:`, is
    // `localhost`, or has an upper-case letter); otherwise Docker Hub.
    let (domain, remainder) = match s.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            (first, rest)
        }
        _ => ("docker.io", s),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let library = domain == "docker.io" && !remainder.contains('/');
    // The repository path must be lower case.
    let remote_name = remainder.split(':').next().unwrap_or(remainder);
    if remote_name.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }

    let (name_and_tag, digest) = match remainder.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (remainder, None),
    };
    if digest.is_some_and(|d| !valid_digest(d)) {
        return None;
    }
    // A tag follows the last `:` after the last `/` (a `:` before that is the domain's port,
    // and the domain has already been split off).
    let (path, tag) = match name_and_tag.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => (p, Some(t)),
        _ => (name_and_tag, None),
    };
    if tag.is_some_and(|t| !valid_tag(t)) {
        return None;
    }
    if domain != "docker.io" && !valid_domain(domain) {
        return None;
    }
    if path.is_empty() || !path.split('/').all(valid_path_component) {
        return None;
    }
    let name_len = domain.len() + 1 + if library { "library/".len() } else { 0 } + path.len();
    if name_len > NAME_TOTAL_LENGTH_MAX {
        return None;
    }
    Some(Reference {
        tag,
        digest: digest.is_some(),
    })
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or one or more `-`.
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let dashes = sep.bytes().all(|x| x == b'-');
        if !(sep == "." || sep == "_" || sep == "__" || dashes) {
            return false;
        }
    }
    true
}

/// `host[:port]`: dot-separated `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` labels or a bracketed
/// IPv6 address, and an optional decimal port.
fn valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        match rest.split_once(']') {
            Some((addr, after)) => {
                if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
                    return false;
                }
                match after {
                    "" => return true,
                    p => match p.strip_prefix(':') {
                        Some(port) => ("", Some(port)),
                        None => return false,
                    },
                }
            }
            None => return false,
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    if host.is_empty() {
        // Only the IPv6 form reaches here with an empty host, and it was checked above.
        return d.starts_with('[');
    }
    host.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
    })
}

/// `[\w][\w.-]{0,127}`.
fn valid_tag(t: &str) -> bool {
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
}

/// `algorithm:hex` with an algorithm upstream can verify (sha256, sha384, sha512) and a hex
/// part of that algorithm's exact length, in lower case.
fn valid_digest(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return false;
    };
    let len = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return false,
    };
    hex.len() == len && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(default_pull_policy(&format!("nginx@{SHA}")), "IfNotPresent");
        assert_eq!(
            default_pull_policy(&format!("nginx:1.27@{SHA}")),
            "IfNotPresent"
        );
        assert_eq!(
            default_pull_policy(&format!("nginx:latest@{SHA}")),
            "Always"
        );
        assert_eq!(
            default_pull_policy("registry.k8s.io/pause:3.10"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("localhost:5000/app"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/app:v1"), "IfNotPresent");
        assert_eq!(default_pull_policy("ghcr.io/org/team/app:latest"), "Always");
        assert_eq!(default_pull_policy("[::1]:5000/app"), "Always");
        assert_eq!(default_pull_policy("my-registry:5000/a__b/c-d.e"), "Always");
    }

    #[test]
    fn unparsable_images_get_if_not_present() {
        assert_eq!(default_pull_policy(""), "IfNotPresent");
        assert_eq!(default_pull_policy("Nginx"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx:"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx@sha256:abc"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx:latest@md5:abc"), "IfNotPresent");
        assert_eq!(default_pull_policy("-nginx"), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx/"), "IfNotPresent");
        assert_eq!(default_pull_policy(&"a".repeat(64)), "IfNotPresent");
        assert_eq!(default_pull_policy(&"a".repeat(300)), "IfNotPresent");
        assert_eq!(default_pull_policy("nginx :latest"), "IfNotPresent");
    }

    #[test]
    fn domain_detection() {
        // An upper-case first component is a domain, so the path may follow in lower case.
        assert_eq!(parse("Registry/app").map(|r| r.tag), Some(None));
        assert_eq!(
            parse("docker.io/library/nginx:1").map(|r| r.tag),
            Some(Some("1"))
        );
        assert!(parse("bad_domain.com/app").is_none());
    }
}
