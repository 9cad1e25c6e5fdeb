//! Defaults under a pod spec: what `SetObjectDefaults_Pod` and every other generated defaulter
//! with a pod template (PodTemplate, ReplicationController, the apps and batch workloads) apply
//! to `PodSpec` and the structs nested in it.

use serde_json::{Value, json};

use super::{
    Obj, default_num, default_ptr, default_str, each_obj, is_unset, is_zero, ptr_obj, pvc_spec,
    str_of, struct_obj,
};

/// The container lists of a pod spec.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// The keys of `VolumeSource`: a volume with none of them set gets `emptyDir: {}`.
const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

/// A whole Pod (`SetObjectDefaults_Pod`): the Pod-only defaults of `SetDefaults_Pod`, then the
/// pod spec's. Pod templates do not get the Pod-only ones.
pub(super) fn pod(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    // Requests default to limits, for regular and init containers.
    for list in ["containers", "initContainers"] {
        each_obj(spec, list, |c| {
            if let Some(resources) = ptr_obj(c, "resources") {
                requests_from_limits(resources);
            }
        });
    }
    default_ptr(spec, "enableServiceLinks", Value::Bool(true));
    // With host networking, container ports default their host port to the container port.
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for list in ["containers", "initContainers"] {
            each_obj(spec, list, |c| {
                each_obj(c, "ports", |p| {
                    if is_zero(p.get("hostPort"))
                        && !is_zero(p.get("containerPort"))
                        && let Some(port) = p.get("containerPort").cloned()
                    {
                        p.insert("hostPort".into(), port);
                    }
                });
            });
        }
    }
    pod_spec(spec);
}

/// A `PodTemplateSpec` (a non-pointer struct field wherever it appears): its spec's defaults.
pub(super) fn template(template: &mut Obj) {
    if let Some(spec) = struct_obj(template, "spec") {
        pod_spec(spec);
    }
}

/// `SetDefaults_PodSpec` and the defaults of everything nested in the spec.
pub(super) fn pod_spec(spec: &mut Obj) {
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "restartPolicy", "Always");
    default_ptr(spec, "securityContext", json!({}));
    default_ptr(spec, "terminationGracePeriodSeconds", json!(30));
    default_str(spec, "schedulerName", "default-scheduler");
    each_obj(spec, "volumes", volume);
    for list in CONTAINER_LISTS {
        each_obj(spec, list, container);
    }
}

/// Copies each limit with no matching request into the requests (`SetDefaults_Pod`).
fn requests_from_limits(resources: &mut Obj) {
    let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    if limits.is_empty() {
        return; // an empty request map would not be serialized
    }
    if is_unset(resources.get("requests")) {
        resources.insert("requests".into(), json!({}));
    }
    if let Some(requests) = ptr_obj(resources, "requests") {
        for (name, quantity) in limits {
            requests.entry(name).or_insert(quantity);
        }
    }
}

/// `SetDefaults_Container` (also for ephemeral containers) and the defaults of the structs in a
/// container: ports, env field references, probes and lifecycle handlers.
fn container(c: &mut Obj) {
    if super::is_empty_str(c.get("imagePullPolicy")) {
        let policy = super::image::default_pull_policy(str_of(c, "image"));
        c.insert("imagePullPolicy".into(), Value::from(policy));
    }
    default_str(c, "terminationMessagePath", "/dev/termination-log");
    default_str(c, "terminationMessagePolicy", "File");
    // Always serialized upstream: `resources` is a struct, not a pointer.
    default_ptr(c, "resources", json!({}));
    each_obj(c, "ports", |p| default_str(p, "protocol", "TCP"));
    each_obj(c, "env", |e| {
        if let Some(from) = ptr_obj(e, "valueFrom") {
            if let Some(field_ref) = ptr_obj(from, "fieldRef") {
                default_str(field_ref, "apiVersion", "v1");
            }
            if let Some(resource_ref) = ptr_obj(from, "resourceFieldRef") {
                resource_field_ref(resource_ref);
            }
        }
    });
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = ptr_obj(c, key) {
            probe(p);
        }
    }
    if let Some(lifecycle) = ptr_obj(c, "lifecycle") {
        for key in ["postStart", "preStop"] {
            if let Some(get) = ptr_obj(lifecycle, key).and_then(|h| ptr_obj(h, "httpGet")) {
                http_get(get);
            }
        }
    }
}

/// A `resourceFieldRef`: its `divisor` is a non-pointer quantity, always serialized (`"0"`).
fn resource_field_ref(r: &mut Obj) {
    default_ptr(r, "divisor", Value::from("0"));
}

/// `SetDefaults_Probe`, plus the probe handler's defaults.
fn probe(p: &mut Obj) {
    default_num(p, "timeoutSeconds", 1);
    default_num(p, "periodSeconds", 10);
    default_num(p, "successThreshold", 1);
    default_num(p, "failureThreshold", 3);
    if let Some(get) = ptr_obj(p, "httpGet") {
        http_get(get);
    }
    if let Some(grpc) = ptr_obj(p, "grpc") {
        // `+default=""` on a pointer: set, and serialized, as the empty string.
        default_ptr(grpc, "service", Value::from(""));
    }
}

/// `SetDefaults_HTTPGetAction`.
fn http_get(get: &mut Obj) {
    default_str(get, "path", "/");
    default_str(get, "scheme", "HTTP");
}

/// `SetDefaults_Volume` and the defaults of the volume sources.
fn volume(v: &mut Obj) {
    if VOLUME_SOURCES.iter().all(|k| is_unset(v.get(*k))) {
        v.insert("emptyDir".into(), json!({}));
    }
    if let Some(host_path) = ptr_obj(v, "hostPath") {
        default_ptr(host_path, "type", Value::from(""));
    }
    for key in ["secret", "configMap"] {
        if let Some(source) = ptr_obj(v, key) {
            default_ptr(source, "defaultMode", json!(0o644));
        }
    }
    if let Some(downward) = ptr_obj(v, "downwardAPI") {
        default_ptr(downward, "defaultMode", json!(0o644));
        downward_items(downward);
    }
    if let Some(projected) = ptr_obj(v, "projected") {
        default_ptr(projected, "defaultMode", json!(0o644));
        each_obj(projected, "sources", |s| {
            if let Some(downward) = ptr_obj(s, "downwardAPI") {
                downward_items(downward);
            }
            if let Some(token) = ptr_obj(s, "serviceAccountToken") {
                default_ptr(token, "expirationSeconds", json!(3600));
            }
        });
    }
    if let Some(spec) = ptr_obj(v, "ephemeral")
        .and_then(|e| ptr_obj(e, "volumeClaimTemplate"))
        .and_then(|claim| struct_obj(claim, "spec"))
    {
        pvc_spec(spec);
    }
    shared_volume_sources(v);
}

/// The `+default` markers of the volume sources shared by pods and PersistentVolumes (their
/// `…PersistentVolumeSource` twins carry the same markers): RBD, iSCSI, Azure Disk and ScaleIO.
pub(super) fn shared_volume_sources(v: &mut Obj) {
    if let Some(rbd) = ptr_obj(v, "rbd") {
        default_str(rbd, "pool", "rbd");
        default_str(rbd, "user", "admin");
        default_str(rbd, "keyring", "/etc/ceph/keyring");
    }
    if let Some(iscsi) = ptr_obj(v, "iscsi") {
        default_str(iscsi, "iscsiInterface", "default");
    }
    if let Some(azure) = ptr_obj(v, "azureDisk") {
        default_ptr(azure, "cachingMode", Value::from("ReadWrite"));
        default_ptr(azure, "fsType", Value::from("ext4"));
        default_ptr(azure, "readOnly", Value::Bool(false));
        default_ptr(azure, "kind", Value::from("Shared"));
    }
    if let Some(scale_io) = ptr_obj(v, "scaleIO") {
        default_str(scale_io, "storageMode", "ThinProvisioned");
        default_str(scale_io, "fsType", "xfs");
    }
}

/// The field references of downward API items (`SetDefaults_ObjectFieldSelector`), and the
/// always-serialized divisor of their resource references.
fn downward_items(downward: &mut Obj) {
    each_obj(downward, "items", |item| {
        if let Some(field_ref) = ptr_obj(item, "fieldRef") {
            default_str(field_ref, "apiVersion", "v1");
        }
        if let Some(resource_ref) = ptr_obj(item, "resourceFieldRef") {
            resource_field_ref(resource_ref);
        }
    });
}
