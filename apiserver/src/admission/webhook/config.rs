//! Mutating and validating webhook configurations as the dispatcher uses them: parsed once
//! per stored revision from the store's local state, and the matching of a request against
//! a webhook (upstream's `generic.Webhook.ShouldCallHook`: namespaceSelector,
//! objectSelector, rules with matchPolicy).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};

use super::client::{self, ClientConfig};
use crate::registry;
use crate::storage::Storage;

/// One webhook of a configuration, with upstream's v1 defaults filled in.
#[derive(Debug, Clone)]
pub struct Hook {
    /// `webhooks[].name`.
    pub name: String,
    /// The configuration's name.
    pub configuration: String,
    /// Where it is reached.
    pub client: ClientConfig,
    /// `rules`.
    pub rules: Vec<Rule>,
    /// `failurePolicy: Ignore` (default `Fail`).
    pub ignore_failures: bool,
    /// `matchPolicy: Exact` (default `Equivalent`).
    pub exact: bool,
    /// `namespaceSelector`.
    pub namespace_selector: Selector,
    /// `objectSelector`.
    pub object_selector: Selector,
    /// `sideEffects` is `None` or `NoneOnDryRun`: may be called for dry-run requests.
    pub dry_run_safe: bool,
    /// `timeoutSeconds` (default 10).
    pub timeout: Duration,
    /// `admissionReviewVersions`.
    pub review_versions: Vec<String>,
    /// `reinvocationPolicy: IfNeeded` (mutating only).
    pub reinvoke: bool,
    /// `matchConditions`, compiled.
    pub match_conditions: Vec<Condition>,
    /// Where `clientConfig.url` is sent (or why it cannot be), worked out once with the
    /// configuration; `None` for a `clientConfig.service`, resolved at each call.
    pub url_target: Option<std::result::Result<client::Target, String>>,
}

/// One `matchConditions` entry, compiled when its configuration is parsed.
#[derive(Debug, Clone)]
pub struct Condition {
    /// `name`.
    pub name: String,
    /// `expression`, compiled (or why it does not compile).
    pub program: Arc<std::result::Result<kube_cel::cel::Program, String>>,
}

/// One entry of `rules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `operations` (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`, `*`).
    pub operations: Vec<String>,
    /// `apiGroups`.
    pub groups: Vec<String>,
    /// `apiVersions`.
    pub versions: Vec<String>,
    /// `resources`, `resource/subresource` with `*`.
    pub resources: Vec<String>,
    /// `scope`: `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

/// A label selector (`matchLabels` and `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// `matchLabels` and `matchExpressions`, as (key, operator, values).
    requirements: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    /// A selector from its JSON (absent: matches everything).
    pub fn parse(v: &Value) -> Selector {
        let mut requirements = Vec::new();
        if let Some(labels) = v["matchLabels"].as_object() {
            for (k, val) in labels {
                let val = val.as_str().unwrap_or("").to_owned();
                requirements.push((k.clone(), "In".to_owned(), vec![val]));
            }
        }
        for e in v["matchExpressions"].as_array().into_iter().flatten() {
            let values = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            requirements.push((
                e["key"].as_str().unwrap_or("").to_owned(),
                e["operator"].as_str().unwrap_or("").to_owned(),
                values,
            ));
        }
        Selector { requirements }
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` (a JSON object or null) match.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements
            .iter()
            .all(|(k, op, values)| match op.as_str() {
                "In" => get(k).is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => get(k).is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => get(k).is_some(),
                "DoesNotExist" => get(k).is_none(),
                _ => false,
            })
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The webhooks of one stored configuration, in their order.
pub fn parse_configuration(cfg: &Value, mutating: bool) -> Vec<Hook> {
    let configuration = cfg["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let mut hooks = Vec::new();
    for w in cfg["webhooks"].as_array().into_iter().flatten() {
        let rules = w["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| Rule {
                operations: strings(&r["operations"]),
                groups: strings(&r["apiGroups"]),
                versions: strings(&r["apiVersions"]),
                resources: strings(&r["resources"]),
                scope: r["scope"].as_str().unwrap_or("*").to_owned(),
            })
            .collect();
        let side_effects = w["sideEffects"].as_str().unwrap_or("Unknown");
        let client_config = ClientConfig::parse(&w["clientConfig"]);
        let timeout = Duration::from_secs(w["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30));
        let url_target = client_config
            .url
            .as_deref()
            .map(|url| client::parse_url(url, &client_config.ca_bundle, timeout));
        hooks.push(Hook {
            name: w["name"].as_str().unwrap_or("").to_owned(),
            configuration: configuration.clone(),
            client: client_config,
            url_target,
            rules,
            ignore_failures: w["failurePolicy"] == "Ignore",
            exact: w["matchPolicy"] == "Exact",
            namespace_selector: Selector::parse(&w["namespaceSelector"]),
            object_selector: Selector::parse(&w["objectSelector"]),
            dry_run_safe: matches!(side_effects, "None" | "NoneOnDryRun"),
            timeout,
            review_versions: strings(&w["admissionReviewVersions"]),
            reinvoke: mutating && w["reinvocationPolicy"] == "IfNeeded",
            match_conditions: w["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| Condition {
                    name: c["name"].as_str().unwrap_or("").to_owned(),
                    program: Arc::new(
                        kube_cel::cel::Program::compile(c["expression"].as_str().unwrap_or(""))
                            .map_err(|e| e.to_string()),
                    ),
                })
                .collect(),
        });
    }
    hooks
}

/// What a request is, for matching.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'a str,
    /// API group.
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Subresource (`""` for the main resource).
    pub subresource: &'a str,
    /// Namespace (`""` for cluster-scoped objects).
    pub namespace: &'a str,
}

impl Rule {
    /// Upstream's `rules.Matcher`: operation, group, version, resource/subresource, scope;
    /// `any_version` for matchPolicy Equivalent.
    pub fn matches(&self, t: &Target<'_>, any_version: bool) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        let scope = match self.scope.as_str() {
            "Cluster" => t.namespace.is_empty() || t.resource == "namespaces",
            "Namespaced" => !t.namespace.is_empty() && t.resource != "namespaces",
            _ => true,
        };
        let resource = self.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r, ""));
            (res == "*" || res == t.resource) && (sub == "*" || sub == t.subresource)
        });
        any(&self.operations, t.operation)
            && any(&self.groups, t.group)
            && (any_version || any(&self.versions, t.version))
            && resource
            && scope
    }
}

impl Hook {
    /// Whether the rules match `t` (Exact), or match it at another version (Equivalent).
    pub fn rules_match(&self, t: &Target<'_>) -> bool {
        self.rules.iter().any(|r| r.matches(t, false))
            || (!self.exact && self.rules.iter().any(|r| r.matches(t, true)))
    }
}

/// Upstream's exemption: webhooks are never called for the admission configuration
/// objects themselves (so a broken webhook can always be removed).
pub fn exempt(group: &str, resource: &str) -> bool {
    group == "admissionregistration.k8s.io"
        && matches!(
            resource,
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// The keys and revisions of the stored configurations, and their webhooks.
type Memo = (Vec<(Vec<u8>, i64)>, Arc<Vec<Hook>>);

/// The parsed webhooks of one configuration kind, following the stored configurations:
/// re-parsed whenever a key or revision changed (a check per request that costs one local
/// range read; nothing when none are stored).
pub struct Configurations {
    plural: &'static str,
    mutating: bool,
    memo: Mutex<Memo>,
}

impl Configurations {
    /// Follows `mutatingwebhookconfigurations` (`mutating`) or
    /// `validatingwebhookconfigurations`.
    pub fn new(mutating: bool) -> Configurations {
        Configurations {
            plural: if mutating {
                "mutatingwebhookconfigurations"
            } else {
                "validatingwebhookconfigurations"
            },
            mutating,
            memo: Mutex::new((Vec::new(), Arc::new(Vec::new()))),
        }
    }

    /// The webhooks now stored, configurations sorted by name (as upstream sorts them).
    pub fn current(&self, storage: &Storage) -> Arc<Vec<Hook>> {
        let Some(r) = registry::catalog::find("admissionregistration.k8s.io", "v1", self.plural)
        else {
            return Arc::new(Vec::new());
        };
        let (items, _) = storage.shared_list(&registry::prefix(r, ""));
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if items.is_empty() {
            if !memo.0.is_empty() {
                *memo = (Vec::new(), Arc::new(Vec::new()));
            }
            return Arc::clone(&memo.1);
        }
        // Unchanged (the common case): compared in place, nothing allocated.
        let unchanged = memo.0.len() == items.len()
            && memo
                .0
                .iter()
                .zip(&items)
                .all(|((key, rev), i)| *rev == i.revision && key[..] == i.key[..]);
        if !unchanged {
            let seen: Vec<(Vec<u8>, i64)> =
                items.iter().map(|i| (i.key.to_vec(), i.revision)).collect();
            let hooks = items
                .iter()
                .filter_map(|i| serde_json::from_slice::<Value>(&i.value).ok())
                .flat_map(|cfg| parse_configuration(&cfg, self.mutating))
                .collect();
            *memo = (seen, Arc::new(hooks));
        }
        Arc::clone(&memo.1)
    }
}

/// The labels of `obj`, if any.
pub fn labels(obj: Option<&Map<String, Value>>) -> Option<&Value> {
    obj.and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("labels"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target<'a>(op: &'a str, resource: &'a str, sub: &'a str, ns: &'a str) -> Target<'a> {
        Target {
            operation: op,
            group: "",
            version: "v1",
            resource,
            subresource: sub,
            namespace: ns,
        }
    }

    fn hook(rules: &Value) -> Hook {
        let cfg = json!({ "metadata": { "name": "c" }, "webhooks": [
            { "name": "h.example.com", "rules": rules, "sideEffects": "None",
              "admissionReviewVersions": ["v1"], "clientConfig": { "url": "https://x/" } }
        ] });
        parse_configuration(&cfg, true).remove(0)
    }

    #[test]
    fn rules_match_operations_resources_subresources_and_scope() {
        let h = hook(&json!([{ "operations": ["CREATE"], "apiGroups": [""],
            "apiVersions": ["v1"], "resources": ["pods"] }]));
        assert!(h.rules_match(&target("CREATE", "pods", "", "default")));
        assert!(!h.rules_match(&target("UPDATE", "pods", "", "default")));
        assert!(!h.rules_match(&target("CREATE", "pods", "status", "default")));
        let h = hook(&json!([{ "operations": ["*"], "apiGroups": ["*"],
            "apiVersions": ["*"], "resources": ["pods/status"], "scope": "Namespaced" }]));
        assert!(h.rules_match(&target("UPDATE", "pods", "status", "default")));
        assert!(!h.rules_match(&target("UPDATE", "pods", "", "default")));
        assert!(!h.rules_match(&target("UPDATE", "pods", "status", "")));
        let h = hook(&json!([{ "operations": ["CONNECT"], "apiGroups": [""],
            "apiVersions": ["v1"], "resources": ["*/*"] }]));
        assert!(h.rules_match(&target("CONNECT", "pods", "exec", "default")));
        let h = hook(&json!([{ "operations": ["*"], "apiGroups": [""],
            "apiVersions": ["v1"], "resources": ["*"], "scope": "Cluster" }]));
        assert!(h.rules_match(&target("CREATE", "nodes", "", "")));
        assert!(!h.rules_match(&target("CREATE", "nodes", "status", "")));
        assert!(!h.rules_match(&target("CREATE", "pods", "", "default")));
    }

    #[test]
    fn match_policy_equivalent_ignores_the_version_exact_does_not() {
        let mut h = hook(&json!([{ "operations": ["*"], "apiGroups": [""],
            "apiVersions": ["v2"], "resources": ["pods"] }]));
        assert!(h.rules_match(&target("CREATE", "pods", "", "default")));
        h.exact = true;
        assert!(!h.rules_match(&target("CREATE", "pods", "", "default")));
    }

    #[test]
    fn defaults_are_upstreams() {
        let h = hook(&json!([]));
        assert!(!h.ignore_failures && !h.exact && !h.reinvoke);
        assert_eq!(h.timeout, Duration::from_secs(10));
        assert!(h.dry_run_safe);
        assert_eq!(h.configuration, "c");
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let s = Selector::parse(&json!({ "matchLabels": { "a": "1" },
            "matchExpressions": [{ "key": "b", "operator": "NotIn", "values": ["x"] }] }));
        assert!(s.matches(Some(&json!({ "a": "1" }))));
        assert!(!s.matches(Some(&json!({ "a": "1", "b": "x" }))));
        assert!(!s.matches(None));
        assert!(Selector::parse(&Value::Null).matches(None));
        let e = Selector::parse(&json!({ "matchExpressions": [
            { "key": "skip", "operator": "DoesNotExist" }] }));
        assert!(e.matches(None) && !e.matches(Some(&json!({ "skip": "" }))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn configurations_follow_the_store_and_cost_little_when_none_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = store::StoreConfig::new("t", dir.path());
        let (node, _driver) = store::node::Node::start(&cfg).unwrap();
        let storage = Storage::new(node);
        let configs = Configurations::new(false);
        // Wait for the single member to lead.
        let key = "/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/c";
        let body = |hooks: Value| {
            serde_json::to_vec(&json!({ "metadata": { "name": "c" }, "webhooks": hooks })).unwrap()
        };
        let mut rev = 0;
        for _ in 0..100 {
            match storage.create(key, body(json!([{ "name": "a" }]))).await {
                Ok(r) => {
                    rev = r;
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        assert!(rev > 0);
        assert_eq!(configs.current(&storage)[0].name, "a");
        let rev = storage
            .update(key, body(json!([{ "name": "a" }, { "name": "b" }])), rev)
            .await
            .unwrap();
        assert_eq!(configs.current(&storage).len(), 2);
        storage.delete(key, rev).await.unwrap();
        assert!(configs.current(&storage).is_empty());
        let started = std::time::Instant::now();
        for _ in 0..10_000 {
            assert!(configs.current(&storage).is_empty());
        }
        let each = started.elapsed() / 10_000;
        println!("webhook configuration check, none stored: {each:?} per request");
        assert!(each < Duration::from_millis(1), "{each:?}");
    }

    #[test]
    fn configuration_objects_are_exempt() {
        assert!(exempt(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations"
        ));
        assert!(!exempt("", "pods"));
    }
}
