//! InterPodAffinity (score): preferred affinity of the pod to existing pods (and theirs to
//! it, symmetrically), minus preferred anti-affinity, summed per topology domain and
//! normalised between the lowest and highest node.

use std::collections::HashMap;

use crate::cache::{AffinityTerm, Cache, NodeInfo, PodInfo};
use crate::framework::PodCtx;
use crate::framework::score::MAX_NODE_SCORE;

/// Weight of existing pods' required affinity terms that match the pod (upstream's
/// `hardPodAffinityWeight` default).
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

fn add(
    scores: &mut HashMap<(String, String), i64>,
    cache: &Cache,
    existing: &PodInfo,
    term: &AffinityTerm,
    weight: i64,
) {
    if let Some(v) = cache
        .node(&existing.node)
        .and_then(|n| n.labels.get(&term.topology_key))
    {
        *scores
            .entry((term.topology_key.clone(), v.clone()))
            .or_insert(0) += weight;
    }
}

/// Scores each node.
pub fn score(ctx: &PodCtx<'_>, cache: &Cache, nodes: &[&NodeInfo]) -> Vec<i64> {
    let own = ctx
        .affinity()
        .filter(|a| !a.preferred_affinity.is_empty() || !a.preferred_anti_affinity.is_empty());
    if own.is_none() && cache.with_affinity.is_empty() {
        return vec![0; nodes.len()];
    }
    let mut topo: HashMap<(String, String), i64> = HashMap::new();
    if let Some(a) = own {
        for p in cache.pods.values() {
            for t in &a.preferred_affinity {
                if t.matches(&p.namespace, &p.labels) {
                    add(&mut topo, cache, p, t, t.weight);
                }
            }
            for t in &a.preferred_anti_affinity {
                if t.matches(&p.namespace, &p.labels) {
                    add(&mut topo, cache, p, t, -t.weight);
                }
            }
        }
    }
    for key in &cache.with_affinity {
        let Some(p) = cache.pods.get(key) else {
            continue;
        };
        let Some(a) = &p.affinity else { continue };
        for t in &a.required_affinity {
            if t.matches(&ctx.namespace, &ctx.labels) {
                add(&mut topo, cache, p, t, HARD_POD_AFFINITY_WEIGHT);
            }
        }
        for t in &a.preferred_affinity {
            if t.matches(&ctx.namespace, &ctx.labels) {
                add(&mut topo, cache, p, t, t.weight);
            }
        }
        for t in &a.preferred_anti_affinity {
            if t.matches(&ctx.namespace, &ctx.labels) {
                add(&mut topo, cache, p, t, -t.weight);
            }
        }
    }
    if topo.is_empty() {
        return vec![0; nodes.len()];
    }
    let raw: Vec<i64> = nodes
        .iter()
        .map(|n| {
            topo.iter()
                .filter(|((k, v), _)| n.labels.get(k) == Some(v))
                .map(|(_, s)| *s)
                .sum()
        })
        .collect();
    let max = raw.iter().copied().max().unwrap_or(0);
    let min = raw.iter().copied().min().unwrap_or(0);
    raw.iter()
        .map(|s| {
            if max == min {
                0
            } else {
                MAX_NODE_SCORE * (s - min) / (max - min)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{node, pod};
    use k8s_openapi::api::core::v1::{
        Affinity, PodAffinity, PodAffinityTerm, WeightedPodAffinityTerm,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use std::collections::BTreeMap;

    #[test]
    fn preferred_affinity_pulls_towards_matching_pods() {
        let mut cache = Cache::default();
        cache.upsert_node(&node("a", "4", &[("zone", "z1")], vec![]));
        cache.upsert_node(&node("b", "4", &[("zone", "z2")], vec![]));
        cache.set_pod(PodInfo::new(&pod("db", "0", &[("app", "db")]), "b"));
        let p = pod("p", "0", &[]);
        let mut spec = p.spec.clone().unwrap_or_default();
        spec.affinity = Some(Affinity {
            pod_affinity: Some(PodAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    WeightedPodAffinityTerm {
                        weight: 10,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(LabelSelector {
                                match_labels: Some(BTreeMap::from([("app".into(), "db".into())])),
                                ..Default::default()
                            }),
                            topology_key: "zone".into(),
                            ..Default::default()
                        },
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut p2 = p;
        p2.spec = Some(spec.clone());
        let ctx = PodCtx::new(&p2, &spec);
        let s = score(
            &ctx,
            &cache,
            &[cache.node("a").expect("a"), cache.node("b").expect("b")],
        );
        assert_eq!(s, vec![0, 100]);
    }
}
