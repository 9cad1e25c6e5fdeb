//! PodSecurity and TaintNodesByCondition admission through stock kubectl: the
//! `pod-security.kubernetes.io/*` namespace labels choose the level; `restricted` and
//! `baseline` namespaces refuse what their level forbids with upstream's message, `warn`
//! prints `Warning:` lines but admits, workload templates are only warned about,
//! labelling a namespace with a stricter enforce level warns about existing pods, invalid
//! labels are refused with 422, and a new Node gets the not-ready NoSchedule taint.

use e2e::ServerProcess;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn ok(s: &ServerProcess, args: &[&str]) -> (String, String) {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    (out, err)
}

fn apply_stdin(s: &ServerProcess, ns: &str, yaml: &str) -> (bool, String, String) {
    s.kubectl_as(&s.kubeconfig, &["create", "-n", ns, "-f", "-"], Some(yaml))
        .expect("kubectl runs")
}

const PRIVILEGED_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: priv
spec:
  containers:
  - name: c
    image: nginx
    securityContext:
      privileged: true
";

const PRIVILEGED_POD_JSON: &str = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "priv"},
  "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]}}"#;

const PLAIN_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: plain
spec:
  containers:
  - name: app
    image: nginx
";

const RESTRICTED_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: hardened
spec:
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: app
    image: nginx
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: [\"ALL\"]
";

const RESTRICTED_VIOLATIONS: &str = "allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"app\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"app\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

fn namespace(s: &ServerProcess, name: &str, labels: &[&str]) {
    ok(s, &["create", "namespace", name]);
    if !labels.is_empty() {
        let mut args = vec!["label", "namespace", name];
        args.extend_from_slice(labels);
        ok(s, &args);
    }
}

#[test]
fn restricted_namespace_refuses_privileged_pods_with_upstreams_message() {
    let (_d, s) = server();
    namespace(
        &s,
        "locked",
        &["pod-security.kubernetes.io/enforce=restricted"],
    );
    let (admitted, _, err) = apply_stdin(&s, "locked", PRIVILEGED_POD);
    assert!(!admitted);
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    // The Status is a 403 with reason Forbidden.
    let (admitted, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "create",
                "--raw",
                "/api/v1/namespaces/locked/pods",
                "-f",
                "-",
                "-v=6",
            ],
            Some(PRIVILEGED_POD_JSON),
        )
        .expect("kubectl runs");
    assert!(!admitted);
    assert!(err.contains("status=\"403 Forbidden\""), "{err}");
    // A pod that meets the restricted standard is admitted, without warnings.
    let (admitted, out, err) = apply_stdin(&s, "locked", RESTRICTED_POD);
    assert!(admitted, "{err}");
    assert_eq!(out.trim(), "pod/hardened created");
    assert!(!err.contains("Warning"), "{err}");
    // Updates that change an image are checked again; the compliant pod passes.
    ok(
        &s,
        &[
            "set",
            "image",
            "-n",
            "locked",
            "pod/hardened",
            "app=nginx:2",
        ],
    );
    // No pod in the namespace is the privileged one.
    let (out, _) = ok(&s, &["get", "pods", "-n", "locked", "-o", "name"]);
    assert_eq!(out.trim(), "pod/hardened");
}

#[test]
fn baseline_allows_what_baseline_allows() {
    let (_d, s) = server();
    namespace(&s, "base", &["pod-security.kubernetes.io/enforce=baseline"]);
    // A plain pod (root, no seccomp) is fine at baseline; warn follows enforce (baseline).
    let (admitted, _, err) = apply_stdin(&s, "base", PLAIN_POD);
    assert!(admitted, "{err}");
    assert!(!err.contains("Warning"), "{err}");
    let host = "apiVersion: v1
kind: Pod
metadata:
  name: host
spec:
  hostNetwork: true
  containers:
  - name: c
    image: nginx
    ports:
    - containerPort: 80
      hostPort: 8080
    securityContext:
      capabilities:
        add: [\"NET_ADMIN\", \"CHOWN\"]
";
    let (admitted, _, err) = apply_stdin(&s, "base", host);
    assert!(!admitted);
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": pods \"host\" is forbidden: violates PodSecurity \"baseline:latest\": non-default capabilities (container \"c\" must not include \"NET_ADMIN\" in securityContext.capabilities.add), host namespaces (hostNetwork=true), hostPort (container \"c\" uses hostPort 8080)"
    );
    // A version label picks the checks of that release.
    ok(
        &s,
        &[
            "label",
            "namespace",
            "base",
            "pod-security.kubernetes.io/enforce-version=v1.25",
        ],
    );
    let (admitted, _, err) = apply_stdin(&s, "base", PRIVILEGED_POD);
    assert!(!admitted);
    assert!(
        err.contains("violates PodSecurity \"baseline:v1.25\": privileged (container \"c\" must not set securityContext.privileged=true)"),
        "{err}"
    );
}

#[test]
fn warn_mode_prints_warnings_and_admits() {
    let (_d, s) = server();
    namespace(&s, "soft", &["pod-security.kubernetes.io/warn=restricted"]);
    let (admitted, out, err) = apply_stdin(&s, "soft", PLAIN_POD);
    assert!(admitted, "{err}");
    assert_eq!(out.trim(), "pod/plain created");
    assert_eq!(
        err.trim(),
        format!(
            "Warning: would violate PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}"
        )
    );
    ok(&s, &["get", "pod", "plain", "-n", "soft"]);
}

#[test]
fn workloads_are_warned_about_never_refused() {
    let (_d, s) = server();
    namespace(
        &s,
        "locked",
        &["pod-security.kubernetes.io/enforce=restricted"],
    );
    let deployment = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx
";
    let (admitted, out, err) = apply_stdin(&s, "locked", deployment);
    assert!(admitted, "{err}");
    assert_eq!(out.trim(), "deployment.apps/web created");
    assert_eq!(
        err.trim(),
        format!(
            "Warning: would violate PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}"
        )
    );
    let cronjob = "apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
spec:
  schedule: \"*/5 * * * *\"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: app
            image: busybox
";
    let (admitted, _, err) = apply_stdin(&s, "locked", cronjob);
    assert!(admitted, "{err}");
    assert!(
        err.contains("Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"app\""),
        "{err}"
    );
}

#[test]
fn labelling_a_namespace_warns_about_existing_pods() {
    let (_d, s) = server();
    namespace(&s, "busy", &[]);
    assert!(apply_stdin(&s, "busy", PLAIN_POD).0);
    assert!(apply_stdin(&s, "busy", &PLAIN_POD.replace("plain", "plain2")).0);
    assert!(apply_stdin(&s, "busy", PRIVILEGED_POD).0);
    let (out, err) = ok(
        &s,
        &[
            "label",
            "namespace",
            "busy",
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    );
    assert_eq!(out.trim(), "namespace/busy labeled");
    assert_eq!(
        err.trim(),
        "Warning: existing pods in namespace \"busy\" violate the new PodSecurity enforce level \"restricted:latest\"\n\
         Warning: plain (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile\n\
         Warning: priv: privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
    );
    // Existing pods stay, but an update that changes an image is now refused; one that
    // changes only labels is not significant and is admitted.
    let (admitted, _, err) = s
        .kubectl(&["set", "image", "-n", "busy", "pod/plain", "app=nginx:2"])
        .expect("kubectl runs");
    assert!(!admitted);
    assert!(
        err.contains(&format!(
            "pods \"plain\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}"
        )),
        "{err}"
    );
    ok(&s, &["label", "-n", "busy", "pod/plain", "tier=web"]);
    // Relaxing the level warns about nothing.
    let (_, err) = ok(
        &s,
        &[
            "label",
            "--overwrite",
            "namespace",
            "busy",
            "pod-security.kubernetes.io/enforce=baseline",
        ],
    );
    assert!(!err.contains("Warning"), "{err}");
}

#[test]
fn invalid_labels_are_refused() {
    let (_d, s) = server();
    namespace(&s, "typo", &[]);
    let (admitted, _, err) = s
        .kubectl(&[
            "label",
            "namespace",
            "typo",
            "pod-security.kubernetes.io/enforce=strict",
        ])
        .expect("kubectl runs");
    assert!(!admitted);
    assert_eq!(
        err.trim(),
        "The Namespace \"typo\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
    );
    let ns = "apiVersion: v1
kind: Namespace
metadata:
  name: bad
  labels:
    pod-security.kubernetes.io/warn-version: \"1.30\"
";
    let (admitted, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(ns))
        .expect("kubectl runs");
    assert!(!admitted);
    assert!(
        err.contains("metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"1.30\": must be \"latest\" or \"v1.x\""),
        "{err}"
    );
}

#[test]
fn new_nodes_get_the_not_ready_taint() {
    let (_d, s) = server();
    let node = "apiVersion: v1
kind: Node
metadata:
  name: n1
spec:
  taints:
  - key: dedicated
    value: gpu
    effect: NoExecute
";
    let (admitted, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(node))
        .expect("kubectl runs");
    assert!(admitted, "{err}");
    let (out, _) = ok(
        &s,
        &[
            "get",
            "node",
            "n1",
            "-o",
            "jsonpath={range .spec.taints[*]}{.key}={.value}:{.effect} {end}",
        ],
    );
    assert_eq!(
        out.trim(),
        "dedicated=gpu:NoExecute node.kubernetes.io/not-ready=:NoSchedule"
    );
}

#[test]
fn audit_mode_annotates_the_audit_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [\"pods\"]\n  omitStages: [\"RequestReceived\"]\n- level: None\n",
    )
    .expect("write policy");
    let log = dir.path().join("audit.log");
    let s = ServerProcess::start_with(
        &dir.path().join("data"),
        &[
            "--audit-policy-file",
            policy.to_str().unwrap_or_default(),
            "--audit-log-path",
            log.to_str().unwrap_or_default(),
        ],
    )
    .expect("server starts");
    namespace(
        &s,
        "watched",
        &[
            "pod-security.kubernetes.io/audit=restricted",
            "pod-security.kubernetes.io/enforce=baseline",
        ],
    );
    let (admitted, _, err) = apply_stdin(&s, "watched", PLAIN_POD);
    assert!(admitted, "{err}");
    // Audit violations never reach the client.
    assert!(!err.contains("Warning"), "{err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let annotations = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["namespace"] == "watched"
                    && e["stage"] == "ResponseComplete"
            });
        if let Some(e) = found {
            break e["annotations"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audit event for the pod create: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        annotations["pod-security.kubernetes.io/enforce-policy"],
        "baseline:latest"
    );
    assert_eq!(
        annotations["pod-security.kubernetes.io/audit-violations"],
        format!("would violate PodSecurity \"restricted:latest\": {RESTRICTED_VIOLATIONS}")
    );
}
