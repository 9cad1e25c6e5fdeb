//! KV service: Range, Put, DeleteRange, Txn, Compact.

use std::collections::HashSet;
use std::sync::Arc;

use prost::Message as _;
use tonic::{Request, Response, Status};

use super::Shared;
use super::status::unsupported;
use crate::command::{Applied, Op};
use crate::error::{Result, StoreError};
use crate::mvcc::KeyRange;
use crate::pb;

/// The KV gRPC service.
pub struct KvService {
    shared: Arc<Shared>,
}

impl KvService {
    /// A KV service over the shared member state.
    pub fn new(shared: Arc<Shared>) -> Self {
        KvService { shared }
    }

    fn check_size(&self, len: usize) -> Result<()> {
        if len > self.shared.node.max_request_bytes() {
            return Err(StoreError::RequestTooLarge);
        }
        Ok(())
    }

    async fn propose(&self, op: Op) -> Result<Applied> {
        self.shared.node.propose(op).await
    }

    /// Range: linearizable unless `serializable`, then served from local state.
    pub async fn range(&self, req: &pb::PbRangeRequest) -> Result<pb::PbRangeResponse> {
        if req.key.is_empty() {
            return Err(StoreError::KeyNotProvided);
        }
        if !req.serializable {
            self.shared.node.read_index().await?;
        }
        let mut resp = self.shared.node.mvcc().range(req)?;
        resp.header = self.shared.complete(resp.header);
        Ok(resp)
    }
}

fn check_put(p: &pb::PbPutRequest) -> Result<()> {
    if p.key.is_empty() {
        return Err(StoreError::KeyNotProvided);
    }
    if p.ignore_value && !p.value.is_empty() {
        return Err(StoreError::InvalidArgument("value is provided".into()));
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(StoreError::InvalidArgument("lease is provided".into()));
    }
    Ok(())
}

/// etcd's `checkTxnRequest` + `checkIntervals`: op count, per-op checks, and no key written
/// twice (or put inside a deleted range) within one branch.
fn check_txn(t: &pb::PbTxnRequest, max_ops: usize) -> Result<()> {
    if t.compare.len() > max_ops || t.success.len() > max_ops || t.failure.len() > max_ops {
        return Err(StoreError::TooManyOps);
    }
    for c in &t.compare {
        if c.key.is_empty() {
            return Err(StoreError::KeyNotProvided);
        }
    }
    for branch in [&t.success, &t.failure] {
        let mut puts = HashSet::new();
        let mut deletes = Vec::new();
        collect_writes(branch, max_ops, &mut puts, &mut deletes)?;
        for del in &deletes {
            if puts.iter().any(|k: &Vec<u8>| del.contains(k)) {
                return Err(StoreError::DuplicateKey);
            }
        }
    }
    Ok(())
}

fn collect_writes(
    ops: &[pb::PbTxnRequestOp],
    max_ops: usize,
    puts: &mut HashSet<Vec<u8>>,
    deletes: &mut Vec<KeyRange>,
) -> Result<()> {
    use pb::PbTxnOpRequest as R;
    for op in ops {
        match &op.request {
            Some(R::RequestPut(p)) => {
                check_put(p)?;
                if !puts.insert(p.key.clone()) {
                    return Err(StoreError::DuplicateKey);
                }
            }
            Some(R::RequestDeleteRange(d)) => {
                if d.key.is_empty() {
                    return Err(StoreError::KeyNotProvided);
                }
                deletes.push(KeyRange::new(&d.key, &d.range_end));
            }
            Some(R::RequestRange(r)) if r.key.is_empty() => {
                return Err(StoreError::KeyNotProvided);
            }
            Some(R::RequestRange(_)) => {}
            Some(R::RequestTxn(t)) => {
                check_txn(t, max_ops)?;
                // Writes of a nested txn count against the enclosing branch too.
                let mut nested_puts = HashSet::new();
                let mut nested_deletes = Vec::new();
                collect_writes(&t.success, max_ops, &mut nested_puts, &mut nested_deletes)?;
                collect_writes(&t.failure, max_ops, &mut nested_puts, &mut nested_deletes)?;
                for k in nested_puts {
                    if !puts.insert(k) {
                        return Err(StoreError::DuplicateKey);
                    }
                }
                deletes.extend(nested_deletes);
            }
            None => {}
        }
    }
    Ok(())
}

fn unexpected(what: &str) -> Status {
    Status::internal(format!("capstan store: unexpected result for {what}"))
}

#[tonic::async_trait]
impl pb::PbKvService for KvService {
    async fn range(
        &self,
        request: Request<pb::PbRangeRequest>,
    ) -> Result<Response<pb::PbRangeResponse>, Status> {
        if !request.get_ref().serializable {
            self.shared.refuse_learner()?;
        }
        Ok(Response::new(
            KvService::range(self, request.get_ref()).await?,
        ))
    }

    type RangeStreamStream = tokio_stream::Empty<Result<pb::PbRangeStreamResponse, Status>>;

    async fn range_stream(
        &self,
        _request: Request<pb::PbRangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        Err(unsupported("KV.RangeStream"))
    }

    async fn put(
        &self,
        request: Request<pb::PbPutRequest>,
    ) -> Result<Response<pb::PbPutResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        check_put(&req)?;
        self.check_size(req.encoded_len())?;
        match self.propose(Op::Put(req)).await? {
            Applied::Put(mut r) => {
                r.header = self.shared.complete(r.header);
                Ok(Response::new(r))
            }
            _ => Err(unexpected("put")),
        }
    }

    async fn delete_range(
        &self,
        request: Request<pb::PbDeleteRequest>,
    ) -> Result<Response<pb::PbDeleteResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        if req.key.is_empty() {
            return Err(StoreError::KeyNotProvided.into());
        }
        self.check_size(req.encoded_len())?;
        match self.propose(Op::DeleteRange(req)).await? {
            Applied::DeleteRange(mut r) => {
                r.header = self.shared.complete(r.header);
                Ok(Response::new(r))
            }
            _ => Err(unexpected("delete")),
        }
    }

    async fn txn(
        &self,
        request: Request<pb::PbTxnRequest>,
    ) -> Result<Response<pb::PbTxnResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        check_txn(&req, self.shared.max_txn_ops)?;
        self.check_size(req.encoded_len())?;
        match self.propose(Op::Txn(req)).await? {
            Applied::Txn(mut r) => {
                r.header = self.shared.complete(r.header);
                Ok(Response::new(r))
            }
            _ => Err(unexpected("txn")),
        }
    }

    async fn compact(
        &self,
        request: Request<pb::PbCompactionRequest>,
    ) -> Result<Response<pb::PbCompactionResponse>, Status> {
        self.shared.refuse_learner()?;
        let req = request.into_inner();
        {
            // Fail fast without a log entry; the state machine checks again when applying.
            let mvcc = self.shared.node.mvcc();
            if req.revision > mvcc.current_revision() {
                return Err(StoreError::FutureRevision.into());
            }
            if req.revision <= mvcc.compacted_revision() {
                return Err(StoreError::Compacted.into());
            }
        }
        match self.propose(Op::Compaction(req)).await? {
            Applied::Compaction(mut r) => {
                r.header = self.shared.complete(r.header);
                Ok(Response::new(r))
            }
            _ => Err(unexpected("compact")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str) -> pb::PbTxnRequestOp {
        pb::PbTxnRequestOp {
            request: Some(pb::PbTxnOpRequest::RequestPut(pb::PbPutRequest {
                key: k.into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn txn_writing_a_key_twice_in_one_branch_is_rejected() {
        let t = pb::PbTxnRequest {
            success: vec![put("a"), put("a")],
            ..Default::default()
        };
        assert!(matches!(check_txn(&t, 128), Err(StoreError::DuplicateKey)));
        let ok = pb::PbTxnRequest {
            success: vec![put("a")],
            failure: vec![put("a")],
            ..Default::default()
        };
        assert!(check_txn(&ok, 128).is_ok());
    }

    #[test]
    fn txn_with_too_many_ops_is_rejected() {
        let t = pb::PbTxnRequest {
            success: (0..3).map(|i| put(&i.to_string())).collect(),
            ..Default::default()
        };
        assert!(matches!(check_txn(&t, 2), Err(StoreError::TooManyOps)));
    }
}
