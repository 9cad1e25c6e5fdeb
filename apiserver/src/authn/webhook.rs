//! The token webhook (`--authentication-token-webhook-config-file`): a bearer token the
//! built-in authenticators do not accept is sent as a TokenReview
//! (`authentication.k8s.io/v1`, or `v1beta1` with `--authentication-token-webhook-version`)
//! to the service a kubeconfig names ([`crate::authz::client`]). `status.authenticated` with
//! `status.user` (username, uid, groups, extra) authenticates the token; answers (either
//! way) are cached for `--authentication-token-webhook-cache-ttl` (2 m), errors are not.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::authz::client::WebhookClient;
use crate::pipeline::UserInfo;

/// Entries kept at most (the cache is emptied when full).
const CACHE_MAX: usize = 4096;

/// Settings of the token webhook (kube-apiserver's `--authentication-token-webhook-*`).
#[derive(Debug, Clone)]
pub struct TokenWebhookConfig {
    /// `--authentication-token-webhook-config-file`.
    pub config_file: PathBuf,
    /// `--authentication-token-webhook-version`: `v1` or `v1beta1`.
    pub version: String,
    /// `--authentication-token-webhook-cache-ttl` (default 2 m).
    pub cache_ttl: Duration,
}

/// A cached answer: the user, or why the token was refused.
type Answer = Result<(UserInfo, Vec<String>), String>;

/// Answers by (token, audiences), with when they expire.
type Cache = HashMap<(String, Vec<String>), (Answer, Instant)>;

/// The token webhook authenticator.
pub struct TokenWebhook {
    client: WebhookClient,
    version: String,
    ttl: Duration,
    cache: Mutex<Cache>,
}

impl TokenWebhook {
    /// Reads the kubeconfig `cfg` names.
    pub fn new(cfg: &TokenWebhookConfig) -> Result<TokenWebhook, String> {
        if cfg.version != "v1" && cfg.version != "v1beta1" {
            return Err(format!(
                "unsupported authentication webhook version {:?}, supported versions are \"v1\", \"v1beta1\"",
                cfg.version
            ));
        }
        Ok(TokenWebhook {
            client: WebhookClient::from_kubeconfig(&cfg.config_file)?,
            version: cfg.version.clone(),
            ttl: cfg.cache_ttl,
            cache: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The user `token` is for and the audiences among `audiences` it is good for, or why
    /// it is refused.
    pub async fn authenticate(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<(UserInfo, Vec<String>), String> {
        let key = (token.to_owned(), audiences.to_vec());
        if let Some((answer, until)) = self.lock().get(&key)
            && Instant::now() < *until
        {
            return answer.clone();
        }
        let mut spec = json!({"token": token});
        if !audiences.is_empty() {
            spec["audiences"] = json!(audiences);
        }
        let review = json!({
            "apiVersion": format!("authentication.k8s.io/{}", self.version),
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": null},
            "spec": spec,
            "status": {"user": {}},
        });
        let answer = self.client.post(&review).await?;
        let result = user_of(&answer, audiences);
        if !self.ttl.is_zero() {
            let mut cache = self.lock();
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, (result.clone(), Instant::now() + self.ttl));
        }
        result
    }
}

/// The user of a TokenReview answer, as upstream's webhook authenticator reads it: the
/// answer's audiences must meet the ones asked for (when both are given).
fn user_of(answer: &Value, audiences: &[String]) -> Answer {
    if answer["kind"] != "TokenReview" {
        return Err("the webhook did not answer a TokenReview".into());
    }
    let status = &answer["status"];
    if status["authenticated"] != true {
        return Err(match status["error"].as_str().filter(|e| !e.is_empty()) {
            Some(e) => e.to_owned(),
            None => "token not authenticated by the webhook".into(),
        });
    }
    let answered: Vec<String> =
        serde_json::from_value(status["audiences"].clone()).unwrap_or_default();
    let good: Vec<String> = if answered.is_empty() {
        audiences.to_vec()
    } else {
        audiences
            .iter()
            .filter(|a| answered.contains(a))
            .cloned()
            .collect()
    };
    if !audiences.is_empty() && !answered.is_empty() && good.is_empty() {
        return Err("token audiences is invalid for the target audiences".into());
    }
    let u = &status["user"];
    let user = UserInfo {
        name: u["username"].as_str().unwrap_or_default().to_owned(),
        uid: u["uid"].as_str().unwrap_or_default().to_owned(),
        groups: serde_json::from_value(u["groups"].clone()).unwrap_or_default(),
        extra: serde_json::from_value::<BTreeMap<String, Vec<String>>>(u["extra"].clone())
            .unwrap_or_default(),
    };
    Ok((user, good))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_upstream() {
        let ok = json!({"kind": "TokenReview", "status": {"authenticated": true, "user": {
            "username": "jane", "uid": "7", "groups": ["dev"], "extra": {"scopes": ["a"]}}}});
        let (user, auds) = user_of(&ok, &["api".into()]).unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.uid, "7");
        assert_eq!(user.groups, ["dev"]);
        assert_eq!(user.extra["scopes"], ["a"]);
        assert_eq!(auds, ["api"]);
        let no = json!({"kind": "TokenReview", "status": {"authenticated": false, "error": "bad"}});
        assert_eq!(user_of(&no, &[]).unwrap_err(), "bad");
        let other = json!({"kind": "TokenReview", "status": {"authenticated": true,
            "user": {"username": "x"}, "audiences": ["other"]}});
        assert!(user_of(&other, &["api".into()]).is_err());
    }
}
