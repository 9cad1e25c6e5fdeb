//! Measured resource usage of a process node's containers, served by the kubelet API as
//! `GET /metrics/resource` in the Prometheus text format, as a kubelet serves it (the
//! series upstream metrics-server scrapes: `container_cpu_usage_seconds_total`, a counter
//! of core-seconds, and `container_memory_working_set_bytes`, a gauge).
//!
//! A container is its init process (`registry::Instance::init_pid`, host PID namespace)
//! and every descendant of it, found through the `ppid` field of `/proc/<pid>/stat`. CPU
//! is the sum of their `utime + stime` (`/proc/<pid>/stat`, in USER_HZ ticks: 100 per
//! second on Linux); the working set is approximated by the sum of their `VmRSS`
//! (`/proc/<pid>/status`). Where cgroup v2 is available a kubelet reads `cpu.stat`
//! (`usage_usec`) and `memory.current` minus `inactive_file` from the container's cgroup
//! instead; this host has none, so the process tree stands in for it. The rate over a
//! window is the scraper's job (the metrics server), as upstream.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::process::registry::Registry;

/// USER_HZ: the unit of `utime` and `stime` in `/proc/<pid>/stat`.
const TICKS_PER_SECOND: f64 = 100.0;

/// One process's (ppid, utime + stime ticks), from the text of `/proc/<pid>/stat`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    // The command name is parenthesized and may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// `VmRSS` in bytes from the text of `/proc/<pid>/status` (0 for a kernel thread or zombie).
fn parse_rss(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Every process on the host: pid → (ppid, cpu ticks).
fn processes() -> HashMap<u32, (u32, u64)> {
    let mut all = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(s) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| parse_stat(&t))
        {
            all.insert(pid, s);
        }
    }
    all
}

/// `root` and its descendants among `all`.
fn tree(all: &HashMap<u32, (u32, u64)>, root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &(ppid, _)) in all {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if !all.contains_key(&p) || out.contains(&p) {
            continue;
        }
        out.push(p);
        stack.extend(children.get(&p).into_iter().flatten());
    }
    out
}

/// Cumulative CPU (core-seconds) and working set (bytes) of the process tree at `root`;
/// `None` when the process is gone.
pub(crate) fn measure(all: &HashMap<u32, (u32, u64)>, root: u32) -> Option<(f64, u64)> {
    let pids = tree(all, root);
    if pids.is_empty() {
        return None;
    }
    let ticks: u64 = pids.iter().filter_map(|p| all.get(p)).map(|s| s.1).sum();
    let rss: u64 = pids
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .map(|s| parse_rss(&s))
        .sum();
    Some((ticks as f64 / TICKS_PER_SECOND, rss))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `/metrics/resource` body for every running container in `registry`.
pub(crate) fn metrics_resource(registry: &Registry) -> String {
    let all = processes();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut cpu = String::from(
        "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n# TYPE container_cpu_usage_seconds_total counter\n",
    );
    let mut mem = String::from(
        "# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n# TYPE container_memory_working_set_bytes gauge\n",
    );
    for (ns, pod, container, pid) in registry.running_pids() {
        let Some((seconds, rss)) = measure(&all, pid) else {
            continue;
        };
        let labels = format!(
            "container=\"{}\",namespace=\"{}\",pod=\"{}\"",
            escape(&container),
            escape(&ns),
            escape(&pod)
        );
        let _ = writeln!(
            cpu,
            "container_cpu_usage_seconds_total{{{labels}}} {seconds} {now_ms}"
        );
        let _ = writeln!(
            mem,
            "container_memory_working_set_bytes{{{labels}}} {rss} {now_ms}"
        );
    }
    cpu + &mem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_odd_names() {
        let s = "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 30 12 0 0 20 0 1 0 5 1000 10";
        assert_eq!(parse_stat(s), Some((7, 42)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn rss_is_read_in_bytes() {
        assert_eq!(parse_rss("Name:\tsh\nVmRSS:\t    1500 kB\n"), 1500 * 1024);
        assert_eq!(parse_rss("Name:\tkthreadd\n"), 0);
    }

    #[test]
    fn this_process_is_measured() {
        let all = processes();
        let me = std::process::id();
        let (_, rss) = measure(&all, me).unwrap_or_default();
        assert!(rss > 0);
        assert!(measure(&all, u32::MAX).is_none());
    }
}
