//! The server side of a SPDY/3.1 connection as Kubernetes streams use it (upstream's
//! `httpstream/spdy`, moby's spdystream): the client opens streams with SYN_STREAM, their
//! headers naming what each is for (`streamType`, `port`, `requestID`); each is answered
//! with a SYN_REPLY; DATA frames carry bytes, FIN ends one side, RST_STREAM both; PINGs are
//! echoed. No flow control is enforced (spdystream does not enforce it either) and WINDOW_UPDATE
//! and SETTINGS are ignored.
//!
//! [`serve`] runs the connection: a reader task turns frames into [`Stream`]s (their data as a
//! channel), a writer task owns the write half and the header compressor; [`Sender`] queues
//! frames to it.

pub(crate) mod frame;
pub(crate) mod zlib;

use std::collections::HashMap;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Largest DATA frame written.
const CHUNK: usize = 32 * 1024;

/// A stream the client opened.
pub(crate) struct Stream {
    /// The stream id.
    pub(crate) id: u32,
    /// Its headers, names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
    /// What the client sends on it; closed at its FIN or RST_STREAM (or the connection's end).
    pub(crate) data: mpsc::Receiver<Bytes>,
}

impl Stream {
    /// The value of header `name` (lower-case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

enum Out {
    Frame(Vec<u8>),
    Reply(u32),
    Shutdown,
}

/// Queues frames to the connection's writer.
#[derive(Clone)]
pub(crate) struct Sender {
    tx: mpsc::Sender<Out>,
}

impl Sender {
    /// Sends `data` on stream `id`; false once the connection is gone.
    pub(crate) async fn data(&self, id: u32, data: &[u8]) -> bool {
        for c in data.chunks(CHUNK) {
            if self
                .tx
                .send(Out::Frame(frame::data(id, 0, c)))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Ends this side of stream `id` (an empty DATA frame with FIN).
    pub(crate) async fn fin(&self, id: u32) {
        let _ = self
            .tx
            .send(Out::Frame(frame::data(id, frame::FLAG_FIN, &[])))
            .await;
    }

    /// Abandons stream `id`.
    pub(crate) async fn reset(&self, id: u32, status: u32) {
        let _ = self
            .tx
            .send(Out::Frame(frame::rst_stream(id, status)))
            .await;
    }

    /// Resolves once the connection's writer is gone (the connection ended).
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Writes what is queued, then ends the connection.
    pub(crate) async fn shutdown(&self) {
        let _ = self.tx.send(Out::Shutdown).await;
    }
}

/// Runs a SPDY server connection over `io`: the streams the client opens arrive on the
/// receiver; the returned task ends with the connection's writer.
pub(crate) fn serve<IO>(io: IO) -> (mpsc::Receiver<Stream>, Sender, tokio::task::JoinHandle<()>)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let (out_tx, out_rx) = mpsc::channel::<Out>(64);
    let (streams_tx, streams_rx) = mpsc::channel::<Stream>(16);
    let sender = Sender { tx: out_tx };
    let writer = tokio::spawn(write_loop(w, out_rx));
    tokio::spawn(read_loop(r, streams_tx, sender.clone()));
    (streams_rx, sender, writer)
}

async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Out>) {
    let dict = zlib::dictionary();
    let mut deflater = zlib::Deflater::new(&dict);
    let empty = frame::encode_headers(&[]);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(out) = next.take() {
            let bytes = match out {
                Out::Frame(f) => f,
                Out::Reply(id) => frame::syn_reply(id, &deflater.deflate(&empty)),
                Out::Shutdown => {
                    let _ = w.flush().await;
                    let _ = w.shutdown().await;
                    return;
                }
            };
            if w.write_all(&bytes).await.is_err() {
                return;
            }
            next = rx.try_recv().ok();
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(mut r: R, streams: mpsc::Sender<Stream>, sender: Sender) {
    let dict = zlib::dictionary();
    let mut inflater = zlib::Inflater::new(&dict);
    let mut open: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    loop {
        let f = match frame::read(&mut r).await {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "SPDY connection ended");
                return;
            }
        };
        match f {
            frame::Frame::SynStream { id, flags, block } => {
                let headers = match inflater
                    .inflate(&block)
                    .map_err(std::io::Error::other)
                    .and_then(|b| frame::decode_headers(&b))
                {
                    Ok(h) => h,
                    Err(e) => {
                        // The header stream is out of step: nothing after can be read.
                        tracing::debug!(error = %e, "SPDY header block refused");
                        return;
                    }
                };
                let _ = sender.tx.send(Out::Reply(id)).await;
                let (tx, rx) = mpsc::channel(64);
                if flags & frame::FLAG_FIN == 0 {
                    open.insert(id, tx);
                }
                let stream = Stream {
                    id,
                    headers,
                    data: rx,
                };
                if streams.send(stream).await.is_err() {
                    open.remove(&id);
                    sender.reset(id, frame::REFUSED_STREAM).await;
                }
            }
            frame::Frame::Data { id, flags, data } => {
                if !data.is_empty()
                    && let Some(tx) = open.get(&id)
                    && tx.send(Bytes::from(data)).await.is_err()
                {
                    open.remove(&id);
                }
                if flags & frame::FLAG_FIN != 0 {
                    open.remove(&id);
                }
            }
            frame::Frame::RstStream { id, .. } => {
                open.remove(&id);
            }
            frame::Frame::Ping(id) => {
                let _ = sender.tx.send(Out::Frame(frame::ping(id))).await;
            }
            frame::Frame::GoAway | frame::Frame::Ignored => {}
        }
    }
}

/// `Upgrade: SPDY/3.1` (case-insensitive).
pub(crate) fn is_spdy_upgrade(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("SPDY/3.1"))
}

/// The first of `supported` among the client's `X-Stream-Protocol-Version` offers.
pub(crate) fn negotiate(
    headers: &http::HeaderMap,
    supported: &[&'static str],
) -> Option<&'static str> {
    let offered: Vec<String> = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .collect();
    // Upstream picks the client's first offer the server supports.
    offered
        .iter()
        .find_map(|o| supported.iter().find(|s| *s == o).copied())
}

/// All the offers, for an error message.
pub(crate) fn offers(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A client end: SYN_STREAM frames with headers compressed as the Go client does
    /// (here with stored blocks, which a zlib reader reads the same).
    fn syn_stream(
        deflater: &mut zlib::Deflater,
        id: u32,
        flags: u8,
        headers: &[(&str, &str)],
    ) -> Vec<u8> {
        let mut body = id.to_be_bytes().to_vec();
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        body.extend(deflater.deflate(&frame::encode_headers(headers)));
        let mut out = vec![0x80, 3, 0, 1, flags];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        out.extend(body);
        out
    }

    #[tokio::test]
    async fn streams_are_replied_to_and_carry_data_until_fin() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut streams, sender, _writer) = serve(server);
        let (mut cr, mut cw) = tokio::io::split(client);
        let mut d = zlib::Deflater::new(&zlib::dictionary());
        cw.write_all(&syn_stream(&mut d, 1, 0, &[("streamType", "stdin")]))
            .await
            .unwrap();
        cw.write_all(&frame::data(1, 0, b"hello")).await.unwrap();
        cw.write_all(&frame::data(1, frame::FLAG_FIN, b""))
            .await
            .unwrap();
        cw.write_all(&frame::ping(9)).await.unwrap();
        let mut s = streams.recv().await.unwrap();
        assert_eq!(s.header("streamtype"), Some("stdin"));
        assert_eq!(s.data.recv().await.unwrap(), Bytes::from_static(b"hello"));
        assert!(s.data.recv().await.is_none());
        // The SYN_REPLY (with a zlib header block) and the PING's echo.
        let mut inf = zlib::Inflater::new(&zlib::dictionary());
        let mut head = [0u8; 8];
        cr.read_exact(&mut head).await.unwrap();
        assert_eq!(head[..4], [0x80, 3, 0, 2]);
        let mut body = vec![0u8; usize::from(head[7])];
        cr.read_exact(&mut body).await.unwrap();
        assert_eq!(body[..4], 1u32.to_be_bytes());
        assert_eq!(inf.inflate(&body[4..]).unwrap(), frame::encode_headers(&[]));
        let f = frame::read(&mut cr).await.unwrap().unwrap();
        assert_eq!(f, frame::Frame::Ping(9));
        assert!(sender.data(1, b"out").await);
        sender.fin(1).await;
        sender.shutdown().await;
        assert_eq!(
            frame::read(&mut cr).await.unwrap(),
            Some(frame::Frame::Data {
                id: 1,
                flags: 0,
                data: b"out".to_vec()
            })
        );
        assert_eq!(
            frame::read(&mut cr).await.unwrap(),
            Some(frame::Frame::Data {
                id: 1,
                flags: frame::FLAG_FIN,
                data: vec![]
            })
        );
        assert_eq!(frame::read(&mut cr).await.unwrap(), None);
    }
}
