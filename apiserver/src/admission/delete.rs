//! The validating plugins for a DELETE, as upstream runs them: ValidatingAdmissionPolicy
//! (and the other validating plugins, which let deletes through) see no `object` and the
//! stored object as `oldObject`, after the mutating webhooks and before the validating
//! ones.

use super::{Chain, Operation};
use crate::error::Result;
use crate::registry::catalog::ResourceInfo;

impl Chain {
    /// The validating plugins for the delete of `namespace`/`name` of `r` (the stored
    /// object read from the store's local state).
    pub fn validate_delete(
        &self,
        r: &ResourceInfo,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<()> {
        let stored = self.stored_if_delete(Operation::Delete, r, namespace, name, None);
        self.validate(
            Operation::Delete,
            r.group,
            r.plural,
            namespace,
            name,
            dry_run,
            None,
            stored.as_ref(),
        )
    }
}
