//! The HTTPS client every webhook of this server speaks through (admission webhooks and CRD
//! conversion webhooks), as upstream's `k8s.io/apiserver/pkg/util/webhook` client:
//!
//! - `clientConfig.url`, or `clientConfig.service` resolved to an endpoint address through
//!   the Service's EndpointSlices — this server has no kube-proxy, so a Service's ClusterIP
//!   does not route; the TLS server name is still `<name>.<namespace>.svc`, as upstream;
//! - TLS verified against `clientConfig.caBundle` only;
//! - client-go's `?timeout=<d>` query parameter and one deadline for the whole exchange;
//! - the shared transport ([`super::transport`]): HTTP/2 when the webhook offers it, one
//!   kept connection per endpoint and caBundle, else kept HTTP/1.1 connections.
//!
//! Errors read as Go's (`Post "<url>": dial tcp …: connect: connection refused`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::transport::{self, Endpoint, TlsProfile};

use crate::storage::Storage;

/// `clientConfig.service` of a webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The URL path (default `/`).
    pub path: String,
    /// The Service port (default 443).
    pub port: u16,
}

impl ServiceRef {
    /// `clientConfig.service` read from its JSON (`None` when absent).
    pub fn parse(service: &Value) -> Option<ServiceRef> {
        let s = service.as_object()?;
        let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Some(ServiceRef {
            namespace: text("namespace"),
            name: text("name"),
            path: s
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_owned(),
            port: s
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        })
    }
}

/// A webhook's `clientConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientConfig {
    /// `url`.
    pub url: Option<String>,
    /// `service`.
    pub service: Option<ServiceRef>,
    /// `caBundle`: base64 of PEM certificates (empty: no roots).
    pub ca_bundle: String,
}

impl ClientConfig {
    /// A `clientConfig` read from its JSON.
    pub fn parse(config: &Value) -> ClientConfig {
        ClientConfig {
            url: config["url"].as_str().map(str::to_owned),
            service: ServiceRef::parse(&config["service"]),
            ca_bundle: config["caBundle"].as_str().unwrap_or("").to_owned(),
        }
    }
}

/// Where a request is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as errors name it (with client-go's `?timeout=`).
    pub url: String,
    /// Host to connect to (an IP or a DNS name, no brackets).
    host: String,
    /// Port to connect to.
    port: u16,
    /// Name the certificate must be valid for.
    server_name: String,
    /// The `Host` header.
    authority: String,
    /// Path and query of the request.
    path: String,
    /// `caBundle`.
    ca_bundle: String,
    /// The TLS profile of `ca_bundle`, made by the first call (a target kept with its
    /// configuration makes it once).
    tls: ProfileCell,
}

/// The lazily made TLS profile of a [`Target`] (or why its caBundle is unusable). A cache:
/// it takes no part in comparing targets.
#[derive(Clone, Default)]
struct ProfileCell(Arc<OnceLock<std::result::Result<TlsProfile, String>>>);

impl PartialEq for ProfileCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ProfileCell {}

impl std::fmt::Debug for ProfileCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProfileCell")
    }
}

impl Target {
    /// The TLS profile trusting this target's caBundle.
    fn tls(&self) -> std::result::Result<&TlsProfile, String> {
        self.tls
            .0
            .get_or_init(|| tls_profile(&self.ca_bundle))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Go's `time.Duration` text of whole seconds (`30s`, `1m0s`).
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s / 60) % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

/// Splits an `https://` URL into host, port and path (with client-go's timeout parameter).
pub fn parse_url(
    url: &str,
    ca_bundle: &str,
    timeout: Duration,
) -> std::result::Result<Target, String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("unsupported protocol scheme in {url:?}"))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6
            .split_once(']')
            .ok_or_else(|| format!("invalid URL {url:?}"))?;
        (h, tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| format!("invalid port in {url:?}"))?,
        None => 443,
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let path = format!("{path}{sep}timeout={}", go_duration(timeout));
    Ok(Target {
        url: format!("https://{authority}{path}"),
        host: host.to_owned(),
        port,
        server_name: host.to_owned(),
        authority: authority.to_owned(),
        path,
        ca_bundle: ca_bundle.to_owned(),
        tls: ProfileCell::default(),
    })
}

/// Where `config` is reached: its URL, or its Service's first ready endpoint (read from the
/// store's local state).
pub fn resolve(
    storage: &Storage,
    config: &ClientConfig,
    timeout: Duration,
) -> std::result::Result<Target, String> {
    if let Some(url) = &config.url {
        return parse_url(url, &config.ca_bundle, timeout);
    }
    let Some(svc) = &config.service else {
        return Err("neither url nor service is set".into());
    };
    let dns = format!("{}.{}.svc", svc.name, svc.namespace);
    let mut target = parse_url(
        &format!("https://{dns}:{}{}", svc.port, svc.path),
        &config.ca_bundle,
        timeout,
    )?;
    let post_err = |e: String| format!("Post {:?}: {e}", target.url);
    let (ip, port) = service_endpoint(storage, svc).map_err(post_err)?;
    target.host = ip;
    target.port = port;
    Ok(target)
}

/// A ready endpoint address and port of `svc`'s port, from its EndpointSlices, with
/// upstream's webhook error texts for a Service that cannot be reached.
fn service_endpoint(
    storage: &Storage,
    svc: &ServiceRef,
) -> std::result::Result<(String, u16), String> {
    use crate::service_endpoint::{self as shared, ResolveError};
    let target = shared::ServiceRef {
        namespace: svc.namespace.clone(),
        name: svc.name.clone(),
        port: svc.port,
    };
    shared::resolve(storage, &target).map_err(|e| match e {
        ResolveError::ServiceNotFound => format!("service {:?} not found", svc.name),
        ResolveError::PortNotFound => {
            format!("service {:?} does not have port {}", svc.name, svc.port)
        }
        ResolveError::NoSlices | ResolveError::MissingEndpoints(_) => {
            format!("no endpoints available for service {:?}", svc.name)
        }
        ResolveError::Access(e) => e,
    })
}

/// The TLS profile trusting `ca_bundle` (base64 of PEM) only, built once per bundle.
fn tls_profile(ca_bundle: &str) -> std::result::Result<TlsProfile, String> {
    use rustls_pki_types::pem::PemObject as _;
    static PROFILES: OnceLock<Mutex<HashMap<String, TlsProfile>>> = OnceLock::new();
    let profiles = PROFILES.get_or_init(Default::default);
    if let Some(p) = profiles
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(ca_bundle)
    {
        return Ok(p.clone());
    }
    let mut roots = rustls::RootCertStore::empty();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle)
        .map_err(|e| format!("invalid caBundle: {e}"))?;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem).flatten() {
        roots
            .add(cert)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let digest = ring::digest::digest(&ring::digest::SHA256, ca_bundle.as_bytes());
    let id: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let profile = TlsProfile::new(format!("caBundle:{id}"), config);
    let mut map = profiles.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= 256 {
        map.clear();
    }
    map.insert(ca_bundle.to_owned(), profile.clone());
    Ok(profile)
}

/// Why a POST failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostError {
    /// The deadline passed (Go's `context deadline exceeded`); carries the full text.
    Timeout(String),
    /// Anything else, as Go's `Post "<url>": …`.
    Failed(String),
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::Timeout(s) | PostError::Failed(s) => f.write_str(s),
        }
    }
}

/// POSTs `body` (JSON) to `target` over TLS and returns the answer's body (a 2xx), within
/// `timeout`; `deadline_text` is Go's wording of a timeout after `Post "<url>": `.
pub async fn post(
    target: &Target,
    body: Vec<u8>,
    timeout: Duration,
    deadline_text: &str,
) -> std::result::Result<Vec<u8>, PostError> {
    let exchange = async {
        let tls = target.tls()?;
        let endpoint = Endpoint {
            host: &target.host,
            port: target.port,
            server_name: &target.server_name,
            authority: &target.authority,
            path: &target.path,
        };
        let (status, answer) = transport::post(&endpoint, tls, None, body.into()).await?;
        if !status.is_success() {
            return Err(server_error(status, &answer));
        }
        Ok(answer.to_vec())
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(PostError::Failed(format!("Post {:?}: {e}", target.url))),
        Err(_) => Err(PostError::Timeout(format!(
            "Post {:?}: {deadline_text}",
            target.url
        ))),
    }
}

/// client-go's error for a non-2xx answer: a Status' message, else a generic text.
fn server_error(status: http::StatusCode, body: &[u8]) -> String {
    if let Ok(Value::Object(s)) = serde_json::from_slice::<Value>(body)
        && s.get("kind").and_then(Value::as_str) == Some("Status")
        && let Some(m) = s.get("message").and_then(Value::as_str)
    {
        return m.to_owned();
    }
    if status == http::StatusCode::NOT_FOUND {
        return "the server could not find the requested resource".into();
    }
    format!(
        "an error on the server ({:?}) has prevented the request from succeeding",
        String::from_utf8_lossy(body).trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_client_go_timeout_parameter() {
        let t30 = Duration::from_secs(30);
        let t = parse_url("https://127.0.0.1:8443/convert", "", t30).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 8443));
        assert_eq!(t.path, "/convert?timeout=30s");
        assert_eq!(t.url, "https://127.0.0.1:8443/convert?timeout=30s");
        let t = parse_url("https://[::1]/c?x=1", "", Duration::from_secs(5)).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 443));
        assert_eq!(t.path, "/c?x=1&timeout=5s");
        let t = parse_url("https://hook.example.com", "", t30).unwrap();
        assert_eq!(t.path, "/?timeout=30s");
        assert!(parse_url("http://x/", "", t30).is_err());
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn client_configs_read_url_service_and_ca_bundle() {
        let c = ClientConfig::parse(&serde_json::json!({ "caBundle": "Zm9v",
            "service": { "namespace": "ns", "name": "hook", "path": "/m" } }));
        assert_eq!(c.ca_bundle, "Zm9v");
        assert_eq!(
            c.service,
            Some(ServiceRef {
                namespace: "ns".into(),
                name: "hook".into(),
                path: "/m".into(),
                port: 443
            })
        );
        assert!(c.url.is_none());
    }
}
