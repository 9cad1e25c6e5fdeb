//! Snapshot files: a Raft `Snapshot` (metadata with index, term and conf state, plus the
//! state machine's encoded data) per file, named `<term>-<index>.snap` (16 hex digits each).
//!
//! Format: `| crc32 of the rest: u32 LE | protobuf-encoded raft Snapshot |`. A file is
//! written under a temporary name, fsynced, renamed, and the directory fsynced, so a crash
//! leaves either the old set of snapshots or the new one. A file whose checksum fails is
//! renamed `*.broken` and the next older one is used.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Snapshot, SnapshotMetadata};

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
        self.write_file(snap.get_metadata(), |out, path| {
            snap.write_to_writer(out).map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("encoding snapshot: {e}"),
            })
        })
    }

    /// As [`SnapFiles::save`] for a snapshot with metadata `meta` whose `data`, `data_len`
    /// bytes long, `write_data` streams: the encoded state machine is never held in memory
    /// whole. The file is the same as `save` writes for that snapshot.
    pub fn save_streamed(
        &self,
        meta: &SnapshotMetadata,
        data_len: u64,
        write_data: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<PathBuf> {
        self.write_file(meta, |out, path| {
            let io = |e| StoreError::io("writing snapshot", path)(e);
            // `Snapshot { bytes data = 1; SnapshotMetadata metadata = 2; }`, field by field.
            if data_len > 0 {
                out.write_all(&field_header(1, data_len)).map_err(io)?;
                let mut counted = CountingWriter { inner: out, n: 0 };
                write_data(&mut counted).map_err(io)?;
                if counted.n != data_len {
                    return Err(StoreError::Corrupt {
                        path: path.to_path_buf(),
                        reason: format!("snapshot data is {} bytes, not {data_len}", counted.n),
                    });
                }
            }
            let meta = meta.write_to_bytes().map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("encoding snapshot metadata: {e}"),
            })?;
            out.write_all(&field_header(2, meta.len() as u64))
                .and_then(|()| out.write_all(&meta))
                .map_err(io)
        })
    }

    /// Writes a snapshot file for `meta` whose protobuf body `body` writes: streamed to a
    /// temporary file and checksummed on the way (the checksum goes in front once known),
    /// fsynced, renamed into place; then old snapshots are pruned.
    fn write_file(
        &self,
        meta: &SnapshotMetadata,
        body: impl FnOnce(&mut dyn Write, &Path) -> Result<()>,
    ) -> Result<PathBuf> {
        use std::io::{Seek as _, SeekFrom};
        let name = format!("{:016x}-{:016x}.snap", meta.term, meta.index);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        {
            let write_err = |e| StoreError::io("writing snapshot", &tmp)(e);
            let f = fs::File::create(&tmp).map_err(StoreError::io("creating snapshot", &tmp))?;
            let mut out = CrcWriter {
                inner: std::io::BufWriter::with_capacity(1 << 20, f),
                crc: crc32fast::Hasher::new(),
            };
            out.inner.write_all(&[0; 4]).map_err(write_err)?;
            body(&mut out, &tmp)?;
            let crc = out.crc.finalize();
            let mut f = out
                .inner
                .into_inner()
                .map_err(|e| e.into_error())
                .map_err(write_err)?;
            f.seek(SeekFrom::Start(0))
                .and_then(|_| f.write_all(&crc.to_le_bytes()))
                .and_then(|()| f.sync_all())
                .map_err(write_err)?;
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

/// The tag (length-delimited wire type) and length of protobuf field `field`.
fn field_header(field: u32, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(11);
    let mut v = (u64::from(field) << 3) | 2;
    for _ in 0..2 {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        v = len;
    }
    out
}

/// A writer that counts what passes through it.
struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    n: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A writer that checksums what passes through it.
struct CrcWriter<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Reads and verifies one snapshot file.
pub fn read(path: &Path) -> Result<Snapshot> {
    let data =
        bytes::Bytes::from(fs::read(path).map_err(StoreError::io("reading snapshot", path))?);
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
    // The state machine's data stays a slice of the file's bytes (no second copy).
    Snapshot::parse_from_carllerche_bytes(&data.slice(4..)).map_err(|e| corrupt(&e.to_string()))
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
    fn a_streamed_snapshot_is_the_file_save_writes() {
        let dir = tempfile::tempdir().unwrap();
        let files = SnapFiles::open(dir.path()).unwrap();
        let mut s = snap(7);
        s.data = bytes::Bytes::from(vec![3u8; 300]);
        let saved = fs::read(files.save(&s).unwrap()).unwrap();
        let streamed = files
            .save_streamed(s.get_metadata(), 300, |w| w.write_all(&[3u8; 300]))
            .unwrap();
        assert_eq!(fs::read(&streamed).unwrap(), saved);
        assert_eq!(read(&streamed).unwrap(), s);
        assert!(
            files
                .save_streamed(s.get_metadata(), 301, |w| w.write_all(&[3u8; 300]))
                .is_err()
        );
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
