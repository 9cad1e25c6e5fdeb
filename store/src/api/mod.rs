//! The etcd v3 gRPC API: etcd's services, messages and field numbers, so `etcdctl`, etcd's
//! client libraries and kube-apiserver's storage layer talk to Capstan unchanged.
//!
//! Each service is a thin adapter: validate the request (as etcd's `v3rpc` does), hand it to
//! the [`Node`] (writes are proposed through Raft, reads take a ReadIndex barrier unless
//! `serializable`), and translate errors in one place ([`status`]).

mod cluster;
mod kv;
mod lease;
mod maintenance;
pub mod status;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use crate::node::Node;
use crate::pb;

pub use cluster::ClusterService;
pub use kv::KvService;
pub use lease::LeaseService;
pub use maintenance::MaintenanceService;
pub use watch::WatchService;

/// The etcd version this API presents (`etcdctl endpoint status` shows it).
pub const ETCD_VERSION: &str = "3.5.0";

/// What every service needs: the member, and facts about it for headers and `member list`.
#[derive(Clone)]
pub struct Shared {
    /// The Raft member.
    pub node: Node,
    /// This member's name.
    pub name: String,
    /// Peer URLs advertised in `member list`.
    pub peer_urls: Vec<String>,
    /// Client URLs advertised in `member list`.
    pub client_urls: Vec<String>,
    /// Largest number of operations in one transaction.
    pub max_txn_ops: usize,
    /// Interval of progress notifications to watchers that asked for them.
    pub progress_notify_interval: Duration,
}

impl Shared {
    /// A response header for `revision` with this member's ids and term.
    pub fn header(&self, revision: i64) -> pb::PbResponseHeader {
        let ids = self.node.ids();
        pb::PbResponseHeader {
            cluster_id: ids.cluster_id,
            member_id: ids.member_id,
            revision,
            raft_term: self.node.status().term,
        }
    }

    /// etcd's rule for learners: they serve only Status, serializable reads and snapshots;
    /// everything else fails with `rpc not supported for learner` (clients then try another
    /// member).
    pub fn refuse_learner(&self) -> Result<(), tonic::Status> {
        let me = self.node.ids().member_id;
        if self.node.membership().get(me).is_some_and(|m| m.is_learner) {
            return Err(tonic::Status::unavailable(
                "etcdserver: rpc not supported for learner",
            ));
        }
        Ok(())
    }

    /// Fills in the ids and term of a header the state machine produced (keeps its revision).
    pub fn complete(&self, header: Option<pb::PbResponseHeader>) -> Option<pb::PbResponseHeader> {
        let revision = header.map_or_else(|| self.node.mvcc().current_revision(), |h| h.revision);
        Some(self.header(revision))
    }
}

/// The five services, ready to be added to a tonic server.
pub struct Services {
    /// KV: Range, Put, DeleteRange, Txn, Compact.
    pub kv: KvService,
    /// Watch.
    pub watch: WatchService,
    /// Lease: Grant, Revoke, KeepAlive, TimeToLive, Leases.
    pub lease: LeaseService,
    /// Maintenance: Status, Snapshot (and harmless others).
    pub maintenance: MaintenanceService,
    /// Cluster: MemberList.
    pub cluster: ClusterService,
}

impl Services {
    /// Builds every service over one shared state.
    pub fn new(shared: Shared) -> Self {
        let shared = Arc::new(shared);
        Services {
            kv: KvService::new(Arc::clone(&shared)),
            watch: WatchService::new(Arc::clone(&shared)),
            lease: LeaseService::new(Arc::clone(&shared)),
            maintenance: MaintenanceService::new(Arc::clone(&shared)),
            cluster: ClusterService::new(shared),
        }
    }
}
