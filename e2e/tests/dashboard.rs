//! The web dashboard (`/dashboard/`, issue 27) against the real binary: its static files are
//! served without credentials with a strict CSP, strong ETags and gzip; and, driven in
//! headless Chromium over the DevTools protocol, a user logs in with a service-account token,
//! sees the 3 nodes, watches a Deployment's pods appear Running without a reload, opens a
//! pod's YAML, and a token bound to a Role in one namespace cannot see another namespace.
//! Screenshots land in `target/dashboard-screenshots/`.

#[path = "dashboard/cdp.rs"]
mod cdp;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use e2e::ServerProcess;

/// `curl -sk` of `url` with extra arguments: (status, headers lower-cased, body bytes).
fn curl(url: &str, args: &[&str]) -> Result<(u16, String, Vec<u8>)> {
    let dir = tempfile::tempdir()?;
    let head = dir.path().join("head");
    let out = Command::new("curl")
        .args(["-sk", "--http1.1", "-D"])
        .arg(&head)
        .args(args)
        .arg(url)
        .output()?;
    if !out.status.success() {
        bail!("curl {url}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let head = std::fs::read_to_string(&head)?.to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, head, out.stdout))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

#[test]
fn dashboard_assets_are_public_cached_compressed_and_locked_down() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = ServerProcess::start(&dir.path().join("data"))?;
    let page = format!("{}/dashboard/", server.url);

    // No credentials: the page (no data in it) is served…
    let (status, head, body) = curl(&page, &[])?;
    assert_eq!(status, 200, "{head}");
    assert!(String::from_utf8_lossy(&body).contains("<script src=\"app.js\""));
    assert_eq!(
        header(&head, "content-security-policy"),
        Some(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        )
    );
    assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"));
    assert_eq!(
        header(&head, "content-type"),
        Some("text/html; charset=utf-8")
    );
    // …but the data is not: the same anonymous client gets no pods.
    let (status, _, _) = curl(&format!("{}/api/v1/pods", server.url), &[])?;
    assert!(
        status == 401 || status == 403,
        "anonymous pod list: {status}"
    );

    // A strong ETag; If-None-Match answers 304 without a body.
    let etag = header(&head, "etag").expect("etag").to_owned();
    assert!(etag.starts_with('"') && !etag.starts_with("w/"), "{etag}");
    let (status, head304, body) = curl(&page, &["-H", &format!("If-None-Match: {etag}")])?;
    assert_eq!(status, 304, "{head304}");
    assert!(body.is_empty());

    // gzip when accepted (the script shrinks), identity otherwise; different ETags.
    let js = format!("{}/dashboard/app.js", server.url);
    let (status, plain_head, plain) = curl(&js, &[])?;
    assert_eq!(status, 200);
    assert_eq!(header(&plain_head, "content-encoding"), None);
    let (status, gz_head, gz) = curl(&js, &["-H", "Accept-Encoding: gzip"])?;
    assert_eq!(status, 200);
    assert_eq!(header(&gz_head, "content-encoding"), Some("gzip"));
    assert!(
        gz.len() * 2 < plain.len(),
        "{} vs {}",
        gz.len(),
        plain.len()
    );
    assert_ne!(header(&gz_head, "etag"), header(&plain_head, "etag"));
    let mut gunzip = Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = gunzip.stdin.take() {
        use std::io::Write;
        stdin.write_all(&gz)?;
    }
    let decoded = gunzip.wait_with_output()?;
    assert!(
        decoded.status.success() && decoded.stdout == plain,
        "gzip body differs"
    );

    // Unknown files are 404s; other methods are not accepted.
    let (status, _, _) = curl(&format!("{}/dashboard/nope.js", server.url), &[])?;
    assert_eq!(status, 404);
    let (status, _, _) = curl(&page, &["-X", "POST"])?;
    assert_eq!(status, 405);
    let (status, head, _) = curl(&format!("{}/dashboard", server.url), &[])?;
    assert_eq!(status, 301);
    assert_eq!(header(&head, "location"), Some("/dashboard/"));

    // --dashboard=false: the path is an ordinary (unauthenticated → 403) API path.
    let off = ServerProcess::start_with(&dir.path().join("off"), &["--dashboard=false"])?;
    let (status, _, _) = curl(&format!("{}/dashboard/", off.url), &[])?;
    assert_ne!(status, 200);
    Ok(())
}

#[test]
fn apiserver_serves_the_dashboard_only_when_asked() -> Result<()> {
    // `capstan apiserver` (on a capstan store member): off by default, `--dashboard` on.
    let dir = tempfile::tempdir()?;
    let store = e2e::StoreProcess::start(&dir.path().join("store"), &[])?;
    for (name, flags, served) in [
        ("default", &[][..], false),
        ("on", &["--dashboard"][..], true),
    ] {
        let mut args = vec![
            "--etcd-servers",
            store.endpoint.as_str(),
            "--disable-admission-plugins=ServiceAccount",
        ];
        args.extend_from_slice(flags);
        let mut api = ServerProcess::spawn_command(
            "apiserver",
            &dir.path().join(name),
            e2e::free_port(),
            &args,
        )?;
        api.wait_ready(Duration::from_secs(30))?;
        let (status, _, _) = curl(&format!("{}/dashboard/", api.url), &[])?;
        assert_eq!(status == 200, served, "{name}: {status}");
    }
    Ok(())
}

fn screenshots_dir() -> PathBuf {
    // target/debug/capstan → target/dashboard-screenshots
    let bin = e2e::capstan_bin();
    bin.parent()
        .and_then(|p| p.parent())
        .map(|t| t.join("dashboard-screenshots"))
        .unwrap_or_else(|| PathBuf::from("dashboard-screenshots"))
}

fn kubectl_ok(server: &ServerProcess, args: &[&str]) -> Result<String> {
    let (ok, out, err) = server.kubectl(args)?;
    if !ok {
        bail!("kubectl {}: {err}", args.join(" "));
    }
    Ok(out)
}

/// A service-account token bound by `binding` (already created) — `kubectl create token`.
fn token(server: &ServerProcess, ns: &str, sa: &str) -> Result<String> {
    Ok(
        kubectl_ok(server, &["create", "token", sa, "-n", ns, "--duration=1h"])?
            .trim()
            .to_owned(),
    )
}

/// The Deployment the test creates: 3 replicas, each requesting CPU and memory.
const WEB: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx
        resources: {requests: {cpu: 500m, memory: 512Mi}}
";

/// A CRD with a printer column, and one of its objects.
const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {color: {type: string}}}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
";
const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {color: blue}
";

/// A JS string literal.
fn js(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[test]
fn dashboard_in_headless_chromium() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let server = ServerProcess::start_cluster(&dir.path().join("data"), &[])?;
    let shots = screenshots_dir();

    // The three simulated nodes register (the control plane may register its own as well).
    let deadline = Instant::now() + Duration::from_secs(60);
    let all_nodes = loop {
        let out = kubectl_ok(&server, &["get", "nodes", "--no-headers"])?;
        let simulated = out
            .lines()
            .filter(|l| l.starts_with("capstan-node-") && l.contains(" Ready"))
            .count();
        if simulated == 3 {
            break out.lines().count();
        }
        if Instant::now() > deadline {
            bail!("3 Ready nodes not seen: {out}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };

    // An administrator's token.
    kubectl_ok(
        &server,
        &["create", "serviceaccount", "dash-admin", "-n", "default"],
    )?;
    kubectl_ok(
        &server,
        &[
            "create",
            "clusterrolebinding",
            "dash-admin",
            "--clusterrole=cluster-admin",
            "--serviceaccount=default:dash-admin",
        ],
    )?;
    let admin = token(&server, "default", "dash-admin")?;

    let mut browser = cdp::Browser::launch()?;
    let url = format!("{}/dashboard/", server.url);
    let page = browser.new_page(&url)?;
    let long = Duration::from_secs(60);

    // Log in through the form.
    browser.wait_for(
        &page,
        "!!document.querySelector('#login') && !document.querySelector('#login').hidden",
        long,
        "login form",
    )?;
    browser.eval(
        &page,
        &format!(
            "document.querySelector('#token-input').value = {}; \
             document.querySelector('#login').requestSubmit(); true",
            js(&admin)
        ),
    )?;
    // The overview: the 3 nodes, each with its fill bars; the logged-in user's name.
    browser.wait_for(
        &page,
        &format!(
            "document.querySelectorAll('[data-table=nodes] .tr').length === {all_nodes} && \
             document.querySelectorAll('[data-table=nodes] .tr .bar').length === {bars} && \
             ['capstan-node-0', 'capstan-node-1', 'capstan-node-2'].every(n => \
               !!document.querySelector(`[data-table=nodes] .tr[data-name=\"${{n}}\"]`))",
            bars = 3 * all_nodes
        ),
        long,
        "the 3 simulated nodes' rows",
    )?;
    browser.wait_for(
        &page,
        "document.querySelector('#who').textContent === 'system:serviceaccount:default:dash-admin'",
        long,
        "user name from SelfSubjectReview",
    )?;
    // The token stays out of the address bar and out of cookies.
    let leaked = browser.eval(
        &page,
        &format!(
            "location.href.includes({t}) || document.cookie.includes({t})",
            t = js(&admin)
        ),
    )?;
    assert_eq!(leaked, serde_json::Value::Bool(false));

    // A Deployment created with kubectl appears, pods Running, without a reload: a marker set
    // on the window survives (a reload would drop it).
    browser.eval(
        &page,
        "window.__noReload = true; location.hash = '#/pods'; true",
    )?;
    browser.wait_for(
        &page,
        "document.querySelector('[data-view=pods] [data-table=pods]') !== null",
        long,
        "pods view",
    )?;
    let (ok, _, err) = server.kubectl_as(&server.kubeconfig, &["create", "-f", "-"], Some(WEB))?;
    assert!(ok, "{err}");
    browser.wait_for(
        &page,
        "window.__noReload === true && [...document.querySelectorAll('[data-table=pods] .tr')]\
         .filter(r => r.dataset.name.startsWith('web-') && r.innerText.includes('Running')).length === 3",
        Duration::from_secs(90),
        "3 Running web- pods",
    )?;
    browser.screenshot(&page, &shots.join("pods.png"))?;
    browser.eval(&page, "location.hash = '#/workloads/deployments'; true")?;
    browser.wait_for(
        &page,
        "[...document.querySelectorAll('[data-table=deployments] .tr')]\
         .some(r => r.dataset.name === 'web' && r.innerText.includes('3 / 3'))",
        long,
        "the Deployment's rollout 3 / 3",
    )?;
    browser.screenshot(&page, &shots.join("workloads.png"))?;
    // The Deployment's page: its rollout history; an edit applied with server-side apply as
    // the logged-in user: `kubectl create` (manager kubectl-create) owns spec.replicas, so a
    // conflict first, then forced.
    browser.eval(
        &page,
        "location.hash = '#/object/apis/apps/v1/namespaces/default/deployments/web'; true",
    )?;
    browser.wait_for(
        &page,
        "(document.querySelector('#yaml') || {}).textContent?.includes('kind: Deployment') && \
         [...document.querySelectorAll('[data-table=rollout] .tr')].some(r => r.innerText.includes('3 / 3'))",
        long,
        "the Deployment's YAML and rollout history",
    )?;
    browser.eval(
        &page,
        "(() => { document.querySelector('#edit').click(); \
         const a = document.querySelector('textarea.edit'); const o = JSON.parse(a.value); \
         o.spec.replicas = 4; a.value = JSON.stringify(o, null, 2); \
         document.querySelector('#apply').click(); return true; })()",
    )?;
    browser.wait_for(
        &page,
        "(document.querySelector('#apply-result') || {}).textContent?.startsWith('Conflict')",
        long,
        "an apply conflict on spec.replicas",
    )?;
    browser.screenshot(&page, &shots.join("apply-conflict.png"))?;
    browser.eval(
        &page,
        "(() => { document.querySelector('#force').checked = true; \
         document.querySelector('#apply').click(); return true; })()",
    )?;
    browser.wait_for(
        &page,
        "(document.querySelector('#apply-result') || {}).textContent === 'Applied.'",
        long,
        "the forced apply",
    )?;
    let replicas = kubectl_ok(
        &server,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )?;
    assert_eq!(replicas.trim(), "4");
    // The page follows the scale-up without a reload.
    browser.wait_for(
        &page,
        "window.__noReload === true && [...document.querySelectorAll('[data-table=rollout] .tr')]\
         .some(r => r.innerText.includes('4 / 4'))",
        Duration::from_secs(90),
        "the ReplicaSet at 4 / 4 after the apply",
    )?;
    // A rollout: a new image makes a second ReplicaSet (revision 2); the timeline, drawn from
    // the watch, grows a second lane without a reload.
    kubectl_ok(
        &server,
        &["set", "image", "deployment/web", "nginx=nginx:1.27"],
    )?;
    browser.wait_for(
        &page,
        "window.__noReload === true && (() => { const lanes = [...document.querySelectorAll('[data-timeline] svg [data-revision]')]; \
           return lanes.length === 2 && lanes.map(l => l.dataset.revision).join() === '1,2' && \
             lanes.every(l => l.querySelector('rect.want')); })()",
        Duration::from_secs(90),
        "the rollout timeline with revision lanes 1 and 2",
    )?;
    browser.screenshot(&page, &shots.join("rollout.png"))?;
    // The overview again: the pods' requests fill their nodes' bars, pods by phase.
    browser.eval(&page, "location.hash = '#/overview'; true")?;
    browser.wait_for(
        &page,
        "parseInt(((document.querySelector('[data-phase=Running]') || {}).textContent || '').split(' ')[1]) >= 3 && \
         [...document.querySelectorAll('[data-table=nodes] .tr')].some(r => /\\b(500m|1|1\\.5) \\/ 8\\b/.test(r.innerText))",
        long,
        "3 Running pods and their CPU requests on the overview",
    )?;
    // The store panel, from the embedded member's gauges on /metrics: this single member
    // leads, in a term of at least 1, with its indexes, size and fsync latency.
    browser.wait_for(
        &page,
        "(() => { const v = (c) => ((document.querySelector(`[data-card=${c}] .big`) || {}).textContent || ''); \
           const [applied, commit] = v('store-index').split(' / ').map(Number); \
           return /leader/i.test((document.querySelector('[data-card=store-leader] .label') || {}).textContent || '') && \
             v('store-leader') === 'yes' && parseInt(v('store-term')) >= 1 && v('store-members') === '1' && \
             applied >= 1 && commit >= applied && /[0-9]/.test(v('store-db')) && /ms/.test(v('store-fsync')); })()",
        long,
        "the store panel: leader, term >= 1, applied / commit index, members, DB size, fsync latency",
    )?;
    browser.screenshot(&page, &shots.join("overview.png"))?;

    // A pod's YAML.
    browser.eval(&page, "location.hash = '#/pods'; true")?;
    browser.wait_for(
        &page,
        "!!document.querySelector('[data-table=pods] .tr[data-name^=\"web-\"]')",
        long,
        "pods again",
    )?;
    let pod = browser.eval(
        &page,
        "(() => { const r = document.querySelector('[data-table=pods] .tr[data-name^=\"web-\"]'); \
         r.click(); return r.dataset.name; })()",
    )?;
    let pod = pod.as_str().unwrap_or_default().to_owned();
    browser.wait_for(
        &page,
        &format!(
            "(() => {{ const y = document.querySelector('#yaml'); return !!y && \
             y.textContent.includes('kind: Pod') && y.textContent.includes('name: ' + {}) && \
             y.textContent.includes('nodeName: '); }})()",
            js(&pod)
        ),
        long,
        "the pod's YAML",
    )?;
    browser.screenshot(&page, &shots.join("pod-yaml.png"))?;

    // Custom resources of a CRD, in a table of its printer columns.
    let (ok, _, err) = server.kubectl_as(&server.kubeconfig, &["apply", "-f", "-"], Some(CRD))?;
    assert!(ok, "{err}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, err) =
            server.kubectl_as(&server.kubeconfig, &["apply", "-f", "-"], Some(WIDGET))?;
        if ok {
            break;
        }
        if Instant::now() > deadline {
            bail!("widget not created: {err}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    browser.eval(
        &page,
        "location.hash = '#/custom/widgets.example.com'; true",
    )?;
    browser.wait_for(
        &page,
        "[...document.querySelectorAll('[data-table=custom] .thead div')].some(d => d.textContent === 'Color') && \
         [...document.querySelectorAll('[data-table=custom] .tr')].some(r => r.dataset.name === 'w1' && r.innerText.includes('blue'))",
        long,
        "the widget with its Color printer column",
    )?;
    browser.screenshot(&page, &shots.join("custom.png"))?;

    // A token bound to a Role in team-a: sees team-a's pods, not team-b's.
    for ns in ["team-a", "team-b"] {
        kubectl_ok(&server, &["create", "namespace", ns])?;
        kubectl_ok(
            &server,
            &["run", &format!("{ns}-pod"), "--image=nginx", "-n", ns],
        )?;
    }
    kubectl_ok(
        &server,
        &["create", "serviceaccount", "alice", "-n", "team-a"],
    )?;
    kubectl_ok(
        &server,
        &[
            "create",
            "role",
            "reader",
            "-n",
            "team-a",
            "--verb=get,list,watch",
            "--resource=pods,events,services",
        ],
    )?;
    kubectl_ok(
        &server,
        &[
            "create",
            "rolebinding",
            "alice-reader",
            "-n",
            "team-a",
            "--role=reader",
            "--serviceaccount=team-a:alice",
        ],
    )?;
    let alice = token(&server, "team-a", "alice")?;
    // A new tab (its own sessionStorage), logged in by the URL fragment.
    let tab = browser.new_page(&format!("{url}#token={}&ns=team-a&view=pods", alice))?;
    browser.wait_for(
        &tab,
        "[...document.querySelectorAll('[data-table=pods] .tr')].some(r => r.dataset.name === 'team-a-pod')",
        long,
        "team-a's pod for alice",
    )?;
    let fragment = browser.eval(&tab, "location.hash")?;
    assert_eq!(
        fragment,
        serde_json::json!("#/pods"),
        "token left in the URL"
    );
    // Another namespace, then all namespaces: Forbidden, and nothing of team-b shown.
    for ns in ["team-b", ""] {
        browser.eval(
            &tab,
            &format!(
                "(() => {{ const i = document.querySelector('#ns-input'); i.value = {}; \
                 i.dispatchEvent(new Event('change')); return true; }})()",
                js(ns)
            ),
        )?;
        browser.wait_for(
            &tab,
            "(document.querySelector('[data-table=pods] .error') || {}).textContent?.startsWith('Forbidden')",
            long,
            &format!("Forbidden for namespace {ns:?}"),
        )?;
        let text = browser.eval(&tab, "document.body.innerText")?;
        let text = text.as_str().unwrap_or_default();
        assert!(!text.contains("team-b-pod"), "{text}");
        assert_eq!(
            browser.eval(
                &tab,
                "document.querySelectorAll('[data-table=pods] .tr').length"
            )?,
            serde_json::json!(0)
        );
    }
    browser.screenshot(&tab, &shots.join("forbidden.png"))?;
    // A refused token: back at the login form with the API's verdict, nothing stored.
    let bad = browser.new_page(&format!("{url}#token=not-a-token"))?;
    browser.wait_for(
        &bad,
        "!document.querySelector('#login').hidden && \
         document.querySelector('#login-error').textContent.includes('401') && \
         sessionStorage.length === 0",
        long,
        "a refused token",
    )?;
    // And the same identity outside the browser agrees (RBAC decided, not the page).
    let bearer = format!("Authorization: Bearer {alice}");
    let (status, _, _) = curl(
        &format!("{}/api/v1/namespaces/team-b/pods", server.url),
        &["-H", &bearer],
    )?;
    assert_eq!(status, 403);
    let (status, _, _) = curl(
        &format!("{}/api/v1/namespaces/team-a/pods", server.url),
        &["-H", &bearer],
    )?;
    assert_eq!(status, 200);
    Ok(())
}
