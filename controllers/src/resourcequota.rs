//! The ResourceQuota controller (`resourcequota`): recomputes each quota's `status.hard`
//! (from `spec.hard`) and `status.used` from what its namespace holds — pods and their
//! requests/limits (with the Terminating/NotTerminating/BestEffort/NotBestEffort scopes),
//! services, persistent volume claims and storage, object counts and `count/<resource>` —
//! so admission can charge against it. Upstream `pkg/controller/resourcequota` with the
//! evaluators of `pkg/quota/v1/evaluator/core`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota,
    ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::Discovery;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

/// Periodic recomputation (upstream's `--resource-quota-sync-period` is 5 min; objects other
/// than pods are only seen through it here, so it is shorter).
const RESYNC: Duration = Duration::from_secs(10);

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Parses a quantity into thousandths of its unit (`100m` → 100, `1Gi` → 1073741824000);
/// also whether it used a binary suffix.
pub(crate) fn parse_milli(q: &str) -> Option<(i128, bool)> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let (mult_num, mult_den, binary): (i128, i128, bool) = match suffix {
        "" => (1000, 1, false),
        "m" => (1, 1, false),
        "k" => (1_000_000, 1, false),
        "M" => (1_000_000_000, 1, false),
        "G" => (1_000_000_000_000, 1, false),
        "T" => (1_000_000_000_000_000, 1, false),
        "P" => (1_000_000_000_000_000_000, 1, false),
        "Ki" => (1024 * 1000, 1, true),
        "Mi" => (1024 * 1024 * 1000, 1, true),
        "Gi" => (1024 * 1024 * 1024 * 1000, 1, true),
        "Ti" => (1024_i128.pow(4) * 1000, 1, true),
        "Pi" => (1024_i128.pow(5) * 1000, 1, true),
        s if s.starts_with(['e', 'E']) => {
            let exp: u32 = s[1..].parse().ok()?;
            (1000 * 10_i128.checked_pow(exp)?, 1, false)
        }
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let neg = int.starts_with('-');
    let int: i128 = int.trim_start_matches(['+', '-']).parse().unwrap_or(0);
    let mut value = int * mult_num / mult_den;
    if !frac.is_empty() {
        let digits = u32::try_from(frac.len()).ok()?;
        let f: i128 = frac.parse().ok()?;
        value += f * mult_num / 10_i128.checked_pow(digits)? / mult_den;
    }
    Some((if neg { -value } else { value }, binary))
}

/// Formats thousandths back into a canonical quantity (binary suffixes when `binary`).
pub(crate) fn format_milli(v: i128, binary: bool) -> String {
    if v == 0 {
        return "0".to_owned();
    }
    if v % 1000 != 0 {
        return format!("{v}m");
    }
    let units = v / 1000;
    if binary {
        for (suffix, m) in [
            ("Pi", 1024_i128.pow(5)),
            ("Ti", 1024_i128.pow(4)),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1024),
        ] {
            if units % m == 0 {
                return format!("{}{suffix}", units / m);
            }
        }
        return units.to_string();
    }
    for (suffix, m) in [
        ("P", 10_i128.pow(15)),
        ("T", 10_i128.pow(12)),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1000),
    ] {
        if units % m == 0 && units >= m {
            return format!("{}{suffix}", units / m);
        }
    }
    units.to_string()
}

/// A running sum of quantities.
#[derive(Default, Clone, Copy)]
struct Sum {
    /// Thousandths.
    milli: i128,
    /// Whether any summand used a binary suffix.
    binary: bool,
}

impl Sum {
    /// Adds a quantity.
    fn add(&mut self, q: &Quantity) {
        if let Some((v, b)) = parse_milli(&q.0) {
            self.milli += v;
            self.binary |= b;
        }
    }

    /// The total as a quantity.
    fn quantity(self) -> Quantity {
        Quantity(format_milli(self.milli, self.binary))
    }
}

/// Whether the pod still counts (not Succeeded or Failed).
fn pod_live(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The pod's effective requests or limits for `resource` (containers summed, init containers
/// as a floor, plus overhead), as upstream `PodRequests`.
fn pod_amount(pod: &Pod, limits: bool, resource: &str) -> Option<Sum> {
    let spec = pod.spec.as_ref()?;
    let get = |c: &k8s_openapi::api::core::v1::Container| -> Option<Quantity> {
        let r = c.resources.as_ref()?;
        let map = if limits {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        };
        map?.get(resource).cloned()
    };
    let mut sum = Sum::default();
    let mut any = false;
    for c in &spec.containers {
        if let Some(q) = get(c) {
            sum.add(&q);
            any = true;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        if let Some(q) = get(c) {
            let mut one = Sum::default();
            one.add(&q);
            any = true;
            if one.milli > sum.milli {
                sum.milli = one.milli;
                sum.binary |= one.binary;
            }
        }
    }
    if let Some(q) = spec.overhead.as_ref().and_then(|o| o.get(resource)) {
        sum.add(q);
    }
    any.then_some(sum)
}

/// Whether the pod has no requests or limits at all (BestEffort).
fn best_effort(pod: &Pod) -> bool {
    pod.spec.as_ref().is_none_or(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .all(|c| {
                c.resources.as_ref().is_none_or(|r| {
                    r.requests.as_ref().is_none_or(BTreeMap::is_empty)
                        && r.limits.as_ref().is_none_or(BTreeMap::is_empty)
                })
            })
    })
}

/// Whether the quota's scopes select `pod`.
fn scopes_match(quota: &ResourceQuota, pod: &Pod) -> bool {
    let spec = quota.spec.clone().unwrap_or_default();
    let terminating = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.active_deadline_seconds.is_some());
    let scope_ok = |scope: &str, op: &str, values: &[String]| -> bool {
        let holds = match scope {
            "Terminating" => terminating,
            "NotTerminating" => !terminating,
            "BestEffort" => best_effort(pod),
            "NotBestEffort" => !best_effort(pod),
            "PriorityClass" => {
                let pc = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.priority_class_name.clone());
                return match op {
                    "In" => pc.is_some_and(|p| values.contains(&p)),
                    "NotIn" => pc.is_none_or(|p| !values.contains(&p)),
                    "Exists" => pc.is_some(),
                    "DoesNotExist" => pc.is_none(),
                    _ => false,
                };
            }
            _ => true,
        };
        match op {
            "DoesNotExist" => !holds,
            _ => holds,
        }
    };
    spec.scopes
        .iter()
        .flatten()
        .all(|s| scope_ok(s, "Exists", &[]))
        && spec
            .scope_selector
            .iter()
            .flat_map(|s| s.match_expressions.iter().flatten())
            .all(|e| {
                scope_ok(
                    &e.scope_name,
                    &e.operator,
                    e.values.as_deref().unwrap_or(&[]),
                )
            })
}

/// Counts `count/<resource>[.<group>]` objects in `ns` through discovery.
async fn count_generic(
    client: &kube::Client,
    ns: &str,
    spec: &str,
) -> Result<Option<usize>, ReconcileError> {
    let (resource, group) = spec.split_once('.').unwrap_or((spec, ""));
    let discovery = Discovery::new(client.clone())
        .filter(&[group])
        .run()
        .await?;
    for g in discovery.groups() {
        for (ar, _caps) in g.recommended_resources() {
            if ar.plural == resource && ar.group == group {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
                let list = api.list_metadata(&ListParams::default()).await?;
                return Ok(Some(list.items.len()));
            }
        }
    }
    Ok(None)
}

/// Recomputes quota `key`.
async fn sync(
    ctx: Context,
    quotas: kube::runtime::reflector::Store<ResourceQuota>,
    key: String,
) -> SyncResult {
    let Some(quota) = informer::get(&quotas, &key) else {
        return Ok(None);
    };
    let ns = quota.metadata.namespace.clone().unwrap_or_default();
    let hard = quota
        .spec
        .as_ref()
        .and_then(|s| s.hard.clone())
        .unwrap_or_default();
    let client = ctx.client.clone();
    let lp = ListParams::default();
    let needs = |prefixes: &[&str]| {
        hard.keys().any(|k| {
            prefixes
                .iter()
                .any(|p| k == p || k.starts_with(&format!("{p}.")))
        })
    };
    let pods: Vec<Pod> = if needs(&[
        "pods",
        "cpu",
        "memory",
        "requests",
        "limits",
        "ephemeral-storage",
        "count/pods",
    ]) {
        Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter(pod_live)
            .filter(|p| scopes_match(&quota, p))
            .collect()
    } else {
        Vec::new()
    };
    let services: Vec<Service> = if needs(&["services", "count/services"]) {
        Api::<Service>::namespaced(client.clone(), &ns)
            .list(&lp)
            .await?
            .items
    } else {
        Vec::new()
    };
    let claims: Vec<PersistentVolumeClaim> = if hard
        .keys()
        .any(|k| k.contains("persistentvolumeclaims") || k.contains("storage"))
    {
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
            .list(&lp)
            .await?
            .items
    } else {
        Vec::new()
    };
    let mut used: BTreeMap<String, Quantity> = BTreeMap::new();
    for res in hard.keys() {
        let count = |n: usize| Quantity(n.to_string());
        let q = match res.as_str() {
            "pods" | "count/pods" => count(pods.len()),
            "services" | "count/services" => count(services.len()),
            "services.nodeports" => count(
                services
                    .iter()
                    .filter_map(|s| s.spec.as_ref())
                    .filter(|s| matches!(s.type_.as_deref(), Some("NodePort" | "LoadBalancer")))
                    .map(|s| s.ports.iter().flatten().count())
                    .sum(),
            ),
            "services.loadbalancers" => count(
                services
                    .iter()
                    .filter(|s| {
                        s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
                    })
                    .count(),
            ),
            "persistentvolumeclaims" | "count/persistentvolumeclaims" => count(claims.len()),
            "requests.storage" => {
                let mut sum = Sum::default();
                for c in &claims {
                    if let Some(q) = c
                        .spec
                        .as_ref()
                        .and_then(|s| s.resources.as_ref())
                        .and_then(|r| r.requests.as_ref())
                        .and_then(|r| r.get("storage"))
                    {
                        sum.add(q);
                    }
                }
                sum.quantity()
            }
            "configmaps" | "count/configmaps" => count(
                Api::<ConfigMap>::namespaced(client.clone(), &ns)
                    .list_metadata(&lp)
                    .await?
                    .items
                    .len(),
            ),
            "secrets" | "count/secrets" => count(
                Api::<Secret>::namespaced(client.clone(), &ns)
                    .list_metadata(&lp)
                    .await?
                    .items
                    .len(),
            ),
            "replicationcontrollers" | "count/replicationcontrollers" => count(
                Api::<ReplicationController>::namespaced(client.clone(), &ns)
                    .list_metadata(&lp)
                    .await?
                    .items
                    .len(),
            ),
            "resourcequotas" | "count/resourcequotas" => count(
                Api::<ResourceQuota>::namespaced(client.clone(), &ns)
                    .list_metadata(&lp)
                    .await?
                    .items
                    .len(),
            ),
            r => {
                let (limits, name) = if let Some(n) = r.strip_prefix("limits.") {
                    (true, n)
                } else if let Some(n) = r.strip_prefix("requests.") {
                    (false, n)
                } else {
                    (false, r)
                };
                let compute = matches!(name, "cpu" | "memory" | "ephemeral-storage")
                    || name.starts_with("hugepages-")
                    || (name.contains('/') && !r.starts_with("count/"));
                if compute {
                    let mut sum = Sum::default();
                    for p in &pods {
                        if let Some(s) = pod_amount(p, limits, name) {
                            sum.milli += s.milli;
                            sum.binary |= s.binary;
                        }
                    }
                    sum.quantity()
                } else if let Some(spec) = r.strip_prefix("count/") {
                    match count_generic(&client, &ns, spec).await? {
                        Some(n) => count(n),
                        None => continue,
                    }
                } else {
                    continue;
                }
            }
        };
        used.insert(res.clone(), q);
    }
    let status = ResourceQuotaStatus {
        hard: Some(hard),
        used: Some(used),
    };
    let same = quota.status.as_ref().is_some_and(|old| {
        let norm = |m: &Option<BTreeMap<String, Quantity>>| {
            m.clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, parse_milli(&v.0).map(|x| x.0)))
                .collect::<BTreeMap<_, _>>()
        };
        norm(&old.hard) == norm(&status.hard) && norm(&old.used) == norm(&status.used)
    });
    if !same {
        let api: Api<ResourceQuota> = Api::namespaced(client, &ns);
        let mut q = (*quota).clone();
        q.status = Some(status);
        let name = quota.metadata.name.clone().unwrap_or_default();
        match api.replace_status(&name, &PostParams::default(), &q).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                return Ok(Some(Duration::from_millis(200)));
            }
            Err(e) => return Err(ReconcileError::Kube(e)),
        }
    }
    Ok(Some(RESYNC))
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let quotas = ctx
        .informers
        .watch::<ResourceQuota>(
            Box::new(
                move |old: Option<&ResourceQuota>, new: Option<&ResourceQuota>| {
                    // Our own status writes come back as updates; only spec changes need a look.
                    if let (Some(o), Some(n)) = (old, new)
                        && o.spec == n.spec
                    {
                        return;
                    }
                    if let Some(x) = new {
                        q.add(informer::key(x));
                    }
                },
            ),
            &shutdown,
        )
        .await;
    let (q, qs) = (queue.clone(), quotas.clone());
    let pods = ctx
        .informers
        .watch::<Pod>(
            Box::new(move |old: Option<&Pod>, new: Option<&Pod>| {
                // Creations are charged by admission; deletions and phase changes free quota.
                let changed = match (old, new) {
                    (Some(_), None) => true,
                    (Some(o), Some(n)) => pod_live(o) != pod_live(n),
                    _ => false,
                };
                let Some(p) = new.or(old).filter(|_| changed) else {
                    return;
                };
                for x in qs.state() {
                    if x.metadata.namespace == p.metadata.namespace {
                        q.add(informer::key(x.as_ref()));
                    }
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { quotas.wait_until_ready().await?; pods.wait_until_ready().await } => r?,
    }
    for x in quotas.state() {
        queue.add(informer::key(x.as_ref()));
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, 5, &shutdown, move |key| {
        sync(c.clone(), quotas.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_sum_and_print_canonically() {
        assert_eq!(parse_milli("100m"), Some((100, false)));
        assert_eq!(parse_milli("1.5"), Some((1500, false)));
        assert_eq!(parse_milli("1Gi"), Some((1_073_741_824_000, true)));
        assert_eq!(format_milli(1500, false), "1500m");
        assert_eq!(format_milli(2000, false), "2");
        assert_eq!(
            format_milli(1_073_741_824_000 + 1_073_741_824_000 / 2, true),
            "1536Mi"
        );
        assert_eq!(format_milli(0, true), "0");
    }
}
