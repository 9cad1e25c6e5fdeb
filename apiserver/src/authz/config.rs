//! `--authorization-config`: the structured AuthorizationConfiguration
//! (`apiserver.config.k8s.io/v1`, `v1beta1` or `v1alpha1`, YAML or JSON) that replaces
//! `--authorization-mode` and the `--authorization-webhook-*` flags. Its `authorizers` form
//! the chain in order: `Node`, `RBAC`, `AlwaysAllow` and `AlwaysDeny` at most once each, any
//! number of `Webhook`s, each with its own kubeconfig (`connectionInfo.type:
//! KubeConfigFile`), `timeout`, SubjectAccessReview version, cache TTLs, `failurePolicy`
//! (`NoOpinion` or `Deny` when the webhook fails) and CEL `matchConditions` over `request`
//! (the SubjectAccessReview spec) that must all hold for the webhook to be asked. The file is
//! validated as upstream validates it, with its field paths; it is read once at start-up
//! (upstream also reloads it when it changes).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// One authorizer of the file, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthorizerSpec {
    /// `type: Node`.
    Node,
    /// `type: RBAC`.
    Rbac,
    /// `type: AlwaysAllow`.
    AlwaysAllow,
    /// `type: AlwaysDeny`.
    AlwaysDeny,
    /// `type: Webhook`.
    Webhook(WebhookSpec),
}

/// A `type: Webhook` authorizer's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSpec {
    /// `name`.
    pub name: String,
    /// `webhook.timeout` (1 s – 30 s).
    pub timeout: Duration,
    /// `webhook.subjectAccessReviewVersion`.
    pub version: String,
    /// `webhook.authorizedTTL` (default 5 m); zero when `cacheAuthorizedRequests` is false.
    pub authorized_ttl: Duration,
    /// `webhook.unauthorizedTTL` (default 30 s); zero when `cacheUnauthorizedRequests` is
    /// false.
    pub unauthorized_ttl: Duration,
    /// `webhook.failurePolicy: Deny` (else `NoOpinion`).
    pub deny_on_failure: bool,
    /// `webhook.connectionInfo.kubeConfigFile`.
    pub kubeconfig: std::path::PathBuf,
    /// `webhook.matchConditions[].expression`.
    pub match_conditions: Vec<String>,
}

/// Go's `time.ParseDuration` for the units a configuration uses (h, m, s, ms; `1m30s`).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("time: invalid duration {s:?}");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return Err(bad()),
        };
        total += Duration::from_secs_f64(n * secs);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Whether `s` is a DNS-1123 subdomain.
fn is_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Reads and validates the file at `path`.
pub fn load(path: &Path) -> Result<Vec<AuthorizerSpec>, String> {
    let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let value: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(_) => serde_saphyr::from_slice(&text)
            .map_err(|e| format!("{}: invalid YAML: {e}", path.display()))?,
    };
    parse(&value).map_err(|e| format!("{}: {e}", path.display()))
}

/// Validates an AuthorizationConfiguration; every error, `; `-joined.
pub fn parse(config: &Value) -> Result<Vec<AuthorizerSpec>, String> {
    let api_version = config["apiVersion"].as_str().unwrap_or_default();
    let versions = [
        "apiserver.config.k8s.io/v1",
        "apiserver.config.k8s.io/v1beta1",
        "apiserver.config.k8s.io/v1alpha1",
    ];
    if !versions.contains(&api_version) || config["kind"] != "AuthorizationConfiguration" {
        return Err(format!(
            "no kind \"{}\" is registered for version \"{api_version}\"",
            config["kind"].as_str().unwrap_or_default()
        ));
    }
    let mut errors = Vec::new();
    let empty = Vec::new();
    let authorizers = config["authorizers"].as_array().unwrap_or(&empty);
    if authorizers.is_empty() {
        errors.push(
            "authorizers: Required value: at least one authorization mode must be defined"
                .to_owned(),
        );
    }
    let mut specs = Vec::new();
    let mut types = std::collections::HashSet::new();
    let mut names = std::collections::HashSet::new();
    for (i, a) in authorizers.iter().enumerate() {
        let at = format!("authorizers[{i}]");
        let kind = a["type"].as_str().unwrap_or_default();
        let name = a["name"].as_str().unwrap_or_default();
        if kind.is_empty() {
            errors.push(format!("{at}.type: Required value"));
            continue;
        }
        if name.is_empty() {
            errors.push(format!("{at}.name: Required value"));
        } else if !is_subdomain(name) {
            errors.push(format!(
                "{at}.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ));
        } else if !names.insert(name.to_owned()) {
            errors.push(format!("{at}.name: Duplicate value: {name:?}"));
        }
        if kind != "Webhook" && !types.insert(kind.to_owned()) {
            errors.push(format!("{at}.type: Duplicate value: {kind:?}"));
            continue;
        }
        let has_webhook = !a["webhook"].is_null();
        match kind {
            "Webhook" => match webhook(&at, name, &a["webhook"]) {
                Ok(spec) => specs.push(AuthorizerSpec::Webhook(spec)),
                Err(mut e) => errors.append(&mut e),
            },
            "Node" | "RBAC" | "AlwaysAllow" | "AlwaysDeny" if has_webhook => errors.push(
                format!("{at}.webhook: Invalid value: \"non-null\": non-null webhook config is only allowed for type Webhook"),
            ),
            "Node" => specs.push(AuthorizerSpec::Node),
            "RBAC" => specs.push(AuthorizerSpec::Rbac),
            "AlwaysAllow" => specs.push(AuthorizerSpec::AlwaysAllow),
            "AlwaysDeny" => specs.push(AuthorizerSpec::AlwaysDeny),
            other => errors.push(format!(
                "{at}.type: Unsupported value: {other:?}: supported values: \"AlwaysAllow\", \"AlwaysDeny\", \"Node\", \"RBAC\", \"Webhook\""
            )),
        }
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors.join("; "))
    }
}

/// A `webhook` block, validated.
fn webhook(at: &str, name: &str, w: &Value) -> Result<WebhookSpec, Vec<String>> {
    let at = format!("{at}.webhook");
    let mut errors = Vec::new();
    if w.is_null() {
        return Err(vec![format!(
            "{at}: Required value: required when type=Webhook"
        )]);
    }
    let text = |field: &str| w[field].as_str().unwrap_or_default().to_owned();
    let duration =
        |field: &str, default: Duration, errors: &mut Vec<String>| match w[field].as_str() {
            None => default,
            Some(s) => parse_go_duration(s).unwrap_or_else(|e| {
                errors.push(format!("{at}.{field}: Invalid value: {s:?}: {e}"));
                default
            }),
        };
    let timeout = duration("timeout", Duration::ZERO, &mut errors);
    if w["timeout"].is_null() {
        errors.push(format!("{at}.timeout: Required value"));
    } else if timeout.is_zero() || timeout > Duration::from_secs(30) {
        errors.push(format!(
            "{at}.timeout: Invalid value: {:?}: must be > 0s and <= 30s",
            text("timeout")
        ));
    }
    let mut authorized_ttl = duration("authorizedTTL", Duration::from_secs(300), &mut errors);
    let mut unauthorized_ttl = duration("unauthorizedTTL", Duration::from_secs(30), &mut errors);
    if w["cacheAuthorizedRequests"] == false {
        authorized_ttl = Duration::ZERO;
    }
    if w["cacheUnauthorizedRequests"] == false {
        unauthorized_ttl = Duration::ZERO;
    }
    let version = text("subjectAccessReviewVersion");
    match version.as_str() {
        "v1" | "v1beta1" => {}
        "" => errors.push(format!("{at}.subjectAccessReviewVersion: Required value")),
        other => errors.push(format!(
            "{at}.subjectAccessReviewVersion: Unsupported value: {other:?}: supported values: \"v1\", \"v1beta1\""
        )),
    }
    let policy = text("failurePolicy");
    match policy.as_str() {
        "NoOpinion" | "Deny" => {}
        "" => errors.push(format!("{at}.failurePolicy: Required value")),
        other => errors.push(format!(
            "{at}.failurePolicy: Unsupported value: {other:?}: supported values: \"Deny\", \"NoOpinion\""
        )),
    }
    let info = &w["connectionInfo"];
    let kubeconfig = info["kubeConfigFile"].as_str().unwrap_or_default();
    match info["type"].as_str().unwrap_or_default() {
        "KubeConfigFile" if kubeconfig.is_empty() => errors.push(format!(
            "{at}.connectionInfo.kubeConfigFile: Required value"
        )),
        "KubeConfigFile" if !Path::new(kubeconfig).is_absolute() => errors.push(format!(
            "{at}.connectionInfo.kubeConfigFile: Invalid value: {kubeconfig:?}: must be an absolute path"
        )),
        "KubeConfigFile" => {}
        "InClusterConfig" => errors.push(format!(
            "{at}.connectionInfo.type: Unsupported value: \"InClusterConfig\": this server is not run in a cluster: use KubeConfigFile"
        )),
        "" => errors.push(format!("{at}.connectionInfo.type: Required value")),
        other => errors.push(format!(
            "{at}.connectionInfo.type: Unsupported value: {other:?}: supported values: \"InClusterConfig\", \"KubeConfigFile\""
        )),
    }
    let mut match_conditions = Vec::new();
    if let Some(conditions) = w["matchConditions"].as_array().filter(|c| !c.is_empty()) {
        if text("matchConditionSubjectAccessReviewVersion") != "v1" {
            errors.push(format!(
                "{at}.matchConditionSubjectAccessReviewVersion: {}",
                match text("matchConditionSubjectAccessReviewVersion").as_str() {
                    "" => "Required value".to_owned(),
                    other => format!("Unsupported value: {other:?}: supported values: \"v1\""),
                }
            ));
        }
        if conditions.len() > 64 {
            errors.push(format!(
                "{at}.matchConditions: Too many: {}: must have at most 64 items",
                conditions.len()
            ));
        }
        for (j, c) in conditions.iter().enumerate() {
            let expression = c["expression"].as_str().unwrap_or_default();
            let cat = format!("{at}.matchConditions[{j}].expression");
            if expression.trim().is_empty() {
                errors.push(format!("{cat}: Required value"));
            } else if match_conditions.iter().any(|e| e == expression) {
                errors.push(format!("{cat}: Duplicate value: {expression:?}"));
            } else if let Err(e) = kube_cel::cel::Program::compile(expression) {
                errors.push(format!(
                    "{cat}: Invalid value: {expression:?}: compilation failed: {e}"
                ));
            } else {
                match_conditions.push(expression.to_owned());
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(WebhookSpec {
        name: name.to_owned(),
        timeout,
        version,
        authorized_ttl,
        unauthorized_ttl,
        deny_on_failure: policy == "Deny",
        kubeconfig: kubeconfig.into(),
        match_conditions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_go_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn authorizers_are_validated_as_upstream() {
        let ok = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthorizationConfiguration",
            "authorizers": [
                {"type": "Node", "name": "node"},
                {"type": "RBAC", "name": "rbac"},
                {"type": "Webhook", "name": "hook", "webhook": {
                    "timeout": "3s", "subjectAccessReviewVersion": "v1",
                    "matchConditionSubjectAccessReviewVersion": "v1",
                    "failurePolicy": "Deny", "unauthorizedTTL": "10s",
                    "connectionInfo": {"type": "KubeConfigFile", "kubeConfigFile": "/k"},
                    "matchConditions": [{"expression": "has(request.resourceAttributes)"}],
                }},
            ],
        });
        let specs = parse(&ok).unwrap();
        assert_eq!(specs[..2], [AuthorizerSpec::Node, AuthorizerSpec::Rbac]);
        let AuthorizerSpec::Webhook(w) = &specs[2] else {
            panic!("{specs:?}")
        };
        assert!(w.deny_on_failure);
        assert_eq!(w.authorized_ttl, Duration::from_secs(300));
        assert_eq!(w.unauthorized_ttl, Duration::from_secs(10));
        assert_eq!(w.match_conditions.len(), 1);

        let bad = json!({
            "apiVersion": "apiserver.config.k8s.io/v1beta1",
            "kind": "AuthorizationConfiguration",
            "authorizers": [
                {"type": "RBAC", "name": "rbac"},
                {"type": "RBAC", "name": "rbac2"},
                {"type": "Webhook", "name": "Bad_Name", "webhook": {
                    "timeout": "40s", "subjectAccessReviewVersion": "v2",
                    "connectionInfo": {"type": "KubeConfigFile", "kubeConfigFile": "rel"},
                    "matchConditions": [{"expression": "1 +"}],
                }},
                {"type": "ABAC", "name": "abac"},
            ],
        });
        let err = parse(&bad).unwrap_err();
        for want in [
            "authorizers[1].type: Duplicate value: \"RBAC\"",
            "authorizers[2].name: Invalid value: \"Bad_Name\"",
            "authorizers[2].webhook.timeout: Invalid value: \"40s\": must be > 0s and <= 30s",
            "authorizers[2].webhook.subjectAccessReviewVersion: Unsupported value: \"v2\"",
            "authorizers[2].webhook.failurePolicy: Required value",
            "authorizers[2].webhook.connectionInfo.kubeConfigFile: Invalid value: \"rel\"",
            "authorizers[2].webhook.matchConditionSubjectAccessReviewVersion: Required value",
            "authorizers[2].webhook.matchConditions[0].expression: Invalid value: \"1 +\"",
            "authorizers[3].type: Unsupported value: \"ABAC\"",
        ] {
            assert!(err.contains(want), "{want} not in {err}");
        }
        assert!(parse(&json!({"apiVersion": "v1", "kind": "Pod"})).is_err());
    }
}
