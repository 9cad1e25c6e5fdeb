//! The kubelet API of a process node, over HTTPS with a `system:node:<name>` serving
//! certificate from the cluster CA; clients must present a certificate from the same CA
//! (the API server's kubelet client certificate). Served paths, as the kubelet's:
//!
//! - `GET /healthz`, `GET /pods` (the pods this node runs);
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `tailLines`,
//!   `sinceSeconds`, `sinceTime`, `timestamps`, `limitBytes`, `previous`;
//! - `GET|POST /exec/{namespace}/{pod}/{container}?command=…` and
//!   `/attach/{namespace}/{pod}/{container}`, upgraded to WebSocket (`v5.channel.k8s.io`,
//!   `v4.channel.k8s.io`); `stdin`/`stdout`/`stderr`/`tty` (or the kubelet's own
//!   `input`/`output`/`error`) pick the streams. SPDY upgrades are refused with a message.
//!
//! Errors are `metav1.Status` JSON, so the API server can hand them to the client as is.

mod stream;
mod ws;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::process::logs;
use crate::process::registry::Registry;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The TLS configuration of a kubelet: its serving certificate, and client certificates
/// required from the cluster CA.
pub(crate) fn tls_config(
    issued: &certs::IssuedCert,
    ca_der: &[u8],
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls_pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from(ca_der.to_vec()))?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let cert = rustls_pki_types::CertificateDer::from(issued.cert_der.clone());
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)?;
    Ok(Arc::new(config))
}

/// Serves the kubelet API on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    registry: Arc<Registry>,
    node: String,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((tcp, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        let registry = registry.clone();
        let node = node.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(node = %node, %peer, error = %e, "kubelet TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |req| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(handle(req, &registry).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(node = %node, error = %e, "kubelet connection ended");
            }
        });
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

/// A `metav1.Status` failure with `code`.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(full(body.to_string()))
        .unwrap_or_else(|_| Response::new(full("")))
}

fn query(req: &Request<Incoming>) -> Vec<(String, String)> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn flag(q: &HashMap<&str, &str>, names: &[&str]) -> bool {
    names.iter().any(|n| {
        q.get(n)
            .is_some_and(|v| matches!(*v, "1" | "true" | "True"))
    })
}

async fn handle(req: Request<Incoming>, registry: &Registry) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (req.method(), parts.as_slice()) {
        (&Method::GET, ["healthz"]) => Response::new(full("ok")),
        (&Method::GET, ["pods"]) => {
            let items: Vec<_> = registry
                .pods()
                .into_iter()
                .map(|(ns, name, uid)| json!({"metadata": {"namespace": ns, "name": name, "uid": uid}}))
                .collect();
            let body =
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
            Response::new(full(body.to_string()))
        }
        (&Method::GET, ["containerLogs", ns, pod, container]) => {
            let q = query(&req);
            container_logs(registry, ns, pod, container, &q)
        }
        (&Method::GET | &Method::POST, [verb @ ("exec" | "attach"), ns, pod, container]) => {
            let verb = (*verb).to_owned();
            let (ns, pod, container) =
                ((*ns).to_owned(), (*pod).to_owned(), (*container).to_owned());
            upgrade(req, registry, &verb, &ns, &pod, &container)
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("no handler for {path}"),
        ),
    }
}

fn container_logs(
    registry: &Registry,
    ns: &str,
    pod: &str,
    container: &str,
    q: &[(String, String)],
) -> Response<Body> {
    let q: HashMap<&str, &str> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some((logs_files, running)) = registry.container(ns, pod, container) else {
        if registry.has_pod(ns, pod) {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("container {container:?} in pod {pod:?} is waiting to start"),
            );
        }
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("pod {ns}/{pod} is not running on this node"),
        );
    };
    let previous = flag(&q, &["previous"]);
    let (path, done) = if previous {
        match logs_files
            .len()
            .checked_sub(2)
            .and_then(|i| logs_files.get(i))
        {
            Some(p) => (p.clone(), None),
            None => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!(
                        "previous terminated container {container:?} in pod {pod:?} not found"
                    ),
                );
            }
        }
    } else {
        match logs_files.last() {
            Some(p) => {
                // Follow the current instance while it runs.
                let done = running.filter(|r| !*r.done.borrow()).map(|r| r.done);
                (p.clone(), done)
            }
            None => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("container {container:?} in pod {pod:?} is waiting to start"),
                );
            }
        }
    };
    let since = if let Some(t) = q.get("sinceTime").and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(t)
    } else {
        q.get("sinceSeconds")
            .and_then(|s| s.parse::<i64>().ok())
            .map(|s| Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(s))
    };
    let opts = logs::ReadOptions {
        follow: flag(&q, &["follow"]),
        tail_lines: q
            .get("tailLines")
            .and_then(|t| t.parse::<i64>().ok())
            .and_then(|t| usize::try_from(t).ok()),
        since,
        timestamps: flag(&q, &["timestamps"]),
        limit_bytes: q.get("limitBytes").and_then(|t| t.parse::<u64>().ok()),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(logs::stream(path, opts, done, tx));
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    }));
    Response::builder()
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(BodyExt::boxed_unsync(body))
        .unwrap_or_else(|_| Response::new(full("")))
}

/// The WebSocket subprotocol to answer with, from the client's offer.
fn pick_protocol(req: &Request<Incoming>) -> Option<&'static str> {
    let offered: Vec<String> = req
        .headers()
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .collect();
    ["v5.channel.k8s.io", "v4.channel.k8s.io"]
        .into_iter()
        .find(|p| offered.iter().any(|o| o == p))
}

fn upgrade(
    mut req: Request<Incoming>,
    registry: &Registry,
    verb: &str,
    ns: &str,
    pod: &str,
    container: &str,
) -> Response<Body> {
    let pairs = query(&req);
    let q: HashMap<&str, &str> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let argv: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let streams = stream::Streams {
        stdin: flag(&q, &["stdin", "input"]),
        stdout: flag(&q, &["stdout", "output"]),
        stderr: flag(&q, &["stderr", "error"]),
        tty: flag(&q, &["tty"]),
    };
    if verb == "exec" && argv.is_empty() {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "you must specify at least 1 command",
        );
    }
    let is_ws = req
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_ws {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "Capstan's process nodes stream exec and attach over WebSocket only (v5.channel.k8s.io, v4.channel.k8s.io; kubectl 1.30 or later); SPDY is not supported",
        );
    }
    let Some(protocol) = pick_protocol(&req) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "no supported stream protocol offered (v5.channel.k8s.io, v4.channel.k8s.io)",
        );
    };
    let Some(key) = req
        .headers()
        .get(http::header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .map(ws::accept_key)
    else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "missing Sec-WebSocket-Key",
        );
    };
    let instance = registry
        .container(ns, pod, container)
        .and_then(|(_, running)| running)
        .filter(|r| !*r.done.borrow());
    let Some(instance) = instance else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("container not found ({container:?}): it is not running"),
        );
    };
    if verb == "attach" && streams.stdin && instance.stdin.is_none() {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("container {container:?} has no stdin (the pod spec must set stdin: true)"),
        );
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let verb = verb.to_owned();
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "kubelet stream upgrade failed");
                return;
            }
        };
        if verb == "exec" {
            stream::exec(upgraded, instance, argv, streams).await;
        } else {
            stream::attach(upgraded, instance, streams).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::SEC_WEBSOCKET_ACCEPT, key)
        .header(http::header::SEC_WEBSOCKET_PROTOCOL, protocol)
        .body(full(""))
        .unwrap_or_else(|_| Response::new(full("")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_components_are_percent_decoded() {
        assert_eq!(decode("sh%20-c+x%3D1"), "sh -c x=1");
        assert_eq!(decode("100%"), "100%");
    }
}
