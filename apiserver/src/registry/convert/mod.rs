//! Resources served as another version of a stored resource, and the conversion between the
//! served and the stored form.
//!
//! Two resources are served this way, each over one stored resource, so both APIs read and
//! write the same objects and one watch cache serves both:
//!
//! - `events.k8s.io/v1` Event, which upstream stores as core/v1 Event under the core events'
//!   keys (`pkg/apis/events/v1/conversion.go`): fields renamed;
//! - `autoscaling/v1` HorizontalPodAutoscaler, stored as `autoscaling/v2` (upstream's storage
//!   version) under the same keys: [`hpa`] (v2-only fields kept in annotations, as upstream).
//!
//! Objects are converted where they enter storage ([`to_storage`]) and where they leave it
//! ([`from_storage`]); field selectors are translated to the stored form
//! ([`field_label_to_storage`]). Every other resource is stored as served and both functions
//! are the identity.

pub mod hpa;

use serde_json::{Map, Value, json};

use super::catalog::{self, ResourceInfo};

/// Served field ↔ stored field of `events.k8s.io/v1` Event (served name first); every other
/// field (metadata, eventTime, series, reason, type, action, related, reportingInstance) has
/// the same name in both.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

/// Field selector labels of `events.k8s.io/v1` Event whose stored (core) label differs
/// (upstream's field label conversion for the group).
const EVENT_LABELS: &[(&str, &str)] = &[
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
];

/// How a served resource is converted to its stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conversion {
    /// `events.k8s.io/v1` Event ↔ core/v1 Event.
    Event,
    /// `autoscaling/v1` HorizontalPodAutoscaler ↔ `autoscaling/v2`.
    HpaV1,
    /// A custom resource served at a version other than its CRD's storage version, with
    /// conversion strategy `None`: only `apiVersion` changes (upstream's nopConverter).
    CustomNone {
        /// The storage version.
        storage_version: &'static str,
    },
}

/// The conversion `r` is served through, if any.
fn conversion(r: &ResourceInfo) -> Option<Conversion> {
    if let catalog::KindClass::Custom { storage_version } = r.kind_class {
        return (storage_version != r.version)
            .then_some(Conversion::CustomNone { storage_version });
    }
    match (r.group, r.version, r.plural) {
        ("events.k8s.io", _, "events") => Some(Conversion::Event),
        ("autoscaling", "v1", "horizontalpodautoscalers") => Some(Conversion::HpaV1),
        _ => None,
    }
}

/// Whether `r`'s objects cross versions through its CRD's conversion webhook: then
/// [`to_storage`] and [`from_storage`] only rewrite `apiVersion`, and the handlers convert
/// through the asynchronous [`crate::crd::conversion`] instead.
pub fn needs_webhook(r: &ResourceInfo) -> bool {
    super::custom::lookup(r).is_some_and(|c| c.webhook.is_some())
}

/// Whether `r` is served as a conversion of another resource's stored objects.
pub fn is_converted(r: &ResourceInfo) -> bool {
    conversion(r).is_some()
}

/// The resource whose stored objects `r` serves, when that is not `r` itself.
pub fn storage_resource(r: &ResourceInfo) -> Option<&'static ResourceInfo> {
    match conversion(r)? {
        Conversion::Event => catalog::find("", "v1", "events"),
        Conversion::HpaV1 => catalog::find("autoscaling", "v2", "horizontalpodautoscalers"),
        // Every version of a custom resource shares its keys and selectable fields.
        Conversion::CustomNone { .. } => None,
    }
}

/// The group and plural under which `r`'s objects are stored (`""` for core).
pub fn stored_as(r: &ResourceInfo) -> (&'static str, &'static str) {
    match storage_resource(r) {
        Some(s) => (s.group, s.plural),
        None => (r.group, r.plural),
    }
}

/// Moves each `from` field of `obj` to its `to` name.
fn rename(obj: &mut Map<String, Value>, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    for (from, to) in pairs {
        let value = obj.remove(from);
        obj.remove(to);
        if let Some(v) = value {
            obj.insert(to.to_owned(), v);
        }
    }
}

/// `obj` as served by `r` converted to the form it is stored in.
pub fn to_storage(r: &ResourceInfo, mut obj: Map<String, Value>) -> Map<String, Value> {
    if let Some(Conversion::CustomNone { storage_version }) = conversion(r) {
        obj.insert(
            "apiVersion".into(),
            json!(format!("{}/{storage_version}", r.group)),
        );
        return obj;
    }
    let Some(s) = storage_resource(r) else {
        return obj;
    };
    if conversion(r) == Some(Conversion::HpaV1) {
        return hpa::to_v2(obj);
    }
    rename(&mut obj, EVENT_FIELDS.iter().copied());
    obj.insert("apiVersion".into(), json!(super::api_version(s)));
    obj.insert("kind".into(), json!(s.kind));
    obj
}

/// `obj` in its stored form, borrowed when that is `obj` itself (most resources: no copy).
pub fn storage_form<'a>(
    r: &ResourceInfo,
    obj: &'a Map<String, Value>,
) -> std::borrow::Cow<'a, Map<String, Value>> {
    if is_converted(r) {
        std::borrow::Cow::Owned(to_storage(r, obj.clone()))
    } else {
        std::borrow::Cow::Borrowed(obj)
    }
}

/// A stored object converted to the form `r` serves.
pub fn from_storage(r: &ResourceInfo, mut obj: Map<String, Value>) -> Map<String, Value> {
    match conversion(r) {
        None => return obj,
        Some(Conversion::HpaV1) => return hpa::to_v1(obj),
        Some(Conversion::CustomNone { .. }) => {
            obj.insert("apiVersion".into(), json!(super::api_version(r)));
            return obj;
        }
        Some(Conversion::Event) => {}
    }
    rename(&mut obj, EVENT_FIELDS.iter().map(|(a, b)| (*b, *a)));
    obj.insert("apiVersion".into(), json!(super::api_version(r)));
    obj.insert("kind".into(), json!(r.kind));
    obj
}

/// A served object as a read gives it back once stored: through the stored form and back
/// (upstream answers a write with its stored object converted to the request's version, e.g.
/// an autoscaling/v1 HPA created without a CPU target comes back with the implied 80 %).
/// The identity, without a copy, for resources stored as served.
pub fn round_trip(r: &ResourceInfo, obj: Map<String, Value>) -> Map<String, Value> {
    if is_converted(r) {
        from_storage(r, to_storage(r, obj))
    } else {
        obj
    }
}

/// The field selector label of the stored form for `r`'s label `label`.
pub fn field_label_to_storage<'a>(r: &ResourceInfo, label: &'a str) -> &'a str {
    if conversion(r) != Some(Conversion::Event) {
        return label;
    }
    EVENT_LABELS
        .iter()
        .find(|(served, _)| *served == label)
        .map_or(label, |(_, stored)| stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_v1() -> &'static ResourceInfo {
        catalog::find("events.k8s.io", "v1", "events").unwrap()
    }

    fn core_events() -> &'static ResourceInfo {
        catalog::find("", "v1", "events").unwrap()
    }

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn served_event() -> Map<String, Value> {
        obj(json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": { "name": "web.1", "namespace": "default" },
            "eventTime": "2024-01-02T03:04:05.000000Z",
            "series": { "count": 2, "lastObservedTime": "2024-01-02T03:05:05.000000Z" },
            "regarding": { "kind": "Pod", "namespace": "default", "name": "web", "uid": "u1" },
            "related": { "kind": "Node", "name": "n1" },
            "note": "Pulling image",
            "reason": "Pulling",
            "type": "Normal",
            "action": "Pull",
            "reportingController": "example.com/ctl",
            "reportingInstance": "ctl-1",
            "deprecatedSource": { "component": "kubelet" },
            "deprecatedFirstTimestamp": "2024-01-02T03:04:05Z",
            "deprecatedLastTimestamp": "2024-01-02T03:05:05Z",
            "deprecatedCount": 3,
        }))
    }

    fn stored_event() -> Map<String, Value> {
        obj(json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "name": "web.1", "namespace": "default" },
            "eventTime": "2024-01-02T03:04:05.000000Z",
            "series": { "count": 2, "lastObservedTime": "2024-01-02T03:05:05.000000Z" },
            "involvedObject": { "kind": "Pod", "namespace": "default", "name": "web", "uid": "u1" },
            "related": { "kind": "Node", "name": "n1" },
            "message": "Pulling image",
            "reason": "Pulling",
            "type": "Normal",
            "action": "Pull",
            "reportingComponent": "example.com/ctl",
            "reportingInstance": "ctl-1",
            "source": { "component": "kubelet" },
            "firstTimestamp": "2024-01-02T03:04:05Z",
            "lastTimestamp": "2024-01-02T03:05:05Z",
            "count": 3,
        }))
    }

    #[test]
    fn events_v1_is_stored_as_core_events() {
        assert_eq!(stored_as(events_v1()), ("", "events"));
        assert_eq!(stored_as(core_events()), ("", "events"));
        assert!(storage_resource(core_events()).is_none());
        let pods = catalog::find("", "v1", "pods").unwrap();
        assert_eq!(stored_as(pods), ("", "pods"));
    }

    #[test]
    fn events_v1_converts_to_core_form() {
        assert_eq!(to_storage(events_v1(), served_event()), stored_event());
    }

    #[test]
    fn core_form_converts_to_events_v1() {
        assert_eq!(from_storage(events_v1(), stored_event()), served_event());
    }

    #[test]
    fn a_minimal_core_event_converts_without_inventing_fields() {
        let stored = obj(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": { "name": "e", "namespace": "ns" },
            "involvedObject": { "kind": "Pod", "name": "p" },
            "message": "hello",
        }));
        let served = from_storage(events_v1(), stored.clone());
        assert_eq!(
            Value::Object(served.clone()),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": { "name": "e", "namespace": "ns" },
                "regarding": { "kind": "Pod", "name": "p" },
                "note": "hello",
            })
        );
        assert_eq!(to_storage(events_v1(), served), stored);
    }

    #[test]
    fn other_resources_are_not_converted() {
        let stored = stored_event();
        assert_eq!(to_storage(core_events(), stored.clone()), stored);
        assert_eq!(from_storage(core_events(), stored.clone()), stored);
        assert!(!is_converted(core_events()));
    }

    #[test]
    fn field_labels_map_to_core_names() {
        let r = events_v1();
        assert_eq!(
            field_label_to_storage(r, "regarding.kind"),
            "involvedObject.kind"
        );
        assert_eq!(
            field_label_to_storage(r, "regarding.uid"),
            "involvedObject.uid"
        );
        assert_eq!(
            field_label_to_storage(r, "reportingController"),
            "reportingComponent"
        );
        assert_eq!(field_label_to_storage(r, "reason"), "reason");
        assert_eq!(
            field_label_to_storage(core_events(), "reportingController"),
            "reportingController"
        );
    }
}
