//! Response encodings as kube-apiserver writes them, checked on raw bodies with curl:
//! `Accept: application/yaml` answers (objects, lists, Status errors) in go-yaml's layout;
//! JSON indented by two spaces (and without a trailing newline, as Go's `MarshalIndent`) for
//! `?pretty=true` and for curl, Wget and browser user agents; every other JSON body ending
//! with the newline Go's `json.Encoder` writes; a YAML watch is upstream's 406.

use std::process::Command;

use e2e::ServerProcess;

/// The answer to one raw request.
struct Answer {
    code: u16,
    content_type: String,
    body: String,
}

/// One request with the admin's client certificate; `agent` is the User-Agent.
fn curl(s: &ServerProcess, method: &str, path: &str, accept: &str, agent: &str) -> Answer {
    let pki = s.data_dir.join("pki");
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", method, "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-A", agent, "-w", "\n%{http_code} %{content_type}"]);
    if !accept.is_empty() {
        cmd.args(["-H", &format!("Accept: {accept}")]);
    }
    let out = cmd
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').expect("status line");
    let (code, content_type) = tail.split_once(' ').unwrap_or((tail, ""));
    Answer {
        code: code.parse().expect("status code"),
        content_type: content_type.to_owned(),
        body: body.to_owned(),
    }
}

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let manifest = r#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default", "labels": {"tier": "1"}},
        "data": {"flag": "true", "script": "echo one\necho two\n", "plain": "hello world",
                 "colon": "a: b", "empty": ""}}"#;
    let file = dir.path().join("cm.json");
    std::fs::write(&file, manifest).expect("write manifest");
    let path = file.to_string_lossy().into_owned();
    let (ok, _, err) = server
        .kubectl(&["create", "-f", &path])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    (dir, server)
}

const CM: &str = "/api/v1/namespaces/default/configmaps/cm";

#[test]
fn yaml_objects_lists_and_errors() {
    let (_dir, s) = server();
    let a = curl(&s, "GET", CM, "application/yaml", "e2e");
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.content_type, "application/yaml");
    let want_start = "apiVersion: v1\ndata:\n  colon: 'a: b'\n  empty: \"\"\n  flag: \"true\"\n  plain: hello world\n  script: |\n    echo one\n    echo two\nkind: ConfigMap\nmetadata:\n  creationTimestamp: \"";
    assert!(a.body.starts_with(want_start), "{}", a.body);
    assert!(
        a.body.contains("\n  labels:\n    tier: \"1\"\n"),
        "{}",
        a.body
    );
    assert!(
        a.body.contains("\n  managedFields:\n  - apiVersion: v1\n"),
        "{}",
        a.body
    );
    assert!(
        a.body.contains("\n  name: cm\n  namespace: default\n"),
        "{}",
        a.body
    );
    assert!(
        a.body.ends_with('\n') && !a.body.starts_with("---"),
        "{}",
        a.body
    );

    // A list: items as a block sequence at the key's indentation; a built-in type's items
    // carry no apiVersion/kind (the list does), as kube-apiserver writes them.
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        "application/yaml",
        "e2e",
    );
    assert_eq!(a.code, 200, "{}", a.body);
    assert!(
        a.body.starts_with("apiVersion: v1\nitems:\n- data:\n"),
        "{}",
        a.body
    );
    assert!(
        a.body
            .contains("\nkind: ConfigMapList\nmetadata:\n  resourceVersion: \""),
        "{}",
        a.body
    );

    // An error is a YAML Status.
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps/missing",
        "application/yaml",
        "e2e",
    );
    assert_eq!(a.code, 404);
    assert_eq!(a.content_type, "application/yaml");
    assert_eq!(
        a.body,
        "apiVersion: v1\ncode: 404\ndetails:\n  kind: configmaps\n  name: missing\nkind: Status\nmessage: configmaps \"missing\" not found\nmetadata: {}\nreason: NotFound\nstatus: Failure\n"
    );

    // A YAML watch has no stream form: upstream's 406.
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true",
        "application/yaml",
        "e2e",
    );
    assert_eq!(a.code, 406, "{}", a.body);
    assert!(
        a.body.contains("\nreason: NotAcceptable\n")
            && a.body.starts_with("apiVersion: v1\ncode: 406\n"),
        "{}",
        a.body
    );
    // The long message is folded at a space past column 80, as go-yaml does.
    assert!(
        a.body.contains("message: 'only the following media types are accepted: application/json;stream=watch,\n  application/vnd.kubernetes.protobuf;stream=watch'\n"),
        "{}",
        a.body
    );

    // Nothing acceptable at all.
    let a = curl(&s, "GET", CM, "text/html", "e2e");
    assert_eq!(a.code, 406, "{}", a.body);
    let v: serde_json::Value = serde_json::from_str(&a.body).expect("JSON Status");
    assert_eq!(v["reason"], "NotAcceptable");
}

#[test]
fn pretty_json_for_humans_and_newlines_for_programs() {
    let (_dir, s) = server();
    // A program: compact JSON ending with a newline (objects, lists, errors).
    for path in [
        CM,
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/configmaps/missing",
    ] {
        let a = curl(&s, "GET", path, "application/json", "e2e");
        assert_eq!(a.content_type, "application/json", "{path}");
        assert!(a.body.ends_with("}\n"), "{path}: {:?}", a.body);
        assert!(!a.body.contains("\n  "), "{path}: compact: {}", a.body);
    }

    // curl, Wget and browsers get two-space indented JSON, no trailing newline.
    for agent in [
        "curl/8.5.0",
        "Wget/1.21.4",
        "Mozilla/5.0 (X11; Linux x86_64)",
    ] {
        let a = curl(&s, "GET", CM, "", agent);
        assert_eq!(a.code, 200);
        let head = "{\n  \"kind\": \"ConfigMap\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {\n";
        assert!(a.body.starts_with(head), "{agent}: {}", a.body);
        assert!(a.body.ends_with("\n}"), "{agent}: {:?}", a.body);
        let v: serde_json::Value = serde_json::from_str(&a.body).expect("JSON");
        assert_eq!(v["metadata"]["name"], "cm");
    }
    // ?pretty=true for anyone; ?pretty=false wins over the user agent.
    let a = curl(&s, "GET", &format!("{CM}?pretty=true"), "", "e2e");
    assert!(
        a.body.starts_with("{\n  \"kind\": \"ConfigMap\""),
        "{}",
        a.body
    );
    let a = curl(&s, "GET", &format!("{CM}?pretty=false"), "", "curl/8.5.0");
    let compact = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#;
    assert!(a.body.starts_with(compact), "{}", a.body);
    assert!(a.body.ends_with("}\n"), "{:?}", a.body);
    // Errors too: a Status in Go's field order.
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps/missing",
        "",
        "curl/8.5.0",
    );
    assert_eq!(a.code, 404);
    let want = r#"{
  "kind": "Status",
  "apiVersion": "v1",
  "metadata": {},
  "status": "Failure",
  "message": "configmaps \"missing\" not found",
  "reason": "NotFound",
  "details": {
    "name": "missing",
    "kind": "configmaps"
  },
  "code": 404
}"#;
    assert_eq!(a.body, want);
    // A watch is never indented; events are {"type":…,"object":…}.
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
        "",
        "curl/8.5.0",
    );
    assert_eq!(a.code, 200);
    let first = a.body.lines().next().expect("an event");
    let event = r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#;
    assert!(first.starts_with(event), "{first}");

    // kubectl still reads everything (it asks for JSON and Tables).
    let (ok, out, err) = s
        .kubectl(&["get", "configmap", "cm", "-o", "yaml"])
        .expect("kubectl");
    assert!(ok, "{err}");
    assert!(out.contains("script: |"), "{out}");
    let (ok, out, err) = s.kubectl(&["get", "configmaps"]).expect("kubectl");
    assert!(ok && out.contains("cm"), "{out}{err}");
}

#[test]
fn json_in_go_struct_order() {
    let (dir, s) = server();
    // A Service created from JSON without status: keys in Go's order.
    let svc = r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}}"#;
    let file = dir.path().join("svc.json");
    std::fs::write(&file, svc).expect("write manifest");
    let (ok, _, err) = s
        .kubectl(&["create", "-f", &file.to_string_lossy()])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/services/web",
        "",
        "e2e",
    );
    let head = r#"{"kind":"Service","apiVersion":"v1","metadata":{"#;
    assert!(a.body.starts_with(head), "{}", a.body);
    let spec = r#""spec":{"ports":[{"protocol":"TCP","port":80,"targetPort":80}],"selector":{"app":"web"},"clusterIP":"#;
    assert!(a.body.contains(spec), "{}", a.body);

    // A Status error, as upstream writes it.
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "-X", "POST", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-A", "e2e", "-H", "Content-Type: application/json"])
        .arg("--data-binary")
        .arg(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}"#)
        .arg(format!("{}/api/v1/namespaces/default/configmaps", s.url))
        .output()
        .expect("curl runs");
    let want = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"cm\" already exists","reason":"AlreadyExists","details":{"name":"cm","kind":"configmaps"},"code":409}"#;
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{want}\n"));

    // Strings escaped as Go's encoder escapes them.
    let (ok, _, err) = s
        .kubectl(&["create", "configmap", "html", "--from-literal=h=<b>&"])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps/html",
        "",
        "e2e",
    );
    assert!(
        a.body.contains(r#""data":{"h":"\u003cb\u003e\u0026"}"#),
        "{}",
        a.body
    );

    // A list: the list's own fields first.
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        "",
        "e2e",
    );
    let head = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"#;
    assert!(a.body.starts_with(head), "{}", a.body);
}
