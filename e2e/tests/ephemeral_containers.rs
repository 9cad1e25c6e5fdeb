//! `pods/ephemeralcontainers` with stock kubectl and kube-rs on a bare server: `kubectl
//! debug <pod> --image=busybox -c dbg` adds an ephemeral container (and only that: the
//! rest of the pod is unchanged); `kubectl get pod -o jsonpath` shows it; GET of the
//! subresource returns the pod; upstream's update rules answer 422 (removing or changing an
//! existing ephemeral container, a name already taken, ports or probes on one, a pod created
//! with one).

use e2e::ServerProcess;
use e2e::cli::{json, ok};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

fn pod(s: &ServerProcess, name: &str) {
    let (made, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: nginx\n"
            )),
        )
        .expect("kubectl runs");
    assert!(made, "{err}");
}

async fn client(s: &ServerProcess) -> Client {
    let kc = Kubeconfig::read_from(&s.kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// PUT of the pod with `ephemeral` as its ephemeral containers through the subresource;
/// the error text on failure.
async fn put(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    ephemeral: Value,
) -> Result<Value, String> {
    let mut current: Value =
        serde_json::to_value(pods.get(name).await.expect("get")).expect("json");
    current["spec"]["ephemeralContainers"] = ephemeral;
    pods.replace_subresource(
        "ephemeralcontainers",
        name,
        &PostParams::default(),
        &current,
    )
    .await
    .map(|p| serde_json::to_value(p).expect("json"))
    .map_err(|e| match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message),
        other => other.to_string(),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_debug_adds_an_ephemeral_container() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    pod(&s, "web");
    let before = json(&s, &["get", "pod", "web", "-o", "json"]);

    let (debugged, out, err) = s
        .kubectl(&["debug", "web", "--image=busybox", "-c", "dbg"])
        .expect("kubectl runs");
    assert!(
        debugged,
        "kubectl debug failed: {out}{err}\n{}",
        e2e::cli::tail(&s.log())
    );
    let names = ok(
        &s,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.ephemeralContainers[*].name}",
        ],
    );
    assert_eq!(names, "dbg");
    let after = json(&s, &["get", "pod", "web", "-o", "json"]);
    let dbg = &after["spec"]["ephemeralContainers"][0];
    assert_eq!(dbg["image"], "busybox");
    // Defaults apply as to any container.
    assert_eq!(dbg["terminationMessagePolicy"], "File");
    // Nothing else of the pod changed.
    assert_eq!(after["spec"]["containers"], before["spec"]["containers"]);
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    let managed = json(
        &s,
        &["get", "pod", "web", "-o", "json", "--show-managed-fields"],
    );
    let entries = managed["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let debug = entries
        .iter()
        .find(|e| e["subresource"] == "ephemeralcontainers")
        .unwrap_or_else(|| panic!("no ephemeralcontainers entry: {entries:?}"));
    assert_eq!(debug["manager"], "kubectl");
    assert!(
        debug["fieldsV1"]["f:spec"]["f:ephemeralContainers"].is_object(),
        "{debug}"
    );

    // The subresource reads as the pod; discovery lists it.
    let sub = json(
        &s,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/web/ephemeralcontainers",
        ],
    );
    assert_eq!(sub["kind"], "Pod");
    assert_eq!(sub["spec"]["ephemeralContainers"][0]["name"], "dbg");
    let v1 = json(&s, &["get", "--raw", "/api/v1"]);
    assert!(
        v1["resources"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["name"] == "pods/ephemeralcontainers")),
        "{v1}"
    );

    // A second debug container joins the first.
    ok(&s, &["debug", "web", "--image=alpine", "-c", "dbg2"]);
    let names = ok(
        &s,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.ephemeralContainers[*].name}",
        ],
    );
    assert_eq!(names, "dbg dbg2");

    // Upstream's rules, through the subresource's PUT.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client(&s).await, "default");
    let existing = after["spec"]["ephemeralContainers"][0].clone();
    let err = put(&pods, "web", json!([existing]))
        .await
        .expect_err("removal refused");
    assert!(
        err.contains("422") && err.contains("spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg2\" may not be removed"),
        "{err}"
    );
    let current = json(&s, &["get", "pod", "web", "-o", "json"]);
    let mut changed = current["spec"]["ephemeralContainers"].clone();
    changed[0]["image"] = json!("alpine");
    let err = put(&pods, "web", changed)
        .await
        .expect_err("change refused");
    assert!(
        err.contains("existing ephemeral containers \"dbg\" may not be changed"),
        "{err}"
    );
    let mut taken = current["spec"]["ephemeralContainers"].clone();
    if let Some(list) = taken.as_array_mut() {
        list.push(
            json!({"name": "app", "image": "busybox", "ports": [{"containerPort": 80}],
            "readinessProbe": {"exec": {"command": ["true"]}}}),
        );
    }
    let err = put(&pods, "web", taken)
        .await
        .expect_err("bad container refused");
    assert!(
        err.contains("spec.ephemeralContainers[2].name: Duplicate value: \"app\""),
        "{err}"
    );
    assert!(
        err.contains(
            "spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container"
        ),
        "{err}"
    );
    assert!(err.contains("spec.ephemeralContainers[2].readinessProbe: Forbidden: cannot be set for an Ephemeral Container"), "{err}");

    // A pod is never created with ephemeral containers.
    let (made, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: Pod\nmetadata:\n  name: pre\nspec:\n  containers:\n  - name: app\n    image: nginx\n  ephemeralContainers:\n  - name: dbg\n    image: busybox\n"),
        )
        .expect("kubectl runs");
    assert!(!made);
    assert!(
        err.contains("spec.ephemeralContainers: Forbidden: cannot be set on create"),
        "{err}"
    );
}

/// On the whole control plane `kubectl debug -it` adds the container, and since Capstan's
/// nodes run no ephemeral containers the node reports it terminated (`StartError`, with the
/// reason): kubectl stops at once with the server's explanation instead of waiting forever.
#[test]
fn kubectl_debug_interactive_stops_with_a_clear_message() {
    let (_dir, s) = e2e::cli::cluster();
    ok(&s, &["run", "web", "--image=nginx"]);
    e2e::cli::wait_for(&s, 60, "pod web Running", || {
        let phase = ok(&s, &["get", "pod", "web", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running").then_some(())
    });
    let (debugged, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "debug",
                "-it",
                "web",
                "--image=busybox",
                "-c",
                "dbg",
                "--profile=general",
            ],
            Some(""),
        )
        .expect("kubectl runs");
    assert!(!debugged, "{out}");
    assert!(
        err.contains("runs on simulated node") && err.contains("no container runs there"),
        "{err}"
    );
    let status = json(&s, &["get", "pod", "web", "-o", "json"]);
    let dbg = &status["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(dbg["name"], "dbg");
    assert_eq!(dbg["state"]["terminated"]["reason"], "StartError");
    assert!(
        dbg["state"]["terminated"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("do not run ephemeral containers")),
        "{dbg}"
    );
}
