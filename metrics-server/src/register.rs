//! The objects metrics-server's manifest creates, applied through the API (server-side
//! apply, field manager `capstan-metrics-server`) each start: the selector-less Service
//! `kube-system/metrics-server`, its EndpointSlice to this server's address and port, and
//! the APIService `v1beta1.metrics.k8s.io`.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

const MANAGER: &str = "capstan-metrics-server";

/// Applies the Service, EndpointSlice and APIService for a server listening on `addr`.
pub(crate) async fn apply(client: &kube::Client, addr: SocketAddr) -> anyhow::Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    let labels = json!({ "k8s-app": "metrics-server" });
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    services
        .patch(
            "metrics-server",
            &params,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": "metrics-server", "namespace": "kube-system", "labels": labels },
                "spec": { "ports": [{ "name": "https", "port": 443, "protocol": "TCP",
                                      "targetPort": addr.port() }] },
            })),
        )
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    let address_type = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
    slices
        .patch(
            "metrics-server-capstan",
            &params,
            &Patch::Apply(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": { "name": "metrics-server-capstan", "namespace": "kube-system",
                    "labels": { "kubernetes.io/service-name": "metrics-server",
                                "endpointslice.kubernetes.io/managed-by": "capstan-metrics-server",
                                "k8s-app": "metrics-server" } },
                "addressType": address_type,
                "endpoints": [{ "addresses": [addr.ip().to_string()], "conditions": { "ready": true } }],
                "ports": [{ "name": "https", "port": addr.port(), "protocol": "TCP" }],
            })),
        )
        .await?;
    let resource = ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    let apiservices: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    apiservices
        .patch(
            "v1beta1.metrics.k8s.io",
            &params,
            &Patch::Apply(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": { "name": "v1beta1.metrics.k8s.io", "labels": labels },
                "spec": {
                    "group": "metrics.k8s.io", "version": "v1beta1",
                    "groupPriorityMinimum": 100, "versionPriority": 100,
                    "insecureSkipTLSVerify": true,
                    "service": { "name": "metrics-server", "namespace": "kube-system", "port": 443 },
                },
            })),
        )
        .await?;
    tracing::info!(%addr, "registered APIService v1beta1.metrics.k8s.io");
    Ok(())
}
