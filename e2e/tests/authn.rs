//! Authentication with stock kubectl: static tokens (`--token-auth-file`), service-account
//! tokens from `kubectl create token` (refused once the ServiceAccount is deleted, or when
//! forged or signed by another server), TokenReview, the issuer discovery documents,
//! anonymous requests (403 from RBAC) and `--anonymous-auth=false` (401).

use std::path::{Path, PathBuf};

use e2e::ServerProcess;

const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)";

/// A kubeconfig for the server with a bearer token instead of the admin certificate (or no
/// credential the server knows when `token` is None).
fn token_kubeconfig(s: &ServerProcess, dir: &Path, name: &str, token: Option<&str>) -> PathBuf {
    let admin = std::fs::read_to_string(&s.kubeconfig).expect("read admin kubeconfig");
    let mut out = String::new();
    for line in admin.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("client-key-data") {
            continue;
        }
        if trimmed.starts_with("client-certificate-data") {
            match token {
                Some(t) => out.push_str(&format!("    token: {t}\n")),
                // Without any credential kubectl prompts for a password; basic auth is
                // what it then sends, and (as upstream, which has no basic authenticator)
                // the request is anonymous.
                None => out.push_str("    username: nobody\n    password: nothing\n"),
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, out).expect("write kubeconfig");
    path
}

/// A service-account token with `token`'s claims, expiring `exp_in` seconds from now (negative:
/// in the past), signed with the server's own key (`pki/sa.key`).
fn resigned(s: &ServerProcess, token: &str, exp_in: i64) -> String {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let claims = token.split('.').nth(1).expect("claims");
    let mut claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).expect("base64")).expect("json");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        .cast_signed();
    claims["exp"] = serde_json::json!(now + exp_in);
    claims["iat"] = serde_json::json!(now - 7200);
    claims["nbf"] = serde_json::json!(now - 7200);
    let pem = std::fs::read_to_string(s.data_dir.join("pki/sa.key")).expect("sa.key");
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = STANDARD.decode(b64).expect("pem");
    let rng = ring::rand::SystemRandom::new();
    let key = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &der,
        &rng,
    )
    .expect("key");
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = key.sign(&rng, message.as_bytes()).expect("sign");
    format!("{message}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
}

fn run(s: &ServerProcess, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    s.kubectl_as(kubeconfig, args, None).expect("kubectl runs")
}

fn admin(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?} failed: {err}\nlog: {}", s.log());
    out
}

fn token_review(s: &ServerProcess, token: &str) -> String {
    let review = format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {token}\n"
    );
    let (ok, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "-o", "yaml", "--validate=false"],
            Some(&review),
        )
        .expect("kubectl");
    assert!(ok, "{err}");
    out
}

#[test]
fn tokens_service_accounts_token_review_and_anonymous() {
    let d = tempfile::tempdir().expect("tempdir");
    let tokens = d.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,uid-alice,\"devs,ops\"\n").expect("write");
    let s = ServerProcess::start_with(
        &d.path().join("data"),
        &["--token-auth-file", tokens.to_str().unwrap_or_default()],
    )
    .expect("server starts");

    // alice with a static token.
    let alice = token_kubeconfig(&s, d.path(), "alice", Some("alice-token"));
    let (ok, out, err) = run(&s, &alice, &["auth", "whoami"]);
    assert!(ok, "{err}");
    assert!(out.contains("alice") && out.contains("uid-alice"), "{out}");
    assert!(out.contains("[devs ops system:authenticated]"), "{out}");
    // alice holds no roles: RBAC refuses her, by name.
    let (ok, _, err) = run(&s, &alice, &["get", "pods"]);
    assert!(!ok);
    assert!(
        err.contains("User \"alice\" cannot list resource \"pods\""),
        "{err}"
    );

    // A wrong token: 401.
    let wrong = token_kubeconfig(&s, d.path(), "wrong", Some("not-a-token"));
    let (ok, _, err) = run(&s, &wrong, &["get", "pods"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");

    // No credentials: system:anonymous, which RBAC lets read only the public paths.
    let anon = token_kubeconfig(&s, d.path(), "anon", None);
    // Discovery is not public either, so `get pods` fails as upstream's does ("Forbidden:
    // unknown"); the raw list shows upstream's message.
    let (ok, _, err) = run(&s, &anon, &["get", "pods"]);
    assert!(
        !ok && err.contains("Error from server (Forbidden)"),
        "{err}"
    );
    let (ok, _, err) = run(
        &s,
        &anon,
        &["get", "--raw", "/api/v1/namespaces/default/pods"],
    );
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    let (ok, out, err) = run(&s, &anon, &["get", "--raw", "/healthz"]);
    assert!(ok && out.trim() == "ok", "{err}");
    let (ok, _, err) = run(&s, &anon, &["get", "--raw", "/openid/v1/jwks"]);
    assert!(!ok && err.contains("Forbidden"), "{err}");

    // A service account and a token from `kubectl create token`.
    admin(&s, &["create", "serviceaccount", "bot"]);
    let token = admin(&s, &["create", "token", "bot", "--duration", "20m"]);
    let token = token.trim().to_owned();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let bot = token_kubeconfig(&s, d.path(), "bot", Some(&token));
    let (ok, out, err) = run(&s, &bot, &["auth", "whoami"]);
    assert!(ok, "{err}\nlog: {}", s.log());
    assert!(out.contains("system:serviceaccount:default:bot"), "{out}");
    assert!(
        out.contains(
            "[system:serviceaccounts system:serviceaccounts:default system:authenticated]"
        ),
        "{out}"
    );
    assert!(
        out.contains("authentication.kubernetes.io/credential-id"),
        "{out}"
    );
    // Service accounts may read the issuer discovery documents.
    let (ok, out, err) = run(
        &s,
        &bot,
        &["get", "--raw", "/.well-known/openid-configuration"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("\"issuer\":\"https://kubernetes.default.svc.cluster.local\""),
        "{out}"
    );
    let (ok, out, err) = run(&s, &bot, &["get", "--raw", "/openid/v1/jwks"]);
    assert!(ok && out.contains("\"kty\":\"EC\""), "{out}{err}");

    // A token for another audience is not good for the API.
    let other_aud = admin(&s, &["create", "token", "bot", "--audience", "vault"]);
    let other = token_kubeconfig(&s, d.path(), "other-aud", Some(other_aud.trim()));
    let (ok, _, err) = run(&s, &other, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");

    // TokenReview.
    let review = token_review(&s, &token);
    assert!(review.contains("authenticated: true"), "{review}");
    assert!(
        review.contains("username: system:serviceaccount:default:bot"),
        "{review}"
    );
    let review = token_review(&s, "alice-token");
    assert!(
        review.contains("authenticated: true") && review.contains("username: alice"),
        "{review}"
    );
    let review = token_review(&s, "bogus");
    assert!(!review.contains("authenticated: true"), "{review}");
    assert!(review.contains("error:"), "{review}");

    // A forged token: the claims changed, the signature kept.
    let parts: Vec<&str> = token.split('.').collect();
    let forged = format!("{}.{}x.{}", parts[0], parts[1], parts[2]);
    let f = token_kubeconfig(&s, d.path(), "forged", Some(&forged));
    let (ok, _, err) = run(&s, &f, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");

    // The same claims, correctly signed but expired: 401 (and TokenReview says why).
    let expired = resigned(&s, &token, -3600);
    let e = token_kubeconfig(&s, d.path(), "expired", Some(&expired));
    let (ok, _, err) = run(&s, &e, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");
    let review = token_review(&s, &expired);
    assert!(
        review.contains("service account token has expired"),
        "{review}"
    );
    // Signed the same way but not expired: accepted (the expiry was the only fault).
    let fresh = resigned(&s, &token, 600);
    let f = token_kubeconfig(&s, d.path(), "resigned", Some(&fresh));
    let (ok, out, err) = run(&s, &f, &["auth", "whoami"]);
    assert!(
        ok && out.contains("system:serviceaccount:default:bot"),
        "{out}{err}"
    );
    // Discovery lists the reviews and the token subresource, as upstream.
    let (ok, out, err) = run(
        &s,
        &bot,
        &["get", "--raw", "/apis/authentication.k8s.io/v1"],
    );
    assert!(ok && out.contains("\"tokenreviews\""), "{out}{err}");
    let (ok, out, err) = run(&s, &bot, &["get", "--raw", "/api/v1"]);
    assert!(
        ok && out.contains("\"serviceaccounts/token\""),
        "{out}{err}"
    );

    // A token bound to a pod carries the pod in its extra and dies with the pod.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: worker}\nspec:\n  serviceAccountName: bot\n  containers: [{name: c, image: busybox}]\n";
    admin(&s, &["create", "serviceaccount", "other"]);
    let (made, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(pod))
        .expect("kubectl");
    assert!(made, "{err}");
    let (ok, _, err) = s
        .kubectl(&[
            "create",
            "token",
            "other",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "worker",
        ])
        .expect("kubectl");
    assert!(
        !ok && err.contains("cannot bind token for serviceaccount \"other\" to pod running with different serviceaccount name."),
        "{err}"
    );
    let pod_token = admin(
        &s,
        &[
            "create",
            "token",
            "bot",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "worker",
        ],
    );
    let p = token_kubeconfig(&s, d.path(), "pod-bound", Some(pod_token.trim()));
    let (ok, out, err) = run(&s, &p, &["auth", "whoami"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("authentication.kubernetes.io/pod-name") && out.contains("[worker]"),
        "{out}"
    );
    admin(
        &s,
        &["delete", "pod", "worker", "--grace-period=0", "--force"],
    );
    let (ok, _, err) = run(&s, &p, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");
    // The account's unbound token is unaffected.
    let (ok, _, err) = run(&s, &bot, &["auth", "whoami"]);
    assert!(ok, "{err}");
    let (ok, _, err) = s
        .kubectl(&[
            "create",
            "token",
            "bot",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "worker",
        ])
        .expect("kubectl");
    assert!(!ok && err.contains("pods \"worker\" not found"), "{err}");

    // Deleting the ServiceAccount invalidates its tokens.
    admin(&s, &["delete", "serviceaccount", "bot"]);
    let (ok, _, err) = run(&s, &bot, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");
    let review = token_review(&s, &token);
    assert!(!review.contains("authenticated: true"), "{review}");
    // A new account of the same name has another uid: the old token stays refused.
    admin(&s, &["create", "serviceaccount", "bot"]);
    let (ok, _, err) = run(&s, &bot, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");

    // A second server without anonymous auth: no credentials is a 401, and a token signed
    // by the first server's key is refused.
    let d2 = tempfile::tempdir().expect("tempdir");
    let s2 = ServerProcess::start_with(&d2.path().join("data"), &["--anonymous-auth=false"])
        .expect("server starts");
    let anon2 = token_kubeconfig(&s2, d2.path(), "anon", None);
    let (ok, _, err) = run(&s2, &anon2, &["get", "pods"]);
    assert!(
        !ok && err.contains("error: You must be logged in to the server"),
        "{err}"
    );
    let (ok, out, _) = run(&s2, &anon2, &["get", "--raw", "/healthz"]);
    assert!(!ok, "{out}");
    admin(&s2, &["create", "serviceaccount", "bot"]);
    let fresh = admin(&s, &["create", "token", "bot"]);
    let foreign = token_kubeconfig(&s2, d2.path(), "foreign", Some(fresh.trim()));
    let (ok, _, err) = run(&s2, &foreign, &["auth", "whoami"]);
    assert!(!ok && err.contains(UNAUTHORIZED), "{err}");
}
