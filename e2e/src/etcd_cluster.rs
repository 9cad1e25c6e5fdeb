//! A multi-member `capstan store` cluster on loopback for tests: separate processes with their
//! own ports and data directories, bootstrapped with `--initial-cluster` as etcd is, plus the
//! process faults the fault suite injects (kill -9 + restart, SIGSTOP / SIGCONT).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::{capstan_bin, free_port};

/// One member process of the cluster.
pub struct Member {
    /// The member's name (`--name`).
    pub name: String,
    /// The client URL (`http://127.0.0.1:P`).
    pub client_url: String,
    /// The peer URL it advertises (the proxy's, when the cluster is proxied).
    pub peer_url: String,
    /// The peer URL it listens on.
    pub listen_peer_url: String,
    /// The proxy in front of its inbound peer traffic, when the cluster is proxied.
    pub proxy: Option<crate::faultproxy::FaultProxy>,
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl Member {
    /// The member's log so far (stderr of every incarnation).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether a process is running (possibly stopped by SIGSTOP).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, sig: &str) -> Result<()> {
        let Some(c) = &self.child else {
            return Ok(());
        };
        let ok = Command::new("kill")
            .args([sig, &c.id().to_string()])
            .status()?
            .success();
        if !ok {
            bail!("kill {sig} {} failed", self.name);
        }
        Ok(())
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stopped = false;
    }

    /// SIGSTOP: the process freezes (sockets stay open, nothing is answered).
    pub fn pause(&mut self) -> Result<()> {
        self.signal("-STOP")?;
        self.stopped = true;
        Ok(())
    }

    /// SIGCONT after [`Member::pause`].
    pub fn resume(&mut self) -> Result<()> {
        if self.stopped {
            self.signal("-CONT")?;
            self.stopped = false;
        }
        Ok(())
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.resume();
        self.kill9();
    }
}

/// The cluster: its members and the flags they were started with.
pub struct Cluster {
    /// The members, in `--initial-cluster` order.
    pub members: Vec<Member>,
    initial_cluster: String,
    extra: Vec<String>,
    _dir: tempfile::TempDir,
    /// Runs the proxies (dropped last).
    _rt: Option<tokio::runtime::Runtime>,
}

impl Cluster {
    /// Starts `n` members with `extra` flags (does not wait for a leader).
    pub fn start(n: usize, extra: &[&str]) -> Result<Cluster> {
        Self::start_inner(n, extra, false)
    }

    /// Like [`Cluster::start`], but every member's inbound peer traffic goes through a
    /// [`crate::faultproxy::FaultProxy`]: members listen on their real peer port and advertise
    /// the proxy's, so the test can partition or delay a member.
    pub fn start_proxied(n: usize, extra: &[&str]) -> Result<Cluster> {
        Self::start_inner(n, extra, true)
    }

    fn start_inner(n: usize, extra: &[&str], proxied: bool) -> Result<Cluster> {
        let rt = if proxied {
            Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()?,
            )
        } else {
            None
        };
        let dir = tempfile::tempdir()?;
        let mut members = Vec::new();
        for i in 1..=n {
            let name = format!("m{i}");
            let real_port = free_port();
            let listen_peer_url = format!("http://127.0.0.1:{real_port}");
            let (peer_url, proxy) = match &rt {
                Some(rt) => {
                    let target = std::net::SocketAddr::from(([127, 0, 0, 1], real_port));
                    let p = rt.block_on(crate::faultproxy::FaultProxy::start(target))?;
                    (format!("http://{}", p.addr), Some(p))
                }
                None => (listen_peer_url.clone(), None),
            };
            members.push(Member {
                client_url: format!("http://127.0.0.1:{}", free_port()),
                peer_url,
                listen_peer_url,
                proxy,
                data_dir: dir.path().join(&name),
                log_path: dir.path().join(format!("{name}.log")),
                name,
                child: None,
                stopped: false,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            members,
            initial_cluster,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            _dir: dir,
            _rt: rt,
        };
        for i in 0..n {
            c.spawn(i)?;
        }
        Ok(c)
    }

    /// (Re)starts member `i` on its data directory.
    pub fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log_path)?;
        let child = Command::new(capstan_bin())
            .arg("store")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &m.client_url])
            .args(["--advertise-client-urls", &m.client_url])
            .args(["--listen-peer-urls", &m.listen_peer_url])
            .args(["--initial-advertise-peer-urls", &m.peer_url])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", "e2e-cluster"])
            .args(&self.extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", capstan_bin().display()))?;
        m.child = Some(child);
        m.stopped = false;
        Ok(())
    }

    /// Every member's log, separated (for failure messages).
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("== {} ==\n{}", m.name, m.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}
