//! The peer wire format: how Raft messages travel between members.
//!
//! A connection is one-way: the dialling member writes, the listening member reads. It starts
//! with [`MAGIC`] and a hello frame, then carries message frames until either side closes it:
//!
//! ```text
//! connection := MAGIC hello-frame message-frame*        (the listener may answer: removed)
//!             | MAGIC query-frame                         (the listener answers: cluster)
//! frame      := | body length: u32 BE | body |
//! hello      := 0x01 | cluster id u64 | from u64 | to u64 | name: str16 | n: u16 | str16 * n |
//! messages   := 0x02 | count: u32 | (| length: u32 | protobuf raft Message |) * count |
//! query      := 0x03 | name: str16 |
//! cluster    := 0x04 | cluster id u64 | n: u16 | member * n |
//! member     := | id u64 | learner u8 | name: str16 | k: u16 | str16 * k |
//! removed    := 0x05 |
//! str16      := | length: u16 | UTF-8 bytes |
//! ```
//!
//! A query is how a member joining an existing cluster (`--initial-cluster-state existing`)
//! learns the cluster's id and members, as etcd's joiner asks a peer for `/members`; the
//! answer lists each member's id, name, peer URLs and whether it is a learner. `removed` is
//! what a member sends back to a member that was removed from the cluster, which then
//! stops (etcd answers such a member's messages with 410 Gone).
//!
//! All integers are big-endian. The hello names the cluster (a member of another cluster is
//! refused), the sender and the intended recipient, and carries the sender's name and client
//! URLs for `member list`. One message frame holds a batch: everything queued for the peer
//! when the writer woke up, up to [`MAX_BATCH_BYTES`]. A snapshot message (the whole state
//! machine) travels alone on a connection of its own, so heartbeats never wait behind it.

use protobuf::Message as _;
use raft::eraftpb::Message;

/// First bytes of every peer connection (name and version of the protocol).
pub const MAGIC: &[u8; 8] = b"CPSTRFT1";
/// Largest accepted frame (a snapshot of the whole state machine fits).
pub const MAX_FRAME: usize = 1 << 31;
/// A writer stops adding messages to a batch beyond this many bytes.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

const KIND_HELLO: u8 = 1;
const KIND_MESSAGES: u8 = 2;
const KIND_QUERY: u8 = 3;
const KIND_CLUSTER: u8 = 4;
const KIND_REMOVED: u8 = 5;

/// The kind of a frame body (its first byte).
pub fn kind(body: &[u8]) -> u8 {
    body.first().copied().unwrap_or(0)
}

/// Whether a frame body is a membership query.
pub fn is_query(body: &[u8]) -> bool {
    kind(body) == KIND_QUERY
}

/// Whether a frame body says the recipient was removed from the cluster.
pub fn is_removed(body: &[u8]) -> bool {
    kind(body) == KIND_REMOVED
}

/// One member in a [`ClusterInfo`] answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberEntry {
    /// Member id.
    pub id: u64,
    /// Whether it is a learner.
    pub is_learner: bool,
    /// Its name (empty if not yet known).
    pub name: String,
    /// Its peer URLs.
    pub peer_urls: Vec<String>,
}

/// The answer to a membership query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The cluster's id.
    pub cluster_id: u64,
    /// Every current member.
    pub members: Vec<MemberEntry>,
}

/// The first frame of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Cluster id of the sender.
    pub cluster_id: u64,
    /// Member id of the sender.
    pub from: u64,
    /// Member id the sender believes it is talking to.
    pub to: u64,
    /// The sender's name.
    pub name: String,
    /// The sender's client URLs.
    pub client_urls: Vec<String>,
}

/// A frame body that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("bad peer frame: {0}")]
pub struct BadFrame(pub String);

fn put_str16(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Encodes a hello frame (length prefix included).
pub fn encode_hello(h: &Hello) -> Vec<u8> {
    let mut b = vec![KIND_HELLO];
    b.extend_from_slice(&h.cluster_id.to_be_bytes());
    b.extend_from_slice(&h.from.to_be_bytes());
    b.extend_from_slice(&h.to.to_be_bytes());
    put_str16(&mut b, &h.name);
    let n = h.client_urls.len().min(usize::from(u16::MAX));
    b.extend_from_slice(&(n as u16).to_be_bytes());
    for u in &h.client_urls[..n] {
        put_str16(&mut b, u);
    }
    frame(&b)
}

/// Encodes a batch of messages as one frame (length prefix included).
pub fn encode_messages(msgs: &[Message]) -> Vec<u8> {
    let mut b = vec![KIND_MESSAGES];
    b.extend_from_slice(&(msgs.len() as u32).to_be_bytes());
    for m in msgs {
        let len_at = b.len();
        b.extend_from_slice(&[0; 4]);
        // Writing a well-formed message into a Vec cannot fail.
        if m.write_to_vec(&mut b).is_err() {
            b.truncate(len_at);
            continue;
        }
        let len = (b.len() - len_at - 4) as u32;
        b[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
    }
    frame(&b)
}

/// Encodes a membership query frame from a member called `name`.
pub fn encode_query(name: &str) -> Vec<u8> {
    let mut b = vec![KIND_QUERY];
    put_str16(&mut b, name);
    frame(&b)
}

/// Encodes the "you were removed" frame.
pub fn encode_removed() -> Vec<u8> {
    frame(&[KIND_REMOVED])
}

/// Encodes the answer to a membership query.
pub fn encode_cluster(c: &ClusterInfo) -> Vec<u8> {
    let mut b = vec![KIND_CLUSTER];
    b.extend_from_slice(&c.cluster_id.to_be_bytes());
    let n = c.members.len().min(usize::from(u16::MAX));
    b.extend_from_slice(&(n as u16).to_be_bytes());
    for m in &c.members[..n] {
        b.extend_from_slice(&m.id.to_be_bytes());
        b.push(u8::from(m.is_learner));
        put_str16(&mut b, &m.name);
        let k = m.peer_urls.len().min(usize::from(u16::MAX));
        b.extend_from_slice(&(k as u16).to_be_bytes());
        for u in &m.peer_urls[..k] {
            put_str16(&mut b, u);
        }
    }
    frame(&b)
}

/// Decodes the answer to a membership query.
pub fn decode_cluster(body: &[u8]) -> Result<ClusterInfo, BadFrame> {
    let mut r = Reader { buf: body };
    if r.u8()? != KIND_CLUSTER {
        return Err(BadFrame("expected a cluster frame".into()));
    }
    let cluster_id = r.u64()?;
    let n = r.u16()?;
    let mut members = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let id = r.u64()?;
        let is_learner = r.u8()? != 0;
        let name = r.str16()?;
        let k = r.u16()?;
        let mut peer_urls = Vec::with_capacity(usize::from(k));
        for _ in 0..k {
            peer_urls.push(r.str16()?);
        }
        members.push(MemberEntry {
            id,
            is_learner,
            name,
            peer_urls,
        });
    }
    Ok(ClusterInfo {
        cluster_id,
        members,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadFrame> {
        if self.buf.len() < n {
            return Err(BadFrame("truncated".into()));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, BadFrame> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, BadFrame> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, BadFrame> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, BadFrame> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn str16(&mut self) -> Result<String, BadFrame> {
        let n = usize::from(self.u16()?);
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| BadFrame("not UTF-8".into()))
    }
}

/// Decodes a hello frame body.
pub fn decode_hello(body: &[u8]) -> Result<Hello, BadFrame> {
    let mut r = Reader { buf: body };
    if r.u8()? != KIND_HELLO {
        return Err(BadFrame("expected a hello frame".into()));
    }
    let cluster_id = r.u64()?;
    let from = r.u64()?;
    let to = r.u64()?;
    let name = r.str16()?;
    let n = r.u16()?;
    let mut client_urls = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        client_urls.push(r.str16()?);
    }
    Ok(Hello {
        cluster_id,
        from,
        to,
        name,
        client_urls,
    })
}

/// Decodes a message frame body.
pub fn decode_messages(body: &[u8]) -> Result<Vec<Message>, BadFrame> {
    let mut r = Reader { buf: body };
    if r.u8()? != KIND_MESSAGES {
        return Err(BadFrame("expected a message frame".into()));
    }
    let count = r.u32()?;
    let mut out = Vec::with_capacity(count.min(4096) as usize);
    for _ in 0..count {
        let len = r.u32()? as usize;
        let m = Message::parse_from_bytes(r.take(len)?)
            .map_err(|e| BadFrame(format!("raft message: {e}")))?;
        out.push(m);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_messages_round_trip() {
        let h = Hello {
            cluster_id: 7,
            from: 1,
            to: 2,
            name: "n1".into(),
            client_urls: vec!["http://127.0.0.1:2379".into()],
        };
        let f = encode_hello(&h);
        assert_eq!(
            u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
            f.len() - 4
        );
        assert_eq!(decode_hello(&f[4..]).unwrap(), h);
        let mut m = Message {
            from: 1,
            to: 2,
            term: 9,
            ..Default::default()
        };
        m.mut_entries().push(raft::eraftpb::Entry {
            index: 3,
            data: vec![1, 2, 3].into(),
            ..Default::default()
        });
        let f = encode_messages(&[m.clone(), Message::default()]);
        let got = decode_messages(&f[4..]).unwrap();
        assert_eq!(got, vec![m, Message::default()]);
        assert!(decode_messages(&f[4..f.len() - 1]).is_err());
        assert!(decode_hello(&f[4..]).is_err());
        let c = ClusterInfo {
            cluster_id: 5,
            members: vec![MemberEntry {
                id: 1,
                is_learner: true,
                name: "n1".into(),
                peer_urls: vec!["https://a:1".into(), "https://b:2".into()],
            }],
        };
        assert_eq!(decode_cluster(&encode_cluster(&c)[4..]).unwrap(), c);
        assert!(is_query(&encode_query("x")[4..]));
        assert!(is_removed(&encode_removed()[4..]));
        assert!(decode_cluster(&encode_query("x")[4..]).is_err());
    }
}
