//! A linearizability checker for key-value histories (Wing & Gong's search with Lowe's and
//! Porcupine's optimisations).
//!
//! - **P-compositionality:** the history is partitioned by key and every key is checked on
//!   its own (linearizability is local), so the search space is per-key.
//! - **Memoisation:** the pair (set of linearized operations as a bitset, model state) is
//!   cached; a configuration already explored is never explored again.
//! - **Non-determinism:** an operation whose outcome is unknown (a timeout, a lost
//!   connection) has return time = infinity and may or may not have taken effect; the model
//!   state is a *set* of possible states (power-set construction), so both branches are kept.
//! - **Timeout:** a per-history deadline turns a search that takes too long into
//!   [`CheckResult::Unknown`] instead of hanging the test.
//!
//! The model is a register per key with put / get / delete / CAS (a txn comparing the value or
//! the `mod_revision`), as the etcd v3 API offers them.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// What a CAS compares before it writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CasGuard {
    /// `value(key) == v` (`None`: the key must be absent, as `create_revision == 0`).
    Value(Option<String>),
    /// `mod_revision(key) == r` (`0`: the key is absent).
    ModRevision(i64),
}

/// An operation's input.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// Put a value.
    Put(String),
    /// A linearizable read.
    Get,
    /// Delete the key.
    Delete,
    /// If the guard holds, write `new` (`None`: delete); otherwise change nothing.
    Cas {
        /// The comparison.
        guard: CasGuard,
        /// The value written on success (`None` deletes).
        new: Option<String>,
    },
}

/// An operation's observed output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// The put was acknowledged at revision `rev` (the header revision = the key's new
    /// `mod_revision`).
    Put {
        /// Revision of the write.
        rev: i64,
    },
    /// The read returned `value` with `mod_rev` (`None`/`0` when the key is absent).
    Get {
        /// Value read.
        value: Option<String>,
        /// The key's `mod_revision` (0 when absent).
        mod_rev: i64,
    },
    /// The delete was acknowledged; `deleted` says whether a key was removed.
    Delete {
        /// Number of keys deleted > 0.
        deleted: bool,
    },
    /// The txn was acknowledged: `succeeded` and the header revision.
    Cas {
        /// Whether the guard held.
        succeeded: bool,
        /// Header revision (the key's new `mod_revision` when it wrote).
        rev: i64,
    },
    /// The outcome is unknown (timeout, lost connection): possibly applied.
    Unknown,
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The client that issued it (for reports only).
    pub client: usize,
    /// The key it touches.
    pub key: String,
    /// What was asked.
    pub input: Input,
    /// What was observed.
    pub output: Output,
    /// Call time (any monotonic unit, e.g. nanoseconds since the run started).
    pub call: u64,
    /// Return time; [`u64::MAX`] for an ambiguous operation.
    pub ret: u64,
}

/// The verdict of a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckResult {
    /// Every key's history is linearizable.
    Ok,
    /// The history of this key admits no linearization.
    Illegal {
        /// The key whose history is not linearizable.
        key: String,
    },
    /// The search did not finish before the deadline.
    Unknown,
}

/// The register's state: the value and its `mod_revision` when known (an ambiguous put makes
/// the revision unknown until a read reveals it).
type KvState = Option<(String, Option<i64>)>;

fn guard_holds(s: &KvState, g: &CasGuard) -> Option<bool> {
    match g {
        CasGuard::Value(v) => Some(s.as_ref().map(|(x, _)| x) == v.as_ref()),
        CasGuard::ModRevision(r) => match s {
            None => Some(*r == 0),
            Some((_, Some(m))) => Some(m == r),
            Some((_, None)) => None,
        },
    }
}

fn rev_ok(s: &KvState, rev: i64) -> bool {
    match s {
        Some((_, Some(m))) => rev > *m,
        _ => true,
    }
}

fn written(new: &Option<String>, rev: Option<i64>) -> KvState {
    new.as_ref().map(|v| (v.clone(), rev))
}

/// The sequential specification: every state reachable from `s` by `input` with `output`.
fn step(s: &KvState, input: &Input, output: &Output, out: &mut Vec<KvState>) {
    match (input, output) {
        (Input::Put(v), Output::Put { rev }) if rev_ok(s, *rev) => {
            out.push(Some((v.clone(), Some(*rev))));
        }
        (Input::Put(v), Output::Unknown) => out.push(Some((v.clone(), None))),
        (Input::Get, Output::Get { value, mod_rev }) => match (s, value) {
            (None, None) => out.push(None),
            (Some((x, m)), Some(v)) if x == v => match m {
                Some(m) if m != mod_rev => {}
                _ => out.push(Some((x.clone(), Some(*mod_rev)))),
            },
            _ => {}
        },
        (Input::Get, Output::Unknown) => out.push(s.clone()),
        (Input::Delete, Output::Delete { deleted }) if *deleted == s.is_some() => {
            out.push(None);
        }
        (Input::Delete, Output::Unknown) => out.push(None),
        (Input::Cas { guard, new }, Output::Cas { succeeded, rev }) => {
            let holds = guard_holds(s, guard);
            if *succeeded && holds != Some(false) && (new.is_none() || rev_ok(s, *rev)) {
                out.push(written(new, Some(*rev)));
            }
            if !*succeeded && holds != Some(true) {
                out.push(s.clone());
            }
        }
        (Input::Cas { guard, new }, Output::Unknown) => {
            let holds = guard_holds(s, guard);
            if holds != Some(false) {
                out.push(written(new, None));
            }
            if holds != Some(true) {
                out.push(s.clone());
            }
        }
        _ => {}
    }
}

/// Power-set step: the set of states reachable from any state of `set`.
fn step_set(set: &[KvState], input: &Input, output: &Output) -> Vec<KvState> {
    let mut out = Vec::new();
    for s in set {
        step(s, input, output, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// Checks a whole history, key by key, within `timeout` in total.
pub fn check(history: &[Operation], timeout: Duration) -> CheckResult {
    let deadline = Instant::now() + timeout;
    let mut by_key: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut unknown = false;
    for (key, ops) in by_key {
        match check_key(&ops, deadline) {
            Some(true) => {}
            Some(false) => {
                return CheckResult::Illegal {
                    key: key.to_owned(),
                };
            }
            None => unknown = true,
        }
    }
    if unknown {
        CheckResult::Unknown
    } else {
        CheckResult::Ok
    }
}

/// One key: `Some(true)` linearizable, `Some(false)` not, `None` deadline passed.
fn check_key(ops: &[&Operation], deadline: Instant) -> Option<bool> {
    let n = ops.len();
    if n == 0 {
        return Some(true);
    }
    // Events: (time, is_return, op). Calls sort before returns at equal times, so operations
    // touching at one instant count as concurrent (the permissive choice).
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        events.push((op.call, false, i));
        events.push((op.ret.max(op.call), true, i));
    }
    events.sort();
    // Doubly linked list over nodes: 0 = head, 1..=2n events, 2n+1 = tail.
    let tail = 2 * n + 1;
    let mut next: Vec<usize> = (1..=tail + 1).collect();
    let mut prev: Vec<usize> = (0..=tail).map(|i| i.saturating_sub(1)).collect();
    let mut call_node = vec![0usize; n];
    let mut ret_node = vec![0usize; n];
    for (idx, &(_, is_ret, op)) in events.iter().enumerate() {
        if is_ret {
            ret_node[op] = idx + 1;
        } else {
            call_node[op] = idx + 1;
        }
    }
    let node_event = |node: usize| events[node - 1];

    let lift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, node: usize| {
        let (p, q) = (prev[node], next[node]);
        next[p] = q;
        prev[q] = p;
    };
    let unlift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, node: usize| {
        let (p, q) = (prev[node], next[node]);
        next[p] = node;
        prev[q] = node;
    };

    let words = n.div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut state: Vec<KvState> = vec![None];
    let mut cache: HashSet<(Vec<u64>, Vec<KvState>)> = HashSet::new();
    let mut stack: Vec<(usize, Vec<KvState>)> = Vec::new();
    let mut entry = next[0];
    let mut iterations: u64 = 0;
    while next[0] != tail {
        iterations += 1;
        if iterations.is_multiple_of(4096) && Instant::now() > deadline {
            return None;
        }
        if entry == tail {
            // Cannot happen (the last live node is always a return); be safe anyway.
            return Some(false);
        }
        let (_, is_ret, op) = node_event(entry);
        if !is_ret {
            let new_state = step_set(&state, &ops[op].input, &ops[op].output);
            if !new_state.is_empty() {
                let mut lin = linearized.clone();
                lin[op / 64] |= 1 << (op % 64);
                if cache.insert((lin.clone(), new_state.clone())) {
                    stack.push((op, std::mem::replace(&mut state, new_state)));
                    linearized = lin;
                    lift(&mut next, &mut prev, call_node[op]);
                    lift(&mut next, &mut prev, ret_node[op]);
                    entry = next[0];
                    continue;
                }
            }
            entry = next[entry];
        } else {
            // A return whose call is not linearized yet: backtrack.
            let Some((op, s)) = stack.pop() else {
                return Some(false);
            };
            state = s;
            linearized[op / 64] &= !(1 << (op % 64));
            unlift(&mut next, &mut prev, ret_node[op]);
            unlift(&mut next, &mut prev, call_node[op]);
            entry = next[call_node[op]];
        }
    }
    Some(true)
}

/// Writes a history as one line per operation (for saving failing runs).
pub fn format_history(history: &[Operation]) -> String {
    let mut ops: Vec<&Operation> = history.iter().collect();
    ops.sort_by_key(|o| (o.key.clone(), o.call));
    let mut s = String::new();
    for o in ops {
        let ret = if o.ret == u64::MAX {
            "inf".to_owned()
        } else {
            o.ret.to_string()
        };
        s.push_str(&format!(
            "key={} client={} call={} ret={} input={:?} output={:?}\n",
            o.key, o.client, o.call, ret, o.input, o.output
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: usize, input: Input, output: Output, call: u64, ret: u64) -> Operation {
        Operation {
            client,
            key: "k".into(),
            input,
            output,
            call,
            ret,
        }
    }
    fn put(v: &str) -> Input {
        Input::Put(v.into())
    }
    fn got(v: Option<&str>, r: i64) -> Output {
        Output::Get {
            value: v.map(Into::into),
            mod_rev: r,
        }
    }
    const T: Duration = Duration::from_secs(10);

    #[test]
    fn sequential_ok() {
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(1, Input::Get, got(Some("a"), 2), 2, 3),
            op(0, Input::Delete, Output::Delete { deleted: true }, 4, 5),
            op(1, Input::Get, got(None, 0), 6, 7),
        ];
        assert_eq!(check(&h, T), CheckResult::Ok);
    }

    #[test]
    fn concurrent_read_may_see_either() {
        // The read overlaps the put: old or new value are both fine.
        for seen in [None, Some("a")] {
            let r = if seen.is_some() { 2 } else { 0 };
            let h = vec![
                op(0, put("a"), Output::Put { rev: 2 }, 0, 10),
                op(1, Input::Get, got(seen, r), 1, 5),
            ];
            assert_eq!(check(&h, T), CheckResult::Ok, "{seen:?}");
        }
    }

    #[test]
    fn stale_read_is_illegal() {
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(0, put("b"), Output::Put { rev: 3 }, 2, 3),
            op(1, Input::Get, got(Some("a"), 2), 4, 5),
        ];
        assert_eq!(check(&h, T), CheckResult::Illegal { key: "k".into() });
    }

    #[test]
    fn read_goes_back_in_time_is_illegal() {
        // Two overlapping reads after concurrent put: once a later read saw the new value, a
        // read that starts after it returned cannot see the old one.
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 100),
            op(1, Input::Get, got(Some("a"), 2), 10, 20),
            op(2, Input::Get, got(None, 0), 30, 40),
        ];
        assert!(matches!(check(&h, T), CheckResult::Illegal { .. }));
    }

    #[test]
    fn lost_write_is_illegal() {
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(1, Input::Get, got(None, 0), 2, 3),
        ];
        assert!(matches!(check(&h, T), CheckResult::Illegal { .. }));
    }

    #[test]
    fn ambiguous_write_may_or_may_not_apply() {
        for seen in [None, Some("a")] {
            let r = if seen.is_some() { 2 } else { 0 };
            let h = vec![
                op(0, put("a"), Output::Unknown, 0, u64::MAX),
                op(1, Input::Get, got(seen, r), 5, 6),
            ];
            assert_eq!(check(&h, T), CheckResult::Ok, "{seen:?}");
        }
        // But it cannot apply, be unapplied, and apply again.
        let h = vec![
            op(0, put("a"), Output::Unknown, 0, u64::MAX),
            op(1, Input::Get, got(Some("a"), 2), 5, 6),
            op(1, Input::Get, got(None, 0), 7, 8),
        ];
        assert!(matches!(check(&h, T), CheckResult::Illegal { .. }));
    }

    #[test]
    fn cas_anomalies() {
        let cas = |g: CasGuard, v: &str| Input::Cas {
            guard: g,
            new: Some(v.into()),
        };
        // Two CAS on the same mod_revision cannot both succeed.
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(
                1,
                cas(CasGuard::ModRevision(2), "b"),
                Output::Cas {
                    succeeded: true,
                    rev: 3,
                },
                2,
                10,
            ),
            op(
                2,
                cas(CasGuard::ModRevision(2), "c"),
                Output::Cas {
                    succeeded: true,
                    rev: 4,
                },
                2,
                10,
            ),
        ];
        assert!(matches!(check(&h, T), CheckResult::Illegal { .. }));
        // One succeeds, one fails: fine.
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(
                1,
                cas(CasGuard::ModRevision(2), "b"),
                Output::Cas {
                    succeeded: true,
                    rev: 3,
                },
                2,
                10,
            ),
            op(
                2,
                cas(CasGuard::ModRevision(2), "c"),
                Output::Cas {
                    succeeded: false,
                    rev: 3,
                },
                2,
                10,
            ),
            op(0, Input::Get, got(Some("b"), 3), 11, 12),
        ];
        assert_eq!(check(&h, T), CheckResult::Ok);
        // A CAS on the value that fails although the value matched, alone: illegal.
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(
                1,
                cas(CasGuard::Value(Some("a".into())), "b"),
                Output::Cas {
                    succeeded: false,
                    rev: 2,
                },
                2,
                3,
            ),
        ];
        assert!(matches!(check(&h, T), CheckResult::Illegal { .. }));
        // Create-if-absent succeeded although the key existed.
        let h = vec![
            op(0, put("a"), Output::Put { rev: 2 }, 0, 1),
            op(
                1,
                cas(CasGuard::Value(None), "b"),
                Output::Cas {
                    succeeded: true,
                    rev: 3,
                },
                2,
                3,
            ),
        ];
        assert!(matches!(check(&h, T), CheckResult::Illegal { .. }));
    }

    /// xorshift64*: deterministic randomness without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random concurrent histories produced by a real atomic register (each operation takes
    /// effect at a random instant inside its interval) are linearizable; corrupting one read
    /// to a value never written makes them illegal.
    #[test]
    fn randomized_against_sequential_model() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200 {
            let clients = 1 + rng.below(4) as usize;
            let per_client = 1 + rng.below(8);
            // Per client: sequential ops with random intervals; then a linearization point
            // inside each interval. Apply in order of the points.
            let mut planned = Vec::new(); // (point, client, input, call, ret, ambiguous)
            let mut vseq = 0;
            for c in 0..clients {
                let mut t = rng.below(20);
                for _ in 0..per_client {
                    let call = t;
                    let ret = call + 1 + rng.below(30);
                    let point = call + rng.below(ret - call);
                    vseq += 1;
                    let input = match rng.below(5) {
                        0 | 1 => Input::Put(format!("v{vseq}")),
                        2 => Input::Get,
                        3 => Input::Delete,
                        _ => Input::Cas {
                            guard: if rng.below(2) == 0 {
                                CasGuard::Value(None)
                            } else {
                                CasGuard::ModRevision(rng.below(6) as i64)
                            },
                            new: Some(format!("v{vseq}")),
                        },
                    };
                    let ambiguous = rng.below(10) == 0;
                    planned.push((point * 64 + c as u64, c, input, call, ret, ambiguous));
                    t = ret + rng.below(5);
                }
            }
            planned.sort_by_key(|p| p.0);
            let mut value: Option<String> = None;
            let mut mod_rev = 0i64;
            let mut rev = 1i64;
            let mut h = Vec::new();
            for (_, c, input, call, ret, ambiguous) in planned {
                let out = match &input {
                    Input::Put(v) => {
                        rev += 1;
                        value = Some(v.clone());
                        mod_rev = rev;
                        Output::Put { rev }
                    }
                    Input::Get => Output::Get {
                        value: value.clone(),
                        mod_rev,
                    },
                    Input::Delete => {
                        let deleted = value.is_some();
                        if deleted {
                            rev += 1;
                        }
                        value = None;
                        mod_rev = 0;
                        Output::Delete { deleted }
                    }
                    Input::Cas { guard, new } => {
                        let holds = match guard {
                            CasGuard::Value(v) => &value == v,
                            CasGuard::ModRevision(r) => *r == mod_rev,
                        };
                        if holds {
                            rev += 1;
                            value = new.clone();
                            mod_rev = rev;
                        }
                        Output::Cas {
                            succeeded: holds,
                            rev,
                        }
                    }
                };
                let (out, ret) = if ambiguous {
                    (Output::Unknown, u64::MAX)
                } else {
                    (out, ret)
                };
                h.push(op(c, input, out, call, ret));
            }
            assert_eq!(
                check(&h, T),
                CheckResult::Ok,
                "round {round}:\n{}",
                format_history(&h)
            );
            // Corrupt one acknowledged read that saw a value.
            if let Some(i) = h
                .iter()
                .position(|o| matches!(&o.output, Output::Get { value: Some(_), .. }))
            {
                h[i].output = got(Some("never-written"), 99);
                assert!(
                    matches!(check(&h, T), CheckResult::Illegal { .. }),
                    "round {round}"
                );
            }
        }
    }

    #[test]
    fn deadline_gives_unknown() {
        // Many fully concurrent ambiguous puts and reads of distinct values explode the search.
        let mut h = Vec::new();
        for i in 0..60 {
            h.push(op(
                i,
                Input::Put(format!("v{i}")),
                Output::Unknown,
                0,
                u64::MAX,
            ));
        }
        for i in 0..60 {
            h.push(op(
                100 + i,
                Input::Get,
                got(Some(&format!("v{}", 59 - i)), 0),
                1,
                1_000,
            ));
        }
        let r = check(&h, Duration::from_millis(50));
        assert!(r == CheckResult::Unknown || r == CheckResult::Ok, "{r:?}");
    }
}
