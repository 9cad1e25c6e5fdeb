//! The `Webhook` authorizer (`--authorization-webhook-config-file`): each request the
//! authorizers before it left undecided is sent as a SubjectAccessReview
//! (`authorization.k8s.io/v1`, or `v1beta1` with `--authorization-webhook-version`) to the
//! service the kubeconfig names. `status.allowed` allows, `status.denied` denies, anything
//! else is no opinion, each with `status.reason`. Answers are cached by the review's spec
//! (the request attributes and the user): allowed ones for `--authorization-webhook-cache-
//! authorized-ttl` (5 m), the others for `…-unauthorized-ttl` (30 s). A webhook that cannot be
//! reached, or answers garbage, gives no opinion with an error, as upstream: the request
//! fails unless a later authorizer allows it. Upstream retries a failed call with a backoff;
//! this client does not.
//!
//! With `--authorization-config` ([`super::config`]) each webhook also has a `timeout`,
//! a `failurePolicy` (`Deny`: a failed call denies, still with its error) and CEL
//! `matchConditions` over `request` (the v1 SubjectAccessReview spec): when one is false
//! the webhook is not asked (no opinion); when one fails to evaluate, the failure policy
//! applies.
//!
//! The webhook cannot list what a user may do: `rules_for` reports incomplete rules with
//! upstream's error.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::WebhookClient;
use crate::pipeline::{Decision, Evaluation, Outcome, UserInfo};
use crate::request_info::RequestInfo;

/// Upstream's error for a user rule review through a webhook.
pub const NO_RULES: &str = "webhook authorizer does not support user rule resolution";

/// Entries kept at most (the cache is emptied when full).
const CACHE_MAX: usize = 8192;

/// Settings of the webhook authorizer (kube-apiserver's `--authorization-webhook-*` flags).
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// `--authorization-webhook-version`: `v1` or `v1beta1`.
    pub version: String,
    /// `--authorization-webhook-cache-authorized-ttl` (default 5 m).
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl` (default 30 s).
    pub unauthorized_ttl: Duration,
    /// How long one call may take (30 s with the flags).
    pub timeout: Duration,
    /// `failurePolicy: Deny`: a failed call denies (the flags: no opinion).
    pub deny_on_failure: bool,
    /// CEL `matchConditions` that must all hold for the webhook to be asked.
    pub match_conditions: Vec<String>,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            version: "v1".into(),
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
            deny_on_failure: false,
            match_conditions: Vec::new(),
        }
    }
}

/// An authorizer asking a remote service.
pub struct WebhookAuthorizer {
    client: WebhookClient,
    options: WebhookOptions,
    conditions: Vec<kube_cel::cel::Program>,
    cache: Mutex<HashMap<String, (Outcome, Instant)>>,
}

impl WebhookAuthorizer {
    /// The authorizer posting to `client`.
    pub fn new(client: WebhookClient, options: WebhookOptions) -> Result<Self, String> {
        if options.version != "v1" && options.version != "v1beta1" {
            return Err(format!(
                "unsupported webhook authorizer version {:?}, supported versions are \"v1\", \"v1beta1\"",
                options.version
            ));
        }
        let conditions = options
            .match_conditions
            .iter()
            .map(|e| {
                kube_cel::cel::Program::compile(e)
                    .map_err(|err| format!("matchConditions {e:?}: compilation failed: {err}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(WebhookAuthorizer {
            client: client.with_timeout(options.timeout),
            options,
            conditions,
            cache: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Outcome, Instant)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached answer for `spec`, if still fresh.
    fn cached_spec(&self, key: &str) -> Option<Outcome> {
        let cache = self.lock();
        let (outcome, until) = cache.get(key)?;
        (Instant::now() < *until).then(|| outcome.clone())
    }

    /// The cached answer for `user` doing `info`, without calling the webhook (the
    /// synchronous checks of escalation use it).
    pub fn cached(&self, user: &UserInfo, info: &RequestInfo) -> Option<Outcome> {
        let key = review_spec(&self.options.version, user, info).to_string();
        self.cached_spec(&key)
    }

    /// Whether every match condition holds for `user` doing `info` (upstream's matcher: a
    /// false condition wins over an error).
    fn matches(&self, user: &UserInfo, info: &RequestInfo) -> Result<bool, String> {
        use kube_cel::KubeCelExt as _;
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let mut request = review_spec("v1", user, info);
        for (field, empty) in [
            ("groups", json!([])),
            ("extra", json!({})),
            ("uid", json!("")),
        ] {
            if request.get(field).is_none() {
                request[field] = empty;
            }
        }
        let mut ctx = kube_cel::cel::Context::default().with_all();
        ctx.add_variable_from_value("request", crate::crd::cel::plain_to_cel(&request));
        let mut errors = Vec::new();
        for (program, expression) in self.conditions.iter().zip(&self.options.match_conditions) {
            match program.execute(&ctx) {
                Ok(kube_cel::cel::Value::Bool(true)) => {}
                Ok(kube_cel::cel::Value::Bool(false)) => return Ok(false),
                Ok(other) => errors.push(format!(
                    "expression {expression:?} resulted in {}, not a bool",
                    other.type_of()
                )),
                Err(e) => errors.push(format!("expression {expression:?}: {e}")),
            }
        }
        match errors.is_empty() {
            true => Ok(true),
            false => Err(format!(
                "failed to evaluate match conditions: {}",
                errors.join("; ")
            )),
        }
    }

    /// The failure policy's answer to `err`.
    fn failure(&self, err: String) -> Evaluation {
        tracing::warn!(url = %self.client.url(), %err, "authorization webhook failed");
        Evaluation {
            outcome: Outcome {
                decision: if self.options.deny_on_failure {
                    Decision::Deny
                } else {
                    Decision::NoOpinion
                },
                reason: String::new(),
            },
            error: Some(err),
        }
    }

    /// The webhook's decision on `user` doing `info`: no opinion when a match condition does
    /// not hold, the failure policy's when the call fails.
    pub async fn evaluate(&self, user: &UserInfo, info: &RequestInfo) -> Evaluation {
        match self.matches(user, info) {
            Ok(true) => {}
            Ok(false) => {
                return Evaluation {
                    outcome: Outcome {
                        decision: Decision::NoOpinion,
                        reason: String::new(),
                    },
                    error: None,
                };
            }
            Err(err) => return self.failure(err),
        }
        match self.decide(user, info).await {
            Ok(outcome) => Evaluation {
                outcome,
                error: None,
            },
            Err(err) => self.failure(err),
        }
    }

    /// Asks the webhook (or the cache) about `user` doing `info`.
    async fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Result<Outcome, String> {
        let spec = review_spec(&self.options.version, user, info);
        let key = spec.to_string();
        if let Some(outcome) = self.cached_spec(&key) {
            return Ok(outcome);
        }
        let review = json!({
            "apiVersion": format!("authorization.k8s.io/{}", self.options.version),
            "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": {"allowed": false},
        });
        let answer = self.client.post(&review).await?;
        let outcome = outcome_of(&answer)?;
        let ttl = match outcome.decision {
            Decision::Allow => self.options.authorized_ttl,
            _ => self.options.unauthorized_ttl,
        };
        if !ttl.is_zero() {
            let mut cache = self.lock();
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, (outcome.clone(), Instant::now() + ttl));
        }
        Ok(outcome)
    }
}

/// The SubjectAccessReview spec upstream's webhook authorizer sends for `user` doing `info`
/// (`v1beta1` names the groups `group`).
pub fn review_spec(version: &str, user: &UserInfo, info: &RequestInfo) -> Value {
    let mut spec = serde_json::Map::new();
    if info.is_resource {
        spec.insert(
            "resourceAttributes".into(),
            json!({
                "namespace": info.namespace,
                "verb": info.verb,
                "group": info.group,
                "version": info.version,
                "resource": info.resource,
                "subresource": info.subresource,
                "name": info.name,
            }),
        );
    } else {
        spec.insert(
            "nonResourceAttributes".into(),
            json!({"path": info.path, "verb": info.verb}),
        );
    }
    spec.insert("user".into(), json!(user.name));
    let groups = if version == "v1beta1" {
        "group"
    } else {
        "groups"
    };
    if !user.groups.is_empty() {
        spec.insert(groups.into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    Value::Object(spec)
}

/// The decision of a SubjectAccessReview answer.
fn outcome_of(answer: &Value) -> Result<Outcome, String> {
    let kind = answer["kind"].as_str().unwrap_or_default();
    if kind != "SubjectAccessReview" {
        return Err(format!(
            "the webhook answered a {:?}, not a SubjectAccessReview",
            kind
        ));
    }
    let status = &answer["status"];
    let reason = status["reason"].as_str().unwrap_or_default().to_owned();
    let decision = if status["allowed"] == true {
        Decision::Allow
    } else if status["denied"] == true {
        Decision::Deny
    } else {
        Decision::NoOpinion
    };
    Ok(Outcome { decision, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn reviews_carry_the_attributes_and_the_user() {
        let user = UserInfo {
            name: "jane".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            uid: "42".into(),
            ..UserInfo::default()
        };
        let info = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/ns/pods/p", None);
        assert_eq!(
            review_spec("v1", &user, &info),
            json!({
                "resourceAttributes": {"namespace": "ns", "verb": "get", "group": "",
                    "version": "v1", "resource": "pods", "subresource": "", "name": "p"},
                "user": "jane", "groups": ["dev", "system:authenticated"], "uid": "42",
            })
        );
        let info = RequestInfo::parse(&Method::GET, "/healthz", None);
        let spec = review_spec("v1beta1", &user, &info);
        assert_eq!(
            spec["nonResourceAttributes"],
            json!({"path": "/healthz", "verb": "get"})
        );
        assert_eq!(spec["group"][0], "dev");
    }

    #[test]
    fn answers_decide_as_upstream() {
        let answer =
            |status: Value| outcome_of(&json!({"kind": "SubjectAccessReview", "status": status}));
        assert_eq!(
            answer(json!({"allowed": true, "reason": "ok"})).unwrap(),
            Outcome {
                decision: Decision::Allow,
                reason: "ok".into()
            }
        );
        assert_eq!(
            answer(json!({"allowed": false, "denied": true}))
                .unwrap()
                .decision,
            Decision::Deny
        );
        assert_eq!(
            answer(json!({"allowed": false})).unwrap().decision,
            Decision::NoOpinion
        );
        assert!(outcome_of(&json!({"kind": "Status"})).is_err());
    }
}
