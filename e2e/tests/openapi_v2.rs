//! `/openapi/v2` in gnostic protobuf: stock kubectl's `explain --output=plaintext-openapiv2`
//! (which reads only the protobuf v2 document) prints upstream-shaped text, and a raw HTTPS
//! request with kubectl's `Accept` gets the document with an ETag that answers 304.

use std::process::Command;

use e2e::ServerProcess;

const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("start server");
    (dir, server)
}

fn explain_v2(s: &ServerProcess, args: &[&str]) -> String {
    let mut all = vec!["explain"];
    all.extend_from_slice(args);
    all.push("--output=plaintext-openapiv2");
    let (ok, out, err) = s.kubectl(&all).expect("kubectl");
    assert!(ok, "kubectl {all:?}: {err}");
    out
}

#[test]
fn explain_plaintext_openapiv2_reads_the_protobuf_document() {
    let (_dir, s) = server();
    let out = explain_v2(&s, &["pods.spec.containers"]);
    assert!(out.starts_with("KIND:     Pod\nVERSION:  v1\n\n"), "{out}");
    assert!(out.contains("RESOURCE: containers <[]Object>\n"), "{out}");
    assert!(
        out.contains(
            "DESCRIPTION:\n     List of containers belonging to the pod. Containers cannot currently be\n"
        ),
        "{out}"
    );
    assert!(out.contains("\nFIELDS:\n"), "{out}");
    assert!(out.contains("   args\t<[]string>\n"), "{out}");
    assert!(out.contains("   image\t<string>\n"), "{out}");
    assert!(out.contains("   name\t<string> -required-\n"), "{out}");
    assert!(out.contains("   ports\t<[]Object>\n"), "{out}");
    assert!(out.contains("   resources\t<Object>\n"), "{out}");

    // A nested field through references: its type and description.
    let ports = explain_v2(&s, &["pods.spec.containers.ports.containerPort"]);
    assert!(
        ports.contains("FIELD:    containerPort <integer>\n"),
        "{ports}"
    );
    assert!(
        ports.contains("Number of port to expose on the pod's IP address."),
        "{ports}"
    );

    let deploy = explain_v2(&s, &["deployment", "--recursive"]);
    assert!(
        deploy.starts_with("KIND:     Deployment\nVERSION:  apps/v1\n\n"),
        "{deploy}"
    );
    assert!(
        deploy.contains(
            "DESCRIPTION:\n     Deployment enables declarative updates for Pods and ReplicaSets.\n"
        ),
        "{deploy}"
    );
    for line in [
        "   metadata\t<Object>\n",
        "      labels\t<map[string]string>\n",
        "   spec\t<Object>\n",
        "      replicas\t<integer>\n",
        // The recursive printer leaves out `-required-`, as upstream's.
        "      selector\t<Object>\n",
        "      template\t<Object>\n",
        "            containers\t<[]Object>\n",
        "                  containerPort\t<integer>\n",
        "   status\t<Object>\n",
    ] {
        assert!(deploy.contains(line), "{line:?} missing in\n{deploy}");
    }
}

/// `curl` with the admin client certificate: (status line + headers, body length). HTTP/2
/// header names come lower-case.
fn curl(s: &ServerProcess, headers: &[String]) -> (String, usize) {
    let pki = s.data_dir.join("pki");
    let body = s.data_dir.join("openapi-v2.body");
    // curl leaves the file alone when there is no body.
    std::fs::remove_file(&body).ok();
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-D", "-", "-o"])
        .arg(&body)
        .arg("--cacert")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"));
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(format!("{}/openapi/v2", s.url))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl: {out:?}");
    let len = std::fs::metadata(&body)
        .map(|m| m.len() as usize)
        .unwrap_or(0);
    (String::from_utf8_lossy(&out.stdout).into_owned(), len)
}

/// The status code of the response head.
fn status(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The value of header `name` (case-insensitive) in the response head.
fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

#[test]
fn raw_protobuf_request_gets_the_document_an_etag_and_304() {
    let (_dir, s) = server();
    let accept = format!("Accept: {PROTOBUF}");
    let (head, len) = curl(&s, std::slice::from_ref(&accept));
    assert_eq!(status(&head), 200, "{head}");
    assert_eq!(
        header_value(&head, "content-type").as_deref(),
        Some("application/octet-stream"),
        "{head}"
    );
    assert_eq!(
        header_value(&head, "vary").as_deref(),
        Some("Accept"),
        "{head}"
    );
    assert!(len > 100_000, "protobuf document of {len} bytes");
    let etag = header_value(&head, "etag").expect("etag");
    let modified = header_value(&head, "last-modified").expect("last-modified");
    assert!(modified.ends_with(" GMT"), "{modified}");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");

    // The JSON form is a different representation with its own ETag.
    let (json_head, json_len) = curl(&s, &["Accept: application/json".to_owned()]);
    assert_eq!(
        header_value(&json_head, "content-type").as_deref(),
        Some("application/json")
    );
    assert_ne!(header_value(&json_head, "etag"), Some(etag.clone()));
    assert!(json_len > len, "JSON {json_len} vs protobuf {len}");

    // A revalidation with the ETag is a 304 without body; a stale one the document again.
    let (not_modified, len) = curl(&s, &[accept.clone(), format!("If-None-Match: {etag}")]);
    assert_eq!(status(&not_modified), 304, "{not_modified}");
    assert_eq!(len, 0);
    let (stale, _) = curl(&s, &[accept, "If-None-Match: \"stale\"".to_owned()]);
    assert_eq!(status(&stale), 200, "{stale}");

    // Neither JSON nor protobuf: 406.
    let (refused, _) = curl(&s, &["Accept: text/html".to_owned()]);
    assert_eq!(status(&refused), 406, "{refused}");
}

/// The kubectl 1.27 binary installed beside the dispatcher on PATH.
fn kubectl_127() -> std::path::PathBuf {
    let out = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v kubectl)\""])
        .output()
        .expect("locate kubectl");
    let dispatcher = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dispatcher.with_file_name("kubectl.1.27")
}

fn run_127(s: &ServerProcess, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kubectl_127())
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(args)
        .output()
        .expect("kubectl.1.27");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kubectl_127_reads_v2_for_apply_and_explain() {
    let (dir, s) = server();
    let (ok, out, err) = run_127(
        &s,
        &[
            "explain",
            "pods.spec.containers.ports",
            "--output=plaintext-openapiv2",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("KIND:     Pod\nVERSION:  v1\n\n"), "{out}");
    assert!(out.contains("RESOURCE: ports <[]Object>\n"), "{out}");
    assert!(
        out.contains("   containerPort\t<integer> -required-\n"),
        "{out}"
    );

    // kubectl 1.27's apply fetches /openapi/v2 (protobuf) for its patch metadata.
    let manifest = dir.path().join("deploy.yaml");
    let write = |image: &str| {
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  \
                 replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    \
                 metadata: {{labels: {{app: web}}}}\n    spec:\n      containers: \
                 [{{name: c, image: \"{image}\", ports: [{{containerPort: 80}}]}}]\n"
            ),
        )
        .expect("write manifest");
    };
    let path = manifest.to_str().expect("utf-8 path");
    write("nginx:1.27");
    let (ok, out, err) = run_127(&s, &["apply", "-f", path, "-v=6"]);
    assert!(ok, "{err}");
    assert!(out.contains("deployment.apps/web created"), "{out}");
    assert!(err.contains("/openapi/v2?timeout=32s 200 OK"), "{err}");
    write("nginx:1.28");
    let (ok, out, err) = run_127(&s, &["apply", "-f", path]);
    assert!(ok, "{err}");
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let (ok, image, err) = run_127(
        &s,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(image, "nginx:1.28");
}
