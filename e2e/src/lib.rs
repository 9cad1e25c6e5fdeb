//! End-to-end test harness: starts the real `capstan` binary (and, for comparisons, Debian's
//! `etcd`) as child processes on free loopback ports with temporary data directories.
//!
//! Tests in `e2e/tests/` and the benchmarks in `e2e/benches/` use only this module to launch
//! servers, so every test sees the binary exactly as a user runs it.
//!
//! The binary is found at `$CAPSTAN_BIN`, or next to the test executable's target directory
//! (`target/<profile>/capstan`); `make test` builds it before the tests run.

pub mod cli;
pub mod etcd_cluster;
pub mod faultproxy;
pub mod linearizability;
pub mod webhook_server;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Path of the `capstan` binary under test.
///
/// `$CAPSTAN_BIN` wins; otherwise the binary of the same cargo profile as the running test
/// (`target/debug/capstan` for `cargo test`, `target/release/capstan` for `cargo bench`).
pub fn capstan_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CAPSTAN_BIN") {
        return PathBuf::from(p);
    }
    // current_exe = target/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    profile_dir.join("capstan")
}

/// A free TCP port on 127.0.0.1 (bound then released).
///
/// Ports come from below Linux's ephemeral range (32768–60999): a port the kernel hands out
/// as the source port of some outgoing connection could otherwise be taken when a test
/// restarts a process on "its" port. Each call in a process moves on to the next port, so
/// two servers of one test never get the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 12_000;
    const SPAN: u32 = 32_767 - LOW;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = u16::try_from(LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A running `capstan store` child process with its data directory.
///
/// Dropping it kills the process (SIGKILL) but keeps nothing else: the data directory belongs
/// to the caller, so a test can restart a store on the same directory after a crash.
pub struct StoreProcess {
    child: Child,
    /// Client URL, e.g. `http://127.0.0.1:23791`.
    pub endpoint: String,
    /// Data directory the process was started with.
    pub data_dir: PathBuf,
    /// File receiving the process's stderr (its logs).
    pub log_path: PathBuf,
}

impl StoreProcess {
    /// Starts `capstan store` on a free port with `data_dir` and extra flags, and waits until
    /// it answers a Status call (at most 20 s).
    pub fn start(data_dir: &Path, extra_args: &[&str]) -> Result<Self> {
        let port = free_port();
        let endpoint = format!("http://127.0.0.1:{port}");
        std::fs::create_dir_all(data_dir).ok();
        let log_path = data_dir.with_extension("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let child = Command::new(capstan_bin())
            .arg("store")
            .args(["--name", "default", "--listen-client-urls", &endpoint])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", capstan_bin().display()))?;
        let mut p = StoreProcess {
            child,
            endpoint,
            data_dir: data_dir.to_path_buf(),
            log_path,
        };
        p.wait_ready(Duration::from_secs(20))?;
        Ok(p)
    }

    /// Polls the endpoint with `etcdctl`-equivalent Status calls until it answers.
    fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "capstan store exited early with {status}; log: {}",
                    self.log()
                );
            }
            let ep = self.endpoint.clone();
            let ok = rt.block_on(async move {
                let opts = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_millis(500))
                    .with_timeout(Duration::from_secs(2));
                match etcd_client::Client::connect([ep], Some(opts)).await {
                    Ok(mut c) => c.get("health", None).await.is_ok(),
                    Err(_) => false,
                }
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "capstan store not ready after {limit:?}; log: {}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Process id of the child.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs the process and waits for it to be reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for StoreProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `etcdctl` (v3 API) against `endpoint` with `args`, feeding `stdin`, and returns
/// (exit success, stdout, stderr).
pub fn etcdctl(
    endpoint: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<(bool, String, String)> {
    use std::io::Write;
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=10s")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("spawning etcdctl (apt-get install etcd-client)")?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A plain-HTTP `GET` of `path` on `127.0.0.1:port` (metrics and health endpoints):
/// `(status code, body)`, or `None` when nothing answers (5 s read timeout).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    c.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// Number of rows of an `etcdctl endpoint status -w table` whose IS LEADER column is true.
pub fn leaders_in_table(table: &str) -> Result<usize> {
    let header = table
        .lines()
        .find(|l| l.contains("IS LEADER"))
        .context("no header row")?;
    let cols: Vec<&str> = header.split('|').map(str::trim).collect();
    let idx = cols
        .iter()
        .position(|c| *c == "IS LEADER")
        .context("no IS LEADER column")?;
    Ok(table
        .lines()
        .filter(|l| l.contains("127.0.0.1"))
        .filter(|l| l.split('|').map(str::trim).nth(idx) == Some("true"))
        .count())
}

/// A running `capstan server` (embedded store + API server over HTTPS) with its data dir.
pub struct ServerProcess {
    child: Child,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The admin kubeconfig the server wrote.
    pub kubeconfig: PathBuf,
    /// Data directory.
    pub data_dir: PathBuf,
    /// A fresh kubectl cache directory (so discovery is exercised every time).
    pub cache_dir: PathBuf,
    log_path: PathBuf,
}

impl ServerProcess {
    /// Flags that make `capstan server` a bare API server (no scheduler, controllers,
    /// simulated nodes or control-plane Node and pods), for tests of the API itself.
    pub const BARE: &'static [&'static str] = &[
        "--nodes=0",
        "--control-plane-pods=false",
        "--disable-scheduler",
        "--disable-controller-manager",
        // No ServiceAccount controller creates `default` accounts on a bare server.
        "--disable-admission-plugins=ServiceAccount",
    ];

    /// Starts a bare `capstan server` ([`ServerProcess::BARE`]) on a free port and waits until
    /// `/readyz` answers (20 s).
    pub fn start(data_dir: &Path) -> Result<Self> {
        Self::start_with(data_dir, &[])
    }

    /// As [`ServerProcess::start`], with extra flags.
    pub fn start_with(data_dir: &Path, extra_args: &[&str]) -> Result<Self> {
        let mut args = Self::BARE.to_vec();
        args.extend_from_slice(extra_args);
        Self::start_raw(data_dir, &args)
    }

    /// Starts the whole control plane as a user runs it: `capstan server` with its in-process
    /// scheduler, controllers and simulated nodes, plus `extra_args`.
    pub fn start_cluster(data_dir: &Path, extra_args: &[&str]) -> Result<Self> {
        Self::start_raw(data_dir, extra_args)
    }

    /// Starts `capstan server` with exactly `extra_args` after the data dir and port, and
    /// waits until `/readyz` answers (20 s).
    pub fn start_raw(data_dir: &Path, extra_args: &[&str]) -> Result<Self> {
        let mut p = Self::spawn(data_dir, free_port(), extra_args)?;
        p.wait_ready(Duration::from_secs(20))?;
        Ok(p)
    }

    /// Spawns `capstan server --data-dir <data_dir> --secure-port <port> <extra_args>`
    /// without waiting for it (a member of a store cluster is not ready before its peers
    /// run); see [`ServerProcess::wait_ready`].
    pub fn spawn(data_dir: &Path, port: u16, extra_args: &[&str]) -> Result<Self> {
        Self::spawn_command("server", data_dir, port, extra_args)
    }

    /// As [`ServerProcess::spawn`] for another subcommand with the same flags
    /// (`capstan apiserver`).
    pub fn spawn_command(
        command: &str,
        data_dir: &Path,
        port: u16,
        extra_args: &[&str],
    ) -> Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        let log_path = data_dir.with_extension("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let child = Command::new(capstan_bin())
            .arg(command)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--secure-port", &port.to_string()])
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", capstan_bin().display()))?;
        let cache_dir = data_dir.with_extension("kubecache");
        Ok(ServerProcess {
            child,
            url: format!("https://127.0.0.1:{port}"),
            kubeconfig: data_dir.join("admin.kubeconfig"),
            data_dir: data_dir.to_path_buf(),
            cache_dir,
            log_path,
        })
    }

    /// Waits until the server's `/readyz` answers `ok`, or fails after `limit` (or when the
    /// process exits) with its log.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if !self.is_running() {
                bail!("capstan server exited early; log: {}", self.log());
            }
            if self.kubeconfig.exists() {
                let (ok, out, _) = self.kubectl(&["get", "--raw", "/readyz"])?;
                if ok && out.trim() == "ok" {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "capstan server not ready after {limit:?}; log: {}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the process still runs (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9` the server (as a crash) and reap it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Runs the stock `kubectl` with the admin kubeconfig and this server's cache dir;
    /// returns (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> Result<(bool, String, String)> {
        self.kubectl_as(&self.kubeconfig, args, None)
    }

    /// Runs `kubectl` with another kubeconfig, optionally feeding stdin.
    pub fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<(bool, String, String)> {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache_dir.display()))
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning kubectl")?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Runs `kubectl` with the admin kubeconfig and extra environment variables (e.g.
    /// `KUBE_EDITOR` for `kubectl edit`); returns (success, stdout, stderr).
    pub fn kubectl_env(
        &self,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Result<(bool, String, String)> {
        let out = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache_dir.display()))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .context("running kubectl")?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// Spawns `kubectl` with the admin kubeconfig and piped stdout (for `-w`).
    pub fn kubectl_spawn(&self, args: &[&str]) -> Result<Child> {
        Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache_dir.display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning kubectl")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Process id of the child.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs `capstan` with `args` (e.g. `kubeconfig --user alice`), returning (success, stdout, stderr).
    pub fn capstan(&self, args: &[&str]) -> Result<(bool, String, String)> {
        let out = Command::new(capstan_bin()).args(args).output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
