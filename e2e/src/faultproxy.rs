//! A TCP proxy for fault injection without root: a member's peer traffic goes through a proxy
//! the test owns, which can pass, delay, or black-hole it (a partition: bytes are read and
//! discarded in both directions, so the peers see a silent network, not a reset). A
//! connection that lost bytes is closed when the partition heals (its stream is no longer
//! intact), so the peers redial.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything.
    Pass,
    /// Forward every chunk after this delay.
    Delay(Duration),
    /// Discard everything (partition).
    Drop,
}

/// A running proxy: listens on [`FaultProxy::addr`], forwards to a target address.
pub struct FaultProxy {
    /// The address clients connect to.
    pub addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `target` (on the current runtime).
    pub async fn start(target: SocketAddr) -> Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let m = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let m = m.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    let mut a = tokio::spawn(pump(ri, wo, m.clone()));
                    let mut b = tokio::spawn(pump(ro, wi, m));
                    // Either direction ending (EOF, error, or a healed partition) closes both.
                    tokio::select! {
                        _ = &mut a => b.abort(),
                        _ = &mut b => a.abort(),
                    }
                });
            }
        });
        Ok(FaultProxy { addr, mode, task })
    }

    /// Sets the mode; it applies to open connections from their next chunk on.
    pub fn set(&self, mode: Mode) {
        if let Ok(mut m) = self.mode.lock() {
            *m = mode;
        }
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode.lock().map(|m| *m).unwrap_or(Mode::Pass)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<Mutex<Mode>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut lost = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let m = mode.lock().map(|m| *m).unwrap_or(Mode::Pass);
        match m {
            Mode::Drop => {
                lost = true;
                continue;
            }
            _ if lost => return,
            Mode::Pass => {}
            Mode::Delay(d) => tokio::time::sleep(d).await,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_delays_and_drops() -> Result<()> {
        let echo = TcpListener::bind("127.0.0.1:0").await?;
        let target = echo.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let p = FaultProxy::start(target).await?;
        let mut c = TcpStream::connect(p.addr).await?;
        let mut b = [0u8; 5];
        c.write_all(b"hello").await?;
        c.read_exact(&mut b).await?;
        assert_eq!(&b, b"hello");
        p.set(Mode::Drop);
        c.write_all(b"lost!").await?;
        let r = tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut b)).await;
        assert!(r.is_err(), "dropped traffic must not arrive");
        // The connection lost bytes: after healing it is closed; a new one works, delayed.
        p.set(Mode::Delay(Duration::from_millis(200)));
        c.write_all(b"x").await?;
        let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut b)).await??;
        assert_eq!(n, 0, "a connection that lost bytes is closed on heal");
        let mut c = TcpStream::connect(p.addr).await?;
        let t = std::time::Instant::now();
        c.write_all(b"later").await?;
        c.read_exact(&mut b).await?;
        assert_eq!(&b, b"later");
        assert!(t.elapsed() >= Duration::from_millis(200));
        assert_eq!(p.mode(), Mode::Delay(Duration::from_millis(200)));
        Ok(())
    }
}
