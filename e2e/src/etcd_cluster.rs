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
    /// Set for a member added to the running cluster: the `--initial-cluster` it joins with
    /// (`--initial-cluster-state existing`).
    joins: Option<String>,
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

    /// Whether the process exited by itself (reaped; it then counts as not running).
    pub fn exited(&mut self) -> bool {
        let done = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
        if done {
            self.child = None;
        }
        done
    }

    /// Waits (at most `limit`) for the process to exit by itself, e.g. after being removed
    /// from the cluster; returns whether it exited with success.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Result<bool> {
        let deadline = std::time::Instant::now() + limit;
        let Some(c) = self.child.as_mut() else {
            bail!("{} is not running", self.name);
        };
        loop {
            if let Some(st) = c.try_wait()? {
                self.child = None;
                return Ok(st.success());
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "{} still running after {limit:?}; log:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Its client URL.
    pub fn endpoint(&self) -> &str {
        &self.client_url
    }

    /// SIGTERM and wait for a clean exit (at most 20 s): a graceful stop, which hands
    /// leadership over first.
    pub fn terminate(&mut self) -> Result<()> {
        self.resume()?;
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        let ok = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()?
            .success();
        if !ok {
            bail!("kill -TERM {} failed", self.name);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Some(st) = c.try_wait()? {
                if !st.success() {
                    bail!("{} exited with {st}; log: {}", self.name, self.log());
                }
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                bail!("{} did not stop on SIGTERM", self.name);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
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
            members.push(new_member(format!("m{i}"), dir.path(), rt.as_ref())?);
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

    /// Prepares (does not start) member `name`, to be added with `member add` and then
    /// started with [`Cluster::spawn`], which makes it join the running cluster. Returns its
    /// index.
    pub fn add_member(&mut self, name: &str) -> Result<usize> {
        let mut m = new_member(name.to_owned(), self._dir.path(), self._rt.as_ref())?;
        let mut all: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect();
        all.push(format!("{}={}", m.name, m.peer_url));
        m.joins = Some(all.join(","));
        self.members.push(m);
        Ok(self.members.len() - 1)
    }

    /// The first half of replacing member `i` with a new member at the same URLs: `kill -9`
    /// it and delete its data directory. The caller then removes the old member id and adds
    /// a new member with the same peer URL (`member remove`, `member add`); [`Cluster::spawn`]
    /// then starts the new member, which joins the cluster and catches up by snapshot.
    pub fn wipe_for_replacement(&mut self, i: usize) -> Result<()> {
        let all: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect();
        let m = &mut self.members[i];
        m.kill9();
        match std::fs::remove_dir_all(&m.data_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        m.joins = Some(all.join(","));
        Ok(())
    }

    /// (Re)starts member `i` on its data directory.
    pub fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &mut self.members[i];
        let (initial_cluster, state) = match &m.joins {
            Some(c) => (c.clone(), "existing"),
            None => (self.initial_cluster.clone(), "new"),
        };
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
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", state])
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

    /// The client URLs of the running members, comma-separated (etcdctl's `--endpoints`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .filter(|m| m.is_running())
            .map(|m| m.client_url.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Index of the member every running member agrees is the leader, once they agree.
    pub fn wait_leader(&self, limit: std::time::Duration) -> Result<usize> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let running: Vec<(usize, Option<MemberStatus>)> = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.is_running())
                .map(|(i, m)| (i, member_status(m.endpoint())))
                .collect();
            let leaders: std::collections::BTreeSet<u64> = running
                .iter()
                .filter_map(|(_, s)| s.map(|s| s.leader))
                .collect();
            let all = running
                .iter()
                .all(|(_, s)| s.is_some_and(|s| s.leader != 0));
            if all
                && leaders.len() == 1
                && let Some((i, _)) = running
                    .iter()
                    .find(|(_, s)| s.is_some_and(|s| leaders.contains(&s.member_id)))
            {
                return Ok(*i);
            }
            if std::time::Instant::now() > deadline {
                bail!("no agreed leader after {limit:?}; logs:\n{}", self.logs());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
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

/// A member's ports, data directory and (in a proxied cluster) its peer proxy.
fn new_member(
    name: String,
    dir: &std::path::Path,
    rt: Option<&tokio::runtime::Runtime>,
) -> Result<Member> {
    let real_port = free_port();
    let listen_peer_url = format!("http://127.0.0.1:{real_port}");
    let (peer_url, proxy) = match rt {
        Some(rt) => {
            let target = std::net::SocketAddr::from(([127, 0, 0, 1], real_port));
            let p = rt.block_on(crate::faultproxy::FaultProxy::start(target))?;
            (format!("http://{}", p.addr), Some(p))
        }
        None => (listen_peer_url.clone(), None),
    };
    Ok(Member {
        client_url: format!("http://127.0.0.1:{}", free_port()),
        peer_url,
        listen_peer_url,
        proxy,
        data_dir: dir.join(&name),
        log_path: dir.join(format!("{name}.log")),
        name,
        child: None,
        stopped: false,
        joins: None,
    })
}

/// What a member's Maintenance.Status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's own id.
    pub member_id: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    /// Its applied Raft index.
    pub applied: u64,
    /// Whether it is a learner.
    pub is_learner: bool,
}

/// Maintenance.Status of the member at `endpoint`, if it answers within 2 s.
pub fn member_status(endpoint: &str) -> Option<MemberStatus> {
    let ep = endpoint.to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async move {
        let opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(std::time::Duration::from_millis(500))
            .with_timeout(std::time::Duration::from_secs(2));
        let mut c = etcd_client::Client::connect([ep], Some(opts)).await.ok()?;
        let s = c.status().await.ok()?;
        let h = s.header()?;
        Some(MemberStatus {
            member_id: h.member_id(),
            leader: s.leader(),
            applied: s.raft_applied_index(),
            is_learner: s.is_learner(),
        })
    })
}
