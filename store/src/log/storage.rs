//! [`LogStore`]: raft-rs's `Storage` over the WAL and snapshot files.
//!
//! Recent entries are kept in memory (everything since the last snapshot, plus a tail behind
//! it for slow followers), so Raft's reads never touch the disk; every change goes to the WAL
//! first. The driver thread owns the `LogStore` (inside `RawNode`), so there are no locks.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};

use super::snapshot::SnapFiles;
use super::wal::Wal;
use crate::error::{Result, StoreError};

/// Entries held in memory by every [`LogStore`] of this process.
static MEMORY_ENTRIES: AtomicI64 = AtomicI64::new(0);
/// Bytes of their data (shared with the state machine's large values: see
/// `mvcc::shared_value`).
static MEMORY_BYTES: AtomicI64 = AtomicI64::new(0);

/// Entries and data bytes the Raft logs of this process hold in memory (for `/metrics`).
pub fn memory_usage() -> (i64, i64) {
    (
        MEMORY_ENTRIES.load(Ordering::Relaxed),
        MEMORY_BYTES.load(Ordering::Relaxed),
    )
}

fn entries_bytes(ents: &[Entry]) -> i64 {
    let bytes: usize = ents.iter().map(|e| e.data.len() + e.context.len()).sum();
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

fn count_in(ents: &[Entry]) {
    MEMORY_ENTRIES.fetch_add(ents.len() as i64, Ordering::Relaxed);
    MEMORY_BYTES.fetch_add(entries_bytes(ents), Ordering::Relaxed);
}

fn count_out(ents: &[Entry]) {
    MEMORY_ENTRIES.fetch_sub(ents.len() as i64, Ordering::Relaxed);
    MEMORY_BYTES.fetch_sub(entries_bytes(ents), Ordering::Relaxed);
}

/// The Raft log of one member, durable on disk.
#[derive(Debug)]
pub struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    snap_meta: SnapshotMetadata,
    entries: Vec<Entry>,
    wal: Wal,
    snaps: SnapFiles,
    /// Bytes of snapshot files, refreshed when one is saved.
    snap_bytes: u64,
}

impl Drop for LogStore {
    fn drop(&mut self) {
        count_out(&self.entries);
    }
}

/// A freshly opened log: the store plus the snapshot to restore the state machine from.
pub struct Opened {
    /// The log, ready for `RawNode::new`.
    pub store: LogStore,
    /// The newest snapshot (its data is the encoded state machine; empty for a new member).
    pub snapshot: Snapshot,
    /// Bytes cut off a torn WAL tail during replay.
    pub truncated_bytes: u64,
}

impl LogStore {
    /// Opens the log in `wal_dir`/`snap_dir`. A member with no snapshot yet is bootstrapped
    /// with `initial_voters` as its configuration: a snapshot at index 1, term 1, so the log
    /// proper starts at index 2 and a member added later (whose log is empty, at index 0,
    /// with no configuration) is always caught up by a snapshot that tells it the
    /// configuration, never by entries that assume one. A joining member (no voters) starts
    /// at index 0 with an empty configuration, as raft-rs expects.
    pub fn open(
        wal_dir: &Path,
        snap_dir: &Path,
        segment_bytes: u64,
        initial_voters: &[u64],
    ) -> Result<Opened> {
        let snaps = SnapFiles::open(snap_dir)?;
        let snapshot = match snaps.load_newest()? {
            Some(s) => s,
            None => {
                let mut s = Snapshot::default();
                if !initial_voters.is_empty() {
                    s.mut_metadata().index = 1;
                    s.mut_metadata().term = 1;
                }
                s.mut_metadata().mut_conf_state().voters = initial_voters.to_vec();
                snaps.save(&s)?;
                s
            }
        };
        let snap_meta = snapshot.get_metadata().clone();
        let (wal, replayed) = Wal::open(wal_dir, segment_bytes, snap_meta.index)?;
        let mut hard_state = replayed.hard_state;
        // A snapshot only holds committed entries: the commit index is at least its index.
        hard_state.commit = hard_state.commit.max(snap_meta.index);
        hard_state.term = hard_state.term.max(snap_meta.term);
        let store = LogStore {
            hard_state,
            conf_state: snap_meta.get_conf_state().clone(),
            snap_meta,
            entries: {
                count_in(&replayed.entries);
                replayed.entries
            },
            wal,
            snap_bytes: snaps.disk_bytes(),
            snaps,
        };
        Ok(Opened {
            store,
            snapshot,
            truncated_bytes: replayed.truncated_bytes,
        })
    }

    fn first(&self) -> u64 {
        self.entries
            .first()
            .map_or(self.snap_meta.index + 1, |e| e.index)
    }

    fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snap_meta.index, |e| e.index)
    }

    /// Appends entries (Raft may overwrite an uncommitted suffix); durable after [`sync`].
    ///
    /// [`sync`]: LogStore::sync
    pub fn append(&mut self, ents: &[Entry]) -> Result<()> {
        let Some(first) = ents.first() else {
            return Ok(());
        };
        if first.index < self.first() || first.index > self.last() + 1 {
            return Err(StoreError::Raft(raft::Error::Store(StorageError::Other(
                format!(
                    "append at {} outside log [{}, {}]",
                    first.index,
                    self.first(),
                    self.last() + 1
                )
                .into(),
            ))));
        }
        self.wal.append(ents)?;
        let keep = usize::try_from(first.index - self.first()).unwrap_or(usize::MAX);
        if let Some(dropped) = self.entries.get(keep..) {
            count_out(dropped);
        }
        self.entries.truncate(keep);
        self.entries.extend_from_slice(ents);
        count_in(ents);
        Ok(())
    }

    /// Records a new hard state; durable after [`LogStore::sync`].
    pub fn set_hard_state(&mut self, hs: &HardState) -> Result<()> {
        self.wal.set_hard_state(hs)?;
        self.hard_state = hs.clone();
        Ok(())
    }

    /// Notes a new commit index from a `LightReady` (kept in memory; the entries it covers
    /// are already durable, and replay re-derives it).
    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = self.hard_state.commit.max(commit);
    }

    /// Records the configuration after a conf change (persisted with the next snapshot; the
    /// conf-change entries themselves are in the log).
    pub fn set_conf_state(&mut self, cs: ConfState) {
        self.conf_state = cs;
    }

    /// Makes everything appended so far durable: one write, one fsync.
    pub fn sync(&mut self) -> Result<()> {
        self.wal.sync()
    }

    /// Writes what was recorded so far without an fsync (a hard state whose only change is
    /// the commit index: see [`super::wal::Wal::write_buffered`]).
    pub fn write_unsynced(&mut self) -> Result<()> {
        self.wal.write_buffered()
    }

    /// Installs a snapshot received from the leader: saved to disk, log reset behind it.
    pub fn apply_snapshot(&mut self, snap: &Snapshot) -> Result<()> {
        let meta = snap.get_metadata();
        if meta.index <= self.snap_meta.index {
            return Ok(());
        }
        self.snaps.save(snap)?;
        self.snap_bytes = self.snaps.disk_bytes();
        self.snap_meta = meta.clone();
        self.conf_state = meta.get_conf_state().clone();
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.hard_state.term = self.hard_state.term.max(meta.term);
        count_out(&self.entries);
        self.entries.clear();
        Ok(())
    }

    /// Builds (does not save) a snapshot of the state machine as of applied index `index`,
    /// with the term and configuration the log records for it. Saving it is slow, so the
    /// driver hands it to another thread with [`LogStore::snap_files`] and reports back
    /// through [`LogStore::snapshot_saved`].
    pub fn prepare_snapshot(&self, index: u64, data: Vec<u8>) -> Result<Snapshot> {
        let term = raft::Storage::term(self, index)?;
        let mut snap = Snapshot::default();
        {
            let meta = snap.mut_metadata();
            meta.index = index;
            meta.term = term;
            meta.set_conf_state(self.conf_state.clone());
        }
        snap.data = bytes::Bytes::from(data);
        Ok(snap)
    }

    /// The snapshot directory, for saving on another thread.
    pub fn snap_files(&self) -> SnapFiles {
        self.snaps.clone()
    }

    /// Adopts a snapshot that is now durable on disk: drops in-memory entries older than
    /// `index - keep_entries` and WAL segments that no kept snapshot needs.
    pub fn snapshot_saved(&mut self, meta: SnapshotMetadata, keep_entries: u64) -> Result<()> {
        if meta.index <= self.snap_meta.index {
            return Ok(());
        }
        let index = meta.index;
        self.snap_meta = meta;
        self.snap_bytes = self.snaps.disk_bytes();
        let compact_to = index.saturating_sub(keep_entries);
        if compact_to > self.first() {
            let drop = usize::try_from(compact_to - self.first()).unwrap_or(usize::MAX);
            let drained = self.entries.drain(..drop.min(self.entries.len()));
            count_out(drained.as_slice());
        }
        if let Some(oldest) = self.snaps.oldest_index()? {
            self.wal.release_to(oldest)?;
        }
        Ok(())
    }

    /// Voters of the configuration the log starts with.
    pub fn initial_state_voters(&self) -> Vec<u64> {
        self.conf_state.voters.clone()
    }

    /// Index of the newest snapshot.
    pub fn snapshot_index(&self) -> u64 {
        self.snap_meta.index
    }

    /// Bytes of WAL and snapshots on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.wal.disk_bytes() + self.snap_bytes
    }
}

impl raft::Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let offset = self.first();
        let lo = usize::try_from(low - offset).unwrap_or(usize::MAX);
        let hi = usize::try_from(high - offset).unwrap_or(usize::MAX);
        let mut ents = self
            .entries
            .get(lo..hi)
            .map(<[Entry]>::to_vec)
            .unwrap_or_default();
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snap_meta.index {
            return Ok(self.snap_meta.term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let pos = usize::try_from(idx - self.first()).unwrap_or(usize::MAX);
        self.entries
            .get(pos)
            .map(|e| e.term)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let snap = self
            .snaps
            .load_newest()
            .map_err(|e| raft::Error::Store(StorageError::Other(e.to_string().into())))?;
        // A member refuses a snapshot whose configuration does not include it (it was
        // added after the snapshot): wait for the one the driver takes after adding it.
        let includes = |s: &Snapshot| {
            let cs = s.get_metadata().get_conf_state();
            cs.voters.contains(&to) || cs.learners.contains(&to) || cs.voters_outgoing.contains(&to)
        };
        match snap {
            Some(s) if s.get_metadata().index >= request_index && includes(&s) => Ok(s),
            _ => Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            )),
        }
    }
}
