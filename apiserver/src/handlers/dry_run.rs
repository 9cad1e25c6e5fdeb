//! The `dryRun` option of every write, gathered where upstream accepts it and checked once,
//! before any handler runs: the query string (`?dryRun=All`) of creates, updates, patches
//! and deletes, and the DeleteOptions **body** of a DELETE or DELETECOLLECTION — kubectl's
//! `delete --dry-run=server` sends `{"dryRun":["All"]}` there and nothing in the query.
//! A body's dry run is folded into the query, so every handler reads one place
//! ([`super::dry_run`]) and nothing below can miss it.
//!
//! Values are validated as upstream's `ValidateDryRun`: only `All` is known; anything else
//! is a 422 on the verb's options kind (`CreateOptions.meta.k8s.io "" is invalid: dryRun:
//! Unsupported value: []string{"x"}: supported values: "All"`), and nothing is written.

use http::HeaderMap;
use serde_json::Value;

use super::{Query, object};
use crate::error::{ApiError, FieldError, Result};

/// The one dry-run value upstream knows.
const ALL: &str = "All";

/// Folds a DELETE body's `dryRun` into `query` and validates the request's dry-run values.
/// A body that does not decode is left to the handler, which reports it as upstream does.
pub(super) fn gather(
    verb: &str,
    headers: &HeaderMap,
    body: &[u8],
    query: &mut Query,
) -> Result<()> {
    let options_kind = match verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        "delete" | "deletecollection" => "DeleteOptions",
        _ => return Ok(()),
    };
    let mut values: Vec<String> = query.get("dryRun").cloned().into_iter().collect();
    if options_kind == "DeleteOptions"
        && !body.iter().all(u8::is_ascii_whitespace)
        && let Ok(options) = object::decode(headers, body)
    {
        match options.get("dryRun") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    match item.as_str() {
                        Some(s) => values.push(s.to_owned()),
                        None => return Err(bad_body(item)),
                    }
                }
            }
            Some(other) => return Err(bad_body(other)),
        }
    }
    if values.iter().all(|v| v == ALL) {
        if !values.is_empty() {
            query.insert("dryRun".into(), ALL.into());
        }
        return Ok(());
    }
    let listed: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    Err(ApiError::Invalid {
        group: "meta.k8s.io".into(),
        kind: options_kind.into(),
        name: String::new(),
        causes: vec![FieldError {
            reason: "FieldValueNotSupported",
            field: "dryRun".into(),
            message: format!(
                "Unsupported value: []string{{{}}}: supported values: \"{ALL}\"",
                listed.join(", ")
            ),
        }],
    })
}

/// A `dryRun` that is not a list of strings: the body cannot be decoded as DeleteOptions.
fn bad_body(value: &Value) -> ApiError {
    ApiError::BadRequest(format!(
        "error decoding DeleteOptions: json: cannot unmarshal {} into Go struct field DeleteOptions.dryRun of type []string",
        go_json_kind(value)
    ))
}

/// Go's name for a JSON value's kind in unmarshal errors.
fn go_json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        h
    }

    #[test]
    fn a_delete_bodys_dry_run_reaches_the_query() {
        let mut q = Query::new();
        let body = br#"{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"],"propagationPolicy":"Background"}"#;
        gather("delete", &json_headers(), body, &mut q).unwrap();
        assert_eq!(q.get("dryRun").map(String::as_str), Some("All"));
        let mut q = Query::new();
        gather("deletecollection", &json_headers(), body, &mut q).unwrap();
        assert_eq!(q.get("dryRun").map(String::as_str), Some("All"));
    }

    #[test]
    fn no_dry_run_leaves_the_query_alone() {
        let mut q = Query::new();
        gather(
            "delete",
            &json_headers(),
            br#"{"gracePeriodSeconds":0}"#,
            &mut q,
        )
        .unwrap();
        gather("delete", &json_headers(), b"", &mut q).unwrap();
        gather("create", &json_headers(), br#"{"dryRun":["x"]}"#, &mut q).unwrap();
        assert!(q.is_empty());
    }

    #[test]
    fn unknown_values_are_refused_on_the_verbs_options_kind() {
        let mut q = Query::new();
        q.insert("dryRun".into(), "Everything".into());
        let err = gather("create", &json_headers(), b"", &mut q).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Everything\"}: supported values: \"All\""
        );
        let mut q = Query::new();
        let err = gather(
            "delete",
            &json_headers(),
            br#"{"dryRun":["All","x"]}"#,
            &mut q,
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("DeleteOptions.meta.k8s.io"),
            "{err}"
        );
        let mut q = Query::new();
        let err = gather("delete", &json_headers(), br#"{"dryRun":"All"}"#, &mut q).unwrap_err();
        assert!(matches!(err, ApiError::BadRequest(_)), "{err}");
    }

    #[test]
    fn reads_and_other_verbs_are_not_judged() {
        let mut q = Query::new();
        q.insert("dryRun".into(), "whatever".into());
        gather("get", &json_headers(), b"", &mut q).unwrap();
        gather("watch", &json_headers(), b"", &mut q).unwrap();
    }
}
