//! The kubelet API of a process node, over HTTPS with a `system:node:<name>` serving
//! certificate from the cluster CA; clients must present a certificate from the same CA
//! (the API server's kubelet client certificate). Served paths, as the kubelet's:
//!
//! - `GET /healthz`, `GET /pods` (the pods this node runs);
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `tailLines`,
//!   `sinceSeconds`, `sinceTime`, `timestamps`, `limitBytes`, `previous`;
//! - `GET|POST /exec/{namespace}/{pod}/{container}?command=…` and
//!   `/attach/{namespace}/{pod}/{container}`, upgraded to WebSocket (`v5.channel.k8s.io`,
//!   `v4.channel.k8s.io`) or SPDY/3.1 (`X-Stream-Protocol-Version: v4.channel.k8s.io`);
//!   `stdin`/`stdout`/`stderr`/`tty` (or the kubelet's own `input`/`output`/`error`) pick
//!   the streams ([`stream`]);
//! - `GET|POST /portForward/{namespace}/{pod}`, upgraded to SPDY/3.1 (`portforward.k8s.io`),
//!   to WebSocket tunnelling it (`SPDY/3.1+portforward.k8s.io`) or to WebSocket channels
//!   (`v4.channel.k8s.io` with `?ports=`) ([`portforward`]).
//!
//! Errors are `metav1.Status` JSON, so the API server can hand them to the client as is.

mod portforward;
pub(crate) mod pty;
mod spdy;
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
        // Stream frames are small and answered at once: no Nagle delay.
        let _ = tcp.set_nodelay(true);
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
        (&Method::GET, ["metrics", "resource"]) => {
            let mut r = Response::new(full(crate::process::usage::metrics_resource(registry)));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
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
        (&Method::GET | &Method::POST, ["portForward", ns, pod]) => {
            let (ns, pod) = ((*ns).to_owned(), (*pod).to_owned());
            port_forward(req, registry, &ns, &pod)
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

/// The WebSocket subprotocols the client offered.
fn ws_offers(req: &Request<Incoming>) -> Vec<String> {
    req.headers()
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .collect()
}

/// How an upgraded connection carries its streams.
enum Carrier {
    /// WebSocket: the `Sec-WebSocket-Accept` answer and the subprotocol chosen (none for a
    /// client that offered none).
    WebSocket {
        accept: String,
        protocol: Option<&'static str>,
    },
    /// SPDY/3.1 with the negotiated `X-Stream-Protocol-Version`.
    Spdy { protocol: &'static str },
}

impl Carrier {
    /// The 101 answer.
    fn switching(&self) -> Response<Body> {
        let b = Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(http::header::CONNECTION, "Upgrade");
        let b = match self {
            Carrier::WebSocket { accept, protocol } => {
                let b = b
                    .header(http::header::UPGRADE, "websocket")
                    .header(http::header::SEC_WEBSOCKET_ACCEPT, accept.as_str());
                match protocol {
                    Some(p) => b.header(http::header::SEC_WEBSOCKET_PROTOCOL, *p),
                    None => b,
                }
            }
            Carrier::Spdy { protocol } => b
                .header(http::header::UPGRADE, "SPDY/3.1")
                .header("X-Stream-Protocol-Version", *protocol),
        };
        b.body(full("")).unwrap_or_else(|_| Response::new(full("")))
    }
}

fn is_websocket(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// The carrier of an upgrade request: WebSocket with one of `ws_protocols` (the first the
/// server lists that the client offered; `allow_none` accepts a client offering none), or
/// SPDY with one of `spdy_protocols`. Otherwise the error answer, as upstream words it.
fn carrier(
    req: &Request<Incoming>,
    ws_protocols: &[&'static str],
    allow_none: bool,
    spdy_protocols: &[&'static str],
) -> Result<Carrier, Box<Response<Body>>> {
    if is_websocket(req) {
        let accept = req
            .headers()
            .get(http::header::SEC_WEBSOCKET_KEY)
            .and_then(|v| v.to_str().ok())
            .map(ws::accept_key)
            .ok_or_else(|| {
                Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "missing Sec-WebSocket-Key",
                ))
            })?;
        let offered = ws_offers(req);
        if offered.is_empty() && allow_none {
            return Ok(Carrier::WebSocket {
                accept,
                protocol: None,
            });
        }
        let protocol = ws_protocols
            .iter()
            .find(|p| offered.iter().any(|o| o == *p))
            .copied()
            .ok_or_else(|| {
                Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!(
                        "no supported stream protocol offered: client offered {offered:?}, server accepts {ws_protocols:?}"
                    ),
                ))
            })?;
        return Ok(Carrier::WebSocket {
            accept,
            protocol: Some(protocol),
        });
    }
    if spdy::is_spdy_upgrade(req.headers()) {
        return spdy::negotiate(req.headers(), spdy_protocols)
            .map(|protocol| Carrier::Spdy { protocol })
            .ok_or_else(|| {
                let mut refused = status(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    &format!(
                        "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
                        spdy::offers(req.headers()).join(" "),
                        spdy_protocols.join(" ")
                    ),
                );
                // As upstream's httpstream handshake: one header value per protocol it accepts.
                for p in spdy_protocols {
                    refused.headers_mut().append(
                        "x-accepted-stream-protocol-versions",
                        http::HeaderValue::from_static(p),
                    );
                }
                Box::new(refused)
            });
    }
    Err(Box::new(status(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "Upgrade request required (WebSocket or SPDY/3.1)",
    )))
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
    let carrier = match carrier(
        &req,
        &["v5.channel.k8s.io", "v4.channel.k8s.io"],
        false,
        &["v4.channel.k8s.io"],
    ) {
        Ok(c) => c,
        Err(resp) => return *resp,
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
    let answer = carrier.switching();
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
        let session = match carrier {
            Carrier::WebSocket { .. } => stream::ws_session(upgraded),
            Carrier::Spdy { .. } => match stream::spdy_session(upgraded, streams).await {
                Some(s) => s,
                None => return,
            },
        };
        if verb == "exec" {
            stream::exec(session, instance, argv, streams).await;
        } else {
            stream::attach(session, instance, streams).await;
        }
    });
    answer
}

/// `portForward/{namespace}/{pod}`.
fn port_forward(
    mut req: Request<Incoming>,
    registry: &Registry,
    ns: &str,
    pod: &str,
) -> Response<Body> {
    let Some(uid) = registry
        .pods()
        .into_iter()
        .find(|(n, p, _)| n == ns && p == pod)
        .map(|(_, _, uid)| uid)
    else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("pod {ns}/{pod} is not running on this node"),
        );
    };
    let target = portforward::Target {
        pod: format!("{ns}/{pod}"),
        uid,
    };
    const TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
    let carrier = match carrier(
        &req,
        &[TUNNEL, "v4.channel.k8s.io"],
        true,
        &["portforward.k8s.io"],
    ) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    let mut ports = Vec::new();
    if matches!(
        carrier,
        Carrier::WebSocket { protocol, .. } if protocol != Some(TUNNEL)
    ) {
        let pairs = query(&req);
        let values: Vec<&str> = pairs
            .iter()
            .filter(|(k, _)| k == "ports" || k == "port")
            .map(|(_, v)| v.as_str())
            .collect();
        ports = match portforward::parse_ports(&values) {
            Ok(p) => p,
            Err(m) => return status(StatusCode::BAD_REQUEST, "BadRequest", &m),
        };
    }
    let answer = carrier.switching();
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "kubelet port-forward upgrade failed");
                return;
            }
        };
        match carrier {
            Carrier::Spdy { .. } => portforward::spdy(upgraded, target).await,
            Carrier::WebSocket {
                protocol: Some(TUNNEL),
                ..
            } => portforward::spdy(portforward::ws_bytes(upgraded), target).await,
            Carrier::WebSocket { .. } => portforward::websocket(upgraded, ports, target).await,
        }
    });
    answer
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
