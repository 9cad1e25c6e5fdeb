//! Dynamic admission through webhooks (MutatingAdmissionWebhook, ValidatingAdmissionWebhook)
//! with stock kubectl against the real binary. The webhook server is written here (hyper +
//! rustls) and serves the cluster's own apiserver certificate, issued beforehand with the
//! extra name `labeler.hooks.svc` so that it can also be reached through a selector-less
//! Service with a hand-written EndpointSlice pointing at 127.0.0.1; the cluster CA is the
//! configurations' `caBundle`. Each path of the server is one behaviour (label, deny, hang,
//! answer garbage, …).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use e2e::ServerProcess;
use e2e::cli::{apply, ok};
use e2e::webhook_server::{self, Reply, WebhookServer};
use serde_json::{Value, json};

/// The reviews the server received: (path, AdmissionReview).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// The webhook server.
struct Hooks {
    port: u16,
    seen: Seen,
    _server: WebhookServer,
}

impl Hooks {
    /// Serves every path over TLS with `cert`/`key` (PEM files) on a free 127.0.0.1 port.
    fn start(cert: &std::path::Path, key: &std::path::Path) -> Hooks {
        let seen: Seen = Arc::default();
        let log = Arc::clone(&seen);
        let server = WebhookServer::start(cert.to_owned(), key.to_owned(), 2, move |req| {
            let log = Arc::clone(&log);
            async move { answer(req, &log).await }
        })
        .expect("webhook server");
        Hooks {
            port: server.port,
            seen,
            _server: server,
        }
    }

    /// The reviews received at `path` for objects named `name`.
    fn reviews(&self, path: &str, name: &str) -> Vec<Value> {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, r)| p == path && r["request"]["name"] == name)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

/// A JSON patch setting `field` (`labels` or `annotations`) of `obj` to its map plus
/// `key: value`.
fn patch_meta(obj: &Value, field: &str, key: &str, value: &str) -> String {
    let mut map = obj["metadata"][field].clone();
    if !map.is_object() {
        map = json!({});
    }
    map[key] = json!(value);
    let patch = json!([{ "op": "add", "path": format!("/metadata/{field}"), "value": map }]);
    base64::engine::general_purpose::STANDARD.encode(patch.to_string())
}

/// One AdmissionReview answered, by path.
async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<(String, Value)>>,
) -> Reply {
    let path = req.uri().path().to_owned();
    let (_, body) = webhook_server::read(req).await;
    let review: Value = serde_json::from_slice(&body).unwrap_or_default();
    seen.lock()
        .expect("lock")
        .push((path.clone(), review.clone()));
    let request = &review["request"];
    let obj = &request["object"];
    let name = request["name"].as_str().unwrap_or_default();
    let mut response = json!({ "uid": request["uid"], "allowed": true });
    match path.as_str() {
        "/label" => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch_meta(obj, "labels", "webhook", "added"));
        }
        "/deny" if name.starts_with("denied") => {
            response["allowed"] = json!(false);
            response["status"] =
                json!({ "code": 403, "message": format!("the name {name} is not allowed") });
        }
        "/deny-all" => {
            response["allowed"] = json!(false);
            response["status"] = json!({ "code": 403, "message": "this namespace is hooked" });
        }
        "/allow" => {
            response["warnings"] = json!(["checked by allow.example.com"]);
            response["auditAnnotations"] = json!({ "checked": "yes" });
        }
        "/hang" => tokio::time::sleep(Duration::from_secs(5)).await,
        "/wronguid" => response["uid"] = json!("not-the-uid"),
        "/garbage" => {
            return hyper::Response::new(http_body_util::Full::new(
                hyper::body::Bytes::from_static(b"this is not json"),
            ));
        }
        "/badpatch" => {
            let patch = json!([{ "op": "replace", "path": "/spec/nothing", "value": 1 }]);
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        "/reinvoke-a" => {
            let calls = obj["metadata"]["annotations"]["a-calls"]
                .as_str()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch_meta(
                obj,
                "annotations",
                "a-calls",
                &(calls + 1).to_string()
            ));
        }
        "/reinvoke-b" if obj["metadata"]["labels"]["b"].is_null() => {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(patch_meta(obj, "labels", "b", "added"));
        }
        _ => {}
    }
    let out = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    webhook_server::json_reply(&out)
}

/// A cluster whose serving certificate is also valid for `labeler.hooks.svc`, the webhook
/// server serving it, and the cluster CA as a caBundle.
fn cluster() -> (tempfile::TempDir, ServerProcess, Hooks, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let init = std::process::Command::new(e2e::capstan_bin())
        .args(["certs", "init", "--data-dir"])
        .arg(&data)
        .arg("--apiserver-cert-extra-sans=labeler.hooks.svc")
        .output()
        .expect("capstan certs init");
    assert!(init.status.success(), "{init:?}");
    let s = ServerProcess::start(&data).expect("server starts");
    let pki = data.join("pki");
    let hooks = Hooks::start(&pki.join("apiserver.crt"), &pki.join("apiserver.key"));
    let ca = std::fs::read(pki.join("ca.crt")).expect("ca.crt");
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    (dir, s, hooks, ca_bundle)
}

/// One webhook entry of a configuration.
struct Entry<'a> {
    name: &'a str,
    client: String,
    resources: &'a str,
    extra: &'a str,
}

/// A webhook configuration of `kind` (`Mutating` or `Validating`) with `entries`.
fn configuration(kind: &str, name: &str, ca: &str, entries: &[Entry<'_>]) -> String {
    let mut yaml = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}WebhookConfiguration\nmetadata:\n  name: {name}\nwebhooks:\n"
    );
    for e in entries {
        yaml.push_str(&format!(
            "- name: {}\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  clientConfig:\n    caBundle: {ca}\n{}\n  rules:\n  - operations: [CREATE, UPDATE]\n    apiGroups: [\"\"]\n    apiVersions: [v1]\n    resources: [{}]\n{}",
            e.name, e.client, e.resources, e.extra
        ));
    }
    yaml
}

fn url(port: u16, path: &str) -> String {
    format!("    url: https://127.0.0.1:{port}{path}")
}

/// `kubectl apply` of a ConfigMap named `name` in `default` with label `mode: <mode>`, with
/// extra kubectl flags; kubectl's (success, stderr).
fn configmap(s: &ServerProcess, name: &str, mode: &str, flags: &[&str]) -> (bool, String) {
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    mode: {mode}\ndata:\n  a: b\n"
    );
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(flags);
    let (done, _, err) = s
        .kubectl_as(&s.kubeconfig, &args, Some(&yaml))
        .expect("kubectl runs");
    (done, err)
}

#[test]
fn a_mutating_webhook_behind_a_service_labels_pods_and_a_validating_one_denies_a_name() {
    let (_dir, s, hooks, ca) = cluster();
    // A selector-less Service whose hand-written EndpointSlice points at the local server.
    apply(
        &s,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: hooks\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: labeler\n  namespace: hooks\nspec:\n  ports:\n  - name: https\n    port: 443\n    targetPort: {port}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: labeler-1\n  namespace: hooks\n  labels:\n    kubernetes.io/service-name: labeler\naddressType: IPv4\nports:\n- name: https\n  port: {port}\n  protocol: TCP\nendpoints:\n- addresses: [\"127.0.0.1\"]\n  conditions:\n    ready: true\n",
            port = hooks.port
        ),
    );
    apply(
        &s,
        &configuration(
            "Mutating",
            "labeler",
            &ca,
            &[Entry {
                name: "label.example.com",
                client:
                    "    service:\n      namespace: hooks\n      name: labeler\n      path: /label"
                        .into(),
                resources: "pods",
                extra: "",
            }],
        ),
    );
    apply(
        &s,
        &configuration(
            "Validating",
            "denier",
            &ca,
            &[
                Entry {
                    name: "deny.example.com",
                    client: url(hooks.port, "/deny"),
                    resources: "configmaps",
                    extra: "",
                },
                // Side effects: refused for dry runs; only for objects labelled mode=sidefx.
                Entry {
                    name: "sidefx.example.com",
                    client: url(hooks.port, "/allow"),
                    resources: "configmaps",
                    extra: "  objectSelector:\n    matchLabels:\n      mode: sidefx\n",
                },
                // Only in namespaces labelled hooked=true.
                Entry {
                    name: "ns.example.com",
                    client: url(hooks.port, "/deny-all"),
                    resources: "configmaps",
                    extra: "  namespaceSelector:\n    matchLabels:\n      hooked: \"true\"\n",
                },
            ],
        ),
    );
    // sidefx.example.com declares side effects.
    let sidefx =
        json!([{ "op": "replace", "path": "/webhooks/1/sideEffects", "value": "Unknown" }]);
    ok(
        &s,
        &[
            "patch",
            "validatingwebhookconfiguration",
            "denier",
            "--type=json",
            "-p",
            &sidefx.to_string(),
        ],
    );

    // The mutating webhook, reached through the Service, labels the pod.
    ok(&s, &["run", "p1", "--image=nginx", "--labels=app=p1"]);
    let pod: Value =
        serde_json::from_str(&ok(&s, &["get", "pod", "p1", "-o", "json"])).expect("JSON");
    assert_eq!(
        pod["metadata"]["labels"],
        json!({ "app": "p1", "webhook": "added" })
    );
    let review = &hooks.reviews("/label", "p1")[0];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["request"]["operation"], "CREATE");
    assert_eq!(
        review["request"]["kind"],
        json!({ "group": "", "version": "v1", "kind": "Pod" })
    );
    assert_eq!(
        review["request"]["userInfo"]["username"],
        "kubernetes-admin"
    );
    assert_eq!(review["request"]["dryRun"], false);

    // The validating webhook denies a name with upstream's text.
    let (created, _, err) = s
        .kubectl(&["create", "configmap", "denied-1", "--from-literal=a=b"])
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains(
            "admission webhook \"deny.example.com\" denied the request: the name denied-1 is not allowed"
        ),
        "{err}"
    );
    ok(&s, &["create", "configmap", "fine", "--from-literal=a=b"]);
    // Dry runs reach webhooks without side effects (and are denied the same) …
    let (created, _, err) = s
        .kubectl(&[
            "create",
            "configmap",
            "denied-2",
            "--from-literal=a=b",
            "--dry-run=server",
        ])
        .expect("kubectl runs");
    assert!(!created && err.contains("denied the request"), "{err}");
    assert_eq!(
        hooks.reviews("/deny", "denied-2")[0]["request"]["dryRun"],
        true
    );
    // … and are refused by webhooks with side effects, which still see real requests.
    let (done, err) = configmap(&s, "effects", "sidefx", &["--dry-run=server"]);
    assert!(!done);
    assert!(
        err.contains("admission webhook \"sidefx.example.com\" does not support dry run"),
        "{err}"
    );
    assert!(hooks.reviews("/allow", "effects").is_empty());
    let (done, err) = configmap(&s, "effects", "sidefx", &[]);
    assert!(done, "{err}");
    assert!(
        err.contains("Warning: checked by allow.example.com"),
        "{err}"
    );
    assert_eq!(hooks.reviews("/allow", "effects").len(), 1);
    // The object selector: other objects never reach it.
    assert!(hooks.reviews("/allow", "fine").is_empty());

    // The namespace selector.
    ok(&s, &["create", "namespace", "plain"]);
    ok(&s, &["create", "namespace", "guarded"]);
    ok(&s, &["label", "namespace", "guarded", "hooked=true"]);
    ok(
        &s,
        &[
            "create",
            "configmap",
            "c",
            "-n",
            "plain",
            "--from-literal=a=b",
        ],
    );
    let (created, _, err) = s
        .kubectl(&[
            "create",
            "configmap",
            "c",
            "-n",
            "guarded",
            "--from-literal=a=b",
        ])
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains(
            "admission webhook \"ns.example.com\" denied the request: this namespace is hooked"
        ),
        "{err}"
    );

    // CONNECT: kubectl exec is refused by a webhook on pods/exec.
    apply(
        &s,
        &configuration(
            "Validating",
            "no-exec",
            &ca,
            &[Entry {
                name: "exec.example.com",
                client: url(hooks.port, "/deny-all"),
                resources: "pods/exec",
                extra: "",
            }],
        )
        .replace("operations: [CREATE, UPDATE]", "operations: [CONNECT]"),
    );
    let (execed, _, err) = s
        .kubectl(&["exec", "p1", "--", "ls"])
        .expect("kubectl runs");
    assert!(!execed);
    assert!(
        err.contains("admission webhook \"exec.example.com\" denied the request"),
        "{err}"
    );
    let review = &hooks.reviews("/deny-all", "p1")[0];
    assert_eq!(review["request"]["operation"], "CONNECT");
    assert_eq!(review["request"]["subResource"], "exec");
    assert_eq!(review["request"]["object"]["kind"], "PodExecOptions");
    assert_eq!(review["request"]["object"]["command"], json!(["ls"]));

    // Custom resources too.
    apply(
        &s,
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names:\n    plural: gadgets\n    singular: gadget\n    kind: Gadget\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n",
    );
    ok(
        &s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/gadgets.example.com",
        ],
    );
    apply(
        &s,
        &configuration(
            "Validating",
            "gadgets",
            &ca,
            &[Entry {
                name: "gadgets.example.com",
                client: url(hooks.port, "/deny"),
                resources: "gadgets",
                extra: "",
            }],
        )
        .replace("apiGroups: [\"\"]", "apiGroups: [example.com]"),
    );
    let gadget = |name: &str| {
        format!(
            "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: {name}\n  namespace: default\n"
        )
    };
    apply(&s, &gadget("fine-gadget"));
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["apply", "-f", "-"],
            Some(&gadget("denied-gadget")),
        )
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains("admission webhook \"gadgets.example.com\" denied the request: the name denied-gadget is not allowed"),
        "{err}"
    );
    let review = &hooks.reviews("/deny", "denied-gadget")[0];
    assert_eq!(
        review["request"]["kind"],
        json!({ "group": "example.com", "version": "v1", "kind": "Gadget" })
    );

    // Deletes: the stored object is the oldObject.
    apply(
        &s,
        &configuration(
            "Validating",
            "keeper",
            &ca,
            &[Entry {
                name: "keep.example.com",
                client: url(hooks.port, "/deny-all"),
                resources: "configmaps",
                extra: "  objectSelector:\n    matchLabels:\n      mode: keep\n",
            }],
        )
        .replace("operations: [CREATE, UPDATE]", "operations: [DELETE]"),
    );
    let (done, err) = configmap(&s, "kept", "keep", &[]);
    assert!(done, "{err}");
    let (deleted, _, err) = s
        .kubectl(&["delete", "configmap", "kept"])
        .expect("kubectl runs");
    assert!(!deleted);
    assert!(
        err.contains("admission webhook \"keep.example.com\" denied the request"),
        "{err}"
    );
    let review = &hooks.reviews("/deny-all", "kept")[0];
    assert_eq!(review["request"]["operation"], "DELETE");
    assert_eq!(review["request"]["oldObject"]["metadata"]["name"], "kept");
    assert_eq!(review["request"]["options"]["kind"], "DeleteOptions");

    // Deleting the configuration takes effect at once.
    ok(&s, &["delete", "validatingwebhookconfiguration", "denier"]);
    ok(
        &s,
        &["create", "configmap", "denied-3", "--from-literal=a=b"],
    );

    let metrics = ok(&s, &["get", "--raw", "/metrics"]);
    assert!(
        metrics.lines().any(
            |l| l.starts_with("apiserver_admission_webhook_rejection_count{")
                && l.contains("name=\"deny.example.com\"")
                && l.contains("rejection_code=\"403\"")
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("apiserver_admission_webhook_admission_duration_seconds_bucket{"),
        "{metrics}"
    );
}

#[test]
fn broken_webhooks_fail_closed_or_open_as_their_failure_policy_says() {
    let (_dir, s, hooks, ca) = cluster();
    let down = e2e::free_port();
    let entry = |name: &'static str, client: String, mode: &str, extra: &str| {
        (
            name,
            client,
            format!("  objectSelector:\n    matchLabels:\n      mode: {mode}\n{extra}"),
        )
    };
    let validating = [
        entry("down-fail.example.com", url(down, "/x"), "down-fail", ""),
        entry(
            "down-ignore.example.com",
            url(down, "/x"),
            "down-ignore",
            "  failurePolicy: Ignore\n",
        ),
        entry(
            "hang.example.com",
            url(hooks.port, "/hang"),
            "hang",
            "  timeoutSeconds: 1\n",
        ),
        entry(
            "hang-ignore.example.com",
            url(hooks.port, "/hang"),
            "hang-ignore",
            "  timeoutSeconds: 1\n  failurePolicy: Ignore\n",
        ),
        entry(
            "wronguid.example.com",
            url(hooks.port, "/wronguid"),
            "wronguid",
            "",
        ),
        entry(
            "cond.example.com",
            url(hooks.port, "/deny-all"),
            "cond",
            "  matchConditions:\n  - name: prefixed\n    expression: \"object.metadata.name.startsWith('cond-')\"\n",
        ),
        entry(
            "garbage.example.com",
            url(hooks.port, "/garbage"),
            "garbage",
            "",
        ),
    ];
    let entries: Vec<Entry<'_>> = validating
        .iter()
        .map(|(name, client, extra)| Entry {
            name,
            client: client.clone(),
            resources: "configmaps",
            extra,
        })
        .collect();
    apply(&s, &configuration("Validating", "broken", &ca, &entries));
    let mutating = [
        entry(
            "badpatch.example.com",
            url(hooks.port, "/badpatch"),
            "badpatch",
            "  failurePolicy: Ignore\n",
        ),
        entry(
            "a.example.com",
            url(hooks.port, "/reinvoke-a"),
            "reinvoke",
            "  reinvocationPolicy: IfNeeded\n",
        ),
        entry(
            "b.example.com",
            url(hooks.port, "/reinvoke-b"),
            "reinvoke",
            "",
        ),
    ];
    let entries: Vec<Entry<'_>> = mutating
        .iter()
        .map(|(name, client, extra)| Entry {
            name,
            client: client.clone(),
            resources: "configmaps",
            extra,
        })
        .collect();
    apply(&s, &configuration("Mutating", "patchers", &ca, &entries));

    // A webhook that refuses connections: upstream's 500 with Fail, through with Ignore.
    let (done, err) = configmap(&s, "a", "down-fail", &[]);
    assert!(!done);
    let refused = format!(
        "Internal error occurred: failed calling webhook \"down-fail.example.com\": failed to call webhook: Post \"https://127.0.0.1:{down}/x?timeout=10s\": dial tcp 127.0.0.1:{down}: connect: connection refused"
    );
    assert!(err.contains(&refused), "{err}");
    let (done, err) = configmap(&s, "b", "down-ignore", &[]);
    assert!(done, "{err}");

    // A webhook that hangs: the request waits its timeoutSeconds, no longer.
    let started = Instant::now();
    let (done, err) = configmap(&s, "c", "hang", &[]);
    assert!(!done);
    assert!(
        err.contains(&format!(
            "failed calling webhook \"hang.example.com\": failed to call webhook: Post \"https://127.0.0.1:{}/hang?timeout=1s\": context deadline exceeded",
            hooks.port
        )),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let (done, err) = configmap(&s, "d", "hang-ignore", &[]);
    assert!(done, "{err}");
    assert!(started.elapsed() < Duration::from_secs(4));

    // Answers for another uid, and garbage.
    let (done, err) = configmap(&s, "e", "wronguid", &[]);
    assert!(!done);
    assert!(
        err.contains("failed calling webhook \"wronguid.example.com\": received invalid webhook response: expected response.uid="),
        "{err}"
    );
    let (done, err) = configmap(&s, "f", "garbage", &[]);
    assert!(!done);
    assert!(
        err.contains("failed calling webhook \"garbage.example.com\": failed to call webhook: couldn't get version/kind"),
        "{err}"
    );

    // matchConditions: the webhook is called only when they all hold.
    let (done, err) = configmap(&s, "cond-1", "cond", &[]);
    assert!(!done);
    assert!(
        err.contains("admission webhook \"cond.example.com\" denied the request"),
        "{err}"
    );
    let (done, err) = configmap(&s, "plain-1", "cond", &[]);
    assert!(done, "{err}");
    assert!(hooks.reviews("/deny-all", "plain-1").is_empty());
    assert_eq!(hooks.reviews("/deny-all", "cond-1").len(), 1);

    // A patch that does not apply fails even with failurePolicy Ignore.
    let (done, err) = configmap(&s, "g", "badpatch", &[]);
    assert!(!done);
    assert!(err.contains("Internal error occurred"), "{err}");

    // Reinvocation: a (IfNeeded) is called again after b changed the object.
    let (done, err) = configmap(&s, "h", "reinvoke", &[]);
    assert!(done, "{err}");
    let cm: Value =
        serde_json::from_str(&ok(&s, &["get", "configmap", "h", "-o", "json"])).expect("JSON");
    assert_eq!(cm["metadata"]["annotations"]["a-calls"], "2");
    assert_eq!(cm["metadata"]["labels"]["b"], "added");
    let a = hooks.reviews("/reinvoke-a", "h");
    assert_eq!(a.len(), 2);
    assert_eq!(
        a[1]["request"]["object"]["metadata"]["labels"]["b"],
        "added"
    );
    assert_eq!(hooks.reviews("/reinvoke-b", "h").len(), 1);
}

#[test]
fn subresource_creates_eviction_binding_and_token_reach_the_webhooks() {
    let (_dir, s, hooks, ca) = cluster();
    apply(
        &s,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: subs\n  labels:\n    subs: \"true\"\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\n  namespace: subs\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: victim\n  namespace: subs\nspec:\n  containers:\n  - name: c\n    image: nginx\n",
    );
    apply(
        &s,
        &configuration(
            "Validating",
            "subresources",
            &ca,
            &[Entry {
                name: "sub.example.com",
                client: url(hooks.port, "/deny-all"),
                resources: "pods/eviction, pods/binding, serviceaccounts/token",
                extra: "  namespaceSelector:\n    matchLabels:\n      subs: \"true\"\n",
            }],
        ),
    );
    let denied =
        "admission webhook \"sub.example.com\" denied the request: this namespace is hooked";
    // Configuration changes take effect within a second: poll with a deadline.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (created, _, err) = s
            .kubectl(&["create", "token", "robot", "-n", "subs"])
            .expect("kubectl runs");
        if !created {
            assert!(err.contains(denied), "{err}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "token requests never reached the webhook"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let raw = |path: &str, body: &str| {
        s.kubectl_as(
            &s.kubeconfig,
            &["create", "--raw", path, "-f", "-"],
            Some(body),
        )
        .expect("kubectl runs")
    };
    let (evicted, _, err) = raw(
        "/api/v1/namespaces/subs/pods/victim/eviction",
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"victim","namespace":"subs"}}"#,
    );
    assert!(!evicted, "eviction went through");
    assert!(err.contains(denied), "{err}");
    let (bound, _, err) = raw(
        "/api/v1/namespaces/subs/pods/victim/binding",
        r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"victim"},"target":{"apiVersion":"v1","kind":"Node","name":"nowhere"}}"#,
    );
    assert!(!bound, "binding went through");
    assert!(err.contains(denied), "{err}");
    // The pod is still there, unbound.
    let pod = e2e::cli::json(&s, &["get", "pod", "victim", "-n", "subs", "-o", "json"]);
    assert!(pod["spec"]["nodeName"].is_null(), "{pod}");

    // What the webhook was sent: CREATE on the parent resource with the subresource, and
    // the subresource's own kind and object.
    let review = |name: &str, sub: &str| {
        hooks
            .reviews("/deny-all", name)
            .into_iter()
            .find(|r| r["request"]["subResource"] == sub)
            .unwrap_or_else(|| panic!("no {sub} review for {name}"))
    };
    let eviction = review("victim", "eviction");
    let request = &eviction["request"];
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["namespace"], "subs");
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(
        request["kind"],
        json!({"group": "policy", "version": "v1", "kind": "Eviction"})
    );
    assert_eq!(request["object"]["kind"], "Eviction");
    let binding = review("victim", "binding");
    assert_eq!(
        binding["request"]["kind"],
        json!({"group": "", "version": "v1", "kind": "Binding"})
    );
    assert_eq!(binding["request"]["object"]["target"]["name"], "nowhere");
    let token = review("robot", "token");
    assert_eq!(
        token["request"]["kind"],
        json!({"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"})
    );
    assert_eq!(token["request"]["resource"]["resource"], "serviceaccounts");
}
