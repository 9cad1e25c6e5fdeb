//! The payload of a Raft log entry: one client write, encoded with prost.
//!
//! The operations are etcd's own request messages, so the state machine applies exactly what
//! the client sent (after validation), and every replica decodes the same bytes the same way.

use crate::pb;

/// One replicated write, as stored in a Raft entry's `data`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RaftCommand {
    /// Proposal id, unique per origin member; 0 for commands nobody waits on.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Raft id of the member that proposed it (its pending table holds the reply channel).
    #[prost(uint64, tag = "2")]
    pub origin: u64,
    /// The write itself.
    #[prost(oneof = "Op", tags = "3, 4, 5, 6, 7, 8, 9")]
    pub op: Option<Op>,
}

/// The operations a [`RaftCommand`] can carry.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Op {
    /// KV.Put.
    #[prost(message, tag = "3")]
    Put(pb::PbPutRequest),
    /// KV.DeleteRange.
    #[prost(message, tag = "4")]
    DeleteRange(pb::PbDeleteRequest),
    /// KV.Txn.
    #[prost(message, tag = "5")]
    Txn(pb::PbTxnRequest),
    /// KV.Compact.
    #[prost(message, tag = "6")]
    Compaction(pb::PbCompactionRequest),
    /// Lease.LeaseGrant, with the id already chosen by the proposer.
    #[prost(message, tag = "7")]
    LeaseGrant(pb::PbLeaseGrantRequest),
    /// Lease.LeaseRevoke, from a client or from lease expiry on the leader.
    #[prost(message, tag = "8")]
    LeaseRevoke(pb::PbLeaseRevokeRequest),
    /// Cluster.MemberUpdate: new peer URLs for a member. Not a Raft configuration change
    /// (the voters stay the same), so it travels as an ordinary entry.
    #[prost(message, tag = "9")]
    MemberUpdate(MemberUpdate),
}

/// New peer URLs for a member.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberUpdate {
    /// The member.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its new peer URLs.
    #[prost(string, repeated, tag = "2")]
    pub peer_urls: Vec<String>,
}

/// The context of a Raft conf change entry: who waits for it and what the member looks
/// like (Raft itself only carries the id).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfChangeContext {
    /// Proposal id (as in [`RaftCommand`]).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The proposing member.
    #[prost(uint64, tag = "2")]
    pub origin: u64,
    /// Peer URLs of an added member.
    #[prost(string, repeated, tag = "3")]
    pub peer_urls: Vec<String>,
}

/// What applying an [`Op`] produced; headers are filled in by the API layer except
/// `header.revision`, which the state machine sets.
#[derive(Debug, Clone)]
pub enum Applied {
    /// Result of a put.
    Put(pb::PbPutResponse),
    /// Result of a delete.
    DeleteRange(pb::PbDeleteResponse),
    /// Result of a transaction.
    Txn(pb::PbTxnResponse),
    /// Result of a compaction.
    Compaction(pb::PbCompactionResponse),
    /// Result of a lease grant.
    LeaseGrant(pb::PbLeaseGrantResponse),
    /// Result of a lease revoke.
    LeaseRevoke(pb::PbLeaseRevokeResponse),
    /// A member update was applied (`false`: the member no longer exists).
    MemberUpdate(bool),
}
