//! `ServiceAccount` (upstream's `plugin/pkg/admission/serviceaccount`): a new pod runs as
//! service account `default` unless it names one; the account must exist (the
//! ServiceAccount controller creates `default` in every namespace); unless automounting is
//! off (on the pod, else on the account), every container, init containers included, mounts
//! a projected `kube-api-access-<random>` volume (a bound token, the cluster CA from
//! `kube-root-ca.crt`, the namespace) at `/var/run/secrets/kubernetes.io/serviceaccount`;
//! and the account's image pull secrets are copied when the pod has none. Mirror pods are
//! left alone.

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation, ValidatingAdmission, forbidden};
use crate::error::Result;

/// The plugin.
pub struct ServiceAccount;

/// The account a pod runs as when it names none.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where the token volume is mounted.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the token volume's name.
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// Lifetime asked for the projected token (upstream's warn-only bound token expiry).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn is_mirror(pod: &Map<String, Value>) -> bool {
    pod.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

fn applies(a: &Attributes<'_>) -> bool {
    a.is_core("pods") && a.subresource.is_empty() && a.operation == Operation::Create
}

/// The projected volume source upstream's `TokenVolumeSource` builds.
fn token_volume_source() -> Value {
    json!({
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]
    })
}

fn account_name(pod: &Map<String, Value>) -> String {
    pod.get("spec")
        .and_then(|s| s.get("serviceAccountName"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Upstream's live lookups of the `default` account: attempts and their spacing.
const DEFAULT_ATTEMPTS: u32 = 10;
const DEFAULT_RETRY: std::time::Duration = std::time::Duration::from_millis(150);

/// Waits (about 1.5 s at most) for the `default` ServiceAccount a new pod will run as, when
/// it does not exist yet: the ServiceAccount controller creates it with the namespace.
pub async fn wait_for_default(
    storage: &crate::storage::Storage,
    namespace: &str,
    pod: &Map<String, Value>,
) {
    let name = account_name(pod);
    if !(name.is_empty() || name == DEFAULT_SERVICE_ACCOUNT) || is_mirror(pod) {
        return;
    }
    let key = format!("/registry/core/serviceaccounts/{namespace}/{DEFAULT_SERVICE_ACCOUNT}");
    for attempt in 0..DEFAULT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(DEFAULT_RETRY).await;
        }
        if !matches!(storage.get_local(&key), Ok(None)) {
            return;
        }
    }
}

fn lookup_account(
    lookup: &Lookup<'_>,
    a: &Attributes<'_>,
    pod: &Map<String, Value>,
    name: &str,
) -> Result<Map<String, Value>> {
    let key = format!("/registry/core/serviceaccounts/{}/{name}", a.namespace);
    lookup.get(&key)?.ok_or_else(|| {
        forbidden(
            a,
            Some(pod),
            format!(
                "error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
                a.namespace
            ),
        )
    })
}

/// Adds the token volume and its mounts (upstream's `mountServiceAccountToken`).
fn mount_token(spec: &mut Map<String, Value>) {
    let volumes: Vec<Value> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let existing = volumes.iter().find_map(|v| {
        v.get("name")
            .and_then(Value::as_str)
            .filter(|n| n.starts_with(VOLUME_PREFIX))
            .map(str::to_owned)
    });
    let has_volume = existing.is_some();
    let volume_name = existing.unwrap_or_else(|| {
        format!(
            "{VOLUME_PREFIX}{}",
            crate::handlers::generated_name_suffix()
        )
    });
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needs_volume = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut() {
            let Some(c) = c.as_object_mut() else {
                continue;
            };
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            if mounts.is_null() {
                *mounts = json!([]);
            }
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            let mounted = mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH));
            if !mounted {
                mounts.push(mount.clone());
                needs_volume = true;
            }
        }
    }
    if !has_volume && needs_volume {
        let mut volumes = volumes;
        volumes.push(json!({"name": volume_name, "projected": token_volume_source()}));
        spec.insert("volumes".into(), Value::Array(volumes));
    }
}

impl MutatingAdmission for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    fn admit(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let Some(pod) = obj.filter(|_| applies(a)) else {
            return Ok(());
        };
        if is_mirror(pod) {
            return Ok(());
        }
        let mut name = account_name(pod);
        if name.is_empty() {
            name = DEFAULT_SERVICE_ACCOUNT.to_owned();
        }
        let account = lookup_account(lookup, a, pod, &name)?;
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        spec.insert("serviceAccountName".into(), json!(name));
        let automount = spec
            .get("automountServiceAccountToken")
            .and_then(Value::as_bool)
            .or_else(|| {
                account
                    .get("automountServiceAccountToken")
                    .and_then(Value::as_bool)
            })
            .unwrap_or(true);
        if automount {
            mount_token(spec);
        }
        let has_pull_secrets = spec
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .is_some_and(|v| !v.is_empty());
        if !has_pull_secrets
            && let Some(secrets) = account
                .get("imagePullSecrets")
                .and_then(Value::as_array)
                .filter(|v| !v.is_empty())
        {
            spec.insert("imagePullSecrets".into(), Value::Array(secrets.clone()));
        }
        Ok(())
    }
}

impl ValidatingAdmission for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    fn validate(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let Some(pod) = obj.filter(|_| applies(a)) else {
            return Ok(());
        };
        if is_mirror(pod) {
            return Ok(());
        }
        let name = account_name(pod);
        if name.is_empty() {
            return Ok(());
        }
        lookup_account(lookup, a, pod, &name).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_container_mounts_one_token_volume() {
        let mut spec = json!({
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {"name": "a", "image": "nginx"},
                {"name": "b", "image": "nginx", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}
            ],
            "volumes": [{"name": "own", "emptyDir": {}}]
        });
        let spec = spec.as_object_mut().unwrap();
        mount_token(spec);
        let volumes = spec["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2);
        let name = volumes[1]["name"].as_str().unwrap().to_owned();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5);
        assert_eq!(
            spec["initContainers"][0]["volumeMounts"][0]["name"],
            json!(name)
        );
        assert_eq!(
            spec["containers"][0]["volumeMounts"][0]["name"],
            json!(name)
        );
        assert_eq!(
            spec["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            volumes[1]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
    }
}
