//! Snapshot files: a Raft `Snapshot` (metadata with index, term and conf state, plus the
//! state machine's encoded data) per file, named `<term>-<index>.snap` (16 hex digits each).
//!
//! Format: `| crc32 of the rest: u32 LE | protobuf-encoded raft Snapshot |`. A file is
//! written under a temporary name, fsynced, renamed, and the directory fsynced, so a crash
//! leaves either the old set of snapshots or the new one. A file whose checksum fails is
//! renamed `*.broken` and the next older one is used.

use std::fs;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::Snapshot;

use super::wal::sync_dir;
use crate::error::{Result, StoreError};

/// Snapshots kept on disk; older ones are deleted after a new one is saved.
const KEEP: usize = 2;

/// The snapshot directory.
#[derive(Debug, Clone)]
pub struct SnapFiles {
    dir: PathBuf,
}

fn parse_name(name: &str) -> Option<(u64, u64)> {
    let (term, index) = name.strip_suffix(".snap")?.split_once('-')?;
    Some((
        u64::from_str_radix(term, 16).ok()?,
        u64::from_str_radix(index, 16).ok()?,
    ))
}

impl SnapFiles {
    /// Opens (creating if needed) the snapshot directory.
    pub fn open(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).map_err(StoreError::io("creating snapshot directory", dir))?;
        // A crash while saving leaves a `.tmp` file that was never renamed into place.
        for entry in fs::read_dir(dir).map_err(StoreError::io("listing snapshots", dir))? {
            let path = entry
                .map_err(StoreError::io("listing snapshots", dir))?
                .path();
            if path.extension().is_some_and(|e| e == "tmp") {
                fs::remove_file(&path)
                    .map_err(StoreError::io("removing partial snapshot", &path))?;
            }
        }
        Ok(SnapFiles {
            dir: dir.to_path_buf(),
        })
    }

    /// Snapshot files as `(index, term, path)`, newest first.
    fn list(&self) -> Result<Vec<(u64, u64, PathBuf)>> {
        let mut out = Vec::new();
        for entry in
            fs::read_dir(&self.dir).map_err(StoreError::io("listing snapshots", &self.dir))?
        {
            let entry = entry.map_err(StoreError::io("listing snapshots", &self.dir))?;
            if let Some((term, index)) = entry.file_name().to_str().and_then(parse_name) {
                out.push((index, term, entry.path()));
            }
        }
        out.sort_by(|a, b| b.cmp(a));
        Ok(out)
    }

    /// Durably writes `snap`, then deletes all but the newest [`KEEP`] snapshots.
    pub fn save(&self, snap: &Snapshot) -> Result<PathBuf> {
        let meta = snap.get_metadata();
        let name = format!("{:016x}-{:016x}.snap", meta.term, meta.index);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let body = snap.write_to_bytes().map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            reason: format!("encoding snapshot: {e}"),
        })?;
        let mut data = Vec::with_capacity(body.len() + 4);
        data.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        data.extend_from_slice(&body);
        {
            use std::io::Write;
            let mut f =
                fs::File::create(&tmp).map_err(StoreError::io("creating snapshot", &tmp))?;
            f.write_all(&data)
                .and_then(|()| f.sync_all())
                .map_err(StoreError::io("writing snapshot", &tmp))?;
        }
        fs::rename(&tmp, &path).map_err(StoreError::io("renaming snapshot", &path))?;
        sync_dir(&self.dir)?;
        for (_, _, old) in self.list()?.into_iter().skip(KEEP) {
            fs::remove_file(&old).map_err(StoreError::io("removing old snapshot", &old))?;
        }
        Ok(path)
    }

    /// The newest readable snapshot, if any.
    pub fn load_newest(&self) -> Result<Option<Snapshot>> {
        for (_, _, path) in self.list()? {
            match read(&path) {
                Ok(snap) => return Ok(Some(snap)),
                Err(err) => {
                    tracing::warn!(snapshot = %path.display(), %err, "skipping unreadable snapshot");
                    let broken = path.with_extension("snap.broken");
                    fs::rename(&path, &broken)
                        .map_err(StoreError::io("renaming snapshot", &path))?;
                }
            }
        }
        Ok(None)
    }

    /// Index of the oldest snapshot kept (WAL segments below it may go).
    pub fn oldest_index(&self) -> Result<Option<u64>> {
        Ok(self.list()?.last().map(|(index, _, _)| *index))
    }

    /// Bytes the snapshots occupy on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.list()
            .unwrap_or_default()
            .iter()
            .filter_map(|(_, _, p)| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// Reads and verifies one snapshot file.
pub fn read(path: &Path) -> Result<Snapshot> {
    let data = fs::read(path).map_err(StoreError::io("reading snapshot", path))?;
    let corrupt = |reason: &str| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    let (crc, body) = data
        .split_at_checked(4)
        .ok_or_else(|| corrupt("file too short"))?;
    let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32fast::hash(body) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Snapshot::parse_from_bytes(body).map_err(|e| corrupt(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(index: u64) -> Snapshot {
        let mut s = Snapshot::default();
        s.mut_metadata().index = index;
        s.mut_metadata().term = 1;
        s.data = bytes::Bytes::from(vec![1u8; 64]);
        s
    }

    #[test]
    fn newest_valid_snapshot_wins_and_old_ones_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let files = SnapFiles::open(dir.path()).unwrap();
        for i in [10, 20, 30] {
            files.save(&snap(i)).unwrap();
        }
        assert_eq!(files.list().unwrap().len(), KEEP);
        let newest = files.list().unwrap()[0].2.clone();
        let mut data = fs::read(&newest).unwrap();
        data[10] ^= 0xff;
        fs::write(&newest, data).unwrap();
        let loaded = files.load_newest().unwrap().unwrap();
        assert_eq!(loaded.get_metadata().index, 20);
    }
}
