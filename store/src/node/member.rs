//! Member identity and membership: this member's Raft id and its cluster's id, chosen once
//! and kept in `member/id` so they never change (Raft node ids must never be reused), and the
//! cluster's members (`member/members`), written on first start from `--initial-cluster`.
//!
//! Ids of a cluster built with `--initial-cluster` are derived the way etcd derives them, so
//! every member computes the same ids without talking to the others: a member's id is the
//! first 8 bytes (big-endian) of a hash of its sorted peer URLs concatenated with the cluster
//! token, and the cluster id the first 8 bytes of a hash of the sorted member ids. etcd hashes
//! with SHA-1; Capstan uses SHA-256 (already a dependency), so the numbers differ from etcd's
//! but have the same properties. A lone member started without `--initial-cluster` keeps the
//! ids earlier versions gave it.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use sha2::Digest as _;

use crate::config::{ClusterState, StoreConfig};
use crate::error::{Result, StoreError};
use crate::mvcc::{ClusterRecord, MemberRecord};

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

/// One member of the cluster, as `member list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Raft id / etcd member id.
    pub id: u64,
    /// Name (empty until the member has introduced itself, as in etcd).
    pub name: String,
    /// URLs its peers reach it on.
    pub peer_urls: Vec<String>,
    /// URLs clients reach it on (learned when it connects; empty before).
    pub client_urls: Vec<String>,
    /// A learner receives the log but does not vote (`member add --learner`).
    pub is_learner: bool,
}

#[derive(Debug, Default)]
struct Members {
    members: Vec<MemberInfo>,
    removed: BTreeSet<u64>,
}

/// The cluster's members, shared by the driver, the transport and the API. Cheap to clone.
///
/// The driver keeps it equal to the replicated membership ([`ClusterRecord`]) as changes
/// apply; names and client URLs are not replicated but learned from each member's hello.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    inner: Arc<RwLock<Members>>,
}

impl Membership {
    /// A membership holding `members`.
    pub fn new(members: Vec<MemberInfo>) -> Self {
        Membership {
            inner: Arc::new(RwLock::new(Members {
                members,
                removed: BTreeSet::new(),
            })),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Members> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every member, in id order.
    pub fn list(&self) -> Vec<MemberInfo> {
        let mut v = self.read().members.clone();
        v.sort_by_key(|m| m.id);
        v
    }

    /// One member by id.
    pub fn get(&self, id: u64) -> Option<MemberInfo> {
        self.read().members.iter().find(|m| m.id == id).cloned()
    }

    /// Whether `id` was removed from the cluster (it may never come back).
    pub fn is_removed(&self, id: u64) -> bool {
        self.read().removed.contains(&id)
    }

    /// Records the name and client URLs a member announced when it connected.
    pub fn set_attributes(&self, id: u64, name: &str, client_urls: &[String]) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = inner.members.iter_mut().find(|m| m.id == id) {
            if !name.is_empty() {
                m.name = name.to_owned();
            }
            if !client_urls.is_empty() {
                m.client_urls = client_urls.to_vec();
            }
        }
    }

    /// The membership as a replicated record: what the first membership change starts
    /// from (every member of a cluster was created with the same members).
    pub fn record(&self) -> ClusterRecord {
        let inner = self.read();
        let mut members: Vec<MemberRecord> = inner
            .members
            .iter()
            .map(|m| MemberRecord {
                id: m.id,
                peer_urls: m.peer_urls.clone(),
                is_learner: m.is_learner,
            })
            .collect();
        members.sort_by_key(|m| m.id);
        ClusterRecord {
            members,
            removed: inner.removed.clone(),
        }
    }

    /// Takes the replicated membership, keeping the names and client URLs already learned.
    pub fn sync(&self, record: &ClusterRecord) {
        if record.is_empty() {
            return;
        }
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let members = record
            .members
            .iter()
            .map(|r| {
                let known = inner.members.iter().find(|m| m.id == r.id);
                MemberInfo {
                    id: r.id,
                    name: known.map(|m| m.name.clone()).unwrap_or_default(),
                    peer_urls: r.peer_urls.clone(),
                    client_urls: known.map(|m| m.client_urls.clone()).unwrap_or_default(),
                    is_learner: r.is_learner,
                }
            })
            .collect();
        inner.members = members;
        inner.removed = record.removed.clone();
    }
}

/// What [`load_or_create`] found or made.
#[derive(Debug, Clone)]
pub struct Identity {
    /// This member's and its cluster's ids.
    pub ids: MemberIds,
    /// Every member of the cluster as first configured (this one included).
    pub members: Vec<MemberInfo>,
    /// Voters of a brand-new log: every member of a new cluster; none for a member joining
    /// an existing cluster (it learns the configuration from the leader).
    pub initial_voters: Vec<u64>,
}

/// An etcd-style member id: hash of the sorted peer URLs and the cluster token.
pub fn compute_member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut h = sha2::Sha256::new();
    h.update(urls.concat().as_bytes());
    h.update(token.as_bytes());
    first_u64(&h.finalize())
}

/// The id of a member added to a running cluster (`member add`): as etcd does, a hash of
/// its peer URLs, the cluster and the time, so ids are never reused; one in use or removed
/// is skipped.
pub fn new_member_id(peer_urls: &[String], cluster_id: u64, membership: &Membership) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut salt = 0u64;
    loop {
        let token = format!("{cluster_id:016x}-{nanos}-{salt}");
        let id = compute_member_id(peer_urls, &token);
        if membership.get(id).is_none() && !membership.is_removed(id) {
            return id;
        }
        salt += 1;
    }
}

/// An etcd-style cluster id: hash of the sorted member ids.
pub fn compute_cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let mut h = sha2::Sha256::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    first_u64(&h.finalize())
}

fn first_u64(digest: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(b).max(1)
}

/// Loads the ids and members from `member/`, or derives them and saves them on first start.
/// A restart ignores `--initial-cluster` (as etcd does): the data directory decides.
pub fn load_or_create(cfg: &StoreConfig) -> Result<Identity> {
    let dir = cfg.data_dir.join("member");
    fs::create_dir_all(&dir).map_err(StoreError::io("creating data directory", &dir))?;
    let path = dir.join("id");
    let members_path = dir.join("members");
    match fs::read_to_string(&path) {
        Ok(text) => {
            let ids = parse(&text).ok_or_else(|| StoreError::Corrupt {
                path: path.clone(),
                reason: "expected 'member <hex>' and 'cluster <hex>' lines".into(),
            })?;
            let joined = text.lines().any(|l| l.trim() == "joined");
            let members = match fs::read_to_string(&members_path) {
                Ok(text) => parse_members(&text).ok_or_else(|| StoreError::Corrupt {
                    path: members_path.clone(),
                    reason: "expected '<hex id>\\t<name>\\t<peer urls>' lines".into(),
                })?,
                // Written by a version that only knew lone members.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    vec![lone_member(cfg, ids.member_id)]
                }
                Err(e) => return Err(StoreError::io("reading members", &members_path)(e)),
            };
            // Only used if the first start died before writing its first snapshot: the same
            // configuration that start would have used.
            let initial_voters = if joined {
                Vec::new()
            } else {
                members
                    .iter()
                    .filter(|m| !m.is_learner)
                    .map(|m| m.id)
                    .collect()
            };
            Ok(Identity {
                ids,
                initial_voters,
                members,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let identity = derive(cfg)?;
            let ids = identity.ids;
            // The members file first: the id file is what marks the directory initialised.
            write_synced(&dir, "members", &format_members(&identity.members))?;
            let mut text = format!(
                "member {:016x}\ncluster {:016x}\n",
                ids.member_id, ids.cluster_id
            );
            if identity.initial_voters.is_empty() {
                text.push_str("joined\n");
            }
            write_synced(&dir, "id", &text)?;
            Ok(identity)
        }
        Err(e) => Err(StoreError::io("reading member id", &path)(e)),
    }
}

fn lone_member(cfg: &StoreConfig, id: u64) -> MemberInfo {
    MemberInfo {
        id,
        name: cfg.name.clone(),
        peer_urls: cfg.initial_advertise_peer_urls.clone(),
        client_urls: cfg.client_urls().to_vec(),
        is_learner: false,
    }
}

/// First start: ids of a lone member, or of every member of `--initial-cluster`.
fn derive(cfg: &StoreConfig) -> Result<Identity> {
    if cfg.initial_cluster.is_empty() {
        let urls = cfg.initial_advertise_peer_urls.join(",");
        let member_id = fnv1a(&[cfg.name.as_bytes(), urls.as_bytes()]);
        let cluster_id = fnv1a(&[b"capstan-cluster", &member_id.to_be_bytes()]);
        return Ok(Identity {
            ids: MemberIds {
                member_id,
                cluster_id,
            },
            members: vec![lone_member(cfg, member_id)],
            initial_voters: vec![member_id],
        });
    }
    let invalid = |why: String| StoreError::InvalidArgument(why);
    let mut members: Vec<MemberInfo> = Vec::new();
    for m in &cfg.initial_cluster {
        let id = compute_member_id(&m.peer_urls, &cfg.initial_cluster_token);
        if let Some(other) = members.iter().find(|o| o.id == id) {
            return Err(invalid(format!(
                "--initial-cluster: members {:?} and {:?} have the same peer URLs",
                other.name, m.name
            )));
        }
        members.push(MemberInfo {
            id,
            name: m.name.clone(),
            peer_urls: m.peer_urls.clone(),
            client_urls: Vec::new(),
            is_learner: false,
        });
    }
    if cfg.initial_cluster_state == ClusterState::Existing {
        return join(cfg);
    }
    let me = members
        .iter_mut()
        .find(|m| m.name == cfg.name)
        .ok_or_else(|| {
            invalid(format!(
                "couldn't find local name {:?} in the initial cluster configuration",
                cfg.name
            ))
        })?;
    let mut mine = me.peer_urls.clone();
    let mut advertised = cfg.initial_advertise_peer_urls.clone();
    mine.sort();
    advertised.sort();
    if mine != advertised {
        return Err(invalid(format!(
            "--initial-cluster has {}={} but missing from --initial-advertise-peer-urls={} \
             (the URLs must be the same)",
            cfg.name,
            mine.join(","),
            advertised.join(",")
        )));
    }
    me.client_urls = cfg.client_urls().to_vec();
    let member_id = me.id;
    let all: Vec<u64> = members.iter().map(|m| m.id).collect();
    let cluster_id = compute_cluster_id(&all);
    Ok(Identity {
        ids: MemberIds {
            member_id,
            cluster_id,
        },
        members,
        initial_voters: all,
    })
}

/// First start of a member joining an existing cluster (`--initial-cluster-state
/// existing`, after `member add`): asks the other members of `--initial-cluster` for the
/// cluster's id and members (as etcd's joiner does) and finds itself among them by its peer
/// URLs. Its log starts empty, with no configuration: the leader sends it a snapshot.
fn join(cfg: &StoreConfig) -> Result<Identity> {
    let others: Vec<String> = cfg
        .initial_cluster
        .iter()
        .filter(|m| m.name != cfg.name)
        .flat_map(|m| m.peer_urls.iter().cloned())
        .collect();
    let tls = crate::transport::PeerTlsConfig::load(&cfg.peer_tls)?;
    let sorted = |urls: &[String]| {
        let mut v = urls.to_vec();
        v.sort();
        v
    };
    let mine = sorted(&cfg.initial_advertise_peer_urls);
    let find = |info: &crate::transport::wire::ClusterInfo| {
        info.members
            .iter()
            .find(|m| sorted(&m.peer_urls) == mine)
            .map(|m| m.id)
    };
    let info = crate::transport::query::fetch_cluster(&others, tls.as_ref(), &cfg.name, |info| {
        find(info).map(|_| ()).ok_or_else(|| {
            format!(
                "error validating peerURLs: the cluster has no member with peer URLs {} \
                 (add it with `member add` first)",
                mine.join(",")
            )
        })
    })?;
    let member_id = find(&info).ok_or_else(|| {
        StoreError::InvalidArgument("the cluster's answer lost this member".into())
    })?;
    let members = info
        .members
        .iter()
        .map(|m| MemberInfo {
            id: m.id,
            name: if m.id == member_id {
                cfg.name.clone()
            } else {
                m.name.clone()
            },
            peer_urls: m.peer_urls.clone(),
            client_urls: if m.id == member_id {
                cfg.client_urls().to_vec()
            } else {
                Vec::new()
            },
            is_learner: m.is_learner,
        })
        .collect();
    tracing::info!(
        member = format_args!("{member_id:016x}"),
        cluster = format_args!("{:016x}", info.cluster_id),
        "joining an existing cluster"
    );
    Ok(Identity {
        ids: MemberIds {
            member_id,
            cluster_id: info.cluster_id,
        },
        members,
        initial_voters: Vec::new(),
    })
}

fn write_synced(dir: &Path, name: &str, text: &str) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    fs::write(&tmp, text).map_err(StoreError::io("writing member identity", &tmp))?;
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(StoreError::io("syncing member identity", &tmp))?;
    fs::rename(&tmp, &path).map_err(StoreError::io("writing member identity", &path))?;
    crate::log::wal::sync_dir(dir)
}

fn format_members(members: &[MemberInfo]) -> String {
    members
        .iter()
        .map(|m| {
            let learner = if m.is_learner { "\tlearner" } else { "" };
            format!(
                "{:016x}\t{}\t{}{learner}\n",
                m.id,
                m.name,
                m.peer_urls.join(",")
            )
        })
        .collect()
}

fn parse_members(text: &str) -> Option<Vec<MemberInfo>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.split('\t');
            let id = u64::from_str_radix(parts.next()?, 16).ok()?;
            let name = parts.next()?.to_owned();
            let peer_urls = parts
                .next()?
                .split(',')
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
            let is_learner = parts.next() == Some("learner");
            Some(MemberInfo {
                id,
                name,
                peer_urls,
                client_urls: Vec::new(),
                is_learner,
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_initial_cluster;

    fn cfg(dir: &Path, name: &str) -> StoreConfig {
        let mut c = StoreConfig::new(name, dir);
        c.initial_cluster =
            parse_initial_cluster("a=http://127.0.0.1:1,b=http://127.0.0.1:2,c=http://127.0.0.1:3")
                .unwrap();
        c.initial_advertise_peer_urls = c
            .initial_cluster
            .iter()
            .find(|m| m.name == name)
            .unwrap()
            .peer_urls
            .clone();
        c
    }

    #[test]
    fn every_member_derives_the_same_ids_and_restart_keeps_them() {
        let d = tempfile::tempdir().unwrap();
        let a = load_or_create(&cfg(&d.path().join("a"), "a")).unwrap();
        let b = load_or_create(&cfg(&d.path().join("b"), "b")).unwrap();
        assert_eq!(a.ids.cluster_id, b.ids.cluster_id);
        assert_ne!(a.ids.member_id, b.ids.member_id);
        assert_eq!(a.initial_voters.len(), 3);
        assert_eq!(a.members, {
            let mut m = b.members;
            for x in &mut m {
                x.client_urls = a
                    .members
                    .iter()
                    .find(|y| y.id == x.id)
                    .unwrap()
                    .client_urls
                    .clone();
            }
            m
        });
        // A restart with a different --initial-cluster keeps what is on disk.
        let mut other = cfg(&d.path().join("a"), "a");
        other.initial_cluster_token = "different".into();
        let again = load_or_create(&other).unwrap();
        assert_eq!(again.ids, a.ids);
        assert_eq!(again.members.len(), 3);
        // Another token gives other ids.
        let mut fresh = cfg(&d.path().join("z"), "a");
        fresh.initial_cluster_token = "different".into();
        assert_ne!(
            load_or_create(&fresh).unwrap().ids.member_id,
            a.ids.member_id
        );
    }

    #[test]
    fn a_name_missing_from_the_initial_cluster_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(d.path(), "a");
        c.name = "q".into();
        let err = load_or_create(&c).unwrap_err().to_string();
        assert!(err.contains("couldn't find local name"), "{err}");
    }
}
