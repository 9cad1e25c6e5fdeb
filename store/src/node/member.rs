//! Member identity: this member's Raft id and its cluster's id, chosen once and kept in
//! `member/id` so they never change (Raft node ids must never be reused).

use std::fs;
use std::path::Path;

use crate::config::StoreConfig;
use crate::error::{Result, StoreError};

/// Ids that identify this member and its cluster on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIds {
    /// Raft node id / etcd member id; never 0.
    pub member_id: u64,
    /// etcd cluster id.
    pub cluster_id: u64,
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// Loads the ids from `member/id`, or derives them (as etcd does, from the member's name
/// and peer URLs) and saves them on first start.
pub fn load_or_create(cfg: &StoreConfig) -> Result<MemberIds> {
    let dir = cfg.data_dir.join("member");
    fs::create_dir_all(&dir).map_err(StoreError::io("creating data directory", &dir))?;
    let path = dir.join("id");
    match fs::read_to_string(&path) {
        Ok(text) => parse(&text).ok_or_else(|| StoreError::Corrupt {
            path: path.clone(),
            reason: "expected 'member <hex>' and 'cluster <hex>' lines".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let urls = cfg.initial_advertise_peer_urls.join(",");
            let member_id = fnv1a(&[cfg.name.as_bytes(), urls.as_bytes()]);
            let cluster_id = fnv1a(&[b"capstan-cluster", &member_id.to_be_bytes()]);
            let ids = MemberIds {
                member_id,
                cluster_id,
            };
            let tmp = dir.join("id.tmp");
            let text = format!("member {member_id:016x}\ncluster {cluster_id:016x}\n");
            fs::write(&tmp, text).map_err(StoreError::io("writing member id", &tmp))?;
            fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(StoreError::io("syncing member id", &tmp))?;
            fs::rename(&tmp, &path).map_err(StoreError::io("writing member id", &path))?;
            crate::log::wal::sync_dir(&dir)?;
            Ok(ids)
        }
        Err(e) => Err(StoreError::io("reading member id", &path)(e)),
    }
}

fn parse(text: &str) -> Option<MemberIds> {
    let mut member_id = None;
    let mut cluster_id = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("member", v)) => member_id = u64::from_str_radix(v.trim(), 16).ok(),
            Some(("cluster", v)) => cluster_id = u64::from_str_radix(v.trim(), 16).ok(),
            _ => {}
        }
    }
    Some(MemberIds {
        member_id: member_id?,
        cluster_id: cluster_id?,
    })
}

/// Checks that `dir` can hold data: creates it, writes and fsyncs a probe file, removes it.
/// Catches a read-only, full or otherwise unusable data directory at start-up with a clear
/// message instead of a failure on the first write.
pub fn probe_writable(dir: &Path) -> Result<()> {
    use std::io::Write;
    fs::create_dir_all(dir).map_err(StoreError::io("creating data directory", dir))?;
    let probe = dir.join(".probe");
    let res = fs::File::create(&probe).and_then(|mut f| {
        f.write_all(&[0u8; 64 * 1024])?;
        f.sync_all()
    });
    let _ = fs::remove_file(&probe);
    res.map_err(StoreError::io("writing to data directory", dir))
}
