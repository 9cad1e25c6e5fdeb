//! Service-account JSON Web Tokens over `ring` (the crypto provider the whole binary already
//! uses): ES256 (ECDSA P-256) and RS256 (RSA PKCS#1 v1.5 with SHA-256), as upstream's
//! `--service-account-signing-key-file` takes either; signing with the signing key,
//! verification with every configured public key, and the keys as a JWK set. The header's
//! `alg` is checked before the signature and must be the algorithm of the key that verifies
//! it, so `none`, HMAC or an algorithm swap never verifies.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, RsaKeyPair};
use serde_json::{Value, json};
use sha2::Digest as _;
use x509_parser::prelude::FromDer as _;

/// Largest token accepted (upstream refuses oversized JWTs before parsing).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The verifying half of a key.
#[derive(Debug, Clone)]
enum Verifying {
    /// ES256: an uncompressed P-256 point.
    Ec { point: Vec<u8> },
    /// RS256: the PKCS#1 `RSAPublicKey` DER, and its modulus and exponent (big-endian,
    /// without leading zeros) for the JWK.
    Rsa {
        pkcs1: Vec<u8>,
        n: Vec<u8>,
        e: Vec<u8>,
    },
}

/// A public key with its key id.
#[derive(Debug, Clone)]
pub struct PublicKey {
    key: Verifying,
    /// `kid`: base64url SHA-256 of the SubjectPublicKeyInfo DER, as upstream.
    pub kid: String,
}

/// DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, BIT STRING).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// DER of the AlgorithmIdentifier `rsaEncryption` with NULL parameters.
const RSA_ALGORITHM_ID: [u8; 15] = [
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];

/// A DER tag-length-value.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn kid_of(spki_der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(spki_der))
}

fn strip_zeros(b: &[u8]) -> Vec<u8> {
    let first = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    b[first..].to_vec()
}

impl PublicKey {
    /// From an uncompressed P-256 point (65 bytes).
    pub fn from_point(point: &[u8]) -> Result<PublicKey, String> {
        if point.len() != 65 || point[0] != 4 {
            return Err("not an uncompressed P-256 public key".into());
        }
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(point);
        Ok(PublicKey {
            key: Verifying::Ec {
                point: point.to_vec(),
            },
            kid: kid_of(&spki),
        })
    }

    /// From a SubjectPublicKeyInfo DER (`PUBLIC KEY` PEM blocks, certificates): ECDSA P-256
    /// or RSA.
    pub fn from_spki(spki_der: &[u8]) -> Result<PublicKey, String> {
        if let Some(point) = spki_der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            return PublicKey::from_point(point);
        }
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(spki_der)
            .map_err(|e| format!("not a public key: {e}"))?;
        match spki.parsed() {
            Ok(x509_parser::public_key::PublicKey::RSA(rsa)) => {
                if rsa.key_size() < 2048 {
                    return Err("RSA keys must have at least 2048 bits".into());
                }
                Ok(PublicKey {
                    key: Verifying::Rsa {
                        pkcs1: spki.subject_public_key.data.to_vec(),
                        n: strip_zeros(rsa.modulus),
                        e: strip_zeros(rsa.exponent),
                    },
                    kid: kid_of(spki_der),
                })
            }
            _ => Err("only ECDSA P-256 and RSA public keys are supported".into()),
        }
    }

    /// From a PKCS#1 `RSAPublicKey` DER (`RSA PUBLIC KEY` PEM blocks, ring's RSA keys).
    pub fn from_rsa_pkcs1(pkcs1: &[u8]) -> Result<PublicKey, String> {
        let mut bits = vec![0u8];
        bits.extend_from_slice(pkcs1);
        let mut content = RSA_ALGORITHM_ID.to_vec();
        content.extend(der(0x03, &bits));
        PublicKey::from_spki(&der(0x30, &content))
    }

    /// The JWS algorithm this key verifies.
    pub fn alg(&self) -> &'static str {
        match self.key {
            Verifying::Ec { .. } => "ES256",
            Verifying::Rsa { .. } => "RS256",
        }
    }

    /// The key as a JWK.
    pub fn jwk(&self) -> Value {
        match &self.key {
            Verifying::Ec { point } => json!({
                "use": "sig",
                "kty": "EC",
                "kid": self.kid,
                "crv": "P-256",
                "alg": "ES256",
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
            }),
            Verifying::Rsa { n, e, .. } => json!({
                "use": "sig",
                "kty": "RSA",
                "kid": self.kid,
                "alg": "RS256",
                "n": URL_SAFE_NO_PAD.encode(n),
                "e": URL_SAFE_NO_PAD.encode(e),
            }),
        }
    }

    fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        match &self.key {
            Verifying::Ec { point } => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            Verifying::Rsa { pkcs1, .. } => {
                signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, pkcs1)
                    .verify(message, sig)
                    .is_ok()
            }
        }
    }
}

/// The signing half of a key.
enum Signing {
    Ec(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

/// The signing key.
pub struct Signer {
    key: Signing,
    rng: SystemRandom,
    /// Its public half.
    pub public: PublicKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.public.kid)
            .field("alg", &self.public.alg())
            .finish()
    }
}

/// The DER contents of the PEM blocks in `pem`, with their labels.
fn pem_blocks(pem: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut label: Option<String> = None;
    let mut b64 = String::new();
    for line in pem.lines().map(str::trim) {
        if let Some(l) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            label = Some(l.to_owned());
            b64.clear();
        } else if line.starts_with("-----END ") {
            if let (Some(l), Ok(der)) = (
                label.take(),
                base64::engine::general_purpose::STANDARD.decode(&b64),
            ) {
                out.push((l, der));
            }
        } else if label.is_some() {
            b64.push_str(line);
        }
    }
    out
}

impl Signer {
    /// From the first private key in `pem`: PKCS#8 (`PRIVATE KEY`: ECDSA P-256 or RSA) or
    /// PKCS#1 (`RSA PRIVATE KEY`, as `openssl genrsa -traditional` and kubeadm write).
    pub fn from_pem(pem: &str) -> Result<Signer, String> {
        let rng = SystemRandom::new();
        for (label, der) in pem_blocks(pem) {
            let key = match label.as_str() {
                "PRIVATE KEY" => {
                    match EcdsaKeyPair::from_pkcs8(
                        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                        &der,
                        &rng,
                    ) {
                        Ok(k) => Signing::Ec(k),
                        Err(_) => Signing::Rsa(
                            RsaKeyPair::from_pkcs8(&der)
                                .map_err(|e| format!("not a PKCS#8 ECDSA P-256 or RSA key: {e}"))?,
                        ),
                    }
                }
                "RSA PRIVATE KEY" => Signing::Rsa(
                    RsaKeyPair::from_der(&der).map_err(|e| format!("not a PKCS#1 RSA key: {e}"))?,
                ),
                "EC PRIVATE KEY" => {
                    return Err(
                        "SEC1 \"EC PRIVATE KEY\" files are not supported: convert with `openssl pkcs8 -topk8 -nocrypt`".into(),
                    );
                }
                _ => continue,
            };
            let public = match &key {
                Signing::Ec(k) => PublicKey::from_point(k.public_key().as_ref())?,
                Signing::Rsa(k) => PublicKey::from_rsa_pkcs1(k.public_key().as_ref())?,
            };
            return Ok(Signer { key, rng, public });
        }
        Err("no private key found (PKCS#8 \"PRIVATE KEY\" or PKCS#1 \"RSA PRIVATE KEY\")".into())
    }

    /// A signed compact JWT of `claims`.
    pub fn sign(&self, claims: &Value) -> Result<String, String> {
        let header = json!({"alg": self.public.alg(), "kid": self.public.kid});
        let mut token = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = match &self.key {
            Signing::Ec(k) => k
                .sign(&self.rng, token.as_bytes())
                .map_err(|e| format!("signing: {e}"))?
                .as_ref()
                .to_vec(),
            Signing::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &self.rng,
                    token.as_bytes(),
                    &mut sig,
                )
                .map_err(|e| format!("signing: {e}"))?;
                sig
            }
        };
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(sig));
        Ok(token)
    }
}

/// Public keys from a PEM file's text, as upstream's `--service-account-key-file` accepts
/// them: `PUBLIC KEY` (SubjectPublicKeyInfo) and `RSA PUBLIC KEY` blocks, certificates, and
/// private keys (their public halves).
pub fn public_keys_from_pem(pem: &str) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for (label, der) in pem_blocks(pem) {
        match label.as_str() {
            "PUBLIC KEY" => keys.push(PublicKey::from_spki(&der)?),
            "RSA PUBLIC KEY" => keys.push(PublicKey::from_rsa_pkcs1(&der)?),
            "CERTIFICATE" => {
                let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der)
                    .map_err(|e| format!("not a certificate: {e}"))?;
                keys.push(PublicKey::from_spki(cert.public_key().raw)?);
            }
            "PRIVATE KEY" | "RSA PRIVATE KEY" => {
                let block = format!(
                    "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
                    base64::engine::general_purpose::STANDARD.encode(&der)
                );
                keys.push(Signer::from_pem(&block)?.public);
            }
            _ => {}
        }
    }
    if keys.is_empty() {
        return Err("no public keys found".into());
    }
    Ok(keys)
}

/// Whether `token` looks like a JWT (three dot-separated parts).
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

/// Verifies an ES256 or RS256 JWT against `keys` and returns its claims.
pub fn verify(token: &str, keys: &[PublicKey]) -> Result<Value, String> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err("token is too large".into());
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed token".into());
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| "malformed token");
    let header: Value =
        serde_json::from_slice(&decode(h)?).map_err(|_| "malformed token".to_owned())?;
    let alg = header.get("alg").and_then(Value::as_str);
    if !matches!(alg, Some("ES256" | "RS256")) {
        return Err("unexpected signing algorithm".into());
    }
    let sig = decode(s)?;
    let message = &token[..h.len() + 1 + c.len()];
    let kid = header.get("kid").and_then(Value::as_str);
    let verified = keys
        .iter()
        .filter(|k| Some(k.alg()) == alg)
        .filter(|k| kid.is_none_or(|kid| kid == k.kid))
        .any(|k| k.verify(message.as_bytes(), &sig));
    if !verified {
        return Err("invalid signature".into());
    }
    serde_json::from_slice(&decode(c)?).map_err(|_| "malformed token".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        let keys = certs::ServiceAccountKeys::generate().unwrap();
        Signer::from_pem(&keys.private_key_pem).unwrap()
    }

    #[test]
    fn signs_and_verifies_and_refuses_forgeries() {
        let s = signer();
        let token = s.sign(&json!({"sub": "x"})).unwrap();
        let claims = verify(&token, std::slice::from_ref(&s.public)).unwrap();
        assert_eq!(claims["sub"], "x");
        // Another key does not verify it.
        assert!(verify(&token, &[signer().public]).is_err());
        // A changed payload does not verify.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(json!({"sub": "admin"}).to_string());
        parts[1] = &forged;
        assert!(verify(&parts.join("."), std::slice::from_ref(&s.public)).is_err());
        // alg none is refused.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(r#"{"sub":"x"}"#)
        );
        assert_eq!(
            verify(&none, std::slice::from_ref(&s.public)).unwrap_err(),
            "unexpected signing algorithm"
        );
        assert!(verify("a.b", std::slice::from_ref(&s.public)).is_err());
        assert!(verify(&"a".repeat(MAX_TOKEN_BYTES + 1), &[]).is_err());
    }

    /// A 2048-bit RSA key made for these tests only (`openssl genrsa -traditional`).
    const RSA_KEY: &str = include_str!("testdata/rsa-2048.key");
    const RSA_PUB: &str = include_str!("testdata/rsa-2048.pub");

    #[test]
    fn rsa_keys_sign_rs256_and_verify_only_as_rs256() {
        let s = Signer::from_pem(RSA_KEY).unwrap();
        assert_eq!(s.public.alg(), "RS256");
        let token = s.sign(&json!({"sub": "x"})).unwrap();
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], s.public.kid);
        // The public key file and the private key agree on the key id.
        let pubs = public_keys_from_pem(RSA_PUB).unwrap();
        assert_eq!(pubs[0].kid, s.public.kid);
        assert_eq!(verify(&token, &pubs).unwrap()["sub"], "x");
        // Another key (EC) does not verify it; an ES256 header never meets an RSA key.
        assert!(verify(&token, &[signer().public]).is_err());
        let parts: Vec<&str> = token.split('.').collect();
        let swapped = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(json!({"alg": "ES256", "kid": s.public.kid}).to_string()),
            parts[1],
            parts[2]
        );
        assert!(verify(&swapped, &pubs).is_err());
        // The JWK carries the modulus and exponent.
        let jwk = pubs[0].jwk();
        assert_eq!(jwk["kty"], "RSA");
        assert_eq!(jwk["e"], "AQAB");
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["n"].as_str().unwrap())
                .unwrap()
                .len(),
            256
        );
        // The same key as PKCS#8 is the same signer.
        let (_, pkcs1) = pem_blocks(RSA_KEY).remove(0);
        let pkcs8 = {
            // PKCS#8 PrivateKeyInfo: version 0, rsaEncryption, OCTET STRING(PKCS#1).
            let mut content = der(0x02, &[0]);
            content.extend_from_slice(&RSA_ALGORITHM_ID);
            content.extend(der_octets(&pkcs1));
            der_seq(&content)
        };
        let block = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8)
        );
        assert_eq!(Signer::from_pem(&block).unwrap().public.kid, s.public.kid);
    }

    fn der_octets(b: &[u8]) -> Vec<u8> {
        der(0x04, b)
    }

    fn der_seq(b: &[u8]) -> Vec<u8> {
        der(0x30, b)
    }

    #[test]
    fn public_key_pem_matches_the_signer_and_renders_as_jwk() {
        let keys = certs::ServiceAccountKeys::generate().unwrap();
        let s = Signer::from_pem(&keys.private_key_pem).unwrap();
        let pubs = public_keys_from_pem(&keys.public_key_pem).unwrap();
        assert_eq!(pubs[0].kid, s.public.kid);
        let jwk = pubs[0].jwk();
        assert_eq!(jwk["kty"], "EC");
        assert_eq!(jwk["x"].as_str().unwrap().len(), 43);
    }
}
