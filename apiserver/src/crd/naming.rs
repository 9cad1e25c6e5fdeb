//! A CRD's status as upstream's apiextensions controllers write it, as pure functions over the
//! CRD's JSON: the naming controller (`status.acceptedNames`, the `NamesAccepted` condition and
//! the first `Established` condition), the establishing controller (`Established=True`), the
//! deletion path (`Terminating`: the registry's `InstanceDeletionPending`, then the cleanup
//! finalizer's reasons) and the registry strategy's `status.storedVersions` upkeep.
//!
//! Each `*_status` function returns the whole new `status` to write (`None` when upstream
//! would write nothing); a condition's `lastTransitionTime` changes only when its `status`
//! does (upstream's `SetCRDCondition`).
//!
//! Name conflicts are judged as upstream judges them: against the accepted names
//! (`status.acceptedNames`) of every CRD of the same group, this one included; names of
//! built-in resources are not consulted (upstream protects the built-in groups by refusing
//! `*.k8s.io` and `*.kubernetes.io` groups without an approval annotation instead).

use std::collections::HashSet;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

/// The cleanup finalizer a deleted CRD carries until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// A CRD condition as the controllers compute it (`lastTransitionTime` is set on writing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `NamesAccepted`, `Established`, `Terminating`, …
    pub kind: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// A CamelCase reason, e.g. `NoConflicts`.
    pub reason: String,
    /// The human message, e.g. `no conflicts found`.
    pub message: String,
}

impl Condition {
    fn new(kind: &'static str, status: &'static str, reason: &str, message: &str) -> Condition {
        Condition {
            kind,
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// Whether `existing` (a condition in JSON) has the same type, status, reason and message
    /// (upstream's `IsCRDConditionEquivalent`, times ignored).
    pub fn equivalent(&self, existing: Option<&Value>) -> bool {
        existing.is_some_and(|c| {
            str_at(c, "type") == self.kind
                && str_at(c, "status") == self.status
                && str_at(c, "reason") == self.reason
                && str_at(c, "message") == self.message
        })
    }
}

/// The names of a CRD (`CustomResourceDefinitionNames`), empty when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Names {
    plural: String,
    singular: String,
    short_names: Vec<String>,
    kind: String,
    list_kind: String,
    categories: Vec<String>,
}

impl Names {
    fn from_json(v: Option<&Value>) -> Names {
        let s = |k: &str| v.map(|v| str_at(v, k)).unwrap_or("").to_owned();
        let list = |k: &str| {
            v.and_then(|v| v.get(k))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|x| x.as_str().unwrap_or("").to_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        Names {
            plural: s("plural"),
            singular: s("singular"),
            short_names: list("shortNames"),
            kind: s("kind"),
            list_kind: s("listKind"),
            categories: list("categories"),
        }
    }

    /// The JSON form, with the v1 type's `omitempty` fields left out when empty.
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("plural".into(), Value::from(self.plural.as_str()));
        if !self.singular.is_empty() {
            m.insert("singular".into(), Value::from(self.singular.as_str()));
        }
        if !self.short_names.is_empty() {
            m.insert("shortNames".into(), json!(self.short_names));
        }
        m.insert("kind".into(), Value::from(self.kind.as_str()));
        if !self.list_kind.is_empty() {
            m.insert("listKind".into(), Value::from(self.list_kind.as_str()));
        }
        if !self.categories.is_empty() {
            m.insert("categories".into(), json!(self.categories));
        }
        Value::Object(m)
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `equalToAcceptedOrFresh`: a requested name is fine if it is already ours or unused.
fn fresh(requested: &str, accepted: &str, used: &HashSet<&str>) -> Result<(), String> {
    if requested == accepted || !used.contains(requested) {
        Ok(())
    } else {
        Err(format!("{requested:?} is already in use"))
    }
}

/// The naming controller's `calculateNamesAndConditions`: the names of `crd` that can be
/// accepted given every CRD of its group (`others`: all CRDs; those of other groups are
/// skipped and an entry with `crd`'s name is replaced by `crd`), and the `NamesAccepted`
/// condition: `True`/`NoConflicts`/`no conflicts found`, or `False` with `PluralConflict`,
/// `SingularConflict`, `ShortNamesConflict`, `KindConflict` or `ListKindConflict` and
/// `"widgets" is already in use` (the last conflict found wins, as upstream). Names in
/// conflict keep their previously accepted value.
pub fn accepted_names(crd: &Value, others: &[Value]) -> (Value, Condition) {
    let (names, condition) = calculate(crd, others);
    (names.to_json(), condition)
}

fn calculate(crd: &Value, others: &[Value]) -> (Names, Condition) {
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let own_name = crd.pointer("/metadata/name").and_then(Value::as_str);
    let mut group_names = vec![Names::from_json(crd.pointer("/status/acceptedNames"))];
    for other in others {
        if other.pointer("/spec/group").and_then(Value::as_str) != Some(group)
            || other.pointer("/metadata/name").and_then(Value::as_str) == own_name
        {
            continue;
        }
        group_names.push(Names::from_json(other.pointer("/status/acceptedNames")));
    }
    let mut resources: HashSet<&str> = HashSet::new();
    let mut kinds: HashSet<&str> = HashSet::new();
    for n in &group_names {
        resources.insert(&n.plural);
        resources.insert(&n.singular);
        resources.extend(n.short_names.iter().map(String::as_str));
        kinds.insert(&n.kind);
        kinds.insert(&n.list_kind);
    }

    let requested = Names::from_json(crd.pointer("/spec/names"));
    let accepted = &group_names[0];
    let mut new = accepted.clone();
    let mut condition: Option<Condition> = None;
    let mut conflict = |reason: &str, message: String| {
        condition = Some(Condition::new("NamesAccepted", "False", reason, &message));
    };

    match fresh(&requested.plural, &accepted.plural, &resources) {
        Ok(()) => new.plural = requested.plural.clone(),
        Err(e) => conflict("PluralConflict", e),
    }
    match fresh(&requested.singular, &accepted.singular, &resources) {
        Ok(()) => new.singular = requested.singular.clone(),
        Err(e) => conflict("SingularConflict", e),
    }
    if requested.short_names != accepted.short_names {
        let mut errors: Vec<String> = Vec::new();
        for short in &requested.short_names {
            if accepted.short_names.contains(short) {
                continue;
            }
            if let Err(e) = fresh(short, "", &resources)
                && !errors.contains(&e)
            {
                errors.push(e);
            }
        }
        match errors.len() {
            0 => new.short_names = requested.short_names.clone(),
            1 => conflict("ShortNamesConflict", errors.remove(0)),
            _ => conflict("ShortNamesConflict", format!("[{}]", errors.join(", "))),
        }
    }
    match fresh(&requested.kind, &accepted.kind, &kinds) {
        Ok(()) => new.kind = requested.kind.clone(),
        Err(e) => conflict("KindConflict", e),
    }
    match fresh(&requested.list_kind, &accepted.list_kind, &kinds) {
        Ok(()) => new.list_kind = requested.list_kind.clone(),
        Err(e) => conflict("ListKindConflict", e),
    }
    new.categories = requested.categories;

    let condition = condition.unwrap_or_else(|| {
        Condition::new("NamesAccepted", "True", "NoConflicts", "no conflicts found")
    });
    (new, condition)
}

/// The naming controller's sync: the new status of `crd` (see [`accepted_names`]) with
/// `acceptedNames`, `NamesAccepted` and the initial `Established` condition
/// (`False`/`NotAccepted`/`not all names are accepted` until the names are accepted, then
/// `False`/`Installing`/`the initial names have been accepted` for the establishing step;
/// an `Established=True` condition is kept). `None` when `spec.names` already equals
/// `status.acceptedNames`, or nothing would change.
pub fn naming_status(crd: &Value, others: &[Value], now: Timestamp) -> Option<Value> {
    let spec_names = Names::from_json(crd.pointer("/spec/names"));
    let old_names = Names::from_json(crd.pointer("/status/acceptedNames"));
    if spec_names == old_names {
        return None;
    }
    let (names, names_accepted) = calculate(crd, others);
    let old_condition = find_condition(crd.get("status"), "NamesAccepted");
    if names == old_names && names_accepted.equivalent(old_condition) {
        return None;
    }
    let existing = find_condition(crd.get("status"), "Established");
    let mut established = match existing {
        Some(c) => Condition {
            kind: "Established",
            status: match str_at(c, "status") {
                "True" => "True",
                "False" => "False",
                _ => "Unknown",
            },
            reason: str_at(c, "reason").to_owned(),
            message: str_at(c, "message").to_owned(),
        },
        None => Condition::new(
            "Established",
            "False",
            "NotAccepted",
            "not all names are accepted",
        ),
    };
    if established.status != "True" && names_accepted.status == "True" {
        established = Condition::new(
            "Established",
            "False",
            "Installing",
            "the initial names have been accepted",
        );
    }
    let mut status = current_status(crd);
    status.insert("acceptedNames".into(), names.to_json());
    set_condition(&mut status, &names_accepted, now);
    set_condition(&mut status, &established, now);
    Some(Value::Object(status))
}

/// The establishing controller's sync: once `NamesAccepted` is `True` (and `Established` is
/// not yet), `Established=True`/`InitialNamesAccepted`/`the initial names have been
/// accepted` — or `False`/`InvalidCABundle`/`The conversion webhook CABundle is invalid`
/// when the conversion webhook's `caBundle` holds no PEM certificate. `None` otherwise.
pub fn established_status(crd: &Value, now: Timestamp) -> Option<Value> {
    let status = crd.get("status");
    let is_true =
        |kind| find_condition(status, kind).is_some_and(|c| str_at(c, "status") == "True");
    if !is_true("NamesAccepted") || is_true("Established") {
        return None;
    }
    let ca_bundle = crd
        .pointer("/spec/conversion/webhook/clientConfig/caBundle")
        .and_then(Value::as_str)
        .unwrap_or("");
    let condition = if ca_bundle_valid(ca_bundle) {
        Condition::new(
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        )
    } else {
        Condition::new(
            "Established",
            "False",
            "InvalidCABundle",
            "The conversion webhook CABundle is invalid",
        )
    };
    let mut new = current_status(crd);
    set_condition(&mut new, &condition, now);
    Some(Value::Object(new))
}

/// Whether a `caBundle` (base64 of PEM, as in JSON) would load as client-go's TLS root
/// certificates: empty, or at least one PEM `CERTIFICATE` block that parses as X.509.
fn ca_bundle_valid(ca_bundle_b64: &str) -> bool {
    use base64::Engine;
    if ca_bundle_b64.is_empty() {
        return true;
    }
    let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(ca_bundle_b64) else {
        return false;
    };
    if pem.is_empty() {
        return true;
    }
    x509_parser::pem::Pem::iter_from_buffer(&pem)
        .filter_map(Result::ok)
        .any(|p| p.label == "CERTIFICATE" && p.parse_x509().is_ok())
}

/// A step of a CRD's deletion and the `Terminating` condition it writes (the registry's
/// DELETE, then the `customresourcecleanup.apiextensions.k8s.io` finalizer's controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    /// The first DELETE: `True`/`InstanceDeletionPending`.
    Pending,
    /// The finalizer starts deleting custom resources: `True`/`InstanceDeletionInProgress`.
    InProgress,
    /// Every custom resource is gone: `False`/`InstanceDeletionCompleted`.
    Completed,
    /// The CRD was never established, nothing to delete: `False`/`NeverEstablished`.
    NeverEstablished,
    /// Listing the custom resources failed (the error text): `True`/`InstanceDeletionFailed`.
    ListFailed(String),
    /// Some deletes failed (the error text): `True`/`InstanceDeletionFailed`.
    DeleteFailed(String),
    /// Custom resources remain after the deletes (the error text): `True`/`InstanceDeletionCheck`.
    CheckFailed(String),
}

impl Termination {
    /// The `Terminating` condition upstream writes for this step.
    pub fn condition(&self) -> Condition {
        let c =
            |status, reason, message: &str| Condition::new("Terminating", status, reason, message);
        match self {
            Termination::Pending => c(
                "True",
                "InstanceDeletionPending",
                "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            ),
            Termination::InProgress => c(
                "True",
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            ),
            Termination::Completed => c(
                "False",
                "InstanceDeletionCompleted",
                "removed all instances",
            ),
            Termination::NeverEstablished => c(
                "False",
                "NeverEstablished",
                "resource was never established",
            ),
            Termination::ListFailed(e) => c(
                "True",
                "InstanceDeletionFailed",
                &format!("could not list instances: {e}"),
            ),
            Termination::DeleteFailed(e) => c(
                "True",
                "InstanceDeletionFailed",
                &format!("could not issue all deletes: {e}"),
            ),
            Termination::CheckFailed(e) => c(
                "True",
                "InstanceDeletionCheck",
                &format!("could not confirm zero CustomResources remaining: {e}"),
            ),
        }
    }
}

/// The status of `crd` with the `Terminating` condition of `step` set.
pub fn terminating_status(crd: &Value, step: &Termination, now: Timestamp) -> Value {
    let mut status = current_status(crd);
    set_condition(&mut status, &step.condition(), now);
    Value::Object(status)
}

/// The status a created CRD starts with (the registry's `PrepareForCreate`): every
/// client-set status dropped, `storedVersions` holding the storage version.
pub fn status_on_create(crd: &Value) -> Value {
    let mut status = Map::new();
    if let Some(v) = storage_version(crd) {
        status.insert("storedVersions".into(), json!([v]));
    }
    Value::Object(status)
}

/// The status an updated CRD keeps (the registry's `PrepareForUpdate`): the stored CRD's
/// status (a client cannot change it through the main resource), with the new storage
/// version appended to `storedVersions` when it is not there yet.
pub fn status_on_update(new: &Value, old: &Value) -> Value {
    let mut status = current_status(old);
    if let Some(v) = storage_version(new) {
        let stored = status
            .entry("storedVersions")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !stored.is_array() {
            *stored = Value::Array(Vec::new());
        }
        if let Value::Array(list) = stored
            && !list.iter().any(|s| s.as_str() == Some(v))
        {
            list.push(Value::from(v));
        }
    }
    Value::Object(status)
}

/// The name of the version marked `storage: true` (the first one).
fn storage_version(crd: &Value) -> Option<&str> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
}

/// The condition of type `kind` in a status.
fn find_condition<'a>(status: Option<&'a Value>, kind: &str) -> Option<&'a Value> {
    status?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| str_at(c, "type") == kind)
}

/// A copy of the CRD's status as an object (empty when absent).
fn current_status(crd: &Value) -> Map<String, Value> {
    match crd.get("status") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    }
}

/// Upstream's `SetCRDCondition` on a status: replaces the condition of the same type (its
/// `lastTransitionTime` kept unless the `status` changes or it had none) or appends it.
pub fn set_condition(status: &mut Map<String, Value>, condition: &Condition, now: Timestamp) {
    let now_text = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Value::Array(list) = conditions else {
        return;
    };
    let existing = list
        .iter_mut()
        .find(|c| str_at(c, "type") == condition.kind);
    let Some(Value::Object(existing)) = existing else {
        let mut c = Map::new();
        c.insert("type".into(), Value::from(condition.kind));
        c.insert("status".into(), Value::from(condition.status));
        c.insert("lastTransitionTime".into(), Value::from(now_text));
        put_optional(&mut c, "reason", &condition.reason);
        put_optional(&mut c, "message", &condition.message);
        list.push(Value::Object(c));
        return;
    };
    let old_status = existing.get("status").and_then(Value::as_str).unwrap_or("");
    let has_time = existing
        .get("lastTransitionTime")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    if old_status != condition.status || !has_time {
        existing.insert("lastTransitionTime".into(), Value::from(now_text));
    }
    existing.insert("status".into(), Value::from(condition.status));
    put_optional(existing, "reason", &condition.reason);
    put_optional(existing, "message", &condition.message);
}

/// Sets an `omitempty` string field: removed when empty.
fn put_optional(m: &mut Map<String, Value>, key: &str, value: &str) {
    if value.is_empty() {
        m.remove(key);
    } else {
        m.insert(key.into(), Value::from(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn crd(name: &str, plural: &str, kind: &str, short: &[&str]) -> Value {
        let group = name.split_once('.').map_or("", |(_, g)| g);
        json!({
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "names": {
                    "plural": plural,
                    "singular": kind.to_lowercase(),
                    "shortNames": short,
                    "kind": kind,
                    "listKind": format!("{kind}List"),
                    "categories": ["all"],
                },
                "versions": [{"name": "v1", "served": true, "storage": true}],
            },
        })
    }

    /// A CRD whose names were all accepted.
    fn accepted(mut c: Value) -> Value {
        let names = c["spec"]["names"].clone();
        c["status"] = json!({"acceptedNames": names});
        c
    }

    #[test]
    fn names_conflicts_give_upstream_s_reasons() {
        let widgets = accepted(crd("widgets.example.com", "widgets", "Widget", &["wd"]));
        let other_group = accepted(crd("gadgets.other.io", "gadgets", "Gadget", &[]));
        let cases: &[(Value, &str, &str, &str)] = &[
            (
                crd("gadgets.example.com", "gadgets", "Gadget", &[]),
                "True",
                "NoConflicts",
                "no conflicts found",
            ),
            (
                crd("gadgets.other.io", "gadgets", "Gadget", &[]),
                "True",
                "NoConflicts",
                "no conflicts found",
            ),
            (
                crd("widget.example.com", "widget", "Gizmo", &[]),
                "False",
                "PluralConflict",
                "\"widget\" is already in use",
            ),
            (
                crd("gizmos.example.com", "gizmos", "Widget", &[]),
                "False",
                "ListKindConflict",
                "\"WidgetList\" is already in use",
            ),
            (
                crd("gizmos.example.com", "gizmos", "Gizmo", &["wd", "widgets"]),
                "False",
                "ShortNamesConflict",
                "[\"wd\" is already in use, \"widgets\" is already in use]",
            ),
            (
                crd("gizmos.example.com", "gizmos", "Gizmo", &["wd"]),
                "False",
                "ShortNamesConflict",
                "\"wd\" is already in use",
            ),
        ];
        for (c, status, reason, message) in cases {
            let (_, cond) = accepted_names(c, &[widgets.clone(), other_group.clone()]);
            assert_eq!(
                (cond.status, cond.reason.as_str(), cond.message.as_str()),
                (*status, *reason, *message),
                "{}",
                c["metadata"]["name"]
            );
        }
    }

    #[test]
    fn conflicting_names_are_not_accepted_the_others_are() {
        let widgets = accepted(crd("widgets.example.com", "widgets", "Widget", &[]));
        let c = crd("gizmos.example.com", "gizmos", "Widget", &["gz"]);
        let (names, cond) = accepted_names(&c, &[widgets]);
        assert_eq!(cond.reason, "ListKindConflict");
        assert_eq!(
            names,
            json!({"plural": "gizmos", "shortNames": ["gz"],
                   "kind": "", "categories": ["all"]})
        );
    }

    #[test]
    fn a_crd_keeps_its_own_names() {
        let c = accepted(crd("widgets.example.com", "widgets", "Widget", &["wd"]));
        // Listed among the others (as the informer lists it): no conflict with itself.
        let (_, cond) = accepted_names(&c, std::slice::from_ref(&c));
        assert_eq!(cond.reason, "NoConflicts");
        // Nothing to do when spec and accepted names agree.
        assert_eq!(naming_status(&c, &[], t("2025-01-01T00:00:00Z")), None);
    }

    #[test]
    fn naming_then_establishing() {
        let now = t("2025-01-01T00:00:00Z");
        let mut c = crd("widgets.example.com", "widgets", "Widget", &[]);
        c["status"] = status_on_create(&c);
        let status = naming_status(&c, &[], now).unwrap();
        assert_eq!(status["acceptedNames"]["plural"], "widgets");
        assert_eq!(status["storedVersions"], json!(["v1"]));
        assert_eq!(
            status["conditions"],
            json!([
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": "2025-01-01T00:00:00Z"},
                {"type": "Established", "status": "False", "reason": "Installing",
                 "message": "the initial names have been accepted",
                 "lastTransitionTime": "2025-01-01T00:00:00Z"},
            ])
        );
        c["status"] = status;
        let later = t("2025-01-01T00:00:05Z");
        let status = established_status(&c, later).unwrap();
        assert_eq!(
            status["conditions"][1],
            json!({"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                   "message": "the initial names have been accepted",
                   "lastTransitionTime": "2025-01-01T00:00:05Z"})
        );
        // The NamesAccepted condition's time is kept.
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2025-01-01T00:00:00Z"
        );
        c["status"] = status;
        assert_eq!(established_status(&c, later), None);
    }

    #[test]
    fn a_conflict_leaves_the_crd_not_established() {
        let now = t("2025-01-01T00:00:00Z");
        let widgets = accepted(crd("widgets.example.com", "widgets", "Widget", &[]));
        let c = crd("gizmos.example.com", "widgets", "Gizmo", &[]);
        let status = naming_status(&c, &[widgets], now).unwrap();
        assert_eq!(status["conditions"][0]["reason"], "PluralConflict");
        assert_eq!(
            status["conditions"][1],
            json!({"type": "Established", "status": "False", "reason": "NotAccepted",
                   "message": "not all names are accepted",
                   "lastTransitionTime": "2025-01-01T00:00:00Z"})
        );
        let mut c = c;
        c["status"] = status;
        assert_eq!(established_status(&c, now), None);
    }

    #[test]
    fn an_invalid_ca_bundle_is_not_established() {
        let mut c = accepted(crd("widgets.example.com", "widgets", "Widget", &[]));
        c["status"]["conditions"] =
            json!([{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"}]);
        c["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://x", "caBundle": "bm90IGEgY2VydA=="}}});
        let status = established_status(&c, t("2025-01-01T00:00:00Z")).unwrap();
        assert_eq!(status["conditions"][1]["reason"], "InvalidCABundle");
        assert_eq!(
            status["conditions"][1]["message"],
            "The conversion webhook CABundle is invalid"
        );
    }

    #[test]
    fn terminating_conditions() {
        let c = accepted(crd("widgets.example.com", "widgets", "Widget", &[]));
        let s = terminating_status(&c, &Termination::InProgress, t("2025-01-01T00:00:00Z"));
        assert_eq!(
            s["conditions"][0],
            json!({"type": "Terminating", "status": "True",
                   "reason": "InstanceDeletionInProgress",
                   "message": "CustomResource deletion is in progress",
                   "lastTransitionTime": "2025-01-01T00:00:00Z"})
        );
        let failed = Termination::DeleteFailed("boom".into()).condition();
        assert_eq!(failed.reason, "InstanceDeletionFailed");
        assert_eq!(failed.message, "could not issue all deletes: boom");
        assert_eq!(Termination::Completed.condition().status, "False");
    }

    #[test]
    fn stored_versions_grow_with_the_storage_version() {
        let mut old = crd("widgets.example.com", "widgets", "Widget", &[]);
        old["status"] = status_on_create(&old);
        let mut new = old.clone();
        new["spec"]["versions"] = json!([
            {"name": "v1", "served": true, "storage": false},
            {"name": "v2", "served": true, "storage": true},
        ]);
        new["status"] = json!({"storedVersions": ["bogus"]});
        assert_eq!(
            status_on_update(&new, &old)["storedVersions"],
            json!(["v1", "v2"])
        );
        assert_eq!(
            status_on_update(&old, &old)["storedVersions"],
            json!(["v1"])
        );
    }
}
