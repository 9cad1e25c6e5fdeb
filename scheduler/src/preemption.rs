//! PostFilter preemption (upstream's DefaultPreemption): on nodes where removing pods could
//! help, find the fewest, lowest-priority victims that make the pod fit (reprieving as many
//! as possible, PodDisruptionBudget-protected pods first), then pick the node whose victims
//! violate the fewest budgets, have the lowest top priority, the lowest priority sum and are
//! the fewest.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cache::{Cache, NodeInfo, PodInfo};
use crate::framework::selector::Selector;
use crate::framework::{CycleState, FitError, PodCtx, Rng, Status, run_filters};

/// Reason for nodes where no set of victims helps.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// Reason for nodes where preemption cannot help at all.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// A PodDisruptionBudget as preemption sees it.
#[derive(Debug, Clone)]
pub struct Pdb {
    /// Namespace.
    pub namespace: String,
    /// Its pod selector.
    pub selector: Selector,
    /// `status.disruptionsAllowed`.
    pub allowed: i64,
}

/// A node where preemption would make the pod fit.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// Pods to evict.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims a PodDisruptionBudget protects.
    pub pdb_violations: usize,
}

/// What PostFilter decided.
#[derive(Debug)]
pub enum Outcome {
    /// The pod may not preempt; the message says why.
    NotEligible(String),
    /// No node helps; the `preemption: …` message.
    NoCandidate(String),
    /// Evict these victims and nominate the node.
    Preempt(Candidate),
}

/// Runs preemption for a pod no node fits.
pub fn preempt(
    ctx: &PodCtx<'_>,
    cache: &Cache,
    fit: &FitError,
    pdbs: &[Pdb],
    rng: &mut Rng,
) -> Outcome {
    if ctx.spec.preemption_policy.as_deref() == Some("Never") {
        return Outcome::NotEligible(
            "preemption: not eligible due to preemptionPolicy=Never.".into(),
        );
    }
    if let Some(nominated) = ctx
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
        && let Some(node) = cache.node(nominated)
        && fit
            .node_status
            .get(nominated)
            .is_none_or(|s| s.code == crate::framework::Code::Unschedulable)
        && node
            .pods
            .iter()
            .any(|p| p.terminating && p.priority < ctx.priority())
    {
        return Outcome::NotEligible(
            "preemption: not eligible due to a terminating pod on the nominated node.".into(),
        );
    }
    let potential: Vec<&NodeInfo> = cache
        .nodes
        .iter()
        .filter(|n| {
            fit.node_status
                .get(&n.name)
                .is_some_and(|s| s.code == crate::framework::Code::Unschedulable)
        })
        .collect();
    let no_candidate = |statuses: HashMap<String, Status>| {
        let e = FitError {
            num_all_nodes: cache.nodes.len(),
            node_status: statuses,
            absent_reason: Some(NOT_HELPFUL.into()),
            post_filter_msg: None,
            pre_filter_msg: None,
        };
        Outcome::NoCandidate(format!("preemption: {}", e.message()))
    };
    if potential.is_empty() {
        return no_candidate(HashMap::new());
    }
    let state = CycleState::prefilter(ctx, cache);
    let want = (potential.len() / 10).max(100);
    let offset = rng.below(potential.len());
    let mut candidates = Vec::new();
    let mut statuses = HashMap::new();
    for i in 0..potential.len() {
        let node = potential[(offset + i) % potential.len()];
        match select_victims(ctx, &state, node, pdbs) {
            Some(c) => {
                candidates.push(c);
                if candidates.len() >= want {
                    break;
                }
            }
            None => {
                statuses.insert(
                    node.name.clone(),
                    Status::new(
                        crate::framework::Code::UnschedulableAndUnresolvable,
                        "DefaultPreemption",
                        NO_VICTIMS,
                    ),
                );
            }
        }
    }
    if candidates.is_empty() {
        return no_candidate(statuses);
    }
    Outcome::Preempt(pick(candidates))
}

/// Upstream's `pickOneNodeForPreemption` criteria, in order.
fn pick(mut candidates: Vec<Candidate>) -> Candidate {
    candidates.sort_by_key(|c| {
        let top = c
            .victims
            .iter()
            .map(|v| v.priority)
            .max()
            .unwrap_or(i32::MIN);
        let sum: i64 = c
            .victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum();
        (c.pdb_violations, top, sum, c.victims.len())
    });
    candidates.swap_remove(0)
}

/// Finds the victims on `node`, or `None` when evicting every lower-priority pod would not
/// make the pod fit.
pub fn select_victims(
    ctx: &PodCtx<'_>,
    state: &CycleState,
    node: &NodeInfo,
    pdbs: &[Pdb],
) -> Option<Candidate> {
    let mut n = node.clone();
    let mut lower: Vec<Arc<PodInfo>> = n
        .pods
        .iter()
        .filter(|p| p.priority < ctx.priority())
        .cloned()
        .collect();
    if lower.is_empty() {
        return None;
    }
    for p in &lower {
        n.remove_pod(&p.key);
    }
    if run_filters(ctx, state, &n).is_err() {
        return None;
    }
    // Most important first: higher priority, then earlier start.
    lower.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.start_time.cmp(&b.start_time))
    });
    let mut allowed: Vec<i64> = pdbs.iter().map(|p| p.allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for p in lower {
        let mut violates = false;
        for (i, pdb) in pdbs.iter().enumerate() {
            if pdb.namespace == p.namespace && pdb.selector.matches(&p.labels) {
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violates = true;
                }
            }
        }
        if violates {
            violating.push(p);
        } else {
            fine.push(p);
        }
    }
    let mut victims = Vec::new();
    let mut pdb_violations = 0;
    for (group, counts) in [(violating, true), (fine, false)] {
        for p in group {
            n.add_pod(p.clone());
            if run_filters(ctx, state, &n).is_err() {
                n.remove_pod(&p.key);
                if counts {
                    pdb_violations += 1;
                }
                victims.push(p);
            }
        }
    }
    if victims.is_empty() {
        return None;
    }
    Some(Candidate {
        node: node.name.clone(),
        victims,
        pdb_violations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{node, pod};
    use crate::framework::{Outcome as Sched, schedule_pod};
    use k8s_openapi::api::core::v1::Pod;

    fn with_priority(mut p: Pod, prio: i32) -> Pod {
        if let Some(s) = p.spec.as_mut() {
            s.priority = Some(prio);
        }
        p
    }

    fn fit_error(ctx: &PodCtx<'_>, cache: &Cache) -> FitError {
        match schedule_pod(ctx, cache, &mut 0, 0, &mut Rng::seeded()) {
            Sched::NoFit(e) => e,
            Sched::Fit { node } => panic!("unexpectedly fits on {node}"),
        }
    }

    #[test]
    fn evicts_the_fewest_lowest_priority_pods() {
        let mut cache = Cache::default();
        cache.upsert_node(&node("a", "4", &[], vec![]));
        cache.upsert_node(&node("b", "4", &[], vec![]));
        // a: two low pods of 2 CPU; b: one mid pod of 4 CPU.
        cache.set_pod(PodInfo::new(&with_priority(pod("l1", "2", &[]), 1), "a"));
        cache.set_pod(PodInfo::new(&with_priority(pod("l2", "2", &[]), 1), "a"));
        cache.set_pod(PodInfo::new(&with_priority(pod("m", "4", &[]), 5), "b"));
        let p = with_priority(pod("high", "2", &[]), 100);
        let spec = p.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&p, &spec);
        let fe = fit_error(&ctx, &cache);
        match preempt(&ctx, &cache, &fe, &[], &mut Rng::seeded()) {
            Outcome::Preempt(c) => {
                assert_eq!(c.node, "a");
                assert_eq!(c.victims.len(), 1);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reports_no_victims_and_honours_never() {
        let mut cache = Cache::default();
        cache.upsert_node(&node("a", "4", &[], vec![]));
        let p = with_priority(pod("big", "100", &[]), 0);
        let mut spec = p.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&p, &spec);
        let fe = fit_error(&ctx, &cache);
        match preempt(&ctx, &cache, &fe, &[], &mut Rng::seeded()) {
            Outcome::NoCandidate(m) => assert_eq!(
                m,
                "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
            ),
            other => panic!("{other:?}"),
        }
        spec.preemption_policy = Some("Never".into());
        let ctx = PodCtx::new(&p, &spec);
        assert!(matches!(
            preempt(&ctx, &cache, &fe, &[], &mut Rng::seeded()),
            Outcome::NotEligible(_)
        ));
    }

    #[test]
    fn prefers_victims_no_disruption_budget_protects() {
        let mut cache = Cache::default();
        cache.upsert_node(&node("a", "2", &[], vec![]));
        cache.upsert_node(&node("b", "2", &[], vec![]));
        cache.set_pod(PodInfo::new(
            &with_priority(pod("guarded", "2", &[("app", "db")]), 1),
            "a",
        ));
        cache.set_pod(PodInfo::new(
            &with_priority(pod("free", "2", &[("app", "web")]), 1),
            "b",
        ));
        let pdb = Pdb {
            namespace: "default".into(),
            selector: Selector::new(Some(
                &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some(std::collections::BTreeMap::from([(
                        "app".into(),
                        "db".into(),
                    )])),
                    ..Default::default()
                },
            )),
            allowed: 0,
        };
        let p = with_priority(pod("high", "2", &[]), 100);
        let spec = p.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&p, &spec);
        let fe = fit_error(&ctx, &cache);
        for _ in 0..10 {
            match preempt(
                &ctx,
                &cache,
                &fe,
                std::slice::from_ref(&pdb),
                &mut Rng::seeded(),
            ) {
                Outcome::Preempt(c) => {
                    assert_eq!(c.node, "b");
                    assert_eq!(c.pdb_violations, 0);
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
