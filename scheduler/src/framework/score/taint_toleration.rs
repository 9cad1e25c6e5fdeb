//! TaintToleration (score): fewer untolerated `PreferNoSchedule` taints score higher.

use crate::cache::NodeInfo;
use crate::framework::PodCtx;
use crate::framework::score::default_normalize;
use crate::framework::selector::tolerates;

/// Scores each node.
pub fn score(ctx: &PodCtx<'_>, nodes: &[&NodeInfo]) -> Vec<i64> {
    let mut scores: Vec<i64> = nodes
        .iter()
        .map(|n| {
            n.taints
                .iter()
                .filter(|t| t.effect == "PreferNoSchedule")
                .filter(|t| {
                    !ctx.tolerations.iter().any(|tol| {
                        let e = tol.effect.as_deref().unwrap_or("");
                        (e.is_empty() || e == "PreferNoSchedule") && tolerates(tol, t)
                    })
                })
                .count() as i64
        })
        .collect();
    default_normalize(&mut scores, true);
    scores
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod, taint};

    #[test]
    fn prefer_no_schedule_taints_push_the_pod_away() {
        let p = pod("p", "0", &[]);
        let spec = p.spec.clone().unwrap_or_default();
        let a = info("a", "1", &[], vec![taint("k", "v", "PreferNoSchedule")]);
        let b = info("b", "1", &[], vec![]);
        assert_eq!(score(&PodCtx::new(&p, &spec), &[&a, &b]), vec![0, 100]);
    }
}
