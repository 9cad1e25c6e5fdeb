//! Proxying a request to the extension API server of its APIService (upstream's
//! `proxyHandler` and `UpgradeAwareHandler`): the user the pipeline authenticated (after
//! impersonation) travels as `X-Remote-User`, `X-Remote-Group` and `X-Remote-Extra-<key>`,
//! replacing whatever the client sent in those headers; the client's `Authorization` and
//! `Impersonate-*` headers are dropped (upstream's filters remove them once used). Watches
//! stream through; upgrade requests (exec-style SPDY or WebSocket) are joined byte for byte
//! after the extension server answers 101.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::client::{Client, Endpoint};
use crate::pipeline::UserInfo;

/// Headers that belong to one hop, never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// Upstream's limit for a request that is not long-running (`--request-timeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `http.Error`'s plain-text answer, as upstream's proxy writes its failures.
pub fn plain_error(status: StatusCode, text: &str) -> Response {
    (
        status,
        [
            (http::header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{text}\n"),
    )
        .into_response()
}

/// Whether a header is one of the request-header authentication headers.
fn is_remote_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "x-remote-user"
        || n == "x-remote-group"
        || n == "x-remote-uid"
        || n.starts_with("x-remote-extra-")
}

/// Escapes an extra key as upstream's `headerKeyEscape` (percent-encoding outside the
/// token characters).
fn escape_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        let legal = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        if legal {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The request headers sent on: the client's minus hop-by-hop, credentials and any
/// request-header identity, plus the authenticated `user`'s identity.
pub fn forwarded_headers(headers: &HeaderMap, user: &UserInfo, upgrade: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        let n = name.as_str();
        if (HOP_BY_HOP.contains(&n) && !(upgrade && (n == "connection" || n == "upgrade")))
            || n == "authorization"
            || n.starts_with("impersonate-")
            || is_remote_header(n)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if let Ok(v) = HeaderValue::from_str(&user.name) {
        out.insert(HeaderName::from_static("x-remote-user"), v);
    }
    for g in &user.groups {
        if let Ok(v) = HeaderValue::from_str(g) {
            out.append(HeaderName::from_static("x-remote-group"), v);
        }
    }
    for (k, values) in &user.extra {
        let Ok(name) =
            HeaderName::from_bytes(format!("x-remote-extra-{}", escape_key(k)).as_bytes())
        else {
            continue;
        };
        for v in values {
            if let Ok(v) = HeaderValue::from_str(v) {
                out.append(name.clone(), v);
            }
        }
    }
    out
}

/// Whether the request asks for a protocol upgrade.
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(http::header::UPGRADE)
        && headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Whether the request is long-running (a watch, or a streaming subresource), so no
/// deadline applies.
fn is_long_running(req: &Request) -> bool {
    let query = req.uri().query().unwrap_or("");
    query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "follow=true")
}

/// The client's `?timeout=` (Go duration of seconds/minutes), capped at the default.
fn deadline(req: &Request) -> Duration {
    let query = req.uri().query().unwrap_or("");
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(|t| {
            let t = t.trim();
            if let Some(s) = t.strip_suffix('s') {
                s.parse::<f64>().ok().map(Duration::from_secs_f64)
            } else if let Some(m) = t.strip_suffix('m') {
                m.parse::<f64>()
                    .ok()
                    .map(|m| Duration::from_secs_f64(m * 60.0))
            } else {
                None
            }
        })
        .filter(|d| !d.is_zero())
        .map_or(REQUEST_TIMEOUT, |d| d.min(REQUEST_TIMEOUT))
}

/// Sends `req` to `ep` as `user` and answers with the extension server's response.
pub async fn forward(
    client: &Client,
    ep: &Endpoint,
    user: &UserInfo,
    mut req: Request,
) -> Response {
    let upgrade = is_upgrade(req.headers());
    let on_upgrade = if upgrade {
        req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let long_running = upgrade || is_long_running(&req);
    let limit = deadline(&req);
    let sender = match client.connect(ep, upgrade).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(host = %ep.host, port = ep.port, err = %e, "extension API server unreachable");
            return plain_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("error trying to reach service: {e}"),
            );
        }
    };
    let authority = if ep.port == 443 {
        ep.server_name.clone()
    } else {
        format!("{}:{}", ep.server_name, ep.port)
    };
    let uri = if sender.is_h2() {
        format!("https://{authority}{path_and_query}")
    } else {
        path_and_query
    };
    let mut headers = forwarded_headers(req.headers(), user, upgrade);
    if !sender.is_h2()
        && let Ok(v) = HeaderValue::from_str(&authority)
    {
        headers.insert(http::header::HOST, v);
    }
    let (parts, body) = req.into_parts();
    let mut builder = http::Request::builder().method(parts.method).uri(uri);
    if let Some(h) = builder.headers_mut() {
        *h = headers;
    }
    let Ok(out) = builder.body(if upgrade { Body::empty() } else { body }) else {
        return plain_error(
            StatusCode::BAD_REQUEST,
            "invalid request for the extension server",
        );
    };
    let sent = if long_running {
        sender.send(out).await
    } else {
        match tokio::time::timeout(limit, sender.send(out)).await {
            Ok(r) => r,
            Err(_) => {
                return crate::error::ApiError::Timeout(
                    "request did not complete within requested timeout - context deadline exceeded"
                        .into(),
                )
                .into_response();
            }
        }
    };
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => {
            return plain_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("error trying to reach service: {e}"),
            );
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let backend = hyper::upgrade::on(&mut resp);
        if let Some(client_side) = on_upgrade {
            tokio::spawn(async move {
                let (Ok(a), Ok(b)) = (client_side.await, backend.await) else {
                    return;
                };
                let mut a = hyper_util::rt::TokioIo::new(a);
                let mut b = hyper_util::rt::TokioIo::new(b);
                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
            });
        }
        let (parts, _) = resp.into_parts();
        return Response::from_parts(parts, Body::empty());
    }
    let (mut parts, body) = resp.into_parts();
    for h in ["connection", "keep-alive", "transfer-encoding", "trailer"] {
        parts.headers.remove(h);
    }
    Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spoofed_identity_headers_are_replaced_and_credentials_dropped() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", HeaderValue::from_static("mallory"));
        h.append("X-Remote-Group", HeaderValue::from_static("system:masters"));
        h.insert("x-remote-extra-scopes", HeaderValue::from_static("all"));
        h.insert("authorization", HeaderValue::from_static("Bearer t"));
        h.insert("impersonate-user", HeaderValue::from_static("bob"));
        h.insert("accept", HeaderValue::from_static("application/json"));
        let mut user = UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            ..UserInfo::default()
        };
        user.extra
            .insert("example.com/team a".into(), vec!["x".into()]);
        let out = forwarded_headers(&h, &user, false);
        assert_eq!(out["x-remote-user"], "alice");
        let groups: Vec<_> = out.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["dev", "system:authenticated"]);
        assert!(out.get("x-remote-extra-scopes").is_none());
        assert_eq!(out["x-remote-extra-example.com%2Fteam%20a"], "x");
        assert!(out.get("authorization").is_none());
        assert!(out.get("impersonate-user").is_none());
        assert_eq!(out["accept"], "application/json");
    }
}
