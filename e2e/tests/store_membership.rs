//! Disaster recovery against a live 3-member store cluster on loopback: stock
//! `etcdctl snapshot save` streams Maintenance.Snapshot from a follower and from the
//! leader, and the file it writes holds every key written before (its 512-byte paging and
//! trailing SHA-256 are the integrity check `snapshot restore` relies on; restoring is in
//! `store_snapshot.rs`).
//!
//! Membership changes through stock `etcdctl member …` are validated as etcd does: an
//! unknown id is "member not found", a peer URL already in use is "Peer URLs already
//! exists", promoting a voter is "can only promote a learner member". Carrying out valid
//! changes is in `store_grow_shrink.rs`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use e2e::{capstan_bin, etcdctl, free_port};

/// One running `capstan store` member; killed on drop.
struct Member {
    client_url: String,
    log_path: PathBuf,
    child: Child,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts three members bootstrapped with `--initial-cluster` in `dir`.
fn start_three(dir: &std::path::Path) -> Result<Vec<Member>> {
    let names = ["m1", "m2", "m3"];
    let peers: Vec<String> = names
        .iter()
        .map(|_| format!("http://127.0.0.1:{}", free_port()))
        .collect();
    let initial_cluster = names
        .iter()
        .zip(&peers)
        .map(|(n, p)| format!("{n}={p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for (name, peer) in names.iter().zip(&peers) {
        let client_url = format!("http://127.0.0.1:{}", free_port());
        let log_path = dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(capstan_bin())
            .arg("store")
            .args(["--name", name])
            .arg("--data-dir")
            .arg(dir.join(name))
            .args(["--listen-client-urls", &client_url])
            .args(["--listen-peer-urls", peer])
            .args(["--initial-advertise-peer-urls", peer])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-token", "e2e-membership"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", capstan_bin().display()))?;
        members.push(Member {
            client_url,
            log_path,
            child,
        });
    }
    Ok(members)
}

fn logs(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| std::fs::read_to_string(&m.log_path).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n-----\n")
}

#[test]
fn etcdctl_snapshot_save_from_a_live_cluster_holds_every_key() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let members = start_three(dir.path())?;

    // Writes through every member once the cluster has a leader (poll: elections take a
    // moment after start-up).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut written = Vec::new();
    for i in 0..30 {
        let m = &members[i % members.len()];
        let key = format!("/snapshot-e2e/key-{i:03}");
        let value = format!("value-{i}");
        loop {
            let (ok, _, err) = etcdctl(&m.client_url, &["put", &key, &value], None)?;
            if ok {
                break;
            }
            if Instant::now() > deadline {
                bail!("put {key} kept failing: {err}; logs:\n{}", logs(&members));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        written.push(key);
    }

    for (which, m) in members.iter().enumerate() {
        let file = dir.path().join(format!("snap-{which}.db"));
        let file_arg = file.to_string_lossy().into_owned();
        let (ok, out, err) = etcdctl(&m.client_url, &["snapshot", "save", &file_arg], None)?;
        assert!(ok, "snapshot save from member {which} failed: {out} {err}");
        assert!(
            format!("{out}{err}").contains("Snapshot saved at"),
            "unexpected etcdctl output: {out} {err}"
        );
        let bytes = std::fs::read(&file)?;
        // 512-byte pages followed by the 32-byte SHA-256 of everything before it.
        assert!(
            bytes.len() > 512 + 32,
            "snapshot too small: {}",
            bytes.len()
        );
        assert_eq!(
            (bytes.len() - 32) % 512,
            0,
            "snapshot is not 512-byte paged"
        );
        for key in &written {
            let needle = key.as_bytes();
            assert!(
                bytes.windows(needle.len()).any(|w| w == needle),
                "snapshot from member {which} lacks {key}"
            );
        }
    }
    Ok(())
}

#[test]
fn member_changes_are_validated_as_etcd_does() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let members = start_three(dir.path())?;
    let ep = &members[0].client_url;

    // The member list (hex ids and peer URLs, as `etcdctl member list` prints them).
    let deadline = Instant::now() + Duration::from_secs(60);
    let list = loop {
        let (ok, out, err) = etcdctl(ep, &["member", "list"], None)?;
        if ok && out.lines().filter(|l| l.contains("http://")).count() == 3 {
            break out;
        }
        if Instant::now() > deadline {
            bail!("member list: {out} {err}; logs:\n{}", logs(&members));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let first = list.lines().next().context("empty member list")?;
    let id = first
        .split(',')
        .next()
        .context("no id column")?
        .trim()
        .to_owned();
    let peer = first
        .split(',')
        .map(str::trim)
        .find(|c| c.starts_with("http://"))
        .context("no peer url column")?
        .to_owned();

    let unknown = "deadbeefcafe";
    for args in [
        vec!["member", "remove", unknown],
        vec!["member", "promote", unknown],
        vec![
            "member",
            "update",
            unknown,
            "--peer-urls=http://127.0.0.1:1",
        ],
    ] {
        let (ok, out, err) = etcdctl(ep, &args, None)?;
        assert!(!ok, "{args:?} succeeded: {out}");
        assert!(
            err.contains("etcdserver: member not found"),
            "{args:?}: {err}"
        );
    }

    let peer_flag = format!("--peer-urls={peer}");
    let (ok, out, err) = etcdctl(ep, &["member", "add", "dup", &peer_flag], None)?;
    assert!(!ok, "member add with a taken peer URL succeeded: {out}");
    assert!(err.contains("Peer URLs already exists"), "{err}");

    let (ok, out, err) = etcdctl(ep, &["member", "promote", &id], None)?;
    assert!(!ok, "promoting a voter succeeded: {out}");
    assert!(err.contains("can only promote a learner member"), "{err}");
    Ok(())
}
