//! Memory benchmark (issue 26): resident memory of `capstan server` with its default flags
//! (controllers, scheduler, 3 simulated nodes), driven by the independent load tool kbench
//! (`../shared/kbench`), printed beside the targets.
//!
//! Run with `make bench-memory` (builds `target/release/capstan` and kbench, then
//! `cargo bench -p e2e --bench memory`). It is not a test: it never fails on figures, only
//! when a server cannot be started or kbench cannot run.
//!
//! Rows:
//!
//! 1. **idle**: `VmRSS` of a fresh server 10 s after `/readyz` first answers.
//! 2. **100k ConfigMaps**: the same server right after `kbench seed --resource configmaps
//!    --count 100000` (1 KiB values, 32 connections), and again 10 s later.
//! 3. **after a create burst**: a second fresh server after `kbench create` for 30 s each at
//!    1, 32 and 128 connections (1 KiB ConfigMaps), with the number of objects created.
//!
//! Both peaks (`VmHWM`) are printed too, and the server's own memory breakdown from
//! `/metrics` (store, Raft log, watch cache, controllers' caches) after each load.
//!
//! `KBENCH` names the kbench binary (default `target/kbench/release/kbench`);
//! `CAPSTAN_BENCH_SEED` (default 100000) and `CAPSTAN_BENCH_BURST_S` (default 30) shrink the
//! run for a quick look; `CAPSTAN_BENCH_KEEP=1` keeps the data directories. Client and server
//! share the machine's cores: resident memory does not depend on that, throughput does (it
//! changes how many objects a burst creates; the count is printed).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e::ServerProcess;

/// Megabytes (10^6 bytes, as the figures) from kB.
fn mb(kb: u64) -> String {
    format!("{:.0} MB", kb as f64 * 1024.0 / 1e6)
}

/// `VmRSS` and `VmHWM` of `pid`, in kB.
fn rss(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

fn kbench_bin() -> PathBuf {
    std::env::var_os("KBENCH").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kbench/release/kbench"),
        PathBuf::from,
    )
}

/// Runs kbench with `args` against `s`; returns its `RESULT` line.
fn kbench(s: &ServerProcess, args: &[&str]) -> Result<String> {
    let out = Command::new(kbench_bin())
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .arg("--pid")
        .arg(s.pid().to_string())
        .args(args)
        .output()
        .with_context(|| format!("running {}", kbench_bin().display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .map(str::to_owned);
    match result {
        Some(r) => Ok(r),
        None => bail!(
            "kbench {args:?} printed no RESULT: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// `key=value` of a kbench RESULT line.
fn field<'a>(result: &'a str, key: &str) -> &'a str {
    result
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or("?")
}

/// The memory breakdown lines of the server's `/metrics`.
fn breakdown(s: &ServerProcess) -> String {
    match s.kubectl(&["get", "--raw", "/metrics"]) {
        Ok((true, out, _)) => out
            .lines()
            .filter(|l| l.starts_with("capstan_") && !l.ends_with(" 0"))
            .filter(|l| {
                !l.starts_with("capstan_watch_cache_") && !l.starts_with("capstan_client_cache_")
                    || l.contains("configmaps")
                    || l.contains("pods")
            })
            .filter(|l| !l.starts_with("capstan_controller"))
            .map(|l| format!("    {l}\n"))
            .collect(),
        _ => "    (no /metrics)\n".to_owned(),
    }
}

fn start(dir: &Path) -> Result<ServerProcess> {
    // Default flags: controllers, scheduler and 3 simulated nodes, as `make run`.
    let s = ServerProcess::start_cluster(dir, &[])?;
    let _ = kbench(&s, &["ready", "--url", &format!("{}/readyz", s.url)]);
    Ok(s)
}

struct Row {
    what: String,
    figure: String,
    target: &'static str,
}

fn run(rows: &mut Vec<Row>, keep: &Path) -> Result<()> {
    let seed: u64 = std::env::var("CAPSTAN_BENCH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let burst: u64 = std::env::var("CAPSTAN_BENCH_BURST_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);

    eprintln!("memory: fresh server (idle, then {seed} ConfigMaps)");
    let s = start(&keep.join("seed"))?;
    std::thread::sleep(Duration::from_secs(10));
    let (idle, idle_hwm) = rss(s.pid())?;
    rows.push(Row {
        what: "RSS idle, fresh (10 s after ready)".into(),
        figure: format!("{} (peak {})", mb(idle), mb(idle_hwm)),
        target: "≤ 50 MB",
    });
    let seeded = kbench(
        &s,
        &[
            "seed",
            "--resource",
            "configmaps",
            "--count",
            &seed.to_string(),
            "--namespace",
            "bench",
        ],
    )?;
    eprintln!("{seeded}");
    let (held, held_hwm) = rss(s.pid())?;
    std::thread::sleep(Duration::from_secs(10));
    let (later, _) = rss(s.pid())?;
    rows.push(Row {
        what: format!(
            "RSS holding {seed} ConfigMaps right after creating them ({}/s)",
            field(&seeded, "rate")
        ),
        figure: format!(
            "{} (peak {}; {} 10 s later)",
            mb(held),
            mb(held_hwm),
            mb(later)
        ),
        target: "≤ 400 MB",
    });
    eprintln!("memory breakdown after the seed:\n{}", breakdown(&s));
    drop(s);

    eprintln!("memory: fresh server, create bursts of {burst} s at 1, 32, 128 connections");
    let s = start(&keep.join("burst"))?;
    let mut created = 0u64;
    let mut rates = Vec::new();
    for c in ["1", "32", "128"] {
        let r = kbench(
            &s,
            &[
                "create",
                "--namespace",
                "bench",
                "--concurrency",
                c,
                "--duration",
                &burst.to_string(),
                "--size",
                "1024",
            ],
        )?;
        eprintln!("{r}");
        created += field(&r, "ok").parse::<u64>().unwrap_or(0);
        rates.push(format!("{}/s at {c}", field(&r, "rps")));
    }
    let (after, after_hwm) = rss(s.pid())?;
    rows.push(Row {
        what: format!("RSS after {created} creates ({})", rates.join(", ")),
        figure: format!("{} (peak {})", mb(after), mb(after_hwm)),
        target: "≤ 600 MB",
    });
    eprintln!("memory breakdown after the bursts:\n{}", breakdown(&s));
    Ok(())
}

fn main() -> ExitCode {
    if !kbench_bin().exists() {
        eprintln!(
            "memory bench: kbench not found at {} (build it: make bench-memory, or set KBENCH)",
            kbench_bin().display()
        );
        return ExitCode::FAILURE;
    }
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("memory bench: no temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut rows = Vec::new();
    let outcome = run(&mut rows, dir.path());
    println!();
    println!("capstan server (default flags), 1-KiB ConfigMaps from kbench");
    println!("{:<96} {:<44} target", "figure", "capstan");
    for r in &rows {
        println!("{:<96} {:<44} {}", r.what, r.figure, r.target);
    }
    if std::env::var_os("CAPSTAN_BENCH_KEEP").is_some() {
        let kept = dir.keep();
        eprintln!("data directories kept in {}", kept.display());
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memory bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
