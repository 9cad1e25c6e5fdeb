//! An OIDC issuer's signing keys: the discovery document
//! (`<issuer>/.well-known/openid-configuration`, or `discoveryURL`) names the `jwks_uri`;
//! the JWK set there holds RSA (`RS256`) and P-256 (`ES256`) keys. Keys are fetched on first
//! use and fetched again when a token names a key the set does not have or its signature
//! does not verify (the issuer rotated), at most once per [`REFRESH_EVERY`], as go-oidc's
//! remote key set. A fetch that fails keeps the keys already known; an issuer that was never
//! reached has none, so its tokens are refused (401) and nothing else is affected.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use serde_json::Value;

use super::jwt::PublicKey;

/// Shortest interval between two fetches.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);
/// Limit of one fetch (connect, TLS, answer).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest discovery document or key set accepted.
const MAX_BODY: usize = 1024 * 1024;

/// The keys of one issuer.
pub struct KeySet {
    issuer: String,
    discovery_url: String,
    tls: Arc<rustls::ClientConfig>,
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    keys: Arc<Vec<PublicKey>>,
    last_fetch: Option<Instant>,
    last_error: Option<String>,
}

impl KeySet {
    /// The key set of `issuer`, trusting `ca_pem` (or, without it, the CAs of
    /// `/etc/ssl/certs/ca-certificates.crt` when readable).
    pub fn new(
        issuer: &str,
        discovery_url: Option<&str>,
        ca_pem: Option<&str>,
    ) -> Result<KeySet, String> {
        let pem = match ca_pem {
            Some(p) => p.to_owned(),
            None => std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").map_err(|e| {
                format!("issuer {issuer}: no certificate authority given and the system's CAs are unreadable: {e}")
            })?,
        };
        let mut roots = rustls::RootCertStore::empty();
        let mut any = false;
        for cert in <rustls_pki_types::CertificateDer<'_> as rustls_pki_types::pem::PemObject>::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| format!("issuer {issuer}: certificate authority: {e}"))?;
            if roots.add(cert).is_ok() {
                any = true;
            }
        }
        if !any {
            return Err(format!(
                "issuer {issuer}: the certificate authority holds no usable certificate"
            ));
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KeySet {
            issuer: issuer.to_owned(),
            discovery_url: discovery_url.map_or_else(
                || {
                    format!(
                        "{}/.well-known/openid-configuration",
                        issuer.trim_end_matches('/')
                    )
                },
                str::to_owned,
            ),
            tls: Arc::new(config),
            state: tokio::sync::Mutex::new(State::default()),
        })
    }

    /// The known keys; fetched first if none are known (and the last attempt is old
    /// enough).
    pub async fn keys(&self) -> Result<Arc<Vec<PublicKey>>, String> {
        let mut st = self.state.lock().await;
        if st.keys.is_empty() {
            self.fetch_locked(&mut st).await;
        }
        if st.keys.is_empty() {
            return Err(st
                .last_error
                .clone()
                .unwrap_or_else(|| "no keys from the issuer".into()));
        }
        Ok(Arc::clone(&st.keys))
    }

    /// Fetches the keys again unless the last fetch is recent; returns the keys then known.
    pub async fn refresh(&self) -> Arc<Vec<PublicKey>> {
        let mut st = self.state.lock().await;
        self.fetch_locked(&mut st).await;
        Arc::clone(&st.keys)
    }

    async fn fetch_locked(&self, st: &mut State) {
        if st.last_fetch.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return;
        }
        st.last_fetch = Some(Instant::now());
        match tokio::time::timeout(FETCH_TIMEOUT * 2, self.fetch()).await {
            Ok(Ok(keys)) => {
                tracing::info!(issuer = %self.issuer, keys = keys.len(), "OIDC issuer keys fetched");
                st.keys = Arc::new(keys);
                st.last_error = None;
            }
            Ok(Err(e)) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "fetching OIDC issuer keys");
                st.last_error = Some(e);
            }
            Err(_) => {
                let e = format!("fetching the keys of {} timed out", self.issuer);
                tracing::warn!(issuer = %self.issuer, "fetching OIDC issuer keys timed out");
                st.last_error = Some(e);
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<PublicKey>, String> {
        let doc = get_json(&self.discovery_url, &self.tls).await?;
        if doc["issuer"].as_str() != Some(self.issuer.as_str()) {
            return Err(format!(
                "oidc: issuer did not match the issuer returned by provider, expected {:?} got {:?}",
                self.issuer,
                doc["issuer"].as_str().unwrap_or_default()
            ));
        }
        let jwks_uri = doc["jwks_uri"]
            .as_str()
            .ok_or("the discovery document has no jwks_uri")?;
        let set = get_json(jwks_uri, &self.tls).await?;
        let keys = parse_jwks(&set)?;
        if keys.is_empty() {
            return Err(format!("{jwks_uri}: no usable RS256 or ES256 key"));
        }
        Ok(keys)
    }
}

/// The RSA and P-256 keys of a JWK set (others are skipped); each keeps its `kid`.
pub fn parse_jwks(set: &Value) -> Result<Vec<PublicKey>, String> {
    let keys = set["keys"].as_array().ok_or("the JWK set has no keys")?;
    let b64 = |k: &Value, f: &str| -> Result<Vec<u8>, String> {
        URL_SAFE_NO_PAD
            .decode(k[f].as_str().unwrap_or_default().trim_end_matches('='))
            .map_err(|e| format!("JWK field {f}: {e}"))
    };
    let mut out = Vec::new();
    for k in keys {
        if k["use"].as_str().is_some_and(|u| u != "sig") {
            continue;
        }
        let parsed = match k["kty"].as_str() {
            Some("RSA") => {
                let (n, e) = (b64(k, "n")?, b64(k, "e")?);
                PublicKey::from_rsa_pkcs1(&rsa_pkcs1(&n, &e))
            }
            Some("EC") if k["crv"].as_str() == Some("P-256") => {
                let (x, y) = (b64(k, "x")?, b64(k, "y")?);
                if x.len() != 32 || y.len() != 32 {
                    Err("P-256 coordinates must be 32 bytes".into())
                } else {
                    let mut point = vec![4u8];
                    point.extend(x);
                    point.extend(y);
                    PublicKey::from_point(&point)
                }
            }
            _ => continue,
        };
        match parsed {
            Ok(mut key) => {
                if let Some(kid) = k["kid"].as_str() {
                    kid.clone_into(&mut key.kid);
                }
                out.push(key);
            }
            Err(e) => tracing::debug!(error = %e, "skipping a JWK"),
        }
    }
    Ok(out)
}

/// DER `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }`.
fn rsa_pkcs1(n: &[u8], e: &[u8]) -> Vec<u8> {
    fn int(b: &[u8]) -> Vec<u8> {
        let first = b
            .iter()
            .position(|x| *x != 0)
            .unwrap_or(b.len().saturating_sub(1));
        let mut v = b[first..].to_vec();
        if v.first().is_some_and(|x| x & 0x80 != 0) {
            v.insert(0, 0);
        }
        tlv(0x02, &v)
    }
    let mut body = int(n);
    body.extend(int(e));
    tlv(0x30, &body)
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// GETs an `https://` URL over HTTP/1.1 and parses the JSON answer (status 200 only).
async fn get_json(url: &str, tls: &Arc<rustls::ClientConfig>) -> Result<Value, String> {
    let fail = |e: &dyn std::fmt::Display| format!("Get {url:?}: {e}");
    let uri: http::Uri = url.parse().map_err(|e| fail(&e))?;
    if uri.scheme_str() != Some("https") {
        return Err(fail(&"only https:// is supported"));
    }
    let host = uri.host().ok_or_else(|| fail(&"no host"))?.to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect((bare.as_str(), port))
            .await
            .map_err(|e| fail(&e))?;
        let name = rustls_pki_types::ServerName::try_from(bare.clone()).map_err(|e| fail(&e))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(tls))
            .connect(name, tcp)
            .await
            .map_err(|e| fail(&e))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| fail(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let authority = uri.authority().map_or(host.clone(), |a| a.to_string());
        let req = http::Request::get(path)
            .header(http::header::HOST, authority)
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| fail(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| fail(&e))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| fail(&e))?
            .to_bytes();
        if status != http::StatusCode::OK {
            return Err(fail(&format!("{status}")));
        }
        serde_json::from_slice(&body).map_err(|e| fail(&format!("invalid JSON: {e}")))
    };
    tokio::time::timeout(FETCH_TIMEOUT, attempt)
        .await
        .map_err(|_| fail(&"timed out"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jwks_keys_keep_their_kid_and_verify() {
        let keys = certs::ServiceAccountKeys::generate().unwrap();
        let signer = super::super::jwt::Signer::from_pem(&keys.private_key_pem).unwrap();
        let mut jwk = signer.public.jwk();
        jwk["kid"] = json!("k1");
        let set = parse_jwks(&json!({"keys": [jwk, {"kty": "oct", "k": "AA"}]})).unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(set[0].kid, "k1");
    }
}
