//! Lifecycle hooks of a process container, as the kubelet runs them: `postStart` right
//! after the container's process starts (the container counts as started only once it
//! succeeded, then its startup probe passed; a failure kills the container, which restarts
//! as its policy says, with a `FailedPostStartHook` event), and `preStop` when the container
//! is stopped, before SIGTERM and within the grace period (a failure is an event;
//! SIGTERM follows all the same). Handlers: `exec` (inside the container), `httpGet`
//! (pods share the host network: the host defaults to 127.0.0.1), `sleep`. `tcpSocket`,
//! deprecated and never run by the kubelet, fails with that reason.

use std::time::Duration;

use k8s_openapi::api::core::v1::{LifecycleHandler, Probe};
use tokio::sync::{mpsc, watch};

use super::probe::{self, Kind, Outcome, Target};

/// Runs one hook handler to its end.
pub(crate) async fn run_handler(h: &LifecycleHandler, t: &Target) -> Result<(), String> {
    if let Some(e) = &h.exec {
        return probe::exec_in(t, e.command.as_deref().unwrap_or_default()).await;
    }
    if let Some(g) = &h.http_get {
        return probe::http_get(g, &t.container).await;
    }
    if let Some(s) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0).unsigned_abs())).await;
        return Ok(());
    }
    Err("this lifecycle hook handler is not supported (exec, httpGet and sleep are)".into())
}

/// Waits (bounded) for the container's first process to be known, so exec handlers can
/// enter it.
async fn wait_for_process(t: &Target, done: &watch::Receiver<bool>) {
    for _ in 0..400 {
        let known = t
            .init_pid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some();
        if known || *done.borrow() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What makes a container started: its `postStart` hook, then its `startupProbe`. Opens
/// `started` (readiness and liveness probes wait on it) and reports `Startup` success;
/// reports a `PostStart` or `Startup` failure otherwise (the container is then killed).
/// Returns early when the container ends (`done`).
pub(crate) async fn start(
    post_start: Option<LifecycleHandler>,
    startup: Option<Probe>,
    target: Target,
    started: watch::Sender<bool>,
    mut done: watch::Receiver<bool>,
    tx: mpsc::UnboundedSender<Outcome>,
) {
    if let Some(hook) = post_start {
        wait_for_process(&target, &done).await;
        let result = tokio::select! {
            r = run_handler(&hook, &target) => r,
            _ = done.wait_for(|d| *d) => return,
        };
        if let Err(message) = result {
            let _ = tx.send(Outcome {
                kind: Kind::PostStart,
                ok: false,
                message,
            });
            return;
        }
    }
    if let Some(p) = startup {
        let opened = started.subscribe();
        let r = probe::run(Kind::Startup, p, target, opened, done, tx).await;
        if r == Some(true) {
            let _ = started.send(true);
        }
        return;
    }
    let _ = started.send(true);
    let _ = tx.send(Outcome {
        kind: Kind::Startup,
        ok: true,
        message: String::new(),
    });
}

/// Runs the `preStop` hook, bounded by `limit` (what is left of the grace period); a
/// failure or time-out is reported as a `PreStop` outcome. Returns once SIGTERM may go.
pub(crate) async fn pre_stop(
    hook: LifecycleHandler,
    target: Target,
    limit: Duration,
    tx: mpsc::UnboundedSender<Outcome>,
) {
    let message = match tokio::time::timeout(limit, run_handler(&hook, &target)).await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(_) => format!(
            "PreStopHook did not finish within the grace period ({}s)",
            limit.as_secs()
        ),
    };
    let _ = tx.send(Outcome {
        kind: Kind::PreStop,
        ok: false,
        message,
    });
}
