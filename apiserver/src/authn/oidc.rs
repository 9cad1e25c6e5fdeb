//! JWT (OIDC) authenticators, as kube-apiserver's `--oidc-*` flags and the `jwt` list of
//! `--authentication-config`: a bearer token whose unverified `iss` names a configured
//! issuer is verified with that issuer's keys ([`super::oidc_keys`], RS256 or ES256 through
//! [`super::jwt::verify`]), then checked (`exp`, `nbf`, audience, `claimValidationRules`)
//! and mapped to a user (`claimMappings`: a claim with a prefix, or a CEL expression over
//! `claims`), then `userValidationRules` run over `user`. A token for another issuer is not
//! this authenticator's business ([`JwtAuthenticators::authenticate`] returns `None`).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kube_cel::KubeCelExt as _;
use kube_cel::cel::{Context, Program, Value as Cel};
use serde_json::{Value, json};

use super::oidc_config::{ClaimRule, JwtConfig, Mapping};
use super::oidc_keys::KeySet;
use crate::pipeline::UserInfo;

/// Clock skew tolerated on `exp`, `nbf` and `iat`.
const LEEWAY: i64 = 60;

/// One issuer's authenticator.
pub struct JwtAuthenticator {
    config: JwtConfig,
    keys: KeySet,
}

/// Every configured JWT authenticator.
#[derive(Default)]
pub struct JwtAuthenticators(Vec<JwtAuthenticator>);

/// The unverified `iss` of a JWT.
fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims["iss"].as_str().map(str::to_owned)
}

impl JwtAuthenticators {
    /// Authenticators for `configs` (their keys are fetched on first use).
    pub fn new(configs: Vec<JwtConfig>) -> Result<JwtAuthenticators, String> {
        configs
            .into_iter()
            .map(|config| {
                let keys = KeySet::new(
                    &config.issuer,
                    config.discovery_url.as_deref(),
                    config.ca_pem.as_deref(),
                )?;
                Ok(JwtAuthenticator { config, keys })
            })
            .collect::<Result<_, String>>()
            .map(JwtAuthenticators)
    }

    /// Whether none is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `None` when `token` is not a JWT of a configured issuer; else the user it maps to,
    /// or why it is refused.
    pub async fn authenticate(&self, token: &str) -> Option<Result<UserInfo, String>> {
        if self.0.is_empty() {
            return None;
        }
        let iss = unverified_issuer(token)?;
        let auth = self.0.iter().find(|a| a.config.issuer == iss)?;
        let result = auth.authenticate(token).await;
        if let Err(e) = &result {
            tracing::debug!(issuer = %iss, error = %e, "OIDC token refused");
        }
        Some(result)
    }
}

impl JwtAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<UserInfo, String> {
        let keys = self.keys.keys().await?;
        let claims = match super::jwt::verify(token, &keys) {
            Ok(c) => c,
            Err(e) if e == "invalid signature" => {
                // The issuer may have rotated its keys.
                let keys = self.keys.refresh().await;
                super::jwt::verify(token, &keys).map_err(|e| format!("oidc: verify token: {e}"))?
            }
            Err(e) => return Err(format!("oidc: verify token: {e}")),
        };
        self.check(&claims)?;
        let user = self.map(&claims)?;
        self.validate_user(&user)?;
        Ok(user)
    }

    fn check(&self, claims: &Value) -> Result<(), String> {
        let now = jiff::Timestamp::now().as_second();
        let exp = claims["exp"]
            .as_i64()
            .ok_or("oidc: token has no exp claim")?;
        if now > exp + LEEWAY {
            return Err("oidc: verify token: token is expired".into());
        }
        if claims["nbf"].as_i64().is_some_and(|nbf| now + LEEWAY < nbf) {
            return Err("oidc: verify token: token not valid yet".into());
        }
        let aud: Vec<&str> = match &claims["aud"] {
            Value::String(a) => vec![a.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !self
            .config
            .audiences
            .iter()
            .any(|a| aud.contains(&a.as_str()))
        {
            return Err(format!(
                "oidc: verify token: expected audience in {:?} got {aud:?}",
                self.config.audiences
            ));
        }
        for rule in &self.config.claim_rules {
            match rule {
                ClaimRule::Required { claim, value } => {
                    if claims[claim.as_str()].as_str() != Some(value.as_str()) {
                        return Err(format!(
                            "oidc: required claim {claim} value does not match. Got = {}, want = {value}",
                            claims[claim.as_str()]
                        ));
                    }
                }
                ClaimRule::Expression {
                    expression,
                    message,
                } => match eval("claims", claims, expression)? {
                    Cel::Bool(true) => {}
                    Cel::Bool(false) => {
                        return Err(format!(
                            "oidc: error evaluating claim validation expression: {message}"
                        ));
                    }
                    other => {
                        return Err(format!(
                            "oidc: claim validation expression {expression:?} must return a boolean, got {}",
                            other.type_of()
                        ));
                    }
                },
            }
        }
        Ok(())
    }

    fn map(&self, claims: &Value) -> Result<UserInfo, String> {
        let name = match &self.config.username {
            Mapping::Claim { claim, prefix } => {
                let v = claims[claim.as_str()].as_str().ok_or_else(|| {
                    format!("oidc: parse username claims {claim:?}: claim not present")
                })?;
                if claim == "email"
                    && claims
                        .get("email_verified")
                        .is_some_and(|v| v != &json!(true))
                {
                    return Err("oidc: email not verified".into());
                }
                format!("{prefix}{v}")
            }
            Mapping::Expression(e) => match eval("claims", claims, e)? {
                Cel::String(s) => s.to_string(),
                other => {
                    return Err(format!(
                        "oidc: error evaluating username expression: must return a string, got {}",
                        other.type_of()
                    ));
                }
            },
        };
        if name.is_empty() {
            return Err("oidc: empty username via expression or claim is not allowed".into());
        }
        let groups = match &self.config.groups {
            None => Vec::new(),
            Some(Mapping::Claim { claim, prefix }) => match &claims[claim.as_str()] {
                Value::Null => Vec::new(),
                Value::String(g) => vec![format!("{prefix}{g}")],
                Value::Array(a) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|g| format!("{prefix}{g}"))
                    .collect(),
                other => {
                    return Err(format!(
                        "oidc: parse groups claim {claim:?}: expected a string or a list of strings, got {other}"
                    ));
                }
            },
            Some(Mapping::Expression(e)) => strings(eval("claims", claims, e)?, "groups")?,
        };
        let uid = match &self.config.uid {
            None => String::new(),
            Some(Mapping::Claim { claim, .. }) => claims[claim.as_str()]
                .as_str()
                .ok_or_else(|| format!("oidc: parse uid claim {claim:?}: claim not present"))?
                .to_owned(),
            Some(Mapping::Expression(e)) => match eval("claims", claims, e)? {
                Cel::String(s) => s.to_string(),
                other => {
                    return Err(format!(
                        "oidc: error evaluating uid expression: must return a string, got {}",
                        other.type_of()
                    ));
                }
            },
        };
        let mut extra = BTreeMap::new();
        for (key, expr) in &self.config.extra {
            let values = strings(eval("claims", claims, expr)?, "extra")?;
            if !values.is_empty() {
                extra.insert(key.clone(), values);
            }
        }
        Ok(UserInfo {
            name,
            groups,
            uid,
            extra,
        })
    }

    fn validate_user(&self, user: &UserInfo) -> Result<(), String> {
        if self.config.user_rules.is_empty() {
            return Ok(());
        }
        let value = json!({
            "username": user.name,
            "uid": user.uid,
            "groups": user.groups,
            "extra": user.extra,
        });
        for (expr, message) in &self.config.user_rules {
            match eval("user", &value, expr)? {
                Cel::Bool(true) => {}
                _ => {
                    return Err(format!(
                        "oidc: error evaluating user info validation rule: {message}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Evaluates `expr` with `value` bound to `var`.
fn eval(var: &str, value: &Value, expr: &str) -> Result<Cel, String> {
    let program = Program::compile(expr).map_err(|e| format!("oidc: compiling {expr:?}: {e}"))?;
    let mut ctx = Context::default().with_all();
    ctx.add_variable_from_value(var, crate::crd::cel::plain_to_cel(value));
    program
        .execute(&ctx)
        .map_err(|e| format!("oidc: error evaluating {expr:?}: {e}"))
}

/// A CEL string or list of strings (null: none).
fn strings(v: Cel, what: &str) -> Result<Vec<String>, String> {
    match v {
        Cel::Null => Ok(Vec::new()),
        Cel::String(s) if s.is_empty() => Ok(Vec::new()),
        Cel::String(s) => Ok(vec![s.to_string()]),
        Cel::List(l) => l
            .iter()
            .map(|x| match x {
                Cel::String(s) => Ok(s.to_string()),
                other => Err(format!(
                    "oidc: {what} expression must return a string or a list of strings, got a list holding {}",
                    other.type_of()
                )),
            })
            .collect(),
        other => Err(format!(
            "oidc: {what} expression must return a string or a list of strings, got {}",
            other.type_of()
        )),
    }
}
