//! NodeUnschedulable: cordoned nodes take no pods unless the pod tolerates the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::Taint;

use crate::cache::NodeInfo;
use crate::framework::selector::tolerated;
use crate::framework::{Code, PodCtx, Status};

/// Upstream's reason text.
pub const REASON: &str = "node(s) were unschedulable";

/// The filter.
pub fn filter(ctx: &PodCtx<'_>, node: &NodeInfo) -> Result<(), Status> {
    if !node.unschedulable {
        return Ok(());
    }
    let taint = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    };
    if tolerated(ctx.tolerations, &taint) {
        return Ok(());
    }
    Err(Status::new(
        Code::UnschedulableAndUnresolvable,
        "NodeUnschedulable",
        REASON,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod};
    use k8s_openapi::api::core::v1::Toleration;

    #[test]
    fn cordoned_nodes_are_rejected_unless_tolerated() {
        let mut n = info("n", "1", &[], vec![]);
        n.unschedulable = true;
        let p = pod("p", "0", &[]);
        let spec = p.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&p, &spec);
        assert_eq!(
            filter(&ctx, &n).map_err(|s| s.reasons),
            Err(vec![REASON.to_owned()])
        );
        let mut spec2 = spec.clone();
        spec2.tolerations = Some(vec![Toleration {
            key: Some("node.kubernetes.io/unschedulable".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
        let ctx = PodCtx::new(&p, &spec2);
        assert!(filter(&ctx, &n).is_ok());
    }
}
