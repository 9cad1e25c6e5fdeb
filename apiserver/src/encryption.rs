//! Encryption at rest (`--encryption-provider-config`): an `apiserver.config.k8s.io/v1`
//! `EncryptionConfiguration` names, per group of resources, a list of providers; the first
//! encrypts every write, all of them are tried on reads, so keys can be rotated and data
//! written before encryption was turned on stays readable while `identity` is listed.
//!
//! Providers: `identity` (plain bytes) and `aesgcm` (AES-GCM with a random 12-byte nonce and
//! the storage key as additional authenticated data, 16- or 32-byte keys, through `ring`),
//! stored as upstream's `k8s:enc:aesgcm:v1:<key name>:<nonce><ciphertext+tag>`. `aescbc`,
//! `secretbox` and `kms` need ciphers no dependency of this workspace provides; a
//! configuration naming them is refused at start-up.
//!
//! Resources are written as upstream's (`secrets`, `deployments.apps`, `*.apps`, `*.` for
//! every core resource, `*.*` for everything); the first entry that matches a key's resource
//! decides. Keys are this server's storage keys, `/registry/<group|core>/<plural>/…`.

use std::borrow::Cow;
use std::path::Path;

use base64::Engine as _;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;

/// Every encrypted value starts with this.
const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";
const NONCE_LEN: usize = 12;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Deserialize)]
struct ResourceConfig {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct KeysConfig {
    #[serde(default)]
    keys: Vec<KeyConfig>,
}

#[derive(Deserialize)]
struct KeyConfig {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

/// One AES-GCM key.
struct GcmKey {
    /// `k8s:enc:aesgcm:v1:<name>:`.
    prefix: Vec<u8>,
    key: LessSafeKey,
}

enum Provider {
    Identity,
    AesGcm(Vec<GcmKey>),
}

/// Which resources an entry covers: (group, resource), `*` for any.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourceMatch {
    group: String,
    resource: String,
}

impl ResourceMatch {
    /// `secrets` → ("", "secrets"); `deployments.apps`; `*.apps`; `*.` (core); `*.*`.
    fn parse(spec: &str) -> ResourceMatch {
        match spec.split_once('.') {
            Some((resource, group)) => ResourceMatch {
                group: group.to_owned(),
                resource: resource.to_owned(),
            },
            None => ResourceMatch {
                group: String::new(),
                resource: spec.to_owned(),
            },
        }
    }

    fn matches(&self, group: &str, resource: &str) -> bool {
        (self.group == "*" || self.group == group)
            && (self.resource == "*" || self.resource == resource)
    }
}

/// The providers of one configuration entry.
struct Chain {
    matches: Vec<ResourceMatch>,
    providers: Vec<Provider>,
}

/// The loaded configuration.
pub struct Encryption {
    chains: Vec<Chain>,
    rng: SystemRandom,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption")
            .field("entries", &self.chains.len())
            .finish()
    }
}

impl Encryption {
    /// Reads and checks an `EncryptionConfiguration` (YAML or JSON).
    pub fn load(path: &Path) -> Result<Encryption, String> {
        let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Encryption::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks a configuration document.
    pub fn parse(text: &[u8]) -> Result<Encryption, String> {
        let value: serde_json::Value = match serde_json::from_slice(text) {
            Ok(v) => v,
            Err(_) => serde_saphyr::from_slice(text).map_err(|e| format!("invalid YAML: {e}"))?,
        };
        let file: ConfigFile = serde_json::from_value(value)
            .map_err(|e| format!("invalid EncryptionConfiguration: {e}"))?;
        if file.kind != "EncryptionConfiguration"
            || file.api_version != "apiserver.config.k8s.io/v1"
        {
            return Err(format!(
                "expected an apiserver.config.k8s.io/v1 EncryptionConfiguration, got {}, Kind={}",
                file.api_version, file.kind
            ));
        }
        let mut chains = Vec::new();
        for (i, entry) in file.resources.iter().enumerate() {
            if entry.resources.is_empty() {
                return Err(format!("resources[{i}].resources: Required value"));
            }
            if entry.providers.is_empty() {
                return Err(format!("resources[{i}].providers: Required value"));
            }
            let providers = entry
                .providers
                .iter()
                .enumerate()
                .map(|(j, p)| {
                    provider(p).map_err(|e| format!("resources[{i}].providers[{j}]: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            chains.push(Chain {
                matches: entry
                    .resources
                    .iter()
                    .map(|r| ResourceMatch::parse(r))
                    .collect(),
                providers,
            });
        }
        Ok(Encryption {
            chains,
            rng: SystemRandom::new(),
        })
    }

    /// The providers for a storage key, if an entry covers its resource.
    fn chain(&self, key: &[u8]) -> Option<&Chain> {
        let key = std::str::from_utf8(key).ok()?;
        let mut parts = key.strip_prefix("/registry/")?.split('/');
        let group = match parts.next()? {
            "core" => "",
            g => g,
        };
        let resource = parts.next()?;
        self.chains
            .iter()
            .find(|c| c.matches.iter().any(|m| m.matches(group, resource)))
    }

    /// Whether values under `key` are transformed at all.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.chain(key).is_some()
    }

    /// The bytes to store for `value` at `key`: encrypted by the first provider of the key's
    /// entry (unchanged for `identity` or when no entry covers the key).
    pub fn seal(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, String> {
        let Some(chain) = self.chain(key) else {
            return Ok(value);
        };
        match chain.providers.first() {
            None | Some(Provider::Identity) => Ok(value),
            Some(Provider::AesGcm(keys)) => {
                let Some(k) = keys.first() else {
                    return Ok(value);
                };
                let mut nonce = [0u8; NONCE_LEN];
                self.rng
                    .fill(&mut nonce)
                    .map_err(|_| "no randomness for an AES-GCM nonce".to_owned())?;
                let mut sealed = value;
                k.key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(key),
                        &mut sealed,
                    )
                    .map_err(|_| "AES-GCM encryption failed".to_owned())?;
                let mut out = Vec::with_capacity(k.prefix.len() + NONCE_LEN + sealed.len());
                out.extend_from_slice(&k.prefix);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    /// The plain value of stored bytes at `key`, trying the entry's providers in order (as
    /// upstream's prefix transformer: `identity` refuses encrypted data and lets the next
    /// provider try; nothing matching is an error).
    pub fn open<'a>(&self, key: &[u8], stored: &'a [u8]) -> Result<Cow<'a, [u8]>, String> {
        let Some(chain) = self.chain(key) else {
            return Ok(Cow::Borrowed(stored));
        };
        for provider in &chain.providers {
            match provider {
                Provider::Identity => {
                    // Encrypted data is left to the next provider: upstream's identity
                    // transformer refuses it.
                    if stored.starts_with(ENCRYPTED_PREFIX) {
                        continue;
                    }
                    return Ok(Cow::Borrowed(stored));
                }
                Provider::AesGcm(keys) => {
                    for k in keys {
                        let Some(rest) = stored.strip_prefix(k.prefix.as_slice()) else {
                            continue;
                        };
                        if rest.len() < NONCE_LEN {
                            return Err("the stored data was shorter than the required size".into());
                        }
                        let (nonce, sealed) = rest.split_at(NONCE_LEN);
                        let nonce = Nonce::try_assume_unique_for_key(nonce)
                            .map_err(|_| "bad AES-GCM nonce".to_owned())?;
                        let mut buf = sealed.to_vec();
                        let plain_len = k
                            .key
                            .open_in_place(nonce, Aad::from(key), &mut buf)
                            .map_err(|_| "cipher: message authentication failed".to_owned())?
                            .len();
                        buf.truncate(plain_len);
                        return Ok(Cow::Owned(buf));
                    }
                }
            }
        }
        Err("no matching prefix found".into())
    }
}

/// One provider entry (`{identity: {}}`, `{aesgcm: {keys: [...]}}`).
fn provider(entry: &serde_json::Map<String, serde_json::Value>) -> Result<Provider, String> {
    if entry.len() != 1 {
        return Err("exactly one provider must be specified in each entry".into());
    }
    let Some((name, config)) = entry.iter().next() else {
        return Err("exactly one provider must be specified in each entry".into());
    };
    match name.as_str() {
        "identity" => Ok(Provider::Identity),
        "aesgcm" => {
            let keys: KeysConfig =
                serde_json::from_value(config.clone()).map_err(|e| format!("aesgcm: {e}"))?;
            if keys.keys.is_empty() {
                return Err("aesgcm.keys: Required value".into());
            }
            keys.keys
                .iter()
                .enumerate()
                .map(|(i, k)| gcm_key(k).map_err(|e| format!("aesgcm.keys[{i}]: {e}")))
                .collect::<Result<Vec<_>, _>>()
                .map(Provider::AesGcm)
        }
        "aescbc" | "secretbox" | "kms" => Err(format!(
            "the {name} provider is not supported by this server (supported: identity, aesgcm)"
        )),
        other => Err(format!("unknown provider {other:?}")),
    }
}

fn gcm_key(k: &KeyConfig) -> Result<GcmKey, String> {
    if k.name.is_empty() {
        return Err("name: Required value".into());
    }
    if k.name.contains(':') {
        return Err(format!(
            "name: Invalid value: {:?}: should not contain ':'",
            k.name
        ));
    }
    let secret = base64::engine::general_purpose::STANDARD
        .decode(k.secret.trim())
        .map_err(|e| format!("secret: Invalid value: secrets must be base64 encoded: {e}"))?;
    let algorithm = match secret.len() {
        16 => &aead::AES_128_GCM,
        32 => &aead::AES_256_GCM,
        n => {
            return Err(format!(
                "secret: Invalid value: aes-gcm keys must be 16 or 32 bytes long, got {n}"
            ));
        }
    };
    let key = UnboundKey::new(algorithm, &secret).map_err(|_| "secret: bad AES key".to_owned())?;
    Ok(GcmKey {
        prefix: format!("k8s:enc:aesgcm:v1:{}:", k.name).into_bytes(),
        key: LessSafeKey::new(key),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY1: &str = "c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQ/IHllcyEhISE="; // 32 bytes
    const KEY2: &str = "MTIzNDU2Nzg5MDEyMzQ1Ng=="; // 16 bytes

    fn config(providers: &str) -> Encryption {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets, \"*.apps\"]\n  providers:\n{providers}"
        );
        Encryption::parse(text.as_bytes()).unwrap()
    }

    const SECRET: &[u8] = b"/registry/core/secrets/default/s1";

    #[test]
    fn aesgcm_writes_upstreams_prefix_and_reads_back() {
        let enc = config(&format!(
            "  - aesgcm:\n      keys:\n      - name: key1\n        secret: {KEY1}\n  - identity: {{}}\n"
        ));
        let sealed = enc.seal(SECRET, b"{\"data\":\"hello\"}".to_vec()).unwrap();
        assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
        assert!(!sealed.windows(5).any(|w| w == b"hello"));
        assert_eq!(
            &*enc.open(SECRET, &sealed).unwrap(),
            b"{\"data\":\"hello\"}"
        );
        // Plain data written before encryption still reads (identity is listed).
        assert_eq!(&*enc.open(SECRET, b"{\"old\":1}").unwrap(), b"{\"old\":1}");
        // The key is authenticated: the same bytes under another key do not open.
        assert!(
            enc.open(b"/registry/core/secrets/default/s2", &sealed)
                .is_err()
        );
        // Resources not configured are untouched.
        let cm = b"/registry/core/configmaps/default/c".as_slice();
        assert_eq!(enc.seal(cm, b"x".to_vec()).unwrap(), b"x");
        assert!(enc.covers(b"/registry/apps/deployments/default/d"));
        assert!(!enc.covers(b"/registry/batch/jobs/default/j"));
    }

    #[test]
    fn rotation_reads_old_keys_and_writes_with_the_first() {
        let old = config(&format!(
            "  - aesgcm:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"
        ));
        let sealed = old.seal(SECRET, b"v".to_vec()).unwrap();
        let rotated = config(&format!(
            "  - aesgcm:\n      keys:\n      - name: key2\n        secret: {KEY2}\n      - name: key1\n        secret: {KEY1}\n"
        ));
        assert_eq!(&*rotated.open(SECRET, &sealed).unwrap(), b"v");
        assert!(
            rotated
                .seal(SECRET, b"v".to_vec())
                .unwrap()
                .starts_with(b"k8s:enc:aesgcm:v1:key2:")
        );
        // Without identity, plain data is an error, as upstream.
        assert_eq!(
            rotated.open(SECRET, b"plain").unwrap_err(),
            "no matching prefix found"
        );
        // Identity first (decrypting back to plain text) still reads encrypted data.
        let back = config(&format!(
            "  - identity: {{}}\n  - aesgcm:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"
        ));
        assert_eq!(&*back.open(SECRET, &sealed).unwrap(), b"v");
        assert_eq!(back.seal(SECRET, b"v".to_vec()).unwrap(), b"v");
    }

    #[test]
    fn bad_configurations_are_refused() {
        let bad = |providers: &str| {
            let text = format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"
            );
            Encryption::parse(text.as_bytes()).err().unwrap_or_default()
        };
        assert!(
            bad("  - aescbc:\n      keys:\n      - name: k\n        secret: {KEY1}\n")
                .contains("not supported")
        );
        assert!(
            bad("  - aesgcm:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n")
                .contains("16 or 32 bytes")
        );
        assert!(bad("  - aesgcm:\n      keys: []\n").contains("Required"));
        assert!(bad("  - rot13: {}\n").contains("unknown provider"));
        assert!(Encryption::parse(b"apiVersion: v1\nkind: ConfigMap\n").is_err());
    }
}
