//! NodeResourcesFit (score, LeastAllocated): nodes with more of their CPU and memory left
//! after placing the pod score higher (CPU and memory weighted 1 each).

use crate::cache::NodeInfo;
use crate::framework::PodCtx;
use crate::framework::score::MAX_NODE_SCORE;

fn least_allocated(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// Scores each node.
pub fn score(ctx: &PodCtx<'_>, nodes: &[&NodeInfo]) -> Vec<i64> {
    nodes
        .iter()
        .map(|n| {
            let cpu = least_allocated(
                n.non_zero_cpu + ctx.info.non_zero_cpu,
                n.allocatable.milli_cpu,
            );
            let mem = least_allocated(
                n.non_zero_memory + ctx.info.non_zero_memory,
                n.allocatable.memory,
            );
            (cpu + mem) / 2
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PodInfo;
    use crate::framework::filter::testutil::{info, pod};
    use std::sync::Arc;

    #[test]
    fn emptier_nodes_score_higher() {
        let empty = info("a", "4", &[], vec![]);
        let mut busy = info("b", "4", &[], vec![]);
        busy.add_pod(Arc::new(PodInfo::new(&pod("o", "3", &[]), "b")));
        let p = pod("p", "1", &[]);
        let spec = p.spec.clone().unwrap_or_default();
        let s = score(&PodCtx::new(&p, &spec), &[&empty, &busy]);
        assert!(s[0] > s[1], "{s:?}");
    }
}
