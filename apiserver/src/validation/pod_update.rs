//! What a plain update of a Pod may change (`ValidatePodUpdate` and
//! `ValidatePodSpecificAnnotationUpdates` of pkg/apis/core/validation, kubernetes v1.33).
//!
//! Of a Pod's spec only these may change: `containers[*].image` and `initContainers[*].image`
//! (never emptied, nor padded with whitespace), `activeDeadlineSeconds` (set when unset, or
//! lowered; never unset), `tolerations` (additions only; an existing toleration may change its
//! `tolerationSeconds`), `schedulingGates` (removals only), `terminationGracePeriodSeconds`
//! (to 1 when it was negative) and, while the pod is gated, `nodeSelector` and the required
//! node affinity (additions only). Anything else is refused with upstream's `spec: Forbidden:
//! pod updates may not change fields other than …` followed by a diff of the two specs.
//! Containers may be neither added nor removed. The mirror-pod and AppArmor annotations may
//! not be added, changed or removed.
//!
//! Specs are compared as Go compares the decoded structs (`apiequality.Semantic.DeepEqual`):
//! both are put through the Pod's protobuf message (absent and zero-valued non-pointer fields,
//! `null`, empty lists and maps, and quantities' spellings then read the same); raw JSON
//! equality is tried first, so metadata-only writes (labels, finalizers, owner references)
//! pay nothing.
//!
//! The diff after the message follows the layout of go-cmp's `cmp.Diff(oldSpec, newSpec)`
//! on upstream's internal `core.PodSpec` (its field names and order, two identical fields of
//! context, `... // N identical fields` for the rest), one line per changed top-level field
//! with its value as compact JSON. go-cmp's output is not stable by design (it mixes in
//! non-breaking spaces at random), so clients cannot depend on it byte for byte; the first
//! line is upstream's exactly.

use serde_json::{Map, Value, json};

use super::{
    Obj, forbidden, get_arr, get_i64, get_obj, get_str, go_quote, go_string_map, go_string_slice,
    invalid, objs, required, without_nulls,
};
use crate::error::FieldError;

/// Upstream's `updatablePodSpecFields`, joined as its message joins them.
const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `core.MirrorPodAnnotationKey`.
const MIRROR: &str = "kubernetes.io/config.mirror";

/// `v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix`.
const APPARMOR_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// `ValidatePodUpdate`'s rules for `new` replacing the stored `old` (the spec itself has been
/// validated as on create by the caller).
pub(super) fn update(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    annotation_updates(errs, new, old);
    let empty = Obj::new();
    let new_spec = get_obj(new, "spec").unwrap_or(&empty);
    let old_spec = get_obj(old, "spec").unwrap_or(&empty);
    spec_update(errs, new_spec, old_spec);
}

/// `ValidatePodSpecificAnnotationUpdates`: the mirror-pod and AppArmor annotations stay as
/// they were.
fn annotation_updates(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    let annotations = |o: &Obj| -> Obj {
        get_obj(o, "metadata")
            .and_then(|m| get_obj(m, "annotations"))
            .cloned()
            .unwrap_or_default()
    };
    let (new_a, old_a) = (annotations(new), annotations(old));
    let guarded = |k: &str| k == MIRROR || k.starts_with(APPARMOR_PREFIX);
    let path = |k: &str| format!("metadata.annotations[{k}]");
    let mut old_keys: Vec<&String> = old_a.keys().filter(|k| guarded(k)).collect();
    old_keys.sort();
    for k in old_keys {
        if new_a.get(k) == old_a.get(k) {
            continue;
        }
        let detail = if k == MIRROR {
            "may not remove or update mirror pod annotation"
        } else {
            "may not remove or update AppArmor annotations"
        };
        errs.push(forbidden(&path(k), detail));
    }
    let mut added: Vec<&String> = new_a
        .keys()
        .filter(|k| guarded(k) && !old_a.contains_key(*k))
        .collect();
    added.sort();
    for k in added {
        let detail = if k == MIRROR {
            "may not add mirror pod annotation"
        } else {
            "may not add AppArmor annotations"
        };
        errs.push(forbidden(&path(k), detail));
    }
}

/// The spec rules of `ValidatePodUpdate`, in upstream's order (and with its early returns).
fn spec_update(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    for list in ["containers", "initContainers"] {
        if !container_updates(errs, new, old, list) {
            return;
        }
    }
    if !active_deadline(errs, new, old) {
        return;
    }
    only_added_tolerations(errs, new, old);
    only_deleted_scheduling_gates(errs, new, old);
    if new == old {
        return;
    }

    // The updatable fields are taken from the old spec; what is left must not differ.
    let mut munged = new.clone();
    for list in ["containers", "initContainers"] {
        let old_images: Vec<Option<Value>> = get_arr(old, list)
            .iter()
            .map(|c| c.get("image").cloned())
            .collect();
        if let Some(items) = munged.get_mut(list).and_then(Value::as_array_mut) {
            for (c, image) in items.iter_mut().zip(old_images) {
                if let Some(c) = c.as_object_mut() {
                    set(c, "image", image);
                }
            }
        }
    }
    for key in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        set(&mut munged, key, old.get(key).cloned());
    }
    if get_i64(old, "terminationGracePeriodSeconds").is_some_and(|v| v < 0)
        && get_i64(&munged, "terminationGracePeriodSeconds") == Some(1)
    {
        set(
            &mut munged,
            "terminationGracePeriodSeconds",
            old.get("terminationGracePeriodSeconds").cloned(),
        );
    }
    if !get_arr(old, "schedulingGates").is_empty() {
        gated_placement(errs, &mut munged, old);
    }
    if munged == *old {
        return;
    }
    let (before, after) = match (canonical(old), canonical(&munged)) {
        (Some(before), Some(after)) => (before, after),
        _ => (normalized(old), normalized(&munged)),
    };
    if before != after {
        errs.push(forbidden(
            "spec",
            &format!(
                "pod updates may not change fields other than {UPDATABLE}\n{}",
                spec_diff(&before, &after)
            ),
        ));
    }
}

/// Sets or removes `key`.
fn set(obj: &mut Obj, key: &str, value: Option<Value>) {
    match value {
        Some(v) => {
            obj.insert(key.to_owned(), v);
        }
        None => {
            obj.remove(key);
        }
    }
}

/// `ValidateContainerUpdates` for the list `list`: false (stop) when its length changed.
fn container_updates(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj, list: &str) -> bool {
    let path = format!("spec.{list}");
    if get_arr(new, list).len() != get_arr(old, list).len() {
        errs.push(forbidden(
            &path,
            "pod updates may not add or remove containers",
        ));
        return false;
    }
    for (i, c) in objs(new, list) {
        let image = get_str(c, "image");
        let p = format!("{path}[{i}].image");
        if image.is_empty() {
            errs.push(required(&p, ""));
        }
        if image.trim() != image {
            errs.push(invalid(
                &p,
                &go_quote(image),
                "must not have leading or trailing whitespace",
            ));
        }
    }
    true
}

/// The `activeDeadlineSeconds` rules: set from unset, or lowered; never unset. False when
/// upstream returns at once.
fn active_deadline(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) -> bool {
    let path = "spec.activeDeadlineSeconds";
    let before = get_i64(old, "activeDeadlineSeconds");
    match get_i64(new, "activeDeadlineSeconds") {
        Some(v) => {
            if !(0..=i64::from(i32::MAX)).contains(&v) {
                errs.push(invalid(
                    path,
                    &v.to_string(),
                    "must be between 0 and 2147483647, inclusive",
                ));
                return false;
            }
            if before.is_some_and(|b| b < v) {
                errs.push(invalid(
                    path,
                    &v.to_string(),
                    "must be less than or equal to previous value",
                ));
                return false;
            }
        }
        None if before.is_some() => errs.push(invalid(
            path,
            "\"null\"",
            "must not update from a positive integer to nil value",
        )),
        None => {}
    }
    true
}

/// A toleration as Go compares it, without its `tolerationSeconds`.
fn toleration_key(t: &Value) -> Value {
    let mut t = normalized_value(t);
    if let Some(o) = t.as_object_mut() {
        o.remove("tolerationSeconds");
    }
    t
}

/// `validateOnlyAddedTolerations`: every old toleration is still there (its
/// `tolerationSeconds` aside).
fn only_added_tolerations(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    let new_keys: Vec<Value> = get_arr(new, "tolerations")
        .iter()
        .map(toleration_key)
        .collect();
    let kept = get_arr(old, "tolerations")
        .iter()
        .all(|t| new_keys.contains(&toleration_key(t)));
    if !kept {
        errs.push(forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
}

/// `validateOnlyDeletedSchedulingGates`: no gate the old spec lacks.
fn only_deleted_scheduling_gates(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    let old_names: Vec<&str> = objs(old, "schedulingGates")
        .map(|(_, g)| get_str(g, "name"))
        .collect();
    // Upstream keeps the last index of each name (a map) and reports in map order; here in
    // index order.
    let mut added: Vec<(usize, &str)> = Vec::new();
    for (i, g) in objs(new, "schedulingGates") {
        let name = get_str(g, "name");
        if old_names.contains(&name) {
            continue;
        }
        match added.iter_mut().find(|(_, n)| *n == name) {
            Some(entry) => entry.0 = i,
            None => added.push((i, name)),
        }
    }
    added.sort_unstable();
    for (i, name) in added {
        errs.push(forbidden(
            &format!("spec.schedulingGates[{i}].name"),
            &format!("only deletion is allowed, but found new scheduling gate '{name}'"),
        ));
    }
}

/// A gated pod's `nodeSelector` and required node affinity: additions only; both are then
/// taken from the old spec (so that only other changes remain).
fn gated_placement(errs: &mut Vec<FieldError>, munged: &mut Obj, old: &Obj) {
    if !same(munged.get("nodeSelector"), old.get("nodeSelector")) {
        let new_sel = get_obj(munged, "nodeSelector");
        let changed = get_obj(old, "nodeSelector").is_some_and(|o| {
            o.iter()
                .any(|(k, v)| new_sel.and_then(|n| n.get(k)) != Some(v))
        });
        if changed {
            errs.push(invalid(
                "spec.nodeSelector",
                &go_string_map(munged.get("nodeSelector")),
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            ));
        }
        set(munged, "nodeSelector", old.get("nodeSelector").cloned());
    }

    let old_na = get_obj(old, "affinity")
        .and_then(|a| a.get("nodeAffinity"))
        .cloned();
    let new_na = get_obj(munged, "affinity")
        .and_then(|a| a.get("nodeAffinity"))
        .cloned();
    if same(old_na.as_ref(), new_na.as_ref()) {
        return;
    }
    node_affinity_mutation(errs, new_na.as_ref(), old_na.as_ref());
    let old_na = old_na.filter(|v| !v.is_null());
    let new_affinity_set = munged.get("affinity").is_some_and(|a| !a.is_null());
    let old_affinity_set = old.get("affinity").is_some_and(|a| !a.is_null());
    if !new_affinity_set {
        if let Some(na) = old_na {
            munged.insert("affinity".into(), json!({ "nodeAffinity": na }));
        }
        return;
    }
    let only_node_affinity = get_obj(munged, "affinity").is_some_and(|a| {
        ["podAffinity", "podAntiAffinity"]
            .iter()
            .all(|k| a.get(*k).is_none_or(Value::is_null))
    });
    if !old_affinity_set && only_node_affinity {
        munged.remove("affinity");
    } else if let Some(a) = munged.get_mut("affinity").and_then(Value::as_object_mut) {
        set(a, "nodeAffinity", old_na);
    }
}

/// The required terms of a node affinity.
fn required_terms(na: Option<&Value>) -> Option<&[Value]> {
    na.and_then(|n| n.get("requiredDuringSchedulingIgnoredDuringExecution"))
        .filter(|r| !r.is_null())
        .map(|r| {
            r.get("nodeSelectorTerms")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
        })
}

/// `validateNodeAffinityMutation`: the old required terms stay, each with only additions.
fn node_affinity_mutation(errs: &mut Vec<FieldError>, new: Option<&Value>, old: Option<&Value>) {
    let Some(old_terms) = required_terms(old) else {
        return;
    };
    let new_terms = required_terms(new).unwrap_or(&[]);
    let path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    if !old_terms.is_empty() && old_terms.len() != new_terms.len() {
        let value = match required_terms(new) {
            Some(terms) if !terms.is_empty() || new_has_terms_list(new) => go_terms(terms),
            _ => "[]core.NodeSelectorTerm(nil)".to_owned(),
        };
        errs.push(invalid(
            path,
            &value,
            "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        ));
        return;
    }
    for (i, (o, n)) in old_terms.iter().zip(new_terms).enumerate() {
        if !term_has_only_additions(n, o) {
            errs.push(invalid(
                &format!("{path}[{i}]"),
                &go_term(n),
                "only additions are allowed (no mutations or deletions)",
            ));
        }
    }
}

/// Whether the new node affinity has a (possibly empty) `nodeSelectorTerms` list.
fn new_has_terms_list(new: Option<&Value>) -> bool {
    new.and_then(|n| n.get("requiredDuringSchedulingIgnoredDuringExecution"))
        .and_then(|r| r.get("nodeSelectorTerms"))
        .is_some_and(Value::is_array)
}

/// `validateNodeSelectorTermHasOnlyAdditions`: the old requirements are the new term's first
/// ones, unchanged.
fn term_has_only_additions(new: &Value, old: &Value) -> bool {
    ["matchExpressions", "matchFields"].iter().all(|key| {
        let list = |t: &Value| -> Vec<Value> {
            t.get(*key)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(normalized_value).collect())
                .unwrap_or_default()
        };
        let (n, o) = (list(new), list(old));
        o.len() <= n.len() && o.iter().zip(&n).all(|(a, b)| a == b)
    })
}

/// Go's `%#v` of a `[]core.NodeSelectorRequirement`.
fn go_requirements(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]core.NodeSelectorRequirement(nil)".to_owned(),
        Some(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|r| {
                    format!(
                        "core.NodeSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        go_quote(r.get("key").and_then(Value::as_str).unwrap_or("")),
                        go_quote(r.get("operator").and_then(Value::as_str).unwrap_or("")),
                        go_string_slice(r.get("values")),
                    )
                })
                .collect();
            format!("[]core.NodeSelectorRequirement{{{}}}", parts.join(", "))
        }
    }
}

/// Go's `%#v` of a `core.NodeSelectorTerm`.
fn go_term(t: &Value) -> String {
    format!(
        "core.NodeSelectorTerm{{MatchExpressions:{}, MatchFields:{}}}",
        go_requirements(t.get("matchExpressions")),
        go_requirements(t.get("matchFields")),
    )
}

/// Go's `%#v` of a `[]core.NodeSelectorTerm`.
fn go_terms(terms: &[Value]) -> String {
    let parts: Vec<String> = terms.iter().map(go_term).collect();
    format!("[]core.NodeSelectorTerm{{{}}}", parts.join(", "))
}

// ---- comparing specs as Go does ----

/// Whether two optional JSON values decode to equal Go values (loosely: nulls and empty
/// values are absent).
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    let norm = |v: Option<&Value>| v.map(normalized_value).filter(|v| !is_empty(v));
    norm(a) == norm(b)
}

/// Whether a JSON value is `null`, `""`, `[]` or `{}`.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `v` without nulls, empty strings, lists and maps at any depth.
fn normalized_value(v: &Value) -> Value {
    match without_nulls(v) {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized_value(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized_value).collect()),
        other => other,
    }
}

/// A spec, normalized (the fallback when it has no protobuf form).
fn normalized(spec: &Obj) -> Obj {
    match normalized_value(&Value::Object(spec.clone())) {
        Value::Object(m) => m,
        _ => Obj::new(),
    }
}

/// A spec as Go reads it: through the Pod's protobuf message and back. `None` when the spec
/// has no protobuf form (a value of the wrong type).
fn canonical(spec: &Obj) -> Option<Obj> {
    let mut pod = Map::new();
    pod.insert("apiVersion".into(), json!("v1"));
    pod.insert("kind".into(), json!("Pod"));
    pod.insert("spec".into(), Value::Object(spec.clone()));
    let bytes = crate::codec::protobuf_encode::encode_object(&pod).ok()?;
    let decoded = crate::codec::decode_protobuf(&bytes).ok()?;
    let spec = decoded.get("spec").and_then(Value::as_object)?;
    Some(normalized(spec))
}

// ---- the diff after the message ----

/// Upstream's internal `core.PodSpec` fields in declaration order: the Go name, whether it
/// is a pointer or a string, and the v1 JSON keys it is read from.
const SPEC_FIELDS: &[(&str, Zero, &[&str])] = &[
    ("Volumes", Zero::Nil, &["volumes"]),
    ("InitContainers", Zero::Nil, &["initContainers"]),
    ("Containers", Zero::Nil, &["containers"]),
    ("EphemeralContainers", Zero::Nil, &["ephemeralContainers"]),
    ("RestartPolicy", Zero::Str, &["restartPolicy"]),
    (
        "TerminationGracePeriodSeconds",
        Zero::Ptr,
        &["terminationGracePeriodSeconds"],
    ),
    (
        "ActiveDeadlineSeconds",
        Zero::Ptr,
        &["activeDeadlineSeconds"],
    ),
    ("DNSPolicy", Zero::Str, &["dnsPolicy"]),
    ("NodeSelector", Zero::Nil, &["nodeSelector"]),
    (
        "ServiceAccountName",
        Zero::Str,
        &["serviceAccountName", "serviceAccount"],
    ),
    (
        "AutomountServiceAccountToken",
        Zero::Ptr,
        &["automountServiceAccountToken"],
    ),
    ("NodeName", Zero::Str, &["nodeName"]),
    (
        "SecurityContext",
        Zero::Ptr,
        &[
            "securityContext",
            "hostNetwork",
            "hostPID",
            "hostIPC",
            "shareProcessNamespace",
            "hostUsers",
        ],
    ),
    ("ImagePullSecrets", Zero::Nil, &["imagePullSecrets"]),
    ("Hostname", Zero::Str, &["hostname"]),
    ("Subdomain", Zero::Str, &["subdomain"]),
    ("SetHostnameAsFQDN", Zero::Ptr, &["setHostnameAsFQDN"]),
    ("Affinity", Zero::Ptr, &["affinity"]),
    ("SchedulerName", Zero::Str, &["schedulerName"]),
    ("Tolerations", Zero::Nil, &["tolerations"]),
    ("HostAliases", Zero::Nil, &["hostAliases"]),
    ("PriorityClassName", Zero::Str, &["priorityClassName"]),
    ("Priority", Zero::Ptr, &["priority"]),
    ("PreemptionPolicy", Zero::Ptr, &["preemptionPolicy"]),
    ("DNSConfig", Zero::Ptr, &["dnsConfig"]),
    ("ReadinessGates", Zero::Nil, &["readinessGates"]),
    ("RuntimeClassName", Zero::Ptr, &["runtimeClassName"]),
    ("Overhead", Zero::Nil, &["overhead"]),
    ("EnableServiceLinks", Zero::Ptr, &["enableServiceLinks"]),
    (
        "TopologySpreadConstraints",
        Zero::Nil,
        &["topologySpreadConstraints"],
    ),
    ("OS", Zero::Ptr, &["os"]),
    ("SchedulingGates", Zero::Nil, &["schedulingGates"]),
    ("ResourceClaims", Zero::Nil, &["resourceClaims"]),
    ("Resources", Zero::Ptr, &["resources"]),
];

/// How a field reads when unset, and whether a scalar is written behind `&`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zero {
    /// A slice or map: `nil`.
    Nil,
    /// A string: `""`.
    Str,
    /// A pointer: `nil`, a scalar as `&value`.
    Ptr,
}

/// One top-level field of the spec as the diff shows it.
fn field_text(spec: &Obj, zero: Zero, keys: &[&str]) -> String {
    let present: Vec<(&str, &Value)> = keys
        .iter()
        .filter_map(|k| spec.get(*k).map(|v| (*k, v)))
        .collect();
    if keys.len() > 1 && keys[0] == "securityContext" {
        // The internal PodSecurityContext holds the host namespaces too.
        if present.is_empty() {
            return "nil".to_owned();
        }
        let mut merged = get_obj(spec, "securityContext")
            .cloned()
            .unwrap_or_default();
        for (k, v) in present.iter().filter(|(k, _)| *k != "securityContext") {
            merged.insert((*k).to_owned(), (*v).clone());
        }
        return format!("&{}", Value::Object(merged));
    }
    match present.first().map(|(_, v)| *v) {
        None => match zero {
            Zero::Str => "\"\"".to_owned(),
            Zero::Nil | Zero::Ptr => "nil".to_owned(),
        },
        Some(Value::String(s)) if zero == Zero::Ptr => format!("&{}", go_quote(s)),
        Some(Value::String(s)) => go_quote(s),
        Some(v @ (Value::Number(_) | Value::Bool(_))) if zero == Zero::Ptr => format!("&{v}"),
        Some(v) => v.to_string(),
    }
}

/// go-cmp's report of `old` → `new` for a `core.PodSpec`, ending with a newline.
fn spec_diff(old: &Obj, new: &Obj) -> String {
    // Fields the internal type lacks (none today) come last under their JSON names.
    let known: Vec<&str> = SPEC_FIELDS
        .iter()
        .flat_map(|(_, _, k)| k.iter().copied())
        .collect();
    let mut extra: Vec<String> = old
        .keys()
        .chain(new.keys())
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect();
    extra.sort();
    extra.dedup();
    let mut fields: Vec<(String, String, String)> = SPEC_FIELDS
        .iter()
        .map(|(name, zero, keys)| {
            (
                (*name).to_owned(),
                field_text(old, *zero, keys),
                field_text(new, *zero, keys),
            )
        })
        .collect();
    for k in &extra {
        fields.push((
            k.clone(),
            field_text(old, Zero::Nil, &[k.as_str()]),
            field_text(new, Zero::Nil, &[k.as_str()]),
        ));
    }
    let changed: Vec<bool> = fields.iter().map(|(_, a, b)| a != b).collect();
    // Two identical fields of context on either side of a change.
    let shown: Vec<bool> = (0..fields.len())
        .map(|i| {
            let lo = i.saturating_sub(2);
            let hi = (i + 2).min(fields.len() - 1);
            changed[lo..=hi].iter().any(|c| *c)
        })
        .collect();
    let width = fields
        .iter()
        .zip(&shown)
        .filter(|(_, s)| **s)
        .map(|((name, _, _), _)| name.len() + 1)
        .max()
        .unwrap_or(0);
    let mut out = String::from("  core.PodSpec{\n");
    let mut skipped = 0usize;
    let flush = |out: &mut String, skipped: &mut usize| {
        if *skipped > 0 {
            let noun = if *skipped == 1 { "field" } else { "fields" };
            out.push_str(&format!("  \t... // {skipped} identical {noun}\n"));
            *skipped = 0;
        }
    };
    for (i, (name, before, after)) in fields.iter().enumerate() {
        if !shown[i] {
            skipped += 1;
            continue;
        }
        flush(&mut out, &mut skipped);
        let label = format!("{name}:");
        if changed[i] {
            out.push_str(&format!("- \t{label:<width$} {before},\n"));
            out.push_str(&format!("+ \t{label:<width$} {after},\n"));
        } else {
            out.push_str(&format!("  \t{label:<width$} {before},\n"));
        }
    }
    flush(&mut out, &mut skipped);
    out.push_str("  }\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value)]
    fn pod(spec: Value) -> Obj {
        let mut base = json!({
            "containers": [{ "name": "c", "image": "nginx:1.27" }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
        });
        if let (Some(b), Some(s)) = (base.as_object_mut(), spec.as_object()) {
            for (k, v) in s {
                b.insert(k.clone(), v.clone());
            }
        }
        json!({ "metadata": { "name": "p" }, "spec": base })
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    fn errors(old: &Obj, new: &Obj) -> Vec<String> {
        let mut errs = Vec::new();
        update(&mut errs, new, old);
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    fn first_line(errs: &[String]) -> Vec<String> {
        errs.iter()
            .map(|e| e.lines().next().unwrap_or("").to_owned())
            .collect()
    }

    const HEAD: &str = "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

    #[test]
    fn metadata_only_changes_are_allowed() {
        let old = pod(json!({}));
        let mut new = old.clone();
        new["metadata"] = json!({
            "name": "p",
            "labels": { "a": "b" },
            "annotations": { "x": "y" },
            "finalizers": ["f"],
        });
        assert!(errors(&old, &new).is_empty());
    }

    #[test]
    fn image_may_change_but_not_be_emptied_or_padded() {
        let old = pod(json!({}));
        let new = pod(json!({ "containers": [{ "name": "c", "image": "nginx:1.28" }] }));
        assert!(errors(&old, &new).is_empty());
        let new = pod(json!({ "containers": [{ "name": "c", "image": "" }] }));
        assert_eq!(
            errors(&old, &new),
            ["spec.containers[0].image: Required value"]
        );
        let new = pod(json!({ "containers": [{ "name": "c", "image": " nginx" }] }));
        assert_eq!(
            errors(&old, &new),
            [
                r#"spec.containers[0].image: Invalid value: " nginx": must not have leading or trailing whitespace"#
            ]
        );
        let old = pod(json!({ "initContainers": [{ "name": "i", "image": "busybox" }] }));
        let new = pod(json!({ "initContainers": [{ "name": "i", "image": "busybox:1.36" }] }));
        assert!(errors(&old, &new).is_empty());
    }

    #[test]
    fn containers_may_not_be_added_removed_or_renamed() {
        let old = pod(json!({}));
        let new = pod(json!({ "containers": [
            { "name": "c", "image": "nginx:1.27" },
            { "name": "d", "image": "nginx:1.27" },
        ] }));
        assert_eq!(
            errors(&old, &new),
            ["spec.containers: Forbidden: pod updates may not add or remove containers"]
        );
        let new = pod(json!({ "containers": [{ "name": "renamed", "image": "nginx:1.27" }] }));
        let errs = errors(&old, &new);
        assert_eq!(first_line(&errs), [HEAD]);
        let diff = errs[0].split_once('\n').map_or("", |(_, d)| d);
        assert!(diff.starts_with("  core.PodSpec{\n"), "{diff}");
        assert!(diff.contains("- \tContainers:"), "{diff}");
        assert!(diff.contains("+ \tContainers:"), "{diff}");
        assert!(diff.contains(r#""name":"renamed""#), "{diff}");
        assert!(diff.ends_with("  }\n"), "{diff}");
    }

    #[test]
    fn the_diff_names_the_changed_field_with_context() {
        let old = pod(json!({}));
        let new = pod(json!({ "nodeSelector": { "disk": "ssd" } }));
        let errs = errors(&old, &new);
        let diff = errs[0].split_once('\n').map_or("", |(_, d)| d);
        let w = "AutomountServiceAccountToken:".len();
        let line = |mark: &str, name: &str, value: &str| {
            format!("{mark}\t{:<w$} {value},\n", format!("{name}:"))
        };
        let expected = [
            "  core.PodSpec{\n".to_owned(),
            "  \t... // 6 identical fields\n".to_owned(),
            line("  ", "ActiveDeadlineSeconds", "nil"),
            line("  ", "DNSPolicy", "\"\""),
            line("- ", "NodeSelector", "nil"),
            line("+ ", "NodeSelector", r#"{"disk":"ssd"}"#),
            line("  ", "ServiceAccountName", "\"\""),
            line("  ", "AutomountServiceAccountToken", "nil"),
            "  \t... // 23 identical fields\n".to_owned(),
            "  }\n".to_owned(),
        ]
        .concat();
        assert_eq!(diff, expected);
    }

    #[test]
    fn equal_specs_spelled_differently_are_no_change() {
        let old = pod(json!({
            "containers": [{ "name": "c", "image": "nginx:1.27",
                "resources": { "requests": { "cpu": "1" } } }],
        }));
        let new = pod(json!({
            "containers": [{ "name": "c", "image": "nginx:1.27", "ports": [],
                "resources": { "requests": { "cpu": "1000m" } } }],
            "hostNetwork": false,
            "nodeName": null,
        }));
        assert!(errors(&old, &new).is_empty(), "{:?}", errors(&old, &new));
    }

    #[test]
    fn resources_are_not_changed_by_a_plain_update() {
        let old = pod(json!({
            "containers": [{ "name": "c", "image": "nginx:1.27",
                "resources": { "requests": { "cpu": "1" } } }],
        }));
        let new = pod(json!({
            "containers": [{ "name": "c", "image": "nginx:1.27",
                "resources": { "requests": { "cpu": "2" } } }],
        }));
        assert_eq!(first_line(&errors(&old, &new)), [HEAD]);
    }

    #[test]
    fn active_deadline_may_be_set_or_lowered_only() {
        let old = pod(json!({}));
        let new = pod(json!({ "activeDeadlineSeconds": 60 }));
        assert!(errors(&old, &new).is_empty());
        let old = new;
        let lower = pod(json!({ "activeDeadlineSeconds": 30 }));
        assert!(errors(&old, &lower).is_empty());
        let higher = pod(json!({ "activeDeadlineSeconds": 90 }));
        assert_eq!(
            errors(&old, &higher),
            [
                "spec.activeDeadlineSeconds: Invalid value: 90: must be less than or equal to previous value"
            ]
        );
        let unset = pod(json!({}));
        assert_eq!(
            errors(&old, &unset),
            [
                r#"spec.activeDeadlineSeconds: Invalid value: "null": must not update from a positive integer to nil value"#
            ]
        );
        let negative = pod(json!({ "activeDeadlineSeconds": -1 }));
        assert_eq!(
            errors(&old, &negative),
            [
                "spec.activeDeadlineSeconds: Invalid value: -1: must be between 0 and 2147483647, inclusive"
            ]
        );
    }

    #[test]
    fn tolerations_may_only_be_added() {
        let t = json!({ "key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10 });
        let u = json!({ "key": "u", "operator": "Exists" });
        let old = pod(json!({ "tolerations": [t] }));
        let added = pod(json!({ "tolerations": [t, u] }));
        assert!(errors(&old, &added).is_empty());
        let mut t2 = t;
        t2["tolerationSeconds"] = json!(20);
        let seconds = pod(json!({ "tolerations": [t2] }));
        assert!(errors(&old, &seconds).is_empty());
        let removed = pod(json!({ "tolerations": [u] }));
        assert_eq!(
            errors(&old, &removed),
            [
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
    }

    #[test]
    fn scheduling_gates_may_only_be_removed() {
        let old = pod(json!({ "schedulingGates": [{ "name": "a" }, { "name": "b" }] }));
        let fewer = pod(json!({ "schedulingGates": [{ "name": "b" }] }));
        assert!(errors(&old, &fewer).is_empty());
        let none = pod(json!({}));
        assert!(errors(&old, &none).is_empty());
        let more =
            pod(json!({ "schedulingGates": [{ "name": "a" }, { "name": "b" }, { "name": "x" }] }));
        assert_eq!(
            errors(&old, &more),
            [
                "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new scheduling gate 'x'"
            ]
        );
    }

    #[test]
    fn gated_pods_may_add_to_node_selector_and_affinity() {
        let gates = json!([{ "name": "g" }]);
        let old = pod(json!({ "schedulingGates": gates, "nodeSelector": { "a": "b" } }));
        let added =
            pod(json!({ "schedulingGates": gates, "nodeSelector": { "a": "b", "c": "d" } }));
        assert!(errors(&old, &added).is_empty());
        let changed = pod(json!({ "schedulingGates": gates, "nodeSelector": { "a": "z" } }));
        assert_eq!(
            errors(&old, &changed),
            [
                r#"spec.nodeSelector: Invalid value: map[string]string{"a":"z"}: only additions to spec.nodeSelector are allowed (no mutations or deletions)"#
            ]
        );
        // Not gated: any change is refused.
        let ungated = pod(json!({ "nodeSelector": { "a": "b" } }));
        let more = pod(json!({ "nodeSelector": { "a": "b", "c": "d" } }));
        assert_eq!(first_line(&errors(&ungated, &more)), [HEAD]);

        let req = |k: &str| json!({ "key": k, "operator": "Exists" });
        let affinity = |terms: Value| {
            json!({ "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": terms } } })
        };
        let old = pod(json!({ "schedulingGates": gates,
            "affinity": affinity(json!([{ "matchExpressions": [req("a")] }])) }));
        let more = pod(json!({ "schedulingGates": gates,
            "affinity": affinity(json!([{ "matchExpressions": [req("a"), req("b")] }])) }));
        assert!(errors(&old, &more).is_empty());
        let swapped = pod(json!({ "schedulingGates": gates,
            "affinity": affinity(json!([{ "matchExpressions": [req("b")] }])) }));
        assert_eq!(
            errors(&old, &swapped),
            [
                r#"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]: Invalid value: core.NodeSelectorTerm{MatchExpressions:[]core.NodeSelectorRequirement{core.NodeSelectorRequirement{Key:"b", Operator:"Exists", Values:[]string(nil)}}, MatchFields:[]core.NodeSelectorRequirement(nil)}: only additions are allowed (no mutations or deletions)"#
            ]
        );
        let two = pod(json!({ "schedulingGates": gates,
            "affinity": affinity(json!([{ "matchExpressions": [req("a")] }, { "matchExpressions": [req("b")] }])) }));
        let errs = errors(&old, &two);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].ends_with(
                "no additions/deletions to non-empty NodeSelectorTerms list are allowed"
            ),
            "{errs:?}"
        );
        // Setting a node affinity on a gated pod that had none is allowed.
        let bare = pod(json!({ "schedulingGates": gates }));
        assert!(errors(&bare, &more).is_empty());
    }

    #[test]
    fn termination_grace_period_may_go_from_negative_to_one_only() {
        let old = pod(json!({ "terminationGracePeriodSeconds": -1 }));
        let one = pod(json!({ "terminationGracePeriodSeconds": 1 }));
        assert!(errors(&old, &one).is_empty());
        let two = pod(json!({ "terminationGracePeriodSeconds": 2 }));
        assert_eq!(first_line(&errors(&old, &two)), [HEAD]);
        let old = pod(json!({}));
        assert_eq!(first_line(&errors(&old, &one)), [HEAD]);
    }

    #[test]
    fn ephemeral_containers_do_not_change_through_a_plain_update() {
        let old = pod(json!({}));
        let new = pod(json!({ "ephemeralContainers": [{ "name": "dbg", "image": "busybox" }] }));
        assert_eq!(first_line(&errors(&old, &new)), [HEAD]);
    }

    #[test]
    fn mirror_and_apparmor_annotations_stay() {
        let mut old = pod(json!({}));
        old["metadata"]["annotations"] = json!({ MIRROR: "x" });
        let mut new = old.clone();
        new["metadata"]["annotations"] = json!({
            "container.apparmor.security.beta.kubernetes.io/c": "runtime/default",
        });
        assert_eq!(
            errors(&old, &new),
            [
                "metadata.annotations[kubernetes.io/config.mirror]: Forbidden: may not remove or update mirror pod annotation",
                "metadata.annotations[container.apparmor.security.beta.kubernetes.io/c]: Forbidden: may not add AppArmor annotations",
            ]
        );
    }
}
