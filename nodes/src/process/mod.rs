//! The process runtime: nodes whose pods' containers run as host processes.
//!
//! Each process node keeps its pods under `<runtime-dir>/<node>/pods/<uid>/` (volumes,
//! container logs in the CRI format, the containers' scratch roots), runs every container
//! in its own mount and PID namespaces (`sandbox`), as an unprivileged user unless the pod
//! asks for another, and serves the kubelet API (`crate::kubelet`) on a loopback port with
//! a `system:node:<name>` serving certificate from the cluster CA. The registry
//! (`registry`) is what the kubelet API reads: which container instance runs where, its
//! logs, its stdin and output for attach.

pub(crate) mod env;
pub(crate) mod grpc_probe;
pub(crate) mod lifecycle;
pub(crate) mod logs;
pub(crate) mod probe;
pub(crate) mod registry;
pub(crate) mod sandbox;
pub(crate) mod terminal;
pub(crate) mod usage;
pub(crate) mod volumes;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::node::SimNode;

/// The cluster CA as a process node fleet uses it: to issue kubelet serving certificates
/// and to check the API server's client certificate.
pub struct KubeletPki {
    ca: certs::CertificateAuthority,
}

impl KubeletPki {
    /// Loads the CA from `<dir>/ca.crt` and `<dir>/ca.key`.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let ca = certs::CertificateAuthority::load(&dir.join("ca.crt"), &dir.join("ca.key"))?;
        Ok(KubeletPki { ca })
    }

    /// A kubelet serving certificate for `node` at `ip`: CN `system:node:<node>`, O
    /// `system:nodes`, SANs the IP and the node name, serverAuth.
    fn serving_cert(&self, node: &str, ip: IpAddr) -> anyhow::Result<certs::IssuedCert> {
        let mut params = certs::leaf_params(certs::CLIENT_VALIDITY);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("system:node:{node}"));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let mut sans = vec![SanType::IpAddress(ip)];
        if let Ok(dns) = rcgen::string::Ia5String::try_from(node) {
            sans.push(SanType::DnsName(dns));
        }
        params.subject_alt_names = sans;
        Ok(self.ca.sign(&params, "kubelet serving certificate")?)
    }

    fn ca_der(&self) -> Vec<u8> {
        self.ca.cert_der().to_vec()
    }
}

/// A process node's runtime state.
pub(crate) struct ProcessNode {
    /// `<runtime-dir>/<node>`.
    pub(crate) dir: PathBuf,
    /// The port its kubelet API listens on (127.0.0.1).
    pub(crate) kubelet_port: u16,
    /// Containers running here, for the kubelet API.
    pub(crate) registry: Arc<registry::Registry>,
    /// Host and port of the API server, for `KUBERNETES_SERVICE_HOST`/`PORT`.
    pub(crate) api_host: String,
    /// See `api_host`.
    pub(crate) api_port: String,
}

impl std::fmt::Debug for ProcessNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessNode")
            .field("dir", &self.dir)
            .field("kubelet_port", &self.kubelet_port)
            .finish_non_exhaustive()
    }
}

/// Host and port of `url` (`https://host:port`), for the pods' service variables.
fn host_port(url: &str) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h.trim_matches(['[', ']']).to_owned(), p.to_owned()),
        _ => (authority.to_owned(), "443".to_owned()),
    }
}

/// Starts the kubelet API of every node (each on its own loopback port) and attaches the
/// process runtime to it, before the nodes register (their Node carries the port).
pub(crate) async fn start_nodes(
    opts: &Options,
    nodes: &[Arc<SimNode>],
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let pki_dir = opts
        .pki_dir
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("--runtime process needs --pki-dir (the cluster CA)"))?;
    let pki = KubeletPki::load(pki_dir)?;
    let url = opts.api_server_url.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "--runtime process needs --api-server-url (for the pods' service variables)"
        )
    })?;
    let (api_host, api_port) = host_port(&url);
    std::fs::create_dir_all(&opts.runtime_dir)?;
    let root = std::fs::canonicalize(&opts.runtime_dir)?;
    for node in nodes {
        let dir = root.join(&node.name);
        std::fs::create_dir_all(dir.join("pods"))?;
        let issued = pki.serving_cert(&node.name, IpAddr::V4(Ipv4Addr::LOCALHOST))?;
        let registry = Arc::new(registry::Registry::default());
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let tls = crate::kubelet::tls_config(&issued, &pki.ca_der())?;
        tokio::spawn(crate::kubelet::serve(
            listener,
            tls,
            registry.clone(),
            node.name.clone(),
            shutdown.clone(),
        ));
        tracing::info!(node = %node.name, port, dir = %dir.display(), "process node: kubelet API listening");
        let _ = node.process.set(Arc::new(ProcessNode {
            dir,
            kubelet_port: port,
            registry,
            api_host: api_host.clone(),
            api_port: api_port.clone(),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_server_url_gives_host_and_port() {
        assert_eq!(
            host_port("https://127.0.0.1:6443"),
            ("127.0.0.1".into(), "6443".into())
        );
        assert_eq!(
            host_port("https://[::1]:6443/"),
            ("::1".into(), "6443".into())
        );
        assert_eq!(host_port("https://api"), ("api".into(), "443".into()));
    }
}
