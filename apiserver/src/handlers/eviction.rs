//! `pods/eviction` (upstream's `EvictionREST`, `pkg/registry/core/pod/storage/eviction.go`):
//! a policy/v1 Eviction deletes a pod unless that would violate its PodDisruptionBudget.
//!
//! Terminal, pending and terminating pods are deleted at once. Otherwise the pod's PDBs are
//! found by selector in its namespace: more than one is a 500 (unsupported, as upstream);
//! with one, a stale budget (`status.observedGeneration` behind `metadata.generation`) or
//! one with no disruptions left is a 429 TooManyRequests with a `DisruptionBudget` cause;
//! else `status.disruptionsAllowed` is decremented and the pod recorded in
//! `status.disruptedPods` by compare-and-swap, then the pod is deleted with the Eviction's
//! DeleteOptions. The budgets themselves are computed by the disruption controller.

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use super::{Ctx, Query, delete, dry_run, json_response, load, object};
use crate::error::{ApiError, GroupResource, Result};
use crate::registry::{self, catalog::ResourceInfo};
use crate::storage;

/// Upstream's limit on `status.disruptedPods` (evictions not yet seen by the controller).
const MAX_DISRUPTED_PODS: usize = 2000;
/// Attempts under write conflicts (upstream's `EvictionsRetry` has 20 steps).
const RETRIES: usize = 20;
const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// A `Status` answer that is not an [`ApiError`]: its code, body and Retry-After seconds.
fn status_response(code: StatusCode, body: &Value, retry_after: u64) -> Response {
    let mut resp = json_response(code, body);
    if retry_after > 0
        && let Ok(v) = http::HeaderValue::from_str(&retry_after.to_string())
    {
        resp.headers_mut().insert(http::header::RETRY_AFTER, v);
    }
    resp
}

/// Upstream's `NewTooManyRequests` with a `DisruptionBudget` cause.
fn too_many_requests(cause: &str, retry_after: u64) -> Response {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    status_response(
        StatusCode::TOO_MANY_REQUESTS,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": VIOLATION, "reason": "TooManyRequests",
            "details": details, "code": 429,
        }),
        retry_after,
    )
}

/// The 429 for a budget the controller has not processed since its last change.
fn still_processing(pdb: &str) -> Response {
    too_many_requests(
        &format!("The disruption budget {pdb} is still being processed by the server."),
        10,
    )
}

fn success() -> Response {
    json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

fn str_at<'a>(v: &'a Map<String, Value>, path: &[&str]) -> &'a str {
    crate::admission::str_at(v.get(path[0]).unwrap_or(&Value::Null), &path[1..])
}

fn int_at(v: &Map<String, Value>, section: &str, field: &str) -> i64 {
    v.get(section)
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Pods whose disruption no longer matters (upstream's `canIgnorePDB`).
fn can_ignore_pdb(pod: &Map<String, Value>) -> bool {
    matches!(
        str_at(pod, &["status", "phase"]),
        "Succeeded" | "Failed" | "Pending"
    ) || !str_at(pod, &["metadata", "deletionTimestamp"]).is_empty()
}

fn is_terminal_or_terminating(pod: &Map<String, Value>) -> bool {
    matches!(str_at(pod, &["status", "phase"]), "Succeeded" | "Failed")
        || !str_at(pod, &["metadata", "deletionTimestamp"]).is_empty()
}

fn is_ready(pod: &Map<String, Value>) -> bool {
    pod.get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// The PDBs in the pod's namespace whose selector matches its labels (an empty or invalid
/// selector matches nothing).
fn matching_budgets(
    ctx: &Ctx,
    pdbs: &ResourceInfo,
    namespace: &str,
    pod: &Map<String, Value>,
) -> Vec<String> {
    let labels: std::collections::BTreeMap<String, String> = pod
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .cloned()
        .and_then(|l| serde_json::from_value(l).ok())
        .unwrap_or_default();
    let (items, _) = ctx.storage.shared_list(&registry::prefix(pdbs, namespace));
    items
        .into_iter()
        .filter_map(|i| serde_json::from_slice::<Map<String, Value>>(&i.value).ok())
        .filter(|pdb| {
            pdb.get("spec")
                .and_then(|s| s.get("selector"))
                .cloned()
                .and_then(|s| serde_json::from_value::<crate::authz::rbac::LabelSelector>(s).ok())
                .is_some_and(|sel| sel.matches(&labels))
        })
        .map(|pdb| str_at(&pdb, &["metadata", "name"]).to_owned())
        .collect()
}

/// Why a budget refuses the eviction.
enum Refusal {
    Response(Response),
    Error(ApiError),
    Conflict,
}

/// Upstream's `checkAndDecrement`: refuses, or records the disruption (not on dry runs).
async fn check_and_decrement(
    ctx: &Ctx,
    pdbs: &ResourceInfo,
    namespace: &str,
    pdb_name: &str,
    pod_name: &str,
    dry: bool,
) -> std::result::Result<(), Refusal> {
    let (mut pdb, revision) = load(ctx, pdbs, namespace, pdb_name)
        .await
        .map_err(Refusal::Error)?;
    let generation = pdb
        .get("metadata")
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if int_at(&pdb, "status", "observedGeneration") < generation {
        return Err(Refusal::Response(still_processing(pdb_name)));
    }
    let allowed = int_at(&pdb, "status", "disruptionsAllowed");
    let budget_forbidden = |why: &str| {
        Refusal::Error(ApiError::Forbidden {
            message: format!("poddisruptionbudget.policy \"{pdb_name}\" is forbidden: {why}"),
            resource: GroupResource::new("policy", "poddisruptionbudget"),
            name: pdb_name.into(),
        })
    };
    if allowed < 0 {
        return Err(budget_forbidden("pdb disruptions allowed is negative"));
    }
    let disrupted = pdb
        .get("status")
        .and_then(|s| s.get("disruptedPods"))
        .and_then(Value::as_object)
        .map_or(0, Map::len);
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(budget_forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(Refusal::Response(too_many_requests(
            &format!(
                "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                int_at(&pdb, "status", "desiredHealthy"),
                int_at(&pdb, "status", "currentHealthy")
            ),
            0,
        )));
    }
    if dry {
        return Ok(());
    }
    let now = object::now();
    let status = pdb.entry("status").or_insert_with(|| json!({}));
    if let Some(st) = status.as_object_mut() {
        st.insert("disruptionsAllowed".into(), json!(allowed - 1));
        if allowed - 1 == 0 {
            set_disruption_allowed_false(st, &now);
        }
        let pods = st.entry("disruptedPods").or_insert_with(|| json!({}));
        if !pods.is_object() {
            *pods = json!({});
        }
        if let Some(pods) = pods.as_object_mut() {
            pods.insert(pod_name.into(), json!(now));
        }
    }
    if let Some(m) = object::meta(&mut pdb) {
        m.remove("resourceVersion");
    }
    let bytes = object::encode(&pdb).map_err(Refusal::Error)?;
    let key = registry::key(pdbs, namespace, pdb_name);
    match ctx.storage.update(&key, bytes, revision).await {
        Ok(_) => Ok(()),
        Err(storage::Error::Conflict) => Err(Refusal::Conflict),
        Err(e) => Err(Refusal::Error(super::conflict_or(e, pdbs, pdb_name))),
    }
}

/// Upstream's `UpdateDisruptionAllowedCondition` for a budget with no disruptions left.
fn set_disruption_allowed_false(status: &mut Map<String, Value>, now: &str) {
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    let existing = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed"));
    let mut cond = json!({
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "InsufficientPods",
        "message": "",
        "lastTransitionTime": now,
    });
    match existing {
        Some(i) => {
            if list[i].get("status").and_then(Value::as_str) == Some("False")
                && let Some(t) = list[i].get("lastTransitionTime")
            {
                cond["lastTransitionTime"] = t.clone();
            }
            if let Some(g) = list[i].get("observedGeneration") {
                cond["observedGeneration"] = g.clone();
            }
            list[i] = cond;
        }
        None => list.push(cond),
    }
}

/// POST `pods/<name>/eviction`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn evict(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<Response> {
    let mut eviction = object::decode(headers, body)?;
    let kind = eviction.get("kind").and_then(Value::as_str).unwrap_or("");
    if !kind.is_empty() && kind != "Eviction" {
        return Err(ApiError::BadRequest(format!(
            "not a Eviction object: {kind}"
        )));
    }
    if object::meta_str(&eviction, "name") != name {
        return Err(ApiError::BadRequest(
            "name in URL does not match name in Eviction object".into(),
        ));
    }
    // Dry run: the query's and the options' must agree (upstream's propagateDryRun).
    let options = eviction
        .get("deleteOptions")
        .filter(|o| o.is_object())
        .cloned();
    let body_dry: Vec<String> = options
        .as_ref()
        .and_then(|o| o.get("dryRun"))
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let query_dry: Vec<String> = q.get("dryRun").map(|v| vec![v.clone()]).unwrap_or_default();
    if !body_dry.is_empty() && !query_dry.is_empty() && body_dry != query_dry {
        return Err(ApiError::BadRequest(format!(
            "Non-matching dry-run options in request and content: {query_dry:?} and {body_dry:?}"
        )));
    }
    let dry = dry_run(q) || body_dry.iter().any(|d| d == "All");
    ctx.admission.admit(
        crate::admission::Operation::Create,
        r.group,
        r.plural,
        namespace,
        name,
        dry,
        Some(&mut eviction),
        None,
    )?;
    ctx.admission
        .admit_subresource_create(r, namespace, name, dry, &mut eviction)
        .await?;
    let rv_unset = options
        .as_ref()
        .and_then(|o| o.get("preconditions"))
        .and_then(|p| p.get("resourceVersion"))
        .is_none_or(Value::is_null);
    let Some(pdbs) = ctx.registry.find("policy", "v1", "poddisruptionbudgets") else {
        return Err(ApiError::Internal(
            "poddisruptionbudgets are not served".into(),
        ));
    };

    let mut attempts = 0;
    let (pod, revision) = loop {
        attempts += 1;
        let (pod, revision) = load(ctx, r, namespace, name).await?;
        if !can_ignore_pdb(&pod) {
            break (pod, revision);
        }
        // Already disrupted (terminal, pending or terminating): delete directly.
        let rv = (!is_terminal_or_terminating(&pod) && rv_unset).then(|| revision.to_string());
        match delete::delete_with_options(ctx, r, namespace, name, options.as_ref(), rv, dry).await
        {
            Ok(()) => return Ok(success()),
            Err(ApiError::Conflict { .. }) if rv_unset && attempts < RETRIES => continue,
            Err(e) => return Err(e),
        }
    };

    let budgets = matching_budgets(ctx, pdbs, namespace, &pod);
    if budgets.len() > 1 {
        return Ok(status_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                "code": 500,
            }),
            0,
        ));
    }
    let mut guard_rv = None;
    if let Some(pdb_name) = budgets.first() {
        let (pdb, _) = load(ctx, pdbs, namespace, pdb_name).await?;
        let desired = int_at(&pdb, "status", "desiredHealthy");
        let current = int_at(&pdb, "status", "currentHealthy");
        if !is_ready(&pod) && current >= desired && desired > 0 {
            // An unready pod does not count as healthy: no budget to spend, but make sure it
            // has not become ready since.
            guard_rv = Some(revision.to_string());
        } else {
            let mut done = false;
            for _ in 0..RETRIES {
                match check_and_decrement(ctx, pdbs, namespace, pdb_name, name, dry).await {
                    Ok(()) => {
                        done = true;
                        break;
                    }
                    Err(Refusal::Conflict) => continue,
                    Err(Refusal::Response(resp)) => return Ok(resp),
                    Err(Refusal::Error(e)) => return Err(e),
                }
            }
            if !done {
                return Ok(status_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    &json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": format!("Timeout: couldn't update PodDisruptionBudget \"{pdb_name}\" due to conflicts"),
                        "reason": "Timeout", "details": {"retryAfterSeconds": 10}, "code": 504,
                    }),
                    10,
                ));
            }
        }
        let guarded = guard_rv.is_some();
        let rv = guard_rv.take().filter(|_| rv_unset);
        match delete::delete_with_options(ctx, r, namespace, name, options.as_ref(), rv, dry).await
        {
            Ok(()) => return Ok(success()),
            Err(ApiError::Conflict { .. }) if guarded && rv_unset => {
                return Ok(still_processing(pdb_name));
            }
            Err(e) => return Err(e),
        }
    }
    delete::delete_with_options(ctx, r, namespace, name, options.as_ref(), None, dry).await?;
    Ok(success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_terminal_and_terminating_pods_skip_budgets() {
        let pod = |phase: &str, deleting: bool| {
            let mut p = json!({"metadata": {"name": "p"}, "status": {"phase": phase}});
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            p.as_object().cloned().unwrap()
        };
        assert!(can_ignore_pdb(&pod("Pending", false)));
        assert!(can_ignore_pdb(&pod("Succeeded", false)));
        assert!(can_ignore_pdb(&pod("Running", true)));
        assert!(!can_ignore_pdb(&pod("Running", false)));
        assert!(!is_terminal_or_terminating(&pod("Pending", false)));
    }
}
