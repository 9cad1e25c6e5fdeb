//! Subresources other than `status`: `scale` (autoscaling/v1 Scale over a workload's
//! `spec.replicas`; every patch type, server-side apply with the parent's managedFields) and `pods/binding` (what a scheduler posts to place a pod on a node).

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use super::{Ctx, MODIFIED, PATCH_RETRIES, Query, load, object, object_response, store_update};
use crate::apply::fieldset::{self, Set};
use crate::apply::managed;
use crate::error::{ApiError, Result};
use crate::patch::schema;
use crate::patch::strategic::SmpError;
use crate::registry::catalog::ResourceInfo;

/// The label selector of a workload as a string (`metav1.LabelSelectorAsSelector`), or
/// the map selector of a ReplicationController.
fn selector_string(r: &ResourceInfo, obj: &Map<String, Value>) -> String {
    let sel = obj.get("spec").and_then(|s| s.get("selector"));
    let mut parts: Vec<String> = Vec::new();
    if r.plural == "replicationcontrollers" {
        if let Some(m) = sel.and_then(Value::as_object) {
            parts.extend(
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))),
            );
        }
    } else if let Some(sel) = sel {
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            parts.extend(
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))),
            );
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            parts.push(
                match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => format!("{key} in ({})", values.join(",")),
                    "NotIn" => format!("{key} notin ({})", values.join(",")),
                    "Exists" => key.to_owned(),
                    _ => format!("!{key}"),
                },
            );
        }
    }
    parts.sort();
    parts.join(",")
}

fn scale_of(r: &ResourceInfo, obj: &Map<String, Value>) -> Map<String, Value> {
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut m = Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(field) {
            m.insert(field.into(), v.clone());
        }
    }
    let custom = crate::crd::serve::scale_paths(r);
    let (replicas, current, selector) = match &custom {
        // A custom resource's replicas and selector are where its CRD says (absent: 0).
        Some(p) => {
            let int = |path: &[String]| {
                crate::crd::serve::get_path(obj, path)
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            };
            let selector = p
                .label_selector
                .as_deref()
                .and_then(|path| crate::crd::serve::get_path(obj, path))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            (int(&p.spec_replicas), int(&p.status_replicas), selector)
        }
        None => (
            obj.get("spec")
                .and_then(|s| s.get("replicas"))
                .and_then(Value::as_i64)
                .unwrap_or(1),
            obj.get("status")
                .and_then(|s| s.get("replicas"))
                .and_then(Value::as_i64)
                .unwrap_or(0),
            selector_string(r, obj),
        ),
    };
    let mut scale = Map::new();
    scale.insert("kind".into(), json!("Scale"));
    scale.insert("apiVersion".into(), json!("autoscaling/v1"));
    scale.insert("metadata".into(), Value::Object(m));
    scale.insert("spec".into(), json!({ "replicas": replicas }));
    let mut status = json!({ "replicas": current });
    if custom.is_none() || !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    scale.insert("status".into(), status);
    scale
}

/// The apiVersion of the Scale subresource.
const SCALE_VERSION: &str = "autoscaling/v1";

fn parent_version(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        r.version.to_owned()
    } else {
        format!("{}/{}", r.group, r.version)
    }
}

/// The content type of a PATCH, without parameters.
fn patch_type(headers: &HeaderMap) -> &str {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
}

/// What a write through `/scale` asks for: the new Scale, and for server-side apply the
/// parent's managedFields entries (upstream's `ScaleHandler.ToParent`).
struct ScaleWrite {
    scale: Map<String, Value>,
    managed: Option<Vec<managed::Entry>>,
}

/// GET, PUT or PATCH `<workload>/scale`.
///
/// A PATCH is applied to the Scale object as upstream's patcher does: JSON patch (RFC 6902),
/// JSON merge patch, strategic merge patch (autoscaling/v1 Scale's schema) or server-side
/// apply, whose managedFields are the parent's entries that own `spec.replicas`, seen as
/// Scale entries and written back to the parent (`subresource: scale`). Patches without a
/// resourceVersion are retried on conflict.
#[allow(clippy::too_many_arguments)]
pub(super) async fn scale(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    verb: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<Response> {
    let attempts = if verb == "patch" { PATCH_RETRIES } else { 1 };
    for _ in 0..attempts {
        let (obj, current) = load(ctx, r, namespace, name).await?;
        let write = match verb {
            "get" => return Ok(object_response(StatusCode::OK, scale_of(r, &obj))),
            "update" => ScaleWrite {
                scale: object::decode(headers, body)?,
                managed: None,
            },
            "patch" => patch_scale(r, &obj, name, headers, body, q)?,
            _ => return Err(ApiError::MethodNotAllowed),
        };
        let rv = object::meta_str(&write.scale, "resourceVersion");
        if !rv.is_empty() && object::parse_rv(rv)? != current {
            return Err(ApiError::Conflict {
                resource: object::group_resource(r),
                name: name.into(),
                detail: MODIFIED.into(),
            });
        }
        let retry = verb == "patch" && rv.is_empty();
        let replicas = replicas_of(&write.scale, name)?;
        let mut new = obj.clone();
        if let Some(p) = crate::crd::serve::scale_paths(r) {
            crate::crd::serve::set_path(&mut new, &p.spec_replicas, json!(replicas));
        } else if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("replicas".into(), json!(replicas));
        } else {
            new.insert("spec".into(), json!({ "replicas": replicas }));
        }
        match &write.managed {
            Some(entries) => managed::store(&mut new, entries),
            // The writer owns spec.replicas in an entry with `subresource: scale`, as upstream.
            None => crate::apply::record_subresource_update(r, &mut new, &obj, q, headers, "scale"),
        }
        match store_update(
            ctx,
            r,
            namespace,
            name,
            new,
            &obj,
            current,
            super::Scope::Main,
            q,
        )
        .await
        {
            Err(ApiError::Conflict { .. }) if retry => continue,
            Err(e) => return Err(e),
            Ok(stored) => {
                return Ok(object_response(StatusCode::OK, scale_of(r, &stored.object)));
            }
        }
    }
    Err(ApiError::Conflict {
        resource: object::group_resource(r),
        name: name.into(),
        detail: MODIFIED.into(),
    })
}

/// `spec.replicas` of a Scale: upstream's validation (`>= 0`), absent meaning 0.
fn replicas_of(scale: &Map<String, Value>, name: &str) -> Result<i64> {
    let replicas = scale
        .get("spec")
        .and_then(|s| s.get("replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::Invalid {
            group: "autoscaling".into(),
            kind: "Scale".into(),
            name: name.into(),
            causes: vec![crate::error::FieldError {
                reason: "FieldValueInvalid",
                field: "spec.replicas".into(),
                message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            }],
        });
    }
    Ok(replicas)
}

/// Applies a PATCH body of any of the four patch types to `obj`'s Scale.
fn patch_scale(
    r: &ResourceInfo,
    obj: &Map<String, Value>,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<ScaleWrite> {
    let ctype = patch_type(headers);
    if ctype == "application/apply-patch+yaml" {
        return apply_scale(r, obj, name, body, q);
    }
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    let scale = scale_of(r, obj);
    let doc = match ctype {
        "application/merge-patch+json" => {
            let mut doc = Value::Object(scale);
            json_patch::merge(&mut doc, &patch);
            doc
        }
        "application/json-patch+json" => {
            let ops = super::apply::decode_json_patch(&patch)?;
            let mut doc = Value::Object(scale);
            crate::patch::json_patch(&mut doc, &ops)
                .map_err(|e| super::apply::json_patch_error(&ops, &e))?;
            doc
        }
        "application/strategic-merge-patch+json" => Value::Object(strategic_scale(scale, &patch)?),
        _ => {
            return Err(ApiError::UnsupportedMediaType(
                "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
    };
    match doc {
        Value::Object(scale) => Ok(ScaleWrite {
            scale,
            managed: None,
        }),
        _ => Err(ApiError::BadRequest(
            "the patch did not produce an object".into(),
        )),
    }
}

/// A strategic merge patch over the autoscaling/v1 Scale type (no merge keys; the
/// directives still apply), with upstream's answers to malformed patches.
fn strategic_scale(scale: Map<String, Value>, patch: &Value) -> Result<Map<String, Value>> {
    let ty = schema::root("autoscaling", "v1", "Scale").unwrap_or(schema::Ty::Untyped);
    let patch = match patch {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(ApiError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_kind(other)
            )));
        }
    };
    crate::patch::strategic::apply(scale, patch, ty).map_err(|e| match e {
        SmpError::BadRequest(m) | SmpError::Unprocessable(m) => ApiError::BadRequest(m),
        SmpError::Other(m) => ApiError::Internal(m),
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

/// Server-side apply of an autoscaling/v1 Scale configuration.
fn apply_scale(
    r: &ResourceInfo,
    obj: &Map<String, Value>,
    name: &str,
    body: &[u8],
    q: &Query,
) -> Result<ScaleWrite> {
    let mut config = crate::apply::parse_config(body)?;
    let meta = config.get("metadata").and_then(Value::as_object);
    if meta.is_some_and(|m| m.contains_key("managedFields")) {
        return Err(ApiError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let body_name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    let version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind.is_empty() || version.is_empty() {
        return Err(ApiError::BadRequest(
            "apiVersion and kind must be set in the apply configuration".into(),
        ));
    }
    if kind != "Scale" || version != SCALE_VERSION {
        return Err(ApiError::BadRequest(format!(
            "the apply configuration's {version}, Kind={kind} does not match {SCALE_VERSION}, Kind=Scale"
        )));
    }
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
    }
    let parent = managed::entries(obj);
    let mut live = scale_of(r, obj);
    if let Some(Value::Object(m)) = live.get_mut("metadata") {
        m.insert("managedFields".into(), json!([]));
    }
    managed::store(&mut live, &to_scale_entries(&parent));
    let ty = schema::root("autoscaling", "v1", "Scale").unwrap_or(schema::Ty::Untyped);
    let merged = managed::apply_to(&live, &config, ty, &manager, SCALE_VERSION, force, "scale")
        .map_err(|conflicts| ApiError::ApplyConflict {
            resource: crate::error::GroupResource::new(r.group, r.plural),
            name: name.to_owned(),
            message: managed::conflict_message(&conflicts),
            causes: conflicts
                .iter()
                .map(|c| crate::error::FieldError {
                    reason: "FieldManagerConflict",
                    field: c.field.clone(),
                    message: format!("conflict with {}", c.manager_display()),
                })
                .collect(),
        })?;
    let entries = to_parent_entries(&parent, &managed::entries(&merged), &parent_version(r));
    Ok(ScaleWrite {
        scale: merged,
        managed: Some(entries),
    })
}

/// `spec.replicas`, the replicas path of every workload and of Scale.
fn replicas_path() -> Vec<String> {
    vec![fieldset::field("spec"), fieldset::field("replicas")]
}

fn replicas_set() -> Set {
    let mut set = Set::default();
    set.insert(&replicas_path());
    set
}

/// Upstream's `ScaleHandler.ToSubresource`: the parent's entries that own `spec.replicas`,
/// as Scale entries owning `spec.replicas` at apiVersion autoscaling/v1.
fn to_scale_entries(parent: &[managed::Entry]) -> Vec<managed::Entry> {
    parent
        .iter()
        .filter(|e| e.fields.has(&replicas_path()))
        .map(|e| managed::Entry {
            api_version: SCALE_VERSION.into(),
            fields: replicas_set(),
            ..e.clone()
        })
        .collect()
}

/// Upstream's `ScaleHandler.ToParent`: a parent entry that owns `spec.replicas` keeps it only
/// if the same manager (operation, subresource) still owns it in `scale`; otherwise the field
/// is taken from it. Scale entries of other managers become parent entries owning
/// `spec.replicas` at the parent's apiVersion.
fn to_parent_entries(
    parent: &[managed::Entry],
    scale: &[managed::Entry],
    version: &str,
) -> Vec<managed::Entry> {
    let same = |a: &managed::Entry, b: &managed::Entry| {
        a.manager == b.manager && a.operation == b.operation && a.subresource == b.subresource
    };
    let path = replicas_path();
    let mut remaining: Vec<&managed::Entry> =
        scale.iter().filter(|e| e.fields.has(&path)).collect();
    let mut out = Vec::new();
    for e in parent {
        if !e.fields.has(&path) {
            out.push(e.clone());
            continue;
        }
        match remaining.iter().position(|s| same(s, e)) {
            Some(i) => {
                let s = remaining.remove(i);
                out.push(managed::Entry {
                    time: s.time.clone(),
                    ..e.clone()
                });
            }
            None => {
                let fields = e.fields.difference(&replicas_set());
                if !fields.is_empty() {
                    out.push(managed::Entry {
                        fields,
                        ..e.clone()
                    });
                }
            }
        }
    }
    out.extend(remaining.into_iter().map(|s| managed::Entry {
        api_version: version.into(),
        fields: replicas_set(),
        ..s.clone()
    }));
    out
}

/// POST `pods/<name>/binding`: assigns the pod to the target node, once (upstream's
/// `BindingREST`): `spec.nodeName`, the binding's annotations and the `PodScheduled=True`
/// condition are written together; a pod already assigned, being deleted or gated is a
/// 409 Conflict on `pods/binding`.
pub(super) async fn bind(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<Response> {
    let mut binding = object::decode(headers, body)?;
    let dry = super::dry_run(q);
    let op = crate::admission::Operation::Create;
    let (group, plural) = (r.group, r.plural);
    let admitted = Some(&mut binding);
    ctx.admission
        .admit(op, group, plural, namespace, name, dry, admitted, None)?;
    ctx.admission
        .admit_subresource_create(r, namespace, name, dry, &mut binding)
        .await?;
    let binding_name = object::meta_str(&binding, "name");
    if !binding_name.is_empty() && binding_name != name {
        return Err(ApiError::BadRequest(
            "name in URL does not match name in Binding object".into(),
        ));
    }
    let target = binding.get("target").cloned().unwrap_or(Value::Null);
    let node = target.get("name").and_then(Value::as_str).unwrap_or("");
    let target_kind = target.get("kind").and_then(Value::as_str).unwrap_or("");
    let invalid = |field: &str, reason: &'static str, message: String| ApiError::Invalid {
        group: String::new(),
        kind: "Binding".into(),
        name: name.into(),
        causes: vec![crate::error::FieldError {
            reason,
            field: field.into(),
            message,
        }],
    };
    if !target_kind.is_empty() && target_kind != "Node" {
        return Err(invalid(
            "target.kind",
            "FieldValueNotSupported",
            format!("Unsupported value: \"{target_kind}\": supported values: \"Node\", \"\""),
        ));
    }
    if node.is_empty() {
        return Err(invalid(
            "target.name",
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    let want_uid = object::meta_str(&binding, "uid").to_owned();
    let want_rv = object::meta_str(&binding, "resourceVersion").to_owned();
    let annotations = binding
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let binding_conflict = |detail: String| ApiError::Conflict {
        resource: crate::error::GroupResource::new("", "pods/binding"),
        name: name.into(),
        detail,
    };
    for _ in 0..BIND_RETRIES {
        let (pod, current) = load(ctx, r, namespace, name).await?;
        // Preconditions from the binding's metadata, as upstream's GuaranteedUpdate.
        let uid = object::meta_str(&pod, "uid");
        if !want_uid.is_empty() && want_uid != uid {
            return Err(ApiError::Conflict {
                resource: object::group_resource(r),
                name: name.into(),
                detail: format!(
                    "Precondition failed: UID in precondition: {want_uid}, UID in object meta: {uid}"
                ),
            });
        }
        if !want_rv.is_empty() && want_rv != current.to_string() {
            return Err(ApiError::Conflict {
                resource: object::group_resource(r),
                name: name.into(),
                detail: MODIFIED.into(),
            });
        }
        if !object::meta_str(&pod, "deletionTimestamp").is_empty() {
            return Err(binding_conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        let spec = pod.get("spec");
        let assigned = spec
            .and_then(|s| s.get("nodeName"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !assigned.is_empty() {
            return Err(binding_conflict(format!(
                "pod {name} is already assigned to node \"{assigned}\""
            )));
        }
        let gated = spec
            .and_then(|s| s.get("schedulingGates"))
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        if gated {
            return Err(binding_conflict(format!(
                "pod {name} has non-empty .spec.schedulingGates"
            )));
        }
        let mut new = pod.clone();
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("nodeName".into(), json!(node));
        }
        if !annotations.is_empty()
            && let Some(m) = object::meta(&mut new)
        {
            let ann = m.entry("annotations").or_insert_with(|| json!({}));
            if !ann.is_object() {
                *ann = json!({});
            }
            if let Some(ann) = ann.as_object_mut() {
                for (k, v) in &annotations {
                    ann.insert(k.clone(), v.clone());
                }
            }
        }
        set_scheduled(&mut new);
        if super::dry_run(q) {
            break;
        }
        if let Some(m) = object::meta(&mut new) {
            m.remove("resourceVersion");
        }
        // The binding changes spec and status together, as upstream's binding REST does.
        let key = crate::registry::key(r, namespace, name);
        match ctx
            .storage
            .update(&key, object::encode(&new)?, current)
            .await
        {
            Ok(_) => break,
            Err(crate::storage::Error::Conflict) if want_rv.is_empty() => continue,
            Err(e) => return Err(super::conflict_or(e, r, name)),
        }
    }
    let status = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 });
    Ok(super::json_response(StatusCode::CREATED, &status))
}

/// Attempts of a binding under concurrent pod writes (upstream's GuaranteedUpdate retries).
const BIND_RETRIES: usize = 5;

/// Sets `PodScheduled=True` as upstream's `UpdatePodCondition`: an existing condition is
/// replaced in place (reason and message cleared), keeping its transition time if its
/// status was already True.
fn set_scheduled(pod: &mut Map<String, Value>) {
    let now = object::now();
    let status = pod.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(st) = status.as_object_mut() else {
        return;
    };
    let conds = st.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    let existing = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"));
    let mut condition = json!({
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    match existing {
        Some(i) => {
            if list[i].get("status").and_then(Value::as_str) == Some("True")
                && let Some(t) = list[i].get("lastTransitionTime")
            {
                condition["lastTransitionTime"] = t.clone();
            }
            list[i] = condition;
        }
        None => list.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn entry(
        manager: &str,
        op: &str,
        version: &str,
        sub: &str,
        paths: &[&[&str]],
    ) -> managed::Entry {
        let mut fields = Set::default();
        for p in paths {
            let path: Vec<String> = p.iter().map(|f| fieldset::field(f)).collect();
            fields.insert(&path);
        }
        managed::Entry {
            manager: manager.into(),
            operation: op.into(),
            api_version: version.into(),
            time: "2026-01-01T00:00:00Z".into(),
            subresource: sub.into(),
            fields,
        }
    }

    #[test]
    fn scale_entries_are_the_replicas_owners_and_go_back_to_the_parent() {
        let parent = vec![
            entry(
                "kubectl-client-side-apply",
                "Update",
                "apps/v1",
                "",
                &[&["spec", "replicas"], &["spec", "template"]],
            ),
            entry(
                "labeler",
                "Update",
                "apps/v1",
                "",
                &[&["metadata", "labels"]],
            ),
        ];
        let scale = to_scale_entries(&parent);
        assert_eq!(scale.len(), 1);
        assert_eq!(scale[0].api_version, "autoscaling/v1");
        assert_eq!(scale[0].fields, replicas_set());

        // An applier takes spec.replicas (forced): the updater keeps its other fields.
        let applied = vec![entry(
            "hpa",
            "Apply",
            "autoscaling/v1",
            "scale",
            &[&["spec", "replicas"]],
        )];
        let back = to_parent_entries(&parent, &applied, "apps/v1");
        assert_eq!(back.len(), 3);
        assert!(!back[0].fields.has(&replicas_path()) && !back[0].fields.is_empty());
        assert_eq!(back[1], parent[1]);
        assert_eq!(
            (
                back[2].manager.as_str(),
                back[2].api_version.as_str(),
                back[2].subresource.as_str()
            ),
            ("hpa", "apps/v1", "scale")
        );
        assert_eq!(back[2].fields, replicas_set());

        // A manager that still owns it through the scale keeps its parent entry whole.
        let kept = to_parent_entries(&parent, &scale, "apps/v1");
        assert_eq!(kept, parent);
    }

    #[test]
    fn scale_reports_replicas_and_a_sorted_selector() {
        let reg = Registry::builtin();
        let deploy = reg.find("apps", "v1", "deployments").unwrap();
        let obj = json!({
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"tier": "a", "app": "web"}}},
            "status": {"replicas": 2}
        });
        let s = scale_of(deploy, obj.as_object().unwrap());
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["status"]["replicas"], 2);
        assert_eq!(s["status"]["selector"], "app=web,tier=a");
        assert_eq!(s["metadata"]["resourceVersion"], "7");
    }
}
