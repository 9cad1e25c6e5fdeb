//! The state machine's snapshot encoding (the `data` of a Raft snapshot): every retained
//! version of every key plus the lease table, as one prost message.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use prost::Message;

use super::cluster::{ClusterRecord, MemberRecord};
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
    #[prost(message, repeated, tag = "5")]
    members: Vec<MemberData>,
    #[prost(uint64, repeated, tag = "6")]
    removed: Vec<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MemberData {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(string, repeated, tag = "2")]
    peer_urls: Vec<String>,
    #[prost(bool, tag = "3")]
    is_learner: bool,
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

/// A state machine's state, ready to encode (see [`Mvcc::image`]).
#[derive(Debug)]
pub struct Image(SnapshotData);

impl Image {
    /// The snapshot encoding ([`Mvcc::decode`] reads it).
    pub fn encode(&self) -> Vec<u8> {
        self.0.encode_to_vec()
    }

    /// Length of [`Image::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.0.encoded_len()
    }

    /// Writes [`Image::encode`]'s output to `w` a piece at a time (never all in memory):
    /// the scalar fields, then each key's history, then the leases.
    pub fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        const CHUNK: usize = 256 * 1024;
        let mut buf = Vec::with_capacity(CHUNK * 2);
        let head = SnapshotData {
            revision: self.0.revision,
            compacted: self.0.compacted,
            keys: Vec::new(),
            leases: Vec::new(),
            members: Vec::new(),
            removed: Vec::new(),
        };
        head.encode_raw(&mut buf);
        for key in &self.0.keys {
            prost::encoding::message::encode(3, key, &mut buf);
            if buf.len() >= CHUNK {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        for lease in &self.0.leases {
            prost::encoding::message::encode(4, lease, &mut buf);
        }
        // Fields 5 and 6 in the order `encode` writes them.
        let tail = SnapshotData {
            revision: 0,
            compacted: 0,
            keys: Vec::new(),
            leases: Vec::new(),
            members: self.0.members.clone(),
            removed: self.0.removed.clone(),
        };
        tail.encode_raw(&mut buf);
        w.write_all(&buf)
    }
}

impl Mvcc {
    /// Encodes the whole state (history since compaction included).
    pub fn encode(&self) -> Vec<u8> {
        self.image().encode()
    }

    /// The whole state as it will be encoded, sharing the values (cheap next to encoding
    /// them): taken under the lock, encoded after it is released.
    pub fn image(&self) -> Image {
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
            members: self
                .cluster
                .members
                .iter()
                .map(|m| MemberData {
                    id: m.id,
                    peer_urls: m.peer_urls.clone(),
                    is_learner: m.is_learner,
                })
                .collect(),
            removed: self.cluster.removed.iter().copied().collect(),
        };
        Image(data)
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
        let mut by_rev = Vec::new();
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
                by_rev.push((r.rev, kh.key.clone()));
            }
            let live_lease = versions.last().filter(|r| r.version != 0 && r.lease != 0);
            if let Some(l) = live_lease.and_then(|last| leases.get_mut(&last.lease)) {
                l.keys.insert(kh.key.clone());
            }
            keys.insert(kh.key, versions);
        }
        Ok(Mvcc {
            keys,
            by_rev: super::rev_index::RevIndex::from_unsorted(by_rev),
            revision: data.revision,
            compacted: data.compacted,
            leases,
            cluster: ClusterRecord {
                members: data
                    .members
                    .into_iter()
                    .map(|m| MemberRecord {
                        id: m.id,
                        peer_urls: m.peer_urls,
                        is_learner: m.is_learner,
                    })
                    .collect(),
                removed: data.removed.into_iter().collect(),
            },
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
        m.cluster_mut()
            .apply(&crate::mvcc::MemberChange::AddLearner(MemberRecord {
                id: 9,
                peer_urls: vec!["http://127.0.0.1:9".into()],
                is_learner: true,
            }));
        m.cluster_mut().apply(&crate::mvcc::MemberChange::Remove(4));
        let back = Mvcc::decode(&m.encode()).unwrap();
        assert_eq!(back.cluster(), m.cluster());
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
        // Streaming writes exactly the same bytes.
        let image = m.image();
        let mut streamed = Vec::new();
        image.write_to(&mut streamed).unwrap();
        assert_eq!(streamed, image.encode());
        assert_eq!(streamed.len(), image.encoded_len());
    }
}
