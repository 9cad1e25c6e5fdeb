//! The WebSocket framing (RFC 6455) the Kubernetes stream protocols need, server side:
//! the handshake answer, reading client frames (masked, possibly fragmented; pings answered
//! with pongs) and writing unmasked binary and close frames.

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The GUID of the handshake (RFC 6455 section 1.3).
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest message accepted from a client.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{}{GUID}", key.trim()).as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A message from the client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// A binary (or text) data message.
    Data(Vec<u8>),
    /// The client closed the connection.
    Close,
}

/// Reads messages from the client side of an upgraded connection.
pub(crate) struct Reader<R> {
    inner: R,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// Wraps the read half.
    pub(crate) fn new(inner: R) -> Self {
        Reader { inner }
    }

    /// The next data message or close; pings are returned to the caller through `pong` so
    /// the writer can answer them.
    pub(crate) async fn next(&mut self, pong: &mut Vec<Vec<u8>>) -> std::io::Result<Message> {
        let mut message: Vec<u8> = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.inner.read_exact(&mut head).await?;
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0f;
            let masked = head[1] & 0x80 != 0;
            let mut len = u64::from(head[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                self.inner.read_exact(&mut b).await?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                self.inner.read_exact(&mut b).await?;
                len = u64::from_be_bytes(b);
            }
            if len as usize > MAX_MESSAGE || message.len() + len as usize > MAX_MESSAGE {
                return Err(std::io::Error::other("websocket message too large"));
            }
            let mut mask = [0u8; 4];
            if masked {
                self.inner.read_exact(&mut mask).await?;
            }
            let mut payload = vec![0u8; len as usize];
            self.inner.read_exact(&mut payload).await?;
            if masked {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= mask[i % 4];
                }
            }
            match opcode {
                0x8 => return Ok(Message::Close),
                0x9 => pong.push(payload),
                0xA => {}
                0x0..=0x2 => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return Ok(Message::Data(message));
                    }
                }
                _ => return Err(std::io::Error::other("unknown websocket opcode")),
            }
            if !pong.is_empty() && message.is_empty() {
                // Let the caller answer pings promptly.
                return Ok(Message::Data(Vec::new()));
            }
        }
    }
}

/// Encodes one unmasked frame.
pub(crate) fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    let len = payload.len();
    if len < 126 {
        out.push(len as u8);
    } else if len <= 0xffff {
        out.push(126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
    out
}

/// Writes a binary message.
pub(crate) async fn write_binary<W: AsyncWrite + Unpin>(
    w: &mut W,
    payload: &[u8],
) -> std::io::Result<()> {
    w.write_all(&frame(0x2, payload)).await?;
    w.flush().await
}

/// Writes a pong answering a ping.
pub(crate) async fn write_pong<W: AsyncWrite + Unpin>(
    w: &mut W,
    payload: &[u8],
) -> std::io::Result<()> {
    w.write_all(&frame(0xA, payload)).await?;
    w.flush().await
}

/// Writes a normal close frame.
pub(crate) async fn write_close<W: AsyncWrite + Unpin>(w: &mut W) -> std::io::Result<()> {
    w.write_all(&frame(0x8, &1000u16.to_be_bytes())).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn masked_fragmented_frames_are_read_and_pings_collected() {
        let mask = [1u8, 2, 3, 4];
        let masked = |fin: bool, op: u8, data: &[u8]| {
            let mut f = vec![(if fin { 0x80 } else { 0 }) | op, 0x80 | data.len() as u8];
            f.extend_from_slice(&mask);
            f.extend(data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
            f
        };
        let mut wire = masked(false, 0x2, b"\x00he");
        wire.extend(masked(true, 0x0, b"llo"));
        wire.extend(masked(true, 0x9, b"p"));
        wire.extend(masked(true, 0x8, b""));
        let mut r = Reader::new(&wire[..]);
        let mut pongs = Vec::new();
        assert_eq!(
            r.next(&mut pongs).await.unwrap(),
            Message::Data(b"\x00hello".to_vec())
        );
        assert_eq!(r.next(&mut pongs).await.unwrap(), Message::Data(Vec::new()));
        assert_eq!(pongs, vec![b"p".to_vec()]);
        assert_eq!(r.next(&mut pongs).await.unwrap(), Message::Close);
        assert_eq!(frame(0x2, &[7; 200])[..4], [0x82, 126, 0, 200]);
    }
}
