//! Subresources other than `status`: `scale` (autoscaling/v1 Scale over a workload's
//! `spec.replicas`) and `pods/binding` (what a scheduler posts to place a pod on a node).

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use super::{Ctx, MODIFIED, Query, load, object, object_response, store_update};
use crate::error::{ApiError, Result};
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
    let replicas = obj
        .get("spec")
        .and_then(|s| s.get("replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let current = obj
        .get("status")
        .and_then(|s| s.get("replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut scale = Map::new();
    scale.insert("kind".into(), json!("Scale"));
    scale.insert("apiVersion".into(), json!("autoscaling/v1"));
    scale.insert("metadata".into(), Value::Object(m));
    scale.insert("spec".into(), json!({ "replicas": replicas }));
    scale.insert(
        "status".into(),
        json!({ "replicas": current, "selector": selector_string(r, obj) }),
    );
    scale
}

/// GET, PUT or PATCH `<workload>/scale`.
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
    let (obj, current) = load(ctx, r, namespace, name).await?;
    let wanted: Map<String, Value> = match verb {
        "get" => return Ok(object_response(StatusCode::OK, scale_of(r, &obj))),
        "update" => object::decode(headers, body)?,
        "patch" => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
            let mut doc = Value::Object(scale_of(r, &obj));
            json_patch::merge(&mut doc, &patch);
            match doc {
                Value::Object(m) => m,
                _ => {
                    return Err(ApiError::BadRequest(
                        "the patch did not produce an object".into(),
                    ));
                }
            }
        }
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let rv = object::meta_str(&wanted, "resourceVersion");
    if !rv.is_empty() && object::parse_rv(rv)? != current {
        return Err(ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: MODIFIED.into(),
        });
    }
    let replicas = wanted
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
    let mut new = obj.clone();
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), json!(replicas));
    } else {
        new.insert("spec".into(), json!({ "replicas": replicas }));
    }
    // The writer owns spec.replicas in an entry with `subresource: scale`, as upstream.
    crate::apply::record_subresource_update(r, &mut new, &obj, q, headers, "scale");
    let stored = store_update(
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
    .await?;
    Ok(object_response(StatusCode::OK, scale_of(r, &stored)))
}

/// POST `pods/<name>/binding`: assigns the pod to the target node, once.
pub(super) async fn bind(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<Response> {
    let binding = object::decode(headers, body)?;
    let node = binding
        .get("target")
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        return Err(ApiError::Invalid {
            group: String::new(),
            kind: "Binding".into(),
            name: name.into(),
            causes: vec![crate::error::FieldError {
                reason: "FieldValueRequired",
                field: "target.name".into(),
                message: "Required value".into(),
            }],
        });
    }
    let (pod, current) = load(ctx, r, namespace, name).await?;
    if !object::meta_str(&pod, "deletionTimestamp").is_empty() {
        return Err(ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: format!("pod {name} is being deleted, cannot be assigned to a host"),
        });
    }
    let assigned = pod
        .get("spec")
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !assigned.is_empty() {
        return Err(ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: format!("pod {name} is already assigned to node \"{assigned}\""),
        });
    }
    let mut new = pod.clone();
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("nodeName".into(), json!(node));
    }
    let condition = json!({
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": object::now(),
    });
    let status = new.entry("status").or_insert_with(|| json!({}));
    if let Some(st) = status.as_object_mut() {
        let conds = st.entry("conditions").or_insert_with(|| json!([]));
        if let Some(list) = conds.as_array_mut() {
            list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
            list.push(condition);
        }
    }
    // The binding changes spec and status together, as upstream's binding REST does.
    let key = crate::registry::key(r, namespace, name);
    if !super::dry_run(q) {
        if let Some(m) = object::meta(&mut new) {
            m.remove("resourceVersion");
        }
        ctx.storage
            .update(&key, object::encode(&new)?, current)
            .await
            .map_err(|e| super::conflict_or(e, r, name))?;
    }
    let status = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 });
    Ok(super::json_response(StatusCode::CREATED, &status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

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
