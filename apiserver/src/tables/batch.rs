//! `batch/v1` printers: jobs and cron jobs.

use super::{
    AGE, CONTAINERS, Env, IMAGES, J, NAME, Printer, Row, age, bool_ptr, cells, col,
    container_cells, deleting, desc, format_label_selector, human_duration, name, nanos_between,
    since, timestamp, wide,
};

/// Jobs: `Name Status Completions Duration Age`; wide `Containers Images Selector`.
pub(super) const JOBS: Printer = Printer::new(
    &[
        NAME,
        col("Status", "string", "Status of the job."),
        col("Completions", "string", desc::JOB_STATUS_SUCCEEDED),
        col("Duration", "string", "Time required to complete the job."),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", "string", desc::JOB_SPEC_SELECTOR),
    ],
    job,
);

/// `hasJobCondition`: the first condition of the type is `True`.
fn has_condition(conditions: J<'_>, kind: &str) -> bool {
    super::condition(conditions, kind).is_some_and(|c| c.get("status").str() == "True")
}

fn job(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    let succeeded = status.get("succeeded").int();
    let completions = match spec.get("completions").opt_int() {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = spec.get("parallelism").int();
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let duration = match (
        timestamp(status.get("startTime")),
        timestamp(status.get("completionTime")),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(nanos_between(start, env.now)),
        (Some(start), Some(done)) => human_duration(nanos_between(start, done)),
    };
    let conditions = status.get("conditions");
    let state = if has_condition(conditions, "Complete") {
        "Complete"
    } else if has_condition(conditions, "Failed") {
        "Failed"
    } else if deleting(o) {
        "Terminating"
    } else if has_condition(conditions, "Suspended") {
        "Suspended"
    } else if has_condition(conditions, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = container_cells(spec.path(&["template", "spec", "containers"]));
    Row::new(cells![
        name(o),
        state,
        completions,
        duration,
        age(env, o),
        names,
        images,
        format_label_selector(spec.get("selector")),
    ])
}

/// Cron jobs: `Name Schedule Timezone Suspend Active Last Schedule Age`; wide `Containers
/// Images Selector`.
pub(super) const CRON_JOBS: Printer = Printer::new(
    &[
        NAME,
        col("Schedule", "string", desc::CJ_SPEC_SCHEDULE),
        col("Timezone", "string", desc::CJ_SPEC_TIME_ZONE),
        col("Suspend", "boolean", desc::CJ_SPEC_SUSPEND),
        col("Active", "integer", desc::CJ_STATUS_ACTIVE),
        col("Last Schedule", "string", desc::CJ_STATUS_LAST_SCHEDULE),
        AGE,
        CONTAINERS,
        IMAGES,
        wide("Selector", "string", desc::JOB_SPEC_SELECTOR),
    ],
    cron_job,
);

fn cron_job(env: &Env<'_>, o: J<'_>) -> Row {
    let spec = o.get("spec");
    let status = o.get("status");
    let last_schedule = if status.get("lastScheduleTime").is_set() {
        since(env, status.get("lastScheduleTime"))
    } else {
        "<none>".to_owned()
    };
    let job_spec = spec.path(&["jobTemplate", "spec"]);
    let (names, images) = container_cells(job_spec.path(&["template", "spec", "containers"]));
    Row::new(cells![
        name(o),
        spec.get("schedule").str(),
        spec.get("timeZone").opt_str().unwrap_or("<none>"),
        bool_ptr(spec.get("suspend")),
        status.get("active").len(),
        last_schedule,
        age(env, o),
        names,
        images,
        format_label_selector(job_spec.get("selector")),
    ])
}
