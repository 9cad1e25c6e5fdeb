//! batch/v1 Job and CronJob (pkg/apis/batch/validation), with `robfig/cron`'s
//! `ParseStandard` for schedules.

use serde_json::Value;

use super::apps::{immutable_selector, template_labels_match};
use super::pod::{self, is_unset};
use super::{
    IMMUTABLE, Obj, get_obj, get_str, go_label_selector, go_quote, invalid, nonnegative,
    not_supported, required, validate_label_selector,
};
use crate::error::FieldError;

/// Validates a batch/v1 object of kind `kind`.
pub(super) fn validate(kind: &str, obj: &Obj, old: Option<&Obj>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let empty = Obj::new();
    let spec = get_obj(obj, "spec").unwrap_or(&empty);
    match kind {
        "Job" => {
            job_spec(&mut errs, spec, "spec");
            // The selector is generated before validation upstream (unless manualSelector);
            // when it is present it must be valid and match the template.
            if let Some(sel) = get_obj(spec, "selector") {
                validate_label_selector(&mut errs, sel, "spec.selector");
                if !super::selector_is_empty(sel) {
                    template_labels_match(
                        &mut errs,
                        Some(sel),
                        get_obj(spec, "template"),
                        "spec.template",
                    );
                }
            } else if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
                errs.push(required("spec.selector", ""));
            }
            if let Some(old_spec) = old.and_then(|o| get_obj(o, "spec")) {
                job_update(&mut errs, spec, old_spec, old);
            }
        }
        "CronJob" => cron_job(&mut errs, spec),
        _ => {}
    }
    errs
}

/// `validateJobSpec` at `path` (`spec`, or `spec.jobTemplate.spec` of a CronJob).
fn job_spec(errs: &mut Vec<FieldError>, spec: &Obj, path: &str) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        nonnegative(errs, spec, key, path);
    }
    if let Some(mode) = spec.get("completionMode").and_then(Value::as_str) {
        if mode != "NonIndexed" && mode != "Indexed" {
            errs.push(not_supported(
                &format!("{path}.completionMode"),
                &go_quote(mode),
                &["NonIndexed", "Indexed"],
            ));
        }
        if mode == "Indexed" && is_unset(spec.get("completions")) {
            errs.push(required(
                &format!("{path}.completions"),
                "when completion mode is Indexed",
            ));
        }
    }
    let template_path = format!("{path}.template");
    let template = get_obj(spec, "template");
    pod::template(errs, template, &template_path);
    let restart = template
        .and_then(|t| get_obj(t, "spec"))
        .map_or("", |s| get_str(s, "restartPolicy"));
    let rp = format!("{template_path}.spec.restartPolicy");
    if restart == "Always" || restart.is_empty() {
        errs.push(required(&rp, "valid values: \"OnFailure\", \"Never\""));
    } else if restart != "OnFailure" && restart != "Never" {
        errs.push(not_supported(
            &rp,
            &go_quote(restart),
            &["OnFailure", "Never"],
        ));
    } else if !is_unset(spec.get("podFailurePolicy")) && restart != "Never" {
        errs.push(invalid(
            &rp,
            &go_quote(restart),
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
}

/// `ValidateJobSpecUpdate`: selector, template (unless a suspended, never-started Job changes
/// only its scheduling directives), completions and the other immutable fields.
fn job_update(errs: &mut Vec<FieldError>, spec: &Obj, old_spec: &Obj, old: Option<&Obj>) {
    immutable_selector(errs, spec, old_spec, "spec.selector");

    let suspended_unstarted = old_spec.get("suspend").and_then(Value::as_bool) == Some(true)
        && old
            .and_then(|o| get_obj(o, "status"))
            .is_none_or(|s| is_unset(s.get("startTime")));
    let normalize = |t: Option<&Value>| -> Value {
        let mut t = t.map_or(Value::Null, super::without_nulls);
        if suspended_unstarted && let Some(t) = t.as_object_mut() {
            if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("labels");
                m.remove("annotations");
            }
            if let Some(s) = t.get_mut("spec").and_then(Value::as_object_mut) {
                for k in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                    s.remove(k);
                }
            }
        }
        t
    };
    let (new_t, old_t) = (spec.get("template"), old_spec.get("template"));
    if normalize(new_t) != normalize(old_t) {
        let shown = new_t.map_or_else(|| "null".to_owned(), Value::to_string);
        errs.push(invalid(
            "spec.template",
            &format!("core.PodTemplateSpec{shown}"),
            IMMUTABLE,
        ));
    }

    let indexed = get_str(spec, "completionMode") == "Indexed";
    let (c, oc) = (spec.get("completions"), old_spec.get("completions"));
    let norm = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    if norm(c) != norm(oc) {
        if !indexed {
            let shown = c
                .filter(|v| !v.is_null())
                .map_or_else(|| "null".to_owned(), Value::to_string);
            errs.push(invalid("spec.completions", &shown, IMMUTABLE));
        } else if let Some(n) = c.and_then(Value::as_i64)
            && Some(n) != spec.get("parallelism").and_then(Value::as_i64)
        {
            errs.push(invalid(
                "spec.completions",
                &n.to_string(),
                "can only be modified in tandem with spec.parallelism",
            ));
        }
    }
    for key in [
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "managedBy",
        "successPolicy",
    ] {
        let (n, o) = (spec.get(key), old_spec.get(key));
        if norm(n) != norm(o) {
            let shown = match n.filter(|v| !v.is_null()) {
                None => "null".to_owned(),
                Some(Value::String(s)) => go_quote(s),
                Some(v) => v.to_string(),
            };
            errs.push(invalid(&format!("spec.{key}"), &shown, IMMUTABLE));
        }
    }
}

/// `validateCronJobSpec`.
fn cron_job(errs: &mut Vec<FieldError>, spec: &Obj) {
    let schedule = get_str(spec, "schedule");
    if schedule.is_empty() {
        errs.push(required("spec.schedule", ""));
    } else {
        if let Err(e) = parse_standard(schedule) {
            errs.push(invalid("spec.schedule", &go_quote(schedule), &e));
        }
        if schedule.contains("TZ") {
            let detail = if is_unset(spec.get("timeZone")) {
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            } else {
                "cannot use both timeZone field and TZ or CRON_TZ in schedule"
            };
            errs.push(invalid("spec.schedule", &go_quote(schedule), detail));
        }
    }
    nonnegative(errs, spec, "startingDeadlineSeconds", "spec");
    match get_str(spec, "concurrencyPolicy") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(required("spec.concurrencyPolicy", "")),
        other => errs.push(not_supported(
            "spec.concurrencyPolicy",
            &go_quote(other),
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let empty = Obj::new();
    let job_spec_obj = get_obj(spec, "jobTemplate")
        .and_then(|t| get_obj(t, "spec"))
        .unwrap_or(&empty);
    job_spec(errs, job_spec_obj, "spec.jobTemplate.spec");
    if let Some(sel) = job_spec_obj.get("selector").filter(|v| !v.is_null()) {
        errs.push(invalid(
            "spec.jobTemplate.spec.selector",
            &go_label_selector(sel),
            "`selector` will be auto-generated",
        ));
    }
    if job_spec_obj.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        errs.push(not_supported(
            "spec.jobTemplate.spec.manualSelector",
            "true",
            &["nil", "false"],
        ));
    }
    nonnegative(errs, spec, "successfulJobsHistoryLimit", "spec");
    nonnegative(errs, spec, "failedJobsHistoryLimit", "spec");
}

/// One field of a cron spec: bounds and names.
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// `cron.ParseStandard`'s errors, word for word.
fn parse_standard(spec: &str) -> Result<(), String> {
    let mut spec = spec.trim_start();
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    for prefix in ["TZ=", "CRON_TZ="] {
        if let Some(rest) = spec.strip_prefix(prefix) {
            let i = rest.find(' ').unwrap_or(rest.len());
            spec = rest[i..].trim();
        }
    }
    if spec.starts_with('@') {
        return match spec {
            "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight"
            | "@hourly" => Ok(()),
            s if s.starts_with("@every ") => {
                let d = &s["@every ".len()..];
                if is_go_duration(d) {
                    Ok(())
                } else {
                    Err(format!(
                        "failed to parse duration {s}: time: invalid duration {}",
                        go_quote(d)
                    ))
                }
            }
            s => Err(format!("unrecognized descriptor: {s}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    for (f, b) in fields.iter().zip([MINUTES, HOURS, DOM, MONTHS, DOW]) {
        for expr in f.split(',') {
            range(expr, &b)?;
        }
    }
    Ok(())
}

/// `getRange` of robfig/cron.
fn range(expr: &str, b: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end);
    if low_high[0] == "*" || low_high[0] == "?" {
        start = b.min;
        end = b.max;
    } else {
        start = int_or_name(low_high[0], b)?;
        end = match low_high.len() {
            1 => start,
            2 => int_or_name(low_high[1], b)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_parse_int(range_and_step[1])?;
            if low_high.len() == 1 {
                end = b.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

fn int_or_name(expr: &str, b: &Bounds) -> Result<u64, String> {
    let lower = expr.to_ascii_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        return Ok(b.min + i as u64);
    }
    must_parse_int(expr)
}

/// `mustParseInt`, with `strconv.Atoi`'s error text.
fn must_parse_int(expr: &str) -> Result<u64, String> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: invalid syntax",
            go_quote(expr)
        ));
    }
    let n: i64 = expr.parse().map_err(|_| {
        format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {}: value out of range",
            go_quote(expr)
        )
    })?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {expr}"));
    }
    Ok(n.unsigned_abs())
}

/// Whether `s` parses as a Go `time.Duration` (`1h30m`, `90s`, `1.5h`).
fn is_go_duration(s: &str) -> bool {
    let mut rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    if rest == "0" {
        return true;
    }
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if n == 0 {
            return false;
        }
        rest = &rest[n..];
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .iter()
            .find(|u| rest.starts_with(**u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}
