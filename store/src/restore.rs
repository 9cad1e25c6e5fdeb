//! Disaster recovery, as `etcdctl snapshot save` and `etcdutl snapshot status|restore` do it:
//! a snapshot file taken from a live member ([`save`]) is checked ([`read`], [`status`]) and
//! turned into the data directory of a member of a **new** cluster ([`restore`]).
//!
//! A snapshot file is what Maintenance.Snapshot streams (see `api::maintenance`):
//! `| body length: u64 LE | a member/snap/*.snap file | zero padding to 512 | sha256 |`. A bare
//! `*.snap` file copied out of a data directory is accepted with `skip_hash_check`.
//!
//! Restoring writes the member identity derived from the new `--initial-cluster` and token
//! (new member ids, a new cluster id) and one snapshot file holding the state machine at
//! index 1, term 1, whose configuration is every member of the new cluster. The member then
//! starts on the ordinary restart path: same keys, values, revisions and versions as the
//! snapshot, and Raft begins at term 2 with all members agreeing on the first index.

use std::path::Path;

use protobuf::Message as _;
use raft::eraftpb::Snapshot;
use sha2::Digest as _;

use crate::config::StoreConfig;
use crate::error::{Result, StoreError};
use crate::log::snapshot::SnapFiles;
use crate::mvcc::Mvcc;
use crate::node::MemberIds;
use crate::node::member;

/// Reads and checks a snapshot file: the SHA-256 trailer (unless `skip_hash_check`, for a
/// bare `*.snap` file from a data directory), then the snap file's own checksum.
pub fn read(path: &Path, skip_hash_check: bool) -> Result<Snapshot> {
    let bytes = std::fs::read(path).map_err(StoreError::io("reading snapshot", path))?;
    let invalid = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let file = if skip_hash_check {
        // A bare `.snap` file, or a saved one whose trailer is not checked.
        match framed_body(&bytes) {
            Some(body) => body,
            None => &bytes[..],
        }
    } else {
        if bytes.len() < 8 + 32 || (bytes.len() - 32) % 512 != 0 {
            return Err(invalid(
                "snapshot missing hash but --skip-hash-check=false".into(),
            ));
        }
        let (paged, sha) = bytes.split_at(bytes.len() - 32);
        let computed = sha2::Sha256::digest(paged);
        if computed.as_slice() != sha {
            return Err(invalid(format!(
                "expected sha256 {}, got {}",
                hex(sha),
                hex(computed.as_slice())
            )));
        }
        framed_body(&bytes).ok_or_else(|| invalid("bad snapshot length header".into()))?
    };
    if file.len() < 4 {
        return Err(invalid("snapshot file is too short".into()));
    }
    let (crc, body) = file.split_at(4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(invalid("snapshot file checksum mismatch".into()));
    }
    Snapshot::parse_from_bytes(body).map_err(|e| invalid(format!("decoding snapshot: {e}")))
}

/// The snap file inside a saved snapshot (`| length | file | padding | sha256 |`).
fn framed_body(bytes: &[u8]) -> Option<&[u8]> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    bytes.get(8..8usize.checked_add(len)?)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What `snapshot status` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// CRC-32 of the encoded state machine.
    pub hash: u32,
    /// The store revision the snapshot holds.
    pub revision: i64,
    /// Keys (live, not deleted) in it.
    pub total_keys: usize,
    /// Bytes of the encoded state machine.
    pub total_size: usize,
}

/// The status of a snapshot read with [`read`].
pub fn status(snap: &Snapshot) -> Result<Status> {
    let mvcc = Mvcc::decode(&snap.data)?;
    Ok(Status {
        hash: crc32fast::hash(&snap.data),
        revision: mvcc.current_revision(),
        total_keys: mvcc.key_count(),
        total_size: snap.data.len(),
    })
}

/// Writes the data directory `cfg.data_dir` for member `cfg.name` of the new cluster
/// `cfg.initial_cluster` (token `cfg.initial_cluster_token`) holding `snap`'s state. The
/// directory must not exist or be empty (etcd's rule). Returns the new ids.
pub fn restore(cfg: &StoreConfig, snap: &Snapshot) -> Result<MemberIds> {
    let dir = &cfg.data_dir;
    let not_empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(StoreError::io("reading data directory", dir)(e)),
    };
    if not_empty {
        return Err(StoreError::InvalidArgument(format!(
            "data-dir {:?} not empty or could not be read",
            dir.display().to_string()
        )));
    }
    // The state machine must decode before anything is written. The old cluster's
    // membership is not the new cluster's: the new one starts from `--initial-cluster`.
    let mut state = Mvcc::decode(&snap.data)?;
    let data = if state.cluster().is_empty() {
        snap.data.clone()
    } else {
        *state.cluster_mut() = Default::default();
        bytes::Bytes::from(state.encode())
    };
    drop(state);
    if cfg.initial_cluster.is_empty() {
        return Err(StoreError::InvalidArgument(
            "--initial-cluster is required to restore a snapshot".into(),
        ));
    }
    // Every member of the new cluster starts from this snapshot: a new cluster.
    let mut cfg = cfg.clone();
    cfg.initial_cluster_state = crate::config::ClusterState::New;
    let cfg = &cfg;
    let identity = member::load_or_create(cfg)?;
    let mut restored = Snapshot::default();
    {
        let meta = restored.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.mut_conf_state().voters = identity.initial_voters.clone();
    }
    restored.data = data;
    SnapFiles::open(&cfg.snap_dir())?.save(&restored)?;
    Ok(identity.ids)
}

/// `snapshot save`: streams Maintenance.Snapshot from `endpoint` (over TLS with `tls` for an
/// `https://` endpoint) into `path` (through
/// `path.part`, renamed once complete and verified). Returns the bytes written.
pub async fn save(
    endpoint: &str,
    tls: &crate::transport::client_tls::DialTls,
    path: &Path,
) -> Result<u64> {
    use std::io::Write as _;
    let remote = |e: etcd_client::Error| {
        StoreError::InvalidArgument(format!("snapshot from {endpoint}: {e}"))
    };
    let mut client = crate::remote::etcd_client(&[endpoint.to_owned()], tls).await?;
    let mut stream = client.snapshot().await.map_err(remote)?;
    let part = path.with_extension("part");
    let mut file =
        std::fs::File::create(&part).map_err(StoreError::io("creating snapshot", &part))?;
    let mut written = 0u64;
    while let Some(msg) = stream.message().await.map_err(remote)? {
        file.write_all(msg.blob())
            .map_err(StoreError::io("writing snapshot", &part))?;
        written += msg.blob().len() as u64;
    }
    file.sync_all()
        .map_err(StoreError::io("syncing snapshot", &part))?;
    drop(file);
    // The same check `etcdctl snapshot save` does before keeping the file.
    read(&part, false)?;
    std::fs::rename(&part, path).map_err(StoreError::io("renaming snapshot", path))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A saved snapshot as Maintenance.Snapshot frames it, and the bare snap file.
    fn saved(snap: &Snapshot) -> (Vec<u8>, Vec<u8>) {
        let body = snap.write_to_bytes().unwrap();
        let mut file = crc32fast::hash(&body).to_le_bytes().to_vec();
        file.extend_from_slice(&body);
        let mut out = (file.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&file);
        out.resize(out.len().div_ceil(512) * 512, 0);
        let digest = sha2::Sha256::digest(&out);
        out.extend_from_slice(&digest);
        (out, file)
    }

    #[test]
    fn saved_snapshots_are_checked_and_bare_snap_files_need_skip_hash_check() {
        let dir = std::env::temp_dir().join(format!("capstan-restore-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let snap = Snapshot {
            data: bytes::Bytes::from(Mvcc::default().encode()),
            ..Default::default()
        };
        let (framed, bare) = saved(&snap);
        let path = dir.join("ok.db");
        std::fs::write(&path, &framed).unwrap();
        let read_back = read(&path, false).unwrap();
        assert_eq!(read_back.data, snap.data);
        assert_eq!(status(&read_back).unwrap().revision, 1);

        let mut bad = framed;
        bad[20] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(
            read(&path, false)
                .unwrap_err()
                .to_string()
                .contains("expected sha256")
        );

        std::fs::write(&path, &bare).unwrap();
        assert!(read(&path, false).is_err());
        assert_eq!(read(&path, true).unwrap().data, snap.data);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
