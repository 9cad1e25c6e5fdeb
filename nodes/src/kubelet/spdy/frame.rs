//! SPDY/3.1 framing: the 8-byte frame header (control bit, version 3, type, flags, 24-bit
//! length; or the stream id of a data frame) and the control frames a Kubernetes stream
//! session uses. Header blocks are (de)compressed by the caller's [`super::zlib`] state.

use tokio::io::{AsyncRead, AsyncReadExt};

/// SPDY version written and accepted.
const VERSION: u16 = 3;
/// FLAG_FIN: the sender's half of the stream ends with this frame.
pub(crate) const FLAG_FIN: u8 = 0x01;
/// Largest frame accepted from a peer.
const MAX_FRAME: usize = 16 * 1024 * 1024;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status: the stream is refused.
pub(crate) const REFUSED_STREAM: u32 = 3;

/// A frame as read from the wire (header blocks still compressed).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A new stream from the peer.
    SynStream {
        /// Its id.
        id: u32,
        /// Flags (FIN: nothing will be sent on it).
        flags: u8,
        /// The compressed header block.
        block: Vec<u8>,
    },
    /// Data on a stream.
    Data {
        /// The stream.
        id: u32,
        /// Flags (FIN ends the peer's half).
        flags: u8,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The stream is abandoned.
    RstStream {
        /// The stream.
        id: u32,
        /// Why.
        status: u32,
    },
    /// A ping to answer with the same id.
    Ping(u32),
    /// The peer will open no more streams.
    GoAway,
    /// Frames a server session has nothing to do with (SYN_REPLY, SETTINGS, HEADERS,
    /// WINDOW_UPDATE, unknown types).
    Ignored,
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    b.get(i..i + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

/// Reads the next frame; `Ok(None)` at a clean end of the connection.
pub(crate) async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let flags = head[4];
    let len = (usize::from(head[5]) << 16) | (usize::from(head[6]) << 8) | usize::from(head[7]);
    if len > MAX_FRAME {
        return Err(std::io::Error::other("SPDY frame too large"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    if head[0] & 0x80 == 0 {
        return Ok(Some(Frame::Data {
            id: u32_at(&head, 0) & 0x7fff_ffff,
            flags,
            data: body,
        }));
    }
    let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
    if version != VERSION {
        return Err(std::io::Error::other(format!(
            "unsupported SPDY version {version}"
        )));
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    let short = || std::io::Error::other("short SPDY control frame");
    Ok(Some(match kind {
        SYN_STREAM => {
            if body.len() < 10 {
                return Err(short());
            }
            Frame::SynStream {
                id: u32_at(&body, 0) & 0x7fff_ffff,
                flags,
                block: body[10..].to_vec(),
            }
        }
        RST_STREAM => {
            if body.len() < 8 {
                return Err(short());
            }
            Frame::RstStream {
                id: u32_at(&body, 0) & 0x7fff_ffff,
                status: u32_at(&body, 4),
            }
        }
        PING => {
            if body.len() < 4 {
                return Err(short());
            }
            Frame::Ping(u32_at(&body, 0))
        }
        GOAWAY => Frame::GoAway,
        SYN_REPLY | SETTINGS | HEADERS | WINDOW_UPDATE => Frame::Ignored,
        _ => Frame::Ignored,
    }))
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(body);
    out
}

/// A SYN_REPLY for stream `id` with an already compressed header block.
pub(crate) fn syn_reply(id: u32, block: &[u8]) -> Vec<u8> {
    let mut body = id.to_be_bytes().to_vec();
    body.extend_from_slice(block);
    control(SYN_REPLY, 0, &body)
}

/// A DATA frame (`data` at most 16 MiB; callers send smaller chunks).
pub(crate) fn data(id: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(data);
    out
}

/// A RST_STREAM.
pub(crate) fn rst_stream(id: u32, status: u32) -> Vec<u8> {
    let mut body = id.to_be_bytes().to_vec();
    body.extend_from_slice(&status.to_be_bytes());
    control(RST_STREAM, 0, &body)
}

/// A PING (the answer to the peer's).
pub(crate) fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// A header block before compression: a count, then each name and value with 32-bit
/// lengths (several values of one name joined by NUL).
pub(crate) fn encode_headers(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = (headers.len() as u32).to_be_bytes().to_vec();
    for (k, v) in headers {
        out.extend_from_slice(&(k.len() as u32).to_be_bytes());
        out.extend_from_slice(k.to_ascii_lowercase().as_bytes());
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

/// The pairs of a decompressed header block, names lower-cased.
pub(crate) fn decode_headers(block: &[u8]) -> std::io::Result<Vec<(String, String)>> {
    let bad = || std::io::Error::other("malformed SPDY header block");
    let mut pos = 4usize;
    let count = block.get(..4).ok_or_else(bad).map(|_| u32_at(block, 0))?;
    let take = |pos: &mut usize| -> std::io::Result<String> {
        let len = block
            .get(*pos..*pos + 4)
            .ok_or_else(bad)
            .map(|_| u32_at(block, *pos) as usize)?;
        *pos += 4;
        let s = block.get(*pos..*pos + len).ok_or_else(bad)?;
        *pos += len;
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    let mut out = Vec::new();
    for _ in 0..count.min(1024) {
        let k = take(&mut pos)?.to_ascii_lowercase();
        let v = take(&mut pos)?;
        out.push((k, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_read_as_written() {
        let mut wire = Vec::new();
        // SYN_STREAM id 1, associated 0, priority 0, slot 0, block "abc".
        let mut syn = 1u32.to_be_bytes().to_vec();
        syn.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        syn.extend_from_slice(b"abc");
        wire.extend(control(SYN_STREAM, 0, &syn));
        wire.extend(data(1, FLAG_FIN, b"hi"));
        wire.extend(ping(7));
        wire.extend(rst_stream(3, 5));
        wire.extend(control(WINDOW_UPDATE, 0, &[0, 0, 0, 1, 0, 0, 1, 0]));
        let mut r = &wire[..];
        assert_eq!(
            read(&mut r).await.unwrap(),
            Some(Frame::SynStream {
                id: 1,
                flags: 0,
                block: b"abc".to_vec()
            })
        );
        assert_eq!(
            read(&mut r).await.unwrap(),
            Some(Frame::Data {
                id: 1,
                flags: FLAG_FIN,
                data: b"hi".to_vec()
            })
        );
        assert_eq!(read(&mut r).await.unwrap(), Some(Frame::Ping(7)));
        assert_eq!(
            read(&mut r).await.unwrap(),
            Some(Frame::RstStream { id: 3, status: 5 })
        );
        assert_eq!(read(&mut r).await.unwrap(), Some(Frame::Ignored));
        assert_eq!(read(&mut r).await.unwrap(), None);
        let h = encode_headers(&[("streamType", "error"), ("port", "80")]);
        assert_eq!(
            decode_headers(&h).unwrap(),
            vec![
                ("streamtype".into(), "error".into()),
                ("port".into(), "80".into())
            ]
        );
        assert!(decode_headers(&h[..h.len() - 1]).is_err());
    }
}
