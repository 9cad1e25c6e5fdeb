//! Certificates of the store's `https://` client URLs (etcd's `--cert-file` and the client
//! certificates `--client-cert-auth` asks for), issued from the cluster CA: kubeadm's
//! `pki/etcd/server.*`, `pki/etcd/healthcheck-client.*` and `pki/apiserver-etcd-client.*`.

use std::path::{Path, PathBuf};

use crate::ca::CertificateAuthority;
use crate::error::{Error, Result};
use crate::layout::PkiPaths;
use crate::{ensure_leaf, identity_from_der, issue_client_cert, issue_peer_cert, peer};

/// Keeps or (re)issues the serving certificate of store member `name` on its `https://`
/// client URLs, reachable at `hosts`, in `out_dir` (`server.crt`, `server.key`, as kubeadm's
/// `pki/etcd/server.*`), signed by the CA under `paths`: serverAuth + clientAuth, SANs of
/// [`peer_sans`]. Returns the certificate and key paths.
pub fn ensure_store_server_cert(
    paths: &PkiPaths,
    name: &str,
    hosts: &[String],
    out_dir: &Path,
) -> Result<(PathBuf, PathBuf)> {
    let ca = CertificateAuthority::load(&paths.ca_cert, &paths.ca_key)?;
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io("creating directory", out_dir, e))?;
    let (cert, key) = (out_dir.join("server.crt"), out_dir.join("server.key"));
    ensure_leaf(
        &cert,
        &key,
        &ca,
        &|der| peer::covers_hosts(der, hosts),
        &|| issue_peer_cert(&ca, name, hosts),
    )?;
    Ok((cert, key))
}

/// Keeps or (re)issues a client certificate `CN=<name>` (clientAuth) for the store's
/// `https://` client URLs in `out_dir` (`<name>.crt`, `<name>.key`; kubeadm's
/// `apiserver-etcd-client` and `etcd/healthcheck-client`), signed by the CA under `paths`.
/// Returns the certificate and key paths.
pub fn ensure_store_client_cert(
    paths: &PkiPaths,
    name: &str,
    out_dir: &Path,
) -> Result<(PathBuf, PathBuf)> {
    let ca = CertificateAuthority::load(&paths.ca_cert, &paths.ca_key)?;
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io("creating directory", out_dir, e))?;
    let (cert, key) = (
        out_dir.join(format!("{name}.crt")),
        out_dir.join(format!("{name}.key")),
    );
    ensure_leaf(
        &cert,
        &key,
        &ca,
        &|der| identity_from_der(der).is_ok_and(|(user, _)| user == name),
        &|| issue_client_cert(&ca, name, &[]),
    )?;
    Ok((cert, key))
}
