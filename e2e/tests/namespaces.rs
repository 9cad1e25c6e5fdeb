//! The namespace controller inside `capstan server`: deleting a namespace deletes everything
//! in it (pods go through graceful deletion on the simulated nodes), reports upstream's
//! NamespaceDeletion*/NamespaceContentRemaining/NamespaceFinalizersRemaining conditions while
//! content remains, then removes the `kubernetes` finalizer so the namespace goes.

use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::Value;

fn condition(ns: &Value, type_: &str) -> Option<Value> {
    ns["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

#[test]
fn deleting_a_namespace_removes_its_contents_then_itself() {
    let (_d, s) = cluster();
    ok(&s, &["create", "namespace", "doomed"]);
    ok(
        &s,
        &[
            "-n",
            "doomed",
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    ok(
        &s,
        &[
            "-n",
            "doomed",
            "create",
            "configmap",
            "settings",
            "--from-literal=a=b",
        ],
    );
    ok(
        &s,
        &[
            "-n",
            "doomed",
            "create",
            "service",
            "clusterip",
            "web",
            "--tcp=80:80",
        ],
    );
    ok(
        &s,
        &[
            "-n",
            "doomed",
            "create",
            "configmap",
            "held",
            "--from-literal=a=b",
        ],
    );
    ok(
        &s,
        &[
            "-n",
            "doomed",
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
    );
    let out = ok(
        &s,
        &[
            "-n",
            "doomed",
            "rollout",
            "status",
            "deployment/web",
            "--timeout=120s",
        ],
    );
    assert!(out.contains("successfully rolled out"));
    ok(&s, &["delete", "namespace", "doomed", "--wait=false"]);

    // While the held ConfigMap remains: Terminating with upstream's conditions.
    let ns = wait_for(&s, 60, "content-remaining conditions", || {
        let ns = json(&s, &["get", "namespace", "doomed", "-o", "json"]);
        let c = condition(&ns, "NamespaceFinalizersRemaining")?;
        (c["status"] == "True").then_some(ns)
    });
    assert_eq!(ns["status"]["phase"], "Terminating");
    let c = condition(&ns, "NamespaceFinalizersRemaining").expect("cond");
    assert_eq!(c["reason"], "SomeFinalizersRemain");
    assert_eq!(
        c["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    let c = condition(&ns, "NamespaceContentRemaining").expect("cond");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "SomeResourcesRemain");
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("configmaps. has 1 resource instances"),
        "{c}"
    );
    let c = condition(&ns, "NamespaceDeletionDiscoveryFailure").expect("cond");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "ResourcesDiscovered");
    let c = condition(&ns, "NamespaceDeletionContentFailure").expect("cond");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "ContentDeleted");
    assert!(
        ns["spec"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f == "kubernetes"),
        "the kubernetes finalizer stays while content remains: {ns}"
    );
    // Everything else is gone already (or going).
    wait_for(&s, 60, "pods, deployment and service gone", || {
        let pods = json(&s, &["-n", "doomed", "get", "pods", "-o", "json"]);
        let deps = json(
            &s,
            &[
                "-n",
                "doomed",
                "get",
                "deployments,replicasets,services",
                "-o",
                "json",
            ],
        );
        (pods["items"].as_array().is_some_and(Vec::is_empty)
            && deps["items"].as_array().is_some_and(Vec::is_empty))
        .then_some(())
    });

    // Release the finalizer: the namespace goes.
    ok(
        &s,
        &[
            "-n",
            "doomed",
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    wait_for(&s, 60, "the namespace to go", || {
        let (found, _, _) = s.kubectl(&["get", "namespace", "doomed"]).ok()?;
        (!found).then_some(())
    });
    // A namespace of the same name can be created again, empty.
    ok(&s, &["create", "namespace", "doomed"]);
    let cms = json(
        &s,
        &[
            "-n",
            "doomed",
            "get",
            "configmaps",
            "-l",
            "!nothing",
            "-o",
            "json",
        ],
    );
    assert!(
        cms["items"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|c| c["metadata"]["name"] == "kube-root-ca.crt")
    );
}

#[test]
fn kubectl_delete_namespace_waits_until_it_is_gone() {
    let (_d, s) = cluster();
    ok(&s, &["create", "namespace", "quick"]);
    ok(
        &s,
        &[
            "-n",
            "quick",
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    );
    let out = ok(
        &s,
        &[
            "-n",
            "quick",
            "rollout",
            "status",
            "deployment/web",
            "--timeout=120s",
        ],
    );
    assert!(out.contains("successfully rolled out"));
    // kubectl waits for the namespace to disappear by default.
    ok(&s, &["delete", "namespace", "quick", "--timeout=120s"]);
    let (found, _, _) = s.kubectl(&["get", "namespace", "quick"]).expect("kubectl");
    assert!(!found);
    let pods = json(&s, &["get", "pods", "-A", "-o", "json"]);
    assert!(
        pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|p| p["metadata"]["namespace"] != "quick")
    );
}
