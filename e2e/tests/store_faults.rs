//! The store fault suite (short form; `make test-faults` is the long form).
//!
//! A 3-member cluster whose peer traffic goes through test-owned proxies serves concurrent
//! put / get / txn-CAS / delete load from several clients through random members while a
//! nemesis injects one fault at a time: kill -9 and restart, SIGSTOP and SIGCONT, a partition
//! of a member's inbound peer traffic or of all its traffic both ways (isolation), a delay on
//! its inbound traffic, or the replacement of a member (kill -9,
//! data wiped, `member remove` of its id, `member add` of a new member at the same URLs, which
//! joins and catches up by snapshot). After healing come final
//! linearizable reads. Then the whole history must be linearizable per key (checked by
//! `e2e::linearizability`). Watches are checked twice: a watch per member that runs through
//! the faults (resuming after each break from the revision after its last event) and a fresh
//! watch from revision 1 on every member after the run must each deliver the events in
//! order, without duplicates or gaps, identical across members and between the two, and
//! including every acknowledged put.
//!
//! A history the checker cannot decide within its time budget (60 s) is reported as
//! inconclusive and saved, not counted as a violation.
//!
//! `FAULT_RUNS` (default 3) sets the number of runs, `FAULT_RUN_SECS` (default 12) their
//! length, `FAULT_SEED` the base seed; failing histories are saved under
//! `$FAULT_HISTORY_DIR` (default the system temp dir).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use e2e::etcd_cluster::Cluster;
use e2e::faultproxy::Mode;
use e2e::linearizability::{self, CasGuard, CheckResult, Input, Operation, Output};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, WatchOptions};

const KEYS: [&str; 3] = ["fk0", "fk1", "fk2"];
const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// xorshift64*: deterministic per-run randomness without a dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn now(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
}

/// One client's loop: random operations through random members until `stop_at`.
async fn client_loop(
    id: usize,
    endpoints: Vec<String>,
    start: Instant,
    stop_at: Instant,
    seed: u64,
    history: Arc<Mutex<Vec<Operation>>>,
) {
    let mut rng = Rng(seed | 1);
    let mut clients: Vec<Option<Client>> = vec![None; endpoints.len()];
    let mut seq = 0u64;
    let mut last_rev = [0i64; KEYS.len()];
    while Instant::now() < stop_at {
        let m = rng.below(endpoints.len() as u64) as usize;
        if clients[m].is_none() {
            if let Ok(Ok(c)) =
                tokio::time::timeout(OP_TIMEOUT, Client::connect([endpoints[m].as_str()], None))
                    .await
            {
                clients[m] = Some(c);
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        let Some(c) = clients[m].as_mut() else {
            continue;
        };
        let k = rng.below(KEYS.len() as u64) as usize;
        let key = KEYS[k];
        seq += 1;
        let value = format!("c{id}-{seq}");
        let input = match rng.below(10) {
            0..=3 => Input::Put(value.clone()),
            4..=6 => Input::Get,
            7 => Input::Delete,
            _ => Input::Cas {
                guard: if rng.below(2) == 0 {
                    CasGuard::ModRevision(last_rev[k])
                } else {
                    CasGuard::Value(None)
                },
                new: Some(value.clone()),
            },
        };
        let call = now(start);
        let out: Result<Output, ()> = match &input {
            Input::Put(v) => {
                match tokio::time::timeout(OP_TIMEOUT, c.put(key, v.as_str(), None)).await {
                    Ok(Ok(r)) => Ok(Output::Put {
                        rev: r.header().map_or(0, |h| h.revision()),
                    }),
                    _ => Err(()),
                }
            }
            Input::Get => match tokio::time::timeout(OP_TIMEOUT, c.get(key, None)).await {
                Ok(Ok(r)) => {
                    let kv = r.kvs().first();
                    let mod_rev = kv.map_or(0, |kv| kv.mod_revision());
                    last_rev[k] = mod_rev;
                    Ok(Output::Get {
                        value: kv.map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                        mod_rev,
                    })
                }
                _ => Err(()),
            },
            Input::Delete => match tokio::time::timeout(OP_TIMEOUT, c.delete(key, None)).await {
                Ok(Ok(r)) => Ok(Output::Delete {
                    deleted: r.deleted() > 0,
                }),
                _ => Err(()),
            },
            Input::Cas { guard, new } => {
                let cmp = match guard {
                    CasGuard::ModRevision(r) => Compare::mod_revision(key, CompareOp::Equal, *r),
                    CasGuard::Value(_) => Compare::create_revision(key, CompareOp::Equal, 0),
                };
                let txn = Txn::new().when([cmp]).and_then([TxnOp::put(
                    key,
                    new.clone().unwrap_or_default(),
                    None,
                )]);
                match tokio::time::timeout(OP_TIMEOUT, c.txn(txn)).await {
                    Ok(Ok(r)) => Ok(Output::Cas {
                        succeeded: r.succeeded(),
                        rev: r.header().map_or(0, |h| h.revision()),
                    }),
                    _ => Err(()),
                }
            }
        };
        let ret = now(start);
        let (output, ret) = match out {
            Ok(o) => (o, ret),
            // A failed read changes nothing: leave it out. A failed write may have applied.
            Err(()) if input == Input::Get => continue,
            Err(()) => {
                // Reconnect next time: the channel may be wedged on a killed member.
                clients[m] = None;
                (Output::Unknown, u64::MAX)
            }
        };
        if let Ok(mut h) = history.lock() {
            h.push(Operation {
                client: id,
                key: key.to_owned(),
                input,
                output,
                call,
                ret,
            });
        }
    }
}

/// Every event on the fault keys from revision 1 up to `final_rev`: (revision, key, value).
async fn watch_all(ep: &str, final_rev: i64) -> Result<Vec<(i64, String, String)>> {
    let mut c = Client::connect([ep], None).await?;
    let opts = WatchOptions::new().with_prefix().with_start_revision(1);
    let mut stream = c.watch("fk", Some(opts)).await?;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while out.last().map_or(0, |e: &(i64, String, String)| e.0) < final_rev {
        let msg = tokio::time::timeout_at(deadline, stream.message()).await??;
        let Some(resp) = msg else {
            bail!("watch stream ended");
        };
        if resp.canceled() || resp.compact_revision() > 0 {
            bail!(
                "watch canceled (compact revision {})",
                resp.compact_revision()
            );
        }
        for ev in resp.events() {
            if let Some(kv) = ev.kv() {
                out.push((
                    kv.mod_revision(),
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                ));
            }
        }
    }
    Ok(out)
}

/// A watch that lives through the faults: from revision 1 on `ep`, and whenever the stream
/// breaks (the member killed, a connection lost) it reconnects to the same member and
/// resumes from the revision after the last event it got, as a client (or the API server's
/// watch cache) does. Returns the events once it has seen `target` (set when the run ends)
/// and the number of resumes.
async fn live_watch(
    ep: String,
    mut target: tokio::sync::watch::Receiver<i64>,
) -> Result<(Vec<(i64, String, String)>, usize)> {
    let mut out: Vec<(i64, String, String)> = Vec::new();
    let mut resumes = 0;
    loop {
        let last = out.last().map_or(0, |e| e.0);
        let goal = *target.borrow();
        if goal > 0 && last >= goal {
            return Ok((out, resumes));
        }
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(last + 1);
        let connected = tokio::time::timeout(OP_TIMEOUT, async {
            let mut c = Client::connect([ep.as_str()], None).await.ok()?;
            let stream = c.watch("fk", Some(opts)).await.ok()?;
            Some((c, stream))
        })
        .await
        .ok()
        .flatten();
        let Some((_client, mut stream)) = connected else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        loop {
            let goal = *target.borrow();
            if goal > 0 && out.last().map_or(0, |e| e.0) >= goal {
                return Ok((out, resumes));
            }
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = target.changed() => continue,
            };
            let resp = match msg {
                Ok(Some(resp)) => resp,
                Ok(None) | Err(_) => break,
            };
            if resp.compact_revision() > 0 {
                bail!(
                    "live watch on {ep} compacted at {}",
                    resp.compact_revision()
                );
            }
            if resp.canceled() {
                break;
            }
            for ev in resp.events() {
                if let Some(kv) = ev.kv() {
                    out.push((
                        kv.mod_revision(),
                        String::from_utf8_lossy(kv.key()).into_owned(),
                        String::from_utf8_lossy(kv.value()).into_owned(),
                    ));
                }
            }
        }
        resumes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Order, duplicates and gaps of a watch's events: (revision, key) strictly increasing, and
/// every revision from the first event's to the last present (every write of a run touches
/// a fault key, so a missing revision is a lost event).
fn check_watch(what: &str, events: &[(i64, String, String)]) -> Result<()> {
    for w in events.windows(2) {
        if (w[0].0, &w[0].1) >= (w[1].0, &w[1].1) {
            bail!("{what}: events out of order or duplicated: {w:?}");
        }
        if w[1].0 > w[0].0 + 1 {
            bail!(
                "{what}: gap: no event between revisions {} and {}",
                w[0].0,
                w[1].0
            );
        }
    }
    Ok(())
}

/// Fault counts of one run.
#[derive(Default, Debug)]
struct Faults {
    kill9: usize,
    pause: usize,
    partition: usize,
    delay: usize,
    replace: usize,
    isolate: usize,
    /// Times a live watch broke and resumed.
    watch_resumes: usize,
    /// Where the history went when the checker ran out of time on it.
    inconclusive: Option<std::path::PathBuf>,
}

/// Replaces member `i` by a new member at the same URLs (see
/// [`Cluster::wipe_for_replacement`]), through the Cluster API of the other members.
fn replace_member(cluster: &mut Cluster, i: usize, rt: &tokio::runtime::Runtime) -> Result<()> {
    let Some(old) = e2e::etcd_cluster::member_status(cluster.members[i].endpoint()) else {
        return Ok(());
    };
    let others: Vec<String> = cluster
        .members
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, m)| m.client_url.clone())
        .collect();
    let peer = cluster.members[i].peer_url.clone();
    cluster.wipe_for_replacement(i)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let result: Result<()> = rt.block_on(async {
        let mut removed = false;
        loop {
            if Instant::now() > deadline {
                bail!("replacing member {i}: removed={removed}, the cluster kept refusing");
            }
            for ep in &others {
                let Ok(mut c) = Client::connect([ep.as_str()], None).await else {
                    continue;
                };
                if !removed {
                    match tokio::time::timeout(OP_TIMEOUT * 2, c.member_remove(old.member_id)).await
                    {
                        Ok(Ok(_)) => removed = true,
                        Ok(Err(e)) if e.to_string().contains("member not found") => removed = true,
                        _ => continue,
                    }
                }
                let add = c.member_add([peer.as_str()], None);
                if let Ok(Ok(_)) = tokio::time::timeout(OP_TIMEOUT * 2, add).await {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    result.map_err(|e| anyhow::anyhow!("{e:#}; logs:\n{}", cluster.logs()))?;
    cluster.spawn(i)?;
    // The new member must come up (join, catch up, serve) before the next fault.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if cluster.members[i].exited() {
            bail!(
                "the replacement member {i} exited; logs:\n{}",
                cluster.logs()
            );
        }
        if e2e::etcd_cluster::member_status(cluster.members[i].endpoint())
            .is_some_and(|s| s.leader != 0)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the replacement member {i} did not join; logs:\n{}",
                cluster.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One run: cluster, load, nemesis, heal, final reads, check.
fn one_run(run: usize, seed: u64, secs: u64) -> Result<(usize, Faults)> {
    let mut cluster = Cluster::start_proxied(3, &[])?;
    let endpoints: Vec<String> = cluster
        .members
        .iter()
        .map(|m| m.client_url.clone())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // Wait until the cluster takes writes through every member.
    let deadline = Instant::now() + Duration::from_secs(60);
    for ep in &endpoints {
        loop {
            let ok = rt.block_on(async {
                let Ok(mut c) = Client::connect([ep.as_str()], None).await else {
                    return false;
                };
                matches!(
                    tokio::time::timeout(OP_TIMEOUT, c.put("ready", "1", None)).await,
                    Ok(Ok(_))
                )
            });
            if ok {
                break;
            }
            if Instant::now() > deadline {
                bail!("cluster not ready; logs:\n{}", cluster.logs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let start = Instant::now();
    let stop_at = start + Duration::from_secs(secs);
    let history = Arc::new(Mutex::new(Vec::new()));
    let (watch_target, watch_goal) = tokio::sync::watch::channel(0i64);
    let watchers: Vec<_> = endpoints
        .iter()
        .map(|ep| rt.spawn(live_watch(ep.clone(), watch_goal.clone())))
        .collect();
    let mut tasks = Vec::new();
    for id in 0..4 {
        tasks.push(rt.spawn(client_loop(
            id,
            endpoints.clone(),
            start,
            stop_at,
            seed.wrapping_mul(31).wrapping_add(id as u64 + 1),
            history.clone(),
        )));
    }
    // Nemesis: one fault at a time on a random member, healed before the next.
    let mut rng = Rng(seed | 1);
    let mut faults = Faults::default();
    while Instant::now() + Duration::from_secs(3) < stop_at {
        std::thread::sleep(Duration::from_millis(500 + rng.below(1000)));
        let i = rng.below(3) as usize;
        let hold = Duration::from_millis(300 + rng.below(1500));
        let kind = rng.below(5);
        if kind == 4 {
            replace_member(&mut cluster, i, &rt)?;
            faults.replace += 1;
        } else if kind == 2 && rng.below(2) == 0 {
            // Symmetric partition: nothing reaches member i and nothing from it arrives.
            let Some(id) = e2e::etcd_cluster::member_status(cluster.members[i].endpoint())
                .map(|s| s.member_id)
            else {
                continue;
            };
            for (j, m) in cluster.members.iter().enumerate() {
                if let Some(p) = m.proxy.as_ref() {
                    if j == i {
                        p.set(Mode::Drop);
                    } else {
                        p.block_from(id);
                    }
                }
            }
            faults.isolate += 1;
            std::thread::sleep(hold);
            for m in &cluster.members {
                if let Some(p) = m.proxy.as_ref() {
                    p.set(Mode::Pass);
                    p.unblock_all();
                }
            }
        } else if kind >= 2 {
            let Some(p) = cluster.members[i].proxy.as_ref() else {
                continue;
            };
            if kind == 2 {
                p.set(Mode::Drop);
                faults.partition += 1;
            } else {
                p.set(Mode::Delay(Duration::from_millis(20 + rng.below(200))));
                faults.delay += 1;
            }
            std::thread::sleep(hold);
            p.set(Mode::Pass);
        } else if kind == 0 {
            cluster.members[i].kill9();
            faults.kill9 += 1;
            std::thread::sleep(Duration::from_millis(300 + rng.below(1500)));
            cluster.spawn(i)?;
        } else {
            cluster.members[i].pause()?;
            faults.pause += 1;
            std::thread::sleep(Duration::from_millis(300 + rng.below(1500)));
            cluster.members[i].resume()?;
        }
    }
    for t in tasks {
        let _ = rt.block_on(t);
    }
    // Final linearizable reads of every key (retried until a member answers).
    let final_deadline = Instant::now() + Duration::from_secs(60);
    for (k, key) in KEYS.iter().enumerate() {
        loop {
            let ep = &endpoints[k % endpoints.len()];
            let call = now(start);
            let r = rt.block_on(async {
                let mut c = Client::connect([ep.as_str()], None).await.ok()?;
                tokio::time::timeout(OP_TIMEOUT, c.get(*key, None))
                    .await
                    .ok()?
                    .ok()
            });
            if let Some(r) = r {
                let kv = r.kvs().first();
                if let Ok(mut h) = history.lock() {
                    h.push(Operation {
                        client: 999,
                        key: (*key).to_owned(),
                        input: Input::Get,
                        output: Output::Get {
                            value: kv.map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                            mod_rev: kv.map_or(0, |kv| kv.mod_revision()),
                        },
                        call,
                        ret: now(start),
                    });
                }
                break;
            }
            if Instant::now() > final_deadline {
                let statuses: Vec<String> = endpoints
                    .iter()
                    .map(|ep| format!("{ep}: {:?}", e2e::etcd_cluster::member_status(ep)))
                    .collect();
                bail!(
                    "no final read of {key} from {ep}; member statuses:\n{}\nlogs:\n{}",
                    statuses.join("\n"),
                    cluster.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let history = history.lock().map(|h| h.clone()).unwrap_or_default();
    // Watch streams: from revision 1 on every member, events in strictly increasing
    // (revision, key) order with no duplicates, and every acknowledged put present with its
    // value at its revision.
    let final_rev = history
        .iter()
        .filter_map(|o| match o.output {
            Output::Put { rev } | Output::Cas { rev, .. } => Some(rev),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // The watches that ran through the faults: resumed after every break, they must hold
    // exactly what a fresh watch holds, with no gap, duplicate or reordering.
    let _ = watch_target.send(final_rev);
    let mut live = Vec::new();
    for (ep, w) in endpoints.iter().zip(watchers) {
        let joined = rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), w).await });
        match joined {
            Ok(Ok(Ok((events, resumes)))) => {
                check_watch(&format!("live watch on {ep} ({resumes} resumes)"), &events)?;
                faults.watch_resumes += resumes;
                live.push(events);
            }
            Ok(Ok(Err(e))) => bail!("live watch on {ep}: {e:#}"),
            Ok(Err(e)) => bail!("live watch on {ep}: {e}"),
            Err(_) => bail!("live watch on {ep} did not reach revision {final_rev} in 60 s"),
        }
    }
    let mut fresh: Vec<Vec<(i64, String, String)>> = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        let events = rt.block_on(watch_all(ep, final_rev));
        let events = match events {
            Ok(ev) => ev,
            Err(e) => bail!("watch on {ep}: {e:#}"),
        };
        check_watch(&format!("watch on {ep}"), &events)?;
        let upto = |evs: &[(i64, String, String)]| -> Vec<(i64, String, String)> {
            evs.iter().filter(|e| e.0 <= final_rev).cloned().collect()
        };
        if upto(&events) != upto(&live[i]) {
            bail!("watch on {ep}: the live watch and a fresh watch differ");
        }
        if let Some(first) = fresh.first()
            && upto(first) != upto(&events)
        {
            bail!("watch on {ep}: members' histories differ");
        }
        fresh.push(events.clone());
        let seen: std::collections::HashSet<(i64, &str, &str)> = events
            .iter()
            .map(|(r, k, v)| (*r, k.as_str(), v.as_str()))
            .collect();
        for o in &history {
            let (Input::Put(v), Output::Put { rev }) = (&o.input, &o.output) else {
                continue;
            };
            if !seen.contains(&(*rev, o.key.as_str(), v.as_str())) {
                bail!(
                    "watch on {ep}: acknowledged put {}={v}@{rev} missing",
                    o.key
                );
            }
        }
    }
    let acked = history
        .iter()
        .filter(|o| o.output != Output::Unknown)
        .count();
    match linearizability::check(&history, Duration::from_secs(60)) {
        CheckResult::Ok => Ok((history.len(), faults)),
        // The search ran out of time: no verdict either way (Porcupine's and Knossos'
        // "unknown"). The history is kept for a longer offline check.
        CheckResult::Unknown => {
            let path = save_history(run, seed, &history);
            faults.inconclusive = Some(path);
            Ok((history.len(), faults))
        }
        other => {
            let path = save_history(run, seed, &history);
            bail!(
                "run {run}: {other:?} ({} ops, {acked} acknowledged); history saved to {}",
                history.len(),
                path.display()
            )
        }
    }
}

/// Writes a history to `$FAULT_HISTORY_DIR` (default: the temp dir) for offline study.
fn save_history(run: usize, seed: u64, history: &[Operation]) -> std::path::PathBuf {
    let dir = std::env::var_os("FAULT_HISTORY_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("capstan-fault-run{run}-seed{seed}.history"));
    let _ = std::fs::write(&path, linearizability::format_history(history));
    path
}

#[test]
fn store_survives_faults_linearizably() -> Result<()> {
    let runs: usize = std::env::var("FAULT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let secs: u64 = std::env::var("FAULT_RUN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let base_seed: u64 = std::env::var("FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let (mut total_ops, mut total_kill, mut total_pause, mut violations) = (0, 0, 0, Vec::new());
    let (mut total_part, mut total_delay, mut inconclusive) = (0, 0, 0);
    let (mut total_replace, mut total_isolate) = (0, 0);
    for run in 0..runs {
        let seed = base_seed.wrapping_add(run as u64 * 7919);
        match one_run(run, seed, secs) {
            Ok((ops, f)) => {
                let verdict = match &f.inconclusive {
                    None => "linearizable".to_owned(),
                    Some(path) => {
                        inconclusive += 1;
                        format!(
                            "linearizability check INCONCLUSIVE (timed out; history in {})",
                            path.display()
                        )
                    }
                };
                println!(
                    "run {run}/{runs} seed={seed}: {ops} ops, faults kill9={} pause={} \
                     partition={} isolate={} delay={} replace={}, live watches resumed {} \
                     times: {verdict}, watches complete",
                    f.kill9, f.pause, f.partition, f.isolate, f.delay, f.replace, f.watch_resumes
                );
                total_replace += f.replace;
                total_isolate += f.isolate;
                total_part += f.partition;
                total_delay += f.delay;
                total_ops += ops;
                total_kill += f.kill9;
                total_pause += f.pause;
            }
            Err(e) => {
                println!("run {run}/{runs} seed={seed}: VIOLATION/ERROR: {e:#}");
                violations.push(format!("{e:#}"));
            }
        }
    }
    println!(
        "fault suite: {runs} runs, {total_ops} ops, faults kill9={total_kill} \
         pause={total_pause} partition={total_part} isolate={total_isolate} \
         delay={total_delay} \
         replace={total_replace}, {} violations, \
         {inconclusive} inconclusive checks",
        violations.len()
    );
    // A timed-out search is no verdict, so it cannot fail a run; but a suite whose checks
    // never conclude checks nothing.
    if runs > 0 && inconclusive == runs {
        bail!("no run's history could be checked in time");
    }
    if !violations.is_empty() {
        bail!(
            "{} failing runs:\n{}",
            violations.len(),
            violations.join("\n")
        );
    }
    Ok(())
}
