//! Admission (tier 2a of the pipeline): built-in plugins that see the decoded object of a
//! create, update or delete, as upstream's `k8s.io/apiserver/pkg/admission` chain does.
//!
//! Mutating plugins ([`MutatingAdmission`]) run after decoding and defaulting, before object
//! validation; validating plugins ([`ValidatingAdmission`]) run after validation, before
//! storage. Both run in upstream's plugin order (`AllOrderedPlugins`), and for dry-run
//! requests too (plugins with side effects must look at [`Attributes::dry_run`]). The
//! enabled set is upstream's default plus `NodeRestriction` (as kubeadm enables it),
//! changed by `--enable-admission-plugins` / `--disable-admission-plugins`.
//!
//! The handlers run the chain through [`Chain::admit`] and [`Chain::validate`]; who asks
//! (the user) and what for (the request info) come from the request scope set by
//! [`scope`] around each resource request.

pub mod cel_authz;
pub mod cel_cost;
pub mod cel_env;
pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod delete;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod policy_status;
pub mod priority;
pub mod resource_quota;
pub mod service_account;
pub mod storage_protection;
pub mod subresource;
pub mod taint_nodes;
pub mod validating_policy;
pub mod webhook;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{ApiError, GroupResource, Result};
use crate::pipeline::UserInfo;
use crate::request_info::RequestInfo;
use crate::storage::Storage;

/// What a request does to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A create (POST), including subresource creates such as `pods/eviction`.
    Create,
    /// An update or patch.
    Update,
    /// A delete.
    Delete,
    /// A CONNECT (`pods/exec`, `pods/attach`, `pods/portforward`, `pods/proxy`,
    /// `nodes/proxy`, …): no object, the options in `request.options`.
    Connect,
}

impl Operation {
    /// Upstream's name (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What a plugin is asked about (upstream's `admission.Attributes`).
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// The operation.
    pub operation: Operation,
    /// API group of the resource (`""` for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    /// Subresource (`""`, `status`, `eviction`, …).
    pub subresource: &'a str,
    /// Namespace (`""` for cluster-scoped objects).
    pub namespace: &'a str,
    /// Object name from the URL (`""` on create).
    pub name: &'a str,
    /// Who asks.
    pub user: &'a UserInfo,
    /// Whether the request is a dry run (plugins must not have side effects then).
    pub dry_run: bool,
}

impl Attributes<'_> {
    /// Whether this is about core/v1 `resource` (any subresource).
    pub fn is_core(&self, resource: &str) -> bool {
        self.group.is_empty() && self.resource == resource
    }
}

/// Upstream's `admission.NewForbidden`: `<resource> "<name>" is forbidden: <why>`, the
/// name taken from the object (its generateName before a name is generated; `Unknown`
/// without an object).
pub fn forbidden(
    attrs: &Attributes<'_>,
    obj: Option<&Map<String, Value>>,
    why: impl std::fmt::Display,
) -> ApiError {
    let meta = obj.and_then(|o| o.get("metadata"));
    let field = |f: &str| {
        meta.and_then(|m| m.get(f))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let name = [field("name"), field("generateName")]
        .into_iter()
        .find(|n| !n.is_empty())
        .unwrap_or_else(|| "Unknown".to_owned());
    let resource = GroupResource::new(attrs.group, attrs.resource);
    ApiError::Forbidden {
        message: format!("{resource} \"{name}\" is forbidden: {why}"),
        resource,
        name,
    }
}

/// What plugins may read: the store's local (cached) state, as upstream's plugins read
/// informer listers.
pub struct Lookup<'a> {
    storage: &'a Storage,
    decoded: &'a Decoded,
}

impl Lookup<'_> {
    /// The stored object under `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<Map<String, Value>>> {
        let stored = self
            .storage
            .get_local(key)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(stored.and_then(|s| self.decoded.decode(key, s.revision, &s.value)))
    }

    /// Every stored object under `prefix`.
    pub fn list(&self, prefix: &str) -> Vec<Map<String, Value>> {
        let (items, _) = self.storage.shared_list(prefix);
        items
            .into_iter()
            .filter_map(|i| {
                let key = std::str::from_utf8(&i.key).ok()?;
                self.decoded.decode(key, i.revision, &i.value)
            })
            .collect()
    }
}

/// The objects plugins read most (the namespace of every pod, the priority classes, service
/// accounts), kept decoded by key and revision: a lookup copies the tree instead of parsing
/// the stored JSON again. Bounded: cleared when it reaches [`Decoded::MAX`] entries.
#[derive(Default)]
pub struct Decoded(std::sync::Mutex<HashMap<String, Revised>>);

/// A decoded object and the revision it was stored at.
type Revised = (i64, Arc<Map<String, Value>>);

impl Decoded {
    /// Entries kept before the memo starts over.
    const MAX: usize = 4096;

    /// `bytes` (stored under `key` at `revision`) decoded, from the memo when it has them.
    fn decode(&self, key: &str, revision: i64, bytes: &[u8]) -> Option<Map<String, Value>> {
        if let Ok(memo) = self.0.lock()
            && let Some((rev, obj)) = memo.get(key)
            && *rev == revision
        {
            return Some(obj.as_ref().clone());
        }
        let obj: Map<String, Value> = serde_json::from_slice(bytes).ok()?;
        if let Ok(mut memo) = self.0.lock() {
            if memo.len() >= Self::MAX {
                memo.clear();
            }
            memo.insert(key.to_owned(), (revision, Arc::new(obj.clone())));
        }
        Some(obj)
    }
}

/// A plugin that may change the object (upstream's `MutationInterface`).
pub trait MutatingAdmission: Send + Sync {
    /// Upstream's plugin name.
    fn name(&self) -> &'static str;
    /// Admits (and may change) `obj`; `old` is the stored object on update and delete.
    fn admit(
        &self,
        lookup: &Lookup<'_>,
        attrs: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()>;
}

/// A plugin that only accepts or refuses (upstream's `ValidationInterface`).
pub trait ValidatingAdmission: Send + Sync {
    /// Upstream's plugin name.
    fn name(&self) -> &'static str;
    /// Accepts or refuses a CONNECT (`attrs.operation` is [`Operation::Connect`]) whose
    /// options object (`PodExecOptions`, …, with `kind` and `apiVersion`) is `options`.
    /// Only the plugins upstream runs on CONNECT look at it.
    fn connect(
        &self,
        _lookup: &Lookup<'_>,
        _attrs: &Attributes<'_>,
        _options: &Map<String, Value>,
    ) -> Result<()> {
        Ok(())
    }
    /// Accepts or refuses `obj`; `old` is the stored object on update and delete.
    fn validate(
        &self,
        lookup: &Lookup<'_>,
        attrs: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()>;
}

/// Upstream's plugin order (`AllOrderedPlugins`, kube-apiserver v1.33).
pub const ORDERED_PLUGINS: &[&str] = &[
    "AlwaysAdmit",
    "NamespaceAutoProvision",
    "NamespaceLifecycle",
    "NamespaceExists",
    "LimitPodHardAntiAffinityTopology",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "AlwaysPullImages",
    "ImagePolicyWebhook",
    "PodSecurity",
    "PodNodeSelector",
    "Priority",
    "DefaultTolerationSeconds",
    "PodTolerationRestriction",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DenyServiceExternalIPs",
    "PodTopologyLabels",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "AlwaysDeny",
];

/// The plugins Capstan implements. `NamespaceLifecycle`'s create half is built into the
/// create path (new objects in a missing or terminating namespace are refused, always on);
/// its delete half ([`namespace_lifecycle`]: immortal namespaces) is a plugin.
pub const IMPLEMENTED: &[&str] = &[
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// The plugins on without flags: upstream's defaults that Capstan implements, plus
/// `NodeRestriction` (kubeadm enables it with the Node authorizer).
pub const DEFAULT_ON: &[&str] = &[
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// The admission flags (kube-apiserver's names).
#[derive(Debug, Clone, Default)]
pub struct AdmissionConfig {
    /// `--enable-admission-plugins`: plugins to turn on besides the defaults.
    pub enable: Vec<String>,
    /// `--disable-admission-plugins`: plugins to turn off, defaults included.
    pub disable: Vec<String>,
}

impl AdmissionConfig {
    /// The enabled plugin names in upstream's order, or why the flags are refused.
    pub fn enabled(&self) -> std::result::Result<Vec<&'static str>, String> {
        let known = |name: &str| ORDERED_PLUGINS.contains(&name);
        for name in self.enable.iter().chain(&self.disable) {
            if !known(name) {
                return Err(format!("admission plugin {name:?} is unknown"));
            }
        }
        for name in &self.enable {
            if !IMPLEMENTED.contains(&name.as_str()) {
                return Err(format!(
                    "admission plugin {name:?} is not implemented by capstan (implemented: {})",
                    IMPLEMENTED.join(", ")
                ));
            }
            if self.disable.contains(name) {
                return Err(format!(
                    "{name} in enable-admission-plugins and disable-admission-plugins overlapped"
                ));
            }
        }
        Ok(ORDERED_PLUGINS
            .iter()
            .copied()
            .filter(|p| {
                (DEFAULT_ON.contains(p) || self.enable.iter().any(|e| e == p))
                    && !self.disable.iter().any(|d| d == p)
            })
            .collect())
    }
}

/// The enabled plugins, in order.
pub struct Chain {
    storage: Storage,
    /// Decoded objects plugins looked up.
    decoded: Decoded,
    /// Whether `ResourceQuota` charges new objects ([`Chain::charge`]).
    quota: bool,
    mutating: Vec<Box<dyn MutatingAdmission>>,
    validating: Vec<Box<dyn ValidatingAdmission>>,
    /// MutatingAdmissionWebhook and ValidatingAdmissionWebhook ([`Chain::admit_webhooks`],
    /// [`Chain::validate_webhooks`]).
    webhooks: webhook::Webhooks,
}

impl Chain {
    /// The chain the flags ask for.
    pub fn new(cfg: &AdmissionConfig, storage: Storage) -> std::result::Result<Chain, String> {
        let mut mutating: Vec<Box<dyn MutatingAdmission>> = Vec::new();
        let mut validating: Vec<Box<dyn ValidatingAdmission>> = Vec::new();
        let enabled = cfg.enabled()?;
        let quota = enabled.contains(&"ResourceQuota");
        let webhooks = webhook::Webhooks::new(
            enabled.contains(&"MutatingAdmissionWebhook"),
            enabled.contains(&"ValidatingAdmissionWebhook"),
        );
        for name in enabled {
            match name {
                "NamespaceLifecycle" => {
                    mutating.push(Box::new(namespace_lifecycle::NamespaceLifecycle))
                }
                "LimitRanger" => {
                    mutating.push(Box::new(limit_ranger::LimitRanger));
                    validating.push(Box::new(limit_ranger::LimitRanger));
                }
                "ServiceAccount" => {
                    mutating.push(Box::new(service_account::ServiceAccount));
                    validating.push(Box::new(service_account::ServiceAccount));
                }
                "NodeRestriction" => mutating.push(Box::new(node_restriction::NodeRestriction)),
                "TaintNodesByCondition" => {
                    mutating.push(Box::new(taint_nodes::TaintNodesByCondition))
                }
                "PodSecurity" => validating.push(Box::new(pod_security::PodSecurity)),
                "Priority" => {
                    mutating.push(Box::new(priority::Priority));
                    validating.push(Box::new(priority::Priority));
                }
                "ValidatingAdmissionPolicy" => {
                    validating.push(Box::new(
                        validating_policy::ValidatingAdmissionPolicy::default(),
                    ));
                    policy_status::spawn(storage.clone());
                }
                "DefaultTolerationSeconds" => mutating.push(Box::new(
                    default_toleration_seconds::DefaultTolerationSeconds,
                )),
                "DefaultStorageClass" => {
                    mutating.push(Box::new(default_storage_class::DefaultStorageClass))
                }
                "StorageObjectInUseProtection" => {
                    mutating.push(Box::new(storage_protection::StorageObjectInUseProtection))
                }
                // Built into the handlers' create path.
                _ => {}
            }
        }
        tracing::info!(
            mutating = ?mutating.iter().map(|p| p.name()).collect::<Vec<_>>(),
            validating = ?validating.iter().map(|p| p.name()).collect::<Vec<_>>(),
            quota,
            "admission plugins"
        );
        Ok(Chain {
            storage,
            decoded: Decoded::default(),
            quota,
            mutating,
            validating,
            webhooks,
        })
    }

    /// Whether the plugin called `name` runs.
    pub fn has(&self, name: &str) -> bool {
        self.mutating.iter().any(|p| p.name() == name)
            || self.validating.iter().any(|p| p.name() == name)
    }

    /// Waits, before a create is admitted, for what plugins look up and a controller is
    /// about to create: the `default` ServiceAccount of a new pod's namespace (upstream's
    /// ServiceAccount plugin looks it up live ten times, 100–200 ms apart).
    pub async fn settle(
        &self,
        operation: Operation,
        group: &str,
        resource: &str,
        namespace: &str,
        obj: &Map<String, Value>,
    ) {
        if operation != Operation::Create
            || !group.is_empty()
            || resource != "pods"
            || !self.mutating.iter().any(|p| p.name() == "ServiceAccount")
        {
            return;
        }
        if shared().is_none_or(|r| !r.info.subresource.is_empty()) {
            return;
        }
        service_account::wait_for_default(&self.storage, namespace, obj).await;
    }

    /// `ResourceQuota`, the last validating plugin: charges a new object to the quotas of
    /// its namespace (writing their `status.used`), or refuses it.
    pub async fn charge(
        &self,
        operation: Operation,
        group: &str,
        resource: &str,
        namespace: &str,
        dry_run: bool,
        obj: &Map<String, Value>,
    ) -> Result<()> {
        if !self.quota || operation != Operation::Create {
            return Ok(());
        }
        let Some(req) = shared() else {
            return Ok(());
        };
        let attrs = Attributes {
            operation,
            group,
            resource,
            subresource: &req.info.subresource,
            namespace,
            name: "",
            user: &req.user,
            dry_run,
        };
        resource_quota::charge(&self.storage, &attrs, obj).await
    }

    /// Runs the mutating plugins for the current request (see [`scope`]); nothing runs
    /// outside a request.
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        operation: Operation,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
        dry_run: bool,
        mut obj: Option<&mut Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let Some(req) = shared() else {
            return Ok(());
        };
        let attrs = Attributes {
            operation,
            group,
            resource,
            subresource: &req.info.subresource,
            namespace,
            name,
            user: &req.user,
            dry_run,
        };
        let lookup = Lookup {
            storage: &self.storage,
            decoded: &self.decoded,
        };
        for plugin in &self.mutating {
            plugin.admit(&lookup, &attrs, obj.as_deref_mut(), old)?;
        }
        Ok(())
    }

    /// Runs the validating plugins for the current request (see [`scope`]).
    #[allow(clippy::too_many_arguments)]
    pub fn validate(
        &self,
        operation: Operation,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
        dry_run: bool,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let Some(req) = shared() else {
            return Ok(());
        };
        let attrs = Attributes {
            operation,
            group,
            resource,
            subresource: &req.info.subresource,
            namespace,
            name,
            user: &req.user,
            dry_run,
        };
        let lookup = Lookup {
            storage: &self.storage,
            decoded: &self.decoded,
        };
        for plugin in &self.validating {
            plugin.validate(&lookup, &attrs, obj, old)?;
        }
        Ok(())
    }
}

impl Chain {
    /// MutatingAdmissionWebhook for the current request (after [`Chain::admit`]): the
    /// matching mutating webhooks, in order, may patch `obj`. A cheap check when no
    /// configuration is stored; nothing runs outside a request.
    #[allow(clippy::too_many_arguments)]
    pub async fn admit_webhooks(
        &self,
        operation: Operation,
        r: &crate::registry::catalog::ResourceInfo,
        namespace: &str,
        name: &str,
        dry_run: bool,
        obj: Option<&mut Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let hooks = self.webhooks.mutating(&self.storage);
        if hooks.is_empty() {
            return Ok(());
        }
        let Some(req) = shared() else {
            return Ok(());
        };
        let stored = self.stored_if_delete(operation, r, namespace, name, old);
        let name = webhook_name(name, obj.as_deref());
        let call = webhook::Call {
            operation: operation.as_str(),
            resource: r,
            subresource: &req.info.subresource,
            namespace,
            name: &name,
            dry_run,
            user: &req.user,
            options_kind: None,
            object_json: None,
        };
        webhook::mutate(&self.storage, &hooks, &call, obj, old.or(stored.as_ref())).await
    }

    /// Whether any validating webhook is configured: a create then encodes its object once,
    /// for the reviews and the store ([`Chain::validate_webhooks`]).
    pub fn has_validating_webhooks(&self) -> bool {
        !self.webhooks.validating(&self.storage).is_empty()
    }

    /// ValidatingAdmissionWebhook for the current request (after [`Chain::validate`]);
    /// `obj_json`, when given, is `obj` already encoded (its stored JSON), which the reviews
    /// carry as it is.
    #[allow(clippy::too_many_arguments)]
    pub async fn validate_webhooks(
        &self,
        operation: Operation,
        r: &crate::registry::catalog::ResourceInfo,
        namespace: &str,
        name: &str,
        dry_run: bool,
        obj: Option<&Map<String, Value>>,
        obj_json: Option<&[u8]>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let hooks = self.webhooks.validating(&self.storage);
        if hooks.is_empty() {
            return Ok(());
        }
        let Some(req) = shared() else {
            return Ok(());
        };
        let stored = self.stored_if_delete(operation, r, namespace, name, old);
        let name = webhook_name(name, obj);
        let call = webhook::Call {
            operation: operation.as_str(),
            resource: r,
            subresource: &req.info.subresource,
            namespace,
            name: &name,
            dry_run,
            user: &req.user,
            options_kind: None,
            object_json: obj_json,
        };
        webhook::validate(&self.storage, &hooks, &call, obj, old.or(stored.as_ref())).await
    }

    /// The admission of a CONNECT of the current request (`pods/exec`, `pods/attach`,
    /// `pods/portforward`, `pods/proxy`, `nodes/proxy`): both webhook plugins, whose object
    /// is the options built from the query, of kind `options_kind` (`PodExecOptions`, …),
    /// and between them the validating plugins' [`ValidatingAdmission::connect`]
    /// (ValidatingAdmissionPolicy, which sees the options as `request.options`).
    pub async fn connect_webhooks(
        &self,
        r: &crate::registry::catalog::ResourceInfo,
        namespace: &str,
        name: &str,
        options_kind: &str,
        mut options: Map<String, Value>,
    ) -> Result<()> {
        let Some(req) = shared() else {
            return Ok(());
        };
        let mutating = self.webhooks.mutating(&self.storage);
        let validating = self.webhooks.validating(&self.storage);
        let call = webhook::Call {
            operation: "CONNECT",
            resource: r,
            subresource: &req.info.subresource,
            namespace,
            name,
            dry_run: false,
            user: &req.user,
            options_kind: Some(options_kind),
            object_json: None,
        };
        options.insert("kind".into(), Value::from(options_kind));
        options.insert("apiVersion".into(), Value::from("v1"));
        if !mutating.is_empty() {
            webhook::mutate(&self.storage, &mutating, &call, Some(&mut options), None).await?;
        }
        // ValidatingAdmissionPolicy, between the two webhook plugins as upstream orders them.
        let attrs = Attributes {
            operation: Operation::Connect,
            group: r.group,
            resource: r.plural,
            subresource: &req.info.subresource,
            namespace,
            name,
            user: &req.user,
            dry_run: false,
        };
        let lookup = Lookup {
            storage: &self.storage,
            decoded: &self.decoded,
        };
        for plugin in &self.validating {
            plugin.connect(&lookup, &attrs, &options)?;
        }
        if validating.is_empty() {
            return Ok(());
        }
        webhook::validate(&self.storage, &validating, &call, Some(&options), None).await
    }

    /// The stored object a delete is about (its `oldObject`), when the caller has none.
    fn stored_if_delete(
        &self,
        operation: Operation,
        r: &crate::registry::catalog::ResourceInfo,
        namespace: &str,
        name: &str,
        old: Option<&Map<String, Value>>,
    ) -> Option<Map<String, Value>> {
        if operation != Operation::Delete || old.is_some() {
            return None;
        }
        let lookup = Lookup {
            storage: &self.storage,
            decoded: &self.decoded,
        };
        let stored = lookup
            .get(&crate::registry::key(r, namespace, name))
            .ok()??;
        Some(crate::registry::convert::from_storage(r, stored))
    }
}

/// The name a webhook is told: the URL's, else the object's.
fn webhook_name(name: &str, obj: Option<&Map<String, Value>>) -> String {
    if !name.is_empty() {
        return name.to_owned();
    }
    obj.and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Who makes the request being served and what it is about.
#[derive(Debug, Clone)]
pub struct Request {
    /// The (possibly impersonated) user.
    pub user: UserInfo,
    /// The parsed request.
    pub info: RequestInfo,
    /// Warnings plugins add, returned as `Warning` headers.
    pub warnings: Warnings,
    /// The request's audit state, for plugins' audit annotations.
    pub audit: Option<crate::audit::AuditHandle>,
    /// The authorizer the request was authorized by (CEL's `authorizer` variable).
    pub authorizer: Option<crate::pipeline::AuthorizerHandle>,
}

/// Warnings collected while serving a request (upstream's `warning.AddWarning`).
#[derive(Debug, Clone, Default)]
pub struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    /// Adds a warning (duplicates are dropped, as upstream's recorder does).
    pub fn add(&self, text: String) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !w.contains(&text) {
            w.push(text);
        }
    }

    /// The warnings so far.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Adds a warning to the current request's response (nothing outside a request).
pub fn warn(text: String) {
    let _ = REQUEST.try_with(|r| r.warnings.add(text));
}

/// Adds an annotation to the current request's audit events, if auditing is on.
pub fn audit_annotation(key: &str, value: &str) {
    let _ = REQUEST.try_with(|r| {
        if let Some(a) = &r.audit {
            a.add_annotation(key, value);
        }
    });
}

tokio::task_local! {
    static REQUEST: Arc<Request>;
}

/// Runs `fut` (a resource request's handler) with `req` as the request admission sees.
pub async fn scope<F: Future>(req: Request, fut: F) -> F::Output {
    REQUEST.scope(Arc::new(req), fut).await
}

/// The request being served, if any (a copy).
pub fn current() -> Option<Request> {
    REQUEST.try_with(|r| Request::clone(r)).ok()
}

/// The request being served, if any, shared (no copy of its user and path).
pub fn shared() -> Option<Arc<Request>> {
    REQUEST.try_with(Arc::clone).ok()
}

/// Reads a string at `path` in `v` (`""` when absent).
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_upstreams_order_and_names() {
        let cfg = AdmissionConfig {
            enable: vec![],
            disable: vec!["ServiceAccount".into()],
        };
        assert_eq!(
            cfg.enabled().unwrap(),
            vec![
                "NamespaceLifecycle",
                "LimitRanger",
                "NodeRestriction",
                "TaintNodesByCondition",
                "PodSecurity",
                "Priority",
                "DefaultTolerationSeconds",
                "DefaultStorageClass",
                "StorageObjectInUseProtection",
                "MutatingAdmissionWebhook",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionWebhook",
                "ResourceQuota"
            ]
        );
        let unknown = AdmissionConfig {
            enable: vec!["Bogus".into()],
            disable: vec![],
        };
        assert_eq!(
            unknown.enabled().unwrap_err(),
            "admission plugin \"Bogus\" is unknown"
        );
        let not_here = AdmissionConfig {
            enable: vec!["AlwaysPullImages".into()],
            disable: vec![],
        };
        assert!(not_here.enabled().is_err());
        let off = AdmissionConfig {
            enable: vec![],
            disable: vec!["PodSecurity".into()],
        };
        assert_eq!(off.enabled().unwrap().len(), 13);
    }

    #[test]
    fn lookups_decode_each_stored_revision_once() {
        let memo = Decoded::default();
        let a = memo.decode("/k", 5, br#"{"a":1}"#).unwrap();
        assert_eq!(a["a"], 1);
        // Same key and revision: the memo answers (the bytes are not read again).
        assert_eq!(memo.decode("/k", 5, b"not json"), Some(a));
        // A newer revision is decoded from its bytes.
        assert_eq!(memo.decode("/k", 6, br#"{"a":2}"#).unwrap()["a"], 2);
        assert_eq!(memo.decode("/other", 6, b"not json"), None);
    }
}
