//! ValidatingAdmissionPolicy through stock kubectl: a policy with params from a ConfigMap
//! refusing `kubectl create deployment --replicas=6` with its message, `Warn` bindings
//! printing upstream's warning, `Audit` bindings writing the
//! `validation.policy.admission.k8s.io/validation_failure` audit annotation, a policy on a
//! custom resource, and `failurePolicy` Fail/Ignore for an expression that fails.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::ServerProcess;
use serde_json::Value;

/// A bare server auditing every request at `Metadata` level.
fn server(dir: &Path) -> ServerProcess {
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  omitStages: [\"RequestReceived\"]\n",
    )
    .expect("write audit policy");
    let log = dir.join("audit.log");
    ServerProcess::start_with(
        &dir.join("data"),
        &[
            "--audit-policy-file",
            policy.to_str().unwrap_or_default(),
            "--audit-log-path",
            log.to_str().unwrap_or_default(),
        ],
    )
    .expect("server starts")
}

fn kubectl(s: &ServerProcess, args: &[&str]) -> (bool, String, String) {
    s.kubectl(args).expect("kubectl runs")
}

fn ok(s: &ServerProcess, args: &[&str]) -> (String, String) {
    let (ok, out, err) = kubectl(s, args);
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    (out, err)
}

fn apply(s: &ServerProcess, yaml: &str) {
    let (ok, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(yaml))
        .expect("kubectl runs");
    assert!(ok, "kubectl apply failed: {err}");
}

/// A policy on `resources` of `group` (CREATE and UPDATE) with `spec` lines appended, and
/// its binding named `<name>-binding` with `binding` lines.
fn policy(name: &str, group: &str, resources: &str, spec: &str, binding: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["{group}"]
      apiVersions: ["*"]
      operations: ["CREATE", "UPDATE"]
      resources: ["{resources}"]
{spec}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-binding
spec:
  policyName: {name}
{binding}
"#
    )
}

#[test]
fn policies_deny_warn_and_audit_with_configmap_params() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(dir.path());
    ok(
        &s,
        &[
            "create",
            "configmap",
            "replica-limits",
            "--from-literal=maxReplicas=5",
        ],
    );
    apply(
        &s,
        &policy(
            "max-replicas",
            "apps",
            "deployments",
            r#"  paramKind:
    apiVersion: v1
    kind: ConfigMap
  variables:
  - name: max
    expression: int(params.data.maxReplicas)
  validations:
  - expression: object.spec.replicas <= variables.max
    messageExpression: "'replicas must be no greater than ' + string(variables.max)"
"#,
            r#"  paramRef:
    name: replica-limits
    namespace: default
    parameterNotFoundAction: Deny
  validationActions: [Deny]
"#,
        ),
    );
    let (created, _, err) = kubectl(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=6",
        ],
    );
    assert!(!created);
    assert!(
        err.contains(
            "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: replicas must be no greater than 5"
        ),
        "{err}"
    );
    // The default reason is Invalid: 422, the message as a cause (kubectl create -f prints it).
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 7\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: nginx\n        image: nginx\n",
            ),
        )
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains("The deployments \"web\" is invalid: : ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: replicas must be no greater than 5"),
        "{err}"
    );
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=5",
        ],
    );
    // Raising the param lets 6 through: params are read at each request.
    ok(
        &s,
        &[
            "patch",
            "configmap",
            "replica-limits",
            "-p",
            r#"{"data":{"maxReplicas":"6"}}"#,
        ],
    );
    ok(
        &s,
        &[
            "patch",
            "deployment",
            "web",
            "-p",
            r#"{"spec":{"replicas":6}}"#,
        ],
    );
    // A missing param with parameterNotFoundAction Deny refuses.
    ok(&s, &["delete", "configmap", "replica-limits"]);
    let (created, _, err) = kubectl(
        &s,
        &[
            "create",
            "deployment",
            "other",
            "--image=nginx",
            "--replicas=1",
        ],
    );
    assert!(!created);
    assert!(
        err.contains("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{err}"
    );
    ok(
        &s,
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "max-replicas-binding",
        ],
    );

    // Warn: the request goes through with upstream's warning.
    apply(
        &s,
        &policy(
            "warn-replicas",
            "apps",
            "deployments",
            "  validations:\n  - expression: object.spec.replicas <= 3\n    message: more than 3 replicas\n",
            "  validationActions: [Warn]\n",
        ),
    );
    let (_, err) = ok(
        &s,
        &[
            "create",
            "deployment",
            "warned",
            "--image=nginx",
            "--replicas=4",
        ],
    );
    assert!(
        err.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'warn-replicas' with binding 'warn-replicas-binding': more than 3 replicas"),
        "{err}"
    );

    // Audit: the failure lands in the audit log, the request goes through.
    apply(
        &s,
        &policy(
            "audit-replicas",
            "apps",
            "deployments",
            "  validations:\n  - expression: object.spec.replicas <= 1\n  auditAnnotations:\n  - key: replicas\n    valueExpression: string(object.spec.replicas)\n",
            "  validationActions: [Audit]\n",
        ),
    );
    ok(
        &s,
        &[
            "create",
            "deployment",
            "audited",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let event = loop {
        let log = std::fs::read_to_string(dir.path().join("audit.log")).unwrap_or_default();
        let found = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| {
                e["stage"] == "ResponseComplete"
                    && e["verb"] == "create"
                    && e["objectRef"]["name"] == "audited"
            });
        if let Some(e) = found {
            break e;
        }
        assert!(Instant::now() < deadline, "no audit event: {log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let failures: Value = serde_json::from_str(
        event["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap_or_else(|| panic!("no validation_failure annotation: {event}")),
    )
    .expect("JSON annotation");
    assert_eq!(
        failures,
        serde_json::json!([{
            "message": "failed expression: object.spec.replicas <= 1",
            "policy": "audit-replicas",
            "binding": "audit-replicas-binding",
            "expressionIndex": 0,
            "validationActions": ["Audit"],
        }])
    );
    assert_eq!(event["annotations"]["audit-replicas/replicas"], "2");
    let metrics = ok(&s, &["get", "--raw", "/metrics"]).0;
    assert!(
        metrics.lines().any(|l| l
            .starts_with("apiserver_validating_admission_policy_check_total{")
            && l.contains("policy=\"audit-replicas\"")
            && l.contains("enforcement_action=\"audit\"")),
        "{metrics}"
    );
}

const GIZMOS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: gizmos
    singular: gizmo
    kind: Gizmo
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
"#;

#[test]
fn policies_apply_to_custom_resources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(dir.path());
    apply(&s, GIZMOS);
    ok(
        &s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/gizmos.example.com",
        ],
    );
    apply(
        &s,
        &policy(
            "gizmo-size",
            "example.com",
            "gizmos",
            "  validations:\n  - expression: object.spec.size <= 10\n    message: size too big\n    reason: Forbidden\n",
            "  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchLabels:\n        kubernetes.io/metadata.name: default\n",
        ),
    );
    let gizmo = |name: &str, size: u32| {
        format!(
            "apiVersion: example.com/v1\nkind: Gizmo\nmetadata:\n  name: {name}\nspec:\n  size: {size}\n"
        )
    };
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some(&gizmo("big", 11)),
        )
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains("Error from server (Forbidden): error when creating \"STDIN\": gizmos.example.com \"big\" is forbidden: ValidatingAdmissionPolicy 'gizmo-size' with binding 'gizmo-size-binding' denied request: size too big"),
        "{err}"
    );
    apply(&s, &gizmo("small", 3));
    // Outside the binding's namespaces the policy does not apply.
    ok(&s, &["create", "namespace", "elsewhere"]);
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-n", "elsewhere", "-f", "-"],
            Some(&gizmo("big", 11)),
        )
        .expect("kubectl runs");
    assert!(created, "{err}");
}

#[test]
fn failing_expressions_follow_the_failure_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(dir.path());
    let failing = |name: &str, failure: &str| {
        policy(
            name,
            "",
            "configmaps",
            &format!(
                "  failurePolicy: {failure}\n  matchConditions:\n  - name: labelled\n    expression: \"has(object.metadata.labels) && 'check' in object.metadata.labels\"\n  validations:\n  - expression: object.data.missing == 'x'\n"
            ),
            "  validationActions: [Deny]\n",
        )
    };
    apply(&s, &failing("ignored", "Ignore"));
    ok(&s, &["create", "configmap", "plain", "--from-literal=a=b"]);
    let labelled = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: checked\n  labels:\n    check: \"yes\"\ndata:\n  a: b\n";
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(labelled))
        .expect("kubectl runs");
    assert!(created, "{err}");
    ok(&s, &["delete", "configmap", "checked"]);
    apply(&s, &failing("enforced", "Fail"));
    // Unlabelled objects are not matched by the conditions.
    ok(&s, &["create", "configmap", "plain2", "--from-literal=a=b"]);
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(labelled))
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains("ValidatingAdmissionPolicy 'enforced' with binding 'enforced-binding' denied request: expression 'object.data.missing == 'x'' resulted in error: no such key: missing"),
        "{err}"
    );
}

#[test]
fn policies_see_deletes_with_the_stored_object_as_old_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(dir.path());
    apply(
        &s,
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: keep-protected
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["DELETE"]
      resources: ["configmaps"]
  validations:
  - expression: "object == null && request.operation == 'DELETE'"
    message: "a delete has no object"
  - expression: "!has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels)"
    messageExpression: "'configmap ' + oldObject.metadata.name + ' is protected'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: keep-protected-binding
spec:
  policyName: keep-protected
  validationActions: [Deny]
"#,
    );
    apply(
        &s,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  labels:\n    protected: \"yes\"\ndata:\n  a: b\n",
    );
    ok(&s, &["create", "configmap", "free", "--from-literal=a=b"]);
    // The binding may take a moment to be seen: poll with a deadline.
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        let (deleted, _, err) = kubectl(&s, &["delete", "configmap", "kept", "--dry-run=server"]);
        if !deleted {
            break err;
        }
        assert!(Instant::now() < deadline, "the delete was never refused");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        err.contains("configmaps \"kept\" is forbidden: ValidatingAdmissionPolicy 'keep-protected' with binding 'keep-protected-binding' denied request: configmap kept is protected"),
        "{err}"
    );
    let (deleted, _, err) = kubectl(&s, &["delete", "configmap", "kept"]);
    assert!(!deleted, "protected configmap deleted");
    assert!(err.contains("configmap kept is protected"), "{err}");
    ok(&s, &["delete", "configmap", "free"]);
    ok(&s, &["get", "configmap", "kept"]);
}

#[test]
fn the_authorizer_variable_checks_the_requesting_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(dir.path());
    ok(
        &s,
        &[
            "create",
            "role",
            "cm-maker",
            "--verb=create,get,list",
            "--resource=configmaps",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "cm-maker",
            "--role=cm-maker",
            "--user=jane",
        ],
    );
    apply(
        &s,
        &policy(
            "secret-deleters-only",
            "",
            "configmaps",
            r#"  validations:
  - expression: "authorizer.requestResource.check('create').allowed()"
    message: "the request itself is not allowed"
  - expression: "authorizer.group('').resource('secrets').namespace(request.namespace).check('delete').allowed()"
    messageExpression: "'user ' + request.userInfo.username + ' may not delete secrets'"
  - expression: "authorizer.path('/healthz').check('get').allowed()"
    message: "healthz is public"
"#,
            "  validationActions: [Deny]\n",
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        let (created, _, err) = kubectl(
            &s,
            &[
                "create",
                "configmap",
                "by-jane",
                "--from-literal=a=b",
                "--as=jane",
            ],
        );
        if !created {
            break err;
        }
        ok(&s, &["delete", "configmap", "by-jane"]);
        assert!(Instant::now() < deadline, "the policy was never applied");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        err.contains("ValidatingAdmissionPolicy 'secret-deleters-only' with binding 'secret-deleters-only-binding' denied request: user jane may not delete secrets"),
        "{err}"
    );
    // The cluster admin may delete secrets.
    ok(
        &s,
        &["create", "configmap", "by-admin", "--from-literal=a=b"],
    );
    // Once jane may delete secrets, her create passes.
    ok(
        &s,
        &[
            "create",
            "role",
            "secret-deleter",
            "--verb=delete",
            "--resource=secrets",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "secret-deleter",
            "--role=secret-deleter",
            "--user=jane",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (created, _, err) = kubectl(
            &s,
            &[
                "create",
                "configmap",
                "by-jane",
                "--from-literal=a=b",
                "--as=jane",
            ],
        );
        if created {
            break;
        }
        assert!(err.contains("may not delete secrets"), "{err}");
        assert!(
            Instant::now() < deadline,
            "jane's new role never counted: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A Service of `name` with label `labels` (YAML flow map), cluster IP `ip` and, when
/// given, node port `node_port` (then of type NodePort).
fn service_yaml(name: &str, labels: &str, ip: &str, node_port: Option<&str>) -> String {
    let (kind, port) = match node_port {
        Some(p) => ("NodePort", format!(", nodePort: {p}")),
        None => ("ClusterIP", String::new()),
    };
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  labels: {labels}\nspec:\n  type: {kind}\n  clusterIP: {ip}\n  selector: {{app: x}}\n  ports:\n  - {{port: 80{port}}}\n"
    )
}

#[test]
fn policies_see_a_services_allocated_addresses_and_dry_runs_reserve_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = server(dir.path());
    apply(
        &s,
        &policy(
            "service-addresses",
            "",
            "services",
            r#"  validations:
  - expression: object.spec.type == 'ExternalName' || object.spec.clusterIP != ''
    message: no cluster IP
  - expression: object.spec.type != 'NodePort' || object.spec.ports.all(p, has(p.nodePort) && p.nodePort >= 30000)
    message: no node port
  - expression: "!has(object.metadata.labels) || !('deny' in object.metadata.labels)"
    message: denied by label
"#,
            "  validationActions: [Deny]\n",
        ),
    );
    let create = |yaml: &str| {
        s.kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(yaml))
            .expect("kubectl runs")
    };
    // Once the policy is in force, a labelled Service is refused by the label rule: the
    // cluster IP it asked for was allocated before admission, and is released again.
    let denied = service_yaml("pinned", "{deny: \"yes\"}", "10.96.200.200", None);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (created, _, err) = create(&denied);
        assert!(
            !created || Instant::now() < deadline,
            "policy never applied"
        );
        if !created {
            assert!(err.contains("denied by label"), "{err}");
            break;
        }
        ok(&s, &["delete", "service", "pinned"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    let (created, _, err) = create(&service_yaml("pinned", "{a: b}", "10.96.200.200", None));
    assert!(created, "the refused create's IP stayed reserved: {err}");
    // Allocated addresses: a cluster IP and node ports the policy accepts.
    ok(&s, &["create", "service", "clusterip", "plain", "--tcp=80"]);
    ok(&s, &["create", "service", "nodeport", "np", "--tcp=80"]);
    // A dry run answers with addresses a real create would get, and reserves none of them.
    let (out, _) = ok(
        &s,
        &[
            "create",
            "service",
            "nodeport",
            "dry",
            "--tcp=8080",
            "--dry-run=server",
            "-o",
            "json",
        ],
    );
    let dry: Value = serde_json::from_str(&out).expect("service JSON");
    let ip = dry["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let port = dry["spec"]["ports"][0]["nodePort"].as_u64().unwrap_or(0);
    // In the default range, 10.96.0.0/12.
    let octets: Vec<u8> = ip.split('.').filter_map(|o| o.parse().ok()).collect();
    assert!(
        octets.len() == 4 && octets[0] == 10 && (96..112).contains(&octets[1]),
        "{dry}"
    );
    assert!((30000..=32767).contains(&port), "{dry}");
    assert_eq!(dry["spec"]["clusterIPs"][0], ip.as_str(), "{dry}");
    let (found, _, _) = kubectl(&s, &["get", "service", "dry"]);
    assert!(!found, "a dry run stored the service");
    let (created, _, err) = create(&service_yaml("dry", "{a: b}", &ip, Some(&port.to_string())));
    assert!(created, "the dry run's addresses were reserved: {err}");
}
