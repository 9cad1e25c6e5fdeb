//! events.k8s.io/v1 Events are another version of the core/v1 Events, as in kube-apiserver:
//! an event written through one API is read, watched, selected and deleted through the
//! other; `kubectl describe` shows events kube-rs' `Recorder` publishes.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use e2e::ServerProcess;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Config};
use serde_json::Value;

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

fn create(s: &ServerProcess, yaml: &str) -> (bool, String, String) {
    s.kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(yaml))
        .expect("kubectl runs")
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).expect("kubectl printed JSON")
}

/// Creates pod `web` in `default` and returns its uid.
fn pod(s: &ServerProcess) -> String {
    let (created, _, err) = create(
        s,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers: [{name: c, image: nginx}]\n",
    );
    assert!(created, "{err}");
    ok(s, &["get", "pod", "web", "-o", "jsonpath={.metadata.uid}"])
}

fn events_v1_event(name: &str, uid: &str) -> String {
    format!(
        r#"apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: {name}
  namespace: default
eventTime: "2024-05-06T07:08:09.000000Z"
regarding: {{apiVersion: v1, kind: Pod, namespace: default, name: web, uid: "{uid}"}}
reportingController: example.com/tester
reportingInstance: tester-1
action: Checking
reason: Checked
type: Normal
note: checked by the events.k8s.io API
"#
    )
}

fn core_event(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Event
metadata:
  name: {name}
  namespace: default
involvedObject: {{apiVersion: v1, kind: Pod, namespace: default, name: web}}
reason: Legacy
message: written through core v1
type: Warning
source: {{component: old-tool}}
firstTimestamp: "2024-05-06T07:08:09Z"
lastTimestamp: "2024-05-06T07:08:09Z"
count: 1
"#
    )
}

#[test]
fn events_v1_events_are_core_events() {
    let (_d, s) = server();
    let uid = pod(&s);
    let (created, _, err) = create(&s, &events_v1_event("web.v1", &uid));
    assert!(created, "{err}");

    // kubectl describe reads core/v1 events about the pod (field selectors on
    // involvedObject.*): the events.k8s.io event is among them.
    let described = ok(&s, &["describe", "pod", "web"]);
    assert!(described.contains("Checked"), "{described}");
    assert!(
        described.contains("checked by the events.k8s.io API"),
        "{described}"
    );
    assert!(described.contains("example.com/tester"), "{described}");

    // The core list (paged: the store; unpaged: the watch cache) shows it in core form.
    for chunk in ["500", "0"] {
        let list = json(&ok(
            &s,
            &[
                "get",
                "events",
                "-o",
                "json",
                &format!("--chunk-size={chunk}"),
            ],
        ));
        let items = list["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "{list}");
        let e = &items[0];
        assert_eq!(e["apiVersion"], "v1");
        assert_eq!(e["message"], "checked by the events.k8s.io API");
        assert_eq!(e["involvedObject"]["name"], "web");
        assert_eq!(e["reportingComponent"], "example.com/tester");
        assert!(
            e.get("note").is_none() && e.get("regarding").is_none(),
            "{e}"
        );
    }
    let one = json(&ok(&s, &["get", "events", "web.v1", "-o", "json"]));
    assert_eq!(one["message"], "checked by the events.k8s.io API");

    // Core-created events read through events.k8s.io/v1.
    let (created, _, err) = create(&s, &core_event("web.core"));
    assert!(created, "{err}");
    let one = json(&ok(
        &s,
        &["get", "events.events.k8s.io", "web.core", "-o", "json"],
    ));
    assert_eq!(one["apiVersion"], "events.k8s.io/v1");
    assert_eq!(one["note"], "written through core v1");
    assert_eq!(one["regarding"]["name"], "web");
    assert_eq!(one["deprecatedSource"]["component"], "old-tool");
    assert_eq!(one["deprecatedCount"], 1);
    assert!(one.get("message").is_none() && one.get("involvedObject").is_none());
    for chunk in ["500", "0"] {
        let list = json(&ok(
            &s,
            &[
                "get",
                "events.events.k8s.io",
                "-o",
                "json",
                &format!("--chunk-size={chunk}"),
            ],
        ));
        let items = list["items"].as_array().expect("items");
        assert!(
            items.iter().all(|e| e["apiVersion"] == "events.k8s.io/v1"),
            "{list}"
        );
        let notes: Vec<&str> = items.iter().filter_map(|e| e["note"].as_str()).collect();
        assert_eq!(
            notes,
            [
                "written through core v1",
                "checked by the events.k8s.io API"
            ],
            "{list}"
        );

        // Field selectors use the events.k8s.io labels.
        let selected = ok(
            &s,
            &[
                "get",
                "events.events.k8s.io",
                "-o",
                "name",
                &format!("--chunk-size={chunk}"),
                "--field-selector",
                "regarding.name=web,reportingController=example.com/tester",
            ],
        );
        assert_eq!(selected.trim(), "event.events.k8s.io/web.v1");
    }
    let (failed, _, err) = s
        .kubectl(&[
            "get",
            "events.events.k8s.io",
            "--field-selector",
            "involvedObject.name=web",
        ])
        .expect("kubectl runs");
    assert!(
        !failed && err.contains("field label not supported"),
        "{err}"
    );

    // Tables of both APIs.
    let table = ok(&s, &["get", "events.events.k8s.io"]);
    assert!(
        table.contains("Checked") && table.contains("Legacy"),
        "{table}"
    );
    let table = ok(&s, &["get", "events"]);
    assert!(
        table.contains("Checked") && table.contains("Legacy"),
        "{table}"
    );

    // Deleting through one API removes the event from the other.
    ok(&s, &["delete", "events.events.k8s.io", "web.core"]);
    let (found, _, err) = s
        .kubectl(&["get", "events", "web.core"])
        .expect("kubectl runs");
    assert!(!found && err.contains("NotFound"), "{err}");
    ok(&s, &["delete", "events", "web.v1"]);
    let (found, _, err) = s
        .kubectl(&["get", "events.events.k8s.io", "web.v1"])
        .expect("kubectl runs");
    assert!(!found && err.contains("NotFound"), "{err}");
}

#[test]
fn events_v1_validation_requires_the_new_fields() {
    let (_d, s) = server();
    let uid = pod(&s);
    let doc = events_v1_event("bad", &uid)
        .replace("action: Checking\n", "")
        .replace("type: Normal", "type: Odd");
    let (created, _, err) = create(&s, &doc);
    assert!(!created, "created an invalid event");
    assert!(err.contains("action: Required value"), "{err}");
    assert!(err.contains("has invalid value: Odd"), "{err}");
    // Core events keep the legacy rules.
    let (created, _, err) = create(&s, &core_event("fine"));
    assert!(created, "{err}");
}

#[test]
fn events_v1_watch_sees_core_events_and_core_watch_sees_v1_events() {
    let (_d, s) = server();
    let uid = pod(&s);
    let spawn = |resource: &str| {
        let mut child = s
            .kubectl_spawn(&["get", resource, "-w", "-o", "name"])
            .expect("spawn watch");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    };
    let (mut v1_watch, v1_lines) = spawn("events.v1.events.k8s.io");
    let (mut core_watch, core_lines) = spawn("events");
    // Core-created events until the events.k8s.io watch (once established) shows one.
    let mut seen = None;
    for i in 0..30 {
        let (created, _, err) = create(&s, &core_event(&format!("core-{i}")));
        assert!(created, "{err}");
        if let Ok(line) = v1_lines.recv_timeout(Duration::from_secs(2)) {
            seen = Some(line);
            break;
        }
    }
    let first = seen.expect("the events.k8s.io watch printed a core event");
    assert!(first.starts_with("event.events.k8s.io/core-"), "{first}");

    let (created, _, err) = create(&s, &events_v1_event("from-v1", &uid));
    assert!(created, "{err}");
    let mut core_seen = Vec::new();
    while let Ok(l) = core_lines.recv_timeout(Duration::from_secs(5)) {
        let done = l == "event/from-v1";
        core_seen.push(l);
        if done {
            break;
        }
    }
    for child in [&mut v1_watch, &mut core_watch] {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(
        core_seen.iter().any(|l| l == "event/from-v1"),
        "{core_seen:?}"
    );

    // A raw events.k8s.io watch from the start gets converted objects (cache path).
    let out = ok(
        &s,
        &[
            "get",
            "--raw",
            "/apis/events.k8s.io/v1/namespaces/default/events?watch=1&timeoutSeconds=1",
        ],
    );
    let lines: Vec<Value> = out.lines().map(json).collect();
    assert!(!lines.is_empty(), "{out}");
    for l in &lines {
        assert_eq!(l["object"]["apiVersion"], "events.k8s.io/v1", "{l}");
        assert!(l["object"].get("regarding").is_some(), "{l}");
    }
    // And resumed from an old revision (history from the cache window or the store).
    let out = ok(
        &s,
        &[
            "get",
            "--raw",
            "/apis/events.k8s.io/v1/namespaces/default/events?watch=1&resourceVersion=1&timeoutSeconds=1&fieldSelector=regarding.name%3Dweb",
        ],
    );
    let lines: Vec<Value> = out.lines().map(json).collect();
    assert!(
        lines
            .iter()
            .any(|l| l["object"]["metadata"]["name"] == "from-v1"),
        "{out}"
    );
    for l in &lines {
        assert_eq!(l["object"]["apiVersion"], "events.k8s.io/v1", "{l}");
    }
}

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    Client::try_from(config).expect("kube client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_recorder_events_show_in_kubectl_describe() {
    let (_d, s) = server();
    pod(&s);
    let client = client(&s).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let web = pods.get("web").await.expect("get pod");
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: web.metadata.name.clone(),
        namespace: web.metadata.namespace.clone(),
        uid: web.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "capstan-e2e".into(),
            instance: Some("e2e-0".into()),
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "Reconciled".into(),
        note: Some("published by kube-rs".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    // The first publish creates the event, the second patches its series.
    recorder
        .publish(&event, &reference)
        .await
        .expect("publish creates");
    recorder
        .publish(&event, &reference)
        .await
        .expect("publish patches the series");

    let described = ok(&s, &["describe", "pod", "web"]);
    assert!(described.contains("Reconciled"), "{described}");
    assert!(described.contains("published by kube-rs"), "{described}");
    let list = json(&ok(&s, &["get", "events", "-o", "json"]));
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["message"], "published by kube-rs");
    assert_eq!(items[0]["series"]["count"], 2, "{list}");
    assert_eq!(items[0]["reportingComponent"], "capstan-e2e");
}
