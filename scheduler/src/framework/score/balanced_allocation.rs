//! NodeResourcesBalancedAllocation: nodes whose CPU and memory fractions would be closest
//! to each other after placing the pod score higher (`(1 - std) * 100`).

use crate::cache::NodeInfo;
use crate::framework::PodCtx;
use crate::framework::score::MAX_NODE_SCORE;

/// Scores each node.
pub fn score(ctx: &PodCtx<'_>, nodes: &[&NodeInfo]) -> Vec<i64> {
    nodes
        .iter()
        .map(|n| {
            let frac = |req: i64, cap: i64| {
                if cap <= 0 {
                    1.0
                } else {
                    (req as f64 / cap as f64).min(1.0)
                }
            };
            let cpu = frac(
                n.non_zero_cpu + ctx.info.non_zero_cpu,
                n.allocatable.milli_cpu,
            );
            let mem = frac(
                n.non_zero_memory + ctx.info.non_zero_memory,
                n.allocatable.memory,
            );
            let std = (cpu - mem).abs() / 2.0;
            ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod};

    #[test]
    fn balanced_use_scores_higher() {
        let n = info("a", "4", &[], vec![]);
        let p = pod("p", "2", &[]);
        let spec = p.spec.clone().unwrap_or_default();
        let lopsided = score(&PodCtx::new(&p, &spec), &[&n])[0];
        assert!(lopsided < MAX_NODE_SCORE && lopsided > 0, "{lopsided}");
    }
}
