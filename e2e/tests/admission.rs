//! Built-in admission plugins seen through stock kubectl: ServiceAccount (the `default`
//! account, upstream's refusal when it is missing, the projected `kube-api-access-*`
//! volume mounted in every container), Priority (system classes created at start,
//! priorityClassName → spec.priority, the global default, unknown classes refused, one
//! default only), DefaultTolerationSeconds, dry runs that show the mutations, and the
//! `--enable-admission-plugins` / `--disable-admission-plugins` flags.

use e2e::ServerProcess;

/// A server with upstream's default plugins (the bare flags minus the ServiceAccount
/// opt-out: no ServiceAccount controller runs, so the test creates accounts itself).
fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_raw(
        &dir.path().join("data"),
        &[
            "--nodes=0",
            "--disable-scheduler",
            "--disable-controller-manager",
        ],
    )
    .expect("server starts");
    (dir, s)
}

fn admin(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    out
}

fn create(s: &ServerProcess, yaml: &str) -> (bool, String, String) {
    s.kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(yaml))
        .expect("kubectl runs")
}

fn pod_yaml(name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{extra_spec}  initContainers:\n  - name: init\n    image: busybox\n  containers:\n  - name: app\n    image: nginx\n  - name: sidecar\n    image: busybox\n"
    )
}

fn jsonpath(s: &ServerProcess, pod: &str, path: &str) -> String {
    admin(s, &["get", "pod", pod, "-o", &format!("jsonpath={path}")])
}

#[test]
fn service_account_admission_mounts_the_token_volume_everywhere() {
    let (_d, s) = server();
    let (ok, _, err) = create(&s, &pod_yaml("web", ""));
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): error when creating \"STDIN\": pods \"web\" is forbidden: error looking up service account default/default: serviceaccount \"default\" not found"),
        "{err}"
    );
    admin(&s, &["create", "serviceaccount", "default"]);
    admin(&s, &["create", "serviceaccount", "robot"]);
    let (ok, _, err) = create(&s, &pod_yaml("web", ""));
    assert!(ok, "{err}");
    assert_eq!(jsonpath(&s, "web", "{.spec.serviceAccountName}"), "default");
    let volume = jsonpath(&s, "web", "{.spec.volumes[0].name}");
    assert!(
        volume.starts_with("kube-api-access-") && volume.len() == "kube-api-access-".len() + 5,
        "{volume}"
    );
    let mounts = jsonpath(
        &s,
        "web",
        "{.spec.initContainers[*].volumeMounts[*].name} {.spec.containers[*].volumeMounts[*].mountPath}",
    );
    assert_eq!(
        mounts,
        format!(
            "{volume} /var/run/secrets/kubernetes.io/serviceaccount /var/run/secrets/kubernetes.io/serviceaccount"
        )
    );
    let sources = jsonpath(
        &s,
        "web",
        "{.spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds} {.spec.volumes[0].projected.sources[1].configMap.name} {.spec.volumes[0].projected.sources[2].downwardAPI.items[0].fieldRef.fieldPath} {.spec.volumes[0].projected.defaultMode}",
    );
    assert_eq!(sources, "3607 kube-root-ca.crt metadata.namespace 420");

    // A named account must exist; automounting can be turned off.
    let (ok, _, err) = create(&s, &pod_yaml("ghost", "  serviceAccountName: ghost\n"));
    assert!(!ok);
    assert!(
        err.contains("pods \"ghost\" is forbidden: error looking up service account default/ghost: serviceaccount \"ghost\" not found"),
        "{err}"
    );
    let (ok, _, err) = create(
        &s,
        &pod_yaml(
            "quiet",
            "  serviceAccountName: robot\n  automountServiceAccountToken: false\n",
        ),
    );
    assert!(ok, "{err}");
    assert_eq!(jsonpath(&s, "quiet", "{.spec.volumes}"), "");

    // The ServiceAccount plugin can be turned off.
    drop(s);
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("bare server");
    let (ok, _, err) = create(&s, &pod_yaml("web", ""));
    assert!(ok, "{err}");
    assert_eq!(jsonpath(&s, "web", "{.spec.volumes}"), "");
}

#[test]
fn priority_and_default_toleration_seconds() {
    let (_d, s) = server();
    admin(&s, &["create", "serviceaccount", "default"]);
    let classes = admin(
        &s,
        &[
            "get",
            "priorityclasses",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.value} {end}",
        ],
    );
    assert_eq!(
        classes.trim(),
        "system-cluster-critical=2000000000 system-node-critical=2000001000"
    );

    // Without a class (and no global default): priority 0; tolerations for 300 s.
    let (ok, _, err) = create(&s, &pod_yaml("plain", ""));
    assert!(ok, "{err}");
    assert_eq!(jsonpath(&s, "plain", "{.spec.priority}"), "0");
    let tolerations = jsonpath(
        &s,
        "plain",
        "{range .spec.tolerations[*]}{.key}:{.effect}:{.tolerationSeconds} {end}",
    );
    assert_eq!(
        tolerations.trim(),
        "node.kubernetes.io/not-ready:NoExecute:300 node.kubernetes.io/unreachable:NoExecute:300"
    );

    // A system class.
    let (ok, _, err) = create(
        &s,
        &pod_yaml("critical", "  priorityClassName: system-cluster-critical\n"),
    );
    assert!(ok, "{err}");
    assert_eq!(
        jsonpath(&s, "critical", "{.spec.priority} {.spec.preemptionPolicy}"),
        "2000000000 PreemptLowerPriority"
    );

    // Unknown classes and hand-written priorities are refused with upstream's texts.
    let (ok, _, err) = create(&s, &pod_yaml("lost", "  priorityClassName: nope\n"));
    assert!(!ok);
    assert!(
        err.contains("pods \"lost\" is forbidden: no PriorityClass with name nope was found"),
        "{err}"
    );
    let (ok, _, err) = create(
        &s,
        &pod_yaml(
            "forged",
            "  priorityClassName: system-node-critical\n  priority: 5\n",
        ),
    );
    assert!(!ok);
    assert!(
        err.contains("the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 2000001000 from the given PriorityClass name"),
        "{err}"
    );

    // A global default applies to pods without a class; only one may exist.
    admin(
        &s,
        &[
            "create",
            "priorityclass",
            "normal",
            "--value=1000",
            "--global-default=true",
            "--preemption-policy=Never",
        ],
    );
    let (ok, _, err) = s
        .kubectl(&[
            "create",
            "priorityclass",
            "other",
            "--value=5",
            "--global-default=true",
        ])
        .expect("kubectl");
    assert!(!ok);
    assert!(
        err.contains("priorityclasses.scheduling.k8s.io \"other\" is forbidden: PriorityClass normal is already marked as default. Only one default can exist"),
        "{err}"
    );
    // A server-side dry run shows what admission did, without storing it.
    let dry = s
        .kubectl_as(
            &s.kubeconfig,
            &[
                "create",
                "--dry-run=server",
                "-f",
                "-",
                "-o",
                "jsonpath={.spec.priorityClassName} {.spec.priority} {.spec.preemptionPolicy} {.spec.serviceAccountName}",
            ],
            Some(&pod_yaml("defaulted", "")),
        )
        .expect("kubectl");
    assert!(dry.0, "{}", dry.2);
    assert_eq!(dry.1, "normal 1000 Never default");
    let (ok, _, _) = s.kubectl(&["get", "pod", "defaulted"]).expect("kubectl");
    assert!(!ok, "a dry run stores nothing");
}

#[test]
fn admission_flags_use_upstream_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = ServerProcess::start_with(
        &dir.path().join("bogus"),
        &["--enable-admission-plugins=Bogus"],
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("admission plugin \"Bogus\" is unknown"),
        "{err}"
    );
    // Turning off Priority and DefaultTolerationSeconds leaves pods as sent.
    let s = ServerProcess::start_with(
        &dir.path().join("off"),
        &["--disable-admission-plugins=Priority,DefaultTolerationSeconds"],
    )
    .expect("server starts");
    let (ok, _, err) = create(&s, &pod_yaml("raw", ""));
    assert!(ok, "{err}");
    assert_eq!(
        jsonpath(&s, "raw", "{.spec.priority}|{.spec.tolerations}"),
        "|"
    );
}

#[test]
fn limit_ranger_defaults_and_bounds_container_resources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("bare server");
    let (ok, _, err) = create(
        &s,
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: limits\nspec:\n  limits:\n  - type: Container\n    default:\n      cpu: 500m\n      memory: 256Mi\n    defaultRequest:\n      cpu: 100m\n    min:\n      cpu: 50m\n    max:\n      cpu: \"1\"\n",
    );
    assert!(ok, "{err}");
    let (ok, _, err) = create(
        &s,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n    resources:\n      requests:\n        memory: 64Mi\n",
    );
    assert!(ok, "{err}");
    assert_eq!(
        jsonpath(
            &s,
            "web",
            "{.spec.containers[0].resources.requests.cpu} {.spec.containers[0].resources.requests.memory} {.spec.containers[0].resources.limits.cpu} {.spec.containers[0].resources.limits.memory}"
        ),
        "100m 64Mi 500m 256Mi"
    );
    assert_eq!(
        jsonpath(
            &s,
            "web",
            "{.metadata.annotations.kubernetes\\.io/limit-ranger}"
        ),
        "LimitRanger plugin set: cpu request for container app; cpu, memory limit for container app"
    );
    let (ok, _, err) = create(
        &s,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: greedy\nspec:\n  containers:\n  - name: app\n    image: nginx\n    resources:\n      requests:\n        cpu: 10m\n      limits:\n        cpu: \"2\"\n",
    );
    assert!(!ok);
    assert!(
        err.contains("pods \"greedy\" is forbidden: [minimum cpu usage per Container is 50m, but request is 10m, maximum cpu usage per Container is 1, but limit is 2]"),
        "{err}"
    );
}

#[test]
fn resource_quota_charges_new_pods_and_refuses_past_hard_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("bare server");
    let pod = |name: &str, cpu: Option<&str>| {
        let resources = cpu.map_or(String::new(), |c| {
            format!("    resources:\n      requests:\n        cpu: {c}\n")
        });
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: nginx\n{resources}"
        )
    };
    admin(
        &s,
        &["create", "quota", "compute", "--hard=pods=2,requests.cpu=1"],
    );
    // A quota the controller has not processed (no status.hard) limits nothing yet.
    let (ok, _, err) = create(&s, &pod("early", Some("100m")));
    assert!(ok, "{err}");
    // Hard limits known but no usage reported: refused until the controller counts.
    admin(
        &s,
        &[
            "patch",
            "quota",
            "compute",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"hard":{"pods":"2","requests.cpu":"1"}}}"#,
        ],
    );
    let (ok, _, err) = create(&s, &pod("later", Some("100m")));
    assert!(!ok);
    assert!(
        err.contains("pods \"later\" is forbidden: status unknown for quota: compute, resources: pods,requests.cpu"),
        "{err}"
    );
    admin(
        &s,
        &[
            "patch",
            "quota",
            "compute",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"hard":{"pods":"2","requests.cpu":"1"},"used":{"pods":"0","requests.cpu":"0"}}}"#,
        ],
    );
    let (ok, _, err) = create(&s, &pod("vague", None));
    assert!(!ok);
    assert!(
        err.contains(
            "pods \"vague\" is forbidden: failed quota: compute: must specify requests.cpu for: app"
        ),
        "{err}"
    );
    let (ok, _, err) = create(&s, &pod("a", Some("600m")));
    assert!(ok, "{err}");
    let used = admin(
        &s,
        &[
            "get",
            "quota",
            "compute",
            "-o",
            "jsonpath={.status.used.pods} {.status.used.requests\\.cpu}",
        ],
    );
    assert_eq!(used, "1 600m");
    let (ok, _, err) = create(&s, &pod("b", Some("600m")));
    assert!(!ok);
    assert!(
        err.contains("pods \"b\" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"),
        "{err}"
    );
    // A dry run is checked but not charged.
    let (ok, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&pod("c", Some("300m"))),
        )
        .expect("kubectl");
    assert!(ok, "{err}");
    let used = admin(
        &s,
        &[
            "get",
            "quota",
            "compute",
            "-o",
            "jsonpath={.status.used.requests\\.cpu}",
        ],
    );
    assert_eq!(used, "600m");
}
