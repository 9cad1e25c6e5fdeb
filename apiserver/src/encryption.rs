//! Encryption at rest (`--encryption-provider-config`): an `apiserver.config.k8s.io/v1`
//! `EncryptionConfiguration` names, per group of resources, a list of providers; the first
//! encrypts every write, all of them are tried on reads, so keys can be rotated and data
//! written before encryption was turned on stays readable while `identity` is listed.
//!
//! Providers, stored as upstream's `k8s:enc:<provider>:v1:<key name>:<data>`:
//! - `identity`: plain bytes;
//! - `aesgcm`: AES-GCM (16- or 32-byte keys, through `ring`), a random 12-byte nonce, the
//!   storage key as additional authenticated data; data = nonce, ciphertext, tag;
//! - `aescbc`: AES-CBC (16-, 24- or 32-byte keys) with PKCS#7 padding; data = a random 16-byte
//!   IV, then the ciphertext;
//! - `secretbox`: XSalsa20-Poly1305 (32-byte keys); data = a random 24-byte nonce, then
//!   NaCl's box (tag, ciphertext).
//!
//! `kms` needs a plugin this server cannot talk to; a configuration naming it is refused.
//!
//! Resources are written as upstream's (`secrets`, `deployments.apps`, `*.apps`, `*.` for
//! every core resource, `*.*` for everything); the first entry that matches a key's resource
//! decides. Keys are this server's storage keys, `/registry/<group|core>/<plural>/…`.

use std::borrow::Cow;
use std::path::Path;

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use base64::Engine as _;
use crypto_secretbox::aead::{Aead, KeyInit};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;

/// Every encrypted value starts with this.
const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";
const NONCE_LEN: usize = 12;
/// AES block (and CBC IV) size.
const AES_BLOCK: usize = 16;
/// XSalsa20 nonce size.
const SECRETBOX_NONCE: usize = 24;
/// Poly1305 tag size.
const SECRETBOX_TAG: usize = 16;

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

/// One key of an encrypting provider.
struct ProviderKey {
    /// `k8s:enc:<provider>:v1:<name>:`.
    prefix: Vec<u8>,
    cipher: Cipher,
}

/// The cipher of one key.
enum Cipher {
    Gcm(Box<LessSafeKey>),
    /// The raw AES key: 16, 24 or 32 bytes.
    Cbc(Vec<u8>),
    Secretbox(crypto_secretbox::XSalsa20Poly1305),
}

enum Provider {
    Identity,
    /// `aesgcm`, `aescbc` or `secretbox`: the first key encrypts, all decrypt.
    Keys(Vec<ProviderKey>),
}

/// The AES-CBC variants by key size.
type Cbc128Enc = cbc::Encryptor<aes::Aes128>;
type Cbc192Enc = cbc::Encryptor<aes::Aes192>;
type Cbc256Enc = cbc::Encryptor<aes::Aes256>;
type Cbc128Dec = cbc::Decryptor<aes::Aes128>;
type Cbc192Dec = cbc::Decryptor<aes::Aes192>;
type Cbc256Dec = cbc::Decryptor<aes::Aes256>;

impl Cipher {
    /// Encrypts `value` (stored at `key`) into the bytes that follow the prefix.
    fn seal(&self, rng: &SystemRandom, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, String> {
        match self {
            Cipher::Gcm(k) => {
                let mut nonce = [0u8; NONCE_LEN];
                rng.fill(&mut nonce)
                    .map_err(|_| "no randomness for an AES-GCM nonce".to_owned())?;
                let mut sealed = value;
                k.seal_in_place_append_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(key),
                    &mut sealed,
                )
                .map_err(|_| "AES-GCM encryption failed".to_owned())?;
                let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
            Cipher::Cbc(k) => {
                let mut iv = [0u8; AES_BLOCK];
                rng.fill(&mut iv)
                    .map_err(|_| "no randomness for an AES-CBC IV".to_owned())?;
                let bad = |_| "bad AES-CBC key".to_owned();
                let sealed = match k.len() {
                    16 => Cbc128Enc::new_from_slices(k, &iv)
                        .map_err(bad)?
                        .encrypt_padded_vec_mut::<Pkcs7>(&value),
                    24 => Cbc192Enc::new_from_slices(k, &iv)
                        .map_err(bad)?
                        .encrypt_padded_vec_mut::<Pkcs7>(&value),
                    _ => Cbc256Enc::new_from_slices(k, &iv)
                        .map_err(bad)?
                        .encrypt_padded_vec_mut::<Pkcs7>(&value),
                };
                let mut out = Vec::with_capacity(AES_BLOCK + sealed.len());
                out.extend_from_slice(&iv);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
            Cipher::Secretbox(k) => {
                let mut nonce = [0u8; SECRETBOX_NONCE];
                rng.fill(&mut nonce)
                    .map_err(|_| "no randomness for a secretbox nonce".to_owned())?;
                let sealed = k
                    .encrypt(
                        crypto_secretbox::Nonce::from_slice(&nonce),
                        value.as_slice(),
                    )
                    .map_err(|_| "secretbox encryption failed".to_owned())?;
                let mut out = Vec::with_capacity(SECRETBOX_NONCE + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    /// Decrypts the bytes after the prefix (upstream's error messages).
    fn open(&self, key: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Cipher::Gcm(k) => {
                if data.len() < NONCE_LEN {
                    return Err("the stored data was shorter than the required size".into());
                }
                let (nonce, sealed) = data.split_at(NONCE_LEN);
                let nonce = Nonce::try_assume_unique_for_key(nonce)
                    .map_err(|_| "bad AES-GCM nonce".to_owned())?;
                let mut buf = sealed.to_vec();
                let plain_len = k
                    .open_in_place(nonce, Aad::from(key), &mut buf)
                    .map_err(|_| "cipher: message authentication failed".to_owned())?
                    .len();
                buf.truncate(plain_len);
                Ok(buf)
            }
            Cipher::Cbc(k) => {
                if data.len() < AES_BLOCK {
                    return Err("the stored data was shorter than the required size".into());
                }
                let (iv, sealed) = data.split_at(AES_BLOCK);
                if sealed.is_empty() || !sealed.len().is_multiple_of(AES_BLOCK) {
                    return Err("the stored data is not a multiple of the block size".into());
                }
                let bad = |_| "bad AES-CBC key".to_owned();
                let padding = |_| "invalid padding on input".to_owned();
                match k.len() {
                    16 => Cbc128Dec::new_from_slices(k, iv)
                        .map_err(bad)?
                        .decrypt_padded_vec_mut::<Pkcs7>(sealed)
                        .map_err(padding),
                    24 => Cbc192Dec::new_from_slices(k, iv)
                        .map_err(bad)?
                        .decrypt_padded_vec_mut::<Pkcs7>(sealed)
                        .map_err(padding),
                    _ => Cbc256Dec::new_from_slices(k, iv)
                        .map_err(bad)?
                        .decrypt_padded_vec_mut::<Pkcs7>(sealed)
                        .map_err(padding),
                }
            }
            Cipher::Secretbox(k) => {
                if data.len() < SECRETBOX_NONCE + SECRETBOX_TAG {
                    return Err("the stored data was shorter than the required size".into());
                }
                let (nonce, sealed) = data.split_at(SECRETBOX_NONCE);
                k.decrypt(crypto_secretbox::Nonce::from_slice(nonce), sealed)
                    .map_err(|_| "output array was not large enough for encryption".to_owned())
            }
        }
    }
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
            Some(Provider::Keys(keys)) => {
                let Some(k) = keys.first() else {
                    return Ok(value);
                };
                let data = k.cipher.seal(&self.rng, key, value)?;
                let mut out = Vec::with_capacity(k.prefix.len() + data.len());
                out.extend_from_slice(&k.prefix);
                out.extend_from_slice(&data);
                Ok(out)
            }
        }
    }

    /// Whether `stored` (the bytes at `key`) was not written by the current first provider
    /// and key: upstream's "stale" transformer result, which makes an update that changes
    /// nothing still write, so `kubectl replace` of unchanged objects rotates keys.
    pub fn stale(&self, key: &[u8], stored: &[u8]) -> bool {
        let Some(chain) = self.chain(key) else {
            return false;
        };
        match chain.providers.first() {
            None => false,
            Some(Provider::Identity) => stored.starts_with(ENCRYPTED_PREFIX),
            Some(Provider::Keys(keys)) => keys
                .first()
                .is_none_or(|k| !stored.starts_with(k.prefix.as_slice())),
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
                Provider::Keys(keys) => {
                    for k in keys {
                        let Some(rest) = stored.strip_prefix(k.prefix.as_slice()) else {
                            continue;
                        };
                        return k.cipher.open(key, rest).map(Cow::Owned);
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
        "aesgcm" | "aescbc" | "secretbox" => {
            let keys: KeysConfig =
                serde_json::from_value(config.clone()).map_err(|e| format!("{name}: {e}"))?;
            if keys.keys.is_empty() {
                return Err(format!("{name}.keys: Required value"));
            }
            keys.keys
                .iter()
                .enumerate()
                .map(|(i, k)| provider_key(name, k).map_err(|e| format!("{name}.keys[{i}].{e}")))
                .collect::<Result<Vec<_>, _>>()
                .map(Provider::Keys)
        }
        "kms" => Err(
            "the kms provider is not supported by this server (supported: identity, aesgcm, aescbc, secretbox)"
                .into(),
        ),
        other => Err(format!("unknown provider {other:?}")),
    }
}

/// One key of an `aesgcm`, `aescbc` or `secretbox` provider, checked as upstream's
/// validation (name without ':', base64 secret of an allowed size).
fn provider_key(provider: &str, k: &KeyConfig) -> Result<ProviderKey, String> {
    if k.name.is_empty() {
        return Err("name: Required value".into());
    }
    if k.name.contains(':') {
        return Err(format!(
            "name: Invalid value: {:?}: should not contain ':'",
            k.name
        ));
    }
    if k.secret.trim().is_empty() {
        return Err("secret: Required value".into());
    }
    let secret = base64::engine::general_purpose::STANDARD
        .decode(k.secret.trim())
        .map_err(|_| "secret: Invalid value: \"REDACTED\": secrets must be base64 encoded")?;
    let sizes: &[usize] = match provider {
        "aesgcm" => &[16, 24, 32],
        "aescbc" => &[16, 24, 32],
        _ => &[32],
    };
    if !sizes.contains(&secret.len()) {
        return Err(format!(
            "secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {sizes:?}",
            secret.len()
        ));
    }
    let cipher = match provider {
        "aesgcm" => {
            let algorithm = match secret.len() {
                16 => &aead::AES_128_GCM,
                32 => &aead::AES_256_GCM,
                n => {
                    return Err(format!(
                        "secret: Invalid value: \"REDACTED\": this server's aes-gcm keys must be 16 or 32 bytes long, got {n}"
                    ));
                }
            };
            let key = UnboundKey::new(algorithm, &secret)
                .map_err(|_| "secret: bad AES key".to_owned())?;
            Cipher::Gcm(Box::new(LessSafeKey::new(key)))
        }
        "aescbc" => Cipher::Cbc(secret),
        _ => Cipher::Secretbox(
            crypto_secretbox::XSalsa20Poly1305::new_from_slice(&secret)
                .map_err(|_| "secret: bad secretbox key".to_owned())?,
        ),
    };
    Ok(ProviderKey {
        prefix: format!("k8s:enc:{provider}:v1:{}:", k.name).into_bytes(),
        cipher,
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
    fn aescbc_and_secretbox_round_trip_and_rotate() {
        const KEY24: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0"; // 24 bytes
        for (provider, secret) in [
            ("aescbc", KEY1),
            ("aescbc", KEY2),
            ("aescbc", KEY24),
            ("secretbox", KEY1),
        ] {
            let enc = config(&format!(
                "  - {provider}:\n      keys:\n      - name: key1\n        secret: {secret}\n"
            ));
            for plain in [&b""[..], b"0123456789abcdef", b"{\"data\":\"hello\"}"] {
                let sealed = enc.seal(SECRET, plain.to_vec()).unwrap();
                let prefix = format!("k8s:enc:{provider}:v1:key1:");
                assert!(sealed.starts_with(prefix.as_bytes()), "{provider}");
                assert!(plain.is_empty() || !sealed.windows(plain.len()).any(|w| w == plain));
                assert_eq!(&*enc.open(SECRET, &sealed).unwrap(), plain, "{provider}");
                // Tampering is noticed (padding or authentication), never silently accepted
                // as the original.
                let mut bad = sealed.clone();
                if let Some(last) = bad.last_mut() {
                    *last ^= 0x55;
                }
                assert_ne!(
                    enc.open(SECRET, &bad).ok().map(|v| v.into_owned()),
                    Some(plain.to_vec())
                );
            }
        }
        let cbc = config(&format!(
            "  - aescbc:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"
        ));
        let old = cbc.seal(SECRET, b"v".to_vec()).unwrap();
        let rotated = config(&format!(
            "  - secretbox:\n      keys:\n      - name: key2\n        secret: {KEY1}\n  - aescbc:\n      keys:\n      - name: key1\n        secret: {KEY1}\n"
        ));
        assert_eq!(&*rotated.open(SECRET, &old).unwrap(), b"v");
        let new = rotated.seal(SECRET, b"v".to_vec()).unwrap();
        assert!(new.starts_with(b"k8s:enc:secretbox:v1:key2:"));
        assert!(rotated.stale(SECRET, &old) && !rotated.stale(SECRET, &new));
        assert!(!cbc.stale(SECRET, &old) && cbc.stale(SECRET, b"{}"));
        // The key that wrote it is gone: a clear error, not garbage.
        let dropped = config(&format!(
            "  - secretbox:\n      keys:\n      - name: key2\n        secret: {KEY1}\n"
        ));
        assert_eq!(
            dropped.open(SECRET, &old).unwrap_err(),
            "no matching prefix found"
        );
        assert_eq!(
            cbc.open(SECRET, b"k8s:enc:aescbc:v1:key1:short")
                .unwrap_err(),
            "the stored data was shorter than the required size"
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        let bad = |providers: &str| {
            let text = format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"
            );
            Encryption::parse(text.as_bytes()).err().unwrap_or_default()
        };
        assert!(bad("  - kms:\n      name: k\n").contains("not supported"));
        assert!(
            bad("  - aesgcm:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n")
                .contains("got 5, expected one of [16, 24, 32]")
        );
        assert!(
            bad(&format!(
                "  - secretbox:\n      keys:\n      - name: k\n        secret: {KEY2}\n"
            ))
            .contains("secretbox.keys[0].secret: Invalid value: \"REDACTED\": secret is not of the expected length, got 16, expected one of [32]")
        );
        assert!(
            bad("  - aescbc:\n      keys:\n      - name: k\n        secret: \"!!\"\n")
                .contains("secrets must be base64 encoded")
        );
        assert!(
            bad(&format!(
                "  - aescbc:\n      keys:\n      - name: a:b\n        secret: {KEY1}\n"
            ))
            .contains("should not contain ':'")
        );
        assert!(bad("  - aesgcm:\n      keys: []\n").contains("Required"));
        assert!(bad("  - rot13: {}\n").contains("unknown provider"));
        assert!(Encryption::parse(b"apiVersion: v1\nkind: ConfigMap\n").is_err());
    }
}
