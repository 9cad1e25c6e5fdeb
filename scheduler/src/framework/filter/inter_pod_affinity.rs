//! InterPodAffinity (filter): the pod's required affinity terms must find matching pods in
//! the node's domain, its required anti-affinity terms must find none, and no existing pod's
//! required anti-affinity may reject it there. Topology counts are computed once (PreFilter).

use std::collections::HashMap;

use crate::cache::{Cache, NodeInfo, PodInfo};
use crate::framework::{Code, PodCtx, Status};

/// Upstream's reason texts.
pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// The pod's own anti-affinity rejects the node.
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// An existing pod's anti-affinity rejects the pod.
pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

type Pair = (String, String);

/// PreFilter state: counts by (topology key, value).
#[derive(Debug, Default)]
pub struct InterPodState {
    /// Domains holding pods that match every required affinity term.
    pub affinity: HashMap<Pair, i64>,
    /// Domains holding pods the pod's required anti-affinity terms match.
    pub anti_affinity: HashMap<Pair, i64>,
    /// Domains whose existing pods' required anti-affinity matches the pod.
    pub existing_anti: HashMap<Pair, i64>,
}

fn pair(cache: &Cache, p: &PodInfo, key: &str) -> Option<Pair> {
    let n = cache.node(&p.node)?;
    n.labels.get(key).map(|v| (key.to_owned(), v.clone()))
}

impl InterPodState {
    /// Computes the counts; `None` when neither the pod nor any existing pod has required
    /// (anti-)affinity terms.
    pub fn new(ctx: &PodCtx<'_>, cache: &Cache) -> Option<InterPodState> {
        let own = ctx.affinity();
        let own_required = own.is_some_and(|a| {
            !a.required_affinity.is_empty() || !a.required_anti_affinity.is_empty()
        });
        if !own_required && cache.with_affinity.is_empty() {
            return None;
        }
        let mut st = InterPodState::default();
        for key in &cache.with_affinity {
            let Some(p) = cache.pods.get(key) else {
                continue;
            };
            let Some(a) = &p.affinity else { continue };
            for t in &a.required_anti_affinity {
                if t.matches(&ctx.namespace, &ctx.labels)
                    && let Some(pr) = pair(cache, p, &t.topology_key)
                {
                    *st.existing_anti.entry(pr).or_insert(0) += 1;
                }
            }
        }
        if let Some(a) = own.filter(|_| own_required) {
            for p in cache.pods.values() {
                if !a.required_affinity.is_empty()
                    && a.required_affinity
                        .iter()
                        .all(|t| t.matches(&p.namespace, &p.labels))
                {
                    for t in &a.required_affinity {
                        if let Some(pr) = pair(cache, p, &t.topology_key) {
                            *st.affinity.entry(pr).or_insert(0) += 1;
                        }
                    }
                }
                for t in &a.required_anti_affinity {
                    if t.matches(&p.namespace, &p.labels)
                        && let Some(pr) = pair(cache, p, &t.topology_key)
                    {
                        *st.anti_affinity.entry(pr).or_insert(0) += 1;
                    }
                }
            }
        }
        Some(st)
    }
}

fn has(counts: &HashMap<Pair, i64>, node: &NodeInfo, key: &str) -> bool {
    node.labels.get(key).is_some_and(|v| {
        counts
            .get(&(key.to_owned(), v.clone()))
            .copied()
            .unwrap_or(0)
            > 0
    })
}

/// The filter.
pub fn filter(
    ctx: &PodCtx<'_>,
    state: Option<&InterPodState>,
    node: &NodeInfo,
) -> Result<(), Status> {
    let Some(st) = state else {
        return Ok(());
    };
    if let Some(a) = ctx.affinity() {
        if !a.required_affinity.is_empty() {
            let mut pods_exist = true;
            for t in &a.required_affinity {
                if !node.labels.contains_key(&t.topology_key) {
                    return Err(Status::new(
                        Code::UnschedulableAndUnresolvable,
                        "InterPodAffinity",
                        REASON_AFFINITY,
                    ));
                }
                if !has(&st.affinity, node, &t.topology_key) {
                    pods_exist = false;
                }
            }
            // The first pod of a group with affinity to itself may go anywhere.
            let first_of_group = st.affinity.is_empty()
                && a.required_affinity
                    .iter()
                    .all(|t| t.matches(&ctx.namespace, &ctx.labels));
            if !pods_exist && !first_of_group {
                return Err(Status::new(
                    Code::UnschedulableAndUnresolvable,
                    "InterPodAffinity",
                    REASON_AFFINITY,
                ));
            }
        }
        if a.required_anti_affinity
            .iter()
            .any(|t| has(&st.anti_affinity, node, &t.topology_key))
        {
            return Err(Status::new(
                Code::Unschedulable,
                "InterPodAffinity",
                REASON_ANTI_AFFINITY,
            ));
        }
    }
    if !st.existing_anti.is_empty()
        && st
            .existing_anti
            .keys()
            .any(|(k, v)| node.labels.get(k) == Some(v))
    {
        return Err(Status::new(
            Code::Unschedulable,
            "InterPodAffinity",
            REASON_EXISTING_ANTI_AFFINITY,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{node, pod};
    use k8s_openapi::api::core::v1::{Affinity, Pod, PodAffinityTerm, PodAntiAffinity};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use std::collections::BTreeMap;

    fn anti(p: &mut Pod, app: &str) {
        if let Some(spec) = p.spec.as_mut() {
            spec.affinity = Some(Affinity {
                pod_anti_affinity: Some(PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![
                        PodAffinityTerm {
                            label_selector: Some(LabelSelector {
                                match_labels: Some(BTreeMap::from([("app".into(), app.into())])),
                                ..Default::default()
                            }),
                            topology_key: "kubernetes.io/hostname".into(),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }

    #[test]
    fn anti_affinity_keeps_replicas_apart_both_ways() {
        let mut cache = Cache::default();
        for n in ["a", "b"] {
            cache.upsert_node(&node(n, "4", &[("kubernetes.io/hostname", n)], vec![]));
        }
        let mut first = pod("first", "0", &[("app", "web")]);
        anti(&mut first, "web");
        cache.set_pod(PodInfo::new(&first, "a"));
        // A plain pod labelled app=web is refused by the existing pod's anti-affinity.
        let plain = pod("plain", "0", &[("app", "web")]);
        let spec = plain.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&plain, &spec);
        let st = InterPodState::new(&ctx, &cache);
        let a = cache.node("a").expect("a");
        assert_eq!(
            filter(&ctx, st.as_ref(), a).map_err(|s| s.reasons),
            Err(vec![REASON_EXISTING_ANTI_AFFINITY.to_owned()])
        );
        // A second replica with its own anti-affinity avoids node a, fits b.
        let mut second = pod("second", "0", &[("app", "web")]);
        anti(&mut second, "web");
        let spec = second.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&second, &spec);
        let st = InterPodState::new(&ctx, &cache);
        assert!(filter(&ctx, st.as_ref(), cache.node("a").expect("a")).is_err());
        assert!(filter(&ctx, st.as_ref(), cache.node("b").expect("b")).is_ok());
    }
}
