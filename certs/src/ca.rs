//! The cluster certificate authority: created once, loaded from PEM afterwards, and the signer
//! of every serving and client certificate.

use std::fmt;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};
use time::{Duration, OffsetDateTime};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;
use x509_parser::time::ASN1Time;

use crate::error::{Error, Result};

/// Common name of the cluster CA certificate.
pub const CA_COMMON_NAME: &str = "capstan-ca";

/// How long a new CA certificate is valid: ten years.
pub const CA_VALIDITY: Duration = Duration::days(3650);

/// How far `notBefore` is back-dated, so that clocks slightly behind ours accept a fresh
/// certificate (kubeadm does the same).
const BACKDATE: Duration = Duration::minutes(5);

/// A certificate and its freshly generated private key, both PEM-encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// The certificate (`CERTIFICATE` PEM block).
    pub cert_pem: String,
    /// The certificate in DER.
    pub cert_der: Vec<u8>,
    /// The ECDSA P-256 private key (`PRIVATE KEY`, PKCS#8 PEM block).
    pub key_pem: String,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// The cluster CA: its certificate, its key, and an rcgen issuer to sign with.
pub struct CertificateAuthority {
    cert_pem: String,
    cert_der: Vec<u8>,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

impl CertificateAuthority {
    /// Creates a new self-signed CA: a fresh ECDSA P-256 key, subject `CN=capstan-ca`, valid
    /// for [`CA_VALIDITY`], basic constraints `CA:TRUE`, key usages certificate and CRL
    /// signing.
    pub fn generate() -> Result<Self> {
        Self::generate_named(CA_COMMON_NAME)
    }

    /// As [`generate`](Self::generate), with subject `CN=<common_name>` (the front-proxy CA
    /// is a second CA of its own name, as kubeadm's `front-proxy-ca`).
    pub fn generate_named(common_name: &str) -> Result<Self> {
        let key = KeyPair::generate().map_err(Error::generate("CA key"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        let cert = params
            .self_signed(&key)
            .map_err(Error::generate("CA certificate"))?;
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from its PEM certificate and PEM (PKCS#8) private key, checking that the key
    /// belongs to the certificate. The certificate need not have been made by
    /// [`generate`](Self::generate).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self> {
        Self::parse(
            cert_pem,
            key_pem,
            Path::new("CA certificate"),
            Path::new("CA key"),
        )
    }

    /// Loads a CA from the files `cert` and `key` (see [`from_pem`](Self::from_pem)).
    pub fn load(cert: &Path, key: &Path) -> Result<Self> {
        let read =
            |path: &Path| std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e));
        Self::parse(&read(cert)?, &read(key)?, cert, key)
    }

    fn parse(cert_pem: &str, key_pem: &str, cert_what: &Path, key_what: &Path) -> Result<Self> {
        let cert_der = cert_der_from_pem(cert_pem, &cert_what.display().to_string())?;
        let (_, x509) = X509Certificate::from_der(&cert_der)
            .map_err(|e| Error::invalid(cert_what.display().to_string(), e))?;
        let key = KeyPair::from_pem(key_pem)
            .map_err(|e| Error::invalid(key_what.display().to_string(), e))?;
        if key.subject_public_key_info() != x509.public_key().raw {
            return Err(Error::KeyMismatch {
                cert: cert_what.into(),
                key: key_what.into(),
            });
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der.as_slice().into(), key)
            .map_err(|e| Error::invalid(cert_what.display().to_string(), e))?;
        Ok(CertificateAuthority {
            cert_pem: cert_pem.to_owned(),
            cert_der,
            key_pem: key_pem.to_owned(),
            issuer,
        })
    }

    /// The CA certificate, PEM-encoded (exactly the text it was loaded from, if loaded).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate in DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Signs a leaf certificate described by `params` for a newly generated ECDSA P-256 key.
    ///
    /// `params` usually starts from [`leaf_params`]; its validity, names and extensions are
    /// used as given. `what` names the certificate in errors.
    pub fn sign(&self, params: &CertificateParams, what: &'static str) -> Result<IssuedCert> {
        let key = KeyPair::generate().map_err(Error::generate(what))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(Error::generate(what))?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Whether `cert_der` is a certificate issued by this CA: its issuer is the CA's subject
    /// and its signature verifies with the CA's public key. Validity dates are not checked.
    pub fn has_signed(&self, cert_der: &[u8]) -> bool {
        let (Ok((_, ca)), Ok((_, cert))) = (
            X509Certificate::from_der(&self.cert_der),
            X509Certificate::from_der(cert_der),
        ) else {
            return false;
        };
        cert.issuer().as_raw() == ca.subject().as_raw()
            && cert.verify_signature(Some(ca.public_key())).is_ok()
    }

    /// The key this CA signs with.
    pub(crate) fn signing_key(&self) -> &KeyPair {
        self.issuer.key()
    }
}

/// Defaults for a leaf certificate: valid from a few minutes ago for `validity`, not a CA,
/// with an authority key identifier naming the CA.
pub fn leaf_params(validity: Duration) -> CertificateParams {
    let now = OffsetDateTime::now_utc();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.not_before = now - BACKDATE;
    params.not_after = now + validity;
    params.use_authority_key_identifier_extension = true;
    params
}

/// Decodes the first `CERTIFICATE` block of `pem` to DER; `what` names the input in errors.
pub(crate) fn cert_der_from_pem(pem: &str, what: &str) -> Result<Vec<u8>> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| Error::invalid(what, format!("not PEM: {e}")))?;
    if block.label != "CERTIFICATE" {
        return Err(Error::invalid(
            what,
            format!("PEM block is {:?}, not CERTIFICATE", block.label),
        ));
    }
    Ok(block.contents)
}

/// Whether the certificate `cert_der` is unparseable, not yet valid, or expires within
/// `margin` from now: in each case a replacement should be issued.
pub(crate) fn needs_renewal(cert_der: &[u8], margin: Duration) -> bool {
    let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
        return true;
    };
    let now = OffsetDateTime::now_utc();
    let validity = cert.validity();
    !(validity.is_valid_at(ASN1Time::new(now)) && validity.is_valid_at(ASN1Time::new(now + margin)))
}

#[cfg(test)]
mod tests {
    use x509_parser::prelude::*;

    use super::*;

    #[test]
    fn generated_ca_is_self_signed_ca_named_capstan_ca_for_ten_years() {
        let ca = CertificateAuthority::generate().unwrap();
        let (_, cert) = X509Certificate::from_der(ca.cert_der()).unwrap();
        let cn: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["capstan-ca"]);
        assert_eq!(cert.subject().as_raw(), cert.issuer().as_raw());
        cert.verify_signature(None).unwrap();
        let bc = cert.basic_constraints().unwrap().unwrap().value;
        assert!(bc.ca);
        assert!(cert.key_usage().unwrap().unwrap().value.key_cert_sign());
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        let days = lifetime / 86_400;
        assert!((3650..=3651).contains(&days), "{days} days");
        assert!(ca.has_signed(ca.cert_der()));
    }

    #[test]
    fn ca_round_trips_through_pem_and_still_signs() {
        let ca = CertificateAuthority::generate().unwrap();
        let loaded = CertificateAuthority::from_pem(ca.cert_pem(), ca.key_pem()).unwrap();
        assert_eq!(loaded.cert_der(), ca.cert_der());

        let mut params = leaf_params(Duration::days(1));
        params.distinguished_name.push(DnType::CommonName, "leaf");
        let leaf = loaded.sign(&params, "test leaf").unwrap();
        assert!(ca.has_signed(&leaf.cert_der));
        let (_, cert) = X509Certificate::from_der(&leaf.cert_der).unwrap();
        assert_eq!(cert.issuer().to_string(), "CN=capstan-ca");
        assert!(
            cert.basic_constraints()
                .unwrap()
                .is_none_or(|bc| !bc.value.ca)
        );
    }

    #[test]
    fn another_ca_has_not_signed_our_leaves() {
        let ca = CertificateAuthority::generate().unwrap();
        let other = CertificateAuthority::generate().unwrap();
        let leaf = ca
            .sign(&leaf_params(Duration::days(1)), "test leaf")
            .unwrap();
        // Same subject name "capstan-ca", different key: the signature check must catch it.
        assert!(!other.has_signed(&leaf.cert_der));
        assert!(!ca.has_signed(b"not a certificate"));
    }

    #[test]
    fn loading_a_ca_with_someone_elses_key_is_a_key_mismatch() {
        let ca = CertificateAuthority::generate().unwrap();
        let other = CertificateAuthority::generate().unwrap();
        let err = CertificateAuthority::from_pem(ca.cert_pem(), other.key_pem()).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { .. }), "{err}");
    }

    #[test]
    fn garbage_pem_is_invalid() {
        let ca = CertificateAuthority::generate().unwrap();
        let err = CertificateAuthority::from_pem("hello", ca.key_pem()).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
        let err = CertificateAuthority::from_pem(ca.key_pem(), ca.key_pem()).unwrap_err();
        assert!(err.to_string().contains("not CERTIFICATE"), "{err}");
    }

    #[test]
    fn renewal_is_needed_near_expiry_only() {
        let ca = CertificateAuthority::generate().unwrap();
        let leaf = ca
            .sign(&leaf_params(Duration::days(10)), "test leaf")
            .unwrap();
        assert!(!needs_renewal(&leaf.cert_der, Duration::days(9)));
        assert!(needs_renewal(&leaf.cert_der, Duration::days(11)));
        assert!(needs_renewal(b"junk", Duration::ZERO));
    }
}
