//! Client certificates: how a user proves who they are to the API server.
//!
//! Kubernetes' x509 authenticator reads the user name from the subject's common name and the
//! groups from its organization attributes, one `O` per group. rcgen keeps at most one value
//! per attribute type, so the subject is written here: rcgen builds and signs the certificate,
//! then [`with_subject`] replaces the subject with one carrying every group (as
//! `O=g1, O=g2, …, CN=user`, the order Go's `pkix.Name` writes) and signs the result again
//! with the CA key.

use rcgen::{DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SigningKey};
use time::Duration;

use crate::ca::{CertificateAuthority, IssuedCert, leaf_params};
use crate::error::{Error, Result};

/// How long a new client certificate is valid: one year.
pub const CLIENT_VALIDITY: Duration = Duration::days(365);

/// User name of the cluster administrator (kubeadm's).
pub const ADMIN_USER: &str = "kubernetes-admin";

/// The group the default RBAC policy grants everything to.
pub const MASTERS_GROUP: &str = "system:masters";

/// Issues a client certificate signed by `ca` for `user` in `groups`: subject
/// `O=<group>…, CN=<user>`, extended key usage clientAuth, valid for [`CLIENT_VALIDITY`],
/// with a new key. An empty `user` is [`Error::EmptyUserName`].
pub fn issue_client_cert(
    ca: &CertificateAuthority,
    user: &str,
    groups: &[String],
) -> Result<IssuedCert> {
    if user.is_empty() {
        return Err(Error::EmptyUserName);
    }
    let mut params = leaf_params(CLIENT_VALIDITY);
    params.distinguished_name.push(DnType::CommonName, user);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let issued = ca.sign(&params, "client certificate")?;

    let cert_der = with_subject(
        &issued.cert_der,
        &subject_der(user, groups),
        ca.signing_key(),
    )?;
    if !ca.has_signed(&cert_der) {
        return Err(Error::invalid(
            "client certificate",
            "re-signed certificate does not verify",
        ));
    }
    Ok(IssuedCert {
        cert_pem: pem_certificate(&cert_der),
        cert_der,
        key_pem: issued.key_pem,
    })
}

/// The admin client certificate: user [`ADMIN_USER`] in group [`MASTERS_GROUP`].
pub fn admin(ca: &CertificateAuthority) -> Result<IssuedCert> {
    issue_client_cert(ca, ADMIN_USER, &[MASTERS_GROUP.to_owned()])
}

/// DER of the OID 2.5.4.10 (organizationName), tag and length included.
const OID_ORGANIZATION: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x0a];
/// DER of the OID 2.5.4.3 (commonName), tag and length included.
const OID_COMMON_NAME: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];

const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_UTF8_STRING: u8 = 0x0c;
const TAG_BIT_STRING: u8 = 0x03;
/// `[0] EXPLICIT`: the version field that starts every v3 TBSCertificate.
const TAG_VERSION: u8 = 0xa0;

/// The DER `Name` `O=groups[0], …, O=groups[n-1], CN=user`, one attribute per RDN.
fn subject_der(user: &str, groups: &[String]) -> Vec<u8> {
    let rdn = |oid: &[u8], value: &str| {
        let mut atv = oid.to_vec();
        atv.extend(tlv(TAG_UTF8_STRING, value.as_bytes()));
        tlv(TAG_SET, &tlv(TAG_SEQUENCE, &atv))
    };
    let mut rdns = Vec::new();
    for group in groups {
        rdns.extend(rdn(&OID_ORGANIZATION, group));
    }
    rdns.extend(rdn(&OID_COMMON_NAME, user));
    tlv(TAG_SEQUENCE, &rdns)
}

/// Returns `cert_der` with its subject replaced by `subject` (a DER `Name`) and signed again
/// with `key`, which must be the issuer's key (the signature algorithm field is kept).
fn with_subject(cert_der: &[u8], subject: &[u8], key: &KeyPair) -> Result<Vec<u8>> {
    let bad = |reason: &str| Error::invalid("certificate DER", reason);
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
    let outer = content(cert_der, 0)?;
    let tbs_len = element_len(outer, 0)?;
    let (tbs, rest) = outer.split_at(tbs_len);
    let sig_alg = &rest[..element_len(rest, 0)?];

    // TBSCertificate ::= SEQUENCE { [0] version, serialNumber, signature, issuer, validity,
    //                               subject, subjectPublicKeyInfo, … }
    let fields = content(tbs, 0)?;
    if fields.first() != Some(&TAG_VERSION) {
        return Err(bad("TBSCertificate does not start with a version"));
    }
    let mut start = 0;
    for _ in 0..5 {
        start += element_len(fields, start)?;
    }
    if fields.get(start) != Some(&TAG_SEQUENCE) {
        return Err(bad("subject is not a SEQUENCE"));
    }
    let end = start + element_len(fields, start)?;

    let mut new_fields = Vec::with_capacity(fields.len() + subject.len());
    new_fields.extend_from_slice(&fields[..start]);
    new_fields.extend_from_slice(subject);
    new_fields.extend_from_slice(&fields[end..]);
    let new_tbs = tlv(TAG_SEQUENCE, &new_fields);

    let signature = key
        .sign(&new_tbs)
        .map_err(Error::generate("client certificate signature"))?;
    let mut sig_bits = vec![0u8]; // no unused bits
    sig_bits.extend(signature);

    let mut cert = new_tbs;
    cert.extend_from_slice(sig_alg);
    cert.extend(tlv(TAG_BIT_STRING, &sig_bits));
    Ok(tlv(TAG_SEQUENCE, &cert))
}

/// DER tag-length-value with a definite length.
fn tlv(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value);
    out
}

/// Header length and content length of the DER element starting at `input[at]`.
fn header(input: &[u8], at: usize) -> Result<(usize, usize)> {
    let bad = || {
        Error::invalid(
            "certificate DER",
            format!("truncated element at offset {at}"),
        )
    };
    let first = *input.get(at + 1).ok_or_else(bad)?;
    let (header_len, content_len) = if first < 0x80 {
        (2, usize::from(first))
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(Error::invalid(
                "certificate DER",
                "unsupported length encoding",
            ));
        }
        let len_bytes = input.get(at + 2..at + 2 + n).ok_or_else(bad)?;
        (
            2 + n,
            len_bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
        )
    };
    if input.len() < at + header_len + content_len {
        return Err(bad());
    }
    Ok((header_len, content_len))
}

/// Total length (header and content) of the DER element starting at `input[at]`.
fn element_len(input: &[u8], at: usize) -> Result<usize> {
    header(input, at).map(|(h, c)| h + c)
}

/// The content of the DER element starting at `input[at]`.
fn content(input: &[u8], at: usize) -> Result<&[u8]> {
    let (h, c) = header(input, at)?;
    Ok(&input[at + h..at + h + c])
}

/// PEM `CERTIFICATE` block for `der`, in 64-column lines as OpenSSL and Go write it.
pub(crate) fn pem_certificate(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

#[cfg(test)]
mod tests {
    use x509_parser::prelude::*;

    use super::*;
    use crate::ca::cert_der_from_pem;
    use crate::identity::identity_from_der;

    #[test]
    fn client_identity_round_trips_with_several_groups() {
        let ca = CertificateAuthority::generate().unwrap();
        let groups = vec![
            "system:masters".to_owned(),
            "devs".to_owned(),
            "ops team".to_owned(),
        ];
        let issued = issue_client_cert(&ca, "alice", &groups).unwrap();

        let (user, got_groups) = identity_from_der(&issued.cert_der).unwrap();
        assert_eq!(user, "alice");
        assert_eq!(got_groups, groups);

        let (_, cert) = X509Certificate::from_der(&issued.cert_der).unwrap();
        assert_eq!(
            cert.subject().to_string(),
            "O=system:masters, O=devs, O=ops team, CN=alice"
        );
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth);
        assert!(!eku.server_auth);
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert_eq!(lifetime / 86_400, 365);
        assert!(ca.has_signed(&issued.cert_der));
        // The PEM we wrote decodes to the same DER.
        assert_eq!(
            cert_der_from_pem(&issued.cert_pem, "pem").unwrap(),
            issued.cert_der
        );
        // And the key is the certificate's.
        let key = KeyPair::from_pem(&issued.key_pem).unwrap();
        use rcgen::PublicKeyData;
        assert_eq!(key.subject_public_key_info(), cert.public_key().raw);
    }

    #[test]
    fn admin_is_kubernetes_admin_in_system_masters() {
        let ca = CertificateAuthority::generate().unwrap();
        let issued = admin(&ca).unwrap();
        let (user, groups) = identity_from_der(&issued.cert_der).unwrap();
        assert_eq!(user, "kubernetes-admin");
        assert_eq!(groups, ["system:masters"]);
    }

    #[test]
    fn user_without_groups_and_long_names_work() {
        let ca = CertificateAuthority::generate().unwrap();
        let long_group = "g".repeat(300); // forces multi-byte DER lengths
        let issued = issue_client_cert(&ca, "bob", &[]).unwrap();
        assert_eq!(
            identity_from_der(&issued.cert_der).unwrap(),
            ("bob".to_owned(), vec![])
        );
        let issued =
            issue_client_cert(&ca, "ünïcode user", std::slice::from_ref(&long_group)).unwrap();
        assert_eq!(
            identity_from_der(&issued.cert_der).unwrap(),
            ("ünïcode user".to_owned(), vec![long_group])
        );
        assert!(ca.has_signed(&issued.cert_der));
    }

    #[test]
    fn empty_user_is_rejected() {
        let ca = CertificateAuthority::generate().unwrap();
        assert!(matches!(
            issue_client_cert(&ca, "", &[]),
            Err(Error::EmptyUserName)
        ));
    }

    #[test]
    fn tlv_and_header_agree_on_short_and_long_lengths() {
        for len in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let encoded = tlv(TAG_SEQUENCE, &vec![7u8; len]);
            let (h, c) = header(&encoded, 0).unwrap();
            assert_eq!(c, len);
            assert_eq!(h + c, encoded.len());
        }
        assert!(header(&[0x30, 0x05, 1], 0).is_err());
        assert!(header(&[0x30], 0).is_err());
    }
}
