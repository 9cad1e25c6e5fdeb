//! CustomResourceDefinitions with stock kubectl against the real binary: a CRD is
//! established and served within a second, its objects go through the same generic paths as
//! built-in ones (CRUD, watch, tables, shortNames, categories, RBAC, namespace deletion, the
//! garbage collector), several versions share one storage version, and deleting the CRD
//! deletes its objects first.

use std::time::{Duration, Instant};

use e2e::ServerProcess;
use e2e::cli::{apply, cluster, json, ok, wait_for};
use serde_json::Value;

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    selectableFields:
    - jsonPath: .spec.color
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
              color:
                type: string
              replicas:
                type: integer
          status:
            type: object
            properties:
              phase:
                type: string
              replicas:
                type: integer
              selector:
                type: string
  - name: v1beta1
    served: true
    storage: false
    deprecated: true
    deprecationWarning: "example.com/v1beta1 Widget is deprecated; use example.com/v1"

    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const GADGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Cluster
  names:
    plural: gadgets
    kind: Gadget
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

fn bare() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn established(s: &ServerProcess, name: &str) {
    ok(
        s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            &format!("crd/{name}"),
        ],
    );
}

#[test]
fn a_crd_is_established_and_its_objects_are_served_like_built_in_ones() {
    let (_dir, s) = bare();
    let start = Instant::now();
    apply(&s, WIDGETS);
    established(&s, "widgets.example.com");
    let crd = json(&s, &["get", "crd", "widgets.example.com", "-o", "json"]);
    let conditions = crd["status"]["conditions"].as_array().expect("conditions");
    for (t, reason) in [
        ("NamesAccepted", "NoConflicts"),
        ("Established", "InitialNamesAccepted"),
    ] {
        let c = conditions
            .iter()
            .find(|c| c["type"] == t)
            .unwrap_or_else(|| panic!("no {t} in {crd}"));
        assert_eq!(c["status"], "True", "{c}");
        assert_eq!(c["reason"], reason, "{c}");
    }
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");

    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n  color: red\n",
    );
    let elapsed = start.elapsed();
    println!("CRD apply → Established → first custom resource applied: {elapsed:?}");

    // Names: plural, singular, short name, fully qualified; `kubectl get all` (category).
    for name in [
        "widgets",
        "widget",
        "wd",
        "widgets.example.com",
        "widgets.v1.example.com",
    ] {
        let out = ok(&s, &["get", name]);
        assert!(out.contains("w1"), "{name}: {out}");
        assert!(out.starts_with("NAME"), "{name}: {out}");
    }
    let all = ok(&s, &["get", "all"]);
    assert!(all.contains("widget.example.com/w1"), "{all}");

    // Reads and writes through the generic path.
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(w["spec"]["size"], 3);
    assert_eq!(w["metadata"]["generation"], 1);
    assert!(!w["metadata"]["uid"].as_str().unwrap_or_default().is_empty());
    ok(
        &s,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":5}}"#,
        ],
    );
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(w["spec"]["size"], 5);
    assert_eq!(w["metadata"]["generation"], 2);
    // Labels only: generation stays.
    ok(&s, &["label", "widget", "w1", "tier=gold"]);
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(w["metadata"]["generation"], 2);
    assert_eq!(
        ok(&s, &["get", "wd", "-l", "tier=gold", "-o", "name"]).trim(),
        "widget.example.com/w1"
    );

    // The status subresource: the main resource ignores status, the subresource writes it.
    ok(
        &s,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Ignored"}}"#,
        ],
    );
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert!(w["status"].is_null(), "{w}");
    ok(
        &s,
        &[
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Ready"}}"#,
        ],
    );
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(w["status"]["phase"], "Ready");
    assert_eq!(w["metadata"]["generation"], 2);

    // A second served version over the same storage: apiVersion rewritten (strategy None).
    let beta = json(
        &s,
        &["get", "widgets.v1beta1.example.com", "w1", "-o", "json"],
    );
    assert_eq!(beta["apiVersion"], "example.com/v1beta1");
    assert_eq!(beta["spec"]["size"], 5);
    let raw = ok(
        &s,
        &[
            "get",
            "--raw",
            "/apis/example.com/v1beta1/namespaces/default/widgets/w1",
        ],
    );
    let raw: Value = serde_json::from_str(&raw).expect("json");
    assert_eq!(raw["apiVersion"], "example.com/v1beta1");

    // kubectl diff (a server-side dry run) and kubectl edit (a merge patch).
    let changed = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 6\n  color: red\n";
    let (same, diff, _) = s
        .kubectl_as(&s.kubeconfig, &["diff", "-f", "-"], Some(changed))
        .expect("kubectl runs");
    assert!(!same, "kubectl diff found no difference");
    assert!(
        diff.contains("-  size: 5") && diff.contains("+  size: 6"),
        "{diff}"
    );
    let (edited, _, err) = s
        .kubectl_env(
            &[("KUBE_EDITOR", "sed -i 's/size: 5/size: 6/'")],
            &["edit", "widget", "w1"],
        )
        .expect("kubectl runs");
    assert!(edited, "{err}");
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(w["spec"]["size"], 6);
    ok(
        &s,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":5}}"#,
        ],
    );

    // A deprecated version warns.
    let (_, _, err) = s
        .kubectl(&["get", "widgets.v1beta1.example.com", "w1"])
        .expect("kubectl runs");
    assert!(
        err.contains("Warning: example.com/v1beta1 Widget is deprecated; use example.com/v1"),
        "{err}"
    );

    // The scale subresource at the CRD's paths.
    ok(&s, &["scale", "widget", "w1", "--replicas=3"]);
    let w = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(w["spec"]["replicas"], 3);
    let scale = ok(
        &s,
        &[
            "get",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets/w1/scale",
        ],
    );
    let scale: Value = serde_json::from_str(&scale).expect("json");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["replicas"], 0);

    // selectableFields: field selectors on spec.color.
    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  color: blue\n",
    );
    let red = ok(
        &s,
        &[
            "get",
            "widgets",
            "--field-selector=spec.color=red",
            "-o",
            "name",
        ],
    );
    assert_eq!(red.trim(), "widget.example.com/w1");
    let (refused, _, err) = s
        .kubectl(&["get", "widgets", "--field-selector=spec.size=5"])
        .expect("kubectl runs");
    assert!(!refused);
    assert!(err.contains("field label not supported"), "{err}");
    ok(&s, &["delete", "widget", "w2"]);

    // Strategic merge patch is not for custom resources (415, as upstream).
    let (patched, _, err) = s
        .kubectl(&[
            "patch",
            "widget",
            "w1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"size":1}}"#,
        ])
        .expect("kubectl runs");
    assert!(!patched);
    assert!(
        err.contains("415")
            || err.contains("UnsupportedMediaType")
            || err.contains("not supported"),
        "{err}"
    );

    // Re-applying a changed CRD (kubectl sends a strategic merge patch for the CRD itself).
    apply(
        &s,
        &WIDGETS.replace("shortNames: [wd]", "shortNames: [wd, wdg]"),
    );
    wait_for(&s, 10, "the new short name", || {
        s.kubectl(&["get", "wdg", "w1"])
            .expect("kubectl")
            .0
            .then_some(())
    });

    // Discovery lists it; a cluster-scoped CRD works alongside.
    let resources = ok(&s, &["api-resources", "--api-group=example.com"]);
    assert!(
        resources.contains("widgets") && resources.contains("wd"),
        "{resources}"
    );
    apply(&s, GADGETS);
    established(&s, "gadgets.example.com");
    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g1\nanything:\n  goes: here\n",
    );
    let g = json(&s, &["get", "gadget", "g1", "-o", "json"]);
    assert_eq!(g["anything"]["goes"], "here");
    assert!(g["metadata"]["namespace"].is_null());

    // RBAC on custom resources, as on built-in ones.
    let (_, can, _) = s
        .kubectl(&[
            "auth",
            "can-i",
            "create",
            "widgets.example.com",
            "--as=nobody",
        ])
        .expect("kubectl runs");
    assert_eq!(can.trim(), "no");
    apply(
        &s,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: widget-maker\nrules:\n- apiGroups: [example.com]\n  resources: [widgets]\n  verbs: [create, get, list]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: widget-maker\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: widget-maker\nsubjects:\n- kind: User\n  name: nobody\n",
    );
    wait_for(&s, 10, "the role to apply", || {
        let (_, can, _) = s
            .kubectl(&[
                "auth",
                "can-i",
                "create",
                "widgets.example.com",
                "--as=nobody",
            ])
            .expect("kubectl runs");
        (can.trim() == "yes").then_some(())
    });

    // Deleting the CRD deletes its objects first, then it goes; the resource is no longer
    // served.
    ok(
        &s,
        &["delete", "crd", "widgets.example.com", "--timeout=30s"],
    );
    let (found, _, _) = s
        .kubectl(&["get", "crd", "widgets.example.com"])
        .expect("kubectl runs");
    assert!(!found);
    wait_for(&s, 10, "widgets to leave discovery", || {
        let out = ok(&s, &["api-resources", "--api-group=example.com"]);
        (!out.contains("widgets")).then_some(())
    });
    let raw = s
        .kubectl(&[
            "get",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets",
        ])
        .expect("kubectl runs");
    assert!(!raw.0, "{raw:?}");
    // Recreated, the CRD starts empty.
    apply(&s, WIDGETS);
    established(&s, "widgets.example.com");
    wait_for(&s, 10, "widgets served again", || {
        let (found, out, _) = s
            .kubectl(&["get", "widgets", "-o", "json"])
            .expect("kubectl runs");
        let list: Value = serde_json::from_str(&out).ok()?;
        (found && list["items"].as_array().is_some_and(Vec::is_empty)).then_some(())
    });
}

#[test]
fn watches_of_custom_resources_see_every_change() {
    let (_dir, s) = bare();
    apply(&s, WIDGETS);
    established(&s, "widgets.example.com");
    let mut watch = s
        .kubectl_spawn(&[
            "get",
            "widgets",
            "--watch",
            "-o",
            "name",
            "--request-timeout=30s",
        ])
        .expect("kubectl watch");
    std::thread::sleep(Duration::from_millis(500));
    for name in ["a", "b"] {
        apply(
            &s,
            &format!(
                "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: 1\n"
            ),
        );
    }
    ok(&s, &["delete", "widget", "a"]);
    let stdout = watch.stdout.take().expect("stdout");
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(3)
            .collect::<Vec<_>>()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lines.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let lines = lines.join().expect("reader");
    assert_eq!(
        lines,
        [
            "widget.example.com/a",
            "widget.example.com/b",
            "widget.example.com/a"
        ]
    );
}

#[test]
fn namespace_deletion_and_the_garbage_collector_reach_custom_resources() {
    let (_dir, s) = cluster();
    apply(&s, WIDGETS);
    established(&s, "widgets.example.com");
    ok(&s, &["create", "namespace", "team"]);
    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: team\nspec:\n  size: 1\n",
    );
    // A ConfigMap owned by a Widget goes with it.
    let w = json(&s, &["-n", "team", "get", "widget", "w", "-o", "json"]);
    let uid = w["metadata"]["uid"].as_str().expect("uid").to_owned();
    apply(
        &s,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  namespace: team\n  ownerReferences:\n  - apiVersion: example.com/v1\n    kind: Widget\n    name: w\n    uid: {uid}\n"
        ),
    );
    ok(&s, &["-n", "team", "delete", "widget", "w"]);
    wait_for(&s, 60, "the owned ConfigMap to be collected", || {
        (!s.kubectl(&["-n", "team", "get", "configmap", "owned"])
            .expect("kubectl runs")
            .0)
            .then_some(())
    });
    // ResourceQuota counts custom resources (`count/<plural>.<group>`).
    ok(
        &s,
        &[
            "-n",
            "team",
            "create",
            "quota",
            "widgets",
            "--hard=count/widgets.example.com=1",
        ],
    );
    wait_for(&s, 60, "the quota to count the namespace's widgets", || {
        let q = json(&s, &["-n", "team", "get", "quota", "widgets", "-o", "json"]);
        (q["status"]["used"]["count/widgets.example.com"] == "0").then_some(())
    });
    let (second, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: extra\n  namespace: team\nspec:\n  size: 1\n"),
        )
        .expect("kubectl runs");
    assert!(second, "{err}");
    let (third, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: over\n  namespace: team\nspec:\n  size: 1\n"),
        )
        .expect("kubectl runs");
    assert!(!third);
    assert!(err.contains("exceeded quota: widgets"), "{err}");
    ok(&s, &["-n", "team", "delete", "quota", "widgets"]);

    // Namespace deletion removes the custom resources in it.
    apply(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\n  namespace: team\nspec:\n  size: 1\n",
    );
    ok(&s, &["delete", "namespace", "team", "--timeout=60s"]);
    let out = ok(&s, &["get", "widgets", "-A", "-o", "name"]);
    assert!(out.trim().is_empty(), "{out}");
}

const THINGS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: things
    kind: Thing
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Mode
      type: string
      jsonPath: .spec.mode
    - name: Detail
      type: string
      priority: 1
      jsonPath: .spec.detail
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size:
                type: integer
                minimum: 1
                maximum: 10
              mode:
                type: string
                enum: [fast, slow]
                default: slow
              detail:
                type: string
                maxLength: 8
"#;

#[test]
fn schemas_prune_default_and_validate_custom_resources() {
    let (_dir, s) = bare();
    apply(&s, THINGS);
    established(&s, "things.example.com");

    // Defaults are applied, unknown fields pruned with a warning.
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "--validate=warn"],
            Some("apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t1\nspec:\n  size: 3\n  extra: 1\n"),
        )
        .expect("kubectl runs");
    assert!(created, "{err}");
    assert!(err.contains("unknown field \"spec.extra\""), "{err}");
    let t = json(&s, &["get", "thing", "t1", "-o", "json"]);
    assert_eq!(t["spec"]["mode"], "slow");
    assert!(t["spec"].get("extra").is_none(), "{t}");

    // Strict field validation refuses the unknown field instead.
    let (strict, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "--validate=strict"],
            Some("apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t2\nspec:\n  size: 3\n  extra: 1\n"),
        )
        .expect("kubectl runs");
    assert!(!strict);
    assert!(err.contains("unknown field \"spec.extra\""), "{err}");

    // Invalid values: 422 with field paths, nothing stored.
    let (invalid, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t3\nspec:\n  size: 20\n  mode: medium\n"),
        )
        .expect("kubectl runs");
    assert!(!invalid);
    assert!(err.contains("The Thing \"t3\" is invalid"), "{err}");
    assert!(err.contains("spec.size"), "{err}");
    assert!(
        err.contains("spec.mode: Unsupported value: \"medium\""),
        "{err}"
    );
    let (missing, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: example.com/v1\nkind: Thing\nmetadata:\n  name: t4\nspec:\n  mode: fast\n"),
        )
        .expect("kubectl runs");
    assert!(!missing);
    assert!(err.contains("spec.size: Required value"), "{err}");
    assert!(!s.kubectl(&["get", "thing", "t3"]).expect("kubectl").0);

    // Printer columns, priority columns with -o wide.
    let out = ok(&s, &["get", "things"]);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "SIZE", "MODE"], "{out}");
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().collect::<Vec<_>>() == ["t1", "3", "slow"]),
        "{out}"
    );
    let wide = ok(&s, &["get", "things", "-o", "wide"]);
    assert!(
        wide.lines().next().is_some_and(|l| l.contains("DETAIL")),
        "{wide}"
    );

    // Malformed CRDs are refused with upstream's messages.
    let bad = THINGS
        .replace("name: things.example.com", "name: stuff.example.com")
        .replace(
            "              size:\n                type: integer\n",
            "              size:\n                minimum: 1\n",
        );
    let (refused, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&bad))
        .expect("kubectl runs");
    assert!(!refused);
    assert!(
        err.contains("The CustomResourceDefinition \"stuff.example.com\" is invalid"),
        "{err}"
    );
    assert!(
        err.contains("must be spec.names.plural+\".\"+spec.group"),
        "{err}"
    );
    let two_storage = THINGS
        .replace("things.example.com", "others.example.com")
        .replace("plural: things", "plural: others")
        .replace("kind: Thing", "kind: Other")
        .replace("  - name: v1\n    served: true\n    storage: true\n", "  - name: v1\n    served: true\n    storage: true\n  - name: v2\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n");
    let (refused, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&two_storage))
        .expect("kubectl runs");
    assert!(!refused);
    assert!(
        err.contains("must have exactly one version marked as storage version"),
        "{err}"
    );
}
