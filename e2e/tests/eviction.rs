//! `pods/eviction` and `kubectl drain` on a bare server (no disruption controller: the
//! test sets the PodDisruptionBudget's status through its status subresource): a budget
//! with no disruptions left blocks the drain with upstream's 429 text and
//! `DisruptionBudget` cause; a stale budget answers 429 with Retry-After; a budget that
//! allows one eviction lets the drain through and records the disruption; `kubectl
//! cordon`/`uncordon` flip `spec.unschedulable`.

use std::time::{Duration, Instant};

use e2e::ServerProcess;
use http_body_util::BodyExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

fn admin(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    out
}

fn admin_stdin(s: &ServerProcess, args: &[&str], stdin: &str) -> String {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, args, Some(stdin))
        .expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    out
}

/// A running, ready pod on `node` labelled app=web.
fn running_pod(s: &ServerProcess, name: &str, node: &str) {
    admin_stdin(
        s,
        &["create", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: web\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: nginx\n"
        ),
    );
    admin(
        s,
        &[
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
        ],
    );
}

fn set_budget(s: &ServerProcess, observed: i64, allowed: i64, healthy: i64) {
    let patch = format!(
        r#"{{"status":{{"observedGeneration":{observed},"disruptionsAllowed":{allowed},"currentHealthy":{healthy},"desiredHealthy":1,"expectedPods":{healthy}}}}}"#
    );
    admin(
        s,
        &[
            "patch",
            "pdb",
            "web-pdb",
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
    );
}

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    config.default_retry = false;
    Client::try_from(config).expect("kube client")
}

/// POSTs an Eviction of `pod`; returns status code, Retry-After and the body.
async fn evict(client: &Client, pod: &str) -> (u16, Option<String>, serde_json::Value) {
    let body = serde_json::json!({
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "default"}
    });
    let req = hyper::http::Request::post(format!("/api/v1/namespaces/default/pods/{pod}/eviction"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("request");
    let resp = client.send(req.map(Into::into)).await.expect("send");
    let code = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        code,
        retry,
        serde_json::from_slice(&bytes).expect("a Status body"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_is_held_by_a_disruption_budget_until_it_allows_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    admin_stdin(
        &s,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n",
    );

    // cordon / uncordon.
    admin(&s, &["cordon", "n1"]);
    let flag = || {
        admin(
            &s,
            &["get", "node", "n1", "-o", "jsonpath={.spec.unschedulable}"],
        )
    };
    assert_eq!(flag(), "true");
    admin(&s, &["uncordon", "n1"]);
    assert_eq!(flag(), "");

    running_pod(&s, "web", "n1");
    admin(
        &s,
        &[
            "create",
            "pdb",
            "web-pdb",
            "--selector=app=web",
            "--min-available=1",
        ],
    );

    // A budget the controller has not processed yet: 429 with Retry-After.
    let client = client(&s).await;
    let (code, retry, status) = evict(&client, "web").await;
    assert_eq!(code, 429, "{status}");
    assert_eq!(retry.as_deref(), Some("10"));
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web-pdb is still being processed by the server."
    );

    // No disruptions left: the upstream message and cause, no Retry-After.
    set_budget(&s, 1, 0, 1);
    let (code, retry, status) = evict(&client, "web").await;
    assert_eq!(code, 429, "{status}");
    assert_eq!(retry, None);
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(
        status["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        status["details"]["causes"][0],
        serde_json::json!({"reason": "DisruptionBudget", "message": "The disruption budget web-pdb needs 1 healthy pods and has 1 currently"})
    );

    let (ok, _, err) = s
        .kubectl(&[
            "drain",
            "n1",
            "--ignore-daemonsets",
            "--force",
            "--timeout=5s",
        ])
        .expect("kubectl");
    assert!(!ok, "drain must be blocked");
    assert!(
        err.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    assert_eq!(flag(), "true", "drain cordons first");
    admin(&s, &["get", "pod", "web"]);

    // One disruption allowed: the drain evicts the pod and the budget records it.
    set_budget(&s, 1, 1, 1);
    let out = admin(
        &s,
        &[
            "drain",
            "n1",
            "--ignore-daemonsets",
            "--force",
            "--timeout=30s",
        ],
    );
    assert!(out.contains("pod/web evicted"), "{out}");
    assert!(out.contains("node/n1 drained"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, err) = s.kubectl(&["get", "pod", "web"]).expect("kubectl");
        if !ok && err.contains("NotFound") {
            break;
        }
        assert!(Instant::now() < deadline, "pod web still there");
        std::thread::sleep(Duration::from_millis(200));
    }
    let budget = admin(
        &s,
        &[
            "get",
            "pdb",
            "web-pdb",
            "-o",
            "jsonpath={.status.disruptionsAllowed} {.status.disruptedPods.web}",
        ],
    );
    let (allowed, when) = budget.split_once(' ').unwrap_or_default();
    assert_eq!(allowed, "0");
    assert!(!when.is_empty(), "disruptedPods records web: {budget}");

    // Two budgets over one pod: upstream's 500.
    running_pod(&s, "web2", "n1");
    admin(
        &s,
        &[
            "create",
            "pdb",
            "second",
            "--selector=app=web",
            "--max-unavailable=1",
        ],
    );
    let (code, _, status) = evict(&client, "web2").await;
    assert_eq!(code, 500);
    assert_eq!(
        status["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );

    // A pending pod is evicted without looking at budgets.
    admin_stdin(
        &s,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pending\n  labels:\n    app: web\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: nginx\n",
    );
    let (code, _, status) = evict(&client, "pending").await;
    assert_eq!(code, 201, "{status}");
    assert_eq!(status["status"], "Success");
}
