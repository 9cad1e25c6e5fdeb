//! Authentication as kube-apiserver orders it: an authenticating proxy's request headers
//! ([`requestheader`], with `--requestheader-client-ca-file`), x509 client certificates
//! (verified by the TLS layer), then bearer tokens — `--token-auth-file` ([`token_file`])
//! and service-account JWTs
//! ([`jwt`], bound tokens from the TokenRequest subresource) — then, with `--anonymous-auth`,
//! `system:anonymous`. A bearer token no authenticator accepts is a 401 even when anonymous
//! requests are allowed (upstream's union authenticator fails on error).
//!
//! Also here: the TokenRequest subresource (`kubectl create token`, optionally bound to a
//! Pod, Secret or Node: the token then also dies with that object), the service-account
//! issuer discovery documents and the checks behind TokenReview.

pub mod jwt;
pub mod oidc;
pub mod oidc_config;
pub mod oidc_keys;
pub mod requestheader;
pub mod token_file;
pub mod webhook;

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::error::{ApiError, GroupResource};
use crate::pipeline::UserInfo;
use crate::storage::Storage;

/// Upstream's default issuer (`--service-account-issuer`).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Upstream's default TokenRequest lifetime and the shortest one allowed.
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
/// Clock skew tolerated on `exp`/`nbf` (go-jose's default leeway).
const LEEWAY: i64 = 60;

/// Authentication flags of `capstan server`, named after kube-apiserver's.
#[derive(Debug, Clone)]
pub struct AuthnConfig {
    /// `--token-auth-file`.
    pub token_auth_file: Option<PathBuf>,
    /// `--anonymous-auth` (default true).
    pub anonymous_auth: bool,
    /// `--service-account-signing-key-file` (PKCS#8 ECDSA P-256).
    pub service_account_signing_key_file: Option<PathBuf>,
    /// `--service-account-key-file` (public keys that verify tokens; the signing key's public
    /// half is always added).
    pub service_account_key_files: Vec<PathBuf>,
    /// `--service-account-issuer`.
    pub service_account_issuer: String,
    /// `--api-audiences` (default: the issuer).
    pub api_audiences: Vec<String>,
    /// `--authentication-token-webhook-*`: tokens nothing else accepts go to this webhook.
    pub token_webhook: Option<webhook::TokenWebhookConfig>,
    /// `--oidc-*`: one OIDC issuer's tokens.
    pub oidc: oidc_config::OidcFlags,
    /// `--authentication-config`: an AuthenticationConfiguration file (JWT authenticators);
    /// excludes `--oidc-*`.
    pub authentication_config: Option<PathBuf>,
}

impl Default for AuthnConfig {
    fn default() -> Self {
        AuthnConfig {
            token_auth_file: None,
            anonymous_auth: true,
            service_account_signing_key_file: None,
            service_account_key_files: Vec::new(),
            service_account_issuer: DEFAULT_ISSUER.into(),
            api_audiences: Vec::new(),
            token_webhook: None,
            oidc: oidc_config::OidcFlags::default(),
            authentication_config: None,
        }
    }
}

/// The server's authenticators.
pub struct Authenticator {
    tokens: HashMap<String, UserInfo>,
    anonymous: bool,
    signer: Option<jwt::Signer>,
    keys: Vec<jwt::PublicKey>,
    issuer: String,
    audiences: Vec<String>,
    storage: Option<Storage>,
    verified: Verified,
    webhook: Option<webhook::TokenWebhook>,
    oidc: oidc::JwtAuthenticators,
    request_header: Option<std::sync::Arc<requestheader::RequestHeader>>,
}

/// Claims of tokens whose signature was already checked, for [`VERIFIED_TTL`]: a signature
/// check (ECDSA or RSA) costs far more than the request it guards, and a controller sends
/// the same token thousands of times. Only the signature is remembered (the key set never
/// changes while the server runs); issuer, expiry, audiences and the service account's
/// existence are checked on every request. Upstream caches whole token authentications
/// for 10 s (`--token-success-cache-ttl`'s default).
#[derive(Default)]
struct Verified(std::sync::Mutex<HashMap<String, (Value, std::time::Instant)>>);

/// How long a checked signature is remembered.
const VERIFIED_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// Tokens remembered at most (the map is emptied when full).
const VERIFIED_MAX: usize = 4096;

impl Verified {
    fn verify(&self, token: &str, keys: &[jwt::PublicKey]) -> Result<Value, String> {
        let lock = || {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((claims, at)) = lock().get(token)
            && at.elapsed() < VERIFIED_TTL
        {
            return Ok(claims.clone());
        }
        let claims = jwt::verify(token, keys)?;
        let mut map = lock();
        if map.len() >= VERIFIED_MAX {
            map.clear();
        }
        map.insert(
            token.to_owned(),
            (claims.clone(), std::time::Instant::now()),
        );
        Ok(claims)
    }
}

/// What a bearer token authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    /// The user.
    pub user: UserInfo,
    /// The audiences the token is good for among those asked about.
    pub audiences: Vec<String>,
}

fn read(path: &PathBuf) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn add_authenticated(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == "system:authenticated") {
        user.groups.push("system:authenticated".into());
    }
    user
}

impl Authenticator {
    /// Loads the token file and keys named by `cfg`; `storage` is where service accounts are
    /// looked up (None: service-account tokens are refused).
    pub fn new(cfg: &AuthnConfig, storage: Option<Storage>) -> Result<Authenticator, String> {
        let tokens = match &cfg.token_auth_file {
            Some(path) => token_file::parse(&path.display().to_string(), &read(path)?)?,
            None => HashMap::new(),
        };
        let signer = match &cfg.service_account_signing_key_file {
            Some(path) => Some(
                jwt::Signer::from_pem(&read(path)?)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            ),
            None => None,
        };
        let mut keys = Vec::new();
        for path in &cfg.service_account_key_files {
            keys.extend(
                jwt::public_keys_from_pem(&read(path)?)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            );
        }
        if let Some(s) = signer
            .as_ref()
            .filter(|s| !keys.iter().any(|k| k.kid == s.public.kid))
        {
            keys.push(s.public.clone());
        }
        let audiences = if cfg.api_audiences.is_empty() {
            vec![cfg.service_account_issuer.clone()]
        } else {
            cfg.api_audiences.clone()
        };
        let jwt_configs = match (&cfg.authentication_config, cfg.oidc.is_set()) {
            (Some(_), true) => {
                return Err(
                    "authentication-config file and oidc-* flags are mutually exclusive".into(),
                );
            }
            (Some(path), false) => oidc_config::load(path)?,
            (None, _) => oidc_config::from_flags(&cfg.oidc)?.into_iter().collect(),
        };
        let oidc = oidc::JwtAuthenticators::new(jwt_configs)?;
        Ok(Authenticator {
            request_header: None,
            oidc,
            tokens,
            anonymous: cfg.anonymous_auth,
            signer,
            keys,
            issuer: cfg.service_account_issuer.clone(),
            audiences,
            storage,
            verified: Verified::default(),
            webhook: cfg
                .token_webhook
                .as_ref()
                .map(webhook::TokenWebhook::new)
                .transpose()?,
        })
    }

    /// Accepts an authenticating proxy's request headers (`--requestheader-*`).
    pub fn set_request_header(&mut self, rh: requestheader::RequestHeader) {
        self.request_header = Some(std::sync::Arc::new(rh));
    }

    /// The request-header authenticator, if configured (the accept loop judges connections
    /// with it).
    pub fn request_header(&self) -> Option<std::sync::Arc<requestheader::RequestHeader>> {
        self.request_header.clone()
    }

    /// The user an authenticating proxy's headers name (`front_proxy`: the connection's
    /// certificate is an allowed proxy's), or `None`; the identity headers are stripped
    /// either way.
    pub fn authenticate_proxied(
        &self,
        front_proxy: bool,
        headers: &mut http::HeaderMap,
    ) -> Option<UserInfo> {
        let rh = self.request_header.as_ref()?;
        let user = if front_proxy { rh.user(headers) } else { None };
        rh.strip(headers);
        user.map(add_authenticated)
    }

    /// The API server's audiences (`--api-audiences`).
    pub fn api_audiences(&self) -> &[String] {
        &self.audiences
    }

    /// Authenticates a request: the connection's certificate identity, else its bearer
    /// token, else anonymous (or 401).
    pub async fn authenticate(
        &self,
        peer: Option<UserInfo>,
        headers: &http::HeaderMap,
    ) -> Result<UserInfo, ApiError> {
        if let Some(user) = peer {
            return Ok(add_authenticated(user));
        }
        if let Some(token) = bearer(headers) {
            return match self.authenticate_token(token, &self.audiences).await {
                Ok(t) => Ok(t.user),
                Err(err) => {
                    tracing::debug!(%err, "bearer token refused");
                    Err(ApiError::Unauthorized)
                }
            };
        }
        if self.anonymous {
            Ok(UserInfo::anonymous())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// Authenticates a bearer token for `audiences` (errors as TokenReview reports them).
    pub async fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenUser, String> {
        if let Some(user) = self.tokens.get(token) {
            return Ok(TokenUser {
                user: add_authenticated(user.clone()),
                audiences: audiences.to_vec(),
            });
        }
        let mut refused = "invalid bearer token".to_owned();
        if jwt::looks_like_jwt(token)
            && let Some(result) = self.oidc.authenticate(token).await
        {
            match result {
                Ok(user) => {
                    return Ok(TokenUser {
                        user: add_authenticated(user),
                        audiences: audiences.to_vec(),
                    });
                }
                Err(err) if self.webhook.is_none() => return Err(err),
                Err(err) => refused = err,
            }
        } else if jwt::looks_like_jwt(token) && !self.keys.is_empty() {
            match self.service_account(token, audiences).await {
                Ok(user) => return Ok(user),
                Err(err) if self.webhook.is_none() => return Err(err),
                Err(err) => refused = err,
            }
        }
        if let Some(hook) = &self.webhook {
            return match hook.authenticate(token, audiences).await {
                Ok((user, audiences)) => Ok(TokenUser {
                    user: add_authenticated(user),
                    audiences,
                }),
                Err(err) => {
                    tracing::debug!(%err, "token webhook refused a token");
                    Err(format!("{refused}, {err}"))
                }
            };
        }
        Err(refused)
    }

    async fn service_account(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<TokenUser, String> {
        let claims = self.verified.verify(token, &self.keys)?;
        let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).map(str::to_owned);
        if s(&claims, "iss").as_deref() != Some(self.issuer.as_str()) {
            return Err("token issuer is not trusted".into());
        }
        let now = jiff::Timestamp::now().as_second();
        let exp = claims.get("exp").and_then(Value::as_i64).unwrap_or(0);
        if now > exp + LEEWAY {
            return Err("service account token has expired".into());
        }
        let nbf = claims.get("nbf").and_then(Value::as_i64);
        if nbf.is_some_and(|nbf| now + LEEWAY < nbf) {
            return Err("service account token is not valid yet".into());
        }
        let token_aud: Vec<String> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.clone()],
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_default(),
            None => Vec::new(),
        };
        let matched: Vec<String> = audiences
            .iter()
            .filter(|a| token_aud.contains(a))
            .cloned()
            .collect();
        if matched.is_empty() {
            return Err("token audiences is invalid for the target audiences".into());
        }
        let k8s = claims.get("kubernetes.io").cloned().unwrap_or(Value::Null);
        let sa = k8s.get("serviceaccount").cloned().unwrap_or(Value::Null);
        let (Some(ns), Some(name), Some(uid)) =
            (s(&k8s, "namespace"), s(&sa, "name"), s(&sa, "uid"))
        else {
            return Err("token lacks the kubernetes.io service account claims".into());
        };
        let Some(storage) = &self.storage else {
            return Err("service account tokens are not served".into());
        };
        let stored = storage
            .get(&format!("/registry/core/serviceaccounts/{ns}/{name}"))
            .await
            .map_err(|e| e.to_string())?;
        let current_uid = stored
            .and_then(|st| serde_json::from_slice::<Value>(&st.value).ok())
            .and_then(|v| {
                v.pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        match current_uid {
            None => {
                return Err(format!(
                    "serviceaccounts \"{name}\" not found: service account {ns}/{name} has been deleted"
                ));
            }
            Some(u) if u != uid => {
                return Err(format!(
                    "service account UID ({uid}) does not match service account {ns}/{name} UID ({u})"
                ));
            }
            Some(_) => {}
        }
        let mut extra = std::collections::BTreeMap::new();
        for (claim, kind) in [("secret", "secrets"), ("pod", "pods"), ("node", "nodes")] {
            let Some(bound) = k8s.get(claim).filter(|b| b.is_object()) else {
                continue;
            };
            let (bname, buid) = (
                s(bound, "name").unwrap_or_default(),
                s(bound, "uid").unwrap_or_default(),
            );
            let key = match kind {
                "nodes" => format!("/registry/core/nodes/{bname}"),
                _ => format!("/registry/core/{kind}/{ns}/{bname}"),
            };
            let obj = lookup(storage, &key).await?;
            let Some(obj) = obj else {
                return Err(format!("{kind} \"{bname}\" not found"));
            };
            let meta = |f: &str| obj.pointer(&format!("/metadata/{f}")).cloned();
            if meta("uid").and_then(|u| u.as_str().map(str::to_owned)) != Some(buid.clone()) {
                return Err(format!(
                    "{kind} {ns}/{bname} UID does not match the token's ({buid}): the token has been invalidated"
                ));
            }
            if kind != "nodes" && meta("deletionTimestamp").is_some_and(|d| !d.is_null()) {
                return Err(format!(
                    "{kind} {ns}/{bname} is being deleted: the token has been invalidated"
                ));
            }
            if kind != "secrets" {
                let what = &claim;
                extra.insert(
                    format!("authentication.kubernetes.io/{what}-name"),
                    vec![bname],
                );
                extra.insert(
                    format!("authentication.kubernetes.io/{what}-uid"),
                    vec![buid],
                );
            }
        }
        if let Some(jti) = s(&claims, "jti") {
            extra.insert(
                "authentication.kubernetes.io/credential-id".to_owned(),
                vec![format!("JTI={jti}")],
            );
        }
        Ok(TokenUser {
            user: add_authenticated(UserInfo {
                name: format!("system:serviceaccount:{ns}:{name}"),
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                ],
                uid,
                extra,
            }),
            audiences: matched,
        })
    }

    /// Signs a bound token for the ServiceAccount `sa` (stored JSON) — the TokenRequest
    /// subresource. Returns the token and its expiry (Unix seconds).
    fn issue(
        &self,
        sa: &Value,
        audiences: &[String],
        expiration: i64,
        bound: &[(&str, Value)],
    ) -> Result<(String, i64), ApiError> {
        let signer = self.signer.as_ref().ok_or_else(|| {
            ApiError::Internal("no --service-account-signing-key-file configured".into())
        })?;
        let meta = |f: &str| {
            sa.pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (ns, name) = (meta("namespace"), meta("name"));
        let now = jiff::Timestamp::now().as_second();
        let exp = now + expiration;
        let claims = json!({
            "aud": audiences,
            "exp": exp,
            "iat": now,
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": {
                "namespace": ns,
                "serviceaccount": {"name": name, "uid": meta("uid")},
            },
            "nbf": now,
            "sub": format!("system:serviceaccount:{ns}:{name}"),
        });
        let mut claims = claims;
        for (claim, value) in bound {
            claims["kubernetes.io"][*claim] = value.clone();
        }
        let token = signer.sign(&claims).map_err(ApiError::Internal)?;
        Ok((token, exp))
    }

    /// The JWS algorithms of the verification keys, in upstream's order (RS256 first).
    fn signing_algorithms(&self) -> Vec<&'static str> {
        let mut algs: Vec<&'static str> = self.keys.iter().map(jwt::PublicKey::alg).collect();
        algs.sort_unstable_by_key(|a| *a != "RS256");
        algs.dedup();
        algs
    }

    /// `/.well-known/openid-configuration`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": self.signing_algorithms(),
        })
    }

    /// `/openid/v1/jwks`.
    pub fn jwks(&self) -> Value {
        json!({"keys": self.keys.iter().map(jwt::PublicKey::jwk).collect::<Vec<_>>()})
    }
}

/// The object stored at `key`, if any.
async fn lookup(storage: &Storage, key: &str) -> Result<Option<Value>, String> {
    Ok(storage
        .get(key)
        .await
        .map_err(|e| e.to_string())?
        .and_then(|st| serde_json::from_slice::<Value>(&st.value).ok()))
}

fn name_uid(obj: &Value) -> Value {
    json!({
        "name": obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
    })
}

/// The claims binding a token to `spec.boundObjectRef` (a Pod — with its node when it is
/// scheduled —, a Secret or a Node that must exist, with the given uid if one is given), and
/// the reference with its uid filled in, as upstream's TokenRequest REST does.
async fn bind_to(
    storage: &Storage,
    namespace: &str,
    sa_name: &str,
    bound_ref: &Value,
) -> crate::error::Result<(Vec<(&'static str, Value)>, Value)> {
    let field = |f: &str| {
        bound_ref
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (kind, name, uid) = (field("kind"), field("name"), field("uid"));
    let (claim, plural, key) = match kind.as_str() {
        "Pod" => (
            "pod",
            "pods",
            format!("/registry/core/pods/{namespace}/{name}"),
        ),
        "Secret" => (
            "secret",
            "secrets",
            format!("/registry/core/secrets/{namespace}/{name}"),
        ),
        "Node" => ("node", "nodes", format!("/registry/core/nodes/{name}")),
        _ => {
            return Err(ApiError::BadRequest(format!(
                "cannot bind token for serviceaccount \"{sa_name}\" to object of kind {kind:?}: only Pod, Secret and Node are supported"
            )));
        }
    };
    let obj = lookup(storage, &key)
        .await
        .map_err(ApiError::Internal)?
        .ok_or_else(|| ApiError::NotFound {
            resource: GroupResource::new("", plural),
            name: name.clone(),
        })?;
    let actual_uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !uid.is_empty() && uid != actual_uid {
        return Err(ApiError::Conflict {
            resource: GroupResource::new("", plural),
            name: name.clone(),
            detail: format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        });
    }
    let mut claims = vec![(claim, name_uid(&obj))];
    if kind == "Pod" {
        let pod_sa = obj
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        if pod_sa != sa_name {
            return Err(ApiError::BadRequest(format!(
                "cannot bind token for serviceaccount \"{sa_name}\" to pod running with different serviceaccount name."
            )));
        }
        let node = obj.pointer("/spec/nodeName").and_then(Value::as_str);
        if let Some(node) = node.filter(|n| !n.is_empty()) {
            let node = lookup(storage, &format!("/registry/core/nodes/{node}"))
                .await
                .map_err(ApiError::Internal)?;
            if let Some(node) = node {
                claims.push(("node", name_uid(&node)));
            }
        }
    }
    let mut reference = bound_ref.clone();
    reference["uid"] = json!(actual_uid);
    Ok((claims, reference))
}

/// The bearer token of a request, if any (an empty one counts as none, as upstream).
fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// The TokenRequest subresource: `POST .../serviceaccounts/<name>/token`
/// (`kubectl create token NAME --duration --audience`); `req` is the decoded body.
pub async fn token_request(
    storage: &Storage,
    authn: &Authenticator,
    namespace: &str,
    name: &str,
    req: &Value,
) -> crate::error::Result<axum::response::Response> {
    let sa = storage
        .get(&format!(
            "/registry/core/serviceaccounts/{namespace}/{name}"
        ))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .and_then(|st| serde_json::from_slice::<Value>(&st.value).ok())
        .ok_or_else(|| ApiError::NotFound {
            resource: GroupResource::new("", "serviceaccounts"),
            name: name.to_owned(),
        })?;
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let (bound, bound_ref) = match spec.get("boundObjectRef").filter(|b| b.is_object()) {
        Some(r) => bind_to(storage, namespace, name, r).await?,
        None => (Vec::new(), Value::Null),
    };
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences = authn.api_audiences().to_vec();
    }
    let expiration = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION);
    if expiration < MIN_EXPIRATION {
        return Err(ApiError::BadRequest(format!(
            "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration less than 10 minutes"
        )));
    }
    if expiration > 1 << 32 {
        return Err(ApiError::BadRequest(format!(
            "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"
        )));
    }
    let (token, exp) = authn.issue(&sa, &audiences, expiration, &bound)?;
    let expires = jiff::Timestamp::from_second(exp)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let out = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": expiration, "boundObjectRef": bound_ref},
        "status": {"token": token, "expirationTimestamp": expires},
    });
    Ok(axum::response::IntoResponse::into_response((
        http::StatusCode::CREATED,
        axum::Json(out),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_tokens(anonymous: bool) -> Authenticator {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "s3cret,alice,uid-1,\"dev,ops\"\n").unwrap();
        Authenticator::new(
            &AuthnConfig {
                token_auth_file: Some(path),
                anonymous_auth: anonymous,
                ..AuthnConfig::default()
            },
            None,
        )
        .unwrap()
    }

    fn headers(auth: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, auth.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn certificates_then_tokens_then_anonymous() {
        let a = with_tokens(true);
        let bob = UserInfo {
            name: "bob".into(),
            ..UserInfo::default()
        };
        let u = a
            .authenticate(Some(bob), &headers("Bearer s3cret"))
            .await
            .unwrap();
        assert_eq!(u.name, "bob");
        assert_eq!(u.groups, vec!["system:authenticated"]);
        let u = a
            .authenticate(None, &headers("Bearer s3cret"))
            .await
            .unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.uid, "uid-1");
        assert_eq!(u.groups, vec!["dev", "ops", "system:authenticated"]);
        let anon = a.authenticate(None, &http::HeaderMap::new()).await.unwrap();
        assert_eq!(anon, UserInfo::anonymous());
        // An empty bearer token is no token.
        assert!(a.authenticate(None, &headers("Bearer ")).await.is_ok());
        // A wrong token is refused even with anonymous requests allowed.
        assert!(matches!(
            a.authenticate(None, &headers("Bearer nope")).await,
            Err(ApiError::Unauthorized)
        ));
        assert!(matches!(
            with_tokens(false)
                .authenticate(None, &http::HeaderMap::new())
                .await,
            Err(ApiError::Unauthorized)
        ));
    }

    #[tokio::test]
    async fn service_account_tokens_are_checked_before_any_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("sa.key");
        let keys = certs::ServiceAccountKeys::generate().unwrap();
        std::fs::write(&key, &keys.private_key_pem).unwrap();
        let a = Authenticator::new(
            &AuthnConfig {
                service_account_signing_key_file: Some(key),
                ..AuthnConfig::default()
            },
            None,
        )
        .unwrap();
        let sa = json!({"metadata": {"name": "bot", "namespace": "default", "uid": "u1"}});
        let aud = vec![DEFAULT_ISSUER.to_owned()];
        let (token, _) = a.issue(&sa, &aud, 3600, &[]).unwrap();
        // Wrong audience.
        let err = a
            .authenticate_token(&token, &["other".to_owned()])
            .await
            .unwrap_err();
        assert_eq!(err, "token audiences is invalid for the target audiences");
        // Right audience, but no store to find the account in.
        let err = a.authenticate_token(&token, &aud).await.unwrap_err();
        assert_eq!(err, "service account tokens are not served");
        // Expired.
        let (old, _) = a.issue(&sa, &aud, -3600, &[]).unwrap();
        assert_eq!(
            a.authenticate_token(&old, &aud).await.unwrap_err(),
            "service account token has expired"
        );
        // Wrong issuer.
        let other = Authenticator::new(
            &AuthnConfig {
                service_account_signing_key_file: a
                    .signer
                    .as_ref()
                    .map(|_| dir.path().join("sa.key")),
                service_account_issuer: "https://elsewhere".into(),
                ..AuthnConfig::default()
            },
            None,
        )
        .unwrap();
        let (foreign, _) = other.issue(&sa, &aud, 3600, &[]).unwrap();
        assert_eq!(
            a.authenticate_token(&foreign, &aud).await.unwrap_err(),
            "token issuer is not trusted"
        );
        assert_eq!(a.jwks()["keys"][0]["kid"], a.keys[0].kid.as_str());
        assert_eq!(
            a.openid_configuration()["jwks_uri"],
            "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
        );
    }
}
