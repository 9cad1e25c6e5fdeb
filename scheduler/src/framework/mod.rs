//! The scheduling framework: one [`PodCtx`] per attempt (the pod's requests, selectors and
//! terms parsed once), PreFilter state computed over the whole cluster only when a plugin
//! needs it, the Filter plugins run in upstream's order stopping at the first failure, the
//! Score plugins weighted as upstream's default profile (`apis/config/v1/default_plugins.go`),
//! and the [`FitError`] text kube-scheduler reports.

pub mod filter;
pub mod resources;
pub mod score;
pub mod selector;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, Pod, PodSpec, PreferredSchedulingTerm, Toleration};

use crate::cache::{Cache, NodeInfo, PodAffinity, PodInfo};
use crate::framework::resources::Resources;
use crate::framework::selector::{Labels, Selector};

/// How bad a filter failure is (upstream's status codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Removing pods (preemption) might make the node fit.
    Unschedulable,
    /// Preemption cannot help on this node.
    UnschedulableAndUnresolvable,
}

/// Why a node was filtered out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Severity.
    pub code: Code,
    /// The plugin that rejected the node.
    pub plugin: &'static str,
    /// Reasons, as the FailedScheduling message counts them.
    pub reasons: Vec<String>,
}

impl Status {
    /// A failure of `plugin` with one reason.
    pub fn new(code: Code, plugin: &'static str, reason: impl Into<String>) -> Status {
        Status {
            code,
            plugin,
            reasons: vec![reason.into()],
        }
    }
}

/// One parsed topology spread constraint.
#[derive(Debug, Clone)]
pub struct SpreadConstraint {
    /// `maxSkew`.
    pub max_skew: i64,
    /// `topologyKey`.
    pub key: String,
    /// `whenUnsatisfiable: DoNotSchedule`.
    pub hard: bool,
    /// `labelSelector` (plus `matchLabelKeys`).
    pub selector: Selector,
    /// `minDomains` (1 when unset).
    pub min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default).
    pub honor_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore).
    pub honor_taints: bool,
}

/// Everything about the pod being scheduled, parsed once per attempt.
pub struct PodCtx<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its spec.
    pub spec: &'a PodSpec,
    /// Its labels.
    pub labels: Labels,
    /// Its namespace.
    pub namespace: String,
    /// What it will hold on a node (requests, ports, affinity), as it would be assumed.
    pub info: PodInfo,
    /// `spec.tolerations`.
    pub tolerations: &'a [Toleration],
    /// `spec.nodeSelector`.
    pub node_selector: Option<&'a BTreeMap<String, String>>,
    /// Required node affinity.
    pub required_node_affinity: Option<&'a NodeSelector>,
    /// Preferred node affinity terms.
    pub preferred_node_affinity: &'a [PreferredSchedulingTerm],
    /// Topology spread constraints (given or defaulted).
    pub spread: Vec<SpreadConstraint>,
    /// The constraints are the system defaults (nodes need not carry every key).
    pub spread_defaulted: bool,
    /// VolumeBinding's PreFilter result: the pod's claims (None: it mounts none).
    pub volumes: Option<Arc<crate::volumes::PodVolumes>>,
}

const EMPTY_TOLERATIONS: &[Toleration] = &[];
const EMPTY_PREFERRED: &[PreferredSchedulingTerm] = &[];

impl<'a> PodCtx<'a> {
    /// Parses `pod` (which must have a spec).
    pub fn new(pod: &'a Pod, spec: &'a PodSpec) -> PodCtx<'a> {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let node_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        let spread = spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .map(|c| {
                let mut selector = Selector::new(c.label_selector.as_ref());
                for key in c.match_label_keys.iter().flatten() {
                    if let Some(v) = labels.get(key) {
                        selector.require(key, v);
                    }
                }
                SpreadConstraint {
                    max_skew: i64::from(c.max_skew),
                    key: c.topology_key.clone(),
                    hard: c.when_unsatisfiable == "DoNotSchedule",
                    selector,
                    min_domains: i64::from(c.min_domains.unwrap_or(1).max(1)),
                    honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                    honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
                }
            })
            .collect();
        PodCtx {
            pod,
            spec,
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            labels,
            info: PodInfo::new(pod, ""),
            tolerations: spec.tolerations.as_deref().unwrap_or(EMPTY_TOLERATIONS),
            node_selector: spec.node_selector.as_ref(),
            required_node_affinity: node_affinity.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            preferred_node_affinity: node_affinity
                .and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_deref()
                })
                .unwrap_or(EMPTY_PREFERRED),
            spread,
            spread_defaulted: false,
            volumes: None,
        }
    }

    /// Applies PodTopologySpread's system-default constraints (ScheduleAnyway, maxSkew 3
    /// per hostname and 5 per zone) with the selector of the Services and controller that
    /// own the pod.
    pub fn set_default_spread(
        &mut self,
        selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) {
        self.spread = [
            ("kubernetes.io/hostname", 3),
            ("topology.kubernetes.io/zone", 5),
        ]
        .into_iter()
        .map(|(key, max_skew)| SpreadConstraint {
            max_skew,
            key: key.to_owned(),
            hard: false,
            selector: Selector::new(Some(selector)),
            min_domains: 1,
            honor_affinity: true,
            honor_taints: false,
        })
        .collect();
        self.spread_defaulted = true;
    }

    /// The pod's inter-pod affinity, if any.
    pub fn affinity(&self) -> Option<&Arc<PodAffinity>> {
        self.info.affinity.as_ref()
    }

    /// The pod's priority.
    pub fn priority(&self) -> i32 {
        self.info.priority
    }
}

/// PreFilter results: state computed over the whole cluster once per attempt.
#[derive(Default)]
pub struct CycleState {
    /// PodTopologySpread's counts for DoNotSchedule constraints.
    pub spread: Option<filter::pod_topology_spread::SpreadState>,
    /// InterPodAffinity's topology counts.
    pub inter_pod: Option<filter::inter_pod_affinity::InterPodState>,
    /// Resources of higher-or-equal-priority pods nominated to each node.
    pub nominated: HashMap<String, (Resources, i64)>,
}

impl CycleState {
    /// Runs the PreFilter steps the pod needs.
    pub fn prefilter(ctx: &PodCtx<'_>, cache: &Cache) -> CycleState {
        let mut nominated: HashMap<String, (Resources, i64)> = HashMap::new();
        for (key, n) in &cache.nominated {
            if *key != ctx.info.key && n.priority >= ctx.priority() {
                let e = nominated.entry(n.node.clone()).or_default();
                e.0.add(&n.requests);
                e.1 += 1;
            }
        }
        CycleState {
            spread: filter::pod_topology_spread::SpreadState::new(ctx, cache),
            inter_pod: filter::inter_pod_affinity::InterPodState::new(ctx, cache),
            nominated,
        }
    }
}

/// Runs every Filter plugin on `node` in upstream's order; the first failure wins.
pub fn run_filters(ctx: &PodCtx<'_>, state: &CycleState, node: &NodeInfo) -> Result<(), Status> {
    filter::node_unschedulable::filter(ctx, node)?;
    filter::node_name::filter(ctx, node)?;
    filter::taint_toleration::filter(ctx, node)?;
    filter::node_affinity::filter(ctx, node)?;
    filter::node_ports::filter(ctx, node)?;
    filter::node_resources_fit::filter(ctx, node, state.nominated.get(&node.name))?;
    crate::volumes::Volumes::filter(ctx.volumes.as_deref(), node)?;
    filter::pod_topology_spread::filter(ctx, state.spread.as_ref(), node)?;
    filter::inter_pod_affinity::filter(ctx, state.inter_pod.as_ref(), node)?;
    Ok(())
}

/// Why no node fits: each filtered node's status and the node count (upstream's
/// `framework.FitError`).
#[derive(Debug, Clone)]
pub struct FitError {
    /// How many nodes there were.
    pub num_all_nodes: usize,
    /// Failed nodes by name.
    pub node_status: HashMap<String, Status>,
    /// Status of nodes absent from `node_status`, if any.
    pub absent_reason: Option<String>,
    /// The PostFilter (preemption) message, when it ran and did not succeed.
    pub post_filter_msg: Option<String>,
    /// A PreFilter plugin's rejection, which then stands for every node.
    pub pre_filter_msg: Option<String>,
}

impl FitError {
    /// The message kube-scheduler shows: `0/5 nodes are available: 2 Insufficient cpu, 3
    /// node(s) had untolerated taint {dedicated: gpu}.` plus the preemption summary.
    pub fn message(&self) -> String {
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        if let Some(pre) = &self.pre_filter_msg {
            msg.push_str(&format!(" {pre}."));
            if let Some(post) = &self.post_filter_msg {
                msg.push(' ');
                msg.push_str(post);
            }
            return msg;
        }
        let mut hist: BTreeMap<&str, usize> = BTreeMap::new();
        for s in self.node_status.values() {
            for r in &s.reasons {
                *hist.entry(r.as_str()).or_default() += 1;
            }
        }
        if let Some(absent) = &self.absent_reason
            && self.node_status.len() < self.num_all_nodes
        {
            *hist.entry(absent.as_str()).or_default() +=
                self.num_all_nodes - self.node_status.len();
        }
        let mut parts: Vec<String> = hist.iter().map(|(r, n)| format!("{n} {r}")).collect();
        parts.sort();
        msg.push_str(&format!(" {}.", parts.join(", ")));
        if let Some(post) = &self.post_filter_msg {
            msg.push(' ');
            msg.push_str(post);
        }
        msg
    }

    /// The plugins that rejected nodes (which cluster events may help).
    pub fn plugins(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.node_status.values().map(|s| s.plugin).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// How many feasible nodes to look for before scoring (`numFeasibleNodesToFind`):
/// every node below 100; otherwise `percentage`% of them (adaptive `50 - nodes/125`, at least
/// 5%, when `percentage` is 0), never fewer than 100.
pub fn num_feasible_nodes_to_find(num_all: usize, percentage: u32) -> usize {
    const MIN_FEASIBLE: usize = 100;
    if num_all < MIN_FEASIBLE || percentage >= 100 {
        return num_all;
    }
    let pct = if percentage == 0 {
        (50i64 - (num_all as i64) / 125).max(5) as usize
    } else {
        percentage as usize
    };
    (num_all * pct / 100).max(MIN_FEASIBLE)
}

/// The result of one scheduling attempt's algorithm.
pub enum Outcome {
    /// The chosen node, how many nodes were evaluated and how many were feasible.
    Fit {
        /// Chosen node.
        node: String,
    },
    /// No node fits.
    NoFit(FitError),
}

/// A tiny xorshift generator for tie-breaking (no cryptographic needs).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeds from the clock and the process id.
    pub fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng(t ^ (u64::from(std::process::id()) << 32) | 1)
    }

    /// The next number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % (n.max(1) as u64)) as usize
    }
}

/// Finds the node for a pod: filters nodes starting at `*start` (rotating as upstream's
/// `nextStartNodeIndex`) until enough feasible nodes are found, scores them and picks the
/// best, ties broken at random.
pub fn schedule_pod(
    ctx: &PodCtx<'_>,
    cache: &Cache,
    start: &mut usize,
    percentage: u32,
    rng: &mut Rng,
) -> Outcome {
    let n = cache.nodes.len();
    if n == 0 {
        return Outcome::NoFit(FitError {
            num_all_nodes: 0,
            node_status: HashMap::new(),
            absent_reason: None,
            post_filter_msg: None,
            pre_filter_msg: None,
        });
    }
    let state = CycleState::prefilter(ctx, cache);
    // A pod with a nominated node tries that node first (upstream's evaluateNominatedNode).
    if let Some(nominated) = ctx
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        && let Some(node) = cache.node(nominated)
        && run_filters(ctx, &state, node).is_ok()
    {
        return Outcome::Fit {
            node: nominated.to_owned(),
        };
    }
    let want = num_feasible_nodes_to_find(n, percentage);
    let mut feasible: Vec<&NodeInfo> = Vec::with_capacity(want.min(n));
    let mut failed: HashMap<String, Status> = HashMap::new();
    let begin = *start % n;
    let mut processed = 0;
    for i in 0..n {
        let node = &cache.nodes[(begin + i) % n];
        processed += 1;
        match run_filters(ctx, &state, node) {
            Ok(()) => {
                feasible.push(node);
                if feasible.len() >= want {
                    break;
                }
            }
            Err(s) => {
                failed.insert(node.name.clone(), s);
            }
        }
    }
    *start = (begin + processed) % n;
    if feasible.is_empty() {
        return Outcome::NoFit(FitError {
            num_all_nodes: n,
            node_status: failed,
            absent_reason: None,
            post_filter_msg: None,
            pre_filter_msg: None,
        });
    }
    if feasible.len() == 1 {
        return Outcome::Fit {
            node: feasible[0].name.clone(),
        };
    }
    let totals = score::score_nodes(ctx, cache, &feasible);
    let mut best = 0usize;
    let mut best_score = i64::MIN;
    let mut ties = 0usize;
    for (i, s) in totals.iter().enumerate() {
        if *s > best_score {
            best_score = *s;
            best = i;
            ties = 1;
        } else if *s == best_score {
            ties += 1;
            if rng.below(ties) == 0 {
                best = i;
            }
        }
    }
    Outcome::Fit {
        node: feasible[best].name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_error_text_matches_upstream() {
        let mut node_status = HashMap::new();
        for i in 0..2 {
            node_status.insert(
                format!("a{i}"),
                Status::new(Code::Unschedulable, "NodeResourcesFit", "Insufficient cpu"),
            );
        }
        for i in 0..3 {
            node_status.insert(
                format!("b{i}"),
                Status::new(
                    Code::UnschedulableAndUnresolvable,
                    "TaintToleration",
                    "node(s) had untolerated taint {dedicated: gpu}",
                ),
            );
        }
        let e = FitError {
            num_all_nodes: 5,
            node_status,
            absent_reason: None,
            post_filter_msg: Some(
                "preemption: 0/5 nodes are available: 2 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling.".into(),
            ),
            pre_filter_msg: None,
        };
        assert_eq!(
            e.message(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/5 nodes are available: 2 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn percentage_of_nodes_to_score_is_adaptive() {
        assert_eq!(num_feasible_nodes_to_find(50, 0), 50);
        assert_eq!(num_feasible_nodes_to_find(5000, 0), 500);
        assert_eq!(num_feasible_nodes_to_find(200, 0), 100);
        assert_eq!(num_feasible_nodes_to_find(100_000, 0), 5000);
        assert_eq!(num_feasible_nodes_to_find(5000, 100), 5000);
    }
}
