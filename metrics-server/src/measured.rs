//! Measured usage of pods on nodes that run their containers (Capstan's process nodes),
//! scraped as upstream metrics-server scrapes kubelets: `GET /metrics/resource` (reached
//! through the API server's `nodes/proxy`), the counter `container_cpu_usage_seconds_total`
//! turned into a rate between two scrapes, `container_memory_working_set_bytes` as is.
//!
//! The last sample of each container is kept; a rate is taken against it when it is at
//! least [`MIN_INTERVAL`] and at most the metrics window old, otherwise the node is scraped
//! again after [`MIN_INTERVAL`] (the first query of a container waits that long).
//! Simulated nodes (annotated `capstan.io/simulated: "true"`, or without a kubelet port)
//! keep the simulated model of `usage.rs`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;

/// Shortest interval a CPU rate is taken over.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// (namespace, pod, container).
pub(crate) type Key = (String, String, String);

/// One container's last scraped counter.
#[derive(Debug, Clone, Copy)]
struct Sample {
    cpu_seconds: f64,
    at: Instant,
    rate_nanos: Option<u64>,
}

/// The kept samples.
#[derive(Debug, Default)]
pub(crate) struct Scraper {
    samples: Mutex<HashMap<Key, Sample>>,
}

/// Whether `node` runs containers whose usage can be measured.
pub(crate) fn has_kubelet(node: &Node) -> bool {
    let simulated = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("capstan.io/simulated"))
        .is_none_or(|v| v == "true");
    let port = node
        .status
        .as_ref()
        .and_then(|s| s.daemon_endpoints.as_ref())
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .map_or(0, |e| e.port);
    !simulated && port > 0
}

/// The label value of `name` in a `{a="x",b="y"}` label set.
fn label(labels: &str, name: &str) -> Option<String> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let mut out = String::new();
    let mut chars = labels[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            other => out.push(other),
        }
    }
    None
}

/// (cpu core-seconds, working set bytes) per container from a `/metrics/resource` body.
pub(crate) fn parse(text: &str) -> HashMap<Key, (f64, u64)> {
    let mut out: HashMap<Key, (f64, u64)> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let (Some(ns), Some(pod), Some(c)) = (
            label(labels, "namespace"),
            label(labels, "pod"),
            label(labels, "container"),
        ) else {
            continue;
        };
        let e = out.entry((ns, pod, c)).or_default();
        match name {
            "container_cpu_usage_seconds_total" => e.0 = value,
            "container_memory_working_set_bytes" => e.1 = value as u64,
            _ => {}
        }
    }
    out
}

async fn scrape(client: &kube::Client, node: &str) -> anyhow::Result<HashMap<Key, (f64, u64)>> {
    let req = http::Request::get(format!("/api/v1/nodes/{node}/proxy/metrics/resource"))
        .body(Vec::new())?;
    Ok(parse(&client.request_text(req).await?))
}

impl Scraper {
    /// Records a scrape; the containers that still have no rate.
    fn record(&self, scraped: &HashMap<Key, (f64, u64)>, window: Duration) -> usize {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let mut missing = 0;
        for (key, &(cpu_seconds, _)) in scraped {
            let next = match samples.get(key) {
                Some(prev)
                    if now.duration_since(prev.at) >= MIN_INTERVAL
                        && now.duration_since(prev.at) <= window
                        && cpu_seconds >= prev.cpu_seconds =>
                {
                    let dt = now.duration_since(prev.at).as_secs_f64();
                    Sample {
                        cpu_seconds,
                        at: now,
                        rate_nanos: Some(((cpu_seconds - prev.cpu_seconds) / dt * 1e9) as u64),
                    }
                }
                // Too recent: keep the older sample and its rate.
                Some(prev)
                    if now.duration_since(prev.at) < MIN_INTERVAL
                        && cpu_seconds >= prev.cpu_seconds =>
                {
                    *prev
                }
                _ => Sample {
                    cpu_seconds,
                    at: now,
                    rate_nanos: None,
                },
            };
            if next.rate_nanos.is_none() {
                missing += 1;
            }
            samples.insert(key.clone(), next);
        }
        missing
    }

    /// (cpu nanocores, working set bytes) of every container on `node`; an error when the
    /// node's kubelet cannot be scraped.
    pub(crate) async fn node_usage(
        &self,
        client: &kube::Client,
        node: &str,
        window: Duration,
    ) -> anyhow::Result<HashMap<Key, (u64, u64)>> {
        let mut scraped = scrape(client, node).await?;
        if self.record(&scraped, window) > 0 {
            tokio::time::sleep(MIN_INTERVAL).await;
            scraped = scrape(client, node).await?;
            self.record(&scraped, window);
        }
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(scraped
            .into_iter()
            .map(|(key, (_, memory))| {
                let cpu = samples.get(&key).and_then(|s| s.rate_nanos).unwrap_or(0);
                (key, (cpu, memory))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_metrics_are_parsed() {
        let text = "# TYPE container_cpu_usage_seconds_total counter\n\
            container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"p\"} 1.5 1700000000000\n\
            container_memory_working_set_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 4096 1700000000000\n\
            node_cpu_usage_seconds_total 9 1\n";
        let m = parse(text);
        assert_eq!(m.len(), 1);
        assert_eq!(m[&("ns".into(), "p".into(), "c".into())], (1.5, 4096));
    }

    #[test]
    fn a_rate_needs_two_samples_apart() {
        let s = Scraper::default();
        let key: Key = ("ns".into(), "p".into(), "c".into());
        let first = HashMap::from([(key.clone(), (1.0, 1))]);
        assert_eq!(s.record(&first, Duration::from_secs(15)), 1);
        // Pretend the first sample was taken two seconds ago.
        if let Some(prev) = s.samples.lock().unwrap().get_mut(&key) {
            prev.at -= Duration::from_secs(2);
        }
        let second = HashMap::from([(key.clone(), (2.0, 1))]);
        assert_eq!(s.record(&second, Duration::from_secs(15)), 0);
        let rate = s.samples.lock().unwrap()[&key].rate_nanos.unwrap();
        assert!((490_000_000..=510_000_000).contains(&rate), "{rate}");
    }
}
