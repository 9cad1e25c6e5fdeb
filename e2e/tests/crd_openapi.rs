//! OpenAPI and discovery of custom resources with stock kubectl against the real binary: an
//! established CRD's schema is published in `/openapi/v3` (its group version listed with a
//! hash that follows the CRD) and merged into `/openapi/v2`, so `kubectl explain` prints the
//! schema's descriptions and `kubectl apply` keeps validating; aggregated discovery carries an
//! ETag that changes when CRDs change (and answers 304 to a matching `If-None-Match`), so
//! kubectl's discovery cache refreshes.

use std::process::Command;

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok, wait_for};
use serde_json::Value;

/// The aggregated discovery media type kubectl asks for.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn widgets(size_description: &str) -> String {
    format!(
        r#"
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
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {{}}
    schema:
      openAPIV3Schema:
        description: Widget is a thing with sprockets.
        type: object
        properties:
          spec:
            description: WidgetSpec is what the widget should be.
            type: object
            properties:
              size:
                description: {size_description}
                type: integer
                minimum: 0
              color:
                description: Color of the widget's casing.
                type: string
                enum: [red, green, blue]
          status:
            type: object
            properties:
              phase:
                type: string
"#
    )
}

const GADGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.tools.example.org
spec:
  group: tools.example.org
  scope: Cluster
  names:
    plural: gadgets
    kind: Gadget
  versions:
  - name: v1alpha1
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

/// A GET with curl as the admin: (status, headers as sent, body).
fn curl(s: &ServerProcess, path: &str, headers: &[&str]) -> (u16, String, String) {
    let pki = s.data_dir.join("pki");
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-D", "/dev/stderr"])
        .arg("--cacert")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"));
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(format!("{}{path}", s.url)).output().expect("curl");
    assert!(out.status.success(), "curl: {out:?}");
    let head = String::from_utf8_lossy(&out.stderr).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        status,
        head,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The value of header `name` (case-insensitive) in a response head.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// The ETag of aggregated `/apis` and the document.
fn apis_etag(s: &ServerProcess) -> (String, Value) {
    let accept = format!("Accept: {AGGREGATED}");
    let (status, head, body) = curl(s, "/apis", &[&accept]);
    assert_eq!(status, 200, "{head}");
    let etag = header(&head, "etag").unwrap_or_else(|| panic!("no ETag: {head}"));
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    (etag, serde_json::from_str(&body).expect("discovery JSON"))
}

fn lists_group(doc: &Value, group: &str) -> bool {
    doc["items"]
        .as_array()
        .is_some_and(|items| items.iter().any(|g| g["metadata"]["name"] == group))
}

fn raw(s: &ServerProcess, path: &str) -> Value {
    json(s, &["get", "--raw", path])
}

/// `kubectl explain <path>` once it succeeds and prints `expected`.
fn explain_until(s: &ServerProcess, path: &str, expected: &str) -> String {
    wait_for(
        s,
        20,
        &format!("kubectl explain {path} to print {expected:?}"),
        || {
            let (done, out, _) = s.kubectl(&["explain", path]).expect("kubectl runs");
            (done && out.contains(expected)).then_some(out)
        },
    )
}

#[test]
fn explain_and_openapi_documents_follow_a_crd() {
    let (_dir, s) = bare();
    // Fill kubectl's discovery and OpenAPI caches before the CRD exists.
    ok(&s, &["api-resources"]);
    ok(&s, &["explain", "pods.spec.nodeName"]);

    apply(&s, &widgets("Size is how many sprockets the widget has."));
    established(&s, "widgets.example.com");

    let out = explain_until(
        &s,
        "widget.spec.size",
        "Size is how many sprockets the widget has.",
    );
    assert!(out.contains("GROUP:      example.com"), "{out}");
    assert!(out.contains("KIND:       Widget"), "{out}");
    assert!(out.contains("VERSION:    v1"), "{out}");
    assert!(out.contains("FIELD: size <integer>"), "{out}");
    // The v2 path of explain reads the protobuf v2 document.
    let v2_out = ok(
        &s,
        &[
            "explain",
            "widget.spec.size",
            "--output=plaintext-openapiv2",
        ],
    );
    assert!(
        v2_out.contains("Size is how many sprockets the widget has."),
        "{v2_out}"
    );
    let root = ok(&s, &["explain", "widgets"]);
    assert!(root.contains("Widget is a thing with sprockets."), "{root}");
    for field in ["apiVersion", "kind", "metadata", "spec", "status"] {
        assert!(root.contains(&format!("  {field}\t")), "{field}: {root}");
    }
    let color = ok(&s, &["explain", "widget.spec.color"]);
    assert!(color.contains("Color of the widget's casing."), "{color}");
    assert!(
        color.contains("ENUM:\n    red\n    green\n    blue"),
        "{color}"
    );
    let meta = ok(&s, &["explain", "widget.metadata.name"]);
    assert!(
        meta.contains("Name must be unique within a namespace."),
        "{meta}"
    );

    // The v3 index links the group version with its hash; the document has the schema.
    let index = raw(&s, "/openapi/v3");
    let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("apis/example.com/v1 not in the index: {index}"))
        .to_owned();
    assert!(
        url.starts_with("/openapi/v3/apis/example.com/v1?hash="),
        "{url}"
    );
    let doc = raw(&s, "/openapi/v3/apis/example.com/v1");
    let widget = &doc["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(
        widget["properties"]["spec"]["properties"]["size"]["minimum"], 0,
        "{widget}"
    );
    assert_eq!(
        widget["x-kubernetes-group-version-kind"],
        serde_json::json!([{ "group": "example.com", "kind": "Widget", "version": "v1" }])
    );
    assert!(doc["components"]["schemas"]["com.example.v1.WidgetList"].is_object());
    assert!(
        doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object()
    );
    assert!(
        doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status"]
            .is_object()
    );

    // v2 has the definition and the paths too.
    let v2 = raw(&s, "/openapi/v2");
    let def = &v2["definitions"]["com.example.v1.Widget"];
    assert_eq!(
        def["properties"]["spec"]["properties"]["size"]["description"],
        "Size is how many sprockets the widget has."
    );
    assert!(v2["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    assert!(v2["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"].is_object());

    // kubectl apply (its validation reads these documents) creates and then patches.
    let w = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n  color: red\n";
    apply(&s, w);
    apply(&s, &w.replace("size: 3", "size: 4"));
    let got = json(&s, &["get", "widget", "w1", "-o", "json"]);
    assert_eq!(got["spec"]["size"], 4, "{got}");

    // A changed CRD is a new document under a new hash, and explain follows it.
    ok(
        &s,
        &[
            "patch",
            "crd",
            "widgets.example.com",
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/size/description", "value": "The number of sprockets."}]"#,
        ],
    );
    let new_url = wait_for(&s, 20, "a new v3 hash for example.com/v1", || {
        let index = raw(&s, "/openapi/v3");
        let u = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
            .as_str()
            .map(str::to_owned)?;
        (u != url).then_some(u)
    });
    assert!(new_url.contains("?hash="), "{new_url}");
    explain_until(&s, "widget.spec.size", "The number of sprockets.");
}

#[test]
fn discovery_etag_changes_when_crds_change() {
    let (_dir, s) = bare();
    let (before, doc) = apis_etag(&s);
    assert!(lists_group(&doc, "apps"));
    // Revalidation with the current ETag is a 304 without a body.
    let accept = format!("Accept: {AGGREGATED}");
    let inm = format!("If-None-Match: {before}");
    let (status, head, body) = curl(&s, "/apis", &[&accept, &inm]);
    assert_eq!(status, 304, "{head}");
    assert!(body.is_empty(), "{body}");
    assert_eq!(header(&head, "etag").as_deref(), Some(before.as_str()));
    // `/api` has its own ETag; legacy discovery has none, as upstream.
    let (status, head, _) = curl(&s, "/api", &[&accept]);
    assert_eq!(status, 200);
    assert!(header(&head, "etag").is_some_and(|e| e != before), "{head}");
    let (_, head, _) = curl(&s, "/apis", &[]);
    assert!(header(&head, "etag").is_none(), "{head}");

    apply(&s, &widgets("Size."));
    established(&s, "widgets.example.com");
    let first = wait_for(&s, 20, "discovery to list example.com", || {
        let (etag, doc) = apis_etag(&s);
        lists_group(&doc, "example.com").then_some(etag)
    });
    assert_ne!(first, before);
    let (status, _, _) = curl(&s, "/apis", &[&accept, &inm]);
    assert_eq!(status, 200, "the old ETag no longer matches");

    apply(&s, GADGETS);
    established(&s, "gadgets.tools.example.org");
    let second = wait_for(&s, 20, "discovery to list tools.example.org", || {
        let (etag, doc) = apis_etag(&s);
        lists_group(&doc, "tools.example.org").then_some(etag)
    });
    assert_ne!(second, first);
    // kubectl's cached discovery picks the new kind up.
    let resources = ok(&s, &["api-resources", "--api-group=tools.example.org"]);
    assert!(resources.contains("gadgets"), "{resources}");
    // A schema that preserves unknown fields at the root still explains (its bare fields).
    let out = explain_until(&s, "gadgets", "KIND:       Gadget");
    assert!(out.contains("VERSION:    v1alpha1"), "{out}");
    let index = raw(&s, "/openapi/v3");
    assert!(index["paths"]["apis/tools.example.org/v1alpha1"].is_object());

    // Deleting a CRD changes it again.
    ok(&s, &["delete", "crd", "gadgets.tools.example.org"]);
    let third = wait_for(&s, 30, "discovery to drop tools.example.org", || {
        let (etag, doc) = apis_etag(&s);
        (!lists_group(&doc, "tools.example.org")).then_some(etag)
    });
    assert_ne!(third, second);
    let index = raw(&s, "/openapi/v3");
    assert!(index["paths"]["apis/tools.example.org/v1alpha1"].is_null());
}
