//! Zero-copy reads for consumers in the same process (the embedded API server's watch
//! cache): keys and values are handed out as `Bytes` that share the state machine's memory
//! instead of the copies the etcd protobuf messages need.

use bytes::Bytes;

use super::kv::{KeyRange, Mvcc};
use crate::error::{Result, StoreError};

/// One version of a key, sharing the stored bytes.
#[derive(Debug, Clone)]
pub struct SharedKv {
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// The revision that wrote this version.
    pub mod_revision: i64,
}

/// A change as [`Mvcc::shared_changes`] reports it.
#[derive(Debug, Clone)]
pub struct SharedChange {
    /// Main revision of the change.
    pub revision: i64,
    /// The key.
    pub key: Bytes,
    /// The value written, or `None` for a deletion.
    pub value: Option<Bytes>,
    /// The version this change replaced (value and its mod revision), if the key was live.
    pub prev: Option<(Bytes, i64)>,
}

impl Mvcc {
    /// Every live key in `range` at the current revision, in key order, and that revision:
    /// one consistent snapshot.
    pub fn shared_range(&self, range: &KeyRange) -> (Vec<SharedKv>, i64) {
        let kvs = self
            .live(range)
            .map(|(k, r)| SharedKv {
                key: k.clone(),
                value: r.value.clone(),
                mod_revision: r.rev.main,
            })
            .collect();
        (kvs, self.revision)
    }

    /// Changes to keys in `range` from revision `from` on, in revision order, at most about
    /// `max` (a change set is never split), and the revision to ask for next. Fails with
    /// `Compacted` when `from` is older than the compacted revision.
    pub fn shared_changes(
        &self,
        from: i64,
        range: &KeyRange,
        max: usize,
    ) -> Result<(Vec<SharedChange>, i64)> {
        if from < self.compacted {
            return Err(StoreError::Compacted);
        }
        let mut out: Vec<SharedChange> = Vec::new();
        for (rev, key, versions, idx) in self.history_from(from, range) {
            if out.len() >= max && out.last().is_some_and(|c| c.revision != rev.main) {
                return Ok((out, rev.main));
            }
            let Some(rec) = versions.get(idx) else {
                continue;
            };
            let prev = idx
                .checked_sub(1)
                .and_then(|i| versions.get(i))
                .filter(|p| !p.is_tombstone())
                .map(|p| (p.value.clone(), p.rev.main));
            out.push(SharedChange {
                revision: rev.main,
                key: key.clone(),
                value: (!rec.is_tombstone()).then(|| rec.value.clone()),
                prev,
            });
        }
        Ok((out, self.revision + 1))
    }
}
