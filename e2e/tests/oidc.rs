//! OIDC authentication with a tiny issuer run by the test (HTTPS serving the discovery
//! document and a JWK set; the test signs the ID tokens, ES256 and RS256):
//!
//! - `--oidc-issuer-url` & co.: `kubectl --token=<id token> auth whoami` shows the user and
//!   the prefixed groups, and so does a kubeconfig whose user is an exec credential plugin
//!   printing the ID token (kubelogin's way); a wrong audience, an expired token and a token whose key the
//!   issuer serves badly are 401s while the admin keeps working.
//! - `--authentication-config` (AuthenticationConfiguration v1beta1): CEL username and extra
//!   mappings, claim validation rules; an issuer that is down is a 401, nothing else.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2e::{ServerProcess, capstan_bin, free_port};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, RsaKeyPair};
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};

const RSA_KEY: &str = include_str!("../../apiserver/src/authn/testdata/rsa-2048.key");

/// The issuer's signing keys.
struct Keys {
    ec: EcdsaKeyPair,
    rsa: RsaKeyPair,
}

impl Keys {
    fn new() -> Keys {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("ec key");
        let ec = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("ec key");
        let der = rustls::pki_types::PrivatePkcs1KeyDer::from_pem_slice(RSA_KEY.as_bytes())
            .expect("rsa pem");
        let rsa = RsaKeyPair::from_der(der.secret_pkcs1_der()).expect("rsa key");
        Keys { ec, rsa }
    }

    fn jwks(&self) -> Value {
        let p = self.ec.public_key().as_ref();
        let b = |x: &[u8]| URL_SAFE_NO_PAD.encode(x);
        let rsa = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(self.rsa.public());
        json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec1", "use": "sig", "alg": "ES256",
             "x": b(&p[1..33]), "y": b(&p[33..65])},
            {"kty": "RSA", "kid": "rsa1", "use": "sig", "alg": "RS256",
             "n": b(&rsa.n),
             "e": b(&rsa.e)},
        ]})
    }

    /// A JWT over `claims` signed with the EC key (`ES256`) or the RSA key (`RS256`),
    /// naming `kid`.
    fn sign(&self, alg: &str, kid: &str, claims: &Value) -> String {
        let header = json!({"alg": alg, "kid": kid, "typ": "JWT"});
        let msg = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let rng = SystemRandom::new();
        let sig = if alg == "ES256" {
            self.ec
                .sign(&rng, msg.as_bytes())
                .expect("sign")
                .as_ref()
                .to_vec()
        } else {
            let mut sig = vec![0; self.rsa.public().modulus_len()];
            self.rsa
                .sign(&signature::RSA_PKCS1_SHA256, &rng, msg.as_bytes(), &mut sig)
                .expect("sign");
            sig
        };
        format!("{msg}.{}", URL_SAFE_NO_PAD.encode(sig))
    }
}

/// The test's OIDC issuer: discovery document and JWK set over HTTPS.
struct Issuer {
    url: String,
    jwks: Arc<Mutex<Value>>,
    _runtime: tokio::runtime::Runtime,
}

impl Issuer {
    fn start(cert: &Path, key: &Path, jwks: Value) -> Issuer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().expect("addr").port()
        );
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(cert)
            .expect("cert")
            .collect::<Result<Vec<_>, _>>()
            .expect("cert");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).expect("key");
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("tls")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("tls");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let jwks = Arc::new(Mutex::new(jwks));
        let (served, base) = (Arc::clone(&jwks), url.clone());
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, served, base) =
                    (acceptor.clone(), Arc::clone(&served), base.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let body = match req.uri().path() {
                            "/.well-known/openid-configuration" => {
                                json!({"issuer": base, "jwks_uri": format!("{base}/jwks")})
                            }
                            "/jwks" => served.lock().expect("lock").clone(),
                            _ => json!({}),
                        };
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(hyper::body::Bytes::from(
                                    body.to_string(),
                                )),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Issuer {
            url,
            jwks,
            _runtime: runtime,
        }
    }
}

fn capstan(args: &[&str]) {
    let out = Command::new(capstan_bin())
        .args(args)
        .output()
        .expect("capstan runs");
    assert!(
        out.status.success(),
        "capstan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a serving certificate for 127.0.0.1 under `dir` (capstan's own PKI tools):
/// (CA, certificate, key).
fn issuer_pki(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let d = dir.to_str().expect("utf-8");
    capstan(&["certs", "init", "--data-dir", d]);
    let out = dir.join("issuer");
    capstan(&[
        "certs",
        "store-server",
        "--data-dir",
        d,
        "--name",
        "issuer",
        "--hosts",
        "127.0.0.1",
        "--out-dir",
        out.to_str().expect("utf-8"),
    ]);
    (
        dir.join("pki/ca.crt"),
        out.join("server.crt"),
        out.join("server.key"),
    )
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `kubectl auth whoami -o json` with only a bearer token: (success, stdout, stderr).
fn whoami(server: &ServerProcess, token: &str) -> (bool, String, String) {
    let ca = server.data_dir.join("pki/ca.crt");
    let out = Command::new("kubectl")
        .env_remove("KUBECONFIG")
        .args(["--kubeconfig=/dev/null", "--server", &server.url])
        .arg(format!("--certificate-authority={}", ca.display()))
        .arg(format!("--token={token}"))
        .arg(format!("--cache-dir={}", server.cache_dir.display()))
        .args(["auth", "whoami", "-o", "json"])
        .output()
        .expect("kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl auth whoami -o json` with a kubeconfig whose user is an exec credential plugin
/// (client.authentication.k8s.io/v1) printing `token`: (stdout, stderr); panics on failure.
fn exec_plugin_whoami(server: &ServerProcess, dir: &Path, token: &str) -> (String, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let script = dir.join("oidc-login.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"%s\",\"expirationTimestamp\":\"%s\"}}}}\\n' '{token}' \"$(date -u -d '+10 min' +%Y-%m-%dT%H:%M:%SZ)\"\n"
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let kubeconfig = dir.join("oidc-exec.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: oidc\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\ncontexts:\n- name: x\n  context: {{cluster: c, user: oidc}}\ncurrent-context: x\n",
            server.url,
            server.data_dir.join("pki/ca.crt").display(),
            script.display()
        ),
    )
    .expect("kubeconfig");
    let (ok, out, err) = server
        .kubectl_as(&kubeconfig, &["auth", "whoami", "-o", "json"], None)
        .expect("kubectl");
    assert!(ok, "exec plugin login: {out} {err}\n{}", server.log());
    (out, err)
}

fn user_info(out: &str) -> Value {
    let v: Value = serde_json::from_str(out).expect("whoami JSON");
    v["status"]["userInfo"].clone()
}

fn admin_still_works(server: &ServerProcess) {
    let (ok, out, err) = server.kubectl(&["get", "namespaces"]).expect("kubectl");
    assert!(ok && out.contains("default"), "{out} {err}");
}

#[test]
fn oidc_flags_map_id_tokens_to_users_and_refuse_bad_ones() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = issuer_pki(&tmp.path().join("idp"));
    let keys = Keys::new();
    let issuer = Issuer::start(&cert, &key, keys.jwks());
    let server = ServerProcess::start_with(
        &tmp.path().join("server"),
        &[
            &format!("--oidc-issuer-url={}", issuer.url),
            "--oidc-client-id=kubernetes",
            "--oidc-username-claim=email",
            "--oidc-groups-claim=groups",
            "--oidc-groups-prefix=oidc:",
            &format!("--oidc-ca-file={}", ca.display()),
        ],
    )
    .expect("start");
    let claims = |aud: &str, exp: i64| {
        json!({
            "iss": issuer.url, "aud": aud, "sub": "1234", "email": "jane@example.com",
            "email_verified": true, "groups": ["dev", "ops"], "iat": now(), "exp": exp,
        })
    };

    for (alg, kid) in [("ES256", "ec1"), ("RS256", "rsa1")] {
        let token = keys.sign(alg, kid, &claims("kubernetes", now() + 600));
        let (ok, out, err) = whoami(&server, &token);
        assert!(ok, "{alg}: {out} {err}\n{}", server.log());
        let user = user_info(&out);
        assert_eq!(user["username"], "jane@example.com", "{out}");
        let groups = user["groups"].to_string();
        for g in ["oidc:dev", "oidc:ops", "system:authenticated"] {
            assert!(groups.contains(g), "{g} in {groups}");
        }
    }

    // The same ID token through an exec credential plugin (kubelogin's way): kubectl runs
    // the script, which prints an ExecCredential with the token and its expiry.
    let token = keys.sign("ES256", "ec1", &claims("kubernetes", now() + 600));
    let (out, err) = exec_plugin_whoami(&server, tmp.path(), &token);
    assert_eq!(
        user_info(&out)["username"],
        "jane@example.com",
        "{out} {err}"
    );

    // Wrong audience, expired, another issuer's key: 401.
    let refused = [
        keys.sign("ES256", "ec1", &claims("someone-else", now() + 600)),
        keys.sign("ES256", "ec1", &claims("kubernetes", now() - 3600)),
        {
            let other = Keys::new();
            other.sign("ES256", "ec1", &claims("kubernetes", now() + 600))
        },
    ];
    for token in &refused {
        let (ok, out, err) = whoami(&server, token);
        assert!(!ok, "accepted: {out}");
        assert!(
            err.contains("Unauthorized") || err.contains("logged in"),
            "{err}"
        );
    }

    // The issuer starts serving bad keys: a token under a new key id makes the server
    // fetch again, find nothing usable, and refuse it; the admin is unaffected.
    *issuer.jwks.lock().expect("lock") =
        json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "ec2", "x": "AA", "y": "AA"}]});
    std::thread::sleep(Duration::from_secs(11)); // past the refetch rate limit
    let token = keys.sign("ES256", "ec2", &claims("kubernetes", now() + 600));
    let (ok, out, err) = whoami(&server, &token);
    assert!(!ok, "accepted: {out}");
    assert!(
        err.contains("Unauthorized") || err.contains("logged in"),
        "{err}"
    );
    admin_still_works(&server);
    // The keys fetched before keep working for tokens they sign.
    let token = keys.sign("ES256", "ec1", &claims("kubernetes", now() + 600));
    let (ok, out, err) = whoami(&server, &token);
    assert!(ok, "{out} {err}");
}

#[test]
fn authentication_config_maps_claims_with_cel_and_survives_an_issuer_that_is_down() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = issuer_pki(&tmp.path().join("idp"));
    let keys = Keys::new();
    let issuer = Issuer::start(&cert, &key, keys.jwks());
    let down = format!("https://127.0.0.1:{}", free_port());
    let ca_pem = std::fs::read_to_string(&ca).expect("ca");
    let config = json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {"url": issuer.url, "audiences": ["kubernetes", "other"],
                           "audienceMatchPolicy": "MatchAny", "certificateAuthority": ca_pem},
                "claimValidationRules": [
                    {"expression": "claims.hd == 'example.com'", "message": "the hd claim must be example.com"}
                ],
                "claimMappings": {
                    "username": {"expression": "'corp:' + claims.sub"},
                    "groups": {"claim": "roles", "prefix": ""},
                    "uid": {"claim": "sub"},
                    "extra": [{"key": "example.com/tenant", "valueExpression": "claims.tenant"}]
                },
                "userValidationRules": [
                    {"expression": "!user.username.startsWith('corp:system')", "message": "no system users"}
                ]
            },
            {
                "issuer": {"url": down, "audiences": ["kubernetes"], "certificateAuthority": ca_pem},
                "claimMappings": {"username": {"claim": "sub", "prefix": "down:"}}
            }
        ]
    });
    let file = tmp.path().join("authn.json");
    std::fs::write(&file, config.to_string()).expect("write");
    let server = ServerProcess::start_with(
        &tmp.path().join("server"),
        &[&format!("--authentication-config={}", file.display())],
    )
    .expect("start");
    let claims = |sub: &str, hd: &str| {
        json!({
            "iss": issuer.url, "aud": ["other"], "sub": sub, "hd": hd, "roles": "admins",
            "tenant": "acme", "iat": now(), "exp": now() + 600,
        })
    };

    let token = keys.sign("RS256", "rsa1", &claims("jane", "example.com"));
    let (ok, out, err) = whoami(&server, &token);
    assert!(ok, "{out} {err}\n{}", server.log());
    let user = user_info(&out);
    assert_eq!(user["username"], "corp:jane", "{out}");
    assert_eq!(user["uid"], "jane", "{out}");
    assert!(user["groups"].to_string().contains("admins"), "{out}");
    assert_eq!(
        user["extra"]["example.com/tenant"],
        json!(["acme"]),
        "{out}"
    );

    // Claim and user validation rules.
    for token in [
        keys.sign("ES256", "ec1", &claims("jane", "evil.com")),
        keys.sign("ES256", "ec1", &claims("system:admin", "example.com")),
    ] {
        let (ok, out, _) = whoami(&server, &token);
        assert!(!ok, "accepted: {out}");
    }

    // The second issuer is down: its tokens are 401s, the rest keeps working.
    let token = keys.sign(
        "ES256",
        "ec1",
        &json!({"iss": down, "aud": "kubernetes", "sub": "x", "exp": now() + 600}),
    );
    let (ok, out, err) = whoami(&server, &token);
    assert!(!ok, "accepted: {out}");
    assert!(
        err.contains("Unauthorized") || err.contains("logged in"),
        "{err}"
    );
    admin_still_works(&server);
    let token = keys.sign("ES256", "ec1", &claims("jane", "example.com"));
    let (ok, out, err) = whoami(&server, &token);
    assert!(ok, "{out} {err}");

    // --oidc-* and --authentication-config together: refused at start.
    let out = Command::new(capstan_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(tmp.path().join("both"))
        .args(["--secure-port", &free_port().to_string(), "--nodes=0"])
        .arg(format!("--authentication-config={}", file.display()))
        .arg(format!("--oidc-issuer-url={}", issuer.url))
        .arg("--oidc-client-id=k")
        .output()
        .expect("capstan server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("mutually exclusive"),
        "{err}"
    );
}
