//! `pods/resize` (in-place pod vertical scaling) with stock kubectl on a whole control plane:
//! `kubectl patch pod --subresource resize` changes a running pod's cpu request (and only the
//! containers' resources: an image in the same patch is dropped, as upstream's strategy does),
//! the simulated node actuates it — a watch sees `PodResizeInProgress` with the old size, then
//! the new resources in `status.containerStatuses[*].resources` and no resize condition; upstream's
//! `ValidatePodResize` answers 422 to other resources and to a QoS class change; RBAC checks
//! `pods/resize` as its own subresource (`kubectl auth can-i`, a patch as a user without it).

use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::Value;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n    resources:\n      requests:\n        cpu: 100m\n        ephemeral-storage: 1Gi\n";

/// `kubectl patch pod web --subresource resize` with `patch` as `user` (admin when `None`):
/// success, stdout and stderr.
fn resize(s: &e2e::ServerProcess, patch: &str, user: Option<&str>) -> (bool, String, String) {
    let mut args = vec![
        "patch",
        "pod",
        "web",
        "--subresource",
        "resize",
        "--patch",
        patch,
    ];
    let as_user;
    if let Some(u) = user {
        as_user = format!("--as={u}");
        args.push(&as_user);
    }
    s.kubectl(&args).expect("kubectl runs")
}

fn can_i(s: &e2e::ServerProcess, user: &str) -> String {
    let (_, out, _) = s
        .kubectl(&[
            "auth",
            "can-i",
            "patch",
            "pods",
            "--subresource=resize",
            &format!("--as={user}"),
        ])
        .expect("kubectl runs");
    out.trim().to_owned()
}

#[test]
fn kubectl_resizes_a_running_pod_in_place() {
    let (_dir, s) = cluster();
    let (made, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(POD))
        .expect("kubectl runs");
    assert!(made, "{err}");
    wait_for(&s, 60, "pod web running with resources reported", || {
        let p = json(&s, &["get", "pod", "web", "-o", "json"]);
        (p["status"]["phase"] == "Running"
            && p["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"] == "100m")
            .then_some(())
    });
    let before = json(&s, &["get", "pod", "web", "-o", "json"]);
    assert_eq!(before["status"]["qosClass"], "Burstable");

    // A watch on the pod's conditions sees the node's progress.
    let mut watch = s
        .kubectl_spawn(&[
            "get",
            "pod",
            "web",
            "-w",
            "-o",
            r#"jsonpath={.status.conditions[*].type} {.status.containerStatuses[0].resources.requests.cpu}{"\n"}"#,
        ])
        .expect("kubectl -w starts");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = watch.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the watch prints the pod");
    assert!(first.ends_with(" 100m"), "{first}");

    // The cpu request changes; the image in the same patch is dropped by the strategy.
    let (done, out, err) = resize(
        &s,
        r#"{"spec":{"containers":[{"name":"app","image":"busybox","resources":{"requests":{"cpu":"200m"}}}]}}"#,
        None,
    );
    assert!(done, "{out}{err}\n{}", e2e::cli::tail(&s.log()));
    assert_eq!(out.trim(), "pod/web patched");
    let after = json(&s, &["get", "pod", "web", "-o", "json"]);
    let app = &after["spec"]["containers"][0];
    assert_eq!(app["resources"]["requests"]["cpu"], "200m");
    assert_eq!(app["resources"]["requests"]["ephemeral-storage"], "1Gi");
    assert_eq!(app["image"], "nginx");
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    // GET of the subresource reads as the pod.
    let sub = json(
        &s,
        &["get", "--raw", "/api/v1/namespaces/default/pods/web/resize"],
    );
    assert_eq!(sub["kind"], "Pod");
    assert_eq!(
        sub["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "200m"
    );
    // managedFields record the write under the subresource.
    let managed = json(
        &s,
        &["get", "pod", "web", "-o", "json", "--show-managed-fields"],
    );
    let entries = managed["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        entries
            .iter()
            .any(|e| e["subresource"] == "resize" && e["manager"] == "kubectl-patch"),
        "{entries:?}"
    );

    // The node actuates it: the status reports the new request, no resize condition stays.
    let status = wait_for(&s, 30, "the node to report the resized request", || {
        let p = json(&s, &["get", "pod", "web", "-o", "json"]);
        (p["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"] == "200m")
            .then(|| p["status"].clone())
    });
    let conditions: Vec<&Value> = status["conditions"]
        .as_array()
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .all(|c| c["type"] != "PodResizePending" && c["type"] != "PodResizeInProgress"),
        "{status}"
    );
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["containerStatuses"][0]["restartCount"], 0);
    // On the way the node reported the resize in progress (with the old size), then done.
    let mut seen = vec![first];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !seen
        .last()
        .is_some_and(|l| l.ends_with(" 200m") && !l.contains("PodResizeInProgress"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the watch did not show the finished resize: {seen:?}"),
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("PodResizeInProgress") && l.ends_with(" 100m")),
        "{seen:?}"
    );

    // Only cpu and memory may change.
    let (done, _, err) = resize(
        &s,
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"ephemeral-storage":"2Gi"}}}]}}"#,
        None,
    );
    assert!(!done);
    assert!(
        err.contains(
            "The Pod \"web\" is invalid: spec: Forbidden: only cpu and memory resources are mutable"
        ),
        "{err}"
    );
    // The QoS class may not change (requests equal to limits would make it Guaranteed).
    let (done, _, err) = resize(
        &s,
        r#"{"spec":{"containers":[{"name":"app","resizePolicy":[{"resourceName":"memory","restartPolicy":"RestartContainer"}],"resources":{"requests":{"cpu":"200m","memory":"64Mi"},"limits":{"cpu":"200m","memory":"64Mi","ephemeral-storage":"1Gi"}}}]}}"#,
        None,
    );
    assert!(!done);
    assert!(
        err.contains(
            "spec: Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing"
        ),
        "{err}"
    );
    // Requests may not be removed.
    let (done, _, err) = resize(
        &s,
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":null}}}]}}"#,
        None,
    );
    assert!(!done);
    assert!(
        err.contains(
            "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed"
        ),
        "{err}"
    );
    let unchanged = json(&s, &["get", "pod", "web", "-o", "json"]);
    assert_eq!(
        unchanged["spec"]["containers"][0]["resources"],
        after["spec"]["containers"][0]["resources"]
    );

    // PUT through the subresource (`kubectl replace --subresource resize`): the same rules.
    let mut current = json(&s, &["get", "pod", "web", "-o", "json"]);
    current["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "250m".into();
    current["metadata"]["labels"] = serde_json::json!({"dropped": "yes"});
    let (replaced, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["replace", "--subresource", "resize", "-f", "-"],
            Some(&current.to_string()),
        )
        .expect("kubectl runs");
    assert!(replaced, "{out}{err}");
    let put = json(&s, &["get", "pod", "web", "-o", "json"]);
    assert_eq!(
        put["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "250m"
    );
    assert!(put["metadata"]["labels"].is_null(), "{}", put["metadata"]);

    // RBAC: pods/resize is its own subresource.
    ok(
        &s,
        &[
            "create",
            "role",
            "pod-editor",
            "--verb=get,patch",
            "--resource=pods",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "jane-pods",
            "--role=pod-editor",
            "--user=jane",
        ],
    );
    assert_eq!(can_i(&s, "jane"), "no");
    let (done, _, err) = resize(
        &s,
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m"}}}]}}"#,
        Some("jane"),
    );
    assert!(!done);
    // kubectl reads the pod through the subresource before it patches it.
    assert!(
        err.contains("pods \"web\" is forbidden: User \"jane\" cannot get resource \"pods/resize\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    ok(
        &s,
        &[
            "create",
            "role",
            "pod-resizer",
            "--verb=get,patch",
            "--resource=pods/resize",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "jane-resize",
            "--role=pod-resizer",
            "--user=jane",
        ],
    );
    wait_for(&s, 10, "jane may patch pods/resize", || {
        (can_i(&s, "jane") == "yes").then_some(())
    });
    let (done, out, err) = resize(
        &s,
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m"}}}]}}"#,
        Some("jane"),
    );
    assert!(done, "{out}{err}");
    wait_for(&s, 30, "the node to report 300m", || {
        let p = json(&s, &["get", "pod", "web", "-o", "json"]);
        (p["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"] == "300m")
            .then_some(())
    });
}
