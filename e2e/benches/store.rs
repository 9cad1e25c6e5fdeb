//! Store benchmark: `capstan store` against Debian's etcd 3.4, driven by the same client.
//!
//! Run with `make bench-store` (builds `target/release/capstan`, then
//! `cargo bench -p e2e --bench store`). It is not a test: it never fails on numbers, only when a
//! server cannot be started or a request errors (then the table is still printed, with `n/a`
//! for what could not be measured, and the process exits non-zero).
//!
//! Both servers run as single members on loopback, with data directories in one temporary
//! directory (same disk), and are driven one after the other by the same Rust client
//! (`etcd-client` on a multi-threaded tokio runtime). Each system goes through the same steps:
//!
//! 1. **put @N** for N = 1, 16, 256 concurrent clients: each client is a task issuing puts back
//!    to back (8-byte keys, 256-byte values); tasks share connections, at most 16 per
//!    `etcd_client::Client` connection. A row stops after 5 s or 20k puts, whichever comes
//!    first. Throughput is completed puts / wall time; p50/p99 are per-request latencies as the
//!    client sees them.
//! 2. **load**: 100k distinct keys written by 256 clients (not reported, only a progress line).
//! 3. **range @16**: linearizable single-key gets of loaded keys by 16 clients for 5 s (or
//!    200k gets). Every get must find its key.
//! 4. **RSS** of the server process (`VmRSS` from `/proc/<pid>/status`) with the 100k keys.
//! 5. **disk before**: apparent size (sum of file lengths) of the data directory.
//! 6. **restart (default flags)**: SIGKILL, start again on the same directory, time from spawn
//!    until a get is answered (polled every 50 ms, so the figure has ~50 ms resolution). The
//!    default `--snapshot-count` is 10000 for capstan and 100000 for etcd 3.4.
//! 7. Restart (untimed) with `--snapshot-count 1000`, compact at the current revision
//!    (physical), write 5k more puts so snapshots are taken, wait 2 s: **disk after**. For
//!    capstan this shows whether the data directory stays bounded; etcd's bbolt file never
//!    shrinks without a defrag and its WAL segments are preallocated 64 MiB files.
//! 8. **restart (after snapshot)**: SIGKILL and restart with the same flag, timed as in 6.
//!
//! 9. **3 members**: afterwards, a 3-member cluster of each system on loopback (three
//!    processes, separate data directories, default Raft timings, plain TCP between members)
//!    takes puts from 16 and 256 clients with the connections spread round-robin over the
//!    three members (followers forward to the leader), 5 s or 100k puts per row.
//!
//! 10. **TLS**: a fresh single member of each system serving an `https://` client URL with
//!     `--client-cert-auth` (certificates from `capstan certs store-server|store-client`),
//!     puts from 16 and 256 clients over TLS with a client certificate, as in step 1: the
//!     cost of TLS beside the plain `put ops/s` rows. `STORE_BENCH_TLS_ONLY=1` runs only
//!     this step.
//!
//! The table goes to stdout, one progress line per step to stderr. The last column is
//! capstan/etcd: above 1 means capstan has more of it (good for ops/s, bad for latency, RSS,
//! restart time and disk). Numbers from one run on a small machine are noisy; compare orders
//! of magnitude, not the second decimal.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::{StoreProcess, capstan_bin, free_port};
use etcd_client::{Client, CompactionOptions, ConnectOptions, KvClient};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

/// Concurrency levels of the put rows.
const PUT_CLIENTS: [usize; 3] = [1, 16, 256];
/// Tasks sharing one client connection.
const CLIENTS_PER_CONN: usize = 16;
/// Per-row limits of the put rows.
const PUT_MAX_OPS: u64 = 20_000;
const ROW_TIME: Duration = Duration::from_secs(5);
/// Range row: concurrency and op limit (time limit is `ROW_TIME`).
const RANGE_CLIENTS: usize = 16;
const RANGE_MAX_OPS: u64 = 200_000;
/// Keys loaded before the range, RSS, restart and disk steps.
const KEYS: u64 = 100_000;
const LOAD_CLIENTS: usize = 256;
/// Snapshot threshold of the disk / snapshot-restart steps, and the puts written to cross it.
const SNAPSHOT_COUNT: u64 = 1_000;
const POST_COMPACT_PUTS: u64 = 5_000;
const VALUE_LEN: usize = 256;
/// Per-request timeout, so a hung server fails the step instead of hanging the bench.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Generous limit for steps that are bounded by op count only.
const NO_TIME_LIMIT: Duration = Duration::from_secs(600);

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("store bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs everything; `Ok(false)` when a system's steps failed part-way (table still printed).
fn run() -> Result<bool> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let tmp = tempfile::Builder::new()
        .prefix("capstan-bench-")
        .tempdir()?;
    eprintln!(
        "data in {}; capstan binary {}",
        tmp.path().display(),
        capstan_bin().display()
    );

    // Declared after `tmp`, so both servers are killed (dropped) before it is removed.
    let mut servers = Vec::new();
    // `STORE_BENCH_CLUSTER_ONLY=1`: only the 3-member rows.
    let tls_only = std::env::var_os("STORE_BENCH_TLS_ONLY").is_some();
    let single = std::env::var_os("STORE_BENCH_CLUSTER_ONLY").is_none() && !tls_only;
    for kind in [Kind::Etcd, Kind::Capstan].into_iter().filter(|_| single) {
        let mut server = Server::new(kind, &tmp.path().join(kind.dir_name()));
        let took = server.launch(&[])?;
        eprintln!(
            "[{}] started in {} ms at {}",
            kind.name(),
            took.as_millis(),
            server.endpoint
        );
        servers.push(server);
    }

    let mut results = vec![Metrics::new(), Metrics::new()];
    let mut all_ok = true;
    for (server, m) in servers.iter_mut().zip(&mut results) {
        if let Err(e) = bench_one(&rt, server, m) {
            all_ok = false;
            eprintln!("[{}] FAILED: {e:#}", server.kind.name());
            eprintln!(
                "[{}] last log lines:\n{}",
                server.kind.name(),
                server.log_tail(30)
            );
        }
        server.kill();
    }
    drop(servers);

    for (kind, m) in [Kind::Etcd, Kind::Capstan].into_iter().zip(&mut results) {
        if tls_only {
            continue;
        }
        if let Err(e) = bench_cluster(
            &rt,
            kind,
            &tmp.path().join(format!("{}-3", kind.dir_name())),
            m,
        ) {
            all_ok = false;
            eprintln!("[{} x3] FAILED: {e:#}", kind.name());
        }
    }

    if std::env::var_os("STORE_BENCH_CLUSTER_ONLY").is_none() {
        for (kind, m) in [Kind::Etcd, Kind::Capstan].into_iter().zip(&mut results) {
            if let Err(e) = bench_tls(
                &rt,
                kind,
                &tmp.path().join(format!("{}-tls", kind.dir_name())),
                m,
            ) {
                all_ok = false;
                eprintln!("[{} TLS] FAILED: {e:#}", kind.name());
            }
        }
    }

    print_table(&results[0], &results[1]);
    Ok(all_ok)
}

/// Client counts of the TLS rows.
const TLS_CLIENTS: [usize; 2] = [16, 256];

/// The client side of the TLS rows: every `https://` endpoint [`connect`] dials uses it.
static TLS: std::sync::Mutex<Option<store::transport::client_tls::DialTls>> =
    std::sync::Mutex::new(None);

/// Runs `capstan <args>` and fails on a non-zero exit.
fn capstan_cmd(args: &[&str]) -> Result<()> {
    let out = Command::new(capstan_bin()).args(args).output()?;
    if !out.status.success() {
        bail!("capstan {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A single member of `kind` serving `https://` with `--client-cert-auth` under `dir`
/// (certificates from `capstan certs`): puts at [`TLS_CLIENTS`] over TLS.
fn bench_tls(rt: &Runtime, kind: Kind, dir: &Path, m: &mut Metrics) -> Result<()> {
    let name = format!("{} TLS", kind.name());
    std::fs::create_dir_all(dir)?;
    let pki = dir.join("pki-root");
    let pki_s = pki.to_str().context("utf-8 path")?;
    let etcd_dir = pki.join("etcd");
    let etcd_s = etcd_dir.to_str().context("utf-8 path")?;
    capstan_cmd(&["certs", "init", "--data-dir", pki_s])?;
    capstan_cmd(&[
        "certs",
        "store-server",
        "--data-dir",
        pki_s,
        "--name",
        "bench",
        "--hosts",
        "127.0.0.1",
        "--out-dir",
        etcd_s,
    ])?;
    capstan_cmd(&[
        "certs",
        "store-client",
        "--data-dir",
        pki_s,
        "--name",
        "bench-client",
        "--out-dir",
        etcd_s,
    ])?;
    let ca = pki.join("pki/ca.crt");
    *TLS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        Some(store::transport::client_tls::DialTls {
            ca_file: Some(ca.clone()),
            cert_file: Some(etcd_dir.join("bench-client.crt")),
            key_file: Some(etcd_dir.join("bench-client.key")),
        });
    let (client_port, peer_port) = two_free_ports();
    let endpoint = format!("https://127.0.0.1:{client_port}");
    let tls_flags = [
        format!("--cert-file={}", etcd_dir.join("server.crt").display()),
        format!("--key-file={}", etcd_dir.join("server.key").display()),
        format!("--trusted-ca-file={}", ca.display()),
        "--client-cert-auth".to_owned(),
    ];
    let log = File::create(dir.join("server.log"))?;
    let mut cmd = match kind {
        Kind::Capstan => {
            let mut c = Command::new(capstan_bin());
            c.args([
                "store",
                "--name",
                "bench",
                "--listen-client-urls",
                &endpoint,
            ]);
            c
        }
        Kind::Etcd => {
            let peer = format!("http://127.0.0.1:{peer_port}");
            let mut c = Command::new("etcd");
            c.args(["--name", "bench", "--listen-client-urls", &endpoint])
                .args(["--advertise-client-urls", &endpoint])
                .args([
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                ])
                .args(["--initial-cluster", &format!("bench={peer}")]);
            c
        }
    };
    let child = cmd
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(&tls_flags)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawning {name}"))?;
    let _guard = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while rt.block_on(connect(&endpoint)).is_err() {
        if Instant::now() > deadline {
            bail!("{name} not ready after 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for clients in TLS_CLIENTS {
        let s = rt.block_on(drive(&endpoint, Op::Put, clients, PUT_MAX_OPS, ROW_TIME))?;
        eprintln!("[{name}] put @{clients}: {s}");
        m.insert(format!("TLS put ops/s @{clients}"), s.ops_per_sec());
        m.insert(format!("TLS put p99 ms @{clients}"), s.percentile_ms(0.99));
    }
    Ok(())
}

/// A child process killed when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Client counts of the 3-member rows.
const CLUSTER_CLIENTS: [usize; 2] = [16, 256];
/// Puts per 3-member row at most (with [`ROW_TIME`]): enough that a fast row still runs for
/// seconds, not a fraction of one.
const CLUSTER_MAX_OPS: u64 = 100_000;

/// A 3-member cluster of `kind` on loopback (separate processes and data directories under
/// `dir`, default Raft timings): puts at [`CLUSTER_CLIENTS`] with the connections spread over
/// the three members.
fn bench_cluster(rt: &Runtime, kind: Kind, dir: &Path, m: &mut Metrics) -> Result<()> {
    let name = format!("{} x3", kind.name());
    let mut cluster = Cluster3::start(kind, dir)?;
    let endpoints: Vec<&str> = cluster.clients.iter().map(String::as_str).collect();
    rt.block_on(wait_cluster_ready(&endpoints, Duration::from_secs(60)))
        .with_context(|| format!("{name} not ready; logs:\n{}", cluster.logs()))?;
    eprintln!("[{name}] ready at {}", endpoints.join(","));
    for clients in CLUSTER_CLIENTS {
        let s = rt.block_on(drive_spread(
            &endpoints,
            Op::Put,
            clients,
            CLUSTER_MAX_OPS,
            ROW_TIME,
        ))?;
        eprintln!("[{name}] put @{clients}: {s}");
        m.insert(format!("3 members: put ops/s @{clients}"), s.ops_per_sec());
        m.insert(
            format!("3 members: put p99 ms @{clients}"),
            s.percentile_ms(0.99),
        );
    }
    cluster.kill();
    Ok(())
}

/// Until a put through every member succeeds (a leader exists and forwards work).
async fn wait_cluster_ready(endpoints: &[&str], limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    'members: for ep in endpoints {
        loop {
            let opts = ConnectOptions::new()
                .with_connect_timeout(Duration::from_millis(500))
                .with_timeout(Duration::from_secs(2));
            if let Ok(mut c) = Client::connect([*ep], Some(opts)).await
                && c.put("health", "ok", None).await.is_ok()
            {
                continue 'members;
            }
            if Instant::now() > deadline {
                bail!("no put through {ep} after {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Three member processes of etcd or capstan store, bootstrapped with `--initial-cluster`.
struct Cluster3 {
    children: Vec<Child>,
    clients: Vec<String>,
    logs: Vec<PathBuf>,
}

impl Cluster3 {
    fn start(kind: Kind, dir: &Path) -> Result<Cluster3> {
        std::fs::create_dir_all(dir)?;
        let peers: Vec<String> = (0..3)
            .map(|_| format!("http://127.0.0.1:{}", free_port()))
            .collect();
        let clients: Vec<String> = (0..3)
            .map(|_| format!("http://127.0.0.1:{}", free_port()))
            .collect();
        let initial = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}={p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster3 {
            children: Vec::new(),
            clients: clients.clone(),
            logs: Vec::new(),
        };
        for i in 0..3 {
            let log = dir.join(format!("m{i}.log"));
            let mut cmd = match kind {
                Kind::Etcd => Command::new("etcd"),
                Kind::Capstan => {
                    let mut cmd = Command::new(capstan_bin());
                    cmd.arg("store");
                    cmd
                }
            };
            cmd.args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("m{i}")))
                .args(["--listen-client-urls", &clients[i]])
                .args(["--advertise-client-urls", &clients[i]])
                .args(["--listen-peer-urls", &peers[i]])
                .args(["--initial-advertise-peer-urls", &peers[i]])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-token", "bench-3"])
                .stdout(Stdio::null())
                .stderr(File::create(&log)?);
            c.children.push(
                cmd.spawn()
                    .with_context(|| format!("spawning {} member", kind.name()))?,
            );
            c.logs.push(log);
        }
        Ok(c)
    }

    fn logs(&self) -> String {
        self.logs
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n-----\n")
    }

    fn kill(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
    }
}

impl Drop for Cluster3 {
    fn drop(&mut self) {
        self.kill();
    }
}

/// All steps for one system, recording each figure in `m` as soon as it is known.
fn bench_one(rt: &Runtime, server: &mut Server, m: &mut Metrics) -> Result<()> {
    let name = server.kind.name();
    for clients in PUT_CLIENTS {
        let s = rt.block_on(drive(
            &server.endpoint,
            Op::Put,
            clients,
            PUT_MAX_OPS,
            ROW_TIME,
        ))?;
        eprintln!("[{name}] put @{clients}: {s}");
        m.insert(format!("put ops/s @{clients}"), s.ops_per_sec());
        m.insert(format!("put p50 ms @{clients}"), s.percentile_ms(0.50));
        m.insert(format!("put p99 ms @{clients}"), s.percentile_ms(0.99));
    }

    let s = rt.block_on(drive(
        &server.endpoint,
        Op::Load,
        LOAD_CLIENTS,
        KEYS,
        NO_TIME_LIMIT,
    ))?;
    eprintln!("[{name}] loaded {KEYS} keys: {s}");

    let s = rt.block_on(drive(
        &server.endpoint,
        Op::Get,
        RANGE_CLIENTS,
        RANGE_MAX_OPS,
        ROW_TIME,
    ))?;
    eprintln!("[{name}] range @{RANGE_CLIENTS}: {s}");
    m.insert(format!("range ops/s @{RANGE_CLIENTS}"), s.ops_per_sec());

    let rss = rss_bytes(server.pid())?;
    eprintln!("[{name}] RSS {:.1} MiB", mib(rss));
    m.insert(ROW_RSS.to_owned(), mib(rss));

    let before = dir_bytes(&server.data_dir)?;
    eprintln!("[{name}] data dir {before} bytes");
    m.insert(ROW_DISK_BEFORE.to_owned(), before as f64);

    let took = server.launch(&[])?;
    rt.block_on(check_keys(&server.endpoint))
        .context("get after restart")?;
    eprintln!(
        "[{name}] kill -9 + restart (default flags): {} ms",
        took.as_millis()
    );
    m.insert(ROW_RESTART.to_owned(), millis(took));

    let count = SNAPSHOT_COUNT.to_string();
    let snap_flags = ["--snapshot-count", count.as_str()];
    let took = server.launch(&snap_flags)?;
    eprintln!(
        "[{name}] restarted with --snapshot-count {SNAPSHOT_COUNT} in {} ms",
        took.as_millis()
    );
    let rev = rt
        .block_on(compact_now(&server.endpoint))
        .context("compaction")?;
    eprintln!("[{name}] compacted at revision {rev}");
    let s = rt.block_on(drive(
        &server.endpoint,
        Op::Put,
        256,
        POST_COMPACT_PUTS,
        NO_TIME_LIMIT,
    ))?;
    eprintln!("[{name}] {POST_COMPACT_PUTS} puts after compaction: {s}");
    std::thread::sleep(Duration::from_secs(2));
    let after = dir_bytes(&server.data_dir)?;
    eprintln!("[{name}] data dir {after} bytes");
    m.insert(ROW_DISK_AFTER.to_owned(), after as f64);

    let took = server.launch(&snap_flags)?;
    rt.block_on(check_keys(&server.endpoint))
        .context("get after restart")?;
    eprintln!(
        "[{name}] kill -9 + restart after snapshot: {} ms",
        took.as_millis()
    );
    m.insert(ROW_RESTART_SNAP.to_owned(), millis(took));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Servers.

#[derive(Clone, Copy)]
enum Kind {
    Etcd,
    Capstan,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd",
            Kind::Capstan => "capstan",
        }
    }

    fn dir_name(self) -> &'static str {
        match self {
            Kind::Etcd => "etcd-data",
            Kind::Capstan => "capstan-data",
        }
    }
}

enum Proc {
    Etcd(Child),
    Capstan(StoreProcess),
}

/// One system under test; it can be killed and relaunched on the same data directory.
struct Server {
    kind: Kind,
    data_dir: PathBuf,
    endpoint: String,
    /// etcd keeps its ports across restarts (its member record holds the peer URL).
    etcd_ports: (u16, u16),
    proc: Option<Proc>,
}

impl Server {
    fn new(kind: Kind, data_dir: &Path) -> Self {
        Server {
            kind,
            data_dir: data_dir.to_path_buf(),
            endpoint: String::new(),
            etcd_ports: two_free_ports(),
            proc: None,
        }
    }

    /// SIGKILLs the running process if any, starts it with `extra` flags and waits until it
    /// answers a get. Returns the time from spawn to the first answered get.
    fn launch(&mut self, extra: &[&str]) -> Result<Duration> {
        self.kill();
        let start = Instant::now();
        match self.kind {
            Kind::Capstan => {
                let p = StoreProcess::start(&self.data_dir, extra)?;
                self.endpoint = p.endpoint.clone();
                self.proc = Some(Proc::Capstan(p));
            }
            Kind::Etcd => {
                let (client, peer) = self.etcd_ports;
                self.endpoint = format!("http://127.0.0.1:{client}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let log = File::options()
                    .create(true)
                    .append(true)
                    .open(self.log_path())?;
                let child = Command::new("etcd")
                    .args(["--name", "bench", "--data-dir"])
                    .arg(&self.data_dir)
                    .args(["--listen-client-urls", &self.endpoint])
                    .args(["--advertise-client-urls", &self.endpoint])
                    .args(["--listen-peer-urls", &peer_url])
                    .args(["--initial-advertise-peer-urls", &peer_url])
                    .args(["--initial-cluster", &format!("bench={peer_url}")])
                    .args(extra)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .context("spawning etcd (apt-get install etcd-server)")?;
                self.proc = Some(Proc::Etcd(child));
                self.wait_etcd_ready(Duration::from_secs(60))?;
            }
        }
        Ok(start.elapsed())
    }

    /// Same readiness probe as the harness uses for capstan: a get every 50 ms.
    fn wait_etcd_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        loop {
            if let Some(Proc::Etcd(child)) = &mut self.proc
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "etcd exited early with {status}; log:\n{}",
                    self.log_tail(30)
                );
            }
            let ep = self.endpoint.clone();
            let ok = rt.block_on(async move {
                let opts = ConnectOptions::new()
                    .with_connect_timeout(Duration::from_millis(500))
                    .with_timeout(Duration::from_secs(2));
                match Client::connect([ep], Some(opts)).await {
                    Ok(mut c) => c.get("health", None).await.is_ok(),
                    Err(_) => false,
                }
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd not ready after {limit:?}; log:\n{}",
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> u32 {
        match &self.proc {
            Some(Proc::Etcd(c)) => c.id(),
            Some(Proc::Capstan(p)) => p.pid(),
            None => 0,
        }
    }

    /// SIGKILL, and wait for the process to be reaped.
    fn kill(&mut self) {
        match self.proc.take() {
            Some(Proc::Etcd(mut c)) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Some(Proc::Capstan(mut p)) => p.kill(),
            None => {}
        }
    }

    /// Where the process's stderr goes (the harness's convention: next to the data dir).
    fn log_path(&self) -> PathBuf {
        self.data_dir.with_extension("log")
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Two distinct free ports (client, peer) for etcd.
fn two_free_ports() -> (u16, u16) {
    let client = free_port();
    loop {
        let peer = free_port();
        if peer != client {
            return (client, peer);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Load generation.

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Put to keys spread over the key space.
    Put,
    /// Put key `n` (the n-th op writes the n-th key: every key exactly once).
    Load,
    /// Linearizable get of a loaded key; the key must exist.
    Get,
}

/// The 8-byte key of index `i`.
fn key(i: u64) -> String {
    format!("{:08}", i % KEYS)
}

/// Spreads consecutive op numbers over the key space (7919 is coprime with `KEYS`).
fn spread(n: u64) -> u64 {
    n.wrapping_mul(7919) % KEYS
}

impl Op {
    async fn run(self, kv: &mut KvClient, n: u64, value: &[u8]) -> Result<()> {
        match self {
            Op::Put => {
                kv.put(key(spread(n)), value, None).await?;
            }
            Op::Load => {
                kv.put(key(n), value, None).await?;
            }
            Op::Get => {
                let k = key(spread(n));
                let resp = kv.get(k.as_str(), None).await?;
                if resp.kvs().len() != 1 {
                    bail!("get {k}: {} kvs, want 1", resp.kvs().len());
                }
            }
        }
        Ok(())
    }
}

async fn connect(endpoint: &str) -> Result<Client> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(REQUEST_TIMEOUT);
    let mut c = if endpoint.starts_with("https://") {
        let tls = TLS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .context("no TLS client configuration")?;
        let channel = store::remote::tls_channel(&[endpoint.to_owned()], &tls).await?;
        Client::from_channel(etcd_client::Channel::Tonic(channel), Some(opts)).await?
    } else {
        Client::connect([endpoint], Some(opts)).await?
    };
    // Establish the connection before anything is timed.
    c.get("warmup", None).await?;
    Ok(c)
}

/// Outcome of one load step.
struct RunStats {
    /// Per-request latencies in microseconds, sorted.
    lat_us: Vec<u64>,
    elapsed: Duration,
}

impl RunStats {
    fn ops_per_sec(&self) -> f64 {
        self.lat_us.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&self, q: f64) -> f64 {
        if self.lat_us.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.lat_us.len() as f64).ceil() as usize).clamp(1, self.lat_us.len());
        self.lat_us[rank - 1] as f64 / 1000.0
    }
}

impl std::fmt::Display for RunStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ops in {:.2} s = {:.0} ops/s, p50 {:.3} ms, p99 {:.3} ms",
            self.lat_us.len(),
            self.elapsed.as_secs_f64(),
            self.ops_per_sec(),
            self.percentile_ms(0.50),
            self.percentile_ms(0.99)
        )
    }
}

/// `tasks` clients issue `op` back to back until `max_ops` ops were started or `max_time`
/// passed. Tasks share connections, `CLIENTS_PER_CONN` per connection.
async fn drive(
    endpoint: &str,
    op: Op,
    tasks: usize,
    max_ops: u64,
    max_time: Duration,
) -> Result<RunStats> {
    drive_spread(&[endpoint], op, tasks, max_ops, max_time).await
}

/// As [`drive`], with the connections spread round-robin over `endpoints` (a cluster's
/// members, as several API servers would use them).
async fn drive_spread(
    endpoints: &[&str],
    op: Op,
    tasks: usize,
    max_ops: u64,
    max_time: Duration,
) -> Result<RunStats> {
    let what = format!("{op:?} @{tasks}");
    let mut clients = Vec::new();
    for i in 0..tasks.div_ceil(CLIENTS_PER_CONN) {
        let endpoint = endpoints[i % endpoints.len()];
        clients.push(connect(endpoint).await.with_context(|| what.clone())?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + max_time;
    let mut set = JoinSet::new();
    for i in 0..tasks {
        let mut kv = clients[i / CLIENTS_PER_CONN].kv_client();
        let next = Arc::clone(&next);
        set.spawn(async move {
            let value = vec![b'v'; VALUE_LEN];
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= max_ops || Instant::now() >= deadline {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let t = Instant::now();
                op.run(&mut kv, n, &value).await?;
                lat.push(t.elapsed().as_micros() as u64);
            }
        });
    }
    let mut lat_us = Vec::new();
    while let Some(joined) = set.join_next().await {
        lat_us.extend(joined?.with_context(|| what.clone())?);
    }
    let elapsed = start.elapsed();
    lat_us.sort_unstable();
    Ok(RunStats { lat_us, elapsed })
}

/// Every loaded key a restart must have kept: spot-check the first and the last.
async fn check_keys(endpoint: &str) -> Result<()> {
    let mut c = connect(endpoint).await?;
    for i in [0, KEYS - 1] {
        let resp = c.get(key(i), None).await?;
        if resp.kvs().len() != 1 {
            bail!("after restart, key {} is missing", key(i));
        }
    }
    Ok(())
}

/// Compacts (physically) at the current revision; returns that revision.
async fn compact_now(endpoint: &str) -> Result<i64> {
    let mut c = connect(endpoint).await?;
    let resp = c.get(key(0), None).await?;
    let rev = resp
        .header()
        .context("get response without header")?
        .revision();
    c.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await?;
    Ok(rev)
}

// ---------------------------------------------------------------------------------------------
// Measurements of the process and its directory.

/// Resident set size of `pid`, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .context("bad VmRSS line")?
        .parse()?;
    Ok(kib * 1024)
}

/// Sum of the lengths of all files under `dir` (like `du --apparent-size`).
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            total += dir_bytes(&entry.path())?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// The table.

/// Figures of one system by row label.
type Metrics = HashMap<String, f64>;

const ROW_RSS: &str = "RSS MiB after 100k keys";
const ROW_RESTART: &str = "restart ms, 100k keys (kill -9, default flags)";
const ROW_RESTART_SNAP: &str = "restart ms, 100k keys (kill -9, after snapshot)";
const ROW_DISK_BEFORE: &str = "disk bytes, 100k keys, before compaction";
const ROW_DISK_AFTER: &str = "disk bytes after compact + 5k puts";

/// Row labels in print order, with the decimals to print.
fn rows() -> Vec<(String, usize)> {
    let mut rows = Vec::new();
    for c in PUT_CLIENTS {
        rows.push((format!("put ops/s @{c}"), 0));
        rows.push((format!("put p50 ms @{c}"), 3));
        rows.push((format!("put p99 ms @{c}"), 3));
    }
    rows.push((format!("range ops/s @{RANGE_CLIENTS}"), 0));
    for c in TLS_CLIENTS {
        rows.push((format!("TLS put ops/s @{c}"), 0));
        rows.push((format!("TLS put p99 ms @{c}"), 3));
    }
    for c in CLUSTER_CLIENTS {
        rows.push((format!("3 members: put ops/s @{c}"), 0));
        rows.push((format!("3 members: put p99 ms @{c}"), 3));
    }
    rows.push((ROW_RSS.to_owned(), 1));
    for label in [
        ROW_RESTART,
        ROW_RESTART_SNAP,
        ROW_DISK_BEFORE,
        ROW_DISK_AFTER,
    ] {
        rows.push((label.to_owned(), 0));
    }
    rows
}

fn print_table(etcd: &Metrics, capstan: &Metrics) {
    let show = |v: Option<&f64>, decimals: usize| match v {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "n/a".to_owned(),
    };
    let mut lines = vec![[
        "metric".to_owned(),
        "etcd 3.4".to_owned(),
        "capstan".to_owned(),
        "capstan/etcd".to_owned(),
    ]];
    for (label, decimals) in rows() {
        let (e, c) = (etcd.get(&label), capstan.get(&label));
        let ratio = match (e, c) {
            (Some(e), Some(c)) if *e > 0.0 => Some(c / e),
            _ => None,
        };
        lines.push([
            label,
            show(e, decimals),
            show(c, decimals),
            show(ratio.as_ref(), 2),
        ]);
    }
    let mut widths = [0; 4];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.len());
        }
    }
    for (i, line) in lines.iter().enumerate() {
        let [label, e, c, r] = line;
        let [w0, w1, w2, w3] = widths;
        println!("| {label:<w0$} | {e:>w1$} | {c:>w2$} | {r:>w3$} |");
        if i == 0 {
            let dashes = |w: usize| "-".repeat(w);
            let (d0, d1, d2, d3) = (dashes(w0), dashes(w1), dashes(w2), dashes(w3));
            println!("|-{d0}-|-{d1}:|-{d2}:|-{d3}:|");
        }
    }
}
