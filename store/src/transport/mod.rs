//! Peer transport: Raft messages between the members of a cluster, over TCP for `http://`
//! peer URLs and mutually authenticated TLS for `https://` ones ([`tls`]).
//!
//! - **Outbound:** one bounded queue and one writer task per peer. The driver's
//!   [`Transport::send`] only `try_send`s into the queue, so it never blocks: a full queue or a
//!   broken link drops the message and tells Raft the peer is unreachable
//!   (`report_unreachable`), and Raft sends again (heartbeats, probes, retransmission). The
//!   writer takes everything queued when it wakes up and writes it as one frame (batching).
//! - **Snapshots:** a `MsgSnapshot` carries the whole state machine; it is streamed on a
//!   connection of its own and the outcome reported to Raft (`report_snapshot`), so a large
//!   snapshot never delays heartbeats.
//! - **Inbound:** [`serve`] accepts connections on `--listen-peer-urls`, checks the hello
//!   (same cluster, addressed to this member), records the sender's name and client URLs, and
//!   hands each batch to the driver as one request.
//!
//! The wire format is in [`wire`]. Architecture invariant: nothing here touches `RawNode`;
//! everything reaches the driver through its request queue.

pub mod client_tls;
pub mod query;
pub mod tls;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::{Message, MessageType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::error::{Result, StoreError};
use crate::node::member::Membership;
use crate::node::transport::Transport;
use crate::node::{MemberIds, Request};
pub use tls::PeerTlsConfig;

/// Messages queued per peer before new ones are dropped.
const QUEUE: usize = 4096;
/// How long dialling a peer may take (etcd's peer dial timeout).
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one frame may take to write before the link is considered broken.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before dialling a peer again after a failure.
const RETRY: Duration = Duration::from_millis(100);

/// A parsed peer URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUrl {
    /// `https://`.
    pub tls: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl PeerUrl {
    /// Parses `http://host:port` or `https://host:port`.
    pub fn parse(url: &str) -> Result<PeerUrl> {
        let invalid = |why: &str| StoreError::InvalidArgument(format!("peer URL {url:?}: {why}"));
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(invalid("expected http:// or https://"));
        };
        let hostport = rest.trim_end_matches('/');
        let (host, port) = hostport
            .rsplit_once(':')
            .ok_or_else(|| invalid("expected host:port"))?;
        let port = port.parse().map_err(|_| invalid("bad port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(invalid("empty host"));
        }
        Ok(PeerUrl {
            tls,
            host: host.to_owned(),
            port,
        })
    }

    /// The address to listen on (`localhost` means the IPv4 loopback address).
    pub fn listen_addr(&self) -> Result<SocketAddr> {
        let host = if self.host == "localhost" {
            "127.0.0.1"
        } else {
            &self.host
        };
        let ip: std::net::IpAddr = host.parse().map_err(|_| {
            StoreError::InvalidArgument(format!(
                "listen peer URL host {:?} must be an IP address",
                self.host
            ))
        })?;
        Ok(SocketAddr::new(ip, self.port))
    }
}

/// What every task of the transport shares.
struct Ctx {
    ids: MemberIds,
    name: String,
    client_urls: Vec<String>,
    membership: Membership,
    tls: Option<PeerTlsConfig>,
    /// The driver's request queue (unbounded, so sending never blocks).
    driver: std::sync::mpsc::Sender<Request>,
}

impl Ctx {
    fn report(&self, req: Request) {
        let _ = self.driver.send(req);
    }

    /// The answer to a membership query.
    fn cluster_info(&self) -> wire::ClusterInfo {
        wire::ClusterInfo {
            cluster_id: self.ids.cluster_id,
            members: self
                .membership
                .list()
                .into_iter()
                .map(|m| wire::MemberEntry {
                    name: if m.id == self.ids.member_id {
                        self.name.clone()
                    } else {
                        m.name
                    },
                    id: m.id,
                    is_learner: m.is_learner,
                    peer_urls: m.peer_urls,
                })
                .collect(),
        }
    }

    fn hello(&self, to: u64) -> wire::Hello {
        wire::Hello {
            cluster_id: self.ids.cluster_id,
            from: self.ids.member_id,
            to,
            name: self.name.clone(),
            client_urls: self.client_urls.clone(),
        }
    }
}

type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// A peer connection, plain or TLS.
trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// The transport of a multi-member cluster (see the module docs).
pub struct PeerTransport {
    ctx: Arc<Ctx>,
    runtime: tokio::runtime::Handle,
    queues: HashMap<u64, mpsc::Sender<Message>>,
    stop: watch::Sender<bool>,
}

impl PeerTransport {
    /// Binds the peer listeners and returns the transport. Must be called within a tokio
    /// runtime, whose handle the transport keeps for its tasks.
    pub(crate) fn start(
        ids: MemberIds,
        name: String,
        client_urls: Vec<String>,
        listen_urls: &[String],
        membership: Membership,
        tls: Option<PeerTlsConfig>,
        driver: std::sync::mpsc::Sender<Request>,
    ) -> Result<PeerTransport> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::InvalidArgument("a multi-member store needs a tokio runtime".into())
        })?;
        let ctx = Arc::new(Ctx {
            ids,
            name,
            client_urls,
            membership,
            tls,
            driver,
        });
        let (stop, stop_rx) = watch::channel(false);
        for url in listen_urls {
            let parsed = PeerUrl::parse(url)?;
            if parsed.tls && ctx.tls.is_none() {
                return Err(StoreError::InvalidArgument(format!(
                    "peer URL {url} is https:// but no --peer-cert-file/--peer-key-file given"
                )));
            }
            let addr = parsed.listen_addr()?;
            let std_listener = std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(StoreError::io("listening for peers on", addr.to_string()))?;
            let listener = {
                let _guard = runtime.enter();
                TcpListener::from_std(std_listener)
                    .map_err(StoreError::io("listening for peers on", addr.to_string()))?
            };
            let acceptor = if parsed.tls {
                ctx.tls.as_ref().map(|t| t.acceptor.clone())
            } else {
                None
            };
            tracing::info!(%url, "listening for peers");
            runtime.spawn(serve(Arc::clone(&ctx), listener, acceptor, stop_rx.clone()));
        }
        for m in ctx.membership.list() {
            if m.id != ctx.ids.member_id {
                runtime.spawn(introduce(Arc::clone(&ctx), m.id, stop_rx.clone()));
            }
        }
        Ok(PeerTransport {
            ctx,
            runtime,
            queues: HashMap::new(),
            stop,
        })
    }

    fn queue(&mut self, to: u64) -> &mpsc::Sender<Message> {
        let ctx = &self.ctx;
        let runtime = &self.runtime;
        self.queues.entry(to).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            runtime.spawn(write_loop(Arc::clone(ctx), to, rx));
            tx
        })
    }
}

impl Drop for PeerTransport {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Transport for PeerTransport {
    fn introduce(&mut self, id: u64) {
        if id != self.ctx.ids.member_id {
            self.runtime
                .spawn(introduce(Arc::clone(&self.ctx), id, self.stop.subscribe()));
        }
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to;
            if m.get_msg_type() == MessageType::MsgSnapshot {
                self.runtime
                    .spawn(send_snapshot(Arc::clone(&self.ctx), to, m));
                continue;
            }
            if let Err(err) = self.queue(to).try_send(m) {
                tracing::debug!(
                    to = format_args!("{to:016x}"),
                    full = matches!(err, mpsc::error::TrySendError::Full(_)),
                    "dropping raft message"
                );
                self.ctx.report(Request::Unreachable(to));
            }
        }
    }
}

/// Dials `to` on one of its peer URLs (trying each in turn) and writes the preamble. The
/// connection's other direction is watched for the one thing a listener may say: that this
/// member was removed from the cluster.
async fn dial(ctx: &Ctx, to: u64, attempt: usize) -> std::io::Result<Writer> {
    let other = |msg: String| std::io::Error::other(msg);
    let member = ctx
        .membership
        .get(to)
        .ok_or_else(|| other(format!("unknown member {to:016x}")))?;
    if member.peer_urls.is_empty() {
        return Err(other(format!("member {to:016x} has no peer URLs")));
    }
    let url_text = &member.peer_urls[attempt % member.peer_urls.len()];
    let url = PeerUrl::parse(url_text).map_err(|e| other(e.to_string()))?;
    let tcp = tokio::time::timeout(
        DIAL_TIMEOUT,
        TcpStream::connect((url.host.as_str(), url.port)),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "dial timed out"))??;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Duplex> = if url.tls {
        let tls = ctx
            .tls
            .as_ref()
            .ok_or_else(|| other(format!("{url_text} is https:// but no peer certificate")))?;
        let name = tls::server_name(&url.host).map_err(|e| other(e.to_string()))?;
        let stream = tokio::time::timeout(DIAL_TIMEOUT, tls.connector.connect(name, tcp))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake"))??;
        Box::new(stream)
    } else {
        Box::new(tcp)
    };
    let (mut r, w) = tokio::io::split(stream);
    let driver = ctx.driver.clone();
    tokio::spawn(async move {
        let mut buf = Vec::new();
        if read_frame(&mut r, &mut buf).await.is_ok() && wire::is_removed(&buf) {
            tracing::error!(
                peer = format_args!("{to:016x}"),
                "a peer says this member was removed from the cluster"
            );
            let _ = driver.send(Request::Removed);
        }
    });
    let mut w: Writer = Box::new(w);
    let mut pre = wire::MAGIC.to_vec();
    pre.extend_from_slice(&wire::encode_hello(&ctx.hello(to)));
    w.write_all(&pre).await?;
    w.flush().await?;
    Ok(w)
}

/// The writer of one peer: batches queued messages into frames on one connection, dialling
/// again after a failure; while the peer cannot be reached, queued messages are dropped.
async fn write_loop(ctx: Arc<Ctx>, to: u64, mut rx: mpsc::Receiver<Message>) {
    let mut conn: Option<Writer> = None;
    let mut attempt = 0usize;
    let mut active = false;
    while let Some(first) = rx.recv().await {
        let mut bytes = protobuf::Message::compute_size(&first) as usize;
        let mut batch = vec![first];
        while bytes < wire::MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(m) => {
                    bytes += protobuf::Message::compute_size(&m) as usize;
                    batch.push(m);
                }
                Err(_) => break,
            }
        }
        if conn.is_none() {
            match dial(&ctx, to, attempt).await {
                Ok(w) => {
                    conn = Some(w);
                    if !active {
                        tracing::info!(peer = format_args!("{to:016x}"), "peer became active");
                        active = true;
                    }
                }
                Err(err) => {
                    attempt += 1;
                    if active {
                        tracing::warn!(peer = format_args!("{to:016x}"), %err, "peer became inactive");
                        active = false;
                    } else {
                        tracing::debug!(peer = format_args!("{to:016x}"), %err, "dialling peer");
                    }
                    ctx.report(Request::Unreachable(to));
                    tokio::time::sleep(RETRY).await;
                    // Whatever queued meanwhile is stale; Raft will send again.
                    while rx.try_recv().is_ok() {}
                    continue;
                }
            }
        }
        let frame = wire::encode_messages(&batch);
        let Some(w) = conn.as_mut() else { continue };
        let written = tokio::time::timeout(WRITE_TIMEOUT, async {
            w.write_all(&frame).await?;
            w.flush().await
        })
        .await;
        if !matches!(written, Ok(Ok(()))) {
            tracing::warn!(peer = format_args!("{to:016x}"), "lost connection to peer");
            conn = None;
            active = false;
            attempt += 1;
            ctx.report(Request::Unreachable(to));
        }
    }
}

/// Introduces this member to a peer once (a connection with just the hello), so every
/// member learns every other's name and client URLs for `member list`, not only those it
/// exchanges Raft messages with. Retries until the peer answers or the transport stops.
async fn introduce(ctx: Arc<Ctx>, to: u64, mut stop: watch::Receiver<bool>) {
    let mut attempt = 0;
    loop {
        if ctx.membership.is_removed(to) || ctx.membership.get(to).is_none() {
            return;
        }
        if let Ok(mut w) = dial(&ctx, to, attempt).await {
            let _ = w.shutdown().await;
            return;
        }
        attempt += 1;
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Streams one snapshot message on a connection of its own and reports the outcome to Raft.
async fn send_snapshot(ctx: Arc<Ctx>, to: u64, msg: Message) {
    let index = msg.get_snapshot().get_metadata().index;
    let size = msg.get_snapshot().data.len();
    let started = std::time::Instant::now();
    let result = async {
        let mut w = dial(&ctx, to, 0).await?;
        w.write_all(&wire::encode_messages(std::slice::from_ref(&msg)))
            .await?;
        w.flush().await?;
        w.shutdown().await
    }
    .await;
    let ok = result.is_ok();
    match result {
        Ok(()) => tracing::info!(
            peer = format_args!("{to:016x}"),
            index,
            bytes = size,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "sent snapshot"
        ),
        Err(err) => {
            tracing::warn!(peer = format_args!("{to:016x}"), index, %err, "sending snapshot failed")
        }
    }
    ctx.report(Request::SnapshotStatus { to, ok });
}

/// Accepts peer connections until the transport is dropped.
async fn serve(
    ctx: Arc<Ctx>,
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                let ctx = Arc::clone(&ctx);
                let acceptor = acceptor.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    if let Err(err) = read_loop(&ctx, stream, acceptor, stop).await {
                        tracing::debug!(%addr, %err, "peer connection closed");
                    }
                });
            }
            Err(err) => {
                tracing::warn!(%err, "accepting peer connection");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

async fn read_frame(r: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) -> std::io::Result<()> {
    let len = r.read_u32().await? as usize;
    if len > wire::MAX_FRAME {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    buf.resize(len, 0);
    r.read_exact(buf).await?;
    Ok(())
}

/// Reads one inbound connection: preamble, hello, then batches for the driver.
async fn read_loop(
    ctx: &Ctx,
    stream: TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let other = |msg: String| std::io::Error::other(msg);
    let stream: Box<dyn Duplex> = match acceptor {
        Some(a) => Box::new(
            tokio::time::timeout(DIAL_TIMEOUT * 5, a.accept(stream))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake")
                })??,
        ),
        None => Box::new(stream),
    };
    let mut r = BufReader::with_capacity(256 * 1024, stream);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).await?;
    if &magic != wire::MAGIC {
        return Err(other("not a capstan peer connection".into()));
    }
    let mut buf = Vec::new();
    read_frame(&mut r, &mut buf).await?;
    if wire::is_query(&buf) {
        let answer = wire::encode_cluster(&ctx.cluster_info());
        r.write_all(&answer).await?;
        r.flush().await?;
        return Ok(());
    }
    let hello = wire::decode_hello(&buf).map_err(|e| other(e.to_string()))?;
    if hello.cluster_id != ctx.ids.cluster_id {
        tracing::error!(
            from = format_args!("{:016x}", hello.from),
            remote_cluster = format_args!("{:016x}", hello.cluster_id),
            local_cluster = format_args!("{:016x}", ctx.ids.cluster_id),
            "refusing peer from another cluster (cluster ID mismatch)"
        );
        return Err(other("cluster ID mismatch".into()));
    }
    if ctx.membership.is_removed(hello.from) {
        tracing::warn!(
            from = format_args!("{:016x}", hello.from),
            "refusing a removed member"
        );
        r.write_all(&wire::encode_removed()).await?;
        r.flush().await?;
        return Ok(());
    }
    if hello.to != ctx.ids.member_id {
        return Err(other(format!(
            "connection meant for member {:016x}, this is {:016x}",
            hello.to, ctx.ids.member_id
        )));
    }
    ctx.membership
        .set_attributes(hello.from, &hello.name, &hello.client_urls);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return Ok(()),
            res = read_frame(&mut r, &mut buf) => match res {
                Ok(()) => {}
                // The dialler closed the connection (an introduction, or it is going away).
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            },
        }
        let msgs = wire::decode_messages(&buf).map_err(|e| other(e.to_string()))?;
        if msgs.iter().any(|m| m.from != hello.from) {
            return Err(other("message from a member other than the sender".into()));
        }
        if ctx.driver.send(Request::Step(msgs)).is_err() {
            return Ok(());
        }
        if buf.capacity() > 8 << 20 {
            buf = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls_parse() {
        let u = PeerUrl::parse("https://127.0.0.1:2380/").unwrap();
        assert!(u.tls);
        assert_eq!(u.port, 2380);
        assert_eq!(u.listen_addr().unwrap().port(), 2380);
        let u = PeerUrl::parse("http://[::1]:2380").unwrap();
        assert_eq!(u.host, "::1");
        assert!(PeerUrl::parse("tcp://x:1").is_err());
        assert!(PeerUrl::parse("http://x").is_err());
    }
}
