//! The availability controllers (upstream's local and remote `AvailableConditionController`):
//! each round, every APIService gets its `Available` condition — `Local` ones are always
//! available; a service-backed one is checked as upstream does (the Service exists, has the
//! port, has EndpointSlices with a ready address for the port's name, and its server answers
//! `GET /apis/<group>/<version>` with a 2xx within 5 s as `system:kube-aggregator` in
//! `system:masters`). The status is written only when it changed (`lastTransitionTime` moves
//! only with the status). The discovery answer of a passing server is kept for the merged
//! discovery documents.

use std::collections::HashMap;
use std::time::Duration;

use http_body_util::BodyExt as _;
use serde_json::{Value, json};

use super::client::Endpoint;
use super::table::ApiService;
use super::{Aggregator, registration};
use crate::registry;
use crate::service_endpoint::{self as endpoints, ResolveError};

/// How long the discovery check waits (upstream's client timeout).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// An `Available` condition: status, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// Upstream's reason.
    pub reason: &'static str,
    /// Upstream's message.
    pub message: String,
}

impl Condition {
    fn new(status: &'static str, reason: &'static str, message: String) -> Self {
        Condition {
            status,
            reason,
            message,
        }
    }
}

/// Where the APIService's server is reached, or the condition explaining why it is not.
pub fn endpoint_of(agg: &Aggregator, svc: &ApiService) -> Result<Endpoint, Condition> {
    let Some(s) = &svc.service else {
        return Err(Condition::new(
            "True",
            "Local",
            "Local APIServices are always available".into(),
        ));
    };
    match endpoints::resolve(&agg.ctx.storage, s) {
        Ok((host, port)) => Ok(Endpoint {
            host,
            port,
            server_name: format!("{}.{}.svc", s.name, s.namespace),
            ca_bundle: svc.ca_bundle.clone(),
            insecure: svc.insecure,
        }),
        Err(ResolveError::ServiceNotFound) => Err(Condition::new(
            "False",
            "ServiceNotFound",
            format!("service/{} in {:?} is not present", s.name, s.namespace),
        )),
        Err(ResolveError::PortNotFound) => Err(Condition::new(
            "False",
            "ServicePortError",
            format!(
                "service/{} in {:?} is not listening on port {}",
                s.name, s.namespace, s.port
            ),
        )),
        Err(ResolveError::NoSlices) => Err(Condition::new(
            "False",
            "EndpointsNotFound",
            format!(
                "cannot find endpointslices for service/{} in {:?}",
                s.name, s.namespace
            ),
        )),
        Err(ResolveError::MissingEndpoints(port_name)) => Err(Condition::new(
            "False",
            "MissingEndpoints",
            format!(
                "endpointslices for service/{} in {:?} have no addresses with port name {:?}",
                s.name, s.namespace, port_name
            ),
        )),
        Err(ResolveError::Access(e)) => Err(Condition::new(
            "Unknown",
            "ServiceAccessError",
            format!(
                "service/{} in {:?} cannot be checked due to: {e}",
                s.name, s.namespace
            ),
        )),
    }
}

/// `GET /apis/<group>/<version>` on the server as the aggregator; the body on a 2xx.
async fn discovery_check(
    agg: &Aggregator,
    svc: &ApiService,
    ep: &Endpoint,
) -> Result<Value, String> {
    let path = if svc.group.is_empty() {
        format!("/api/{}", svc.version)
    } else {
        format!("/apis/{}/{}", svc.group, svc.version)
    };
    let url = format!("https://{}:{}{path}", ep.host, ep.port);
    let check = Endpoint {
        insecure: true,
        ..ep.clone()
    };
    let exchange = async {
        let sender = agg.client.connect(&check, false).await?;
        let uri = if sender.is_h2() {
            format!("https://{}:{}{path}", ep.server_name, ep.port)
        } else {
            path.clone()
        };
        let mut req = http::Request::get(uri)
            .header("x-remote-user", "system:kube-aggregator")
            .header("x-remote-group", "system:masters")
            .header(http::header::ACCEPT, "application/json");
        if !sender.is_h2() {
            req = req.header(
                http::header::HOST,
                format!("{}:{}", ep.server_name, ep.port),
            );
        }
        let req = req
            .body(axum::body::Body::empty())
            .map_err(|e| e.to_string())?;
        let resp = sender.send(req).await?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("bad status from {url}: {}", status.as_u16()));
        }
        Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
    };
    match tokio::time::timeout(CHECK_TIMEOUT, exchange).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if e.starts_with("bad status") => {
            Err(format!("failing or missing response from {url}: {e}"))
        }
        Ok(Err(e)) => Err(format!(
            "failing or missing response from {url}: Get {url:?}: {e}"
        )),
        Err(_) => Err(format!(
            "failing or missing response from {url}: Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
    }
}

/// An `APIResourceList` as the version entry of aggregated discovery.
pub fn version_entry(group: &str, version: &str, list: &Value) -> Value {
    let mut resources: Vec<Value> = Vec::new();
    let entries = list["resources"].as_array().cloned().unwrap_or_default();
    for r in entries
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").contains('/'))
    {
        let mut v = json!({
            "resource": r["name"],
            "responseKind": { "group": group, "version": version, "kind": r["kind"] },
            "scope": if r["namespaced"] == true { "Namespaced" } else { "Cluster" },
            "singularResource": r["singularName"],
            "verbs": r["verbs"],
        });
        for k in ["shortNames", "categories"] {
            if r[k].as_array().is_some_and(|a| !a.is_empty()) {
                v[k] = r[k].clone();
            }
        }
        resources.push(v);
    }
    for r in &entries {
        let Some((parent, sub)) = r["name"].as_str().and_then(|n| n.split_once('/')) else {
            continue;
        };
        if let Some(p) = resources.iter_mut().find(|p| p["resource"] == parent) {
            let entry = json!({
                "subresource": sub,
                "responseKind": {
                    "group": r["group"].as_str().unwrap_or(group),
                    "version": r["version"].as_str().unwrap_or(version),
                    "kind": r["kind"],
                },
                "verbs": r["verbs"],
            });
            match p["subresources"].as_array_mut() {
                Some(a) => a.push(entry),
                None => p["subresources"] = json!([entry]),
            }
        }
    }
    json!({ "version": version, "resources": resources, "freshness": "Current" })
}

/// The condition of one APIService, checking its server; also its discovery entry when it
/// passed.
async fn condition_of(agg: &Aggregator, svc: &ApiService) -> (Condition, Option<Value>) {
    let ep = match endpoint_of(agg, svc) {
        Ok(ep) => ep,
        Err(c) => return (c, None),
    };
    match discovery_check(agg, svc, &ep).await {
        Ok(list) => {
            super::openapi::refresh(agg, svc, &ep).await;
            (
                Condition::new("True", "Passed", "all checks passed".into()),
                Some(version_entry(&svc.group, &svc.version, &list)),
            )
        }
        Err(e) => (Condition::new("False", "FailedDiscoveryCheck", e), None),
    }
}

/// Writes `cond` as the APIService's `Available` condition when it differs.
async fn write_condition(agg: &Aggregator, name: &str, cond: &Condition) {
    let Some(r) = registry::catalog::find("apiregistration.k8s.io", "v1", "apiservices") else {
        return;
    };
    let key = registry::key(r, "", name);
    let Ok(Some(stored)) = agg.ctx.storage.get(&key).await else {
        return;
    };
    let Ok(mut obj) = serde_json::from_slice::<Value>(&stored.value) else {
        return;
    };
    let conditions = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let old = conditions.iter().find(|c| c["type"] == "Available");
    if let Some(o) = old
        && o["status"] == cond.status
        && o["reason"] == cond.reason
        && o["message"] == cond.message.as_str()
    {
        return;
    }
    let transition = match old {
        Some(o) if o["status"] == cond.status => o["lastTransitionTime"].clone(),
        _ => json!(registration::now()),
    };
    if old.is_none_or(|o| o["status"] != cond.status) {
        tracing::info!(apiservice = name, status = cond.status, reason = cond.reason, message = %cond.message, "changing APIService availability");
    }
    let mut rest: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != "Available")
        .collect();
    rest.push(json!({
        "type": "Available",
        "status": cond.status,
        "lastTransitionTime": transition,
        "reason": cond.reason,
        "message": cond.message,
    }));
    obj["status"] = json!({ "conditions": rest });
    let bytes = serde_json::to_vec(&obj).unwrap_or_default();
    if let Err(e) = agg.ctx.storage.update(&key, bytes, stored.revision).await {
        tracing::debug!(apiservice = name, err = %e, "APIService status update retried next round");
    }
}

/// One round over every APIService; returns the discovery entries of passing servers.
pub async fn round(agg: &Aggregator) -> HashMap<String, Value> {
    let snapshot = agg.table.snapshot(&agg.ctx.storage);
    let checks = snapshot.services.iter().map(|svc| async move {
        let (cond, entry) = condition_of(agg, svc).await;
        write_condition(agg, &svc.name, &cond).await;
        (svc.name.clone(), entry)
    });
    let entries: HashMap<String, Value> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .filter_map(|(name, entry)| entry.map(|e| (name, e)))
        .collect();
    let passing: Vec<String> = entries.keys().cloned().collect();
    agg.openapi.retain(&passing);
    entries
}
