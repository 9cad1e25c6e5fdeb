//! The user and groups a client certificate names, read the way Kubernetes' x509
//! authenticator reads them: the user is the subject's common name, the groups are its
//! organization (`O`) values in order.

use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::error::{Error, Result};

/// The `(user, groups)` named by the DER certificate `cert_der`.
///
/// This only reads the subject: it does not check the signature, the validity dates or the
/// key usage. Call it on a certificate the TLS layer has already verified against the cluster
/// CA. A subject without a common name (or with an empty one) is [`Error::NoCommonName`], as
/// Kubernetes does not authenticate such certificates; if there are several, the last one
/// counts (as in Go's `pkix.Name`).
pub fn identity_from_der(cert_der: &[u8]) -> Result<(String, Vec<String>)> {
    let what = "client certificate";
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| Error::invalid(what, e))?;
    let subject = cert.subject();
    let mut user = None;
    for cn in subject.iter_common_name() {
        user = Some(cn.as_str().map_err(|e| Error::invalid(what, e))?);
    }
    let user = user.filter(|u| !u.is_empty()).ok_or(Error::NoCommonName)?;
    let groups = subject
        .iter_organization()
        .map(|o| {
            o.as_str()
                .map(str::to_owned)
                .map_err(|e| Error::invalid(what, e))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((user.to_owned(), groups))
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    fn self_signed_with(dn: &[(DnType, &str)]) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (ty, value) in dn {
            params.distinguished_name.push(ty.clone(), *value);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn cn_is_user_and_single_o_is_group() {
        let der = self_signed_with(&[
            (DnType::OrganizationName, "system:nodes"),
            (DnType::CommonName, "system:node:n1"),
        ]);
        let (user, groups) = identity_from_der(&der).unwrap();
        assert_eq!(user, "system:node:n1");
        assert_eq!(groups, ["system:nodes"]);
    }

    #[test]
    fn other_attributes_are_ignored() {
        let der = self_signed_with(&[
            (DnType::CountryName, "NL"),
            (DnType::OrganizationalUnitName, "not a group"),
            (DnType::CommonName, "carol"),
        ]);
        assert_eq!(
            identity_from_der(&der).unwrap(),
            ("carol".to_owned(), vec![])
        );
    }

    #[test]
    fn certificate_without_cn_names_nobody() {
        let der = self_signed_with(&[(DnType::OrganizationName, "devs")]);
        assert!(matches!(identity_from_der(&der), Err(Error::NoCommonName)));
        let der = self_signed_with(&[(DnType::CommonName, "")]);
        assert!(matches!(identity_from_der(&der), Err(Error::NoCommonName)));
    }

    #[test]
    fn garbage_is_invalid() {
        assert!(matches!(
            identity_from_der(b"\x30\x03abc"),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(identity_from_der(&[]), Err(Error::Invalid { .. })));
    }
}
