//! The revision index: the key of every retained change, in revision order, so watchers can
//! replay history. Writes always append (revisions only grow) and compaction drops a prefix,
//! so a double-ended queue holds it at 48 bytes a change: a `BTreeMap` filled in ascending
//! order leaves its nodes about half empty, twice that.

use std::collections::VecDeque;

use bytes::Bytes;

use super::revision::Revision;

/// Retained changes by revision (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct RevIndex {
    entries: VecDeque<(Revision, Bytes)>,
}

impl RevIndex {
    /// An index of `entries`, in any order.
    pub(super) fn from_unsorted(mut entries: Vec<(Revision, Bytes)>) -> Self {
        entries.sort_by_key(|(rev, _)| *rev);
        entries.dedup_by_key(|(rev, _)| *rev);
        RevIndex {
            entries: entries.into(),
        }
    }

    /// Records the change at `rev` to `key` (replacing one at the same revision).
    pub(super) fn insert(&mut self, rev: Revision, key: Bytes) {
        if self.entries.back().is_none_or(|(last, _)| *last < rev) {
            self.entries.push_back((rev, key));
            return;
        }
        let at = self.entries.partition_point(|(r, _)| *r < rev);
        match self.entries.get_mut(at) {
            Some(entry) if entry.0 == rev => entry.1 = key,
            _ => self.entries.insert(at, (rev, key)),
        }
    }

    /// Drops the changes before `rev`.
    pub(super) fn drop_before(&mut self, rev: Revision) {
        let at = self.entries.partition_point(|(r, _)| *r < rev);
        self.entries.drain(..at);
        if self.entries.capacity() > 1024 && self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to_fit();
        }
    }

    /// The changes from `rev` on, in revision order.
    pub(super) fn from(&self, rev: Revision) -> impl Iterator<Item = (&Revision, &Bytes)> {
        let at = self.entries.partition_point(|(r, _)| *r < rev);
        self.entries.range(at..).map(|(r, k)| (r, k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revs(index: &RevIndex, from: i64) -> Vec<(i64, i64)> {
        index
            .from(Revision::new(from, 0))
            .map(|(r, _)| (r.main, r.sub))
            .collect()
    }

    #[test]
    fn appends_inserts_and_drops_in_revision_order() {
        let key = Bytes::from_static(b"k");
        let mut index = RevIndex::from_unsorted(vec![
            (Revision::new(5, 0), key.clone()),
            (Revision::new(3, 1), key.clone()),
            (Revision::new(3, 0), key.clone()),
        ]);
        index.insert(Revision::new(6, 0), key.clone());
        index.insert(Revision::new(4, 0), key);
        index.insert(Revision::new(4, 0), Bytes::from_static(b"other"));
        assert_eq!(revs(&index, 0), [(3, 0), (3, 1), (4, 0), (5, 0), (6, 0)]);
        assert_eq!(revs(&index, 4), [(4, 0), (5, 0), (6, 0)]);
        assert_eq!(
            index
                .from(Revision::new(4, 0))
                .next()
                .map(|(_, k)| k.clone()),
            Some(Bytes::from_static(b"other"))
        );
        index.drop_before(Revision::new(5, 0));
        assert_eq!(revs(&index, 0), [(5, 0), (6, 0)]);
        assert!(revs(&index, 7).is_empty());
    }
}
