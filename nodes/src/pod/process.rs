//! The process runtime's side of a pod's lifecycle: the pod state machine (`Sim`) decides
//! when each container runs and what its exit means (restart policy, back-off, phase); this
//! driver prepares the sandbox (volumes) before anything starts, starts a real process when
//! a container turns Running, reports each process's exit (code, signal, termination
//! message) back to the state machine, sends SIGTERM on deletion and SIGKILL when the grace
//! period ends, and kills what the state machine no longer runs.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::core::v1::{
    Container, LifecycleHandler, Pod, PodSecurityContext, SecurityContext,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, mpsc, watch};

use super::{Kind, Sim, State, finish};
use crate::Options;
use crate::api::FleetApi;
use crate::node::SimNode;
use crate::process::env::{self, Objects};
use crate::process::logs::{self, LogFile};
use crate::process::registry::{Identity, Instance};
use crate::process::sandbox::{self, Mount, Spec};
use crate::process::volumes::Writer;
use crate::process::{ProcessNode, lifecycle, probe, terminal};

/// The user containers run as unless the pod says otherwise (`nobody`).
const DEFAULT_UID: u32 = 65534;
/// Longest termination message kept (the kubelet's 4096 bytes).
const MAX_MESSAGE: usize = 4096;
/// How long to wait for killed processes to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// What a pod's processes report: an exit, or a probe result.
#[derive(Debug)]
pub(super) enum Report {
    /// A process ended.
    Exit(ExitReport),
    /// A probe of instance `id` of container `index` changed its result.
    Probe {
        index: usize,
        id: String,
        outcome: probe::Outcome,
    },
}

/// A process that ended.
#[derive(Debug)]
pub(super) struct ExitReport {
    index: usize,
    id: String,
    code: i32,
    reason: &'static str,
    message: Option<String>,
    finished: Timestamp,
}

/// A running container process.
struct Proc {
    index: usize,
    id: String,
    unshare_pid: Option<u32>,
    init_pid: Arc<Mutex<Option<u32>>>,
    killed: bool,
    /// Where its hooks run.
    target: probe::Target,
    /// Its `preStop` hook.
    pre_stop: Option<LifecycleHandler>,
    /// Grace periods when a liveness or a startup probe stops it (the probe's
    /// `terminationGracePeriodSeconds`, else the pod's), and when a failed `postStart`
    /// hook does (the pod's); capped by `--max-grace`.
    probe_grace: (Duration, Duration, Duration),
    /// Turns true when the process has ended.
    done: watch::Receiver<bool>,
}

impl Proc {
    fn target(&self) -> Option<u32> {
        let init = *self
            .init_pid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        init.or(self.unshare_pid)
    }
}

/// One pod's processes.
pub(super) struct Driver {
    node: Arc<ProcessNode>,
    sim_node: Arc<SimNode>,
    api: FleetApi,
    opts: Arc<Options>,
    namespace: String,
    name: String,
    uid: String,
    dir: PathBuf,
    volumes: HashMap<String, PathBuf>,
    procs: Vec<Proc>,
    exits_tx: mpsc::UnboundedSender<Report>,
    exits: mpsc::UnboundedReceiver<Report>,
    term_sent: bool,
    last_mount_error: Option<String>,
    /// The task rotating the pod's projected service-account tokens.
    rotation: Option<tokio::task::JoinHandle<()>>,
}

impl Driver {
    /// A driver for `pod` on `node`.
    pub(super) fn new(
        node: Arc<ProcessNode>,
        sim_node: Arc<SimNode>,
        api: FleetApi,
        opts: Arc<Options>,
        pod: &Pod,
    ) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (exits_tx, exits) = mpsc::unbounded_channel();
        Driver {
            dir: node.dir.join("pods").join(&uid),
            node,
            sim_node,
            api,
            opts,
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
            volumes: HashMap::new(),
            procs: Vec::new(),
            exits_tx,
            exits,
            term_sent: false,
            last_mount_error: None,
            rotation: None,
        }
    }

    /// The next process exit or probe result.
    pub(super) async fn next_report(&mut self) -> Option<Report> {
        self.exits.recv().await
    }

    /// Applies a report to the state machine: an exit; a readiness result; the container
    /// started (postStart hook and startup probe passed); a liveness or startup probe or
    /// postStart hook failure, which kills the process (it restarts as its policy says); a
    /// preStop hook failure (an event).
    pub(super) async fn handle(&mut self, sim: &mut Sim, report: Report) {
        let (index, id, outcome) = match report {
            Report::Exit(exit) => return self.exited(sim, exit),
            Report::Probe { index, id, outcome } => (index, id, outcome),
        };
        let running = matches!(sim.containers.get(index).map(|c| &c.state), Some(State::Running { id: r, .. }) if *r == id);
        if !running {
            return;
        }
        let name = sim.containers[index].name.clone();
        match outcome.kind {
            probe::Kind::Readiness => {
                if !outcome.ok {
                    sim.event(
                        index,
                        "Warning",
                        "Unhealthy",
                        format!("Readiness probe failed: {}", outcome.message),
                    );
                }
                sim.containers[index].probed = Some((id, outcome.ok));
            }
            probe::Kind::Startup if outcome.ok => {
                sim.containers[index].opened = Some(id);
            }
            probe::Kind::Liveness | probe::Kind::Startup if !outcome.ok => {
                let which = if outcome.kind == probe::Kind::Startup {
                    "startup"
                } else {
                    "liveness"
                };
                let mut title = which.to_owned();
                title[..1].make_ascii_uppercase();
                sim.event(
                    index,
                    "Warning",
                    "Unhealthy",
                    format!("{title} probe failed: {}", outcome.message),
                );
                sim.event(
                    index,
                    "Normal",
                    "Killing",
                    format!("Container {name} failed {which} probe, will be restarted"),
                );
                self.stop_instance(&id, outcome.kind);
            }
            probe::Kind::PostStart => {
                sim.event(
                    index,
                    "Warning",
                    "FailedPostStartHook",
                    format!("PostStartHook failed: {}", outcome.message),
                );
                // As the kubelet's killContainer: preStop, SIGTERM, SIGKILL after the grace.
                self.stop_instance(&id, probe::Kind::PostStart);
            }
            probe::Kind::PreStop => {
                sim.event(
                    index,
                    "Warning",
                    "FailedPreStopHook",
                    format!("PreStopHook failed: {}", outcome.message),
                );
            }
            probe::Kind::Liveness | probe::Kind::Startup => {}
        }
    }

    /// Stops instance `id` as the kubelet stops a container a probe or its `postStart`
    /// hook (`why`) failed: its preStop hook, SIGTERM, and SIGKILL once the grace period
    /// (at least 2 s after the hook, as the kubelet) has run out. It restarts as its
    /// policy says.
    fn stop_instance(&mut self, id: &str, why: probe::Kind) {
        let Some(p) = self.procs.iter_mut().find(|p| p.id == id) else {
            return;
        };
        let Some(pid) = p.target() else { return };
        p.killed = true;
        let grace = match why {
            probe::Kind::Liveness => p.probe_grace.0,
            probe::Kind::Startup => p.probe_grace.1,
            _ => p.probe_grace.2,
        };
        let (hook, target, mut done) = (p.pre_stop.clone(), p.target.clone(), p.done.clone());
        let (tx, index, id) = (self.exits_tx.clone(), p.index, p.id.clone());
        tokio::spawn(async move {
            let begun = tokio::time::Instant::now();
            if let Some(hook) = hook {
                let (otx, mut orx) = mpsc::unbounded_channel();
                lifecycle::pre_stop(hook, target, grace, otx).await;
                if let Ok(outcome) = orx.try_recv() {
                    let _ = tx.send(Report::Probe { index, id, outcome });
                }
            }
            if *done.borrow() {
                return;
            }
            sandbox::signal(pid, "TERM").await;
            let left = grace
                .saturating_sub(begun.elapsed())
                .max(Duration::from_secs(2));
            let ended = tokio::select! {
                () = tokio::time::sleep(left) => false,
                r = done.wait_for(|d| *d) => r.is_ok(),
            };
            if !ended {
                sandbox::signal(pid, "KILL").await;
            }
        });
    }

    /// Applies an exit to the state machine.
    pub(super) fn exited(&mut self, sim: &mut Sim, exit: ExitReport) {
        self.procs.retain(|p| p.id != exit.id);
        self.node
            .registry
            .update(&self.namespace, &self.name, &self.uid, |p| {
                if let Some(c) = sim
                    .containers
                    .get(exit.index)
                    .and_then(|c| p.containers.get_mut(&c.name))
                    && c.running.as_ref().is_some_and(|r| r.id == exit.id)
                {
                    c.running = None;
                }
            });
        let may_restart = sim.kill_at.is_none();
        let policy = sim.policy;
        let Some(c) = sim.containers.get_mut(exit.index) else {
            return;
        };
        let State::Running { since, id } = &c.state else {
            return;
        };
        if *id != exit.id {
            return;
        }
        let record = super::Exit {
            code: exit.code,
            reason: exit.reason,
            started: *since,
            finished: exit.finished.max(*since),
            id: exit.id,
            message: exit.message,
        };
        finish(c, policy, record, may_restart);
        if sim.kill_at.is_some() && self.procs.is_empty() {
            // Everything stopped before the grace period ended.
            sim.kill_at = Some(Timestamp::now());
        }
    }

    /// Before the state machine moves: prepares the sandbox, signals on deletion. Returns
    /// when to look again, if a step failed.
    pub(super) async fn before(
        &mut self,
        sim: &mut Sim,
        pod: &Pod,
        now: Timestamp,
    ) -> Option<Timestamp> {
        if let Some(kill_at) = sim.kill_at {
            if !self.term_sent {
                self.term_sent = true;
                let left = Duration::try_from(kill_at.duration_since(now)).unwrap_or_default();
                for p in &self.procs {
                    let Some(pid) = p.target() else { continue };
                    match p.pre_stop.clone() {
                        // The preStop hook first, within the grace period; then SIGTERM.
                        Some(hook) => {
                            let (target, id, index) = (p.target.clone(), p.id.clone(), p.index);
                            let tx = self.exits_tx.clone();
                            tokio::spawn(async move {
                                let (otx, mut orx) = mpsc::unbounded_channel();
                                lifecycle::pre_stop(hook, target, left, otx).await;
                                if let Ok(outcome) = orx.try_recv() {
                                    let _ = tx.send(Report::Probe { index, id, outcome });
                                }
                                sandbox::signal(pid, "TERM").await;
                            });
                        }
                        None => sandbox::signal(pid, "TERM").await,
                    }
                }
            }
            if self.procs.is_empty() {
                sim.kill_at = Some(kill_at.min(now));
            } else if kill_at <= now {
                self.kill_all(sim).await;
            }
            return None;
        }
        if sim.sandbox_ready || sim.terminal() {
            return None;
        }
        match self.prepare(pod).await {
            Ok(()) => {
                sim.sandbox_ready = true;
                None
            }
            Err(message) => {
                if self.last_mount_error.as_deref() != Some(message.as_str()) {
                    tracing::warn!(pod = %self.name, error = %message, "pod sandbox not ready");
                    self.last_mount_error = Some(message.clone());
                    if !sim.containers.is_empty() {
                        sim.event(0, "Warning", "FailedMount", message);
                    }
                }
                Some(now + SignedDuration::from_secs(2))
            }
        }
    }

    /// SIGKILLs every process and waits (bounded) for their exits.
    async fn kill_all(&mut self, sim: &mut Sim) {
        for p in &mut self.procs {
            if let Some(pid) = p.target() {
                sandbox::signal(pid, "KILL").await;
            }
            p.killed = true;
        }
        let deadline = tokio::time::Instant::now() + REAP_WAIT;
        while !self.procs.is_empty() {
            match tokio::time::timeout_at(deadline, self.exits.recv()).await {
                Ok(Some(Report::Exit(exit))) => self.exited(sim, exit),
                Ok(Some(Report::Probe { .. })) => {}
                _ => break,
            }
        }
    }

    /// After the state machine moved: starts the containers it runs, kills the processes it
    /// no longer runs. Returns when to look again, if a start must be retried.
    pub(super) async fn after(
        &mut self,
        sim: &mut Sim,
        pod: &Pod,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let mut wake = None;
        for p in &mut self.procs {
            let still = matches!(&sim.containers.get(p.index).map(|c| &c.state), Some(State::Running { id, .. }) if *id == p.id);
            if !still && !p.killed {
                if let Some(pid) = p.target() {
                    sandbox::signal(pid, "KILL").await;
                }
                p.killed = true;
            }
        }
        if sim.kill_at.is_some() || sim.killed {
            return None;
        }
        for i in 0..sim.containers.len() {
            let State::Running { id, .. } = &sim.containers[i].state else {
                continue;
            };
            if self.procs.iter().any(|p| p.id == *id) {
                continue;
            }
            let id = id.clone();
            match self.start(sim, i, &id, pod).await {
                Ok(()) => {}
                Err(StartError::Config(message)) => {
                    sim.event(i, "Warning", "Failed", format!("Error: {message}"));
                    let retry = now + SignedDuration::from_secs(2);
                    sim.containers[i].state = State::Waiting {
                        reason: "CreateContainerConfigError",
                        until: Some(retry),
                    };
                    wake = Some(retry);
                }
                Err(StartError::Start(message)) => {
                    sim.event(i, "Warning", "Failed", format!("Error: {message}"));
                    let _ = self.exits_tx.send(Report::Exit(ExitReport {
                        index: i,
                        id,
                        code: 128,
                        reason: "StartError",
                        message: Some(message),
                        finished: now,
                    }));
                }
            }
        }
        wake
    }

    /// Kills everything left (the pod is gone or the node stops); with `gone`, forgets the
    /// pod and removes its files.
    pub(super) async fn stop(mut self, sim: &mut Sim, gone: bool) {
        if let Some(r) = self.rotation.take() {
            r.abort();
        }
        self.kill_all(sim).await;
        if gone {
            self.node
                .registry
                .remove(&self.namespace, &self.name, &self.uid);
            if let Err(e) = tokio::fs::remove_dir_all(&self.dir).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(pod = %self.name, dir = %self.dir.display(), error = %e, "pod directory not removed");
            }
        }
    }

    /// The pod's user and group for files (volumes): the pod's `runAsUser`/`runAsGroup`
    /// (or the default user), `fsGroup` winning for the group.
    fn volume_owner(pod: &Pod) -> (u32, u32) {
        let sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let uid = sc.and_then(|s| s.run_as_user).map_or(DEFAULT_UID, clamp_id);
        let gid = sc
            .and_then(|s| s.fs_group.or(s.run_as_group))
            .map_or(if uid == DEFAULT_UID { DEFAULT_UID } else { 0 }, clamp_id);
        (uid, gid)
    }

    async fn prepare(&mut self, pod: &Pod) -> Result<(), String> {
        let io = |e: std::io::Error| format!("preparing the pod directory: {e}");
        tokio::fs::create_dir_all(self.dir.join("volumes"))
            .await
            .map_err(io)?;
        let ip = self.sim_node.ip.to_string();
        let writer = Writer {
            api: &self.api,
            node: &self.sim_node.name,
            dir: self.dir.join("volumes"),
            owner: Self::volume_owner(pod),
            pod_ip: &ip,
            host_ip: &ip,
        };
        let mut objects = Objects::new(&self.api, &self.sim_node.name, &self.namespace);
        self.volumes = writer.prepare(pod, &mut objects).await?;
        if self.rotation.is_none() && has_token_volume(pod) {
            self.rotation = Some(tokio::spawn(rotate_tokens(
                self.api.clone(),
                self.sim_node.clone(),
                Arc::new(pod.clone()),
                self.dir.join("volumes"),
                Self::volume_owner(pod),
            )));
        }
        Ok(())
    }

    /// Starts container `i` as instance `id`.
    async fn start(
        &mut self,
        sim: &mut Sim,
        i: usize,
        id: &str,
        pod: &Pod,
    ) -> Result<(), StartError> {
        let ctr = &sim.containers[i];
        let restarts = ctr.restarts;
        let Some(spec_c) = find_container(pod, &ctr.name, ctr.kind) else {
            return Err(StartError::Start(format!(
                "container {:?} is not in the pod spec",
                ctr.name
            )));
        };
        let spec = pod.spec.clone().unwrap_or_default();
        let (uid, gid, groups) = identity(
            spec.security_context.as_ref(),
            spec_c.security_context.as_ref(),
        );
        let ip = self.sim_node.ip.to_string();
        let mut objects = Objects::new(&self.api, &self.sim_node.name, &self.namespace);
        let ctx = env::Context {
            pod_ip: &ip,
            host_ip: &ip,
            api_host: &self.node.api_host,
            api_port: &self.node.api_port,
            node_cpu: &self.opts.cpu,
            node_memory: &self.opts.memory,
            uid,
        };
        let environment = env::build(&mut objects, pod, &spec_c, &ctx)
            .await
            .map_err(StartError::Config)?;
        let vars: HashMap<String, String> = environment.iter().cloned().collect();
        let argv: Vec<String> = spec_c
            .command
            .iter()
            .flatten()
            .chain(spec_c.args.iter().flatten())
            .map(|a| env::expand(a, &vars))
            .collect();
        if argv.is_empty() {
            return Err(StartError::Start(
                "no command: Capstan's process runtime does not read images, so the container needs `command` or `args`".into(),
            ));
        }
        let path_var = environment
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("", |(_, v)| v.as_str());
        let mounted = |p: &str| {
            spec_c
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| p.starts_with(m.mount_path.as_str()))
        };
        if !mounted(&argv[0]) && !executable_exists(&argv[0], path_var) {
            return Err(StartError::Start(format!(
                "exec: {:?}: executable file not found in $PATH (the process runtime runs the host's binaries)",
                argv[0]
            )));
        }
        let mut mounts = Vec::new();
        for m in spec_c.volume_mounts.iter().flatten() {
            let Some(source) = self.volumes.get(&m.name) else {
                return Err(StartError::Config(format!(
                    "volume {:?} is not defined",
                    m.name
                )));
            };
            let mut source = source.clone();
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                if sub.split('/').any(|p| p == "..") || sub.starts_with('/') {
                    return Err(StartError::Config(format!("invalid subPath {sub:?}")));
                }
                source = source.join(sub);
                if !source.exists() {
                    std::fs::create_dir_all(&source)
                        .map_err(|e| StartError::Config(e.to_string()))?;
                }
            }
            mounts.push(Mount {
                source,
                target: m.mount_path.clone(),
                read_only: m.read_only.unwrap_or(false),
            });
        }
        let name = ctr.name.clone();
        let kind = ctr.kind;
        let io = |e: std::io::Error| {
            StartError::Start(format!("preparing the container directory: {e}"))
        };
        let dir = self
            .dir
            .join("containers")
            .join(&name)
            .join(restarts.to_string());
        for sub in ["rootfs", "scratch"] {
            tokio::fs::create_dir_all(dir.join(sub)).await.map_err(io)?;
        }
        let term = sandbox::termination_file(&dir);
        tokio::fs::write(&term, b"").await.map_err(io)?;
        tokio::fs::set_permissions(&term, std::fs::Permissions::from_mode(0o666))
            .await
            .map_err(io)?;
        let log_dir = self.dir.join("logs").join(&name);
        tokio::fs::create_dir_all(&log_dir).await.map_err(io)?;
        let log_path = log_dir.join(format!("{restarts}.log"));
        let log = LogFile::create(&log_path).await.map_err(io)?;
        let tty = spec_c.tty.unwrap_or(false);
        let mut environment = environment;
        if tty && !environment.iter().any(|(k, _)| k == "TERM") {
            environment.push(("TERM".into(), "xterm".into()));
        }
        let identity = Identity {
            uid,
            gid,
            groups,
            env: environment,
            workdir: spec_c
                .working_dir
                .clone()
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "/".into()),
        };
        let sandbox_spec = Spec {
            dir: dir.clone(),
            argv,
            identity: identity.clone(),
            mounts,
            termination_path: spec_c
                .termination_message_path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/dev/termination-log".into()),
            stdin: spec_c.stdin.unwrap_or(false),
            tty,
        };
        let mut child = sandbox::command(&sandbox_spec)
            .spawn()
            .map_err(|e| StartError::Start(format!("starting the container: {e}")))?;
        let (terminal, slave) = if tty {
            let pty = terminal::open(&mut child, &dir.join("rootfs"), uid, gid)
                .await
                .map_err(|e| StartError::Start(format!("opening the container's terminal: {e}")))?;
            (Some(Arc::new(pty.master)), Some(pty.slave))
        } else {
            (None, None)
        };
        let unshare_pid = child.id();
        let init_pid = Arc::new(Mutex::new(None));
        let (done_tx, done_rx) = watch::channel(false);
        let (output, _) = broadcast::channel(256);
        let stdin_pipe = match &terminal {
            Some(master) if spec_c.stdin.unwrap_or(false) => master
                .try_clone()
                .ok()
                .map(|m| Box::new(tokio::fs::File::from_std(m)) as StdinSink),
            Some(_) => None,
            None => child.stdin.take().map(|p| Box::new(p) as StdinSink),
        };
        let stdin = match stdin_pipe {
            Some(mut pipe) => {
                let (tx, mut rx) = mpsc::channel::<Option<Bytes>>(64);
                let once = spec_c.stdin_once.unwrap_or(false);
                tokio::spawn(async move {
                    while let Some(msg) = rx.recv().await {
                        match msg {
                            Some(b)
                                if pipe.write_all(&b).await.is_err()
                                    || pipe.flush().await.is_err() =>
                            {
                                break;
                            }
                            None if once => break,
                            _ => {}
                        }
                    }
                });
                Some(tx)
            }
            None => None,
        };
        let probe_identity = identity.clone();
        let probe_done = done_rx.clone();
        let instance = Instance {
            id: id.to_owned(),
            init_pid: init_pid.clone(),
            done: done_rx,
            stdin,
            output: output.clone(),
            identity,
            terminal: terminal.clone(),
        };
        self.node
            .registry
            .update(&self.namespace, &self.name, &self.uid, |p| {
                let c = p.containers.entry(name.clone()).or_default();
                c.logs.push(log_path.clone());
                c.running = Some(instance);
            });
        // On a terminal, the command's output is the master's (stderr merged, as a terminal
        // does); the script's own stdout ended with the hand-over.
        let stdout: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>> = match &terminal {
            Some(master) => master
                .try_clone()
                .ok()
                .map(|m| Box::new(tokio::fs::File::from_std(m)) as _),
            None => child.stdout.take().map(|s| Box::new(s) as _),
        };
        let stderr = child.stderr.take();
        let tx = self.exits_tx.clone();
        let id_owned = id.to_owned();
        let fallback =
            spec_c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        let init_slot = init_pid.clone();
        tokio::spawn(async move {
            if let Some(pid) = unshare_pid
                && let Some(init) = sandbox::init_pid(pid).await
            {
                *init_slot
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(init);
            }
            let out =
                stdout.map(|s| tokio::spawn(logs::pump(s, "stdout", log.clone(), output.clone())));
            let err =
                stderr.map(|s| tokio::spawn(logs::pump(s, "stderr", log.clone(), output.clone())));
            let status = child.wait().await;
            // Every process of the container is gone: the master now reads EIO at the end.
            drop(slave);
            for pump in [out, err].into_iter().flatten() {
                let _ = tokio::time::timeout(Duration::from_secs(2), pump).await;
            }
            let finished = Timestamp::now();
            let code = match status {
                Ok(s) => s
                    .code()
                    .or_else(|| s.signal().map(|sig| 128 + sig))
                    .unwrap_or(-1),
                Err(_) => -1,
            };
            let mut message = tokio::fs::read(&term).await.ok().map(|mut m| {
                m.truncate(MAX_MESSAGE);
                String::from_utf8_lossy(&m).into_owned()
            });
            if message.as_deref().is_none_or(str::is_empty) && fallback && code != 0 {
                message = Some(log_tail(&log_path).await);
            }
            let _ = done_tx.send(true);
            let _ = tx.send(Report::Exit(ExitReport {
                index: i,
                id: id_owned,
                code,
                reason: if code == 0 { "Completed" } else { "Error" },
                message,
                finished,
            }));
        });
        let target = probe::Target {
            init_pid: init_pid.clone(),
            identity: probe_identity,
            container: spec_c.clone(),
        };
        // Every probe and hook result of this instance, to the pod's reports.
        let (ptx, mut prx) = mpsc::unbounded_channel();
        {
            let tx = self.exits_tx.clone();
            let id = id.to_owned();
            tokio::spawn(async move {
                while let Some(outcome) = prx.recv().await {
                    let report = Report::Probe {
                        index: i,
                        id: id.clone(),
                        outcome,
                    };
                    if tx.send(report).is_err() {
                        return;
                    }
                }
            });
        }
        let hooks = spec_c.lifecycle.clone().unwrap_or_default();
        let pod_grace = spec.termination_grace_period_seconds.unwrap_or(30);
        let grace_of = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
            let s = p
                .and_then(|p| p.termination_grace_period_seconds)
                .unwrap_or(pod_grace);
            Duration::from_secs(s.max(0).unsigned_abs()).min(self.opts.max_grace)
        };
        let probe_grace = (
            grace_of(spec_c.liveness_probe.as_ref()),
            grace_of(spec_c.startup_probe.as_ref()),
            grace_of(None),
        );
        let gated = spec_c.startup_probe.is_some() || hooks.post_start.is_some();
        let (started_tx, started_rx) = watch::channel(!gated);
        if gated {
            tokio::spawn(lifecycle::start(
                hooks.post_start.clone(),
                spec_c.startup_probe.clone(),
                target.clone(),
                started_tx,
                probe_done.clone(),
                ptx.clone(),
            ));
        }
        let probes = [
            (probe::Kind::Readiness, spec_c.readiness_probe.clone()),
            (probe::Kind::Liveness, spec_c.liveness_probe.clone()),
        ];
        for (kind, spec) in probes {
            let Some(spec) = spec else { continue };
            tokio::spawn(probe::run(
                kind,
                spec,
                target.clone(),
                started_rx.clone(),
                probe_done.clone(),
                ptx.clone(),
            ));
        }
        self.procs.push(Proc {
            index: i,
            id: id.to_owned(),
            unshare_pid,
            init_pid,
            killed: false,
            target,
            pre_stop: hooks.pre_stop,
            probe_grace,
            done: probe_done,
        });
        let image = sim.containers[i].image.clone();
        sim.event(
            i,
            "Normal",
            "Pulled",
            format!("Container image \"{image}\" not pulled: Capstan's process runtime runs the container's command on the host"),
        );
        sim.event(i, "Normal", "Created", format!("Created container: {name}"));
        sim.event(i, "Normal", "Started", format!("Started container {name}"));
        let limited = spec_c
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|l| !l.is_empty());
        if limited && !cgroup_v2_available() {
            sim.event(
                i,
                "Warning",
                "ResourceLimitsNotEnforced",
                format!("Container {name} has resources.limits, but cgroup v2 is not available on node {} (no /sys/fs/cgroup/cgroup.controllers): the limits are not enforced", self.sim_node.name),
            );
        }
        tracing::debug!(pod = %self.name, container = %name, ?kind, pid = ?unshare_pid, "container process started");
        Ok(())
    }
}

/// Whether the host mounts the cgroup v2 unified hierarchy, which resource limits need.
/// Where attach's stdin goes: the command's stdin pipe, or its terminal's master.
type StdinSink = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

fn cgroup_v2_available() -> bool {
    std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// Why a container did not start: its configuration (retried, `CreateContainerConfigError`)
/// or the start itself (a `StartError` exit).
enum StartError {
    Config(String),
    Start(String),
}

fn has_token_volume(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .any(|s| s.service_account_token.is_some())
}

/// Rotates the pod's projected service-account tokens at 80% of their lifetime (the
/// kubelet's rule), retrying every 10 s after a failure, until aborted.
async fn rotate_tokens(
    api: FleetApi,
    node: Arc<SimNode>,
    pod: Arc<Pod>,
    dir: PathBuf,
    owner: (u32, u32),
) {
    let lifetime = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(3600)).mul_f64(0.8);
    let mut wait = lifetime(3600);
    if let Some(s) = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| t.expiration_seconds.unwrap_or(3600))
        .min()
    {
        wait = lifetime(s);
    }
    loop {
        tokio::time::sleep(wait).await;
        let ip = node.ip.to_string();
        let writer = Writer {
            api: &api,
            node: &node.name,
            dir: dir.clone(),
            owner,
            pod_ip: &ip,
            host_ip: &ip,
        };
        wait = match writer.refresh_tokens(&pod).await {
            Ok(Some(s)) => lifetime(s),
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(pod = ?pod.metadata.name, error = %e, "service-account token not rotated, will retry");
                Duration::from_secs(10)
            }
        };
    }
}

/// Whether `argv0` names an executable of the host root (the container's root), looked up
/// in `path` when it has no slash, as `execvp`. Relative paths with a slash are left to
/// the process.
fn executable_exists(argv0: &str, path: &str) -> bool {
    let is_exec = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if argv0.starts_with('/') {
        return is_exec(std::path::Path::new(argv0));
    }
    if argv0.contains('/') {
        return true;
    }
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .any(|d| is_exec(&std::path::Path::new(d).join(argv0)))
}

fn clamp_id(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(DEFAULT_UID)
}

/// User, group and supplemental groups of a container: its securityContext over the pod's;
/// the default user is unprivileged.
fn identity(pod: Option<&PodSecurityContext>, c: Option<&SecurityContext>) -> (u32, u32, Vec<u32>) {
    let uid = c
        .and_then(|s| s.run_as_user)
        .or_else(|| pod.and_then(|s| s.run_as_user))
        .map_or(DEFAULT_UID, clamp_id);
    let gid = c
        .and_then(|s| s.run_as_group)
        .or_else(|| pod.and_then(|s| s.run_as_group))
        .map_or(if uid == DEFAULT_UID { DEFAULT_UID } else { 0 }, clamp_id);
    let mut groups: Vec<u32> = pod
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .map(clamp_id)
        .collect();
    if let Some(fs) = pod.and_then(|s| s.fs_group) {
        groups.push(clamp_id(fs));
    }
    groups.sort_unstable();
    groups.dedup();
    (uid, gid, groups)
}

fn find_container(pod: &Pod, name: &str, kind: Kind) -> Option<Container> {
    let spec = pod.spec.as_ref()?;
    let list = match kind {
        Kind::Regular => &spec.containers,
        Kind::Init | Kind::Sidecar => spec.init_containers.as_ref()?,
    };
    list.iter().find(|c| c.name == name).cloned()
}

/// The end of a log as a termination message (`FallbackToLogsOnError`: 80 lines, 2048 bytes).
async fn log_tail(path: &std::path::Path) -> String {
    let (tx, mut rx) = mpsc::channel(16);
    let opts = logs::ReadOptions {
        tail_lines: Some(80),
        ..Default::default()
    };
    tokio::spawn(logs::stream(path.to_path_buf(), opts, None, tx));
    let mut out = Vec::new();
    while let Some(b) = rx.recv().await {
        out.extend_from_slice(&b);
    }
    let start = out.len().saturating_sub(2048);
    String::from_utf8_lossy(&out[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_looked_up_in_path_as_execvp_does() {
        assert!(executable_exists("sh", "/usr/bin:/bin"));
        assert!(executable_exists("/bin/sh", ""));
        assert!(!executable_exists("no-such-command-here", "/usr/bin:/bin"));
        assert!(!executable_exists("/proc/version", ""));
    }

    #[test]
    fn containers_run_unprivileged_unless_the_pod_says_otherwise() {
        assert_eq!(identity(None, None), (DEFAULT_UID, DEFAULT_UID, vec![]));
        let pod = PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            ..Default::default()
        };
        assert_eq!(identity(Some(&pod), None), (1000, 0, vec![2000]));
        let c = SecurityContext {
            run_as_user: Some(0),
            run_as_group: Some(5),
            ..Default::default()
        };
        assert_eq!(identity(Some(&pod), Some(&c)), (0, 5, vec![2000]));
    }
}
