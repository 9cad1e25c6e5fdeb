//! The `metrics.k8s.io/v1beta1` endpoints: discovery, NodeMetrics and PodMetrics get and
//! list with `labelSelector` and `fieldSelector` (passed to the node or pod list they are
//! computed from, so the API server's selector rules apply), errors as `metav1.Status`.
//! Only running pods bound to a node have metrics, as with metrics-server.

use std::collections::{BTreeMap, HashMap, HashSet};

use http_body_util::Full;
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::auth::RequestHeaderTrust;
use crate::measured::{self, Scraper};
use crate::usage::{self, ContainerUsage, NODE_CPU_OVERHEAD_NANOS, NODE_MEMORY_OVERHEAD_BYTES};

const GROUP: &str = "metrics.k8s.io";
const VERSION: &str = "v1beta1";

/// What the handlers share.
pub(crate) struct State {
    /// The API client pods and nodes are read with.
    pub(crate) client: kube::Client,
    /// The reported window.
    pub(crate) window_seconds: u64,
    /// The request-header trust.
    pub(crate) trust: RequestHeaderTrust,
    /// The delegated authorizer.
    pub(crate) authz: crate::authz::Authorizer,
    /// The measured usage scraped from process nodes' kubelets.
    pub(crate) scraper: Scraper,
}

/// Measured usage: the nodes it was scraped from, and (cpu, memory) per container there.
#[derive(Default)]
struct Measured {
    nodes: HashSet<String>,
    usage: HashMap<measured::Key, (u64, u64)>,
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// Scrapes the kubelet of each process node among `nodes` that hosts one of `pods`; a node
/// that cannot be scraped keeps the simulated model (logged).
async fn measure(state: &State, nodes: &[Node], pods: &[&Pod]) -> Measured {
    let hosting: HashSet<&str> = pods.iter().filter_map(|p| node_of(p)).collect();
    let window = std::time::Duration::from_secs(state.window_seconds.max(2));
    let mut out = Measured::default();
    for n in nodes.iter().filter(|n| measured::has_kubelet(n)) {
        let Some(name) = n.metadata.name.as_deref() else {
            continue;
        };
        if !hosting.contains(name) {
            continue;
        }
        match state.scraper.node_usage(&state.client, name, window).await {
            Ok(u) => {
                out.nodes.insert(name.to_owned());
                out.usage.extend(u);
            }
            Err(e) => {
                tracing::warn!(node = name, error = %format!("{e:#}"), "scraping the kubelet's /metrics/resource; simulated usage instead");
            }
        }
    }
    out
}

/// The usage of each container of `p`: measured on a scraped node (0 for a container not
/// running there), simulated elsewhere.
fn containers_usage(p: &Pod, m: &Measured) -> Vec<ContainerUsage> {
    match (node_of(p), &p.spec) {
        (Some(node), Some(spec)) if m.nodes.contains(node) => {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let pod = p.metadata.name.clone().unwrap_or_default();
            spec.containers
                .iter()
                .map(|c| {
                    let key = (ns.clone(), pod.clone(), c.name.clone());
                    let (cpu_nanos, memory_bytes) = m.usage.get(&key).copied().unwrap_or_default();
                    ContainerUsage {
                        name: c.name.clone(),
                        cpu_nanos,
                        memory_bytes,
                    }
                })
                .collect()
        }
        _ => usage::pod_usage(p),
    }
}

async fn all_nodes(state: &State) -> Vec<Node> {
    match Api::<Node>::all(state.client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            tracing::warn!(error = %e, "listing nodes for measured usage");
            Vec::new()
        }
    }
}

type Reply = hyper::Response<Full<Bytes>>;

fn reply(code: u16, body: &Value) -> Reply {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn status(code: u16, reason: &str, message: &str) -> Reply {
    reply(
        code,
        &json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": message, "reason": reason, "code": code }),
    )
}

fn not_found(resource: &str, name: &str) -> Reply {
    status(
        404,
        "NotFound",
        &format!("{resource}.{GROUP} \"{name}\" not found"),
    )
}

/// Percent-decoding of a query value (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param(query: &str, key: &str) -> String {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| decode(v))
        .unwrap_or_default()
}

fn list_params(query: &str) -> ListParams {
    let mut lp = ListParams::default();
    let labels = query_param(query, "labelSelector");
    if !labels.is_empty() {
        lp = lp.labels(&labels);
    }
    let fields = query_param(query, "fieldSelector");
    if !fields.is_empty() {
        lp = lp.fields(&fields);
    }
    lp
}

fn api_error(e: kube::Error) -> Reply {
    match e {
        kube::Error::Api(s) => status(s.code, &s.reason, &s.message),
        other => status(500, "InternalError", &other.to_string()),
    }
}

/// `metav1.Time` now (whole seconds).
fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second()).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

fn cpu(nanos: u64) -> String {
    format!("{nanos}n")
}

fn memory(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

fn labels(l: Option<&BTreeMap<String, String>>) -> Value {
    l.map_or(Value::Null, |l| json!(l))
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some()
}

fn pod_metrics(p: &Pod, m: &Measured, ts: &str, window: &str) -> Value {
    let containers: Vec<Value> = containers_usage(p, m)
        .into_iter()
        .map(|c| json!({ "name": c.name, "usage": { "cpu": cpu(c.cpu_nanos), "memory": memory(c.memory_bytes) } }))
        .collect();
    json!({
        "kind": "PodMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": { "name": p.metadata.name, "namespace": p.metadata.namespace,
                      "creationTimestamp": ts, "labels": labels(p.metadata.labels.as_ref()) },
        "timestamp": ts, "window": window, "containers": containers,
    })
}

async fn pods(state: &State, namespace: Option<&str>, name: Option<&str>, query: &str) -> Reply {
    let api: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(state.client.clone(), ns),
        None => Api::all(state.client.clone()),
    };
    let (ts, window) = (now(), format!("{}s", state.window_seconds));
    if let Some(name) = name {
        return match api.get_opt(name).await {
            Ok(Some(p)) if running(&p) => {
                let m = measure(state, &all_nodes(state).await, &[&p]).await;
                reply(200, &pod_metrics(&p, &m, &ts, &window))
            }
            Ok(_) => not_found("podmetrics", name),
            Err(e) => api_error(e),
        };
    }
    match api.list(&list_params(query)).await {
        Ok(list) => {
            let pods: Vec<&Pod> = list.items.iter().filter(|p| running(p)).collect();
            let m = measure(state, &all_nodes(state).await, &pods).await;
            let items: Vec<Value> = pods
                .iter()
                .map(|p| pod_metrics(p, &m, &ts, &window))
                .collect();
            reply(
                200,
                &json!({ "kind": "PodMetricsList", "apiVersion": format!("{GROUP}/{VERSION}"),
                         "metadata": {}, "items": items }),
            )
        }
        Err(e) => api_error(e),
    }
}

async fn nodes(state: &State, name: Option<&str>, query: &str) -> Reply {
    let node_api: Api<Node> = Api::all(state.client.clone());
    let nodes: Vec<Node> = match name {
        Some(n) => match node_api.get_opt(n).await {
            Ok(Some(node)) => vec![node],
            Ok(None) => return not_found("nodemetrics", n),
            Err(e) => return api_error(e),
        },
        None => match node_api.list(&list_params(query)).await {
            Ok(l) => l.items,
            Err(e) => return api_error(e),
        },
    };
    let pods: Vec<Pod> = match Api::<Pod>::all(state.client.clone())
        .list(&ListParams::default().fields("status.phase=Running"))
        .await
    {
        Ok(l) => l.items,
        Err(e) => return api_error(e),
    };
    let running_pods: Vec<&Pod> = pods.iter().filter(|p| running(p)).collect();
    let m = measure(state, &nodes, &running_pods).await;
    let mut per_node: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for p in running_pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let e = per_node.entry(node).or_default();
        for c in containers_usage(p, &m) {
            e.0 += c.cpu_nanos;
            e.1 += c.memory_bytes;
        }
    }
    let (ts, window) = (now(), format!("{}s", state.window_seconds));
    let mut items: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let (c, m) = per_node.get(&name).copied().unwrap_or_default();
            json!({
                "kind": "NodeMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
                "metadata": { "name": name, "creationTimestamp": ts,
                              "labels": labels(n.metadata.labels.as_ref()) },
                "timestamp": ts, "window": window,
                "usage": { "cpu": cpu(c + NODE_CPU_OVERHEAD_NANOS),
                           "memory": memory(m + NODE_MEMORY_OVERHEAD_BYTES) },
            })
        })
        .collect();
    if let Some(n) = name {
        return match items.pop() {
            Some(one) => reply(200, &one),
            None => not_found("nodemetrics", n),
        };
    }
    reply(
        200,
        &json!({ "kind": "NodeMetricsList", "apiVersion": format!("{GROUP}/{VERSION}"),
                 "metadata": {}, "items": items }),
    )
}

fn resource_list() -> Value {
    let verbs = json!(["get", "list"]);
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [
            { "name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": verbs },
            { "name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": verbs },
        ],
    })
}

fn group() -> Value {
    let gv = json!({ "groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION });
    json!({ "kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [gv], "preferredVersion": gv })
}

/// What a request asks, for the delegated authorizer: `metrics.k8s.io` resources under the
/// group version, the path otherwise.
fn attributes(
    base: &str,
    path: &str,
    query: &str,
    method: &http::Method,
) -> crate::authz::Attributes {
    use crate::authz::Attributes;
    let parts: Vec<&str> = path
        .strip_prefix(&format!("{base}/"))
        .map(|r| r.split('/').collect())
        .unwrap_or_default();
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let collection_verb = if watch { "watch" } else { "list" };
    let verb = |collection: bool| {
        if method != http::Method::GET {
            method.as_str().to_ascii_lowercase()
        } else if collection {
            collection_verb.to_owned()
        } else {
            "get".to_owned()
        }
    };
    let resource =
        |verb: String, resource: &str, namespace: &str, name: &str| Attributes::Resource {
            verb,
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
    match parts.as_slice() {
        [r] => resource(verb(true), r, "", ""),
        [r, name] if *r != "namespaces" => resource(verb(false), r, "", name),
        ["namespaces", ns, r] => resource(verb(true), r, ns, ""),
        ["namespaces", ns, r, name] => resource(verb(false), r, ns, name),
        _ => Attributes::Path {
            path: path.to_owned(),
        },
    }
}

/// Answers one request; `proxy` says whether the connection's client certificate may send
/// request headers.
pub(crate) async fn serve(
    state: &State,
    proxy: bool,
    req: hyper::Request<hyper::body::Incoming>,
) -> Reply {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    if matches!(path.as_str(), "/healthz" | "/livez" | "/readyz") {
        let mut r = hyper::Response::new(Full::new(Bytes::from_static(b"ok")));
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return r;
    }
    let user = if proxy {
        state.trust.user(req.headers())
    } else {
        None
    };
    let Some(user) = user else {
        return status(401, "Unauthorized", "Unauthorized");
    };
    tracing::debug!(user = %user.name, %path, "metrics request");
    let base = format!("/apis/{GROUP}/{VERSION}");
    let attrs = attributes(&base, &path, &query, req.method());
    let (allowed, reason) = state.authz.authorize(&user, &attrs).await;
    if !allowed {
        return status(
            403,
            "Forbidden",
            &attrs.forbidden_message(&user.name, &reason),
        );
    }
    if req.method() != http::Method::GET {
        return status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
    }
    if path == "/apis" {
        let mut g = group();
        g.as_object_mut().map(|o| o.remove("kind"));
        g.as_object_mut().map(|o| o.remove("apiVersion"));
        return reply(
            200,
            &json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [g] }),
        );
    }
    if path == format!("/apis/{GROUP}") {
        return reply(200, &group());
    }
    if path == base {
        return reply(200, &resource_list());
    }
    let Some(rest) = path.strip_prefix(&format!("{base}/")) else {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["nodes"] => nodes(state, None, &query).await,
        ["nodes", name] => nodes(state, Some(name), &query).await,
        ["pods"] => pods(state, None, None, &query).await,
        ["namespaces", ns, "pods"] => pods(state, Some(ns), None, &query).await,
        ["namespaces", ns, "pods", name] => pods(state, Some(ns), Some(name), &query).await,
        _ => status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}
