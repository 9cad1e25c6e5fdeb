//! NodePorts: the pod's host ports must be free on the node.

use crate::cache::NodeInfo;
use crate::framework::{Code, PodCtx, Status};

/// Upstream's reason text.
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The filter.
pub fn filter(ctx: &PodCtx<'_>, node: &NodeInfo) -> Result<(), Status> {
    let clash = ctx
        .info
        .ports
        .iter()
        .any(|want| node.ports.iter().any(|used| used.conflicts(want)));
    if clash {
        Err(Status::new(Code::Unschedulable, "NodePorts", REASON))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{HostPort, PodInfo};
    use crate::framework::filter::testutil::{info, pod};
    use std::sync::Arc;

    #[test]
    fn a_used_host_port_rejects_the_node() {
        let p = pod("p", "0", &[]);
        let spec = p.spec.clone().unwrap_or_default();
        let mut ctx = PodCtx::new(&p, &spec);
        ctx.info.ports = vec![HostPort {
            protocol: "TCP".into(),
            ip: "0.0.0.0".into(),
            port: 80,
        }];
        let mut n = info("n", "1", &[], vec![]);
        assert!(filter(&ctx, &n).is_ok());
        let mut other = PodInfo::new(&pod("o", "0", &[]), "n");
        other.ports = vec![HostPort {
            protocol: "TCP".into(),
            ip: "10.0.0.1".into(),
            port: 80,
        }];
        n.add_pod(Arc::new(other));
        assert!(filter(&ctx, &n).is_err());
    }
}
