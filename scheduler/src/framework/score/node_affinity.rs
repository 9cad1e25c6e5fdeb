//! NodeAffinity (score): the sum of the weights of the preferred node affinity terms a node
//! matches, normalised so the best node gets 100.

use crate::cache::NodeInfo;
use crate::framework::PodCtx;
use crate::framework::score::default_normalize;
use crate::framework::selector::term_matches;

/// Scores each node.
pub fn score(ctx: &PodCtx<'_>, nodes: &[&NodeInfo]) -> Vec<i64> {
    if ctx.preferred_node_affinity.is_empty() {
        return vec![0; nodes.len()];
    }
    let mut scores: Vec<i64> = nodes
        .iter()
        .map(|n| {
            ctx.preferred_node_affinity
                .iter()
                .filter(|t| t.weight != 0 && term_matches(&t.preference, &n.name, &n.labels))
                .map(|t| i64::from(t.weight))
                .sum()
        })
        .collect();
    default_normalize(&mut scores, false);
    scores
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
    };

    #[test]
    fn preferred_terms_pull_the_pod() {
        let p = pod("p", "0", &[]);
        let mut spec = p.spec.clone().unwrap_or_default();
        spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    PreferredSchedulingTerm {
                        weight: 50,
                        preference: NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "disk".into(),
                                operator: "In".into(),
                                values: Some(vec!["ssd".into()]),
                            }]),
                            match_fields: None,
                        },
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let a = info("a", "1", &[("disk", "ssd")], vec![]);
        let b = info("b", "1", &[], vec![]);
        assert_eq!(score(&PodCtx::new(&p, &spec), &[&a, &b]), vec![100, 0]);
    }
}
