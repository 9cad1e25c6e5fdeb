//! Accepts HTTP/2 requests whose `:authority` carries a URL scheme.
//!
//! etcdctl 3.4 dials some commands (`endpoint status`, `endpoint health`) with the gRPC target
//! `passthrough:///http://HOST:PORT`, so it sends `:authority: http://HOST:PORT`. etcd's Go
//! server accepts that; the `h2` crate under tonic rejects the request as malformed
//! (RST_STREAM PROTOCOL_ERROR). [`AuthorityFix`] sits between the socket and `h2`: it decodes
//! the first request's header block and, only if its authority has a scheme, rewrites the
//! header blocks of that connection with the scheme removed. Connections from other clients
//! are inspected once and then passed through byte for byte.
//!
//! Header blocks are decoded with the client's HPACK context (`loona-hpack`) and re-encoded
//! with a fresh one whose dynamic table mirrors `h2`'s decoder, so both stay consistent.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The default SETTINGS_MAX_FRAME_SIZE, which `h2` advertises.
const MAX_FRAME: usize = 16_384;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Waiting for the client connection preface.
    Preface,
    /// Waiting for the first header block to decide.
    Inspect,
    /// Every header block is decoded and re-encoded with a clean authority.
    Rewrite,
    /// Bytes go through untouched.
    Passthrough,
}

/// A header block being collected from HEADERS + CONTINUATION frames.
struct Block {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    raw: Vec<u8>,
}

/// An I/O stream that repairs scheme-carrying `:authority` headers on the way in.
pub struct AuthorityFix<S> {
    inner: S,
    mode: Mode,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    out_pos: usize,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
    eof: bool,
}

impl<S> AuthorityFix<S> {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            mode: Mode::Preface,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            out_pos: 0,
            block: None,
            decoder: loona_hpack::Decoder::new(),
            encoder: loona_hpack::Encoder::new(),
            eof: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn pass_all(&mut self) {
        self.mode = Mode::Passthrough;
        if let Some(b) = self.block.take() {
            self.outbuf.extend_from_slice(&b.raw);
        }
        self.outbuf.append(&mut self.inbuf);
    }

    /// Moves every complete unit of `inbuf` to `outbuf`, rewriting where needed.
    fn process(&mut self) {
        loop {
            match self.mode {
                Mode::Passthrough => {
                    self.outbuf.append(&mut self.inbuf);
                    return;
                }
                Mode::Preface => {
                    let n = self.inbuf.len().min(PREFACE.len());
                    if self.inbuf[..n] != PREFACE[..n] {
                        // Not HTTP/2 prior knowledge (e.g. HTTP/1.1): nothing to do.
                        self.pass_all();
                        return;
                    }
                    if n < PREFACE.len() {
                        return;
                    }
                    self.outbuf.extend(self.inbuf.drain(..PREFACE.len()));
                    self.mode = Mode::Inspect;
                }
                Mode::Inspect | Mode::Rewrite => {
                    if self.inbuf.len() < FRAME_HEADER {
                        return;
                    }
                    let len = (usize::from(self.inbuf[0]) << 16)
                        | (usize::from(self.inbuf[1]) << 8)
                        | usize::from(self.inbuf[2]);
                    if self.inbuf.len() < FRAME_HEADER + len {
                        return;
                    }
                    let frame: Vec<u8> = self.inbuf.drain(..FRAME_HEADER + len).collect();
                    self.frame(&frame);
                }
            }
        }
    }

    fn frame(&mut self, frame: &[u8]) {
        let kind = frame[3];
        let flags = frame[4];
        let stream_id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER..];
        match kind {
            HEADERS => {
                let mut body = payload;
                let mut pad = 0usize;
                if flags & PADDED != 0 {
                    let Some((&p, rest)) = body.split_first() else {
                        return self.give_up(frame);
                    };
                    pad = usize::from(p);
                    body = rest;
                }
                let mut priority = None;
                if flags & PRIORITY != 0 {
                    let Some(p) = body.get(..5) else {
                        return self.give_up(frame);
                    };
                    priority = Some([p[0], p[1], p[2], p[3], p[4]]);
                    body = &body[5..];
                }
                let Some(fragment) = body.get(..body.len().saturating_sub(pad)) else {
                    return self.give_up(frame);
                };
                self.block = Some(Block {
                    stream_id,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    fragment: fragment.to_vec(),
                    raw: frame.to_vec(),
                });
            }
            CONTINUATION => match self.block.as_mut() {
                Some(b) => {
                    b.fragment.extend_from_slice(payload);
                    b.raw.extend_from_slice(frame);
                }
                None => return self.give_up(frame),
            },
            _ => {
                self.outbuf.extend_from_slice(frame);
                return;
            }
        }
        if let Some(block) = self.block.take_if(|_| flags & END_HEADERS != 0) {
            self.finish(&block);
        }
    }

    fn give_up(&mut self, frame: &[u8]) {
        self.outbuf.extend_from_slice(frame);
        self.pass_all();
    }

    fn finish(&mut self, block: &Block) {
        let headers = match self.decoder.decode(&block.fragment) {
            Ok(h) => h,
            Err(_) => {
                // Let h2 see (and reject) exactly what the client sent.
                self.outbuf.extend_from_slice(&block.raw);
                return self.pass_all();
            }
        };
        let has_scheme = headers
            .iter()
            .any(|(n, v)| n.as_slice() == b":authority" && v.windows(3).any(|w| w == b"://"));
        if self.mode == Mode::Inspect && !has_scheme {
            self.outbuf.extend_from_slice(&block.raw);
            return self.pass_all();
        }
        self.mode = Mode::Rewrite;
        let fixed: Vec<(Vec<u8>, Vec<u8>)> = headers
            .into_iter()
            .map(|(n, v)| {
                if n.as_slice() == b":authority" {
                    (n, strip_scheme(&v))
                } else {
                    (n, v)
                }
            })
            .collect();
        let mut encoded = Vec::new();
        if self
            .encoder
            .encode_into(
                fixed.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
                &mut encoded,
            )
            .is_err()
        {
            self.outbuf.extend_from_slice(&block.raw);
            return self.pass_all();
        }
        self.write_block(block, &encoded);
    }

    fn write_block(&mut self, block: &Block, encoded: &[u8]) {
        let mut first = Vec::new();
        if let Some(p) = block.priority {
            first.extend_from_slice(&p);
        }
        let room = MAX_FRAME - first.len();
        let (head, mut rest) = encoded.split_at(encoded.len().min(room));
        first.extend_from_slice(head);
        let mut flags = 0u8;
        if block.end_stream {
            flags |= END_STREAM;
        }
        if block.priority.is_some() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        self.push_frame(HEADERS, flags, block.stream_id, &first);
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME));
            rest = tail;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            self.push_frame(CONTINUATION, flags, block.stream_id, chunk);
        }
    }

    fn push_frame(&mut self, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
        let len = payload.len();
        self.outbuf.extend_from_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
        ]);
        self.outbuf.extend_from_slice(&stream_id.to_be_bytes());
        self.outbuf.extend_from_slice(payload);
    }
}

/// `http://host:port/` → `host:port`.
fn strip_scheme(v: &[u8]) -> Vec<u8> {
    let start = v.windows(3).position(|w| w == b"://").map_or(0, |i| i + 3);
    let rest = &v[start..];
    let end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
    rest[..end].to_vec()
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_pos < this.outbuf.len() {
                let n = buf.remaining().min(this.outbuf.len() - this.out_pos);
                buf.put_slice(&this.outbuf[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.outbuf.len() {
                    this.outbuf.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.mode == Mode::Passthrough && this.inbuf.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.eof {
                // Whatever incomplete bytes remain go to h2 as they are.
                if this.inbuf.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.pass_all();
                continue;
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    if rb.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.inbuf.extend_from_slice(rb.filled());
                        this.process();
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFix<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_frame(stream: u32, block: &[u8]) -> Vec<u8> {
        let mut f = AuthorityFix::new(());
        f.push_frame(HEADERS, END_HEADERS, stream, block);
        f.outbuf
    }

    fn decode_output(out: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut d = loona_hpack::Decoder::new();
        let mut pos = PREFACE.len();
        let mut blocks = Vec::new();
        while pos + FRAME_HEADER <= out.len() {
            let len = (usize::from(out[pos]) << 16)
                | (usize::from(out[pos + 1]) << 8)
                | usize::from(out[pos + 2]);
            if out[pos + 3] == HEADERS {
                blocks.push(
                    d.decode(&out[pos + FRAME_HEADER..pos + FRAME_HEADER + len])
                        .unwrap(),
                );
            }
            pos += FRAME_HEADER + len;
        }
        blocks
    }

    fn run(input: &[u8]) -> Vec<u8> {
        let mut f = AuthorityFix::new(());
        // Feed in small pieces to exercise partial frames.
        for chunk in input.chunks(7) {
            f.inbuf.extend_from_slice(chunk);
            f.process();
        }
        f.outbuf
    }

    #[test]
    fn scheme_in_authority_is_stripped_on_every_request_of_the_connection() {
        let mut client = loona_hpack::Encoder::new();
        let hdrs: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":authority", b"http://127.0.0.1:2379"),
            (b":path", b"/etcdserverpb.Maintenance/Status"),
        ];
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(1, &client.encode(hdrs.clone())));
        input.extend(headers_frame(3, &client.encode(hdrs)));
        let blocks = decode_output(&run(&input));
        assert_eq!(blocks.len(), 2);
        for b in blocks {
            let auth = b
                .iter()
                .find(|(n, _)| n == b":authority")
                .map(|(_, v)| v.clone());
            assert_eq!(auth.as_deref(), Some(&b"127.0.0.1:2379"[..]));
        }
    }

    #[test]
    fn clean_connections_pass_through_unchanged() {
        let mut client = loona_hpack::Encoder::new();
        let hdrs: Vec<(&[u8], &[u8])> =
            vec![(b":method", b"POST"), (b":authority", b"127.0.0.1:2379")];
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(1, &client.encode(hdrs)));
        input.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        assert_eq!(run(&input), input);
    }

    #[test]
    fn http1_traffic_passes_through() {
        let input = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(run(&input), input);
    }
}
