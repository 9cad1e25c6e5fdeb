//! Protobuf answers (`Accept: application/vnd.kubernetes.protobuf`) as kube-apiserver writes
//! them: `k8s\0` + `runtime.Unknown{typeMeta, raw, "", ""}` for objects, lists and Status
//! errors; `;stream=watch` as 4-byte big-endian length frames of bare `WatchEvent{type,
//! object{raw}}`. Checked with curl on the raw bytes (decoded here by a small wire-format
//! reader) and with stock kubectl, whose Go decoder reads them (`describe`, `events --watch`)
//! and whose Go encoder writes an object it read back (`auth reconcile`): the bytes Go writes
//! for what it decoded from ours are ours, byte for byte.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::ServerProcess;
use serde_json::Value;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A tiny protobuf wire-format reader: the fields of one message, in order.
mod wire {
    /// One field's value.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) enum V<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
        Fixed(u64),
    }

    fn varint(b: &[u8], pos: &mut usize) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[*pos];
            *pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
            shift += 7;
        }
    }

    /// All fields of `b` as (number, value), in wire order.
    pub(crate) fn fields(b: &[u8]) -> Vec<(u32, V<'_>)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < b.len() {
            let key = varint(b, &mut pos);
            let number = (key >> 3) as u32;
            let v = match key & 7 {
                0 => V::Varint(varint(b, &mut pos)),
                1 => {
                    let v = u64::from_le_bytes(b[pos..pos + 8].try_into().unwrap());
                    pos += 8;
                    V::Fixed(v)
                }
                2 => {
                    let len = varint(b, &mut pos) as usize;
                    let v = &b[pos..pos + len];
                    pos += len;
                    V::Bytes(v)
                }
                5 => {
                    let v = u32::from_le_bytes(b[pos..pos + 4].try_into().unwrap());
                    pos += 4;
                    V::Fixed(u64::from(v))
                }
                t => panic!("wire type {t} at {pos}"),
            };
            out.push((number, v));
        }
        out
    }

    /// Every length-delimited field `number` of `b`.
    pub(crate) fn all(b: &[u8], number: u32) -> Vec<&[u8]> {
        fields(b)
            .into_iter()
            .filter_map(|(n, v)| match (n == number, v) {
                (true, V::Bytes(x)) => Some(x),
                _ => None,
            })
            .collect()
    }

    /// The (first) length-delimited field `number` of `b`.
    pub(crate) fn get(b: &[u8], number: u32) -> Option<&[u8]> {
        all(b, number).into_iter().next()
    }

    /// Field `number` of `b` as a string ("" when absent).
    pub(crate) fn string(b: &[u8], number: u32) -> String {
        get(b, number)
            .map(|x| String::from_utf8_lossy(x).into_owned())
            .unwrap_or_default()
    }

    /// The varint field `number` of `b`.
    pub(crate) fn int(b: &[u8], number: u32) -> Option<u64> {
        fields(b)
            .into_iter()
            .find_map(|(n, v)| match (n == number, v) {
                (true, V::Varint(x)) => Some(x),
                _ => None,
            })
    }

    /// Field numbers of `b` never go down (Go writes them in field-number order).
    pub(crate) fn ascending(b: &[u8]) -> bool {
        let numbers: Vec<u32> = fields(b).into_iter().map(|(n, _)| n).collect();
        numbers.windows(2).all(|w| w[0] <= w[1])
    }
}

/// A decoded `k8s\0` envelope: apiVersion, kind, raw.
fn envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    let rest = body
        .strip_prefix(b"k8s\0")
        .unwrap_or_else(|| panic!("no k8s\\0 prefix: {:?}", String::from_utf8_lossy(body)));
    let fields = wire::fields(rest);
    let numbers: Vec<u32> = fields.iter().map(|(n, _)| *n).collect();
    // Unknown{typeMeta, raw, contentEncoding "", contentType ""}, all four written.
    assert_eq!(numbers, [1, 2, 3, 4], "Unknown fields");
    assert_eq!(wire::string(rest, 3), "");
    assert_eq!(wire::string(rest, 4), "");
    let tm = wire::get(rest, 1).expect("typeMeta");
    (
        wire::string(tm, 1),
        wire::string(tm, 2),
        wire::get(rest, 2).expect("raw").to_vec(),
    )
}

/// One raw answer.
struct Answer {
    code: u16,
    content_type: String,
    body: Vec<u8>,
}

/// One request with the admin's client certificate; `body` is JSON.
fn curl(s: &ServerProcess, method: &str, path: &str, accept: &str, body: Option<&str>) -> Answer {
    let pki = s.data_dir.join("pki");
    let out_file = s
        .data_dir
        .with_extension(format!("curl-{}", std::process::id()));
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", method, "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-A", "e2e", "-w", "%{http_code} %{content_type}", "-o"])
        .arg(&out_file)
        .args(["-H", &format!("Accept: {accept}")]);
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    let out = cmd
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl runs");
    let tail = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, content_type) = tail.split_once(' ').unwrap_or((&tail, ""));
    let body = std::fs::read(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    Answer {
        code: code.parse().expect("status code"),
        content_type: content_type.to_owned(),
        body,
    }
}

fn json_get(s: &ServerProcess, path: &str) -> Value {
    let a = curl(s, "GET", path, "application/json", None);
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    serde_json::from_slice(&a.body).expect("JSON")
}

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, server)
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn objects_lists_and_errors_in_protobuf() {
    let (_dir, s) = server();
    // create: a JSON body, a protobuf answer.
    let a = curl(
        &s,
        "POST",
        CMS,
        PROTOBUF,
        Some(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","labels":{"z":"1","a":"2"}},"data":{"k2":"v2","k1":"v1"}}"#,
        ),
    );
    assert_eq!(a.code, 201, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, PROTOBUF);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    let meta = wire::get(&raw, 1).expect("metadata");
    assert_eq!(wire::string(meta, 1), "cm");

    // get: the same object as the JSON answer says.
    let a = curl(&s, "GET", &format!("{CMS}/cm"), PROTOBUF, None);
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, PROTOBUF);
    let (_, kind, raw) = envelope(&a.body);
    assert_eq!(kind, "ConfigMap");
    let j = json_get(&s, &format!("{CMS}/cm"));
    assert!(wire::ascending(&raw));
    let meta = wire::get(&raw, 1).expect("metadata");
    assert!(wire::ascending(meta));
    assert_eq!(wire::string(meta, 1), "cm");
    // Non-pointer strings are written even when empty: generateName is there, as "".
    assert_eq!(wire::get(meta, 2), Some(&b""[..]));
    assert_eq!(wire::string(meta, 3), "default");
    assert_eq!(
        wire::string(meta, 5),
        j["metadata"]["uid"].as_str().unwrap()
    );
    assert_eq!(
        wire::string(meta, 6),
        j["metadata"]["resourceVersion"].as_str().unwrap()
    );
    // creationTimestamp: Time{seconds, nanos: 0}.
    let ts = wire::get(meta, 8).expect("creationTimestamp");
    assert_eq!(
        wire::int(ts, 1).map(|s| s as i64),
        Some(unix_seconds(
            j["metadata"]["creationTimestamp"].as_str().unwrap()
        ))
    );
    assert_eq!(wire::int(ts, 2), Some(0));
    // Maps: entries sorted by key (labels are field 11, data field 2).
    let labels: Vec<(String, String)> = wire::all(meta, 11)
        .into_iter()
        .map(|e| (wire::string(e, 1), wire::string(e, 2)))
        .collect();
    assert_eq!(
        labels,
        [("a".into(), "2".into()), ("z".into(), "1".into())],
        "labels"
    );
    let data: Vec<String> = wire::all(&raw, 2)
        .into_iter()
        .map(|e| wire::string(e, 1))
        .collect();
    assert_eq!(data, ["k1", "k2"]);
    // managedFields (17) carry FieldsV1 (7) holding the JSON the JSON answer has.
    let mf = wire::get(meta, 17).expect("managedFields");
    assert_eq!(wire::string(mf, 1), "e2e");
    let fields_v1: Value =
        serde_json::from_slice(wire::get(wire::get(mf, 7).unwrap(), 1).unwrap()).unwrap();
    assert_eq!(fields_v1, j["metadata"]["managedFields"][0]["fieldsV1"]);

    // list: ConfigMapList{metadata{resourceVersion}, items}.
    let a = curl(
        &s,
        "GET",
        CMS,
        &format!("{PROTOBUF}, application/json"),
        None,
    );
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, PROTOBUF);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "ConfigMapList"));
    let list_meta = wire::get(&raw, 1).expect("list metadata");
    assert!(!wire::string(list_meta, 2).is_empty(), "resourceVersion");
    let items = wire::all(&raw, 2);
    let names: Vec<String> = items
        .iter()
        .map(|i| wire::string(wire::get(i, 1).unwrap(), 1))
        .collect();
    assert!(names.contains(&"cm".to_owned()), "{names:?}");

    // metadata only, as client-go's metadata informers ask for it.
    let a = curl(
        &s,
        "GET",
        &format!("{CMS}/cm"),
        &format!("{PROTOBUF};as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"),
        None,
    );
    assert_eq!(a.code, 200);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!(
        (av.as_str(), kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    assert_eq!(wire::string(wire::get(&raw, 1).unwrap(), 1), "cm");
    assert_eq!(wire::fields(&raw).len(), 1, "metadata only");

    // kube-aggregator's APIService (its own proto package), built-in ones included.
    // The in-process metrics server registers its APIService after start-up: wait for
    // it, so the protobuf and JSON reads below see the same set.
    let mut registered = false;
    for _ in 0..600 {
        let j = json_get(&s, "/apis/apiregistration.k8s.io/v1/apiservices");
        if j["items"].as_array().is_some_and(|i| {
            i.iter()
                .any(|x| x["metadata"]["name"] == "v1beta1.metrics.k8s.io")
        }) {
            registered = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(registered, "the metrics APIService was never registered");
    let a = curl(
        &s,
        "GET",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        PROTOBUF,
        None,
    );
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, PROTOBUF);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!(
        (av.as_str(), kind.as_str()),
        ("apiregistration.k8s.io/v1", "APIServiceList")
    );
    let j = json_get(&s, "/apis/apiregistration.k8s.io/v1/apiservices");
    let items = wire::all(&raw, 2);
    assert!(!items.is_empty(), "no built-in APIService");
    assert_eq!(items.len(), j["items"].as_array().unwrap().len());
    for (item, want) in items.iter().zip(j["items"].as_array().unwrap()) {
        let spec = wire::get(item, 2).expect("spec");
        assert_eq!(
            wire::string(wire::get(item, 1).unwrap(), 1),
            want["metadata"]["name"]
        );
        assert_eq!(
            wire::string(spec, 2),
            want["spec"]["group"].as_str().unwrap_or("")
        );
        assert_eq!(wire::string(spec, 3), want["spec"]["version"]);
        // `service` is a pointer: absent for local groups.
        assert_eq!(
            wire::get(spec, 1).is_some(),
            want["spec"]["service"].is_object()
        );
        assert_eq!(
            wire::int(spec, 7).map(|v| v as i64),
            want["spec"]["groupPriorityMinimum"].as_i64()
        );
    }

    // An error: a protobuf Status.
    let a = curl(&s, "GET", &format!("{CMS}/missing"), PROTOBUF, None);
    assert_eq!(a.code, 404);
    assert_eq!(a.content_type, PROTOBUF);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "Status"));
    assert_eq!(wire::string(&raw, 2), "Failure");
    assert_eq!(wire::string(&raw, 3), "configmaps \"missing\" not found");
    assert_eq!(wire::string(&raw, 4), "NotFound");
    assert_eq!(wire::int(&raw, 6), Some(404));
    let details = wire::get(&raw, 5).expect("details");
    assert_eq!(wire::string(details, 1), "missing");
    assert_eq!(wire::string(details, 3), "configmaps");

    // A Table has no protobuf form: 406, as upstream.
    let a = curl(
        &s,
        "GET",
        CMS,
        &format!("{PROTOBUF};as=Table;g=meta.k8s.io;v=v1"),
        None,
    );
    assert_eq!(a.code, 406, "{}", String::from_utf8_lossy(&a.body));

    // JSON clients see what they saw before.
    let a = curl(&s, "GET", &format!("{CMS}/cm"), "application/json", None);
    assert_eq!(a.content_type, "application/json");
    assert!(a.body.starts_with(b"{\"kind\":\"ConfigMap\""));
}

/// Seconds since the epoch of an RFC 3339 UTC time `YYYY-MM-DDTHH:MM:SSZ`.
fn unix_seconds(t: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| t[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
}

/// Splits a protobuf watch body into (type, object envelope) events.
fn frames(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let len = u32::from_be_bytes(body[pos..pos + 4].try_into().unwrap()) as usize;
        let event = &body[pos + 4..pos + 4 + len];
        pos += 4 + len;
        // A bare WatchEvent{1: type, 2: RawExtension{1: raw}} (no envelope of its own).
        assert!(!event.starts_with(b"k8s\0"));
        let object = wire::get(wire::get(event, 2).expect("object"), 1).expect("raw");
        out.push((wire::string(event, 1), object.to_vec()));
    }
    out
}

#[test]
fn watch_streams_length_prefixed_watch_events() {
    let (_dir, s) = server();
    let create = |name: &str| {
        let a = curl(
            &s,
            "POST",
            CMS,
            "application/json",
            Some(&format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#
            )),
        );
        assert_eq!(a.code, 201);
    };
    create("w1");
    let rv = json_get(&s, CMS)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    create("w2");
    let a = curl(&s, "DELETE", &format!("{CMS}/w1"), "application/json", None);
    assert_eq!(a.code, 200);

    // From the current state (synthetic ADDED), then until the timeout closes it.
    let a = curl(
        &s,
        "GET",
        &format!("{CMS}?watch=true&timeoutSeconds=1"),
        &format!("{PROTOBUF}, application/json"),
        None,
    );
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, format!("{PROTOBUF};stream=watch"));
    let events = frames(&a.body);
    let added: Vec<String> = events
        .iter()
        .map(|(t, o)| {
            assert_eq!(t, "ADDED");
            let (av, kind, raw) = envelope(o);
            assert_eq!((av.as_str(), kind.as_str()), ("v1", "ConfigMap"));
            wire::string(wire::get(&raw, 1).unwrap(), 1)
        })
        .collect();
    assert_eq!(added, ["w2"]);

    // From a resourceVersion: the changes after it, in order.
    let a = curl(
        &s,
        "GET",
        &format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
        &format!("{PROTOBUF};stream=watch"),
        None,
    );
    assert_eq!(a.code, 200);
    let seen: Vec<(String, String)> = frames(&a.body)
        .iter()
        .map(|(t, o)| {
            let (_, _, raw) = envelope(o);
            (t.clone(), wire::string(wire::get(&raw, 1).unwrap(), 1))
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED".into(), "w2".into()),
            ("DELETED".into(), "w1".into())
        ]
    );

    // A bad watch is an error Status in protobuf.
    let a = curl(
        &s,
        "GET",
        &format!("{CMS}?watch=true&resourceVersion=abc"),
        PROTOBUF,
        None,
    );
    assert_eq!(a.code, 400, "{}", String::from_utf8_lossy(&a.body));
    let (_, kind, _) = envelope(&a.body);
    assert_eq!(kind, "Status");
}

/// The bodies kubectl `-v=9` logged, in order: ("Request"|"Response", bytes) for the
/// protobuf ones (hex dumps).
fn logged_bodies(stderr: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<u8>)> = None;
    for line in stderr.lines() {
        if line.contains("\"Request Body\" body=<") || line.contains("\"Response Body\" body=<") {
            let which = if line.contains("Request Body") {
                "Request"
            } else {
                "Response"
            };
            current = Some((which.to_owned(), Vec::new()));
            continue;
        }
        let Some((_, bytes)) = current.as_mut() else {
            continue;
        };
        let l = line.trim_start_matches('\t');
        let is_dump = l.len() > 10 && l[..8].bytes().all(|b| b.is_ascii_hexdigit());
        if !is_dump {
            if let Some(done) = current.take().filter(|(_, b)| !b.is_empty()) {
                out.push(done);
            }
            continue;
        }
        // `00000010  73 70 61 …  |ascii|`: the hex bytes end where the ASCII column starts.
        bytes.extend(
            l[8..]
                .split_whitespace()
                .take_while(|h| h.len() == 2 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .filter_map(|h| u8::from_str_radix(h, 16).ok()),
        );
    }
    if let Some(done) = current.filter(|(_, b)| !b.is_empty()) {
        out.push(done);
    }
    out
}

fn kubectl_ok(s: &ServerProcess, args: &[&str]) -> (String, String) {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(ok, "kubectl {args:?}: {err}");
    (out, err)
}

#[test]
fn stock_kubectl_reads_and_rewrites_protobuf() {
    let (dir, s) = server();
    // Typed commands send protobuf and accept it first: the answers are decoded by Go.
    kubectl_ok(&s, &["create", "namespace", "pb"]);
    let (out, err) = kubectl_ok(
        &s,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
            "-n",
            "pb",
            "-v=8",
        ],
    );
    assert!(out.contains("deployment.apps/web created"), "{out}");
    assert!(
        err.contains(&format!("Content-Type: {PROTOBUF}")),
        "no protobuf answer: {err}"
    );
    let (out, _) = kubectl_ok(
        &s,
        &[
            "create",
            "service",
            "clusterip",
            "web",
            "--tcp=80:8080",
            "-n",
            "pb",
        ],
    );
    assert!(out.contains("service/web created"), "{out}");
    let (out, _) = kubectl_ok(&s, &["describe", "service", "web", "-n", "pb"]);
    for want in [
        "Type:                     ClusterIP",
        "TargetPort:               8080/TCP",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
    let (out, _) = kubectl_ok(&s, &["describe", "deployment", "web", "-n", "pb"]);
    for want in [
        "Namespace:              pb",
        "Labels:                 app=web",
        "2 desired",
        "RollingUpdateStrategy:  25% max unavailable, 25% max surge",
        "Image:         nginx",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }

    // `auth reconcile` GETs the role in protobuf and PUTs it back in protobuf with the new
    // rule: Go re-encodes the metadata it decoded from our bytes, so both must be equal.
    kubectl_ok(
        &s,
        &[
            "create",
            "role",
            "reader",
            "-n",
            "pb",
            "--verb=get,list",
            "--resource=pods",
        ],
    );
    kubectl_ok(
        &s,
        &["label", "role", "reader", "-n", "pb", "team=blue", "app=x"],
    );
    kubectl_ok(
        &s,
        &["annotate", "role", "reader", "-n", "pb", "note=hello"],
    );
    let file = dir.path().join("role.yaml");
    std::fs::write(
        &file,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: reader\n  namespace: pb\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [\"list\"]\n",
    )
    .unwrap();
    let (_, err) = kubectl_ok(
        &s,
        &["auth", "reconcile", "-f", &file.to_string_lossy(), "-v=9"],
    );
    let bodies = logged_bodies(&err);
    let got = bodies
        .iter()
        .find(|(w, b)| w == "Response" && b.starts_with(b"k8s\0"))
        .map(|(_, b)| b.clone())
        .unwrap_or_else(|| panic!("no protobuf GET answer logged: {err}"));
    let put = bodies
        .iter()
        .find(|(w, b)| w == "Request" && b.starts_with(b"k8s\0"))
        .map(|(_, b)| b.clone())
        .unwrap_or_else(|| panic!("no protobuf PUT logged: {err}"));
    let (av, kind, ours) = envelope(&got);
    assert_eq!(
        (av.as_str(), kind.as_str()),
        ("rbac.authorization.k8s.io/v1", "Role")
    );
    let (_, _, theirs) = envelope(&put);
    let ours_meta = wire::get(&ours, 1).unwrap();
    assert!(!wire::all(ours_meta, 12).is_empty(), "annotations");
    assert_eq!(
        ours_meta,
        wire::get(&theirs, 1).unwrap(),
        "Go re-encoded our metadata differently"
    );
    // The existing rule, as Go writes it again, then the added one.
    let (ours_rules, their_rules) = (wire::all(&ours, 2), wire::all(&theirs, 2));
    assert_eq!(ours_rules.len(), 1);
    assert_eq!(their_rules.len(), 2);
    assert_eq!(ours_rules[0], their_rules[0]);
    let (out, _) = kubectl_ok(&s, &["get", "role", "reader", "-n", "pb", "-o", "json"]);
    let role: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(role["rules"].as_array().map(Vec::len), Some(2), "{role}");

    // `kubectl events --watch` watches in protobuf and prints the decoded events.
    let log = dir.path().join("events.out");
    let mut watcher = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
        .arg(format!("--cache-dir={}", s.cache_dir.display()))
        .args(["events", "-n", "pb", "--watch", "-v=8"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("events.err")).unwrap())
        .spawn()
        .expect("kubectl events runs");
    let event = dir.path().join("event.json");
    std::fs::write(
        &event,
        r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e1","namespace":"pb"},
            "involvedObject":{"kind":"Deployment","name":"web","namespace":"pb"},
            "reason":"Tested","message":"hello from protobuf","type":"Normal",
            "firstTimestamp":"2026-01-01T00:00:00Z","lastTimestamp":"2026-01-01T00:00:00Z",
            "count":1,"source":{"component":"e2e"}}"#,
    )
    .unwrap();
    kubectl_ok(&s, &["create", "-f", &event.to_string_lossy()]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let printed = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("hello from protobuf") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = watcher.kill();
    let _ = watcher.wait();
    let mut err = String::new();
    let _ =
        std::fs::File::open(dir.path().join("events.err")).map(|mut f| f.read_to_string(&mut err));
    assert!(
        printed.contains("hello from protobuf") && printed.contains("Tested"),
        "kubectl events --watch printed {printed:?}; log: {err}"
    );
    assert!(
        err.contains(&format!("Content-Type: {PROTOBUF};stream=watch")),
        "the watch was not protobuf: {err}"
    );
}

/// Custom resources have no protobuf form: JSON when the client also accepts JSON (every
/// Go client does), upstream's 406 when it accepts protobuf only.
#[test]
fn custom_resources_fall_back_to_json() {
    let (dir, s) = server();
    let crd = dir.path().join("crd.json");
    std::fs::write(
        &crd,
        r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
            "metadata":{"name":"gadgets.example.com"},
            "spec":{"group":"example.com","scope":"Namespaced",
              "names":{"plural":"gadgets","singular":"gadget","kind":"Gadget"},
              "versions":[{"name":"v1","served":true,"storage":true,
                "schema":{"openAPIV3Schema":{"type":"object",
                  "x-kubernetes-preserve-unknown-fields":true}}}]}}"#,
    )
    .unwrap();
    kubectl_ok(&s, &["create", "-f", &crd.to_string_lossy()]);
    kubectl_ok(
        &s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/gadgets.example.com",
        ],
    );
    let path = "/apis/example.com/v1/namespaces/default/gadgets";
    let body =
        r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g1"},"size":3}"#;
    let a = curl(
        &s,
        "POST",
        path,
        &format!("{PROTOBUF}, application/json"),
        Some(body),
    );
    assert_eq!(a.code, 201, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, "application/json");
    let a = curl(
        &s,
        "GET",
        &format!("{path}/g1"),
        &format!("{PROTOBUF}, application/json"),
        None,
    );
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, "application/json");
    let obj: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(obj["size"], 3);
    let a = curl(&s, "GET", &format!("{path}/g1"), PROTOBUF, None);
    assert_eq!(a.code, 406, "{}", String::from_utf8_lossy(&a.body));
    // Its errors too are in the custom resource's media types (upstream negotiates them with
    // the CR's serializers): JSON.
    assert_eq!(a.content_type, "application/json");
    let a = curl(
        &s,
        "GET",
        &format!("{path}/missing"),
        &format!("{PROTOBUF}, application/json"),
        None,
    );
    assert_eq!(a.code, 404);
    assert_eq!(a.content_type, "application/json");
    // A watch too: the JSON stream.
    let a = curl(
        &s,
        "GET",
        &format!("{path}?watch=true&timeoutSeconds=1"),
        &format!("{PROTOBUF}, application/json"),
        None,
    );
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, "application/json");
    assert!(a.body.starts_with(b"{\"type\":\"ADDED\""));

    crds_in_protobuf(&s, dir.path());
}

/// The definitions themselves (apiextensions.k8s.io/v1) answer in protobuf, as upstream
/// (their proto is compiled into kube-apiserver): create, get, list, watch; the schema's
/// `x-kubernetes-preserve-unknown-fields` is field 38 of `JSONSchemaProps`, the
/// `JSONSchemaPropsOrArray` union holds `items`. Our decoder reads the bytes back (a PUT of
/// the protobuf body) to the same spec.
fn crds_in_protobuf(s: &ServerProcess, dir: &std::path::Path) {
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let body = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
        "metadata":{"name":"sprockets.example.com"},
        "spec":{"group":"example.com","scope":"Cluster",
          "names":{"plural":"sprockets","singular":"sprocket","kind":"Sprocket"},
          "versions":[{"name":"v1","served":true,"storage":true,
            "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object",
              "properties":{"teeth":{"type":"array","items":{"type":"integer","minimum":3}},
                "note":{"type":"string","default":"plain"}}}},
              "x-kubernetes-preserve-unknown-fields":true}}}]}}"#;
    let a = curl(s, "POST", CRDS, PROTOBUF, Some(body));
    assert_eq!(a.code, 201, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, PROTOBUF);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!(
        (av.as_str(), kind.as_str()),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    );
    assert!(wire::ascending(&raw));
    assert_eq!(
        wire::string(wire::get(&raw, 1).unwrap(), 1),
        "sprockets.example.com"
    );

    // Established first: the controller's status writes are done, so the PUT below does
    // not race them.
    kubectl_ok(
        s,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd/sprockets.example.com",
        ],
    );
    let a = curl(
        s,
        "GET",
        &format!("{CRDS}/sprockets.example.com"),
        PROTOBUF,
        None,
    );
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    let (_, kind, raw) = envelope(&a.body);
    assert_eq!(kind, "CustomResourceDefinition");
    let spec = wire::get(&raw, 2).expect("spec");
    assert_eq!(wire::string(spec, 1), "example.com");
    assert_eq!(wire::string(spec, 4), "Cluster");
    let version = wire::get(spec, 7).expect("versions");
    let schema = wire::get(wire::get(version, 4).expect("schema"), 1).expect("openAPIV3Schema");
    assert_eq!(wire::string(schema, 5), "object");
    assert_eq!(
        wire::int(schema, 38),
        Some(1),
        "x-kubernetes-preserve-unknown-fields"
    );
    // properties (map field 29): entry{key, JSONSchemaProps}.
    let spec_props = wire::all(schema, 29)
        .into_iter()
        .find(|e| wire::string(e, 1) == "spec")
        .and_then(|e| wire::get(e, 2))
        .expect("properties.spec");
    let teeth = wire::all(spec_props, 29)
        .into_iter()
        .find(|e| wire::string(e, 1) == "teeth")
        .and_then(|e| wire::get(e, 2))
        .expect("properties.teeth");
    // items: JSONSchemaPropsOrArray{schema: {type: integer, minimum: 3.0}}.
    let items = wire::get(wire::get(teeth, 24).expect("items"), 1).expect("items.schema");
    assert_eq!(wire::string(items, 5), "integer");
    let minimum = wire::fields(items)
        .into_iter()
        .find_map(|(n, v)| match (n, v) {
            (11, wire::V::Fixed(x)) => Some(f64::from_bits(x)),
            _ => None,
        });
    assert_eq!(minimum, Some(3.0));
    // default: apiextensions JSON{raw: the value's JSON bytes}.
    let note = wire::all(spec_props, 29)
        .into_iter()
        .find(|e| wire::string(e, 1) == "note")
        .and_then(|e| wire::get(e, 2))
        .expect("properties.note");
    assert_eq!(
        wire::string(wire::get(note, 8).expect("default"), 1),
        r#""plain""#
    );

    // Our protobuf, sent back as a request body, decodes to the same definition.
    let before = json_get(s, &format!("{CRDS}/sprockets.example.com"));
    let pb = dir.join("crd.pb");
    std::fs::write(&pb, &a.body).unwrap();
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "-X", "PUT", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-H", &format!("Content-Type: {PROTOBUF}")])
        .args(["-H", "Accept: application/json", "-w", "\n%{http_code}"])
        .arg("--data-binary")
        .arg(format!("@{}", pb.display()))
        .arg(format!("{}{CRDS}/sprockets.example.com", s.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.ends_with("\n200"), "{text}");
    let after: Value = serde_json::from_str(text.trim_end_matches("\n200")).unwrap();
    assert_eq!(after["spec"], before["spec"]);

    let a = curl(s, "GET", CRDS, PROTOBUF, None);
    assert_eq!(a.code, 200);
    let (_, kind, raw) = envelope(&a.body);
    assert_eq!(kind, "CustomResourceDefinitionList");
    let names: Vec<String> = wire::all(&raw, 2)
        .into_iter()
        .map(|item| wire::string(wire::get(item, 1).unwrap(), 1))
        .collect();
    assert!(
        names.contains(&"sprockets.example.com".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"gadgets.example.com".to_owned()),
        "{names:?}"
    );

    let a = curl(
        s,
        "GET",
        &format!("{CRDS}?watch=true&timeoutSeconds=1"),
        PROTOBUF,
        None,
    );
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, format!("{PROTOBUF};stream=watch"));
    let kinds: Vec<String> = frames(&a.body)
        .iter()
        .map(|(t, o)| {
            assert_eq!(t, "ADDED");
            envelope(o).1
        })
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds.iter().all(|k| k == "CustomResourceDefinition"));
}

/// `kubectl certificate approve` GETs the CSR in protobuf and PUTs it to `approval` in
/// protobuf with one more condition: Go re-encodes the metadata and spec (bytes, lists,
/// pointers, the requester's extra) it decoded from our answer, byte for byte.
#[test]
fn csr_approval_reencodes_our_bytes() {
    use base64::Engine as _;
    let (_dir, s) = server();
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bob");
    let req = params.serialize_request(&key).expect("csr");
    let pem = req.pem().expect("pem");
    let manifest = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: bob\n  labels:\n    b: \"2\"\n    a: \"1\"\nspec:\n  request: {}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 3600\n  usages:\n  - digital signature\n  - client auth\n",
        base64::engine::general_purpose::STANDARD.encode(pem)
    );
    let (ok, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&manifest))
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let (_, err) = kubectl_ok(&s, &["certificate", "approve", "bob", "-v=9"]);
    let bodies = logged_bodies(&err);
    let got = bodies
        .iter()
        .find(|(w, b)| w == "Response" && b.starts_with(b"k8s\0"))
        .map(|(_, b)| b.clone())
        .unwrap_or_else(|| panic!("no protobuf GET answer logged: {err}"));
    let put = bodies
        .iter()
        .find(|(w, b)| w == "Request" && b.starts_with(b"k8s\0"))
        .map(|(_, b)| b.clone())
        .unwrap_or_else(|| panic!("no protobuf PUT logged: {err}"));
    let (av, kind, ours) = envelope(&got);
    assert_eq!(
        (av.as_str(), kind.as_str()),
        ("certificates.k8s.io/v1", "CertificateSigningRequest")
    );
    let (_, _, theirs) = envelope(&put);
    for field in [1, 2] {
        assert_eq!(
            wire::get(&ours, field).map(<[u8]>::to_vec),
            wire::get(&theirs, field).map(<[u8]>::to_vec),
            "Go re-encoded field {field} differently"
        );
    }
    // The approval is a new condition in the status Go wrote.
    let status = wire::get(&theirs, 3).expect("status");
    let condition = wire::get(status, 1).expect("condition");
    assert_eq!(wire::string(condition, 1), "Approved");
}

/// `kubectl debug --copy-to` reads a pod (JSON), copies it and POSTs the copy in protobuf:
/// Go's encoding of the pod spec it decoded must equal ours for the same pod, field by field
/// (all but the fields the copy changes: the added container, `nodeName`,
/// `shareProcessNamespace`).
#[test]
fn pod_spec_encodes_as_go_encodes_it() {
    let (_dir, s) = server();
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"b":"2","a":"1"}},
      "spec":{"containers":[{"name":"web","image":"nginx","ports":[{"containerPort":80,"name":"http"}],
          "env":[{"name":"X","value":"1"},{"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}],
          "resources":{"requests":{"cpu":"250m","memory":"64Mi"},"limits":{"memory":"128Mi"}},
          "volumeMounts":[{"name":"scratch","mountPath":"/scratch"}],
          "securityContext":{"runAsNonRoot":true,"capabilities":{"drop":["ALL"]}}}],
        "volumes":[{"name":"scratch","emptyDir":{"sizeLimit":"1Gi"}},
          {"name":"cfg","configMap":{"name":"c","defaultMode":420,"optional":true}}],
        "nodeSelector":{"zone":"a","disk":"ssd"},
        "tolerations":[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}],
        "securityContext":{"runAsUser":1000,"supplementalGroups":[5,6],"fsGroup":2000},
        "affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
          {"matchExpressions":[{"key":"zone","operator":"In","values":["a","b"]}]}]}}},
        "activeDeadlineSeconds":600,"hostname":"h","subdomain":"s"}}"#;
    let (ok, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(pod))
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces/default/pods/p",
        PROTOBUF,
        None,
    );
    assert_eq!(a.code, 200);
    let (_, _, ours) = envelope(&a.body);
    let (_, err) = kubectl_ok(
        &s,
        &["debug", "p", "--copy-to=p2", "--image=busybox", "-v=9"],
    );
    let put = logged_bodies(&err)
        .into_iter()
        .find(|(w, b)| w == "Request" && b.starts_with(b"k8s\0"))
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no protobuf POST logged: {err}"));
    let (_, kind, theirs) = envelope(&put);
    assert_eq!(kind, "Pod");
    let (our_spec, their_spec) = (wire::get(&ours, 2).unwrap(), wire::get(&theirs, 2).unwrap());
    let changed = [2, 10, 27];
    let numbers = |spec: &[u8]| -> Vec<u32> {
        let mut n: Vec<u32> = wire::fields(spec).into_iter().map(|(n, _)| n).collect();
        n.dedup();
        n
    };
    let mut compared = 0;
    for n in numbers(our_spec).into_iter().chain(numbers(their_spec)) {
        if changed.contains(&n) {
            continue;
        }
        let pick = |spec: &[u8]| -> String {
            let values: Vec<String> = wire::fields(spec)
                .into_iter()
                .filter(|(m, _)| *m == n)
                .map(|(_, v)| format!("{v:?}"))
                .collect();
            values.join(",")
        };
        let (o, t) = (pick(our_spec), pick(their_spec));
        assert_eq!(o, t, "pod spec field {n} differs");
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} spec fields compared");
    // The original container, as Go writes it again.
    assert_eq!(wire::all(our_spec, 2)[0], wire::all(their_spec, 2)[0]);
}

/// Discovery in protobuf, as upstream's `WriteObjectNegotiated`: meta/v1's `APIVersions`,
/// `APIGroupList`, `APIGroup`, `APIResourceList`; `/api` and `/api/v1` with an empty
/// apiVersion (upstream's stripVersionEncoder; their JSON has none either). `/version` is
/// JSON whatever the Accept (upstream's `WriteRawJSON`: indented, struct order). The
/// meta.k8s.io/v1beta1 `PartialObjectMetadataList` is its own message (items first).
#[test]
fn discovery_and_v1beta1_metadata_lists_in_protobuf() {
    let (_dir, s) = server();
    for (path, api_version, kind) in [
        ("/api", "", "APIVersions"),
        ("/apis", "v1", "APIGroupList"),
        ("/api/v1", "", "APIResourceList"),
        ("/apis/apps", "v1", "APIGroup"),
        ("/apis/apps/v1", "v1", "APIResourceList"),
    ] {
        let a = curl(&s, "GET", path, PROTOBUF, None);
        assert_eq!(a.code, 200, "{path}");
        assert_eq!(a.content_type, PROTOBUF, "{path}");
        let (av, k, raw) = envelope(&a.body);
        assert_eq!((av.as_str(), k.as_str()), (api_version, kind), "{path}");
        assert!(wire::ascending(&raw), "{path}");
        // The same document as its JSON form.
        let j = json_get(&s, path);
        assert_eq!(
            j.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            api_version
        );
        match kind {
            "APIVersions" => assert_eq!(wire::string(&raw, 1), "v1"),
            "APIGroupList" => {
                let names: Vec<String> = wire::all(&raw, 1)
                    .iter()
                    .map(|g| wire::string(g, 1))
                    .collect();
                let want: Vec<String> = j["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| g["name"].as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(names, want);
            }
            "APIGroup" => assert_eq!(wire::string(&raw, 1), "apps"),
            _ => {
                // APIResourceList{groupVersion = 1, resources = 2{name = 1, …}}.
                assert_eq!(wire::string(&raw, 1), j["groupVersion"].as_str().unwrap());
                let names: Vec<String> = wire::all(&raw, 2)
                    .iter()
                    .map(|r| wire::string(r, 1))
                    .collect();
                let want: Vec<String> = j["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["name"].as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(names, want);
            }
        }
    }

    // `/apis` spliced with an extension server's groups (the in-process metrics server
    // registers its APIService after start-up) honours `?pretty=true` and protobuf too.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let j = json_get(&s, "/apis");
        let groups = j["groups"].as_array().cloned().unwrap_or_default();
        if groups.iter().any(|g| g["name"] == "metrics.k8s.io") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metrics.k8s.io never joined /apis"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let a = curl(&s, "GET", "/apis?pretty=true", "application/json", None);
    let text = String::from_utf8(a.body).unwrap();
    assert!(
        text.starts_with("{\n  \"kind\": \"APIGroupList\",\n  \"apiVersion\": \"v1\",\n"),
        "{text}"
    );
    assert!(text.contains("\"name\": \"metrics.k8s.io\""), "{text}");
    let a = curl(&s, "GET", "/apis", PROTOBUF, None);
    let (_, kind, raw) = envelope(&a.body);
    assert_eq!(kind, "APIGroupList");
    assert!(
        wire::all(&raw, 1)
            .iter()
            .any(|g| wire::string(g, 1) == "metrics.k8s.io")
    );

    // Aggregated discovery v2 in protobuf (client-go's protobuf clients ask for it first).
    let accept = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    for root in ["/api", "/apis"] {
        let a = curl(&s, "GET", root, accept, None);
        assert_eq!(a.code, 200, "{root}");
        assert_eq!(
            a.content_type,
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        let (av, kind, raw) = envelope(&a.body);
        assert_eq!(
            (av.as_str(), kind.as_str()),
            ("apidiscovery.k8s.io/v2", "APIGroupDiscoveryList")
        );
        assert!(wire::ascending(&raw));
        // APIGroupDiscoveryList{metadata = 1, items = 2{metadata = 1{name = 1}, versions = 2}}.
        let names: Vec<String> = wire::all(&raw, 2)
            .iter()
            .map(|g| wire::string(wire::get(g, 1).unwrap(), 1))
            .collect();
        let a = curl(
            &s,
            "GET",
            root,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            None,
        );
        let j: Value = serde_json::from_slice(&a.body).unwrap();
        let want: Vec<String> = j["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(names, want, "{root}");
        // The versions' resources: APIVersionDiscovery{version = 1, resources = 2{resource = 1}}.
        let first = wire::all(&raw, 2)[0];
        let version = wire::get(first, 2).expect("versions");
        let resources: Vec<String> = wire::all(version, 2)
            .iter()
            .map(|r| wire::string(r, 1))
            .collect();
        let want: Vec<String> = j["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["resource"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(resources, want, "{root}");
    }

    let a = curl(&s, "GET", "/version", PROTOBUF, None);
    assert_eq!(a.code, 200);
    assert_eq!(a.content_type, "application/json");
    let text = String::from_utf8(a.body).unwrap();
    assert!(
        text.starts_with("{\n  \"major\": \"1\",\n  \"minor\": \"33\",\n  \"gitVersion\": "),
        "{text}"
    );
    assert!(text.ends_with("\n}"), "{text}");

    let a = curl(
        &s,
        "GET",
        "/api/v1/namespaces",
        &format!("{PROTOBUF};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1"),
        None,
    );
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.content_type, PROTOBUF);
    let (av, kind, raw) = envelope(&a.body);
    assert_eq!(
        (av.as_str(), kind.as_str()),
        ("meta.k8s.io/v1beta1", "PartialObjectMetadataList")
    );
    // items (1) come before the list's metadata (2).
    let numbers: Vec<u32> = wire::fields(&raw).into_iter().map(|(n, _)| n).collect();
    assert_eq!(numbers.last(), Some(&2), "{numbers:?}");
    let names: Vec<String> = wire::all(&raw, 1)
        .iter()
        .map(|item| wire::string(wire::get(item, 1).unwrap(), 1))
        .collect();
    assert!(names.contains(&"default".to_owned()), "{names:?}");
}
