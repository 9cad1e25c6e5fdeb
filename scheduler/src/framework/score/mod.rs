//! Score plugins with upstream's default weights: TaintToleration 3, NodeAffinity 2,
//! PodTopologySpread 2, InterPodAffinity 2, NodeResourcesFit 1 (LeastAllocated),
//! NodeResourcesBalancedAllocation 1. Each plugin yields 0–100 per node after normalising.

pub mod balanced_allocation;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_resources_fit;
pub mod pod_topology_spread;
pub mod taint_toleration;

use crate::cache::{Cache, NodeInfo};
use crate::framework::PodCtx;

/// The highest score a plugin gives a node.
pub const MAX_NODE_SCORE: i64 = 100;

/// Scales `scores` so the highest becomes 100 (or, `reverse`, so the highest becomes 0),
/// as upstream's `helper.DefaultNormalizeScore`.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}

/// The weighted total score of each feasible node.
pub fn score_nodes(ctx: &PodCtx<'_>, cache: &Cache, nodes: &[&NodeInfo]) -> Vec<i64> {
    let mut total = vec![0i64; nodes.len()];
    let mut add = |scores: Vec<i64>, weight: i64| {
        for (t, s) in total.iter_mut().zip(scores) {
            *t += s * weight;
        }
    };
    add(taint_toleration::score(ctx, nodes), 3);
    add(node_affinity::score(ctx, nodes), 2);
    add(pod_topology_spread::score(ctx, cache, nodes), 2);
    add(inter_pod_affinity::score(ctx, cache, nodes), 2);
    add(node_resources_fit::score(ctx, nodes), 1);
    add(balanced_allocation::score(ctx, nodes), 1);
    total
}
