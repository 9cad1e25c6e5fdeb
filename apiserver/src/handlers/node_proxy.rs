//! The subresources upstream serves by reaching a kubelet: `pods/log`, `pods/exec`,
//! `pods/attach`, `pods/portforward`, `pods/proxy` and `nodes/proxy`.
//!
//! The requests are checked as upstream checks them before dialing (the pod exists; a
//! container is named or the pod has exactly one, and it exists; the pod is bound to a node
//! — an unbound pod has empty logs and cannot be exec'd into, attached to or
//! port-forwarded to). A node with a kubelet (Capstan's process nodes: a kubelet port in
//! `status.daemonEndpoints`, not annotated `capstan.io/simulated: "true"`) gets `log`,
//! `exec`, `attach`, `portforward` and `nodes/proxy` through `kubelet_proxy`. Otherwise the
//! answer is a 400 BadRequest that says why nothing can be reached: the node is one of
//! Capstan's simulated nodes where no container runs. kubectl
//! prints the Status of a refused WebSocket or SPDY upgrade as it prints any API error, so
//! `kubectl logs`, `kubectl exec`, `kubectl attach`, `kubectl port-forward` and `kubectl
//! get --raw /api/v1/nodes/N/proxy/...` show the message.

use axum::response::Response;
use http::StatusCode;
use serde_json::{Map, Value};

use super::{Ctx, Query, kubelet_proxy, load};
use crate::error::{ApiError, GroupResource, Result};
use crate::registry::catalog::ResourceInfo;

/// The annotation the simulated nodes carry.
pub(super) const SIMULATED_ANNOTATION: &str = "capstan.io/simulated";

/// What the request wanted from the kubelet, for the message.
fn purpose(subresource: &str) -> &'static str {
    match subresource {
        "log" => "so it has no logs",
        "exec" => "so there is nothing to exec into",
        "attach" => "so there is nothing to attach to",
        "portforward" => "so there is no port to forward to",
        _ => "so there is nothing to proxy to",
    }
}

fn container_names(pod: &Map<String, Value>, lists: &[&str]) -> Vec<String> {
    let spec = pod.get("spec");
    lists
        .iter()
        .flat_map(|list| {
            spec.and_then(|s| s.get(*list))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// Upstream's `validateContainer`: the named container must exist; without a name the pod
/// must have exactly one container.
fn validate_container(pod: &Map<String, Value>, name: &str, container: &str) -> Result<()> {
    let all = ["initContainers", "containers", "ephemeralContainers"];
    if container.is_empty() {
        let regular = container_names(pod, &["containers"]);
        return match regular.len() {
            1 => Ok(()),
            0 => Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                container_names(pod, &all).join(" ")
            ))),
        };
    }
    if container_names(pod, &all).iter().any(|c| c == container) {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "container {container} is not valid for pod {name}"
        )))
    }
}

/// The node object named `node`, if stored.
fn node_object(ctx: &Ctx, node: &str) -> Result<Option<Map<String, Value>>> {
    let stored = ctx
        .storage
        .get_local(&format!("/registry/core/nodes/{node}"))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(stored.and_then(|s| serde_json::from_slice(&s.value).ok()))
}

fn is_simulated(node: &Map<String, Value>) -> bool {
    node.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(SIMULATED_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

/// Why the kubelet of `node` cannot be reached for `what`.
fn unreachable(ctx: &Ctx, node_name: &str, what: &str, subresource: &str) -> ApiError {
    match node_object(ctx, node_name) {
        Err(e) => e,
        Ok(None) => ApiError::NotFound {
            resource: GroupResource::new("", "nodes"),
            name: node_name.into(),
        },
        Ok(Some(node)) if is_simulated(&node) => ApiError::BadRequest(format!(
            "{what} runs on simulated node {node_name:?}: no container runs there, {}",
            purpose(subresource)
        )),
        Ok(Some(_)) => ApiError::BadRequest(format!(
            "{what} runs on node {node_name:?}, whose kubelet Capstan cannot reach (Capstan runs no kubelets), {}",
            purpose(subresource)
        )),
    }
}

/// The container a request means: the named one, else the pod's only container.
fn chosen_container(pod: &Map<String, Value>, q: &Query) -> String {
    match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) => c.clone(),
        None => container_names(pod, &["containers"])
            .into_iter()
            .next()
            .unwrap_or_default(),
    }
}

/// Upstream's answer for the logs of a container that never ran: `container "c" in pod
/// "p" is waiting to start: <reason>`.
fn waiting_to_start(pod: &Map<String, Value>, name: &str, container: &str) -> Option<ApiError> {
    let status = pod.get("status")?;
    let cs = ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| status.get(*k).and_then(Value::as_array))
        .flatten()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(container))?;
    let waiting = cs.pointer("/state/waiting")?;
    if cs.pointer("/lastState/terminated").is_some() {
        return None;
    }
    let reason = waiting
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("ContainerCreating");
    Some(ApiError::BadRequest(format!(
        "container {container:?} in pod {name:?} is waiting to start: {reason}"
    )))
}

/// The client's query without `container` (already percent-encoded, repeated `command`
/// parameters kept in order), for the kubelet.
fn kubelet_query(parts: &http::request::Parts) -> String {
    parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("container="))
        .collect::<Vec<_>>()
        .join("&")
}

/// `pods/{log,exec,attach,portforward}` on a node whose kubelet answers, if it has one.
#[allow(clippy::too_many_arguments)]
async fn through_kubelet(
    ctx: &Ctx,
    pod: &Map<String, Value>,
    name: &str,
    namespace: &str,
    node: &str,
    subresource: &str,
    q: &Query,
    parts: &http::request::Parts,
) -> Result<Option<Response>> {
    if !matches!(subresource, "log" | "exec" | "attach" | "portforward")
        || !kubelet_proxy::configured()
    {
        return Ok(None);
    }
    let Some(node_obj) = node_object(ctx, node)? else {
        return Ok(None);
    };
    if is_simulated(&node_obj) {
        return Ok(None);
    }
    let Some(addr) = kubelet_proxy::kubelet_address(&node_obj) else {
        return Ok(None);
    };
    let container = chosen_container(pod, q);
    let query = kubelet_query(parts);
    let sep = if query.is_empty() { "" } else { "?" };
    let path = |verb: &str| {
        format!(
            "/{verb}/{}/{}/{}{sep}{query}",
            kubelet_proxy::encode(namespace),
            kubelet_proxy::encode(name),
            kubelet_proxy::encode(&container)
        )
    };
    if subresource == "log" {
        let previous = q.get("previous").is_some_and(|v| v == "true" || v == "1");
        if !previous && let Some(e) = waiting_to_start(pod, name, &container) {
            return Err(e);
        }
        return kubelet_proxy::get(node, addr, &path("containerLogs"))
            .await
            .map(Some);
    }
    let target = if subresource == "portforward" {
        format!(
            "/portForward/{}/{}{sep}{query}",
            kubelet_proxy::encode(namespace),
            kubelet_proxy::encode(name)
        )
    } else {
        path(subresource)
    };
    kubelet_proxy::upgrade(node, addr, parts, &target)
        .await
        .map(Some)
}

/// `pods/{log,exec,attach,portforward,proxy}`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn pod(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: &str,
    q: &Query,
    parts: &http::request::Parts,
) -> Result<Response> {
    let (pod, _) = load(ctx, r, namespace, name).await?;
    if matches!(subresource, "log" | "exec" | "attach") {
        let container = q.get("container").map(String::as_str).unwrap_or("");
        validate_container(&pod, name, container)?;
    }
    let node = pod
        .get("spec")
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        if subresource == "log" {
            // Upstream streams nothing for a pod without a host.
            return Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "text/plain")
                .body(axum::body::Body::empty())
                .map_err(|e| ApiError::Internal(e.to_string()));
        }
        return Err(ApiError::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    if let Some(resp) =
        through_kubelet(ctx, &pod, name, namespace, node, subresource, q, parts).await?
    {
        return Ok(resp);
    }
    Err(unreachable(
        ctx,
        node,
        &format!("pod {name:?}"),
        subresource,
    ))
}

/// `nodes/proxy`: a `GET` of a kubelet path (`/api/v1/nodes/N/proxy/<path>`) on a node
/// with a kubelet.
pub(super) async fn node(
    ctx: &Ctx,
    r: &ResourceInfo,
    name: &str,
    parts: &http::request::Parts,
) -> Result<Response> {
    let (node, _) = load(ctx, r, "", name).await?;
    if !is_simulated(&node)
        && kubelet_proxy::configured()
        && let Some(addr) = kubelet_proxy::kubelet_address(&node)
    {
        if parts.method != http::Method::GET {
            return Err(ApiError::MethodNotAllowed);
        }
        let path = parts.uri.path();
        let marker = format!("/nodes/{name}/proxy");
        let rest = path
            .find(&marker)
            .map(|i| &path[i + marker.len()..])
            .unwrap_or("");
        let rest = if rest.is_empty() { "/" } else { rest };
        let query = parts
            .uri
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        return kubelet_proxy::get(name, addr, &format!("{rest}{query}")).await;
    }
    if is_simulated(&node) {
        return Err(ApiError::BadRequest(format!(
            "node {name:?} is simulated: no kubelet runs there, so there is nothing to proxy to"
        )));
    }
    Err(ApiError::BadRequest(format!(
        "node {name:?} has no kubelet Capstan can reach (Capstan runs no kubelets), so there is nothing to proxy to"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_are_checked_as_upstream() {
        let pod = json!({"spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}, {"name": "b"}]}});
        let pod = pod.as_object().unwrap();
        assert_eq!(
            validate_container(pod, "web", "").unwrap_err().to_string(),
            ApiError::BadRequest(
                "a container name must be specified for pod web, choose one of: [init a b]".into()
            )
            .to_string()
        );
        assert!(validate_container(pod, "web", "init").is_ok());
        assert!(validate_container(pod, "web", "zzz").is_err());
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        assert!(validate_container(one.as_object().unwrap(), "web", "").is_ok());
    }
}
