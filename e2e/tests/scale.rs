//! The `scale` subresource with every patch type: `kubectl scale`, `kubectl patch
//! --subresource=scale` with `--type=merge|json|strategic` (each applied to the autoscaling/v1
//! Scale as upstream does: JSON patch `test` failures, strategic-merge directives), and
//! server-side apply of a Scale (kube-rs' `patch_scale` with `Patch::Apply`; kubectl has no
//! way to send one), whose managedFields land on the parent Deployment with
//! `subresource: scale`, conflicting with the manager that owns `spec.replicas`.

use e2e::ServerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    out
}

fn fails(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(!ok, "kubectl {args:?} should fail: {out}");
    err
}

fn deployment(s: &ServerProcess) -> Value {
    serde_json::from_str(&ok(
        s,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    ))
    .expect("json")
}

fn replicas(s: &ServerProcess) -> i64 {
    deployment(s)["spec"]["replicas"].as_i64().unwrap_or(-1)
}

/// (manager, operation, subresource, apiVersion) of the managedFields entries owning
/// `spec.replicas`.
fn replicas_owners(d: &Value) -> Vec<(String, String, String, String)> {
    d["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter(|e| !e["fieldsV1"]["f:spec"]["f:replicas"].is_null())
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (
                s("manager"),
                s("operation"),
                s("subresource"),
                s("apiVersion"),
            )
        })
        .collect()
}

fn owner(m: &str, op: &str, sub: &str) -> (String, String, String, String) {
    (m.into(), op.into(), sub.into(), "apps/v1".into())
}

fn scale_patch(s: &ServerProcess, kind: &str, patch: &str) -> (bool, String, String) {
    s.kubectl(&[
        "patch",
        "deploy",
        "web",
        "--subresource=scale",
        &format!("--type={kind}"),
        "-p",
        patch,
    ])
    .expect("kubectl runs")
}

#[test]
fn kubectl_scale_and_each_patch_type_through_the_scale_subresource() {
    let (_d, s) = server();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=1",
        ],
    );

    let out = ok(&s, &["scale", "deploy", "web", "--replicas=3"]);
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    assert_eq!(replicas(&s), 3);
    // `--current-replicas` is a precondition kubectl checks against the Scale it reads.
    let err = fails(
        &s,
        &[
            "scale",
            "deploy",
            "web",
            "--current-replicas=2",
            "--replicas=5",
        ],
    );
    assert!(err.contains("Expected replicas to be 2, was 3"), "{err}");
    assert_eq!(
        replicas_owners(&deployment(&s)),
        vec![owner("kubectl", "Update", "scale")]
    );

    let (done, out, err) = scale_patch(&s, "merge", r#"{"spec":{"replicas":4}}"#);
    assert!(
        done && out.contains("scale.autoscaling/web patched"),
        "{err}"
    );
    assert_eq!(replicas(&s), 4);

    let (done, _, err) = scale_patch(
        &s,
        "json",
        r#"[{"op":"test","path":"/spec/replicas","value":4},{"op":"replace","path":"/spec/replicas","value":5}]"#,
    );
    assert!(done, "{err}");
    assert_eq!(replicas(&s), 5);
    // A failing `test` changes nothing (upstream's 422 wording).
    let (done, _, err) = scale_patch(
        &s,
        "json",
        r#"[{"op":"test","path":"/spec/replicas","value":9},{"op":"replace","path":"/spec/replicas","value":7}]"#,
    );
    assert!(
        !done && err.contains("testing value /spec/replicas failed"),
        "{err}"
    );
    // A merge patch as a JSON patch document is refused as upstream decodes it.
    let (done, _, err) = scale_patch(&s, "json", r#"{"spec":{"replicas":7}}"#);
    assert!(!done && err.contains("cannot unmarshal object"), "{err}");
    assert_eq!(replicas(&s), 5);

    let (done, _, err) = scale_patch(&s, "strategic", r#"{"spec":{"replicas":6}}"#);
    assert!(done, "{err}");
    assert_eq!(replicas(&s), 6);
    // Strategic merge directives work on the Scale: `$patch: delete` drops its spec, so the
    // workload goes to zero replicas (a merge patch would keep a `$patch` key and change
    // nothing); a bad directive is a 400.
    let (done, _, err) = scale_patch(&s, "strategic", r#"{"spec":{"$patch":"bogus"}}"#);
    assert!(!done, "{err}");
    assert_eq!(replicas(&s), 6);
    let (done, _, err) = scale_patch(&s, "strategic", r#"{"spec":{"$patch":"delete"}}"#);
    assert!(done, "{err}");
    assert_eq!(replicas(&s), 0);

    let (done, _, err) = scale_patch(&s, "merge", r#"{"spec":{"replicas":-1}}"#);
    assert!(
        !done
            && err.contains(
                "The Scale \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
            ),
        "{err}"
    );
    assert_eq!(
        replicas_owners(&deployment(&s)),
        vec![owner("kubectl-patch", "Update", "scale")]
    );
}

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    Client::try_from(config).expect("kube client")
}

fn scale(replicas: i64) -> Value {
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_of_a_scale_owns_replicas_on_the_parent() {
    let (_d, s) = server();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=1",
        ],
    );
    ok(&s, &["scale", "deploy", "web", "--replicas=3"]);
    let api: Api<Deployment> = Api::namespaced(client(&s).await, "default");

    // `kubectl` (through the scale subresource) owns spec.replicas: a different value
    // conflicts, named as the Scale sees that entry.
    let err = api
        .patch_scale("web", &PatchParams::apply("hpa"), &Patch::Apply(scale(2)))
        .await
        .expect_err("conflict");
    let text = err.to_string();
    assert!(
        text.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl\" with subresource \"scale\" using autoscaling/v1: .spec.replicas"
        ),
        "{text}"
    );
    assert_eq!(replicas(&s), 3);

    // Forced, the applier takes the field; its entry is on the parent, at the parent's
    // apiVersion, with `subresource: scale`.
    let applied = api
        .patch_scale(
            "web",
            &PatchParams::apply("hpa").force(),
            &Patch::Apply(scale(2)),
        )
        .await
        .expect("forced apply");
    assert_eq!(applied.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(replicas(&s), 2);
    assert_eq!(
        replicas_owners(&deployment(&s)),
        vec![owner("hpa", "Apply", "scale")]
    );

    // The owner applies again without force; an update of the Deployment by another manager
    // then takes the field from it.
    api.patch_scale("web", &PatchParams::apply("hpa"), &Patch::Apply(scale(5)))
        .await
        .expect("re-apply by the owner");
    assert_eq!(replicas(&s), 5);
    ok(
        &s,
        &["patch", "deploy", "web", "-p", r#"{"spec":{"replicas":1}}"#],
    );
    assert_eq!(replicas(&s), 1);
    assert_eq!(
        replicas_owners(&deployment(&s)),
        vec![owner("kubectl-patch", "Update", "")]
    );

    // Apply bodies must be Scales and carry a field manager.
    let wrong = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
    let err = api
        .patch_scale("web", &PatchParams::apply("hpa"), &Patch::Apply(wrong))
        .await
        .expect_err("wrong kind");
    assert!(err.to_string().contains("Kind=Deployment"), "{err}");
}
