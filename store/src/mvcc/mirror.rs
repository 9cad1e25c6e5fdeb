//! A state machine that mirrors another store instead of applying commands: loaded from a
//! range of every key at one revision, then fed the watch events that follow, keeping the
//! remote store's revisions, versions and create revisions exactly. The API server runs on
//! such a mirror when its store is a remote cluster (`capstan apiserver --etcd-servers`), so
//! its reads and watch cache work as over the embedded member.

use bytes::Bytes;

use super::kv::{Mvcc, Record};
use super::revision::Revision;
use crate::pb;

/// etcd's event type for a deletion (`mvccpb.Event.EventType.DELETE`).
const EVENT_DELETE: i32 = 1;

impl Mvcc {
    /// The state of a store at `revision` whose live keys are `kvs`. History before it is
    /// unknown, so the mirror counts as compacted at `revision`.
    pub fn mirror_load(kvs: Vec<pb::PbKeyValue>, revision: i64) -> Mvcc {
        let mut m = Mvcc::default();
        // Keys written by one transaction share a main revision; sub-revisions only need
        // to be distinct.
        let mut subs: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
        for kv in kvs {
            let sub = subs.entry(kv.mod_revision).or_insert(0);
            let rec = Record {
                rev: Revision::new(kv.mod_revision, *sub),
                create: kv.create_revision,
                version: kv.version,
                value: Bytes::from(kv.value),
                lease: kv.lease,
            };
            *sub += 1;
            m.keys.insert(Bytes::from(kv.key), vec![rec]);
        }
        m.revision = revision.max(1);
        m.compacted = revision;
        m
    }

    /// Applies the events of one remote revision, in the order the remote sent them.
    /// Events at or below the current revision are ignored (a watch resumed twice).
    pub fn mirror_apply(&mut self, revision: i64, events: Vec<pb::PbEvent>) {
        if revision <= self.revision {
            return;
        }
        for (sub, ev) in (0i64..).zip(events) {
            let Some(kv) = ev.kv else { continue };
            let key = Bytes::from(kv.key);
            let rev = Revision::new(revision, sub);
            let rec = if ev.r#type == EVENT_DELETE {
                Record {
                    rev,
                    create: 0,
                    version: 0,
                    value: Bytes::new(),
                    lease: 0,
                }
            } else {
                Record {
                    rev,
                    create: kv.create_revision,
                    version: kv.version,
                    value: Bytes::from(kv.value),
                    lease: kv.lease,
                }
            };
            self.by_rev.insert(rev, key.clone());
            self.keys.entry(key).or_default().push(rec);
        }
        self.revision = revision;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create: i64, m: i64, version: i64) -> pb::PbKeyValue {
        pb::PbKeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: create,
            mod_revision: m,
            version,
            lease: 0,
        }
    }

    #[test]
    fn a_mirror_reads_and_replays_like_the_source() {
        let mut m = Mvcc::mirror_load(vec![kv("a", "1", 2, 5, 3), kv("b", "x", 5, 5, 1)], 7);
        assert_eq!(m.current_revision(), 7);
        let all = pb::PbRangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        };
        let r = m.range(&all).unwrap();
        assert_eq!(r.kvs.len(), 2);
        assert_eq!(r.kvs[0].mod_revision, 5);
        assert_eq!(r.kvs[0].version, 3);
        m.mirror_apply(
            8,
            vec![
                pb::PbEvent {
                    r#type: 0,
                    kv: Some(kv("a", "2", 2, 8, 4)),
                    prev_kv: None,
                },
                pb::PbEvent {
                    r#type: EVENT_DELETE,
                    kv: Some(kv("b", "", 0, 8, 0)),
                    prev_kv: None,
                },
            ],
        );
        m.mirror_apply(8, vec![]);
        let r = m.range(&all).unwrap();
        assert_eq!(r.kvs.len(), 1);
        assert_eq!(
            (r.kvs[0].value.as_slice(), r.kvs[0].version),
            (&b"2"[..], 4)
        );
        assert_eq!(r.header.unwrap().revision, 8);
        let (events, next) = m
            .events(8, &super::super::KeyRange::new(&[0], &[0]), true, 100)
            .unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(next, 9);
        assert!(
            events[1].event.prev_kv.is_some(),
            "prev of the delete is the loaded b"
        );
        assert!(
            m.events(6, &super::super::KeyRange::new(&[0], &[0]), false, 10)
                .is_err()
        );
    }
}
