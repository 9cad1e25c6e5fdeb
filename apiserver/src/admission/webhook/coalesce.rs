//! Write coalescing under the webhook client's HTTP/2 connections.
//!
//! An HTTP/2 connection's task sends each queued call as a HEADERS and a DATA frame, and
//! `h2` flushes once per call whose body is over a few hundred bytes (an AdmissionReview
//! always is): through TLS that is one record set and one `writev` per call, however
//! many calls are waiting. [`Coalesce`] keeps what is written in memory and puts off the
//! flush by one turn of the connection's task (it wakes the task and says "flushed"): the
//! calls other tasks queue meanwhile join the same buffer, and the next turn — which always
//! begins by reading the socket — sends them all in one TLS write. A buffer over
//! [`HIGH_WATER`] is written at once, and shutdown writes everything first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes past which a write goes to the stream before more are taken.
pub const HIGH_WATER: usize = 64 * 1024;

/// A stream whose writes are gathered and sent on the task's next turn (module docs).
#[derive(Debug)]
pub struct Coalesce<T> {
    io: T,
    /// Written by the caller, not yet handed to `io` (from `sent` on).
    buf: Vec<u8>,
    /// Bytes of `buf` already handed to `io`.
    sent: usize,
    /// A flush was put off and the task woken to come back for it.
    deferred: bool,
}

impl<T> Coalesce<T> {
    /// `io` with coalesced writes.
    pub fn new(io: T) -> Coalesce<T> {
        Coalesce {
            io,
            buf: Vec::new(),
            sent: 0,
            deferred: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    /// Hands every buffered byte to `io` (not flushing it).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf.clear();
        self.sent = 0;
        self.deferred = false;
        Poll::Ready(Ok(()))
    }

    /// Makes room: writes the buffer out when it is over [`HIGH_WATER`].
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending() >= HIGH_WATER {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The turn a put-off flush woke: send what was gathered before reading. A stream
        // that cannot take it all now has the task's waker; the rest goes on a later turn.
        if this.pending() > 0 {
            match this.poll_drain(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    if let Poll::Ready(Err(e)) = Pin::new(&mut this.io).poll_flush(cx) {
                        return Poll::Ready(Err(e));
                    }
                }
                Poll::Pending => {}
            }
        }
        Pin::new(&mut this.io).poll_read(cx, out)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_room(cx))?;
        this.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_room(cx))?;
        let mut n = 0;
        for b in bufs {
            this.buf.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending() == 0 {
            return Pin::new(&mut this.io).poll_flush(cx);
        }
        if this.pending() >= HIGH_WATER {
            ready!(this.poll_drain(cx))?;
            return Pin::new(&mut this.io).poll_flush(cx);
        }
        // Put off to the task's next turn (it begins with a read, which sends the buffer).
        if !this.deferred {
            this.deferred = true;
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Writes and flushes gathered in one turn reach the peer once the stream is read,
    /// in order; shutdown sends what is left.
    #[tokio::test]
    async fn gathered_writes_reach_the_peer_in_order() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut c = Coalesce::new(near);
        c.write_all(b"one ").await.unwrap();
        c.flush().await.unwrap();
        c.write_all(b"two ").await.unwrap();
        c.flush().await.unwrap();
        assert_eq!(c.pending(), 8, "flushes are put off");
        far.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        c.read_exact(&mut one).await.unwrap();
        let mut got = vec![0u8; 8];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one two ");
        c.write_all(b"three").await.unwrap();
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        far.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"three");
    }

    /// A buffer past the high-water mark is written without waiting for a read.
    #[tokio::test]
    async fn big_buffers_go_out_at_once() {
        let (near, mut far) = tokio::io::duplex(4 * HIGH_WATER);
        let mut c = Coalesce::new(near);
        let big = vec![7u8; HIGH_WATER + 10];
        c.write_all(&big).await.unwrap();
        c.flush().await.unwrap();
        assert_eq!(c.pending(), 0);
        let mut got = vec![0u8; big.len()];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big);
    }
}
