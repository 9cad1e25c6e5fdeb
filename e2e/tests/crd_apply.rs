//! Server-side apply of custom resources through stock kubectl: lists and maps merge by the
//! CRD's structural schema markers (`x-kubernetes-list-type` map/set/atomic,
//! `x-kubernetes-map-type`), two field managers own different items of a map list, a
//! conflict on one item's field names its key, and managedFields record `k:` elements.

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok};
use serde_json::{Value, json};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: services.apply.example.com
spec:
  group: apply.example.com
  scope: Namespaced
  names:
    plural: services
    singular: service
    kind: Service
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              args:
                type: array
                items: {type: string}
              selector:
                type: object
                x-kubernetes-map-type: atomic
                additionalProperties: {type: string}
"#;

const A: &str = r#"apiVersion: apply.example.com/v1
kind: Service
metadata: {name: x}
spec:
  ports: [{name: http, port: 80}]
  tags: [a]
  args: [one, two]
  selector: {app: x, tier: web}
"#;

const B: &str = r#"apiVersion: apply.example.com/v1
kind: Service
metadata: {name: x}
spec:
  ports: [{name: https, port: 443}]
  tags: [b]
"#;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn ssa(s: &ServerProcess, manifest: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["apply", "--server-side", "-f", "-"];
    args.extend_from_slice(extra);
    s.kubectl_as(&s.kubeconfig, &args, Some(manifest))
        .expect("kubectl runs")
}

fn get(s: &ServerProcess) -> Value {
    json(
        s,
        &[
            "get",
            "services.apply.example.com",
            "x",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    )
}

fn fields_of(obj: &Value, manager: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == manager))
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn custom_resources_apply_by_their_schema_markers() {
    let (_dir, s) = server();
    apply(&s, CRD);
    ok(
        &s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/services.apply.example.com",
        ],
    );

    let (ok_a, _, err) = ssa(&s, A, &["--field-manager=a"]);
    assert!(ok_a, "{err}\n{}", s.log());
    let (ok_b, _, err) = ssa(&s, B, &["--field-manager=b"]);
    assert!(ok_b, "{err}");

    // Both managers' items are kept: the map list by key, the set by value.
    let obj = get(&s);
    assert_eq!(
        obj["spec"]["ports"],
        json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}])
    );
    assert_eq!(obj["spec"]["tags"], json!(["a", "b"]));
    let a = fields_of(&obj, "a");
    assert_eq!(
        a["f:spec"]["f:ports"],
        json!({"k:{\"name\":\"http\"}": {".": {}, "f:name": {}, "f:port": {}}}),
        "{a}"
    );
    assert_eq!(a["f:spec"]["f:tags"], json!({"v:\"a\"": {}}), "{a}");
    assert_eq!(a["f:spec"]["f:args"], json!({}), "{a}");
    assert_eq!(a["f:spec"]["f:selector"], json!({}), "{a}");
    let b = fields_of(&obj, "b");
    assert!(
        b["f:spec"]["f:ports"]
            .get("k:{\"name\":\"https\"}")
            .is_some(),
        "{b}"
    );

    // b setting a's item's port conflicts, named by the item's key.
    let b2 = B.replace(
        "[{name: https, port: 443}]",
        "[{name: https, port: 443}, {name: http, port: 8080}]",
    );
    let (ok_b, _, err) = ssa(&s, &b2, &["--field-manager=b"]);
    assert!(!ok_b);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "a": .spec.ports[name="http"].port"#
        ),
        "{err}"
    );
    assert_eq!(get(&s)["spec"]["ports"][0]["port"], 80);

    // --force-conflicts takes it.
    let (ok_b, _, err) = ssa(&s, &b2, &["--field-manager=b", "--force-conflicts"]);
    assert!(ok_b, "{err}");
    let obj = get(&s);
    assert_eq!(
        obj["spec"]["ports"],
        json!([{"name": "http", "port": 8080}, {"name": "https", "port": 443}])
    );
    let a = fields_of(&obj, "a");
    assert_eq!(
        a["f:spec"]["f:ports"],
        json!({"k:{\"name\":\"http\"}": {".": {}, "f:name": {}}}),
        "{a}"
    );

    // The atomic list and the atomic map are replaced whole by their owner.
    // (a no longer sets the port b took.)
    let a2 = A
        .replace("{name: http, port: 80}", "{name: http}")
        .replace("[one, two]", "[three]")
        .replace("{app: x, tier: web}", "{app: z}");
    let (ok_a, _, err) = ssa(&s, &a2, &["--field-manager=a"]);
    assert!(ok_a, "{err}");
    let obj = get(&s);
    assert_eq!(obj["spec"]["args"], json!(["three"]));
    assert_eq!(obj["spec"]["selector"], json!({"app": "z"}));
    assert_eq!(obj["spec"]["ports"][0]["port"], 8080);
    assert_eq!(obj["spec"]["tags"], json!(["a", "b"]));

    // Another manager writing the atomic list conflicts on the list itself.
    let b3 = format!("{B}  args: [four]\n");
    let (ok_b, _, err) = ssa(&s, &b3, &["--field-manager=b"]);
    assert!(!ok_b);
    assert!(err.contains(r#"conflict with "a": .spec.args"#), "{err}");

    // An Update (JSON patch) records the item it added by key.
    let (ok_c, _, err) = s
        .kubectl(&[
            "patch",
            "services.apply.example.com",
            "x",
            "--type=json",
            "--field-manager=c",
            "-p",
            r#"[{"op":"add","path":"/spec/ports/-","value":{"name":"grpc","port":9000}}]"#,
        ])
        .expect("kubectl runs");
    assert!(ok_c, "{err}");
    let c = fields_of(&get(&s), "c");
    assert!(
        c["f:spec"]["f:ports"]
            .get("k:{\"name\":\"grpc\"}")
            .is_some(),
        "{c}"
    );

    // Strategic merge patch stays refused for custom resources.
    let (ok_d, _, err) = s
        .kubectl(&[
            "patch",
            "services.apply.example.com",
            "x",
            "--type=strategic",
            "-p",
            r#"{"spec":{"tags":["c"]}}"#,
        ])
        .expect("kubectl runs");
    assert!(!ok_d);
    assert!(
        err.contains("UnsupportedMediaType")
            || err.contains("415")
            || err.contains("not supported"),
        "{err}"
    );
}
