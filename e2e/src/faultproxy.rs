//! A TCP proxy for fault injection without root: a member's peer traffic goes through a proxy
//! the test owns, which can pass, delay, or black-hole it (a partition: bytes are read and
//! discarded in both directions, so the peers see a silent network, not a reset). A
//! connection that lost bytes is closed when the partition heals (its stream is no longer
//! intact), so the peers redial.
//!
//! The proxy also reads the sender's member id from each connection's hello (Capstan's peer
//! wire format: 8 bytes of magic, a length-prefixed hello whose body is a kind byte, the
//! cluster id, then the sender id), so traffic from given members can be dropped
//! ([`FaultProxy::block_from`]): blocking member `i` on every other member's proxy while
//! `i`'s own proxy drops everything isolates `i` in both directions (a symmetric partition).

use std::collections::HashSet;
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
    blocked: Arc<Mutex<HashSet<u64>>>,
    task: tokio::task::JoinHandle<()>,
}

/// What a pump consults for every chunk: the mode, and whether its sender is blocked.
#[derive(Clone)]
struct Rules {
    mode: Arc<Mutex<Mode>>,
    blocked: Arc<Mutex<HashSet<u64>>>,
    from: u64,
}

impl Rules {
    fn now(&self) -> Mode {
        let blocked = self
            .blocked
            .lock()
            .map(|b| b.contains(&self.from))
            .unwrap_or(false);
        if blocked {
            return Mode::Drop;
        }
        self.mode.lock().map(|m| *m).unwrap_or(Mode::Pass)
    }
}

/// Reads a connection's preamble and hello (when it looks like one) and returns the bytes
/// read and the sender id (0 if unknown).
async fn read_hello(r: &mut tokio::net::tcp::OwnedReadHalf) -> (Vec<u8>, u64) {
    let mut head = vec![0u8; 12];
    if r.read_exact(&mut head).await.is_err() {
        return (Vec::new(), 0);
    }
    let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if len > 64 * 1024 {
        return (head, 0);
    }
    let mut body = vec![0u8; len];
    if r.read_exact(&mut body).await.is_err() {
        return (head, 0);
    }
    let from = if body.len() >= 17 && body[0] == 1 {
        let mut id = [0u8; 8];
        id.copy_from_slice(&body[9..17]);
        u64::from_be_bytes(id)
    } else {
        0
    };
    head.extend_from_slice(&body);
    (head, from)
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `target` (on the current runtime).
    pub async fn start(target: SocketAddr) -> Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let blocked = Arc::new(Mutex::new(HashSet::new()));
        let (m, bl) = (mode.clone(), blocked.clone());
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (m, bl) = (m.clone(), bl.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut ri, wi) = inbound.into_split();
                    let (ro, mut wo) = outbound.into_split();
                    let (hello, from) = read_hello(&mut ri).await;
                    let rules = Rules {
                        mode: m,
                        blocked: bl,
                        from,
                    };
                    if rules.now() == Mode::Drop {
                        // Cut off from the start: swallow the connection until the partition
                        // heals, then close it (as a connection that lost bytes mid-way) so
                        // the dialler redials. Swallowing it for good would leave the dialler
                        // writing into a black hole it cannot see long after the fault.
                        let mut sink = vec![0u8; 64 * 1024];
                        while let Ok(n) = ri.read(&mut sink).await {
                            if n == 0 || rules.now() != Mode::Drop {
                                return;
                            }
                        }
                        return;
                    }
                    if wo.write_all(&hello).await.is_err() {
                        return;
                    }
                    let mut a = tokio::spawn(pump(ri, wo, rules.clone()));
                    let mut b = tokio::spawn(pump(ro, wi, rules));
                    // Either direction ending (EOF, error, or a healed partition) closes both.
                    tokio::select! {
                        _ = &mut a => b.abort(),
                        _ = &mut b => a.abort(),
                    }
                });
            }
        });
        Ok(FaultProxy {
            addr,
            mode,
            blocked,
            task,
        })
    }

    /// Drops traffic from member `id` (by the sender id of each connection's hello).
    pub fn block_from(&self, id: u64) {
        if let Ok(mut b) = self.blocked.lock() {
            b.insert(id);
        }
    }

    /// Lets every member's traffic through again.
    pub fn unblock_all(&self) {
        if let Ok(mut b) = self.blocked.lock() {
            b.clear();
        }
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
    rules: Rules,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut lost = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let m = rules.now();
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

    /// A connection preamble as a member with id `from` sends it.
    fn preamble(from: u64) -> Vec<u8> {
        let mut body = vec![1u8];
        body.extend_from_slice(&7u64.to_be_bytes());
        body.extend_from_slice(&from.to_be_bytes());
        let mut out = b"CPSTRFT1".to_vec();
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Connects as member `from` to an echoing target and checks the preamble came back.
    async fn connect(p: &FaultProxy, from: u64) -> Result<TcpStream> {
        let mut c = TcpStream::connect(p.addr).await?;
        let pre = preamble(from);
        c.write_all(&pre).await?;
        let mut back = vec![0u8; pre.len()];
        c.read_exact(&mut back).await?;
        assert_eq!(back, pre);
        Ok(c)
    }

    #[tokio::test]
    async fn passes_delays_drops_and_blocks_senders() -> Result<()> {
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
        let mut c = connect(&p, 1).await?;
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
        let mut c = connect(&p, 1).await?;
        let t = std::time::Instant::now();
        c.write_all(b"later").await?;
        c.read_exact(&mut b).await?;
        assert_eq!(&b, b"later");
        assert!(t.elapsed() >= Duration::from_millis(200));
        assert_eq!(p.mode(), Mode::Delay(Duration::from_millis(200)));
        // Blocking sender 2 drops its traffic, not sender 3's.
        p.set(Mode::Pass);
        let mut two = connect(&p, 2).await?;
        let mut three = connect(&p, 3).await?;
        p.block_from(2);
        two.write_all(b"nope!").await?;
        let r = tokio::time::timeout(Duration::from_millis(300), two.read_exact(&mut b)).await;
        assert!(r.is_err(), "a blocked sender's traffic must not arrive");
        three.write_all(b"three").await?;
        three.read_exact(&mut b).await?;
        assert_eq!(&b, b"three");
        p.unblock_all();
        connect(&p, 2).await?;
        // A connection opened during a partition is swallowed, then closed once it heals.
        p.set(Mode::Drop);
        let mut late = TcpStream::connect(p.addr).await?;
        late.write_all(&preamble(4)).await?;
        let r = tokio::time::timeout(Duration::from_millis(300), late.read_exact(&mut b)).await;
        assert!(r.is_err(), "nothing passes a partition");
        p.set(Mode::Pass);
        late.write_all(b"again").await?;
        let n = tokio::time::timeout(Duration::from_secs(10), late.read(&mut b)).await??;
        assert_eq!(
            n, 0,
            "a connection swallowed by a partition is closed on heal"
        );
        Ok(())
    }
}
