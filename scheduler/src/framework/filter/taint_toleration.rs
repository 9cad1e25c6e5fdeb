//! TaintToleration (filter): a node with a `NoSchedule` or `NoExecute` taint the pod does not
//! tolerate is rejected, naming the first such taint.

use crate::cache::NodeInfo;
use crate::framework::selector::tolerated;
use crate::framework::{Code, PodCtx, Status};

/// The filter.
pub fn filter(ctx: &PodCtx<'_>, node: &NodeInfo) -> Result<(), Status> {
    for taint in &node.taints {
        if taint.effect != "NoSchedule" && taint.effect != "NoExecute" {
            continue;
        }
        if !tolerated(ctx.tolerations, taint) {
            return Err(Status::new(
                Code::UnschedulableAndUnresolvable,
                "TaintToleration",
                format!(
                    "node(s) had untolerated taint {{{}: {}}}",
                    taint.key,
                    taint.value.as_deref().unwrap_or("")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod, taint};
    use k8s_openapi::api::core::v1::Toleration;

    #[test]
    fn untolerated_taints_are_named_and_prefer_no_schedule_is_ignored() {
        let p = pod("p", "0", &[]);
        let spec = p.spec.clone().unwrap_or_default();
        let ctx = PodCtx::new(&p, &spec);
        let n = info("n", "1", &[], vec![taint("dedicated", "gpu", "NoSchedule")]);
        assert_eq!(
            filter(&ctx, &n).map_err(|s| s.reasons),
            Err(vec![
                "node(s) had untolerated taint {dedicated: gpu}".to_owned()
            ])
        );
        let soft = info("n", "1", &[], vec![taint("a", "b", "PreferNoSchedule")]);
        assert!(filter(&ctx, &soft).is_ok());
        let mut spec2 = spec.clone();
        spec2.tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("gpu".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }]);
        assert!(filter(&PodCtx::new(&p, &spec2), &n).is_ok());
    }
}
