//! The API server's serving certificate and the names it must carry.
//!
//! Clients reach the API server by many names: the addresses it listens on, and from inside the
//! cluster the `kubernetes` Service (by its short and qualified DNS names and its ClusterIP,
//! the first address of the service range). The certificate carries all of them, as
//! kube-apiserver's does.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use rcgen::{DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};
use time::Duration;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use crate::ca::{CertificateAuthority, IssuedCert, leaf_params};
use crate::error::{Error, Result};

/// How long a new serving certificate is valid: one year.
pub const SERVING_VALIDITY: Duration = Duration::days(365);

/// Common name of the serving certificate (kubeadm's choice too).
pub const SERVING_COMMON_NAME: &str = "kube-apiserver";

/// ClusterIP of the `default/kubernetes` Service: the first address of the default service
/// range 10.96.0.0/12.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// DNS names every serving certificate carries.
pub const DEFAULT_DNS_NAMES: [&str; 5] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
];

/// One subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum San {
    /// An IP address SAN.
    Ip(IpAddr),
    /// A DNS name SAN, lower-cased.
    Dns(String),
}

impl San {
    /// Reads `s` as an IP address if it is one, otherwise as a DNS name (letters, digits, `-`,
    /// `.`, `_`, and a leading `*.` wildcard label). Other input is [`Error::InvalidSan`].
    pub fn parse(s: &str) -> Result<San> {
        let s = s.trim();
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(San::Ip(ip));
        }
        let rest = s.strip_prefix("*.").unwrap_or(s);
        let valid = !rest.is_empty()
            && rest.len() <= 253
            && rest.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if valid {
            Ok(San::Dns(s.to_ascii_lowercase()))
        } else {
            Err(Error::InvalidSan(s.to_owned()))
        }
    }

    pub(crate) fn to_rcgen(&self) -> Result<SanType> {
        Ok(match self {
            San::Ip(ip) => SanType::IpAddress(*ip),
            San::Dns(name) => SanType::DnsName(
                name.clone()
                    .try_into()
                    .map_err(|_| Error::InvalidSan(name.clone()))?,
            ),
        })
    }
}

impl fmt::Display for San {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            San::Ip(ip) => ip.fmt(f),
            San::Dns(name) => f.write_str(name),
        }
    }
}

/// Every SAN a serving certificate for `extra` must carry: the [`DEFAULT_DNS_NAMES`],
/// `127.0.0.1`, [`KUBERNETES_SERVICE_IP`], then each of `extra` (see [`San::parse`]), without
/// duplicates, in that order.
pub fn serving_sans(extra: &[String]) -> Result<Vec<San>> {
    let mut sans: Vec<San> = DEFAULT_DNS_NAMES
        .iter()
        .map(|n| San::Dns((*n).to_owned()))
        .collect();
    sans.push(San::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    sans.push(San::Ip(IpAddr::V4(KUBERNETES_SERVICE_IP)));
    for s in extra {
        let san = San::parse(s)?;
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    Ok(sans)
}

/// Issues an API server serving certificate signed by `ca`: subject `CN=kube-apiserver`, the
/// SANs of [`serving_sans`]`(extra_sans)`, extended key usage serverAuth, valid for
/// [`SERVING_VALIDITY`], with a new key.
pub fn issue_serving_cert(ca: &CertificateAuthority, extra_sans: &[String]) -> Result<IssuedCert> {
    let mut params = leaf_params(SERVING_VALIDITY);
    params
        .distinguished_name
        .push(DnType::CommonName, SERVING_COMMON_NAME);
    params.subject_alt_names = serving_sans(extra_sans)?
        .iter()
        .map(San::to_rcgen)
        .collect::<Result<_>>()?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    ca.sign(&params, "API server serving certificate")
}

/// The SANs of a certificate (DNS names lower-cased); other kinds of names are skipped.
pub fn cert_sans(cert_der: &[u8]) -> Result<Vec<San>> {
    let what = "serving certificate";
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| Error::invalid(what, e))?;
    let Some(ext) = cert
        .subject_alternative_name()
        .map_err(|e| Error::invalid(what, e))?
    else {
        return Ok(Vec::new());
    };
    let mut sans = Vec::new();
    for name in &ext.value.general_names {
        match name {
            GeneralName::DNSName(dns) => sans.push(San::Dns(dns.to_ascii_lowercase())),
            GeneralName::IPAddress(bytes) => {
                if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                    sans.push(San::Ip(IpAddr::from(v4)));
                } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                    sans.push(San::Ip(IpAddr::from(v6)));
                }
            }
            _ => {}
        }
    }
    Ok(sans)
}

/// The SANs of [`serving_sans`]`(extra_sans)` that `cert_der` lacks (empty if it has them all).
pub fn missing_sans(cert_der: &[u8], extra_sans: &[String]) -> Result<Vec<San>> {
    let have = cert_sans(cert_der)?;
    Ok(serving_sans(extra_sans)?
        .into_iter()
        .filter(|san| !have.contains(san))
        .collect())
}

#[cfg(test)]
mod tests {
    use x509_parser::prelude::*;

    use super::*;

    #[test]
    fn serving_cert_verifies_against_ca_and_carries_every_san() {
        let ca = CertificateAuthority::generate().unwrap();
        let extra = [
            "192.168.1.20".to_owned(),
            "Node1.Example.COM".to_owned(),
            "::1".to_owned(),
        ];
        let issued = issue_serving_cert(&ca, &extra).unwrap();

        let (_, ca_cert) = X509Certificate::from_der(ca.cert_der()).unwrap();
        let (_, cert) = X509Certificate::from_der(&issued.cert_der).unwrap();
        cert.verify_signature(Some(ca_cert.public_key())).unwrap();
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());

        let ext = cert.subject_alternative_name().unwrap().unwrap();
        let mut dns = Vec::new();
        let mut ips = Vec::new();
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) => ips.push(b.to_vec()),
                other => panic!("unexpected SAN {other:?}"),
            }
        }
        for want in [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
            "node1.example.com",
        ] {
            assert!(
                dns.iter().any(|d| d == want),
                "missing DNS SAN {want}: {dns:?}"
            );
        }
        let mut v6_loopback = vec![0u8; 15];
        v6_loopback.push(1);
        for want in [
            vec![127, 0, 0, 1],
            vec![10, 96, 0, 1],
            vec![192, 168, 1, 20],
            v6_loopback,
        ] {
            assert!(ips.contains(&want), "missing IP SAN {want:?}: {ips:?}");
        }
        assert_eq!(dns.len() + ips.len(), 10, "no duplicates, nothing else");

        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth);
        assert!(!eku.client_auth);
        let cn: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["kube-apiserver"]);
        let lifetime =
            cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert_eq!(lifetime / 86_400, 365);
        assert!(ca.has_signed(&issued.cert_der));
    }

    #[test]
    fn missing_sans_names_what_a_cert_lacks() {
        let ca = CertificateAuthority::generate().unwrap();
        let issued = issue_serving_cert(&ca, &["10.0.0.5".to_owned()]).unwrap();
        assert_eq!(
            missing_sans(&issued.cert_der, &["10.0.0.5".to_owned()]).unwrap(),
            []
        );
        assert_eq!(missing_sans(&issued.cert_der, &[]).unwrap(), []);
        assert_eq!(
            missing_sans(
                &issued.cert_der,
                &["10.0.0.6".to_owned(), "LOCALHOST".to_owned()]
            )
            .unwrap(),
            [San::Ip("10.0.0.6".parse().unwrap())]
        );
    }

    #[test]
    fn san_parse_accepts_ips_and_dns_names_and_rejects_junk() {
        assert_eq!(
            San::parse("10.1.2.3").unwrap(),
            San::Ip("10.1.2.3".parse().unwrap())
        );
        assert_eq!(
            San::parse("fe80::1").unwrap(),
            San::Ip("fe80::1".parse().unwrap())
        );
        assert_eq!(
            San::parse("My-Host.local").unwrap(),
            San::Dns("my-host.local".to_owned())
        );
        assert_eq!(
            San::parse("*.apps.test").unwrap(),
            San::Dns("*.apps.test".to_owned())
        );
        for bad in ["", "has space", "a..b", "ünïcode", "x/y", "*."] {
            assert!(
                matches!(San::parse(bad), Err(Error::InvalidSan(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn serving_sans_dedups_defaults() {
        let sans = serving_sans(&["127.0.0.1".to_owned(), "kubernetes".to_owned()]).unwrap();
        assert_eq!(sans.len(), 7);
        assert_eq!(sans[0].to_string(), "kubernetes");
        assert_eq!(sans[6].to_string(), "10.96.0.1");
    }
}
