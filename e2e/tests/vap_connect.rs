//! ValidatingAdmissionPolicy on CONNECT requests, through stock kubectl: a policy whose
//! `operations` hold `CONNECT` on `pods/exec` sees `kubectl exec` with no `object` and the
//! `PodExecOptions` in `request.options`, and refuses one command with its message; a
//! policy on CREATE and UPDATE of the same subresource is not run for it.

use e2e::ServerProcess;

fn apply(s: &ServerProcess, yaml: &str) {
    let (ok, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(yaml))
        .expect("kubectl runs");
    assert!(ok, "kubectl apply failed: {err}");
}

/// A policy on `pods/exec` for `operations`, with one validation, and its binding (`Deny`).
fn policy(name: &str, operations: &str, expression: &str, message_expression: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: {operations}
      resources: ["pods/exec"]
  validations:
  - expression: {expression:?}
    messageExpression: {message_expression:?}
    reason: Forbidden
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

/// `kubectl exec p1 -- <command>` until the policy answers (bindings take effect within a
/// second): the error text of the last try.
fn exec_refused(s: &ServerProcess, command: &str, wanted: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (ok, _, err) = s
            .kubectl(&["exec", "p1", "--", command])
            .expect("kubectl runs");
        assert!(!ok, "exec of {command} on a pod without a node succeeded");
        if err.contains(wanted) || std::time::Instant::now() > deadline {
            return err;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn policies_see_connect_with_the_options_in_request_options() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("server starts");
    let (ok, _, err) = s
        .kubectl(&["run", "p1", "--image=nginx"])
        .expect("kubectl runs");
    assert!(ok, "kubectl run: {err}");

    // Never true on CONNECT: a policy for CREATE and UPDATE must not run on it.
    apply(
        &s,
        &policy(
            "writes-only",
            "[CREATE, UPDATE]",
            "object != null",
            "'writes-only ran on ' + request.operation",
        ),
    );
    apply(
        &s,
        &policy(
            "no-rm",
            "[CONNECT]",
            "object == null && oldObject == null && request.operation == 'CONNECT' \
             && request.options.kind == 'PodExecOptions' \
             && request.options.apiVersion == 'v1' \
             && request.kind.kind == 'PodExecOptions' \
             && request.subResource == 'exec' \
             && !('rm' in request.options.command)",
            "'exec of ' + request.options.command[0] + ' into ' + request.name + ' (' + \
             request.namespace + ') is refused, stdout=' + (request.options.stdout ? 'yes' : 'no')",
        ),
    );
    let wanted = "pods \"p1\" is forbidden: ValidatingAdmissionPolicy 'no-rm' with binding \
                  'no-rm-binding' denied request: exec of rm into p1 (default) is refused, \
                  stdout=yes";
    let err = exec_refused(&s, "rm", wanted);
    assert!(err.contains(wanted), "{err}\nserver log: {}", s.log());

    // Another command passes both policies: whatever fails it next is not admission.
    let (ok, _, err) = s
        .kubectl(&["exec", "p1", "--", "ls"])
        .expect("kubectl runs");
    assert!(!ok, "exec on a pod without a node succeeded");
    assert!(!err.contains("ValidatingAdmissionPolicy"), "{err}");
    assert!(!err.contains("writes-only ran"), "{err}");
}
