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
