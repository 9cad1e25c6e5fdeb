//! Resource quantities as kube-apiserver v1.33 stores them: whatever spelling kubectl sends
//! (`"0.5"`, `1.5Gi`, `1000m`, a bare YAML number), the object reads back with each quantity
//! in canonical form, resource lists rounded up to milli precision; a malformed quantity is
//! upstream's 400 decode error and nothing is stored.

use e2e::ServerProcess;
use serde_json::{Value, json};

const REGEX_ERROR: &str = "quantities must match the regular expression \
                           '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    out
}

fn ok_stdin(s: &ServerProcess, args: &[&str], input: &str) -> String {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, args, Some(input))
        .expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    out
}

fn fails_stdin(s: &ServerProcess, args: &[&str], input: &str) -> String {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, args, Some(input))
        .expect("kubectl runs");
    assert!(!ok, "kubectl {args:?} unexpectedly succeeded: {out}");
    err
}

fn get_json(s: &ServerProcess, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&ok(s, &all)).expect("kubectl get -o json prints JSON")
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: q
spec:
  containers:
  - name: app
    image: nginx
    resources:
      requests:
        cpu: "0.5"
        memory: 1.5Gi
      limits:
        cpu: 1000m
        memory: 2048Mi
    env:
    - name: CPU_MILLIS
      valueFrom:
        resourceFieldRef:
          resource: limits.cpu
          divisor: "0.001"
  - name: side
    image: busybox
    resources:
      limits:
        cpu: 1
        memory: "1000000000"
        ephemeral-storage: "0.0001"
  volumes:
  - name: scratch
    emptyDir:
      sizeLimit: "0.0001"
  - name: info
    downwardAPI:
      items:
      - path: mem
        resourceFieldRef:
          containerName: app
          resource: limits.memory
          divisor: 1024Ki
"#;

#[test]
fn pod_quantities_read_back_canonical() {
    let (_d, s) = server();
    ok_stdin(&s, &["create", "-f", "-"], POD);
    let pod = get_json(&s, &["pod", "q"]);
    let app = &pod["spec"]["containers"][0];
    assert_eq!(
        app["resources"],
        json!({"requests": {"cpu": "500m", "memory": "1536Mi"},
               "limits": {"cpu": "1", "memory": "2Gi"}})
    );
    assert_eq!(
        app["env"][0]["valueFrom"]["resourceFieldRef"]["divisor"],
        "1m"
    );
    // Requests defaulted from limits; resource lists are rounded up to milli precision.
    let side = &pod["spec"]["containers"][1]["resources"];
    let want = json!({"cpu": "1", "memory": "1G", "ephemeral-storage": "1m"});
    assert_eq!(side["limits"], want);
    assert_eq!(side["requests"], want);
    // A single quantity keeps nano precision.
    assert_eq!(pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"], "100u");
    assert_eq!(
        pod["spec"]["volumes"][1]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"],
        "1Mi"
    );
    // What kubectl's jsonpath shows, as on a real cluster.
    let out = ok(
        &s,
        &[
            "get",
            "pod",
            "q",
            "-o",
            "jsonpath={.spec.containers[0].resources.requests.cpu} \
             {.spec.containers[0].resources.requests.memory} \
             {.spec.containers[0].resources.limits.cpu}",
        ],
    );
    assert_eq!(out, "500m 1536Mi 1");
}

const NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: node-q
status:
  capacity:
    cpu: "4"
    memory: 8192Mi
    pods: "110"
    ephemeral-storage: 100000000000
  allocatable:
    cpu: 3.5
    memory: 7.5Gi
    pods: 110
"#;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
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
      - name: web
        image: nginx
        resources:
          requests: {cpu: 0.25, memory: 0.5Gi}
          limits: {cpu: "1.0", memory: 1Gi}
"#;

#[test]
fn node_status_and_deployment_template_on_create_update_and_patch() {
    let (_d, s) = server();
    ok_stdin(&s, &["create", "-f", "-"], NODE);
    let node = get_json(&s, &["node", "node-q"]);
    assert_eq!(
        node["status"]["capacity"],
        json!({"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100G"})
    );
    assert_eq!(
        node["status"]["allocatable"],
        json!({"cpu": "3500m", "memory": "7680Mi", "pods": "110"})
    );
    ok(
        &s,
        &[
            "patch",
            "node",
            "node-q",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"allocatable":{"cpu":"3000m","memory":"0.5Ti"}}}"#,
        ],
    );
    let node = get_json(&s, &["node", "node-q"]);
    assert_eq!(node["status"]["allocatable"]["cpu"], "3");
    assert_eq!(node["status"]["allocatable"]["memory"], "512Gi");

    // Create.
    ok_stdin(&s, &["create", "-f", "-"], DEPLOYMENT);
    let resources = |s: &ServerProcess| {
        get_json(s, &["deployment", "web"])["spec"]["template"]["spec"]["containers"][0]
            ["resources"]
            .clone()
    };
    assert_eq!(
        resources(&s),
        json!({"requests": {"cpu": "250m", "memory": "512Mi"},
               "limits": {"cpu": "1", "memory": "1Gi"}})
    );
    // Patch (merge patch replaces the container list).
    ok(
        &s,
        &[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx",
               "resources":{"limits":{"cpu":"2000m","memory":"2048Mi"},
                            "requests":{"cpu":"0.5","memory":"1024Mi"}}}]}}}}"#,
        ],
    );
    assert_eq!(
        resources(&s),
        json!({"requests": {"cpu": "500m", "memory": "1Gi"},
               "limits": {"cpu": "2", "memory": "2Gi"}})
    );
    // Update (replace).
    let replaced = DEPLOYMENT
        .replace("cpu: 0.25", "cpu: \"0.1\"")
        .replace("memory: 0.5Gi", "memory: \"1000000\"");
    ok_stdin(&s, &["replace", "-f", "-"], &replaced);
    assert_eq!(
        resources(&s),
        json!({"requests": {"cpu": "100m", "memory": "1M"},
               "limits": {"cpu": "1", "memory": "1Gi"}})
    );
}

#[test]
fn malformed_quantities_are_bad_requests_and_nothing_is_stored() {
    let (_d, s) = server();
    let bad_pod = POD.replace("memory: 1.5Gi", "memory: 1.5GB");
    let err = fails_stdin(&s, &["create", "-f", "-"], &bad_pod);
    assert!(
        err.contains("Error from server (BadRequest)")
            && err.contains(&format!(
                "Pod in version \"v1\" cannot be handled as a Pod: {REGEX_ERROR}"
            )),
        "{err}"
    );
    let (found, _, err) = s.kubectl(&["get", "pod", "q"]).expect("kubectl runs");
    assert!(!found && err.contains("NotFound"), "nothing stored: {err}");

    // The same through the raw API: a 400 Status.
    let bad_json = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "raw"},
        "spec": {"containers": [{"name": "c", "image": "nginx",
                                 "resources": {"limits": {"cpu": "1 core"}}}]}
    })
    .to_string();
    let err = fails_stdin(
        &s,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/pods",
            "-f",
            "-",
        ],
        &bad_json,
    );
    assert!(
        err.contains("BadRequest") && err.contains(REGEX_ERROR),
        "{err}"
    );
    let (found, _, _) = s.kubectl(&["get", "pod", "raw"]).expect("kubectl runs");
    assert!(!found, "nothing stored");

    // A bad suffix has its own upstream message.
    let bad_deploy = DEPLOYMENT.replace("memory: 1Gi", "memory: 1Gb0");
    let err = fails_stdin(&s, &["create", "-f", "-"], &bad_deploy);
    assert!(err.contains(REGEX_ERROR), "{err}");
    let bad_deploy = DEPLOYMENT.replace("memory: 1Gi", "memory: 32MMi");
    let err = fails_stdin(&s, &["create", "-f", "-"], &bad_deploy);
    assert!(
        err.contains(
            "Deployment in version \"v1\" cannot be handled as a Deployment: \
             unable to parse quantity's suffix"
        ),
        "{err}"
    );
    let (found, _, _) = s
        .kubectl(&["get", "deployment", "web"])
        .expect("kubectl runs");
    assert!(!found, "nothing stored");

    // Patching a stored object with a bad quantity leaves it unchanged.
    ok_stdin(&s, &["create", "-f", "-"], DEPLOYMENT);
    let before = get_json(&s, &["deployment", "web"]);
    let (patched, _, err) = s
        .kubectl(&[
            "patch",
            "deployment",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/resources/limits/cpu","value":"lots"}]"#,
        ])
        .expect("kubectl runs");
    assert!(
        !patched && err.contains("BadRequest") && err.contains(REGEX_ERROR),
        "{err}"
    );
    let after = get_json(&s, &["deployment", "web"]);
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "nothing written"
    );
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "1"
    );
}
