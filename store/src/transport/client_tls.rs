//! TLS on the etcd v3 client port, both ends.
//!
//! - **Serving** (`https://` client URLs of `capstan store` and of `capstan server`'s
//!   member): etcd's `--cert-file`, `--key-file`, `--trusted-ca-file` and
//!   `--client-cert-auth`. [`acceptor`] builds the rustls server (ALPN `h2`, as gRPC needs);
//!   [`incoming`] turns a listener into a stream of handshaken connections, each handshake in
//!   a task of its own so a slow or hostile client never holds up the others. With
//!   `--client-cert-auth` a client without a certificate signed by the trusted CA fails the
//!   handshake, as etcd's `RequireAndVerifyClientCert`.
//! - **Dialling** (`--etcd-servers=https://…` with `--etcd-cafile`, `--etcd-certfile`,
//!   `--etcd-keyfile`, as kube-apiserver): [`DialTls`] loads the files, [`TlsConnector`] is
//!   the tonic connector that dials the endpoints in turn (failing over to the next one when
//!   a member is down) and [`probe`] checks one endpoint's handshake up front so a wrong CA
//!   or a refused client certificate is reported as such rather than as "unavailable".

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;

use super::tls::{certs, invalid, server_name};
use crate::config::ClientTls;
use crate::error::{Result, StoreError};

/// How long a client gets to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca_file: &std::path::Path) -> Result<Arc<rustls::RootCertStore>> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in certs(ca_file)? {
        roots
            .add(ca)
            .map_err(|e| invalid("loading CA certificate", ca_file, e))?;
    }
    Ok(Arc::new(roots))
}

/// The TLS server of the `https://` client URLs, from `tls`. `None` when no `--cert-file`
/// is configured.
pub fn acceptor(tls: &ClientTls) -> Result<Option<tokio_rustls::TlsAcceptor>> {
    let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) else {
        if tls.cert_file.is_some() || tls.key_file.is_some() {
            return Err(StoreError::InvalidArgument(
                "--cert-file and --key-file must be given together".into(),
            ));
        }
        return Ok(None);
    };
    let chain = certs(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| invalid("reading private key from", key_file, e))?;
    let tls_err = |e: rustls::Error| StoreError::InvalidArgument(format!("client TLS: {e}"));
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?;
    let builder = if tls.client_cert_auth {
        let ca_file = tls.trusted_ca_file.as_ref().ok_or_else(|| {
            StoreError::InvalidArgument(
                "--client-cert-auth needs --trusted-ca-file to verify client certificates".into(),
            )
        })?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots(ca_file)?,
            provider(),
        )
        .build()
        .map_err(|e| StoreError::InvalidArgument(format!("client TLS: {e}")))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_single_cert(chain, key).map_err(tls_err)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}

/// One accepted client connection: plain TCP or TLS.
pub enum ClientConn {
    /// An `http://` client URL's connection.
    Plain(TcpStream),
    /// An `https://` client URL's connection, handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ClientConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientConn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientConn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for ClientConn {
    type ConnectInfo = Option<SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        match self {
            ClientConn::Plain(s) => s.peer_addr().ok(),
            ClientConn::Tls(s) => s.get_ref().0.peer_addr().ok(),
        }
    }
}

/// The connections of `listener`, handshaken with `tls` when given. Failed handshakes are
/// logged and dropped; the stream ends when the listener fails for good.
pub fn incoming(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> ReceiverStream<io::Result<ClientConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an etcd client connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if tx.is_closed() {
                        return;
                    }
                    continue;
                }
            };
            // Small gRPC frames must not wait for Nagle's algorithm.
            let _ = tcp.set_nodelay(true);
            let Some(acceptor) = tls.clone() else {
                if tx.send(Ok(ClientConn::Plain(tcp))).await.is_err() {
                    return;
                }
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(conn)) => {
                        let _ = tx.send(Ok(ClientConn::Tls(Box::new(conn)))).await;
                    }
                    Ok(Err(e)) => {
                        tracing::info!(%peer, error = %e, "etcd client TLS handshake failed");
                    }
                    Err(_) => tracing::info!(%peer, "etcd client TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// kube-apiserver's `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`.
#[derive(Debug, Clone, Default)]
pub struct DialTls {
    /// CA bundle the servers' certificates must chain to.
    pub ca_file: Option<PathBuf>,
    /// Client certificate presented to the servers.
    pub cert_file: Option<PathBuf>,
    /// Its private key.
    pub key_file: Option<PathBuf>,
}

impl DialTls {
    /// Whether any file is set.
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }

    /// The rustls client configuration (ALPN `h2`).
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let ca_file = self.ca_file.as_ref().ok_or_else(|| {
            StoreError::InvalidArgument(
                "https:// --etcd-servers need --etcd-cafile to verify the servers".into(),
            )
        })?;
        let tls_err = |e: rustls::Error| StoreError::InvalidArgument(format!("etcd TLS: {e}"));
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_root_certificates(roots(ca_file)?);
        let mut config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let chain = certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| invalid("reading private key from", key, e))?;
                builder.with_client_auth_cert(chain, key).map_err(tls_err)?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(StoreError::InvalidArgument(
                    "--etcd-certfile and --etcd-keyfile must be given together".into(),
                ));
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// One `https://host:port` endpoint.
#[derive(Debug, Clone)]
pub struct TlsEndpoint {
    /// The URL as given.
    pub url: String,
    host: String,
    port: u16,
}

impl TlsEndpoint {
    /// Parses `https://host:port[/]`.
    pub fn parse(url: &str) -> Result<TlsEndpoint> {
        let bad = |why: &str| StoreError::InvalidArgument(format!("--etcd-servers {url}: {why}"));
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| bad("expected https://"))?;
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| bad("expected https://HOST:PORT"))?;
        let port = port.parse().map_err(|_| bad("expected a numeric port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("expected a host"));
        }
        Ok(TlsEndpoint {
            url: url.to_owned(),
            host: host.to_owned(),
            port,
        })
    }

    /// TCP connection and TLS handshake (the server's certificate checked for `host`).
    async fn dial(
        &self,
        config: &Arc<rustls::ClientConfig>,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = server_name(&self.host).map_err(io::Error::other)?;
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        let _ = tcp.set_nodelay(true);
        tokio_rustls::TlsConnector::from(Arc::clone(config))
            .connect(name, tcp)
            .await
    }
}

/// Dials `endpoint` once and checks that the server accepts this client: after the
/// handshake it sends the HTTP/2 preface and waits for the server's first frame, so a client
/// certificate the server refuses (reported by TLS 1.3 only after the handshake) shows up
/// here. `Err` carries the TLS error; a server that cannot be reached is `Ok(false)` (it may
/// come up later).
pub async fn probe(endpoint: &TlsEndpoint, config: &Arc<rustls::ClientConfig>) -> Result<bool> {
    let fail = |e: io::Error| {
        StoreError::InvalidArgument(format!("TLS with {}: {}", endpoint.url, tls_reason(&e)))
    };
    let attempt = async {
        let mut tls = match endpoint.dial(config).await {
            Ok(t) => t,
            Err(e) if is_tls_error(&e) => return Err(fail(e)),
            Err(_) => return Ok(false),
        };
        // Connection preface and an empty SETTINGS frame.
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        tls.write_all(&hello).await.map_err(fail)?;
        tls.flush().await.map_err(fail)?;
        let mut frame = [0u8; 9];
        match tls.read(&mut frame).await {
            Ok(0) => Err(StoreError::InvalidArgument(format!(
                "TLS with {}: the server closed the connection (client certificate refused?)",
                endpoint.url
            ))),
            Ok(_) => Ok(true),
            Err(e) => Err(fail(e)),
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
        Ok(r) => r,
        Err(_) => Ok(false),
    }
}

/// Whether an I/O error came from TLS (rather than from the network).
fn is_tls_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidData
        || e.get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// The TLS error inside `e`, worded for a person.
fn tls_reason(e: &io::Error) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(c)) => {
            format!("the server's certificate is not trusted by --etcd-cafile ({c:?})")
        }
        Some(rustls::Error::AlertReceived(a)) => {
            format!("the server refused this client's certificate (TLS alert {a:?})")
        }
        Some(other) => other.to_string(),
        None => e.to_string(),
    }
}

/// tonic connector over TLS to a list of endpoints: each new connection tries them in turn,
/// starting after the last one that failed, so the channel fails over when a member is down.
#[derive(Clone)]
pub struct TlsConnector {
    endpoints: Arc<Vec<TlsEndpoint>>,
    config: Arc<rustls::ClientConfig>,
    next: Arc<AtomicUsize>,
}

impl TlsConnector {
    /// A connector to `endpoints` with `config`.
    pub fn new(endpoints: Vec<TlsEndpoint>, config: Arc<rustls::ClientConfig>) -> Self {
        TlsConnector {
            endpoints: Arc::new(endpoints),
            config,
            next: Arc::new(AtomicUsize::new(0)),
        }
    }
}

type DialFuture = Pin<
    Box<
        dyn Future<Output = io::Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>>> + Send,
    >,
>;

impl tonic::codegen::Service<tonic::codegen::http::Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = DialFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: tonic::codegen::http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let n = this.endpoints.len();
            let start = this.next.load(Ordering::Relaxed);
            let mut last = io::Error::other("no etcd endpoints");
            for i in 0..n {
                let idx = (start + i) % n;
                let ep = &this.endpoints[idx];
                match ep.dial(&this.config).await {
                    Ok(s) => {
                        this.next.store(idx, Ordering::Relaxed);
                        return Ok(TokioIo::new(s));
                    }
                    Err(e) => {
                        tracing::debug!(url = %ep.url, error = %e, "dialling etcd endpoint");
                        last = io::Error::new(e.kind(), format!("{}: {}", ep.url, tls_reason(&e)));
                    }
                }
            }
            this.next.store((start + 1) % n.max(1), Ordering::Relaxed);
            Err(last)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let ep = TlsEndpoint::parse("https://127.0.0.1:2379").unwrap();
        assert_eq!((ep.host.as_str(), ep.port), ("127.0.0.1", 2379));
        let ep = TlsEndpoint::parse("https://[::1]:2379/").unwrap();
        assert_eq!((ep.host.as_str(), ep.port), ("::1", 2379));
        assert!(TlsEndpoint::parse("http://127.0.0.1:2379").is_err());
        assert!(TlsEndpoint::parse("https://127.0.0.1").is_err());
    }

    #[test]
    fn half_a_key_pair_is_refused() {
        let t = ClientTls {
            cert_file: Some("/nonexistent".into()),
            ..ClientTls::default()
        };
        assert!(acceptor(&t).is_err());
        assert!(acceptor(&ClientTls::default()).unwrap().is_none());
        let d = DialTls {
            ca_file: None,
            ..DialTls::default()
        };
        assert!(d.client_config().is_err());
    }
}
