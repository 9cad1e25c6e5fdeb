//! The multi-version key space: ranges, writes, transactions, compaction, lease bookkeeping
//! and the history that watchers read.
//!
//! Worked example of one key's history (etcd's "generations"):
//!
//! ```text
//! put a=1 @5   put a=2 @7   delete a @9   put a=3 @12
//! versions: [5:v1 create=5] [7:v2 create=5] [9:tombstone] [12:v1 create=12]
//! range a @8  -> a=2 (latest version with main <= 8)
//! range a @10 -> nothing (latest is the tombstone)
//! compact @10 -> keeps [12] only: 5 and 7 are superseded, the tombstone at 9 < 10 ends its
//!                generation and goes too. compact @9 would keep the tombstone at exactly 9.
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use bytes::Bytes;

use super::cluster::ClusterRecord;
use super::rev_index::RevIndex;
use super::revision::Revision;
use crate::command::{Applied, Op};
use crate::error::{Result, StoreError};
use crate::pb;

/// Compare targets and results as numbered in etcd's `rpc.proto`.
mod wire {
    pub(super) const TARGET_VERSION: i32 = 0;
    pub(super) const TARGET_CREATE: i32 = 1;
    pub(super) const TARGET_MOD: i32 = 2;
    pub(super) const TARGET_VALUE: i32 = 3;
    pub(super) const TARGET_LEASE: i32 = 4;
    pub(super) const RESULT_EQUAL: i32 = 0;
    pub(super) const RESULT_GREATER: i32 = 1;
    pub(super) const RESULT_LESS: i32 = 2;
    pub(super) const SORT_NONE: i32 = 0;
    pub(super) const SORT_ASCEND: i32 = 1;
    pub(super) const SORT_DESCEND: i32 = 2;
    pub(super) const SORT_KEY: i32 = 0;
    pub(super) const SORT_VERSION: i32 = 1;
    pub(super) const SORT_CREATE: i32 = 2;
    pub(super) const SORT_MOD: i32 = 3;
    pub(super) const SORT_VALUE: i32 = 4;
    pub(super) const EVENT_PUT: i32 = 0;
    pub(super) const EVENT_DELETE: i32 = 1;
}

/// One version of a key. `version == 0` marks a tombstone (the key was deleted).
#[derive(Debug, Clone)]
pub(super) struct Record {
    pub(super) rev: Revision,
    pub(super) create: i64,
    pub(super) version: i64,
    pub(super) value: Bytes,
    pub(super) lease: i64,
}

impl Record {
    pub(super) fn is_tombstone(&self) -> bool {
        self.version == 0
    }

    fn to_kv(&self, key: &[u8], keys_only: bool) -> pb::PbKeyValue {
        pb::PbKeyValue {
            key: key.to_vec(),
            create_revision: self.create,
            mod_revision: self.rev.main,
            version: self.version,
            value: if keys_only {
                Vec::new()
            } else {
                self.value.to_vec()
            },
            lease: self.lease,
        }
    }
}

/// A key or key range with etcd's conventions: an empty `range_end` means the single key,
/// `"\0"` means every key from `key` on, anything else is the half-open `[key, range_end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    start: Vec<u8>,
    end: End,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Single,
    Unbounded,
    Excluded(Vec<u8>),
}

impl KeyRange {
    /// The range etcd means by `key` and `range_end`.
    pub fn new(key: &[u8], range_end: &[u8]) -> Self {
        let end = match range_end {
            [] => End::Single,
            [0] => End::Unbounded,
            end => End::Excluded(end.to_vec()),
        };
        KeyRange {
            start: key.to_vec(),
            end,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            End::Single => key == self.start.as_slice(),
            End::Unbounded => key >= self.start.as_slice(),
            End::Excluded(end) => key >= self.start.as_slice() && key < end.as_slice(),
        }
    }

    /// Bounds for a `BTreeMap` range scan, or `None` when the range is empty.
    fn bounds(&self) -> Option<KeyBounds<'_>> {
        let start = Bound::Included(self.start.as_slice());
        match &self.end {
            End::Single => Some((start, Bound::Included(self.start.as_slice()))),
            End::Unbounded => Some((start, Bound::Unbounded)),
            End::Excluded(end) if end.as_slice() > self.start.as_slice() => {
                Some((start, Bound::Excluded(end.as_slice())))
            }
            End::Excluded(_) => None,
        }
    }
}

/// Start and end bounds of a key scan.
type KeyBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// A change as a watcher sees it.
#[derive(Debug, Clone)]
pub struct Event {
    /// The revision of the change.
    pub revision: Revision,
    /// The etcd event (type, key-value, optional previous key-value).
    pub event: pb::PbEvent,
}

/// A lease as the state machine knows it: its granted TTL and the keys attached to it.
/// Deadlines are not replicated state; the leader's lessor keeps them.
#[derive(Debug, Clone, Default)]
pub(super) struct LeaseEntry {
    pub(super) ttl: i64,
    pub(super) keys: BTreeSet<Bytes>,
}

/// The MVCC key-value state machine.
#[derive(Debug)]
pub struct Mvcc {
    pub(super) keys: BTreeMap<Bytes, Vec<Record>>,
    /// Every retained change by revision, so watchers can replay history in order.
    pub(super) by_rev: RevIndex,
    pub(super) revision: i64,
    pub(super) compacted: i64,
    pub(super) leases: BTreeMap<i64, LeaseEntry>,
    /// The replicated membership (see [`ClusterRecord`]).
    pub(super) cluster: ClusterRecord,
}

impl Default for Mvcc {
    fn default() -> Self {
        // As in etcd, an empty store is at revision 1; the first write makes revision 2.
        Mvcc {
            keys: BTreeMap::new(),
            by_rev: RevIndex::default(),
            revision: 1,
            compacted: 0,
            leases: BTreeMap::new(),
            cluster: ClusterRecord::default(),
        }
    }
}

/// What [`Mvcc::usage`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Live keys.
    pub keys: usize,
    /// Versions held (history and tombstones included, until compaction).
    pub revisions: usize,
    /// Bytes of keys, values and their bookkeeping (values shared with the Raft log are
    /// counted here).
    pub bytes: usize,
}

/// Position of the next write inside the change set being applied.
struct WriteCursor<'a> {
    main: i64,
    sub: i64,
    /// The encoded Raft entry being applied, whose memory values may share.
    source: Option<&'a Bytes>,
}

impl WriteCursor<'_> {
    fn next(&mut self) -> Revision {
        let rev = Revision::new(self.main, self.sub);
        self.sub += 1;
        rev
    }
}

impl Mvcc {
    /// The revision of the last committed change set.
    pub fn current_revision(&self) -> i64 {
        self.revision
    }

    /// The revision history was compacted at (0 if never).
    pub fn compacted_revision(&self) -> i64 {
        self.compacted
    }

    /// The replicated membership (empty until the first membership change).
    pub fn cluster(&self) -> &ClusterRecord {
        &self.cluster
    }

    /// Mutable access to the membership, for the Raft driver applying a conf change.
    pub fn cluster_mut(&mut self) -> &mut ClusterRecord {
        &mut self.cluster
    }

    /// Number of live keys.
    pub fn key_count(&self) -> usize {
        self.keys
            .values()
            .filter(|v| v.last().is_some_and(|r| !r.is_tombstone()))
            .count()
    }

    /// Approximate bytes of retained keys and values (etcd's "db size in use").
    pub fn size_bytes(&self) -> i64 {
        let bytes: usize = self
            .keys
            .iter()
            .map(|(k, vs)| {
                vs.iter()
                    .map(|r| k.len() + r.value.len() + 48)
                    .sum::<usize>()
            })
            .sum();
        i64::try_from(bytes).unwrap_or(i64::MAX)
    }

    /// What the state machine holds in memory, in one walk of every key.
    pub fn usage(&self) -> Usage {
        let mut u = Usage {
            keys: 0,
            revisions: 0,
            bytes: 0,
        };
        for (k, versions) in &self.keys {
            if versions.last().is_some_and(|r| !r.is_tombstone()) {
                u.keys += 1;
            }
            u.revisions += versions.len();
            // The key, its list, each version, and its entry in the revision index.
            u.bytes += k.len()
                + std::mem::size_of::<(Bytes, Vec<Record>)>()
                + versions
                    .iter()
                    .map(|r| {
                        r.value.len()
                            + std::mem::size_of::<Record>()
                            + std::mem::size_of::<(Revision, Bytes)>()
                    })
                    .sum::<usize>();
        }
        u
    }

    /// Granted leases as `(id, ttl)`.
    pub fn leases(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.leases.iter().map(|(id, l)| (*id, l.ttl))
    }

    /// A lease's granted TTL and attached keys, if it exists.
    pub fn lease(&self, id: i64) -> Option<(i64, Vec<Vec<u8>>)> {
        self.leases
            .get(&id)
            .map(|l| (l.ttl, l.keys.iter().map(|k| k.to_vec()).collect()))
    }

    /// Checks a read revision: `<= 0` means current; older than compaction or newer than
    /// current is an error, as in etcd.
    fn check_read_revision(&self, rev: i64) -> Result<Option<i64>> {
        if rev <= 0 {
            return Ok(None);
        }
        if rev > self.revision {
            return Err(StoreError::FutureRevision);
        }
        if rev < self.compacted {
            return Err(StoreError::Compacted);
        }
        Ok(Some(rev))
    }

    /// The version of `versions` visible at `rev` (`None` = latest), skipping tombstones.
    fn visible(versions: &[Record], rev: Option<i64>) -> Option<&Record> {
        let rec = match rev {
            None => versions.last()?,
            Some(rev) => {
                let idx = versions.partition_point(|r| r.rev.main <= rev);
                versions.get(idx.checked_sub(1)?)?
            }
        };
        (!rec.is_tombstone()).then_some(rec)
    }

    pub(super) fn live<'a>(
        &'a self,
        range: &KeyRange,
    ) -> impl Iterator<Item = (&'a Bytes, &'a Record)> {
        let iter = range.bounds().map(|b| self.keys.range::<[u8], _>(b));
        iter.into_iter()
            .flatten()
            .filter_map(|(k, vs)| Self::visible(vs, None).map(|r| (k, r)))
    }

    /// KV.Range: keys in the range as of `revision`, with etcd's limit, count, sort and
    /// revision filters. The header carries the current revision.
    pub fn range(&self, req: &pb::PbRangeRequest) -> Result<pb::PbRangeResponse> {
        if req.key.is_empty() {
            return Err(StoreError::KeyNotProvided);
        }
        let rev = self.check_read_revision(req.revision)?;
        let range = KeyRange::new(&req.key, &req.range_end);
        let mut found: Vec<(&Bytes, &Record)> = Vec::new();
        if let Some(bounds) = range.bounds() {
            for (k, vs) in self.keys.range::<[u8], _>(bounds) {
                let Some(r) = Self::visible(vs, rev) else {
                    continue;
                };
                let keep = (req.min_mod_revision == 0 || r.rev.main >= req.min_mod_revision)
                    && (req.max_mod_revision == 0 || r.rev.main <= req.max_mod_revision)
                    && (req.min_create_revision == 0 || r.create >= req.min_create_revision)
                    && (req.max_create_revision == 0 || r.create <= req.max_create_revision);
                if keep {
                    found.push((k, r));
                }
            }
        }
        let count = i64::try_from(found.len()).unwrap_or(i64::MAX);
        sort(&mut found, req.sort_order, req.sort_target);
        let mut more = false;
        if req.limit > 0 && count > req.limit {
            found.truncate(usize::try_from(req.limit).unwrap_or(usize::MAX));
            more = true;
        }
        let kvs = if req.count_only {
            Vec::new()
        } else {
            found
                .iter()
                .map(|(k, r)| r.to_kv(k, req.keys_only))
                .collect()
        };
        Ok(pb::PbRangeResponse {
            header: Some(self.header()),
            kvs,
            more,
            count,
        })
    }

    fn header(&self) -> pb::PbResponseHeader {
        pb::PbResponseHeader {
            revision: self.revision,
            ..Default::default()
        }
    }

    /// Applies one committed write. Validation that depends on state (leases, key
    /// existence, revisions) happens here, before anything changes, so a failed command
    /// leaves the store untouched.
    pub fn apply(&mut self, op: Op) -> Result<Applied> {
        self.apply_from(op, None)
    }

    /// As [`Mvcc::apply`] for an op decoded from `source` (its encoded Raft entry): large
    /// values are kept as slices of `source` instead of copies.
    pub fn apply_from(&mut self, op: Op, source: Option<&Bytes>) -> Result<Applied> {
        let mut cur = WriteCursor {
            main: self.revision + 1,
            sub: 0,
            source,
        };
        let applied = match op {
            Op::Put(req) => {
                self.check_put(&req)?;
                let resp = self.put(req, &mut cur);
                Applied::Put(resp)
            }
            Op::DeleteRange(req) => Applied::DeleteRange(self.delete_range(&req, &mut cur)),
            Op::Txn(req) => Applied::Txn(self.txn(req, &mut cur)?),
            Op::Compaction(req) => {
                self.compact(req.revision)?;
                Applied::Compaction(pb::PbCompactionResponse::default())
            }
            Op::LeaseGrant(req) => {
                if self.leases.contains_key(&req.id) {
                    return Err(StoreError::LeaseExists);
                }
                self.leases.insert(
                    req.id,
                    LeaseEntry {
                        ttl: req.ttl,
                        keys: BTreeSet::new(),
                    },
                );
                Applied::LeaseGrant(pb::PbLeaseGrantResponse {
                    id: req.id,
                    ttl: req.ttl,
                    ..Default::default()
                })
            }
            Op::LeaseRevoke(req) => {
                let lease = self
                    .leases
                    .remove(&req.id)
                    .ok_or(StoreError::LeaseNotFound)?;
                for key in lease.keys {
                    self.tombstone(key, &mut cur);
                }
                Applied::LeaseRevoke(pb::PbLeaseRevokeResponse::default())
            }
            Op::MemberUpdate(u) => Applied::MemberUpdate(
                self.cluster
                    .apply(&super::MemberChange::Update(u.id, u.peer_urls)),
            ),
        };
        if cur.sub > 0 {
            self.revision = cur.main;
        }
        Ok(self.with_header(applied))
    }

    fn with_header(&self, applied: Applied) -> Applied {
        let h = Some(self.header());
        match applied {
            Applied::Put(r) => Applied::Put(pb::PbPutResponse { header: h, ..r }),
            Applied::DeleteRange(r) => {
                Applied::DeleteRange(pb::PbDeleteResponse { header: h, ..r })
            }
            Applied::Txn(r) => Applied::Txn(pb::PbTxnResponse { header: h, ..r }),
            Applied::Compaction(_) => Applied::Compaction(pb::PbCompactionResponse { header: h }),
            Applied::LeaseGrant(r) => {
                Applied::LeaseGrant(pb::PbLeaseGrantResponse { header: h, ..r })
            }
            Applied::LeaseRevoke(_) => {
                Applied::LeaseRevoke(pb::PbLeaseRevokeResponse { header: h })
            }
            Applied::MemberUpdate(ok) => Applied::MemberUpdate(ok),
        }
    }

    fn check_put(&self, req: &pb::PbPutRequest) -> Result<()> {
        if req.key.is_empty() {
            return Err(StoreError::KeyNotProvided);
        }
        if req.ignore_value || req.ignore_lease {
            let exists = self
                .keys
                .get(req.key.as_slice())
                .and_then(|v| Self::visible(v, None));
            if exists.is_none() {
                return Err(StoreError::KeyNotFound);
            }
        }
        if !req.ignore_lease && req.lease != 0 && !self.leases.contains_key(&req.lease) {
            return Err(StoreError::LeaseNotFound);
        }
        Ok(())
    }

    fn put(&mut self, req: pb::PbPutRequest, cur: &mut WriteCursor) -> pb::PbPutResponse {
        // A key written before keeps its bytes (its history and leases share them).
        let key = match self.keys.get_key_value(req.key.as_slice()) {
            Some((k, _)) => k.clone(),
            None => Bytes::from(req.key),
        };
        let prev = self
            .keys
            .get(&key)
            .and_then(|v| Self::visible(v, None))
            .cloned();
        // A value stays a slice of the Raft entry it came in (the in-memory log holds that
        // entry until the next snapshot: a copy would hold the bytes twice until then).
        let value = match (&prev, req.ignore_value) {
            (Some(p), true) => p.value.clone(),
            _ => match cur
                .source
                .and_then(|src| super::shared_value::find(src, &req.value))
            {
                Some(slice) => slice,
                None => Bytes::from(req.value),
            },
        };
        let lease = match (&prev, req.ignore_lease) {
            (Some(p), true) => p.lease,
            _ => req.lease,
        };
        let rev = cur.next();
        let rec = Record {
            rev,
            create: prev.as_ref().map_or(rev.main, |p| p.create),
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        if let Some(p) = prev.as_ref().filter(|p| p.lease != 0 && p.lease != lease) {
            self.detach(p.lease, &key);
        }
        if let Some(l) = self.leases.get_mut(&lease) {
            l.keys.insert(key.clone());
        }
        self.by_rev.insert(rev, key.clone());
        // Most keys are written once: room for one version, not the default four.
        self.keys
            .entry(key.clone())
            .or_insert_with(|| Vec::with_capacity(1))
            .push(rec);
        pb::PbPutResponse {
            header: None,
            prev_kv: if req.prev_kv {
                prev.map(|p| p.to_kv(&key, false))
            } else {
                None
            },
        }
    }

    fn detach(&mut self, lease: i64, key: &Bytes) {
        if let Some(l) = self.leases.get_mut(&lease) {
            l.keys.remove(key);
        }
    }

    /// Deletes `key` at the cursor's revision; returns the version it had.
    fn tombstone(&mut self, key: Bytes, cur: &mut WriteCursor) -> Option<Record> {
        let prev = self
            .keys
            .get(&key)
            .and_then(|v| Self::visible(v, None))
            .cloned()?;
        if prev.lease != 0 {
            self.detach(prev.lease, &key);
        }
        let rev = cur.next();
        let rec = Record {
            rev,
            create: 0,
            version: 0,
            value: Bytes::new(),
            lease: 0,
        };
        self.by_rev.insert(rev, key.clone());
        self.keys.entry(key).or_default().push(rec);
        Some(prev)
    }

    fn delete_range(
        &mut self,
        req: &pb::PbDeleteRequest,
        cur: &mut WriteCursor,
    ) -> pb::PbDeleteResponse {
        let range = KeyRange::new(&req.key, &req.range_end);
        let keys: Vec<Bytes> = self.live(&range).map(|(k, _)| k.clone()).collect();
        let mut prev_kvs = Vec::new();
        for key in &keys {
            let prev = self.tombstone(key.clone(), cur);
            if let Some(prev) = prev.filter(|_| req.prev_kv) {
                prev_kvs.push(prev.to_kv(key, false));
            }
        }
        pb::PbDeleteResponse {
            header: None,
            deleted: i64::try_from(keys.len()).unwrap_or(i64::MAX),
            prev_kvs,
        }
    }

    fn compare(&self, c: &pb::PbCompare) -> bool {
        use pb::PbTargetUnion as T;
        let range = KeyRange::new(&c.key, &c.range_end);
        let zero = Record {
            rev: Revision::default(),
            create: 0,
            version: 0,
            value: Bytes::new(),
            lease: 0,
        };
        let found: Vec<&Record> = self.live(&range).map(|(_, r)| r).collect();
        if found.is_empty() && c.target == wire::TARGET_VALUE {
            return false;
        }
        let records = if found.is_empty() { vec![&zero] } else { found };
        records.into_iter().all(|r| {
            let ord = match (c.target, &c.target_union) {
                (wire::TARGET_VERSION, Some(T::Version(v))) => r.version.cmp(v),
                (wire::TARGET_CREATE, Some(T::CreateRevision(v))) => r.create.cmp(v),
                (wire::TARGET_MOD, Some(T::ModRevision(v))) => r.rev.main.cmp(v),
                (wire::TARGET_VALUE, Some(T::Value(v))) => r.value.as_ref().cmp(v.as_slice()),
                (wire::TARGET_LEASE, Some(T::Lease(v))) => r.lease.cmp(v),
                (wire::TARGET_VALUE, None) => r.value.as_ref().cmp(&[][..]),
                (wire::TARGET_VERSION, None) => r.version.cmp(&0),
                (wire::TARGET_CREATE, None) => r.create.cmp(&0),
                (wire::TARGET_MOD, None) => r.rev.main.cmp(&0),
                (wire::TARGET_LEASE, None) => r.lease.cmp(&0),
                // A target whose union holds another target's type never matches.
                _ => return false,
            };
            match c.result {
                wire::RESULT_EQUAL => ord.is_eq(),
                wire::RESULT_GREATER => ord.is_gt(),
                wire::RESULT_LESS => ord.is_lt(),
                _ => ord.is_ne(),
            }
        })
    }

    /// Checks the state-dependent preconditions of the ops a transaction will run.
    fn check_ops(&self, ops: &[pb::PbTxnRequestOp]) -> Result<()> {
        use pb::PbTxnOpRequest as R;
        for op in ops {
            match &op.request {
                Some(R::RequestPut(p)) => self.check_put(p)?,
                Some(R::RequestTxn(t)) => {
                    let branch = if t.compare.iter().all(|c| self.compare(c)) {
                        &t.success
                    } else {
                        &t.failure
                    };
                    self.check_ops(branch)?;
                }
                Some(R::RequestRange(r)) => {
                    self.check_read_revision(r.revision)?;
                }
                Some(R::RequestDeleteRange(_)) | None => {}
            }
        }
        Ok(())
    }

    fn txn(&mut self, req: pb::PbTxnRequest, cur: &mut WriteCursor) -> Result<pb::PbTxnResponse> {
        use pb::{PbTxnOpRequest as R, PbTxnOpResponse as S};
        let succeeded = req.compare.iter().all(|c| self.compare(c));
        let ops = if succeeded { req.success } else { req.failure };
        self.check_ops(&ops)?;
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            let response = match op.request {
                Some(R::RequestRange(r)) => S::ResponseRange(self.range(&r)?),
                Some(R::RequestPut(p)) => S::ResponsePut(self.put(p, cur)),
                Some(R::RequestDeleteRange(d)) => {
                    S::ResponseDeleteRange(self.delete_range(&d, cur))
                }
                Some(R::RequestTxn(t)) => S::ResponseTxn(self.txn(t, cur)?),
                None => continue,
            };
            responses.push(pb::PbResponseOp {
                response: Some(response),
            });
        }
        Ok(pb::PbTxnResponse {
            header: None,
            succeeded,
            responses,
        })
    }

    /// Drops history older than `rev`, keeping for each key the version visible at `rev`.
    fn compact(&mut self, rev: i64) -> Result<()> {
        if rev <= self.compacted {
            return Err(StoreError::Compacted);
        }
        if rev > self.revision {
            return Err(StoreError::FutureRevision);
        }
        self.keys.retain(|_, versions| {
            let idx = versions.partition_point(|r| r.rev.main <= rev);
            if let Some(last) = idx.checked_sub(1).and_then(|i| versions.get(i)) {
                let drop_last = last.is_tombstone() && last.rev.main < rev;
                let cut = idx - 1 + usize::from(drop_last);
                versions.drain(..cut);
            }
            !versions.is_empty()
        });
        self.by_rev.drop_before(Revision::new(rev, 0));
        self.compacted = rev;
        Ok(())
    }

    /// Changes to keys in `range` from revision `from` on, in revision order, at most about
    /// `max` events (a change set is never split). Returns the events and the revision to
    /// ask for next. Fails with `Compacted` when `from` is older than the compacted revision.
    pub fn events(
        &self,
        from: i64,
        range: &KeyRange,
        prev_kv: bool,
        max: usize,
    ) -> Result<(Vec<Event>, i64)> {
        if from < self.compacted {
            return Err(StoreError::Compacted);
        }
        let mut out: Vec<Event> = Vec::new();
        for (rev, key, versions, idx) in self.history_from(from, range) {
            if out.len() >= max && out.last().is_some_and(|e| e.revision.main != rev.main) {
                return Ok((out, rev.main));
            }
            let Some(rec) = versions.get(idx) else {
                continue;
            };
            let prev = idx
                .checked_sub(1)
                .and_then(|i| versions.get(i))
                .filter(|p| prev_kv && !p.is_tombstone())
                .map(|p| p.to_kv(key, false));
            let event = if rec.is_tombstone() {
                pb::PbEvent {
                    r#type: wire::EVENT_DELETE,
                    kv: Some(pb::PbKeyValue {
                        key: key.to_vec(),
                        mod_revision: rev.main,
                        ..Default::default()
                    }),
                    prev_kv: prev,
                }
            } else {
                pb::PbEvent {
                    r#type: wire::EVENT_PUT,
                    kv: Some(rec.to_kv(key, false)),
                    prev_kv: prev,
                }
            };
            out.push(Event {
                revision: rev,
                event,
            });
        }
        Ok((out, self.revision + 1))
    }
}

impl Mvcc {
    /// Retained changes from revision `from` on to keys in `range`, in revision order: the
    /// revision, the key, the key's versions and the index of the changed version in them.
    pub(super) fn history_from<'a>(
        &'a self,
        from: i64,
        range: &'a KeyRange,
    ) -> impl Iterator<Item = (Revision, &'a Bytes, &'a [Record], usize)> + 'a {
        self.by_rev
            .from(Revision::new(from, 0))
            .filter(|(_, key)| range.contains(key))
            .filter_map(|(rev, key)| {
                let versions = self.keys.get(key)?;
                let idx = versions.binary_search_by(|r| r.rev.cmp(rev)).ok()?;
                Some((*rev, key, versions.as_slice(), idx))
            })
    }
}

fn sort(found: &mut [(&Bytes, &Record)], order: i32, target: i32) {
    let order = if order == wire::SORT_NONE && target != wire::SORT_KEY {
        wire::SORT_ASCEND
    } else {
        order
    };
    if order == wire::SORT_NONE || (order == wire::SORT_ASCEND && target == wire::SORT_KEY) {
        return; // already in key order
    }
    found.sort_by(|(ka, a), (kb, b)| match target {
        wire::SORT_VERSION => a.version.cmp(&b.version),
        wire::SORT_CREATE => a.create.cmp(&b.create),
        wire::SORT_MOD => a.rev.main.cmp(&b.rev.main),
        wire::SORT_VALUE => a.value.cmp(&b.value),
        _ => ka.cmp(kb),
    });
    if order == wire::SORT_DESCEND {
        found.reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(m: &mut Mvcc, k: &str, v: &str) -> i64 {
        let req = pb::PbPutRequest {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        };
        match m.apply(Op::Put(req)) {
            Ok(Applied::Put(r)) => r.header.map(|h| h.revision).unwrap_or_default(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn get(m: &Mvcc, k: &str, rev: i64) -> Result<Option<String>> {
        let req = pb::PbRangeRequest {
            key: k.into(),
            revision: rev,
            ..Default::default()
        };
        let r = m.range(&req)?;
        Ok(r.kvs
            .first()
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
    }

    fn delete(m: &mut Mvcc, k: &str) {
        let req = pb::PbDeleteRequest {
            key: k.into(),
            ..Default::default()
        };
        m.apply(Op::DeleteRange(req)).unwrap();
    }

    #[test]
    fn empty_store_is_at_revision_one_and_first_put_makes_two() {
        let mut m = Mvcc::default();
        assert_eq!(m.current_revision(), 1);
        assert_eq!(put(&mut m, "a", "1"), 2);
    }

    #[test]
    fn reads_at_old_revisions_follow_the_worked_example() {
        let mut m = Mvcc::default();
        put(&mut m, "a", "1"); // 2
        put(&mut m, "a", "2"); // 3
        delete(&mut m, "a"); // 4
        put(&mut m, "a", "3"); // 5
        assert_eq!(get(&m, "a", 2).unwrap().as_deref(), Some("1"));
        assert_eq!(get(&m, "a", 3).unwrap().as_deref(), Some("2"));
        assert_eq!(get(&m, "a", 4).unwrap(), None);
        assert_eq!(get(&m, "a", 0).unwrap().as_deref(), Some("3"));
        assert!(matches!(get(&m, "a", 6), Err(StoreError::FutureRevision)));
        m.apply(Op::Compaction(pb::PbCompactionRequest {
            revision: 4,
            physical: false,
        }))
        .unwrap();
        assert!(matches!(get(&m, "a", 3), Err(StoreError::Compacted)));
        assert_eq!(get(&m, "a", 4).unwrap(), None);
        assert_eq!(get(&m, "a", 5).unwrap().as_deref(), Some("3"));
        assert!(matches!(
            m.apply(Op::Compaction(pb::PbCompactionRequest {
                revision: 4,
                physical: false
            })),
            Err(StoreError::Compacted)
        ));
    }

    #[test]
    fn version_and_create_revision_restart_after_delete() {
        let mut m = Mvcc::default();
        put(&mut m, "k", "a");
        put(&mut m, "k", "b");
        let r = m
            .range(&pb::PbRangeRequest {
                key: "k".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            (
                r.kvs[0].version,
                r.kvs[0].create_revision,
                r.kvs[0].mod_revision
            ),
            (2, 2, 3)
        );
        delete(&mut m, "k");
        put(&mut m, "k", "c");
        let r = m
            .range(&pb::PbRangeRequest {
                key: "k".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!((r.kvs[0].version, r.kvs[0].create_revision), (1, 5));
    }

    #[test]
    fn prefix_range_honours_limit_count_and_key_order() {
        let mut m = Mvcc::default();
        for k in ["p/c", "p/a", "q", "p/b"] {
            put(&mut m, k, "x");
        }
        let req = pb::PbRangeRequest {
            key: "p/".into(),
            range_end: "p0".into(),
            limit: 2,
            ..Default::default()
        };
        let r = m.range(&req).unwrap();
        let keys: Vec<_> = r
            .kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect();
        assert_eq!(keys, ["p/a", "p/b"]);
        assert_eq!((r.count, r.more), (3, true));
    }

    #[test]
    fn txn_takes_the_branch_its_compares_choose_and_writes_one_revision() {
        let mut m = Mvcc::default();
        put(&mut m, "k", "v"); // 2
        let cmp = pb::PbCompare {
            result: wire::RESULT_EQUAL,
            target: wire::TARGET_VALUE,
            key: "k".into(),
            target_union: Some(pb::PbTargetUnion::Value("v".into())),
            ..Default::default()
        };
        let put_op = |k: &str| pb::PbTxnRequestOp {
            request: Some(pb::PbTxnOpRequest::RequestPut(pb::PbPutRequest {
                key: k.into(),
                value: "t".into(),
                ..Default::default()
            })),
        };
        let req = pb::PbTxnRequest {
            compare: vec![cmp],
            success: vec![put_op("a"), put_op("b")],
            failure: vec![put_op("c")],
        };
        let Applied::Txn(r) = m.apply(Op::Txn(req)).unwrap() else {
            panic!()
        };
        assert!(r.succeeded);
        assert_eq!(m.current_revision(), 3);
        let ra = m
            .range(&pb::PbRangeRequest {
                key: "b".into(),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(ra.kvs[0].mod_revision, 3);
        assert_eq!(get(&m, "c", 0).unwrap(), None);
    }

    #[test]
    fn put_with_unknown_lease_fails_and_changes_nothing() {
        let mut m = Mvcc::default();
        let req = pb::PbPutRequest {
            key: "k".into(),
            lease: 7,
            ..Default::default()
        };
        assert!(matches!(
            m.apply(Op::Put(req)),
            Err(StoreError::LeaseNotFound)
        ));
        assert_eq!(m.current_revision(), 1);
    }

    #[test]
    fn lease_revoke_deletes_attached_keys_in_one_revision() {
        let mut m = Mvcc::default();
        m.apply(Op::LeaseGrant(pb::PbLeaseGrantRequest { id: 9, ttl: 60 }))
            .unwrap();
        for k in ["a", "b"] {
            let req = pb::PbPutRequest {
                key: k.into(),
                lease: 9,
                ..Default::default()
            };
            m.apply(Op::Put(req)).unwrap();
        }
        m.apply(Op::LeaseRevoke(pb::PbLeaseRevokeRequest { id: 9 }))
            .unwrap();
        assert_eq!(m.current_revision(), 4);
        assert_eq!(get(&m, "a", 0).unwrap(), None);
        assert!(m.lease(9).is_none());
    }

    #[test]
    fn events_replay_history_with_prev_kv_and_fail_below_compaction() {
        let mut m = Mvcc::default();
        put(&mut m, "w/a", "1"); // 2
        put(&mut m, "x", "1"); // 3
        put(&mut m, "w/a", "2"); // 4
        delete(&mut m, "w/a"); // 5
        let range = KeyRange::new(b"w/", b"w0");
        let (evs, next) = m.events(2, &range, true, 100).unwrap();
        let revs: Vec<_> = evs.iter().map(|e| e.revision.main).collect();
        assert_eq!(revs, [2, 4, 5]);
        assert_eq!(next, 6);
        assert_eq!(
            evs[1].event.prev_kv.as_ref().map(|kv| kv.value.clone()),
            Some(b"1".to_vec())
        );
        assert_eq!(evs[2].event.r#type, wire::EVENT_DELETE);
        m.apply(Op::Compaction(pb::PbCompactionRequest {
            revision: 4,
            physical: false,
        }))
        .unwrap();
        assert!(matches!(
            m.events(3, &range, false, 10),
            Err(StoreError::Compacted)
        ));
        let (evs, _) = m.events(4, &range, false, 10).unwrap();
        assert_eq!(evs.len(), 2);
    }
}
