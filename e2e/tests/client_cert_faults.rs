//! Client certificates that must not authenticate, on the API server's port (issue 28,
//! point 6): an expired certificate signed by the cluster CA and a certificate from another
//! CA are each a 401 `Unauthorized` Status for curl and "You must be logged in to the
//! server" for kubectl, the server logs why ("Unable to authenticate the request" with the
//! verifier's reason), and the admin keeps working. (The store's client port: see
//! `store_client_tls`.)

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::ServerProcess;
use e2e::cli::ok;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    date_time_ymd,
};

/// Writes `<name>.crt` and `<name>.key` in `dir`: a client certificate `CN=<name>,
/// O=system:masters` valid from `from` to `until` (years), signed by `issuer`.
fn client_cert(
    dir: &Path,
    name: &str,
    (from, until): (i32, i32),
    issuer: &Issuer<'_, KeyPair>,
) -> (PathBuf, PathBuf) {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    params.not_before = date_time_ymd(from, 1, 1);
    params.not_after = date_time_ymd(until, 1, 1);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("sign");
    let (c, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).expect("write cert");
    std::fs::write(&k, key.serialize_pem()).expect("write key");
    (c, k)
}

/// The cluster CA of a data directory, as an rcgen issuer.
fn cluster_ca(data_dir: &Path) -> Issuer<'static, KeyPair> {
    let pem = std::fs::read_to_string(data_dir.join("pki/ca.crt")).expect("ca.crt");
    let key =
        KeyPair::from_pem(&std::fs::read_to_string(data_dir.join("pki/ca.key")).expect("ca.key"))
            .expect("ca key");
    Issuer::from_ca_cert_pem(&pem, key).expect("ca")
}

/// A fresh CA nobody trusts.
fn foreign_ca() -> Issuer<'static, KeyPair> {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "kubernetes");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    Issuer::new(params, KeyPair::generate().expect("key"))
}

/// curl with a client certificate: (HTTP status, body).
fn curl(s: &ServerProcess, cert: &Path, key: &Path) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .arg("--cacert")
        .arg(s.data_dir.join("pki/ca.crt"))
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .arg(format!("{}/api/v1/namespaces/default/configmaps", s.url))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// A kubeconfig for the server with a client certificate.
fn kubeconfig(s: &ServerProcess, dir: &Path, cert: &Path, key: &Path) -> PathBuf {
    let path = dir.join(format!(
        "{}.kubeconfig",
        cert.file_stem().and_then(|n| n.to_str()).unwrap_or("user")
    ));
    let ca = s.data_dir.join("pki/ca.crt");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            s.url,
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
    .expect("kubeconfig");
    path
}

#[test]
fn expired_and_foreign_client_certificates_are_refused_with_a_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&tmp.path().join("data")).expect("start");
    let dir = tmp.path();
    let ca = cluster_ca(&s.data_dir);

    // Control: the same kind of certificate, valid, from the cluster CA, is a master.
    let (good, good_key) = client_cert(dir, "valid", (2020, 2100), &ca);
    let (code, body) = curl(&s, &good, &good_key);
    assert_eq!(code, 200, "{body}");

    let (expired, expired_key) = client_cert(dir, "expired", (2020, 2021), &ca);
    let (foreign, foreign_key) = client_cert(dir, "foreign", (2020, 2100), &foreign_ca());
    for (what, cert, key, reason) in [
        ("expired", &expired, &expired_key, "xpired"),
        ("foreign", &foreign, &foreign_key, "UnknownIssuer"),
    ] {
        let (code, body) = curl(&s, cert, key);
        assert_eq!(code, 401, "{what}: {body}");
        let status: serde_json::Value = serde_json::from_str(&body).expect("Status");
        assert_eq!(status["kind"], "Status", "{body}");
        assert_eq!(status["reason"], "Unauthorized", "{body}");
        assert_eq!(status["message"], "Unauthorized", "{body}");

        let kc = kubeconfig(&s, dir, cert, key);
        let (done, _, err) = s
            .kubectl_as(&kc, &["get", "configmaps"], None)
            .expect("kubectl");
        assert!(!done, "{what}: kubectl got through");
        assert!(
            err.contains("You must be logged in to the server"),
            "{what}: {err}"
        );
        let log = s.log();
        assert!(
            log.lines()
                .any(|l| l.contains("Unable to authenticate the request") && l.contains(reason)),
            "{what}: no logged reason {reason:?}:\n{}",
            e2e::cli::tail(&log)
        );
    }
    // Nothing else is affected.
    ok(&s, &["get", "namespaces"]);
}
