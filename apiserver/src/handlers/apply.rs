//! `PATCH` with `application/apply-patch+yaml`: server-side apply through the usual write
//! path. A missing object is created from the configuration; otherwise the configuration
//! is merged onto the stored object (`crate::apply`), then defaulted, validated and stored
//! under optimistic concurrency like any patch.

use http::HeaderMap;
use serde_json::{Map, Value, json};

use super::{
    PATCH_RETRIES, Query, Scope, create, field_validation_against, load, object, store_update,
    with_warnings,
};
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::catalog::ResourceInfo;

/// Serves a server-side apply of `body` to `name`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    body: &[u8],
    q: &Query,
    scope: Scope,
) -> Result<axum::response::Response> {
    let mut config = crate::apply::decode_config(r, body, name)?;
    let manager = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.clone(),
        _ => {
            return Err(ApiError::BadRequest(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
            ));
        }
    };
    let force = q.get("force").is_some_and(|f| f == "true");
    if let Some(Value::Object(m)) = config.get_mut("metadata") {
        m.insert("name".into(), json!(name));
    } else {
        config.insert("metadata".into(), json!({ "name": name }));
    }
    for _ in 0..PATCH_RETRIES {
        let (old, current) = match load(ctx, r, namespace, name).await {
            Ok(found) => found,
            Err(ApiError::NotFound { .. }) if scope == Scope::Main => {
                let obj = crate::apply::apply(r, &Map::new(), &config, &manager, force, name, "")?;
                let mut json_headers = HeaderMap::new();
                json_headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                let body = object::encode(&obj)?;
                match create(ctx, r, namespace, &json_headers, &body, q).await {
                    Err(ApiError::AlreadyExists { .. }) => continue,
                    other => return other,
                }
            }
            Err(e) => return Err(e),
        };
        // Through the status subresource the configuration's status is applied and owned
        // (`subresource: status`); `store_update` keeps only status and the managedFields.
        let subresource = if scope == Scope::Status { "status" } else { "" };
        let merged = crate::apply::apply(r, &old, &config, &manager, force, name, subresource)?;
        let (mut new, warnings) = field_validation_against(r, merged, Some(&old), q)?;
        crate::defaults::apply(r, &mut new);
        crate::quantity::canonicalize(r, &mut new)?;
        if let Some(m) = object::meta(&mut new) {
            m.remove("resourceVersion");
        }
        match store_update(ctx, r, namespace, name, new, &old, current, scope, q).await {
            Err(ApiError::Conflict { .. }) => continue,
            Ok(stored) => {
                return Ok(with_warnings(
                    stored.response(http::StatusCode::OK),
                    &warnings,
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::Conflict {
        resource: object::group_resource(r),
        name: name.into(),
        detail: super::MODIFIED.into(),
    })
}

/// Sets `new`'s `metadata.managedFields` to `from`'s (removed when `from` has none).
fn keep_managed_fields(new: &mut Map<String, Value>, from: &Map<String, Value>) {
    let fields = from
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .cloned();
    if let Some(m) = object::meta(new) {
        match fields {
            Some(f) => m.insert("managedFields".into(), f),
            None => m.remove("managedFields"),
        };
    }
}

/// Records the managedFields Update entry of an update or patch in `scope`. Through the
/// status subresource only status is stored, so the entry (`subresource: status`) is
/// computed on the stored object with the new status; `store_update` keeps it.
pub(super) fn record(
    r: &ResourceInfo,
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
    q: &Query,
    headers: &HeaderMap,
    scope: Scope,
) {
    let subresource = match scope {
        Scope::Status => "status",
        // A CSR's approval writes `status.conditions`: recorded as a status write is.
        Scope::Approval => "approval",
        // Ephemeral containers are spec: the entry is the object's, labelled.
        Scope::EphemeralContainers => {
            crate::apply::record_subresource_update(r, new, old, q, headers, "ephemeralcontainers");
            return;
        }
        // Container resources are spec too.
        Scope::Resize => {
            crate::apply::record_subresource_update(r, new, old, q, headers, "resize");
            return;
        }
        Scope::Main | Scope::Finalize => {
            crate::apply::record_update(r, new, old, q, headers);
            return;
        }
    };
    // What the entry is computed on: the stored managed fields and the new status (a
    // status write owns nothing else), without copying the rest of the object.
    let mut meta = Map::new();
    if let Some(fields) = old.get("metadata").and_then(|m| m.get("managedFields")) {
        meta.insert("managedFields".into(), fields.clone());
    }
    let mut scoped = Map::from_iter([("metadata".to_owned(), Value::Object(meta))]);
    if let Some(s) = new.get("status") {
        scoped.insert("status".into(), s.clone());
    }
    crate::apply::record_subresource_update(r, &mut scoped, old, q, headers, subresource);
    keep_managed_fields(new, &scoped);
}

/// Decodes a JSON patch document with upstream's answers: not a list is a 400 (Go's
/// unmarshal message), an unknown `op` a 422 as evanphx/json-patch's `Unexpected kind`.
pub(super) fn decode_json_patch(patch: &Value) -> Result<json_patch::Patch> {
    if patch.is_null() {
        return Ok(json_patch::Patch(Vec::new()));
    }
    let Value::Array(ops) = patch else {
        return Err(ApiError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            match patch {
                Value::Object(_) => "object",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                _ => "array",
            }
        )));
    };
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("unknown");
        if !["add", "remove", "replace", "move", "copy", "test"].contains(&kind) {
            return Err(ApiError::Unprocessable(format!("Unexpected kind: {kind}")));
        }
    }
    serde_json::from_value(patch.clone()).map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// A JSON patch that cannot be applied: upstream's 422 with evanphx/json-patch's message.
pub(super) fn json_patch_error(ops: &json_patch::Patch, e: &json_patch::PatchError) -> ApiError {
    use json_patch::{PatchErrorKind as K, PatchOperation as Op};
    let path = &e.path;
    ApiError::Unprocessable(match (&e.kind, ops.0.get(e.operation)) {
        (K::TestFailed, _) => format!("testing value {path} failed: test failed"),
        (K::InvalidPointer, Some(Op::Add(_))) => {
            format!("add operation does not apply: doc is missing path: \"{path}\": missing value")
        }
        (K::InvalidPointer, Some(Op::Remove(_))) => format!(
            "remove operation does not apply: doc is missing path: \"{path}\": missing value"
        ),
        (K::InvalidPointer, Some(Op::Replace(_))) => {
            format!("replace operation does not apply: doc is missing key: {path}: missing value")
        }
        (K::InvalidFromPointer, Some(Op::Move(m))) => format!(
            "move operation does not apply: doc is missing from path: {}: missing value",
            m.from
        ),
        (K::InvalidFromPointer, Some(Op::Copy(c))) => format!(
            "copy operation does not apply: doc is missing from path: {}: missing value",
            c.from
        ),
        _ => e.to_string(),
    })
}

/// The apiVersion and kind a patch left in `new`, judged as upstream. A strategic merge
/// patch is decoded into the typed object, whose type is then rewritten: a changed kind is
/// ignored. A JSON or merge patch result is decoded by its own apiVersion and kind (missing
/// ones default to the resource's), which fails for any other type: 422 on `patch` with the
/// patched object as the value, as `jsonPatcher.applyPatchToCurrentObject` answers.
pub(super) fn check_patched_type(
    r: &ResourceInfo,
    new: &mut Map<String, Value>,
    strategic: bool,
) -> Result<()> {
    let want_version = crate::registry::api_version(r);
    let text = |k: &str| new.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let (mut version, mut kind) = (text("apiVersion"), text("kind"));
    if kind.is_empty() {
        kind = r.kind.to_owned();
    }
    if version.is_empty() {
        version.clone_from(&want_version);
    }
    if strategic || (version == want_version && kind == r.kind) {
        new.insert("apiVersion".into(), json!(want_version));
        new.insert("kind".into(), json!(r.kind));
        return Ok(());
    }
    let (group, v) = version.rsplit_once('/').unwrap_or(("", version.as_str()));
    let registered = crate::registry::catalog::BUILTIN
        .iter()
        .any(|b| b.group == group && b.version == v && b.kind == kind);
    let reason = if registered {
        let package = match r.group.split('.').next() {
            Some("") | None => "core",
            Some(p) => p,
        };
        format!(
            "unable to decode {group}/{v}, Kind={kind} into *{package}.{}",
            r.kind
        )
    } else {
        format!(
            "no kind {kind:?} is registered for version {version:?} in scheme \"pkg/api/legacyscheme/scheme.go:30\""
        )
    };
    let patched = serde_json::to_string(&Value::Object(new.clone())).unwrap_or_default();
    Err(ApiError::Invalid {
        group: String::new(),
        kind: String::new(),
        name: String::new(),
        causes: vec![crate::error::FieldError {
            reason: "FieldValueInvalid",
            field: "patch".into(),
            message: format!("Invalid value: {patched:?}: {reason}"),
        }],
    })
}
