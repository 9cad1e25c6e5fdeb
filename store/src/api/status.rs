//! The single translation table from [`StoreError`] to gRPC status, with etcd's codes
//! (`api/v3rpc/rpctypes`) and etcd's messages, which clients match on.

use tonic::{Code, Status};

use crate::error::StoreError;

/// Maps a store error to the gRPC status etcd returns for it.
pub fn to_status(err: &StoreError) -> Status {
    let code = match err {
        StoreError::Compacted | StoreError::FutureRevision | StoreError::LeaseTtlTooLarge => {
            Code::OutOfRange
        }
        StoreError::KeyNotProvided
        | StoreError::KeyNotFound
        | StoreError::DuplicateKey
        | StoreError::TooManyOps
        | StoreError::RequestTooLarge
        | StoreError::InvalidArgument(_) => Code::InvalidArgument,
        StoreError::LeaseNotFound | StoreError::MemberNotFound => Code::NotFound,
        StoreError::MemberBadUrls => Code::InvalidArgument,
        StoreError::LeaseExists
        | StoreError::PeerUrlExists
        | StoreError::MemberNotLearner
        | StoreError::LearnerNotReady
        | StoreError::TooManyLearners
        | StoreError::NotEnoughStarted => Code::FailedPrecondition,
        StoreError::Removed => Code::Unavailable,
        StoreError::NoLeader
        | StoreError::Timeout
        | StoreError::TimeoutDueToLeaderFail
        | StoreError::Stopped => Code::Unavailable,
        StoreError::Io { .. } | StoreError::Corrupt { .. } | StoreError::Raft(_) => {
            tracing::error!(%err, "internal store error");
            Code::Internal
        }
    };
    Status::new(code, err.to_string())
}

impl From<StoreError> for Status {
    fn from(err: StoreError) -> Status {
        to_status(&err)
    }
}

/// A gRPC method this member does not provide.
pub fn unsupported(method: &str) -> Status {
    Status::unimplemented(format!("capstan store: {method} is not supported"))
}
