//! ES256 JSON Web Tokens over `ring` (the crypto provider the whole binary already uses):
//! signing with the service-account signing key, verification with every configured public
//! key, and the keys as a JWK set. Only `ES256` is accepted: the header's `alg` is checked
//! before the signature, so `none` or an algorithm swap never verifies.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};
use sha2::Digest as _;

/// Largest token accepted (upstream refuses oversized JWTs before parsing).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// A P-256 public key (uncompressed point) with its key id.
#[derive(Debug, Clone)]
pub struct PublicKey {
    point: Vec<u8>,
    /// `kid`: base64url SHA-256 of the SubjectPublicKeyInfo DER, as upstream.
    pub kid: String,
}

/// DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, BIT STRING).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl PublicKey {
    /// From an uncompressed P-256 point (65 bytes).
    pub fn from_point(point: &[u8]) -> Result<PublicKey, String> {
        if point.len() != 65 || point[0] != 4 {
            return Err("not an uncompressed P-256 public key".into());
        }
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(point);
        let kid = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(&spki));
        Ok(PublicKey {
            point: point.to_vec(),
            kid,
        })
    }

    /// The key as a JWK.
    pub fn jwk(&self) -> Value {
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&self.point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&self.point[33..65]),
        })
    }

    fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &self.point)
            .verify(message, sig)
            .is_ok()
    }
}

/// The signing key.
pub struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    /// Its public half.
    pub public: PublicKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.public.kid)
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
    /// From a PKCS#8 PEM (`PRIVATE KEY`) ECDSA P-256 key.
    pub fn from_pem(pem: &str) -> Result<Signer, String> {
        let rng = SystemRandom::new();
        for (label, der) in pem_blocks(pem) {
            if label == "PRIVATE KEY" {
                let key = EcdsaKeyPair::from_pkcs8(
                    &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &der,
                    &rng,
                )
                .map_err(|e| format!("not a PKCS#8 ECDSA P-256 key: {e}"))?;
                let public = PublicKey::from_point(key.public_key().as_ref())?;
                return Ok(Signer { key, rng, public });
            }
        }
        Err("no PKCS#8 \"PRIVATE KEY\" block (only ECDSA P-256 keys are supported)".into())
    }

    /// A signed compact JWT of `claims`.
    pub fn sign(&self, claims: &Value) -> Result<String, String> {
        let header = json!({"alg": "ES256", "kid": self.public.kid});
        let mut token = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .key
            .sign(&self.rng, token.as_bytes())
            .map_err(|e| format!("signing: {e}"))?;
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(sig.as_ref()));
        Ok(token)
    }
}

/// Public keys from a PEM file's text: `PUBLIC KEY` blocks and PKCS#8 private keys (as
/// upstream's `--service-account-key-file` accepts both).
pub fn public_keys_from_pem(pem: &str) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for (label, der) in pem_blocks(pem) {
        match label.as_str() {
            "PUBLIC KEY" => match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
                Some(point) => keys.push(PublicKey::from_point(point)?),
                None => return Err("only ECDSA P-256 public keys are supported".into()),
            },
            "PRIVATE KEY" => keys.push(Signer::from_pem(pem)?.public),
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

/// Verifies an ES256 JWT against `keys` and returns its claims.
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
    if header.get("alg").and_then(Value::as_str) != Some("ES256") {
        return Err("unexpected signing algorithm".into());
    }
    let sig = decode(s)?;
    let message = &token[..h.len() + 1 + c.len()];
    let kid = header.get("kid").and_then(Value::as_str);
    let verified = keys
        .iter()
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
