//! The kubelet's part for one pod bound to a simulated node: a small state machine per pod
//! (init containers in order, then the regular ones; exits, restarts with the kubelet's
//! back-off, readiness after the probe's `initialDelaySeconds`, graceful kill on delete) and
//! the pod status it reports, shaped as `pkg/kubelet/status` (`generate.go`) and the
//! kubelet's `getPhase` build it. Status goes out as a strategic merge patch of
//! `pods/<name>/status` carrying `metadata.uid`, as the kubelet's status manager sends.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::api::{Call, FleetApi, Lane, STRATEGIC, status_code};
use crate::node::{SimNode, hex_id, time};
use crate::program::{DURATION_ANNOTATION, Program};

mod process;
mod status;

/// Exit code of a container stopped by the kill on pod deletion (SIGTERM).
const KILLED_EXIT_CODE: i32 = 143;
/// The kubelet's container restart back-off: 10 s doubling to 5 min.
const BACKOFF_START: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What a pod task is told: the pod's latest state, or `None` once it is gone.
pub(crate) type PodUpdates = watch::Receiver<Option<Arc<Pod>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An init container (runs to completion, in order).
    Init,
    /// A restartable init container (a sidecar: starts in order, keeps running).
    Sidecar,
    /// A regular container.
    Regular,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

#[derive(Debug, Clone, PartialEq)]
struct Exit {
    code: i32,
    reason: &'static str,
    started: Timestamp,
    finished: Timestamp,
    id: String,
    /// The termination message (process runtime).
    message: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Not running; `until`: when it (re)starts (`None`: as soon as its turn comes).
    Waiting {
        reason: &'static str,
        until: Option<Timestamp>,
    },
    Running {
        since: Timestamp,
        id: String,
    },
    Terminated(Exit),
}

#[derive(Debug)]
struct Ctr {
    name: String,
    image: String,
    kind: Kind,
    program: Program,
    /// Readiness probe's `initialDelaySeconds` (`None`: no readiness probe).
    ready_after: Option<Duration>,
    /// Startup probe's `initialDelaySeconds` (`None`: started at once).
    started_after: Option<Duration>,
    state: State,
    last: Option<Exit>,
    restarts: i32,
    /// The process runtime's readiness probe result for an instance (its ID, ready).
    probed: Option<(String, bool)>,
    /// Readiness comes from a real probe (process runtime) rather than its delay.
    real_probes: bool,
    /// The process runtime decides when it is started (a postStart hook or a startup probe).
    gated: bool,
    /// The instance whose postStart hook and startup probe succeeded (process runtime).
    opened: Option<String>,
}

impl Ctr {
    fn new(c: &Container, kind: Kind, duration: Option<&str>, process: bool) -> Self {
        let delay = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
            p.map(|p| {
                Duration::from_secs(
                    p.initial_delay_seconds
                        .unwrap_or(0)
                        .max(0)
                        .unsigned_abs()
                        .into(),
                )
            })
        };
        Ctr {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            kind,
            // Real processes end when they end.
            program: if process {
                Program::FOREVER
            } else {
                Program::of(
                    c.command.as_deref().unwrap_or_default(),
                    c.args.as_deref().unwrap_or_default(),
                    duration,
                )
            },
            ready_after: delay(c.readiness_probe.as_ref()),
            started_after: delay(c.startup_probe.as_ref()),
            state: State::Waiting {
                reason: "PodInitializing",
                until: None,
            },
            last: None,
            restarts: 0,
            probed: None,
            real_probes: process,
            gated: process
                && (c.startup_probe.is_some()
                    || c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some())),
            opened: None,
        }
    }

    fn started(&self, now: Timestamp) -> bool {
        match &self.state {
            State::Running { id, .. } if self.gated => self.opened.as_ref() == Some(id),
            State::Running { since, .. } => *since + self.started_after.unwrap_or_default() <= now,
            _ => false,
        }
    }

    fn ready(&self, now: Timestamp) -> bool {
        match &self.state {
            State::Running { id, .. } if self.real_probes => {
                self.started(now)
                    && (self.ready_after.is_none()
                        || self
                            .probed
                            .as_ref()
                            .is_some_and(|(probed, ok)| probed == id && *ok))
            }
            State::Running { since, .. } => {
                let after = self
                    .ready_after
                    .unwrap_or_default()
                    .max(self.started_after.unwrap_or_default());
                *since + after <= now
            }
            _ => false,
        }
    }

    /// The next instant readiness or startup changes, if any.
    fn probe_wake(&self, now: Timestamp) -> Option<Timestamp> {
        let State::Running { since, .. } = &self.state else {
            return None;
        };
        [self.ready_after, self.started_after]
            .into_iter()
            .flatten()
            .map(|d| *since + d)
            .filter(|t| *t > now)
            .min()
    }
}

/// One pod's simulation.
struct Sim {
    uid: String,
    namespace: String,
    name: String,
    policy: RestartPolicy,
    host_network: bool,
    containers: Vec<Ctr>,
    start_time: Timestamp,
    pod_ip: Option<Ipv4Addr>,
    /// Whether `pod_ip` is ours to give back.
    ip_held: bool,
    phase: &'static str,
    kill_at: Option<Timestamp>,
    killed: bool,
    delete_sent: bool,
    /// Conditions as last reported: type → (status, lastTransitionTime).
    conditions: HashMap<&'static str, (&'static str, Value)>,
    /// Events not posted yet.
    events: Vec<PodEvent>,
    /// Containers are real processes (the process runtime) rather than timers.
    process: bool,
    /// Whether containers may start (the process runtime prepares the sandbox first).
    sandbox_ready: bool,
    /// The resources each running container was last given (what its status reports).
    actuated: HashMap<String, Value>,
    /// A resize was actuated in the sync just reported (`PodResizeInProgress` is True until
    /// the next one sees the container at its new size).
    resizing: bool,
}

/// An event the kubelet would record about one of the pod's containers.
#[derive(Debug)]
struct PodEvent {
    field_path: String,
    kind: &'static str,
    reason: &'static str,
    message: String,
}

fn restart_policy(pod: &Pod) -> RestartPolicy {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => RestartPolicy::Never,
        Some("OnFailure") => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    }
}

fn ts(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

impl Sim {
    /// Starts simulating `pod` on `node`: adopts what an earlier run reported (start time,
    /// IP, container states) so a restarted fleet carries on, else starts it now.
    fn new(pod: &Pod, node: &SimNode, now: Timestamp) -> Self {
        let process = node.process.get().is_some();
        let spec = pod.spec.clone().unwrap_or_default();
        let duration = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DURATION_ANNOTATION))
            .map(String::as_str);
        let mut containers: Vec<Ctr> = Vec::new();
        for c in spec.init_containers.as_deref().unwrap_or_default() {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                Kind::Sidecar
            } else {
                Kind::Init
            };
            containers.push(Ctr::new(c, kind, duration, process));
        }
        for c in &spec.containers {
            containers.push(Ctr::new(c, Kind::Regular, duration, process));
        }
        let status = pod.status.clone().unwrap_or_default();
        let host_network = spec.host_network.unwrap_or(false);
        let mut sim = Sim {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            policy: restart_policy(pod),
            host_network,
            containers,
            start_time: ts(status.start_time.as_ref()).unwrap_or(now),
            pod_ip: None,
            ip_held: false,
            phase: "Pending",
            kill_at: None,
            killed: false,
            delete_sent: false,
            conditions: HashMap::new(),
            events: Vec::new(),
            process,
            sandbox_ready: !process,
            actuated: HashMap::new(),
            resizing: false,
        };
        for c in status.conditions.as_deref().unwrap_or_default() {
            if let (Some(kind), Some(st)) = (condition_type(&c.type_), static_status(&c.status)) {
                let since = c
                    .last_transition_time
                    .as_ref()
                    .map_or(Value::Null, |t| time(t.0));
                sim.conditions.insert(kind, (st, since));
            }
        }
        let terminal = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
        if terminal {
            sim.phase = if status.phase.as_deref() == Some("Succeeded") {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        // Adopt container states reported before (by us, before a restart).
        let reported = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for cs in reported {
            let Some(c) = sim.containers.iter_mut().find(|c| c.name == cs.name) else {
                continue;
            };
            let id = cs.container_id.clone().unwrap_or_default();
            c.restarts = cs.restart_count;
            let exit = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| Exit {
                code: t.exit_code,
                reason: if t.exit_code == 0 {
                    "Completed"
                } else {
                    "Error"
                },
                started: ts(t.started_at.as_ref()).unwrap_or(now),
                finished: ts(t.finished_at.as_ref()).unwrap_or(now),
                id: t.container_id.clone().unwrap_or_else(|| id.clone()),
                message: t.message.clone(),
            };
            c.last = cs
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .map(exit);
            if let Some(state) = &cs.state {
                if let (Some(r), true) = (&state.running, process) {
                    // Its process did not outlive the node that ran it (as containers
                    // the kubelet cannot find after a restart).
                    let lost = Exit {
                        code: 137,
                        reason: "ContainerStatusUnknown",
                        started: ts(r.started_at.as_ref()).unwrap_or(now),
                        finished: now,
                        id: id.clone(),
                        message: Some(
                            "The container could not be located when the node restarted".into(),
                        ),
                    };
                    c.restarts += 1;
                    c.last = Some(lost);
                    c.state = State::Waiting {
                        reason: "ContainerCreating",
                        until: None,
                    };
                } else if let Some(r) = &state.running {
                    c.state = State::Running {
                        since: ts(r.started_at.as_ref()).unwrap_or(now),
                        id: id.clone(),
                    };
                } else if let Some(t) = &state.terminated {
                    c.state = State::Terminated(exit(t));
                } else if c.last.is_some() {
                    c.state = State::Waiting {
                        reason: "CrashLoopBackOff",
                        until: Some(now),
                    };
                }
            }
        }
        if host_network || process {
            // Process pods share the host's network.
            sim.pod_ip = Some(node.ip);
        } else if let Some(ip) = status
            .pod_ip
            .as_deref()
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| node.pod_cidr.contains(*ip))
        {
            sim.pod_ip = Some(ip);
            if !terminal {
                sim.ip_held = lock(node).adopt(ip);
            }
        } else if !terminal {
            sim.pod_ip = lock(node).allocate();
            sim.ip_held = sim.pod_ip.is_some();
            if sim.pod_ip.is_none() {
                tracing::warn!(node = %node.name, pod = %sim.name, "pod CIDR exhausted");
            }
        }
        sim
    }

    fn terminal(&self) -> bool {
        matches!(self.phase, "Succeeded" | "Failed")
    }

    /// Notes a deletion request: containers are killed after the grace period, capped.
    fn observe_deletion(&mut self, pod: &Pod, now: Timestamp, max_grace: Duration) {
        if pod.metadata.deletion_timestamp.is_none() || self.kill_at.is_some() {
            return;
        }
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0)
            .unsigned_abs();
        let wait = Duration::from_secs(grace).min(max_grace);
        let nothing_runs = self.terminal()
            || !self
                .containers
                .iter()
                .any(|c| matches!(c.state, State::Running { .. }));
        self.kill_at = Some(if nothing_runs { now } else { now + wait });
        for i in 0..self.containers.len() {
            if matches!(self.containers[i].state, State::Running { .. }) {
                let message = format!("Stopping container {}", self.containers[i].name);
                self.event(i, "Normal", "Killing", message);
            }
        }
    }

    /// Moves the simulation to `now`; returns when it next changes by itself.
    fn advance(&mut self, now: Timestamp) -> Option<Timestamp> {
        if self.killed || self.terminal() {
            return None;
        }
        let mut wake: Option<Timestamp> = None;
        if let Some(kill_at) = self.kill_at {
            if kill_at <= now {
                self.kill(now);
                return None;
            }
            wake = Some(kill_at);
        }
        let mut initialized = true;
        for i in 0..self.containers.len() {
            match self.containers[i].kind {
                Kind::Regular => continue,
                Kind::Sidecar => {
                    self.step(i, now, &mut wake);
                    // The next init container waits for the sidecar to be started.
                    if !self.containers[i].started(now) {
                        initialized = false;
                        break;
                    }
                }
                Kind::Init => {
                    if matches!(&self.containers[i].state, State::Terminated(e) if e.code == 0) {
                        continue;
                    }
                    self.step(i, now, &mut wake);
                    if matches!(&self.containers[i].state, State::Terminated(e) if e.code == 0) {
                        continue;
                    }
                    initialized = false;
                    break;
                }
            }
        }
        if initialized {
            for i in 0..self.containers.len() {
                if self.containers[i].kind == Kind::Regular {
                    self.step(i, now, &mut wake);
                }
            }
        }
        self.phase = self.compute_phase(initialized);
        if self.terminal() {
            // Sidecars are stopped once the pod's work is done.
            for c in &mut self.containers {
                if let (Kind::Sidecar, State::Running { since, id }) = (c.kind, &c.state) {
                    c.state = State::Terminated(Exit {
                        code: 0,
                        reason: "Completed",
                        started: *since,
                        finished: now,
                        id: id.clone(),
                        message: None,
                    });
                }
            }
            return None;
        }
        for c in &self.containers {
            if let Some(t) = c.probe_wake(now) {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        }
        wake
    }

    /// Advances container `i`: starts it, ends it when its program ends, restarts it as
    /// the restart policy says (with the kubelet's back-off).
    fn step(&mut self, i: usize, now: Timestamp, wake: &mut Option<Timestamp>) {
        // The process runtime records these once the process has really started.
        if self.step_inner(i, now, wake) && !self.process {
            let c = &self.containers[i];
            let image = c.image.clone();
            let name = c.name.clone();
            self.event(
                i,
                "Normal",
                "Pulled",
                format!("Container image \"{image}\" already present on machine"),
            );
            self.event(i, "Normal", "Created", format!("Created container: {name}"));
            self.event(i, "Normal", "Started", format!("Started container {name}"));
        }
    }

    /// Queues an event about container `i` for the run loop to post.
    fn event(&mut self, i: usize, kind: &'static str, reason: &'static str, message: String) {
        let c = &self.containers[i];
        let field = if c.kind == Kind::Regular {
            "containers"
        } else {
            "initContainers"
        };
        self.events.push(PodEvent {
            field_path: format!("spec.{field}{{{}}}", c.name),
            kind,
            reason,
            message,
        });
    }

    /// `step`'s work; true if the container (re)started.
    fn step_inner(&mut self, i: usize, now: Timestamp, wake: &mut Option<Timestamp>) -> bool {
        let mut started = false;
        let mut soonest = |t: Timestamp| *wake = Some(wake.map_or(t, |w| w.min(t)));
        let policy = self.policy;
        let uid = self.uid.clone();
        // Nothing (re)starts once the pod is being deleted, nor before its sandbox is ready.
        let may_start = self.kill_at.is_none() && self.sandbox_ready;
        let process = self.process;
        let c = &mut self.containers[i];
        // Bounded: each restart after the first waits at least 10 s of simulated time.
        for _ in 0..10_000 {
            match &c.state {
                State::Waiting { until: Some(u), .. } if *u > now => {
                    soonest(*u);
                    return started;
                }
                State::Waiting { .. } if !may_start => return started,
                State::Waiting { until, .. } => {
                    let since = if process { now } else { until.unwrap_or(now) };
                    let id = format!(
                        "capstan://{}",
                        hex_id(&uid, &format!("{}#{}", c.name, c.restarts), 64)
                    );
                    c.state = State::Running { since, id };
                    started = true;
                }
                State::Running { since, id } => {
                    let Some(run_for) = c.program.run_for else {
                        return started;
                    };
                    let end = *since + run_for;
                    if end > now {
                        soonest(end);
                        return started;
                    }
                    let code = c.program.exit_code;
                    let exit = Exit {
                        code,
                        reason: if code == 0 { "Completed" } else { "Error" },
                        started: *since,
                        finished: end,
                        id: id.clone(),
                        message: None,
                    };
                    if !finish(c, policy, exit, true) {
                        return started;
                    }
                }
                State::Terminated(_) => return started,
            }
        }
        started
    }

    /// The kubelet's kill on deletion: every running container stops.
    fn kill(&mut self, now: Timestamp) {
        for c in &mut self.containers {
            if let State::Running { since, id } = &c.state {
                c.state = State::Terminated(Exit {
                    code: KILLED_EXIT_CODE,
                    reason: "Error",
                    started: *since,
                    finished: now,
                    id: id.clone(),
                    message: None,
                });
            }
        }
        self.killed = true;
        if !self.terminal() {
            let all_ok = self
                .containers
                .iter()
                .filter(|c| c.kind == Kind::Regular)
                .all(|c| matches!(&c.state, State::Terminated(e) if e.code == 0));
            self.phase = if all_ok { "Succeeded" } else { "Failed" };
        }
    }

    /// The kubelet's `getPhase`.
    fn compute_phase(&self, initialized: bool) -> &'static str {
        let init_failed = self.containers.iter().any(|c| {
            c.kind == Kind::Init && matches!(&c.state, State::Terminated(e) if e.code != 0)
        });
        if init_failed && self.policy == RestartPolicy::Never {
            return "Failed";
        }
        if !initialized {
            return "Pending";
        }
        let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
        for c in self.containers.iter().filter(|c| c.kind == Kind::Regular) {
            match &c.state {
                State::Running { .. } => running += 1,
                State::Terminated(e) => {
                    stopped += 1;
                    if e.code == 0 {
                        succeeded += 1;
                    }
                }
                State::Waiting { .. } if c.last.is_some() => stopped += 1,
                State::Waiting { .. } => waiting += 1,
            }
        }
        if waiting > 0 {
            "Pending"
        } else if running > 0 {
            "Running"
        } else if stopped > 0 {
            match self.policy {
                RestartPolicy::Always => "Running",
                _ if stopped == succeeded => "Succeeded",
                RestartPolicy::OnFailure => "Running",
                RestartPolicy::Never => "Failed",
            }
        } else {
            "Pending"
        }
    }
}

fn lock(node: &SimNode) -> std::sync::MutexGuard<'_, crate::cidr::PodIps> {
    node.pod_ips
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ends container `c`'s run with `exit`; restarts it (after the back-off) as the restart
/// policy says unless `may_restart` is false. Returns whether it will run again.
fn finish(c: &mut Ctr, policy: RestartPolicy, exit: Exit, may_restart: bool) -> bool {
    let restart = may_restart
        && match (c.kind, policy) {
            (Kind::Sidecar, _) => true,
            (_, RestartPolicy::Never) => false,
            (Kind::Init, _) | (Kind::Regular, RestartPolicy::OnFailure) => exit.code != 0,
            (Kind::Regular, RestartPolicy::Always) => true,
        };
    if restart {
        let delay = backoff(c.restarts);
        let end = exit.finished;
        c.restarts += 1;
        c.last = Some(exit);
        c.state = State::Waiting {
            reason: "CrashLoopBackOff",
            until: Some(end + delay),
        };
        true
    } else {
        c.state = State::Terminated(exit);
        false
    }
}

/// The kubelet's crash-loop back-off before restart number `restarts + 1`: the first
/// restart is immediate, then 10 s doubling to 5 min.
fn backoff(restarts: i32) -> SignedDuration {
    let d = if restarts <= 0 {
        Duration::ZERO
    } else {
        let shift = u32::try_from(restarts - 1).unwrap_or(u32::MAX).min(8);
        (BACKOFF_START * (1u32 << shift)).min(BACKOFF_MAX)
    };
    SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO)
}

fn condition_type(t: &str) -> Option<&'static str> {
    [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .into_iter()
    .find(|k| *k == t)
}

fn static_status(s: &str) -> Option<&'static str> {
    ["True", "False", "Unknown"].into_iter().find(|k| *k == s)
}

/// Runs one pod until it is gone (or `shutdown`): reports its status as it moves, and on
/// deletion kills it after the (capped) grace period and deletes it for good.
pub(crate) async fn run(
    api: FleetApi,
    node: Arc<SimNode>,
    opts: Arc<Options>,
    mut updates: PodUpdates,
    shutdown: CancellationToken,
) {
    let Some(first) = updates.borrow_and_update().clone() else {
        return;
    };
    let mut sim = Sim::new(&first, &node, Timestamp::now());
    let mut driver = node.process.get().map(|pn| {
        process::Driver::new(pn.clone(), node.clone(), api.clone(), opts.clone(), &first)
    });
    let mut gone = false;
    // A digest of the status last written (cheaper to keep than the document).
    let mut reported: Option<u64> = None;
    // When the API's diverging copy last made us write our status again.
    let mut forced: Option<std::time::Instant> = None;
    let path = format!("/api/v1/namespaces/{}/pods/{}", sim.namespace, sim.name);
    loop {
        let Some(pod) = updates.borrow_and_update().clone() else {
            gone = true;
            break;
        };
        let now = Timestamp::now();
        sim.observe_deletion(&pod, now, opts.max_grace);
        let mut retry = None;
        if let Some(d) = driver.as_mut() {
            retry = d.before(&mut sim, &pod, now).await;
        }
        let now = Timestamp::now();
        let mut wake = sim.advance(now);
        if let Some(d) = driver.as_mut() {
            let again = d.after(&mut sim, &pod, now).await;
            for t in [retry, again].into_iter().flatten() {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        }
        if sim.terminal() && sim.ip_held && !sim.host_network {
            if let Some(ip) = sim.pod_ip {
                lock(&node).release(ip);
            }
            sim.ip_held = false;
        }
        let mut status = sim.status(&pod, node.ip, now);
        let mut failed = false;
        let digest = {
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&status.to_string(), &mut h);
            std::hash::Hasher::finish(&h)
        };
        status::clear_finished_resize(&sim, &pod, &mut status);
        if sim.resizing {
            // The next sync finds the containers at their new size (the kubelet asks the
            // runtime again while a resize is in progress).
            let next = now + RESIZE_RECHECK;
            wake = Some(wake.map_or(next, |w| w.min(next)));
        }
        // As the kubelet's status manager, write our view again when the API's copy
        // disagrees (say the node lifecycle controller marked the pod not ready while this
        // node's heartbeats were late) — at most once per resync period, so a writer that
        // keeps changing it cannot make us loop.
        let mut resync_at = None;
        if reported == Some(digest) && diverged(&pod, &status) {
            match forced {
                Some(at) if at.elapsed() < STATUS_RESYNC => resync_at = Some(at + STATUS_RESYNC),
                _ => {
                    reported = None;
                    forced = Some(std::time::Instant::now());
                }
            }
        }
        if reported != Some(digest) {
            let patch = json!({"metadata": {"uid": sim.uid}, "status": status});
            match api
                .send::<IgnoredAny>(
                    Some(&node.name),
                    &Call::patch(format!("{path}/status"), &patch, STRATEGIC),
                )
                .await
            {
                Ok(_) => reported = Some(digest),
                Err(e) if status_code(&e) == Some(404) || status_code(&e) == Some(409) => {
                    // Gone, or replaced by another pod of the same name.
                    tracing::debug!(pod = %sim.name, error = %e, "pod status not written");
                }
                Err(e) => {
                    tracing::warn!(node = %node.name, pod = %format!("{}/{}", sim.namespace, sim.name), error = %e, "failed to update pod status");
                    failed = true;
                }
            }
        }
        let events = std::mem::take(&mut sim.events);
        if opts.pod_events && !events.is_empty() {
            tokio::spawn(post_events(
                api.clone(),
                node.name.clone(),
                pod.clone(),
                events,
            ));
        }
        if sim.killed && !sim.delete_sent && !failed {
            let options = json!({
                "apiVersion": "v1", "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": sim.uid},
            });
            match api
                .send::<IgnoredAny>(Some(&node.name), &Call::delete(path.clone(), &options))
                .await
            {
                Ok(_) => sim.delete_sent = true,
                Err(e) if matches!(status_code(&e), Some(404 | 409)) => sim.delete_sent = true,
                Err(e) => {
                    tracing::warn!(node = %node.name, pod = %sim.name, error = %e, "failed to delete pod");
                    failed = true;
                }
            }
        }
        if failed {
            let retry = now + Duration::from_secs(1);
            wake = Some(wake.map_or(retry, |w| w.min(retry)));
        }
        let sleep = wake
            .map(|w| {
                let d = now.duration_until(w).unsigned_abs();
                tokio::time::Instant::now() + d
            })
            .into_iter()
            .chain(resync_at.map(tokio::time::Instant::from_std))
            .min();
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = updates.changed() => if changed.is_err() { gone = true; break },
            Some(exit) = async {
                match driver.as_mut() {
                    Some(d) => d.next_report().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some(d) = driver.as_mut() {
                    d.handle(&mut sim, exit).await;
                }
            }
            () = async {
                match sleep {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
    if let Some(d) = driver {
        d.stop(&mut sim, gone).await;
    }
    if sim.ip_held
        && !sim.host_network
        && let Some(ip) = sim.pod_ip
    {
        lock(&node).release(ip);
    }
}

/// How soon after actuating a resize the node looks at the containers again.
const RESIZE_RECHECK: Duration = Duration::from_millis(500);

/// How often the API's diverging copy of a pod's status may make us write ours again (the
/// kubelet status manager's sync period).
const STATUS_RESYNC: Duration = Duration::from_secs(10);

/// Whether the API's copy of `pod` disagrees with `status` (what this kubelet reports) on
/// the phase or on a condition it owns.
fn diverged(pod: &Pod, status: &Value) -> bool {
    let Some(api) = pod.status.as_ref() else {
        return true;
    };
    if status.get("phase").and_then(Value::as_str) != api.phase.as_deref() {
        return true;
    }
    let ours = status.get("conditions").and_then(Value::as_array);
    ours.into_iter().flatten().any(|c| {
        let (Some(t), Some(st)) = (c["type"].as_str(), c["status"].as_str()) else {
            return false;
        };
        let theirs = api
            .conditions
            .iter()
            .flatten()
            .find(|x| x.type_ == t)
            .map(|x| x.status.as_str());
        theirs != Some(st)
    })
}

/// Posts core/v1 Events as the kubelet's recorder does (source `kubelet` on `node`).
async fn post_events(api: FleetApi, node: String, pod: Arc<Pod>, events: Vec<PodEvent>) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let path = format!("/api/v1/namespaces/{namespace}/events");
    for e in events {
        let now = Timestamp::now();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{name}.{:x}", now.as_nanosecond()),
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": pod.metadata.uid,
                "resourceVersion": pod.metadata.resource_version,
                "fieldPath": e.field_path,
            },
            "reason": e.reason,
            "message": e.message,
            "type": e.kind,
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": time(now),
            "lastTimestamp": time(now),
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": node,
        });
        if let Err(e) = api
            .send_in::<IgnoredAny>(Lane::Events, Some(&node), &Call::post(path.clone(), &event))
            .await
        {
            tracing::debug!(node = %node, pod = %name, error = %e, "event not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_marked_not_ready_by_someone_else_diverges_from_our_status() {
        let ours = json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]});
        let same = pod(json!({"metadata": {"name": "p"}, "status": &ours}));
        assert!(!diverged(&same, &ours));
        let marked = pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"},
                           {"type": "ContainersReady", "status": "True"}]}}),
        );
        assert!(diverged(&marked, &ours));
        let no_status = pod(json!({"metadata": {"name": "p"}}));
        assert!(diverged(&no_status, &ours));
    }

    fn pod(json: Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    fn node() -> SimNode {
        SimNode::new(
            "n0".into(),
            "zone-a".into(),
            crate::cidr::Cidr::parse("10.128.0.0/24").unwrap(),
            Ipv4Addr::new(172, 16, 0, 1),
        )
    }

    fn at(base: Timestamp, secs: i64) -> Timestamp {
        base + SignedDuration::from_secs(secs)
    }

    #[test]
    fn a_resize_is_in_progress_for_one_sync_then_reported_done() {
        let sized = |cpu: &str| {
            pod(
                json!({"metadata": {"name": "r", "namespace": "default", "uid": "u2"},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu, "ephemeral-storage": "1Gi"}}}]}}),
            )
        };
        let n = node();
        let t0 = Timestamp::now();
        let before = sized("100m");
        let mut sim = Sim::new(&before, &n, t0);
        sim.advance(t0);
        let s = sim.status(&before, n.ip, t0);
        let cpu = |s: &Value| s["containerStatuses"][0]["resources"]["requests"]["cpu"].clone();
        let in_progress = |s: &Value| {
            s["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "PodResizeInProgress"))
        };
        assert_eq!(cpu(&s), "100m");
        assert_eq!(
            s["containerStatuses"][0]["resources"]["requests"]["ephemeral-storage"],
            "1Gi"
        );
        assert!(!in_progress(&s) && !sim.resizing);
        // The spec asks for more: this sync actuates it and says so.
        let after = sized("200m");
        let s = sim.status(&after, n.ip, at(t0, 1));
        assert_eq!(cpu(&s), "100m");
        assert!(in_progress(&s) && sim.resizing);
        // The next one finds the container at its new size; the API's condition is deleted.
        let mut held = after.clone();
        held.status = Some(
            serde_json::from_value(
                json!({"conditions": [{"type": "PodResizeInProgress", "status": "True"}]}),
            )
            .unwrap(),
        );
        let mut s = sim.status(&held, n.ip, at(t0, 2));
        assert_eq!(cpu(&s), "200m");
        assert!(!sim.resizing);
        status::clear_finished_resize(&sim, &held, &mut s);
        let last = s["conditions"].as_array().and_then(|c| c.last()).cloned();
        assert_eq!(
            last,
            Some(json!({"type": "PodResizeInProgress", "$patch": "delete"}))
        );
    }

    #[test]
    fn a_sleep_pod_with_restart_never_runs_then_succeeds() {
        let p = pod(
            json!({"metadata": {"name": "s", "namespace": "default", "uid": "u1"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "2"]}]}}),
        );
        let n = node();
        let t0 = Timestamp::now();
        let mut sim = Sim::new(&p, &n, t0);
        assert_eq!(sim.advance(t0), Some(at(t0, 2)));
        assert_eq!(sim.phase, "Running");
        assert_eq!(sim.pod_ip, Some(Ipv4Addr::new(10, 128, 0, 2)));
        let s = sim.status(&p, n.ip, t0);
        assert_eq!(s["conditions"][2]["type"], "Ready");
        assert_eq!(s["conditions"][2]["status"], "True");
        assert_eq!(sim.advance(at(t0, 2)), None);
        assert_eq!(sim.phase, "Succeeded");
        let s = sim.status(&p, n.ip, at(t0, 2));
        assert_eq!(
            s["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(s["conditions"][2]["reason"], "PodCompleted");
    }

    #[test]
    fn an_exit_code_fails_a_never_pod_and_restarts_an_always_pod_with_backoff() {
        let spec = |policy: &str| {
            pod(
                json!({"metadata": {"name": "f", "namespace": "default", "uid": "u2"},
            "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]}}),
            )
        };
        let n = node();
        let t0 = Timestamp::now();
        let mut never = Sim::new(&spec("Never"), &n, t0);
        never.advance(t0);
        assert_eq!(never.phase, "Failed");
        let s = never.status(&spec("Never"), n.ip, t0);
        assert_eq!(
            s["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        let mut always = Sim::new(&spec("Always"), &n, t0);
        // First restart at once, then 10 s back-off.
        assert_eq!(always.advance(t0), Some(at(t0, 10)));
        assert_eq!(always.phase, "Running");
        assert_eq!(always.containers[0].restarts, 2);
        let s = always.status(&spec("Always"), n.ip, t0);
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "CrashLoopBackOff"
        );
        assert_eq!(
            s["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
            3
        );
    }

    #[test]
    fn init_containers_complete_before_containers_start_and_readiness_waits_for_the_probe() {
        let p = pod(
            json!({"metadata": {"name": "i", "namespace": "default", "uid": "u3"},
            "spec": {"initContainers": [{"name": "init", "image": "busybox", "command": ["sleep", "3"]}],
                     "containers": [{"name": "web", "image": "nginx", "readinessProbe": {"initialDelaySeconds": 5, "httpGet": {"port": 80}}}]}}),
        );
        let n = node();
        let t0 = Timestamp::now();
        let mut sim = Sim::new(&p, &n, t0);
        assert_eq!(sim.advance(t0), Some(at(t0, 3)));
        assert_eq!(sim.phase, "Pending");
        let s = sim.status(&p, n.ip, t0);
        assert_eq!(s["conditions"][1]["reason"], "ContainersNotInitialized");
        assert_eq!(
            s["conditions"][1]["message"],
            "containers with incomplete status: [init]"
        );
        assert_eq!(sim.advance(at(t0, 3)), Some(at(t0, 8)));
        assert_eq!(sim.phase, "Running");
        let s = sim.status(&p, n.ip, at(t0, 3));
        assert_eq!(
            s["conditions"][2]["message"],
            "containers with unready status: [web]"
        );
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(sim.advance(at(t0, 8)), None);
        let s = sim.status(&p, n.ip, at(t0, 8));
        assert_eq!(s["conditions"][2]["status"], "True");
        assert_eq!(s["containerStatuses"][0]["ready"], true);
    }

    #[test]
    fn deletion_kills_after_the_capped_grace_period() {
        let mut p = pod(
            json!({"metadata": {"name": "d", "namespace": "default", "uid": "u4"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
        );
        let n = node();
        let t0 = Timestamp::now();
        let mut sim = Sim::new(&p, &n, t0);
        sim.advance(t0);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            at(t0, 30),
        ));
        p.metadata.deletion_grace_period_seconds = Some(30);
        sim.observe_deletion(&p, t0, Duration::from_secs(1));
        assert_eq!(sim.advance(t0), Some(at(t0, 1)));
        sim.advance(at(t0, 1));
        assert!(sim.killed);
        assert_eq!(sim.phase, "Failed");
    }
}
