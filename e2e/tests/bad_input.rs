//! Bad input gets etcd's exact, clean errors and never takes the store down: oversized
//! requests, empty keys, unknown leases, compaction of future revisions, and start-up on an
//! unusable or full data directory (which must fail fast with a clear message on stderr).
//!
//! After every rejected request the test checks that the same store still serves ordinary
//! reads and writes.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use e2e::{StoreProcess, capstan_bin, etcdctl, free_port};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use tempfile::TempDir;

/// A lease id that was never granted.
const UNKNOWN_LEASE: i64 = 0x1234;

/// A store on its own temporary directory, plus a connected Rust client.
struct Fixture {
    store: StoreProcess,
    client: Client,
    _dir: TempDir,
}

async fn start(extra_args: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let args: Vec<String> = extra_args.iter().map(|s| (*s).to_owned()).collect();
    // StoreProcess::start blocks (and runs its own runtime): keep it off the async threads.
    let store = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        StoreProcess::start(&data, &refs)
    })
    .await
    .expect("join")
    .expect("start capstan store");
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(10));
    let client = Client::connect([store.endpoint.clone()], Some(opts))
        .await
        .expect("connect");
    Fixture {
        store,
        client,
        _dir: dir,
    }
}

impl Fixture {
    /// Asserts the store still answers an ordinary put and get.
    async fn assert_still_serving(&mut self, tag: &str) {
        let key = format!("still-serving/{tag}");
        self.client
            .put(key.as_str(), "yes", None)
            .await
            .unwrap_or_else(|e| panic!("put after {tag} failed: {e}\nlog:\n{}", self.store.log()));
        let resp = self
            .client
            .get(key.as_str(), None)
            .await
            .expect("get after bad input");
        assert_eq!(resp.kvs().len(), 1, "key written after {tag} is readable");
        assert_eq!(resp.kvs()[0].value(), b"yes");
    }

    /// Runs etcdctl and returns (success, stdout, stderr).
    fn ctl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        etcdctl(&self.store.endpoint, args, stdin).expect("run etcdctl")
    }
}

/// Asserts `result` is an error whose text contains `needle`.
fn assert_err<T: std::fmt::Debug>(result: Result<T, etcd_client::Error>, needle: &str, what: &str) {
    match result {
        Ok(v) => panic!("{what}: expected error containing {needle:?}, got Ok({v:?})"),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(needle),
                "{what}: expected error containing {needle:?}, got {text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_put_is_rejected_and_the_store_keeps_serving() {
    let mut f = start(&[]).await;
    // Default limit: 1.5 MiB. 1.6 MiB is over it (but under the gRPC transport's own limit, so
    // the store, not the transport, must reject it with etcd's message).
    let big = vec![b'x'; 1_677_722];
    assert_err(
        f.client.put("big", big, None).await,
        "etcdserver: request is too large",
        "1.6 MiB put",
    );
    let resp = f.client.get("big", None).await.expect("get big");
    assert!(resp.kvs().is_empty(), "rejected put must not be applied");
    f.assert_still_serving("oversized put").await;

    // Under the limit is fine: a 1 MiB value round-trips.
    let mib = vec![b'y'; 1024 * 1024];
    f.client
        .put("one-mib", mib.clone(), None)
        .await
        .expect("1 MiB put");
    let resp = f.client.get("one-mib", None).await.expect("get 1 MiB");
    assert_eq!(resp.kvs().len(), 1);
    assert!(
        resp.kvs()[0].value() == mib.as_slice(),
        "1 MiB value round-trips"
    );

    // The same through etcdctl (value on stdin).
    let big_text = "z".repeat(1_700_000);
    let (ok, out, err) = f.ctl(&["put", "big2"], Some(&big_text));
    assert!(!ok, "etcdctl put of 1.7 MB must fail; stdout: {out}");
    assert!(
        err.contains("etcdserver: request is too large"),
        "stderr: {err}"
    );
    let (ok, out, err) = f.ctl(&["put", "small2", "fine"], None);
    assert!(
        ok && out == "OK\n",
        "normal etcdctl put after too-large one: {out} {err}"
    );
    f.assert_still_serving("etcdctl oversized put").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_request_bytes_flag_sets_the_limit() {
    let mut f = start(&["--max-request-bytes", "4096"]).await;
    assert_err(
        f.client.put("k", vec![b'x'; 8192], None).await,
        "etcdserver: request is too large",
        "8 KiB put with --max-request-bytes 4096",
    );
    f.client
        .put("k", vec![b'x'; 1024], None)
        .await
        .expect("1 KiB put under a 4 KiB limit");
    let resp = f.client.get("k", None).await.expect("get");
    assert_eq!(resp.kvs()[0].value().len(), 1024);
    f.assert_still_serving("small max-request-bytes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_key_is_rejected() {
    let mut f = start(&[]).await;
    f.client.put("a", "1", None).await.expect("put a");
    let needle = "etcdserver: key is not provided";
    assert_err(f.client.get("", None).await, needle, "range with empty key");
    assert_err(
        f.client.put("", "v", None).await,
        needle,
        "put with empty key",
    );
    assert_err(
        f.client.delete("", None).await,
        needle,
        "delete with empty key",
    );
    let txn = Txn::new()
        .when([Compare::version("a", CompareOp::Greater, 0)])
        .and_then([TxnOp::put("", "v", None)]);
    assert_err(f.client.txn(txn).await, needle, "txn putting an empty key");

    let (ok, _, err) = f.ctl(&["get", ""], None);
    assert!(!ok && err.contains(needle), "etcdctl get \"\": {err}");

    // Nothing was written by the rejected requests: revision is still that of `put a`.
    let resp = f.client.get("a", None).await.expect("get a");
    assert_eq!(
        resp.header().expect("header").revision(),
        2,
        "rejected requests wrote nothing"
    );
    f.assert_still_serving("empty key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_lease_ids_get_lease_not_found() {
    let mut f = start(&[]).await;
    let not_found = "etcdserver: requested lease not found";

    assert_err(
        f.client.lease_revoke(UNKNOWN_LEASE).await,
        not_found,
        "revoke unknown lease",
    );
    let ttl = f
        .client
        .lease_time_to_live(UNKNOWN_LEASE, None)
        .await
        .expect("timetolive");
    assert_eq!(ttl.ttl(), -1, "time-to-live of an unknown lease is -1");
    assert_err(
        f.client.lease_keep_alive(UNKNOWN_LEASE).await,
        "lease not found",
        "keep-alive",
    );
    assert_err(
        f.client
            .put("k", "v", Some(PutOptions::new().with_lease(UNKNOWN_LEASE)))
            .await,
        not_found,
        "put attached to an unknown lease",
    );
    assert!(
        f.client.get("k", None).await.expect("get").kvs().is_empty(),
        "put was rejected"
    );

    // etcdctl: revoke fails, timetolive says "already expired", keep-alive fails.
    let (ok, _, err) = f.ctl(&["lease", "revoke", "1234"], None);
    assert!(
        !ok && err.contains(not_found),
        "etcdctl lease revoke 1234: {err}"
    );
    let (ok, out, err) = f.ctl(&["lease", "timetolive", "1234"], None);
    assert!(ok, "etcdctl lease timetolive 1234: {err}");
    assert_eq!(out, "lease 0000000000001234 already expired\n");
    let (ok, _, err) = f.ctl(&["lease", "keep-alive", "--once", "1234"], None);
    assert!(
        !ok && err.contains(not_found),
        "etcdctl lease keep-alive --once 1234: {err}"
    );

    // A revoked lease is as unknown as a never-granted one.
    let id = f.client.lease_grant(60, None).await.expect("grant").id();
    f.client.lease_revoke(id).await.expect("first revoke");
    assert_err(f.client.lease_revoke(id).await, not_found, "second revoke");
    let ttl = f
        .client
        .lease_time_to_live(id, None)
        .await
        .expect("timetolive of revoked");
    assert_eq!(ttl.ttl(), -1, "time-to-live of a revoked lease is -1");
    f.assert_still_serving("unknown lease").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacting_a_future_revision_fails() {
    let mut f = start(&[]).await;
    f.client.put("k", "1", None).await.expect("put"); // 2
    f.client.put("k", "2", None).await.expect("put"); // 3
    let future = "etcdserver: mvcc: required revision is a future revision";
    assert_err(f.client.compact(1000, None).await, future, "compact(1000)");
    assert_err(
        f.client.compact(4, None).await,
        future,
        "compact(current + 1)",
    );
    let (ok, _, err) = f.ctl(&["compaction", "1000"], None);
    assert!(
        !ok && err.contains(future),
        "etcdctl compaction 1000: {err}"
    );

    // Nothing was compacted: the oldest revision is still readable.
    let resp = f
        .client
        .get("k", Some(etcd_client::GetOptions::new().with_revision(2)))
        .await
        .expect("get at revision 2 after rejected compactions");
    assert_eq!(resp.kvs()[0].value(), b"1");

    // Compacting the current revision works; compacting it again does not.
    f.client.compact(3, None).await.expect("compact(3)");
    assert_err(
        f.client.compact(2, None).await,
        "etcdserver: mvcc: required revision has been compacted",
        "compact below the compacted revision",
    );
    f.assert_still_serving("future compaction").await;
}

/// Starts `capstan store` on `data_dir` directly and waits (at most 10 s) for it to exit.
/// Returns the exit status and stderr; a store still running after that is killed and the
/// test fails.
fn start_expecting_exit(data_dir: &Path, scratch: &Path) -> (ExitStatus, String) {
    let stderr_path = scratch.join(format!("stderr-{}", free_port()));
    let stderr_file = std::fs::File::create(&stderr_path).expect("stderr file");
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let mut child = Command::new(capstan_bin())
        .arg("store")
        .args(["--name", "default", "--listen-client-urls", &endpoint])
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr_file)
        .spawn()
        .expect("spawn capstan");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            panic!(
                "capstan store on unusable data dir {} still running after 10 s; stderr:\n{log}",
                data_dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status,
        std::fs::read_to_string(&stderr_path).expect("read stderr"),
    )
}

/// Asserts a failed start-up: non-zero exit and a stderr that names the data directory.
fn assert_clean_startup_failure(data_dir: &Path, status: ExitStatus, stderr: &str) {
    assert!(
        !status.success(),
        "store on {} exited with {status}",
        data_dir.display()
    );
    assert!(
        status.code().is_some(),
        "store must exit, not die of a signal: {status}"
    );
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    assert!(
        !last.is_empty(),
        "no error message on stderr for {}",
        data_dir.display()
    );
    let path = data_dir.to_string_lossy();
    assert!(
        stderr.contains(path.as_ref()),
        "stderr should name the data dir {path}; got:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked at"),
        "a clean error, not a panic:\n{stderr}"
    );
}

#[test]
fn data_dir_under_a_regular_file_fails_fast() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("file");
    std::fs::write(&file, b"not a directory").expect("write file");
    let data_dir = file.join("data");
    let (status, stderr) = start_expecting_exit(&data_dir, tmp.path());
    eprintln!("stderr for {}: {stderr}", data_dir.display());
    assert_clean_startup_failure(&data_dir, status, &stderr);
    assert_eq!(
        std::fs::read(&file).expect("file intact"),
        b"not a directory"
    );
}

#[test]
fn data_dir_under_proc_fails_fast() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = PathBuf::from("/proc/capstan-e2e-no-such-dir/data");
    let (status, stderr) = start_expecting_exit(&data_dir, tmp.path());
    eprintln!("stderr for {}: {stderr}", data_dir.display());
    assert_clean_startup_failure(&data_dir, status, &stderr);
}

/// Unmounts a tmpfs when dropped (also when the test panics).
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn full_disk_fails_fast_with_no_space_message() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !mounted.is_ok_and(|s| s.success()) {
        eprintln!("SKIP full_disk_fails_fast_with_no_space_message: cannot mount a tmpfs here");
        return;
    }
    let _mount = Mount(mnt.clone());

    // Create the data dir while there is still room, then fill the filesystem.
    let data_dir = mnt.join("data");
    std::fs::create_dir(&data_dir).expect("mkdir data");
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(mnt.join("filler")).expect("filler");
        let chunk = vec![0u8; 4096];
        let mut written = 0usize;
        loop {
            match filler.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling tmpfs: {e}"),
            }
            assert!(
                written < 4 << 20,
                "tmpfs did not fill up after {written} bytes"
            );
        }
        let _ = filler.flush();
    }

    let (status, stderr) = start_expecting_exit(&data_dir, tmp.path());
    eprintln!("stderr on a full disk: {stderr}");
    assert!(
        !status.success(),
        "store on a full disk exited with {status}"
    );
    assert!(
        status.code().is_some(),
        "store must exit, not die of a signal: {status}"
    );
    assert!(
        !stderr.contains("panicked at"),
        "a clean error, not a panic:\n{stderr}"
    );
    assert!(
        stderr.to_lowercase().contains("no space"),
        "stderr should say there is no space left; got:\n{stderr}"
    );
}
