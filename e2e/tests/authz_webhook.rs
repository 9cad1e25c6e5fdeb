//! kube-apiserver's authorization modes and its authentication/authorization webhooks with
//! stock kubectl against the real binary: `--authorization-mode=Node,RBAC,Webhook` with a
//! SubjectAccessReview webhook written here (hyper + rustls, serving the cluster's own
//! apiserver certificate, trusted through the cluster CA in the webhook kubeconfig) that
//! allows one user what RBAC does not; its answers cached; the webhook down; a TokenReview
//! webhook authenticating a bearer token; `RBAC,AlwaysAllow`; `AlwaysDeny` alone; the
//! structured `--authorization-config` with several webhooks, `matchConditions` and failure
//! policies; refused flags.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::ServerProcess;
use e2e::webhook_server::{self, Reply, WebhookServer};
use serde_json::{Value, json};

/// The webhook server: every review it received.
struct Webhook {
    port: u16,
    reviews: Arc<Mutex<Vec<Value>>>,
    server: WebhookServer,
}

impl Webhook {
    /// Listens on a free 127.0.0.1 port now; serves TLS with `pki/apiserver.crt` once the
    /// server has written it (loaded at the first connection).
    fn start(pki: &Path) -> Webhook {
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&reviews);
        let server = WebhookServer::start(
            pki.join("apiserver.crt"),
            pki.join("apiserver.key"),
            2,
            move |req| {
                let seen = Arc::clone(&seen);
                async move { answer(req, &seen).await }
            },
        )
        .expect("webhook server");
        Webhook {
            port: server.port,
            reviews,
            server,
        }
    }

    /// Reviews received whose `spec.user` is `user`.
    fn reviews_of(&self, user: &str) -> usize {
        self.reviews
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r["spec"]["user"] == user)
            .count()
    }

    /// Stops serving: the port refuses connections from now on.
    fn stop(&mut self) {
        self.server.stop();
    }
}

/// The webhook's policy. At `/guard`: every SubjectAccessReview is denied. Elsewhere:
/// SubjectAccessReview: `jane` may do anything to configmaps,
/// `mallory` is denied everything, the rest has no opinion. TokenReview: `tom-token` is
/// user `tom` (uid `tom-uid`, group `webhook-users`, an extra), anything else is refused.
fn decide(path: &str, review: &Value) -> Value {
    let spec = &review["spec"];
    match review["kind"].as_str() {
        Some("SubjectAccessReview") if path == "/guard" => {
            json!({"allowed": false, "denied": true, "reason": "guarded namespace"})
        }
        Some("TokenReview") if spec["token"] == "tom-token" => json!({
            "authenticated": true,
            "user": {"username": "tom", "uid": "tom-uid", "groups": ["webhook-users"],
                "extra": {"example.com/team": ["blue"]}},
        }),
        Some("TokenReview") => json!({"authenticated": false, "error": "unknown token"}),
        _ if spec["user"] == "jane" && spec["resourceAttributes"]["resource"] == "configmaps" => {
            json!({"allowed": true, "reason": "jane owns configmaps"})
        }
        _ if spec["user"] == "mallory" => {
            json!({"allowed": false, "denied": true, "reason": "mallory is banned"})
        }
        _ => json!({"allowed": false}),
    }
}

/// One review answered by [`decide`].
async fn answer(req: hyper::Request<hyper::body::Incoming>, seen: &Mutex<Vec<Value>>) -> Reply {
    let path = req.uri().path().to_owned();
    let (_, body) = webhook_server::read(req).await;
    let mut review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let status = decide(&path, &review);
    let out = json!({
        "apiVersion": review["apiVersion"],
        "kind": review["kind"],
        "status": status,
    });
    review["path"] = json!(path);
    seen.lock().expect("lock").push(review);
    webhook_server::json_reply(&out)
}

/// A kubeconfig naming `server` (trusted through `ca`) and, optionally, a bearer token.
fn write_kubeconfig(path: &Path, server: &str, ca: &Path, token: Option<&str>) {
    let user = match token {
        Some(t) => format!("    token: {t}\n"),
        None => "    {}\n".to_owned(),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
        ca.display()
    );
    std::fs::write(path, text).expect("write kubeconfig");
}

/// A kubeconfig with a client certificate for `name` (`capstan kubeconfig`).
fn user(s: &ServerProcess, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    let args = [
        "kubeconfig",
        "--data-dir",
        s.data_dir.to_str().unwrap_or_default(),
        "--user",
        name,
        "--server",
        &s.url,
        "--out",
        path.to_str().unwrap_or_default(),
    ];
    let (made, _, err) = s.capstan(&args).expect("capstan kubeconfig");
    assert!(made, "{err}");
    path
}

/// `kubectl auth can-i` with the admin kubeconfig: the answer's first word.
fn can_i(s: &ServerProcess, args: &[&str]) -> String {
    let mut full = vec!["auth", "can-i"];
    full.extend_from_slice(args);
    let (_, out, err) = s.kubectl(&full).expect("kubectl");
    let answer = out.split_whitespace().next().unwrap_or_default().to_owned();
    assert!(
        answer == "yes" || answer == "no",
        "can-i {args:?}: {out} {err}"
    );
    answer
}

/// The status of a SubjectAccessReview about `user` created by the admin.
fn sar(s: &ServerProcess, user: &str, attributes: &Value) -> Value {
    let mut spec = attributes.clone();
    spec["user"] = json!(user);
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    });
    let (ok, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "-o", "json"],
            Some(&review.to_string()),
        )
        .expect("kubectl");
    assert!(ok, "{err}");
    serde_json::from_str::<Value>(&out).expect("JSON")["status"].clone()
}

/// Runs kubectl as `kubeconfig`: (success, stdout, stderr).
fn as_user(s: &ServerProcess, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    s.kubectl_as(kubeconfig, args, None).expect("kubectl")
}

#[test]
fn webhook_authorizer_and_token_webhook_after_node_and_rbac() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let pki = data.join("pki");
    let mut hook = Webhook::start(&pki);
    let authz_cfg = dir.path().join("authz-webhook.kubeconfig");
    let authn_cfg = dir.path().join("authn-webhook.kubeconfig");
    let base = format!("https://127.0.0.1:{}", hook.port);
    write_kubeconfig(
        &authz_cfg,
        &format!("{base}/authorize"),
        &pki.join("ca.crt"),
        Some("hook-secret"),
    );
    write_kubeconfig(
        &authn_cfg,
        &format!("{base}/authenticate"),
        &pki.join("ca.crt"),
        None,
    );
    let s = ServerProcess::start_with(
        &data,
        &[
            "--authorization-mode=Node,RBAC,Webhook",
            &format!(
                "--authorization-webhook-config-file={}",
                authz_cfg.display()
            ),
            &format!(
                "--authentication-token-webhook-config-file={}",
                authn_cfg.display()
            ),
        ],
    )
    .expect("server starts");

    // `kubectl auth can-i --as` answers through the chain: RBAC gives jane nothing, the
    // webhook configmaps; mallory is denied; bob gets no opinion from anyone.
    assert_eq!(can_i(&s, &["list", "configmaps", "--as=jane"]), "yes");
    assert_eq!(
        can_i(
            &s,
            &["create", "configmaps", "-n", "kube-system", "--as=jane"]
        ),
        "yes"
    );
    assert_eq!(can_i(&s, &["list", "secrets", "--as=jane"]), "no");
    assert_eq!(can_i(&s, &["list", "configmaps", "--as=bob"]), "no");
    assert_eq!(can_i(&s, &["list", "configmaps", "--as=mallory"]), "no");
    // RBAC decides before the webhook is asked: discovery is allowed to everyone.
    let before = hook.reviews_of("mallory");
    assert_eq!(can_i(&s, &["get", "/api", "--as=mallory"]), "yes");
    assert_eq!(hook.reviews_of("mallory"), before);

    // The SubjectAccessReview the webhook saw, as upstream sends it.
    let review = hook
        .reviews
        .lock()
        .expect("lock")
        .iter()
        .find(|r| r["spec"]["user"] == "jane")
        .cloned()
        .expect("a review about jane");
    assert_eq!(review["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(review["kind"], "SubjectAccessReview");
    assert_eq!(review["spec"]["resourceAttributes"]["verb"], "list");
    assert_eq!(
        review["spec"]["resourceAttributes"]["resource"],
        "configmaps"
    );
    assert!(
        review["spec"]["groups"]
            .as_array()
            .expect("groups")
            .contains(&json!("system:authenticated"))
    );

    // A SubjectAccessReview's uid and extra reach the webhook.
    let status = sar(
        &s,
        "jane",
        &json!({"resourceAttributes": {"verb": "watch", "resource": "configmaps"},
            "uid": "jane-uid", "extra": {"example.com/scope": ["x"]}}),
    );
    assert_eq!(status["allowed"], true, "{status}");
    assert_eq!(status["reason"], "jane owns configmaps");
    let forwarded = hook
        .reviews
        .lock()
        .expect("lock")
        .iter()
        .find(|r| r["spec"]["uid"] == "jane-uid")
        .cloned()
        .expect("the review with a uid");
    assert_eq!(
        forwarded["spec"]["extra"]["example.com/scope"],
        json!(["x"])
    );

    // Real requests by jane (a client certificate): configmaps allowed, secrets forbidden
    // with RBAC's text.
    let jane = user(&s, dir.path(), "jane");
    let (listed, _, err) = as_user(&s, &jane, &["get", "configmaps", "-n", "default"]);
    assert!(listed, "{err}");
    let (made, _, err) = as_user(
        &s,
        &jane,
        &[
            "create",
            "configmap",
            "janes",
            "-n",
            "default",
            "--from-literal=a=b",
        ],
    );
    assert!(made, "{err}");
    let (read, _, err) = as_user(&s, &jane, &["get", "secrets", "-n", "default"]);
    assert!(!read);
    assert!(
        err.contains("secrets is forbidden: User \"jane\" cannot list resource \"secrets\""),
        "{err}"
    );
    // The webhook's denial is final.
    let mallory = user(&s, dir.path(), "mallory");
    let (read, _, err) = as_user(&s, &mallory, &["get", "configmaps", "-n", "default"]);
    assert!(!read);
    assert!(err.contains("mallory is banned"), "{err}");

    // Answers are cached: the same question again does not reach the webhook.
    let asked = hook.reviews_of("jane");
    let (listed, _, err) = as_user(&s, &jane, &["get", "configmaps", "-n", "default"]);
    assert!(listed, "{err}");
    assert_eq!(hook.reviews_of("jane"), asked);

    // The webhook cannot list rules: `can-i --list` says the list is incomplete.
    let (_, out, err) = as_user(&s, &jane, &["auth", "can-i", "--list", "-n", "default"]);
    assert!(
        format!("{out}{err}").contains("webhook authorizer does not support user rule resolution"),
        "{out}{err}"
    );

    // A bearer token the token webhook knows authenticates as its user; others are 401.
    let tom = dir.path().join("tom.kubeconfig");
    write_kubeconfig(&tom, &s.url, &pki.join("ca.crt"), Some("tom-token"));
    let (ok, out, err) = as_user(&s, &tom, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{err}");
    let who: Value = serde_json::from_str(&out).expect("JSON");
    let info = &who["status"]["userInfo"];
    assert_eq!(info["username"], "tom");
    assert_eq!(info["uid"], "tom-uid");
    assert_eq!(info["extra"]["example.com/team"], json!(["blue"]));
    let groups = info["groups"].as_array().expect("groups");
    assert!(groups.contains(&json!("webhook-users")), "{groups:?}");
    assert!(
        groups.contains(&json!("system:authenticated")),
        "{groups:?}"
    );
    let stranger = dir.path().join("stranger.kubeconfig");
    write_kubeconfig(&stranger, &s.url, &pki.join("ca.crt"), Some("nope"));
    let (ok, _, err) = as_user(&s, &stranger, &["get", "configmaps"]);
    assert!(!ok);
    assert!(err.contains("Unauthorized"), "{err}");
    let token_review = hook
        .reviews
        .lock()
        .expect("lock")
        .iter()
        .find(|r| r["kind"] == "TokenReview")
        .cloned()
        .expect("a token review");
    assert_eq!(token_review["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(token_review["spec"]["token"], "tom-token");

    // The webhook gone: a question not cached fails (no opinion with an error), cached
    // answers and RBAC still decide.
    hook.stop();
    let carol = user(&s, dir.path(), "carol");
    let (read, _, err) = as_user(&s, &carol, &["get", "configmaps", "-n", "default"]);
    assert!(!read);
    assert!(err.contains("connection refused"), "{err}");
    let (listed, _, err) = as_user(&s, &jane, &["get", "configmaps", "-n", "default"]);
    assert!(listed, "{err}");
    let (ok, _, err) = s
        .kubectl(&["get", "configmaps", "-n", "default"])
        .expect("kubectl");
    assert!(ok, "{err}");
    // An access review about carol reports the webhook's error.
    let status = sar(
        &s,
        "carol",
        &json!({"resourceAttributes": {"verb": "get", "resource": "configmaps"}}),
    );
    assert_eq!(status["allowed"], false);
    assert!(
        status["evaluationError"]
            .as_str()
            .unwrap_or_default()
            .contains("connection refused"),
        "{status}"
    );
}

#[test]
fn always_allow_after_rbac_allows_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_with(
        &dir.path().join("data"),
        &["--authorization-mode=RBAC,AlwaysAllow"],
    )
    .expect("server starts");
    assert_eq!(can_i(&s, &["delete", "secrets", "--as=bob"]), "yes");
    let bob = user(&s, dir.path(), "bob");
    let (ok, _, err) = as_user(&s, &bob, &["get", "secrets", "-n", "kube-system"]);
    assert!(ok, "{err}");
    let (ok, _, err) = as_user(&s, &bob, &["create", "namespace", "bobs"]);
    assert!(ok, "{err}");
}

#[test]
fn always_deny_alone_denies_all_but_the_superuser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_with(
        &dir.path().join("data"),
        &["--authorization-mode=AlwaysDeny"],
    )
    .expect("server starts");
    // `--as=bob` would run discovery as bob: the admin asks with a SubjectAccessReview.
    let status = sar(
        &s,
        "bob",
        &json!({"resourceAttributes": {"verb": "get", "resource": "pods"}}),
    );
    assert_eq!(status["allowed"], false);
    assert_eq!(status["reason"], "Everything is forbidden.");
    let status = sar(
        &s,
        "bob",
        &json!({"nonResourceAttributes": {"verb": "get", "path": "/api"}}),
    );
    assert_eq!(status["allowed"], false);
    let bob = user(&s, dir.path(), "bob");
    let (ok, _, err) = as_user(&s, &bob, &["get", "pods", "-n", "default"]);
    assert!(!ok);
    assert!(
        err.contains("User \"bob\" cannot list resource \"pods\""),
        "{err}"
    );
    // system:masters is allowed before any mode.
    let (ok, _, err) = s
        .kubectl(&["get", "pods", "-n", "default"])
        .expect("kubectl");
    assert!(ok, "{err}");
}

#[test]
fn refused_authorization_flags_stop_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad-authz.yaml");
    std::fs::write(
        &bad,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: RBAC\n  name: a\n- type: RBAC\n  name: b\n",
    )
    .expect("write");
    let authz_config = format!("--authorization-config={}", bad.display());
    for (i, (flags, message)) in [
        (
            vec!["--authorization-mode=RBAC,Bogus"],
            "authorization-mode \"Bogus\" is not a valid mode",
        ),
        (
            vec!["--authorization-mode=RBAC,Webhook"],
            "authorization-mode Webhook's authorization config file not passed",
        ),
        (
            vec!["--authorization-mode=RBAC,RBAC"],
            "has mode specified more than once",
        ),
        (
            vec!["--authorization-mode=RBAC", "--authorization-config=/nonexistent"],
            "--authorization-config can not be specified when --authorization-mode or --authorization-webhook-* flags are defined",
        ),
        (
            vec![authz_config.as_str()],
            "authorizers[1].type: Duplicate value: \"RBAC\"",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = ServerProcess::spawn(
            &dir.path().join(format!("data{i}")),
            e2e::free_port(),
            &flags,
        )
        .expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(!s.is_running(), "{flags:?} was accepted");
        assert!(s.log().contains(message), "{flags:?}: {}", s.log());
    }
}

#[test]
fn authorization_config_chains_webhooks_with_match_conditions_and_failure_policies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let pki = data.join("pki");
    let hook = Webhook::start(&pki);
    let base = format!("https://127.0.0.1:{}", hook.port);
    let guard_cfg = dir.path().join("guard.kubeconfig");
    let fallback_cfg = dir.path().join("fallback.kubeconfig");
    let down_cfg = dir.path().join("down.kubeconfig");
    write_kubeconfig(
        &guard_cfg,
        &format!("{base}/guard"),
        &pki.join("ca.crt"),
        None,
    );
    write_kubeconfig(
        &fallback_cfg,
        &format!("{base}/authorize"),
        &pki.join("ca.crt"),
        None,
    );
    let closed = e2e::free_port();
    write_kubeconfig(
        &down_cfg,
        &format!("https://127.0.0.1:{closed}/authorize"),
        &pki.join("ca.crt"),
        None,
    );
    // The guard denies everything in namespace `guarded` (and is asked nothing else); Node
    // and RBAC; a webhook that is down, asked only about dave, denies on failure; the
    // fallback webhook (jane's configmaps) gives no opinion on failure.
    let config = format!(
        r#"apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: guard.example.com
  webhook:
    timeout: 3s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: Deny
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: {}
    matchConditions:
    - expression: has(request.resourceAttributes)
    - expression: request.resourceAttributes.namespace == 'guarded'
- type: Node
  name: node
- type: RBAC
  name: rbac
- type: Webhook
  name: down
  webhook:
    timeout: 2s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: Deny
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: {}
    matchConditions:
    - expression: request.user == 'dave'
- type: Webhook
  name: fallback
  webhook:
    timeout: 3s
    subjectAccessReviewVersion: v1beta1
    failurePolicy: NoOpinion
    authorizedTTL: 1m
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: {}
"#,
        guard_cfg.display(),
        down_cfg.display(),
        fallback_cfg.display()
    );
    let config_path = dir.path().join("authz.yaml");
    std::fs::write(&config_path, config).expect("write config");
    let s = ServerProcess::start_with(
        &data,
        &[&format!("--authorization-config={}", config_path.display())],
    )
    .expect("server starts");

    assert_eq!(
        can_i(&s, &["list", "configmaps", "-n", "default", "--as=jane"]),
        "yes"
    );
    assert_eq!(
        can_i(&s, &["list", "configmaps", "-n", "guarded", "--as=jane"]),
        "no"
    );
    assert_eq!(
        can_i(&s, &["list", "secrets", "-n", "default", "--as=jane"]),
        "no"
    );
    let status = sar(
        &s,
        "jane",
        &json!({"resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "guarded"}}),
    );
    assert_eq!(status["denied"], true, "{status}");
    assert_eq!(status["reason"], "guarded namespace");
    // The guard was asked about namespace `guarded` only; the fallback speaks v1beta1.
    let reviews = hook.reviews.lock().expect("lock").clone();
    let guarded: Vec<&Value> = reviews.iter().filter(|r| r["path"] == "/guard").collect();
    assert!(!guarded.is_empty());
    assert!(
        guarded
            .iter()
            .all(|r| r["spec"]["resourceAttributes"]["namespace"] == "guarded"),
        "{guarded:?}"
    );
    let fallback = reviews
        .iter()
        .find(|r| r["path"] == "/authorize")
        .expect("a fallback review");
    assert_eq!(fallback["apiVersion"], "authorization.k8s.io/v1beta1");
    assert!(fallback["spec"]["group"].is_array(), "{fallback}");

    // A real request by jane in each namespace; the superuser is never asked about.
    let jane = user(&s, dir.path(), "jane");
    let (listed, _, err) = as_user(&s, &jane, &["get", "configmaps", "-n", "default"]);
    assert!(listed, "{err}");
    let (read, _, err) = as_user(&s, &jane, &["get", "configmaps", "-n", "guarded"]);
    assert!(!read);
    assert!(err.contains("guarded namespace"), "{err}");
    let (ok, _, err) = s
        .kubectl(&["get", "configmaps", "-n", "guarded"])
        .expect("kubectl");
    assert!(ok, "{err}");

    // The webhook that is down denies dave (failurePolicy: Deny) with its error; others
    // never reach it.
    let status = sar(
        &s,
        "dave",
        &json!({"resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "default"}}),
    );
    assert_eq!(status["allowed"], false, "{status}");
    assert_eq!(status["denied"], true, "{status}");
    assert!(
        status["evaluationError"]
            .as_str()
            .unwrap_or_default()
            .contains("connection refused"),
        "{status}"
    );
    let status = sar(
        &s,
        "erin",
        &json!({"resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "default"}}),
    );
    assert_eq!(status["allowed"], false, "{status}");
    assert!(status.get("evaluationError").is_none(), "{status}");
}
