//! Settings of one store member. Names and defaults follow etcd's flags where etcd has one.

use std::path::PathBuf;
use std::time::Duration;

/// Configuration of one store member (`capstan store` flags).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// Directory holding `member/wal` and `member/snap` (`--data-dir`).
    pub data_dir: PathBuf,
    /// URLs to serve the etcd v3 gRPC API on, `http://host:port` (`--listen-client-urls`).
    pub listen_client_urls: Vec<String>,
    /// Client URLs advertised in `member list` (`--advertise-client-urls`); defaults to the
    /// listen URLs.
    pub advertise_client_urls: Vec<String>,
    /// Peer URLs advertised in `member list` (`--initial-advertise-peer-urls`).
    pub initial_advertise_peer_urls: Vec<String>,
    /// Applied entries between two state-machine snapshots (`--snapshot-count`).
    pub snapshot_count: u64,
    /// Entries kept in the log behind a snapshot, for slow followers
    /// (etcd's `SnapshotCatchUpEntries`).
    pub catch_up_entries: u64,
    /// Largest accepted encoded request (`--max-request-bytes`, etcd default 1.5 MiB).
    pub max_request_bytes: usize,
    /// Largest number of operations in one transaction (`--max-txn-ops`).
    pub max_txn_ops: usize,
    /// Raft heartbeat interval, one tick (`--heartbeat-interval`).
    pub heartbeat_interval: Duration,
    /// Raft election timeout (`--election-timeout`).
    pub election_timeout: Duration,
    /// WAL segment size at which a new segment file is started.
    pub wal_segment_bytes: u64,
    /// Interval of progress notifications to idle watchers that asked for them
    /// (`--experimental-watch-progress-notify-interval`).
    pub progress_notify_interval: Duration,
    /// How long a write waits to be committed before failing with a timeout.
    pub request_timeout: Duration,
    /// URLs to accept peer (Raft) connections on (`--listen-peer-urls`). Empty: a member
    /// of a multi-member cluster listens on its advertised peer URLs; a lone member does
    /// not listen at all.
    pub listen_peer_urls: Vec<String>,
    /// The members of a new cluster (`--initial-cluster name=url,...`); empty: this member
    /// alone. Only read on first start: a restart takes the membership from the data dir.
    pub initial_cluster: Vec<InitialMember>,
    /// `--initial-cluster-state`.
    pub initial_cluster_state: ClusterState,
    /// `--initial-cluster-token`: mixed into member and cluster ids so two clusters built
    /// from the same URLs still have different ids.
    pub initial_cluster_token: String,
    /// TLS for `https://` peer URLs.
    pub peer_tls: PeerTls,
    /// TLS for `https://` client URLs.
    pub client_tls: ClientTls,
    /// `--listen-metrics-urls`: plain-HTTP URLs serving `/metrics` and `/health` (none by
    /// default).
    pub listen_metrics_urls: Vec<String>,
}

/// One `name=url` group of `--initial-cluster` (a name may be given several URLs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialMember {
    /// Member name.
    pub name: String,
    /// Its peer URLs.
    pub peer_urls: Vec<String>,
}

/// `--initial-cluster-state`: whether this member founds a cluster or joins one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterState {
    /// Every member of `--initial-cluster` starts together and bootstraps the cluster.
    #[default]
    New,
    /// This member joins a running cluster that already has it as a member
    /// (`etcdctl member add`); it takes its configuration from the leader.
    Existing,
}

/// Certificates for mutually authenticated TLS between members (etcd's `--peer-*` flags).
#[derive(Debug, Clone, Default)]
pub struct PeerTls {
    /// This member's certificate, presented as server and as client (`--peer-cert-file`).
    pub cert_file: Option<PathBuf>,
    /// Its private key (`--peer-key-file`).
    pub key_file: Option<PathBuf>,
    /// CA bundle that peer certificates must chain to (`--peer-trusted-ca-file`).
    pub trusted_ca_file: Option<PathBuf>,
    /// Require and verify client certificates on incoming peer connections
    /// (`--peer-client-cert-auth`).
    pub client_cert_auth: bool,
}

/// Certificates for `https://` client URLs (etcd's `--cert-file`, `--key-file`,
/// `--trusted-ca-file`, `--client-cert-auth`).
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// The member's serving certificate on its client URLs (`--cert-file`).
    pub cert_file: Option<PathBuf>,
    /// Its private key (`--key-file`).
    pub key_file: Option<PathBuf>,
    /// CA bundle that client certificates must chain to (`--trusted-ca-file`).
    pub trusted_ca_file: Option<PathBuf>,
    /// Require and verify client certificates (`--client-cert-auth`): a client without one
    /// signed by `--trusted-ca-file` fails the TLS handshake.
    pub client_cert_auth: bool,
}

/// Parses etcd's `--initial-cluster` syntax: `n1=http://a:2380,n2=http://b:2380`; a name
/// repeated with another URL gets both.
pub fn parse_initial_cluster(s: &str) -> Result<Vec<InitialMember>, String> {
    let mut out: Vec<InitialMember> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = part
            .split_once('=')
            .ok_or_else(|| format!("--initial-cluster: {part:?} is not name=url"))?;
        if name.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "--initial-cluster: {part:?} needs a name and an http:// or https:// URL"
            ));
        }
        match out.iter_mut().find(|m| m.name == name) {
            Some(m) => m.peer_urls.push(url.to_owned()),
            None => out.push(InitialMember {
                name: name.to_owned(),
                peer_urls: vec![url.to_owned()],
            }),
        }
    }
    Ok(out)
}

impl StoreConfig {
    /// A configuration with etcd's defaults for a member named `name` storing in `data_dir`.
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            name: name.into(),
            data_dir: data_dir.into(),
            listen_client_urls: vec!["http://127.0.0.1:2379".into()],
            advertise_client_urls: Vec::new(),
            initial_advertise_peer_urls: vec!["http://127.0.0.1:2380".into()],
            snapshot_count: 100_000,
            catch_up_entries: 5_000,
            max_request_bytes: 1_572_864,
            max_txn_ops: 128,
            heartbeat_interval: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            wal_segment_bytes: 64 * 1024 * 1024,
            progress_notify_interval: Duration::from_secs(600),
            request_timeout: Duration::from_secs(7),
            listen_peer_urls: Vec::new(),
            initial_cluster: Vec::new(),
            initial_cluster_state: ClusterState::New,
            initial_cluster_token: "etcd-cluster".into(),
            peer_tls: PeerTls::default(),
            client_tls: ClientTls::default(),
            listen_metrics_urls: Vec::new(),
        }
    }

    /// The client URLs other parties should use.
    pub fn client_urls(&self) -> &[String] {
        if self.advertise_client_urls.is_empty() {
            &self.listen_client_urls
        } else {
            &self.advertise_client_urls
        }
    }

    /// Where the write-ahead log lives.
    pub fn wal_dir(&self) -> PathBuf {
        self.data_dir.join("member").join("wal")
    }

    /// Where state-machine snapshots live.
    pub fn snap_dir(&self) -> PathBuf {
        self.data_dir.join("member").join("snap")
    }
}
