//! The Raft driver: one thread that owns `RawNode` and runs raft-rs's documented Ready loop.
//!
//! Each cycle:
//! 1. take every queued request (proposals, read barriers) — many proposals per cycle is
//!    what lets one fsync cover many writes (group commit);
//! 2. tick the Raft clock when a heartbeat interval has passed;
//! 3. handle the `Ready`, in the order raft-rs's crate docs give:
//!    send `messages` (a leader may send before its own write is durable) → install a
//!    received snapshot → apply `committed_entries` → append `entries` to the WAL → record the
//!    hard state → **fsync once** (skipped when `must_sync` says only the commit index moved:
//!    then the record is written, not synced) → send `persisted_messages` → `advance` → record the new
//!    commit index, send the `LightReady` messages and apply its committed entries →
//!    `advance_apply`;
//! 4. answer proposals whose entries were applied, and reads whose index was reached;
//! 5. take a state-machine snapshot every `snapshot_count` applied entries and trim the log.
//!
//! Architecture invariant: nothing is acknowledged before the entry carrying it is durable
//! and applied; the commit index never runs ahead of the durable log (raft-rs only commits a
//! single member's entries after `advance` confirms they were persisted).

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message as _;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType, Snapshot, SnapshotMetadata,
};
use raft::{RawNode, ReadState, StateRole};
use tokio::sync::{oneshot, watch};

use super::transport::Transport;
use super::{MemberIds, Membership, NodeStatus, Request};
use crate::command::{Applied, ConfChangeContext, Op, RaftCommand};
use crate::config::StoreConfig;
use crate::error::{Result, StoreError};
use crate::log::LogStore;
use crate::log::Opened;
use crate::mvcc::{MemberChange, MemberRecord, Mvcc};

/// Requests queued at most this many per cycle, so ticks are never starved.
const MAX_BATCH: usize = 16_384;

type ProposalReply = oneshot::Sender<Result<Applied>>;
type ReadReply = oneshot::Sender<Result<()>>;

pub(super) struct Driver {
    raw: RawNode<LogStore>,
    rx: mpsc::Receiver<Request>,
    mvcc: Arc<RwLock<Mvcc>>,
    rev_tx: watch::Sender<i64>,
    status: Arc<Mutex<NodeStatus>>,
    transport: Box<dyn Transport>,
    ids: MemberIds,
    tick: Duration,
    no_leader_wait: Duration,
    snapshot_count: u64,
    catch_up_entries: u64,
    max_request_bytes: usize,
    /// Proposals of this member waiting for their entry to be applied, by proposal id.
    pending: HashMap<u64, ProposalReply>,
    next_id: u64,
    /// Work that arrived while there was no leader, with its arrival time.
    waiting_proposals: Vec<(Instant, Op, ProposalReply)>,
    /// Read barriers not yet sent to Raft.
    queued_reads: Vec<(Instant, ReadReply)>,
    /// Read barriers sent to Raft, by request context, with the time they were sent.
    /// raft-rs drops a ReadIndex it cannot serve (e.g. during an election), so reads that
    /// see no answer for a few heartbeats are sent again.
    sent_reads: HashMap<u64, (Instant, Vec<(Instant, ReadReply)>)>,
    /// Read barriers whose index is known, waiting for apply to reach it.
    ready_reads: Vec<(u64, Vec<ReadReply>)>,
    next_read: u64,
    applied: u64,
    last_snapshot: u64,
    /// Completion of the snapshot being written by the helper thread, if any.
    snapshot_in_flight: Option<mpsc::Receiver<Result<(SnapshotMetadata, Duration)>>>,
    /// Raft election timeout (bounds a leadership transfer on shutdown).
    election_timeout: Duration,
    /// The leader the last soft state named.
    known_leader: u64,
    /// Set when asked to stop while leading: stop once leadership moved or at this time.
    stopping: Option<Instant>,
    /// The cluster's members as the API and the transport see them.
    membership: Membership,
    /// Membership changes of this member waiting to be applied, by proposal id.
    pending_conf: HashMap<u64, ReadReply>,
    /// When each peer was last heard from (a leader's view of which members are started).
    last_heard: HashMap<u64, Instant>,
    /// Take a snapshot at the next chance: a member was added, and the snapshot it will be
    /// sent must include it.
    force_snapshot: bool,
    /// This member was removed from the cluster: stop.
    removed: bool,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        cfg: &StoreConfig,
        ids: MemberIds,
        opened: Opened,
        rx: mpsc::Receiver<Request>,
        mvcc: Arc<RwLock<Mvcc>>,
        rev_tx: watch::Sender<i64>,
        status: Arc<Mutex<NodeStatus>>,
        transport: Box<dyn Transport>,
        membership: Membership,
    ) -> Result<Driver> {
        let snapshot_index = opened.snapshot.get_metadata().index;
        let heartbeat_ms = cfg.heartbeat_interval.as_millis().max(1);
        let election_tick = usize::try_from(cfg.election_timeout.as_millis() / heartbeat_ms)
            .unwrap_or(10)
            .max(2);
        let config = raft::Config {
            id: ids.member_id,
            election_tick,
            heartbeat_tick: 1,
            applied: snapshot_index,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            read_only_option: raft::ReadOnlyOption::Safe,
            ..Default::default()
        };
        config.validate()?;
        let single = opened.store.initial_state_voters() == [ids.member_id];
        let mut raw = RawNode::new(&config, opened.store, &super::logger::raft_logger())?;
        if single {
            // A one-member cluster need not wait an election timeout to lead again.
            raw.campaign()?;
        }
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        Ok(Driver {
            raw,
            rx,
            mvcc,
            rev_tx,
            status,
            transport,
            ids,
            tick: cfg.heartbeat_interval,
            no_leader_wait: cfg.election_timeout * 3,
            snapshot_count: cfg.snapshot_count.max(1),
            catch_up_entries: cfg.catch_up_entries,
            max_request_bytes: cfg.max_request_bytes,
            pending: HashMap::new(),
            // Ids from a clock so a restarted member never reuses the ids of entries that
            // are still in its log (as etcd's id generator does).
            next_id: u64::try_from(millis).unwrap_or(1) << 22,
            waiting_proposals: Vec::new(),
            queued_reads: Vec::new(),
            sent_reads: HashMap::new(),
            ready_reads: Vec::new(),
            next_read: 1,
            applied: snapshot_index,
            last_snapshot: snapshot_index,
            snapshot_in_flight: None,
            election_timeout: cfg.election_timeout,
            stopping: None,
            known_leader: raft::INVALID_ID,
            membership,
            pending_conf: HashMap::new(),
            last_heard: HashMap::new(),
            force_snapshot: false,
            removed: false,
        })
    }

    /// Runs until asked to stop or until a fatal storage error (returned).
    pub(super) fn run(mut self) -> Result<()> {
        let result = self.run_loop();
        if let Err(err) = &result {
            tracing::error!(%err, "raft driver stopped on a fatal error");
        }
        self.fail_all(|| StoreError::Stopped);
        result
    }

    fn run_loop(&mut self) -> Result<()> {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(req) => {
                    if !self.handle(req)? {
                        return Ok(());
                    }
                    for _ in 0..MAX_BATCH {
                        match self.rx.try_recv() {
                            Ok(req) => {
                                if !self.handle(req)? {
                                    return Ok(());
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if Instant::now() >= next_tick {
                self.raw.tick();
                next_tick = Instant::now() + self.tick;
                self.requeue_stale_reads();
                self.expire_waiting();
                self.pending.retain(|_, tx| !tx.is_closed());
                self.pending_conf.retain(|_, tx| !tx.is_closed());
            }
            self.retry_waiting()?;
            self.send_reads();
            self.on_ready()?;
            self.maybe_snapshot()?;
            if self.removed {
                tracing::error!(
                    member = format_args!("{:016x}", self.ids.member_id),
                    "the member has been permanently removed from the cluster; stopping"
                );
                return Err(StoreError::Removed);
            }
            if let Some(deadline) = self.stopping
                && (self.raw.raft.state != StateRole::Leader || Instant::now() >= deadline)
            {
                tracing::info!(
                    leader = format_args!("{:016x}", self.raw.raft.leader_id),
                    "stopping after leadership transfer"
                );
                return Ok(());
            }
        }
    }

    /// On a graceful stop, a leader with followers hands leadership to the follower whose
    /// log matches its own furthest (etcd's `TransferLeadership` on shutdown). Returns
    /// whether a transfer was started (then the driver keeps running until it completes).
    fn start_transfer(&mut self) -> bool {
        if self.stopping.is_some() || self.raw.raft.state != StateRole::Leader {
            return false;
        }
        let me = self.ids.member_id;
        let voters = self.raw.store().initial_state_voters();
        let target = self
            .raw
            .raft
            .prs()
            .iter()
            .filter(|(id, pr)| **id != me && voters.contains(id) && pr.recent_active)
            .max_by_key(|(_, pr)| pr.matched)
            .map(|(id, _)| *id);
        let Some(target) = target else {
            return false;
        };
        tracing::info!(
            transferee = format_args!("{target:016x}"),
            "transferring leadership before stopping"
        );
        self.raw.transfer_leader(target);
        self.stopping = Some(Instant::now() + self.election_timeout);
        true
    }

    fn has_leader(&self) -> bool {
        self.raw.raft.leader_id != raft::INVALID_ID
    }

    /// Handles one request; `false` means stop.
    fn handle(&mut self, req: Request) -> Result<bool> {
        match req {
            Request::Propose { op, reply } => {
                if self.has_leader() {
                    self.propose(op, reply);
                } else {
                    self.waiting_proposals.push((Instant::now(), op, reply));
                }
            }
            Request::ReadIndex { reply } => self.queued_reads.push((Instant::now(), reply)),
            Request::Step(msgs) => {
                if let Some(m) = msgs.first() {
                    self.last_heard.insert(m.from, Instant::now());
                }
                for m in msgs {
                    let (from, kind) = (m.from, m.get_msg_type());
                    if let Err(err) = self.raw.step(m) {
                        tracing::debug!(
                            from = format_args!("{from:016x}"),
                            ?kind,
                            %err,
                            "raft message not stepped"
                        );
                    }
                }
            }
            Request::Unreachable(id) => self.raw.report_unreachable(id),
            Request::SnapshotStatus { to, ok } => {
                let status = if ok {
                    raft::SnapshotStatus::Finish
                } else {
                    raft::SnapshotStatus::Failure
                };
                self.raw.report_snapshot(to, status);
            }
            Request::ChangeMembers { change, reply } => self.propose_member_change(&change, reply),
            Request::Removed => self.removed = true,
            Request::Stop => return Ok(self.start_transfer()),
        }
        Ok(true)
    }

    /// Whether a peer was heard from within an election timeout (the leader hears from
    /// every started member at least every heartbeat).
    fn started(&self, id: u64) -> bool {
        id == self.ids.member_id
            || self
                .last_heard
                .get(&id)
                .is_some_and(|t| t.elapsed() <= self.election_timeout)
    }

    /// etcd's strict reconfiguration checks, as far as this member can judge them: only a
    /// leader knows whom it hears from and how far each follower's log matches its own.
    fn check_member_change(&self, change: &MemberChange) -> Result<()> {
        if self.raw.raft.state != StateRole::Leader {
            return Ok(());
        }
        let voters: Vec<u64> = self.raw.store().initial_state_voters();
        let quorum = |n: usize| n / 2 + 1;
        match change {
            MemberChange::AddVoter(_) => {
                let started = voters.iter().filter(|id| self.started(**id)).count();
                if started < quorum(voters.len() + 1) {
                    return Err(StoreError::NotEnoughStarted);
                }
            }
            MemberChange::Remove(id) if voters.contains(id) => {
                let left: Vec<u64> = voters.iter().copied().filter(|v| v != id).collect();
                let started = left.iter().filter(|v| self.started(**v)).count();
                if started < quorum(left.len()) {
                    return Err(StoreError::NotEnoughStarted);
                }
            }
            MemberChange::Promote(id) => {
                let prs = self.raw.raft.prs();
                let leader = prs.get(self.ids.member_id).map_or(0, |p| p.matched);
                let learner = prs.get(*id).map_or(0, |p| p.matched);
                // etcd's readiness: the learner's log matches at least 90% of the leader's.
                if leader == 0 || learner.saturating_mul(10) < leader.saturating_mul(9) {
                    return Err(StoreError::LearnerNotReady);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Proposes a membership change as a Raft conf change; the reply comes when it applies.
    fn propose_member_change(&mut self, change: &MemberChange, reply: ReadReply) {
        if !self.has_leader() {
            let _ = reply.send(Err(StoreError::NoLeader));
            return;
        }
        if let Err(e) = self.check_member_change(change) {
            let _ = reply.send(Err(e));
            return;
        }
        self.next_id += 1;
        let id = self.next_id;
        let mut ctx = ConfChangeContext {
            id,
            origin: self.ids.member_id,
            peer_urls: Vec::new(),
        };
        let mut cc = ConfChange::default();
        match change {
            MemberChange::AddVoter(m) | MemberChange::AddLearner(m) => {
                cc.set_change_type(if matches!(change, MemberChange::AddLearner(_)) {
                    ConfChangeType::AddLearnerNode
                } else {
                    ConfChangeType::AddNode
                });
                cc.node_id = m.id;
                ctx.peer_urls = m.peer_urls.clone();
            }
            MemberChange::Promote(member) => {
                cc.set_change_type(ConfChangeType::AddNode);
                cc.node_id = *member;
            }
            MemberChange::Remove(member) => {
                cc.set_change_type(ConfChangeType::RemoveNode);
                cc.node_id = *member;
            }
            MemberChange::Update(..) => {
                let _ = reply.send(Err(StoreError::InvalidArgument(
                    "a member update is an ordinary proposal".into(),
                )));
                return;
            }
        }
        cc.context = ctx.encode_to_vec().into();
        match self.raw.propose_conf_change(Vec::new(), cc) {
            Ok(()) => {
                self.pending_conf.insert(id, reply);
            }
            Err(raft::Error::ProposalDropped) => {
                let _ = reply.send(Err(StoreError::NoLeader));
            }
            Err(e) => {
                let _ = reply.send(Err(StoreError::Raft(e)));
            }
        }
    }

    /// Applies a committed conf change: Raft's configuration first (its verdict is the same
    /// on every member), then the replicated membership. A member that sees itself removed
    /// stops after this cycle.
    fn apply_member_change(&mut self, state: &mut Mvcc, cc: &ConfChange) -> Result<()> {
        let ctx = ConfChangeContext::decode(cc.context.as_ref()).unwrap_or_default();
        if state.cluster().is_empty() {
            *state.cluster_mut() = self.membership.record();
        }
        let id = cc.node_id;
        let record = MemberRecord {
            id,
            peer_urls: ctx.peer_urls,
            is_learner: false,
        };
        let is_learner = state
            .cluster()
            .members
            .iter()
            .any(|m| m.id == id && m.is_learner);
        let change = match cc.get_change_type() {
            ConfChangeType::AddNode if is_learner => MemberChange::Promote(id),
            ConfChangeType::AddNode => MemberChange::AddVoter(record),
            ConfChangeType::AddLearnerNode => MemberChange::AddLearner(record),
            ConfChangeType::RemoveNode => MemberChange::Remove(id),
        };
        if state.cluster().removed.contains(&id) {
            tracing::warn!(
                member = format_args!("{id:016x}"),
                "conf change for a removed member ignored"
            );
            return Err(StoreError::MemberNotFound);
        }
        let cs = self.raw.apply_conf_change(cc).inspect_err(|err| {
            tracing::warn!(%err, member = format_args!("{id:016x}"), "conf change refused by raft");
        })?;
        self.raw.mut_store().set_conf_state(cs);
        state.cluster_mut().apply(&change);
        self.membership.sync(state.cluster());
        tracing::info!(
            member = format_args!("{id:016x}"),
            ?change,
            voters = ?self.raw.store().initial_state_voters(),
            "membership changed"
        );
        match change {
            MemberChange::AddVoter(_) | MemberChange::AddLearner(_) => {
                self.force_snapshot = true;
                self.transport.introduce(id);
            }
            MemberChange::Remove(id) if id == self.ids.member_id => self.removed = true,
            _ => {}
        }
        Ok(())
    }

    fn propose(&mut self, op: Op, reply: ProposalReply) {
        self.next_id += 1;
        let id = self.next_id;
        let cmd = RaftCommand {
            id,
            origin: self.ids.member_id,
            op: Some(op),
        };
        let data = cmd.encode_to_vec();
        if data.len() > self.max_request_bytes + 1024 {
            let _ = reply.send(Err(StoreError::RequestTooLarge));
            return;
        }
        match self.raw.propose(Vec::new(), data) {
            Ok(()) => {
                self.pending.insert(id, reply);
            }
            Err(raft::Error::ProposalDropped) => {
                let _ = reply.send(Err(StoreError::NoLeader));
            }
            Err(e) => {
                let _ = reply.send(Err(StoreError::Raft(e)));
            }
        }
    }

    fn retry_waiting(&mut self) -> Result<()> {
        if self.has_leader() && !self.waiting_proposals.is_empty() {
            for (_, op, reply) in std::mem::take(&mut self.waiting_proposals) {
                self.propose(op, reply);
            }
        }
        Ok(())
    }

    /// Fails work that has waited for a leader longer than a few election timeouts.
    fn expire_waiting(&mut self) {
        let limit = self.no_leader_wait;
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting_proposals)
            .into_iter()
            .partition(|(t, _, _)| t.elapsed() > limit);
        self.waiting_proposals = keep;
        crate::metrics::proposals_failed(old.len() as u64);
        for (_, _, reply) in old {
            let _ = reply.send(Err(StoreError::NoLeader));
        }
        if !self.has_leader() {
            let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.queued_reads)
                .into_iter()
                .partition(|(t, _)| t.elapsed() > limit);
            self.queued_reads = keep;
            for (_, reply) in old {
                let _ = reply.send(Err(StoreError::NoLeader));
            }
        }
    }

    /// Sends every queued read barrier to Raft as one ReadIndex request.
    ///
    /// A leader answers ReadIndex only once it has committed an entry in its own term
    /// (raft-rs silently drops it before that), so until then reads stay queued.
    fn send_reads(&mut self) {
        if self.queued_reads.is_empty() || !self.has_leader() {
            return;
        }
        if self.raw.raft.state == StateRole::Leader && !self.raw.raft.commit_to_current_term() {
            return;
        }
        let ctx = self.next_read;
        self.next_read += 1;
        let replies = std::mem::take(&mut self.queued_reads);
        self.sent_reads.insert(ctx, (Instant::now(), replies));
        self.raw.read_index(ctx.to_le_bytes().to_vec());
    }

    /// Puts reads that got no answer in time back in the queue (they are sent again).
    fn requeue_stale_reads(&mut self) {
        let limit = self.tick * 5;
        let stale: Vec<u64> = self
            .sent_reads
            .iter()
            .filter(|(_, (at, _))| at.elapsed() > limit)
            .map(|(ctx, _)| *ctx)
            .collect();
        for ctx in stale {
            if let Some((_, replies)) = self.sent_reads.remove(&ctx) {
                self.queued_reads.extend(replies);
            }
        }
    }

    fn on_read_states(&mut self, states: Vec<ReadState>) {
        for rs in states {
            let ctx = rs
                .request_ctx
                .as_slice()
                .try_into()
                .map(u64::from_le_bytes)
                .unwrap_or(0);
            if let Some((_, replies)) = self.sent_reads.remove(&ctx) {
                let replies = replies.into_iter().map(|(_, r)| r).collect();
                self.ready_reads.push((rs.index, replies));
            }
        }
    }

    fn answer_reads(&mut self) {
        let applied = self.applied;
        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ready_reads)
            .into_iter()
            .partition(|(idx, _)| *idx <= applied);
        self.ready_reads = keep;
        for (_, replies) in done {
            for r in replies {
                let _ = r.send(Ok(()));
            }
        }
    }

    /// One Ready cycle, in raft-rs's documented order (see the module docs).
    fn on_ready(&mut self) -> Result<()> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        if !ready.messages().is_empty() {
            self.transport.send(ready.take_messages());
        }
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            self.install_snapshot(&snap)?;
        }
        let committed = ready.take_committed_entries();
        self.apply_entries(committed)?;
        if !ready.entries().is_empty() {
            self.raw.mut_store().append(ready.entries())?;
        }
        if let Some(hs) = ready.hs() {
            let hs = hs.clone();
            self.raw.mut_store().set_hard_state(&hs)?;
        }
        if ready.must_sync() {
            self.raw.mut_store().sync()?;
        } else {
            // Only the commit index moved (or nothing was recorded): no fsync, as etcd.
            self.raw.mut_store().write_unsynced()?;
        }
        if !ready.persisted_messages().is_empty() {
            self.transport.send(ready.take_persisted_messages());
        }
        let read_states = ready.take_read_states();
        let role_changed = ready.ss().map(|ss| (ss.leader_id, ss.raft_state));
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit);
        }
        if !light.messages().is_empty() {
            self.transport.send(light.take_messages());
        }
        self.apply_entries(light.take_committed_entries())?;
        self.raw.advance_apply();
        self.on_read_states(read_states);
        self.answer_reads();
        if let Some((leader, role)) = role_changed {
            if leader != self.known_leader && leader != raft::INVALID_ID {
                crate::metrics::leader_changed();
            }
            if leader != self.known_leader
                && !(self.pending.is_empty() && self.pending_conf.is_empty())
            {
                // Proposals sent while following the old leader may have died with it
                // (raft-rs forwards a follower's proposal and forgets it). Answer them now,
                // as possibly applied, so clients retry instead of waiting out their timeout.
                tracing::info!(
                    count = self.pending.len(),
                    "leader changed: failing in-flight proposals as indeterminate"
                );
                crate::metrics::proposals_failed(self.pending.len() as u64);
                for (_, reply) in self.pending.drain() {
                    let _ = reply.send(Err(StoreError::TimeoutDueToLeaderFail));
                }
                for (_, reply) in self.pending_conf.drain() {
                    let _ = reply.send(Err(StoreError::TimeoutDueToLeaderFail));
                }
            }
            self.known_leader = leader;
            tracing::info!(
                leader = format_args!("{leader:016x}"),
                ?role,
                "raft role changed"
            );
            if role != StateRole::Leader {
                // Reads sent as leader will not be answered here: send them again.
                for (_, (_, replies)) in self.sent_reads.drain() {
                    self.queued_reads.extend(replies);
                }
            }
        }
        self.publish_status();
        Ok(())
    }

    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<()> {
        let restored = if snap.data.is_empty() {
            Mvcc::default()
        } else {
            Mvcc::decode(&snap.data)?
        };
        self.raw.mut_store().apply_snapshot(snap)?;
        let revision = restored.current_revision();
        self.membership.sync(restored.cluster());
        *self.mvcc.write().unwrap_or_else(PoisonError::into_inner) = restored;
        self.applied = snap.get_metadata().index;
        self.last_snapshot = self.applied;
        self.rev_tx.send_replace(revision);
        tracing::info!(
            index = self.applied,
            term = snap.get_metadata().term,
            revision,
            bytes = snap.data.len(),
            "restored state machine from a snapshot sent by the leader"
        );
        Ok(())
    }

    /// Applies committed entries to the state machine under one write lock, then wakes
    /// watchers and answers the proposals they carried.
    fn apply_entries(&mut self, entries: Vec<Entry>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut replies = Vec::new();
        let mut conf_replies = Vec::new();
        let mvcc = Arc::clone(&self.mvcc);
        let revision = {
            let mut state = mvcc.write().unwrap_or_else(PoisonError::into_inner);
            for entry in entries {
                self.applied = entry.index;
                match entry.get_entry_type() {
                    EntryType::EntryNormal if entry.data.is_empty() => {}
                    EntryType::EntryNormal => match RaftCommand::decode(entry.data.as_ref()) {
                        Ok(cmd) => {
                            let member_update = matches!(cmd.op, Some(Op::MemberUpdate(_)));
                            if member_update && state.cluster().is_empty() {
                                *state.cluster_mut() = self.membership.record();
                            }
                            let result = match cmd.op {
                                Some(op) => state.apply_from(op, Some(&entry.data)),
                                None => Err(StoreError::InvalidArgument("empty command".into())),
                            };
                            if member_update {
                                self.membership.sync(state.cluster());
                            }
                            let mine = cmd.origin == self.ids.member_id;
                            if let Some(reply) =
                                mine.then(|| self.pending.remove(&cmd.id)).flatten()
                            {
                                replies.push((reply, result));
                            }
                        }
                        Err(err) => {
                            tracing::error!(index = entry.index, %err, "undecodable raft entry skipped");
                        }
                    },
                    EntryType::EntryConfChange => {
                        let cc = ConfChange::parse_from_bytes(&entry.data).map_err(|e| {
                            StoreError::InvalidArgument(format!("conf change: {e}"))
                        })?;
                        let result = self.apply_member_change(&mut state, &cc);
                        let ctx =
                            ConfChangeContext::decode(cc.context.as_ref()).unwrap_or_default();
                        if ctx.origin == self.ids.member_id
                            && let Some(reply) = self.pending_conf.remove(&ctx.id)
                        {
                            conf_replies.push((reply, result));
                        }
                    }
                    EntryType::EntryConfChangeV2 => {
                        let cc = ConfChangeV2::parse_from_bytes(&entry.data).map_err(|e| {
                            StoreError::InvalidArgument(format!("conf change: {e}"))
                        })?;
                        let cs = self.raw.apply_conf_change(&cc)?;
                        self.raw.mut_store().set_conf_state(cs);
                    }
                }
            }
            state.current_revision()
        };
        self.rev_tx.send_replace(revision);
        for (reply, result) in replies {
            let _ = reply.send(result);
        }
        for (reply, result) in conf_replies {
            let _ = reply.send(result);
        }
        Ok(())
    }

    /// Every `snapshot_count` applied entries: encode the state machine here (the only
    /// pause writes see), save it on a helper thread, and trim the log once it is durable.
    fn maybe_snapshot(&mut self) -> Result<()> {
        if let Some(rx) = &self.snapshot_in_flight {
            match rx.try_recv() {
                Ok(Ok((meta, elapsed))) => {
                    let index = meta.index;
                    self.raw
                        .mut_store()
                        .snapshot_saved(meta, self.catch_up_entries)?;
                    self.snapshot_in_flight = None;
                    tracing::info!(
                        index,
                        save_ms = elapsed.as_millis() as u64,
                        "saved snapshot"
                    );
                }
                Ok(Err(e)) => return Err(e),
                Err(mpsc::TryRecvError::Empty) => return Ok(()),
                Err(mpsc::TryRecvError::Disconnected) => return Err(StoreError::Stopped),
            }
        }
        let due = self.applied >= self.last_snapshot + self.snapshot_count
            || (self.force_snapshot && self.applied > self.last_snapshot);
        if !due {
            return Ok(());
        }
        self.force_snapshot = false;
        // Only taking the image (values shared, not copied) pauses the driver; the helper
        // thread encodes it straight into the file.
        let started = Instant::now();
        let image = self
            .mvcc
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .image();
        let index = self.applied;
        let meta = self
            .raw
            .mut_store()
            .prepare_snapshot(index, Vec::new())?
            .take_metadata();
        tracing::debug!(
            index,
            image_ms = started.elapsed().as_millis() as u64,
            "took snapshot image"
        );
        self.last_snapshot = index;
        let files = self.raw.store().snap_files();
        let (tx, rx) = mpsc::channel();
        self.snapshot_in_flight = Some(rx);
        let spawned = std::thread::Builder::new()
            .name("snapshot-writer".into())
            .spawn(move || {
                let started = Instant::now();
                let len = image.encoded_len() as u64;
                let result = files
                    .save_streamed(&meta, len, |w| image.write_to(w))
                    .map(|_| (meta, started.elapsed()));
                let _ = tx.send(result);
            });
        if let Err(e) = spawned {
            return Err(StoreError::io("spawning snapshot writer", "member/snap")(e));
        }
        Ok(())
    }

    fn publish_status(&self) {
        let store = self.raw.store();
        let status = NodeStatus {
            leader: self.raw.raft.leader_id,
            term: self.raw.raft.term,
            last_index: raft::Storage::last_index(store).unwrap_or(0),
            commit: self.raw.raft.raft_log.committed,
            applied: self.applied,
            disk_bytes: store.disk_bytes(),
        };
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }

    fn fail_all(&mut self, err: impl Fn() -> StoreError) {
        for (_, reply) in self.pending_conf.drain() {
            let _ = reply.send(Err(err()));
        }
        for (_, reply) in self.pending.drain() {
            let _ = reply.send(Err(err()));
        }
        for (_, _, reply) in self.waiting_proposals.drain(..) {
            let _ = reply.send(Err(err()));
        }
        for (_, reply) in self.queued_reads.drain(..) {
            let _ = reply.send(Err(err()));
        }
        for (_, (_, replies)) in self.sent_reads.drain() {
            for (_, r) in replies {
                let _ = r.send(Err(err()));
            }
        }
        for (_, replies) in self.ready_reads.drain(..) {
            for r in replies {
                let _ = r.send(Err(err()));
            }
        }
    }
}
