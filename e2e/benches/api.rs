//! API benchmark: `capstan server` driven over HTTPS like kubectl drives kube-apiserver, with
//! kube-apiserver v1.28 + etcd 3.4 reference figures (from the issue, same machine class) and
//! the targets printed beside each figure.
//!
//! Run with `make bench-api` (builds `target/release/capstan`, then
//! `cargo bench -p e2e --bench api`). It is not a test: it never fails on numbers, only when a
//! server cannot be started or requests error (then the table is still printed, with `n/a` for
//! what could not be measured, and the process exits non-zero).
//!
//! The client is a Rust HTTPS client built from the admin kubeconfig the server writes
//! (`certificate-authority-data` is trusted, `client-certificate-data`/`client-key-data` are
//! presented): rustls with ring, ALPN `h2` (HTTP/2 is required, as kubectl negotiates it), one
//! `hyper` HTTP/2 connection per "connection" below, on a multi-threaded tokio runtime that
//! shares the machine with the server. Every request has a timeout, so a hung server fails a
//! step instead of hanging the bench; load steps have a time cap and report partial figures
//! (marked `partial`) when they hit it.
//!
//! Figures (one server, started with the harness, serves steps 1–4; a second one on a fresh
//! data directory serves 5 and 6):
//!
//! 1. **creates/s**: 32 connections, each creating small ConfigMaps (`data: {k: v}`) back to
//!    back in one namespace, for 5 s or 20k creates, whichever comes first. Throughput is
//!    completed creates / wall time; p50/p99 are per-request latencies as the client sees them.
//! 2. **GETs/s**: 32 connections GET single ConfigMaps created in step 1 for 5 s.
//! 3. **LIST 10k pods**: 10k minimal Pods (one `nginx` container) are created in a namespace
//!    by 32 connections (untimed), then 20 full LISTs (no `limit`) run one after the other on
//!    one connection; a LIST's time runs from sending the request to having read the whole
//!    body. p50/p99 of the 20.
//! 4. **watch delivery**: 1000 watches of the ConfigMaps collection of one (empty) namespace,
//!    from the list's resourceVersion, multiplexed over 8 HTTP/2 connections (125 streams
//!    each); then 50 creates in that namespace spaced 20 ms apart on another connection. For
//!    every ADDED event a watcher reads, latency = time the watcher read the frame holding the
//!    event's last byte − time the create request was sent. p50/p99 over all deliveries and
//!    how many of the 50 × 1000 arrived (within 10 s of the last create).
//! 5. **RSS**: `VmRSS` (from `/proc/<pid>/status`) of a server holding 100k ConfigMaps of
//!    1 KiB data each (created by 32 connections, progress every 10k) and nothing else but
//!    its bootstrap objects. Printed in MB (10^6 bytes), as the reference is.
//! 6. **start to ready**: time from spawning `capstan server` until `GET /readyz` answers 200
//!    (polled every 10 ms over a new connection each time, with the admin credentials as
//!    soon as the kubeconfig exists), first on a fresh data directory (PKI creation
//!    included), then after SIGKILL of the server of step 5, on its data directory holding the
//!    100k ConfigMaps. These two starts are spawned by the bench itself with the harness's
//!    command line: the harness's own readiness probe runs `kubectl` every 100 ms, too coarse
//!    for the figure.
//!
//! 8. **admission**: on a fresh bare server, minimal Pods created by 32 connections in one
//!    namespace, in seven phases of 2.5 s (or 15k creates) that alternate: plain, hooked,
//!    plain, hooked, plain, hooked, plain. A hooked phase runs with a no-op validating
//!    webhook (served by the bench process on its own 1-thread runtime,
//!    `e2e::webhook_server::WebhookServer::start_h2`: TLS with the server's own
//!    `pki/apiserver.crt`, HTTP/2 only, one task per connection; it decodes only
//!    `request.uid`; `failurePolicy: Fail`, CREATE of pods; its CPU time is taken from the
//!    same two cores as server and client, as a webhook on the same machine would) and a
//!    no-op ValidatingAdmissionPolicy (`object.metadata.name.size() > 0`, bound with
//!    `validationActions: [Deny]`) matching every pod: they are created before it (it starts
//!    once the webhook has seen a create) and deleted after it (the next plain phase starts
//!    once a create no longer reaches the webhook). The plain phases surround the hooked
//!    ones, so drifts of a shared machine and the store's growth weigh on both kinds alike;
//!    each figure is the creates of all phases of its kind over their seconds, printed with
//!    each phase's rate and the ratio. Each phase also reads the CPU time (user + system,
//!    `/proc/<pid>/stat`) the server and the bench process (client and webhook) spent per
//!    create: "by CPU per create" is the ratio the throughputs would have if these saturated
//!    the two cores alone, a figure other load on the machine does not move.
//!
//! 9. **aggregation**: on a fresh bare server, an extension API server (served by the bench
//!    process like the webhook of step 8, answering every GET with one small object) is
//!    registered by a Service, an EndpointSlice to 127.0.0.1 and an APIService
//!    (`insecureSkipTLSVerify`); once a GET of its object answers 200, one connection GETs it
//!    back to back through the aggregator for 3 s, then GETs a ConfigMap directly for 3 s.
//!    p50/p99 of each: the difference is the aggregator's proxying (authentication,
//!    authorization and the second TLS hop included).
//!
//! `CAPSTAN_BENCH_STEPS` (comma-separated, default: all) runs only some steps, to iterate
//! faster: `create` (1 and 2), `list` (3), `watch` (4), `rss` (5 and 6), `crd` (7),
//! `admission` (8), `aggregation` (9); rows not run print
//! `n/a`. `CAPSTAN_BENCH_KEEP=1` keeps the data directories (and server logs) afterwards.
//!
//! The table goes to stdout, progress lines to stderr. Client and server share two cores,
//! so the client's own work (TLS, JSON parsing of watch events) is part of every figure;
//! numbers from one run are noisy: compare orders of magnitude.

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use e2e::webhook_server::WebhookServer;
use e2e::{ServerProcess, capstan_bin, free_port};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

/// Connections of the create, get and load steps.
const CONNS: usize = 32;
/// Steps 1 and 2: time and op limits.
const ROW_TIME: Duration = Duration::from_secs(5);
const CREATE_MAX_OPS: u64 = 20_000;
const GET_MAX_OPS: u64 = 1_000_000;
/// Step 3: pods, LIST count, time caps of loading and listing.
const PODS: u64 = 10_000;
const LISTS: usize = 20;
const POD_LOAD_CAP: Duration = Duration::from_secs(180);
const LIST_CAP: Duration = Duration::from_secs(120);
/// Step 4: watchers, connections they share, creates and their spacing, wait for stragglers.
const WATCHERS: usize = 1000;
const WATCH_CONNS: usize = 8;
const WATCH_CREATES: usize = 50;
const WATCH_SPACING: Duration = Duration::from_millis(20);
const WATCH_GRACE: Duration = Duration::from_secs(10);
/// Step 5: ConfigMaps held, their data size, time cap of loading them, progress interval.
const BIG_CMS: u64 = 100_000;
const BIG_DATA: usize = 1024;
const BIG_LOAD_CAP: Duration = Duration::from_secs(300);
const PROGRESS_EVERY: u64 = 10_000;
/// Step 6: poll interval and caps.
const READY_POLL: Duration = Duration::from_millis(10);
const FRESH_READY_CAP: Duration = Duration::from_secs(60);
const RESTART_READY_CAP: Duration = Duration::from_secs(180);
/// Per-request timeout; LISTs of 10k pods get a longer one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("api bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs every step; `Ok(false)` when some failed (the table is printed regardless).
fn run() -> Result<bool> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let tmp = tempfile::Builder::new()
        .prefix("capstan-api-bench-")
        .tempdir()?;
    eprintln!(
        "data in {}; capstan binary {}",
        tmp.path().display(),
        capstan_bin().display()
    );
    let mut figures = Figures::new();
    let mut ok = true;
    let selected = std::env::var("CAPSTAN_BENCH_STEPS").unwrap_or_default();
    let wanted = |step: &str| selected.is_empty() || selected.split(',').any(|s| s.trim() == step);

    // Steps 1–4 on one server; dropping it (end of the block, or `?` inside) kills it.
    if wanted("create") || wanted("list") || wanted("watch") {
        let dir = tmp.path().join("server-a");
        match ServerProcess::start(&dir) {
            Err(e) => {
                ok = false;
                eprintln!("[server A] FAILED to start: {e:#}");
            }
            Ok(server) => {
                eprintln!("[server A] ready at {} (pid {})", server.url, server.pid());
                let steps: [(&str, &str, StepFn); 3] = [
                    ("create", "creates and gets", steps_create_get),
                    ("list", "LIST 10k pods", step_list),
                    ("watch", "watch", step_watch),
                ];
                for (key, name, step) in steps {
                    if !wanted(key) {
                        continue;
                    }
                    if let Err(e) = step(&rt, &server, &mut figures) {
                        ok = false;
                        eprintln!("[{name}] FAILED: {e:#}");
                        eprintln!("[server A] last log lines:\n{}", tail(&server.log(), 30));
                    }
                }
            }
        }
    }

    // Step 7: custom resources, on a third server of their own.
    if wanted("crd")
        && let Err(e) = step_crd(&rt, &tmp.path().join("server-c"), &mut figures)
    {
        ok = false;
        eprintln!("[custom resources] FAILED: {e:#}");
    }

    // Step 8: pod creates without and with a no-op webhook and policy, alternating, on a
    // fourth server.
    if wanted("admission")
        && let Err(e) = step_admission(&rt, &tmp.path().join("server-d"), &mut figures)
    {
        ok = false;
        eprintln!("[admission] FAILED: {e:#}");
        let log = std::fs::read_to_string(tmp.path().join("server-d.log")).unwrap_or_default();
        eprintln!("[server D] last log lines:\n{}", tail(&log, 30));
    }

    // Step 9: GETs through the aggregator and direct, on a fifth server.
    if wanted("aggregation")
        && let Err(e) = step_aggregation(&rt, &tmp.path().join("server-e"), &mut figures)
    {
        ok = false;
        eprintln!("[aggregation] FAILED: {e:#}");
    }

    // Steps 6 (fresh), 5, 6 (restart) on a second data directory.
    if wanted("rss")
        && let Err(e) = steps_rss_and_start(&rt, &tmp.path().join("server-b"), &mut figures)
    {
        ok = false;
        eprintln!("[RSS / start to ready] FAILED: {e:#}");
        let log = std::fs::read_to_string(tmp.path().join("server-b.log")).unwrap_or_default();
        eprintln!("[server B] last log lines:\n{}", tail(&log, 30));
    }

    figures.print();
    ok &= !figures.failed;
    if std::env::var_os("CAPSTAN_BENCH_KEEP").is_some() {
        eprintln!("kept {}", tmp.keep().display());
    }
    Ok(ok)
}

type StepFn = fn(&Runtime, &ServerProcess, &mut Figures) -> Result<()>;

// ---------------------------------------------------------------------------------------------
// Steps.

/// Steps 1 and 2: ConfigMap creates, then GETs of what was created.
fn steps_create_get(rt: &Runtime, server: &ServerProcess, figs: &mut Figures) -> Result<()> {
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let ns = "bench-create";
    rt.block_on(api.create_namespace(ns))?;

    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let s = rt.block_on(drive(
        &api,
        CONNS,
        CREATE_MAX_OPS,
        ROW_TIME,
        None,
        move |mut c: Conn, n| {
            let path = path.clone();
            async move {
                let body = configmap_json(&format!("cm-{n}"), "v");
                c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(drop)
            }
        },
    ))?;
    eprintln!("[create @{CONNS}] {s}");
    figs.set_run(ROW_CREATE, &s, format!("{}/s", thousands(s.ops_per_sec())));
    figs.set_run(
        ROW_CREATE_LAT,
        &s,
        format!(
            "{:.1} / {:.1}",
            s.percentile_ms(0.50),
            s.percentile_ms(0.99)
        ),
    );
    let created = s.count();
    if created == 0 {
        bail!("no ConfigMap was created; GETs skipped");
    }

    let s = rt.block_on(drive(
        &api,
        CONNS,
        GET_MAX_OPS,
        ROW_TIME,
        None,
        move |mut c: Conn, n| async move {
            let i = n.wrapping_mul(7919) % created;
            let path = format!("/api/v1/namespaces/{ns}/configmaps/cm-{i}");
            c.expect(Method::GET, &path, None, StatusCode::OK)
                .await
                .map(drop)
        },
    ))?;
    eprintln!("[get @{CONNS}] {s}");
    figs.set_run(ROW_GET, &s, format!("{}/s", thousands(s.ops_per_sec())));
    figs.set_run(
        ROW_GET_LAT,
        &s,
        format!(
            "{:.1} / {:.1}",
            s.percentile_ms(0.50),
            s.percentile_ms(0.99)
        ),
    );
    Ok(())
}

/// A namespaced CRD `widgets.bench.example.com` whose schema keeps a `data` map of strings.
fn crd_json() -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.bench.example.com"},
        "spec": {
            "group": "bench.example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"data": {
                        "type": "object",
                        "additionalProperties": {"type": "string"}
                    }}
                }}
            }]
        }
    })
    .to_string()
}

/// A Widget named `name` with one data key `k` holding `value`.
fn widget_json(name: &str, value: &str) -> String {
    json!({
        "apiVersion": "bench.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "data": {"k": value},
    })
    .to_string()
}

/// Step 7, on a fresh server: the time from POSTing a CRD to the first successful create of
/// its custom resource (polled every 10 ms, as a client waiting for Established would), then
/// custom resource creates at 32 connections beside ConfigMap creates in the same run, then
/// RSS holding 100k 1-KiB custom resources.
fn step_crd(rt: &Runtime, dir: &Path, figs: &mut Figures) -> Result<()> {
    let server = ServerProcess::start(dir)?;
    eprintln!("[server C] ready at {} (pid {})", server.url, server.pid());
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let ns = "bench-crd";
    rt.block_on(api.create_namespace(ns))?;
    let widgets = format!("/apis/bench.example.com/v1/namespaces/{ns}/widgets");
    let took = rt.block_on(async {
        let mut c = api.connect().await?;
        let start = Instant::now();
        c.expect(
            Method::POST,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some(crd_json()),
            StatusCode::CREATED,
        )
        .await?;
        loop {
            let (status, _) = c
                .call(Method::POST, &widgets, Some(widget_json("first", "v")))
                .await?;
            if status == StatusCode::CREATED {
                return Ok::<_, anyhow::Error>(start.elapsed());
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("custom resource not served 30 s after its CRD: {status}");
            }
            tokio::time::sleep(READY_POLL).await;
        }
    })?;
    eprintln!("[crd] CRD create → first custom resource created: {took:?}");
    figs.set(ROW_CRD_READY, format!("{:.0} ms", took.as_secs_f64() * 1e3));

    let run = |path: String, prefix: &'static str, json: fn(&str, &str) -> String| {
        rt.block_on(drive(
            &api,
            CONNS,
            CREATE_MAX_OPS,
            ROW_TIME,
            None,
            move |mut c: Conn, n| {
                let path = path.clone();
                async move {
                    let body = json(&format!("{prefix}-{n}"), "v");
                    c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                        .await
                        .map(drop)
                }
            },
        ))
    };
    let cms = run(
        format!("/api/v1/namespaces/{ns}/configmaps"),
        "cm",
        configmap_json,
    )?;
    eprintln!("[create ConfigMaps @{CONNS}] {cms}");
    let crs = run(widgets.clone(), "w", widget_json)?;
    eprintln!("[create Widgets @{CONNS}] {crs}");
    let ratio = crs.ops_per_sec() / cms.ops_per_sec().max(1.0);
    figs.set_run(
        ROW_CR_CREATE,
        &crs,
        format!(
            "{}/s ({:.0} % of ConfigMaps' {}/s)",
            thousands(crs.ops_per_sec()),
            ratio * 100.0,
            thousands(cms.ops_per_sec())
        ),
    );

    let s = rt.block_on(drive(
        &api,
        CONNS,
        BIG_CMS,
        BIG_LOAD_CAP,
        Some(("1-KiB custom resources", PROGRESS_EVERY)),
        move |mut c: Conn, n| {
            let path = widgets.clone();
            async move {
                let data = "x".repeat(BIG_DATA);
                let body = widget_json(&format!("big-{n}"), &data);
                c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(drop)
            }
        },
    ))?;
    eprintln!("[load custom resources] {s}");
    let held = s.count();
    let rss = rss_bytes(server.pid())?;
    eprintln!(
        "[rss] {:.1} MB holding {held} 1-KiB custom resources",
        rss as f64 / 1e6
    );
    let mut cell = format!("{:.1} MB", rss as f64 / 1e6);
    if held < BIG_CMS {
        cell.push_str(&format!(" (partial: {} held)", thousands(held as f64)));
    }
    figs.set_run(ROW_CR_RSS, &s, cell);
    Ok(())
}

/// A ValidatingWebhookConfiguration calling `url` (CA `ca_bundle`, base64 PEM) for every pod
/// CREATE, failing closed.
fn noop_webhook_configuration_json(url: &str, ca_bundle: &str) -> String {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench-noop"},
        "webhooks": [{
            "name": "noop.bench.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"url": url, "caBundle": ca_bundle},
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }],
        }],
    })
    .to_string()
}

/// A ValidatingAdmissionPolicy every pod passes, for pod CREATE and UPDATE.
fn noop_policy_json() -> String {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "bench-noop"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }]},
            "validations": [{"expression": "object.metadata.name.size() > 0"}],
        },
    })
    .to_string()
}

/// The binding of [`noop_policy_json`] (no matchResources: everything its policy matches).
fn noop_policy_binding_json() -> String {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "bench-noop"},
        "spec": {"policyName": "bench-noop", "validationActions": ["Deny"]},
    })
    .to_string()
}

/// Step 8: plain and hooked phases alternate, each this long (or [`ADMISSION_PHASE_OPS`]).
const ADMISSION_PHASE: Duration = Duration::from_millis(2500);
/// Step 8: op cap of one phase (keeps the store from growing past ~100k pods).
const ADMISSION_PHASE_OPS: u64 = 15_000;
/// Step 8: hooked phases; plain ones number one more (before, between and after them).
const ADMISSION_ROUNDS: usize = 3;

/// Step 8, on a fresh server: pod creates at 32 connections without admission webhooks or
/// policies, and with a no-op validating webhook and a no-op ValidatingAdmissionPolicy
/// matching every pod. The phases alternate — plain, hooked, plain, …, plain — so that drifts
/// of a shared machine (disk latency, other processes) and the store's growth weigh on both
/// alike: plain phases surround the hooked ones, so a trend cancels out of the ratio. The
/// figures are totals over all phases of a kind (creates over seconds), and the CPU time per
/// create of the server and of this process (client and webhook).
fn step_admission(rt: &Runtime, dir: &Path, figs: &mut Figures) -> Result<()> {
    let server = ServerProcess::start(dir)?;
    eprintln!("[server D] ready at {} (pid {})", server.url, server.pid());
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let ns = "bench-admission";
    rt.block_on(api.create_namespace(ns))?;
    let pods = format!("/api/v1/namespaces/{ns}/pods");

    // The webhook server lives until the end of this function (dropping it stops it).
    let pki = server.data_dir.join("pki");
    let hook = NoopWebhook::start(&pki.join("apiserver.crt"), &pki.join("apiserver.key"))?;
    let ca = std::fs::read(pki.join("ca.crt")).context("reading pki/ca.crt")?;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    let url = format!("https://127.0.0.1:{}/validate", hook.port);
    eprintln!("[admission] no-op webhook at {url}");

    let server_pid = server.pid();
    let mut plain = Phases::default();
    let mut hooked = Phases::default();
    let mut probe = 0u64;
    for round in 0..=ADMISSION_ROUNDS {
        let prefix = format!("plain{round}");
        let (s, cpu) = admission_phase(rt, &api, &pods, server_pid, &prefix)?;
        eprintln!("[{prefix}] {s}; CPU per create: {cpu}");
        plain.add(&s, cpu);
        if round == ADMISSION_ROUNDS {
            break;
        }
        let took = rt.block_on(install_noop_admission(
            &api, &pods, &hook, &url, &ca_bundle, &mut probe,
        ))?;
        eprintln!("[admission] webhook called {took:?} after its configuration was created");
        let prefix = format!("hooked{round}");
        let seen_before = hook.reviews();
        let (s, cpu) = admission_phase(rt, &api, &pods, server_pid, &prefix)?;
        let seen = hook.reviews() - seen_before;
        eprintln!("[{prefix}] {s}; CPU per create: {cpu}; webhook saw {seen} reviews");
        if seen < s.count() {
            bail!(
                "the webhook saw {seen} reviews for {} pods created",
                s.count()
            );
        }
        hooked.add(&s, cpu);
        rt.block_on(remove_noop_admission(&api, &pods, &hook, &mut probe))?;
    }
    let without = plain.ops_per_sec();
    let with = hooked.ops_per_sec();
    let cpu_ratio = plain.cpu_total_per_op() / hooked.cpu_total_per_op().max(1e-9);
    eprintln!(
        "[admission] {} plain phases: {}/s; {} hooked: {}/s ({:.0} %); per hooked phase, of \
         the mean of the plain phases around it: {}",
        plain.ops.len(),
        thousands(without),
        hooked.ops.len(),
        thousands(with),
        with / without.max(1.0) * 100.0,
        hooked
            .rates()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let around = (plain.rates()[i] + plain.rates()[i + 1]) / 2.0;
                format!("{:.0} %", r / around.max(1.0) * 100.0)
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    // What the throughput ratio would be on an otherwise idle machine where server, client
    // and webhook saturate the cores: CPU time per create without over with.
    eprintln!(
        "[admission] CPU per create: server {:.0} µs without, {:.0} µs with; server + bench \
         process (client and webhook) {:.0} µs without, {:.0} µs with: CPU-bound ratio {:.0} %",
        plain.server_per_op() * 1e6,
        hooked.server_per_op() * 1e6,
        plain.cpu_total_per_op() * 1e6,
        hooked.cpu_total_per_op() * 1e6,
        cpu_ratio * 100.0
    );
    let phases = |p: &Phases| {
        p.rates()
            .iter()
            .map(|r| thousands(*r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    figs.failed |= plain.errors + hooked.errors > 0;
    figs.set(
        ROW_POD_CREATE_PLAIN,
        format!("{}/s ({})", thousands(without), phases(&plain)),
    );
    figs.set(
        ROW_POD_CREATE_ADMISSION,
        format!(
            "{}/s ({}): {:.0} % of without; by CPU per create {:.0} %",
            thousands(with),
            phases(&hooked),
            with / without.max(1.0) * 100.0,
            cpu_ratio * 100.0
        ),
    );
    drop(hook);
    Ok(())
}

/// One phase of step 8: pod creates named `<prefix>-<n>` at [`CONNS`] connections for
/// [`ADMISSION_PHASE`], and the CPU time per create it took.
fn admission_phase(
    rt: &Runtime,
    api: &Api,
    pods: &str,
    server_pid: u32,
    prefix: &str,
) -> Result<(RunStats, CpuPerOp)> {
    let path = pods.to_owned();
    let prefix = prefix.to_owned();
    let cpu = CpuMeter::start(server_pid);
    let stats = rt.block_on(drive(
        api,
        CONNS,
        ADMISSION_PHASE_OPS,
        ADMISSION_PHASE,
        None,
        move |mut c: Conn, n| {
            let path = path.clone();
            let body = pod_json(&format!("{prefix}-{n}"));
            async move {
                c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(drop)
            }
        },
    ))?;
    let used = cpu.per_op(stats.count());
    Ok((stats, used))
}

/// The phases of one kind of step 8, summed.
#[derive(Default)]
struct Phases {
    /// Creates of each phase.
    ops: Vec<u64>,
    /// Seconds of each phase.
    secs: Vec<f64>,
    /// CPU seconds of the server and of this process over all phases.
    server_cpu: f64,
    bench_cpu: f64,
    errors: usize,
}

impl Phases {
    fn add(&mut self, s: &RunStats, cpu: CpuPerOp) {
        let n = s.count() as f64;
        self.ops.push(s.count());
        self.secs.push(s.elapsed.as_secs_f64());
        self.server_cpu += cpu.server * n;
        self.bench_cpu += cpu.bench * n;
        self.errors += s.errors;
    }

    fn total_ops(&self) -> f64 {
        self.ops.iter().sum::<u64>().max(1) as f64
    }

    /// Creates per second over all phases.
    fn ops_per_sec(&self) -> f64 {
        self.ops.iter().sum::<u64>() as f64 / self.secs.iter().sum::<f64>().max(1e-9)
    }

    /// Creates per second of each phase.
    fn rates(&self) -> Vec<f64> {
        self.ops
            .iter()
            .zip(&self.secs)
            .map(|(o, s)| *o as f64 / s.max(1e-9))
            .collect()
    }

    fn server_per_op(&self) -> f64 {
        self.server_cpu / self.total_ops()
    }

    fn cpu_total_per_op(&self) -> f64 {
        (self.server_cpu + self.bench_cpu) / self.total_ops()
    }
}

/// Creates the no-op webhook configuration, policy and binding, and waits until a pod create
/// reaches the webhook (and is allowed); returns how long that took.
async fn install_noop_admission(
    api: &Api,
    pods: &str,
    hook: &NoopWebhook,
    url: &str,
    ca_bundle: &str,
    probe: &mut u64,
) -> Result<Duration> {
    let mut c = api.connect().await?;
    let start = Instant::now();
    c.expect(
        Method::POST,
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        Some(noop_webhook_configuration_json(url, ca_bundle)),
        StatusCode::CREATED,
    )
    .await?;
    c.expect(
        Method::POST,
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        Some(noop_policy_json()),
        StatusCode::CREATED,
    )
    .await?;
    c.expect(
        Method::POST,
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        Some(noop_policy_binding_json()),
        StatusCode::CREATED,
    )
    .await?;
    loop {
        *probe += 1;
        let before = hook.reviews();
        let (status, body) = c
            .call(
                Method::POST,
                pods,
                Some(pod_json(&format!("probe-{probe}"))),
            )
            .await?;
        if hook.reviews() > before {
            if status != StatusCode::CREATED {
                bail!(
                    "pod create seen by the webhook answered {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(500)])
                );
            }
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!(
                "no pod create reached the webhook 30 s after its configuration (last: {status}: \
                 {})",
                String::from_utf8_lossy(&body[..body.len().min(500)])
            );
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Deletes what [`install_noop_admission`] created and waits until pod creates no longer
/// reach the webhook.
async fn remove_noop_admission(
    api: &Api,
    pods: &str,
    hook: &NoopWebhook,
    probe: &mut u64,
) -> Result<()> {
    let mut c = api.connect().await?;
    for path in [
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/bench-noop",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/bench-noop",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/bench-noop",
    ] {
        c.expect(Method::DELETE, path, None, StatusCode::OK).await?;
    }
    let start = Instant::now();
    loop {
        *probe += 1;
        let before = hook.reviews();
        c.expect(
            Method::POST,
            pods,
            Some(pod_json(&format!("probe-{probe}"))),
            StatusCode::CREATED,
        )
        .await?;
        if hook.reviews() == before {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("pod creates still reach the webhook 30 s after its removal");
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// CPU time (user + system) of the server process and of this bench process (client and
/// in-process webhook) over one run of step 8, from `/proc/<pid>/stat`: a figure other
/// processes on a loaded machine do not change, unlike throughput.
struct CpuMeter {
    pid: u32,
    server: f64,
    bench: f64,
}

/// CPU seconds per operation of one run.
#[derive(Clone, Copy)]
struct CpuPerOp {
    server: f64,
    bench: f64,
}

impl std::fmt::Display for CpuPerOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "server {:.0} µs, bench process {:.0} µs",
            self.server * 1e6,
            self.bench * 1e6
        )
    }
}

impl CpuMeter {
    fn start(pid: u32) -> CpuMeter {
        CpuMeter {
            pid,
            server: cpu_seconds(&format!("/proc/{pid}/stat")),
            bench: cpu_seconds("/proc/self/stat"),
        }
    }

    fn per_op(&self, ops: u64) -> CpuPerOp {
        let n = ops.max(1) as f64;
        CpuPerOp {
            server: (cpu_seconds(&format!("/proc/{}/stat", self.pid)) - self.server) / n,
            bench: (cpu_seconds("/proc/self/stat") - self.bench) / n,
        }
    }
}

/// utime + stime of the process whose `stat` file is `path`, in seconds (0 when unreadable).
fn cpu_seconds(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) closed by ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat(5): indexes 11 and 12 after ')'.
    (ticks(11) + ticks(12)) / CLOCK_TICKS
}

/// `sysconf(_SC_CLK_TCK)`: `USER_HZ`, 100 on Linux.
const CLOCK_TICKS: f64 = 100.0;

/// How long each GET series of step 9 runs (one connection).
const AGG_TIME: Duration = Duration::from_secs(3);

/// Step 9: GET latency through the aggregator to an extension server, and of a built-in.
fn step_aggregation(rt: &Runtime, dir: &Path, figs: &mut Figures) -> Result<()> {
    let server = ServerProcess::start(dir)?;
    eprintln!("[server E] ready at {} (pid {})", server.url, server.pid());
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let pki = server.data_dir.join("pki");
    let thing = json!({
        "kind": "Thing", "apiVersion": "bench.example.com/v1",
        "metadata": { "name": "x", "namespace": "default", "resourceVersion": "1" },
    });
    let ext = WebhookServer::start(
        pki.join("apiserver.crt"),
        pki.join("apiserver.key"),
        2,
        move |_req| {
            let thing = thing.clone();
            async move { e2e::webhook_server::json_reply(&thing) }
        },
    )?;
    let port = ext.port;
    let objects = [
        (
            "/api/v1/namespaces/default/services",
            json!({ "apiVersion": "v1", "kind": "Service",
                "metadata": { "name": "bench-ext", "namespace": "default" },
                "spec": { "ports": [{ "name": "https", "port": 443, "targetPort": port }] } }),
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            json!({ "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": { "name": "bench-ext-1", "namespace": "default",
                              "labels": { "kubernetes.io/service-name": "bench-ext" } },
                "addressType": "IPv4",
                "endpoints": [{ "addresses": ["127.0.0.1"], "conditions": { "ready": true } }],
                "ports": [{ "name": "https", "port": port, "protocol": "TCP" }] }),
        ),
        (
            "/apis/apiregistration.k8s.io/v1/apiservices",
            json!({ "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": { "name": "v1.bench.example.com" },
                "spec": { "group": "bench.example.com", "version": "v1",
                          "groupPriorityMinimum": 1000, "versionPriority": 15,
                          "insecureSkipTLSVerify": true,
                          "service": { "name": "bench-ext", "namespace": "default", "port": 443 } } }),
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "direct", "namespace": "default" }, "data": { "k": "v" } }),
        ),
    ];
    let proxied = "/apis/bench.example.com/v1/namespaces/default/things/x";
    let took = rt.block_on(async {
        let mut c = api.connect().await?;
        for (path, obj) in &objects {
            c.expect(
                Method::POST,
                path,
                Some(obj.to_string()),
                StatusCode::CREATED,
            )
            .await?;
        }
        let start = Instant::now();
        loop {
            let (status, _) = c.call(Method::GET, proxied, None).await?;
            if status == StatusCode::OK {
                return Ok::<_, anyhow::Error>(start.elapsed());
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("the extension server was not reachable 30 s after its APIService: {status}");
            }
            tokio::time::sleep(READY_POLL).await;
        }
    })?;
    eprintln!("[aggregation] extension server answering {took:?} after its APIService");
    let series = |path: &'static str| {
        rt.block_on(drive(
            &api,
            1,
            u64::MAX,
            AGG_TIME,
            None,
            move |mut c: Conn, _| async move {
                c.expect(Method::GET, path, None, StatusCode::OK)
                    .await
                    .map(drop)
            },
        ))
    };
    let via = series(proxied)?;
    eprintln!("[GET through the aggregator @1] {via}");
    let direct = series("/api/v1/namespaces/default/configmaps/direct")?;
    eprintln!("[GET ConfigMap direct @1] {direct}");
    let cell = |s: &RunStats| {
        format!(
            "{:.2} / {:.2}",
            s.percentile_ms(0.50),
            s.percentile_ms(0.99)
        )
    };
    figs.set_run(ROW_AGG_PROXIED, &via, cell(&via));
    figs.set_run(ROW_AGG_DIRECT, &direct, cell(&direct));
    drop(ext);
    Ok(())
}

/// A validating webhook allowing everything ([`WebhookServer::start_h2`]: TLS with the
/// given PEM files, HTTP/2, on its own 1-thread runtime in the bench process), counting the
/// reviews it answers.
struct NoopWebhook {
    port: u16,
    reviews: Arc<AtomicU64>,
    _server: WebhookServer,
}

impl NoopWebhook {
    fn start(cert: &Path, key: &Path) -> Result<Self> {
        let reviews = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&reviews);
        let server = WebhookServer::start_h2(cert.to_owned(), key.to_owned(), move |body| {
            counter.fetch_add(1, Ordering::Relaxed);
            noop_answer(body)
        })?;
        Ok(NoopWebhook {
            port: server.port,
            reviews,
            _server: server,
        })
    }

    /// Reviews answered so far.
    fn reviews(&self) -> u64 {
        self.reviews.load(Ordering::Relaxed)
    }
}

/// The answer allowing the AdmissionReview `body`, echoing its uid (only `request.uid` is
/// decoded, borrowed, as a webhook written for speed would).
fn noop_answer(body: &[u8]) -> Vec<u8> {
    #[derive(serde::Deserialize)]
    struct Review<'a> {
        #[serde(borrow)]
        request: Uid<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Uid<'a> {
        uid: &'a str,
    }
    let uid = serde_json::from_slice::<Review<'_>>(body).map_or("", |r| r.request.uid);
    let mut out = Vec::with_capacity(128);
    let _ = serde_json::to_writer(
        &mut out,
        &json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": true},
        }),
    );
    out
}

/// Step 3: 10k pods, then 20 full LISTs.
fn step_list(rt: &Runtime, server: &ServerProcess, figs: &mut Figures) -> Result<()> {
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let ns = "bench-pods";
    rt.block_on(api.create_namespace(ns))?;
    let path = format!("/api/v1/namespaces/{ns}/pods");
    let create_path = path.clone();
    let s = rt.block_on(drive(
        &api,
        CONNS,
        PODS,
        POD_LOAD_CAP,
        Some(("pods", 2_000)),
        move |mut c: Conn, n| {
            let path = create_path.clone();
            async move {
                let body = pod_json(&format!("p-{n}"));
                c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(drop)
            }
        },
    ))?;
    eprintln!("[pods] {s}");
    let pods = s.count();
    let partial_pods = pods < PODS || s.errors > 0;
    let pod_errors = s.errors;

    let mut lat_us = Vec::new();
    let mut items = None;
    let mut bytes = 0;
    let started = Instant::now();
    let list_result: Result<()> = rt.block_on(async {
        let mut c = api.connect().await?;
        for i in 0..LISTS {
            if started.elapsed() > LIST_CAP {
                eprintln!("[list] time cap of {LIST_CAP:?} reached after {i} LISTs");
                break;
            }
            let t = Instant::now();
            let body = c
                .call_timeout(Method::GET, &path, None, StatusCode::OK, LIST_TIMEOUT)
                .await?;
            lat_us.push(t.elapsed().as_micros() as u64);
            bytes = body.len();
            if items.is_none() {
                let v: Value = serde_json::from_slice(&body).context("LIST body")?;
                let n = v["items"].as_array().map_or(0, Vec::len);
                items = Some(n);
            }
        }
        Ok(())
    });
    lat_us.sort_unstable();
    let s = RunStats {
        lat_us,
        elapsed: started.elapsed(),
        errors: usize::from(list_result.is_err()),
        first_error: list_result.as_ref().err().map(|e| format!("{e:#}")),
        partial: false,
    };
    eprintln!(
        "[list] {} LISTs of {} items ({bytes} bytes): p50 {:.1} ms, p99 {:.1} ms",
        s.count(),
        items.unwrap_or(0),
        s.percentile_ms(0.50),
        s.percentile_ms(0.99)
    );
    let mut cell = format!(
        "{:.0} / {:.0}",
        s.percentile_ms(0.50),
        s.percentile_ms(0.99)
    );
    if s.count() < LISTS as u64 {
        cell.push_str(&format!(" (partial: {} of {LISTS} LISTs)", s.count()));
    }
    if partial_pods || items.is_some_and(|n| n as u64 != PODS) {
        cell.push_str(&format!(
            " (partial: {} pods listed)",
            thousands(items.unwrap_or(0) as f64)
        ));
    }
    figs.set_run(ROW_LIST, &s, cell);
    list_result?;
    if pod_errors > 0 {
        bail!("{pod_errors} connections stopped on a failed pod create");
    }
    Ok(())
}

/// Step 4: 1000 watchers, 50 creates 20 ms apart, delivery latency.
fn step_watch(rt: &Runtime, server: &ServerProcess, figs: &mut Figures) -> Result<()> {
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let ns = "bench-watch";
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    rt.block_on(async {
        api.create_namespace(ns).await?;
        let mut control = api.connect().await?;
        let list = control
            .expect(Method::GET, &path, None, StatusCode::OK)
            .await?;
        let list: Value = serde_json::from_slice(&list).context("list body")?;
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .context("list without resourceVersion")?
            .to_owned();

        // Open every watch and wait for its response headers before the first create.
        let t = Instant::now();
        let mut conns = Vec::new();
        for _ in 0..WATCH_CONNS {
            conns.push(api.connect().await?);
        }
        let watch_path = format!("{path}?watch=1&resourceVersion={rv}");
        let mut opening = JoinSet::new();
        for i in 0..WATCHERS {
            let mut c = conns[i % WATCH_CONNS].clone();
            let watch_path = watch_path.clone();
            opening.spawn(async move {
                let resp = tokio::time::timeout(
                    Duration::from_secs(30),
                    c.send(Method::GET, &watch_path, None),
                )
                .await
                .context("watch request timed out")??;
                if resp.status() != StatusCode::OK {
                    let status = resp.status();
                    let body = resp.into_body().collect().await?.to_bytes();
                    bail!("watch: {status}: {}", String::from_utf8_lossy(&body));
                }
                Ok(resp)
            });
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let delivered = Arc::new(AtomicU64::new(0));
        let mut readers = JoinSet::new();
        let mut open_errors = 0;
        let mut first_open_error = None;
        while let Some(joined) = opening.join_next().await {
            match joined? {
                Ok(resp) => {
                    readers.spawn(read_watch(
                        resp.into_body(),
                        stop_rx.clone(),
                        Arc::clone(&delivered),
                    ));
                }
                Err(e) => {
                    open_errors += 1;
                    first_open_error.get_or_insert(format!("{e:#}"));
                }
            }
        }
        let watching = readers.len();
        eprintln!(
            "[watch] {watching} watches open over {WATCH_CONNS} connections in {} ms \
             ({open_errors} failed)",
            t.elapsed().as_millis()
        );
        if let Some(e) = &first_open_error {
            eprintln!("[watch] first failure: {e}");
        }

        // 50 creates, 20 ms apart, each on its own task so a slow one does not delay the next.
        let sent = Arc::new(Mutex::new(vec![None::<Instant>; WATCH_CREATES]));
        let mut creates = JoinSet::new();
        let mut tick = tokio::time::interval(WATCH_SPACING);
        for i in 0..WATCH_CREATES {
            tick.tick().await;
            let mut c = control.clone();
            let path = path.clone();
            let sent = Arc::clone(&sent);
            creates.spawn(async move {
                let body = configmap_json(&format!("w-{i}"), "v");
                if let Ok(mut s) = sent.lock() {
                    s[i] = Some(Instant::now());
                }
                c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(drop)
            });
        }
        let mut create_errors = 0;
        while let Some(joined) = creates.join_next().await {
            if let Err(e) = joined? {
                create_errors += 1;
                eprintln!("[watch] create failed: {e:#}");
            }
        }
        let last_create = Instant::now();
        let want = (watching * (WATCH_CREATES - create_errors)) as u64;
        while delivered.load(Ordering::Relaxed) < want && last_create.elapsed() < WATCH_GRACE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop_tx.send(true);

        let sent: Vec<Option<Instant>> = sent.lock().map(|s| s.clone()).unwrap_or_default();
        let mut lat_us = Vec::new();
        let mut ended_early = 0;
        let mut read_errors = 0;
        while let Some(joined) = readers.join_next().await {
            let r = joined?;
            ended_early += usize::from(r.ended_early);
            if let Some(e) = r.error {
                if read_errors == 0 {
                    eprintln!("[watch] first read error: {e}");
                }
                read_errors += 1;
            }
            for (i, at) in r.events {
                if let Some(Some(sent_at)) = sent.get(i) {
                    lat_us.push(at.saturating_duration_since(*sent_at).as_micros() as u64);
                }
            }
        }
        lat_us.sort_unstable();
        let total = (WATCHERS * WATCH_CREATES) as u64;
        let s = RunStats {
            lat_us,
            elapsed: last_create.elapsed(),
            errors: open_errors + create_errors + read_errors,
            first_error: first_open_error,
            partial: false,
        };
        eprintln!(
            "[watch] {} of {total} deliveries ({watching} watchers, {create_errors} failed \
             creates, {ended_early} streams ended early, {read_errors} read errors): \
             p50 {:.1} ms, p99 {:.1} ms",
            s.count(),
            s.percentile_ms(0.50),
            s.percentile_ms(0.99)
        );
        figs.set_run(
            ROW_WATCH,
            &s,
            format!(
                "{:.1} / {:.1}",
                s.percentile_ms(0.50),
                s.percentile_ms(0.99)
            ),
        );
        figs.set(
            ROW_WATCH_COUNT,
            format!(
                "{} of {}",
                thousands(s.count() as f64),
                thousands(total as f64)
            ),
        );
        if open_errors + create_errors + read_errors + ended_early > 0 {
            bail!(
                "{open_errors} watches failed to open, {create_errors} creates failed, \
                 {read_errors} read errors, {ended_early} streams ended early"
            );
        }
        Ok(())
    })
}

/// What one watcher saw: (create index, time read) per ADDED event of a `w-N` ConfigMap.
struct WatchResult {
    events: Vec<(usize, Instant)>,
    ended_early: bool,
    error: Option<String>,
}

/// Reads newline-delimited watch events until told to stop.
async fn read_watch(
    mut body: Incoming,
    mut stop: tokio::sync::watch::Receiver<bool>,
    delivered: Arc<AtomicU64>,
) -> WatchResult {
    let mut r = WatchResult {
        events: Vec::new(),
        ended_early: false,
        error: None,
    };
    let mut buf: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            _ = stop.changed() => return r,
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    let now = Instant::now();
                    buf.extend_from_slice(&data);
                    while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=pos).collect();
                        match added_index(&line) {
                            Ok(Some(i)) => {
                                r.events.push((i, now));
                                delivered.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(None) => {}
                            Err(e) => {
                                r.error.get_or_insert(e);
                            }
                        }
                    }
                }
                Some(Err(e)) => {
                    r.error.get_or_insert(format!("watch body: {e}"));
                    r.ended_early = true;
                    return r;
                }
                None => {
                    r.ended_early = true;
                    return r;
                }
            }
        }
    }
}

/// The N of an `ADDED` event of ConfigMap `w-N`; other ADDED events and bookmarks are
/// skipped, any other event (MODIFIED, DELETED, ERROR) is unexpected.
fn added_index(line: &[u8]) -> Result<Option<usize>, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("bad event: {e}"))?;
    let name = v["object"]["metadata"]["name"].as_str().unwrap_or_default();
    match (v["type"].as_str(), name.strip_prefix("w-")) {
        (Some("ADDED"), Some(i)) => Ok(i.parse().ok()),
        (Some("ADDED" | "BOOKMARK"), _) => Ok(None),
        _ => Err(format!(
            "unexpected event: {}",
            String::from_utf8_lossy(&line[..line.len().min(300)])
        )),
    }
}

/// Steps 6 (fresh), 5 and 6 (restart) on `dir`.
fn steps_rss_and_start(rt: &Runtime, dir: &Path, figs: &mut Figures) -> Result<()> {
    // Fresh start, timed; then killed and started again by the harness for the load.
    let (spawned, took) = rt.block_on(spawn_until_ready(dir, FRESH_READY_CAP))?;
    eprintln!("[start] fresh data dir: ready in {} ms", took.as_millis());
    figs.set(ROW_START_FRESH, format!("{:.3} s", took.as_secs_f64()));
    drop(spawned);

    let server = ServerProcess::start(dir)?;
    eprintln!("[server B] ready at {} (pid {})", server.url, server.pid());
    let api = Api::from_kubeconfig(&server.kubeconfig, port_of(&server.url)?)?;
    let ns = "bench-rss";
    rt.block_on(api.create_namespace(ns))?;
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let s = rt.block_on(drive(
        &api,
        CONNS,
        BIG_CMS,
        BIG_LOAD_CAP,
        Some(("1-KiB ConfigMaps", PROGRESS_EVERY)),
        move |mut c: Conn, n| {
            let path = path.clone();
            async move {
                let data = "x".repeat(BIG_DATA);
                let body = configmap_json(&format!("big-{n}"), &data);
                c.expect(Method::POST, &path, Some(body), StatusCode::CREATED)
                    .await
                    .map(drop)
            }
        },
    ))?;
    eprintln!("[load] {s}");
    let held = s.count();
    let rss = rss_bytes(server.pid())?;
    eprintln!(
        "[rss] {:.1} MB ({:.1} MiB) holding {held} 1-KiB ConfigMaps",
        rss as f64 / 1e6,
        rss as f64 / (1024.0 * 1024.0)
    );
    let mut cell = format!("{:.1} MB", rss as f64 / 1e6);
    if held < BIG_CMS {
        cell.push_str(&format!(
            " (partial: {} ConfigMaps held)",
            thousands(held as f64)
        ));
    }
    figs.set_run(ROW_RSS, &s, cell);

    // SIGKILL (the harness's drop), then the timed restart on the same directory.
    drop(server);
    let (spawned, took) = rt.block_on(spawn_until_ready(dir, RESTART_READY_CAP))?;
    eprintln!(
        "[start] restart with {held} ConfigMaps: ready in {} ms",
        took.as_millis()
    );
    let mut cell = format!("{:.3} s", took.as_secs_f64());
    if held < BIG_CMS {
        cell.push_str(&format!(
            " (partial: {} ConfigMaps)",
            thousands(held as f64)
        ));
    }
    figs.set(ROW_START_RESTART, cell);
    // The data must have survived: the last ConfigMap of the load is there.
    if held > 0 {
        let api = Api::from_kubeconfig(&dir.join("admin.kubeconfig"), spawned.port)?;
        let path = format!("/api/v1/namespaces/{ns}/configmaps/big-{}", held - 1);
        rt.block_on(async {
            let mut c = api.connect().await?;
            c.expect(Method::GET, &path, None, StatusCode::OK).await
        })
        .context("GET after restart")?;
    }
    drop(spawned);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Timed starts.

/// A `capstan server` spawned by the bench (same command line as the harness's); killed on drop.
struct Spawned {
    child: Child,
    port: u16,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `capstan server` on `dir` and polls `GET /readyz` every 10 ms until it answers 200.
/// Returns the process and the time from spawn to that answer.
async fn spawn_until_ready(dir: &Path, cap: Duration) -> Result<(Spawned, Duration)> {
    std::fs::create_dir_all(dir)?;
    let log_path = dir.with_extension("log");
    let log = File::options().create(true).append(true).open(&log_path)?;
    let port = free_port();
    let kubeconfig = dir.join("admin.kubeconfig");
    let start = Instant::now();
    let child = Command::new(capstan_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir)
        .args(["--secure-port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawning {}", capstan_bin().display()))?;
    let mut spawned = Spawned { child, port };
    let mut api = None;
    loop {
        if let Some(status) = spawned.child.try_wait()? {
            bail!("capstan server exited early with {status}");
        }
        if api.is_none() && kubeconfig.exists() {
            // The kubeconfig is written atomically; until it parses, try again.
            api = Api::from_kubeconfig(&kubeconfig, port).ok();
        }
        if let Some(api) = &api {
            let probe = async {
                let mut c = api.connect().await?;
                c.call(Method::GET, "/readyz", None).await
            };
            if let Ok(Ok((StatusCode::OK, _))) =
                tokio::time::timeout(Duration::from_secs(1), probe).await
            {
                return Ok((spawned, start.elapsed()));
            }
        }
        if start.elapsed() > cap {
            bail!("capstan server not ready after {cap:?}");
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The HTTPS client.

/// TLS settings and address of one server.
struct Api {
    tls: Arc<rustls::ClientConfig>,
    port: u16,
}

/// One HTTP/2 connection (cloning shares it: each clone is another stream on it).
#[derive(Clone)]
struct Conn {
    send: SendRequest<Full<Bytes>>,
    base: String,
}

impl Api {
    /// Reads the CA, client certificate and key from a kubeconfig written by capstan (one
    /// cluster, one user, base64 `*-data` fields).
    fn from_kubeconfig(path: &Path, port: u16) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let field = |name: &str| -> Result<Vec<u8>> {
            let value = text
                .lines()
                .find_map(|l| l.trim_start().strip_prefix(name))
                .with_context(|| format!("no {name} in {}", path.display()))?;
            let value = value.trim().trim_matches('"');
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .with_context(|| format!("{name} is not base64"))
        };
        let ca = field("certificate-authority-data:")?;
        let cert = field("client-certificate-data:")?;
        let key = field("client-key-data:")?;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca) {
            roots.add(c.context("CA PEM")?)?;
        }
        let chain = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<Vec<_>, _>>()
            .context("client certificate PEM")?;
        let key = PrivateKeyDer::from_pem_slice(&key).context("client key PEM")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Api {
            tls: Arc::new(tls),
            port,
        })
    }

    /// A new TCP + TLS + HTTP/2 connection; fails unless ALPN chose `h2`.
    async fn connect(&self) -> Result<Conn> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls))
            .connect(name, tcp)
            .await?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            bail!("server did not negotiate h2 via ALPN");
        }
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tls))
            .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            send,
            base: format!("https://127.0.0.1:{}", self.port),
        })
    }

    /// Creates a namespace (a conflict is fine: it exists).
    async fn create_namespace(&self, name: &str) -> Result<()> {
        let mut c = self.connect().await?;
        let body =
            format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}"}}}}"#);
        let (status, resp) = c
            .call(Method::POST, "/api/v1/namespaces", Some(body))
            .await?;
        if status != StatusCode::CREATED && status != StatusCode::CONFLICT {
            bail!(
                "creating namespace {name}: {status}: {}",
                String::from_utf8_lossy(&resp)
            );
        }
        Ok(())
    }
}

impl Conn {
    /// Sends a request and returns the response with its body unread.
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Response<Incoming>> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("accept", "application/json");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        self.send.ready().await?;
        Ok(self.send.send_request(req).await?)
    }

    /// Sends a request and reads the whole body (within `REQUEST_TIMEOUT`).
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, Bytes)> {
        self.call_within(method, path, body, REQUEST_TIMEOUT).await
    }

    async fn call_within(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
        limit: Duration,
    ) -> Result<(StatusCode, Bytes)> {
        let what = format!("{method} {path}");
        let exchange = async {
            let resp = self.send(method, path, body).await?;
            let status = resp.status();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, anyhow::Error>((status, body))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .with_context(|| format!("{what}: no answer within {limit:?}"))?
            .with_context(|| what.clone())
    }

    /// As [`Conn::call`], failing unless the status is `want`.
    async fn expect(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
        want: StatusCode,
    ) -> Result<Bytes> {
        self.call_timeout(method, path, body, want, REQUEST_TIMEOUT)
            .await
    }

    async fn call_timeout(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
        want: StatusCode,
        limit: Duration,
    ) -> Result<Bytes> {
        let what = format!("{method} {path}");
        let (status, resp) = self.call_within(method, path, body, limit).await?;
        if status != want {
            bail!(
                "{what}: {status} (want {want}): {}",
                String::from_utf8_lossy(&resp[..resp.len().min(500)])
            );
        }
        Ok(resp)
    }
}

/// A ConfigMap named `name` with one data key `k` holding `value`.
fn configmap_json(name: &str, value: &str) -> String {
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"k": value},
    });
    cm.to_string()
}

/// A minimal Pod named `name`: one `nginx` container.
fn pod_json(name: &str) -> String {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    pod.to_string()
}

/// The port of `https://127.0.0.1:<port>`.
fn port_of(url: &str) -> Result<u16> {
    url.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no port in {url}"))
}

// ---------------------------------------------------------------------------------------------
// Load generation.

/// Outcome of one load step.
struct RunStats {
    /// Per-request latencies in microseconds of the successful requests, sorted.
    lat_us: Vec<u64>,
    elapsed: Duration,
    errors: usize,
    first_error: Option<String>,
    /// Stopped by its time cap before reaching its op count (load steps only).
    partial: bool,
}

impl RunStats {
    fn count(&self) -> u64 {
        self.lat_us.len() as u64
    }

    fn ops_per_sec(&self) -> f64 {
        self.lat_us.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&self, q: f64) -> f64 {
        if self.lat_us.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.lat_us.len() as f64).ceil() as usize).clamp(1, self.lat_us.len());
        self.lat_us[rank - 1] as f64 / 1000.0
    }

    /// `figure`, marked when requests failed or the step hit its time cap.
    fn cell(&self, figure: String) -> String {
        let mut cell = figure;
        if self.errors > 0 {
            cell.push_str(&format!(" ({} errors)", self.errors));
        }
        if self.partial && !cell.contains("partial") {
            cell.push_str(" (partial: time cap)");
        }
        cell
    }
}

impl std::fmt::Display for RunStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ok in {:.2} s = {:.0}/s, p50 {:.1} ms, p99 {:.1} ms",
            self.lat_us.len(),
            self.elapsed.as_secs_f64(),
            self.ops_per_sec(),
            self.percentile_ms(0.50),
            self.percentile_ms(0.99)
        )?;
        if self.errors > 0 {
            write!(f, ", {} errors", self.errors)?;
            if let Some(e) = &self.first_error {
                write!(f, " (first: {e})")?;
            }
        }
        if self.partial {
            write!(f, ", PARTIAL (time cap reached)")?;
        }
        Ok(())
    }
}

/// `conns` connections each run `op` back to back until `max_ops` ops were started or
/// `max_time` passed. A connection whose request fails stops (the first error is kept); the
/// others go on. `progress` = (what, every): a stderr line each `every` completed ops.
async fn drive<F, Fut>(
    api: &Api,
    conns: usize,
    max_ops: u64,
    max_time: Duration,
    progress: Option<(&'static str, u64)>,
    op: F,
) -> Result<RunStats>
where
    F: Fn(Conn, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let mut connections = Vec::new();
    for _ in 0..conns {
        connections.push(api.connect().await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + max_time;
    let mut set = JoinSet::new();
    for conn in connections {
        let (next, done, op) = (Arc::clone(&next), Arc::clone(&done), op.clone());
        set.spawn(async move {
            let mut lat = Vec::new();
            loop {
                if Instant::now() >= deadline {
                    return (lat, None);
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= max_ops {
                    return (lat, None);
                }
                let t = Instant::now();
                if let Err(e) = op(conn.clone(), n).await {
                    return (lat, Some(format!("{e:#}")));
                }
                lat.push(t.elapsed().as_micros() as u64);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some((what, every)) = progress
                    && d % every == 0
                {
                    let secs = start.elapsed().as_secs_f64();
                    eprintln!("  {d} {what} in {secs:.1} s ({:.0}/s)", d as f64 / secs);
                }
            }
        });
    }
    let mut lat_us = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    while let Some(joined) = set.join_next().await {
        let (lat, err) = joined?;
        lat_us.extend(lat);
        if let Some(e) = err {
            errors += 1;
            first_error.get_or_insert(e);
        }
    }
    let elapsed = start.elapsed();
    lat_us.sort_unstable();
    let partial = progress.is_some() && (lat_us.len() as u64) < max_ops && elapsed >= max_time;
    Ok(RunStats {
        lat_us,
        elapsed,
        errors,
        first_error,
        partial,
    })
}

// ---------------------------------------------------------------------------------------------
// Measurements of the process.

/// Resident set size of `pid`, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .context("bad VmRSS line")?
        .parse()?;
    Ok(kib * 1024)
}

fn tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `1234.5` → `"1,235"`.
fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_owned();
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

// ---------------------------------------------------------------------------------------------
// The table.

const ROW_CREATE: &str = "ConfigMap creates/s (32 conns, 5 s or 20k)";
const ROW_CREATE_LAT: &str = "  create latency p50 / p99 ms";
const ROW_GET: &str = "ConfigMap GETs/s (32 conns, 5 s)";
const ROW_GET_LAT: &str = "  GET latency p50 / p99 ms";
const ROW_LIST: &str = "LIST 10k pods p50 / p99 ms (20 LISTs)";
const ROW_WATCH: &str = "watch delivery p50 / p99 ms (1000 watchers)";
const ROW_WATCH_COUNT: &str = "  watch deliveries arrived";
const ROW_RSS: &str = "RSS holding 100k 1-KiB ConfigMaps";
const ROW_START_FRESH: &str = "start to ready, fresh data dir";
const ROW_START_RESTART: &str = "start to ready, restart with 100k ConfigMaps";
const ROW_CRD_READY: &str = "CRD create → first custom resource created";
const ROW_CR_CREATE: &str = "custom resource creates/s (32 conns, 5 s or 20k)";
const ROW_CR_RSS: &str = "RSS holding 100k 1-KiB custom resources";
const ROW_POD_CREATE_PLAIN: &str =
    "pod creates/s (32 conns, 4 × 2.5 s alternating with 3 below), no webhooks/policies";
const ROW_POD_CREATE_ADMISSION: &str = "  … with 1 no-op validating webhook + 1 no-op policy";
const ROW_AGG_PROXIED: &str = "GET through the aggregator p50 / p99 ms (1 conn, 3 s)";
const ROW_AGG_DIRECT: &str = "  direct ConfigMap GET p50 / p99 ms (1 conn, 3 s)";

/// (row, kube-apiserver + etcd reference, target), in print order.
const ROWS: [(&str, &str, &str); 17] = [
    (ROW_CREATE, "1,325/s", "≥ 5,000/s"),
    (ROW_CREATE_LAT, "– / 57", "–"),
    (ROW_GET, "2,744/s", "≥ 10,000/s"),
    (ROW_GET_LAT, "–", "–"),
    (ROW_LIST, "358 / –", "p50 ≤ 60"),
    (ROW_WATCH, "– / 50", "p99 ≤ 20"),
    (ROW_WATCH_COUNT, "–", "–"),
    (ROW_RSS, "1.65 GB", "≤ 400 MB"),
    (ROW_START_FRESH, "3–4.5 s", "≤ 0.5 s"),
    (ROW_START_RESTART, "3–4.5 s", "≤ 0.5 s"),
    (ROW_CRD_READY, "–", "≤ 1 s"),
    (ROW_CR_CREATE, "–", "within 20 % of ConfigMaps"),
    (ROW_CR_RSS, "–", "–"),
    (ROW_POD_CREATE_PLAIN, "–", "–"),
    (ROW_POD_CREATE_ADMISSION, "–", "≥ 80 % of without"),
    (ROW_AGG_PROXIED, "–", "–"),
    (ROW_AGG_DIRECT, "–", "–"),
];

/// The capstan column, by row.
struct Figures {
    cells: HashMap<&'static str, String>,
    /// Some figure carries an error mark.
    failed: bool,
}

impl Figures {
    fn new() -> Self {
        Figures {
            cells: HashMap::new(),
            failed: false,
        }
    }

    fn set(&mut self, row: &'static str, cell: String) {
        self.cells.insert(row, cell);
    }

    /// Sets a figure measured by `s`, marked as [`RunStats::cell`] does.
    fn set_run(&mut self, row: &'static str, s: &RunStats, figure: String) {
        self.failed |= s.errors > 0;
        self.set(row, s.cell(figure));
    }

    fn print(&self) {
        let mut lines = vec![[
            "metric".to_owned(),
            "capstan".to_owned(),
            "kube-apiserver+etcd (reference)".to_owned(),
            "target".to_owned(),
        ]];
        for (row, reference, target) in ROWS {
            lines.push([
                row.to_owned(),
                self.cells
                    .get(row)
                    .cloned()
                    .unwrap_or_else(|| "n/a".to_owned()),
                reference.to_owned(),
                target.to_owned(),
            ]);
        }
        let width = |s: &str| s.chars().count();
        let mut widths = [0; 4];
        for line in &lines {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(width(cell));
            }
        }
        let pad = |s: &str, w: usize, right: bool| {
            let fill = " ".repeat(w - width(s));
            if right {
                format!("{fill}{s}")
            } else {
                format!("{s}{fill}")
            }
        };
        for (i, line) in lines.iter().enumerate() {
            let [label, c, r, t] = line;
            let [w0, w1, w2, w3] = widths;
            println!(
                "| {} | {} | {} | {} |",
                pad(label, w0, false),
                pad(c, w1, true),
                pad(r, w2, true),
                pad(t, w3, true)
            );
            if i == 0 {
                let dashes = |w: usize| "-".repeat(w);
                let (d0, d1, d2, d3) = (dashes(w0), dashes(w1), dashes(w2), dashes(w3));
                println!("|-{d0}-|-{d1}:|-{d2}:|-{d3}:|");
            }
        }
    }
}
