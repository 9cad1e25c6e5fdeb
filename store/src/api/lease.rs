//! Lease service: Grant, Revoke, KeepAlive, TimeToLive, Leases.
//!
//! Grant and revoke go through Raft; keep-alive and time-to-live only touch this member's
//! lessor (deadlines are leader-local, as in etcd).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Shared;
use crate::command::{Applied, Op};
use crate::error::StoreError;
use crate::lease::MAX_TTL;
use crate::pb;

/// The shortest TTL granted: etcd's `minLeaseTTL`, 1.5 election timeouts rounded up to
/// whole seconds (2 s with the default 1 s election timeout).
const MIN_TTL: i64 = 2;

/// The Lease gRPC service.
pub struct LeaseService {
    shared: Arc<Shared>,
    next: AtomicU64,
}

impl LeaseService {
    /// A Lease service over the shared member state.
    pub fn new(shared: Arc<Shared>) -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let seed = (shared.node.ids().member_id << 48) ^ (u64::try_from(millis).unwrap_or(0) << 8);
        LeaseService {
            shared,
            next: AtomicU64::new(seed),
        }
    }

    /// A fresh positive lease id not in use.
    fn new_id(&self) -> i64 {
        loop {
            let raw = self.next.fetch_add(1, Ordering::Relaxed);
            let id = i64::try_from(raw & (i64::MAX as u64)).unwrap_or(1);
            if id > 0 && self.shared.node.mvcc().lease(id).is_none() {
                return id;
            }
        }
    }
}

#[tonic::async_trait]
impl pb::PbLeaseService for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<pb::PbLeaseGrantRequest>,
    ) -> Result<Response<pb::PbLeaseGrantResponse>, Status> {
        self.shared.refuse_learner()?;
        let mut req = request.into_inner();
        if req.ttl > MAX_TTL {
            return Err(StoreError::LeaseTtlTooLarge.into());
        }
        req.ttl = req.ttl.max(MIN_TTL);
        if req.id == 0 {
            req.id = self.new_id();
        }
        let (id, ttl) = (req.id, req.ttl);
        match self.shared.node.propose(Op::LeaseGrant(req)).await? {
            Applied::LeaseGrant(mut r) => {
                self.shared.node.lessor().renew(id, ttl);
                r.header = self.shared.complete(r.header);
                Ok(Response::new(r))
            }
            _ => Err(Status::internal(
                "capstan store: unexpected result for lease grant",
            )),
        }
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::PbLeaseRevokeRequest>,
    ) -> Result<Response<pb::PbLeaseRevokeResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        if self.shared.node.mvcc().lease(req.id).is_none() {
            return Err(StoreError::LeaseNotFound.into());
        }
        match self.shared.node.propose(Op::LeaseRevoke(req)).await? {
            Applied::LeaseRevoke(mut r) => {
                r.header = self.shared.complete(r.header);
                Ok(Response::new(r))
            }
            _ => Err(Status::internal(
                "capstan store: unexpected result for lease revoke",
            )),
        }
    }

    type LeaseKeepAliveStream = ReceiverStream<Result<pb::PbLeaseKeepAliveResponse, Status>>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::PbLeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        self.shared.refuse_learner()?;
        let mut inbound = request.into_inner();
        let shared = Arc::clone(&self.shared);
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok(Some(req)) = inbound.message().await {
                // A keep-alive for a lease that does not exist answers TTL 0, as etcd does.
                let ttl = match shared.node.mvcc().lease(req.id) {
                    Some((ttl, _)) => {
                        shared.node.lessor().renew(req.id, ttl);
                        ttl
                    }
                    None => 0,
                };
                let header = shared.complete(None);
                let resp = pb::PbLeaseKeepAliveResponse {
                    header,
                    id: req.id,
                    ttl,
                };
                if tx.send(Ok(resp)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::PbLeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::PbLeaseTimeToLiveResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        let lease = self.shared.node.mvcc().lease(req.id);
        let header = self.shared.complete(None);
        // An unknown lease answers TTL -1 rather than an error, as etcd does.
        let resp = match lease {
            Some((granted, keys)) => pb::PbLeaseTimeToLiveResponse {
                header,
                id: req.id,
                ttl: self.shared.node.lessor().remaining(req.id, granted),
                granted_ttl: granted,
                keys: if req.keys { keys } else { Vec::new() },
            },
            None => pb::PbLeaseTimeToLiveResponse {
                header,
                id: req.id,
                ttl: -1,
                ..Default::default()
            },
        };
        Ok(Response::new(resp))
    }

    async fn lease_leases(
        &self,
        _request: Request<pb::PbLeaseLeasesRequest>,
    ) -> Result<Response<pb::PbLeaseLeasesResponse>, Status> {
        self.shared.refuse_learner()?;
        let leases = self
            .shared
            .node
            .mvcc()
            .leases()
            .map(|(id, _)| pb::PbLeaseStatus { id })
            .collect();
        Ok(Response::new(pb::PbLeaseLeasesResponse {
            header: self.shared.complete(None),
            leases,
        }))
    }
}
