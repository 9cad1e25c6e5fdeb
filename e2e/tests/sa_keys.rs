//! Service-account signing keys as kubeadm makes them: RSA keys from openssl, in PKCS#1
//! (`RSA PRIVATE KEY`) and PKCS#8 form, given with `--service-account-signing-key-file` and
//! `--service-account-key-file`. `kubectl create token` gets an RS256 JWT whose `kid` is in
//! `/openid/v1/jwks` (kty RSA, the key's modulus), the discovery document lists RS256, and
//! `kubectl auth whoami` with the token shows the service account.

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2e::ServerProcess;
use serde_json::Value;

fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn admin(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?}: {err}\n{}", s.log());
    out
}

/// A kubeconfig for the server that authenticates with `token` only.
fn token_kubeconfig(s: &ServerProcess, dir: &Path, token: &str) -> std::path::PathBuf {
    let ca = std::fs::read(s.data_dir.join("pki/ca.crt")).expect("ca");
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let path = dir.join("token.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\n\
             contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            s.url
        ),
    )
    .expect("kubeconfig");
    path
}

fn check_rsa_server(dir: &Path, key: &Path, public: &Path) {
    let s = ServerProcess::start_with(
        &dir.join("data"),
        &[
            "--service-account-signing-key-file",
            key.to_str().expect("utf-8"),
            "--service-account-key-file",
            public.to_str().expect("utf-8"),
        ],
    )
    .expect("server starts with an RSA key");
    admin(&s, &["create", "serviceaccount", "bot"]);
    let token = admin(&s, &["create", "token", "bot"]).trim().to_owned();
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').next().expect("header"))
            .expect("base64"),
    )
    .expect("json");
    assert_eq!(header["alg"], "RS256", "{header}");

    // The JWKS publishes the key under the token's kid, with the key's own modulus.
    let jwks: Value =
        serde_json::from_str(&admin(&s, &["get", "--raw", "/openid/v1/jwks"])).expect("jwks");
    let jwk = jwks["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["kid"] == header["kid"]))
        .unwrap_or_else(|| panic!("kid {} not in {jwks}", header["kid"]))
        .clone();
    assert_eq!(jwk["kty"], "RSA");
    assert_eq!(jwk["alg"], "RS256");
    assert_eq!(jwk["e"], "AQAB");
    let modulus = openssl(&[
        "rsa",
        "-pubin",
        "-in",
        public.to_str().expect("utf-8"),
        "-noout",
        "-modulus",
    ]);
    let hex = modulus
        .trim()
        .trim_start_matches("Modulus=")
        .to_ascii_lowercase();
    let n = URL_SAFE_NO_PAD
        .decode(jwk["n"].as_str().expect("n"))
        .expect("base64 n");
    let n_hex: String = n.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(n_hex, hex.trim_start_matches("00"));
    let discovery: Value = serde_json::from_str(&admin(
        &s,
        &["get", "--raw", "/.well-known/openid-configuration"],
    ))
    .expect("discovery");
    assert!(
        discovery["id_token_signing_alg_values_supported"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "RS256")),
        "{discovery}"
    );

    // The token authenticates as the service account.
    let kubeconfig = token_kubeconfig(&s, dir, &token);
    let (ok, out, err) = s
        .kubectl_as(&kubeconfig, &["auth", "whoami", "-o", "json"], None)
        .expect("kubectl");
    assert!(ok, "{err}");
    let review: Value = serde_json::from_str(&out).expect("review");
    assert_eq!(
        review["status"]["userInfo"]["username"],
        "system:serviceaccount:default:bot"
    );
    // A token with a changed payload does not verify.
    let parts: Vec<&str> = token.split('.').collect();
    let forged_claims =
        URL_SAFE_NO_PAD.encode(r#"{"sub":"system:serviceaccount:kube-system:admin"}"#);
    let forged = format!("{}.{forged_claims}.{}", parts[0], parts[2]);
    let kubeconfig = token_kubeconfig(&s, dir, &forged);
    let (ok, _, err) = s
        .kubectl_as(&kubeconfig, &["auth", "whoami"], None)
        .expect("kubectl");
    assert!(!ok && err.contains("Unauthorized"), "{err}");
}

/// Generates an RSA key with the openssl arguments `generate` (`OUT` stands for the key
/// file), checks its PEM label, derives its public key, and runs [`check_rsa_server`].
fn with_openssl_key(generate: &[&str], label: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("sa.key");
    let public = dir.path().join("sa.pub");
    let k = key.to_str().expect("utf-8");
    let args: Vec<&str> = generate
        .iter()
        .map(|a| if *a == "OUT" { k } else { a })
        .collect();
    openssl(&args);
    let pem = std::fs::read_to_string(&key).expect("key");
    assert!(
        pem.starts_with(&format!("-----BEGIN {label}-----")),
        "{pem}"
    );
    let p = public.to_str().expect("utf-8");
    openssl(&["rsa", "-in", k, "-pubout", "-out", p]);
    check_rsa_server(dir.path(), &key, &public);
}

#[test]
fn rsa_pkcs1_signing_keys_sign_rs256_tokens() {
    with_openssl_key(
        &["genrsa", "-traditional", "-out", "OUT", "2048"],
        "RSA PRIVATE KEY",
    );
}

#[test]
fn rsa_pkcs8_signing_keys_sign_rs256_tokens() {
    with_openssl_key(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "OUT",
        ],
        "PRIVATE KEY",
    );
}
