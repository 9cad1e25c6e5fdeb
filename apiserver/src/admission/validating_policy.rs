//! `ValidatingAdmissionPolicy` (admissionregistration.k8s.io/v1), as upstream's
//! `k8s.io/apiserver/pkg/admission/plugin/policy/validating` (v1.33) runs it: every stored
//! policy and its bindings, CEL expressions evaluated against the request.
//!
//! For each binding whose policy exists and whose `matchConstraints` (and the binding's
//! `matchResources`) match the request: the param objects are looked up (`paramKind` +
//! `paramRef`, by name or selector, `parameterNotFoundAction`), `matchConditions` filter,
//! `variables` are evaluated in order, then `validations`; a failed validation acts by the
//! binding's `validationActions` (Deny → the request is refused with the validation's
//! reason, 422 `Invalid` by default; Warn → a `Warning` header; Audit → the
//! `validation.policy.admission.k8s.io/validation_failure` audit annotation), and
//! `auditAnnotations` become `<policy>/<key>` audit annotations. Expressions that do not
//! compile or fail at run time, and misconfigured bindings, follow the policy's
//! `failurePolicy` (Fail by default).
//!
//! Policies and bindings are compiled once and kept until their keys change in the store:
//! a request checks the store revision, and when it moved, compares the revisions of the
//! policy and binding keys with those compiled; with no policy stored a request pays two
//! empty range reads at most.
//!
//! Policies see creates and updates, creates on subresources (`pods/eviction`,
//! `pods/binding`, `serviceaccounts/token`, [`super::subresource`]) and deletes (no
//! `object`, the stored object as `oldObject`, [`super::delete`]). Each variable is
//! converted to CEL only as far as the policy's expressions read it ([`super::cel_env`]).
//!
//! The `authorizer` variable ([`super::cel_authz`]) asks the authorizer the request was
//! authorized by, for the request's user.
//!
//! CONNECT requests (`pods/exec`, …) are evaluated for policies whose rules name `CONNECT`:
//! no `object` or `oldObject`, the options object (`PodExecOptions`, …) as
//! `request.options` and its kind as `request.kind`. Expressions are held to upstream's
//! cost limits ([`super::cel_cost`]); `status.typeChecking` is written by
//! [`super::policy_status`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube_cel::cel::{Context, ExecutionError, Program, Value as Cel};
use serde_json::{Map, Value, json};

use super::cel_cost;
use super::cel_env::Needs;
use super::{Attributes, Lookup, ValidatingAdmission, forbidden};
use crate::crd::cel::{go_error, plain_to_cel};
use crate::error::{ApiError, Result};
use crate::metrics::{POLICY_CHECKS, PolicyCheckLabels};

/// Storage prefix of the policies.
const POLICIES: &str = "/registry/admissionregistration.k8s.io/validatingadmissionpolicies/";
/// Storage prefix of the bindings.
const BINDINGS: &str = "/registry/admissionregistration.k8s.io/validatingadmissionpolicybindings/";
/// The audit annotation carrying failures of bindings with the `Audit` action.
const AUDIT_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

/// The plugin: the compiled policies and bindings, rebuilt when they change.
#[derive(Default)]
pub struct ValidatingAdmissionPolicy {
    cache: Mutex<Cache>,
}

/// What was compiled, and from which stored revisions.
#[derive(Default)]
struct Cache {
    /// The store revision last checked.
    checked_at: i64,
    /// Key and revision of every policy and binding compiled.
    signature: Vec<(Vec<u8>, i64)>,
    /// The compiled set.
    set: Arc<Vec<Pair>>,
}

/// A binding and the policy it binds.
struct Pair {
    policy: Arc<Policy>,
    binding: Binding,
    /// `apiserver_validating_admission_policy_check_total` of an admitted request (the
    /// common case), looked up once.
    admitted: std::sync::OnceLock<prometheus_client::metrics::counter::Counter>,
}

/// A CEL expression compiled once (or why it does not compile).
struct Expr {
    source: String,
    program: std::result::Result<Program, String>,
    /// Its cost as far as known without running it ([`super::cel_cost`]).
    cost: super::cel_cost::Static,
}

impl Expr {
    fn new(source: &str) -> Expr {
        let program = Program::compile(source).map_err(|e| e.to_string());
        let cost = match &program {
            Ok(p) => super::cel_cost::Static::of(p.expression()),
            Err(_) => super::cel_cost::Static::default(),
        };
        Expr {
            source: source.to_owned(),
            program,
            cost,
        }
    }
}

/// One entry of `spec.validations`.
struct Validation {
    expr: Expr,
    message: String,
    message_expression: Option<Expr>,
    reason: String,
}

/// A compiled policy.
struct Policy {
    name: String,
    /// `(apiVersion, kind)` of the params.
    param_kind: Option<(String, String)>,
    constraints: Matcher,
    conditions: Vec<(String, Expr)>,
    variables: Vec<(String, Expr)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, Expr)>,
    /// `failurePolicy: Fail` (the default).
    fail: bool,
    /// What the expressions read of each request variable.
    needs: VarNeeds,
}

/// What a policy's expressions read of `object`, `oldObject`, `request`, `params` and
/// `namespaceObject` (see [`super::cel_env`]).
struct VarNeeds {
    object: Needs,
    old: Needs,
    request: bool,
    params: Needs,
    namespace: Needs,
    authorizer: bool,
    /// `variables` is read (it is bound only then: binding a variable costs a conversion).
    variables: bool,
}

impl VarNeeds {
    fn new(policy: &Policy) -> VarNeeds {
        let programs =
            || {
                policy
                    .conditions
                    .iter()
                    .chain(&policy.variables)
                    .chain(&policy.audit_annotations)
                    .map(|(_, e)| e)
                    .chain(policy.validations.iter().flat_map(|v| {
                        std::iter::once(&v.expr).chain(v.message_expression.as_ref())
                    }))
                    .filter_map(|e| e.program.as_ref().ok())
            };
        VarNeeds {
            object: Needs::of("object", programs()),
            old: Needs::of("oldObject", programs()),
            request: Needs::of("request", programs()).used(),
            params: Needs::of("params", programs()),
            namespace: Needs::of("namespaceObject", programs()),
            authorizer: Needs::of("authorizer", programs()).used(),
            variables: Needs::of("variables", programs()).used(),
        }
    }
}

/// `spec.paramRef` of a binding.
struct ParamRef {
    name: String,
    namespace: String,
    selector: Option<Value>,
    /// `parameterNotFoundAction: Deny`.
    deny_missing: bool,
}

/// A compiled binding.
struct Binding {
    name: String,
    param_ref: Option<ParamRef>,
    resources: Option<Matcher>,
    deny: bool,
    warn: bool,
    audit: bool,
}

/// `matchConstraints` / `matchResources`.
struct Matcher {
    rules: Vec<Rule>,
    excluded: Vec<Rule>,
    namespace_selector: Option<Value>,
    object_selector: Option<Value>,
    /// `matchPolicy: Equivalent` (the default): any version of the group and resource.
    equivalent: bool,
}

/// One `resourceRules` entry.
struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
    scope: String,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn text(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
}

impl Rule {
    fn new(v: &Value) -> Rule {
        Rule {
            operations: strings(v.get("operations")),
            groups: strings(v.get("apiGroups")),
            versions: strings(v.get("apiVersions")),
            resources: strings(v.get("resources")),
            names: strings(v.get("resourceNames")),
            scope: v
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_owned(),
        }
    }

    /// Whether the rule covers the request.
    fn matches(&self, req: &Req<'_>, any_version: bool) -> bool {
        let any = |list: &[String], x: &str| list.iter().any(|i| i == "*" || i == x);
        let op_ok = any(&self.operations, req.attrs.operation.as_str());
        let group_ok = any(&self.groups, req.attrs.group);
        let version_ok = any_version || any(&self.versions, req.version);
        let (resource, sub) = (req.attrs.resource, req.attrs.subresource);
        // `resource` or `resource/subresource`, compared without building it.
        let is_full = |r: &str| match r.split_once('/') {
            None => sub.is_empty() && r == resource,
            Some((res, s)) => !sub.is_empty() && res == resource && s == sub,
        };
        let resource_ok = self.resources.iter().any(|r| {
            if r == "*/*" || is_full(r) {
                return true;
            }
            match r.split_once('/') {
                Some(("*", sub)) => sub == req.attrs.subresource,
                Some((res, "*")) => res == req.attrs.resource && !req.attrs.subresource.is_empty(),
                Some(_) => false,
                None => (r == "*" || r == req.attrs.resource) && req.attrs.subresource.is_empty(),
            }
        });
        let name_ok = self.names.is_empty() || self.names.iter().any(|n| n == req.name);
        let scope_ok = match self.scope.as_str() {
            "Cluster" => req.attrs.namespace.is_empty(),
            "Namespaced" => !req.attrs.namespace.is_empty(),
            _ => true,
        };
        op_ok && group_ok && version_ok && resource_ok && name_ok && scope_ok
    }
}

impl Matcher {
    fn new(v: &Value) -> Matcher {
        let rules = |k: &str| {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Rule::new).collect())
                .unwrap_or_default()
        };
        Matcher {
            rules: rules("resourceRules"),
            excluded: rules("excludeResourceRules"),
            namespace_selector: selector(v.get("namespaceSelector")),
            object_selector: selector(v.get("objectSelector")),
            equivalent: v.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
        }
    }

    /// Whether the request is covered; `empty_rules_match` for a binding's `matchResources`
    /// (which only narrows its policy's constraints).
    fn matches(&self, lookup: &Lookup<'_>, req: &Req<'_>, empty_rules_match: bool) -> bool {
        let ruled = if self.rules.is_empty() {
            empty_rules_match
        } else {
            self.rules.iter().any(|r| r.matches(req, self.equivalent))
        };
        if !ruled
            || self
                .excluded
                .iter()
                .any(|r| r.matches(req, self.equivalent))
        {
            return false;
        }
        if let Some(sel) = &self.object_selector {
            let labels = |o: Option<&Map<String, Value>>| {
                o.and_then(|o| o.get("metadata"))
                    .and_then(|m| m.get("labels"))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            if !selects(sel, &labels(req.obj)) && !selects(sel, &labels(req.old)) {
                return false;
            }
        }
        if let Some(sel) = &self.namespace_selector {
            let labels = if req.attrs.namespace.is_empty() {
                // Cluster-scoped requests: only Namespaces themselves are selected by labels.
                if req.attrs.is_core("namespaces") {
                    req.obj
                        .or(req.old)
                        .and_then(|o| o.get("metadata"))
                        .and_then(|m| m.get("labels"))
                        .cloned()
                        .unwrap_or(Value::Null)
                } else {
                    return true;
                }
            } else {
                req.namespace_object(lookup)
                    .as_ref()
                    .and_then(|n| n.get("metadata"))
                    .and_then(|m| m.get("labels"))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            if !selects(sel, &labels) {
                return false;
            }
        }
        true
    }
}

/// A label selector that selects something less than everything (`None` for an absent or
/// empty one, as the server defaults them to `{}`: nothing to look up per request).
fn selector(v: Option<&Value>) -> Option<Value> {
    let v = v?;
    let non_empty = |k: &str| {
        v.get(k).is_some_and(|x| match x {
            Value::Object(m) => !m.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => false,
        })
    };
    (non_empty("matchLabels") || non_empty("matchExpressions")).then(|| v.clone())
}

/// Whether a `metav1.LabelSelector` selects `labels` (an empty selector selects all).
fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|a| {
            a.iter().all(|r| {
                let value = label(&text(r, "key"));
                let values = strings(r.get("values"));
                match r.get("operator").and_then(Value::as_str) {
                    Some("In") => value.is_some_and(|v| values.iter().any(|x| x == v)),
                    Some("NotIn") => value.is_none_or(|v| !values.iter().any(|x| x == v)),
                    Some("Exists") => value.is_some(),
                    Some("DoesNotExist") => value.is_none(),
                    _ => false,
                }
            })
        });
    by_labels && by_expressions
}

impl Policy {
    fn new(obj: &Value) -> Policy {
        let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        let named = |k: &str, expr_key: &str| -> Vec<(String, Expr)> {
            spec.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            let name = if k == "auditAnnotations" {
                                text(c, "key")
                            } else {
                                text(c, "name")
                            };
                            (name, Expr::new(&text(c, expr_key)))
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let validations = spec
            .get("validations")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| Validation {
                        expr: Expr::new(&text(v, "expression")),
                        message: text(v, "message"),
                        message_expression: v
                            .get("messageExpression")
                            .and_then(Value::as_str)
                            .filter(|s| !s.trim().is_empty())
                            .map(Expr::new),
                        reason: text(v, "reason"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut policy = Policy {
            name: obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            param_kind: spec
                .get("paramKind")
                .map(|p| (text(p, "apiVersion"), text(p, "kind"))),
            constraints: Matcher::new(spec.get("matchConstraints").unwrap_or(&Value::Null)),
            conditions: named("matchConditions", "expression"),
            variables: named("variables", "expression"),
            validations,
            audit_annotations: named("auditAnnotations", "valueExpression"),
            fail: spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
            needs: VarNeeds {
                object: Needs::default(),
                old: Needs::default(),
                request: false,
                params: Needs::default(),
                namespace: Needs::default(),
                authorizer: false,
                variables: false,
            },
        };
        policy.needs = VarNeeds::new(&policy);
        policy
    }
}

impl Binding {
    /// The binding and the name of its policy.
    fn new(obj: &Value) -> (String, Binding) {
        let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
        let actions = strings(spec.get("validationActions"));
        let has = |a: &str| actions.iter().any(|x| x == a);
        let binding = Binding {
            name: obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            param_ref: spec.get("paramRef").map(|p| ParamRef {
                name: text(p, "name"),
                namespace: text(p, "namespace"),
                selector: p.get("selector").cloned(),
                deny_missing: p.get("parameterNotFoundAction").and_then(Value::as_str)
                    != Some("Allow"),
            }),
            resources: spec.get("matchResources").map(Matcher::new),
            deny: has("Deny"),
            warn: has("Warn"),
            audit: has("Audit"),
        };
        (text(&spec, "policyName"), binding)
    }
}

/// The request as the policies see it.
struct Req<'a> {
    attrs: &'a Attributes<'a>,
    version: &'a str,
    name: &'a str,
    obj: Option<&'a Map<String, Value>>,
    old: Option<&'a Map<String, Value>>,
    namespace: std::sync::OnceLock<Option<Map<String, Value>>>,
    /// The request's parsed path (for `authorizer.requestResource`).
    info: Option<&'a crate::request_info::RequestInfo>,
    /// A CONNECT's options object (`PodExecOptions`, …, with `kind` and `apiVersion`).
    options: Option<&'a Map<String, Value>>,
}

impl Req<'_> {
    /// The request's Namespace object (looked up once).
    fn namespace_object(&self, lookup: &Lookup<'_>) -> Option<Map<String, Value>> {
        self.namespace
            .get_or_init(|| {
                if self.attrs.namespace.is_empty() {
                    return None;
                }
                lookup
                    .get(&format!(
                        "/registry/core/namespaces/{}",
                        self.attrs.namespace
                    ))
                    .ok()
                    .flatten()
            })
            .clone()
    }

    /// The `request` variable (upstream's `admissionv1.AdmissionRequest`).
    fn request_value(&self) -> Value {
        let o = self.obj.or(self.old).or(self.options);
        let (api_version, kind) = o
            .map(|o| {
                (
                    o.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                    o.get("kind").and_then(Value::as_str).unwrap_or(""),
                )
            })
            .unwrap_or(("", ""));
        let version = api_version.rsplit('/').next().unwrap_or(self.version);
        // A CONNECT's kind is its options' (core v1), whatever the resource's group.
        let group = match self.options {
            Some(_) => "",
            None => self.attrs.group,
        };
        let kind = json!({ "group": group, "version": version, "kind": kind });
        let resource = json!({
            "group": self.attrs.group,
            "version": self.version,
            "resource": self.attrs.resource,
        });
        let user = self.attrs.user;
        // `request.options`: the CONNECT's options, else the write's options object.
        let options = match (self.options, self.attrs.operation) {
            (Some(o), _) => Value::Object(o.clone()),
            (None, op) => {
                let kind = match op {
                    super::Operation::Create => "CreateOptions",
                    super::Operation::Update => "UpdateOptions",
                    super::Operation::Delete => "DeleteOptions",
                    super::Operation::Connect => "",
                };
                let mut o = json!({ "kind": kind, "apiVersion": "meta.k8s.io/v1" });
                if self.attrs.dry_run {
                    o["dryRun"] = json!(["All"]);
                }
                o
            }
        };
        json!({
            "options": options,
            "kind": kind,
            "resource": resource,
            "subResource": self.attrs.subresource,
            "requestKind": kind,
            "requestResource": resource,
            "requestSubResource": self.attrs.subresource,
            "name": self.name,
            "namespace": self.attrs.namespace,
            "operation": self.attrs.operation.as_str(),
            "userInfo": {
                "username": user.name,
                "uid": user.uid,
                "groups": user.groups,
                "extra": user.extra,
            },
            "dryRun": self.attrs.dry_run,
        })
    }
}

/// What one binding decided about the request.
enum Outcome {
    /// Nothing to say (admitted, or not applicable).
    Admit,
    /// A validation failed (or an error under `failurePolicy: Fail`): message, reason and
    /// the index of the validation (`None` for errors not tied to one).
    Fail {
        message: String,
        reason: String,
        index: Option<usize>,
        error: bool,
    },
}

impl ValidatingAdmissionPolicy {
    /// The compiled set, rebuilt when a policy or binding changed since the last request.
    fn current(&self, lookup: &Lookup<'_>) -> Arc<Vec<Pair>> {
        let revision = lookup.storage.current_revision();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.checked_at == revision {
            return cache.set.clone();
        }
        let (policies, _) = lookup.storage.shared_list(POLICIES);
        let (bindings, _) = lookup.storage.shared_list(BINDINGS);
        let signature: Vec<(Vec<u8>, i64)> = policies
            .iter()
            .chain(&bindings)
            .map(|i| (i.key.to_vec(), i.revision))
            .collect();
        cache.checked_at = revision;
        if signature == cache.signature {
            return cache.set.clone();
        }
        let decode = |value: &[u8]| serde_json::from_slice::<Value>(value).ok();
        let compiled: BTreeMap<String, Arc<Policy>> = policies
            .iter()
            .filter_map(|i| decode(&i.value))
            .map(|v| {
                let p = Policy::new(&v);
                (p.name.clone(), Arc::new(p))
            })
            .collect();
        let set: Vec<Pair> = bindings
            .iter()
            .filter_map(|i| decode(&i.value))
            .filter_map(|v| {
                let (policy_name, binding) = Binding::new(&v);
                Some(Pair {
                    policy: compiled.get(&policy_name)?.clone(),
                    binding,
                    admitted: std::sync::OnceLock::new(),
                })
            })
            .collect();
        tracing::debug!(
            policies = compiled.len(),
            bindings = set.len(),
            "validating admission policies compiled"
        );
        cache.signature = signature;
        cache.set = Arc::new(set);
        cache.set.clone()
    }
}

impl ValidatingAdmission for ValidatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    fn validate(
        &self,
        lookup: &Lookup<'_>,
        attrs: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        self.check(lookup, attrs, obj, old, None)
    }

    fn connect(
        &self,
        lookup: &Lookup<'_>,
        attrs: &Attributes<'_>,
        options: &Map<String, Value>,
    ) -> Result<()> {
        self.check(lookup, attrs, None, None, Some(options))
    }
}

impl ValidatingAdmissionPolicy {
    /// Every binding matching the request, evaluated; `options` for a CONNECT.
    fn check(
        &self,
        lookup: &Lookup<'_>,
        attrs: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
        options: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let set = self.current(lookup);
        if set.is_empty() {
            return Ok(());
        }
        let current = super::shared();
        let info = current.as_ref().map(|r| &r.info);
        let version = info.map(|i| i.version.as_str()).unwrap_or("");
        let meta_name = obj
            .or(old)
            .and_then(|o| o.get("metadata"))
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str);
        let req = Req {
            attrs,
            version,
            name: meta_name.unwrap_or(attrs.name),
            obj,
            old,
            namespace: std::sync::OnceLock::new(),
            info,
            options,
        };
        let mut denied: Option<ApiError> = None;
        let mut audit_failures: Vec<Value> = Vec::new();
        for pair in set.iter() {
            let (policy, binding) = (&pair.policy, &pair.binding);
            if !policy.constraints.matches(lookup, &req, false)
                || binding
                    .resources
                    .as_ref()
                    .is_some_and(|m| !m.matches(lookup, &req, true))
            {
                continue;
            }
            let run = || evaluate(super::cel_env::root(), lookup, &req, policy, binding);
            let outcomes = match current.as_ref().and_then(|r| r.authorizer.as_ref()) {
                Some(a) if policy.needs.authorizer => {
                    super::cel_authz::with(a.0.clone(), attrs.user, run)
                }
                _ => run(),
            };
            for outcome in outcomes {
                let mut actions = Vec::new();
                let error_type;
                match outcome {
                    Outcome::Admit => {
                        pair.admitted
                            .get_or_init(|| {
                                POLICY_CHECKS
                                    .get_or_create(&PolicyCheckLabels {
                                        policy: policy.name.clone(),
                                        policy_binding: binding.name.clone(),
                                        error_type: "no_error".to_owned(),
                                        enforcement_action: "allow".to_owned(),
                                    })
                                    .clone()
                            })
                            .inc();
                        continue;
                    }
                    Outcome::Fail {
                        message,
                        reason,
                        index,
                        error,
                    } => {
                        error_type = if error { "invalid_error" } else { "no_error" };
                        if binding.deny {
                            actions.push("deny");
                            if denied.is_none() {
                                // Upstream names the object of the URL first (a
                                // CONNECT has no object of its own).
                                let named = (!attrs.name.is_empty())
                                    .then(|| json!({"metadata": {"name": attrs.name}}));
                                let target = named.as_ref().and_then(Value::as_object);
                                denied = Some(deny_error(
                                    attrs,
                                    target.or(obj).or(old),
                                    &policy.name,
                                    &binding.name,
                                    &message,
                                    &reason,
                                ));
                            }
                        }
                        if binding.warn {
                            actions.push("warn");
                            super::warn(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                                policy.name, binding.name
                            ));
                        }
                        if binding.audit {
                            actions.push("audit");
                            let mut failure = json!({
                                "message": message,
                                "policy": policy.name,
                                "binding": binding.name,
                                "validationActions": ["Audit"],
                            });
                            if let Some(i) = index {
                                failure["expressionIndex"] = json!(i);
                            }
                            audit_failures.push(failure);
                        }
                    }
                }
                POLICY_CHECKS
                    .get_or_create(&PolicyCheckLabels {
                        policy: policy.name.clone(),
                        policy_binding: binding.name.clone(),
                        error_type: error_type.to_owned(),
                        enforcement_action: actions.join(","),
                    })
                    .inc();
            }
        }
        if !audit_failures.is_empty() {
            super::audit_annotation(AUDIT_KEY, &Value::Array(audit_failures).to_string());
        }
        match denied {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Upstream's refusal: `admission.NewForbidden` text and details with the validation's reason
/// (`Invalid` when it has none) and that reason's code (`reasonToCode`: 403, 401, 413, else
/// 422), the `ValidatingAdmissionPolicy … denied request` sentence appended as a cause.
fn deny_error(
    attrs: &Attributes<'_>,
    obj: Option<&Map<String, Value>>,
    policy: &str,
    binding: &str,
    message: &str,
    reason: &str,
) -> ApiError {
    let why = format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"
    );
    let refused = forbidden(attrs, obj, &why);
    let mut details = refused
        .status()
        .get("details")
        .cloned()
        .unwrap_or(json!({}));
    details["causes"] = json!([{ "message": why }]);
    let reason = if reason.is_empty() { "Invalid" } else { reason };
    let code = match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    };
    ApiError::Status {
        code,
        reason: reason.to_owned(),
        message: refused.to_string(),
        details: Some(details),
    }
}

/// Evaluates one binding of `policy` for the request: one outcome per param object (one
/// when the policy has no params).
fn evaluate(
    root: &Context<'_>,
    lookup: &Lookup<'_>,
    req: &Req<'_>,
    policy: &Policy,
    binding: &Binding,
) -> Vec<Outcome> {
    let config_error = |message: String| {
        if policy.fail {
            vec![Outcome::Fail {
                message,
                reason: String::new(),
                index: None,
                error: true,
            }]
        } else {
            vec![Outcome::Admit]
        }
    };
    let params: Vec<Value> = match (&policy.param_kind, &binding.param_ref) {
        (None, _) => vec![Value::Null],
        (Some(_), None) => {
            return config_error(format!(
                "failed to configure binding: ValidatingAdmissionPolicy '{}' has paramKind but binding '{}' has no paramRef",
                policy.name, binding.name
            ));
        }
        (Some((api_version, kind)), Some(r)) => match params(lookup, req, api_version, kind, r) {
            Ok(found) if found.is_empty() => {
                if r.deny_missing {
                    return config_error(
                        "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".into(),
                    );
                }
                return vec![Outcome::Admit];
            }
            Ok(found) => found,
            Err(e) => return config_error(format!("failed to configure binding: {e}")),
        },
    };
    let needs = &policy.needs;
    let request = match needs.request {
        true => plain_to_cel(&req.request_value()),
        false => Cel::Null,
    };
    let object = needs.object.convert(req.obj);
    let old = needs.old.convert(req.old);
    let namespace = match needs.namespace.used() {
        true => needs
            .namespace
            .convert(req.namespace_object(lookup).as_ref()),
        false => Cel::Null,
    };
    params
        .iter()
        .map(|param| {
            // Only the variables the expressions read are bound (no expression can name
            // another: each binding converts its value into the interpreter's form).
            let mut scope = root.new_inner_scope();
            if needs.object.used() {
                scope.add_variable_from_value("object", object.clone());
            }
            if needs.old.used() {
                scope.add_variable_from_value("oldObject", old.clone());
            }
            if needs.request {
                scope.add_variable_from_value("request", request.clone());
            }
            if needs.params.used() {
                scope.add_variable_from_value("params", needs.params.convert(param.as_object()));
            }
            if needs.namespace.used() {
                scope.add_variable_from_value("namespaceObject", namespace.clone());
            }
            if needs.authorizer
                && let Some(info) = req.info
            {
                scope.add_variable_from_value("authorizer", super::cel_authz::variable(info));
            }
            evaluate_with(&mut scope, policy)
        })
        .collect()
}

/// The text of an expression's failure, as upstream's CEL filter words it.
fn expression_error(expr: &Expr, e: &ExecutionError) -> String {
    format!(
        "expression '{}' resulted in error: {}",
        expr.source,
        go_error(e)
    )
}

/// Runs `expr` in `scope` within upstream's cost limits, its cost taken from `budget`, or
/// says why it could not ([`cel_cost::BUDGET_ERROR`] once the budget is spent).
fn run(
    scope: &Context<'_>,
    expr: &Expr,
    budget: &cel_cost::Budget,
) -> std::result::Result<Cel, String> {
    let p = match &expr.program {
        Err(e) => return Err(format!("compilation failed: {}", e.trim())),
        Ok(p) => p,
    };
    let cost = match expr.cost.loops {
        true => cel_cost::runtime(p.expression(), scope, cel_cost::PER_CALL_LIMIT),
        false => expr.cost.nodes,
    };
    if cost > cel_cost::PER_CALL_LIMIT {
        return Err(format!(
            "expression '{}' resulted in error: {}",
            expr.source,
            cel_cost::CALL_LIMIT_ERROR
        ));
    }
    if !budget.spend(cost) {
        return Err(cel_cost::BUDGET_ERROR.to_owned());
    }
    p.execute(scope).map_err(|e| expression_error(expr, &e))
}

/// Match conditions, variables, validations and audit annotations of one policy with its
/// variables bound in `scope`.
fn evaluate_with(scope: &mut Context<'_>, policy: &Policy) -> Outcome {
    let error = |message: String| {
        if policy.fail {
            Outcome::Fail {
                message,
                reason: String::new(),
                index: None,
                error: true,
            }
        } else {
            Outcome::Admit
        }
    };
    // Variables are visible to match conditions, so they are bound first; one that fails is
    // left out (an expression using it then fails with "no such key").
    let budget = cel_cost::Budget::default();
    let mut variables: std::collections::HashMap<kube_cel::cel::objects::Key, Cel> =
        std::collections::HashMap::new();
    for (name, expr) in &policy.variables {
        if policy.needs.variables {
            scope.add_variable_from_value("variables", Cel::Map(variables.clone().into()));
        }
        match run(scope, expr, &budget) {
            Ok(v) => {
                variables.insert(
                    kube_cel::cel::objects::Key::String(Arc::new(name.clone())),
                    v,
                );
            }
            Err(e) if e == cel_cost::BUDGET_ERROR => return error(e),
            Err(_) => {}
        }
    }
    if policy.needs.variables {
        scope.add_variable_from_value("variables", Cel::Map(variables.into()));
    }
    for (name, expr) in &policy.conditions {
        match run(scope, expr, &budget) {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => return Outcome::Admit,
            Ok(_) => {
                return error(format!(
                    "failed to evaluate match condition '{name}': expression must evaluate to bool"
                ));
            }
            Err(e) => return error(format!("failed to evaluate match condition '{name}': {e}")),
        }
    }
    for (key, expr) in &policy.audit_annotations {
        if let Ok(Cel::String(v)) = run(scope, expr, &budget) {
            super::audit_annotation(&format!("{}/{key}", policy.name), &v);
        }
    }
    for (index, v) in policy.validations.iter().enumerate() {
        match run(scope, &v.expr, &budget) {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => {
                let fallback = if v.message.is_empty() {
                    format!("failed expression: {}", v.expr.source.trim())
                } else {
                    v.message.clone()
                };
                let message = match v
                    .message_expression
                    .as_ref()
                    .map(|m| run(scope, m, &budget))
                {
                    Some(Ok(Cel::String(s))) if !s.trim().is_empty() && !s.contains('\n') => {
                        s.trim().to_owned()
                    }
                    _ => fallback,
                };
                return Outcome::Fail {
                    message,
                    reason: v.reason.clone(),
                    index: Some(index),
                    error: false,
                };
            }
            Ok(_) => {
                return error(format!(
                    "expression '{}' resulted in error: validation expression must evaluate to bool",
                    v.expr.source
                ));
            }
            Err(e) => return error(e),
        }
    }
    Outcome::Admit
}

/// The param objects a binding names: by name or selector, in the `paramRef`'s namespace
/// (or the request's, for namespaced params).
fn params(
    lookup: &Lookup<'_>,
    req: &Req<'_>,
    api_version: &str,
    kind: &str,
    r: &ParamRef,
) -> std::result::Result<Vec<Value>, String> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let (prefix, namespaced) = param_prefix(lookup, group, version, kind).ok_or_else(|| {
        format!("failed to find resource referenced by paramKind: '{api_version}, Kind={kind}'")
    })?;
    let namespace = if !namespaced {
        String::new()
    } else if !r.namespace.is_empty() {
        r.namespace.clone()
    } else if req.attrs.namespace.is_empty() {
        return Err(
            "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                .into(),
        );
    } else {
        req.attrs.namespace.to_owned()
    };
    let scoped = if namespaced {
        format!("{prefix}{namespace}/")
    } else {
        prefix
    };
    if !r.name.is_empty() {
        return Ok(lookup
            .get(&format!("{scoped}{}", r.name))
            .map_err(|e| e.to_string())?
            .map(Value::Object)
            .into_iter()
            .collect());
    }
    let selector = r.selector.clone().unwrap_or(Value::Null);
    Ok(lookup
        .list(&scoped)
        .into_iter()
        .filter(|o| {
            let labels = o
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .cloned()
                .unwrap_or(Value::Null);
            selects(&selector, &labels)
        })
        .map(Value::Object)
        .collect())
}

/// Storage prefix of the resource of `kind` at `group/version` and whether it is
/// namespaced: a built-in resource, or a custom one from its stored CRD.
fn param_prefix(
    lookup: &Lookup<'_>,
    group: &str,
    version: &str,
    kind: &str,
) -> Option<(String, bool)> {
    if let Some(r) = crate::registry::catalog::BUILTIN.iter().find(|r| {
        r.group == group
            && r.version == version
            && r.kind == kind
            && matches!(r.kind_class, crate::registry::catalog::KindClass::Stored)
    }) {
        return Some((crate::registry::prefix(r, ""), r.namespaced));
    }
    lookup
        .list("/registry/apiextensions.k8s.io/customresourcedefinitions/")
        .into_iter()
        .find_map(|crd| {
            let spec = crd.get("spec")?;
            (spec.get("group")?.as_str()? == group
                && spec.pointer("/names/kind")?.as_str()? == kind)
                .then(|| {
                    let plural = spec.pointer("/names/plural")?.as_str()?;
                    Some((
                        format!("/registry/{group}/{plural}/"),
                        spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
                    ))
                })
                .flatten()
        })
}

#[cfg(test)]
// Table-style helpers take their JSON by value so cases read as literals.
#[allow(clippy::needless_pass_by_value, clippy::redundant_clone)]
mod tests {
    use super::*;
    use crate::admission::Operation;
    use crate::pipeline::UserInfo;
    use kube_cel::KubeCelExt as _;

    fn attrs<'a>(user: &'a UserInfo, resource: &'a str) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            group: "apps",
            resource,
            subresource: "",
            namespace: "default",
            name: "",
            user,
            dry_run: false,
        }
    }

    fn policy(spec: Value) -> Policy {
        Policy::new(&json!({ "metadata": { "name": "p" }, "spec": spec }))
    }

    fn outcome(p: &Policy, object: Value, params: Value) -> Outcome {
        let root = Context::default().with_all();
        let mut scope = root.new_inner_scope();
        scope.add_variable_from_value("object", plain_to_cel(&object));
        scope.add_variable_from_value("oldObject", Cel::Null);
        scope.add_variable_from_value("params", plain_to_cel(&params));
        scope.add_variable_from_value("request", plain_to_cel(&json!({"operation": "CREATE"})));
        scope.add_variable_from_value("namespaceObject", Cel::Null);
        evaluate_with(&mut scope, p)
    }

    fn message(o: Outcome) -> Option<(String, String)> {
        match o {
            Outcome::Admit => None,
            Outcome::Fail {
                message, reason, ..
            } => Some((message, reason)),
        }
    }

    #[test]
    fn rules_match_operations_groups_resources_and_scope() {
        let user = UserInfo::anonymous();
        let a = attrs(&user, "deployments");
        let req = Req {
            attrs: &a,
            version: "v1",
            name: "web",
            obj: None,
            old: None,
            namespace: std::sync::OnceLock::new(),
            info: None,
            options: None,
        };
        let rule = |v: Value| Rule::new(&v);
        let all = json!({"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]});
        assert!(rule(all.clone()).matches(&req, false));
        let mut other = all.clone();
        other["apiVersions"] = json!(["v1beta1"]);
        assert!(!rule(other.clone()).matches(&req, false));
        // Equivalent matching ignores the version.
        assert!(rule(other).matches(&req, true));
        let mut update = all.clone();
        update["operations"] = json!(["UPDATE"]);
        assert!(!rule(update).matches(&req, false));
        let mut cluster = all.clone();
        cluster["scope"] = json!("Cluster");
        assert!(!rule(cluster).matches(&req, false));
        let stars = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        assert!(rule(stars.clone()).matches(&req, false));
        let mut status = stars;
        status["resources"] = json!(["deployments/status"]);
        assert!(!rule(status).matches(&req, false));
    }

    #[test]
    fn selectors_use_match_labels_and_expressions() {
        let labels = json!({"env": "prod", "team": "a"});
        assert!(selects(&json!({}), &labels));
        // Defaulted empty selectors are not kept (nothing looked up per request).
        assert_eq!(selector(Some(&json!({}))), None);
        assert_eq!(selector(Some(&json!({"matchLabels": {}}))), None);
        assert!(selector(Some(&json!({"matchLabels": {"a": "b"}}))).is_some());
        assert!(selects(&json!({"matchLabels": {"env": "prod"}}), &labels));
        assert!(!selects(&json!({"matchLabels": {"env": "dev"}}), &labels));
        let expr = |op: &str, values: Value| json!({"matchExpressions": [{"key": "env", "operator": op, "values": values}]});
        assert!(selects(&expr("In", json!(["prod", "dev"])), &labels));
        assert!(!selects(&expr("NotIn", json!(["prod"])), &labels));
        assert!(selects(&expr("Exists", json!([])), &labels));
        assert!(!selects(&expr("DoesNotExist", json!([])), &labels));
        assert!(selects(&expr("DoesNotExist", json!([])), &Value::Null));
    }

    #[test]
    fn validations_report_message_expression_and_reason() {
        let p = policy(json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "variables": [{"name": "max", "expression": "int(params.data.maxReplicas)"}],
            "validations": [{
                "expression": "object.spec.replicas <= variables.max",
                "messageExpression": "'replicas must be no greater than ' + string(variables.max)",
                "reason": "Forbidden",
            }],
        }));
        let params = json!({"data": {"maxReplicas": "5"}});
        assert!(
            message(outcome(
                &p,
                json!({"spec": {"replicas": 3}}),
                params.clone()
            ))
            .is_none()
        );
        assert_eq!(
            message(outcome(&p, json!({"spec": {"replicas": 6}}), params)),
            Some((
                "replicas must be no greater than 5".into(),
                "Forbidden".into()
            ))
        );
        let plain = policy(json!({"validations": [{"expression": "object.spec.replicas < 2"}]}));
        assert_eq!(
            message(outcome(
                &plain,
                json!({"spec": {"replicas": 6}}),
                Value::Null
            )),
            Some((
                "failed expression: object.spec.replicas < 2".into(),
                String::new()
            ))
        );
    }

    #[test]
    fn errors_follow_the_failure_policy() {
        let failing = |fp: &str| {
            policy(json!({
                "failurePolicy": fp,
                "validations": [{"expression": "object.spec.missing > 1"}],
            }))
        };
        let o = message(outcome(&failing("Fail"), json!({"spec": {}}), Value::Null));
        assert_eq!(
            o.map(|(m, _)| m),
            Some(
                "expression 'object.spec.missing > 1' resulted in error: no such key: missing"
                    .into()
            )
        );
        assert!(
            message(outcome(
                &failing("Ignore"),
                json!({"spec": {}}),
                Value::Null
            ))
            .is_none()
        );
        let broken = policy(json!({"validations": [{"expression": "object.spec.("}]}));
        let o = message(outcome(&broken, json!({"spec": {}}), Value::Null));
        assert!(o.is_some_and(|(m, _)| m.starts_with("compilation failed: ")));
    }

    #[test]
    fn expressions_over_the_cost_limit_fail_by_the_failure_policy() {
        let xs: Vec<i64> = (0..120).collect();
        let object = json!({"spec": {"xs": xs}});
        let costly =
            "object.spec.xs.all(a, object.spec.xs.all(b, object.spec.xs.all(c, a + b + c >= 0)))";
        let p = |fp: &str| {
            policy(json!({"failurePolicy": fp, "validations": [{"expression": costly}]}))
        };
        assert_eq!(
            message(outcome(&p("Fail"), object.clone(), Value::Null)).map(|(m, _)| m),
            Some(format!(
                "expression '{costly}' resulted in error: operation cancelled: actual cost limit exceeded"
            ))
        );
        assert!(message(outcome(&p("Ignore"), object.clone(), Value::Null)).is_none());
        // One level less is well within the limit, and runs.
        let cheap = policy(
            json!({"validations": [{"expression": "object.spec.xs.all(a, object.spec.xs.all(b, a + b < 0))"}]}),
        );
        assert!(
            message(outcome(&cheap, object, Value::Null))
                .is_some_and(|(m, _)| m.starts_with("failed expression"))
        );
    }

    #[test]
    fn match_conditions_skip_the_policy() {
        let p = policy(json!({
            "matchConditions": [{"name": "big", "expression": "object.spec.replicas > 10"}],
            "validations": [{"expression": "false", "message": "no"}],
        }));
        assert!(message(outcome(&p, json!({"spec": {"replicas": 3}}), Value::Null)).is_none());
        assert!(message(outcome(&p, json!({"spec": {"replicas": 30}}), Value::Null)).is_some());
    }

    #[test]
    fn denials_read_like_upstream() {
        let user = UserInfo::anonymous();
        let a = attrs(&user, "deployments");
        let obj = json!({"metadata": {"name": "web"}});
        let why = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too many";
        let text = format!("deployments.apps \"web\" is forbidden: {why}");
        for (reason, code, sent) in [
            ("Forbidden", 403, "Forbidden"),
            ("", 422, "Invalid"),
            ("Invalid", 422, "Invalid"),
            ("Unauthorized", 401, "Unauthorized"),
            ("RequestEntityTooLarge", 413, "RequestEntityTooLarge"),
        ] {
            let e = deny_error(&a, obj.as_object(), "p", "b", "too many", reason);
            assert_eq!(e.to_string(), text);
            assert_eq!(e.code().as_u16(), code);
            assert_eq!(
                e.status(),
                json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": text,
                    "reason": sent,
                    "code": code,
                    "details": {
                        "name": "web",
                        "group": "apps",
                        "kind": "deployments",
                        "causes": [{ "message": why }],
                    },
                }),
                "{reason}"
            );
        }
    }
}
