//! Cluster service: MemberList (the real membership). Membership changes are validated
//! as etcd's `ValidateConfigurationChange` does (unknown ids, duplicate peer URLs,
//! promoting a voter) but changes that pass validation are not yet supported.

use std::sync::Arc;

use tonic::{Code, Request, Response, Status};

use super::Shared;
use super::status::unsupported;
use crate::pb;

/// The Cluster gRPC service.
pub struct ClusterService {
    shared: Arc<Shared>,
}

impl ClusterService {
    /// A Cluster service over the shared member state.
    pub fn new(shared: Arc<Shared>) -> Self {
        ClusterService { shared }
    }

    /// Every member: this one as configured, the others with the name and client URLs
    /// they announced when they last connected (empty before that, as etcd shows a member
    /// that has not started yet).
    fn members(&self) -> Vec<pb::PbMember> {
        let me = self.shared.node.ids().member_id;
        self.shared
            .node
            .membership()
            .list()
            .into_iter()
            .map(|m| {
                let mine = m.id == me;
                pb::PbMember {
                    id: m.id,
                    name: if mine {
                        self.shared.name.clone()
                    } else {
                        m.name
                    },
                    peer_ur_ls: m.peer_urls,
                    client_ur_ls: if mine {
                        self.shared.client_urls.clone()
                    } else {
                        m.client_urls
                    },
                    is_learner: false,
                }
            })
            .collect()
    }
}

/// etcd's `ErrGRPCMemberNotFound`.
fn member_not_found() -> Status {
    Status::new(Code::NotFound, "etcdserver: member not found")
}

/// etcd's `ErrGRPCPeerURLExist`.
fn peer_urls_exist() -> Status {
    Status::new(
        Code::FailedPrecondition,
        "etcdserver: Peer URLs already exists",
    )
}

/// etcd's `ErrGRPCMemberNotLearner`.
fn member_not_learner() -> Status {
    Status::new(
        Code::FailedPrecondition,
        "etcdserver: can only promote a learner member",
    )
}

impl ClusterService {
    /// Fails with etcd's error when `id` is not a member.
    fn require_member(&self, id: u64) -> Result<(), Status> {
        match self.shared.node.membership().get(id) {
            Some(_) => Ok(()),
            None => Err(member_not_found()),
        }
    }

    /// Fails with etcd's error when any of `urls` is a peer URL of a member other than
    /// `except`.
    fn require_unused_peer_urls(&self, urls: &[String], except: Option<u64>) -> Result<(), Status> {
        let taken = self
            .shared
            .node
            .membership()
            .list()
            .into_iter()
            .filter(|m| Some(m.id) != except)
            .any(|m| m.peer_urls.iter().any(|u| urls.contains(u)));
        if taken {
            Err(peer_urls_exist())
        } else {
            Ok(())
        }
    }
}

#[tonic::async_trait]
impl pb::PbClusterService for ClusterService {
    async fn member_add(
        &self,
        request: Request<pb::PbMemberAddRequest>,
    ) -> Result<Response<pb::PbMemberAddResponse>, Status> {
        self.require_unused_peer_urls(&request.get_ref().peer_ur_ls, None)?;
        Err(unsupported("Cluster.MemberAdd"))
    }

    async fn member_remove(
        &self,
        request: Request<pb::PbMemberRemoveRequest>,
    ) -> Result<Response<pb::PbMemberRemoveResponse>, Status> {
        self.require_member(request.get_ref().id)?;
        Err(unsupported("Cluster.MemberRemove"))
    }

    async fn member_update(
        &self,
        request: Request<pb::PbMemberUpdateRequest>,
    ) -> Result<Response<pb::PbMemberUpdateResponse>, Status> {
        let req = request.get_ref();
        self.require_member(req.id)?;
        self.require_unused_peer_urls(&req.peer_ur_ls, Some(req.id))?;
        Err(unsupported("Cluster.MemberUpdate"))
    }

    async fn member_list(
        &self,
        _request: Request<pb::PbMemberListRequest>,
    ) -> Result<Response<pb::PbMemberListResponse>, Status> {
        Ok(Response::new(pb::PbMemberListResponse {
            header: self.shared.complete(None),
            members: self.members(),
        }))
    }

    async fn member_promote(
        &self,
        request: Request<pb::PbMemberPromoteRequest>,
    ) -> Result<Response<pb::PbMemberPromoteResponse>, Status> {
        self.require_member(request.get_ref().id)?;
        // Every member is a voter until learners can be added.
        if self.members().iter().any(|m| m.id == request.get_ref().id) {
            return Err(member_not_learner());
        }
        Err(unsupported("Cluster.MemberPromote"))
    }
}
