//! A remote store: the etcd v3 API of a Capstan store cluster or of a real etcd cluster,
//! seen by the API server through a local mirror (`capstan apiserver --etcd-servers`).
//!
//! The API server reads its store in-process and synchronously (admission and authorization
//! look objects up without awaiting), so a remote store is mirrored: [`RemoteStore::connect`]
//! ranges over every key at one revision, loads them into an [`Mvcc`] (`Mvcc::mirror_load`)
//! and then follows a watch of the whole keyspace from the next revision
//! (`Mvcc::mirror_apply`), resuming after a broken stream and reloading if the remote
//! compacted past it. Writes go to the remote (`KV.Txn`, `KV.Compact`, …) and return once
//! the mirror has caught up with the write's revision, so a client reads its own writes; a
//! linearizable read asks the remote for its current revision (a linearizable Range) and
//! waits for the mirror to reach it — the same barrier ReadIndex gives the embedded member.
//!
//! The calls are raw gRPC (tonic with etcd's own message types), so requests and responses
//! are exactly what the embedded member takes and gives.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt as _;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use crate::command::{Applied, Op};
use crate::error::{Result, StoreError};
use crate::mvcc::Mvcc;
use crate::pb;
use crate::transport::client_tls::{self, DialTls, TlsConnector, TlsEndpoint};

/// Keys per page when loading the mirror.
const PAGE: i64 = 5_000;
/// Pause before re-opening a broken watch.
const RETRY: Duration = Duration::from_millis(200);

/// A remote etcd v3 store and the local mirror of its keyspace. Cheap to clone.
#[derive(Clone)]
pub struct RemoteStore {
    channel: Channel,
    mirror: Arc<RwLock<Mvcc>>,
    revision: watch::Receiver<i64>,
    request_timeout: Duration,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("revision", &*self.revision.borrow())
            .finish_non_exhaustive()
    }
}

/// A gRPC failure of the remote, as the store error it stands for (etcd's messages).
fn remote_error(status: &tonic::Status) -> StoreError {
    let msg = status.message();
    let err = if msg.contains("required revision has been compacted") {
        StoreError::Compacted
    } else if msg.contains("required revision is a future revision") {
        StoreError::FutureRevision
    } else if msg.contains("possibly due to previous leader failure") {
        StoreError::TimeoutDueToLeaderFail
    } else if msg.contains("request timed out") || status.code() == tonic::Code::DeadlineExceeded {
        StoreError::Timeout
    } else if msg.contains("request is too large") {
        StoreError::RequestTooLarge
    } else if msg.contains("no leader") {
        StoreError::NoLeader
    } else if status.code() == tonic::Code::Unavailable {
        StoreError::Stopped
    } else {
        StoreError::InvalidArgument(format!("remote store: {msg}"))
    };
    tracing::debug!(code = ?status.code(), %msg, %err, "remote store error");
    err
}

/// How long a request keeps being retried while the remote cannot take it.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// Whether a failed call certainly did not take effect, so sending it again is safe: the
/// member had no leader, or the connection failed before the request got through (the
/// balanced channel still tries a member that is down).
fn not_sent(status: &tonic::Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let msg = status.message();
    msg.contains("no leader")
        || msg.contains("transport error")
        || msg.contains("connect")
        || msg.contains("Connection refused")
        || msg.contains("not supported for learner")
}

/// One etcd v3 call. Reads (`idempotent`) are retried on any unavailability, writes only
/// when they certainly did not get through, for up to [`RETRY_FOR`] (an election).
async fn unary<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    req: Req,
    idempotent: bool,
) -> Result<Resp>
where
    Req: prost::Message + Clone + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    loop {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready()
            .await
            .map_err(|e| StoreError::InvalidArgument(format!("remote store: {e}")))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let result = grpc
            .unary(
                tonic::Request::new(req.clone()),
                PathAndQuery::from_static(path),
                codec,
            )
            .await;
        match result {
            Ok(resp) => return Ok(resp.into_inner()),
            Err(status)
                if (not_sent(&status)
                    || (idempotent && status.code() == tonic::Code::Unavailable))
                    && tokio::time::Instant::now() < deadline =>
            {
                tracing::debug!(path, err = %status.message(), "remote store unavailable; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => return Err(remote_error(&status)),
        }
    }
}

/// A channel over TLS to `endpoints` (all `https://`): the handshake with each reachable
/// endpoint is checked first, so an untrusted server certificate or a refused client
/// certificate fails the start with what went wrong.
pub async fn tls_channel(endpoints: &[String], tls: &DialTls) -> Result<Channel> {
    let config = tls.client_config()?;
    let eps: Vec<TlsEndpoint> = endpoints
        .iter()
        .map(|u| TlsEndpoint::parse(u))
        .collect::<Result<_>>()?;
    for ep in &eps {
        if client_tls::probe(ep, &config).await? {
            tracing::info!(url = %ep.url, "TLS with the remote store checked");
        } else {
            tracing::warn!(url = %ep.url, "remote store not reachable yet");
        }
    }
    // The URI is a placeholder: the connector dials the endpoints itself.
    let channel = Endpoint::from_static("http://etcd.invalid")
        .connect_timeout(Duration::from_secs(2))
        .connect_with_connector_lazy(TlsConnector::new(eps, config));
    Ok(channel)
}

/// An etcd v3 client for `capstan member …` and `capstan snapshot save` (etcdctl's
/// `--endpoints`, `--cacert`, `--cert`, `--key`): `http://` endpoints as given, `https://`
/// ones through the same TLS connector as `--etcd-servers` (the handshake checked first, so a
/// refused certificate is reported as such).
pub async fn etcd_client(endpoints: &[String], tls: &DialTls) -> Result<etcd_client::Client> {
    let remote = |e: etcd_client::Error| {
        StoreError::InvalidArgument(format!("connecting to {}: {e}", endpoints.join(",")))
    };
    let https = endpoints
        .iter()
        .filter(|e| e.starts_with("https://"))
        .count();
    if https == 0 {
        if tls.is_set() {
            return Err(StoreError::InvalidArgument(
                "--cacert/--cert/--key need https:// --endpoints".into(),
            ));
        }
        return etcd_client::Client::connect(endpoints, None)
            .await
            .map_err(remote);
    }
    if https != endpoints.len() {
        return Err(StoreError::InvalidArgument(
            "--endpoints must be all http:// or all https://".into(),
        ));
    }
    if tls.ca_file.is_none() {
        return Err(StoreError::InvalidArgument(
            "https:// --endpoints need --cacert to verify the members".into(),
        ));
    }
    let channel = tls_channel(endpoints, tls).await?;
    etcd_client::Client::from_channel(etcd_client::Channel::Tonic(channel), None)
        .await
        .map_err(remote)
}

/// Every key at one revision, a page at a time: the mirror's starting point.
async fn load(channel: &Channel) -> Result<Mvcc> {
    let mut kvs = Vec::new();
    let mut key = vec![0u8];
    let mut revision = 0;
    loop {
        let req = pb::PbRangeRequest {
            key: key.clone(),
            range_end: vec![0],
            limit: PAGE,
            revision,
            ..Default::default()
        };
        let resp: pb::PbRangeResponse = unary(channel, "/etcdserverpb.KV/Range", req, true).await?;
        if revision == 0 {
            revision = resp.header.as_ref().map_or(0, |h| h.revision);
        }
        let more = resp.more;
        if let Some(last) = resp.kvs.last() {
            key = last.key.clone();
            key.push(0);
        }
        kvs.extend(resp.kvs);
        if !more {
            break;
        }
    }
    tracing::info!(
        keys = kvs.len(),
        revision,
        "loaded the remote store into the mirror"
    );
    Ok(Mvcc::mirror_load(kvs, revision))
}

impl RemoteStore {
    /// Connects to `endpoints` (`http://host:port`, balanced; or `https://host:port` with
    /// `tls`, failing over from one to the next), loads the mirror and starts following the
    /// remote's changes.
    pub async fn connect(
        endpoints: &[String],
        tls: &DialTls,
        request_timeout: Duration,
    ) -> Result<RemoteStore> {
        if endpoints.is_empty() {
            return Err(StoreError::InvalidArgument(
                "--etcd-servers is empty".into(),
            ));
        }
        let secure = endpoints
            .iter()
            .filter(|u| u.starts_with("https://"))
            .count();
        let channel = if secure == 0 {
            if tls.is_set() {
                tracing::warn!(
                    "--etcd-cafile/--etcd-certfile/--etcd-keyfile are ignored for http:// --etcd-servers"
                );
            }
            let mut eps = Vec::new();
            for url in endpoints {
                let ep = Endpoint::from_shared(url.clone())
                    .map_err(|e| StoreError::InvalidArgument(format!("--etcd-servers {url}: {e}")))?
                    .connect_timeout(Duration::from_secs(2))
                    .tcp_nodelay(true);
                eps.push(ep);
            }
            Channel::balance_list(eps.into_iter())
        } else if secure == endpoints.len() {
            tls_channel(endpoints, tls).await?
        } else {
            return Err(StoreError::InvalidArgument(
                "--etcd-servers mixes http:// and https:// URLs".into(),
            ));
        };
        let mirror = load(&channel).await?;
        let (tx, revision) = watch::channel(mirror.current_revision());
        let mirror = Arc::new(RwLock::new(mirror));
        tokio::spawn(follow(channel.clone(), Arc::clone(&mirror), tx));
        Ok(RemoteStore {
            channel,
            mirror,
            revision,
            request_timeout,
        })
    }

    /// Read access to the mirror.
    pub fn mvcc(&self) -> RwLockReadGuard<'_, Mvcc> {
        self.mirror.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver that changes whenever the mirror's revision moves.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.revision.clone()
    }

    /// Waits until the mirror holds revision `rev` (or the request timeout passes).
    async fn caught_up(&self, rev: i64) -> Result<()> {
        let mut rx = self.revision.clone();
        match tokio::time::timeout(self.request_timeout, rx.wait_for(|r| *r >= rev)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(StoreError::Stopped),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Waits until the mirror reflects every write the remote committed before the call.
    pub async fn read_index(&self) -> Result<()> {
        let req = pb::PbRangeRequest {
            key: b"/capstan/read-barrier".to_vec(),
            count_only: true,
            ..Default::default()
        };
        let resp: pb::PbRangeResponse =
            unary(&self.channel, "/etcdserverpb.KV/Range", req, true).await?;
        self.caught_up(resp.header.map_or(0, |h| h.revision)).await
    }

    /// Sends a write to the remote and waits until the mirror has it.
    pub async fn propose(&self, op: Op) -> Result<Applied> {
        let c = &self.channel;
        let (applied, rev) = match op {
            Op::Txn(req) => {
                let r: pb::PbTxnResponse = unary(c, "/etcdserverpb.KV/Txn", req, false).await?;
                let rev = r.header.as_ref().map_or(0, |h| h.revision);
                (Applied::Txn(r), rev)
            }
            Op::Put(req) => {
                let r: pb::PbPutResponse = unary(c, "/etcdserverpb.KV/Put", req, false).await?;
                let rev = r.header.as_ref().map_or(0, |h| h.revision);
                (Applied::Put(r), rev)
            }
            Op::DeleteRange(req) => {
                let r: pb::PbDeleteResponse =
                    unary(c, "/etcdserverpb.KV/DeleteRange", req, false).await?;
                let rev = r.header.as_ref().map_or(0, |h| h.revision);
                (Applied::DeleteRange(r), rev)
            }
            Op::Compaction(req) => {
                let r: pb::PbCompactionResponse =
                    unary(c, "/etcdserverpb.KV/Compact", req, true).await?;
                let rev = r.header.as_ref().map_or(0, |h| h.revision);
                self.caught_up(rev).await?;
                // The mirror drops the same history (it may already be compacted further
                // if it was reloaded).
                let mut m = self.mirror.write().unwrap_or_else(PoisonError::into_inner);
                if req.revision > m.compacted_revision() {
                    m.apply(Op::Compaction(req))?;
                }
                return Ok(Applied::Compaction(r));
            }
            _ => {
                return Err(StoreError::InvalidArgument(
                    "remote store: only KV writes are sent".into(),
                ));
            }
        };
        self.caught_up(rev).await?;
        Ok(applied)
    }
}

/// Follows the remote's changes into the mirror for as long as the process runs: a watch of
/// every key from the mirror's next revision, re-opened after a failure, and a reload when
/// the remote compacted past the mirror.
async fn follow(channel: Channel, mirror: Arc<RwLock<Mvcc>>, tx: watch::Sender<i64>) {
    loop {
        let from = *tx.borrow() + 1;
        match watch_from(&channel, &mirror, &tx, from).await {
            Ok(()) => {}
            Err(StoreError::Compacted) => match load(&channel).await {
                Ok(fresh) => {
                    let rev = fresh.current_revision();
                    *mirror.write().unwrap_or_else(PoisonError::into_inner) = fresh;
                    tx.send_replace(rev);
                    tracing::warn!(
                        revision = rev,
                        "the remote compacted past the mirror: reloaded"
                    );
                }
                Err(err) => tracing::warn!(%err, "reloading the mirror"),
            },
            Err(err) => tracing::warn!(%err, from, "remote watch broke; resuming"),
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// One watch stream: applies its events revision by revision until it ends.
async fn watch_from(
    channel: &Channel,
    mirror: &Arc<RwLock<Mvcc>>,
    tx: &watch::Sender<i64>,
    from: i64,
) -> Result<()> {
    let (req_tx, req_rx) = mpsc::channel::<pb::PbWatchRequest>(1);
    let create = pb::PbWatchRequest {
        request_union: Some(pb::PbWatchRequestUnion::CreateRequest(
            etcd_client::WatchOptions::new()
                .with_key(vec![0])
                .with_range(vec![0])
                .with_start_revision(from)
                .into(),
        )),
    };
    req_tx.send(create).await.map_err(|_| StoreError::Stopped)?;
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| StoreError::InvalidArgument(format!("remote store: {e}")))?;
    let codec = tonic_prost::ProstCodec::<pb::PbWatchRequest, pb::PbWatchResponse>::default();
    let outbound = tokio_stream::wrappers::ReceiverStream::new(req_rx);
    let mut stream = grpc
        .streaming(
            tonic::Request::new(outbound),
            PathAndQuery::from_static("/etcdserverpb.Watch/Watch"),
            codec,
        )
        .await
        .map_err(|s| remote_error(&s))?
        .into_inner();
    // Keep the request side open for the life of the stream.
    let _keep = req_tx;
    while let Some(resp) = stream.next().await {
        let resp = resp.map_err(|s| remote_error(&s))?;
        if resp.compact_revision > 0 {
            return Err(StoreError::Compacted);
        }
        if resp.canceled {
            return Err(StoreError::InvalidArgument(format!(
                "remote watch canceled: {}",
                resp.cancel_reason
            )));
        }
        if resp.events.is_empty() {
            continue;
        }
        // Group the events by revision (one remote transaction each).
        let mut batches: Vec<(i64, Vec<pb::PbEvent>)> = Vec::new();
        for ev in resp.events {
            let rev = ev.kv.as_ref().map_or(0, |kv| kv.mod_revision);
            match batches.last_mut() {
                Some((r, evs)) if *r == rev => evs.push(ev),
                _ => batches.push((rev, vec![ev])),
            }
        }
        let last = {
            let mut m = mirror.write().unwrap_or_else(PoisonError::into_inner);
            for (rev, evs) in batches {
                m.mirror_apply(rev, evs);
            }
            m.current_revision()
        };
        tx.send_replace(last);
    }
    Ok(())
}
