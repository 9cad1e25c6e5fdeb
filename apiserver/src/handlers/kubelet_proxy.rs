//! Reaching a node's kubelet, as kube-apiserver does for `pods/log`, `pods/exec`,
//! `pods/attach`, `pods/portforward` and `nodes/proxy`: the node's address is its `InternalIP` and
//! `status.daemonEndpoints.kubeletEndpoint.Port`; the connection is HTTPS, the kubelet's
//! serving certificate checked against the cluster CA, this server presenting its kubelet
//! client certificate ([`configure`]). Logs stream back as the kubelet sends them; an
//! exec/attach/portforward upgrade (WebSocket, SPDY/3.1, or WebSocket tunnelling SPDY for
//! port-forward) is forwarded with its protocol negotiation headers, and once the kubelet
//! switches protocols both connections are spliced, so the stream protocol is the
//! kubelet's and the client's (Capstan's kubelet unwraps the tunnelled SPDY itself, where
//! upstream's API server does).

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::response::Response;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value};

use crate::error::{ApiError, Result};

/// Headers of an upgrade passed from the client to the kubelet and back (WebSocket's, and
/// SPDY's protocol negotiation).
const UPGRADE_HEADERS: [&str; 8] = [
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-accept",
    "x-stream-protocol-version",
    "x-accepted-stream-protocol-versions",
];

/// How long connecting to a kubelet may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

static CLIENT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Sets the TLS identity this server reaches kubelets with (kube-apiserver's
/// `--kubelet-client-certificate`, `--kubelet-client-key` and
/// `--kubelet-certificate-authority`). Later calls are ignored.
pub fn configure(ca_pem: &str, cert_pem: &str, key_pem: &str) -> std::result::Result<(), String> {
    use rustls_pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let c = c.map_err(|e| format!("kubelet CA: {e}"))?;
        roots.add(c).map_err(|e| format!("kubelet CA: {e}"))?;
    }
    let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("kubelet client certificate: {e}"))?;
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("kubelet client key: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| format!("kubelet client certificate: {e}"))?;
    let _ = CLIENT.set(Arc::new(config));
    Ok(())
}

/// Whether this server can reach kubelets at all.
pub(super) fn configured() -> bool {
    CLIENT.get().is_some()
}

/// The kubelet address of a stored Node: its InternalIP and kubelet port.
pub(super) fn kubelet_address(node: &Map<String, Value>) -> Option<(IpAddr, u16)> {
    let status = node.get("status")?;
    let port = status
        .pointer("/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)?;
    let ip = status
        .get("addresses")?
        .as_array()?
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))?
        .get("address")?
        .as_str()?
        .parse()
        .ok()?;
    Some((ip, port))
}

fn unreachable(node: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!("error dialing the kubelet of node {node:?}: {e}"))
}

/// Sends `method path_and_query` to the kubelet at `addr`, with `headers`, and returns its
/// response (the connection lives as long as the response and any upgrade need).
async fn send(
    node: &str,
    addr: (IpAddr, u16),
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<http::Response<hyper::body::Incoming>> {
    let config = CLIENT.get().cloned().ok_or_else(|| {
        ApiError::BadRequest(format!(
            "node {node:?} has a kubelet, but this API server has no kubelet client certificate"
        ))
    })?;
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| unreachable(node, "timed out"))?
        .map_err(|e| unreachable(node, e))?;
    // Interactive streams: small frames go out at once.
    let _ = tcp.set_nodelay(true);
    let server_name = rustls_pki_types::ServerName::IpAddress(addr.0.into());
    let tls = tokio::time::timeout(
        DIAL_TIMEOUT,
        tokio_rustls::TlsConnector::from(config).connect(server_name, tcp),
    )
    .await
    .map_err(|_| unreachable(node, "TLS handshake timed out"))?
    .map_err(|e| unreachable(node, e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| unreachable(node, e))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "kubelet connection ended");
        }
    });
    let mut req = http::Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(http::header::HOST, format!("{}:{}", addr.0, addr.1));
    for (k, v) in headers {
        if UPGRADE_HEADERS.contains(&k.as_str()) {
            req = req.header(k, v);
        }
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| unreachable(node, e))
}

/// A kubelet's error answer as the client's response (the kubelet speaks `metav1.Status`).
async fn error_answer(resp: http::Response<hyper::body::Incoming>) -> Result<Response> {
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if serde_json::from_slice::<Value>(&body)
        .is_ok_and(|v| v.get("kind") == Some(&Value::from("Status")))
    {
        return Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body))
            .map_err(|e| ApiError::Internal(e.to_string()));
    }
    let text = String::from_utf8_lossy(&body).trim().to_owned();
    Err(match status {
        StatusCode::NOT_FOUND => ApiError::BadRequest(text),
        _ => ApiError::Internal(text),
    })
}

/// `GET` a kubelet path and stream its answer to the client.
pub(super) async fn get(node: &str, addr: (IpAddr, u16), path_and_query: &str) -> Result<Response> {
    let resp = send(node, addr, Method::GET, path_and_query, &HeaderMap::new()).await?;
    if !resp.status().is_success() {
        return error_answer(resp).await;
    }
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .cloned()
        .unwrap_or_else(|| http::HeaderValue::from_static("text/plain"));
    Response::builder()
        .status(resp.status())
        .header(http::header::CONTENT_TYPE, content_type)
        .body(axum::body::Body::new(resp.into_body()))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// The header a refused stream upgrade lists the server's protocols in.
const ACCEPTED_PROTOCOLS: &str = "x-accepted-stream-protocol-versions";

/// Forwards an upgrade request (exec, attach) to the kubelet; when it switches protocols,
/// splices the client's connection to the kubelet's.
pub(super) async fn upgrade(
    node: &str,
    addr: (IpAddr, u16),
    parts: &http::request::Parts,
    path_and_query: &str,
) -> Result<Response> {
    let Some(client_upgrade) = parts.extensions.get::<hyper::upgrade::OnUpgrade>().cloned() else {
        return Err(ApiError::BadRequest(
            "Upgrade request required (WebSocket: v5.channel.k8s.io or v4.channel.k8s.io; SPDY/3.1)"
                .into(),
        ));
    };
    let mut resp = send(
        node,
        addr,
        parts.method.clone(),
        path_and_query,
        &parts.headers,
    )
    .await?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // A refused protocol names the accepted ones (upstream passes the kubelet's answer on).
        let accepted: Vec<http::HeaderValue> = resp
            .headers()
            .get_all(ACCEPTED_PROTOCOLS)
            .iter()
            .cloned()
            .collect();
        let mut answer = error_answer(resp).await?;
        for v in accepted {
            answer.headers_mut().append(ACCEPTED_PROTOCOLS, v);
        }
        return Ok(answer);
    }
    let kubelet_upgrade = hyper::upgrade::on(&mut resp);
    let node_name = node.to_owned();
    tokio::spawn(async move {
        let (client, kubelet) = match tokio::join!(client_upgrade, kubelet_upgrade) {
            (Ok(c), Ok(k)) => (c, k),
            (c, k) => {
                tracing::debug!(node = %node_name, client = ?c.err(), kubelet = ?k.err(), "stream upgrade failed");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut kubelet = TokioIo::new(kubelet);
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut kubelet).await {
            tracing::debug!(node = %node_name, error = %e, "stream ended");
        }
    });
    let mut out = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in resp.headers() {
        if UPGRADE_HEADERS.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    out.body(axum::body::Body::empty())
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Percent-encodes a query value.
pub(super) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kubelet_address_comes_from_the_node_status() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 40000}}}});
        assert_eq!(
            kubelet_address(node.as_object().unwrap()),
            Some(("127.0.0.1".parse().unwrap(), 40000))
        );
        let none = json!({"status": {"addresses": []}});
        assert_eq!(kubelet_address(none.as_object().unwrap()), None);
        assert_eq!(encode("sh -c"), "sh%20-c");
    }
}
