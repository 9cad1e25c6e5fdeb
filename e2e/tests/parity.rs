//! Parity defects found by running kubectl's own workflows (issue 29), each driven by stock
//! kubectl against the real binary: server-side dry runs write nothing (the DeleteOptions
//! body's `dryRun` included), the namespaces the control plane lives in cannot be deleted,
//! watches are bounded by `timeoutSeconds` only (kubectl's `--request-timeout` is the
//! client's), the objects the control plane itself needs come back when deleted, and a
//! destructive sequence of admin commands leaves a cluster that still schedules and
//! reconciles.

use e2e::ServerProcess;
use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::Value;

fn bare() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

/// kubectl's (ok, stdout, stderr).
fn run(s: &ServerProcess, args: &[&str]) -> (bool, String, String) {
    s.kubectl(args).expect("kubectl runs")
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn server_dry_runs_write_nothing() {
    let (dir, s) = bare();
    ok(&s, &["create", "namespace", "team"]);
    for name in ["x", "y"] {
        ok(
            &s,
            &[
                "-n",
                "team",
                "create",
                "configmap",
                name,
                "--from-literal=a=b",
            ],
        );
    }
    ok(&s, &["-n", "team", "label", "configmap", "y", "tier=db"]);
    let before = json(&s, &["-n", "team", "get", "configmaps", "-o", "json"]);

    // kubectl sends the dry run in the DeleteOptions body, not the query.
    let out = ok(
        &s,
        &["-n", "team", "delete", "configmap", "x", "--dry-run=server"],
    );
    assert_eq!(out.trim(), "configmap \"x\" deleted (server dry run)");
    let out = ok(
        &s,
        &[
            "delete",
            "configmaps",
            "-l",
            "tier=db",
            "-A",
            "--dry-run=server",
        ],
    );
    assert!(
        out.contains("configmap \"y\" deleted (server dry run)"),
        "{out}"
    );
    let out = ok(&s, &["delete", "namespace", "team", "--dry-run=server"]);
    assert!(out.contains("(server dry run)"), "{out}");

    // DELETECOLLECTION with the dry run in its body.
    let body = dir.path().join("options.json");
    std::fs::write(
        &body,
        r#"{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}"#,
    )
    .expect("write body");
    let body = body.to_string_lossy().into_owned();
    ok(
        &s,
        &[
            "delete",
            "--raw",
            "/api/v1/namespaces/team/configmaps",
            "-f",
            &body,
        ],
    );
    ok(
        &s,
        &[
            "delete",
            "--raw",
            "/api/v1/namespaces/team/configmaps/x",
            "-f",
            &body,
        ],
    );

    let after = json(&s, &["-n", "team", "get", "configmaps", "-o", "json"]);
    assert_eq!(
        before["items"], after["items"],
        "a dry run changed stored objects"
    );
    let ns = json(&s, &["get", "namespace", "team", "-o", "json"]);
    assert_eq!(ns["status"]["phase"], "Active");
    assert!(ns["metadata"]["deletionTimestamp"].is_null());

    // A dry-run create of an existing name is the real create's 409.
    let (created, _, err) = run(
        &s,
        &[
            "-n",
            "team",
            "create",
            "configmap",
            "x",
            "--from-literal=a=c",
            "--dry-run=server",
        ],
    );
    assert!(!created);
    assert!(err.contains("configmaps \"x\" already exists"), "{err}");

    // Unknown dry-run values are refused on the verb's options kind, and nothing is written.
    let (refused, _, err) = run(
        &s,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/team/configmaps?dryRun=Everything",
            "-f",
            "-",
        ],
    );
    assert!(!refused);
    assert!(
        err.contains("Unsupported value") || err.contains("the server rejected our request"),
        "{err}"
    );
    let cm_x = json(&s, &["-n", "team", "get", "configmap", "x", "-o", "json"]);
    assert_eq!(cm_x["data"]["a"], "b");

    // The real delete still deletes.
    ok(&s, &["-n", "team", "delete", "configmap", "x"]);
    let (found, _, _) = run(&s, &["-n", "team", "get", "configmap", "x"]);
    assert!(!found);
    drop(dir);
}

#[test]
fn dry_run_deletes_of_pods_and_finalized_objects_leave_them_as_they_were() {
    let (_dir, s) = bare();
    ok(&s, &["create", "configmap", "held", "--from-literal=a=b"]);
    ok(
        &s,
        &[
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/keep"]}}"#,
        ],
    );
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"nodeName":"gone","containers":[{"name":"c","image":"busybox"}]}}"#;
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(pod))
        .expect("kubectl runs");
    assert!(created, "{err}");
    let before_cm = json(&s, &["get", "configmap", "held", "-o", "json"]);
    let before_pod = json(&s, &["get", "pod", "p", "-o", "json"]);
    ok(&s, &["delete", "configmap", "held", "--dry-run=server"]);
    ok(
        &s,
        &[
            "delete",
            "pod",
            "p",
            "--dry-run=server",
            "--grace-period=30",
        ],
    );
    let after_cm = json(&s, &["get", "configmap", "held", "-o", "json"]);
    let after_pod = json(&s, &["get", "pod", "p", "-o", "json"]);
    assert_eq!(rv(&before_cm), rv(&after_cm));
    assert!(after_cm["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(rv(&before_pod), rv(&after_pod));
    assert!(after_pod["metadata"]["deletionTimestamp"].is_null());
}

#[test]
fn the_control_planes_namespaces_cannot_be_deleted() {
    let (_dir, s) = bare();
    ok(&s, &["create", "namespace", "scratch"]);
    for name in ["default", "kube-system", "kube-public"] {
        let (deleted, _, err) = run(&s, &["delete", "namespace", name]);
        assert!(!deleted);
        assert_eq!(
            err.trim(),
            format!(
                "Error from server (Forbidden): namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )
        );
    }
    // `delete ns --all` takes the others and leaves these three.
    let (_, out, err) = run(&s, &["delete", "namespace", "--all", "--wait=false"]);
    assert!(out.contains("namespace \"scratch\" deleted"), "{out}");
    assert_eq!(
        err.matches("this namespace may not be deleted").count(),
        3,
        "{err}"
    );
    for name in ["default", "kube-system", "kube-public"] {
        let ns = json(&s, &["get", "namespace", name, "-o", "json"]);
        assert_eq!(ns["status"]["phase"], "Active", "{name}");
        assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{name}");
    }
    // The system PriorityClasses are protected the same way.
    let (deleted, _, err) = run(&s, &["delete", "priorityclass", "system-node-critical"]);
    assert!(!deleted);
    assert!(
        err.contains("this is a system priority class and cannot be deleted"),
        "{err}"
    );
}

#[test]
fn watches_end_on_timeout_seconds_not_on_the_clients_request_timeout() {
    let (_dir, s) = bare();
    // kubectl's --request-timeout becomes `timeout=1s` on the watch and the HTTP client's own
    // deadline: the server keeps the watch open, so the client's timeout ends it.
    let (_, _, err) = run(
        &s,
        &[
            "get",
            "namespace",
            "default",
            "--watch",
            "--request-timeout=1",
            "-v=5",
        ],
    );
    assert!(
        err.contains("Unable to decode an event from the watch stream")
            && (err.contains("Client.Timeout") || err.contains("context deadline exceeded")),
        "{err}"
    );
    // `timeoutSeconds` is the server's bound: the stream ends and kubectl's raw GET returns.
    let out = ok(
        &s,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Ddefault",
        ],
    );
    assert!(out.contains("\"type\":\"ADDED\""), "{out}");
}

#[test]
fn objects_the_control_plane_needs_come_back_when_deleted() {
    let (_dir, s) = bare();
    ok(&s, &["delete", "service", "kubernetes"]);
    ok(&s, &["delete", "endpointslice", "kubernetes"]);
    ok(&s, &["delete", "endpoints", "kubernetes"]);
    ok(
        &s,
        &["delete", "clusterrolebinding", "system:kube-scheduler"],
    );
    ok(&s, &["delete", "clusterrole", "system:kube-scheduler"]);
    // Nothing finalizes namespaces on a bare server: finalize it by hand, as an admin would.
    ok(
        &s,
        &["delete", "namespace", "kube-node-lease", "--wait=false"],
    );
    let mut ns = json(&s, &["get", "namespace", "kube-node-lease", "-o", "json"]);
    ns["spec"]["finalizers"] = serde_json::json!([]);
    let (finalized, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "replace",
                "--raw",
                "/api/v1/namespaces/kube-node-lease/finalize",
                "-f",
                "-",
            ],
            Some(&ns.to_string()),
        )
        .expect("kubectl runs");
    assert!(finalized, "{err}");
    // Finalized, it goes on the next DELETE (the namespace controller's last step).
    ok(&s, &["delete", "namespace", "kube-node-lease"]);

    let svc = wait_for(&s, 60, "the kubernetes Service to be recreated", || {
        let (found, out, _) = run(&s, &["get", "service", "kubernetes", "-o", "json"]);
        found
            .then(|| serde_json::from_str::<Value>(&out).ok())
            .flatten()
    });
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    wait_for(&s, 60, "the kubernetes EndpointSlice", || {
        let (found, out, _) = run(&s, &["get", "endpointslice", "kubernetes", "-o", "json"]);
        let slice: Value = serde_json::from_str(&out).ok()?;
        (found && slice["metadata"]["labels"]["kubernetes.io/service-name"] == "kubernetes")
            .then_some(())
    });
    wait_for(&s, 60, "the kubernetes Endpoints", || {
        run(&s, &["get", "endpoints", "kubernetes"]).0.then_some(())
    });
    wait_for(&s, 60, "the scheduler's bootstrap RBAC", || {
        let a = run(&s, &["get", "clusterrolebinding", "system:kube-scheduler"]).0;
        let b = run(&s, &["get", "clusterrole", "system:kube-scheduler"]).0;
        (a && b).then_some(())
    });
    let (_, can, _) = run(
        &s,
        &[
            "auth",
            "can-i",
            "create",
            "pods",
            "--subresource=binding",
            "--as=system:kube-scheduler",
        ],
    );
    assert_eq!(can.trim(), "yes");
    wait_for(&s, 60, "kube-node-lease to be recreated", || {
        let (found, out, _) = run(&s, &["get", "namespace", "kube-node-lease", "-o", "json"]);
        let ns: Value = serde_json::from_str(&out).ok()?;
        (found && ns["status"]["phase"] == "Active").then_some(())
    });
}

#[test]
fn a_destructive_admin_sequence_leaves_a_cluster_that_schedules_and_reconciles() {
    let (_dir, s) = cluster();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    wait_for(&s, 60, "web's pods Running", || {
        let pods = json(&s, &["get", "pods", "-o", "json"]);
        let running = pods["items"]
            .as_array()?
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count();
        (running == 2).then_some(())
    });
    // What an admin can type; some of it is refused (immortal namespaces, system priority
    // classes) and the rest is carried out.
    for args in [
        &["delete", "all", "--all", "-A", "--wait=false"][..],
        &["delete", "namespace", "--all", "--wait=false"],
        &["delete", "clusterrolebinding", "--all"],
        &["delete", "clusterrole", "--all"],
        &["delete", "rolebinding,role", "--all", "-A"],
        &["delete", "priorityclass", "--all"],
        &["delete", "lease", "--all", "-A"],
        &["delete", "serviceaccount", "--all", "-A"],
        &["delete", "configmap,secret", "--all", "-A"],
        &["delete", "endpointslice,endpoints", "--all", "-A"],
    ] {
        let _ = run(&s, args);
    }
    for name in ["default", "kube-system", "kube-public"] {
        let ns = json(&s, &["get", "namespace", name, "-o", "json"]);
        assert_eq!(ns["status"]["phase"], "Active", "{name}");
    }
    // The control plane heals: a new namespace gets its ServiceAccount and CA bundle, a new
    // Deployment's pods are created, scheduled and Running, and `kubernetes` is back.
    ok(&s, &["create", "namespace", "after"]);
    ok(
        &s,
        &[
            "-n",
            "after",
            "create",
            "deployment",
            "web2",
            "--image=nginx",
        ],
    );
    wait_for(&s, 180, "web2's pod Running in the new namespace", || {
        let pods = json(&s, &["-n", "after", "get", "pods", "-o", "json"]);
        let running = pods["items"]
            .as_array()?
            .iter()
            .any(|p| p["status"]["phase"] == "Running" && !p["spec"]["nodeName"].is_null());
        running.then_some(())
    });
    wait_for(
        &s,
        120,
        "the default ServiceAccount and kube-root-ca.crt",
        || {
            let sa = run(&s, &["-n", "after", "get", "serviceaccount", "default"]).0;
            let ca = run(&s, &["-n", "after", "get", "configmap", "kube-root-ca.crt"]).0;
            (sa && ca).then_some(())
        },
    );
    wait_for(&s, 60, "the kubernetes Service", || {
        run(&s, &["get", "service", "kubernetes"]).0.then_some(())
    });
    wait_for(
        &s,
        60,
        "the controller manager's and scheduler's leases",
        || {
            let a = run(
                &s,
                &[
                    "-n",
                    "kube-system",
                    "get",
                    "lease",
                    "kube-controller-manager",
                ],
            )
            .0;
            let b = run(&s, &["-n", "kube-system", "get", "lease", "kube-scheduler"]).0;
            (a && b).then_some(())
        },
    );
}
