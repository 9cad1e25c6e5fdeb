//! Everyday kubectl workflows against `capstan server`: `expose`, `annotate`,
//! `-o custom-columns`, `describe` (with events) for pods, deployments, services and nodes,
//! `wait --for=jsonpath|condition|delete`, `delete --wait`, and deletion as upstream does it:
//! graceful pod deletion, `--cascade=orphan|foreground` finalizers, finalizers that hold an
//! object until removed, and the DELETE response shapes.

use e2e::ServerProcess;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    out
}

fn ok_stdin(s: &ServerProcess, args: &[&str], input: &str) -> String {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, args, Some(input))
        .expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}");
    out
}

fn fails(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(!ok, "kubectl {args:?} unexpectedly succeeded: {out}");
    err
}

#[test]
fn expose_annotate_describe_and_wait_work_as_on_kubernetes() {
    let (_d, s) = server();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.25",
            "--replicas=2",
        ],
    );
    let out = ok(
        &s,
        &[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--target-port=8080",
        ],
    );
    assert_eq!(out.trim(), "service/web exposed");
    let svc = ok(&s, &["get", "svc", "web", "-o", "wide", "--no-headers"]);
    let cols: Vec<&str> = svc.split_whitespace().collect();
    assert_eq!(cols[0], "web");
    assert_eq!(cols[1], "ClusterIP");
    assert!(cols[2].starts_with("10."), "cluster IP allocated: {svc}");
    assert_eq!(cols[4], "80/TCP");
    assert_eq!(cols[6], "app=web", "selector copied from the deployment");

    assert_eq!(
        ok(&s, &["annotate", "deployment", "web", "team=blue"]).trim(),
        "deployment.apps/web annotated"
    );
    let out = ok(
        &s,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas,TEAM:.metadata.annotations.team",
        ],
    );
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "REPLICAS", "TEAM"]);
    assert_eq!(lines[1], ["web", "2", "blue"]);

    // describe shows the object and the events that name it.
    ok(&s, &["run", "p1", "--image=busybox", "--", "sleep", "1000"]);
    let uid = ok(&s, &["get", "pod", "p1", "-o", "jsonpath={.metadata.uid}"]);
    let events = format!(
        r#"apiVersion: v1
kind: Event
metadata: {{name: p1.scheduled}}
involvedObject: {{kind: Pod, name: p1, namespace: default, uid: "{uid}", apiVersion: v1}}
reason: Scheduled
message: Successfully assigned default/p1 to node-a
type: Normal
source: {{component: default-scheduler}}
count: 1
---
apiVersion: v1
kind: Node
metadata: {{name: node-a, labels: {{kubernetes.io/hostname: node-a}}}}
spec: {{}}
"#
    );
    ok_stdin(&s, &["create", "-f", "-"], &events);
    let pod = ok(&s, &["describe", "pod", "p1"]);
    assert!(pod.contains("Name:         p1"), "{pod}");
    assert!(pod.contains("Status:       Pending"), "{pod}");
    assert!(
        pod.contains("Normal  Scheduled")
            && pod.contains("default-scheduler  Successfully assigned default/p1 to node-a"),
        "events listed by describe: {pod}"
    );
    let deploy = ok(&s, &["describe", "deployment", "web"]);
    assert!(
        deploy.contains("RollingUpdateStrategy:  25% max unavailable, 25% max surge"),
        "{deploy}"
    );
    assert!(
        deploy.contains("Annotations:            team: blue"),
        "{deploy}"
    );
    let svc = ok(&s, &["describe", "service", "web"]);
    assert!(svc.contains("TargetPort:               8080/TCP"), "{svc}");
    let node = ok(&s, &["describe", "node", "node-a"]);
    assert!(node.contains("Name:               node-a"), "{node}");
    assert!(node.contains("Non-terminated Pods:"), "{node}");

    // wait: jsonpath, condition (once a status says so), delete.
    let out = ok(
        &s,
        &[
            "wait",
            "--for=jsonpath={.spec.replicas}=2",
            "deploy/web",
            "--timeout=10s",
        ],
    );
    assert_eq!(out.trim(), "deployment.apps/web condition met");
    let waiter = s
        .kubectl_spawn(&[
            "wait",
            "--for=condition=Available",
            "deploy/web",
            "--timeout=60s",
        ])
        .expect("spawn wait");
    ok(
        &s,
        &[
            "patch",
            "deploy",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"ok"}]}}"#,
        ],
    );
    let out = waiter.wait_with_output().expect("wait finishes");
    assert!(out.status.success(), "wait --for=condition: {out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "deployment.apps/web condition met"
    );
    let waiter = s
        .kubectl_spawn(&["wait", "--for=delete", "pod/p1", "--timeout=60s"])
        .expect("spawn wait");
    let out = ok(&s, &["delete", "pod", "p1", "--wait"]);
    assert!(out.contains("pod \"p1\" deleted"), "{out}");
    let out = waiter.wait_with_output().expect("wait finishes");
    assert!(out.status.success(), "wait --for=delete: {out:?}");
    assert!(fails(&s, &["get", "pod", "p1"]).contains("pods \"p1\" not found"));
}

#[test]
fn deletion_is_graceful_for_pods_and_held_by_finalizers() {
    let (_d, s) = server();
    // A pod on a node, with a finalizer: deletion marks it; the grace period may only shrink.
    ok_stdin(
        &s,
        &["create", "-f", "-"],
        r#"apiVersion: v1
kind: Pod
metadata: {name: sched, finalizers: [example.com/hold]}
spec: {nodeName: node-a, containers: [{name: c, image: busybox}]}
"#,
    );
    ok(&s, &["delete", "pod", "sched", "--wait=false"]);
    let marked = ok(
        &s,
        &[
            "get",
            "pod",
            "sched",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds} {.metadata.deletionTimestamp}",
        ],
    );
    assert!(marked.starts_with("30 "), "default grace period: {marked}");
    let table = ok(&s, &["get", "pod", "sched", "--no-headers"]);
    assert!(table.contains("Terminating"), "{table}");
    ok(
        &s,
        &["delete", "pod", "sched", "--grace-period=5", "--wait=false"],
    );
    let grace = ok(
        &s,
        &[
            "get",
            "pod",
            "sched",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds}",
        ],
    );
    assert_eq!(grace, "5", "a shorter grace period replaces the longer");
    ok(
        &s,
        &[
            "delete",
            "pod",
            "sched",
            "--grace-period=20",
            "--wait=false",
        ],
    );
    let grace = ok(
        &s,
        &[
            "get",
            "pod",
            "sched",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds}",
        ],
    );
    assert_eq!(grace, "5", "a longer one is ignored");
    let err = fails(
        &s,
        &[
            "patch",
            "pod",
            "sched",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold","example.com/more"]}}"#,
        ],
    );
    assert!(
        err.contains("metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/more\"}"),
        "{err}"
    );
    // Without finalizers the pod still waits for its node (grace period > 0)...
    ok(
        &s,
        &[
            "patch",
            "pod",
            "sched",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    );
    ok(&s, &["get", "pod", "sched"]);
    // ...until it is deleted with no grace period.
    ok(
        &s,
        &["delete", "pod", "sched", "--grace-period=0", "--force"],
    );
    fails(&s, &["get", "pod", "sched"]);

    // An unscheduled pod goes at once, and DELETE answers with the pod itself.
    ok(&s, &["run", "idle", "--image=busybox"]);
    let body = ok(
        &s,
        &["delete", "--raw", "/api/v1/namespaces/default/pods/idle"],
    );
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["kind"], "Pod");
    assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
    fails(&s, &["get", "pod", "idle"]);

    // Other kinds answer with a Status of Success.
    ok(&s, &["create", "configmap", "c1"]);
    let body = ok(
        &s,
        &[
            "delete",
            "--raw",
            "/api/v1/namespaces/default/configmaps/c1",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["status"], "Success");
    assert_eq!(v["details"]["kind"], "configmaps");
    assert_eq!(v["details"]["name"], "c1");

    // --cascade=orphan / foreground leave the collector's finalizer on a marked object;
    // removing the last finalizer removes the object.
    ok(&s, &["create", "deployment", "o1", "--image=x"]);
    ok(
        &s,
        &["delete", "deploy", "o1", "--cascade=orphan", "--wait=false"],
    );
    let f = ok(
        &s,
        &[
            "get",
            "deploy",
            "o1",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ],
    );
    assert_eq!(f, r#"["orphan"]"#);
    ok(&s, &["create", "deployment", "f1", "--image=x"]);
    ok(
        &s,
        &[
            "delete",
            "deploy",
            "f1",
            "--cascade=foreground",
            "--wait=false",
        ],
    );
    let f = ok(
        &s,
        &[
            "get",
            "deploy",
            "f1",
            "-o",
            "jsonpath={.metadata.finalizers} {.metadata.generation}",
        ],
    );
    assert_eq!(
        f, r#"["foregroundDeletion"] 2"#,
        "marked, generation bumped"
    );
    let waiter = s
        .kubectl_spawn(&["wait", "--for=delete", "deploy/o1", "--timeout=60s"])
        .expect("spawn wait");
    ok(
        &s,
        &[
            "patch",
            "deploy",
            "o1",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    let out = waiter.wait_with_output().expect("wait finishes");
    assert!(
        out.status.success(),
        "removed with its last finalizer: {out:?}"
    );
    fails(&s, &["get", "deploy", "o1"]);

    let err = fails(
        &s,
        &[
            "delete",
            "--raw",
            "/apis/apps/v1/namespaces/default/deployments/f1?propagationPolicy=Sideways",
        ],
    );
    assert!(
        err.contains(r#"propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil""#),
        "{err}"
    );
}

#[test]
fn namespaces_terminate_through_their_finalize_subresource() {
    let (_d, s) = server();
    ok(&s, &["create", "namespace", "t1"]);
    ok(&s, &["create", "configmap", "before", "-n", "t1"]);
    ok(&s, &["delete", "namespace", "t1", "--wait=false"]);
    let phase = ok(
        &s,
        &[
            "get",
            "ns",
            "t1",
            "-o",
            "jsonpath={.status.phase} {.spec.finalizers}",
        ],
    );
    assert_eq!(phase, r#"Terminating ["kubernetes"]"#);
    let err = fails(&s, &["create", "configmap", "after", "-n", "t1"]);
    assert!(
        err.contains("unable to create new content in namespace t1 because it is being terminated"),
        "{err}"
    );
    // A plain update cannot drop spec.finalizers; the finalize subresource can.
    let ns = ok(&s, &["get", "ns", "t1", "-o", "json"]);
    let mut ns: serde_json::Value = serde_json::from_str(&ns).expect("json");
    ns["spec"]["finalizers"] = serde_json::json!([]);
    let body = ns.to_string();
    ok_stdin(&s, &["replace", "-f", "-"], &body);
    let kept = ok(
        &s,
        &["get", "ns", "t1", "-o", "jsonpath={.spec.finalizers}"],
    );
    assert_eq!(kept, r#"["kubernetes"]"#);
    let ns = ok(&s, &["get", "ns", "t1", "-o", "json"]);
    let mut ns: serde_json::Value = serde_json::from_str(&ns).expect("json");
    ns["spec"]["finalizers"] = serde_json::json!([]);
    let file = s.data_dir.with_extension("ns.json");
    std::fs::write(&file, ns.to_string()).expect("write namespace");
    let out = ok(
        &s,
        &[
            "replace",
            "--raw",
            "/api/v1/namespaces/t1/finalize",
            "-f",
            file.to_str().expect("utf-8 path"),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["spec"], serde_json::json!({}));
    assert_eq!(v["status"]["phase"], "Terminating");
    // With its finalizers done, deleting again removes the namespace.
    ok(&s, &["delete", "namespace", "t1"]);
    fails(&s, &["get", "namespace", "t1"]);
    let resources = ok(&s, &["get", "--raw", "/api/v1"]);
    assert!(
        resources.contains(r#""name":"namespaces/finalize""#),
        "discovery lists finalize"
    );
}
