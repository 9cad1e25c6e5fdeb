//! `componentstatuses` (core/v1 `ComponentStatus`, deprecated since v1.19 and still served by
//! v1.33): read-only objects computed on every request, never stored.
//!
//! Upstream probes the scheduler's and the controller manager's `/healthz` on localhost and
//! asks etcd for its health. Here the scheduler and the controller manager are API clients
//! (in-process in `capstan server`, or `capstan scheduler|controllers` elsewhere) that hold a
//! leader Lease while they run, so their health is read from the Lease they renew
//! (`kube-system/kube-scheduler`, `kube-system/kube-controller-manager`): healthy while it has
//! a holder and was renewed within its `leaseDurationSeconds`. `etcd-0` is the store,
//! judged by a linearizable read (a quorum answers) within upstream's health-check timeout.
//! Every answer carries upstream's deprecation warning.

use axum::response::Response;
use http::StatusCode;
use serde_json::{Map, Value, json};

use super::{Ctx, Filter, Query, Render, load, object_response, table_response};
use crate::error::{ApiError, Result};
use crate::registry::catalog::ResourceInfo;
use crate::request_info::RequestInfo;

/// The warning upstream's deprecation filter sends with every `componentstatuses` answer.
pub(super) const DEPRECATION_WARNING: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// How long the store may take to answer before `etcd-0` is unhealthy (upstream's
/// `--etcd-healthcheck-timeout` default).
const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The components in the order they are listed, with the Lease each renews (`None`: the
/// store).
const COMPONENTS: [(&str, Option<&str>); 3] = [
    ("controller-manager", Some("kube-controller-manager")),
    ("scheduler", Some("kube-scheduler")),
    ("etcd-0", None),
];

/// Whether `r` is `componentstatuses`.
pub(super) fn is(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "componentstatuses"
}

/// `get` (by name) and `list`; every other verb is refused as upstream refuses it (405).
pub(super) async fn serve(
    ctx: &Ctx,
    r: &ResourceInfo,
    info: &RequestInfo,
    query: &Query,
    render: &Render,
) -> Result<Response> {
    crate::admission::warn(DEPRECATION_WARNING.to_owned());
    match info.verb.as_str() {
        "get" => {
            let Some((name, lease)) = COMPONENTS.iter().find(|(n, _)| *n == info.name) else {
                return Err(ApiError::NotFound {
                    resource: crate::error::GroupResource::new("", "componentstatuses"),
                    name: info.name.clone(),
                });
            };
            let status = probe(ctx, name, *lease).await;
            if render.table {
                return Ok(table_response(&crate::tables::to_table(
                    r,
                    &[status],
                    json!({}),
                    render.include,
                )));
            }
            Ok(object_response(StatusCode::OK, status))
        }
        "list" => {
            let filter = Filter::from_query(r, query)?;
            let probes = COMPONENTS.map(|(name, lease)| probe(ctx, name, lease));
            let items: Vec<Map<String, Value>> = futures_util::future::join_all(probes)
                .await
                .into_iter()
                .filter(|s| filter.matches(s))
                .collect();
            if render.table {
                return Ok(table_response(&crate::tables::to_table(
                    r,
                    &items,
                    json!({}),
                    render.include,
                )));
            }
            let mut list = Map::new();
            list.insert("kind".into(), json!("ComponentStatusList"));
            list.insert("apiVersion".into(), json!("v1"));
            list.insert("metadata".into(), json!({}));
            list.insert("items".into(), json!(items));
            Ok(object_response(StatusCode::OK, list))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// The ComponentStatus of `name`: its Lease's freshness, or the store's answer.
async fn probe(ctx: &Ctx, name: &str, lease: Option<&str>) -> Map<String, Value> {
    let outcome = match lease {
        Some(lease) => lease_health(ctx, lease).await,
        None => store_health(ctx).await,
    };
    let condition = match outcome {
        Ok(()) => json!({"type": "Healthy", "status": "True", "message": "ok"}),
        Err(error) => {
            tracing::debug!(component = name, %error, "component unhealthy");
            json!({"type": "Healthy", "status": "False", "error": error})
        }
    };
    let mut status = Map::new();
    status.insert("kind".into(), json!("ComponentStatus"));
    status.insert("apiVersion".into(), json!("v1"));
    status.insert(
        "metadata".into(),
        json!({"name": name, "creationTimestamp": null}),
    );
    status.insert("conditions".into(), json!([condition]));
    status
}

/// Whether the store answers a linearizable read in time.
async fn store_health(ctx: &Ctx) -> std::result::Result<(), String> {
    match tokio::time::timeout(STORE_TIMEOUT, ctx.storage.linearizable_revision()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("etcd: {e}")),
        Err(_) => Err(format!(
            "etcd: no linearizable read within {}s (no quorum?)",
            STORE_TIMEOUT.as_secs()
        )),
    }
}

/// Whether the leader Lease `kube-system/<lease>` is held and renewed within its duration.
async fn lease_health(ctx: &Ctx, lease: &str) -> std::result::Result<(), String> {
    let Some(leases) = ctx.registry.find("coordination.k8s.io", "v1", "leases") else {
        return Err("leases are not served".into());
    };
    let obj = match load(ctx, leases, "kube-system", lease).await {
        Ok((obj, _)) => obj,
        Err(ApiError::NotFound { .. }) => {
            return Err(format!(
                "no leader Lease kube-system/{lease}: the component has not started"
            ));
        }
        Err(e) => return Err(format!("reading Lease kube-system/{lease}: {e}")),
    };
    lease_fresh(lease, &obj, jiff::Timestamp::now())
}

/// Judges a Lease at `now` (see [`lease_health`]).
fn lease_fresh(
    lease: &str,
    obj: &Map<String, Value>,
    now: jiff::Timestamp,
) -> std::result::Result<(), String> {
    let spec = obj.get("spec");
    let field = |f: &str| spec.and_then(|s| s.get(f));
    if field("holderIdentity")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(format!(
            "leader Lease kube-system/{lease} has no holder: the component is not running"
        ));
    }
    let duration = field("leaseDurationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(15);
    let Some(renewed) = field("renewTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return Err(format!("leader Lease kube-system/{lease} has no renewTime"));
    };
    let age = now.as_second() - renewed.as_second();
    if age > duration {
        return Err(format!(
            "leader Lease kube-system/{lease} was last renewed {age}s ago (lease duration {duration}s): the component is not running"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renew: &str) -> Map<String, Value> {
        json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew}})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn fresh_held_leases_are_healthy_and_stale_or_free_ones_are_not() {
        let now: jiff::Timestamp = "2026-01-01T00:00:20Z".parse().unwrap();
        assert_eq!(
            lease_fresh("s", &lease("a", "2026-01-01T00:00:10.000000Z"), now),
            Ok(())
        );
        let stale = lease_fresh("s", &lease("a", "2026-01-01T00:00:01.000000Z"), now);
        assert!(stale.unwrap_err().contains("last renewed 19s ago"));
        let free = lease_fresh("s", &lease("", "2026-01-01T00:00:19Z"), now);
        assert!(free.unwrap_err().contains("has no holder"));
    }
}
