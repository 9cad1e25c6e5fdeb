//! The seam between the Raft driver and the network: where outgoing Raft messages go.
//!
//! Contract: `send` never blocks the driver. A transport that cannot deliver a message drops
//! it (and may call `report_unreachable` on the next cycle); Raft retries on its own.

use raft::eraftpb::Message;

/// Delivers Raft messages to peers.
pub trait Transport: Send {
    /// Queues messages for their recipients without blocking.
    fn send(&mut self, msgs: Vec<Message>);

    /// A member was added: make this member known to it (name and client URLs for its
    /// `member list`), in the background.
    fn introduce(&mut self, _id: u64) {}
}

/// The transport of a single-member cluster: there is nobody to talk to.
#[derive(Debug, Default)]
pub struct NoPeers;

impl Transport for NoPeers {
    fn send(&mut self, msgs: Vec<Message>) {
        if !msgs.is_empty() {
            tracing::debug!(count = msgs.len(), "dropping raft messages: no peers");
        }
    }
}
