//! Per-kind hooks of upstream's registry strategies that the generic path does not cover:
//! on create (`PrepareForCreate` after uid and name are known), the generated selector and
//! pod template labels of a batch/v1 Job, a CSR's requester (`csr`) and a PersistentVolume's
//! first phase; on status writes, a PersistentVolume's phase transition time; on delete, the
//! objects a kind's REST refuses to delete (the system PriorityClasses).

use serde_json::{Map, Value, json};

use super::object;
use crate::registry::catalog::ResourceInfo;

/// Labels the Job strategy puts on a Job's pod template; the first two are the legacy names.
const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const CONTROLLER_UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];

/// Runs the kind's create hook, if it has one.
pub(super) fn prepare_for_create(r: &ResourceInfo, obj: &mut Map<String, Value>) {
    if r.group == "batch" && r.plural == "jobs" {
        generate_job_selector(obj);
    }
    if super::csr::is(r) {
        super::csr::prepare_for_create(obj);
    }
    // A new PersistentVolume starts Pending, stamped with the time it entered the phase
    // (the PV strategy with `PersistentVolumeLastPhaseTransitionTime`, GA since 1.31).
    if r.group.is_empty() && r.plural == "persistentvolumes" {
        obj.insert(
            "status".into(),
            json!({"phase": "Pending", "lastPhaseTransitionTime": object::now()}),
        );
    }
    // A new CRD's status: only `storedVersions`, the storage version (the CRD strategy).
    if crate::crd::serve::is_crd(r) {
        let status = crate::crd::naming::status_on_create(&Value::Object(obj.clone()));
        obj.insert("status".into(), status);
    }
}

/// The PV status strategy's `lastPhaseTransitionTime`: kept while the phase stays (unless
/// the writer sets one), stamped now when the phase changes and the writer did not set a
/// time of its own.
pub(super) fn pv_status_transition(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    const FIELD: &str = "lastPhaseTransitionTime";
    let old_status = old.get("status");
    let old_phase = old_status.and_then(|s| s.get("phase")).cloned();
    let old_time = old_status.and_then(|s| s.get(FIELD)).cloned();
    let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    let time = status.get(FIELD).filter(|t| !t.is_null()).cloned();
    if status.get("phase").cloned() == old_phase {
        if let (None, Some(kept)) = (time, old_time) {
            status.insert(FIELD.into(), kept);
        }
    } else if time.is_none() || time == old_time {
        status.insert(FIELD.into(), json!(object::now()));
    }
}

/// Refuses the delete of an object the kind's REST protects: the system PriorityClasses
/// (upstream's `priorityclass` storage: `this is a system priority class and cannot be
/// deleted`), whose loss would leave `system-node-critical` pods unadmittable.
pub(super) fn check_delete(r: &ResourceInfo, name: &str) -> crate::error::Result<()> {
    if r.group == "scheduling.k8s.io"
        && r.plural == "priorityclasses"
        && crate::admission::priority::SYSTEM_CLASSES
            .iter()
            .any(|(system, _, _)| *system == name)
    {
        let resource = object::group_resource(r);
        return Err(crate::error::ApiError::Forbidden {
            message: format!(
                "{resource} \"{name}\" is forbidden: this is a system priority class and cannot be deleted"
            ),
            resource,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Upstream's `generateSelector`: unless `spec.manualSelector` is true, the pod template is
/// labelled with the Job's name and uid (labels the client set are kept) and the selector
/// matches `batch.kubernetes.io/controller-uid`. A conflicting client selector is left for
/// validation to reject.
fn generate_job_selector(obj: &mut Map<String, Value>) {
    let name = object::meta_str(obj, "name").to_owned();
    let uid = object::meta_str(obj, "uid").to_owned();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if let Some(labels) = object_at(spec, &["template", "metadata", "labels"]) {
        for key in JOB_NAME_LABELS {
            labels.entry(key).or_insert_with(|| json!(name));
        }
        for key in CONTROLLER_UID_LABELS {
            labels.entry(key).or_insert_with(|| json!(uid));
        }
    }
    if let Some(match_labels) = object_at(spec, &["selector", "matchLabels"]) {
        match_labels
            .entry(CONTROLLER_UID_LABELS[1])
            .or_insert_with(|| json!(uid));
    }
}

/// The object at `path` under `obj`, created (replacing `null`) along the way.
fn object_at<'a>(
    obj: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let mut cur = obj;
    for key in path {
        let slot = cur.entry(*key).or_insert_with(|| json!({}));
        if slot.is_null() {
            *slot = json!({});
        }
        cur = slot.as_object_mut()?;
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_get_a_selector_on_their_uid_and_labelled_templates() {
        let mut job = json!({
            "metadata": { "name": "j", "uid": "u1" },
            "spec": { "template": { "metadata": { "labels": { "job-name": "mine" } } } }
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        generate_job_selector(&mut job);
        assert_eq!(
            job["spec"]["selector"],
            json!({ "matchLabels": { "batch.kubernetes.io/controller-uid": "u1" } })
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({
                "job-name": "mine",
                "batch.kubernetes.io/job-name": "j",
                "controller-uid": "u1",
                "batch.kubernetes.io/controller-uid": "u1"
            })
        );
    }

    #[test]
    fn manual_selectors_are_left_alone() {
        let mut job = json!({
            "metadata": { "name": "j", "uid": "u1" },
            "spec": { "manualSelector": true, "selector": { "matchLabels": { "a": "b" } } }
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let before = job.clone();
        generate_job_selector(&mut job);
        assert_eq!(job, before);
    }
}
