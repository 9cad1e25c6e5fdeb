//! NodeResourcesFit (filter): the pod's requests (and one more pod) must fit in what the
//! node's allocatable leaves after its pods and the pods nominated to it.

use crate::cache::NodeInfo;
use crate::framework::resources::Resources;
use crate::framework::{Code, PodCtx, Status};

/// The filter; `nominated` is what higher-priority pods nominated to this node hold.
pub fn filter(
    ctx: &PodCtx<'_>,
    node: &NodeInfo,
    nominated: Option<&(Resources, i64)>,
) -> Result<(), Status> {
    let reasons = insufficient(&ctx.info.requests, node, nominated);
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Status {
            code: Code::Unschedulable,
            plugin: "NodeResourcesFit",
            reasons,
        })
    }
}

/// The "Too many pods" / "Insufficient <resource>" reasons for `req` on `node`.
pub fn insufficient(
    req: &Resources,
    node: &NodeInfo,
    nominated: Option<&(Resources, i64)>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let (extra, extra_pods) = match nominated {
        Some((r, n)) => (Some(r), *n),
        None => (None, 0),
    };
    if node.pods.len() as i64 + extra_pods + 1 > node.allowed_pods {
        reasons.push("Too many pods".to_owned());
    }
    if req.is_zero() {
        return reasons;
    }
    let used = |f: &dyn Fn(&Resources) -> i64| f(&node.requested) + extra.map(f).unwrap_or(0);
    let a = &node.allocatable;
    if req.milli_cpu > 0 && a.milli_cpu < req.milli_cpu + used(&|r| r.milli_cpu) {
        reasons.push("Insufficient cpu".to_owned());
    }
    if req.memory > 0 && a.memory < req.memory + used(&|r| r.memory) {
        reasons.push("Insufficient memory".to_owned());
    }
    if req.ephemeral_storage > 0
        && a.ephemeral_storage < req.ephemeral_storage + used(&|r| r.ephemeral_storage)
    {
        reasons.push("Insufficient ephemeral-storage".to_owned());
    }
    for (name, want) in &req.scalar {
        if *want == 0 {
            continue;
        }
        let have = a.scalar.get(name).copied().unwrap_or(0);
        let taken = node.requested.scalar.get(name).copied().unwrap_or(0)
            + extra.and_then(|e| e.scalar.get(name).copied()).unwrap_or(0);
        if have < want + taken {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PodInfo;
    use crate::framework::filter::testutil::{info, pod};
    use std::sync::Arc;

    #[test]
    fn requests_must_fit_what_is_left() {
        let mut n = info("n", "2", &[], vec![]);
        n.add_pod(Arc::new(PodInfo::new(&pod("o", "1500m", &[]), "n")));
        let small = pod("s", "500m", &[]);
        let spec = small.spec.clone().unwrap_or_default();
        assert!(filter(&PodCtx::new(&small, &spec), &n, None).is_ok());
        let big = pod("b", "600m", &[]);
        let spec = big.spec.clone().unwrap_or_default();
        assert_eq!(
            filter(&PodCtx::new(&big, &spec), &n, None).map_err(|s| s.reasons),
            Err(vec!["Insufficient cpu".to_owned()])
        );
        n.allowed_pods = 1;
        let err = filter(
            &PodCtx::new(&small, &small.spec.clone().unwrap_or_default()),
            &n,
            None,
        );
        assert_eq!(
            err.map_err(|s| s.reasons),
            Err(vec!["Too many pods".to_owned()])
        );
    }
}
