//! The state machine's snapshot encoding (the `data` of a Raft snapshot): every retained
//! version of every key plus the lease table, as one prost message.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use prost::Message;

use super::kv::{LeaseEntry, Mvcc, Record};
use super::revision::Revision;
use crate::error::{Result, StoreError};

#[derive(Clone, PartialEq, prost::Message)]
struct SnapshotData {
    #[prost(int64, tag = "1")]
    revision: i64,
    #[prost(int64, tag = "2")]
    compacted: i64,
    #[prost(message, repeated, tag = "3")]
    keys: Vec<KeyHistory>,
    #[prost(message, repeated, tag = "4")]
    leases: Vec<LeaseData>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct KeyHistory {
    #[prost(bytes = "bytes", tag = "1")]
    key: Bytes,
    #[prost(message, repeated, tag = "2")]
    versions: Vec<VersionData>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct VersionData {
    #[prost(int64, tag = "1")]
    main: i64,
    #[prost(int64, tag = "2")]
    sub: i64,
    #[prost(int64, tag = "3")]
    create: i64,
    #[prost(int64, tag = "4")]
    version: i64,
    #[prost(bytes = "bytes", tag = "5")]
    value: Bytes,
    #[prost(int64, tag = "6")]
    lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LeaseData {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
}

impl Mvcc {
    /// Encodes the whole state (history since compaction included).
    pub fn encode(&self) -> Vec<u8> {
        let data = SnapshotData {
            revision: self.revision,
            compacted: self.compacted,
            keys: self
                .keys
                .iter()
                .map(|(k, vs)| KeyHistory {
                    key: k.clone(),
                    versions: vs
                        .iter()
                        .map(|r| VersionData {
                            main: r.rev.main,
                            sub: r.rev.sub,
                            create: r.create,
                            version: r.version,
                            value: r.value.clone(),
                            lease: r.lease,
                        })
                        .collect(),
                })
                .collect(),
            leases: self
                .leases
                .iter()
                .map(|(id, l)| LeaseData {
                    id: *id,
                    ttl: l.ttl,
                })
                .collect(),
        };
        data.encode_to_vec()
    }

    /// Rebuilds a state machine from [`Mvcc::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Result<Mvcc> {
        let data = SnapshotData::decode(bytes).map_err(|e| StoreError::Corrupt {
            path: "snapshot data".into(),
            reason: e.to_string(),
        })?;
        let mut leases: BTreeMap<i64, LeaseEntry> = data
            .leases
            .iter()
            .map(|l| {
                (
                    l.id,
                    LeaseEntry {
                        ttl: l.ttl,
                        keys: BTreeSet::new(),
                    },
                )
            })
            .collect();
        let mut keys = BTreeMap::new();
        let mut by_rev = BTreeMap::new();
        for kh in data.keys {
            let versions: Vec<Record> = kh
                .versions
                .into_iter()
                .map(|v| Record {
                    rev: Revision::new(v.main, v.sub),
                    create: v.create,
                    version: v.version,
                    value: v.value,
                    lease: v.lease,
                })
                .collect();
            for r in versions.iter().filter(|r| r.rev.main >= data.compacted) {
                by_rev.insert(r.rev, kh.key.clone());
            }
            let live_lease = versions.last().filter(|r| r.version != 0 && r.lease != 0);
            if let Some(l) = live_lease.and_then(|last| leases.get_mut(&last.lease)) {
                l.keys.insert(kh.key.clone());
            }
            keys.insert(kh.key, versions);
        }
        Ok(Mvcc {
            keys,
            by_rev,
            revision: data.revision,
            compacted: data.compacted,
            leases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Op;
    use crate::pb;

    #[test]
    fn encode_then_decode_keeps_history_leases_and_revisions() {
        let mut m = Mvcc::default();
        m.apply(Op::LeaseGrant(pb::PbLeaseGrantRequest { id: 5, ttl: 30 }))
            .unwrap();
        for (k, v, lease) in [("a", "1", 0), ("a", "2", 5), ("b", "x", 0)] {
            let req = pb::PbPutRequest {
                key: k.into(),
                value: v.into(),
                lease,
                ..Default::default()
            };
            m.apply(Op::Put(req)).unwrap();
        }
        let back = Mvcc::decode(&m.encode()).unwrap();
        assert_eq!(back.current_revision(), m.current_revision());
        assert_eq!(
            back.lease(5).map(|(_, keys)| keys),
            Some(vec![b"a".to_vec()])
        );
        let old = pb::PbRangeRequest {
            key: "a".into(),
            revision: 2,
            ..Default::default()
        };
        assert_eq!(back.range(&old).unwrap().kvs[0].value, b"1");
    }
}
