//! CRD conversion through a webhook (`spec.conversion.strategy: Webhook`) with stock kubectl
//! against the real binary: a conversion webhook written here (hyper + rustls, serving the
//! cluster's own apiserver certificate, trusted through `caBundle`) converts Widgets between
//! `example.com/v1` (`spec.size`, the storage version) and `example.com/v2`
//! (`spec.dimensions.size`). Writes and reads at either version see their own shape, lists
//! are converted in one review, watches per event, and with the webhook gone a read at v2
//! fails with upstream's message while v1 still reads.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use e2e::ServerProcess;
use e2e::cli::{apply, ok, wait_for};
use e2e::webhook_server::{self, Reply, WebhookServer};
use serde_json::{Value, json};

/// The conversion webhook: the number of objects of each review it answered.
struct Webhook {
    port: u16,
    reviews: Arc<Mutex<Vec<usize>>>,
    server: WebhookServer,
}

impl Webhook {
    /// Serves `/convert` over TLS with `cert`/`key` (PEM files) on a free 127.0.0.1 port.
    fn start(cert: &std::path::Path, key: &std::path::Path) -> Webhook {
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&reviews);
        let server = WebhookServer::start(cert.to_owned(), key.to_owned(), 2, move |req| {
            let seen = Arc::clone(&seen);
            async move { answer(req, &seen).await }
        })
        .expect("webhook server");
        Webhook {
            port: server.port,
            reviews,
            server,
        }
    }

    /// Stops serving: the port refuses connections from now on.
    fn stop(&mut self) {
        self.server.stop();
    }
}

/// One ConversionReview answered: v1 `spec.size` ↔ v2 `spec.dimensions.size`.
async fn answer(req: hyper::Request<hyper::body::Incoming>, seen: &Mutex<Vec<usize>>) -> Reply {
    let (_, body) = webhook_server::read(req).await;
    let review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let objects = request["objects"].as_array().cloned().unwrap_or_default();
    seen.lock().expect("lock").push(objects.len());
    let converted: Vec<Value> = objects
        .into_iter()
        .map(|mut o| {
            let spec = o["spec"].take();
            o["spec"] = match desired {
                "example.com/v2" => {
                    let mut s = spec;
                    if let Some(m) = s.as_object_mut() {
                        let size = m.remove("size").unwrap_or(json!(0));
                        m.insert("dimensions".into(), json!({ "size": size }));
                    }
                    s
                }
                _ => {
                    let mut s = spec;
                    if let Some(m) = s.as_object_mut() {
                        let size = m
                            .remove("dimensions")
                            .and_then(|d| d.get("size").cloned())
                            .unwrap_or(json!(0));
                        m.insert("size".into(), size);
                    }
                    s
                }
            };
            o["apiVersion"] = json!(desired);
            o
        })
        .collect();
    let out = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": request["uid"],
            "convertedObjects": converted,
            "result": { "status": "Success" },
        },
    });
    webhook_server::json_reply(&out)
}

fn crd(port: u16, ca_bundle: &str) -> String {
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        url: https://127.0.0.1:{port}/convert
        caBundle: {ca_bundle}
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
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              dimensions:
                type: object
                properties:
                  size:
                    type: integer
"#
    )
}

fn get(s: &ServerProcess, resource: &str, name: &str) -> Value {
    serde_json::from_str(&ok(s, &["get", resource, name, "-o", "json"])).expect("JSON")
}

#[test]
fn a_conversion_webhook_converts_reads_writes_lists_and_watches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let s = ServerProcess::start(&data).expect("server starts");
    // The webhook serves the cluster's apiserver certificate (valid for 127.0.0.1), trusted
    // through the cluster CA as caBundle.
    let pki = data.join("pki");
    let mut hook = Webhook::start(&pki.join("apiserver.crt"), &pki.join("apiserver.key"));
    let ca = std::fs::read(pki.join("ca.crt")).expect("ca.crt");
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    apply(&s, &crd(hook.port, &ca_bundle));
    ok(
        &s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/widgets.example.com",
        ],
    );

    // Written at either version, stored at v1, read back in each version's shape.
    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\n  namespace: default\nspec:\n  size: 3\n",
    );
    apply(
        &s,
        "apiVersion: example.com/v2\nkind: Widget\nmetadata:\n  name: b\n  namespace: default\n  labels:\n    shape: v2\nspec:\n  dimensions:\n    size: 5\n",
    );
    let a1 = get(&s, "widgets.v1.example.com", "a");
    assert_eq!(a1["apiVersion"], "example.com/v1");
    assert_eq!(a1["spec"], json!({ "size": 3 }));
    let b1 = get(&s, "widgets.v1.example.com", "b");
    assert_eq!(b1["spec"], json!({ "size": 5 }));
    assert_eq!(b1["metadata"]["labels"], json!({ "shape": "v2" }));
    let a2 = get(&s, "widgets.v2.example.com", "a");
    assert_eq!(a2["apiVersion"], "example.com/v2");
    assert_eq!(a2["spec"], json!({ "dimensions": { "size": 3 } }));
    assert_eq!(a2["metadata"]["uid"], a1["metadata"]["uid"]);
    assert_eq!(
        a2["metadata"]["resourceVersion"],
        a1["metadata"]["resourceVersion"]
    );

    // A list at v2 is converted in one review of both objects.
    hook.reviews.lock().expect("lock").clear();
    let list: Value =
        serde_json::from_str(&ok(&s, &["get", "widgets.v2.example.com", "-o", "json"]))
            .expect("JSON");
    let sizes: Vec<&Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| &i["spec"]["dimensions"]["size"])
        .collect();
    assert_eq!(sizes, [&json!(3), &json!(5)]);
    assert_eq!(*hook.reviews.lock().expect("lock"), [2]);

    // A watch at v2 converts each event.
    let mut watch = s
        .kubectl_spawn(&[
            "get",
            "widgets.v2.example.com",
            "--watch",
            "--no-headers",
            "-o",
            "custom-columns=NAME:.metadata.name,SIZE:.spec.dimensions.size",
            "--request-timeout=30s",
        ])
        .expect("kubectl watch");
    std::thread::sleep(Duration::from_millis(700));
    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\n  namespace: default\nspec:\n  size: 4\n",
    );
    let stdout = watch.stdout.take().expect("stdout");
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(3)
            .collect::<Vec<_>>()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lines.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let lines: Vec<String> = lines
        .join()
        .expect("reader")
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(lines, ["a 3", "b 5", "a 4"]);

    // The webhook gone: reads and writes at v2 fail with upstream's 500, nothing is written,
    // and the storage version still reads.
    hook.stop();
    let refused = format!(
        "Post \"https://127.0.0.1:{}/convert?timeout=30s\": dial tcp 127.0.0.1:{}: connect: connection refused",
        hook.port, hook.port
    );
    let (read, _, err) = s
        .kubectl(&["get", "widgets.v2.example.com", "a", "-o", "json"])
        .expect("kubectl runs");
    assert!(!read);
    assert!(
        err.contains(&format!(
            "conversion webhook for example.com/v1, Kind=Widget failed: {refused}"
        )),
        "{err}"
    );
    let (raw, _, err) = s
        .kubectl(&[
            "get",
            "--raw",
            "/apis/example.com/v2/namespaces/default/widgets",
        ])
        .expect("kubectl runs");
    assert!(!raw);
    // Upstream's 500 without a reason: kubectl names none.
    assert!(
        err.contains(
            "Error from server: conversion webhook for example.com/v1, Kind=WidgetList failed"
        ),
        "{err}"
    );
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some(
                "apiVersion: example.com/v2\nkind: Widget\nmetadata:\n  name: c\n  namespace: default\nspec:\n  dimensions:\n    size: 1\n",
            ),
        )
        .expect("kubectl runs");
    assert!(!created);
    assert!(
        err.contains(&format!(
            "conversion webhook for example.com/v2, Kind=Widget failed: {refused}"
        )),
        "{err}"
    );
    let (found, _, _) = s
        .kubectl(&["get", "widgets.v1.example.com", "c"])
        .expect("kubectl runs");
    assert!(!found, "nothing is stored when conversion fails");
    let a1 = wait_for(&s, 5, "a at v1", || {
        Some(get(&s, "widgets.v1.example.com", "a"))
    });
    assert_eq!(a1["spec"], json!({ "size": 4 }));
}
