//! Auditing with `--audit-policy-file` and `--audit-log-path`: stock kubectl's requests
//! become `audit.k8s.io/v1` Event JSON lines as kube-apiserver writes them — one per stage,
//! the level's bodies, the object reference, the user (and impersonated user), the response
//! status, the authorization annotations, and the `Audit-Id` header kubectl sees.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::ServerProcess;
use serde_json::Value;

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*", "/api", "/apis*"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Request
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: apps
  omitStages: ["RequestReceived"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
- level: Metadata
  omitStages: ["RequestReceived"]
"#;

fn server(dir: &Path) -> ServerProcess {
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("write policy");
    let log = dir.join("logs/audit.log");
    ServerProcess::start_with(
        &dir.join("data"),
        &[
            "--audit-policy-file",
            policy.to_str().unwrap_or_default(),
            "--audit-log-path",
            log.to_str().unwrap_or_default(),
        ],
    )
    .expect("server starts")
}

fn ok(s: &ServerProcess, args: &[&str]) -> (String, String) {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    (out, err)
}

fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("logs/audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Polls the log (written by a background writer) until `pred` finds its events.
fn wait_for(dir: &Path, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = events(dir);
        if pred(&all) {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "no audit events for {what}; log:\n{}",
            all.iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn find<'a>(events: &'a [Value], stage: &str, verb: &str, resource: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| {
            e["stage"] == stage && e["verb"] == verb && e["objectRef"]["resource"] == resource
        })
        .collect()
}

fn one<'a>(events: &'a [Value], stage: &str, verb: &str, resource: &str) -> &'a Value {
    let found = find(events, stage, verb, resource);
    assert_eq!(found.len(), 1, "{stage} {verb} {resource}: {found:?}");
    found[0]
}

#[test]
fn kubectl_requests_are_audited_as_the_policy_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let s = server(d);

    // RequestResponse: both stages, request and response bodies.
    let (_, trace) = ok(
        &s,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
            "-v=8",
        ],
    );
    let all = wait_for(d, "the configmap create", |e| {
        !find(e, "ResponseComplete", "create", "configmaps").is_empty()
    });
    for e in &all {
        assert_eq!(
            (&e["kind"], &e["apiVersion"]),
            (&"Event".into(), &"audit.k8s.io/v1".into())
        );
        assert!(!e["auditID"].as_str().unwrap_or("").is_empty(), "{e}");
    }
    let done = one(&all, "ResponseComplete", "create", "configmaps");
    let received = one(&all, "RequestReceived", "create", "configmaps");
    assert_eq!(done["auditID"], received["auditID"]);
    assert_eq!(done["level"], "RequestResponse");
    assert_eq!(done["user"]["username"], "kubernetes-admin");
    assert!(
        done["user"]["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&"system:masters".into())),
        "{done}"
    );
    assert_eq!(done["sourceIPs"], serde_json::json!(["127.0.0.1"]));
    assert!(
        done["userAgent"]
            .as_str()
            .unwrap_or("")
            .starts_with("kubectl/"),
        "{done}"
    );
    assert_eq!(done["objectRef"]["namespace"], "default");
    assert_eq!(done["objectRef"]["name"], "settings"); // from the body, as upstream
    assert_eq!(done["objectRef"]["apiVersion"], "v1");
    assert_eq!(done["responseStatus"]["code"], 201);
    assert_eq!(done["requestObject"]["data"]["mode"], "fast");
    assert!(
        !done["responseObject"]["metadata"]["uid"].is_null(),
        "{done}"
    );
    assert_eq!(
        done["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(
        done["requestURI"]
            .as_str()
            .unwrap_or("")
            .starts_with("/api/v1/namespaces/default/configmaps?")
    );
    // The Audit-Id header kubectl saw names this event.
    let id = done["auditID"].as_str().unwrap_or("");
    assert!(
        trace.contains(&format!("Audit-Id: {id}")),
        "{id} not in:\n{trace}"
    );

    // Request level without RequestReceived: the request body only.
    ok(&s, &["create", "deployment", "web", "--image=nginx"]);
    ok(&s, &["scale", "deployment", "web", "--replicas=2"]);
    let all = wait_for(d, "the deployment writes", |e| {
        !find(e, "ResponseComplete", "patch", "deployments").is_empty()
    });
    let create = one(&all, "ResponseComplete", "create", "deployments");
    assert_eq!(create["level"], "Request");
    assert_eq!(create["objectRef"]["apiGroup"], "apps");
    assert_eq!(create["requestObject"]["kind"], "Deployment");
    assert!(create.get("responseObject").is_none(), "{create}");
    assert!(find(&all, "RequestReceived", "create", "deployments").is_empty());
    let scale = one(&all, "ResponseComplete", "patch", "deployments");
    assert_eq!(scale["objectRef"]["subresource"], "scale");
    assert_eq!(scale["objectRef"]["name"], "web");
    assert_eq!(scale["requestObject"]["spec"]["replicas"], 2);

    // Metadata: a secret's data never reaches the log.
    ok(
        &s,
        &[
            "create",
            "secret",
            "generic",
            "pw",
            "--from-literal=password=hunter2-xyzzy",
        ],
    );
    let all = wait_for(d, "the secret create", |e| {
        !find(e, "ResponseComplete", "create", "secrets").is_empty()
    });
    let secret = one(&all, "ResponseComplete", "create", "secrets");
    assert_eq!(secret["level"], "Metadata");
    assert_eq!(secret["objectRef"]["name"], "pw");
    assert!(secret.get("requestObject").is_none() && secret.get("responseObject").is_none());
    let raw = std::fs::read_to_string(d.join("logs/audit.log")).unwrap_or_default();
    assert!(
        !raw.contains("hunter2") && !raw.contains("aHVudGVyMi14eXp6eQ"),
        "secret leaked"
    );

    // A refused impersonated request: the impersonated user and the forbid decision.
    let (refused, _, err) = s
        .kubectl(&["get", "pods", "--as=bob"])
        .expect("kubectl runs");
    assert!(!refused && err.contains("forbidden"), "{err}");
    let all = wait_for(d, "the forbidden list", |e| {
        !find(e, "ResponseComplete", "list", "pods").is_empty()
    });
    let forbidden = one(&all, "ResponseComplete", "list", "pods");
    assert_eq!(forbidden["impersonatedUser"]["username"], "bob");
    assert_eq!(forbidden["user"]["username"], "kubernetes-admin");
    assert_eq!(forbidden["responseStatus"]["code"], 403);
    assert_eq!(forbidden["responseStatus"]["reason"], "Forbidden");
    assert_eq!(
        forbidden["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );

    // A watch: ResponseStarted when it starts, ResponseComplete when it ends.
    let (_, _) = ok(
        &s,
        &["get", "configmaps", "--watch", "--request-timeout=2s"],
    );
    let all = wait_for(d, "the watch", |e| {
        !find(e, "ResponseComplete", "watch", "configmaps").is_empty()
    });
    let started = one(&all, "ResponseStarted", "watch", "configmaps");
    let ended = one(&all, "ResponseComplete", "watch", "configmaps");
    assert_eq!(started["auditID"], ended["auditID"]);
    assert_eq!(started["responseStatus"]["code"], 200);

    // Failed authentication: no user, upstream's message, stage ResponseStarted.
    let bad = d.join("bad.kubeconfig");
    std::fs::write(
        &bad,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{}', insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: not-a-token}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n",
            s.url
        ),
    )
    .expect("write kubeconfig");
    let (denied, _, err) = s
        .kubectl_as(&bad, &["get", "namespaces"], None)
        .expect("kubectl runs");
    assert!(!denied && err.contains("Unauthorized"), "{err}");
    let all = wait_for(d, "the failed authentication", |e| {
        e.iter().any(|e| e["responseStatus"]["code"] == 401)
    });
    let unauthorized = all
        .iter()
        .find(|e| e["responseStatus"]["code"] == 401)
        .expect("401 event");
    assert_eq!(unauthorized["stage"], "ResponseStarted");
    assert_eq!(unauthorized["user"], serde_json::json!({}));
    assert_eq!(
        unauthorized["responseStatus"]["message"],
        "Authentication failed, attempted: bearer"
    );

    // Non-resource requests the policy drops leave nothing.
    assert!(all.iter().all(|e| e["requestURI"] != "/version"));
}
