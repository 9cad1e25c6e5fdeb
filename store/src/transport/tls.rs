//! Mutually authenticated TLS between members (`https://` peer URLs), from etcd's
//! `--peer-cert-file`, `--peer-key-file`, `--peer-trusted-ca-file` and
//! `--peer-client-cert-auth`.
//!
//! Every member presents the same certificate as server (to members dialling it) and as
//! client (when it dials); the dialler always verifies the server against the trusted CA and
//! the URL's host, and the listener verifies the client against the same CA when
//! `--peer-client-cert-auth` is set (as etcd does).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::config::PeerTls;
use crate::error::{Result, StoreError};

/// The two rustls configurations of a member.
#[derive(Clone)]
pub struct PeerTlsConfig {
    /// For accepting peer connections.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// For dialling peers.
    pub connector: tokio_rustls::TlsConnector,
    /// The client configuration itself, for the one blocking dial a joining member makes.
    pub client: Arc<rustls::ClientConfig>,
}

pub(crate) fn invalid(what: &str, path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::InvalidArgument(format!("{what} {}: {e}", path.display()))
}

pub(crate) fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| invalid("reading certificates from", path, e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| invalid("reading certificates from", path, e))?;
    if certs.is_empty() {
        return Err(invalid(
            "reading certificates from",
            path,
            "no CERTIFICATE block",
        ));
    }
    Ok(certs)
}

impl PeerTlsConfig {
    /// Loads the files named in `tls`. `None` when no peer certificate is configured.
    pub fn load(tls: &PeerTls) -> Result<Option<PeerTlsConfig>> {
        let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) else {
            if tls.cert_file.is_some() || tls.key_file.is_some() {
                return Err(StoreError::InvalidArgument(
                    "--peer-cert-file and --peer-key-file must be given together".into(),
                ));
            }
            return Ok(None);
        };
        let ca_file = tls.trusted_ca_file.as_ref().ok_or_else(|| {
            StoreError::InvalidArgument(
                "https:// peer URLs need --peer-trusted-ca-file to verify peers".into(),
            )
        })?;
        let chain = certs(cert_file)?;
        let key = PrivateKeyDer::from_pem_file(key_file)
            .map_err(|e| invalid("reading private key from", key_file, e))?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in certs(ca_file)? {
            roots
                .add(ca)
                .map_err(|e| invalid("loading CA certificate", ca_file, e))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls_err = |e: rustls::Error| StoreError::InvalidArgument(format!("peer TLS: {e}"));

        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?;
        let server = if tls.client_cert_auth {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::clone(&roots),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| StoreError::InvalidArgument(format!("peer TLS: {e}")))?;
            server.with_client_cert_verifier(verifier)
        } else {
            server.with_no_client_auth()
        }
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(tls_err)?;

        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(tls_err)?;
        let client = Arc::new(client);
        Ok(Some(PeerTlsConfig {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connector: tokio_rustls::TlsConnector::from(Arc::clone(&client)),
            client,
        }))
    }
}

/// The name a peer's certificate must carry: the host of its URL.
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| StoreError::InvalidArgument(format!("peer host {host:?}: {e}")))
}
