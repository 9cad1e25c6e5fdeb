//! The aggregator's HTTPS client to extension API servers: TLS verified against the
//! APIService's `caBundle` (or not at all with `insecureSkipTLSVerify`), the front-proxy
//! client certificate presented, the server name `<service>.<namespace>.svc` as upstream.
//! HTTP/2 connections (when the server offers it) are kept and shared per endpoint; an
//! HTTP/1.1 server gets a connection per request; upgrades always get their own HTTP/1.1
//! connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The front-proxy client identity (`--proxy-client-cert-file`, `--proxy-client-key-file`).
#[derive(Debug)]
pub struct ProxyIdentity {
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for ProxyIdentity {
    fn clone(&self) -> Self {
        ProxyIdentity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl ProxyIdentity {
    /// Reads the PEM certificate chain and key.
    pub fn load(cert: &std::path::Path, key: &std::path::Path) -> Result<Self, String> {
        let certs = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("{}: {e}", cert.display()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        let key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
        Ok(ProxyIdentity { certs, key })
    }
}

/// A verifier that accepts any server certificate (`insecureSkipTLSVerify`), still checking
/// the handshake signatures.
#[derive(Debug)]
struct Insecure(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Insecure {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// How to reach one extension server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Address to connect to.
    pub host: String,
    /// Port to connect to.
    pub port: u16,
    /// Name the certificate must be valid for (`<service>.<namespace>.svc`).
    pub server_name: String,
    /// `caBundle` (PEM).
    pub ca_bundle: Vec<u8>,
    /// `insecureSkipTLSVerify`.
    pub insecure: bool,
}

/// A request sender on a kept or new connection.
pub enum Sender {
    /// HTTP/2 (shared).
    H2(hyper::client::conn::http2::SendRequest<axum::body::Body>),
    /// HTTP/1.1 (this request's own).
    H1(hyper::client::conn::http1::SendRequest<axum::body::Body>),
}

/// caBundle, insecure, HTTP/1.1 only: what a TLS configuration depends on.
type TlsKey = (Vec<u8>, bool, bool);

/// The client: TLS configurations and kept HTTP/2 connections.
pub struct Client {
    identity: Option<ProxyIdentity>,
    configs: Mutex<HashMap<TlsKey, Arc<rustls::ClientConfig>>>,
    h2: Mutex<HashMap<Endpoint, hyper::client::conn::http2::SendRequest<axum::body::Body>>>,
}

impl Client {
    /// A client presenting `identity` (none: no client certificate).
    pub fn new(identity: Option<ProxyIdentity>) -> Self {
        Client {
            identity,
            configs: Mutex::default(),
            h2: Mutex::default(),
        }
    }

    fn tls(&self, ep: &Endpoint, h1_only: bool) -> Result<Arc<rustls::ClientConfig>, String> {
        let key = (ep.ca_bundle.clone(), ep.insecure, h1_only);
        if let Some(c) = self
            .configs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(c));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if ep.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Insecure(provider)))
        } else {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&ep.ca_bundle).flatten() {
                roots
                    .add(cert)
                    .map_err(|e| format!("invalid caBundle: {e}"))?;
            }
            builder.with_root_certificates(roots)
        };
        let mut config = match &self.identity {
            Some(id) => builder
                .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
                .map_err(|e| e.to_string())?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = if h1_only {
            vec![b"http/1.1".to_vec()]
        } else {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        };
        let config = Arc::new(config);
        let mut configs = self.configs.lock().unwrap_or_else(PoisonError::into_inner);
        if configs.len() >= 64 {
            configs.clear();
        }
        configs.insert(key, Arc::clone(&config));
        Ok(config)
    }

    /// A sender to `ep`: a kept HTTP/2 connection, or a new connection (HTTP/1.1 only when
    /// `h1_only`, for upgrades). Errors read as Go's dial and handshake errors.
    pub async fn connect(&self, ep: &Endpoint, h1_only: bool) -> Result<Sender, String> {
        if !h1_only {
            let kept = self
                .h2
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(ep)
                .cloned();
            if let Some(s) = kept {
                if !s.is_closed() && s.is_ready() {
                    return Ok(Sender::H2(s));
                }
                self.h2
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(ep);
            }
        }
        let config = self.tls(ep, h1_only)?;
        let addr = if ep.host.contains(':') {
            format!("[{}]:{}", ep.host, ep.port)
        } else {
            format!("{}:{}", ep.host, ep.port)
        };
        let tcp = tokio::net::TcpStream::connect((ep.host.as_str(), ep.port))
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!("dial tcp {addr}: connect: connection refused")
                }
                _ => format!("dial tcp {addr}: {e}"),
            })?;
        let _ = tcp.set_nodelay(true);
        let name = rustls::pki_types::ServerName::try_from(ep.server_name.clone())
            .map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("remote error: tls: {e}"))?;
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        if h2 {
            let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.h2
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(ep.clone(), sender.clone());
            Ok(Sender::H2(sender))
        } else {
            let (sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = conn.with_upgrades().await;
            });
            Ok(Sender::H1(sender))
        }
    }
}

impl Sender {
    /// Whether requests carry an absolute URI (HTTP/2) rather than a path and `Host`.
    pub fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }

    /// Sends `req`.
    pub async fn send(
        self,
        req: http::Request<axum::body::Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        match self {
            Sender::H2(mut s) => s.send_request(req).await.map_err(|e| e.to_string()),
            Sender::H1(mut s) => s.send_request(req).await.map_err(|e| e.to_string()),
        }
    }
}
