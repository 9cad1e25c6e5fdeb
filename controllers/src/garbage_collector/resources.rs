//! Discovery of the resources the garbage collector and the namespace controller work on.

use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};

/// One served resource at its preferred version.
#[derive(Clone, Debug)]
pub(crate) struct Resource {
    /// Group, version, kind and plural.
    pub(crate) ar: ApiResource,
    /// Whether it lives in namespaces.
    pub(crate) namespaced: bool,
    /// Verbs discovery reports.
    pub(crate) verbs: Vec<String>,
}

impl Resource {
    /// Whether every verb in `verbs` is supported.
    pub(crate) fn supports(&self, verbs: &[&str]) -> bool {
        verbs.iter().all(|v| self.verbs.iter().any(|x| x == v))
    }
}

/// Events are ignored (upstream's GC ignores both `events` resources; events.k8s.io events
/// are the core events seen through another group).
fn ignored(ar: &ApiResource) -> bool {
    ar.plural == "events" && (ar.group.is_empty() || ar.group == "events.k8s.io")
}

/// Every resource at its preferred version (subresources excluded).
pub(crate) async fn discover(client: &kube::Client) -> Result<Vec<Resource>, kube::Error> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            out.push(to_resource(ar, &caps));
        }
    }
    Ok(out)
}

fn to_resource(ar: ApiResource, caps: &ApiCapabilities) -> Resource {
    Resource {
        namespaced: matches!(caps.scope, Scope::Namespaced),
        verbs: caps.operations.clone(),
        ar,
    }
}

/// Resources the garbage collector follows: list, watch and delete, not events.
pub(crate) fn deletable(all: &[Resource]) -> Vec<Resource> {
    all.iter()
        .filter(|r| r.supports(&["list", "watch", "delete"]) && !ignored(&r.ar))
        .cloned()
        .collect()
}
