//! NodeName: a pod naming a node in `spec.nodeName` fits only there (pods the scheduler sees
//! normally have none; kept for completeness as upstream's profile has it).

use crate::cache::NodeInfo;
use crate::framework::{Code, PodCtx, Status};

/// Upstream's reason text.
pub const REASON: &str = "node(s) didn't match the requested node name";

/// The filter.
pub fn filter(ctx: &PodCtx<'_>, node: &NodeInfo) -> Result<(), Status> {
    match ctx.spec.node_name.as_deref() {
        Some(n) if !n.is_empty() && n != node.name => Err(Status::new(
            Code::UnschedulableAndUnresolvable,
            "NodeName",
            REASON,
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::filter::testutil::{info, pod};

    #[test]
    fn only_the_named_node_fits() {
        let p = pod("p", "0", &[]);
        let mut spec = p.spec.clone().unwrap_or_default();
        spec.node_name = Some("a".into());
        let ctx = PodCtx::new(&p, &spec);
        assert!(filter(&ctx, &info("a", "1", &[], vec![])).is_ok());
        assert!(filter(&ctx, &info("b", "1", &[], vec![])).is_err());
    }
}
