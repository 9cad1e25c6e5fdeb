//! Jobs run to completion on the simulated nodes: completions 5 / parallelism 2 completes
//! (`kubectl wait --for=condition=complete`), a failing Job stops at its backoffLimit with
//! upstream's BackoffLimitExceeded condition, an Indexed Job completes every index, a
//! podFailurePolicy FailJob rule fails at once, and a suspended Job runs nothing until resumed.
//! Pods of a deleted Job that never ran are released from the tracking finalizer (upstream's
//! orphan pods), whatever the cascade, so they and their namespace go away.

use std::time::{Duration, Instant};

use e2e::cli::{apply, cluster, json, ok, wait_for};
use serde_json::Value;

fn job(name: &str, extra_spec: &str, command: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
{extra_spec}
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: busybox, command: {command}}}]
"#
    )
}

fn condition(j: &Value, type_: &str) -> Option<Value> {
    j["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .cloned()
}

#[test]
fn completions_five_parallelism_two_completes_and_never_runs_more_than_two() {
    let (_dir, s) = cluster();
    apply(
        &s,
        &job(
            "five",
            "  completions: 5\n  parallelism: 2",
            r#"["sh", "-c", "sleep 1"]"#,
        ),
    );
    // Parallelism is respected while it runs.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let j = json(&s, &["get", "job", "five", "-o", "json"]);
        let active = j["status"]["active"].as_i64().unwrap_or(0);
        assert!(active <= 2, "more than 2 active: {j}");
        if condition(&j, "Complete").is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job did not complete: {j}\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    ok(
        &s,
        &[
            "wait",
            "--for=condition=complete",
            "job/five",
            "--timeout=60s",
        ],
    );
    let j = json(&s, &["get", "job", "five", "-o", "json"]);
    assert_eq!(j["status"]["succeeded"], 5, "{j}");
    assert!(j["status"]["completionTime"].is_string(), "{j}");
    assert!(condition(&j, "SuccessCriteriaMet").is_some(), "{j}");
    let c = condition(&j, "Complete").unwrap_or_default();
    assert_eq!(c["reason"], "CompletionsReached", "{c}");
    // Every pod was released from the tracking finalizer.
    let pods = json(&s, &["get", "pods", "-l", "job-name=five", "-o", "json"]);
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 5, "{pods}");
    for p in &items {
        assert_eq!(p["status"]["phase"], "Succeeded", "{p}");
        assert!(
            !p["metadata"]["finalizers"]
                .to_string()
                .contains("batch.kubernetes.io/job-tracking"),
            "{p}"
        );
    }
    let describe = ok(&s, &["describe", "job", "five"]);
    assert!(describe.contains("SuccessfulCreate"), "{describe}");
    assert!(describe.contains("Completed"), "{describe}");
}

#[test]
fn a_failing_job_stops_at_its_backoff_limit() {
    let (_dir, s) = cluster();
    apply(
        &s,
        &job("fails", "  backoffLimit: 1", r#"["sh", "-c", "exit 1"]"#),
    );
    let j = wait_for(&s, 120, "job fails Failed", || {
        let j = json(&s, &["get", "job", "fails", "-o", "json"]);
        condition(&j, "Failed").map(|_| j)
    });
    let c = condition(&j, "Failed").unwrap_or_default();
    assert_eq!(c["reason"], "BackoffLimitExceeded", "{c}");
    assert_eq!(
        c["message"], "Job has reached the specified backoff limit",
        "{c}"
    );
    assert!(condition(&j, "FailureTarget").is_some(), "{j}");
    assert_eq!(j["status"]["failed"], 2, "{j}");
    assert_eq!(j["status"]["active"].as_i64().unwrap_or(0), 0, "{j}");
    ok(
        &s,
        &[
            "wait",
            "--for=condition=failed",
            "job/fails",
            "--timeout=10s",
        ],
    );
}

#[test]
fn indexed_jobs_pod_failure_policies_and_suspend() {
    let (_dir, s) = cluster();
    // Indexed: every index completes once, pods carry their index.
    apply(
        &s,
        &job(
            "idx",
            "  completions: 3\n  parallelism: 3\n  completionMode: Indexed",
            r#"["sh", "-c", "sleep 1"]"#,
        ),
    );
    // FailJob on exit code 42: fails on the first failure despite a large backoffLimit.
    apply(
        &s,
        &job(
            "policy",
            "  backoffLimit: 6\n  podFailurePolicy:\n    rules:\n    - action: FailJob\n      onExitCodes: {operator: In, values: [42]}",
            r#"["sh", "-c", "exit 42"]"#,
        ),
    );
    // Suspended: no pods until resumed.
    apply(
        &s,
        &job("later", "  suspend: true", r#"["sh", "-c", "sleep 1"]"#),
    );

    ok(
        &s,
        &[
            "wait",
            "--for=condition=complete",
            "job/idx",
            "--timeout=120s",
        ],
    );
    let j = json(&s, &["get", "job", "idx", "-o", "json"]);
    assert_eq!(j["status"]["completedIndexes"], "0-2", "{j}");
    let idx = ok(
        &s,
        &[
            "get",
            "pods",
            "-l",
            "job-name=idx",
            "-o",
            "jsonpath={.items[*].metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}",
        ],
    );
    let mut got: Vec<&str> = idx.split_whitespace().collect();
    got.sort_unstable();
    assert_eq!(got, vec!["0", "1", "2"], "{idx}");

    let j = wait_for(&s, 60, "job policy Failed", || {
        let j = json(&s, &["get", "job", "policy", "-o", "json"]);
        condition(&j, "Failed").map(|_| j)
    });
    let c = condition(&j, "Failed").unwrap_or_default();
    assert_eq!(c["reason"], "PodFailurePolicy", "{c}");
    assert!(
        c["message"].as_str().is_some_and(
            |m| m.contains("failed with exit code 42 matching FailJob rule at index 0")
        ),
        "{c}"
    );
    assert_eq!(j["status"]["failed"], 1, "{j}");

    let j = json(&s, &["get", "job", "later", "-o", "json"]);
    let c = condition(&j, "Suspended").unwrap_or_default();
    assert_eq!(c["reason"], "JobSuspended", "{j}");
    let pods = ok(&s, &["get", "pods", "-l", "job-name=later", "-o", "name"]);
    assert!(pods.trim().is_empty(), "{pods}");
    ok(
        &s,
        &[
            "patch",
            "job",
            "later",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":false}}"#,
        ],
    );
    ok(
        &s,
        &[
            "wait",
            "--for=condition=complete",
            "job/later",
            "--timeout=120s",
        ],
    );
}

#[test]
fn a_cronjob_fires_on_schedule_keeps_its_history_limit_and_ttl_deletes_finished_jobs() {
    let (_dir, s) = cluster();
    // TTL: gone two seconds after it completes.
    apply(
        &s,
        &job(
            "short-lived",
            "  ttlSecondsAfterFinished: 2",
            r#"["sh", "-c", "sleep 1"]"#,
        ),
    );
    let cronjob = r#"
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: "*/1 * * * *"
  timeZone: Etc/UTC
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 0
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox, command: ["sh", "-c", "sleep 1"]}]
"#;
    apply(&s, cronjob);
    wait_for(&s, 60, "the TTL to delete job short-lived", || {
        let (found, _, _) = s
            .kubectl(&["get", "job", "short-lived"])
            .expect("kubectl runs");
        (!found).then_some(())
    });
    // Fires within the next minute; the Job completes; history limit 0 removes it.
    let cj = wait_for(&s, 150, "the cronjob to record a successful run", || {
        let cj = json(&s, &["get", "cronjob", "tick", "-o", "json"]);
        cj["status"]["lastSuccessfulTime"].is_string().then_some(cj)
    });
    assert!(cj["status"]["lastScheduleTime"].is_string(), "{cj}");
    let scheduled = cj["status"]["lastScheduleTime"]
        .as_str()
        .unwrap_or_default();
    assert!(scheduled.ends_with(":00Z"), "not on a minute: {scheduled}");
    wait_for(
        &s,
        60,
        "the finished job pruned by the history limit",
        || {
            let jobs = ok(&s, &["get", "jobs", "-o", "name"]);
            (!jobs.contains("job.batch/tick-")).then_some(())
        },
    );
    let events = ok(&s, &["get", "events", "-o", "json"]);
    for reason in ["SuccessfulCreate", "SawCompletedJob", "SuccessfulDelete"] {
        assert!(
            events.contains(&format!("\"reason\": \"{reason}\"")),
            "no {reason} event: {events}"
        );
    }
}

/// Names of the pods of Job `job` in namespace `ns` that still carry the tracking finalizer,
/// and how many pods it has.
fn tracked_pods(s: &e2e::ServerProcess, ns: &str, job: &str) -> (usize, usize) {
    let pods = json(
        s,
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("job-name={job}"),
            "-o",
            "json",
        ],
    );
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    let tracked = items
        .iter()
        .filter(|p| {
            p["metadata"]["finalizers"]
                .to_string()
                .contains("batch.kubernetes.io/job-tracking")
        })
        .count();
    (items.len(), tracked)
}

#[test]
fn deleting_a_job_whose_pods_never_ran_releases_them_and_the_namespace_can_go() {
    let (_dir, s) = cluster();
    ok(&s, &["create", "namespace", "stuck"]);
    // A node selector no node matches: the pods stay Pending, never scheduled.
    let pending = |name: &str| {
        format!(
            r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: stuck}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {{no-such-label: nowhere}}
      containers: [{{name: c, image: busybox, command: ["sh", "-c", "sleep 1"]}}]
"#
        )
    };
    for name in ["bg", "fg", "orphaned"] {
        apply(&s, &pending(name));
    }
    for name in ["bg", "fg", "orphaned"] {
        wait_for(&s, 60, &format!("two tracked pods of job {name}"), || {
            (tracked_pods(&s, "stuck", name) == (2, 2)).then_some(())
        });
    }
    let phases = ok(
        &s,
        &[
            "get",
            "pods",
            "-n",
            "stuck",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
    );
    assert!(
        phases.split_whitespace().all(|p| p == "Pending"),
        "{phases}"
    );

    // kubectl's default cascade (background): the garbage collector deletes the pods, the
    // Job controller releases them, they go.
    ok(&s, &["delete", "job", "bg", "-n", "stuck"]);
    wait_for(&s, 60, "the pods of job bg to go", || {
        (tracked_pods(&s, "stuck", "bg").0 == 0).then_some(())
    });
    // Foreground: the Job waits for its pods, which must not wait for it.
    ok(
        &s,
        &[
            "delete",
            "job",
            "fg",
            "-n",
            "stuck",
            "--cascade=foreground",
            "--timeout=60s",
        ],
    );
    wait_for(&s, 60, "the pods of job fg to go", || {
        (tracked_pods(&s, "stuck", "fg").0 == 0).then_some(())
    });
    // Orphaned: the pods stay, without the Job's finalizer or owner.
    ok(
        &s,
        &[
            "delete",
            "job",
            "orphaned",
            "-n",
            "stuck",
            "--cascade=orphan",
        ],
    );
    wait_for(&s, 60, "the pods of job orphaned released", || {
        (tracked_pods(&s, "stuck", "orphaned") == (2, 0)).then_some(())
    });
    let owners = ok(
        &s,
        &[
            "get",
            "pods",
            "-n",
            "stuck",
            "-l",
            "job-name=orphaned",
            "-o",
            "jsonpath={.items[*].metadata.ownerReferences}",
        ],
    );
    assert!(owners.trim().is_empty(), "{owners}");

    // Nothing holds the namespace any more.
    ok(&s, &["delete", "namespace", "stuck", "--timeout=90s"]);
    wait_for(&s, 90, "namespace stuck to go", || {
        let (found, _, _) = s
            .kubectl(&["get", "namespace", "stuck"])
            .expect("kubectl runs");
        (!found).then_some(())
    });
}
