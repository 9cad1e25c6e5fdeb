//! The Swagger 2.0 (OpenAPI v2) document, converted from the v3 documents: one document for all
//! group versions, schemas under `definitions`, request bodies as `in: body` parameters.
//!
//! Served as JSON, and in gnostic protobuf (`v2_proto`) for
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, which is what
//! kubectl asks for (`explain --output=plaintext-openapiv2`, older kubectl's `apply`).

use serde_json::{Map, Value, json};

use super::schemas::REF_PREFIX;

const V2_REF_PREFIX: &str = "#/definitions/";

/// Builds the v2 document from the v3 documents' `paths` and `components.schemas`.
pub(crate) fn convert<'a>(docs: impl IntoIterator<Item = &'a Value>) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for doc in docs {
        if let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, schema) in schemas {
                definitions
                    .entry(name.clone())
                    .or_insert_with(|| rewrite_refs(schema));
            }
        }
        if let Some(p) = doc.get("paths").and_then(Value::as_object) {
            for (path, item) in p {
                paths.insert(path.clone(), path_item(item));
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": "unversioned" },
        "paths": paths,
        "definitions": definitions,
    })
}

fn rewrite_refs(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v.as_str()) {
                        ("$ref", Some(r)) => match r.strip_prefix(REF_PREFIX) {
                            Some(name) => Value::String(format!("{V2_REF_PREFIX}{name}")),
                            None => v.clone(),
                        },
                        _ => rewrite_refs(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(rewrite_refs).collect()),
        other => other.clone(),
    }
}

fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    if let Some(map) = item.as_object() {
        for (key, value) in map {
            let converted = if key == "parameters" {
                parameters(value)
            } else {
                operation(value)
            };
            out.insert(key.clone(), converted);
        }
    }
    Value::Object(out)
}

/// v3 `{name, in, schema: {type, …}}` → v2 `{name, in, type, …}`.
fn parameters(list: &Value) -> Value {
    let converted = list
        .as_array()
        .map(|params| {
            params
                .iter()
                .map(|p| {
                    let mut out = Map::new();
                    if let Some(map) = p.as_object() {
                        for (k, v) in map {
                            if k == "schema" {
                                if let Some(schema) = v.as_object() {
                                    out.extend(schema.clone());
                                }
                            } else {
                                out.insert(k.clone(), v.clone());
                            }
                        }
                    }
                    Value::Object(out)
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Array(converted)
}

fn operation(op: &Value) -> Value {
    let Some(map) = op.as_object() else {
        return op.clone();
    };
    let mut out = Map::new();
    let mut params = map
        .get("parameters")
        .map(parameters)
        .and_then(|p| p.as_array().cloned())
        .unwrap_or_default();
    let mut produces: Vec<String> = Vec::new();
    for (k, v) in map {
        match k.as_str() {
            "parameters" => {}
            "requestBody" => {
                let content = v.get("content").and_then(Value::as_object);
                if let Some(content) = content {
                    let consumes: Vec<&String> = content.keys().collect();
                    out.insert("consumes".to_owned(), json!(consumes));
                    if let Some(schema) = content.values().find_map(|c| c.get("schema")) {
                        params.insert(
                            0,
                            json!({
                                "name": "body",
                                "in": "body",
                                "required": true,
                                "schema": rewrite_refs(schema),
                            }),
                        );
                    }
                }
            }
            "responses" => {
                let mut responses = Map::new();
                for (code, response) in v.as_object().into_iter().flatten() {
                    let mut r = Map::new();
                    if let Some(d) = response.get("description") {
                        r.insert("description".to_owned(), d.clone());
                    }
                    if let Some(content) = response.get("content").and_then(Value::as_object) {
                        for t in content.keys() {
                            if !produces.contains(t) {
                                produces.push(t.clone());
                            }
                        }
                        if let Some(schema) = content.values().find_map(|c| c.get("schema")) {
                            r.insert("schema".to_owned(), rewrite_refs(schema));
                        }
                    }
                    responses.insert(code.clone(), Value::Object(r));
                }
                out.insert("responses".to_owned(), Value::Object(responses));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if !produces.is_empty() {
        out.insert("produces".to_owned(), json!(produces));
    }
    out.insert("schemes".to_owned(), json!(["https"]));
    out.insert("parameters".to_owned(), Value::Array(params));
    Value::Object(out)
}
