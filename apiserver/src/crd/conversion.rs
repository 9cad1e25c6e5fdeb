//! Conversion of custom resources between the versions of their CRD: the asynchronous entry
//! point the handlers call wherever a custom object crosses versions, and upstream's
//! conversion webhook client (`apiextensions-apiserver/pkg/apiserver/conversion`).
//!
//! A CRD with `spec.conversion.strategy: None` converts by rewriting `apiVersion` only: that
//! stays on the synchronous path of [`crate::registry::convert`]. With `strategy: Webhook`
//! every object whose `apiVersion` is not the one wanted is sent, in one `ConversionReview`
//! per call (a list converts its items in one review, as upstream does), to the webhook:
//!
//! - through the shared webhook client ([`crate::admission::webhook::client`]: `url` or
//!   `service` through its EndpointSlices, TLS verified against `caBundle`), 30 s for the
//!   whole exchange;
//! - in the first of `conversionReviewVersions` this server speaks (`v1`, `v1beta1`).
//!
//! The answer is checked as upstream checks it (uid, `result.status`, object count, each
//! object's apiVersion, kind, name, namespace and uid) and each converted object's metadata
//! is the original's, with only labels and annotations taken from the webhook. Any failure is
//! a 500 with upstream's message (`conversion webhook for example.com/v1, Kind=Widget failed:
//! …`), raised before anything is stored.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

pub use crate::admission::webhook::client::ServiceRef;
use crate::admission::webhook::client::{self, ClientConfig};
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::catalog::ResourceInfo;
use crate::registry::{self, custom};

/// How long one review may take, connection included (upstream's webhook client timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A CRD's `spec.conversion.webhook`: where its conversion webhook is and how it is spoken to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `clientConfig.url`.
    pub url: Option<String>,
    /// `clientConfig.service`.
    pub service: Option<ServiceRef>,
    /// `clientConfig.caBundle`: base64 of PEM certificates (empty: no roots).
    pub ca_bundle: String,
    /// `conversionReviewVersions`, in the CRD's order.
    pub review_versions: Vec<String>,
}

impl Webhook {
    /// The conversion webhook of `crd`, when its `spec.conversion.strategy` is `Webhook`.
    pub fn of_crd(crd: &Value) -> Option<Webhook> {
        let conversion = &crd["spec"]["conversion"];
        if conversion["strategy"] != "Webhook" {
            return None;
        }
        let hook = &conversion["webhook"];
        let config = &hook["clientConfig"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let service = ServiceRef::parse(&config["service"]);
        Some(Webhook {
            url: config["url"].as_str().map(str::to_owned),
            service,
            ca_bundle: text(&config["caBundle"]),
            review_versions: hook["conversionReviewVersions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// The conversion webhook `r`'s objects cross versions through, and its CRD's storage
/// version; `None` for built-in resources and CRDs with `strategy: None`.
pub fn webhook_for(r: &ResourceInfo) -> Option<(Arc<Webhook>, String)> {
    let served = custom::lookup(r)?;
    let hook = served.webhook.clone()?;
    Some((hook, served.storage_version.clone()))
}

/// Stored objects as `r` serves them, in one review when a webhook converts them (a list's
/// items: the error names the list kind, as upstream's).
pub async fn from_storage(
    ctx: &Ctx,
    r: &ResourceInfo,
    objects: Vec<Map<String, Value>>,
) -> Result<Vec<Map<String, Value>>> {
    let Some((hook, storage)) = webhook_for(r) else {
        return Ok(objects
            .into_iter()
            .map(|o| registry::convert::from_storage(r, o))
            .collect());
    };
    let list_gvk = format!("{}/{storage}, Kind={}List", r.group, r.kind);
    convert(
        ctx,
        &hook,
        objects,
        &registry::api_version(r),
        Some(&list_gvk),
    )
    .await
}

/// One stored object as `r` serves it.
pub async fn from_storage_one(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: Map<String, Value>,
) -> Result<Map<String, Value>> {
    let Some((hook, _)) = webhook_for(r) else {
        return Ok(registry::convert::from_storage(r, obj));
    };
    single(convert(ctx, &hook, vec![obj], &registry::api_version(r), None).await?)
}

/// An object as `r` serves it, converted to the form it is stored in.
pub async fn to_storage(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: Map<String, Value>,
) -> Result<Map<String, Value>> {
    let Some((hook, storage)) = webhook_for(r) else {
        return Ok(registry::convert::to_storage(r, obj));
    };
    let desired = format!("{}/{storage}", r.group);
    single(convert(ctx, &hook, vec![obj], &desired, None).await?)
}

/// A served object as a read gives it back once stored (through the stored form and back).
pub async fn round_trip(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: Map<String, Value>,
) -> Result<Map<String, Value>> {
    if webhook_for(r).is_none() {
        return Ok(registry::convert::round_trip(r, obj));
    }
    let stored = to_storage(ctx, r, obj).await?;
    from_storage_one(ctx, r, stored).await
}

fn single(mut objects: Vec<Map<String, Value>>) -> Result<Map<String, Value>> {
    objects
        .pop()
        .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
}

/// Go's `schema.GroupVersionKind.String()` of an object.
fn gvk_of(obj: &Map<String, Value>) -> String {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    format!("{group}/{version}, Kind={kind}")
}

/// Go's `%T` of a JSON value decoded as unstructured.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Converts `objects` to `desired` (`group/version`) through `hook`: those already there are
/// kept; the others go in one review. `list_gvk` names the list when these are a list's items.
async fn convert(
    ctx: &Ctx,
    hook: &Webhook,
    mut objects: Vec<Map<String, Value>>,
    desired: &str,
    list_gvk: Option<&str>,
) -> Result<Vec<Map<String, Value>>> {
    let pending: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(desired))
        .map(|(i, _)| i)
        .collect();
    if pending.is_empty() {
        return Ok(objects);
    }
    let gvk = match list_gvk {
        Some(l) => l.to_owned(),
        None => gvk_of(&objects[pending[0]]),
    };
    let failed = |e: String| webhook_failed(format!("conversion webhook for {gvk} failed: {e}"));
    let review_version = hook
        .review_versions
        .iter()
        .find(|v| *v == "v1" || *v == "v1beta1")
        .ok_or_else(|| webhook_failed("no supported conversion review versions".into()))?;
    let uid = uuid::Uuid::new_v4().to_string();
    let sent: Vec<Value> = pending
        .iter()
        .map(|i| Value::Object(objects[*i].clone()))
        .collect();
    let review = review_request(review_version, &uid, desired, &sent);
    let body = serde_json::to_vec(&review).map_err(|e| failed(e.to_string()))?;
    let config = ClientConfig {
        url: hook.url.clone(),
        service: hook.service.clone(),
        ca_bundle: hook.ca_bundle.clone(),
    };
    let target = client::resolve(&ctx.storage, &config, TIMEOUT).map_err(&failed)?;
    let deadline = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)";
    let answer = client::post(&target, body, TIMEOUT, deadline)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let converted = converted_objects(review_version, &uid, &answer).map_err(&failed)?;
    if converted.len() != pending.len() {
        return Err(webhook_failed(format!(
            "conversion webhook for {gvk} returned {} objects, expected {}",
            converted.len(),
            pending.len()
        )));
    }
    for (n, (i, out)) in pending.iter().zip(converted).enumerate() {
        let original = &objects[*i];
        let checked = match list_gvk {
            Some(_) => check_list_item(original, out, desired, n),
            None => check_single(original, out, desired),
        };
        let restored = checked.map_err(|e| {
            webhook_failed(format!("conversion webhook for {gvk} returned invalid {e}"))
        })?;
        objects[*i] = restored;
    }
    Ok(objects)
}

/// A conversion webhook failure as upstream answers it: a plain Go error, which
/// `ErrorToAPIStatus` makes a 500 with no reason (kubectl: `Error from server: …`).
fn webhook_failed(message: String) -> ApiError {
    ApiError::Status {
        code: 500,
        reason: String::new(),
        message,
        details: None,
    }
}

/// The `ConversionReview` request body in `version` (upstream sends an empty response too).
fn review_request(version: &str, uid: &str, desired: &str, objects: &[Value]) -> Value {
    json!({
        "kind": "ConversionReview",
        "apiVersion": format!("apiextensions.k8s.io/{version}"),
        "request": { "uid": uid, "desiredAPIVersion": desired, "objects": objects },
        "response": { "uid": "", "convertedObjects": null, "result": { "metadata": {} } },
    })
}

/// The converted objects of a webhook's answer, checked as upstream's
/// `getConvertedObjectsFromResponse` (v1beta1 answers skip the kind and uid checks).
fn converted_objects(
    version: &str,
    uid: &str,
    answer: &[u8],
) -> std::result::Result<Vec<Value>, String> {
    let review: Map<String, Value> = serde_json::from_slice(answer).map_err(|e| e.to_string())?;
    if version == "v1" {
        let got = gvk_of(&review);
        let want = "apiextensions.k8s.io/v1, Kind=ConversionReview";
        if got != want {
            return Err(format!("expected webhook response of {want}, got {got}"));
        }
    }
    let response = match review.get("response") {
        Some(Value::Object(r)) => r,
        _ => return Err("no response provided".into()),
    };
    if version == "v1" {
        let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let result = response.get("result");
    let status = result
        .and_then(|r| r.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if status != "Success" {
        let message = result
            .and_then(|r| r.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !message.is_empty() {
            return Err(message.to_owned());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Upstream's checks of one item of a converted list (its index quirk included: the index
/// named is one past the item's, except when the item is not an object).
fn check_list_item(
    original: &Map<String, Value>,
    out: Value,
    desired: &str,
    n: usize,
) -> std::result::Result<Map<String, Value>, String> {
    let Value::Object(out) = out else {
        return Err(format!(
            "converted object at index {n}: Object 'Kind' is missing in '{out}'"
        ));
    };
    let at = n + 1;
    let invalid = |e: String| format!("converted object at index {at}: {e}");
    check_version_and_kind(original, &out, desired).map_err(invalid)?;
    validate_converted(original, &out).map_err(invalid)?;
    restore_meta(original, out).map_err(|e| format!("metadata in object at index {at}: {e}"))
}

/// Upstream's checks of a single converted object.
fn check_single(
    original: &Map<String, Value>,
    out: Value,
    desired: &str,
) -> std::result::Result<Map<String, Value>, String> {
    let Value::Object(out) = out else {
        return Err(format!(
            "object at index 0: Object 'Kind' is missing in '{out}'"
        ));
    };
    check_version_and_kind(original, &out, desired)
        .map_err(|e| format!("object at index 0: {e}"))?;
    validate_converted(original, &out).map_err(|e| format!("object: {e}"))?;
    restore_meta(original, out).map_err(|e| format!("metadata: {e}"))
}

fn check_version_and_kind(
    original: &Map<String, Value>,
    out: &Map<String, Value>,
    desired: &str,
) -> std::result::Result<(), String> {
    let text = |o: &Map<String, Value>, k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let got = text(out, "apiVersion");
    if got != desired {
        return Err(format!(
            "invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    let (want, got) = (text(original, "kind"), text(out, "kind"));
    if want != got {
        return Err(format!("invalid kind (expected {want}, received {got})"));
    }
    Ok(())
}

/// Upstream's `validateConvertedObject`: kind, name, namespace and uid unchanged.
fn validate_converted(
    original: &Map<String, Value>,
    out: &Map<String, Value>,
) -> std::result::Result<(), String> {
    let kind = |o: &Map<String, Value>| {
        o.get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if kind(original) != kind(out) {
        return Err(format!(
            "must have the same kind: {} != {}",
            kind(original),
            kind(out)
        ));
    }
    for (field, what) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
        let get = |o: &Map<String, Value>| {
            o.get("metadata")
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (a, b) = (get(original), get(out));
        if a != b {
            return Err(format!("must have the same {what}: {a} != {b}"));
        }
    }
    Ok(())
}

/// Upstream's `restoreObjectMeta`: the original's metadata, with the converted object's labels
/// and annotations (string values only).
fn restore_meta(
    original: &Map<String, Value>,
    mut out: Map<String, Value>,
) -> std::result::Result<Map<String, Value>, String> {
    let response_meta = match out.get("metadata") {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ));
        }
    };
    let mut meta = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match response_meta.get(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
            }
            Some(Value::Object(m)) => {
                if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!(
                        "metadata.{field}[{k}] must be a string, but is {} in converted object",
                        go_type(v)
                    ));
                }
                meta.insert(field.into(), Value::Object(m.clone()));
            }
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                ));
            }
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn stored() -> Map<String, Value> {
        obj(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": { "name": "a", "namespace": "default", "uid": "u1",
                          "resourceVersion": "5", "labels": { "x": "1" } },
            "spec": { "size": 3 }
        }))
    }

    #[test]
    fn webhook_settings_come_from_the_crd() {
        let crd = json!({ "spec": { "conversion": { "strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1beta1", "v1"],
            "clientConfig": { "caBundle": "Zm9v",
                "service": { "namespace": "ns", "name": "conv", "path": "/convert" } } } } } });
        let hook = Webhook::of_crd(&crd).unwrap();
        assert_eq!(hook.review_versions, ["v1beta1", "v1"]);
        assert_eq!(hook.ca_bundle, "Zm9v");
        assert_eq!(
            hook.service,
            Some(ServiceRef {
                namespace: "ns".into(),
                name: "conv".into(),
                path: "/convert".into(),
                port: 443
            })
        );
        let none = json!({ "spec": { "conversion": { "strategy": "None" } } });
        assert!(Webhook::of_crd(&none).is_none());
    }

    #[test]
    fn answers_are_checked_as_upstream() {
        let ok = |uid: &str, objs: Value| {
            serde_json::to_vec(&json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": { "uid": uid, "result": { "status": "Success" }, "convertedObjects": objs }
            }))
            .unwrap()
        };
        assert_eq!(
            converted_objects("v1", "u", &ok("u", json!([{}])))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            converted_objects("v1", "u", &ok("v", json!([]))).unwrap_err(),
            "expected response.uid=\"u\", got \"v\""
        );
        let failed = serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": { "uid": "u", "result": { "status": "Failure", "message": "nope" } }
        }))
        .unwrap();
        assert_eq!(converted_objects("v1", "u", &failed).unwrap_err(), "nope");
        let wrong = serde_json::to_vec(&json!({ "apiVersion": "v1", "kind": "Status" })).unwrap();
        assert_eq!(
            converted_objects("v1", "u", &wrong).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got /v1, Kind=Status"
        );
        // v1beta1 answers are not checked for kind or uid.
        let beta = serde_json::to_vec(&json!({
            "response": { "result": { "status": "Success" }, "convertedObjects": [] }
        }))
        .unwrap();
        assert!(converted_objects("v1beta1", "u", &beta).unwrap().is_empty());
        let no_status = serde_json::to_vec(&json!({ "response": { "result": {} } })).unwrap();
        assert_eq!(
            converted_objects("v1beta1", "u", &no_status).unwrap_err(),
            "response.result.status was '', not 'Success'"
        );
    }

    #[test]
    fn converted_metadata_is_the_original_but_labels_and_annotations() {
        let out = json!({
            "apiVersion": "example.com/v2", "kind": "Widget",
            "metadata": { "name": "a", "namespace": "default", "uid": "u1",
                          "resourceVersion": "99", "labels": { "y": "2" }, "generation": 7 },
            "spec": { "dimensions": { "size": 3 } }
        });
        let got = check_single(&stored(), out, "example.com/v2").unwrap();
        assert_eq!(got["metadata"]["resourceVersion"], "5");
        assert_eq!(got["metadata"]["labels"], json!({ "y": "2" }));
        assert!(got["metadata"].get("generation").is_none());
        assert_eq!(got["spec"]["dimensions"]["size"], 3);
    }

    #[test]
    fn invalid_objects_are_refused_with_upstream_messages() {
        let mut out = json!({ "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {} });
        assert_eq!(
            check_single(&stored(), out.clone(), "example.com/v2").unwrap_err(),
            "object at index 0: invalid groupVersion (expected example.com/v2, received example.com/v1)"
        );
        out["apiVersion"] = json!("example.com/v2");
        out["kind"] = json!("Gadget");
        assert_eq!(
            check_list_item(&stored(), out.clone(), "example.com/v2", 0).unwrap_err(),
            "converted object at index 1: invalid kind (expected Widget, received Gadget)"
        );
        out["kind"] = json!("Widget");
        out["metadata"] = json!({ "name": "b", "namespace": "default", "uid": "u1" });
        assert_eq!(
            check_single(&stored(), out.clone(), "example.com/v2").unwrap_err(),
            "object: must have the same name: a != b"
        );
        out["metadata"] = json!({ "name": "a", "namespace": "default", "uid": "u1",
                                  "labels": { "n": 1 } });
        assert_eq!(
            check_single(&stored(), out, "example.com/v2").unwrap_err(),
            "metadata: metadata.labels[n] must be a string, but is int64 in converted object"
        );
    }

    #[test]
    fn requests_carry_uid_desired_version_and_objects() {
        let r = review_request("v1", "u", "example.com/v2", &[json!({})]);
        assert_eq!(r["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(r["kind"], "ConversionReview");
        assert_eq!(r["request"]["uid"], "u");
        assert_eq!(r["request"]["desiredAPIVersion"], "example.com/v2");
        assert_eq!(r["request"]["objects"], json!([{}]));
        assert_eq!(gvk_of(&stored()), "example.com/v1, Kind=Widget");
    }
}
