//! The service-account token signing key pair.
//!
//! The API server signs service-account tokens (JWTs) with the private key and verifies them
//! with the public one, like kube-apiserver's `--service-account-signing-key-file` and
//! `--service-account-key-file`. The key is ECDSA P-256, so tokens are `ES256` JWTs; ring
//! cannot generate RSA keys.

use std::fmt;

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256};

use crate::error::{Error, Result};

/// A service-account signing key pair, PEM-encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountKeys {
    /// The private key (`PRIVATE KEY`, PKCS#8 PEM block).
    pub private_key_pem: String,
    /// The public key (`PUBLIC KEY`, SubjectPublicKeyInfo PEM block).
    pub public_key_pem: String,
}

impl fmt::Debug for ServiceAccountKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKeys")
            .field("private_key_pem", &"[elided]")
            .field("public_key_pem", &self.public_key_pem)
            .finish()
    }
}

impl ServiceAccountKeys {
    /// Generates a new ECDSA P-256 key pair.
    pub fn generate() -> Result<Self> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(Error::generate("service-account key"))?;
        Ok(ServiceAccountKeys {
            private_key_pem: key.serialize_pem(),
            public_key_pem: key.public_key_pem(),
        })
    }

    /// The pair for an existing PKCS#8 PEM private key (its public half is derived).
    pub fn from_private_pem(private_key_pem: &str) -> Result<Self> {
        let key = KeyPair::from_pem(private_key_pem)
            .map_err(|e| Error::invalid("service-account private key", e))?;
        Ok(ServiceAccountKeys {
            private_key_pem: private_key_pem.to_owned(),
            public_key_pem: key.public_key_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use x509_parser::prelude::*;

    use super::*;

    #[test]
    fn generated_pair_is_p256_and_public_half_matches_private() {
        let keys = ServiceAccountKeys::generate().unwrap();
        assert!(
            keys.private_key_pem
                .starts_with("-----BEGIN PRIVATE KEY-----\n")
        );
        assert!(
            keys.public_key_pem
                .starts_with("-----BEGIN PUBLIC KEY-----\n")
        );

        let (_, pem) = x509_parser::pem::parse_x509_pem(keys.public_key_pem.as_bytes()).unwrap();
        let (_, spki) = SubjectPublicKeyInfo::from_der(&pem.contents).unwrap();
        assert_eq!(
            spki.algorithm.algorithm,
            oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
        );
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .unwrap()
            .as_oid()
            .unwrap();
        assert_eq!(curve, oid_registry::OID_EC_P256);

        let derived = ServiceAccountKeys::from_private_pem(&keys.private_key_pem).unwrap();
        assert_eq!(derived, keys);
        assert!(!format!("{keys:?}").contains(&keys.private_key_pem));
    }

    #[test]
    fn two_generated_pairs_differ() {
        let a = ServiceAccountKeys::generate().unwrap();
        let b = ServiceAccountKeys::generate().unwrap();
        assert_ne!(a.private_key_pem, b.private_key_pem);
    }

    #[test]
    fn junk_private_key_is_invalid() {
        let err = ServiceAccountKeys::from_private_pem("nope").unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
    }
}
