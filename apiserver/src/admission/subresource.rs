//! Admission of creates on subresources that carry their own object — `pods/eviction`
//! (Eviction), `pods/binding` (Binding), `serviceaccounts/token` (TokenRequest) — as
//! upstream's create handler of a subresource runs it: the built-in mutating plugins (the
//! caller's [`Chain::admit`]), then MutatingAdmissionWebhook, the validating plugins
//! (ValidatingAdmissionPolicy included) and ValidatingAdmissionWebhook, each seeing
//! operation `CREATE` on the parent resource with the subresource (rules name
//! `pods/eviction`, …) and the subresource's object.

use serde_json::{Map, Value};

use super::{Chain, Operation};
use crate::error::Result;
use crate::registry::catalog::ResourceInfo;

impl Chain {
    /// The dynamic and validating part of admission for a create on a subresource of `r`
    /// (after [`Chain::admit`]): the mutating webhooks may patch `obj`.
    pub async fn admit_subresource_create(
        &self,
        r: &ResourceInfo,
        namespace: &str,
        name: &str,
        dry_run: bool,
        obj: &mut Map<String, Value>,
    ) -> Result<()> {
        let op = Operation::Create;
        self.admit_webhooks(op, r, namespace, name, dry_run, Some(obj), None)
            .await?;
        self.validate(
            op,
            r.group,
            r.plural,
            namespace,
            name,
            dry_run,
            Some(obj),
            None,
        )?;
        self.validate_webhooks(op, r, namespace, name, dry_run, Some(obj), None, None)
            .await
    }
}
