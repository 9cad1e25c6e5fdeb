//! Bad credentials never hurt the server (issue 8, done-means 6): malformed bearer tokens,
//! `alg: none`, JWTs that are not JSON objects, oversized tokens and headers, a client
//! certificate from another CA, and impersonation by a user without the `impersonate` verb.
//! Each gets upstream's status and `Status` body (401 Unauthorized, 403 Forbidden with the
//! impersonation message, 431 for a header block over Go's 1 MiB limit), the server keeps
//! serving, and every refused request that reached the API is in the audit log with its
//! response code.

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2e::ServerProcess;
use serde_json::Value;

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  omitStages: ["RequestReceived"]
"#;

/// `curl` against the server (CA-verified) with extra arguments: (HTTP status, body).
fn curl(s: &ServerProcess, ca: &Path, args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .arg("--cacert")
        .arg(ca)
        .args(args)
        .arg(format!("{}/api/v1/namespaces/default/pods", s.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// A request with `Authorization: Bearer <token>`.
fn bearer(s: &ServerProcess, ca: &Path, token: &str) -> (u16, String) {
    let header = format!("Authorization: Bearer {token}");
    curl(s, ca, &["-H", &header])
}

/// A raw HTTP/1.1 `GET` of the pods with `Authorization: Bearer <token>` over TLS (rustls,
/// trusting `ca`): (status, body).
fn http1_get(s: &ServerProcess, ca: &Path, token: &str) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("ca cert")).expect("add ca");
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("tls");
    let addr = s.url.trim_start_matches("https://");
    let tcp = std::net::TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let request = format!(
        "GET /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    // The server may answer (431) and close before it read the whole request.
    let _ = tls.write_all(request.as_bytes());
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // hyper sends small bodies with a length, larger ones chunked; Status bodies are small.
    (code, body.to_owned())
}

fn assert_unauthorized(what: &str, (code, body): (u16, String)) {
    assert_eq!(code, 401, "{what}: {body}");
    let status: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{what}: {body}"));
    assert_eq!(status["kind"], "Status", "{what}: {body}");
    assert_eq!(status["reason"], "Unauthorized", "{what}: {body}");
    assert_eq!(status["message"], "Unauthorized", "{what}: {body}");
    assert_eq!(status["code"], 401, "{what}: {body}");
}

fn audit_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn bad_credentials_get_upstreams_errors_are_audited_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001,\"dev\"\n").expect("tokens");
    let audit = dir.path().join("audit.log");
    let s = ServerProcess::start_with(
        &dir.path().join("data"),
        &[
            "--audit-policy-file",
            policy.to_str().expect("utf-8"),
            "--audit-log-path",
            audit.to_str().expect("utf-8"),
            "--token-auth-file",
            tokens.to_str().expect("utf-8"),
        ],
    )
    .expect("server starts");
    let ca = s.data_dir.join("pki/ca.crt");

    // Malformed bearer tokens: 401 with upstream's Status, never a 500.
    let header = |v: &str| URL_SAFE_NO_PAD.encode(v);
    let claims = header(
        r#"{"iss":"https://kubernetes.default.svc.cluster.local","sub":"system:serviceaccount:default:default","exp":99999999999}"#,
    );
    let cases: Vec<(&str, String)> = vec![
        ("garbage", "garbage".to_owned()),
        ("three dots", "a.b.c".to_owned()),
        ("bad base64", "!!!.@@@.###".to_owned()),
        (
            "segments that are not JSON objects",
            format!("{}.{}.{}", header("[1,2]"), header("\"x\""), header("sig")),
        ),
        (
            "alg none",
            format!("{}.{claims}.", header(r#"{"alg":"none","typ":"JWT"}"#)),
        ),
        (
            "alg HS256 with an empty key",
            format!("{}.{claims}.{}", header(r#"{"alg":"HS256"}"#), header("x")),
        ),
        // Over our JWT cap (16 KiB) and HTTP/2's default header list limit (16 KiB), under
        // curl's own 64 KiB cap for an HTTP/2 header block.
        (
            "a JWT of 48 KiB",
            format!(
                "{}.{}.{}",
                header(r#"{"alg":"ES256"}"#),
                "A".repeat(48 * 1024),
                header("sig")
            ),
        ),
    ];
    for (what, token) in &cases {
        assert_unauthorized(what, bearer(&s, &ca, token));
    }

    // A 512 KiB token over HTTP/1.1 still reaches the authenticator (Go's 1 MiB header
    // limit, which kube-apiserver keeps): 401. (curl cannot send a header this large.)
    let big = format!("x.{}.y", "A".repeat(512 * 1024));
    assert_unauthorized("a 512 KiB token over HTTP/1.1", http1_get(&s, &ca, &big));
    // A header block over the limit (2 MiB): 431 Request Header Fields Too Large, before
    // anything else runs.
    let (code, _) = http1_get(&s, &ca, &"x".repeat(2 * 1024 * 1024));
    assert_eq!(code, 431, "oversized header block");

    // A client certificate from another cluster's CA: 401, as kube-apiserver's x509
    // authenticator answers for a certificate it cannot verify.
    let other = dir.path().join("other");
    let out = Command::new(e2e::capstan_bin())
        .args(["certs", "init", "--data-dir"])
        .arg(&other)
        .output()
        .expect("capstan certs init");
    assert!(out.status.success());
    let foreign = curl(
        &s,
        &ca,
        &[
            "--cert",
            other.join("pki/admin.crt").to_str().expect("utf-8"),
            "--key",
            other.join("pki/admin.key").to_str().expect("utf-8"),
        ],
    );
    assert_unauthorized("client certificate from another CA", foreign);

    // Impersonation by a user without the verb: 403 with upstream's message.
    let (code, body) = curl(
        &s,
        &ca,
        &[
            "-H",
            "Authorization: Bearer alice-token",
            "-H",
            "Impersonate-User: bob",
        ],
    );
    assert_eq!(code, 403, "{body}");
    let status: Value = serde_json::from_str(&body).expect("Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
        "{body}"
    );
    let (code, body) = curl(
        &s,
        &ca,
        &[
            "-H",
            "Authorization: Bearer alice-token",
            "-H",
            "Impersonate-User: alice",
            "-H",
            "Impersonate-Group: system:masters",
        ],
    );
    assert_eq!(
        code, 403,
        "impersonating a group needs the verb too: {body}"
    );

    // The server is still fine.
    let (ok, out, err) = s.kubectl(&["get", "ns", "-o", "name"]).expect("kubectl");
    assert!(ok && out.contains("namespace/default"), "{err}");

    // Every refused request is in the audit log with its code.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let wanted_401 = cases.len() + 2;
    loop {
        let events = audit_events(&audit);
        let code_of = |e: &Value| e["responseStatus"]["code"].as_i64();
        let unauthorized = events
            .iter()
            .filter(|e| e["stage"] == "ResponseStarted" && code_of(e) == Some(401))
            .count();
        let forbidden_impersonation = events
            .iter()
            .filter(|e| code_of(e) == Some(403) && e["user"]["username"] == "alice")
            .count();
        if unauthorized >= wanted_401 && forbidden_impersonation >= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "audit log: {unauthorized} 401 events (want {wanted_401}), {forbidden_impersonation} \
             403 impersonation events (want 2):\n{}",
            std::fs::read_to_string(&audit).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
