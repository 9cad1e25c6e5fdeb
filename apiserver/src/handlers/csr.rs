//! CertificateSigningRequests (certificates.k8s.io/v1): upstream's registry strategies and its
//! two CSR admission plugins.
//!
//! - Create: the requester's identity is written into `spec.username`, `uid`, `groups` and
//!   `extra` (whatever the client sent there is dropped) and status starts empty.
//! - Update of the object: spec and status stay as stored (metadata only).
//! - `approval` (PUT/PATCH): only `status.conditions` change; new conditions get
//!   `lastUpdateTime`/`lastTransitionTime`. The writer must be allowed the `approve` verb on
//!   `signers` (certificates.k8s.io) named after the CSR's signerName, or `<domain>/*`
//!   (upstream's `CertificateApproval` plugin).
//! - `status` (PUT/PATCH): spec stays, Approved/Denied conditions stay as stored; setting
//!   `status.certificate` needs the `sign` verb on the signer (upstream's
//!   `CertificateSigning` plugin).
//!
//! What may change is judged by `validation::certificates` on the subresource's rules.

use std::sync::Arc;

use axum::response::Response;
use http::request::Parts;
use serde_json::{Map, Value, json};

use super::{Ctx, Query, Scope};
use crate::error::{ApiError, Result};
use crate::pipeline::{AuthorizerHandle, Decision, UserInfo};
use crate::registry::catalog::ResourceInfo;
use crate::request_info::RequestInfo;

/// Who writes through `approval` or `status`, and the authorizer to ask about them.
#[derive(Clone)]
struct Writer {
    user: UserInfo,
    authorizer: Arc<dyn crate::pipeline::Authorizer>,
}

tokio::task_local! {
    static WRITER: Writer;
}

/// Whether `r` is CertificateSigningRequests.
pub(super) fn is(r: &ResourceInfo) -> bool {
    r.group == "certificates.k8s.io" && r.plural == "certificatesigningrequests"
}

/// PUT or PATCH of `approval` or `status` (`scope`): the generic update path, with the
/// writer known to the admission check in [`admit`].
#[allow(clippy::too_many_arguments)]
pub(super) async fn write(
    ctx: &Ctx,
    r: &ResourceInfo,
    info: &RequestInfo,
    parts: &Parts,
    body: &[u8],
    query: &Query,
    scope: Scope,
) -> Result<Response> {
    let (Some(user), Some(handle)) = (
        parts.extensions.get::<UserInfo>(),
        parts.extensions.get::<AuthorizerHandle>(),
    ) else {
        return Err(ApiError::Unauthorized);
    };
    let writer = Writer {
        user: user.clone(),
        authorizer: Arc::clone(&handle.0),
    };
    let name = info.name.as_str();
    let run = async {
        if info.verb == "patch" {
            super::patch(ctx, r, "", name, &parts.headers, body, query, scope).await
        } else {
            super::update(ctx, r, "", name, &parts.headers, body, query, scope).await
        }
    };
    WRITER.scope(writer, run).await
}

/// Upstream's `PrepareForCreate`: the requester's identity, an empty status.
pub(super) fn prepare_for_create(obj: &mut Map<String, Value>) {
    let user = crate::admission::current().map(|r| r.user);
    let spec = obj
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(spec) = spec {
        for field in ["username", "uid", "groups", "extra"] {
            spec.remove(field);
        }
        if let Some(user) = user {
            spec.insert("username".into(), json!(user.name));
            if !user.uid.is_empty() {
                spec.insert("uid".into(), json!(user.uid));
            }
            if !user.groups.is_empty() {
                spec.insert("groups".into(), json!(user.groups));
            }
            if !user.extra.is_empty() {
                spec.insert("extra".into(), json!(user.extra));
            }
        }
    }
    obj.insert("status".into(), json!({}));
}

/// Upstream's `PrepareForUpdate` of the object and of its two subresources (after the
/// generic rules of `scope` ran; `approval` is the `status.conditions` an approval wrote).
pub(super) fn prepare_for_update(
    scope: Scope,
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
    approval: Option<Value>,
) {
    let keep = |new: &mut Map<String, Value>, field: &str| match old.get(field) {
        Some(v) => {
            new.insert(field.into(), v.clone());
        }
        None => {
            new.remove(field);
        }
    };
    keep(new, "spec");
    match scope {
        Scope::Approval => {
            keep(new, "status");
            let status = new
                .entry("status")
                .or_insert_with(|| json!({}))
                .as_object_mut();
            if let Some(status) = status {
                match approval {
                    Some(c) if !c.is_null() => status.insert("conditions".into(), c),
                    _ => status.remove("conditions"),
                };
            }
            populate_timestamps(new, old);
        }
        Scope::Status => {
            for ty in ["Approved", "Denied"] {
                preserve_instances(new, old, ty);
            }
            populate_timestamps(new, old);
        }
        _ => keep(new, "status"),
    }
}

fn conditions(obj: &Map<String, Value>) -> Vec<Value> {
    obj.get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn type_of(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Upstream's `preserveConditionInstances`: when `new` has as many `ty` conditions as `old`,
/// they are the stored ones (a status write cannot change approval).
fn preserve_instances(new: &mut Map<String, Value>, old: &Map<String, Value>, ty: &str) {
    let stored: Vec<Value> = conditions(old)
        .into_iter()
        .filter(|c| type_of(c) == ty)
        .collect();
    let Some(list) = new
        .get_mut("status")
        .and_then(|s| s.get_mut("conditions"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    if list.iter().filter(|c| type_of(c) == ty).count() != stored.len() {
        return;
    }
    let mut stored = stored.into_iter();
    for c in list.iter_mut().filter(|c| type_of(c) == ty) {
        if let Some(s) = stored.next() {
            *c = s;
        }
    }
}

/// Upstream's `populateConditionTimestamps`: a condition without `lastUpdateTime` gets now;
/// one without `lastTransitionTime` gets the stored one of the same type and status, else now.
fn populate_timestamps(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    let stored = conditions(old);
    let now = super::object::now();
    let Some(list) = new
        .get_mut("status")
        .and_then(|s| s.get_mut("conditions"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let unset = |v: Option<&Value>| v.is_none_or(|t| t.is_null() || t.as_str() == Some(""));
    for c in list.iter_mut() {
        let Some(c) = c.as_object_mut() else {
            continue;
        };
        if unset(c.get("lastUpdateTime")) {
            c.insert("lastUpdateTime".into(), json!(now));
        }
        if unset(c.get("lastTransitionTime")) {
            let (ty, status) = (c.get("type").cloned(), c.get("status").cloned());
            let earlier = stored
                .iter()
                .find(|o| {
                    o.get("type") == ty.as_ref()
                        && o.get("status") == status.as_ref()
                        && !unset(o.get("lastTransitionTime"))
                })
                .and_then(|o| o.get("lastTransitionTime").cloned());
            c.insert(
                "lastTransitionTime".into(),
                earlier.unwrap_or_else(|| json!(now)),
            );
        }
    }
}

/// The admission plugins `CertificateApproval` (every `approval` write) and
/// `CertificateSigning` (a `status` write that changes the certificate): the writer must hold
/// `approve` / `sign` on the signer.
pub(super) async fn admit(
    scope: Scope,
    new: &Map<String, Value>,
    old: &Map<String, Value>,
) -> Result<()> {
    let (verb, doing) = match scope {
        Scope::Approval => ("approve", "approve"),
        Scope::Status if certificate(new) != certificate(old) => ("sign", "sign"),
        _ => return Ok(()),
    };
    let Ok(writer) = WRITER.try_with(Clone::clone) else {
        return Ok(());
    };
    let signer = new
        .get("spec")
        .and_then(|s| s.get("signerName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if authorized_for_signer(&writer, verb, signer).await {
        return Ok(());
    }
    tracing::debug!(user = %writer.user.name, signer, verb, "CSR admission refused");
    let name = super::object::meta_str(new, "name").to_owned();
    let resource =
        crate::error::GroupResource::new("certificates.k8s.io", "certificatesigningrequests");
    Err(ApiError::Forbidden {
        message: format!(
            "{resource} \"{name}\" is forbidden: user not permitted to {doing} requests with signerName \"{signer}\""
        ),
        resource,
        name,
    })
}

fn certificate(obj: &Map<String, Value>) -> Option<&Value> {
    obj.get("status").and_then(|s| s.get("certificate"))
}

/// Upstream's `IsAuthorizedForSignerName`: `verb` on `signers/<signerName>`, else on
/// `signers/<domain>/*`.
async fn authorized_for_signer(writer: &Writer, verb: &str, signer: &str) -> bool {
    let ask = |name: String| RequestInfo {
        is_resource: true,
        verb: verb.to_owned(),
        api_prefix: "apis".into(),
        group: "certificates.k8s.io".into(),
        version: "*".into(),
        resource: "signers".into(),
        name,
        ..RequestInfo::default()
    };
    let exact = ask(signer.to_owned());
    if writer
        .authorizer
        .evaluate(&writer.user, &exact)
        .await
        .outcome
        .decision
        == Decision::Allow
    {
        return true;
    }
    let Some((domain, _)) = signer.split_once('/') else {
        return false;
    };
    let wildcard = ask(format!("{domain}/*"));
    writer
        .authorizer
        .evaluate(&writer.user, &wildcard)
        .await
        .outcome
        .decision
        == Decision::Allow
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn approval_changes_only_conditions_and_stamps_them() {
        let old = obj(json!({"spec": {"signerName": "a.b/c", "username": "alice"},
            "status": {"certificate": "Y2VydA=="}}));
        let mut new = obj(json!({"spec": {"signerName": "x.y/z"},
            "status": {"certificate": "", "conditions": [{"type": "Approved", "status": "True"}]}}));
        let conditions = new["status"]["conditions"].clone();
        prepare_for_update(Scope::Approval, &mut new, &old, Some(conditions));
        assert_eq!(new["spec"], old["spec"]);
        assert_eq!(new["status"]["certificate"], "Y2VydA==");
        let c = &new["status"]["conditions"][0];
        assert!(c["lastUpdateTime"].is_string() && c["lastTransitionTime"].is_string());
    }

    #[test]
    fn status_writes_keep_stored_approval() {
        let old = obj(json!({"spec": {}, "status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "R", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}}));
        let mut new = obj(
            json!({"spec": {}, "status": {"certificate": "eA==", "conditions": [
            {"type": "Approved", "status": "True", "reason": "changed"}]}}),
        );
        prepare_for_update(Scope::Status, &mut new, &old, None);
        assert_eq!(new["status"]["conditions"][0]["reason"], "R");
        assert_eq!(new["status"]["certificate"], "eA==");
    }
}
