//! Store members' peer certificates: what a member presents to the other members of its Raft
//! cluster over `https://` peer URLs, as etcd's `--peer-cert-file`.
//!
//! A peer certificate is both a server certificate (members dial it) and a client
//! certificate (it dials members, which check it when `--peer-client-cert-auth` is on), so it
//! carries both extended key usages, and the SANs of every host in the member's peer URLs
//! (plus `localhost` and `127.0.0.1`), signed by the cluster CA that every member trusts.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose};
use time::Duration;

use crate::ca::{CertificateAuthority, IssuedCert, leaf_params};
use crate::error::Result;
use crate::issue::{San, cert_sans};

/// How long a new peer certificate is valid: one year, as the serving certificate.
pub const PEER_VALIDITY: Duration = Duration::days(365);

/// The SANs of a peer certificate for `hosts`: `localhost`, `127.0.0.1`, then each host.
pub fn peer_sans(hosts: &[String]) -> Result<Vec<San>> {
    let mut sans = vec![
        San::Dns("localhost".to_owned()),
        San::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    ];
    for h in hosts {
        let san = San::parse(h)?;
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    Ok(sans)
}

/// Issues a peer certificate for member `name` reachable at `hosts`, signed by `ca`, with a
/// new key: subject `CN=<name>`, SANs of [`peer_sans`], extended key usages serverAuth and
/// clientAuth.
pub fn issue_peer_cert(
    ca: &CertificateAuthority,
    name: &str,
    hosts: &[String],
) -> Result<IssuedCert> {
    let mut params = leaf_params(PEER_VALIDITY);
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = peer_sans(hosts)?
        .iter()
        .map(San::to_rcgen)
        .collect::<Result<_>>()?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    ca.sign(&params, "peer certificate")
}

/// Where a member's peer certificate lives in a data directory's PKI: `pki/peer.crt` and
/// `pki/peer.key`.
pub fn peer_paths(pki_dir: &Path) -> (PathBuf, PathBuf) {
    (pki_dir.join("peer.crt"), pki_dir.join("peer.key"))
}

/// Whether the certificate `cert_der` carries every SAN a peer certificate for `hosts` needs.
pub(crate) fn covers_hosts(cert_der: &[u8], hosts: &[String]) -> bool {
    match (cert_sans(cert_der), peer_sans(hosts)) {
        (Ok(have), Ok(want)) => want.iter().all(|s| have.contains(s)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::*;

    #[test]
    fn peer_certificates_serve_and_dial_for_their_hosts() {
        let ca = CertificateAuthority::generate().unwrap();
        let issued = issue_peer_cert(&ca, "n1", &["10.0.0.5".into(), "node-1".into()]).unwrap();
        assert!(ca.has_signed(&issued.cert_der));
        assert!(covers_hosts(&issued.cert_der, &["10.0.0.5".into()]));
        assert!(!covers_hosts(&issued.cert_der, &["10.0.0.6".into()]));
        let (_, cert) = X509Certificate::from_der(&issued.cert_der).unwrap();
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth);
        assert!(
            cert.subject()
                .iter_common_name()
                .any(|cn| cn.as_str() == Ok("n1"))
        );
    }
}
