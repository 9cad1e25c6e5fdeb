//! A Service's endpoint, found through its EndpointSlices as kube-aggregator's and the
//! webhook clients' `ServiceResolver` does when there is no kube-proxy (upstream's
//! `--enable-aggregator-routing`): the Service port asked for, its name matched in the slices'
//! ports, the first ready address. The failures are told apart for the aggregator's
//! availability conditions; admission and conversion webhooks (`admission/webhook/client.rs`)
//! turn them into upstream's webhook error texts.

use serde_json::Value;

use crate::registry;
use crate::storage::Storage;

/// A Service port: `spec.service` of an APIService, `clientConfig.service` of a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceRef {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// The Service port (default 443).
    pub port: u16,
}

/// Why a Service has no endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The Service does not exist (`ServiceNotFound`).
    ServiceNotFound,
    /// The Service has no port `port` (`ServicePortError`).
    PortNotFound,
    /// No EndpointSlice names the Service (`EndpointsNotFound`).
    NoSlices,
    /// No ready address with the port's name (`MissingEndpoints`); carries the port name.
    MissingEndpoints(String),
    /// The store could not be read (`ServiceAccessError`).
    Access(String),
}

fn read_json(storage: &Storage, key: &str) -> Result<Option<Value>, ResolveError> {
    let stored = storage
        .get_local(key)
        .map_err(|e| ResolveError::Access(e.to_string()))?;
    Ok(stored.and_then(|s| serde_json::from_slice(&s.value).ok()))
}

/// The ready endpoint (address, port) of `svc`, read from the store's local state.
pub fn resolve(storage: &Storage, svc: &ServiceRef) -> Result<(String, u16), ResolveError> {
    let services = registry::catalog::find("", "v1", "services")
        .ok_or_else(|| ResolveError::Access("services are not served".into()))?;
    let service = read_json(storage, &registry::key(services, &svc.namespace, &svc.name))?
        .ok_or(ResolveError::ServiceNotFound)?;
    let port = service["spec"]["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["port"] == svc.port))
        .ok_or(ResolveError::PortNotFound)?;
    let port_name = port["name"].as_str().unwrap_or("").to_owned();
    let slices = registry::catalog::find("discovery.k8s.io", "v1", "endpointslices")
        .ok_or_else(|| ResolveError::Access("endpointslices are not served".into()))?;
    let (items, _) = storage.shared_list(&registry::prefix(slices, &svc.namespace));
    let mut any = false;
    for item in items {
        let Ok(slice) = serde_json::from_slice::<Value>(&item.value) else {
            continue;
        };
        if slice["metadata"]["labels"]["kubernetes.io/service-name"] != svc.name.as_str() {
            continue;
        }
        any = true;
        let Some(target_port) = slice["ports"].as_array().and_then(|ports| {
            ports
                .iter()
                .find(|p| p["name"].as_str().unwrap_or("") == port_name)
                .and_then(|p| p["port"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
        }) else {
            continue;
        };
        let ready = slice["endpoints"].as_array().and_then(|eps| {
            eps.iter()
                .filter(|e| e["conditions"]["ready"] != false)
                .find_map(|e| e["addresses"][0].as_str())
        });
        if let Some(ip) = ready {
            return Ok((ip.to_owned(), target_port));
        }
    }
    if any {
        Err(ResolveError::MissingEndpoints(port_name))
    } else {
        Err(ResolveError::NoSlices)
    }
}
