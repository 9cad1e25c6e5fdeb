//! Resources learned at run time: the served versions of established
//! CustomResourceDefinitions.
//!
//! The generic handlers take a resource as a `&'static ResourceInfo`, for built-in and custom
//! resources alike, so a custom resource is served through the same code path as a built-in
//! one. A custom version's `ResourceInfo` (names, scope, verbs, subresources, storage
//! version: what discovery says of it) is interned: made once per distinct content and kept
//! for the life of the process, so the memory it takes is bounded by the number of distinct
//! shapes of CRDs ever served, not by the number of updates. Everything else a CRD says —
//! schema, printer columns, selectable fields, scale paths — changes with it and lives in a
//! [`CustomVersion`] that each CRD change replaces.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde_json::Value;

use super::catalog::{KindClass, ResourceInfo, SubresourceInfo};

/// The verbs of every custom resource, in discovery's order.
pub const CUSTOM_VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];

/// What the handlers need of one served version of a CRD beyond its `ResourceInfo`.
#[derive(Debug)]
pub struct CustomVersion {
    /// The interned discovery facts, as every handler takes them.
    pub info: &'static ResourceInfo,
    /// The CRD's name (`<plural>.<group>`).
    pub crd_name: String,
    /// The CRD's uid.
    pub crd_uid: String,
    /// The version's entry of `spec.versions`.
    pub version: Value,
    /// `spec.versions[].schema.openAPIV3Schema`, if any.
    pub schema: Option<Value>,
    /// The same schema parsed once, for pruning, defaulting and validation.
    pub structural: Option<crate::crd::schema::Structural>,
    /// The schema's CEL `x-kubernetes-validations` compiled once (`None` without rules).
    pub cel: Option<crate::crd::cel::Rules>,
    /// The Table printer of `spec.versions[].additionalPrinterColumns` (default: Age).
    pub printer: crate::crd::printer::Printer,
    /// JSONPaths of `spec.versions[].selectableFields` (e.g. `.spec.color`).
    pub selectable_fields: Vec<String>,
    /// `spec.versions[].subresources.scale`, if enabled.
    pub scale: Option<Value>,
    /// `deprecated` / `deprecationWarning` as the warning upstream sends.
    pub deprecation_warning: Option<String>,
    /// Whether the CRD is being deleted: no new objects are accepted.
    pub terminating: bool,
    /// The CRD's storage version (the `spec.versions` entry with `storage: true`).
    pub storage_version: String,
    /// The conversion webhook when `spec.conversion.strategy` is `Webhook` (then objects
    /// cross versions through [`crate::crd::conversion`]); `None` for strategy `None`.
    pub webhook: Option<Arc<crate::crd::conversion::Webhook>>,
}

/// The custom versions served, by `(group, version, plural)`: what [`lookup`] answers for the
/// handlers, tables and validation that take a resource as a bare `ResourceInfo`. Replaced
/// whole by [`publish`] (the registry's [`super::Registry::set_custom`]).
static SERVED: RwLock<Option<ServedMap>> = RwLock::new(None);

/// Served custom versions by `(group, version, plural)`.
type ServedMap = HashMap<(String, String, String), Served>;

/// What a CRD says of custom resource `r`; `None` for built-in resources.
pub fn lookup(r: &ResourceInfo) -> Option<Served> {
    if !matches!(r.kind_class, KindClass::Custom { .. }) {
        return None;
    }
    let served = SERVED.read().unwrap_or_else(PoisonError::into_inner);
    let key = (
        r.group.to_owned(),
        r.version.to_owned(),
        r.plural.to_owned(),
    );
    served.as_ref()?.get(&key).cloned()
}

/// Every served custom version (what [`lookup`] answers), in no particular order: for
/// readers that have no `Registry` at hand (the OpenAPI documents).
pub fn served() -> Vec<Served> {
    let served = SERVED.read().unwrap_or_else(PoisonError::into_inner);
    served
        .as_ref()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default()
}

/// Makes `versions` what [`lookup`] answers.
pub(super) fn publish(versions: &[Served]) {
    let map = versions
        .iter()
        .map(|c| {
            let key = (
                c.info.group.to_owned(),
                c.info.version.to_owned(),
                c.info.plural.to_owned(),
            );
            (key, Arc::clone(c))
        })
        .collect();
    *SERVED.write().unwrap_or_else(PoisonError::into_inner) = Some(map);
    // Server-side apply merges custom resources by their structural schemas.
    crate::patch::schema::register_custom(versions.iter().filter_map(|c| {
        let s = c.structural.as_ref()?;
        Some((c.info.group, c.info.version, c.info.kind, s))
    }));
}

/// Interned strings: each distinct string once for the life of the process.
static STRINGS: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
/// Interned resource descriptors.
static INFOS: Mutex<Vec<&'static ResourceInfo>> = Mutex::new(Vec::new());
/// Interned subresource lists.
static SUBRESOURCES: Mutex<Vec<&'static [SubresourceInfo]>> = Mutex::new(Vec::new());
/// Interned string lists (short names, categories).
static LISTS: Mutex<Vec<&'static [&'static str]>> = Mutex::new(Vec::new());

/// `s`, interned.
pub fn intern(s: &str) -> &'static str {
    let mut set = STRINGS.lock().unwrap_or_else(PoisonError::into_inner);
    let set = set.get_or_insert_with(HashSet::new);
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}

fn intern_list(items: &[String]) -> &'static [&'static str] {
    let items: Vec<&'static str> = items.iter().map(|s| intern(s)).collect();
    let mut lists = LISTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = lists.iter().find(|l| **l == items.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(items.into_boxed_slice());
    lists.push(leaked);
    leaked
}

fn intern_subresources(items: Vec<SubresourceInfo>) -> &'static [SubresourceInfo] {
    let mut lists = SUBRESOURCES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = lists.iter().find(|l| **l == items.as_slice()) {
        return found;
    }
    let leaked: &'static [SubresourceInfo] = Box::leak(items.into_boxed_slice());
    lists.push(leaked);
    leaked
}

fn intern_info(info: ResourceInfo) -> &'static ResourceInfo {
    let mut infos = INFOS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = infos.iter().find(|i| ***i == info) {
        return found;
    }
    let leaked: &'static ResourceInfo = Box::leak(Box::new(info));
    infos.push(leaked);
    leaked
}

const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// The served versions of one CRD, as [`CustomVersion`]s (in `spec.versions` order), or
/// none when the CRD is not established. Names are the accepted names (`status.acceptedNames`),
/// as upstream serves them.
pub fn versions_of(crd: &Value) -> Vec<CustomVersion> {
    let established = crd["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    });
    if !established {
        return Vec::new();
    }
    let spec = &crd["spec"];
    let names = &crd["status"]["acceptedNames"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let group = text(&spec["group"]);
    let plural = text(&names["plural"]);
    let kind = text(&names["kind"]);
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = match text(&names["singular"]) {
        s if s.is_empty() => kind.to_lowercase(),
        s => s,
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .map(|v| text(&v["name"]))
        .unwrap_or_default();
    let terminating = !crd["metadata"]["deletionTimestamp"].is_null();
    let webhook = crate::crd::conversion::Webhook::of_crd(crd).map(Arc::new);
    versions
        .iter()
        .filter(|v| v["served"] == true)
        .map(|v| {
            let version = text(&v["name"]);
            let mut subresources = Vec::new();
            if v["subresources"]["scale"].is_object() {
                subresources.push(SubresourceInfo {
                    name: "scale",
                    group: "autoscaling",
                    version: "v1",
                    kind: "Scale",
                    verbs: STATUS_VERBS,
                });
            }
            if v["subresources"]["status"].is_object() {
                subresources.push(SubresourceInfo {
                    name: "status",
                    group: intern(&group),
                    version: intern(&version),
                    kind: intern(&kind),
                    verbs: STATUS_VERBS,
                });
            }
            subresources.sort_by_key(|s| s.name);
            let info = intern_info(ResourceInfo {
                group: intern(&group),
                version: intern(&version),
                kind: intern(&kind),
                plural: intern(&plural),
                singular: intern(&singular),
                namespaced: spec["scope"] == "Namespaced",
                verbs: CUSTOM_VERBS,
                short_names: intern_list(&strings(&names["shortNames"])),
                categories: intern_list(&strings(&names["categories"])),
                subresources: intern_subresources(subresources),
                kind_class: KindClass::Custom {
                    storage_version: intern(&storage_version),
                },
            });
            let deprecation_warning = (v["deprecated"] == true).then(|| {
                v["deprecationWarning"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{group}/{version} {kind} is deprecated"))
            });
            CustomVersion {
                info,
                crd_name: text(&crd["metadata"]["name"]),
                crd_uid: text(&crd["metadata"]["uid"]),
                structural: v["schema"]
                    .get("openAPIV3Schema")
                    .filter(|s| s.is_object())
                    .map(crate::crd::schema::Structural::new),
                cel: v["schema"]
                    .get("openAPIV3Schema")
                    .filter(|s| s.is_object())
                    .map(crate::crd::schema::Structural::new)
                    .as_ref()
                    .and_then(crate::crd::cel::Rules::new),
                schema: v["schema"]
                    .get("openAPIV3Schema")
                    .filter(|s| s.is_object())
                    .cloned(),
                printer: crate::crd::printer::Printer::new(
                    &crate::crd::printer::columns_for_version(crd, &version),
                ),
                selectable_fields: v["selectableFields"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f["jsonPath"].as_str())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
                scale: v["subresources"]["scale"]
                    .is_object()
                    .then(|| v["subresources"]["scale"].clone()),
                deprecation_warning,
                terminating,
                storage_version: storage_version.clone(),
                webhook: webhook.clone(),
                version: v.clone(),
            }
        })
        .collect()
}

/// Kubernetes' version order (upstream's `version.CompareKubeAwareVersionStrings`): GA before
/// beta before alpha, higher numbers first within each, then other names alphabetically.
pub fn kube_version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (stage, n) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        let minor: u64 = n.parse().ok()?;
        Some((major, stage, minor))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Shared handle type for a served custom version.
pub type Served = Arc<CustomVersion>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "metadata": { "name": "widgets.example.com", "uid": "u1" },
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": { "plural": "widgets", "kind": "Widget" },
                "versions": [
                    { "name": "v1", "served": true, "storage": true,
                      "subresources": { "status": {}, "scale": { "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas" } },
                      "schema": { "openAPIV3Schema": { "type": "object" } } },
                    { "name": "v1beta1", "served": true, "storage": false, "deprecated": true },
                    { "name": "v0", "served": false, "storage": false }
                ]
            },
            "status": {
                "acceptedNames": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"] },
                "conditions": [{ "type": "Established", "status": "True" }]
            }
        })
    }

    #[test]
    fn established_crds_give_their_served_versions() {
        let versions = versions_of(&crd());
        assert_eq!(versions.len(), 2);
        let v1 = &versions[0];
        assert_eq!(v1.info.group, "example.com");
        assert_eq!(v1.info.version, "v1");
        assert_eq!(v1.info.kind, "Widget");
        assert_eq!(v1.info.plural, "widgets");
        assert_eq!(v1.info.singular, "widget");
        assert_eq!(v1.info.short_names, &["wd"]);
        assert_eq!(v1.info.categories, &["all"]);
        assert!(v1.info.namespaced);
        let subs: Vec<&str> = v1.info.subresources.iter().map(|s| s.name).collect();
        assert_eq!(subs, ["scale", "status"]);
        assert_eq!(
            v1.info.kind_class,
            KindClass::Custom {
                storage_version: "v1"
            }
        );
        assert!(v1.schema.is_some());
        assert_eq!(v1.storage_version, "v1");
        assert!(v1.webhook.is_none());
        assert_eq!(
            versions[1].deprecation_warning.as_deref(),
            Some("example.com/v1beta1 Widget is deprecated")
        );
        // Interned: the same content gives the same descriptor.
        let again = versions_of(&crd());
        assert!(std::ptr::eq(again[0].info, v1.info));
    }

    #[test]
    fn crds_not_established_are_not_served() {
        let mut c = crd();
        c["status"]["conditions"] = json!([{ "type": "Established", "status": "False" }]);
        assert!(versions_of(&c).is_empty());
    }

    #[test]
    fn versions_sort_as_kubernetes_sorts_them() {
        let mut v = vec![
            "v1alpha1", "foo", "v1", "v2beta1", "v1beta2", "v2", "v1beta1", "bar",
        ];
        v.sort_by(|a, b| kube_version_order(a, b));
        assert_eq!(
            v,
            [
                "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"
            ]
        );
    }
}
