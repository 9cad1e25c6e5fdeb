//! The APIServices as the proxy and discovery read them: parsed from the store's local state
//! and kept until the set of stored APIServices changes (a cheap fingerprint of their keys'
//! revisions is compared on each use, no JSON is decoded when nothing changed).

use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use serde_json::Value;

use crate::registry;
use crate::service_endpoint::ServiceRef;
use crate::storage::Storage;

/// One APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiService {
    /// `<version>.<group>`.
    pub name: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.version`.
    pub version: String,
    /// `spec.service`: `None` for a local group version.
    pub service: Option<ServiceRef>,
    /// `spec.caBundle`, PEM (decoded from its base64).
    pub ca_bundle: Vec<u8>,
    /// `spec.insecureSkipTLSVerify`.
    pub insecure: bool,
    /// `spec.groupPriorityMinimum`.
    pub group_priority: i64,
    /// `spec.versionPriority`.
    pub version_priority: i64,
    /// Whether the `Available` condition is `True`.
    pub available: bool,
    /// Whether it has an `Available` condition at all (its server was checked).
    pub checked: bool,
}

impl ApiService {
    /// Reads an APIService object (`None` when it is not one).
    pub fn parse(obj: &Value) -> Option<ApiService> {
        let name = obj["metadata"]["name"].as_str()?.to_owned();
        let spec = &obj["spec"];
        let service = spec["service"].as_object().map(|s| ServiceRef {
            namespace: s
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            name: s
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            port: s
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        });
        let ca_bundle = spec["caBundle"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        let available = obj["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
        });
        let checked = obj["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Available"));
        Some(ApiService {
            name,
            group: spec["group"].as_str().unwrap_or("").to_owned(),
            version: spec["version"].as_str().unwrap_or("").to_owned(),
            service,
            ca_bundle,
            insecure: spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false),
            group_priority: spec["groupPriorityMinimum"].as_i64().unwrap_or(0),
            version_priority: spec["versionPriority"].as_i64().unwrap_or(0),
            available,
            checked,
        })
    }
}

/// Every stored APIService, by name.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The APIServices in key (name) order.
    pub services: Vec<ApiService>,
}

impl Snapshot {
    /// The APIService `<version>.<group>`.
    pub fn get(&self, group: &str, version: &str) -> Option<&ApiService> {
        self.services
            .iter()
            .find(|s| s.group == group && s.version == version)
    }

    /// The remote (service-backed) APIServices.
    pub fn remote(&self) -> impl Iterator<Item = &ApiService> {
        self.services.iter().filter(|s| s.service.is_some())
    }

    /// Whether `group` is served only by remote APIServices.
    pub fn is_remote_group(&self, group: &str) -> bool {
        let mut of_group = self.services.iter().filter(|s| s.group == group).peekable();
        of_group.peek().is_some() && of_group.all(|s| s.service.is_some())
    }
}

/// Count and highest revision of the stored APIServices' keys.
type Fingerprint = (usize, i64);

/// The cached snapshot and what it was built from.
#[derive(Default)]
pub struct Table {
    cached: Mutex<(Option<Fingerprint>, Arc<Snapshot>)>,
}

impl Table {
    /// The current snapshot (rebuilt when the stored APIServices changed).
    pub fn snapshot(&self, storage: &Storage) -> Arc<Snapshot> {
        let Some(r) = registry::catalog::find("apiregistration.k8s.io", "v1", "apiservices") else {
            return Arc::default();
        };
        let (items, _) = storage.shared_list(&registry::prefix(r, ""));
        let fingerprint = (
            items.len(),
            items.iter().map(|i| i.revision).max().unwrap_or(0),
        );
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if cached.0 == Some(fingerprint) {
            return Arc::clone(&cached.1);
        }
        let services = items
            .iter()
            .filter_map(|i| serde_json::from_slice::<Value>(&i.value).ok())
            .filter_map(|v| ApiService::parse(&v))
            .collect();
        let snapshot = Arc::new(Snapshot { services });
        *cached = (Some(fingerprint), Arc::clone(&snapshot));
        snapshot
    }
}
