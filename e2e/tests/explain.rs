//! `kubectl explain` of enum fields: the `ENUM:` block and the "Possible enum values"
//! paragraph upstream's OpenAPI carries for Go types with the `+enum` marker, printed by stock
//! kubectl exactly as against a Kubernetes v1.33 cluster.

use e2e::ServerProcess;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("start server");
    (dir, server)
}

fn explain(s: &ServerProcess, path: &str) -> String {
    let (ok, out, err) = s.kubectl(&["explain", path]).expect("kubectl");
    assert!(ok, "kubectl explain {path}: {err}");
    out
}

const RESTART_POLICY: &str = r#"KIND:       Pod
VERSION:    v1

FIELD: restartPolicy <string>
ENUM:
    Always
    Never
    OnFailure

DESCRIPTION:
    Restart policy for all containers within the pod. One of Always, OnFailure,
    Never. In some contexts, only a subset of those values may be permitted.
    Default to Always. More info:
    https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#restart-policy
    
    Possible enum values:
     - `"Always"`
     - `"Never"`
     - `"OnFailure"`
    

"#;

const STRATEGY_TYPE: &str = r#"GROUP:      apps
KIND:       Deployment
VERSION:    v1

FIELD: type <string>
ENUM:
    Recreate
    RollingUpdate

DESCRIPTION:
    Type of deployment. Can be "Recreate" or "RollingUpdate". Default is
    RollingUpdate.
    
    Possible enum values:
     - `"Recreate"` Kill all existing pods before creating new ones.
     - `"RollingUpdate"` Replace the old ReplicaSets by new one using rolling
    update i.e gradually scale down the old ReplicaSets and scale up the new
    one.
    

"#;

#[test]
fn explain_prints_enum_values_as_upstream() {
    let (_d, s) = server();
    assert_eq!(explain(&s, "pod.spec.restartPolicy"), RESTART_POLICY);
    assert_eq!(explain(&s, "deployment.spec.strategy.type"), STRATEGY_TYPE);

    // Values carry their constants' comments; fields of other types have no ENUM block.
    let pull = explain(&s, "pods.spec.containers.imagePullPolicy");
    assert!(
        pull.contains("ENUM:\n    Always\n    IfNotPresent\n    Never\n")
            && pull.contains(" - `\"IfNotPresent\"` means that kubelet pulls if the image isn't"),
        "{pull}"
    );
    let name = explain(&s, "pod.spec.hostname");
    assert!(
        !name.contains("ENUM:") && !name.contains("Possible enum values"),
        "{name}"
    );

    // The v2 document carries the same values.
    let (ok, v2, err) = s
        .kubectl(&["get", "--raw", "/openapi/v2"])
        .expect("kubectl");
    assert!(ok, "{err}");
    let v2: serde_json::Value = serde_json::from_str(&v2).expect("v2 JSON");
    let policy = &v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["restartPolicy"];
    assert_eq!(
        policy["enum"],
        serde_json::json!(["Always", "Never", "OnFailure"]),
        "{policy}"
    );
}
