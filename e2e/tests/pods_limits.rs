//! Limits of the process runtime (`capstan server --node-runtime process`): a container's
//! log rotates at 10 MiB keeping 5 files, as the kubelet's `containerLogMaxSize` and
//! `containerLogMaxFiles`, so after 25 MiB of output `kubectl logs` shows the latest lines.

use std::path::{Path, PathBuf};

use e2e::ServerProcess;
use e2e::cli::{ok, wait_for};

fn process_cluster() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=1", "--node-runtime=process"],
    )
    .expect("server starts");
    (dir, s)
}

/// Directories `<…>/logs/<container>` under `root`.
fn log_dirs(root: &Path, container: &str, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if path.file_name().is_some_and(|n| n == container)
            && path
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "logs")
        {
            found.push(path);
        } else {
            log_dirs(&path, container, found);
        }
    }
}

#[test]
fn a_container_log_rotates_and_logs_shows_its_last_lines() {
    let (dir, s) = process_cluster();
    // 200000 lines of ~100 bytes: ~27 MiB of CRI log entries, past two rotations.
    let pad = "x".repeat(90);
    let script = format!("seq -f 'line %06g {pad}' 1 200000; echo last-line; sleep 3600");
    ok(
        &s,
        &[
            "run",
            "chatty",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_for(&s, 180, "the last line in kubectl logs --tail=1", || {
        let (done, out, _) = s
            .kubectl(&["logs", "chatty", "--tail=1"])
            .expect("kubectl runs");
        (done && out == "last-line\n").then_some(())
    });
    let two = ok(&s, &["logs", "chatty", "--tail=2"]);
    assert!(two.starts_with(&format!("line 200000 {pad}\n")), "{two}");
    // The first lines went with the rotated files: the current file starts later.
    let all = ok(&s, &["logs", "chatty"]);
    assert!(!all.starts_with("line 000001 "), "{}", &all[..200]);
    assert!(all.len() as u64 <= 10 * 1024 * 1024, "{}", all.len());
    let mut dirs = Vec::new();
    log_dirs(dir.path(), "chatty", &mut dirs);
    if dirs.is_empty() {
        eprintln!(
            "the node's log directory is not under the test's data dir; checked via kubectl logs only"
        );
    }
    for d in dirs {
        let files: Vec<_> = std::fs::read_dir(&d)
            .expect("log dir reads")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!((2..=5).contains(&files.len()), "{}: {files:?}", d.display());
        for f in &files {
            let len = std::fs::metadata(f).map(|m| m.len()).unwrap_or_default();
            assert!(len <= 10 * 1024 * 1024, "{}: {len}", f.display());
        }
    }
    ok(&s, &["delete", "pod", "chatty", "--wait=false"]);
}

#[test]
fn a_pod_with_limits_gets_a_warning_when_cgroup_v2_is_absent() {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        eprintln!("cgroup v2 is mounted on this host: no ResourceLimitsNotEnforced event to check");
        return;
    }
    let (_dir, s) = process_cluster();
    ok(
        &s,
        &[
            "run",
            "limited",
            "--image=busybox",
            "--restart=Never",
            "--overrides",
            r#"{"spec":{"containers":[{"name":"limited","image":"busybox","command":["sleep","3600"],"resources":{"limits":{"cpu":"100m","memory":"64Mi"}}}]}}"#,
        ],
    );
    let events = wait_for(&s, 60, "the ResourceLimitsNotEnforced event", || {
        let (done, out, _) = s
            .kubectl(&[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=limited,reason=ResourceLimitsNotEnforced",
                "-o",
                "jsonpath={range .items[*]}{.type} {.message}{\"\\n\"}{end}",
            ])
            .expect("kubectl runs");
        (done && out.contains("Warning")).then_some(out)
    });
    assert!(events.contains("cgroup v2 is not available"), "{events}");
    // A pod without limits gets no such event.
    ok(
        &s,
        &[
            "run",
            "free",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sleep",
            "3600",
        ],
    );
    wait_for(&s, 60, "free Running", || {
        let (_, out, _) = s
            .kubectl(&["get", "pod", "free", "-o", "jsonpath={.status.phase}"])
            .expect("kubectl runs");
        (out == "Running").then_some(())
    });
    let none = ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=free,reason=ResourceLimitsNotEnforced",
            "-o",
            "name",
        ],
    );
    assert_eq!(none.trim(), "", "{none}");
}

/// Host processes of `uid`.
fn processes_of(uid: u32) -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-u", &uid.to_string()])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn a_forking_pod_hits_rlimit_nproc_and_the_server_stays_responsive() {
    let (_dir, s) = process_cluster();
    // A uid of its own: RLIMIT_NPROC counts per real uid across the host.
    let uid = 40_000 + std::process::id() % 20_000;
    let overrides = format!(
        r#"{{"spec":{{"securityContext":{{"runAsUser":{uid}}},"containers":[{{"name":"bomb","image":"busybox","command":["sh","-c","grep 'Max processes' /proc/self/limits; sh -c 'while :; do sleep 600 & done'; echo exhausted; exec sleep 600"]}}]}}}}"#
    );
    ok(
        &s,
        &[
            "run",
            "bomb",
            "--image=busybox",
            "--restart=Never",
            "--overrides",
            &overrides,
        ],
    );
    let mut most = 0;
    let logs = wait_for(&s, 120, "the forking loop to end", || {
        most = most.max(processes_of(uid));
        let (_, out, _) = s.kubectl(&["logs", "bomb"]).expect("kubectl runs");
        let (_, phase, _) = s
            .kubectl(&["get", "pod", "bomb", "-o", "jsonpath={.status.phase}"])
            .expect("kubectl runs");
        (out.contains("exhausted") || phase == "Failed" || phase == "Succeeded").then_some(out)
    });
    most = most.max(processes_of(uid));
    assert!(logs.contains("Max processes"), "{logs}");
    assert!(
        logs.lines()
            .any(|l| l.starts_with("Max processes") && l.contains(" 1024 ")),
        "{logs}"
    );
    eprintln!(
        "at most {most} processes of uid {uid}; logs: {}",
        logs.lines().take(3).collect::<Vec<_>>().join(" / ")
    );
    // The endless loop was stopped by EAGAIN at the limit, and its processes stay.
    assert!(logs.contains("exhausted"), "{logs}");
    assert!(logs.contains("Cannot fork"), "{logs}");
    assert!(
        (900..=1024).contains(&most),
        "{most} processes of uid {uid}"
    );
    // The server answers while the pod holds its processes.
    let nodes = ok(&s, &["get", "nodes", "-o", "name"]);
    assert!(nodes.contains("node/"), "{nodes}");
    ok(&s, &["delete", "pod", "bomb", "--wait=false"]);
    wait_for(&s, 60, "the pod's processes gone", || {
        (processes_of(uid) == 0).then_some(())
    });
}
