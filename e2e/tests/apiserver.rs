//! `capstan server` driven by the stock kubectl over HTTPS with the admin kubeconfig it
//! writes: version, discovery, CRUD, selectors, patches, pagination, watch, upstream error
//! messages, authentication and authorization failures, and bad input.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use e2e::ServerProcess;

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

fn fails(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(!ok, "kubectl {args:?} unexpectedly succeeded: {out}");
    err
}

const MANIFEST: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  labels: {app: web, tier: front}
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
"#;

#[test]
fn version_discovery_and_health_answer_like_kube_apiserver() {
    let (_d, s) = server();
    let version = ok(&s, &["version", "-o", "json"]);
    assert!(version.contains("\"minor\": \"33\""), "{version}");
    let resources = ok(&s, &["api-resources"]);
    for line in ["pods ", "deployments ", "configmaps "] {
        assert!(
            resources.lines().any(|l| l.starts_with(line)),
            "{line} missing in\n{resources}"
        );
    }
    let deploy = resources
        .lines()
        .find(|l| l.starts_with("deployments "))
        .unwrap_or_default();
    assert!(
        deploy.contains("deploy") && deploy.contains("apps/v1") && deploy.contains("Deployment"),
        "{deploy}"
    );
    let versions = ok(&s, &["api-versions"]);
    assert!(
        versions.lines().any(|l| l == "apps/v1") && versions.lines().any(|l| l == "v1"),
        "{versions}"
    );
    let ready = ok(&s, &["get", "--raw", "/readyz?verbose"]);
    assert!(
        ready.contains("[+]ping ok") && ready.contains("readyz check passed"),
        "{ready}"
    );
    let metrics = ok(&s, &["get", "--raw", "/metrics"]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("apiserver_request_total{verb=\"LIST\"")
                && l.contains("resource=\"namespaces\""))
            || metrics.contains("apiserver_request_total{"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE apiserver_request_duration_seconds histogram"),
        "{metrics}"
    );
    let ns = ok(&s, &["get", "namespaces", "-o", "name"]);
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(ns.contains(&format!("namespace/{n}")), "{ns}");
    }
}

#[test]
fn create_get_label_patch_delete_round_trip() {
    let (d, s) = server();
    let file = d.path().join("m.yaml");
    std::fs::write(&file, MANIFEST).expect("write manifest");
    let f = file.to_str().unwrap_or_default();
    let out = ok(&s, &["create", "-f", f, "--validate=false"]);
    assert!(
        out.contains("configmap/settings created") && out.contains("deployment.apps/web created"),
        "{out}"
    );

    let json = ok(&s, &["get", "deployment", "web", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["metadata"]["generation"], 1);
    assert_eq!(v["kind"], "Deployment");
    // Upstream's defaults were applied.
    assert_eq!(v["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(v["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );
    assert_eq!(
        v["spec"]["template"]["spec"]["schedulerName"],
        "default-scheduler"
    );
    assert!(v["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    let rv1: i64 = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    assert!(rv1 > 0);

    assert_eq!(
        ok(&s, &["get", "cm", "-l", "tier=front", "-o", "name"]).trim(),
        "configmap/settings"
    );
    assert_eq!(
        ok(&s, &["get", "cm", "-l", "tier in (back)", "-o", "name"]).trim(),
        ""
    );
    assert_eq!(
        ok(
            &s,
            &[
                "get",
                "cm",
                "--field-selector",
                "metadata.name=settings",
                "-o",
                "name"
            ]
        )
        .trim(),
        "configmap/settings"
    );
    ok(&s, &["label", "cm", "settings", "owner=ops"]);
    assert!(ok(&s, &["get", "cm", "settings", "--show-labels"]).contains("owner=ops"));
    ok(
        &s,
        &[
            "patch",
            "cm",
            "settings",
            "--type=merge",
            "-p",
            r#"{"data":{"extra":"1"}}"#,
        ],
    );
    // A patch's answer is the object as stored, with its new resourceVersion: the same as
    // a read right after it.
    let patched = ok(
        &s,
        &[
            "patch",
            "cm",
            "settings",
            "--type=merge",
            "-p",
            r#"{"metadata":{"annotations":{"more":"2"}}}"#,
            "-o",
            "json",
        ],
    );
    let patched: serde_json::Value = serde_json::from_str(&patched).expect("patch answer");
    let read: serde_json::Value =
        serde_json::from_str(&ok(&s, &["get", "cm", "settings", "-o", "json"])).expect("json");
    assert_eq!(patched, read);
    assert_eq!(patched["metadata"]["annotations"]["more"], "2");
    ok(
        &s,
        &[
            "patch",
            "cm",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/mode"}]"#,
        ],
    );
    assert_eq!(
        ok(&s, &["get", "cm", "settings", "-o", "jsonpath={.data}"]).trim(),
        r#"{"extra":"1"}"#
    );

    // A spec change bumps generation; a label change does not.
    ok(&s, &["label", "deploy", "web", "x=y"]);
    ok(
        &s,
        &[
            "patch",
            "deploy",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
    );
    assert_eq!(
        ok(
            &s,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.metadata.generation}"
            ]
        )
        .trim(),
        "2"
    );

    let out = ok(&s, &["delete", "-f", f]);
    assert!(out.contains("configmap \"settings\" deleted"), "{out}");
    let err = fails(&s, &["get", "deploy", "web"]);
    assert!(
        err.contains("Error from server (NotFound): deployments.apps \"web\" not found"),
        "{err}"
    );
}

#[test]
fn explain_reads_the_openapi_documents() {
    let (_d, s) = server();
    let out = ok(&s, &["explain", "deployment.spec.replicas"]);
    assert!(
        out.contains("KIND:       Deployment") && out.contains("FIELD: replicas <integer>"),
        "{out}"
    );
    let out = ok(&s, &["explain", "pods.spec.containers"]);
    assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\nbogus: 1\n";
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(bad))
        .expect("kubectl");
    assert!(!created && err.contains("unknown field \"bogus\""), "{err}");
}

#[test]
fn errors_use_upstream_reasons_and_messages() {
    let (d, s) = server();
    let file = d.path().join("m.yaml");
    std::fs::write(&file, MANIFEST).expect("write manifest");
    let f = file.to_str().unwrap_or_default();
    ok(&s, &["create", "-f", f, "--validate=false"]);
    let err = fails(&s, &["create", "-f", f, "--validate=false"]);
    assert!(
        err.contains("Error from server (AlreadyExists)")
            && err.contains("configmaps \"settings\" already exists"),
        "{err}"
    );

    let bad = d.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n",
    )
    .expect("write");
    let err = fails(
        &s,
        &[
            "create",
            "-f",
            bad.to_str().unwrap_or_default(),
            "--validate=false",
        ],
    );
    assert!(
        err.contains("The ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"),
        "{err}"
    );

    // Upstream's field validation of the main fields.
    let mismatch = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: m\nspec:\n  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: web2}}\n    spec:\n      containers: [{name: c, image: nginx}]\n";
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(mismatch))
        .expect("kubectl");
    assert!(
        !created
            && err.contains("The Deployment \"m\" is invalid")
            && err.contains("spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web2\"}: `selector` does not match template `labels`"),
        "{err}"
    );
    let no_containers =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers: []\n";
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(no_containers))
        .expect("kubectl");
    assert!(
        !created && err.contains("spec.containers: Required value"),
        "{err}"
    );
    let missing_ns = d.path().join("ns.yaml");
    std::fs::write(
        &missing_ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: nowhere\n",
    )
    .expect("write");
    let err = fails(
        &s,
        &[
            "create",
            "-f",
            missing_ns.to_str().unwrap_or_default(),
            "--validate=false",
        ],
    );
    assert!(err.contains("namespaces \"nowhere\" not found"), "{err}");

    // A stale resourceVersion on update is a 409 with upstream's sentence.
    let cm = ok(&s, &["get", "cm", "settings", "-o", "json"]);
    ok(&s, &["label", "cm", "settings", "bump=1"]);
    let stale = d.path().join("stale.json");
    std::fs::write(&stale, cm).expect("write");
    let err = fails(
        &s,
        &[
            "replace",
            "-f",
            stale.to_str().unwrap_or_default(),
            "--validate=false",
        ],
    );
    assert!(
        err.contains(
            "the object has been modified; please apply your changes to the latest version"
        ),
        "{err}"
    );
}

#[test]
fn bad_bodies_get_status_errors_and_nothing_is_stored() {
    let (d, s) = server();
    let body = d.path().join("body.json");
    let path = "/api/v1/namespaces/default/configmaps";
    for (content, want) in [
        ("{not json", "json parse error"),
        (
            r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"a"}}"#,
            "does not match the expected API version",
        ),
        (
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}}"#,
            "does not match the expected kind",
        ),
    ] {
        std::fs::write(&body, content).expect("write");
        let err = fails(
            &s,
            &[
                "create",
                "--raw",
                path,
                "-f",
                body.to_str().unwrap_or_default(),
            ],
        );
        assert!(
            err.contains("BadRequest") || err.contains(want),
            "{content}: {err}"
        );
    }
    let big = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"x":"{}"}}}}"#,
        "a".repeat(4 << 20)
    );
    std::fs::write(&body, big).expect("write");
    let err = fails(
        &s,
        &[
            "create",
            "--raw",
            path,
            "-f",
            body.to_str().unwrap_or_default(),
        ],
    );
    assert!(
        err.contains("too large") || err.contains("RequestEntityTooLarge") || err.contains("413"),
        "{err}"
    );
    // Unknown fields: Strict refuses them, Warn (the default) drops them with a warning.
    std::fs::write(
        &body,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u"},"bogus":1}"#,
    )
    .expect("write");
    let strict = format!("{path}?fieldValidation=Strict");
    let err = fails(
        &s,
        &[
            "create",
            "--raw",
            &strict,
            "-f",
            body.to_str().unwrap_or_default(),
        ],
    );
    assert!(
        err.contains("strict decoding error: unknown field \"bogus\""),
        "{err}"
    );
    std::fs::write(
        &body,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u"},"data":5}"#,
    )
    .expect("write");
    let err = fails(
        &s,
        &[
            "create",
            "--raw",
            path,
            "-f",
            body.to_str().unwrap_or_default(),
        ],
    );
    assert!(err.contains("cannot be handled as a ConfigMap"), "{err}");
    assert_eq!(ok(&s, &["get", "cm", "-o", "name"]).trim(), "");
    std::fs::write(
        &body,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w"},"bogus":1}"#,
    )
    .expect("write");
    let (created, _, err) = s
        .kubectl(&[
            "create",
            "--raw",
            path,
            "-f",
            body.to_str().unwrap_or_default(),
        ])
        .expect("kubectl");
    assert!(created && err.contains("unknown field \"bogus\""), "{err}");
    assert!(!ok(&s, &["get", "cm", "w", "-o", "json"]).contains("bogus"));
    // A patch is checked the same way (only the fields it changes are decoded again):
    // its unknown field is dropped with the warning, its known one stored.
    let (patched, _, err) = s
        .kubectl(&[
            "patch",
            "cm",
            "w",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"a":"b"},"bogus":2}"#,
        ])
        .expect("kubectl");
    assert!(patched && err.contains("unknown field \"bogus\""), "{err}");
    let got = ok(&s, &["get", "cm", "w", "-o", "json"]);
    assert!(
        !got.contains("bogus") && got.contains(r#""a": "b""#),
        "{got}"
    );
    let err = fails(
        &s,
        &[
            "patch",
            "cm",
            "w",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"a":5}}"#,
        ],
    );
    assert!(err.contains("cannot be handled as a ConfigMap"), "{err}");
}

#[test]
fn pagination_walks_one_snapshot() {
    let (_d, s) = server();
    for i in 0..5 {
        let doc = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: page-{i}\n");
        let (ok_, _, err) = s
            .kubectl_as(
                &s.kubeconfig,
                &["create", "-f", "-", "--validate=false"],
                Some(&doc),
            )
            .expect("kubectl");
        assert!(ok_, "{err}");
    }
    let out = ok(&s, &["get", "cm", "--chunk-size=2", "-o", "name"]);
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(
        names,
        [
            "configmap/page-0",
            "configmap/page-1",
            "configmap/page-2",
            "configmap/page-3",
            "configmap/page-4"
        ]
    );
    let raw = ok(
        &s,
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps?limit=2",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&raw).expect("json");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["metadata"]["remainingItemCount"], 3);
    assert!(
        v["metadata"]["continue"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
    );
}

#[test]
fn watch_prints_live_changes() {
    let (_d, s) = server();
    let mut child = s
        .kubectl_spawn(&["get", "cm", "-w", "-o", "name"])
        .expect("spawn watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait until the watch is established: create objects until the first one is seen.
    let mut seen = None;
    for i in 0..50 {
        let doc = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: w{i}\n");
        let (ok_, _, err) = s
            .kubectl_as(
                &s.kubeconfig,
                &["create", "-f", "-", "--validate=false"],
                Some(&doc),
            )
            .expect("kubectl");
        assert!(ok_, "{err}");
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(2)) {
            seen = Some(line);
            break;
        }
    }
    let first = seen.expect("watch printed an event");
    assert!(first.starts_with("configmap/w"), "{first}");
    ok(&s, &["label", "cm", "w0", "changed=yes"]);
    let mut lines = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        lines.push(l);
        if lines.iter().any(|l| l == "configmap/w0") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines.iter().any(|l| l == "configmap/w0") || first == "configmap/w0",
        "{lines:?}"
    );
}

#[test]
fn unknown_users_and_anonymous_requests_are_forbidden_bad_tokens_unauthorized() {
    let (d, s) = server();
    let alice = d.path().join("alice.kubeconfig");
    let (made, _, err) = s
        .capstan(&[
            "kubeconfig",
            "--data-dir",
            s.data_dir.to_str().unwrap_or_default(),
            "--user",
            "alice",
            "--group",
            "devs",
            "--server",
            &s.url,
            "--out",
            alice.to_str().unwrap_or_default(),
        ])
        .expect("capstan kubeconfig");
    assert!(made, "{err}");
    let (ok_, _, err) = s
        .kubectl_as(&alice, &["get", "pods"], None)
        .expect("kubectl");
    assert!(!ok_);
    assert!(
        err.contains("Error from server (Forbidden): pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    // Health and version are public.
    let (ok_, out, _) = s
        .kubectl_as(&alice, &["get", "--raw", "/healthz"], None)
        .expect("kubectl");
    assert!(ok_ && out.trim() == "ok");
    let anon = d.path().join("anon.kubeconfig");
    let cfg = std::fs::read_to_string(&s.kubeconfig).expect("read kubeconfig");
    let stripped: String = cfg
        .lines()
        .filter(|l| {
            !l.trim_start().starts_with("client-certificate-data")
                && !l.trim_start().starts_with("client-key-data")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&anon, stripped).expect("write");
    // No credentials at all (kubectl then sends basic auth, which no authenticator
    // accepts): `system:anonymous` (anonymous auth is on by default), whom RBAC refuses
    // as upstream does; health stays public.
    let nobody = d.path().join("nobody.kubeconfig");
    let cfg = std::fs::read_to_string(&anon).expect("read");
    let cfg = cfg.replacen(
        "  user:\n",
        "  user:\n    username: nobody\n    password: x\n",
        1,
    );
    std::fs::write(&nobody, cfg).expect("write");
    let (ok_, _, err) = s
        .kubectl_as(
            &nobody,
            &["get", "--raw", "/api/v1/namespaces/default/pods"],
            None,
        )
        .expect("kubectl");
    assert!(
        !ok_ && err.contains("Error from server (Forbidden): pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    let (ok_, out, _) = s
        .kubectl_as(&nobody, &["get", "--raw", "/healthz"], None)
        .expect("kubectl");
    assert!(ok_ && out.trim() == "ok");
    // No client certificate and a token nobody issued: 401, as upstream.
    let (ok_, _, err) = s
        .kubectl_as(&anon, &["get", "pods", "--token=not-a-real-token"], None)
        .expect("kubectl");
    assert!(
        !ok_ && (err.contains("Unauthorized") || err.contains("must be logged in")),
        "{err}"
    );
}

#[test]
fn services_get_cluster_ips_and_node_ports_without_conflicts() {
    let (_d, s) = server();
    let svc = ok(
        &s,
        &[
            "get",
            "svc",
            "kubernetes",
            "-o",
            "jsonpath={.spec.clusterIP} {.spec.ports[0].port}",
        ],
    );
    assert_eq!(svc.trim(), "10.96.0.1 443");
    let np = "apiVersion: v1\nkind: Service\nmetadata: {name: np}\nspec:\n  type: NodePort\n  ports: [{port: 80, protocol: TCP, nodePort: 30080}]\n";
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "--validate=false"],
            Some(np),
        )
        .expect("kubectl");
    assert!(created, "{err}");
    let ip = ok(
        &s,
        &["get", "svc", "np", "-o", "jsonpath={.spec.clusterIP}"],
    );
    assert!(ip.starts_with("10.") && ip != "10.96.0.1", "{ip}");
    let clash = np.replace("name: np", "name: np2");
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "--validate=false"],
            Some(&clash),
        )
        .expect("kubectl");
    assert!(
        !created && err.contains("provided port is already allocated"),
        "{err}"
    );
    let taken_ip = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: ipclash}}\nspec:\n  clusterIP: {ip}\n  ports: [{{port: 80, protocol: TCP}}]\n"
    );
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "--validate=false"],
            Some(&taken_ip),
        )
        .expect("kubectl");
    assert!(
        !created && err.contains("provided IP is already allocated"),
        "{err}"
    );
    // Deleting the service frees its node port.
    ok(&s, &["delete", "svc", "np"]);
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "--validate=false"],
            Some(&clash),
        )
        .expect("kubectl");
    assert!(created, "{err}");
    let info = ok(&s, &["cluster-info"]);
    assert!(
        info.contains("Kubernetes control plane is running at"),
        "{info}"
    );
}

#[test]
fn scale_subresource_changes_replicas_with_optimistic_concurrency() {
    let (d, s) = server();
    let file = d.path().join("m.yaml");
    std::fs::write(&file, MANIFEST).expect("write manifest");
    ok(
        &s,
        &[
            "create",
            "-f",
            file.to_str().unwrap_or_default(),
            "--validate=false",
        ],
    );
    ok(&s, &["scale", "deployment", "web", "--replicas=4"]);
    assert_eq!(
        ok(
            &s,
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]
        )
        .trim(),
        "4"
    );
    ok(
        &s,
        &[
            "scale",
            "deployment",
            "web",
            "--replicas=5",
            "--current-replicas=4",
        ],
    );
    let err = fails(
        &s,
        &[
            "scale",
            "deployment",
            "web",
            "--replicas=6",
            "--current-replicas=4",
        ],
    );
    assert!(err.contains("Expected replicas to be 4, was 5"), "{err}");
    let scale = ok(
        &s,
        &[
            "get",
            "--raw",
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&scale).expect("json");
    assert_eq!(
        (v["kind"].as_str(), v["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(5))
    );
    assert_eq!(v["status"]["selector"], "app=web");
}

#[test]
fn selector_watches_see_objects_start_and_stop_matching() {
    let (d, s) = server();
    let mut child = s
        .kubectl_spawn(&["get", "cm", "-w", "-l", "sel=yes", "--output-watch-events"])
        .expect("spawn watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let body = d.path().join("tw.json");
    std::fs::write(
        &body,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"tw"}}"#,
    )
    .expect("write");
    ok(
        &s,
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/configmaps",
            "-f",
            body.to_str().unwrap_or_default(),
        ],
    );
    // Toggle the label until the watch (which may start late) has reported both transitions.
    let mut lines: Vec<String> = Vec::new();
    for _ in 0..20 {
        ok(&s, &["label", "cm", "tw", "sel=yes", "--overwrite"]);
        ok(&s, &["label", "cm", "tw", "sel-"]);
        while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
            lines.push(l);
        }
        let added = lines
            .iter()
            .any(|l| l.starts_with("ADDED") && l.contains("tw"));
        let deleted = lines
            .iter()
            .any(|l| l.starts_with("DELETED") && l.contains("tw"));
        if added && deleted {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ADDED") && l.contains("tw")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("DELETED") && l.contains("tw")),
        "{lines:?}"
    );
    // The object itself was never deleted.
    ok(&s, &["get", "cm", "tw"]);
}

#[test]
fn watching_from_a_compacted_resource_version_gets_410_expired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_with(
        &dir.path().join("data"),
        &["--etcd-compaction-interval", "1s"],
    )
    .expect("server starts");
    let body = dir.path().join("c.json");
    // Write, then keep writing until the compactor has moved past the first revision
    // (an exact list at that revision answers 410 from then on).
    let mut first_rv = String::new();
    let mut compacted = false;
    for i in 0..100 {
        std::fs::write(
            &body,
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c{i}"}}}}"#),
        )
        .expect("write");
        let out = ok(
            &s,
            &[
                "create",
                "--raw",
                "/api/v1/namespaces/default/configmaps",
                "-f",
                body.to_str().unwrap_or_default(),
            ],
        );
        if first_rv.is_empty() {
            let v: serde_json::Value = serde_json::from_str(&out).expect("json");
            first_rv = v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
        let probe: i64 = first_rv.parse::<i64>().unwrap_or(0) + 1;
        // A watch from first_rv needs history from first_rv + 1 on: wait until even that
        // revision is compacted away.
        let exact = format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={probe}&resourceVersionMatch=Exact"
        );
        let (listed, _, err) = s.kubectl(&["get", "--raw", &exact]).expect("kubectl");
        // (Until the next write exists, the probe is a future revision: keep writing.)
        if !listed && !err.contains("Too large resource version") {
            assert!(
                err.contains("Expired") || err.contains("too old resource version"),
                "{err}"
            );
            compacted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        compacted,
        "history was never compacted past {first_rv}: {}",
        s.log()
    );
    let url = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={first_rv}&timeoutSeconds=2"
    );
    let out = ok(&s, &["get", "--raw", &url]);
    let event: serde_json::Value =
        serde_json::from_str(out.lines().next().unwrap_or("{}")).expect("event json");
    assert_eq!(event["type"], "ERROR", "{out}");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(
        event["object"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("too old resource version")
    );
}

#[test]
fn protobuf_creates_and_server_side_tables() {
    let (_d, s) = server();
    for args in [
        vec!["create", "namespace", "team"],
        vec![
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ],
        vec!["create", "configmap", "cfg", "--from-literal=a=b"],
        vec!["create", "secret", "generic", "sec", "--from-literal=p=q"],
        vec!["create", "serviceaccount", "robot"],
        vec!["create", "job", "once", "--image=busybox"],
        vec!["create", "service", "clusterip", "front", "--tcp=80:8080"],
        vec!["run", "solo", "--image=nginx"],
    ] {
        ok(&s, &args);
    }
    assert_eq!(
        ok(&s, &["get", "secret", "sec", "-o", "jsonpath={.data.p}"]).trim(),
        "cQ=="
    );
    assert_eq!(
        ok(
            &s,
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]
        )
        .trim(),
        "2"
    );
    let pods = ok(&s, &["get", "pods"]);
    let header: Vec<&str> = pods
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{pods}"
    );
    assert!(pods.contains("solo") && pods.contains("Pending"), "{pods}");
    let wide = ok(&s, &["get", "pods", "-o", "wide"]);
    assert!(
        wide.lines()
            .next()
            .unwrap_or_default()
            .contains("NOMINATED NODE"),
        "{wide}"
    );
    let deploy = ok(&s, &["get", "deploy"]);
    assert!(
        deploy.starts_with("NAME") && deploy.contains("UP-TO-DATE") && deploy.contains("0/2"),
        "{deploy}"
    );
    let svc = ok(&s, &["get", "svc", "front"]);
    assert!(svc.contains("ClusterIP") && svc.contains("80/TCP"), "{svc}");
    // `-A` takes the NAMESPACE column from the rows' object metadata.
    let all = ok(&s, &["get", "cm", "-A"]);
    assert!(
        all.lines()
            .any(|l| l.starts_with("default") && l.contains("cfg")),
        "{all}"
    );
    let all = ok(&s, &["get", "all"]);
    assert!(
        all.contains("deployment.apps/web")
            && all.contains("service/front")
            && all.contains("pod/solo"),
        "{all}"
    );
    let sorted = ok(&s, &["get", "cm", "--sort-by=.metadata.name", "-o", "name"]);
    assert!(sorted.contains("configmap/cfg"), "{sorted}");
}
