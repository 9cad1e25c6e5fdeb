//! NodeAffinity (filter): the node must match `spec.nodeSelector` and one of the required
//! node affinity terms.

use crate::cache::NodeInfo;
use crate::framework::selector::node_selector_matches;
use crate::framework::{Code, PodCtx, Status};

/// Upstream's reason text.
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// True when `node` satisfies the pod's nodeSelector and required node affinity.
pub fn node_matches(ctx: &PodCtx<'_>, node: &NodeInfo) -> bool {
    if let Some(sel) = ctx.node_selector
        && !sel.iter().all(|(k, v)| node.labels.get(k) == Some(v))
    {
        return false;
    }
    if let Some(req) = ctx.required_node_affinity
        && !node_selector_matches(req, &node.name, &node.labels)
    {
        return false;
    }
    true
}

/// The filter.
pub fn filter(ctx: &PodCtx<'_>, node: &NodeInfo) -> Result<(), Status> {
    if node_matches(ctx, node) {
        Ok(())
    } else {
        Err(Status::new(
            Code::UnschedulableAndUnresolvable,
            "NodeAffinity",
            REASON,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };
    use std::collections::BTreeMap;

    #[test]
    fn node_selector_and_required_terms_must_both_match() {
        let p = pod("p", "0", &[]);
        let mut spec = p.spec.clone().unwrap_or_default();
        spec.node_selector = Some(BTreeMap::from([("disk".to_owned(), "ssd".to_owned())]));
        spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "zone".into(),
                            operator: "In".into(),
                            values: Some(vec!["a".into(), "b".into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let ctx = PodCtx::new(&p, &spec);
        assert!(
            filter(
                &ctx,
                &info("n", "1", &[("disk", "ssd"), ("zone", "b")], vec![])
            )
            .is_ok()
        );
        assert!(
            filter(
                &ctx,
                &info("n", "1", &[("disk", "ssd"), ("zone", "c")], vec![])
            )
            .is_err()
        );
        assert!(filter(&ctx, &info("n", "1", &[("zone", "a")], vec![])).is_err());
    }
}
