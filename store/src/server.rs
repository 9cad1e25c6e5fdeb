//! `capstan store`: one member serving the etcd v3 gRPC API until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::StreamExt as _;

use crate::api::{Services, Shared};
use crate::command::Op;
use crate::config::StoreConfig;
use crate::error::{Result, StoreError};
use crate::node::Node;
use crate::pb;

/// How often the leader looks for expired leases.
const LEASE_CHECK: Duration = Duration::from_millis(500);
/// gRPC framing allowance above `--max-request-bytes` (etcd's `grpcOverheadBytes`), so an
/// oversized request reaches our check and gets etcd's "request is too large".
const GRPC_OVERHEAD: usize = 512 * 1024;

/// Parses `http://host:port` into a socket address (plain-HTTP listeners: metrics).
pub fn parse_client_url(url: &str) -> Result<SocketAddr> {
    match parse_listen_url(url)? {
        (addr, false) => Ok(addr),
        (_, true) => Err(StoreError::InvalidArgument(format!(
            "listen URL {url:?}: only http:// is supported here"
        ))),
    }
}

/// Parses `http://host:port` or `https://host:port` into a socket address and whether the
/// URL asks for TLS.
pub fn parse_listen_url(url: &str) -> Result<(SocketAddr, bool)> {
    let invalid = |why: &str| StoreError::InvalidArgument(format!("listen URL {url:?}: {why}"));
    let (rest, tls) = if let Some(rest) = url.strip_prefix("http://") {
        (rest, false)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, true)
    } else {
        return Err(invalid("expected http:// or https://"));
    };
    let hostport = rest.trim_end_matches('/');
    let hostport = hostport.replace("localhost", "127.0.0.1");
    let addr = hostport
        .parse()
        .map_err(|_| invalid("expected http(s)://IP:PORT"))?;
    Ok((addr, tls))
}

/// Runs the member until `shutdown` completes or the Raft driver stops on a fatal error
/// (returned, so the process exits non-zero).
pub async fn run(
    cfg: StoreConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listeners = bind_clients(&cfg).await?;
    let (node, driver) = Node::start(&cfg)?;
    let clients = ClientServers::spawn(&node, &cfg, listeners);
    let metrics = serve_metrics(&cfg, &node).await?;
    let expiry = tokio::spawn(expire_leases(node.clone()));

    let mut shutdown = std::pin::pin!(shutdown);
    let mut check = tokio::time::interval(Duration::from_millis(100));
    let outcome = loop {
        tokio::select! {
            () = &mut shutdown => break Ok(()),
            _ = check.tick() => {
                if driver.is_finished() {
                    break Err(StoreError::Stopped);
                }
            }
        }
    };
    expiry.abort();
    for m in metrics {
        m.abort();
    }
    node.stop();
    clients.stop().await;
    let driver_result = tokio::task::spawn_blocking(move || driver.join())
        .await
        .unwrap_or(Err(StoreError::Stopped));
    match (outcome, driver_result) {
        (_, Err(e)) => Err(e),
        (Err(e), Ok(())) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// One bound client listener and, for an `https://` URL, its TLS server.
pub struct ClientListener {
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Binds every `--listen-client-urls` address (before the member starts, so a port in use
/// or an unusable certificate fails the start rather than a running member). `https://`
/// URLs need `--cert-file`/`--key-file` (etcd's rule).
pub async fn bind_clients(cfg: &StoreConfig) -> Result<Vec<ClientListener>> {
    let urls: Vec<(SocketAddr, bool)> = cfg
        .listen_client_urls
        .iter()
        .map(|u| parse_listen_url(u))
        .collect::<Result<_>>()?;
    let acceptor = crate::transport::client_tls::acceptor(&cfg.client_tls)?;
    let mut listeners = Vec::new();
    for (addr, tls) in &urls {
        let tls = match (tls, &acceptor) {
            (false, _) => None,
            (true, Some(a)) => Some(a.clone()),
            (true, None) => {
                return Err(StoreError::InvalidArgument(format!(
                    "https://{addr}: TLS client URLs need --cert-file and --key-file"
                )));
            }
        };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(StoreError::io("listening on", addr.to_string()))?;
        listeners.push(ClientListener { listener, tls });
    }
    if acceptor.is_some() && urls.iter().any(|(_, tls)| !tls) {
        tracing::warn!(
            "--cert-file is set but some client URLs are http://: those serve plain text"
        );
    }
    Ok(listeners)
}

/// Serves `/metrics` and `/health` of `node` on every `--listen-metrics-urls` address; abort
/// the returned tasks to stop.
pub async fn serve_metrics(
    cfg: &StoreConfig,
    node: &Node,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for url in &cfg.listen_metrics_urls {
        let addr = parse_client_url(url)?;
        let l = TcpListener::bind(addr)
            .await
            .map_err(StoreError::io("listening on", addr.to_string()))?;
        tracing::info!(%url, "serving /metrics and /health");
        tasks.push(tokio::spawn(crate::metrics::serve(l, node.clone())));
    }
    Ok(tasks)
}

/// The etcd v3 gRPC servers of a member, one per client listener. `capstan store` runs them
/// for its member; `capstan server` runs them for its embedded member when given
/// `--listen-client-urls` (the stacked topology, where etcdctl reaches each node's member).
pub struct ClientServers {
    stop: tokio::sync::watch::Sender<bool>,
    servers: tokio::task::JoinSet<std::result::Result<(), tonic::transport::Error>>,
}

impl ClientServers {
    /// Starts serving the etcd v3 API of `node` on `listeners`.
    pub fn spawn(node: &Node, cfg: &StoreConfig, listeners: Vec<ClientListener>) -> ClientServers {
        if !listeners.is_empty() {
            tracing::info!(name = %cfg.name, urls = ?cfg.listen_client_urls, "serving etcd v3 API");
        }
        let shared = Shared {
            node: node.clone(),
            name: cfg.name.clone(),
            peer_urls: cfg.initial_advertise_peer_urls.clone(),
            client_urls: cfg.client_urls().to_vec(),
            max_txn_ops: cfg.max_txn_ops,
            progress_notify_interval: cfg.progress_notify_interval,
        };
        let max_msg = cfg.max_request_bytes + GRPC_OVERHEAD;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut servers = tokio::task::JoinSet::new();
        for listener in listeners {
            let s = Services::new(shared.clone());
            let router = tonic::transport::Server::builder()
                .add_service(pb::PbKvServer::new(s.kv).max_decoding_message_size(max_msg))
                .add_service(pb::PbWatchServer::new(s.watch).max_decoding_message_size(max_msg))
                .add_service(pb::PbLeaseServer::new(s.lease).max_decoding_message_size(max_msg))
                .add_service(pb::PbMaintenanceServer::new(s.maintenance))
                .add_service(pb::PbClusterServer::new(s.cluster));
            let mut stop = stop_rx.clone();
            servers.spawn(async move {
                let incoming =
                    crate::transport::client_tls::incoming(listener.listener, listener.tls)
                        .map(|conn| conn.map(crate::authority::AuthorityFix::new));
                router
                    .serve_with_incoming_shutdown(incoming, async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await
            });
        }
        ClientServers { stop, servers }
    }

    /// Stops accepting requests and waits for the servers to finish.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.servers.join_next().await.is_some() {}
    }
}

/// On the leader, revokes leases whose TTL ran out (through Raft, like any write).
pub async fn expire_leases(node: Node) {
    let mut tick = tokio::time::interval(LEASE_CHECK);
    loop {
        tick.tick().await;
        let st = node.status();
        if st.leader != node.ids().member_id {
            continue;
        }
        let expired = {
            let mvcc = node.mvcc();
            node.lessor().expired(mvcc.leases())
        };
        for id in expired {
            match node
                .propose(Op::LeaseRevoke(pb::PbLeaseRevokeRequest { id }))
                .await
            {
                Ok(_) | Err(StoreError::LeaseNotFound) => {
                    tracing::info!(lease = format_args!("{id:x}"), "lease expired");
                }
                Err(err) => {
                    tracing::warn!(lease = format_args!("{id:x}"), %err, "revoking expired lease")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_urls_parse_like_etcds() {
        assert_eq!(
            parse_client_url("http://127.0.0.1:2379").unwrap().port(),
            2379
        );
        assert!(parse_client_url("http://localhost:2379/").is_ok());
        assert!(parse_client_url("unix:///tmp/x").is_err());
        assert!(parse_client_url("https://127.0.0.1:2379").is_err());
        assert!(parse_listen_url("https://127.0.0.1:2379").unwrap().1);
    }
}
