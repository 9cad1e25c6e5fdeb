//! Cluster service: MemberList. Membership changes arrive with multi-member clusters.

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

    fn members(&self) -> Vec<pb::PbMember> {
        vec![pb::PbMember {
            id: self.shared.node.ids().member_id,
            name: self.shared.name.clone(),
            peer_ur_ls: self.shared.peer_urls.clone(),
            client_ur_ls: self.shared.client_urls.clone(),
            is_learner: false,
        }]
    }
}

#[tonic::async_trait]
impl pb::PbClusterService for ClusterService {
    async fn member_add(
        &self,
        _request: Request<pb::PbMemberAddRequest>,
    ) -> Result<Response<pb::PbMemberAddResponse>, Status> {
        Err(unsupported("Cluster.MemberAdd on a single-member store"))
    }

    async fn member_remove(
        &self,
        _request: Request<pb::PbMemberRemoveRequest>,
    ) -> Result<Response<pb::PbMemberRemoveResponse>, Status> {
        Err(unsupported("Cluster.MemberRemove on a single-member store"))
    }

    async fn member_update(
        &self,
        _request: Request<pb::PbMemberUpdateRequest>,
    ) -> Result<Response<pb::PbMemberUpdateResponse>, Status> {
        Err(unsupported("Cluster.MemberUpdate on a single-member store"))
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
        Err(unsupported(
            "Cluster.MemberPromote on a single-member store",
        ))
    }
}
