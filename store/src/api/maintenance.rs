//! Maintenance service: Status and Snapshot; Alarm (list) and Defragment answer truthfully
//! for an in-memory state machine; the rest are reported as unsupported.

use std::sync::Arc;

use protobuf::Message as _;
use sha2::Digest as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::status::unsupported;
use super::{ETCD_VERSION, Shared};
use crate::pb;

/// Bytes per Snapshot response message.
const SNAPSHOT_CHUNK: usize = 64 * 1024;
/// etcd's `AlarmRequest_GET`.
const ALARM_GET: i32 = 0;

/// The Maintenance gRPC service.
pub struct MaintenanceService {
    shared: Arc<Shared>,
}

impl MaintenanceService {
    /// A Maintenance service over the shared member state.
    pub fn new(shared: Arc<Shared>) -> Self {
        MaintenanceService { shared }
    }

    /// The state machine as a snapshot stream:
    ///
    /// ```text
    /// | body length: u64 LE | snapshot file body | zero padding to a multiple of 512 | sha256 |
    /// ```
    ///
    /// where the body is exactly a `member/snap/*.snap` file (crc32, protobuf raft Snapshot).
    /// The padding and trailing SHA-256 of everything before it are what `etcdctl snapshot
    /// save` checks for (etcd appends the hash to its 512-byte-paged bolt file).
    fn snapshot_bytes(&self) -> Result<Vec<u8>, Status> {
        let status = self.shared.node.status();
        let data = self.shared.node.mvcc().encode();
        let mut snap = raft::eraftpb::Snapshot::default();
        snap.mut_metadata().index = status.applied;
        snap.mut_metadata().term = status.term;
        snap.mut_metadata().mut_conf_state().voters = vec![self.shared.node.ids().member_id];
        snap.data = bytes::Bytes::from(data);
        let body = snap
            .write_to_bytes()
            .map_err(|e| Status::internal(format!("encoding snapshot: {e}")))?;
        let file_len = body.len() + 4;
        let mut out = Vec::with_capacity(file_len + 8 + 512 + 32);
        out.extend_from_slice(&(file_len as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out.resize(out.len().div_ceil(512) * 512, 0);
        let digest = sha2::Sha256::digest(&out);
        out.extend_from_slice(&digest);
        Ok(out)
    }
}

#[tonic::async_trait]
impl pb::PbMaintenanceService for MaintenanceService {
    async fn alarm(
        &self,
        request: Request<pb::PbAlarmRequest>,
    ) -> Result<Response<pb::PbAlarmResponse>, Status> {
        self.shared.refuse_learner()?;
        if request.get_ref().action != ALARM_GET {
            return Err(unsupported("Maintenance.Alarm activate/deactivate"));
        }
        // This member raises no alarms (no space quota, no corruption check yet).
        Ok(Response::new(pb::PbAlarmResponse {
            header: self.shared.complete(None),
            alarms: Vec::new(),
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::PbStatusRequest>,
    ) -> Result<Response<pb::PbStatusResponse>, Status> {
        let st = self.shared.node.status();
        let in_use = self.shared.node.mvcc().size_bytes();
        Ok(Response::new(pb::PbStatusResponse {
            header: self.shared.complete(None),
            version: ETCD_VERSION.into(),
            db_size: i64::try_from(st.disk_bytes).unwrap_or(i64::MAX),
            leader: st.leader,
            raft_index: st.last_index,
            raft_term: st.term,
            raft_applied_index: st.applied,
            db_size_in_use: in_use,
            is_learner: self
                .shared
                .node
                .membership()
                .get(self.shared.node.ids().member_id)
                .is_some_and(|m| m.is_learner),
            ..Default::default()
        }))
    }

    async fn defragment(
        &self,
        _request: Request<pb::PbDefragmentRequest>,
    ) -> Result<Response<pb::PbDefragmentResponse>, Status> {
        self.shared.refuse_learner()?;
        // The state machine lives in memory and the log is trimmed by snapshots: there is
        // no file to defragment.
        Ok(Response::new(pb::PbDefragmentResponse {
            header: self.shared.complete(None),
        }))
    }

    async fn hash(
        &self,
        _request: Request<pb::PbHashRequest>,
    ) -> Result<Response<pb::PbHashResponse>, Status> {
        self.shared.refuse_learner()?;
        Err(unsupported("Maintenance.Hash"))
    }

    async fn hash_kv(
        &self,
        _request: Request<pb::PbHashKvRequest>,
    ) -> Result<Response<pb::PbHashKvResponse>, Status> {
        self.shared.refuse_learner()?;
        Err(unsupported("Maintenance.HashKV"))
    }

    type SnapshotStream = ReceiverStream<Result<pb::PbSnapshotResponse, Status>>;

    async fn snapshot(
        &self,
        _request: Request<pb::PbSnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let bytes = self.snapshot_bytes()?;
        let header = self.shared.complete(None);
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let total = bytes.len();
            let mut sent = 0;
            for chunk in bytes.chunks(SNAPSHOT_CHUNK) {
                sent += chunk.len();
                let resp = pb::PbSnapshotResponse {
                    header,
                    remaining_bytes: (total - sent) as u64,
                    blob: chunk.to_vec(),
                    version: ETCD_VERSION.into(),
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn move_leader(
        &self,
        _request: Request<pb::PbMoveLeaderRequest>,
    ) -> Result<Response<pb::PbMoveLeaderResponse>, Status> {
        self.shared.refuse_learner()?;
        Err(unsupported(
            "Maintenance.MoveLeader on a single-member store",
        ))
    }

    async fn downgrade(
        &self,
        _request: Request<pb::PbDowngradeRequest>,
    ) -> Result<Response<pb::PbDowngradeResponse>, Status> {
        self.shared.refuse_learner()?;
        Err(unsupported("Maintenance.Downgrade"))
    }
}
