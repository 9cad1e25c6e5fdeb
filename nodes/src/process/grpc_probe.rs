//! The gRPC probe handler, as the kubelet's: one unary call of the standard health service
//! (`grpc.health.v1.Health/Check`, `service` from the probe) over HTTP/2 without TLS (h2c)
//! to 127.0.0.1 (pods share the host network); healthy only when the answer's status is
//! `SERVING`. The messages are two one-field protobufs, written and read by hand here.

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The health service's statuses (`HealthCheckResponse.ServingStatus`).
fn status_name(n: u64) -> &'static str {
    match n {
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNKNOWN",
    }
}

/// `HealthCheckRequest { service }` in a gRPC length-prefixed frame.
fn request_frame(service: &str) -> Vec<u8> {
    let mut msg = Vec::new();
    if !service.is_empty() {
        msg.push(0x0a); // field 1, length-delimited
        put_varint(&mut msg, service.len() as u64);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(&msg);
    frame
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.first()?;
        buf.advance(1);
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The `status` of a `HealthCheckResponse` frame (0, `UNKNOWN`, when absent).
fn response_status(body: &[u8]) -> Result<u64, String> {
    if body.len() < 5 {
        return Err("the health check answered no message".into());
    }
    if body[0] != 0 {
        return Err("the health check answered a compressed message".into());
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let mut msg = body
        .get(5..5 + len)
        .ok_or("the health check's message is cut short")?;
    let mut status = 0;
    while !msg.is_empty() {
        let key = varint(&mut msg).ok_or("malformed health check answer")?;
        match (key >> 3, key & 7) {
            (1, 0) => status = varint(&mut msg).ok_or("malformed health check answer")?,
            (_, 0) => {
                varint(&mut msg).ok_or("malformed health check answer")?;
            }
            (_, 2) => {
                let n = varint(&mut msg).ok_or("malformed health check answer")?;
                let n = usize::try_from(n).map_err(|_| "malformed health check answer")?;
                if n > msg.len() {
                    return Err("malformed health check answer".into());
                }
                msg.advance(n);
            }
            _ => return Err("malformed health check answer".into()),
        }
    }
    Ok(status)
}

/// Calls `Check` for `service` on 127.0.0.1:`port`; Ok when it answers `SERVING`.
pub(crate) async fn check(port: u16, service: &str) -> Result<(), String> {
    let addr = format!("127.0.0.1:{port}");
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| format!("failed to connect service {addr:?} within the timeout: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .map_err(|e| format!("HTTP/2 handshake with {addr}: {e}"))?;
    tokio::spawn(conn);
    let req = http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "kube-probe/1.33")
        .body(Full::new(Bytes::from(request_frame(service))))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("health check call: {e}"))?;
    let header_status = resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let collected = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("health check answer: {e}"))?;
    let grpc_status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(header_status);
    if let Some(code) = grpc_status.filter(|c| c != "0") {
        return Err(format!("health rpc failed with grpc-status {code}"));
    }
    let status = response_status(&collected.to_bytes())?;
    if status == 1 {
        Ok(())
    } else {
        Err(format!(
            "service unhealthy (responded with {:?})",
            status_name(status)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_messages_are_written_and_read_as_protobuf() {
        assert_eq!(request_frame(""), vec![0, 0, 0, 0, 0]);
        assert_eq!(
            request_frame("db"),
            vec![0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']
        );
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        assert_eq!(response_status(&[0, 0, 0, 0, 0]), Ok(0));
        assert!(response_status(&[0, 0, 0, 0, 9, 0x08]).is_err());
        assert!(response_status(&[1, 0, 0, 0, 0]).is_err());
    }
}
