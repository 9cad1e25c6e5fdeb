//! The client of kube-apiserver's authentication and authorization webhooks: a kubeconfig
//! file names the remote service (`clusters[].cluster.server`, `certificate-authority` or
//! `certificate-authority-data`; `users[].user.client-certificate(-data)` +
//! `client-key(-data)`, `token` or `tokenFile`), the current context (else the first
//! cluster and user) picks which; reviews are POSTed as JSON through the shared webhook
//! transport ([`crate::admission::webhook::transport`]: HTTP/2 with one kept connection, or
//! kept HTTP/1.1 connections), with a 30 s limit (upstream's webhook client timeout).
//! Errors read as Go's `Post "<url>": …`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use crate::admission::webhook::transport::{self, Endpoint, TlsProfile};

/// How long one review may take by default, connection included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A webhook service named by a kubeconfig file.
pub struct WebhookClient {
    /// The URL (`server`).
    url: String,
    host: String,
    port: u16,
    authority: String,
    path: String,
    tls: TlsProfile,
    token: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for WebhookClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookClient")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A file named by a kubeconfig: relative paths are relative to the kubeconfig's directory.
fn resolve(base: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

/// The bytes of `<field>-data` (base64) or of the file `<field>` names.
fn data_or_file(
    base: &Path,
    entry: &Value,
    field: &str,
    data_field: &str,
) -> Result<Option<Vec<u8>>, String> {
    if let Some(data) = entry[data_field].as_str().filter(|s| !s.is_empty()) {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| format!("{data_field}: {e}"));
    }
    match entry[field].as_str().filter(|s| !s.is_empty()) {
        Some(file) => {
            let path = resolve(base, file);
            std::fs::read(&path)
                .map(Some)
                .map_err(|e| format!("{field}: reading {}: {e}", path.display()))
        }
        None => Ok(None),
    }
}

/// The entry called `name` of the list `list` (`clusters`, `users`), or the first one.
fn named<'a>(config: &'a Value, list: &str, inner: &str, name: Option<&str>) -> Option<&'a Value> {
    let items = config[list].as_array()?;
    let item = match name {
        Some(n) => items.iter().find(|i| i["name"] == n)?,
        None => items.first()?,
    };
    Some(&item[inner])
}

impl WebhookClient {
    /// Reads the kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> Result<WebhookClient, String> {
        let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let config: Value = serde_saphyr::from_slice(&text)
            .map_err(|e| format!("{}: invalid kubeconfig: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        WebhookClient::from_value(&config, base).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The client a parsed kubeconfig describes (`base`: where relative paths start).
    pub fn from_value(config: &Value, base: &Path) -> Result<WebhookClient, String> {
        let context = config["current-context"]
            .as_str()
            .filter(|c| !c.is_empty())
            .and_then(|c| named(config, "contexts", "context", Some(c)));
        let cluster_name = context.and_then(|c| c["cluster"].as_str());
        let user_name = context.and_then(|c| c["user"].as_str());
        let cluster = named(config, "clusters", "cluster", cluster_name)
            .ok_or("no cluster in the kubeconfig")?;
        let empty = Value::Null;
        let user = named(config, "users", "user", user_name).unwrap_or(&empty);
        let server = cluster["server"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or("the cluster has no server")?;
        let ca = data_or_file(
            base,
            cluster,
            "certificate-authority",
            "certificate-authority-data",
        )?;
        let cert = data_or_file(base, user, "client-certificate", "client-certificate-data")?;
        let key = data_or_file(base, user, "client-key", "client-key-data")?;
        let mut token = user["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        if token.is_none()
            && let Some(file) = user["tokenFile"].as_str().filter(|f| !f.is_empty())
        {
            let path = resolve(base, file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("tokenFile: reading {}: {e}", path.display()))?;
            token = Some(text.trim().to_owned());
        }
        let tls = tls_config(ca.as_deref(), cert.as_deref(), key.as_deref())?;
        let (host, port, authority, path) = split_url(server)?;
        Ok(WebhookClient {
            url: server.to_owned(),
            host,
            port,
            authority,
            path,
            tls: TlsProfile::unique(tls),
            token,
            timeout: TIMEOUT,
        })
    }

    /// The same client with another limit on one exchange.
    pub fn with_timeout(self, timeout: Duration) -> WebhookClient {
        WebhookClient { timeout, ..self }
    }

    /// The service's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// POSTs `body` as JSON and returns the decoded answer (a 2xx), within the timeout
    /// (30 s unless [`WebhookClient::with_timeout`]).
    pub async fn post(&self, body: &Value) -> Result<Value, String> {
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let exchange = async {
            let endpoint = Endpoint {
                host: &self.host,
                port: self.port,
                server_name: &self.host,
                authority: &self.authority,
                path: &self.path,
            };
            let (status, answer) =
                transport::post(&endpoint, &self.tls, self.token.as_deref(), body.into()).await?;
            if !status.is_success() {
                return Err(format!(
                    "an error on the server ({:?}) has prevented the request from succeeding",
                    String::from_utf8_lossy(&answer).trim()
                ));
            }
            serde_json::from_slice::<Value>(&answer).map_err(|e| format!("invalid answer: {e}"))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("Post {:?}: {e}", self.url)),
            Err(_) => Err(format!(
                "Post {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                self.url
            )),
        }
    }
}

/// Host, port, `Host` header and path of an `https://` URL.
fn split_url(url: &str) -> Result<(String, u16, String, String), String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("server {url:?}: only https:// is supported"))?;
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
    Ok((host.to_owned(), port, authority.to_owned(), path))
}

/// TLS trusting `ca` (PEM; none: no roots), presenting `cert` + `key` when both are given.
fn tls_config(
    ca: Option<&[u8]>,
    cert: Option<&[u8]>,
    key: Option<&[u8]>,
) -> Result<rustls::ClientConfig, String> {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca.unwrap_or_default()).flatten() {
        roots
            .add(c)
            .map_err(|e| format!("certificate-authority: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("client-certificate: {e}"))?;
            let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("client-key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err("client-certificate and client-key go together".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kubeconfig_picks_the_current_context() {
        let cfg = json!({
            "clusters": [
                {"name": "a", "cluster": {"server": "https://a.example:8443/authz"}},
                {"name": "b", "cluster": {"server": "https://[::1]/review?x=1"}},
            ],
            "users": [{"name": "u", "user": {"token": "secret"}}],
            "contexts": [{"name": "c", "context": {"cluster": "b", "user": "u"}}],
            "current-context": "c",
        });
        let c = WebhookClient::from_value(&cfg, Path::new("/")).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.path.as_str()),
            ("::1", 443, "/review?x=1")
        );
        assert_eq!(c.token.as_deref(), Some("secret"));
        let first = json!({"clusters": [{"name": "a", "cluster": {"server": "https://h:1"}}]});
        let c = WebhookClient::from_value(&first, Path::new("/")).unwrap();
        assert_eq!((c.host.as_str(), c.port, c.path.as_str()), ("h", 1, "/"));
        assert!(WebhookClient::from_value(&json!({}), Path::new("/")).is_err());
        let http = json!({"clusters": [{"name": "a", "cluster": {"server": "http://h"}}]});
        assert!(WebhookClient::from_value(&http, Path::new("/")).is_err());
    }
}
