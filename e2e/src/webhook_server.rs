//! An HTTPS server for the webhooks tests and benchmarks write themselves (admission,
//! conversion, authorization and token webhooks): TLS with a PEM certificate and key read
//! when the first connection arrives (so a test may start it before `capstan` has written
//! its `pki/`), ALPN `h2` and `http/1.1` — HTTP/2 when the client offers it, as Go's and
//! Capstan's webhook clients do — on a free 127.0.0.1 port, served by its own tokio
//! runtime until [`WebhookServer::stop`] or drop. Each request goes to a handler function.
//!
//! [`WebhookServer::start_h2`] is the lean variant benchmarks use for a webhook on the same
//! cores as the server it measures: HTTP/2 only, each connection served by one task that
//! speaks `h2` directly and answers every request from its body synchronously (no task,
//! service stack or body type per request, as hyper's server has); the answers of requests
//! that arrived together leave in one write.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use anyhow::{Context as _, Result};
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use rustls::pki_types::pem::PemObject as _;

/// A response of a handler.
pub type Reply = Response<Full<Bytes>>;

/// A running server.
pub struct WebhookServer {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    runtime: Option<tokio::runtime::Runtime>,
}

/// The TLS acceptor for `cert` and `key` (PEM files), offering `h2` and `http/1.1`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor> {
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .context("certificate PEM")?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading {}", key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A JSON response with status 200.
pub fn json_reply(body: &serde_json::Value) -> Reply {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The whole body of `req` and its path with query.
pub async fn read(req: Request<Incoming>) -> (String, Bytes) {
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (path, body)
}

impl WebhookServer {
    /// Serves `handler` over TLS with `cert`/`key` (PEM files, read at the first
    /// connection) on a free 127.0.0.1 port, with `threads` runtime workers.
    pub fn start<F, Fut>(cert: PathBuf, key: PathBuf, threads: usize, handler: F) -> Result<Self>
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("webhook-server")
            .enable_all()
            .build()
            .context("webhook server runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .context("binding the webhook server")?;
        let port = listener.local_addr()?.port();
        let handler = Arc::new(handler);
        runtime.spawn(async move {
            let tls: OnceLock<tokio_rustls::TlsAcceptor> = OnceLock::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = match tls.get() {
                    Some(a) => a.clone(),
                    None => match acceptor(&cert, &key) {
                        Ok(a) => tls.get_or_init(|| a).clone(),
                        Err(e) => {
                            eprintln!("webhook server: {e:#}");
                            continue;
                        }
                    },
                };
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let handler = Arc::clone(&handler);
                        async move { Ok::<_, Infallible>(handler(req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        Ok(WebhookServer {
            port,
            runtime: Some(runtime),
        })
    }

    /// Serves `answer` — the JSON body of a 200 answer made from the request's body — over
    /// TLS with `cert`/`key` (read at the first connection), HTTP/2 only, on a free
    /// 127.0.0.1 port with one runtime worker: the lean server of the module docs.
    pub fn start_h2<F>(cert: PathBuf, key: PathBuf, answer: F) -> Result<Self>
    where
        F: Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("webhook-server")
            .enable_all()
            .build()
            .context("webhook server runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .context("binding the webhook server")?;
        let port = listener.local_addr()?.port();
        let answer = Arc::new(answer);
        runtime.spawn(async move {
            let tls: OnceLock<tokio_rustls::TlsAcceptor> = OnceLock::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = match tls.get() {
                    Some(a) => a.clone(),
                    None => match h2_acceptor(&cert, &key) {
                        Ok(a) => tls.get_or_init(|| a).clone(),
                        Err(e) => {
                            eprintln!("webhook server: {e:#}");
                            continue;
                        }
                    },
                };
                let answer = Arc::clone(&answer);
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if let Err(e) = serve_h2(stream, &*answer).await {
                        eprintln!("webhook server: HTTP/2 connection: {e}");
                    }
                });
            }
        });
        Ok(WebhookServer {
            port,
            runtime: Some(runtime),
        })
    }

    /// Stops serving: the port refuses connections from now on.
    pub fn stop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// The TLS acceptor of [`WebhookServer::start_h2`]: [`acceptor`] offering `h2` only.
fn h2_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor> {
    let mut config = rustls::ServerConfig::clone(acceptor(cert, key)?.config());
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A request of [`serve_h2`] whose body is still arriving.
struct Pending {
    body: h2::RecvStream,
    respond: h2::server::SendResponse<Bytes>,
    read: Vec<u8>,
}

/// Serves one HTTP/2 connection from the calling task: accepts streams, gathers each
/// request's body as the connection reads it, and answers it with `answer` once complete.
async fn serve_h2<T, F>(io: T, answer: &F) -> std::result::Result<(), h2::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    F: Fn(&[u8]) -> Vec<u8> + ?Sized,
{
    let mut conn = h2::server::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .max_concurrent_streams(1024)
        .handshake::<_, Bytes>(io)
        .await?;
    let mut pending: Vec<Pending> = Vec::new();
    std::future::poll_fn(|cx| {
        // Accepting drives the connection: reads frames, sends what answers queued.
        loop {
            match conn.poll_accept(cx) {
                Poll::Ready(Some(Ok((req, respond)))) => pending.push(Pending {
                    body: req.into_body(),
                    respond,
                    read: Vec::new(),
                }),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => break,
            }
        }
        pending.retain_mut(|p| {
            loop {
                match p.body.poll_data(cx) {
                    Poll::Ready(Some(Ok(chunk))) => {
                        let _ = p.body.flow_control().release_capacity(chunk.len());
                        p.read.extend_from_slice(&chunk);
                    }
                    Poll::Ready(Some(Err(_))) => return false,
                    Poll::Ready(None) => {
                        reply_h2(&mut p.respond, Bytes::from(answer(&p.read)));
                        return false;
                    }
                    Poll::Pending => return true,
                }
            }
        });
        Poll::Pending
    })
    .await
}

/// Sends `body` as a 200 JSON answer on `respond` (queued; the connection writes it).
fn reply_h2(respond: &mut h2::server::SendResponse<Bytes>, body: Bytes) {
    let mut head = Response::new(());
    head.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    head.headers_mut()
        .insert(hyper::header::CONTENT_LENGTH, body.len().into());
    if let Ok(mut stream) = respond.send_response(head, false) {
        let _ = stream.send_data(body, true);
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop();
    }
}
