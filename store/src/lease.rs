//! The lessor: when each lease expires. Deadlines are leader-local, not replicated (as in
//! etcd): the state machine only knows which leases exist and their TTLs, and a new leader
//! (or a restarted member) gives every lease a full TTL again. Expiry is turned into a
//! `LeaseRevoke` proposal by [`crate::node::Node`], so deleting the keys goes through Raft.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// etcd's largest lease TTL, in seconds.
pub const MAX_TTL: i64 = 9_000_000_000;

/// Lease deadlines on this member.
#[derive(Debug, Default)]
pub struct Lessor {
    deadlines: Mutex<HashMap<i64, Instant>>,
}

fn ttl_duration(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

impl Lessor {
    /// Restarts lease `id`'s clock with `ttl` seconds from now.
    pub fn renew(&self, id: i64, ttl: i64) {
        let mut d = self
            .deadlines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        d.insert(id, Instant::now() + ttl_duration(ttl));
    }

    /// Seconds left on lease `id` (a lease this member has not timed yet has its full TTL).
    pub fn remaining(&self, id: i64, ttl: i64) -> i64 {
        let d = self
            .deadlines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match d.get(&id) {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                // Round up, as etcd reports whole seconds remaining.
                i64::try_from(left.as_millis().div_ceil(1000)).unwrap_or(i64::MAX)
            }
            None => ttl,
        }
    }

    /// The leases among `leases` (`(id, ttl)`) whose deadline has passed. Leases seen for
    /// the first time start their clock now; leases no longer present are forgotten.
    pub fn expired(&self, leases: impl Iterator<Item = (i64, i64)>) -> Vec<i64> {
        let now = Instant::now();
        let mut d = self
            .deadlines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut seen = HashMap::new();
        let mut out = Vec::new();
        for (id, ttl) in leases {
            let deadline = *d.entry(id).or_insert_with(|| now + ttl_duration(ttl));
            seen.insert(id, deadline);
            if deadline <= now {
                out.push(id);
            }
        }
        *d = seen;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_with_zero_ttl_expires_and_renewed_lease_does_not() {
        let l = Lessor::default();
        l.renew(2, 60);
        let expired = l.expired([(1, 0), (2, 60)].into_iter());
        assert_eq!(expired, [1]);
        assert!(l.remaining(2, 60) > 58);
    }
}
