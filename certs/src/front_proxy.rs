//! The front-proxy PKI of API aggregation (kubeadm's `front-proxy-ca` and
//! `front-proxy-client`): a second CA, trusted only for request-header authentication, and
//! the client certificate the API server presents when it proxies a request to an extension
//! API server (`--proxy-client-cert-file`/`--proxy-client-key-file`). Extension servers
//! trust `X-Remote-User`/`X-Remote-Group`/`X-Remote-Extra-*` only from a client whose
//! certificate this CA signed (`--requestheader-client-ca-file`) and whose common name is
//! allowed (`--requestheader-allowed-names`).
//!
//! Under `<dir>/pki/`: `front-proxy-ca.{crt,key}` (CN=front-proxy-ca) and
//! `front-proxy-client.{crt,key}` (CN=front-proxy-client, clientAuth).

use std::path::{Path, PathBuf};

use crate::ca::CertificateAuthority;
use crate::client::issue_client_cert;
use crate::error::{Error, Result};
use crate::identity::identity_from_der;
use crate::layout::{PRIVATE_MODE, PUBLIC_MODE, read_if_exists, write_atomic};

/// Common name of the front-proxy CA (kubeadm's).
pub const FRONT_PROXY_CA_NAME: &str = "front-proxy-ca";
/// Common name of the proxy's client certificate (kubeadm's), the one allowed name.
pub const FRONT_PROXY_CLIENT_NAME: &str = "front-proxy-client";

/// Paths of the front-proxy files under one `pki/` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontProxyPaths {
    /// `front-proxy-ca.crt`: `--requestheader-client-ca-file`.
    pub ca_cert: PathBuf,
    /// `front-proxy-ca.key`.
    pub ca_key: PathBuf,
    /// `front-proxy-client.crt`: `--proxy-client-cert-file`.
    pub client_cert: PathBuf,
    /// `front-proxy-client.key`: `--proxy-client-key-file`.
    pub client_key: PathBuf,
}

impl FrontProxyPaths {
    /// The layout under `pki_dir`. Touches nothing on disk.
    pub fn new(pki_dir: &Path) -> Self {
        FrontProxyPaths {
            ca_cert: pki_dir.join("front-proxy-ca.crt"),
            ca_key: pki_dir.join("front-proxy-ca.key"),
            client_cert: pki_dir.join("front-proxy-client.crt"),
            client_key: pki_dir.join("front-proxy-client.key"),
        }
    }
}

/// Creates the front-proxy CA and client certificate under `pki_dir` where missing (the
/// client certificate by the same keep-or-reissue rule as the others), keeps what exists.
pub fn ensure_front_proxy(pki_dir: &Path) -> Result<FrontProxyPaths> {
    let paths = FrontProxyPaths::new(pki_dir);
    let ca = match (
        read_if_exists(&paths.ca_cert)?,
        read_if_exists(&paths.ca_key)?,
    ) {
        (Some(_), Some(_)) => CertificateAuthority::load(&paths.ca_cert, &paths.ca_key)?,
        (None, None) => {
            let ca = CertificateAuthority::generate_named(FRONT_PROXY_CA_NAME)?;
            write_atomic(&paths.ca_key, ca.key_pem().as_bytes(), PRIVATE_MODE)?;
            write_atomic(&paths.ca_cert, ca.cert_pem().as_bytes(), PUBLIC_MODE)?;
            ca
        }
        (Some(_), None) => {
            return Err(Error::IncompletePair {
                present: paths.ca_cert.clone(),
                missing: paths.ca_key.clone(),
            });
        }
        (None, Some(_)) => {
            return Err(Error::IncompletePair {
                present: paths.ca_key.clone(),
                missing: paths.ca_cert.clone(),
            });
        }
    };
    crate::ensure_leaf(
        &paths.client_cert,
        &paths.client_key,
        &ca,
        &|der| identity_from_der(der).is_ok_and(|(user, _)| user == FRONT_PROXY_CLIENT_NAME),
        &|| issue_client_cert(&ca, FRONT_PROXY_CLIENT_NAME, &[]),
    )?;
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_proxy_pki_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let paths = ensure_front_proxy(dir.path()).unwrap();
        let cert = std::fs::read(&paths.client_cert).unwrap();
        let again = ensure_front_proxy(dir.path()).unwrap();
        assert_eq!(paths, again);
        assert_eq!(std::fs::read(&again.client_cert).unwrap(), cert);
        let ca = CertificateAuthority::load(&paths.ca_cert, &paths.ca_key).unwrap();
        let der = crate::ca::cert_der_from_pem(&String::from_utf8(cert).unwrap(), "").unwrap();
        assert!(ca.has_signed(&der));
        assert_eq!(identity_from_der(&der).unwrap().0, FRONT_PROXY_CLIENT_NAME);
    }
}
