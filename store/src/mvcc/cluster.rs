//! The cluster's membership as replicated state: which members exist (with their peer URLs
//! and whether they are learners) and which ids were removed for good.
//!
//! It lives in the state machine, next to the keys, for the same reason etcd keeps members
//! in its backend: a member that catches up from a snapshot must learn the membership the
//! snapshot's index had, and a restart rebuilds it from the newest snapshot plus the
//! membership changes replayed from the log. Applying a change is deterministic, and
//! replaying one twice (after a restart) gives the same result.

use std::collections::BTreeSet;

/// One member as the replicated membership records it (names are not replicated: each
/// member announces its own when it connects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    /// Raft id / etcd member id.
    pub id: u64,
    /// URLs its peers reach it on.
    pub peer_urls: Vec<String>,
    /// A learner receives the log but does not vote.
    pub is_learner: bool,
}

/// A membership change, as decided by a committed Raft conf change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// A new voting member (`member add`).
    AddVoter(MemberRecord),
    /// A new learner (`member add --learner`).
    AddLearner(MemberRecord),
    /// `member promote`: a learner becomes a voter.
    Promote(u64),
    /// `member update`: new peer URLs.
    Update(u64, Vec<String>),
    /// `member remove`: the id may never be used again.
    Remove(u64),
}

/// The replicated membership. Empty until the first membership change: until then the
/// members are the ones the cluster was created with (`member/members`), the same on every
/// member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterRecord {
    /// Current members, in id order.
    pub members: Vec<MemberRecord>,
    /// Ids of removed members.
    pub removed: BTreeSet<u64>,
}

impl ClusterRecord {
    /// Whether no membership change has been applied yet.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.removed.is_empty()
    }

    /// Applies one change. Returns `false` (and changes nothing) for a change that cannot
    /// apply: re-adding a removed id, adding an existing one, changing an absent member.
    /// Raft applies the same entries in the same order everywhere, so every member decides
    /// the same way.
    pub fn apply(&mut self, change: &MemberChange) -> bool {
        match change {
            MemberChange::AddVoter(m) | MemberChange::AddLearner(m) => {
                if self.removed.contains(&m.id) || self.members.iter().any(|x| x.id == m.id) {
                    return false;
                }
                let mut m = m.clone();
                m.is_learner = matches!(change, MemberChange::AddLearner(_));
                self.members.push(m);
                self.members.sort_by_key(|m| m.id);
                true
            }
            MemberChange::Promote(id) => match self.members.iter_mut().find(|m| m.id == *id) {
                Some(m) if m.is_learner => {
                    m.is_learner = false;
                    true
                }
                _ => false,
            },
            MemberChange::Update(id, urls) => match self.members.iter_mut().find(|m| m.id == *id) {
                Some(m) => {
                    m.peer_urls = urls.clone();
                    true
                }
                None => false,
            },
            MemberChange::Remove(id) => {
                let before = self.members.len();
                self.members.retain(|m| m.id != *id);
                self.removed.insert(*id);
                self.members.len() != before
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64) -> MemberRecord {
        MemberRecord {
            id,
            peer_urls: vec![format!("http://127.0.0.1:{id}")],
            is_learner: false,
        }
    }

    #[test]
    fn changes_apply_once_and_removed_ids_never_return() {
        let mut c = ClusterRecord {
            members: vec![rec(1), rec(2)],
            removed: BTreeSet::new(),
        };
        assert!(c.apply(&MemberChange::AddLearner(rec(3))));
        assert!(c.members[2].is_learner);
        assert!(!c.apply(&MemberChange::AddLearner(rec(3))), "already there");
        assert!(c.apply(&MemberChange::Promote(3)));
        assert!(
            !c.apply(&MemberChange::Promote(3)),
            "not a learner any more"
        );
        assert!(c.apply(&MemberChange::Update(3, vec!["http://h:1".into()])));
        assert_eq!(c.members[2].peer_urls, vec!["http://h:1".to_owned()]);
        assert!(c.apply(&MemberChange::Remove(2)));
        assert!(!c.apply(&MemberChange::Remove(2)));
        assert!(
            !c.apply(&MemberChange::AddVoter(rec(2))),
            "ids are never reused"
        );
        assert_eq!(
            c.members.iter().map(|m| m.id).collect::<Vec<_>>(),
            vec![1, 3]
        );
        // Replaying the same sequence on a copy of the start state gives the same end.
        let mut again = ClusterRecord {
            members: vec![rec(1), rec(2)],
            removed: BTreeSet::new(),
        };
        for ch in [
            MemberChange::AddLearner(rec(3)),
            MemberChange::Promote(3),
            MemberChange::Update(3, vec!["http://h:1".into()]),
            MemberChange::Remove(2),
        ] {
            again.apply(&ch);
        }
        assert_eq!(again, c);
    }
}
