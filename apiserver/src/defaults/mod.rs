//! API defaulting: the values kube-apiserver v1.33 fills in when it decodes a request body,
//! before validation.
//!
//! Upstream defaults a versioned object right after decoding it: the generated
//! `SetObjectDefaults_<Kind>` functions (`zz_generated.defaults.go`) call the hand-written
//! `SetDefaults_<Type>` functions of `pkg/apis/<group>/<version>/defaults.go` for the object and
//! for every nested struct that has one, and apply the declarative `+default=` markers of the
//! `k8s.io/api` types. This module does the same on the JSON form a client sends:
//!
//! - `core` — core/v1 kinds (Pod, PodTemplate, ReplicationController, Service, Secret,
//!   Namespace, Node, PersistentVolume, PersistentVolumeClaim, Endpoints, LimitRange).
//! - `apps` — apps/v1 Deployment, ReplicaSet, StatefulSet, DaemonSet.
//! - `batch` — batch/v1 Job and CronJob.
//! - `autoscaling` — HorizontalPodAutoscaler, v1 and v2.
//! - `networking` — networking.k8s.io/v1 NetworkPolicy and IngressClass; discovery.k8s.io/v1
//!   EndpointSlice.
//! - `storage` — storage.k8s.io/v1 StorageClass and CSIDriver.
//! - `admission` — admissionregistration.k8s.io/v1 webhook configurations and
//!   ValidatingAdmissionPolicies (and their bindings).
//! - `cluster` — RBAC bindings, PriorityClass, flowcontrol FlowSchema and
//!   PriorityLevelConfiguration, APIService, CustomResourceDefinition.
//! - `pod` — everything under a pod spec (containers, probes, volumes), shared by all of them.
//! - `image` — the image-reference parsing behind the `imagePullPolicy` default.
//!
//! Groups whose v1.33 types have no defaults: policy/v1 (PodDisruptionBudget),
//! coordination.k8s.io/v1 (Lease), certificates.k8s.io/v1, node.k8s.io/v1 (RuntimeClass),
//! events.k8s.io/v1.
//!
//! JSON and Go differ in one way that matters here: Go has no "missing". A field upstream
//! declares as a plain (non-pointer) string or number is unset when it is empty or zero, and is
//! defaulted even when the client sent `""` or `0`; a pointer field is unset only when it is
//! absent or `null`, so an explicit `0` or `false` is kept. Non-pointer structs always exist in
//! Go, so defaults inside them are written even when the client left the whole struct out
//! (a Deployment without `strategy` gets one). The helpers below encode those rules.
//!
//! Besides defaulting proper, two values that upstream's Go structs always serialize are
//! added, so stored objects read back as a real cluster's do: `resources: {}` on every
//! container and on every PersistentVolumeClaim spec (a non-pointer struct, which `omitempty`
//! never drops), and `divisor: "0"` on every `resourceFieldRef` (a non-pointer quantity).
//!
//! Not done here, because upstream does it elsewhere: the registry strategies and REST storage
//! (generated Job selectors and labels: `handlers::strategy`; Service cluster IPs, `ipFamilies` and
//! `ipFamilyPolicy`, Namespace `spec.finalizers`, Pod `status`), and admission plugins
//! (ServiceAccount, Priority with `priority`/`preemptionPolicy`, DefaultTolerationSeconds,
//! DefaultStorageClass). Resource quantities are parsed, rounded (`SetDefaults_ResourceList`'s
//! milli precision for resource lists) and re-serialized in canonical form by
//! `crate::quantity::canonicalize`, which the handlers call right after `apply`.

mod admission;
mod apps;
pub(crate) mod autoscaling;
mod batch;
mod cluster;
mod core;
mod image;
mod networking;
mod pod;
mod storage;

use serde_json::{Map, Value};

use crate::registry::catalog::ResourceInfo;

/// A JSON object: the form every Kubernetes object and nested struct takes here.
type Obj = Map<String, Value>;

/// Fills in upstream's defaults for an object of resource `r` (group/version/kind from `r`),
/// in place, before validation. Idempotent. Unknown kinds are left unchanged.
///
/// Values the client set are never replaced, with upstream's own exceptions: a Service with
/// `sessionAffinity: None` loses its `sessionAffinityConfig`, and a Namespace's
/// `kubernetes.io/metadata.name` label is always set to its name.
pub fn apply(r: &ResourceInfo, obj: &mut Map<String, Value>) {
    if crate::crd::serve::is_custom(r) {
        crate::crd::serve::default(r, obj);
        return;
    }
    match (r.group, r.version) {
        ("", "v1") => core::apply(r.kind, obj),
        ("apps", "v1") => apps::apply(r.kind, obj),
        ("batch", "v1") => batch::apply(r.kind, obj),
        ("autoscaling", version) => autoscaling::apply(version, r.kind, obj),
        ("networking.k8s.io", "v1") => networking::networking(r.kind, obj),
        ("discovery.k8s.io", "v1") => networking::discovery(r.kind, obj),
        ("storage.k8s.io", "v1") => storage::apply(r.kind, obj),
        ("admissionregistration.k8s.io", "v1") => admission::apply(r.kind, obj),
        ("rbac.authorization.k8s.io", "v1") => cluster::rbac(r.kind, obj),
        ("scheduling.k8s.io", "v1") => cluster::scheduling(r.kind, obj),
        ("flowcontrol.apiserver.k8s.io", "v1") => cluster::flowcontrol(r.kind, obj),
        ("apiregistration.k8s.io", "v1") => cluster::apiregistration(r.kind, obj),
        ("apiextensions.k8s.io", "v1") => cluster::apiextensions(r.kind, obj),
        _ => {}
    }
}

/// Whether a pointer field is unset: absent or `null`.
fn is_unset(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

/// Whether a plain string field is unset: absent, `null` or `""`.
fn is_empty_str(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

/// Whether a plain number field is unset: absent, `null` or zero.
fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(_) => false,
    }
}

/// Whether a map field (labels, a resource list) is empty: absent, `null` or `{}`.
fn is_empty_map(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(_) => false,
    }
}

/// Sets a pointer field to `value` when it is absent or `null`.
fn default_ptr(obj: &mut Obj, key: &str, value: Value) {
    if is_unset(obj.get(key)) {
        obj.insert(key.to_owned(), value);
    }
}

/// Sets a plain string field to `value` when it is absent, `null` or empty.
fn default_str(obj: &mut Obj, key: &str, value: &str) {
    if is_empty_str(obj.get(key)) {
        obj.insert(key.to_owned(), Value::String(value.to_owned()));
    }
}

/// Sets a plain number field to `value` when it is absent, `null` or zero.
fn default_num(obj: &mut Obj, key: &str, value: i64) {
    if is_zero(obj.get(key)) {
        obj.insert(key.to_owned(), Value::from(value));
    }
}

/// A pointer-to-struct field: the object at `key`, if the client sent one.
fn ptr_obj<'a>(obj: &'a mut Obj, key: &str) -> Option<&'a mut Obj> {
    obj.get_mut(key).and_then(Value::as_object_mut)
}

/// A non-pointer struct field: the object at `key`, created empty when absent or `null`
/// (Go always has it). `None` only when the client sent something that is not an object,
/// which decoding rejects upstream; it is left for validation.
fn struct_obj<'a>(obj: &'a mut Obj, key: &str) -> Option<&'a mut Obj> {
    if is_unset(obj.get(key)) {
        obj.insert(key.to_owned(), Value::Object(Obj::new()));
    }
    obj.get_mut(key).and_then(Value::as_object_mut)
}

/// Calls `f` on every object in the array at `key` (non-objects are left for validation).
fn each_obj(obj: &mut Obj, key: &str, mut f: impl FnMut(&mut Obj)) {
    if let Some(items) = obj.get_mut(key).and_then(Value::as_array_mut) {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            f(item);
        }
    }
}

/// The string at `key`, or `""` when absent or not a string.
fn str_of<'a>(obj: &'a Obj, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `SetDefaults_PersistentVolumeClaimSpec`: `volumeMode: Filesystem`; plus the always-serialized
/// `resources: {}`. Used for PVCs, StatefulSet volume claim templates and ephemeral volumes.
fn pvc_spec(spec: &mut Obj) {
    default_ptr(spec, "volumeMode", Value::from("Filesystem"));
    default_ptr(spec, "resources", Value::Object(Obj::new()));
}

/// A whole PersistentVolumeClaim (an object or a StatefulSet volume claim template):
/// `SetDefaults_PersistentVolumeClaim` (`status.phase: Pending`) and the spec defaults.
fn pvc(obj: &mut Obj) {
    if let Some(status) = struct_obj(obj, "status") {
        default_str(status, "phase", "Pending");
    }
    if let Some(spec) = struct_obj(obj, "spec") {
        pvc_spec(spec);
    }
}

#[cfg(test)]
mod tests;
