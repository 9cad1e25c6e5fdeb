//! PodTopologySpread (filter): for each `DoNotSchedule` constraint, placing the pod in the
//! node's domain must keep `count(domain) + self - min(count)` within `maxSkew`. Counts are
//! taken over the nodes the constraint's inclusion policies admit (PreFilter).

use std::collections::HashMap;

use crate::cache::{Cache, NodeInfo};
use crate::framework::filter::node_affinity::node_matches;
use crate::framework::selector::tolerated;
use crate::framework::{Code, PodCtx, SpreadConstraint, Status};

/// Upstream's reason when the skew would be exceeded.
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
/// Upstream's reason when the node lacks a constraint's topology label.
pub const REASON_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// True when node `n` counts for constraint `c` (its inclusion policies).
pub fn node_included(ctx: &PodCtx<'_>, c: &SpreadConstraint, n: &NodeInfo) -> bool {
    if c.honor_affinity && !node_matches(ctx, n) {
        return false;
    }
    if c.honor_taints
        && n.taints.iter().any(|t| {
            (t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerated(ctx.tolerations, t)
        })
    {
        return false;
    }
    true
}

/// How many pods matching `c` (same namespace, not terminating) are on `n`.
pub fn count_matching(ctx: &PodCtx<'_>, c: &SpreadConstraint, n: &NodeInfo) -> i64 {
    count_matching_memo(ctx, c, n, matching_fingerprint(ctx, c))
}

/// What [`count_matching`]'s answer depends on besides the node's pods (namespace and
/// selector), as a key for [`NodeInfo::memo_count`].
pub fn matching_fingerprint(ctx: &PodCtx<'_>, c: &SpreadConstraint) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ctx.namespace.hash(&mut h);
    format!("{:?}", c.selector).hash(&mut h);
    h.finish()
}

/// [`count_matching`] with the fingerprint computed once by the caller.
pub fn count_matching_memo(
    ctx: &PodCtx<'_>,
    c: &SpreadConstraint,
    n: &NodeInfo,
    fingerprint: u64,
) -> i64 {
    n.memo_count(fingerprint, |n| {
        n.pods
            .iter()
            .filter(|p| {
                !p.terminating && p.namespace == ctx.namespace && c.selector.matches(&p.labels)
            })
            .count() as i64
    })
}

/// PreFilter state: per hard constraint, the matching-pod count of each domain and the
/// minimum over domains.
#[derive(Debug, Default)]
pub struct SpreadState {
    /// (constraint index into `ctx.spread`, counts by domain value, global minimum).
    pub hard: Vec<(usize, HashMap<String, i64>, i64)>,
}

impl SpreadState {
    /// Computes the counts; `None` when the pod has no `DoNotSchedule` constraint.
    pub fn new(ctx: &PodCtx<'_>, cache: &Cache) -> Option<SpreadState> {
        let hard: Vec<usize> = (0..ctx.spread.len())
            .filter(|i| ctx.spread[*i].hard)
            .collect();
        if hard.is_empty() {
            return None;
        }
        let mut out = SpreadState::default();
        for i in hard {
            let c = &ctx.spread[i];
            let fingerprint = matching_fingerprint(ctx, c);
            let mut counts: HashMap<String, i64> = HashMap::new();
            for n in &cache.nodes {
                // Upstream counts only nodes carrying every hard constraint's key.
                if !ctx
                    .spread
                    .iter()
                    .filter(|o| o.hard)
                    .all(|o| n.labels.contains_key(&o.key))
                {
                    continue;
                }
                if !node_included(ctx, c, n) {
                    continue;
                }
                let Some(v) = n.labels.get(&c.key) else {
                    continue;
                };
                *counts.entry(v.clone()).or_insert(0) +=
                    count_matching_memo(ctx, c, n, fingerprint);
            }
            let mut min = counts.values().copied().min().unwrap_or(0);
            if (counts.len() as i64) < c.min_domains {
                min = 0;
            }
            out.hard.push((i, counts, min));
        }
        Some(out)
    }
}

/// The filter.
pub fn filter(
    ctx: &PodCtx<'_>,
    state: Option<&SpreadState>,
    node: &NodeInfo,
) -> Result<(), Status> {
    let Some(state) = state else {
        return Ok(());
    };
    for (i, counts, min) in &state.hard {
        let c = &ctx.spread[*i];
        let Some(v) = node.labels.get(&c.key) else {
            return Err(Status::new(
                Code::UnschedulableAndUnresolvable,
                "PodTopologySpread",
                REASON_MISSING_LABEL,
            ));
        };
        let self_match = i64::from(c.selector.matches(&ctx.labels));
        let skew = counts.get(v).copied().unwrap_or(0) + self_match - min;
        if skew > c.max_skew {
            return Err(Status::new(
                Code::Unschedulable,
                "PodTopologySpread",
                REASON,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PodInfo;
    use crate::framework::filter::testutil::{node, pod};
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use std::collections::BTreeMap;

    #[test]
    fn a_full_zone_is_rejected_until_the_others_catch_up() {
        let mut cache = Cache::default();
        for (n, z) in [("a", "z1"), ("b", "z2"), ("c", "z3")] {
            cache.upsert_node(&node(n, "4", &[("zone", z)], vec![]));
        }
        cache.upsert_node(&node("nolabel", "4", &[], vec![]));
        cache.set_pod(PodInfo::new(&pod("x", "0", &[("app", "w")]), "a"));
        let p = pod("p", "0", &[("app", "w")]);
        let mut spec = p.spec.clone().unwrap_or_default();
        spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "w".into())])),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let ctx = PodCtx::new(&p, &spec);
        let state = SpreadState::new(&ctx, &cache);
        let at = |n: &str| filter(&ctx, state.as_ref(), cache.node(n).expect("node"));
        assert!(at("a").is_err());
        assert!(at("b").is_ok());
        assert!(at("c").is_ok());
        assert_eq!(
            at("nolabel").map_err(|s| s.reasons),
            Err(vec![REASON_MISSING_LABEL.to_owned()])
        );
    }
}
