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
    let manager = manager(query.get("fieldManager").map(String::as_str), headers);
    managed::record_update(new, old, root(r), &manager, &api_version(r));
}

/// Decodes an apply body (JSON; YAML documents are not supported) and checks it as upstream.
pub fn decode_config(
    r: &ResourceInfo,
    body: &[u8],
    name: &str,
) -> Result<Map<String, Value>, ApiError> {
    let config: Map<String, Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            return Err(ApiError::BadRequest(
                "error decoding YAML: the apply configuration is not an object".into(),
            ));
        }
        Err(e) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "application/apply-patch+yaml bodies must be JSON here ({e})"
            )));
        }
    };
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

/// Applies `config` for `manager` onto `live` (empty when the object is missing).
pub fn apply(
    r: &ResourceInfo,
    live: &Map<String, Value>,
    config: &Map<String, Value>,
    manager: &str,
    force: bool,
    name: &str,
) -> Result<Map<String, Value>, ApiError> {
    managed::apply(live, config, root(r), manager, &api_version(r), force).map_err(|conflicts| {
        ApiError::ApplyConflict {
            resource: crate::error::GroupResource::new(r.group, r.plural),
            name: name.to_owned(),
            message: managed::conflict_message(&conflicts),
            causes: conflicts
                .iter()
                .map(|c| FieldError {
                    reason: "FieldManagerConflict",
                    field: c.field.clone(),
                    message: format!("conflict with \"{}\" using {}", c.manager, c.api_version),
                })
                .collect(),
        }
    })
}
