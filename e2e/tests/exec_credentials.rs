//! kubectl with an exec credential plugin (`users[].user.exec`, client.authentication.k8s.io/v1),
//! as corporate logins (kubelogin, cloud CLIs) work: a tiny script prints an
//! `ExecCredential` whose token the server accepts (a `--token-auth-file` token here; the
//! OIDC variant is in `oidc`). kubectl runs it, sends the token, and the server maps it to
//! the user; a plugin that hands out a token the server does not know gives kubectl's
//! "You must be logged in to the server" (kubectl runs the plugin again after the 401), and
//! a plugin that fails is kubectl's own error — the server is unaffected by either.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use e2e::ServerProcess;
use e2e::cli::ok;
use serde_json::Value;

/// Writes an executable plugin script `name` in `dir` printing an ExecCredential with
/// `$TOKEN` (from the kubeconfig's `env`) and counting its runs in `<name>.runs`.
fn plugin(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho run >> \"$0.runs\"\n{body}\n"),
    )
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

const PRINT_TOKEN: &str = r#"echo "$KUBERNETES_EXEC_INFO" > "$0.info"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}\n' "$TOKEN""#;

/// A kubeconfig whose user is `exec` of `command` with `TOKEN=<token>`.
fn kubeconfig(s: &ServerProcess, dir: &Path, name: &str, command: &Path, token: &str) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: capstan
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {name}
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: {command}
      env:
      - name: TOKEN
        value: "{token}"
      interactiveMode: Never
contexts:
- name: {name}
  context: {{cluster: capstan, user: {name}}}
current-context: {name}
"#,
            server = s.url,
            ca = s.data_dir.join("pki/ca.crt").display(),
            command = command.display(),
        ),
    )
    .expect("kubeconfig");
    path
}

fn runs(plugin: &Path) -> usize {
    std::fs::read_to_string(format!("{}.runs", plugin.display())).map_or(0, |s| s.lines().count())
}

#[test]
fn kubectl_gets_its_token_from_an_exec_credential_plugin() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "plugin-token-123,alice,1001,\"devs,ops\"\n").expect("tokens");
    let s = ServerProcess::start_with(
        &dir.join("data"),
        &["--token-auth-file", tokens.to_str().expect("utf-8")],
    )
    .expect("start");

    let good = plugin(dir, "good-plugin", PRINT_TOKEN);
    let kc = kubeconfig(&s, dir, "alice", &good, "plugin-token-123");
    let (done, out, err) = s
        .kubectl_as(&kc, &["auth", "whoami", "-o", "json"], None)
        .expect("kubectl");
    assert!(done, "{err}");
    let review: Value = serde_json::from_str(&out).expect("SelfSubjectReview");
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], "alice", "{out}");
    assert_eq!(user["uid"], "1001", "{out}");
    let groups: Vec<&str> = user["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(groups, ["devs", "ops", "system:authenticated"], "{out}");
    assert!(runs(&good) >= 1);
    // kubectl told the plugin what it is running under (KUBERNETES_EXEC_INFO).
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.info", good.display())).expect("exec info"),
    )
    .expect("exec info JSON");
    assert_eq!(info["kind"], "ExecCredential", "{info}");
    assert_eq!(
        info["apiVersion"], "client.authentication.k8s.io/v1",
        "{info}"
    );
    assert_eq!(info["spec"]["interactive"], false, "{info}");

    // Authorization follows the user the token maps to.
    let (allowed, _, err) = s
        .kubectl_as(&kc, &["get", "namespaces"], None)
        .expect("kubectl");
    assert!(!allowed, "alice listed namespaces without RBAC");
    assert!(
        err.contains("User \"alice\" cannot list resource \"namespaces\""),
        "{err}"
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "alice-view",
            "--clusterrole=view",
            "--group=devs",
        ],
    );
    let out = s
        .kubectl_as(&kc, &["get", "namespace", "default", "-o", "name"], None)
        .expect("kubectl");
    assert!(out.0 && out.1.trim() == "namespace/default", "{out:?}");

    // A token the server does not know: 401, kubectl asks the plugin again, then gives up.
    let stale = plugin(dir, "stale-plugin", PRINT_TOKEN);
    let kc = kubeconfig(&s, dir, "stale", &stale, "not-a-known-token");
    let (done, _, err) = s.kubectl_as(&kc, &["get", "pods"], None).expect("kubectl");
    assert!(!done);
    assert!(err.contains("You must be logged in to the server"), "{err}");
    assert!(
        runs(&stale) >= 2,
        "kubectl did not re-run the plugin after the 401"
    );

    // A plugin that fails: kubectl's error, the server never sees a request.
    let broken = plugin(dir, "broken-plugin", "echo 'no login session' >&2\nexit 3");
    let kc = kubeconfig(&s, dir, "broken", &broken, "");
    let (done, _, err) = s.kubectl_as(&kc, &["get", "pods"], None).expect("kubectl");
    assert!(!done);
    assert!(
        err.contains("exit status 3") || err.contains("exit code 3"),
        "{err}"
    );

    // The admin is unaffected.
    ok(&s, &["get", "namespaces"]);
}
