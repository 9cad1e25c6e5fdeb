//! Which pods to delete first when scaling down: upstream's `ActivePodsWithRanks` ordering
//! with `LogarithmicScaleDown` (on by default since 1.22).

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::pods::ready_since;

/// `controller.kubernetes.io/pod-deletion-cost`.
const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Orders `pods` so the ones to delete come first; `related` are the pods of the owner's
/// family used to count pods doubled up on the same node.
pub(crate) fn sort_for_deletion(pods: &mut [&Pod], related: &[&Pod], now: jiff::Timestamp) {
    let mut per_node: HashMap<&str, i32> = HashMap::new();
    for p in related {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref())
            && super::pods::is_active(p)
        {
            *per_node.entry(n).or_insert(0) += 1;
        }
    }
    let rank = |p: &Pod| -> i32 {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| per_node.get(n).copied())
            .unwrap_or(0)
    };
    pods.sort_by(|a, b| compare(a, b, rank(a), rank(b), now));
}

fn node(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn phase_rank(p: &Pod) -> i32 {
    match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn cost(p: &Pod) -> i64 {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0)
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| {
            cs.iter().map(|c| c.restart_count).max().unwrap_or(0)
        })
}

/// log2 bucket of the time since `t` (upstream's `getPodsRankedByRelatedPodsOnSameNode`
/// logarithmic comparison); None when unknown.
fn bucket(t: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Option<i64> {
    let t = t?;
    let secs = (now - t).get_seconds().max(0);
    Some(if secs == 0 {
        0
    } else {
        i64::from(63 - secs.leading_zeros())
    })
}

/// `ActivePodsWithRanks.Less`: true order "a before b" means a is deleted first.
fn compare(a: &Pod, b: &Pod, ra: i32, rb: i32, now: jiff::Timestamp) -> Ordering {
    // 1. Unassigned < assigned.
    let (na, nb) = (node(a).is_empty(), node(b).is_empty());
    if na != nb {
        return if na {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // 2. Pending < Unknown < Running.
    let (pa, pb) = (phase_rank(a), phase_rank(b));
    if pa != pb {
        return pa.cmp(&pb);
    }
    // 3. Not ready < ready.
    let (ya, yb) = (ready_since(a), ready_since(b));
    if ya.is_some() != yb.is_some() {
        return if ya.is_none() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // 4. Lower deletion cost first.
    let (ca, cb) = (cost(a), cost(b));
    if ca != cb {
        return ca.cmp(&cb);
    }
    // 5. Doubled up (higher rank) first.
    if ra != rb {
        return rb.cmp(&ra);
    }
    // 6. Ready for less time first.
    if let (Some(Some(ta)), Some(Some(tb))) = (ya, yb) {
        let (ba, bb) = (bucket(Some(ta), now), bucket(Some(tb), now));
        if ba != bb {
            return ba.cmp(&bb);
        }
    }
    // 7. More restarts first.
    let (sa, sb) = (restarts(a), restarts(b));
    if sa != sb {
        return sb.cmp(&sa);
    }
    // 8. Newer first.
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let (ba, bb) = (bucket(created(a), now), bucket(created(b), now));
    if ba != bb {
        return ba.cmp(&bb);
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str, phase: &str, ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn unassigned_pending_and_unready_pods_go_first_then_doubled_up() {
        let a = pod("running-alone", "n1", "Running", true);
        let b = pod("unassigned", "", "Pending", false);
        let c = pod("pending", "n2", "Pending", false);
        let d = pod("unready", "n3", "Running", false);
        let e = pod("running-doubled", "n4", "Running", true);
        let f = pod("running-doubled-2", "n4", "Running", true);
        let all = [&a, &b, &c, &d, &e, &f];
        let mut v: Vec<&Pod> = all.to_vec();
        sort_for_deletion(&mut v, &all, jiff::Timestamp::now());
        let names: Vec<&str> = v
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(&names[..3], &["unassigned", "pending", "unready"]);
        assert_eq!(names[5], "running-alone");
    }
}
