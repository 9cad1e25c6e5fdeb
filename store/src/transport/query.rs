//! The membership query a joining member makes before it has a log or even an id: one
//! blocking connection to a peer URL of an existing member, answered with the cluster's id
//! and members (see [`super::wire`]). Blocking is fine here: it runs once, at first start,
//! before the member's threads and tasks exist.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::wire::{self, ClusterInfo};
use super::{PeerTlsConfig, PeerUrl};
use crate::error::{Result, StoreError};

/// How long to keep trying the peers before giving up (they may be starting too).
const TRY_FOR: Duration = Duration::from_secs(10);
/// Timeout of one dial, handshake or read.
const STEP: Duration = Duration::from_secs(2);

/// Asks each of `peer_urls` in turn until one answers with the cluster's membership and
/// that membership satisfies `accept` (a member that has not applied the `member add` yet
/// answers without the joiner: ask again).
pub fn fetch_cluster(
    peer_urls: &[String],
    tls: Option<&PeerTlsConfig>,
    name: &str,
    accept: impl Fn(&ClusterInfo) -> std::result::Result<(), String>,
) -> Result<ClusterInfo> {
    if peer_urls.is_empty() {
        return Err(StoreError::InvalidArgument(
            "--initial-cluster-state existing needs the existing members in --initial-cluster"
                .into(),
        ));
    }
    let deadline = Instant::now() + TRY_FOR;
    let mut last = String::new();
    loop {
        for url in peer_urls {
            match ask(url, tls, name) {
                Ok(info) => match accept(&info) {
                    Ok(()) => return Ok(info),
                    Err(why) => {
                        tracing::debug!(%url, %why, "asking again");
                        last = format!("{url}: {why}");
                    }
                },
                Err(e) => {
                    tracing::debug!(%url, err = %e, "could not get the cluster's members");
                    last = format!("{url}: {e}");
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(StoreError::InvalidArgument(format!(
                "cannot fetch cluster info from peer urls: could not retrieve cluster \
                 information from the given URLs (last answer: {last})"
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ask(url: &str, tls: Option<&PeerTlsConfig>, name: &str) -> std::io::Result<ClusterInfo> {
    let other = |msg: String| std::io::Error::other(msg);
    let parsed = PeerUrl::parse(url).map_err(|e| other(e.to_string()))?;
    let addr = (parsed.host.as_str(), parsed.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| other(format!("{url}: no address")))?;
    let tcp = TcpStream::connect_timeout(&addr, STEP)?;
    tcp.set_read_timeout(Some(STEP))?;
    tcp.set_write_timeout(Some(STEP))?;
    let mut stream: Box<dyn ReadWrite> = if parsed.tls {
        let tls = tls.ok_or_else(|| other(format!("{url} is https:// but no peer certificate")))?;
        let server = super::tls::server_name(&parsed.host).map_err(|e| other(e.to_string()))?;
        let conn = rustls::ClientConnection::new(std::sync::Arc::clone(&tls.client), server)
            .map_err(|e| other(e.to_string()))?;
        Box::new(rustls::StreamOwned::new(conn, tcp))
    } else {
        Box::new(tcp)
    };
    let mut out = wire::MAGIC.to_vec();
    out.extend_from_slice(&wire::encode_query(name));
    stream.write_all(&out)?;
    stream.flush()?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > 16 << 20 {
        return Err(other(format!("answer of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    wire::decode_cluster(&body).map_err(|e| other(e.to_string()))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
