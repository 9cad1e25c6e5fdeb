//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in kinds.
//!
//! `schema` holds the Go struct tags (merge keys, strategies) and the type graph, `strategic`
//! the engine; [`strategic_merge`] applies a patch to a stored object and words failures as
//! the API server does.

mod gofmt;
pub mod schema;
pub mod strategic;

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::registry::catalog::ResourceInfo;
use strategic::SmpError;

/// Applies the JSON patch (RFC 6902) `ops` to `doc`, a copy the caller drops on error.
///
/// Not `json_patch::patch`: on failure it undoes the operations already applied, and that
/// undo panics for some inputs (a `move` onto a path inside itself after another operation;
/// found by the `json_patch` fuzz target). A copy needs no undo.
pub fn json_patch(doc: &mut Value, ops: &json_patch::Patch) -> Result<(), json_patch::PatchError> {
    json_patch::patch_unsafe(doc, ops)
}

/// Applies the strategic merge patch `patch` to `original`, an object of resource `r`.
///
/// Kinds without a Go struct answer 415 (as upstream does for custom resources); a patch that
/// is not a JSON object or has malformed directives answers 400.
pub fn strategic_merge(
    r: &ResourceInfo,
    original: Map<String, Value>,
    patch: &Value,
) -> Result<Map<String, Value>, ApiError> {
    // Built-in kinds outside k8s.io/api (CustomResourceDefinition, APIService) are Go types
    // too, with no patch markers: their maps merge and their lists are replaced.
    let untyped = matches!(r.group, "apiextensions.k8s.io" | "apiregistration.k8s.io")
        .then_some(schema::Ty::Untyped);
    let Some(ty) = schema::root(r.group, r.version, r.kind).or(untyped) else {
        return Err(ApiError::UnsupportedMediaType(
            "application/json-patch+json, application/merge-patch+json".into(),
        ));
    };
    let patch = match patch {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(ApiError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_type(other)
            )));
        }
    };
    strategic::apply(original, patch, ty).map_err(|e| match e {
        SmpError::BadRequest(m) | SmpError::Unprocessable(m) => ApiError::BadRequest(m),
        SmpError::Other(m) => ApiError::Internal(m),
    })
}

/// The JSON type word `encoding/json` uses in its errors.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

#[cfg(test)]
mod tests;
