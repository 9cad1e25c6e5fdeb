//! What a JWT (OIDC) authenticator checks and how it maps claims to a user: from
//! kube-apiserver's `--oidc-*` flags ([`from_flags`]) or from the structured
//! `--authentication-config` file, an `AuthenticationConfiguration`
//! (`apiserver.config.k8s.io/v1beta1` or `v1`) whose `jwt` list holds several
//! authenticators ([`load`]).
//!
//! Upstream's rules kept here: with the flags, a username claim other than `email` is
//! prefixed with `<issuer>#` unless `--oidc-username-prefix` says otherwise (`-`: none);
//! in the file, a claim mapping has either `claim` (with a `prefix`, required for the
//! username) or a CEL `expression`, never both; issuers must be distinct `https://` URLs.

use std::path::Path;

use serde_json::Value;

/// How one user attribute comes from the claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    /// The value of `claim`, with `prefix` put before it (each group gets it).
    Claim {
        /// The claim's name.
        claim: String,
        /// Put before the value.
        prefix: String,
    },
    /// A CEL expression over `claims`.
    Expression(String),
}

/// One `claimValidationRules` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRule {
    /// The claim must be present and equal to the value (`--oidc-required-claim`).
    Required {
        /// The claim.
        claim: String,
        /// Its required value.
        value: String,
    },
    /// A CEL expression over `claims` that must be true.
    Expression {
        /// The expression.
        expression: String,
        /// Why a token failing it is refused.
        message: String,
    },
}

/// One JWT authenticator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// `issuer.url`: the token's `iss` must equal it.
    pub issuer: String,
    /// `issuer.discoveryURL`: where the discovery document is (default
    /// `<issuer>/.well-known/openid-configuration`).
    pub discovery_url: Option<String>,
    /// `issuer.audiences`: the token's `aud` must hold one of them.
    pub audiences: Vec<String>,
    /// `issuer.certificateAuthority` / `--oidc-ca-file`: PEM of the CAs trusted for the
    /// discovery document and the JWKS.
    pub ca_pem: Option<String>,
    /// `claimMappings.username`.
    pub username: Mapping,
    /// `claimMappings.groups`.
    pub groups: Option<Mapping>,
    /// `claimMappings.uid`.
    pub uid: Option<Mapping>,
    /// `claimMappings.extra`: key and CEL value expression.
    pub extra: Vec<(String, String)>,
    /// `claimValidationRules`.
    pub claim_rules: Vec<ClaimRule>,
    /// `userValidationRules`: CEL expressions over `user`, with their messages.
    pub user_rules: Vec<(String, String)>,
}

/// kube-apiserver's `--oidc-*` flags.
#[derive(Debug, Clone, Default)]
pub struct OidcFlags {
    /// `--oidc-issuer-url`.
    pub issuer_url: Option<String>,
    /// `--oidc-client-id`.
    pub client_id: Option<String>,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: Option<String>,
    /// `--oidc-username-prefix`.
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: Option<String>,
    /// `--oidc-ca-file`.
    pub ca_file: Option<std::path::PathBuf>,
    /// `--oidc-required-claim` (`key=value`, repeatable).
    pub required_claims: Vec<String>,
}

impl OidcFlags {
    /// Whether any flag is set.
    pub fn is_set(&self) -> bool {
        self.issuer_url.is_some()
            || self.client_id.is_some()
            || self.username_claim.is_some()
            || self.groups_claim.is_some()
            || self.ca_file.is_some()
            || !self.required_claims.is_empty()
    }
}

fn check_issuer(url: &str) -> Result<(), String> {
    if !url.starts_with("https://") {
        return Err(format!("issuer URL {url:?} must use the https scheme"));
    }
    if url.contains('?') || url.contains('#') {
        return Err(format!(
            "issuer URL {url:?} must not have a query or fragment"
        ));
    }
    Ok(())
}

/// The authenticator the `--oidc-*` flags describe (`None` when they are not set).
pub fn from_flags(f: &OidcFlags) -> Result<Option<JwtConfig>, String> {
    if !f.is_set() {
        return Ok(None);
    }
    let (Some(issuer), Some(client_id)) = (&f.issuer_url, &f.client_id) else {
        return Err("--oidc-issuer-url and --oidc-client-id must be given together".into());
    };
    check_issuer(issuer)?;
    let claim = f.username_claim.clone().unwrap_or_else(|| "sub".into());
    let prefix = match f.username_prefix.as_deref() {
        Some("-") => String::new(),
        Some(p) if !p.is_empty() => p.to_owned(),
        _ if claim == "email" => String::new(),
        _ => format!("{issuer}#"),
    };
    let ca_pem = f
        .ca_file
        .as_ref()
        .map(|p| {
            std::fs::read_to_string(p).map_err(|e| format!("--oidc-ca-file {}: {e}", p.display()))
        })
        .transpose()?;
    let mut claim_rules = Vec::new();
    for kv in &f.required_claims {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--oidc-required-claim {kv:?}: expected key=value"))?;
        claim_rules.push(ClaimRule::Required {
            claim: k.to_owned(),
            value: v.to_owned(),
        });
    }
    Ok(Some(JwtConfig {
        issuer: issuer.clone(),
        discovery_url: None,
        audiences: vec![client_id.clone()],
        ca_pem,
        username: Mapping::Claim { claim, prefix },
        groups: f.groups_claim.as_ref().map(|c| Mapping::Claim {
            claim: c.clone(),
            prefix: f.groups_prefix.clone().unwrap_or_default(),
        }),
        uid: None,
        extra: Vec::new(),
        claim_rules,
        user_rules: Vec::new(),
    }))
}

/// Reads an AuthenticationConfiguration file (YAML or JSON) and returns its JWT
/// authenticators.
pub fn load(path: &Path) -> Result<Vec<JwtConfig>, String> {
    let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let value: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(_) => serde_saphyr::from_slice(&text)
            .map_err(|e| format!("{}: invalid YAML: {e}", path.display()))?,
    };
    parse(&value).map_err(|e| format!("{}: {e}", path.display()))
}

fn str_at<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A claim mapping object: `claim` (+ `prefix`) or `expression`.
fn mapping(v: &Value, at: &str, prefix_required: bool) -> Result<Option<Mapping>, String> {
    if v.is_null() {
        return Ok(None);
    }
    match (str_at(v, "claim"), str_at(v, "expression")) {
        (Some(_), Some(_)) => Err(format!("{at}: claim and expression can't both be set")),
        (Some(claim), None) => {
            let prefix = match v.get("prefix").and_then(Value::as_str) {
                Some(p) => p.to_owned(),
                None if prefix_required => {
                    return Err(format!(
                        "{at}.prefix: Required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing"
                    ));
                }
                None => String::new(),
            };
            Ok(Some(Mapping::Claim {
                claim: claim.to_owned(),
                prefix,
            }))
        }
        (None, Some(expr)) => {
            if v.get("prefix")
                .and_then(Value::as_str)
                .is_some_and(|p| !p.is_empty())
            {
                return Err(format!(
                    "{at}.prefix: may not be specified when expression is set"
                ));
            }
            compile(expr, at)?;
            Ok(Some(Mapping::Expression(expr.to_owned())))
        }
        (None, None) => Err(format!(
            "{at}: Required value: claim or expression is required"
        )),
    }
}

fn compile(expr: &str, at: &str) -> Result<(), String> {
    kube_cel::cel::Program::compile(expr)
        .map(|_| ())
        .map_err(|e| format!("{at}.expression: Invalid value: {expr:?}: compilation failed: {e}"))
}

/// Validates an AuthenticationConfiguration and returns its JWT authenticators.
pub fn parse(config: &Value) -> Result<Vec<JwtConfig>, String> {
    let api_version = config["apiVersion"].as_str().unwrap_or_default();
    if !matches!(
        api_version,
        "apiserver.config.k8s.io/v1"
            | "apiserver.config.k8s.io/v1beta1"
            | "apiserver.config.k8s.io/v1alpha1"
    ) || config["kind"].as_str() != Some("AuthenticationConfiguration")
    {
        return Err(format!(
            "expected kind AuthenticationConfiguration of apiserver.config.k8s.io/v1 or v1beta1, got {api_version:?} {:?}",
            config["kind"].as_str().unwrap_or_default()
        ));
    }
    let mut out: Vec<JwtConfig> = Vec::new();
    let jwts = config["jwt"].as_array().cloned().unwrap_or_default();
    for (i, j) in jwts.iter().enumerate() {
        let at = format!("jwt[{i}]");
        let issuer = &j["issuer"];
        let url = str_at(issuer, "url")
            .ok_or_else(|| format!("{at}.issuer.url: Required value"))?
            .to_owned();
        check_issuer(&url).map_err(|e| format!("{at}.issuer.url: {e}"))?;
        if out.iter().any(|o| o.issuer == url) {
            return Err(format!("{at}.issuer.url: Duplicate value: {url:?}"));
        }
        let audiences: Vec<String> = issuer["audiences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if audiences.is_empty() {
            return Err(format!(
                "{at}.issuer.audiences: Required value: at least one issuer.audiences is required"
            ));
        }
        if audiences.len() > 1 && str_at(issuer, "audienceMatchPolicy") != Some("MatchAny") {
            return Err(format!(
                "{at}.issuer.audienceMatchPolicy: Invalid value: audienceMatchPolicy must be MatchAny for multiple audiences"
            ));
        }
        let maps = &j["claimMappings"];
        let username = mapping(
            &maps["username"],
            &format!("{at}.claimMappings.username"),
            true,
        )?
        .ok_or_else(|| {
            format!("{at}.claimMappings.username: Required value: claim or expression is required")
        })?;
        let groups = mapping(
            &maps["groups"],
            &format!("{at}.claimMappings.groups"),
            false,
        )?;
        let uid = mapping(&maps["uid"], &format!("{at}.claimMappings.uid"), false)?;
        let mut extra = Vec::new();
        for (k, e) in maps["extra"].as_array().into_iter().flatten().enumerate() {
            let key = str_at(e, "key")
                .ok_or_else(|| format!("{at}.claimMappings.extra[{k}].key: Required value"))?;
            if !key.contains('/') || key != key.to_lowercase() {
                return Err(format!(
                    "{at}.claimMappings.extra[{k}].key: Invalid value: {key:?}: must be a domain-prefix path (such as \"acme.io/foo\") and lowercase"
                ));
            }
            let expr = str_at(e, "valueExpression").ok_or_else(|| {
                format!("{at}.claimMappings.extra[{k}].valueExpression: Required value")
            })?;
            compile(expr, &format!("{at}.claimMappings.extra[{k}]"))?;
            extra.push((key.to_owned(), expr.to_owned()));
        }
        let mut claim_rules = Vec::new();
        for (k, r) in j["claimValidationRules"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let rat = format!("{at}.claimValidationRules[{k}]");
            match (str_at(r, "claim"), str_at(r, "expression")) {
                (Some(claim), None) => claim_rules.push(ClaimRule::Required {
                    claim: claim.to_owned(),
                    value: r["requiredValue"].as_str().unwrap_or_default().to_owned(),
                }),
                (None, Some(expr)) => {
                    compile(expr, &rat)?;
                    claim_rules.push(ClaimRule::Expression {
                        expression: expr.to_owned(),
                        message: r["message"].as_str().unwrap_or_default().to_owned(),
                    });
                }
                _ => {
                    return Err(format!(
                        "{rat}: exactly one of claim or expression is required"
                    ));
                }
            }
        }
        let mut user_rules = Vec::new();
        for (k, r) in j["userValidationRules"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let expr = str_at(r, "expression").ok_or_else(|| {
                format!("{at}.userValidationRules[{k}].expression: Required value")
            })?;
            compile(expr, &format!("{at}.userValidationRules[{k}]"))?;
            user_rules.push((
                expr.to_owned(),
                r["message"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        out.push(JwtConfig {
            issuer: url,
            discovery_url: str_at(issuer, "discoveryURL").map(str::to_owned),
            audiences,
            ca_pem: str_at(issuer, "certificateAuthority").map(str::to_owned),
            username,
            groups,
            uid,
            extra,
            claim_rules,
            user_rules,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_prefix_like_upstream() {
        let f = OidcFlags {
            issuer_url: Some("https://idp.example".into()),
            client_id: Some("kube".into()),
            ..OidcFlags::default()
        };
        let c = from_flags(&f).unwrap().unwrap();
        assert_eq!(
            c.username,
            Mapping::Claim {
                claim: "sub".into(),
                prefix: "https://idp.example#".into()
            }
        );
        let f = OidcFlags {
            username_claim: Some("email".into()),
            ..f
        };
        let c = from_flags(&f).unwrap().unwrap();
        assert_eq!(
            c.username,
            Mapping::Claim {
                claim: "email".into(),
                prefix: String::new()
            }
        );
        let f = OidcFlags {
            issuer_url: Some("http://idp.example".into()),
            client_id: Some("kube".into()),
            ..OidcFlags::default()
        };
        assert!(from_flags(&f).is_err());
    }

    #[test]
    fn structured_config_parses_and_rejects_bad_mappings() {
        let cfg = json!({
            "apiVersion": "apiserver.config.k8s.io/v1beta1",
            "kind": "AuthenticationConfiguration",
            "jwt": [{
                "issuer": {"url": "https://idp.example", "audiences": ["kube"]},
                "claimMappings": {
                    "username": {"expression": "'oidc:' + claims.sub"},
                    "groups": {"claim": "groups", "prefix": "oidc:"},
                    "extra": [{"key": "example.com/tenant", "valueExpression": "claims.tenant"}]
                },
                "claimValidationRules": [
                    {"claim": "hd", "requiredValue": "example.com"},
                    {"expression": "claims.exp - claims.iat <= 86400", "message": "too long"}
                ]
            }]
        });
        let c = parse(&cfg).unwrap();
        assert_eq!(c[0].claim_rules.len(), 2);
        let mut bad = cfg.clone();
        bad["jwt"][0]["claimMappings"]["username"] = json!({"claim": "sub"});
        assert!(parse(&bad).unwrap_err().contains("prefix is required"));
        let mut bad = cfg;
        bad["jwt"][0]["claimMappings"]["username"] = json!({"expression": "claims.("});
        assert!(parse(&bad).unwrap_err().contains("compilation failed"));
    }
}
