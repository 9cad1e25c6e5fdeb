//! Server-side apply (`application/apply-patch+yaml`) and the `metadata.managedFields` of
//! every write, as upstream's structured-merge-diff does it.
//!
//! `fieldset` (FieldsV1 sets and paths), `merge` (structured merge by the list/map metadata of
//! `patch::schema`), `managed` (managedFields entries, Update and Apply operations,
//! conflicts). This file words requests and errors: [`decode_config`], [`apply`],
//! [`record_update`].

pub mod fieldset;
pub mod managed;
pub mod merge;

use std::collections::HashMap;

use http::HeaderMap;
use serde_json::{Map, Value};

use crate::error::{ApiError, FieldError};
use crate::registry::catalog::ResourceInfo;

/// The type of `r`'s objects in the patch schema (untyped when it has none).
fn root(r: &ResourceInfo) -> crate::patch::schema::Ty {
    crate::patch::schema::root(r.group, r.version, r.kind)
        .or_else(|| crate::patch::schema::custom_root(r.group, r.version, r.kind))
        .unwrap_or(crate::patch::schema::Ty::Untyped)
}

fn api_version(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        r.version.to_owned()
    } else {
        format!("{}/{}", r.group, r.version)
    }
}

/// The manager of a write: `fieldManager`, else upstream's default from the User-Agent.
pub fn manager(fields_manager: Option<&str>, headers: &HeaderMap) -> String {
    match fields_manager {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => managed::default_manager(
            headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        ),
    }
}

/// Records the Update operation of a create (`old` empty), update or patch into `new`; the
/// manager is the query's `fieldManager`, else derived from the User-Agent.
pub fn record_update(
    r: &ResourceInfo,
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) {
    record_subresource_update(r, new, old, query, headers, "");
}

/// [`record_update`] for a write through `subresource` (`status`, `scale`; empty for the
/// object itself): the entry carries the subresource, as upstream's do.
pub fn record_subresource_update(
    r: &ResourceInfo,
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    subresource: &str,
) {
    let manager = manager(query.get("fieldManager").map(String::as_str), headers);
    managed::record_update(new, old, root(r), &manager, &api_version(r), subresource);
}

/// Parses an apply body: JSON, or else one YAML document (upstream reads both with
/// `sigs.k8s.io/yaml`). Errors are upstream's 400 "error decoding YAML: …".
pub fn parse_config(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value = match serde_json::from_slice::<Value>(body) {
        Ok(v) => v,
        Err(_) => serde_saphyr::from_slice::<Value>(body)
            .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?,
    };
    match value {
        Value::Object(m) => Ok(m),
        // An empty document is an empty configuration, which then lacks apiVersion and kind.
        Value::Null => Ok(Map::new()),
        other => Err(ApiError::BadRequest(format!(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            go_type(&other)
        ))),
    }
}

/// Go's `encoding/json` name of a JSON value's type, for unmarshal errors.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Decodes an apply body (JSON or YAML, [`parse_config`]) and checks it as upstream.
pub fn decode_config(
    r: &ResourceInfo,
    body: &[u8],
    name: &str,
) -> Result<Map<String, Value>, ApiError> {
    let config = parse_config(body)?;
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
    if kind != r.kind || version != api_version(r) {
        return Err(ApiError::BadRequest(format!(
            "the apply configuration's {version}, Kind={kind} does not match {}, Kind={}",
            api_version(r),
            r.kind
        )));
    }
    Ok(config)
}

/// Applies `config` for `manager` onto `live` (empty when the object is missing) through
/// `subresource` (empty for the object itself, or `status`).
pub fn apply(
    r: &ResourceInfo,
    live: &Map<String, Value>,
    config: &Map<String, Value>,
    manager: &str,
    force: bool,
    name: &str,
    subresource: &str,
) -> Result<Map<String, Value>, ApiError> {
    let (ty, version) = (root(r), api_version(r));
    managed::apply_to(live, config, ty, manager, &version, force, subresource).map_err(
        |conflicts| ApiError::ApplyConflict {
            resource: crate::error::GroupResource::new(r.group, r.plural),
            name: name.to_owned(),
            message: managed::conflict_message(&conflicts),
            causes: conflicts
                .iter()
                .map(|c| FieldError {
                    reason: "FieldManagerConflict",
                    field: c.field.clone(),
                    message: format!("conflict with {}", c.manager_display()),
                })
                .collect(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_and_json_bodies_decode_alike() {
        let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels:\n    app: x\ndata:\n  n: \"1\"\n  flag: \"true\"\nreplicas: 3\n";
        let json = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","labels":{"app":"x"}},"data":{"n":"1","flag":"true"},"replicas":3}"#;
        let from_yaml = parse_config(yaml).unwrap();
        assert_eq!(from_yaml, parse_config(json).unwrap());
        assert_eq!(from_yaml["replicas"], json!(3));
        assert!(parse_config(b"").unwrap().is_empty());
    }

    #[test]
    fn bad_yaml_bodies_are_bad_requests() {
        for body in [
            &b"a: [1, 2"[..],
            b"- 1\n- 2\n",
            b"just a string",
            b"a: b: c",
        ] {
            match parse_config(body) {
                Err(ApiError::BadRequest(m)) => {
                    assert!(m.starts_with("error decoding YAML: "), "{m}")
                }
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(body)),
            }
        }
    }

    #[test]
    fn subresource_writes_carry_their_subresource() {
        let ty = crate::patch::schema::root("apps", "v1", "Deployment").unwrap();
        let mut old = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x"}},
            "spec": {"replicas": 1}})
        .as_object()
        .cloned()
        .unwrap();
        let mut created = old.clone();
        managed::record_update(&mut created, &Map::new(), ty, "kubectl", "apps/v1", "");
        old = created;
        // kubectl scale: the scale entry takes spec.replicas from the creator.
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(3);
        managed::record_update(&mut scaled, &old, ty, "kubectl", "apps/v1", "scale");
        let e = managed::entries(&scaled);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[1].subresource, "scale");
        assert_eq!(e[1].fields.to_json(), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(
            e[0].fields.to_json(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
        // A status write owns status only and leaves the other entries alone. (Its manager
        // sorts after `kubectl`: entries are ordered by time, then manager, and this write is
        // the latest, so it stays last whether or not a second passed.)
        let mut with_status = scaled.clone();
        with_status.insert("status".into(), json!({"replicas": 3}));
        managed::record_update(
            &mut with_status,
            &scaled,
            ty,
            "status-ctrl",
            "apps/v1",
            "status",
        );
        let e = managed::entries(&with_status);
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(
            (e[2].manager.as_str(), e[2].subresource.as_str()),
            ("status-ctrl", "status")
        );
        assert_eq!(
            e[2].fields.to_json(),
            json!({"f:status": {"f:replicas": {}}})
        );
        // The entries it did not touch are written back exactly as they were.
        assert_eq!(
            with_status["metadata"]["managedFields"][0],
            scaled["metadata"]["managedFields"][0]
        );
        assert_eq!(
            with_status["metadata"]["managedFields"][1],
            scaled["metadata"]["managedFields"][1]
        );
        // A second status write by the same manager changes only its own entry.
        let mut again = with_status.clone();
        again["status"]["replicas"] = json!(4);
        again["status"]["ready"] = json!(1);
        managed::record_update(
            &mut again,
            &with_status,
            ty,
            "status-ctrl",
            "apps/v1",
            "status",
        );
        let list = again["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(
            list[..2],
            with_status["metadata"]["managedFields"].as_array().unwrap()[..2]
        );
        assert_eq!(
            list[2]["fieldsV1"],
            json!({"f:status": {"f:ready": {}, "f:replicas": {}}})
        );
        // A later main-resource write keeps the status entry.
        let mut relabeled = with_status.clone();
        relabeled["metadata"]["labels"]["b"] = json!("y");
        managed::record_update(&mut relabeled, &with_status, ty, "kubectl", "apps/v1", "");
        assert_eq!(managed::entries(&relabeled).len(), 3);
    }

    #[test]
    fn entries_sort_as_upstream_writes_them() {
        let e = |manager: &str, operation: &str, time: &str| json!({"manager": manager, "operation": operation, "time": time});
        let mut list = vec![
            e("kubectl-create", "Update", "2026-01-01T00:00:00Z"),
            e("kube-apiserver", "Update", "2026-01-01T00:00:00Z"),
            e("late", "Update", "2025-12-31T23:59:59Z"),
            e("zz", "Apply", "2026-01-02T00:00:00Z"),
            e("untimed", "Update", "not a time"),
        ];
        managed::sort_entries(&mut list);
        let managers: Vec<&str> = list
            .iter()
            .map(|e| e["manager"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            managers,
            ["zz", "untimed", "late", "kube-apiserver", "kubectl-create"]
        );
    }

    #[test]
    fn conflict_messages_name_managers_as_upstream() {
        let c =
            |manager: &str, operation: &str, subresource: &str, field: &str| managed::Conflict {
                manager: manager.into(),
                api_version: "apps/v1".into(),
                field: field.into(),
                path: Vec::new(),
                operation: operation.into(),
                subresource: subresource.into(),
            };
        assert_eq!(
            managed::conflict_message(&[c("kubectl", "Update", "scale", ".spec.replicas")]),
            "Apply failed with 1 conflict: conflict with \"kubectl\" with subresource \"scale\" using apps/v1: .spec.replicas"
        );
        assert_eq!(
            managed::conflict_message(&[
                c("z", "Apply", "", ".a"),
                c("b", "Update", "", ".b"),
                c("z", "Apply", "", ".c"),
            ]),
            "Apply failed with 3 conflicts: conflicts with \"b\" using apps/v1:\n- .b\nconflicts with \"z\":\n- .a\n- .c"
        );
    }
}
