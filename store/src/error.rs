//! The store's one error type. Messages for the etcd-visible variants are etcd's own, word for
//! word, because clients (etcdctl, client libraries, kube-apiserver) match on them.

use std::path::PathBuf;

/// Everything that can go wrong in the store.
///
/// Variants up to `RequestTooLarge` are caused by the request and are deterministic: every
/// replica applying the same command reaches the same error. The rest are operational.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A read or watch asked for a revision older than the compacted revision.
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    /// A read or compaction asked for a revision newer than the current one.
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    /// `ignore_value`/`ignore_lease` put on a key that does not exist.
    #[error("etcdserver: key not found")]
    KeyNotFound,
    /// The request names no key.
    #[error("etcdserver: key is not provided")]
    KeyNotProvided,
    /// A lease id that does not exist.
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    /// A lease grant with an id that is in use.
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    /// A lease grant with a TTL above the maximum.
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    /// The same key is written twice in one transaction branch.
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    /// A transaction with more operations than allowed.
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    /// An encoded request above `--max-request-bytes`.
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    /// A malformed request (missing fields, undecodable command).
    #[error("etcdserver: {0}")]
    InvalidArgument(String),
    /// This member cannot serve the request because there is no leader.
    #[error("etcdserver: no leader")]
    NoLeader,
    /// The request was not committed in time; it may or may not take effect.
    #[error("etcdserver: request timed out")]
    Timeout,
    /// The leader changed while the request was in flight, so it may or may not take
    /// effect (etcd's `ErrTimeoutDueToLeaderFail`).
    #[error("etcdserver: request timed out, possibly due to previous leader failure")]
    TimeoutDueToLeaderFail,
    /// The store is shutting down or its driver has stopped after a fatal error.
    #[error("etcdserver: server stopped")]
    Stopped,
    /// A membership request names a member that does not exist.
    #[error("etcdserver: member not found")]
    MemberNotFound,
    /// A new member's peer URLs belong to another member.
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    /// Peer URLs that do not parse.
    #[error("etcdserver: given member URLs are invalid")]
    MemberBadUrls,
    /// `member promote` of a voter.
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    /// `member promote` of a learner that has not caught up with the leader.
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    /// `member add --learner` beyond the one learner etcd allows by default.
    #[error("etcdserver: too many learner members in cluster")]
    TooManyLearners,
    /// A change that would leave the cluster without a quorum of started members.
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    /// This member was removed from the cluster; it stops.
    #[error("the member has been permanently removed from the cluster")]
    Removed,
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// On-disk data failed validation somewhere other than a repairable WAL tail.
    #[error("corrupt data in {path}: {reason}")]
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The Raft library refused an operation.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
}

impl StoreError {
    /// Wraps an I/O error with the operation and path, for messages a person can act on.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| StoreError::Io { op, path, source }
    }
}

/// Result with [`StoreError`] as the default error.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
