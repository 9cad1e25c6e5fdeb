//! ValidatingAdmissionPolicy beyond evaluation, through stock kubectl: `status.typeChecking`
//! warns of a field the matched kind does not have (as `kubectl get
//! validatingadmissionpolicy -o yaml` shows it), and an expression over upstream's runtime
//! cost limit fails with cel-go's `operation cancelled: actual cost limit exceeded`, the
//! policy's `failurePolicy` deciding what happens to the request.

use std::time::{Duration, Instant};

use e2e::ServerProcess;
use serde_json::Value;

fn apply(s: &ServerProcess, yaml: &str) {
    let (ok, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(yaml))
        .expect("kubectl runs");
    assert!(ok, "kubectl apply failed: {err}");
}

/// A policy on `resources` of the core or apps group with one validation, and its binding.
fn policy(name: &str, group: &str, resources: &str, failure: &str, expression: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: {failure}
  matchConstraints:
    resourceRules:
    - apiGroups: ["{group}"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["{resources}"]
  validations:
  - expression: {expression:?}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-binding
spec:
  policyName: {name}
  validationActions: [Deny]
"#
    )
}

#[test]
fn type_checking_warns_of_undefined_fields_in_status() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("server starts");
    apply(
        &s,
        &policy(
            "typo",
            "apps",
            "deployments",
            "Fail",
            "object.spec.replicass <= 5",
        ),
    );
    apply(
        &s,
        &policy(
            "fine",
            "apps",
            "deployments",
            "Fail",
            "object.spec.replicas <= 5",
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let (ok, out, err) = s
            .kubectl(&["get", "validatingadmissionpolicy", "typo", "-o", "json"])
            .expect("kubectl runs");
        assert!(ok, "{err}");
        let policy: Value = serde_json::from_str(&out).expect("JSON");
        if policy["status"]["observedGeneration"].is_i64() || Instant::now() > deadline {
            break policy["status"].clone();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status["observedGeneration"], 1, "{status}");
    assert_eq!(
        status["typeChecking"]["expressionWarnings"],
        serde_json::json!([{
            "fieldRef": "spec.validations[0].expression",
            "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'\n | object.spec.replicass <= 5\n | ...........^\n",
        }])
    );
    // As kubectl shows it.
    let (_, yaml, _) = s
        .kubectl(&["get", "validatingadmissionpolicy", "typo", "-o", "yaml"])
        .expect("kubectl runs");
    assert!(
        yaml.contains("fieldRef: spec.validations[0].expression"),
        "{yaml}"
    );
    assert!(yaml.contains("undefined field 'replicass'"), "{yaml}");
    // A policy whose fields all exist gets a status without warnings.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, out, _) = s
            .kubectl(&["get", "validatingadmissionpolicy", "fine", "-o", "json"])
            .expect("kubectl runs");
        let policy: Value = serde_json::from_str(&out).expect("JSON");
        if policy["status"]["observedGeneration"] == 1 {
            assert!(
                policy["status"]["typeChecking"]["expressionWarnings"].is_null(),
                "{policy}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no status: {policy}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A ConfigMap with `n` keys.
fn configmap(name: &str, n: usize) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    for i in 0..n {
        yaml.push_str(&format!("  k{i}: v\n"));
    }
    yaml
}

#[test]
fn expressions_over_the_cost_limit_fail_by_the_failure_policy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("server starts");
    // 120^3 iterations: far over the per-expression limit of 10^6.
    let costly = "!has(object.data) || object.data.all(a, object.data.all(b, \
                  object.data.all(c, a + b + c != '')))";
    apply(&s, &policy("costly", "", "configmaps", "Fail", costly));
    // Upstream's 422 Invalid for an expression error (kubectl: `The configmaps "big" is
    // invalid: : …`).
    let wanted = format!(
        "ValidatingAdmissionPolicy 'costly' with binding 'costly-binding' denied request: \
         expression '{costly}' resulted in error: operation cancelled: actual cost limit \
         exceeded"
    );
    let big = configmap("big", 120);
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        let (ok, _, err) = s
            .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&big))
            .expect("kubectl runs");
        assert!(
            !ok || Instant::now() < deadline,
            "created despite the policy"
        );
        if !ok && err.contains(&wanted) || Instant::now() > deadline {
            break err;
        }
        if ok {
            // Created before the binding took effect: try again under it.
            let _ = s.kubectl(&["delete", "configmap", "big"]);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(err.contains(&wanted), "{err}");
    // A small one costs little and passes.
    let (ok, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some(&configmap("small", 3)),
        )
        .expect("kubectl runs");
    assert!(ok, "{err}");

    // failurePolicy: Ignore lets the costly request through.
    apply(&s, &policy("costly", "", "configmaps", "Ignore", costly));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, _, err) = s
            .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&big))
            .expect("kubectl runs");
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused under Ignore: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
