//! The HTTPS transport every outgoing webhook call of this server uses — admission and CRD
//! conversion webhooks ([`super::client`]) and the authentication and authorization
//! webhooks ([`crate::authz::client`]) — as Go's `http.Transport` serves upstream's webhook
//! clients: TLS offering ALPN `h2` and `http/1.1`; a server that picks `h2` gets one kept
//! HTTP/2 connection per endpoint and TLS profile, every concurrent call a stream on it
//! (one dial at a time, so a burst of calls does not open a connection each); one that
//! does not gets kept HTTP/1.1 connections, reused one call at a time.
//!
//! HTTP/2 calls speak `h2` directly from the calling task (no dispatch task, channel or
//! spawned body pipe per call, as hyper's client has), and the connection's writes are
//! coalesced ([`super::coalesce`]): calls queued together leave in one TLS write.
//!
//! Errors read as Go's transport errors (`dial tcp 127.0.0.1:1: connect: connection
//! refused`, `tls: failed to verify certificate: …`), without the `Post "<url>": ` prefix
//! the callers add. Deadlines are the callers'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};

/// A TLS client configuration with a stable identity: connections are kept per profile,
/// so two profiles never share one (another CA or client certificate).
#[derive(Clone)]
pub struct TlsProfile {
    id: String,
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for TlsProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsProfile")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl TlsProfile {
    /// `config` with ALPN `h2`, `http/1.1`, known as `id` (the same id must always name the
    /// same trust and client identity).
    pub fn new(id: String, mut config: rustls::ClientConfig) -> TlsProfile {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsProfile {
            id,
            config: Arc::new(config),
        }
    }

    /// A profile no other one shares connections with (a kubeconfig's client).
    pub fn unique(config: rustls::ClientConfig) -> TlsProfile {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        TlsProfile::new(format!("unique:{n}"), config)
    }
}

/// Where a call goes.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    /// Host to dial (an IP or a DNS name, no brackets).
    pub host: &'a str,
    /// Port to dial.
    pub port: u16,
    /// Name the server's certificate must be valid for.
    pub server_name: &'a str,
    /// The `Host` header (`:authority` on HTTP/2).
    pub authority: &'a str,
    /// Path and query.
    pub path: &'a str,
}

type H1 = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
/// A kept HTTP/2 connection: the handle calls open streams with, and whether its task ended.
#[derive(Clone)]
struct H2 {
    send: h2::client::SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
}

impl H2 {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Host, port, server name and TLS profile id.
type Key = (String, u16, String, String);

/// The kept connections of one key.
#[derive(Default)]
struct Slot {
    /// The HTTP/2 connection, shared by every call.
    h2: Option<H2>,
    /// Idle HTTP/1.1 connections.
    idle: Vec<H1>,
    /// The server did not pick `h2`: dial HTTP/1.1 connections as needed.
    h1_only: bool,
    /// Held while dialing, so concurrent calls wait for one connection to be made.
    dialing: Arc<tokio::sync::Mutex<()>>,
}

/// Idle HTTP/1.1 connections kept per key.
const IDLE_MAX: usize = 64;

fn pool() -> &'static Mutex<HashMap<Key, Slot>> {
    static POOL: OnceLock<Mutex<HashMap<Key, Slot>>> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

fn locked() -> std::sync::MutexGuard<'static, HashMap<Key, Slot>> {
    pool()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A connection ready for one call.
enum Conn {
    H1(H1),
    H2(H2),
}

/// A kept connection of `key`, if one is usable now; `Err` with the dial lock when the
/// caller should dial (HTTP/2 not known to be refused), `Ok(None)` for an HTTP/1.1 dial.
fn kept(key: &Key) -> std::result::Result<Option<Conn>, Arc<tokio::sync::Mutex<()>>> {
    let mut pool = locked();
    // Looked up first: the entry API would take an owned copy of the key on every call.
    if !pool.contains_key(key) {
        pool.insert(key.clone(), Slot::default());
    }
    let Some(slot) = pool.get_mut(key) else {
        return Ok(None);
    };
    if let Some(h2) = &slot.h2 {
        if !h2.is_closed() {
            return Ok(Some(Conn::H2(h2.clone())));
        }
        slot.h2 = None;
    }
    while let Some(h1) = slot.idle.pop() {
        if !h1.is_closed() && h1.is_ready() {
            return Ok(Some(Conn::H1(h1)));
        }
    }
    if slot.h1_only {
        return Ok(None);
    }
    Err(Arc::clone(&slot.dialing))
}

/// A connection for `ep`: a kept one (`true`), or a new one.
async fn connect(ep: &Endpoint<'_>, tls: &TlsProfile) -> std::result::Result<(Conn, bool), String> {
    let key = key_of(ep, tls);
    let dial_lock = match kept(&key) {
        Ok(Some(conn)) => return Ok((conn, true)),
        Ok(None) => None,
        Err(lock) => Some(lock),
    };
    let _dialing = match &dial_lock {
        Some(lock) => {
            let guard = lock.lock().await;
            // Another call may have made the connection while this one waited, or learnt
            // that the server speaks HTTP/1.1 only (then calls dial in parallel).
            match kept(&key) {
                Ok(Some(conn)) => return Ok((conn, true)),
                Ok(None) => None,
                Err(_) => Some(guard),
            }
        }
        None => None,
    };
    let conn = dial(ep, tls).await?;
    if let Conn::H2(h2) = &conn {
        locked().entry(key).or_default().h2 = Some(h2.clone());
    } else {
        locked().entry(key).or_default().h1_only = true;
    }
    Ok((conn, false))
}

/// Dials `ep`: TCP, TLS, then HTTP/2 or HTTP/1.1 as the server picked.
async fn dial(ep: &Endpoint<'_>, tls: &TlsProfile) -> std::result::Result<Conn, String> {
    let tcp = tokio::net::TcpStream::connect((ep.host, ep.port))
        .await
        .map_err(|e| transport_error(ep.host, ep.port, &e))?;
    let _ = tcp.set_nodelay(true);
    let name = rustls_pki_types::ServerName::try_from(ep.server_name.to_owned())
        .map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config))
        .connect(name, tcp)
        .await
        .map_err(|e| transport_error(ep.host, ep.port, &e))?;
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    if h2 {
        // Calls queued together leave in one TLS write ([`super::coalesce`]). Windows and
        // buffers as hyper's client sets them.
        let io = super::coalesce::Coalesce::new(stream);
        let (send, conn) = h2::client::Builder::new()
            .enable_push(false)
            .initial_window_size(2 << 20)
            .initial_connection_window_size(5 << 20)
            .max_send_buffer_size(1 << 20)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| e.to_string())?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = Arc::clone(&closed);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(err = %e, "webhook HTTP/2 connection ended");
            }
            ended.store(true, Ordering::Release);
        });
        return Ok(Conn::H2(H2 { send, closed }));
    }
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Conn::H1(sender))
}

/// POSTs `body` (JSON) to `ep` and returns the answer's status and body. `bearer` is sent
/// as `Authorization: Bearer …`. A kept connection that fails before an answer arrives (the
/// server closed it meanwhile) is dropped and the call made once more on a new one, as Go's
/// transport retries on a connection it reused.
pub async fn post(
    ep: &Endpoint<'_>,
    tls: &TlsProfile,
    bearer: Option<&str>,
    body: Bytes,
) -> std::result::Result<(http::StatusCode, Bytes), String> {
    let (conn, reused) = connect(ep, tls).await?;
    match send(ep, tls, bearer, body.clone(), conn).await {
        Err(Sent::Before(_)) if reused => {
            forget_h2(ep, tls);
            let (conn, _) = connect(ep, tls).await?;
            send(ep, tls, bearer, body, conn)
                .await
                .map_err(Sent::into_text)
        }
        other => other.map_err(Sent::into_text),
    }
}

/// Why a call on a connection failed.
enum Sent {
    /// Before the answer's headers arrived.
    Before(String),
    /// While its body was read.
    After(String),
}

impl Sent {
    fn into_text(self) -> String {
        match self {
            Sent::Before(e) | Sent::After(e) => e,
        }
    }
}

/// Drops the kept HTTP/2 connection of `ep` (it failed).
fn forget_h2(ep: &Endpoint<'_>, tls: &TlsProfile) {
    if let Some(slot) = locked().get_mut(&key_of(ep, tls)) {
        slot.h2 = None;
    }
}

fn key_of(ep: &Endpoint<'_>, tls: &TlsProfile) -> Key {
    (
        ep.host.to_owned(),
        ep.port,
        ep.server_name.to_owned(),
        tls.id.clone(),
    )
}

/// One exchange on `conn`.
async fn send(
    ep: &Endpoint<'_>,
    tls: &TlsProfile,
    bearer: Option<&str>,
    body: Bytes,
    conn: Conn,
) -> std::result::Result<(http::StatusCode, Bytes), Sent> {
    let h2 = matches!(conn, Conn::H2(_));
    let uri = if h2 {
        // HTTP/2 carries scheme and authority in the URI (`:scheme`, `:authority`).
        format!("https://{}{}", ep.authority, ep.path)
    } else {
        ep.path.to_owned()
    };
    let mut request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*");
    if h2 {
        request = request.header(http::header::CONTENT_LENGTH, body.len());
    } else {
        request = request.header(http::header::HOST, ep.authority);
    }
    if let Some(token) = bearer {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let before = |e: hyper::Error| Sent::Before(e.to_string());
    let after = |e: hyper::Error| Sent::After(e.to_string());
    match conn {
        Conn::H2(h) => {
            let request = request.body(()).map_err(|e| Sent::Before(e.to_string()))?;
            exchange_h2(h.send, request, body).await
        }
        Conn::H1(mut s) => {
            let request = request
                .body(Full::new(body))
                .map_err(|e| Sent::Before(e.to_string()))?;
            let response = s.send_request(request).await.map_err(before)?;
            let (parts, body) = response.into_parts();
            let answer = body.collect().await.map_err(after)?.to_bytes();
            keep_h1(ep, tls, s);
            Ok((parts.status, answer))
        }
    }
}

/// One exchange on a stream of an HTTP/2 connection, made by the calling task. Dropping it
/// (a deadline) resets the stream.
async fn exchange_h2(
    send: h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    body: Bytes,
) -> std::result::Result<(http::StatusCode, Bytes), Sent> {
    let before = |e: h2::Error| Sent::Before(e.to_string());
    let after = |e: h2::Error| Sent::After(e.to_string());
    let mut send = send.ready().await.map_err(before)?;
    let end = body.is_empty();
    let (response, mut stream) = send.send_request(request, end).map_err(before)?;
    if !end {
        // Buffered by `h2` and sent as the peer's window allows.
        stream.send_data(body, true).map_err(before)?;
    }
    let response = response.await.map_err(before)?;
    let status = response.status();
    let mut recv = response.into_body();
    let mut answer = bytes::BytesMut::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(after)?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        if answer.is_empty() && recv.is_end_stream() {
            // The whole answer in one frame (the usual case): no copy.
            return Ok((status, chunk));
        }
        answer.extend_from_slice(&chunk);
    }
    Ok((status, answer.freeze()))
}

/// Keeps an HTTP/1.1 connection for the next call to the same endpoint.
fn keep_h1(ep: &Endpoint<'_>, tls: &TlsProfile, sender: H1) {
    if sender.is_closed() {
        return;
    }
    let key = key_of(ep, tls);
    let mut pool = locked();
    let idle = &mut pool.entry(key).or_default().idle;
    if idle.len() < IDLE_MAX {
        idle.push(sender);
    }
}

/// Go's text of a failed dial or handshake.
pub fn transport_error(host: &str, port: u16, e: &std::io::Error) -> String {
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    if let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return match tls {
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                    .into()
            }
            rustls::Error::InvalidCertificate(c) => {
                format!("tls: failed to verify certificate: x509: {c:?}")
            }
            other => format!("remote error: tls: {other}"),
        };
    }
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {addr}: connect: connection refused")
        }
        _ => format!("dial tcp {addr}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_dials_read_as_go() {
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            transport_error("127.0.0.1", 1, &e),
            "dial tcp 127.0.0.1:1: connect: connection refused"
        );
        assert_eq!(
            transport_error("::1", 2, &e),
            "dial tcp [::1]:2: connect: connection refused"
        );
    }
}
