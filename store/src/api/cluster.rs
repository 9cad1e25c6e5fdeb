//! Cluster service: MemberList, MemberAdd, MemberRemove, MemberUpdate and MemberPromote,
//! with etcd's validation and errors. Adding, promoting and removing a member are Raft
//! configuration changes (one member at a time, so any two successive majorities overlap);
//! an update changes only peer URLs and is an ordinary replicated write. Each call returns
//! once the change is applied on this member, with the members as they are then.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Shared;
use crate::command::{Applied, MemberUpdate, Op};
use crate::error::StoreError;
use crate::mvcc::{MemberChange, MemberRecord};
use crate::node::member::new_member_id;
use crate::pb;
use crate::transport::PeerUrl;

/// Learners a cluster may have at once (etcd's `--experimental-max-learners` default).
const MAX_LEARNERS: usize = 1;

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
                    is_learner: m.is_learner,
                }
            })
            .collect()
    }

    /// Fails with etcd's error when `id` is not a member.
    fn require_member(&self, id: u64) -> Result<crate::node::MemberInfo, StoreError> {
        self.shared
            .node
            .membership()
            .get(id)
            .ok_or(StoreError::MemberNotFound)
    }

    /// Checks new peer URLs: they parse, and none is a peer URL of a member other than
    /// `except`.
    fn check_peer_urls(&self, urls: &[String], except: Option<u64>) -> Result<(), StoreError> {
        if urls.is_empty() || urls.iter().any(|u| PeerUrl::parse(u).is_err()) {
            return Err(StoreError::MemberBadUrls);
        }
        let taken = self
            .shared
            .node
            .membership()
            .list()
            .into_iter()
            .filter(|m| Some(m.id) != except)
            .any(|m| m.peer_urls.iter().any(|u| urls.contains(u)));
        if taken {
            return Err(StoreError::PeerUrlExists);
        }
        Ok(())
    }

    fn header(&self) -> Option<pb::PbResponseHeader> {
        self.shared.complete(None)
    }
}

#[tonic::async_trait]
impl pb::PbClusterService for ClusterService {
    async fn member_add(
        &self,
        request: Request<pb::PbMemberAddRequest>,
    ) -> Result<Response<pb::PbMemberAddResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        self.check_peer_urls(&req.peer_ur_ls, None)?;
        let membership = self.shared.node.membership();
        if req.is_learner
            && membership.list().iter().filter(|m| m.is_learner).count() >= MAX_LEARNERS
        {
            return Err(StoreError::TooManyLearners.into());
        }
        let id = new_member_id(
            &req.peer_ur_ls,
            self.shared.node.ids().cluster_id,
            membership,
        );
        let record = MemberRecord {
            id,
            peer_urls: req.peer_ur_ls.clone(),
            is_learner: req.is_learner,
        };
        let change = if req.is_learner {
            MemberChange::AddLearner(record)
        } else {
            MemberChange::AddVoter(record)
        };
        self.shared.node.change_members(change).await?;
        tracing::info!(
            member = format_args!("{id:016x}"),
            peer_urls = ?req.peer_ur_ls,
            learner = req.is_learner,
            "added member"
        );
        Ok(Response::new(pb::PbMemberAddResponse {
            header: self.header(),
            member: Some(pb::PbMember {
                id,
                name: String::new(),
                peer_ur_ls: req.peer_ur_ls,
                client_ur_ls: Vec::new(),
                is_learner: req.is_learner,
            }),
            members: self.members(),
        }))
    }

    async fn member_remove(
        &self,
        request: Request<pb::PbMemberRemoveRequest>,
    ) -> Result<Response<pb::PbMemberRemoveResponse>, Status> {
        self.shared.refuse_learner()?;
        let id = request.get_ref().id;
        self.require_member(id)?;
        self.shared
            .node
            .change_members(MemberChange::Remove(id))
            .await?;
        tracing::info!(member = format_args!("{id:016x}"), "removed member");
        Ok(Response::new(pb::PbMemberRemoveResponse {
            header: self.header(),
            members: self.members(),
        }))
    }

    async fn member_update(
        &self,
        request: Request<pb::PbMemberUpdateRequest>,
    ) -> Result<Response<pb::PbMemberUpdateResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        self.require_member(req.id)?;
        self.check_peer_urls(&req.peer_ur_ls, Some(req.id))?;
        let op = Op::MemberUpdate(MemberUpdate {
            id: req.id,
            peer_urls: req.peer_ur_ls,
        });
        match self.shared.node.propose(op).await? {
            Applied::MemberUpdate(true) => {}
            _ => return Err(StoreError::MemberNotFound.into()),
        }
        Ok(Response::new(pb::PbMemberUpdateResponse {
            header: self.header(),
            members: self.members(),
        }))
    }

    async fn member_list(
        &self,
        _request: Request<pb::PbMemberListRequest>,
    ) -> Result<Response<pb::PbMemberListResponse>, Status> {
        self.shared.refuse_learner()?;
        Ok(Response::new(pb::PbMemberListResponse {
            header: self.header(),
            members: self.members(),
        }))
    }

    async fn member_promote(
        &self,
        request: Request<pb::PbMemberPromoteRequest>,
    ) -> Result<Response<pb::PbMemberPromoteResponse>, Status> {
        self.shared.refuse_learner()?;
        let id = request.get_ref().id;
        if !self.require_member(id)?.is_learner {
            return Err(StoreError::MemberNotLearner.into());
        }
        self.shared
            .node
            .change_members(MemberChange::Promote(id))
            .await?;
        tracing::info!(member = format_args!("{id:016x}"), "promoted learner");
        Ok(Response::new(pb::PbMemberPromoteResponse {
            header: self.header(),
            members: self.members(),
        }))
    }
}
