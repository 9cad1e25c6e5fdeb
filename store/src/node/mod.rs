//! The Raft member: [`Node`] is the cloneable handle the API uses; the driver thread
//! (`driver.rs`) is the only code that touches `raft::RawNode`.
//!
//! A write is [`Node::propose`]d, persisted and committed through Raft, applied to the
//! [`Mvcc`] state machine by the driver, and only then acknowledged. A linearizable read
//! first passes [`Node::read_index`] (Raft's ReadIndex: the leader confirms it is still the
//! leader and the driver waits until the state machine has applied up to that index).

mod driver;
mod logger;
pub mod member;
pub mod transport;

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::command::{Applied, Op};
use crate::config::StoreConfig;
use crate::error::{Result, StoreError};
use crate::lease::Lessor;
use crate::log::LogStore;
use crate::mvcc::{MemberChange, Mvcc};
pub use member::{MemberIds, MemberInfo, Membership};

/// A point-in-time view of this member's Raft state, for Status and metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeStatus {
    /// Id of the leader this member knows of (0 = none).
    pub leader: u64,
    /// Current Raft term.
    pub term: u64,
    /// Index of the last entry in the log.
    pub last_index: u64,
    /// Commit index.
    pub commit: u64,
    /// Index of the last entry applied to the state machine.
    pub applied: u64,
    /// Bytes of WAL and snapshots on disk.
    pub disk_bytes: u64,
}

/// Requests from handles to the driver thread.
pub(crate) enum Request {
    Propose {
        op: Op,
        reply: oneshot::Sender<Result<Applied>>,
    },
    ReadIndex {
        reply: oneshot::Sender<Result<()>>,
    },
    /// Raft messages from a peer (one received batch).
    Step(Vec<raft::eraftpb::Message>),
    /// The transport could not deliver to this peer.
    Unreachable(u64),
    /// Outcome of streaming a snapshot to a peer.
    SnapshotStatus {
        to: u64,
        ok: bool,
    },
    /// A membership change to propose as a Raft conf change (add, promote, remove).
    ChangeMembers {
        change: MemberChange,
        reply: oneshot::Sender<Result<()>>,
    },
    /// A peer said this member was removed from the cluster: stop.
    Removed,
    /// Stop; a leader first hands leadership to a caught-up follower.
    Stop,
}

/// Handle to the running member. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    tx: mpsc::Sender<Request>,
    mvcc: Arc<RwLock<Mvcc>>,
    revision: watch::Receiver<i64>,
    status: Arc<Mutex<NodeStatus>>,
    lessor: Arc<Lessor>,
    ids: MemberIds,
    membership: Membership,
    request_timeout: Duration,
    max_request_bytes: usize,
}

/// The running driver thread; join it to learn whether it stopped cleanly.
pub struct DriverHandle {
    thread: std::thread::JoinHandle<Result<()>>,
}

impl DriverHandle {
    /// Waits for the driver to stop and returns its outcome (an error if it died on one).
    pub fn join(self) -> Result<()> {
        self.thread.join().unwrap_or(Err(StoreError::Stopped))
    }

    /// Whether the driver has stopped.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
}

impl Node {
    /// Opens the member's data (replaying the WAL onto the newest snapshot) and starts the
    /// driver thread. Fails with a clear error when the data directory is unusable.
    ///
    /// A member of a multi-member cluster (or one given `--listen-peer-urls`) also starts the
    /// peer transport, which needs a tokio runtime: call this from within one.
    pub fn start(cfg: &StoreConfig) -> Result<(Node, DriverHandle)> {
        member::probe_writable(&cfg.data_dir)?;
        let identity = member::load_or_create(cfg)?;
        let ids = identity.ids;
        let membership = Membership::new(identity.members.clone());
        let started = std::time::Instant::now();
        let opened = LogStore::open(
            &cfg.wal_dir(),
            &cfg.snap_dir(),
            cfg.wal_segment_bytes,
            &identity.initial_voters,
        )?;
        let mvcc = if opened.snapshot.data.is_empty() {
            Mvcc::default()
        } else {
            Mvcc::decode(&opened.snapshot.data)?
        };
        tracing::info!(
            member = format_args!("{:016x}", ids.member_id),
            snapshot_index = opened.snapshot.get_metadata().index,
            revision = mvcc.current_revision(),
            torn_bytes = opened.truncated_bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded snapshot and WAL"
        );
        // The snapshot's membership, if a membership change ever happened (the log replay
        // then applies the changes after it).
        membership.sync(mvcc.cluster());
        let (rev_tx, revision) = watch::channel(mvcc.current_revision());
        let mvcc = Arc::new(RwLock::new(mvcc));
        let status = Arc::new(Mutex::new(NodeStatus::default()));
        let (tx, rx) = mpsc::channel();
        let transport: Box<dyn transport::Transport> =
            if identity.members.len() > 1 || !cfg.listen_peer_urls.is_empty() {
                let listen = if cfg.listen_peer_urls.is_empty() {
                    membership
                        .get(ids.member_id)
                        .map(|m| m.peer_urls)
                        .unwrap_or_default()
                } else {
                    cfg.listen_peer_urls.clone()
                };
                Box::new(crate::transport::PeerTransport::start(
                    ids,
                    cfg.name.clone(),
                    cfg.client_urls().to_vec(),
                    &listen,
                    membership.clone(),
                    crate::transport::PeerTlsConfig::load(&cfg.peer_tls)?,
                    tx.clone(),
                )?)
            } else {
                Box::new(transport::NoPeers)
            };
        let driver = driver::Driver::new(
            cfg,
            ids,
            opened,
            rx,
            Arc::clone(&mvcc),
            rev_tx,
            Arc::clone(&status),
            transport,
            membership.clone(),
        )?;
        let thread = std::thread::Builder::new()
            .name("raft-driver".into())
            .spawn(move || driver.run())
            .map_err(StoreError::io("spawning raft driver", &cfg.data_dir))?;
        let node = Node {
            tx,
            mvcc,
            revision,
            status,
            lessor: Arc::new(Lessor::default()),
            ids,
            membership,
            request_timeout: cfg.request_timeout,
            max_request_bytes: cfg.max_request_bytes,
        };
        Ok((node, DriverHandle { thread }))
    }

    /// Proposes a write and waits until it is committed and applied.
    pub async fn propose(&self, op: Op) -> Result<Applied> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Propose { op, reply })
            .map_err(|_| StoreError::Stopped)?;
        match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::Stopped),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Proposes a membership change (a Raft conf change) and waits until it is applied.
    /// Checks that need the leader's view (is the learner caught up, would the change leave
    /// a quorum of started members) are made when this member leads.
    pub async fn change_members(&self, change: MemberChange) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::ChangeMembers { change, reply })
            .map_err(|_| StoreError::Stopped)?;
        match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::Stopped),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Waits until this member's state machine reflects every write committed before the
    /// call (Raft ReadIndex). Reads after it are linearizable.
    pub async fn read_index(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::ReadIndex { reply })
            .map_err(|_| StoreError::Stopped)?;
        match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::Stopped),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Read access to the state machine. Hold it briefly: the driver waits for it to apply.
    pub fn mvcc(&self) -> RwLockReadGuard<'_, Mvcc> {
        self.mvcc.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver that changes whenever the store's revision moves.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.revision.clone()
    }

    /// This member's Raft state.
    pub fn status(&self) -> NodeStatus {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Member and cluster ids.
    pub fn ids(&self) -> MemberIds {
        self.ids
    }

    /// The cluster's members.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The lessor (lease deadlines on this member).
    pub fn lessor(&self) -> &Lessor {
        &self.lessor
    }

    /// Largest accepted encoded request.
    pub fn max_request_bytes(&self) -> usize {
        self.max_request_bytes
    }

    /// Asks the driver to stop. A leader of a multi-member cluster first transfers
    /// leadership to its most up-to-date follower (for at most an election timeout), so the
    /// cluster does not wait an election timeout for a new leader.
    pub fn stop(&self) {
        let _ = self.tx.send(Request::Stop);
    }
}
