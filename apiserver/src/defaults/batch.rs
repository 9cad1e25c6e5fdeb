//! batch/v1 defaults (`pkg/apis/batch/v1/defaults.go` and its generated defaulters).
//!
//! Job pod templates get the ordinary pod-spec defaults, `restartPolicy: Always` included:
//! upstream's Job validation reports both an empty and an `Always` restart policy as
//! `Required value: valid values: "OnFailure", "Never"`.

use serde_json::{Value, json};

use super::{Obj, core, default_ptr, default_str, each_obj, is_unset, pod, ptr_obj, struct_obj};

/// The largest int32: the backoff limit of a Job that limits backoff per index instead.
const MAX_INT32: i64 = 2_147_483_647;

/// Defaults a batch/v1 object of kind `kind`.
pub(super) fn apply(kind: &str, obj: &mut Obj) {
    match kind {
        "Job" => job(obj),
        "CronJob" => cron_job(obj),
        _ => {}
    }
}

/// `SetObjectDefaults_Job`.
fn job(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    if is_unset(spec.get("completions")) && is_unset(spec.get("parallelism")) {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    default_ptr(spec, "parallelism", json!(1));
    if is_unset(spec.get("backoffLimit")) {
        let limit = if is_unset(spec.get("backoffLimitPerIndex")) {
            6
        } else {
            MAX_INT32
        };
        spec.insert("backoffLimit".into(), json!(limit));
    }
    let labels = core::template_labels(spec);
    default_ptr(spec, "completionMode", json!("NonIndexed"));
    default_ptr(spec, "suspend", json!(false));
    let replacement = if is_unset(spec.get("podFailurePolicy")) {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    default_ptr(spec, "podReplacementPolicy", Value::from(replacement));
    default_ptr(spec, "manualSelector", json!(false));
    job_spec_nested(spec);
    if let Some(labels) = labels {
        core::default_labels(obj, labels);
    }
}

/// `SetObjectDefaults_CronJob`: `SetDefaults_CronJob`, then the job template's nested
/// defaults. The job template's own spec gets no `SetDefaults_Job` (no completions, backoff
/// limit, …): those are filled in when the CronJob controller creates each Job.
fn cron_job(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    default_str(spec, "concurrencyPolicy", "Allow");
    default_ptr(spec, "suspend", json!(false));
    default_ptr(spec, "successfulJobsHistoryLimit", json!(3));
    default_ptr(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job_spec) = struct_obj(spec, "jobTemplate").and_then(|t| struct_obj(t, "spec")) {
        job_spec_nested(job_spec);
    }
}

/// What a `JobSpec` gets wherever it is: `status: "True"` on pod-condition patterns of the pod
/// failure policy (`SetDefaults_PodFailurePolicyOnPodConditionsPattern`), and the pod
/// template's defaults.
fn job_spec_nested(spec: &mut Obj) {
    if let Some(policy) = ptr_obj(spec, "podFailurePolicy") {
        each_obj(policy, "rules", |rule| {
            each_obj(rule, "onPodConditions", |pattern| {
                default_str(pattern, "status", "True");
            });
        });
    }
    if let Some(template) = struct_obj(spec, "template") {
        pod::template(template);
    }
}
