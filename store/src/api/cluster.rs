//! Cluster service: MemberList (the real membership); membership changes are not yet
//! supported.

use std::sync::Arc;

use tonic::{Request, Response, Status};

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

#[tonic::async_trait]
impl pb::PbClusterService for ClusterService {
    async fn member_add(
        &self,
        _request: Request<pb::PbMemberAddRequest>,
    ) -> Result<Response<pb::PbMemberAddResponse>, Status> {
        Err(unsupported("Cluster.MemberAdd"))
    }

    async fn member_remove(
        &self,
        _request: Request<pb::PbMemberRemoveRequest>,
    ) -> Result<Response<pb::PbMemberRemoveResponse>, Status> {
        Err(unsupported("Cluster.MemberRemove"))
    }

    async fn member_update(
        &self,
        _request: Request<pb::PbMemberUpdateRequest>,
    ) -> Result<Response<pb::PbMemberUpdateResponse>, Status> {
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
        _request: Request<pb::PbMemberPromoteRequest>,
    ) -> Result<Response<pb::PbMemberPromoteResponse>, Status> {
        Err(unsupported("Cluster.MemberPromote"))
    }
}
