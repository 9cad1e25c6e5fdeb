//! The APIServices of local group versions (kube-apiserver's autoregister and
//! crdregistration controllers) and the `kube-system/extension-apiserver-authentication`
//! ConfigMap extension API servers read their request-header trust from.
//!
//! Built-in group versions get `Local` APIServices with upstream's priorities (label
//! `kube-aggregator.kubernetes.io/automanaged: onstart`); each served custom resource group
//! version gets one with priority 1000/100 (`automanaged: "true"`), deleted when its CRD no
//! longer serves it.

use serde_json::{Map, Value, json};

use crate::handlers::Ctx;
use crate::registry;
use crate::storage::{self, Storage};

/// Label the autoregister controller puts on the APIServices it manages.
pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// kube-apiserver v1.33's `apiVersionPriorities` (generic and kube ones merged) plus the
/// aggregator's own group: (group, version, groupPriorityMinimum, versionPriority).
pub const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apiregistration.k8s.io", "v1", 18000, 15),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("events.k8s.io", "v1beta1", 17750, 5),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authentication.k8s.io", "v1beta1", 17700, 9),
    ("authentication.k8s.io", "v1alpha1", 17700, 1),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2", 17500, 30),
    ("autoscaling", "v2beta1", 17500, 9),
    ("autoscaling", "v2beta2", 17500, 1),
    ("batch", "v1", 17400, 15),
    ("batch", "v1beta1", 17400, 9),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("certificates.k8s.io", "v1beta1", 17300, 9),
    ("certificates.k8s.io", "v1alpha1", 17300, 1),
    ("networking.k8s.io", "v1", 17200, 15),
    ("networking.k8s.io", "v1beta1", 17200, 9),
    ("policy", "v1", 17100, 15),
    ("policy", "v1beta1", 17100, 9),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("storage.k8s.io", "v1beta1", 16800, 9),
    ("storage.k8s.io", "v1alpha1", 16800, 1),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1beta1", 16700, 12),
    ("admissionregistration.k8s.io", "v1alpha1", 16700, 9),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("coordination.k8s.io", "v1beta1", 16500, 13),
    ("coordination.k8s.io", "v1alpha2", 16500, 12),
    ("node.k8s.io", "v1", 16300, 15),
    ("node.k8s.io", "v1beta1", 16300, 9),
    ("node.k8s.io", "v1alpha1", 16300, 1),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("discovery.k8s.io", "v1beta1", 16200, 12),
    ("resource.k8s.io", "v1beta2", 16200, 15),
    ("resource.k8s.io", "v1beta1", 16200, 9),
    ("resource.k8s.io", "v1alpha3", 16200, 1),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
    ("flowcontrol.apiserver.k8s.io", "v1beta3", 16100, 18),
    ("flowcontrol.apiserver.k8s.io", "v1beta2", 16100, 15),
    ("flowcontrol.apiserver.k8s.io", "v1beta1", 16100, 12),
    ("flowcontrol.apiserver.k8s.io", "v1alpha1", 16100, 9),
    ("internal.apiserver.k8s.io", "v1alpha1", 16000, 9),
    ("storagemigration.k8s.io", "v1beta1", 15800, 9),
];

/// Priorities of a custom resource group version (upstream's crdregistration controller).
const CRD_PRIORITY: (i64, i64) = (1000, 100);

/// The APIService name of a group version (`v1.` for the core group).
pub fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// `metav1.Time` now (RFC 3339, whole seconds).
pub(super) fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second()).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

/// Creates `obj` (of resource `r`) at `key` with server-owned metadata, unless it exists.
pub(super) async fn create_if_absent(
    storage: &Storage,
    key: &str,
    mut obj: Value,
) -> storage::Result<()> {
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now()));
    }
    let bytes = serde_json::to_vec(&obj).unwrap_or_default();
    match storage.create(key, bytes).await {
        Ok(_) | Err(storage::Error::AlreadyExists) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The local group versions this server serves with their priorities and automanaged label.
fn wanted(ctx: &Ctx) -> Vec<(String, String, i64, i64, &'static str)> {
    let custom: Vec<(&'static str, &'static str)> = ctx
        .registry
        .custom_resources()
        .iter()
        .map(|c| (c.info.group, c.info.version))
        .collect();
    let mut out = Vec::new();
    for (group, versions) in ctx.registry.discovery_groups() {
        for version in versions {
            match PRIORITIES
                .iter()
                .find(|(g, v, _, _)| *g == group && *v == version)
            {
                Some((_, _, gp, vp)) => {
                    out.push((group.to_owned(), version.to_owned(), *gp, *vp, "onstart"))
                }
                None if custom.contains(&(group, version)) => out.push((
                    group.to_owned(),
                    version.to_owned(),
                    CRD_PRIORITY.0,
                    CRD_PRIORITY.1,
                    "true",
                )),
                None => {}
            }
        }
    }
    out
}

/// Creates the missing local APIServices and deletes custom ones whose group version is no
/// longer served (never one an administrator pointed at a service).
pub async fn sync_local(ctx: &Ctx) -> storage::Result<()> {
    let Some(r) = registry::catalog::find("apiregistration.k8s.io", "v1", "apiservices") else {
        return Ok(());
    };
    let wanted = wanted(ctx);
    for (group, version, gp, vp, managed) in &wanted {
        let name = name_of(group, version);
        let key = registry::key(r, "", &name);
        let obj = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": { "name": name, "labels": { AUTOMANAGED: managed } },
            "spec": {
                "group": group, "version": version,
                "groupPriorityMinimum": gp, "versionPriority": vp,
            },
        });
        create_if_absent(&ctx.storage, &key, obj).await?;
    }
    let (items, _) = ctx.storage.shared_list(&registry::prefix(r, ""));
    for item in items {
        let Ok(obj) = serde_json::from_slice::<Value>(&item.value) else {
            continue;
        };
        let managed = obj["metadata"]["labels"][AUTOMANAGED] == "true";
        let local = obj["spec"]["service"].is_null();
        let (g, v) = (
            obj["spec"]["group"].as_str().unwrap_or(""),
            obj["spec"]["version"].as_str().unwrap_or(""),
        );
        if managed && local && !wanted.iter().any(|w| w.0 == g && w.1 == v) {
            let key = String::from_utf8_lossy(&item.key).into_owned();
            match ctx.storage.delete(&key, item.revision).await {
                Ok(_) | Err(storage::Error::NotFound) | Err(storage::Error::Conflict) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// The data of `kube-system/extension-apiserver-authentication` (upstream's
/// `ClusterAuthenticationInfo`): the client CA and, with a front-proxy CA, the request-header
/// settings.
pub fn authentication_data(
    cfg: &super::AggregatorConfig,
    client_ca: &str,
    requestheader_ca: Option<&str>,
) -> Map<String, Value> {
    let list = |v: &[String]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    let mut data = Map::new();
    data.insert("client-ca-file".into(), json!(client_ca));
    if let Some(ca) = requestheader_ca {
        data.insert("requestheader-client-ca-file".into(), json!(ca));
        data.insert(
            "requestheader-allowed-names".into(),
            json!(list(&cfg.requestheader_allowed_names)),
        );
        data.insert(
            "requestheader-username-headers".into(),
            json!(list(&cfg.requestheader_username_headers)),
        );
        data.insert(
            "requestheader-group-headers".into(),
            json!(list(&cfg.requestheader_group_headers)),
        );
        data.insert(
            "requestheader-extra-headers-prefix".into(),
            json!(list(&cfg.requestheader_extra_headers_prefix)),
        );
    }
    data
}

/// Writes `kube-system/extension-apiserver-authentication` when its data differ.
pub async fn sync_authentication_configmap(
    storage: &Storage,
    data: &Map<String, Value>,
) -> storage::Result<()> {
    let Some(r) = registry::catalog::find("", "v1", "configmaps") else {
        return Ok(());
    };
    let key = registry::key(r, "kube-system", "extension-apiserver-authentication");
    match storage.get(&key).await? {
        None => {
            let obj = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "extension-apiserver-authentication", "namespace": "kube-system" },
                "data": data,
            });
            create_if_absent(storage, &key, obj).await
        }
        Some(stored) => {
            let Ok(mut obj) = serde_json::from_slice::<Value>(&stored.value) else {
                return Ok(());
            };
            if obj["data"].as_object() == Some(data) {
                return Ok(());
            }
            obj["data"] = Value::Object(data.clone());
            let bytes = serde_json::to_vec(&obj).unwrap_or_default();
            match storage.update(&key, bytes, stored.revision).await {
                Ok(_) | Err(storage::Error::Conflict) => Ok(()),
                Err(e) => Err(e),
            }
        }
    }
}
