//! PodTopologySpread (score): for `ScheduleAnyway` constraints, nodes in domains with fewer
//! matching pods score higher; each constraint's count is weighted by `log(domains + 2)`.

use crate::cache::{Cache, NodeInfo, TopologyKey};
use crate::framework::PodCtx;
use crate::framework::filter::pod_topology_spread::{
    count_matching_memo, matching_fingerprint, node_included,
};
use crate::framework::score::MAX_NODE_SCORE;

/// Scores each node.
pub fn score(ctx: &PodCtx<'_>, cache: &Cache, nodes: &[&NodeInfo]) -> Vec<i64> {
    let soft: Vec<_> = ctx
        .spread
        .iter()
        .filter(|c| !c.hard)
        .map(|c| (c, TopologyKey::new(&c.key)))
        .collect();
    if soft.is_empty() {
        return vec![0; nodes.len()];
    }
    // Nodes missing a soft constraint's key are ignored (score 0); with the system defaults
    // a node needs only one of the keys.
    let ignored: Vec<bool> = nodes
        .iter()
        .map(|n| {
            if ctx.spread_defaulted {
                !soft.iter().any(|(_, k)| k.value(n).is_some())
            } else {
                !soft.iter().all(|(_, k)| k.value(n).is_some())
            }
        })
        .collect();
    let mut raw = vec![0f64; nodes.len()];
    for (c, key) in &soft {
        let hostname = matches!(key, TopologyKey::Hostname);
        let fingerprint = matching_fingerprint(ctx, c);
        // Domains are few (zones, regions): a short list beats hashing every node's value.
        let mut counts: Vec<(&str, i64)> = Vec::new();
        if !hostname {
            for n in &cache.nodes {
                if !soft.iter().all(|(_, k)| k.value(n).is_some()) || !node_included(ctx, c, n) {
                    continue;
                }
                if let Some(v) = key.value(n) {
                    let add = count_matching_memo(ctx, c, n, fingerprint);
                    match counts.iter_mut().find(|(d, _)| *d == v) {
                        Some((_, cnt)) => *cnt += add,
                        None => counts.push((v, add)),
                    }
                }
            }
        }
        // Upstream takes every considered node as its own hostname domain (no dedup).
        let domains = if hostname {
            ignored.iter().filter(|ig| !**ig).count()
        } else {
            distinct(
                nodes
                    .iter()
                    .zip(&ignored)
                    .filter(|(_, ig)| !**ig)
                    .filter_map(|(n, _)| key.value(n)),
            )
        };
        let weight = ((domains + 2) as f64).ln();
        for (i, n) in nodes.iter().enumerate() {
            if ignored[i] {
                continue;
            }
            let cnt = if hostname {
                count_matching_memo(ctx, c, n, fingerprint)
            } else {
                key.value(n)
                    .and_then(|v| counts.iter().find(|(d, _)| *d == v))
                    .map_or(0, |(_, cnt)| *cnt)
            };
            raw[i] += cnt as f64 * weight + (c.max_skew - 1) as f64;
        }
    }
    let scores: Vec<i64> = raw.iter().map(|s| s.round() as i64).collect();
    let considered: Vec<i64> = scores
        .iter()
        .zip(&ignored)
        .filter(|(_, ig)| !**ig)
        .map(|(s, _)| *s)
        .collect();
    let max = considered.iter().copied().max().unwrap_or(0);
    let min = considered.iter().copied().min().unwrap_or(0);
    scores
        .iter()
        .zip(&ignored)
        .map(|(s, ig)| {
            if *ig {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - s) / max
            }
        })
        .collect()
}

/// How many different values `values` has. Zones and regions are few: a short list is
/// searched first, and only past [`FEW`] values are they sorted.
fn distinct<'a>(mut values: impl Iterator<Item = &'a str>) -> usize {
    const FEW: usize = 32;
    let mut seen: Vec<&str> = Vec::new();
    while let Some(v) = values.next() {
        if seen.contains(&v) {
            continue;
        }
        seen.push(v);
        if seen.len() > FEW {
            seen.extend(values.by_ref());
            seen.sort_unstable();
            seen.dedup();
            break;
        }
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    #[test]
    fn distinct_counts_few_and_many_values() {
        let zones = ["a", "b", "a", "c", "b", "a"];
        assert_eq!(super::distinct(zones.iter().copied()), 3);
        let many: Vec<String> = (0..100).map(|i| format!("v{}", i % 40)).collect();
        assert_eq!(super::distinct(many.iter().map(String::as_str)), 40);
    }

    use super::*;
    use crate::cache::PodInfo;
    use crate::framework::filter::testutil::{node, pod};
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use std::collections::BTreeMap;

    #[test]
    fn emptier_domains_score_higher() {
        let mut cache = Cache::default();
        cache.upsert_node(&node("a", "4", &[("zone", "z1")], vec![]));
        cache.upsert_node(&node("b", "4", &[("zone", "z2")], vec![]));
        cache.set_pod(PodInfo::new(&pod("x", "0", &[("app", "w")]), "a"));
        let p = pod("p", "0", &[("app", "w")]);
        let mut spec = p.spec.clone().unwrap_or_default();
        spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "w".into())])),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let ctx = PodCtx::new(&p, &spec);
        let a = cache.node("a").expect("a");
        let b = cache.node("b").expect("b");
        let s = score(&ctx, &cache, &[a, b]);
        assert!(s[1] > s[0], "{s:?}");
    }

    #[test]
    fn system_default_constraints_spread_by_hostname_even_without_zones() {
        let mut cache = Cache::default();
        cache.upsert_node(&node("a", "4", &[("kubernetes.io/hostname", "a")], vec![]));
        cache.upsert_node(&node("b", "4", &[("kubernetes.io/hostname", "b")], vec![]));
        cache.set_pod(PodInfo::new(&pod("x", "0", &[("app", "w")]), "a"));
        let p = pod("p", "0", &[("app", "w")]);
        let spec = p.spec.clone().unwrap_or_default();
        let mut ctx = PodCtx::new(&p, &spec);
        ctx.set_default_spread(&LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "w".into())])),
            ..Default::default()
        });
        let s = score(
            &ctx,
            &cache,
            &[cache.node("a").expect("a"), cache.node("b").expect("b")],
        );
        assert!(s[1] > s[0], "{s:?}");
    }
}
