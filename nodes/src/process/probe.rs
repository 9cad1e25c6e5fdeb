//! Startup, readiness and liveness probes of a process container, as the kubelet's prober
//! runs them: after `initialDelaySeconds` (counted from the container's start), every
//! `periodSeconds`, each try bounded by `timeoutSeconds`; the result flips after
//! `successThreshold` successes or `failureThreshold` failures in a row. Readiness and
//! liveness wait for the container to be started (its postStart hook done and its startup
//! probe passed, `super::lifecycle`); a startup probe ends at its first success or when it
//! fails for good. Handlers: `exec` (the command inside the container, exit 0), `httpGet` (a
//! status in 200–399; pods share the host network, so the host defaults to 127.0.0.1),
//! `tcpSocket` (the connection opens), `grpc` (the standard health service answers
//! `SERVING`, `super::grpc_probe`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::registry::Identity;
use super::sandbox;

/// Which probe a result is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `readinessProbe`: drives the container's `ready`.
    Readiness,
    /// `livenessProbe`: a failure restarts the container.
    Liveness,
    /// `startupProbe` (and the postStart hook before it): success marks the container
    /// started, a failure restarts it.
    Startup,
    /// The postStart hook failed (never sent as a success): the container is killed.
    PostStart,
    /// The preStop hook failed (never sent as a success): an event, and SIGTERM as usual.
    PreStop,
}

/// A probe's result changed.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The probe.
    pub(crate) kind: Kind,
    /// Whether it now succeeds.
    pub(crate) ok: bool,
    /// Why it failed (for the Unhealthy event).
    pub(crate) message: String,
}

/// Where a probe runs.
#[derive(Clone)]
pub(crate) struct Target {
    /// The container's first process, once known.
    pub(crate) init_pid: Arc<Mutex<Option<u32>>>,
    /// Who exec probes run as.
    pub(crate) identity: Identity,
    /// The container spec (named ports).
    pub(crate) container: Container,
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::from(v.unwrap_or(default).max(0).unsigned_abs()))
}

/// Runs `probe` until `done`, sending each change of its result to `tx`; readiness and
/// liveness probes first wait for `started`. Returns the last result: a startup probe
/// returns at its first success (`Some(true)`) or when it has failed (`Some(false)`), a
/// liveness probe when it has failed; `None` when the container ended first.
pub(crate) async fn run(
    kind: Kind,
    probe: Probe,
    target: Target,
    mut started: watch::Receiver<bool>,
    mut done: watch::Receiver<bool>,
    tx: mpsc::UnboundedSender<Outcome>,
) -> Option<bool> {
    let begun = tokio::time::Instant::now();
    let initial = secs(probe.initial_delay_seconds, 0);
    let period = secs(probe.period_seconds, 10).max(Duration::from_millis(500));
    let timeout = secs(probe.timeout_seconds, 1).max(Duration::from_millis(200));
    let successes_needed = probe.success_threshold.unwrap_or(1).max(1);
    let failures_needed = probe.failure_threshold.unwrap_or(3).max(1);
    let mut state: Option<bool> = None;
    let (mut ok_run, mut fail_run) = (0, 0);
    if kind != Kind::Startup {
        tokio::select! {
            r = started.wait_for(|s| *s) => if r.is_err() { return None },
            _ = done.wait_for(|d| *d) => return None,
        }
    }
    tokio::select! {
        () = tokio::time::sleep_until(begun + initial) => {}
        _ = done.wait_for(|d| *d) => return None,
    }
    loop {
        let result = match tokio::time::timeout(timeout, attempt(&probe, &target)).await {
            Ok(r) => r,
            Err(_) => Err(format!("probe timed out after {}s", timeout.as_secs_f32())),
        };
        match &result {
            Ok(()) => {
                ok_run += 1;
                fail_run = 0;
            }
            Err(_) => {
                fail_run += 1;
                ok_run = 0;
            }
        }
        let flip = match state {
            Some(true) | None if fail_run >= failures_needed => Some(false),
            Some(false) | None if ok_run >= successes_needed => Some(true),
            _ => None,
        };
        // A liveness probe starts out successful; a readiness probe, failed.
        let flip = match (kind, state, flip) {
            (Kind::Liveness, None, Some(true)) => {
                state = Some(true);
                None
            }
            _ => flip,
        };
        if let Some(ok) = flip
            && state != Some(ok)
        {
            state = Some(ok);
            let message = result.err().unwrap_or_default();
            if tx.send(Outcome { kind, ok, message }).is_err() {
                return None;
            }
            if (kind == Kind::Liveness && !ok) || kind == Kind::Startup {
                // Started, or being restarted (its next instance probes anew).
                return Some(ok);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = done.wait_for(|d| *d) => return None,
        }
    }
}

fn port(p: &IntOrString, c: &Container) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .and_then(|cp| u16::try_from(cp.container_port).ok())
            .ok_or_else(|| format!("port {name:?} is not a named port of the container")),
    }
}

/// Waits (bounded: 2 s) until the container's first process has entered the container's
/// root (`chroot` after the sandbox mounted it and its volumes), so what runs beside it
/// sees the container's files rather than the host's.
async fn entered(pid: u32) {
    for _ in 0..400 {
        match tokio::fs::read_link(format!("/proc/{pid}/root")).await {
            Ok(root) if root == std::path::Path::new("/") => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ => return,
        }
    }
}

/// Runs `argv` inside the container (its namespaces, root and user); Ok when it exits 0.
pub(crate) async fn exec_in(t: &Target, argv: &[String]) -> Result<(), String> {
    let pid = (*t
        .init_pid
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner))
    .ok_or("the container's process is not running")?;
    entered(pid).await;
    let mut cmd = sandbox::exec_command(pid, &t.identity, argv, false);
    cmd.stdin(std::process::Stdio::null());
    let out = cmd.output().await.map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Err(format!(
            "command {argv:?} exited with {}: {}",
            out.status.code().unwrap_or(-1),
            text.trim()
        ))
    }
}

/// An HTTP GET as the kubelet sends it (`User-Agent: kube-probe/1.33`); Ok for a status in
/// 200–399.
pub(crate) async fn http_get(h: &HTTPGetAction, c: &Container) -> Result<(), String> {
    let port = port(&h.port, c)?;
    let host = h
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "127.0.0.1".into());
    let path = h
        .path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".into());
    let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("Get \"http://{host}:{port}{path}\": {e}"))?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n"
    );
    for hh in h.http_headers.iter().flatten() {
        req.push_str(&format!("{}: {}\r\n", hh.name, hh.value));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64];
    let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&buf[..n]).into_owned();
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {line:?}"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

async fn attempt(probe: &Probe, t: &Target) -> Result<(), String> {
    if let Some(e) = &probe.exec {
        return exec_in(t, e.command.as_deref().unwrap_or_default()).await;
    }
    if let Some(h) = &probe.http_get {
        return http_get(h, &t.container).await;
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = port(&tcp.port, &t.container)?;
        let host = tcp
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "127.0.0.1".into());
        return tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map(|_| ())
            .map_err(|e| format!("dial tcp {host}:{port}: {e}"));
    }
    if let Some(g) = &probe.grpc {
        let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
        return super::grpc_probe::check(port, g.service.as_deref().unwrap_or_default()).await;
    }
    Err("this probe handler is not supported by Capstan's process runtime (exec, httpGet, tcpSocket and grpc are)".into())
}
