//! API aggregation with stock kubectl against the real binary. The extension API server is
//! written here (hyper + rustls, HTTP/2 and HTTP/1.1): it serves the group
//! `wardle.example.com/v1alpha1` (namespaced `flunders`) from memory, with the cluster's
//! serving certificate (issued beforehand with the extra name `api.wardle.svc`, so the
//! APIService's `caBundle` is the cluster CA), and authenticates as an extension server
//! does: the request headers `X-Remote-User`/`X-Remote-Group` count only from a client whose
//! certificate the request-header CA published in `kube-system/extension-apiserver-
//! authentication` signed, with an allowed common name; anything else is a 401. It is
//! registered through a selector-less Service and a hand-written EndpointSlice to 127.0.0.1.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use e2e::ServerProcess;
use e2e::cli::{apply, json, ok, wait_for};
use serde_json::{Value, json};

/// What the extension server saw: (method, path, user, groups) of authenticated requests.
type Seen = Arc<Mutex<Vec<(String, String, String, Vec<String>)>>>;

/// The flunders stored, by (namespace, name).
type Flunders = Arc<Mutex<Vec<((String, String), Value)>>>;

/// The in-test extension API server.
struct Wardle {
    port: u16,
    seen: Seen,
    flunders: Flunders,
    config: Arc<rustls::ServerConfig>,
    allowed: Vec<String>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    runtime: tokio::runtime::Runtime,
}

const GROUP: &str = "wardle.example.com";
const VERSION: &str = "v1alpha1";

impl Wardle {
    /// The server, not yet listening: TLS with `cert`/`key`, client certificates verified
    /// against `requestheader_ca` (PEM), `allowed` common names.
    fn new(
        cert: &std::path::Path,
        key: &std::path::Path,
        requestheader_ca: &str,
        allowed: Vec<String>,
    ) -> Wardle {
        use rustls::pki_types::pem::PemObject as _;
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(cert)
            .expect("cert")
            .map(|c| c.expect("cert"))
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).expect("key");
        let mut roots = rustls::RootCertStore::empty();
        for ca in rustls::pki_types::CertificateDer::pem_slice_iter(requestheader_ca.as_bytes()) {
            roots.add(ca.expect("ca")).expect("root");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .allow_unauthenticated()
        .build()
        .expect("verifier");
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .expect("server config");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let port = e2e::free_port();
        Wardle {
            port,
            seen: Arc::default(),
            flunders: Arc::default(),
            config: Arc::new(config),
            allowed,
            tasks: Arc::default(),
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        }
    }

    /// Starts listening on its port.
    fn start(&self) {
        let listener = self
            .runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", self.port)))
            .expect("bind");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config));
        let (seen, flunders, allowed, tasks) = (
            Arc::clone(&self.seen),
            Arc::clone(&self.flunders),
            self.allowed.clone(),
            Arc::clone(&self.tasks),
        );
        let accept = self.runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let (seen, flunders, allowed) =
                    (Arc::clone(&seen), Arc::clone(&flunders), allowed.clone());
                let conn = tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    // The client certificate verified against the request-header CA (the
                    // verifier refused any other), and its common name.
                    let proxy_ok = tls.get_ref().1.peer_certificates().is_some_and(|chain| {
                        chain.first().is_some_and(|leaf| {
                            allowed
                                .iter()
                                .any(|n| leaf.as_ref().windows(n.len()).any(|w| w == n.as_bytes()))
                        })
                    });
                    let service = hyper::service::service_fn(move |req| {
                        let (seen, flunders) = (Arc::clone(&seen), Arc::clone(&flunders));
                        async move { answer(req, proxy_ok, &seen, &flunders).await }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
                tasks.lock().expect("lock").push(conn);
            }
        });
        self.tasks.lock().expect("lock").push(accept);
    }

    /// Stops listening and drops every connection.
    fn stop(&self) {
        for t in self.tasks.lock().expect("lock").drain(..) {
            t.abort();
        }
        // Let the aborted tasks drop their sockets.
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    /// Authenticated requests seen for paths containing `fragment`.
    fn seen(&self, fragment: &str) -> Vec<(String, String, String, Vec<String>)> {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, p, _, _)| p.contains(fragment))
            .cloned()
            .collect()
    }
}

type Body = http_body_util::combinators::BoxBody<hyper::body::Bytes, std::convert::Infallible>;
type Reply = hyper::Response<Body>;

fn full(bytes: impl Into<hyper::body::Bytes>) -> Body {
    use http_body_util::BodyExt as _;
    http_body_util::Full::new(bytes.into()).boxed()
}

/// A watch: `events` at once, then the stream stays open for 30 s.
fn watch_stream(events: Vec<Value>) -> Result<Reply, std::convert::Infallible> {
    use futures_util::StreamExt as _;
    let lines: Vec<Result<hyper::body::Frame<hyper::body::Bytes>, std::convert::Infallible>> =
        events
            .into_iter()
            .map(|e| {
                Ok(hyper::body::Frame::data(hyper::body::Bytes::from(format!(
                    "{e}\n"
                ))))
            })
            .collect();
    let stream = futures_util::stream::iter(lines).chain(futures_util::stream::once(async {
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        Ok(hyper::body::Frame::data(hyper::body::Bytes::new()))
    }));
    Ok(hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(stream),
        ))
        .expect("response"))
}

fn reply(status: u16, body: &Value) -> Result<Reply, std::convert::Infallible> {
    Ok(hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .expect("response"))
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code })
}

/// One request to the extension server.
async fn answer(
    mut req: hyper::Request<hyper::body::Incoming>,
    proxy_ok: bool,
    seen: &Seen,
    flunders: &Flunders,
) -> Result<Reply, std::convert::Infallible> {
    use http_body_util::BodyExt as _;
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let user = req
        .headers()
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let groups: Vec<String> = req
        .headers()
        .get_all("x-remote-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let (true, Some(user)) = (proxy_ok, user) else {
        return reply(401, &status(401, "Unauthorized", "Unauthorized"));
    };
    seen.lock()
        .expect("lock")
        .push((method.clone(), path.clone(), user.clone(), groups));
    let base = format!("/apis/{GROUP}/{VERSION}");
    if let Some(doc) = openapi_document(&path) {
        return reply(200, &doc);
    }
    if path == base {
        return reply(
            200,
            &json!({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
                "resources": [{ "name": "flunders", "singularName": "flunder", "namespaced": true,
                    "kind": "Flunder", "shortNames": ["fl"],
                    "verbs": ["create", "delete", "get", "list"] }],
            }),
        );
    }
    let Some(rest) = path.strip_prefix(&format!("{base}/namespaces/")) else {
        return reply(
            404,
            &status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        );
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let ns = parts[0].to_owned();
    match (method.as_str(), parts.as_slice()) {
        ("GET", [_, "flunders"]) => {
            let items: Vec<Value> = flunders
                .lock()
                .expect("lock")
                .iter()
                .filter(|((n, _), _)| *n == ns)
                .map(|(_, v)| v.clone())
                .collect();
            if query
                .split('&')
                .any(|kv| kv == "watch=true" || kv == "watch=1")
            {
                return watch_stream(
                    items
                        .into_iter()
                        .map(|o| json!({ "type": "ADDED", "object": o }))
                        .collect(),
                );
            }
            reply(
                200,
                &json!({ "kind": "FlunderList", "apiVersion": format!("{GROUP}/{VERSION}"),
                         "metadata": { "resourceVersion": "1" }, "items": items }),
            )
        }
        ("POST", [_, "flunders"]) => {
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let Ok(mut obj) = serde_json::from_slice::<Value>(&body) else {
                return reply(400, &status(400, "BadRequest", "not JSON"));
            };
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
            obj["metadata"]["namespace"] = json!(ns);
            obj["metadata"]["uid"] = json!(format!("uid-{name}"));
            obj["metadata"]["resourceVersion"] = json!("1");
            obj["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
            obj["metadata"]["annotations"] = json!({ "wardle.example.com/created-by": user });
            let mut store = flunders.lock().expect("lock");
            if store.iter().any(|((n, m), _)| *n == ns && *m == name) {
                return reply(
                    409,
                    &status(
                        409,
                        "AlreadyExists",
                        &format!("flunders.{GROUP} \"{name}\" already exists"),
                    ),
                );
            }
            store.push(((ns, name), obj.clone()));
            reply(201, &obj)
        }
        ("GET", [_, "flunders", _, "echo"]) if req.headers().contains_key("upgrade") => {
            // An exec-style upgrade: after the 101, every byte is echoed.
            let upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(upgraded) = upgrade.await else {
                    return;
                };
                let (mut r, mut w) = tokio::io::split(hyper_util::rt::TokioIo::new(upgraded));
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
            Ok(hyper::Response::builder()
                .status(101)
                .header("connection", "Upgrade")
                .header("upgrade", "test-echo")
                .body(full(""))
                .expect("response"))
        }
        ("GET", [_, "flunders", "hang"]) => {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            reply(200, &json!({}))
        }
        ("GET", [_, "flunders", name]) => {
            match flunders
                .lock()
                .expect("lock")
                .iter()
                .find(|((n, m), _)| *n == ns && m == name)
            {
                Some((_, v)) => reply(200, v),
                None => reply(
                    404,
                    &status(
                        404,
                        "NotFound",
                        &format!("flunders.{GROUP} \"{name}\" not found"),
                    ),
                ),
            }
        }
        _ => reply(405, &status(405, "MethodNotAllowed", "not allowed")),
    }
}

/// The Flunder schema (OpenAPI v3 / Swagger 2.0 alike), with the GVK kubectl explain needs.
fn flunder_schema() -> Value {
    json!({
        "description": "Flunder is a wardle creature kept by the test's extension server.",
        "type": "object",
        "properties": {
            "apiVersion": { "type": "string", "description": "APIVersion of the flunder." },
            "kind": { "type": "string", "description": "Kind of the flunder." },
            "metadata": { "type": "object", "description": "Standard object metadata." },
            "spec": {
                "type": "object",
                "description": "What the flunder looks like.",
                "properties": {
                    "color": { "type": "string", "description": "The flunder's colour, as the wardle sees it." }
                }
            }
        },
        "x-kubernetes-group-version-kind": [{ "group": GROUP, "version": VERSION, "kind": "Flunder" }]
    })
}

/// The server's OpenAPI documents: `/openapi/v2`, the v3 root, the v3 group version.
fn openapi_document(path: &str) -> Option<Value> {
    let def = "com.example.wardle.v1alpha1.Flunder";
    let list_path = format!("/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/flunders");
    match path {
        "/openapi/v2" => Some(json!({
            "swagger": "2.0",
            "info": { "title": "Wardle", "version": "v0" },
            "paths": {
                list_path: { "get": {
                    "operationId": "listWardleV1alpha1NamespacedFlunder",
                    "responses": { "200": { "description": "OK", "schema": { "$ref": format!("#/definitions/{def}") } } },
                    "x-kubernetes-action": "list",
                    "x-kubernetes-group-version-kind": { "group": GROUP, "version": VERSION, "kind": "Flunder" }
                } },
                "/version/": { "get": { "operationId": "getCodeVersion", "responses": { "200": { "description": "OK" } } } }
            },
            "definitions": { def: flunder_schema() }
        })),
        "/openapi/v3" => Some(json!({ "paths": {
            format!("apis/{GROUP}/{VERSION}"): {
                "serverRelativeURL": format!("/openapi/v3/apis/{GROUP}/{VERSION}?hash=WARDLE1")
            }
        } })),
        p if p == format!("/openapi/v3/apis/{GROUP}/{VERSION}") => Some(json!({
            "openapi": "3.0.0",
            "info": { "title": "Wardle", "version": "v0" },
            "paths": {
                list_path: { "get": {
                    "operationId": "listWardleV1alpha1NamespacedFlunder",
                    "responses": { "200": { "description": "OK", "content": { "application/json": {
                        "schema": { "$ref": format!("#/components/schemas/{def}") } } } } },
                    "x-kubernetes-action": "list",
                    "x-kubernetes-group-version-kind": { "group": GROUP, "version": VERSION, "kind": "Flunder" }
                } }
            },
            "components": { "schemas": { def: flunder_schema() } }
        })),
        _ => None,
    }
}

/// A bare cluster whose serving certificate also names `api.wardle.svc`, the extension
/// server (configured from the published authentication ConfigMap), and the cluster CA.
fn cluster() -> (tempfile::TempDir, ServerProcess, Wardle, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let init = std::process::Command::new(e2e::capstan_bin())
        .args(["certs", "init", "--data-dir"])
        .arg(&data)
        .arg("--apiserver-cert-extra-sans=api.wardle.svc")
        .output()
        .expect("capstan certs init");
    assert!(init.status.success(), "{init:?}");
    let s = ServerProcess::start(&data).expect("server starts");
    let cm = wait_for(&s, 20, "extension-apiserver-authentication", || {
        let (found, out, _) = s
            .kubectl(&[
                "get",
                "configmap",
                "-n",
                "kube-system",
                "extension-apiserver-authentication",
                "-o",
                "json",
            ])
            .expect("kubectl");
        found.then(|| serde_json::from_str::<Value>(&out).expect("json"))
    });
    let ca = cm["data"]["requestheader-client-ca-file"]
        .as_str()
        .expect("requestheader-client-ca-file")
        .to_owned();
    let allowed: Vec<String> = serde_json::from_str(
        cm["data"]["requestheader-allowed-names"]
            .as_str()
            .expect("allowed names"),
    )
    .expect("allowed names are a JSON list");
    assert_eq!(allowed, ["front-proxy-client"]);
    assert_eq!(
        cm["data"]["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(
        cm["data"]["requestheader-group-headers"],
        "[\"X-Remote-Group\"]"
    );
    assert_eq!(
        cm["data"]["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    let pki = data.join("pki");
    let wardle = Wardle::new(
        &pki.join("apiserver.crt"),
        &pki.join("apiserver.key"),
        &ca,
        allowed,
    );
    let ca_bundle = base64::engine::general_purpose::STANDARD
        .encode(std::fs::read(pki.join("ca.crt")).expect("ca"));
    (dir, s, wardle, ca_bundle)
}

/// The Service, EndpointSlice and APIService registering the extension server.
fn registration(port: u16, ca_bundle: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: wardle
---
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: wardle
spec:
  ports:
  - name: https
    port: 443
    targetPort: {port}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  namespace: wardle
  labels:
    kubernetes.io/service-name: api
addressType: IPv4
ports:
- name: https
  port: {port}
  protocol: TCP
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: {VERSION}.{GROUP}
spec:
  group: {GROUP}
  version: {VERSION}
  groupPriorityMinimum: 2000
  versionPriority: 10
  caBundle: {ca_bundle}
  service:
    name: api
    namespace: wardle
    port: 443
"#
    )
}

/// The APIService's Available condition (status, reason, message).
fn available(s: &ServerProcess, name: &str) -> Option<(String, String, String)> {
    let (found, out, _) = s
        .kubectl(&["get", "apiservice", name, "-o", "json"])
        .expect("kubectl");
    if !found {
        return None;
    }
    let obj: Value = serde_json::from_str(&out).ok()?;
    let c = obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        c["message"].as_str().unwrap_or("").to_owned(),
    ))
}

fn wait_available(s: &ServerProcess, name: &str, status: &str, reason: &str) -> String {
    wait_for(
        s,
        30,
        &format!("{name} Available={status} ({reason})"),
        || available(s, name).and_then(|(st, r, m)| (st == status && r == reason).then_some(m)),
    )
}

#[test]
fn built_in_group_versions_have_local_apiservices_as_kube_apiserver() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let want = [
        "v1.",
        "v1.admissionregistration.k8s.io",
        "v1.apiextensions.k8s.io",
        "v1.apiregistration.k8s.io",
        "v1.apps",
        "v1.authentication.k8s.io",
        "v1.authorization.k8s.io",
        "v1.autoscaling",
        "v2.autoscaling",
        "v1.batch",
        "v1.certificates.k8s.io",
        "v1.coordination.k8s.io",
        "v1.discovery.k8s.io",
        "v1.events.k8s.io",
        "v1.flowcontrol.apiserver.k8s.io",
        "v1.networking.k8s.io",
        "v1.node.k8s.io",
        "v1.policy",
        "v1.rbac.authorization.k8s.io",
        "v1.scheduling.k8s.io",
        "v1.storage.k8s.io",
    ];
    let table = wait_for(&s, 30, "every Local APIService available", || {
        let out = ok(&s, &["get", "apiservices"]);
        let rows: Vec<&str> = out.lines().skip(1).collect();
        let all = want.iter().all(|w| {
            rows.iter().any(|r| {
                let cols: Vec<&str> = r.split_whitespace().collect();
                cols.first() == Some(w)
                    && cols.get(1) == Some(&"Local")
                    && cols.get(2) == Some(&"True")
            })
        });
        // Plus the in-process metrics server's, as a cluster with metrics-server has it.
        let metrics = rows.iter().any(|r| {
            let cols: Vec<&str> = r.split_whitespace().collect();
            cols.first() == Some(&"v1beta1.metrics.k8s.io")
                && cols.get(1) == Some(&"kube-system/metrics-server")
                && cols.get(2) == Some(&"True")
        });
        (all && metrics && rows.len() == want.len() + 1).then_some(out)
    });
    assert!(table.starts_with("NAME"), "{table}");
    let apps = json(&s, &["get", "apiservice", "v1.apps", "-o", "json"]);
    assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
    assert_eq!(apps["spec"]["versionPriority"], 15);
    assert_eq!(
        apps["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "onstart"
    );
    let c = &apps["status"]["conditions"][0];
    assert_eq!(c["reason"], "Local");
    assert_eq!(c["message"], "Local APIServices are always available");
}

#[test]
fn an_extension_api_server_is_proxied_with_the_callers_identity_and_its_availability_followed() {
    let (_dir, s, wardle, ca_bundle) = cluster();
    let name = format!("{VERSION}.{GROUP}");

    // Registered while its server is down: the discovery check fails, requests get 503, and
    // discovery leaves the group out instead of failing kubectl.
    apply(&s, &registration(wardle.port, &ca_bundle));
    let msg = wait_available(&s, &name, "False", "FailedDiscoveryCheck");
    assert!(
        msg.starts_with(&format!(
            "failing or missing response from https://127.0.0.1:{}/apis/{GROUP}/{VERSION}",
            wardle.port
        )),
        "{msg}"
    );
    let (got, _, err) = s
        .kubectl(&["get", "flunders", "-n", "wardle"])
        .expect("kubectl");
    assert!(!got, "{err}");
    let raw = s
        .kubectl(&[
            "get",
            "--raw",
            &format!("/apis/{GROUP}/{VERSION}/namespaces/wardle/flunders"),
        ])
        .expect("kubectl");
    assert!(
        !raw.0 && raw.2.contains("ServiceUnavailable")
            || raw.2.contains("service unavailable")
            || raw.2.contains("unable to handle"),
        "{raw:?}"
    );
    // (Aggregated discovery keeps the group version as Stale: kubectl lists everything else.)
    let (_, resources, err) = s.kubectl(&["api-resources"]).expect("kubectl");
    assert!(!resources.contains(GROUP), "{resources}");
    assert!(resources.contains("deployments"), "{resources}");
    assert!(
        err.is_empty() || err.contains("stale GroupVersion discovery"),
        "{err}"
    );
    let groups = ok(&s, &["get", "--raw", "/apis"]);
    assert!(!groups.contains(GROUP), "{groups}");

    // Up: Passed, discovered (aggregated and legacy), served through the aggregator.
    wardle.start();
    wait_available(&s, &name, "True", "Passed");
    let row = ok(&s, &["get", "apiservice", &name]);
    assert!(row.contains("wardle/api") && row.contains("True"), "{row}");
    let resources = wait_for(&s, 20, "flunders in discovery", || {
        let out = ok(&s, &["api-resources", "--api-group", GROUP]);
        out.contains("flunders").then_some(out)
    });
    assert!(
        resources.contains("fl ") && resources.contains("Flunder"),
        "{resources}"
    );
    let legacy: Value = serde_json::from_str(&ok(&s, &["get", "--raw", "/apis"])).expect("json");
    let names: Vec<&str> = legacy["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    let at = names
        .iter()
        .position(|n| *n == GROUP)
        .expect("group listed");
    // groupPriorityMinimum 2000: after every built-in group (the lowest, 15800+), before
    // metrics.k8s.io (100).
    let metrics = names
        .iter()
        .position(|n| *n == "metrics.k8s.io")
        .expect("metrics.k8s.io listed");
    assert_eq!(
        (at, metrics),
        (names.len() - 2, names.len() - 1),
        "{names:?}"
    );
    let group: Value =
        serde_json::from_str(&ok(&s, &["get", "--raw", &format!("/apis/{GROUP}")])).expect("json");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        format!("{GROUP}/{VERSION}")
    );
    // The aggregator's own `/apis/<group>` page is negotiated like every discovery page:
    // YAML as sigs.k8s.io/yaml writes it, protobuf in the `k8s\0` envelope, JSON indented for
    // curl's user agent.
    let yaml = curl_admin(
        &s,
        &["-H", "Accept: application/yaml"],
        &format!("/apis/{GROUP}"),
    );
    assert_eq!(
        yaml,
        format!(
            "apiVersion: v1\nkind: APIGroup\nname: {GROUP}\npreferredVersion:\n  groupVersion: \
             {GROUP}/{VERSION}\n  version: {VERSION}\nversions:\n- groupVersion: \
             {GROUP}/{VERSION}\n  version: {VERSION}\n"
        )
    );
    let pb = curl_admin(
        &s,
        &["-H", "Accept: application/vnd.kubernetes.protobuf"],
        &format!("/apis/{GROUP}"),
    );
    assert!(pb.starts_with("k8s\0") && pb.contains(GROUP), "{pb:?}");
    let pretty = curl_admin(&s, &[], &format!("/apis/{GROUP}"));
    assert!(
        pretty.starts_with("{\n  \"kind\": \"APIGroup\",\n"),
        "{pretty}"
    );

    let flunder = format!(
        "apiVersion: {GROUP}/{VERSION}\nkind: Flunder\nmetadata:\n  name: one\n  namespace: wardle\n"
    );
    let (created, out, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&flunder))
        .expect("kubectl");
    assert!(created, "{err}");
    assert!(
        out.contains("flunder.wardle.example.com/one created"),
        "{out}"
    );
    let got = json(&s, &["get", "flunder", "one", "-n", "wardle", "-o", "json"]);
    // The identity the extension server saw, from headers it trusted because the request
    // came with the front-proxy client certificate.
    assert_eq!(
        got["metadata"]["annotations"]["wardle.example.com/created-by"],
        "kubernetes-admin"
    );
    let list = ok(&s, &["get", "fl", "-n", "wardle"]);
    assert!(list.contains("one"), "{list}");
    let posts = wardle.seen("/namespaces/wardle/flunders");
    let (_, _, user, groups) = posts
        .iter()
        .find(|(m, _, _, _)| m == "POST")
        .expect("POST seen");
    assert_eq!(user, "kubernetes-admin");
    assert!(groups.contains(&"system:masters".to_owned()), "{groups:?}");
    assert!(
        groups.contains(&"system:authenticated".to_owned()),
        "{groups:?}"
    );
    let (missing, _, err) = s
        .kubectl(&["get", "flunder", "two", "-n", "wardle"])
        .expect("kubectl");
    assert!(
        !missing && err.contains("flunders.wardle.example.com \"two\" not found"),
        "{err}"
    );

    // Another user: authorized here first (RBAC), then seen as itself; impersonation too.
    let (denied, _, err) = s
        .kubectl(&["get", "flunders", "-n", "wardle", "--as", "alice"])
        .expect("kubectl");
    assert!(!denied && err.contains("forbidden"), "{err}");
    ok(
        &s,
        &[
            "create",
            "clusterrole",
            "flunder-reader",
            "--verb=get,list",
            &format!("--resource=flunders.{GROUP}"),
        ],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "alice-flunders",
            "--clusterrole=flunder-reader",
            "--user=alice",
        ],
    );
    wait_for(&s, 10, "alice may list flunders", || {
        let (listed, out, _) = s
            .kubectl(&[
                "get",
                "flunders",
                "-n",
                "wardle",
                "--as",
                "alice",
                "--as-group",
                "dev",
            ])
            .expect("kubectl");
        listed.then_some(out)
    });
    assert!(
        wardle
            .seen("/namespaces/wardle/flunders")
            .iter()
            .any(|(_, _, u, g)| u == "alice" && g.contains(&"dev".to_owned()))
    );

    // A spoofed X-Remote-User from a normal client is replaced by who it really is.
    let pki = s.data_dir.join("pki");
    let out = std::process::Command::new("curl")
        .args(["-s", "--fail", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args([
            "-H",
            "X-Remote-User: mallory",
            "-H",
            "X-Remote-Group: spoofers",
        ])
        .arg(format!(
            "{}/apis/{GROUP}/{VERSION}/namespaces/spoof/flunders",
            s.url
        ))
        .output()
        .expect("curl");
    assert!(out.status.success(), "{out:?}");
    let spoof = wardle.seen("/namespaces/spoof/flunders");
    assert_eq!(spoof.len(), 1, "{spoof:?}");
    assert_eq!(spoof[0].2, "kubernetes-admin");
    assert!(!spoof[0].3.contains(&"spoofers".to_owned()), "{spoof:?}");
    // And the extension server itself refuses the headers without the front-proxy certificate.
    let direct = std::process::Command::new("curl")
        .args([
            "-s",
            "-k",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "X-Remote-User: mallory",
        ])
        .arg(format!(
            "https://127.0.0.1:{}/apis/{GROUP}/{VERSION}/namespaces/spoof/flunders",
            wardle.port
        ))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&direct.stdout), "401");

    // A watch streams through the aggregator: its first event arrives while the extension
    // server keeps the response open.
    let watch = std::process::Command::new("curl")
        .args(["-s", "-N", "--max-time", "3", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .arg(format!(
            "{}/apis/{GROUP}/{VERSION}/namespaces/wardle/flunders?watch=true",
            s.url
        ))
        .output()
        .expect("curl");
    let streamed = String::from_utf8_lossy(&watch.stdout);
    assert_eq!(
        watch.status.code(),
        Some(28),
        "still open after 3 s: {watch:?}"
    );
    assert!(
        streamed.contains("\"type\":\"ADDED\"") && streamed.contains("\"one\""),
        "{streamed}"
    );
    // An upgrade (as exec's) is joined end to end after the extension server's 101.
    assert_eq!(
        upgrade_echo(&s, "ping-through-the-aggregator"),
        "ping-through-the-aggregator"
    );
    // A hanging extension server: the client's timeout, upstream's 504.
    let started = std::time::Instant::now();
    let hang = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--max-time", "20", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .arg(format!(
            "{}/apis/{GROUP}/{VERSION}/namespaces/wardle/flunders/hang?timeout=1s",
            s.url
        ))
        .output()
        .expect("curl");
    let hang = String::from_utf8_lossy(&hang.stdout);
    assert!(
        hang.ends_with("\n504") && hang.contains("\"reason\":\"Timeout\""),
        "{hang}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // Down again: FailedDiscoveryCheck, 503 with upstream's text, discovery without it.
    wardle.stop();
    wait_available(&s, &name, "False", "FailedDiscoveryCheck");
    let (got, _, err) = s
        .kubectl(&[
            "get",
            "--raw",
            &format!("/apis/{GROUP}/{VERSION}/namespaces/wardle/flunders"),
        ])
        .expect("kubectl");
    assert!(!got && err.contains("ServiceUnavailable"), "{err}");
    let pki = s.data_dir.join("pki");
    let raw = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .arg(format!(
            "{}/apis/{GROUP}/{VERSION}/namespaces/wardle/flunders",
            s.url
        ))
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&raw.stdout),
        "service unavailable\n\n503"
    );
    let (got, _, err) = s
        .kubectl(&["get", "flunders", "-n", "wardle"])
        .expect("kubectl");
    assert!(
        // (kubectl's cached discovery may still name the resource, or already not.)
        !got && (err.contains("the server is currently unable to handle the request")
            || err.contains("the server doesn't have a resource type")),
        "{err}"
    );
    wait_for(&s, 20, "the group left discovery", || {
        let out = ok(&s, &["get", "--raw", "/apis"]);
        (!out.contains(GROUP)).then_some(())
    });
    ok(&s, &["get", "pods", "-A"]);

    // The Service gone: ServiceNotFound; its endpoints gone: MissingEndpoints/EndpointsNotFound.
    ok(&s, &["delete", "endpointslice", "-n", "wardle", "api-1"]);
    let msg = wait_available(&s, &name, "False", "EndpointsNotFound");
    assert_eq!(
        msg,
        "cannot find endpointslices for service/api in \"wardle\""
    );
    ok(&s, &["delete", "service", "-n", "wardle", "api"]);
    let msg = wait_available(&s, &name, "False", "ServiceNotFound");
    assert_eq!(msg, "service/api in \"wardle\" is not present");
    let table = ok(&s, &["get", "apiservice", &name]);
    assert!(table.contains("False (ServiceNotFound)"), "{table}");
}

/// Sends an upgrade request for `flunders/one/echo` through the API server (HTTP/1.1, the
/// admin's client certificate), then `text` over the upgraded stream; returns what came back.
fn upgrade_echo(s: &ServerProcess, text: &str) -> String {
    use rustls::pki_types::pem::PemObject as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let pki = s.data_dir.join("pki");
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls::pki_types::CertificateDer::pem_file_iter(pki.join("ca.crt")).expect("ca") {
        roots.add(ca.expect("ca")).expect("root");
    }
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(pki.join("admin.crt"))
        .expect("cert")
        .map(|c| c.expect("cert"))
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(pki.join("admin.key")).expect("key");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_client_auth_cert(certs, key)
    .expect("client config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let port: u16 = s
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("tls");
        let request = format!(
            "GET /apis/{GROUP}/{VERSION}/namespaces/wardle/flunders/one/echo HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\nUpgrade: test-echo\r\n\r\n"
        );
        tls.write_all(request.as_bytes()).await.expect("write");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(std::time::Duration::from_secs(10), tls.read(&mut byte))
                .await
                .expect("101 in time")
                .expect("read");
            assert!(n == 1, "closed after {:?}", String::from_utf8_lossy(&head));
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        tls.write_all(text.as_bytes()).await.expect("write");
        let mut echoed = vec![0u8; text.len()];
        tokio::time::timeout(std::time::Duration::from_secs(10), tls.read_exact(&mut echoed))
            .await
            .expect("echo in time")
            .expect("read");
        String::from_utf8_lossy(&echoed).into_owned()
    })
}

/// `curl` as the admin (client certificate) with extra arguments; stdout.
fn curl_admin(s: &ServerProcess, args: &[&str], path: &str) -> String {
    let pki = s.data_dir.join("pki");
    let out = std::process::Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(args)
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Upstream's aggregated discovery media type.
const AGGREGATED: &str =
    "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The extension server's entry in aggregated discovery, if listed.
fn aggregated_entry(s: &ServerProcess) -> Option<Value> {
    let doc: Value =
        serde_json::from_str(&curl_admin(s, &["-H", AGGREGATED], "/apis")).expect("json");
    doc["items"]
        .as_array()?
        .iter()
        .find(|i| i["metadata"]["name"] == GROUP)
        .cloned()
}

#[test]
fn extension_openapi_is_merged_and_explained_and_a_down_server_is_stale_in_discovery() {
    let (_dir, s, wardle, ca_bundle) = cluster();
    let name = format!("{VERSION}.{GROUP}");
    wardle.start();
    apply(&s, &registration(wardle.port, &ca_bundle));
    wait_available(&s, &name, "True", "Passed");

    // v3: the root lists the extension server's group version with its own URL (and every
    // local one); the document is proxied to it with the caller's identity.
    let key = format!("apis/{GROUP}/{VERSION}");
    let root = wait_for(&s, 20, "the group version in /openapi/v3", || {
        let root: Value =
            serde_json::from_str(&ok(&s, &["get", "--raw", "/openapi/v3"])).expect("json");
        root["paths"].get(&key).is_some().then_some(root)
    });
    assert_eq!(
        root["paths"][&key]["serverRelativeURL"],
        format!("/openapi/v3/{key}?hash=WARDLE1")
    );
    assert!(root["paths"].get("apis/apps/v1").is_some(), "{root}");
    assert!(root["paths"].get("api/v1").is_some(), "{root}");
    let explained = ok(&s, &["explain", "flunders"]);
    assert!(
        explained.contains("KIND:       Flunder")
            && explained.contains(&format!("GROUP:      {GROUP}"))
            && explained.contains("Flunder is a wardle creature"),
        "{explained}"
    );
    let field = ok(&s, &["explain", "flunders.spec.color"]);
    assert!(
        field.contains("The flunder's colour, as the wardle sees it."),
        "{field}"
    );
    let v3_seen = wardle.seen(&format!("/openapi/v3/{key}"));
    assert!(
        v3_seen.iter().any(|(_, _, u, _)| u == "kubernetes-admin"),
        "{v3_seen:?}"
    );
    // The root and v2 were downloaded by the aggregator itself.
    assert!(
        wardle
            .seen("/openapi/v2")
            .iter()
            .all(|(_, _, u, g)| u == "system:aggregator" && g.contains(&"system:masters".into()))
    );

    // v2: the local document with the extension's paths (its group version's only) and
    // definitions; kubectl's v2 explain reads the protobuf form.
    let v2: Value = serde_json::from_str(&ok(&s, &["get", "--raw", "/openapi/v2"])).expect("json");
    assert!(
        v2["definitions"]
            .get("com.example.wardle.v1alpha1.Flunder")
            .is_some()
    );
    assert!(
        v2["definitions"]
            .get("io.k8s.api.apps.v1.Deployment")
            .is_some()
    );
    assert!(
        v2["paths"]
            .get(format!(
                "/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/flunders"
            ))
            .is_some()
    );
    assert!(
        v2["paths"].get("/version/").is_none(),
        "not the group's path"
    );
    let explained = ok(&s, &["explain", "flunders", "--output=plaintext-openapiv2"]);
    assert!(
        explained.contains("Flunder is a wardle creature"),
        "{explained}"
    );
    // Its ETag answers a conditional request with 304.
    let head = curl_admin(&s, &["-D", "-", "-o", "/dev/null"], "/openapi/v2");
    let etag = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("etag: ")
                .or_else(|| l.strip_prefix("ETag: "))
        })
        .expect("ETag")
        .trim()
        .to_owned();
    let code = curl_admin(
        &s,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            &format!("If-None-Match: {etag}"),
        ],
        "/openapi/v2",
    );
    assert_eq!(code, "304");

    // Aggregated discovery: Current while up.
    let entry = aggregated_entry(&s).expect("listed");
    assert_eq!(entry["versions"][0]["freshness"], "Current", "{entry}");

    // Down: the group version stays in aggregated discovery, Stale and without resources, as
    // upstream's discovery manager leaves it; kubectl names it; OpenAPI drops it.
    wardle.stop();
    wait_available(&s, &name, "False", "FailedDiscoveryCheck");
    let entry = wait_for(&s, 20, "a Stale entry", || {
        aggregated_entry(&s).filter(|e| e["versions"][0]["freshness"] == "Stale")
    });
    assert_eq!(
        entry["versions"],
        json!([{ "version": VERSION, "freshness": "Stale" }]),
        "{entry}"
    );
    // kubectl (its disk-cached discovery) skips the stale group version, or names it as
    // failed; everything else is listed.
    let (_, out, err) = s.kubectl(&["api-resources"]).expect("kubectl");
    assert!(!out.contains(GROUP) && out.contains("deployments"), "{out}");
    assert!(
        err.is_empty() || err.contains("stale GroupVersion discovery"),
        "{err}"
    );
    ok(&s, &["get", "pods", "-A"]);
    wait_for(&s, 20, "the group version out of /openapi/v3", || {
        let root: Value =
            serde_json::from_str(&ok(&s, &["get", "--raw", "/openapi/v3"])).expect("json");
        root["paths"].get(&key).is_none().then_some(())
    });
}

/// POSTs a SelfSubjectReview with curl, presenting `cert`/`key` and `headers`: status code
/// and body.
fn whoami_with(s: &ServerProcess, cert: &str, headers: &[&str]) -> (String, Value) {
    let pki = s.data_dir.join("pki");
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-w", "\n%{http_code}", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join(format!("{cert}.crt")))
        .arg("--key")
        .arg(pki.join(format!("{cert}.key")))
        .args(["-X", "POST", "-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            s.url
        ))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("status line");
    (
        code.to_owned(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[test]
fn request_header_authentication_trusts_only_the_front_proxy_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let identity = [
        "X-Remote-User: alice",
        "X-Remote-Group: dev",
        "X-Remote-Group: ops",
        "X-Remote-Extra-Scopes: read",
        "X-Remote-Extra-Example.com%2fteam: blue",
    ];
    // The front-proxy client certificate (signed by the request-header CA, CN
    // front-proxy-client): the headers are the identity.
    let (code, review) = whoami_with(&s, "front-proxy-client", &identity);
    assert_eq!(code, "201", "{review}");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "alice", "{review}");
    assert_eq!(
        user["groups"],
        json!(["dev", "ops", "system:authenticated"]),
        "{review}"
    );
    assert_eq!(user["extra"]["scopes"], json!(["read"]), "{review}");
    assert_eq!(
        user["extra"]["example.com/team"],
        json!(["blue"]),
        "{review}"
    );
    // Authorized as alice: no RBAC for pods.
    let pki = s.data_dir.join("pki");
    let denied = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("front-proxy-client.crt"))
        .arg("--key")
        .arg(pki.join("front-proxy-client.key"))
        .args(["-H", "X-Remote-User: alice"])
        .arg(format!("{}/api/v1/namespaces/default/pods", s.url))
        .output()
        .expect("curl");
    let denied = String::from_utf8_lossy(&denied.stdout);
    assert!(
        denied.ends_with("\n403")
            && denied.contains(r#"User \"alice\" cannot list resource \"pods\""#),
        "{denied}"
    );
    // The proxy's certificate without the headers is no identity of its own (its CA is not
    // the client CA): 401. (A GET: a refused POST's unread body may reset the connection
    // before curl reads the answer.)
    let unauthenticated = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("front-proxy-client.crt"))
        .arg("--key")
        .arg(pki.join("front-proxy-client.key"))
        .arg(format!("{}/api/v1/namespaces/default/pods", s.url))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&unauthenticated.stdout), "401");
    // Anyone else's headers are ignored: the admin stays the admin.
    let (code, review) = whoami_with(&s, "admin", &identity);
    assert_eq!(code, "201", "{review}");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "kubernetes-admin", "{review}");
    assert!(user.get("extra").is_none(), "{review}");
    // And an anonymous client's too.
    let anon = std::process::Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(pki.join("ca.crt"))
        .args(["-X", "POST", "-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#)
        .args(["-H", "X-Remote-User: alice"])
        .arg(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            s.url
        ))
        .output()
        .expect("curl");
    let anon = String::from_utf8_lossy(&anon.stdout);
    assert!(!anon.contains("alice"), "{anon}");
}
