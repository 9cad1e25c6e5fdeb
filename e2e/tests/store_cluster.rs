//! A 3-member store cluster on loopback: separate `capstan store` processes with their own
//! ports and data directories, bootstrapped with `--initial-cluster` as etcd is.
//!
//! - `etcdctl endpoint status` over all three shows exactly one leader; `member list` shows
//!   the three members with names and URLs; a put through each member is read linearizably
//!   (and serializably, after the linearizable read) from every member; a watch on a
//!   follower sees every event in order; SIGTERM of the leader hands leadership over; with
//!   two members gone the last one fails writes with etcd's "no leader"/"timed out" errors.
//! - Failover: `kill -9` of the leader under a steady write load; the survivors elect a
//!   leader and writes resume (the gap is printed); the killed member restarts, catches up by
//!   snapshot (the log was compacted past it meanwhile), and every acknowledged write is on
//!   every member at the end.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use e2e::etcd_cluster::{Cluster, member_status};
use e2e::{etcdctl, leaders_in_table};
use etcd_client::{Client, ConnectOptions, GetOptions, WatchOptions};

/// A cluster of `n` members with `extra` flags, once every member agrees on a leader.
fn start(n: usize, extra: &[&str]) -> Result<Cluster> {
    let c = Cluster::start(n, extra)?;
    c.wait_leader(Duration::from_secs(30))?;
    Ok(c)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(endpoint: &str, timeout: Duration) -> Result<Client> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(timeout);
    Ok(Client::connect([endpoint], Some(opts)).await?)
}

/// (member id, leader id, applied index) of one member, via Maintenance.Status.
#[test]
fn three_members_one_leader_linearizable_everywhere() -> Result<()> {
    let mut c = start(3, &[])?;
    let eps = c.endpoints();

    // One leader, seen through the stock etcdctl.
    let (ok, out, err) = etcdctl(&eps, &["endpoint", "status", "-w", "table"], None)?;
    assert!(ok, "endpoint status failed: {err}");
    println!("{out}");
    assert_eq!(leaders_in_table(&out)?, 1, "exactly one leader:\n{out}");

    // member list: the three members, each with its name and peer URL (client URLs are
    // learned as the members introduce themselves, so poll briefly).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, out, err) = etcdctl(c.members[0].endpoint(), &["member", "list"], None)?;
        assert!(ok, "member list failed: {err}");
        let complete = c.members.iter().all(|m| {
            out.lines().any(|l| {
                l.contains(&format!(", {}, ", m.name))
                    && l.contains(&m.peer_url)
                    && l.contains(&m.client_url)
            })
        });
        if complete && out.lines().count() == 3 {
            println!("{out}");
            break;
        }
        assert!(Instant::now() < deadline, "member list incomplete:\n{out}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A put through each member is read back linearizably from every member, then
    // serializably (local state) once the linearizable read has passed.
    for (i, m) in c.members.iter().enumerate() {
        let (ok, _, err) = etcdctl(
            m.endpoint(),
            &["put", &format!("k{i}"), &format!("v{i}")],
            None,
        )?;
        assert!(ok, "put through {} failed: {err}", m.name);
        for r in &c.members {
            let (ok, out, err) = etcdctl(r.endpoint(), &["get", &format!("k{i}")], None)?;
            assert!(ok, "get from {} failed: {err}", r.name);
            assert_eq!(
                out,
                format!("k{i}\nv{i}\n"),
                "linearizable read from {}",
                r.name
            );
            let (ok, out, _) = etcdctl(
                r.endpoint(),
                &["get", &format!("k{i}"), "--consistency=s"],
                None,
            )?;
            assert!(ok);
            assert_eq!(
                out,
                format!("k{i}\nv{i}\n"),
                "serializable read from {}",
                r.name
            );
        }
    }

    // A watch on a follower sees every event, in order, with no gaps.
    let leader = c.wait_leader(Duration::from_secs(10))?;
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let rt = rt();
    let (fep, lep, oep) = (
        c.members[follower].client_url.clone(),
        c.members[leader].client_url.clone(),
        c.members[other].client_url.clone(),
    );
    const EVENTS: usize = 200;
    rt.block_on(async move {
        let mut w = connect(&fep, Duration::from_secs(10)).await?;
        let mut stream = w
            .watch(
                "w/",
                Some(WatchOptions::new().with_prefix().with_prev_key()),
            )
            .await?;
        let mut lc = connect(&lep, Duration::from_secs(10)).await?;
        let mut oc = connect(&oep, Duration::from_secs(10)).await?;
        for i in 0..EVENTS {
            let c = if i % 2 == 0 { &mut lc } else { &mut oc };
            c.put(format!("w/{}", i % 7), format!("{i}"), None).await?;
        }
        let mut seen = Vec::new();
        let mut last_rev = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while seen.len() < EVENTS {
            let resp = tokio::time::timeout_at(deadline, stream.message())
                .await
                .context("watch on follower stalled")??
                .context("watch stream ended")?;
            for ev in resp.events() {
                let kv = ev.kv().context("event without kv")?;
                assert!(kv.mod_revision() > last_rev, "events out of order");
                last_rev = kv.mod_revision();
                seen.push(kv.value_str()?.to_owned());
            }
        }
        let expected: Vec<String> = (0..EVENTS).map(|i| i.to_string()).collect();
        assert_eq!(seen, expected, "follower watch saw every event in order");
        anyhow::Ok(())
    })?;

    // Graceful stop of the leader hands leadership over: the others have a new leader well
    // within an election timeout's worth of waiting.
    let leader = c.wait_leader(Duration::from_secs(10))?;
    let t = Instant::now();
    c.members[leader].terminate()?;
    let new_leader = c.wait_leader(Duration::from_secs(10))?;
    let handover = t.elapsed();
    println!("leadership handed over on SIGTERM in {handover:?}");
    assert_ne!(new_leader, leader);
    assert!(
        c.members[leader].log().contains("transferring leadership"),
        "leader did not transfer: {}",
        c.members[leader].log()
    );

    // With two of three members gone, the last one cannot commit: the write fails with
    // etcd's "no leader" / "request timed out" instead of hanging.
    let survivor = (0..3)
        .find(|i| *i != leader && *i != new_leader)
        .unwrap_or(0);
    c.members[new_leader].kill9();
    let t = Instant::now();
    let (ok, _, err) = etcdctl(
        c.members[survivor].endpoint(),
        &["put", "lonely", "x"],
        None,
    )?;
    println!(
        "write without quorum failed after {:?}: {}",
        t.elapsed(),
        err.trim()
    );
    assert!(!ok, "a write without quorum must fail");
    assert!(
        err.contains("etcdserver: no leader") || err.contains("etcdserver: request timed out"),
        "unexpected error: {err}"
    );
    Ok(())
}

/// Writes unique keys through whichever member answers, recording every acknowledged key and
/// the time of every acknowledgement.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(Instant, String)>>>,
    count: Arc<AtomicU64>,
}

fn start_load(rt: &tokio::runtime::Runtime, endpoints: &[String], writers: usize) -> Load {
    let load = Load {
        stop: Arc::new(AtomicBool::new(false)),
        acked: Arc::new(Mutex::new(Vec::new())),
        count: Arc::new(AtomicU64::new(0)),
    };
    for w in 0..writers {
        let (stop, acked, count) = (
            Arc::clone(&load.stop),
            Arc::clone(&load.acked),
            Arc::clone(&load.count),
        );
        let endpoints = endpoints.to_vec();
        rt.spawn(async move {
            let mut clients: Vec<Option<Client>> = endpoints.iter().map(|_| None).collect();
            let mut target = w % endpoints.len();
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("load/{w:02}/{seq:08}");
                if clients[target].is_none() {
                    clients[target] = connect(&endpoints[target], Duration::from_millis(1500))
                        .await
                        .ok();
                }
                let res = match clients[target].as_mut() {
                    Some(c) => c.put(key.clone(), "v", None).await.map(|_| ()),
                    None => Err(etcd_client::Error::InvalidArgs("not connected".into())),
                };
                match res {
                    Ok(()) => {
                        acked.lock().unwrap().push((Instant::now(), key));
                        count.fetch_add(1, Ordering::Relaxed);
                        seq += 1;
                    }
                    Err(_) => {
                        // Unknown outcome: retry the same key (a put is idempotent here)
                        // through the next member.
                        clients[target] = None;
                        target = (target + 1) % endpoints.len();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        });
    }
    load
}

fn wait_count(count: &AtomicU64, at_least: u64, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    while count.load(Ordering::Relaxed) < at_least {
        if Instant::now() > deadline {
            bail!(
                "only {} acknowledged writes after {limit:?} (wanted {at_least})",
                count.load(Ordering::Relaxed)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[test]
fn leader_kill_under_load_fails_over_and_the_member_catches_up_by_snapshot() -> Result<()> {
    let mut c = start(
        3,
        &[
            "--snapshot-count",
            "300",
            "--experimental-snapshot-catchup-entries",
            "100",
        ],
    )?;
    let endpoints: Vec<String> = c.members.iter().map(|m| m.client_url.clone()).collect();
    let rt = rt();
    let load = start_load(&rt, &endpoints, 4);
    wait_count(&load.count, 300, Duration::from_secs(60))?;

    let leader = c.wait_leader(Duration::from_secs(10))?;
    let killed_at = Instant::now();
    c.members[leader].kill9();
    let before = load.count.load(Ordering::Relaxed);
    wait_count(&load.count, before + 50, Duration::from_secs(30))?;
    let new_leader = c.wait_leader(Duration::from_secs(10))?;
    assert_ne!(new_leader, leader);

    // The gap: the longest time without any acknowledged write from just before the kill
    // until writes flowed again.
    let resumed_at = Instant::now();
    let (gap, kill_to_resume) = {
        let mut times: Vec<Instant> = load.acked.lock().unwrap().iter().map(|(t, _)| *t).collect();
        times.sort();
        let window: Vec<Instant> = times
            .into_iter()
            .filter(|t| *t + Duration::from_millis(500) >= killed_at && *t <= resumed_at)
            .collect();
        let gap = window
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .context("no writes around the kill")?;
        let stall_end = window
            .windows(2)
            .find(|w| w[1] - w[0] == gap)
            .map_or(killed_at, |w| w[1]);
        (gap, stall_end.saturating_duration_since(killed_at))
    };
    println!(
        "failover: longest write gap {:.0} ms (kill → writes resumed {:.0} ms)",
        gap.as_secs_f64() * 1000.0,
        kill_to_resume.as_secs_f64() * 1000.0
    );
    assert!(gap < Duration::from_secs(5), "writes stalled for {gap:?}");

    // Far more writes than the log keeps behind a snapshot, so the killed member can only
    // catch up from a snapshot.
    let now = load.count.load(Ordering::Relaxed);
    wait_count(&load.count, now + 1200, Duration::from_secs(120))?;
    c.spawn(leader)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leader_applied = member_status(c.members[new_leader].endpoint()).map(|s| s.applied);
        let applied = member_status(c.members[leader].endpoint()).map(|s| s.applied);
        if let (Some(a), Some(l)) = (applied, leader_applied)
            && a + 50 >= l
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restarted member did not catch up; log: {}",
            c.members[leader].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        c.members[leader]
            .log()
            .contains("restored state machine from a snapshot sent by the leader"),
        "the restarted member should have caught up by snapshot; log: {}",
        c.members[leader].log()
    );
    // Writes keep flowing with all three back.
    let now = load.count.load(Ordering::Relaxed);
    wait_count(&load.count, now + 100, Duration::from_secs(30))?;
    load.stop.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(2000));

    // Every acknowledged write is on every member (linearizable reads).
    let acked: BTreeSet<String> = load
        .acked
        .lock()
        .unwrap()
        .iter()
        .map(|(_, k)| k.clone())
        .collect();
    println!("{} acknowledged writes", acked.len());
    for ep in &endpoints {
        let ep2 = ep.clone();
        let keys: BTreeSet<String> = rt.block_on(async move {
            let mut c = connect(&ep2, Duration::from_secs(10)).await?;
            let r = c
                .get(
                    "load/",
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                )
                .await?;
            anyhow::Ok(
                r.kvs()
                    .iter()
                    .map(|kv| kv.key_str().map(str::to_owned))
                    .collect::<Result<_, _>>()?,
            )
        })?;
        let missing: Vec<&String> = acked.difference(&keys).take(5).collect();
        assert!(
            missing.is_empty(),
            "{ep} lacks acknowledged writes, e.g. {missing:?}"
        );
    }
    Ok(())
}
