//! Request-header authentication (kube-apiserver's `--requestheader-*` flags, upstream's
//! `headerrequest` authenticator): a client whose TLS certificate chains to the request-header
//! CA (`--requestheader-client-ca-file`) and whose common name is allowed
//! (`--requestheader-allowed-names`, empty: any) is an authenticating proxy; its requests are
//! of the user named in the first username header present (`X-Remote-User`), with the groups
//! of the group headers (`X-Remote-Group`, every value) and the extras of the headers under the
//! extra prefixes (`X-Remote-Extra-<key>`, key lower-cased and percent-unescaped). The
//! certificate is judged once per connection (the accept loop asks [`RequestHeader::verify`]
//! and marks the requests with [`FrontProxy`]); anyone else's such headers are ignored and
//! stripped. A proxy's request without a username header goes on to the other
//! authenticators, as upstream's union does.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::pipeline::UserInfo;

/// Marks a connection whose client certificate is an allowed request-header proxy's.
#[derive(Debug, Clone, Copy)]
pub struct FrontProxy;

/// The request-header authenticator.
pub struct RequestHeader {
    verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    allowed_names: Vec<String>,
    username_headers: Vec<String>,
    group_headers: Vec<String>,
    extra_prefixes: Vec<String>,
}

impl std::fmt::Debug for RequestHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHeader")
            .field("allowed_names", &self.allowed_names)
            .field("username_headers", &self.username_headers)
            .finish_non_exhaustive()
    }
}

impl RequestHeader {
    /// The authenticator of `cfg`'s request-header flags; `None` without a CA file.
    pub fn from_config(
        cfg: &crate::aggregator::AggregatorConfig,
    ) -> Result<Option<RequestHeader>, String> {
        let Some(path) = &cfg.requestheader_client_ca_file else {
            return Ok(None);
        };
        let mut roots = rustls::RootCertStore::empty();
        for ca in
            CertificateDer::pem_file_iter(path).map_err(|e| format!("{}: {e}", path.display()))?
        {
            let ca = ca.map_err(|e| format!("{}: {e}", path.display()))?;
            roots
                .add(ca)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| format!("{}: {e}", path.display()))?;
        let lower = |v: &[String]| v.iter().map(|h| h.trim().to_ascii_lowercase()).collect();
        Ok(Some(RequestHeader {
            verifier,
            allowed_names: cfg.requestheader_allowed_names.clone(),
            username_headers: lower(&cfg.requestheader_username_headers),
            group_headers: lower(&cfg.requestheader_group_headers),
            extra_prefixes: lower(&cfg.requestheader_extra_headers_prefix),
        }))
    }

    /// Whether the connection's certificate chain verifies against the request-header CA
    /// with an allowed common name.
    pub fn verify(&self, chain: Option<&[CertificateDer<'static>]>) -> bool {
        let Some((leaf, intermediates)) = chain.and_then(<[_]>::split_first) else {
            return false;
        };
        if self
            .verifier
            .verify_client_cert(leaf, intermediates, rustls::pki_types::UnixTime::now())
            .is_err()
        {
            return false;
        }
        if self.allowed_names.is_empty() {
            return true;
        }
        match certs::identity_from_der(leaf.as_ref()) {
            Ok((cn, _)) => self.allowed_names.contains(&cn),
            Err(_) => false,
        }
    }

    /// Whether `name` is one of the identity headers (which are stripped from requests).
    pub fn is_identity_header(&self, name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        self.username_headers.contains(&n)
            || self.group_headers.contains(&n)
            || self
                .extra_prefixes
                .iter()
                .any(|p| n.starts_with(p.as_str()))
    }

    /// The user the proxy's headers name; `None` without a (non-empty) username header.
    pub fn user(&self, headers: &http::HeaderMap) -> Option<UserInfo> {
        let name = self.username_headers.iter().find_map(|h| {
            headers
                .get(h.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        })?;
        let mut groups = Vec::new();
        for h in &self.group_headers {
            groups.extend(
                headers
                    .get_all(h.as_str())
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .map(str::to_owned),
            );
        }
        let mut user = UserInfo {
            name,
            groups,
            ..UserInfo::default()
        };
        for (header, value) in headers {
            let h = header.as_str();
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| h.strip_prefix(p.as_str()))
                .filter(|k| !k.is_empty())
            else {
                continue;
            };
            let Ok(value) = value.to_str() else {
                continue;
            };
            user.extra
                .entry(lean::header::unescape_extra_key(key).to_ascii_lowercase())
                .or_default()
                .push(value.to_owned());
        }
        Some(user)
    }

    /// Removes every identity header (after authentication, as upstream does).
    pub fn strip(&self, headers: &mut http::HeaderMap) {
        let names: Vec<http::HeaderName> = headers
            .keys()
            .filter(|n| self.is_identity_header(n.as_str()))
            .cloned()
            .collect();
        for n in names {
            headers.remove(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator() -> RequestHeader {
        let verifier = rustls::server::WebPkiClientVerifier::no_client_auth();
        RequestHeader {
            verifier,
            allowed_names: vec!["front-proxy-client".into()],
            username_headers: vec!["x-remote-user".into()],
            group_headers: vec!["x-remote-group".into()],
            extra_prefixes: vec!["x-remote-extra-".into()],
        }
    }

    #[test]
    fn the_headers_name_the_user_groups_and_extras() {
        let a = authenticator();
        let mut h = http::HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.append("x-remote-group", "dev".parse().unwrap());
        h.append("x-remote-group", "ops".parse().unwrap());
        h.append("x-remote-extra-example.com%2Fteam", "a".parse().unwrap());
        h.append("x-remote-extra-Scopes", "x".parse().unwrap());
        h.insert("accept", "application/json".parse().unwrap());
        let u = a.user(&h).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["dev", "ops"]);
        assert_eq!(u.extra["example.com/team"], ["a"]);
        assert_eq!(u.extra["scopes"], ["x"]);
        a.strip(&mut h);
        assert_eq!(h.len(), 1);
        assert!(a.user(&http::HeaderMap::new()).is_none());
        assert!(!a.verify(None));
    }
}
