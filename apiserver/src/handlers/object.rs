//! Object-level rules shared by every verb: decoding request bodies, metadata that the
//! server owns (uid, timestamps, generation, resourceVersion), names, and what a create or
//! an update may change.

use http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, FieldError, GroupResource, Result};
use crate::registry::catalog::ResourceInfo;
use crate::registry::{self, SERVED_SUBRESOURCES};

/// Kinds whose `metadata.generation` tracks spec changes (upstream strategies that set it).
const GENERATION_TRACKED: &[&str] = &[
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "replicationcontrollers",
    "jobs",
    "cronjobs",
    "poddisruptionbudgets",
    "networkpolicies",
    "ingresses",
    "customresourcedefinitions",
    "validatingadmissionpolicies",
    "mutatingadmissionpolicies",
    "flowschemas",
    "prioritylevelconfigurations",
];

/// Names that must be RFC 1123 labels rather than subdomains.
const LABEL_NAMED: &[&str] = &["namespaces", "services"];

/// The resource as it appears in messages.
pub(crate) fn group_resource(r: &ResourceInfo) -> GroupResource {
    GroupResource::new(r.group, r.plural)
}

/// Decodes a request body: JSON (a missing Content-Type is JSON, as upstream) or
/// Kubernetes protobuf (what kubectl sends for `create deployment|configmap|...`).
pub(crate) fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Map<String, Value>> {
    let ctype = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let base = ctype.split(';').next().unwrap_or("").trim();
    if base == crate::codec::PROTOBUF {
        return crate::codec::decode_protobuf(body).map_err(ApiError::BadRequest);
    }
    if base != "application/json" && base != "*/*" && !base.is_empty() {
        return Err(ApiError::UnsupportedMediaType(format!(
            "application/json, {}",
            crate::codec::PROTOBUF
        )));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::BadRequest(
            "the body of the request is not a JSON object".into(),
        )),
        Err(e) => Err(ApiError::BadRequest(format!(
            "couldn't get version/kind; json parse error: {e}"
        ))),
    }
}

/// Checks `apiVersion`/`kind` of a body against the URL's resource and fills them in.
pub(crate) fn check_type(obj: &mut Map<String, Value>, r: &ResourceInfo) -> Result<()> {
    let want_version = registry::api_version(r);
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != want_version => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version ({want_version})"
            )));
        }
        _ => {}
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if k != r.kind => {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                r.kind
            )));
        }
        _ => {}
    }
    obj.insert("apiVersion".into(), json!(want_version));
    obj.insert("kind".into(), json!(r.kind));
    Ok(())
}

/// Whether `a` and `b` are the same object but for `metadata.resourceVersion`: an update
/// that would store `a` over `b` changes nothing (upstream's GuaranteedUpdate then skips
/// the write, so the resourceVersion stays and `kubectl patch` says "(no change)").
pub(crate) fn same_but_resource_version(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    let meta = |o: &Map<String, Value>| o.get("metadata").and_then(Value::as_object).cloned();
    let strip = |m: Option<Map<String, Value>>| {
        m.map(|mut m| {
            m.remove("resourceVersion");
            m
        })
    };
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| k == "metadata" || b.get(k) == Some(v))
        && strip(meta(a)) == strip(meta(b))
}

/// `metadata` of an object, created (as `{}`) if missing or not an object. Always `Some`.
pub(crate) fn meta(obj: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    let slot = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// Reads a string field of `metadata`.
pub(crate) fn meta_str<'a>(obj: &'a Map<String, Value>, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Validates an object name as upstream's name validation does for `r`.
pub(crate) fn validate_name(r: &ResourceInfo, name: &str) -> Option<FieldError> {
    if LABEL_NAMED.contains(&r.plural) {
        (!is_dns_label(name)).then(|| FieldError {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ),
        })
    } else {
        (!is_dns_subdomain(name)).then(|| FieldError {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        })
    }
}

/// Validates label keys and values (upstream's qualified-name and label-value rules, in
/// short form).
fn validate_labels(obj: &Map<String, Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(labels) = obj
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    else {
        return errs;
    };
    for (k, v) in labels {
        let name = k.rsplit('/').next().unwrap_or(k);
        let key_ok = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && name
                .as_bytes()
                .first()
                .is_some_and(u8::is_ascii_alphanumeric)
            && name
                .as_bytes()
                .last()
                .is_some_and(u8::is_ascii_alphanumeric);
        if !key_ok {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: "metadata.labels".into(),
                message: format!("Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
            });
        }
        let value = v.as_str().unwrap_or("");
        let value_ok = value.is_empty()
            || (value.len() <= 63
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && value
                    .as_bytes()
                    .first()
                    .is_some_and(u8::is_ascii_alphanumeric)
                && value
                    .as_bytes()
                    .last()
                    .is_some_and(u8::is_ascii_alphanumeric));
        if !v.is_string() || !value_ok {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: "metadata.labels".into(),
                message: format!("Invalid value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
            });
        }
    }
    errs
}

/// Upstream's `ValidateNoNewFinalizers`: an object being deleted may lose finalizers, never
/// gain them.
fn no_new_finalizers_while_deleting(
    new: &Map<String, Value>,
    old: &Map<String, Value>,
) -> Option<FieldError> {
    if meta_str(old, "deletionTimestamp").is_empty() {
        return None;
    }
    let list = |o: &Map<String, Value>| -> Vec<String> {
        o.get("metadata")
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .map(|f| {
                f.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = list(old);
    let mut extra: Vec<String> = list(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if extra.is_empty() {
        return None;
    }
    extra.sort();
    extra.dedup();
    let quoted: Vec<String> = extra.iter().map(|f| format!("{f:?}")).collect();
    Some(FieldError {
        reason: "FieldValueForbidden",
        field: "metadata.finalizers".into(),
        message: format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            quoted.join(", ")
        ),
    })
}

/// Runs the metadata validation every kind shares; `Invalid` (422) on failure.
///
/// With `fields`, also upstream's validation of the kind's main fields
/// (`crate::validation`), given the stored object on update.
pub(crate) fn validate(
    r: &ResourceInfo,
    obj: &Map<String, Value>,
    fields: bool,
    old: Option<&Map<String, Value>>,
) -> Result<()> {
    let name = meta_str(obj, "name");
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(FieldError {
            reason: "FieldValueRequired",
            field: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
        });
    } else if let Some(e) = validate_name(r, name) {
        causes.push(e);
    }
    causes.extend(validate_labels(obj));
    if let Some(old) = old {
        causes.extend(no_new_finalizers_while_deleting(obj, old));
    }
    if fields {
        causes.extend(crate::validation::validate(r, obj, old));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            group: r.group.into(),
            kind: r.kind.into(),
            name: name.into(),
            causes,
        })
    }
}

/// A new uid.
pub(crate) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Now, as Kubernetes formats `metav1.Time` (RFC 3339, whole seconds, UTC).
pub(crate) fn now() -> String {
    let ts = jiff::Timestamp::now();
    let secs = ts.as_second();
    jiff::Timestamp::from_second(secs).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

/// The random suffix of a generated name (upstream's alphabet, 5 characters).
pub(crate) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

fn has_status_subresource(r: &ResourceInfo) -> bool {
    r.subresources
        .iter()
        .any(|s| s.name == "status" && SERVED_SUBRESOURCES.contains(&"status"))
}

/// Sets what the server owns on create: uid, creationTimestamp, generation, initial status.
pub(crate) fn prepare_for_create(r: &ResourceInfo, obj: &mut Map<String, Value>) {
    if let Some(m) = meta(obj) {
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(now()));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if GENERATION_TRACKED.contains(&r.plural) || crate::crd::serve::is_custom(r) || is_pods(r) {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    if has_status_subresource(r) {
        match r.plural {
            "nodes" => {} // nodes may be created with status (upstream allows it)
            "pods" => {
                obj.insert(
                    "status".into(),
                    json!({ "phase": "Pending", "qosClass": "BestEffort" }),
                );
            }
            "namespaces" => {
                obj.insert("status".into(), json!({ "phase": "Active" }));
            }
            _ => {
                obj.remove("status");
            }
        }
    }
    if r.plural == "namespaces" {
        obj.insert("spec".into(), json!({ "finalizers": ["kubernetes"] }));
    }
}

/// Carries server-owned fields from the stored object into an update of the main resource:
/// uid, creationTimestamp, deletion fields, status (owned by the status subresource), and
/// generation (bumped when spec changed).
pub(crate) fn prepare_for_update(
    r: &ResourceInfo,
    new: &mut Map<String, Value>,
    old: &Map<String, Value>,
) {
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let custom = crate::crd::serve::is_custom(r);
    let spec_changed = if custom {
        crate::crd::serve::spec_changed(r, new, old)
    } else {
        new.get("spec") != old.get("spec")
    };
    if let Some(m) = meta(new) {
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old_meta.get(field) {
                Some(v) => {
                    m.insert(field.into(), v.clone());
                }
                None => {
                    m.remove(field);
                }
            }
        }
        m.remove("resourceVersion");
        if GENERATION_TRACKED.contains(&r.plural) || custom {
            let g = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            m.insert(
                "generation".into(),
                json!(if spec_changed { g + 1 } else { g }),
            );
        } else {
            // No request changes the generation (upstream's `BeforeUpdate`); pods bump it
            // after their subresource's rules decided the spec (`pod_generation`).
            match old_meta.get("generation") {
                Some(g) => m.insert("generation".into(), g.clone()),
                None => m.remove("generation"),
            };
        }
    }
    if has_status_subresource(r) {
        match old.get("status") {
            Some(s) => {
                new.insert("status".into(), s.clone());
            }
            None => {
                new.remove("status");
            }
        }
    }
    // An updated CRD keeps its status, and a new storage version joins `storedVersions`.
    if crate::crd::serve::is_crd(r) {
        let status = crate::crd::naming::status_on_update(
            &Value::Object(new.clone()),
            &Value::Object(old.clone()),
        );
        new.insert("status".into(), status);
    }
}

/// Where a write of a subresource that changes only part of a pod starts from: the stored
/// object, without its resourceVersion, with the managedFields recorded for this write.
pub(crate) fn stored_with_managed_fields(
    new: &Map<String, Value>,
    old: &Map<String, Value>,
) -> Map<String, Value> {
    let managed = new
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .cloned();
    let mut out = old.clone();
    if let Some(m) = meta(&mut out) {
        m.remove("resourceVersion");
        match managed {
            Some(f) => m.insert("managedFields".into(), f),
            None => m.remove("managedFields"),
        };
    }
    out
}

/// Whether `r` is core/v1 pods.
fn is_pods(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "pods"
}

/// A pod's `metadata.generation` on an update of its spec (the object, `ephemeralcontainers`,
/// `resize`), once what the write may change is decided: the stored one plus one when the
/// spec changed, or when the pod was stored without one (v1.33's pod strategies, KEP 5067:
/// 1 on create, not feature-gated; status writes and bindings keep it).
pub(crate) fn pod_generation(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    let g = old
        .get("metadata")
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let bump = g == 0 || new.get("spec") != old.get("spec");
    if let Some(m) = meta(new) {
        m.insert("generation".into(), json!(if bump { g + 1 } else { g }));
    }
}

/// Serialises an object for storage (without resourceVersion), fields in Go's struct order
/// (`codec::go_json`): reads that serve the stored bytes answer as upstream writes them.
pub(crate) fn encode(obj: &Map<String, Value>) -> Result<Vec<u8>> {
    Ok(crate::codec::go_json::object_to_vec(obj))
}

/// Decodes a stored object and stamps it with its resourceVersion.
pub(crate) fn from_stored(bytes: &[u8], revision: i64) -> Result<Map<String, Value>> {
    let mut obj: Map<String, Value> = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::Internal(format!("decoding stored object: {e}")))?;
    if let Some(m) = meta(&mut obj) {
        m.insert("resourceVersion".into(), json!(revision.to_string()));
    }
    Ok(obj)
}

/// Parses a resourceVersion string (a decimal revision); anything else is a 400.
pub(crate) fn parse_rv(rv: &str) -> Result<i64> {
    rv.parse::<i64>()
        .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc_1123() {
        assert!(is_dns_subdomain("web-1.example"));
        assert!(!is_dns_subdomain("Bad_Name"));
        assert!(!is_dns_label("a.b"));
        assert!(!is_dns_label("-x"));
    }

    #[test]
    fn pod_generation_follows_spec_changes() {
        let old = json!({"metadata": {"generation": 3}, "spec": {"containers": [{"image": "a"}]}});
        let Some(old) = old.as_object() else {
            panic!("object");
        };
        let mut same = old.clone();
        meta(&mut same).map(|m| m.insert("labels".into(), json!({"x": "y"})));
        pod_generation(&mut same, old);
        assert_eq!(same["metadata"]["generation"], 3);
        let mut changed = old.clone();
        changed.insert("spec".into(), json!({"containers": [{"image": "b"}]}));
        pod_generation(&mut changed, old);
        assert_eq!(changed["metadata"]["generation"], 4);
        // A pod stored without one gets 1 on its first write.
        let unset = json!({"metadata": {}, "spec": {}});
        let Some(unset) = unset.as_object() else {
            panic!("object");
        };
        let mut next = unset.clone();
        pod_generation(&mut next, unset);
        assert_eq!(next["metadata"]["generation"], 1);
    }

    #[test]
    fn timestamps_have_whole_seconds() {
        let t = now();
        assert!(t.ends_with('Z') && !t.contains('.'), "{t}");
    }

    #[test]
    fn generated_suffix_uses_the_upstream_alphabet() {
        let s = name_suffix();
        assert_eq!(s.len(), 5);
        assert!(
            s.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
    }
}
