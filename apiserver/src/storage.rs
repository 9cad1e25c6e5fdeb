//! The seam between the API server and the store: key/value operations with Kubernetes'
//! concurrency semantics (create-if-absent, compare-and-swap on the modification revision,
//! which is the object's `resourceVersion`).
//!
//! Architecture invariant: this is the only module of the API server that talks to the
//! store. It drives a `store::backend::Backend`: the embedded member in-process, or a remote
//! etcd v3 cluster (a Capstan store cluster or etcd) through a local mirror
//! (`capstan apiserver --etcd-servers`); the methods below are the same for both.
//!
//! Values of resources covered by `--encryption-provider-config` are encrypted on every write
//! and decrypted on every read here (`crate::encryption`); the rest of the server only ever
//! sees plain objects.

use std::sync::Arc;

use bytes::Bytes;
use store::backend::Backend;
use store::command::{Applied, Op};
use store::mvcc::KeyRange;
use store::pb;

/// A stored value and the revision of its last write.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Encoded object (JSON, without `metadata.resourceVersion`).
    pub value: Vec<u8>,
    /// `mod_revision` of the key: the object's resourceVersion.
    pub revision: i64,
}

/// One page of a list.
#[derive(Debug, Default)]
pub struct Page {
    /// Keys and values in key order.
    pub items: Vec<(String, Stored)>,
    /// The revision the page was read at.
    pub revision: i64,
    /// Items left after this page (0 on the last page).
    pub remaining: i64,
}

/// A change seen by a watch.
#[derive(Debug, Clone)]
pub enum Change {
    /// Created or updated: the new value and, for an update, the value it replaced.
    Put {
        /// Key.
        key: String,
        /// New value.
        value: Stored,
        /// The value before this write (`None` when this write created the key).
        prev: Option<Stored>,
    },
    /// Deleted: the last value, at the deletion revision.
    Delete {
        /// Key.
        key: String,
        /// Value before deletion, with the deletion revision.
        prev: Stored,
    },
}

/// A live key and its value, sharing the store's memory (no copy).
#[derive(Debug, Clone)]
pub struct SharedItem {
    /// Key.
    pub key: Bytes,
    /// Encoded object (JSON, without `metadata.resourceVersion`).
    pub value: Bytes,
    /// `mod_revision` of the key.
    pub revision: i64,
}

/// A change seen by the watch cache, sharing the store's memory.
#[derive(Debug, Clone)]
pub struct SharedChange {
    /// Revision of the change.
    pub revision: i64,
    /// Key.
    pub key: Bytes,
    /// The value written; `None` for a deletion.
    pub value: Option<Bytes>,
    /// The value this change replaced and its revision, if the key existed.
    pub prev: Option<(Bytes, i64)>,
}

/// Why a conditional write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key does not exist.
    #[error("not found")]
    NotFound,
    /// The key exists already.
    #[error("already exists")]
    AlreadyExists,
    /// The key changed since the given revision.
    #[error("conflict")]
    Conflict,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// A stored value could not be encrypted or decrypted (`--encryption-provider-config`).
    #[error("{0}")]
    Transform(String),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Storage over the store (embedded member or remote cluster).
#[derive(Clone)]
pub struct Storage {
    node: Backend,
    encryption: Option<Arc<crate::encryption::Encryption>>,
}

/// The end of the key range that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn header_revision(h: Option<&pb::PbResponseHeader>) -> i64 {
    h.map_or(0, |h| h.revision)
}

impl Storage {
    /// Storage over `node`.
    pub fn new(node: impl Into<Backend>) -> Self {
        Storage {
            node: node.into(),
            encryption: None,
        }
    }

    /// Storage over `node` whose values are encrypted at rest as `encryption` says.
    pub fn with_encryption(
        node: impl Into<Backend>,
        encryption: Option<Arc<crate::encryption::Encryption>>,
    ) -> Self {
        Storage {
            node: node.into(),
            encryption,
        }
    }

    /// The bytes to store for `value` at `key` (encrypted when configured).
    fn seal(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>> {
        match &self.encryption {
            Some(e) => e
                .seal(key, value)
                .map_err(|m| Error::Transform(format!("encrypting {}: {m}", lossy(key)))),
            None => Ok(value),
        }
    }

    /// The plain value of stored bytes at `key`.
    fn open(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>> {
        match &self.encryption {
            Some(e) if e.covers(key) => e
                .open(key, &value)
                .map(std::borrow::Cow::into_owned)
                .map_err(|m| Error::Transform(format!("decrypting {}: {m}", lossy(key)))),
            _ => Ok(value),
        }
    }

    /// [`Storage::open`] for values shared with the store: unchanged (no copy) unless
    /// encrypted; an undecryptable value is logged and left out.
    fn open_shared(&self, key: &[u8], value: Bytes) -> Option<Bytes> {
        match &self.encryption {
            Some(e) if e.covers(key) => match e.open(key, &value) {
                Ok(plain) => Some(Bytes::from(plain.into_owned())),
                Err(m) => {
                    tracing::error!(key = %lossy(key), err = %m, "cannot decrypt a stored value");
                    None
                }
            },
            _ => Some(value),
        }
    }

    /// What the store's state machine holds in memory (for `/metrics`).
    pub fn usage(&self) -> store::mvcc::Usage {
        self.node.mvcc().usage()
    }

    /// The embedded store member (`capstan server`), for its Raft status on `/metrics`;
    /// `None` with a remote store.
    pub fn local_node(&self) -> Option<&store::node::Node> {
        self.node.local()
    }

    /// The current store revision.
    pub fn current_revision(&self) -> i64 {
        self.node.mvcc().current_revision()
    }

    /// The revision history was compacted at: changes before it can no longer be read.
    pub fn compacted_revision(&self) -> i64 {
        self.node.mvcc().compacted_revision()
    }

    /// The store revision every write committed before the call is part of (a Raft
    /// ReadIndex, then this member's revision): what a consistent read must reflect.
    pub async fn linearizable_revision(&self) -> Result<i64> {
        self.node.read_index().await?;
        Ok(self.current_revision())
    }

    /// Every live key under `prefix` with its value, in key order, and the revision this
    /// snapshot is at; values are shared with the store, not copied.
    pub fn shared_list(&self, prefix: &str) -> (Vec<SharedItem>, i64) {
        let range = KeyRange::new(prefix.as_bytes(), &prefix_end(prefix.as_bytes()));
        let (kvs, revision) = self.node.mvcc().shared_range(&range);
        let items = kvs
            .into_iter()
            .filter_map(|kv| {
                Some(SharedItem {
                    value: self.open_shared(&kv.key, kv.value)?,
                    key: kv.key,
                    revision: kv.mod_revision,
                })
            })
            .collect();
        (items, revision)
    }

    /// As [`Storage::changes`], with values shared with the store instead of copied.
    pub fn shared_changes(
        &self,
        prefix: &str,
        from: i64,
        max: usize,
    ) -> Result<(Vec<SharedChange>, i64)> {
        let range = KeyRange::new(prefix.as_bytes(), &prefix_end(prefix.as_bytes()));
        let (changes, next) = self.node.mvcc().shared_changes(from, &range, max)?;
        let changes = changes
            .into_iter()
            .map(|c| SharedChange {
                revision: c.revision,
                value: c.value.and_then(|v| self.open_shared(&c.key, v)),
                prev: c
                    .prev
                    .and_then(|(v, rev)| Some((self.open_shared(&c.key, v)?, rev))),
                key: c.key,
            })
            .collect();
        Ok((changes, next))
    }

    /// A receiver that changes when the store revision moves.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<i64> {
        self.node.subscribe()
    }

    /// Reads one key (linearizable).
    pub async fn get(&self, key: &str) -> Result<Option<Stored>> {
        self.node.read_index().await?;
        let req = pb::PbRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        };
        let resp = self.node.mvcc().range(&req)?;
        resp.kvs
            .into_iter()
            .next()
            .map(|kv| {
                Ok(Stored {
                    value: self.open(&kv.key, kv.value)?,
                    revision: kv.mod_revision,
                })
            })
            .transpose()
    }

    /// Reads one key from this member's state without a ReadIndex round trip: possibly a
    /// little stale, which is fine where upstream reads an informer cache (admission
    /// checks such as namespace existence).
    pub fn get_local(&self, key: &str) -> Result<Option<Stored>> {
        let req = pb::PbRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        };
        let resp = self.node.mvcc().range(&req)?;
        resp.kvs
            .into_iter()
            .next()
            .map(|kv| {
                Ok(Stored {
                    value: self.open(&kv.key, kv.value)?,
                    revision: kv.mod_revision,
                })
            })
            .transpose()
    }

    /// Whether the value at `key` is stored under an encryption provider or key other than
    /// the one writes use now (upstream's stale read): such a value is rewritten even by an
    /// update that changes nothing.
    pub fn stale(&self, key: &str) -> bool {
        let Some(e) = &self.encryption else {
            return false;
        };
        let req = pb::PbRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        };
        match self.node.mvcc().range(&req) {
            Ok(resp) => resp
                .kvs
                .first()
                .is_some_and(|kv| e.stale(&kv.key, &kv.value)),
            Err(_) => false,
        }
    }

    /// Lists keys under `prefix` in key order, starting after `start_after` (exclusive) when
    /// given, at `revision` (0 = current, linearizable), at most `limit` items (0 = all).
    pub async fn list(
        &self,
        prefix: &str,
        start: Option<&str>,
        revision: i64,
        limit: i64,
    ) -> Result<Page> {
        if revision <= 0 {
            self.node.read_index().await?;
        }
        let end = prefix_end(prefix.as_bytes());
        let from = start.map_or_else(|| prefix.as_bytes().to_vec(), |s| s.as_bytes().to_vec());
        let req = pb::PbRangeRequest {
            key: from,
            range_end: end,
            revision,
            limit: limit.max(0),
            ..Default::default()
        };
        let mvcc = self.node.mvcc();
        let resp = mvcc.range(&req)?;
        let revision = if revision > 0 {
            revision
        } else {
            mvcc.current_revision()
        };
        drop(mvcc);
        let returned = i64::try_from(resp.kvs.len()).unwrap_or(i64::MAX);
        let items = resp
            .kvs
            .into_iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                Ok((
                    key,
                    Stored {
                        value: self.open(&kv.key, kv.value)?,
                        revision: kv.mod_revision,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            revision,
            remaining: resp.count - returned,
        })
    }

    /// Creates `key` if it does not exist; returns the new revision.
    pub async fn create(&self, key: &str, value: Vec<u8>) -> Result<i64> {
        let k = key.as_bytes().to_vec();
        let value = self.seal(&k, value)?;
        let txn = pb::PbTxnRequest {
            compare: vec![pb::PbCompare {
                result: 0, // EQUAL
                target: 1, // CREATE
                key: k.clone(),
                target_union: Some(pb::PbTargetUnion::CreateRevision(0)),
                ..Default::default()
            }],
            success: vec![put_op(k, value)],
            failure: Vec::new(),
        };
        match self.node.propose(Op::Txn(txn)).await? {
            Applied::Txn(r) if r.succeeded => Ok(header_revision(r.header.as_ref())),
            Applied::Txn(_) => Err(Error::AlreadyExists),
            _ => Err(Error::Store(store::StoreError::InvalidArgument(
                "unexpected txn result".into(),
            ))),
        }
    }

    /// Replaces `key` if its revision is still `expected`; returns the new revision.
    pub async fn update(&self, key: &str, value: Vec<u8>, expected: i64) -> Result<i64> {
        let k = key.as_bytes().to_vec();
        let value = self.seal(&k, value)?;
        let txn = pb::PbTxnRequest {
            compare: vec![mod_equals(&k, expected)],
            success: vec![put_op(k.clone(), value)],
            failure: vec![range_op(k)],
        };
        match self.node.propose(Op::Txn(txn)).await? {
            Applied::Txn(r) if r.succeeded => Ok(header_revision(r.header.as_ref())),
            Applied::Txn(r) => Err(if failure_found(&r) {
                Error::Conflict
            } else {
                Error::NotFound
            }),
            _ => Err(Error::Store(store::StoreError::InvalidArgument(
                "unexpected txn result".into(),
            ))),
        }
    }

    /// Deletes `key` if its revision is still `expected`; returns the deletion revision.
    pub async fn delete(&self, key: &str, expected: i64) -> Result<i64> {
        let k = key.as_bytes().to_vec();
        let del = pb::PbTxnRequestOp {
            request: Some(pb::PbTxnOpRequest::RequestDeleteRange(
                pb::PbDeleteRequest {
                    key: k.clone(),
                    ..Default::default()
                },
            )),
        };
        let txn = pb::PbTxnRequest {
            compare: vec![mod_equals(&k, expected)],
            success: vec![del],
            failure: vec![range_op(k)],
        };
        match self.node.propose(Op::Txn(txn)).await? {
            Applied::Txn(r) if r.succeeded => Ok(header_revision(r.header.as_ref())),
            Applied::Txn(r) => Err(if failure_found(&r) {
                Error::Conflict
            } else {
                Error::NotFound
            }),
            _ => Err(Error::Store(store::StoreError::InvalidArgument(
                "unexpected txn result".into(),
            ))),
        }
    }

    /// Drops history older than `revision` (watches and exact reads before it get 410).
    pub async fn compact(&self, revision: i64) -> Result<()> {
        let req = pb::PbCompactionRequest {
            revision,
            physical: true,
        };
        match self.node.propose(Op::Compaction(req)).await {
            Ok(_) | Err(store::StoreError::Compacted) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Changes under `prefix` from revision `from` on (at most about `max`), and the revision
    /// to continue from. Fails with `Compacted` when `from` is too old.
    pub fn changes(
        &self,
        prefix: &str,
        from: i64,
        max: usize,
    ) -> Result<(Vec<(i64, Change)>, i64)> {
        let range = KeyRange::new(prefix.as_bytes(), &prefix_end(prefix.as_bytes()));
        let (events, next) = self.node.mvcc().events(from, &range, true, max)?;
        let mut changes = Vec::with_capacity(events.len());
        for e in events {
            let rev = e.revision.main;
            let Some(kv) = e.event.kv else {
                continue;
            };
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            let change = if e.event.r#type == 0 {
                let prev = match e.event.prev_kv.filter(|_| kv.version > 1) {
                    Some(p) => Some(Stored {
                        value: self.open(&kv.key, p.value)?,
                        revision: p.mod_revision,
                    }),
                    None => None,
                };
                Change::Put {
                    key,
                    prev,
                    value: Stored {
                        value: self.open(&kv.key, kv.value)?,
                        revision: kv.mod_revision,
                    },
                }
            } else {
                let Some(prev) = e.event.prev_kv else {
                    continue;
                };
                Change::Delete {
                    key,
                    prev: Stored {
                        value: self.open(&kv.key, prev.value)?,
                        revision: rev,
                    },
                }
            };
            changes.push((rev, change));
        }
        Ok((changes, next))
    }
}

fn lossy(key: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(key)
}

fn put_op(key: Vec<u8>, value: Vec<u8>) -> pb::PbTxnRequestOp {
    pb::PbTxnRequestOp {
        request: Some(pb::PbTxnOpRequest::RequestPut(pb::PbPutRequest {
            key,
            value,
            ..Default::default()
        })),
    }
}

fn range_op(key: Vec<u8>) -> pb::PbTxnRequestOp {
    pb::PbTxnRequestOp {
        request: Some(pb::PbTxnOpRequest::RequestRange(pb::PbRangeRequest {
            key,
            count_only: true,
            ..Default::default()
        })),
    }
}

fn mod_equals(key: &[u8], rev: i64) -> pb::PbCompare {
    pb::PbCompare {
        result: 0, // EQUAL
        target: 2, // MOD
        key: key.to_vec(),
        target_union: Some(pb::PbTargetUnion::ModRevision(rev)),
        ..Default::default()
    }
}

/// Whether the failure branch's range found the key.
fn failure_found(r: &pb::PbTxnResponse) -> bool {
    r.responses.iter().any(|op| match &op.response {
        Some(pb::PbTxnOpResponse::ResponseRange(rr)) => rr.count > 0,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_end(b"/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(&[0x61, 0xff]), vec![0x62]);
    }
}
