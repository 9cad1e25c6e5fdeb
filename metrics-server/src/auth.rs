//! Delegated authentication of an extension API server (upstream's `requestheader`
//! authenticator as `--authentication-kubeconfig` configures it): the CA and the allowed
//! common names come from `kube-system/extension-apiserver-authentication`, read once at
//! start; the user comes from `X-Remote-User`/`X-Remote-Group` only on a connection whose
//! client certificate that CA verified (in the handshake) and whose CN is allowed.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// What the request headers are trusted from.
pub(crate) struct RequestHeaderTrust {
    /// `requestheader-client-ca-file`.
    pub(crate) roots: rustls::RootCertStore,
    /// `requestheader-allowed-names` (empty: any name the CA signed).
    pub(crate) allowed_names: Vec<String>,
    /// `requestheader-username-headers`.
    pub(crate) username_headers: Vec<String>,
    /// `requestheader-group-headers`.
    pub(crate) group_headers: Vec<String>,
    /// `requestheader-extra-headers-prefix`.
    pub(crate) extra_prefixes: Vec<String>,
}

impl RequestHeaderTrust {
    /// Reads the ConfigMap (waiting for the API server to publish it).
    pub(crate) async fn load(client: &kube::Client) -> anyhow::Result<Self> {
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "kube-system");
        let mut attempts = 0;
        let cm = loop {
            match api.get_opt("extension-apiserver-authentication").await {
                Ok(Some(cm)) => break cm,
                Ok(None) | Err(_) if attempts < 300 => {
                    attempts += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Ok(None) => {
                    anyhow::bail!("kube-system/extension-apiserver-authentication not found")
                }
                Err(e) => return Err(e).context("reading extension-apiserver-authentication"),
            }
        };
        let data = cm.data.unwrap_or_default();
        let list = |k: &str| -> Vec<String> {
            data.get(k)
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default()
        };
        let ca = data
            .get("requestheader-client-ca-file")
            .context("extension-apiserver-authentication has no requestheader-client-ca-file")?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.context("requestheader-client-ca-file")?)?;
        }
        Ok(RequestHeaderTrust {
            roots,
            allowed_names: list("requestheader-allowed-names"),
            username_headers: list("requestheader-username-headers"),
            group_headers: list("requestheader-group-headers"),
            extra_prefixes: list("requestheader-extra-headers-prefix")
                .into_iter()
                .map(|p| p.to_ascii_lowercase())
                .collect(),
        })
    }

    /// Whether a connection's (already verified) client certificate may send request
    /// headers.
    pub(crate) fn proxy_allowed(&self, chain: Option<&[CertificateDer<'static>]>) -> bool {
        let Some(leaf) = chain.and_then(<[_]>::first) else {
            return false;
        };
        if self.allowed_names.is_empty() {
            return true;
        }
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
            return false;
        };
        cert.subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .any(|cn| self.allowed_names.iter().any(|n| n == cn))
    }

    /// The user named by the request headers (groups and extras too).
    pub(crate) fn user(&self, headers: &http::HeaderMap) -> Option<crate::authz::User> {
        let name = self
            .username_headers
            .iter()
            .find_map(|h| headers.get(h.as_str()))
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())?
            .to_owned();
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()).iter())
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (h, v) in headers {
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| h.as_str().strip_prefix(p.as_str()))
                .filter(|k| !k.is_empty())
            else {
                continue;
            };
            if let Ok(v) = v.to_str() {
                extra
                    .entry(lean::header::unescape_extra_key(key).to_ascii_lowercase())
                    .or_default()
                    .push(v.to_owned());
            }
        }
        Some(crate::authz::User {
            name,
            groups,
            extra,
        })
    }
}
