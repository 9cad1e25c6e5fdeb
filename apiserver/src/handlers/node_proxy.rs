//! The subresources upstream serves by reaching a kubelet: `pods/log`, `pods/exec`,
//! `pods/attach`, `pods/portforward`, `pods/proxy` and `nodes/proxy`.
//!
//! No kubelet runs here. The requests are checked as upstream checks them before dialing
//! (the pod exists; a container is named or the pod has exactly one, and it exists; the pod
//! is bound to a node — an unbound pod has empty logs and cannot be exec'd into, attached
//! to or port-forwarded to), then answered with a 400 BadRequest that says why nothing can
//! be reached: the node is one of Capstan's simulated nodes (annotation
//! `capstan.io/simulated: "true"`) where no container runs. kubectl prints the Status of a
//! refused WebSocket or SPDY upgrade as it prints any API error, so `kubectl logs`,
//! `kubectl exec`, `kubectl attach`, `kubectl port-forward` and `kubectl get --raw
//! /api/v1/nodes/N/proxy/...` show the message.

use axum::response::Response;
use http::StatusCode;
use serde_json::{Map, Value};

use super::{Ctx, Query, load};
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

/// `pods/{log,exec,attach,portforward,proxy}`.
pub(super) async fn pod(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    subresource: &str,
    q: &Query,
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
    Err(unreachable(
        ctx,
        node,
        &format!("pod {name:?}"),
        subresource,
    ))
}

/// `nodes/proxy`.
pub(super) async fn node(ctx: &Ctx, r: &ResourceInfo, name: &str) -> Result<Response> {
    let (node, _) = load(ctx, r, "", name).await?;
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
