//! What the API server stores through: the embedded store member, or a remote etcd v3
//! cluster mirrored locally ([`crate::remote`]). Both offer the same four things — a read
//! view of the state machine, a linearizable-read barrier, writes, and a revision feed — so
//! the API server's storage layer does not know which it has.

use std::sync::RwLockReadGuard;

use tokio::sync::watch;

use crate::command::{Applied, Op};
use crate::error::Result;
use crate::mvcc::Mvcc;
use crate::node::Node;
use crate::remote::RemoteStore;

/// The API server's store.
#[derive(Clone)]
pub enum Backend {
    /// The member running in this process (`capstan server`).
    Local(Node),
    /// A remote cluster (`capstan apiserver --etcd-servers`).
    Remote(RemoteStore),
}

impl From<Node> for Backend {
    fn from(node: Node) -> Self {
        Backend::Local(node)
    }
}

impl Backend {
    /// Read access to the (local or mirrored) state machine; hold it briefly.
    pub fn mvcc(&self) -> RwLockReadGuard<'_, Mvcc> {
        match self {
            Backend::Local(n) => n.mvcc(),
            Backend::Remote(r) => r.mvcc(),
        }
    }

    /// Waits until reads reflect every write committed before the call.
    pub async fn read_index(&self) -> Result<()> {
        match self {
            Backend::Local(n) => n.read_index().await,
            Backend::Remote(r) => r.read_index().await,
        }
    }

    /// Commits a write; returns once reads see it.
    pub async fn propose(&self, op: Op) -> Result<Applied> {
        match self {
            Backend::Local(n) => n.propose(op).await,
            Backend::Remote(r) => r.propose(op).await,
        }
    }

    /// A receiver that changes whenever the revision moves.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        match self {
            Backend::Local(n) => n.subscribe(),
            Backend::Remote(r) => r.subscribe(),
        }
    }

    /// The member running in this process, if the store is embedded (for its Raft status).
    pub fn local(&self) -> Option<&Node> {
        match self {
            Backend::Local(n) => Some(n),
            Backend::Remote(_) => None,
        }
    }
}
