//! `capstan server`'s memory breakdown on `/metrics` (issue 26): the store, the watch cache
//! and the in-process controllers' caches report objects and bytes, and the figures follow
//! what the cluster holds: creating ConfigMaps raises them, deleting them lowers them. Also
//! shows the root CA publisher caching only the ConfigMaps it publishes, not every one, and
//! the allocator option the server applies to itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use e2e::ServerProcess;

/// Gauges of one scrape: `name{labels}` → value.
fn scrape(s: &ServerProcess) -> HashMap<String, f64> {
    let (ok, out, err) = s
        .kubectl(&["get", "--raw", "/metrics"])
        .expect("kubectl runs");
    assert!(ok, "GET /metrics failed: {err}");
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn gauge(m: &HashMap<String, f64>, name: &str) -> f64 {
    m.get(name).copied().unwrap_or(-1.0)
}

/// Polls the scrape until `check` holds (30 s), returning it.
fn until(
    s: &ServerProcess,
    what: &str,
    check: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = scrape(s);
        if check(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached; last scrape:\n{:#?}",
            m.iter()
                .filter(|(k, _)| k.starts_with("capstan_") || k.starts_with("process_"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `count` ConfigMaps of 1 KiB named `mem-<i>` in namespace `mem`, as one List.
fn config_maps(count: usize) -> String {
    let value = "x".repeat(1024);
    let items: Vec<String> = (0..count)
        .map(|i| {
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"mem-{i}","namespace":"mem"}},"data":{{"v":"{value}"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{}]}}"#,
        items.join(",")
    )
}

const WATCH_CM_OBJECTS: &str = r#"capstan_watch_cache_objects{resource="configmaps"}"#;
const WATCH_CM_BYTES: &str = r#"capstan_watch_cache_bytes{resource="configmaps"}"#;
const GC_CM_OBJECTS: &str =
    r#"capstan_client_cache_objects{component="garbage-collector",resource="configmaps"}"#;
const GC_CM_BYTES: &str =
    r#"capstan_client_cache_bytes{component="garbage-collector",resource="configmaps"}"#;
const CM_INFORMER: &str =
    r#"capstan_client_cache_objects{component="controller-manager",resource="configmaps"}"#;
const NS_INFORMER: &str =
    r#"capstan_client_cache_objects{component="controller-manager",resource="namespaces"}"#;

/// The server re-executed itself with mimalloc's options (it reads them only from the
/// environment): same pid, the variable now in its environment.
#[test]
fn the_server_runs_with_the_allocator_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let environ = std::fs::read(format!("/proc/{}/environ", s.pid())).expect("environ read");
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|v| v == b"MIMALLOC_ARENA_EAGER_COMMIT=0"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
}

#[test]
fn memory_gauges_exist_and_follow_what_the_cluster_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=0", "--disable-scheduler"],
    )
    .expect("server starts");
    let (ok, _, err) = s
        .kubectl(&["create", "namespace", "mem"])
        .expect("kubectl runs");
    assert!(ok, "{err}");

    // Every gauge is there once the controllers' caches have synced; the root CA publisher
    // has published into the new namespace.
    let before = until(&s, "gauges present, mem namespace seen", |m| {
        gauge(m, NS_INFORMER) >= 5.0
            && gauge(m, CM_INFORMER) >= 5.0
            && gauge(m, GC_CM_OBJECTS) >= 5.0
            && gauge(m, WATCH_CM_OBJECTS) >= 5.0
    });
    for name in [
        "process_resident_memory_bytes",
        "capstan_store_keys",
        "capstan_store_revisions",
        "capstan_store_bytes",
        "capstan_store_raft_log_entries",
        "capstan_store_raft_log_bytes",
        WATCH_CM_BYTES,
        r#"capstan_watch_cache_events{resource="configmaps"}"#,
        GC_CM_BYTES,
    ] {
        assert!(gauge(&before, name) > 0.0, "{name} missing or zero");
    }

    // 100 ConfigMaps of 1 KiB: the store, the watch cache and the garbage collector's graph
    // grow by them; the root CA publisher's cache (one ConfigMap per namespace) does not.
    let manifest = dir.path().join("cms.json");
    std::fs::write(&manifest, config_maps(100)).expect("manifest written");
    let file = manifest.to_string_lossy().into_owned();
    let (ok, _, err) = s.kubectl(&["create", "-f", &file]).expect("kubectl runs");
    assert!(ok, "{err}");
    let grown = until(&s, "gauges grow by 100 ConfigMaps", |m| {
        gauge(m, WATCH_CM_OBJECTS) >= gauge(&before, WATCH_CM_OBJECTS) + 100.0
            && gauge(m, GC_CM_OBJECTS) >= gauge(&before, GC_CM_OBJECTS) + 100.0
    });
    assert!(
        gauge(&grown, "capstan_store_keys") >= gauge(&before, "capstan_store_keys") + 100.0,
        "store keys"
    );
    assert!(
        gauge(&grown, "capstan_store_bytes") >= gauge(&before, "capstan_store_bytes") + 102_400.0,
        "store bytes"
    );
    assert!(
        // Metadata and a map entry per object at least; the JSON is shared with the store.
        gauge(&grown, WATCH_CM_BYTES) >= gauge(&before, WATCH_CM_BYTES) + 10_000.0,
        "watch cache bytes"
    );
    assert!(
        gauge(&grown, GC_CM_BYTES) > gauge(&before, GC_CM_BYTES),
        "garbage collector bytes"
    );
    assert_eq!(
        gauge(&grown, CM_INFORMER),
        gauge(&before, CM_INFORMER),
        "the root CA publisher caches only kube-root-ca.crt ConfigMaps"
    );

    // Deleting them lowers the watch cache's and the garbage collector's figures again.
    let (ok, _, err) = s
        .kubectl(&["delete", "-f", &file, "--wait=false"])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    until(&s, "gauges fall after the deletions", |m| {
        gauge(m, WATCH_CM_OBJECTS) <= gauge(&grown, WATCH_CM_OBJECTS) - 100.0
            && gauge(m, GC_CM_OBJECTS) <= gauge(&grown, GC_CM_OBJECTS) - 100.0
            && gauge(m, "capstan_store_keys") <= gauge(&grown, "capstan_store_keys") - 100.0
    });
}

/// A LIST served from the watch cache is streamed as it is written (issue 26: large lists
/// never exist as one buffer): it arrives without a `Content-Length` (as kube-apiserver's
/// large lists do), yet whole — every item, the list's resourceVersion, Go's final newline.
/// A single object's GET, written at once, carries its length.
#[test]
fn cached_lists_are_streamed_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=0", "--disable-scheduler"],
    )
    .expect("server starts");
    let (ok, _, err) = s
        .kubectl(&["create", "namespace", "mem"])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let manifest = dir.path().join("cms.json");
    // 300 × 1 KiB: several of the body's 64 KiB chunks.
    std::fs::write(&manifest, config_maps(300)).expect("manifest written");
    let file = manifest.to_string_lossy().into_owned();
    let (ok, _, err) = s.kubectl(&["create", "-f", &file]).expect("kubectl runs");
    assert!(ok, "{err}");

    let (ok, out, err) = s
        .kubectl(&["get", "--raw", "/api/v1/namespaces/mem/configmaps", "-v=8"])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    // kubectl -v=8 logs the response's status and headers.
    assert!(
        err.contains("200 OK"),
        "kubectl -v=8 printed no response: {err}"
    );
    assert!(
        !err.to_ascii_lowercase().contains("content-length:"),
        "a streamed list has no Content-Length: {err}"
    );
    let list: serde_json::Value = serde_json::from_str(&out).expect("list is JSON");
    let items = list["items"].as_array().expect("items");
    // The 300 plus the namespace's kube-root-ca.crt.
    assert_eq!(
        items
            .iter()
            .filter(|i| i["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("mem-")))
            .count(),
        300
    );
    assert!(list["metadata"]["resourceVersion"].as_str().is_some());

    let (ok, _, err) = s
        .kubectl(&[
            "get",
            "--raw",
            "/api/v1/namespaces/mem/configmaps/mem-7",
            "-v=8",
        ])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    assert!(
        err.to_ascii_lowercase().contains("content-length:"),
        "one object is written at once, with its length: {err}"
    );
}

/// The embedded store member's Raft state on the API server's `/metrics` (issue 27: the
/// dashboard's store panel reads it there, the store's own metrics port being out of reach).
#[test]
fn store_raft_gauges_exist_on_the_api_servers_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let (ok, _, err) = s
        .kubectl(&["create", "namespace", "raft"])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    let m = until(&s, "store Raft gauges present", |m| {
        gauge(m, "capstan_store_is_leader") == 1.0
            && gauge(m, "capstan_store_raft_applied_index") >= 1.0
    });
    assert!(gauge(&m, "capstan_store_raft_term") >= 1.0);
    assert_eq!(gauge(&m, "capstan_store_has_leader"), 1.0);
    assert_eq!(gauge(&m, "capstan_store_members"), 1.0);
    assert!(
        gauge(&m, "capstan_store_raft_commit_index")
            >= gauge(&m, "capstan_store_raft_applied_index")
    );
    assert!(gauge(&m, "capstan_store_db_size_bytes") > 0.0);
    // The namespace's write was fsynced: the WAL's histogram counts it.
    assert!(gauge(&m, "capstan_store_wal_fsync_duration_seconds_count") >= 1.0);
    assert!(gauge(&m, "capstan_store_wal_fsync_duration_seconds_sum") > 0.0);
    assert!(
        m.contains_key(r#"capstan_store_wal_fsync_duration_seconds_bucket{le="+Inf"}"#),
        "fsync histogram buckets missing"
    );
}
