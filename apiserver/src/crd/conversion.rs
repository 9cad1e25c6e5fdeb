//! Conversion of custom resources between the versions of their CRD: the asynchronous entry
//! point the handlers call wherever a custom object crosses versions, and upstream's
//! conversion webhook client (`apiextensions-apiserver/pkg/apiserver/conversion`).
//!
//! A CRD with `spec.conversion.strategy: None` converts by rewriting `apiVersion` only: that
//! stays on the synchronous path of [`crate::registry::convert`]. With `strategy: Webhook`
//! every object whose `apiVersion` is not the one wanted is sent, in one `ConversionReview`
//! per call (a list converts its items in one review, as upstream does), to the webhook:
//!
//! - `clientConfig.url`, or `clientConfig.service` resolved to an endpoint address through
//!   the Service's EndpointSlices — this server has no kube-proxy, so a Service's ClusterIP
//!   does not route; the TLS server name is still `<name>.<namespace>.svc`, as upstream;
//! - over TLS verified against `clientConfig.caBundle`, 30 s for the whole exchange;
//! - in the first of `conversionReviewVersions` this server speaks (`v1`, `v1beta1`).
//!
//! The answer is checked as upstream checks it (uid, `result.status`, object count, each
//! object's apiVersion, kind, name, namespace and uid) and each converted object's metadata
//! is the original's, with only labels and annotations taken from the webhook. Any failure is
//! a 500 with upstream's message (`conversion webhook for example.com/v1, Kind=Widget failed:
//! …`), raised before anything is stored.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::BodyExt as _;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::catalog::ResourceInfo;
use crate::registry::{self, custom};

/// How long one review may take, connection included (upstream's webhook client timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

/// A CRD's `spec.conversion.webhook`: where its conversion webhook is and how it is spoken to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `clientConfig.url`.
    pub url: Option<String>,
    /// `clientConfig.service`.
    pub service: Option<ServiceRef>,
    /// `clientConfig.caBundle`: base64 of PEM certificates (empty: no roots).
    pub ca_bundle: String,
    /// `conversionReviewVersions`, in the CRD's order.
    pub review_versions: Vec<String>,
}

/// `clientConfig.service` of a conversion webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The URL path (default `/`).
    pub path: String,
    /// The Service port (default 443).
    pub port: u16,
}

impl Webhook {
    /// The conversion webhook of `crd`, when its `spec.conversion.strategy` is `Webhook`.
    pub fn of_crd(crd: &Value) -> Option<Webhook> {
        let conversion = &crd["spec"]["conversion"];
        if conversion["strategy"] != "Webhook" {
            return None;
        }
        let hook = &conversion["webhook"];
        let config = &hook["clientConfig"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let service = Some(&config["service"])
            .filter(|s| s.is_object())
            .map(|s| ServiceRef {
                namespace: text(&s["namespace"]),
                name: text(&s["name"]),
                path: s["path"].as_str().unwrap_or("/").to_owned(),
                port: s["port"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(443),
            });
        Some(Webhook {
            url: config["url"].as_str().map(str::to_owned),
            service,
            ca_bundle: text(&config["caBundle"]),
            review_versions: hook["conversionReviewVersions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// The conversion webhook `r`'s objects cross versions through, and its CRD's storage
/// version; `None` for built-in resources and CRDs with `strategy: None`.
pub fn webhook_for(r: &ResourceInfo) -> Option<(Arc<Webhook>, String)> {
    let served = custom::lookup(r)?;
    let hook = served.webhook.clone()?;
    Some((hook, served.storage_version.clone()))
}

/// Stored objects as `r` serves them, in one review when a webhook converts them (a list's
/// items: the error names the list kind, as upstream's).
pub async fn from_storage(
    ctx: &Ctx,
    r: &ResourceInfo,
    objects: Vec<Map<String, Value>>,
) -> Result<Vec<Map<String, Value>>> {
    let Some((hook, storage)) = webhook_for(r) else {
        return Ok(objects
            .into_iter()
            .map(|o| registry::convert::from_storage(r, o))
            .collect());
    };
    let list_gvk = format!("{}/{storage}, Kind={}List", r.group, r.kind);
    convert(
        ctx,
        &hook,
        objects,
        &registry::api_version(r),
        Some(&list_gvk),
    )
    .await
}

/// One stored object as `r` serves it.
pub async fn from_storage_one(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: Map<String, Value>,
) -> Result<Map<String, Value>> {
    let Some((hook, _)) = webhook_for(r) else {
        return Ok(registry::convert::from_storage(r, obj));
    };
    single(convert(ctx, &hook, vec![obj], &registry::api_version(r), None).await?)
}

/// An object as `r` serves it, converted to the form it is stored in.
pub async fn to_storage(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: Map<String, Value>,
) -> Result<Map<String, Value>> {
    let Some((hook, storage)) = webhook_for(r) else {
        return Ok(registry::convert::to_storage(r, obj));
    };
    let desired = format!("{}/{storage}", r.group);
    single(convert(ctx, &hook, vec![obj], &desired, None).await?)
}

/// A served object as a read gives it back once stored (through the stored form and back).
pub async fn round_trip(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: Map<String, Value>,
) -> Result<Map<String, Value>> {
    if webhook_for(r).is_none() {
        return Ok(registry::convert::round_trip(r, obj));
    }
    let stored = to_storage(ctx, r, obj).await?;
    from_storage_one(ctx, r, stored).await
}

fn single(mut objects: Vec<Map<String, Value>>) -> Result<Map<String, Value>> {
    objects
        .pop()
        .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
}

/// Go's `schema.GroupVersionKind.String()` of an object.
fn gvk_of(obj: &Map<String, Value>) -> String {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    format!("{group}/{version}, Kind={kind}")
}

/// Go's `%T` of a JSON value decoded as unstructured.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Converts `objects` to `desired` (`group/version`) through `hook`: those already there are
/// kept; the others go in one review. `list_gvk` names the list when these are a list's items.
async fn convert(
    ctx: &Ctx,
    hook: &Webhook,
    mut objects: Vec<Map<String, Value>>,
    desired: &str,
    list_gvk: Option<&str>,
) -> Result<Vec<Map<String, Value>>> {
    let pending: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(desired))
        .map(|(i, _)| i)
        .collect();
    if pending.is_empty() {
        return Ok(objects);
    }
    let gvk = match list_gvk {
        Some(l) => l.to_owned(),
        None => gvk_of(&objects[pending[0]]),
    };
    let failed =
        |e: String| ApiError::Internal(format!("conversion webhook for {gvk} failed: {e}"));
    let review_version = hook
        .review_versions
        .iter()
        .find(|v| *v == "v1" || *v == "v1beta1")
        .ok_or_else(|| ApiError::Internal("no supported conversion review versions".into()))?;
    let uid = uuid::Uuid::new_v4().to_string();
    let sent: Vec<Value> = pending
        .iter()
        .map(|i| Value::Object(objects[*i].clone()))
        .collect();
    let review = review_request(review_version, &uid, desired, &sent);
    let body = serde_json::to_vec(&review).map_err(|e| failed(e.to_string()))?;
    let target = resolve(ctx, hook).await.map_err(&failed)?;
    let answer = post(&target, body).await.map_err(&failed)?;
    let converted = converted_objects(review_version, &uid, &answer).map_err(&failed)?;
    if converted.len() != pending.len() {
        return Err(ApiError::Internal(format!(
            "conversion webhook for {gvk} returned {} objects, expected {}",
            converted.len(),
            pending.len()
        )));
    }
    for (n, (i, out)) in pending.iter().zip(converted).enumerate() {
        let original = &objects[*i];
        let checked = match list_gvk {
            Some(_) => check_list_item(original, out, desired, n),
            None => check_single(original, out, desired),
        };
        let restored = checked.map_err(|e| {
            ApiError::Internal(format!("conversion webhook for {gvk} returned invalid {e}"))
        })?;
        objects[*i] = restored;
    }
    Ok(objects)
}

/// The `ConversionReview` request body in `version` (upstream sends an empty response too).
fn review_request(version: &str, uid: &str, desired: &str, objects: &[Value]) -> Value {
    json!({
        "kind": "ConversionReview",
        "apiVersion": format!("apiextensions.k8s.io/{version}"),
        "request": { "uid": uid, "desiredAPIVersion": desired, "objects": objects },
        "response": { "uid": "", "convertedObjects": null, "result": { "metadata": {} } },
    })
}

/// The converted objects of a webhook's answer, checked as upstream's
/// `getConvertedObjectsFromResponse` (v1beta1 answers skip the kind and uid checks).
fn converted_objects(
    version: &str,
    uid: &str,
    answer: &[u8],
) -> std::result::Result<Vec<Value>, String> {
    let review: Map<String, Value> = serde_json::from_slice(answer).map_err(|e| e.to_string())?;
    if version == "v1" {
        let got = gvk_of(&review);
        let want = "apiextensions.k8s.io/v1, Kind=ConversionReview";
        if got != want {
            return Err(format!("expected webhook response of {want}, got {got}"));
        }
    }
    let response = match review.get("response") {
        Some(Value::Object(r)) => r,
        _ => return Err("no response provided".into()),
    };
    if version == "v1" {
        let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let result = response.get("result");
    let status = result
        .and_then(|r| r.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if status != "Success" {
        let message = result
            .and_then(|r| r.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !message.is_empty() {
            return Err(message.to_owned());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Upstream's checks of one item of a converted list (its index quirk included: the index
/// named is one past the item's, except when the item is not an object).
fn check_list_item(
    original: &Map<String, Value>,
    out: Value,
    desired: &str,
    n: usize,
) -> std::result::Result<Map<String, Value>, String> {
    let Value::Object(out) = out else {
        return Err(format!(
            "converted object at index {n}: Object 'Kind' is missing in '{out}'"
        ));
    };
    let at = n + 1;
    let invalid = |e: String| format!("converted object at index {at}: {e}");
    check_version_and_kind(original, &out, desired).map_err(invalid)?;
    validate_converted(original, &out).map_err(invalid)?;
    restore_meta(original, out).map_err(|e| format!("metadata in object at index {at}: {e}"))
}

/// Upstream's checks of a single converted object.
fn check_single(
    original: &Map<String, Value>,
    out: Value,
    desired: &str,
) -> std::result::Result<Map<String, Value>, String> {
    let Value::Object(out) = out else {
        return Err(format!(
            "object at index 0: Object 'Kind' is missing in '{out}'"
        ));
    };
    check_version_and_kind(original, &out, desired)
        .map_err(|e| format!("object at index 0: {e}"))?;
    validate_converted(original, &out).map_err(|e| format!("object: {e}"))?;
    restore_meta(original, out).map_err(|e| format!("metadata: {e}"))
}

fn check_version_and_kind(
    original: &Map<String, Value>,
    out: &Map<String, Value>,
    desired: &str,
) -> std::result::Result<(), String> {
    let text = |o: &Map<String, Value>, k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let got = text(out, "apiVersion");
    if got != desired {
        return Err(format!(
            "invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    let (want, got) = (text(original, "kind"), text(out, "kind"));
    if want != got {
        return Err(format!("invalid kind (expected {want}, received {got})"));
    }
    Ok(())
}

/// Upstream's `validateConvertedObject`: kind, name, namespace and uid unchanged.
fn validate_converted(
    original: &Map<String, Value>,
    out: &Map<String, Value>,
) -> std::result::Result<(), String> {
    let kind = |o: &Map<String, Value>| {
        o.get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if kind(original) != kind(out) {
        return Err(format!(
            "must have the same kind: {} != {}",
            kind(original),
            kind(out)
        ));
    }
    for (field, what) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
        let get = |o: &Map<String, Value>| {
            o.get("metadata")
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (a, b) = (get(original), get(out));
        if a != b {
            return Err(format!("must have the same {what}: {a} != {b}"));
        }
    }
    Ok(())
}

/// Upstream's `restoreObjectMeta`: the original's metadata, with the converted object's labels
/// and annotations (string values only).
fn restore_meta(
    original: &Map<String, Value>,
    mut out: Map<String, Value>,
) -> std::result::Result<Map<String, Value>, String> {
    let response_meta = match out.get("metadata") {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ));
        }
    };
    let mut meta = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match response_meta.get(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
            }
            Some(Value::Object(m)) => {
                if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!(
                        "metadata.{field}[{k}] must be a string, but is {} in converted object",
                        go_type(v)
                    ));
                }
                meta.insert(field.into(), Value::Object(m.clone()));
            }
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                ));
            }
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Ok(out)
}

/// Where a review is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// The URL as errors name it (with `?timeout=30s`, as client-go's).
    url: String,
    /// Host to connect to (an IP or a DNS name, no brackets).
    host: String,
    /// Port to connect to.
    port: u16,
    /// Name the certificate must be valid for.
    server_name: String,
    /// The `Host` header.
    authority: String,
    /// Path and query of the request.
    path: String,
    /// `caBundle`.
    ca_bundle: String,
}

/// Splits an `https://` URL into host, port and path (with client-go's timeout parameter).
fn parse_url(url: &str, ca_bundle: &str) -> std::result::Result<Target, String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("unsupported protocol scheme in {url:?}"))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6
            .split_once(']')
            .ok_or_else(|| format!("invalid URL {url:?}"))?;
        (h, tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| format!("invalid port in {url:?}"))?,
        None => 443,
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let path = match path.contains('?') {
        true => format!("{path}&timeout=30s"),
        false => format!("{path}?timeout=30s"),
    };
    Ok(Target {
        url: format!("https://{authority}{path}"),
        host: host.to_owned(),
        port,
        server_name: host.to_owned(),
        authority: authority.to_owned(),
        path,
        ca_bundle: ca_bundle.to_owned(),
    })
}

/// Where `hook` is reached: its URL, or its Service's first ready endpoint.
async fn resolve(ctx: &Ctx, hook: &Webhook) -> std::result::Result<Target, String> {
    if let Some(url) = &hook.url {
        return parse_url(url, &hook.ca_bundle);
    }
    let Some(svc) = &hook.service else {
        return Err("neither url nor service is set".into());
    };
    let dns = format!("{}.{}.svc", svc.name, svc.namespace);
    let mut target = parse_url(
        &format!("https://{dns}:{}{}", svc.port, svc.path),
        &hook.ca_bundle,
    )?;
    let post_err = |e: String| format!("Post {:?}: {e}", target.url);
    let (ip, port) = service_endpoint(ctx, svc).await.map_err(post_err)?;
    target.host = ip;
    target.port = port;
    Ok(target)
}

async fn read_json(ctx: &Ctx, key: &str) -> std::result::Result<Option<Value>, String> {
    let stored = ctx.storage.get(key).await.map_err(|e| e.to_string())?;
    Ok(stored.and_then(|s| serde_json::from_slice(&s.value).ok()))
}

/// A ready endpoint address and port of `svc`'s port, from its EndpointSlices.
async fn service_endpoint(
    ctx: &Ctx,
    svc: &ServiceRef,
) -> std::result::Result<(String, u16), String> {
    let not_found = || format!("service {:?} not found", svc.name);
    let services = registry::catalog::find("", "v1", "services").ok_or_else(not_found)?;
    let service = read_json(ctx, &registry::key(services, &svc.namespace, &svc.name))
        .await?
        .ok_or_else(not_found)?;
    let port = service["spec"]["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["port"] == svc.port))
        .ok_or_else(|| format!("service {:?} does not have port {}", svc.name, svc.port))?;
    let port_name = port["name"].as_str().unwrap_or("");
    let unavailable = || format!("no endpoints available for service {:?}", svc.name);
    let slices = registry::catalog::find("discovery.k8s.io", "v1", "endpointslices")
        .ok_or_else(unavailable)?;
    let page = ctx
        .storage
        .list(&registry::prefix(slices, &svc.namespace), None, 0, 0)
        .await
        .map_err(|e| e.to_string())?;
    for (_, stored) in page.items {
        let Ok(slice) = serde_json::from_slice::<Value>(&stored.value) else {
            continue;
        };
        if slice["metadata"]["labels"]["kubernetes.io/service-name"] != svc.name.as_str() {
            continue;
        }
        let Some(target_port) = slice["ports"].as_array().and_then(|ports| {
            ports
                .iter()
                .find(|p| p["name"].as_str().unwrap_or("") == port_name)
                .and_then(|p| p["port"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
        }) else {
            continue;
        };
        let ready = slice["endpoints"].as_array().and_then(|eps| {
            eps.iter()
                .filter(|e| e["conditions"]["ready"] != false)
                .find_map(|e| e["addresses"][0].as_str())
        });
        if let Some(ip) = ready {
            return Ok((ip.to_owned(), target_port));
        }
    }
    Err(unavailable())
}

/// The TLS client configuration trusting `ca_bundle` (base64 of PEM) only.
fn tls_config(ca_bundle: &str) -> std::result::Result<rustls::ClientConfig, String> {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle)
        .map_err(|e| format!("invalid caBundle: {e}"))?;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem).flatten() {
        roots
            .add(cert)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Go's text of a failed dial or handshake.
fn transport_error(host: &str, port: u16, e: &std::io::Error) -> String {
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    if let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return match tls {
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                    .into()
            }
            rustls::Error::InvalidCertificate(c) => {
                format!("tls: failed to verify certificate: x509: {c:?}")
            }
            other => format!("remote error: tls: {other}"),
        };
    }
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {addr}: connect: connection refused")
        }
        _ => format!("dial tcp {addr}: {e}"),
    }
}

/// POSTs `body` to `target` over TLS and returns the answer's body (a 2xx), within
/// [`TIMEOUT`]; errors read as Go's `Post "<url>": …`.
async fn post(target: &Target, body: Vec<u8>) -> std::result::Result<Vec<u8>, String> {
    let exchange = async {
        let config = tls_config(&target.ca_bundle)?;
        let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| transport_error(&target.host, target.port, &e))?;
        let name = rustls_pki_types::ServerName::try_from(target.server_name.clone())
            .map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| transport_error(&target.host, target.port, &e))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let request = http::Request::post(target.path.as_str())
            .header(http::header::HOST, target.authority.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let answer = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes()
            .to_vec();
        if !status.is_success() {
            return Err(server_error(status, &answer));
        }
        Ok(answer)
    };
    match tokio::time::timeout(TIMEOUT, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(format!("Post {:?}: {e}", target.url)),
        Err(_) => Err(format!(
            "Post {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            target.url
        )),
    }
}

/// client-go's error for a non-2xx answer: a Status' message, else a generic text.
fn server_error(status: http::StatusCode, body: &[u8]) -> String {
    if let Ok(Value::Object(s)) = serde_json::from_slice::<Value>(body)
        && s.get("kind").and_then(Value::as_str) == Some("Status")
        && let Some(m) = s.get("message").and_then(Value::as_str)
    {
        return m.to_owned();
    }
    if status == http::StatusCode::NOT_FOUND {
        return "the server could not find the requested resource".into();
    }
    format!(
        "an error on the server ({:?}) has prevented the request from succeeding",
        String::from_utf8_lossy(body).trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn stored() -> Map<String, Value> {
        obj(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": { "name": "a", "namespace": "default", "uid": "u1",
                          "resourceVersion": "5", "labels": { "x": "1" } },
            "spec": { "size": 3 }
        }))
    }

    #[test]
    fn webhook_settings_come_from_the_crd() {
        let crd = json!({ "spec": { "conversion": { "strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1beta1", "v1"],
            "clientConfig": { "caBundle": "Zm9v",
                "service": { "namespace": "ns", "name": "conv", "path": "/convert" } } } } } });
        let hook = Webhook::of_crd(&crd).unwrap();
        assert_eq!(hook.review_versions, ["v1beta1", "v1"]);
        assert_eq!(hook.ca_bundle, "Zm9v");
        assert_eq!(
            hook.service,
            Some(ServiceRef {
                namespace: "ns".into(),
                name: "conv".into(),
                path: "/convert".into(),
                port: 443
            })
        );
        let none = json!({ "spec": { "conversion": { "strategy": "None" } } });
        assert!(Webhook::of_crd(&none).is_none());
    }

    #[test]
    fn urls_get_client_go_timeout_parameter() {
        let t = parse_url("https://127.0.0.1:8443/convert", "").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 8443));
        assert_eq!(t.path, "/convert?timeout=30s");
        assert_eq!(t.url, "https://127.0.0.1:8443/convert?timeout=30s");
        let t = parse_url("https://[::1]/c?x=1", "").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 443));
        assert_eq!(t.path, "/c?x=1&timeout=30s");
        let t = parse_url("https://hook.example.com", "").unwrap();
        assert_eq!(t.path, "/?timeout=30s");
        assert!(parse_url("http://x/", "").is_err());
    }

    #[test]
    fn answers_are_checked_as_upstream() {
        let ok = |uid: &str, objs: Value| {
            serde_json::to_vec(&json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": { "uid": uid, "result": { "status": "Success" }, "convertedObjects": objs }
            }))
            .unwrap()
        };
        assert_eq!(
            converted_objects("v1", "u", &ok("u", json!([{}])))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            converted_objects("v1", "u", &ok("v", json!([]))).unwrap_err(),
            "expected response.uid=\"u\", got \"v\""
        );
        let failed = serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": { "uid": "u", "result": { "status": "Failure", "message": "nope" } }
        }))
        .unwrap();
        assert_eq!(converted_objects("v1", "u", &failed).unwrap_err(), "nope");
        let wrong = serde_json::to_vec(&json!({ "apiVersion": "v1", "kind": "Status" })).unwrap();
        assert_eq!(
            converted_objects("v1", "u", &wrong).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got /v1, Kind=Status"
        );
        // v1beta1 answers are not checked for kind or uid.
        let beta = serde_json::to_vec(&json!({
            "response": { "result": { "status": "Success" }, "convertedObjects": [] }
        }))
        .unwrap();
        assert!(converted_objects("v1beta1", "u", &beta).unwrap().is_empty());
        let no_status = serde_json::to_vec(&json!({ "response": { "result": {} } })).unwrap();
        assert_eq!(
            converted_objects("v1beta1", "u", &no_status).unwrap_err(),
            "response.result.status was '', not 'Success'"
        );
    }

    #[test]
    fn converted_metadata_is_the_original_but_labels_and_annotations() {
        let out = json!({
            "apiVersion": "example.com/v2", "kind": "Widget",
            "metadata": { "name": "a", "namespace": "default", "uid": "u1",
                          "resourceVersion": "99", "labels": { "y": "2" }, "generation": 7 },
            "spec": { "dimensions": { "size": 3 } }
        });
        let got = check_single(&stored(), out, "example.com/v2").unwrap();
        assert_eq!(got["metadata"]["resourceVersion"], "5");
        assert_eq!(got["metadata"]["labels"], json!({ "y": "2" }));
        assert!(got["metadata"].get("generation").is_none());
        assert_eq!(got["spec"]["dimensions"]["size"], 3);
    }

    #[test]
    fn invalid_objects_are_refused_with_upstream_messages() {
        let mut out = json!({ "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {} });
        assert_eq!(
            check_single(&stored(), out.clone(), "example.com/v2").unwrap_err(),
            "object at index 0: invalid groupVersion (expected example.com/v2, received example.com/v1)"
        );
        out["apiVersion"] = json!("example.com/v2");
        out["kind"] = json!("Gadget");
        assert_eq!(
            check_list_item(&stored(), out.clone(), "example.com/v2", 0).unwrap_err(),
            "converted object at index 1: invalid kind (expected Widget, received Gadget)"
        );
        out["kind"] = json!("Widget");
        out["metadata"] = json!({ "name": "b", "namespace": "default", "uid": "u1" });
        assert_eq!(
            check_single(&stored(), out.clone(), "example.com/v2").unwrap_err(),
            "object: must have the same name: a != b"
        );
        out["metadata"] = json!({ "name": "a", "namespace": "default", "uid": "u1",
                                  "labels": { "n": 1 } });
        assert_eq!(
            check_single(&stored(), out, "example.com/v2").unwrap_err(),
            "metadata: metadata.labels[n] must be a string, but is int64 in converted object"
        );
    }

    #[test]
    fn requests_carry_uid_desired_version_and_objects() {
        let r = review_request("v1", "u", "example.com/v2", &[json!({})]);
        assert_eq!(r["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(r["kind"], "ConversionReview");
        assert_eq!(r["request"]["uid"], "u");
        assert_eq!(r["request"]["desiredAPIVersion"], "example.com/v2");
        assert_eq!(r["request"]["objects"], json!([{}]));
        assert_eq!(gvk_of(&stored()), "example.com/v1, Kind=Widget");
    }
}
