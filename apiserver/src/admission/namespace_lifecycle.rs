//! `NamespaceLifecycle` (upstream's `plugin/pkg/admission/namespace/lifecycle`), the part
//! that judges deletes: the namespaces the control plane itself lives in — `default`,
//! `kube-system` and `kube-public` (kube-apiserver's immortal namespaces) — may not be
//! deleted. Without this, `kubectl delete namespace --all` takes the controller manager's
//! and the scheduler's Leases (kube-system) with it and nothing reconciles any more.
//! The other half of the plugin — no new objects in a missing or terminating namespace —
//! is in the handlers' create path, which reads the namespace anyway.

use serde_json::{Map, Value};

use super::{Attributes, Lookup, MutatingAdmission, Operation};
use crate::error::Result;

/// The plugin.
pub struct NamespaceLifecycle;

/// Namespaces that may never be deleted (kube-apiserver's `immortalNamespaces`).
pub const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];

impl MutatingAdmission for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    fn admit(
        &self,
        _lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        _obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        self.check(a)
    }
}

impl NamespaceLifecycle {
    /// Refuses the delete of an immortal namespace.
    fn check(&self, a: &Attributes<'_>) -> Result<()> {
        if a.operation == Operation::Delete
            && a.is_core("namespaces")
            && a.subresource.is_empty()
            && IMMORTAL.contains(&a.name)
        {
            return Err(forbidden(a.name));
        }
        Ok(())
    }
}

/// Upstream's answer: `namespaces "kube-system" is forbidden: this namespace may not be
/// deleted`.
fn forbidden(name: &str) -> crate::error::ApiError {
    let resource = crate::error::GroupResource::new("", "namespaces");
    crate::error::ApiError::Forbidden {
        message: format!("{resource} \"{name}\" is forbidden: this namespace may not be deleted"),
        resource,
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::UserInfo;

    fn attrs<'a>(
        op: Operation,
        resource: &'a str,
        name: &'a str,
        user: &'a UserInfo,
    ) -> Attributes<'a> {
        Attributes {
            operation: op,
            group: "",
            resource,
            subresource: "",
            namespace: "",
            name,
            user,
            dry_run: false,
        }
    }

    #[test]
    fn immortal_namespaces_may_not_be_deleted() {
        let user = UserInfo::default();
        for name in IMMORTAL {
            let err = NamespaceLifecycle
                .check(&attrs(Operation::Delete, "namespaces", name, &user))
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
            );
        }
        for (op, resource, name) in [
            (Operation::Delete, "namespaces", "team-a"),
            (Operation::Delete, "namespaces", "kube-node-lease"),
            (Operation::Update, "namespaces", "kube-system"),
            (Operation::Delete, "configmaps", "default"),
        ] {
            assert!(
                NamespaceLifecycle
                    .check(&attrs(op, resource, name, &user))
                    .is_ok()
            );
        }
    }
}
