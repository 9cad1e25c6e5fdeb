//! `portForward` sessions: each forwarded connection is dialled at `127.0.0.1:<port>` (the
//! process runtime's pods share the host's network namespace, see `process::sandbox`). Three
//! carriers, as upstream's kubelet and API server serve them:
//!
//! - SPDY/3.1, protocol `portforward.k8s.io` (kubectl up to 1.30): per connection the client
//!   opens an `error` and a `data` stream with the same `port` and `requestID` headers; bytes
//!   flow on the data stream, a failure is written as text on the error stream, and both end
//!   with FIN ([`spdy`]);
//! - the same SPDY session tunnelled through WebSocket binary messages, subprotocol
//!   `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+, KEP-4006; upstream's API server unwraps
//!   it, Capstan's kubelet does so itself and the API server splices) ([`ws_bytes`]);
//! - WebSocket `v4.channel.k8s.io` (or no subprotocol) with `?ports=`: channel 2i carries the
//!   data of the i-th port, 2i+1 its errors, each channel's first message from the server
//!   being the port, little-endian (the Python client) ([`websocket`]).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::spdy;
use super::ws::{self, Message};

/// How long dialling a pod's port may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer size.
const BUF: usize = 32 * 1024;
/// Most requests waiting for the second stream of their pair.
const MAX_PENDING: usize = 1024;

/// The pod a session forwards to, for messages.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// `namespace/name`.
    pub(crate) pod: String,
    /// Its uid.
    pub(crate) uid: String,
}

impl Target {
    /// Dials `port` in the pod.
    async fn dial(&self, port: u16) -> Result<TcpStream, String> {
        let err = |e: String| {
            format!(
                "error forwarding port {port} to pod {}, uid {}: {e}",
                self.pod, self.uid
            )
        };
        match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(("127.0.0.1", port))).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                Ok(s)
            }
            Ok(Err(e)) => Err(err(format!("failed to connect to localhost:{port}: {e}"))),
            Err(_) => Err(err(format!("timed out connecting to localhost:{port}"))),
        }
    }
}

/// Upstream's pairing key: the `requestID` header, or for older clients that send none, the
/// error stream's id (a data stream's id less 2).
fn request_id(s: &spdy::Stream) -> String {
    if let Some(id) = s.header("requestid").filter(|v| !v.is_empty()) {
        return id.to_owned();
    }
    match s.header("streamtype") {
        Some("data") => s.id.saturating_sub(2).to_string(),
        _ => s.id.to_string(),
    }
}

/// Serves a SPDY `portforward.k8s.io` connection over `io` until the client ends it.
pub(crate) async fn spdy<IO>(io: IO, target: Target)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut incoming, sender, writer) = spdy::serve(io);
    // Streams waiting for their pair, by request id: (data, error).
    let mut pending: HashMap<String, (Option<spdy::Stream>, Option<spdy::Stream>)> = HashMap::new();
    while let Some(s) = incoming.recv().await {
        let kind = s.header("streamtype").unwrap_or("").to_owned();
        let port = s.header("port").and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port.filter(|p| *p != 0) else {
            tracing::debug!(stream_type = %kind, "port-forward stream without a valid port refused");
            sender.reset(s.id, spdy::frame::REFUSED_STREAM).await;
            continue;
        };
        let key = request_id(&s);
        if !pending.contains_key(&key) && pending.len() >= MAX_PENDING {
            tracing::debug!(request = %key, "too many unpaired port-forward streams");
            sender.reset(s.id, spdy::frame::REFUSED_STREAM).await;
            continue;
        }
        let entry = pending.entry(key.clone()).or_default();
        match kind.as_str() {
            "data" if entry.0.is_none() => entry.0 = Some(s),
            "error" if entry.1.is_none() => entry.1 = Some(s),
            _ => {
                tracing::debug!(stream_type = %kind, request = %key, "unexpected port-forward stream refused");
                sender.reset(s.id, spdy::frame::REFUSED_STREAM).await;
                continue;
            }
        }
        if matches!(pending.get(&key), Some((Some(_), Some(_))))
            && let Some((Some(data), Some(error))) = pending.remove(&key)
        {
            tokio::spawn(forward_spdy(
                sender.clone(),
                data,
                error,
                port,
                target.clone(),
            ));
        }
    }
    sender.shutdown().await;
    let _ = writer.await;
}

/// One forwarded connection over a SPDY stream pair.
async fn forward_spdy(
    sender: spdy::Sender,
    data: spdy::Stream,
    error: spdy::Stream,
    port: u16,
    target: Target,
) {
    let (data_id, error_id) = (data.id, error.id);
    match target.dial(port).await {
        Err(message) => {
            tracing::debug!(%message, "port-forward dial failed");
            sender.data(error_id, message.as_bytes()).await;
        }
        Ok(tcp) => {
            let (mut tr, mut tw) = tcp.into_split();
            let mut from_client = data.data;
            // Client to pod, until the client ends its half (it may outlive the answer).
            tokio::spawn(async move {
                while let Some(b) = from_client.recv().await {
                    if tw.write_all(&b).await.is_err() {
                        return;
                    }
                }
                let _ = tw.shutdown().await;
            });
            let mut buf = vec![0u8; BUF];
            loop {
                let n = tokio::select! {
                    n = tr.read(&mut buf) => n,
                    // The client went away: drop the pod's connection too.
                    () = sender.closed() => return,
                };
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if !sender.data(data_id, &buf[..n]).await {
                            break;
                        }
                    }
                }
            }
        }
    }
    sender.fin(data_id).await;
    sender.fin(error_id).await;
}

/// The ports of a WebSocket port-forward request (`ports=80,8080` or repeated).
pub(crate) fn parse_ports(values: &[&str]) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for v in values.iter().flat_map(|v| v.split(',')) {
        let v = v.trim();
        match v.parse::<u16>() {
            Ok(p) if p != 0 => ports.push(p),
            _ => return Err(format!("unable to parse \"{v}\" as a port: invalid port")),
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    Ok(ports)
}

/// Serves a WebSocket (`v4.channel.k8s.io`) port-forward of `ports` over `io`.
pub(crate) async fn websocket<IO>(io: IO, ports: Vec<u16>, target: Target)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, mut w) = tokio::io::split(io);
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(64);
    let (pong_tx, mut pong_rx) = mpsc::channel::<Vec<u8>>(8);
    let writer = tokio::spawn(async move {
        loop {
            tokio::select! {
                m = out_rx.recv() => match m {
                    Some((ch, d)) => {
                        let mut msg = Vec::with_capacity(d.len() + 1);
                        msg.push(ch);
                        msg.extend_from_slice(&d);
                        if ws::write_binary(&mut w, &msg).await.is_err() { return; }
                    }
                    None => break,
                },
                Some(p) = pong_rx.recv() => {
                    if ws::write_pong(&mut w, &p).await.is_err() { return; }
                }
            }
        }
        let _ = ws::write_close(&mut w).await;
        let _ = w.shutdown().await;
    });
    let mut to_pod: Vec<mpsc::Sender<Bytes>> = Vec::new();
    let mut pairs = Vec::new();
    // Cancelled when the client closes: the pods' connections end with it.
    let gone = CancellationToken::new();
    for (i, port) in ports.iter().copied().enumerate() {
        let (data_ch, error_ch) = ((2 * i) as u8, (2 * i + 1) as u8);
        let le = port.to_le_bytes().to_vec();
        let _ = out_tx.send((data_ch, le.clone())).await;
        let _ = out_tx.send((error_ch, le)).await;
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        to_pod.push(tx);
        pairs.push(tokio::spawn(forward_ws(
            rx,
            out_tx.clone(),
            data_ch,
            error_ch,
            port,
            target.clone(),
            gone.clone(),
        )));
    }
    drop(out_tx);
    let reader_gone = gone.clone();
    let reader = tokio::spawn(async move {
        let _cancel_on_exit = reader_gone.drop_guard();
        let mut r = ws::Reader::new(r);
        let mut pongs = Vec::new();
        loop {
            let msg = r.next(&mut pongs).await;
            for p in pongs.drain(..) {
                let _ = pong_tx.send(p).await;
            }
            match msg {
                Ok(Message::Data(d)) if d.len() > 1 => {
                    let ch = usize::from(d[0]);
                    if ch % 2 == 0
                        && let Some(tx) = to_pod.get(ch / 2)
                    {
                        let _ = tx.send(Bytes::copy_from_slice(&d[1..])).await;
                    }
                }
                Ok(Message::Data(_)) => {}
                Ok(Message::Close) | Err(_) => return,
            }
        }
    });
    // The session ends when every port's connection has.
    for p in pairs {
        let _ = p.await;
    }
    let _ = writer.await;
    reader.abort();
}

async fn forward_ws(
    mut from_client: mpsc::Receiver<Bytes>,
    out: mpsc::Sender<(u8, Vec<u8>)>,
    data_ch: u8,
    error_ch: u8,
    port: u16,
    target: Target,
    gone: CancellationToken,
) {
    let tcp = match target.dial(port).await {
        Ok(t) => t,
        Err(message) => {
            let _ = out.send((error_ch, message.into_bytes())).await;
            return;
        }
    };
    let (mut tr, mut tw) = tcp.into_split();
    let up = tokio::spawn(async move {
        while let Some(b) = from_client.recv().await {
            if tw.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = tw.shutdown().await;
    });
    let mut buf = vec![0u8; BUF];
    loop {
        let n = tokio::select! {
            n = tr.read(&mut buf) => n,
            () = gone.cancelled() => break,
        };
        match n {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send((data_ch, buf[..n].to_vec())).await.is_err() {
                    break;
                }
            }
        }
    }
    up.abort();
}

/// The byte stream a WebSocket carries in its binary messages (a SPDY connection tunnelled
/// as KEP-4006 does): what the client sends is read from the returned end, what is written
/// to it goes out as binary messages.
pub(crate) fn ws_bytes<IO>(io: IO) -> tokio::io::DuplexStream
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (inner, outer) = tokio::io::duplex(256 * 1024);
    let (r, mut w) = tokio::io::split(io);
    let (mut inner_r, mut inner_w) = tokio::io::split(inner);
    let (pong_tx, mut pong_rx) = mpsc::channel::<Vec<u8>>(8);
    let writer = tokio::spawn(async move {
        let mut buf = vec![0u8; BUF];
        loop {
            tokio::select! {
                n = inner_r.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => if ws::write_binary(&mut w, &buf[..n]).await.is_err() { return; },
                },
                Some(p) = pong_rx.recv() => {
                    if ws::write_pong(&mut w, &p).await.is_err() { return; }
                }
            }
        }
        let _ = ws::write_close(&mut w).await;
        let _ = w.shutdown().await;
    });
    tokio::spawn(async move {
        let mut r = ws::Reader::new(r);
        let mut pongs = Vec::new();
        loop {
            let msg = r.next(&mut pongs).await;
            for p in pongs.drain(..) {
                let _ = pong_tx.send(p).await;
            }
            match msg {
                Ok(Message::Data(d)) => {
                    if !d.is_empty() && inner_w.write_all(&d).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close) | Err(_) => break,
            }
        }
        let _ = inner_w.shutdown().await;
        drop(writer);
    });
    outer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_parsed_as_upstream() {
        assert_eq!(parse_ports(&["80,8080"]).unwrap(), vec![80, 8080]);
        assert_eq!(parse_ports(&["80", "81"]).unwrap(), vec![80, 81]);
        assert!(parse_ports(&["0"]).is_err());
        assert!(parse_ports(&["x"]).is_err());
        assert!(parse_ports(&[]).is_err());
    }

    #[tokio::test]
    async fn a_websocket_port_forward_announces_ports_and_carries_bytes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&[b, *b"!!!!"].concat()).await.unwrap();
        });
        let (client, server) = tokio::io::duplex(64 * 1024);
        let target = Target {
            pod: "default/p".into(),
            uid: "u".into(),
        };
        let session = tokio::spawn(websocket(server, vec![port], target));
        let (cr, mut cw) = tokio::io::split(client);
        // A masked client frame on channel 0.
        let mask = [9u8, 8, 7, 6];
        let payload = b"\x00ping";
        let mut f = vec![0x82, 0x80 | payload.len() as u8];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        cw.write_all(&f).await.unwrap();
        let mut r = ws::Reader::new(cr);
        let mut pongs = Vec::new();
        let le = port.to_le_bytes();
        assert_eq!(
            r.next(&mut pongs).await.unwrap(),
            Message::Data(vec![0, le[0], le[1]])
        );
        assert_eq!(
            r.next(&mut pongs).await.unwrap(),
            Message::Data(vec![1, le[0], le[1]])
        );
        let mut got = Vec::new();
        while got.len() < 8 {
            match r.next(&mut pongs).await.unwrap() {
                Message::Data(d) => {
                    assert_eq!(d[0], 0);
                    got.extend_from_slice(&d[1..]);
                }
                Message::Close => break,
            }
        }
        assert_eq!(got, b"ping!!!!");
        assert_eq!(r.next(&mut pongs).await.unwrap(), Message::Close);
        session.await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_client_ends_the_pods_idle_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            // Idle until the kubelet drops the connection.
            let mut b = [0u8; 1];
            let n = s.read(&mut b).await.unwrap_or(0);
            let _ = held_tx.send(n);
        });
        let (client, server) = tokio::io::duplex(64 * 1024);
        let target = Target {
            pod: "default/p".into(),
            uid: "u".into(),
        };
        let session = tokio::spawn(websocket(server, vec![port], target));
        let (cr, mut cw) = tokio::io::split(client);
        let mut r = ws::Reader::new(cr);
        let mut pongs = Vec::new();
        r.next(&mut pongs).await.unwrap();
        r.next(&mut pongs).await.unwrap();
        // A masked close frame.
        cw.write_all(&[0x88, 0x80, 1, 2, 3, 4]).await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(10), session).await;
        assert!(done.is_ok(), "the session outlived its client");
        let n = tokio::time::timeout(Duration::from_secs(10), held_rx).await;
        assert_eq!(n.unwrap().unwrap(), 0);
    }
}
