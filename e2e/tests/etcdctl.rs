//! Stock `etcdctl` (3.4, v3 API) against `capstan store`: proves that each etcdctl feature a
//! Kubernetes operator reaches for (put/get/del, historical reads, txn, watch with history
//! replay, leases, compaction, snapshot, endpoint status, member list) works against our store
//! and prints exactly what it prints against a real etcd.
//!
//! Every test starts its own store on a fresh temporary directory.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use e2e::{StoreProcess, etcdctl};
use tempfile::TempDir;

/// A store on its own temporary directory; the directory lives as long as the store.
struct Fixture {
    store: StoreProcess,
    _dir: TempDir,
}

fn start() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = StoreProcess::start(&dir.path().join("data"), &[]).expect("start capstan store");
    Fixture { store, _dir: dir }
}

impl Fixture {
    /// Runs etcdctl, asserts it succeeded, and returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        self.ok_stdin(args, None)
    }

    /// Runs etcdctl with `stdin`, asserts it succeeded, and returns its stdout.
    fn ok_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = etcdctl(&self.store.endpoint, args, stdin).expect("run etcdctl");
        assert!(
            ok,
            "etcdctl {args:?} failed\nstdout: {out}\nstderr: {err}\nstore log:\n{}",
            self.store.log()
        );
        out
    }

    /// Runs etcdctl, asserts it failed, and returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let (ok, out, err) = etcdctl(&self.store.endpoint, args, None).expect("run etcdctl");
        assert!(
            !ok,
            "etcdctl {args:?} unexpectedly succeeded\nstdout: {out}\nstderr: {err}"
        );
        err
    }

    /// The store's current revision: the header revision of a `get -w json`.
    fn revision(&self) -> i128 {
        let out = self.ok(&["get", "any-key-at-all", "-w", "json"]);
        json_int(&out, "\"revision\":").expect("header revision in get -w json")
    }
}

/// The first integer following `field` (e.g. `"revision":`) in etcdctl's compact JSON output.
/// `i128` holds both the `int64` revisions and the `uint64` member ids.
fn json_int(json: &str, field: &str) -> Option<i128> {
    let start = json.find(field)? + field.len();
    let digits: String = json[start..]
        .chars()
        .skip_while(|c| c.is_whitespace())
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// Parses `lease 694d77ec3a5c1a11 granted with TTL(60s)` into the hex id.
fn lease_id(grant_output: &str) -> String {
    let words: Vec<&str> = grant_output.split_whitespace().collect();
    assert!(
        words.len() >= 5 && words[0] == "lease" && words[2] == "granted",
        "unexpected `lease grant` output: {grant_output:?}"
    );
    assert!(
        words[4] == "TTL(60s)",
        "unexpected TTL in `lease grant` output: {grant_output:?}"
    );
    assert!(
        i64::from_str_radix(words[1], 16).is_ok_and(|id| id != 0),
        "lease id is not non-zero hex: {grant_output:?}"
    );
    words[1].to_owned()
}

/// Starts `etcdctl watch <args>` and forwards its stdout lines to the returned channel.
fn spawn_watch(
    endpoint: &str,
    args: &[&str],
) -> (
    std::process::Child,
    mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    let mut watcher = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn etcdctl watch");
    let stdout = watcher.stdout.take().expect("watch stdout");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (watcher, rx, reader)
}

#[test]
fn put_prints_ok_and_first_put_is_revision_2() {
    let f = start();
    assert_eq!(f.revision(), 1, "a fresh store is at revision 1");
    assert_eq!(f.ok(&["put", "greeting", "hello"]), "OK\n");
    assert_eq!(f.ok(&["get", "greeting"]), "greeting\nhello\n");
    let json = f.ok(&["get", "greeting", "-w", "json"]);
    assert_eq!(
        json_int(&json, "\"mod_revision\":"),
        Some(2),
        "first put is revision 2: {json}"
    );
    assert_eq!(json_int(&json, "\"create_revision\":"), Some(2), "{json}");
    assert_eq!(json_int(&json, "\"version\":"), Some(1), "{json}");
    assert_eq!(json_int(&json, "\"count\":"), Some(1), "{json}");
    // Overwrite: new revision, version 2, same create revision.
    assert_eq!(f.ok(&["put", "greeting", "bonjour"]), "OK\n");
    let json = f.ok(&["get", "greeting", "-w", "json"]);
    assert_eq!(json_int(&json, "\"mod_revision\":"), Some(3), "{json}");
    assert_eq!(json_int(&json, "\"create_revision\":"), Some(2), "{json}");
    assert_eq!(json_int(&json, "\"version\":"), Some(2), "{json}");
    assert_eq!(f.ok(&["get", "greeting"]), "greeting\nbonjour\n");
    // A missing key prints nothing.
    assert_eq!(f.ok(&["get", "nope"]), "");
}

#[test]
fn get_prefix_lists_keys_and_values_in_key_order() {
    let f = start();
    // Written out of order, plus neighbours that must not match the prefix.
    for (k, v) in [
        ("p/b", "2"),
        ("p/c", "3"),
        ("p/a", "1"),
        ("p", "x"),
        ("q/a", "y"),
        ("o", "z"),
    ] {
        assert_eq!(f.ok(&["put", k, v]), "OK\n");
    }
    assert_eq!(f.ok(&["get", "--prefix", "p/"]), "p/a\n1\np/b\n2\np/c\n3\n");
    assert_eq!(
        f.ok(&["get", "--prefix", "p/", "--keys-only"]),
        "p/a\n\np/b\n\np/c\n\n"
    );
    assert_eq!(
        f.ok(&["get", "--prefix", "p/", "--limit=2"]),
        "p/a\n1\np/b\n2\n"
    );
    // Range [p/a, p/c).
    assert_eq!(f.ok(&["get", "p/a", "p/c"]), "p/a\n1\np/b\n2\n");
    // Everything, in byte order.
    assert_eq!(
        f.ok(&["get", "--prefix", ""]),
        "o\nz\np\nx\np/a\n1\np/b\n2\np/c\n3\nq/a\ny\n"
    );
    let json = f.ok(&["get", "--prefix", "p/", "--keys-only", "-w", "json"]);
    assert_eq!(json_int(&json, "\"count\":"), Some(3), "{json}");
}

#[test]
fn get_at_an_old_revision_returns_the_old_value() {
    let f = start();
    f.ok(&["put", "k", "v1"]); // revision 2
    f.ok(&["put", "k", "v2"]); // revision 3
    f.ok(&["put", "other", "o"]); // revision 4
    f.ok(&["del", "k"]); // revision 5
    assert_eq!(f.ok(&["get", "k", "--rev=2"]), "k\nv1\n");
    assert_eq!(f.ok(&["get", "k", "--rev=3"]), "k\nv2\n");
    assert_eq!(f.ok(&["get", "k", "--rev=4"]), "k\nv2\n");
    assert_eq!(f.ok(&["get", "k", "--rev=5"]), "");
    assert_eq!(f.ok(&["get", "k"]), "");
    assert_eq!(f.ok(&["get", "other", "--rev=3"]), "");
    assert_eq!(f.ok(&["get", "--prefix", "", "--rev=3"]), "k\nv2\n");
    assert_eq!(f.revision(), 5);
}

#[test]
fn get_at_a_future_revision_fails() {
    let f = start();
    f.ok(&["put", "k", "v"]); // revision 2
    let err = f.fails(&["get", "k", "--rev=100"]);
    assert!(
        err.contains("etcdserver: mvcc: required revision is a future revision"),
        "stderr: {err}"
    );
    // The current revision itself is fine, one past it is not.
    assert_eq!(f.ok(&["get", "k", "--rev=2"]), "k\nv\n");
    let err = f.fails(&["get", "k", "--rev=3"]);
    assert!(
        err.contains("required revision is a future revision"),
        "stderr: {err}"
    );
}

#[test]
fn del_prev_kv_prints_count_and_previous_pair() {
    let f = start();
    f.ok(&["put", "doomed", "last words"]);
    f.ok(&["put", "keeper", "stays"]);
    assert_eq!(
        f.ok(&["del", "--prev-kv", "doomed"]),
        "1\ndoomed\nlast words\n"
    );
    assert_eq!(f.ok(&["get", "doomed"]), "");
    assert_eq!(f.ok(&["get", "keeper"]), "keeper\nstays\n");
    // Deleting a missing key deletes nothing.
    assert_eq!(f.ok(&["del", "doomed"]), "0\n");
    // Prefix delete with prev-kv lists every deleted pair in key order.
    f.ok(&["put", "d/2", "b"]);
    f.ok(&["put", "d/1", "a"]);
    assert_eq!(
        f.ok(&["del", "--prefix", "--prev-kv", "d/"]),
        "2\nd/1\na\nd/2\nb\n"
    );
    assert_eq!(f.ok(&["get", "--prefix", "d/"]), "");
}

#[test]
fn txn_from_stdin_takes_success_and_failure_branches() {
    let f = start();
    f.ok(&["put", "k", "v"]);

    // mod("k") > "0" holds: success branch.
    let out = f.ok_stdin(
        &["txn"],
        Some("mod(\"k\") > \"0\"\n\nput r1 success\n\nput r1 failure\n\n"),
    );
    assert_eq!(out, "SUCCESS\n\nOK\n");
    assert_eq!(f.ok(&["get", "r1"]), "r1\nsuccess\n");

    // value("k") = "nope" does not: failure branch.
    let out = f.ok_stdin(
        &["txn"],
        Some("value(\"k\") = \"nope\"\n\nput r2 success\n\nput r2 failure\n\n"),
    );
    assert_eq!(out, "FAILURE\n\nOK\n");
    assert_eq!(f.ok(&["get", "r2"]), "r2\nfailure\n");

    // value("k") = "v" holds; the success branch has a get and a put, results in order.
    let out = f.ok_stdin(
        &["txn"],
        Some("value(\"k\") = \"v\"\n\nget k\nput r3 x\n\ndel k\n\n"),
    );
    assert_eq!(out, "SUCCESS\n\nk\nv\n\nOK\n");
    assert_eq!(f.ok(&["get", "r3"]), "r3\nx\n");
    assert_eq!(f.ok(&["get", "k"]), "k\nv\n", "failure branch must not run");

    // A compare on a missing key: its mod revision is 0, so mod("missing") > "0" fails and
    // the failure branch (a delete) runs.
    let out = f.ok_stdin(
        &["txn"],
        Some("mod(\"missing\") > \"0\"\n\nput r4 no\n\ndel --prev-kv k\n\n"),
    );
    assert_eq!(out, "FAILURE\n\n1\nk\nv\n");
    assert_eq!(f.ok(&["get", "k"]), "");
    assert_eq!(f.ok(&["get", "r4"]), "");
}

#[test]
fn watch_replays_history_then_shows_live_events() {
    let f = start();
    f.ok(&["put", "w", "1"]); // revision 2
    f.ok(&["put", "w", "2"]); // revision 3
    f.ok(&["put", "unrelated", "u"]); // revision 4
    f.ok(&["del", "w"]); // revision 5

    let (mut watcher, rx, reader) = spawn_watch(&f.store.endpoint, &["--rev=3", "w"]);

    let mut lines = Vec::new();
    let wait_for = |count: usize, what: &str, lines: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while lines.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => panic!("timed out waiting for {what}; watch printed so far: {lines:?}"),
            }
        }
    };

    // History from revision 3: the put of "2" and the delete (the unrelated key is filtered).
    let history = ["PUT", "w", "2", "DELETE", "w", ""];
    wait_for(history.len(), "replayed history", &mut lines);
    assert_eq!(lines, history, "replayed history");

    // A live event after the history was printed.
    f.ok(&["put", "w", "live"]);
    wait_for(history.len() + 3, "the live event", &mut lines);
    assert_eq!(&lines[history.len()..], ["PUT", "w", "live"], "live event");

    // Events on other keys never show up; a second live event does.
    f.ok(&["put", "unrelated", "again"]);
    f.ok(&["put", "w", "again"]);
    wait_for(history.len() + 6, "the second live event", &mut lines);
    assert_eq!(
        &lines[history.len() + 3..],
        ["PUT", "w", "again"],
        "second live event"
    );

    watcher.kill().expect("kill watcher");
    watcher.wait().expect("reap watcher");
    reader.join().expect("reader thread");
}

#[test]
fn lease_grant_attach_and_revoke_removes_the_key() {
    let f = start();
    let id = lease_id(&f.ok(&["lease", "grant", "60"]));
    assert_eq!(
        f.ok(&["put", &format!("--lease={id}"), "leased", "v"]),
        "OK\n"
    );
    assert_eq!(f.ok(&["put", "plain", "p"]), "OK\n");
    assert_eq!(f.ok(&["get", "leased"]), "leased\nv\n");

    let json = f.ok(&["get", "leased", "-w", "json"]);
    let lease_dec = i128::from(i64::from_str_radix(&id, 16).expect("hex id"));
    assert_eq!(
        json_int(&json, "\"lease\":"),
        Some(lease_dec),
        "key carries the lease: {json}"
    );

    let list = f.ok(&["lease", "list"]);
    assert_eq!(list, format!("found 1 leases\n{id}\n"));

    let ttl = f.ok(&["lease", "timetolive", "--keys", &id]);
    assert!(
        ttl.contains("attached keys([leased])"),
        "timetolive --keys: {ttl}"
    );

    assert_eq!(
        f.ok(&["lease", "revoke", &id]),
        format!("lease {id} revoked\n")
    );
    assert_eq!(
        f.ok(&["get", "leased"]),
        "",
        "revoking the lease deletes its key"
    );
    assert_eq!(f.ok(&["get", "plain"]), "plain\np\n", "other keys stay");
    assert_eq!(f.ok(&["lease", "list"]), "found 0 leases\n");
}

#[test]
fn lease_timetolive_reports_granted_and_remaining_ttl() {
    let f = start();
    let id = lease_id(&f.ok(&["lease", "grant", "60"]));
    let out = f.ok(&["lease", "timetolive", &id]);
    let prefix = format!("lease {id} granted with TTL(60s), remaining(");
    assert!(out.starts_with(&prefix), "timetolive output: {out:?}");
    let remaining: i64 = out[prefix.len()..]
        .trim_end()
        .strip_suffix("s)")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse remaining TTL from {out:?}"));
    assert!(
        (40..=60).contains(&remaining),
        "remaining TTL {remaining} not near 60: {out:?}"
    );

    // Keep-alive once renews it to the full TTL.
    let out = f.ok(&["lease", "keep-alive", "--once", &id]);
    assert_eq!(out, format!("lease {id} keepalived with TTL(60)\n"));
}

#[test]
fn compaction_makes_older_revisions_unreadable() {
    let f = start();
    f.ok(&["put", "k", "v1"]); // 2
    f.ok(&["put", "k", "v2"]); // 3
    f.ok(&["put", "k", "v3"]); // 4
    f.ok(&["put", "k", "v4"]); // 5
    assert_eq!(f.ok(&["compaction", "4"]), "compacted revision 4\n");

    for old in ["--rev=2", "--rev=3"] {
        let err = f.fails(&["get", "k", old]);
        assert!(
            err.contains("etcdserver: mvcc: required revision has been compacted"),
            "get {old} after compaction 4: {err}"
        );
    }
    // The compaction revision itself and later stay readable.
    assert_eq!(f.ok(&["get", "k", "--rev=4"]), "k\nv3\n");
    assert_eq!(f.ok(&["get", "k"]), "k\nv4\n");
    // Compacting again at the same revision is an error too.
    let err = f.fails(&["compaction", "3"]);
    assert!(
        err.contains("required revision has been compacted"),
        "{err}"
    );
    // Writes continue at the next revision.
    f.ok(&["put", "k", "v5"]);
    assert_eq!(f.revision(), 6);
}

#[test]
fn snapshot_save_writes_a_nonempty_file() {
    let f = start();
    for i in 0..20 {
        f.ok(&["put", &format!("snap/{i:02}"), &format!("value {i}")]);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("backup.db");
    let path_str = path.to_str().expect("utf-8 path");
    let out = f.ok(&["snapshot", "save", path_str]);
    assert!(
        out.contains(&format!("Snapshot saved at {path_str}")),
        "stdout: {out}"
    );
    let meta = std::fs::metadata(&path).expect("snapshot file exists");
    assert!(meta.len() > 0, "snapshot file is empty");
    // The store keeps serving afterwards.
    assert_eq!(f.ok(&["get", "snap/07"]), "snap/07\nvalue 7\n");
}

#[test]
fn endpoint_status_table_shows_one_leader_row() {
    let f = start();
    f.ok(&["put", "k", "v"]);
    let out = f.ok(&["endpoint", "status", "-w", "table"]);
    let rows: Vec<Vec<String>> = out
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "a header row and one endpoint row:\n{out}");
    let (header, row) = (&rows[0], &rows[1]);
    assert_eq!(header.len(), row.len(), "{out}");
    let col = |name: &str| {
        let i = header.iter().position(|h| h == name);
        row[i.unwrap_or_else(|| panic!("no {name} column:\n{out}"))].clone()
    };
    assert_eq!(col("ENDPOINT"), f.store.endpoint, "{out}");
    assert_eq!(col("IS LEADER"), "true", "{out}");
    assert_eq!(col("IS LEARNER"), "false", "{out}");
    assert_eq!(col("ERRORS"), "", "{out}");
    assert!(
        u64::from_str_radix(&col("ID"), 16).is_ok_and(|id| id != 0),
        "member id:\n{out}"
    );
    let term: u64 = col("RAFT TERM").parse().expect("raft term is a number");
    assert!(term >= 1, "{out}");
    let index: u64 = col("RAFT INDEX").parse().expect("raft index is a number");
    assert!(index >= 1, "{out}");

    // The JSON form agrees on the leader: the leader id is the member id.
    let json = f.ok(&["endpoint", "status", "-w", "json"]);
    let member = json_int(&json, "\"member_id\":").expect("member_id");
    let leader = json_int(&json, "\"leader\":").expect("leader");
    assert_eq!(member, leader, "{json}");
}

#[test]
fn member_list_shows_one_started_member_named_default() {
    let f = start();
    let out = f.ok(&["member", "list"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one member:\n{out}");
    let fields: Vec<&str> = lines[0].split(", ").collect();
    assert_eq!(
        fields.len(),
        6,
        "id, status, name, peer urls, client urls, learner:\n{out}"
    );
    assert!(
        u64::from_str_radix(fields[0], 16).is_ok_and(|id| id != 0),
        "member id: {out}"
    );
    assert_eq!(fields[1], "started", "{out}");
    assert_eq!(fields[2], "default", "{out}");
    assert_eq!(fields[5], "false", "not a learner: {out}");

    // Same member id as endpoint status reports.
    let status = f.ok(&["endpoint", "status"]);
    assert!(
        status.contains(fields[0]),
        "member id {} not in status: {status}",
        fields[0]
    );
}

#[test]
fn watch_from_a_compacted_revision_is_canceled() {
    let f = start();
    f.ok(&["put", "k", "v1"]); // 2
    f.ok(&["put", "k", "v2"]); // 3
    f.ok(&["put", "k", "v3"]); // 4
    f.ok(&["compaction", "4"]);

    // etcdctl exits on its own when the server cancels the watch; a store that never answers
    // would leave it hanging, so give it a deadline.
    let mut watcher = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", f.store.endpoint))
        .args(["watch", "--rev=2", "k"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn etcdctl watch");
    let deadline = Instant::now() + Duration::from_secs(20);
    while watcher.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            watcher.kill().expect("kill watcher");
            let out = watcher.wait_with_output().expect("reap watcher");
            panic!(
                "watch from a compacted revision still running after 20 s; stdout: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = watcher.wait_with_output().expect("watch output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "watch must fail; stdout: {stdout}");
    assert!(
        stderr.contains(
            "watch was canceled (etcdserver: mvcc: required revision has been compacted)"
        ),
        "stdout: {stdout}\nstderr: {stderr}"
    );

    // Watching from the compaction revision itself works and replays it.
    let (mut watcher, rx, reader) = spawn_watch(&f.store.endpoint, &["--rev=4", "k"]);
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines.len() < 3 {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => lines.push(line),
            Err(_) => panic!("watch --rev=4 printed only {lines:?}"),
        }
    }
    assert_eq!(lines, ["PUT", "k", "v3"]);
    watcher.kill().expect("kill watcher");
    watcher.wait().expect("reap watcher");
    reader.join().expect("reader thread");
}
