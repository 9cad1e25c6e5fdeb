//! LoadBalancer Services, as k3s' servicelb (`service-lb` controller,
//! `--service-lb-range`):
//!
//! - `kubectl create service loadbalancer` gets an EXTERNAL-IP from the range (the time it
//!   takes is printed: the LB address assignment latency);
//! - curl through `<lb-ip>:<port>` reaches a TCP server the test runs, registered as the
//!   endpoint of a selector-less Service by a hand-written EndpointSlice;
//! - a Service with another `loadBalancerClass` stays pending;
//! - an exhausted range gives the Service a Warning event `AllocationFailed` (shown by
//!   `kubectl describe`), leaves the other Services and the proxy alone, and gives the
//!   Service an address as soon as one is freed;
//! - a deleted Service's address stops answering.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{ServerProcess, free_port};

/// A random /30 of loopback (two addresses), so parallel tests do not collide.
fn range() -> (String, [String; 2]) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let third = 100 + (nanos % 100);
    let fourth = ((nanos / 100) % 60) * 4;
    (
        format!("127.0.{third}.{fourth}/30"),
        [
            format!("127.0.{third}.{}", fourth + 1),
            format!("127.0.{third}.{}", fourth + 2),
        ],
    )
}

/// A TCP server on 127.0.0.1 answering every connection with an HTTP 200 and `body`.
fn backend(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn ok(server: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = server.kubectl(args).expect("kubectl");
    assert!(ok, "kubectl {args:?}: {out} {err}\n{}", server.log());
    out
}

fn external_ip(server: &ServerProcess, name: &str) -> String {
    let (_, out, _) = server
        .kubectl(&[
            "get",
            "service",
            name,
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ])
        .expect("kubectl");
    out.trim().to_owned()
}

fn wait_ip(server: &ServerProcess, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ip = external_ip(server, name);
        if !ip.is_empty() {
            return ip;
        }
        assert!(
            Instant::now() < deadline,
            "{name} got no address\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn apply(server: &ServerProcess, yaml: &str) {
    let file = server
        .data_dir
        .with_extension(format!("{}.yaml", free_port()));
    std::fs::write(&file, yaml).expect("write");
    ok(server, &["apply", "-f", file.to_str().expect("utf-8")]);
}

#[test]
fn load_balancer_services_get_addresses_and_forward_tcp() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cidr, ips) = range();
    let server = ServerProcess::start_raw(
        &tmp.path().join("server"),
        &[
            "--nodes=0",
            "--disable-scheduler",
            &format!("--service-lb-range={cidr}"),
        ],
    )
    .expect("start");

    // kubectl create service loadbalancer → an EXTERNAL-IP from the range.
    let started = Instant::now();
    ok(
        &server,
        &["create", "service", "loadbalancer", "web", "--tcp=80:8080"],
    );
    let web_ip = wait_ip(&server, "web");
    println!(
        "LB address assignment latency: {} ms",
        started.elapsed().as_millis()
    );
    assert!(ips.contains(&web_ip), "{web_ip} not in {cidr}");
    let table = ok(&server, &["get", "service", "web"]);
    assert!(
        table.contains("EXTERNAL-IP") && table.contains(&web_ip),
        "{table}"
    );

    // A selector-less Service whose endpoint is a process of the test.
    let backend_port = backend("hello from the backend");
    let lb_port = free_port();
    let started = Instant::now();
    apply(
        &server,
        &format!(
            r#"
apiVersion: v1
kind: Service
metadata:
  name: echo
spec:
  type: LoadBalancer
  ports:
  - name: http
    port: {lb_port}
    protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-manual
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: http
  port: {backend_port}
  protocol: TCP
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
"#
        ),
    );
    let echo_ip = wait_ip(&server, "echo");
    println!(
        "LB address assignment latency (controller running): {} ms",
        started.elapsed().as_millis()
    );
    assert!(ips.contains(&echo_ip) && echo_ip != web_ip, "{echo_ip}");
    let url = format!("http://{echo_ip}:{lb_port}/");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "3", &url])
            .output()
            .expect("curl");
        if String::from_utf8_lossy(&out.stdout).contains("hello from the backend") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "curl {url}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Another class: left alone.
    apply(
        &server,
        r#"
apiVersion: v1
kind: Service
metadata:
  name: other-class
spec:
  type: LoadBalancer
  loadBalancerClass: example.com/other
  ports:
  - port: 81
"#,
    );
    // The range is exhausted: a Warning event, no address, no crash.
    ok(
        &server,
        &[
            "create",
            "service",
            "loadbalancer",
            "third",
            "--tcp=82:8080",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, events, _) = server
            .kubectl(&[
                "get",
                "events",
                "--field-selector=involvedObject.name=third",
                "-o",
                "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}",
            ])
            .expect("kubectl");
        if events.contains("Warning AllocationFailed") {
            assert!(events.contains(&cidr), "{events}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no AllocationFailed event: {events}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(external_ip(&server, "third"), "");
    assert_eq!(external_ip(&server, "other-class"), "");
    // Nothing else is affected: the others keep their addresses, the proxy keeps
    // forwarding, and other Services are still created and served.
    assert_eq!(external_ip(&server, "web"), web_ip);
    assert_eq!(external_ip(&server, "echo"), echo_ip);
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", &url])
        .output()
        .expect("curl");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hello from the backend"),
        "the proxy stopped while the range was exhausted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok(
        &server,
        &["create", "service", "clusterip", "plain", "--tcp=83:8080"],
    );
    let desc = ok(&server, &["describe", "service", "third"]);
    assert!(
        desc.contains("AllocationFailed") && desc.contains(&cidr),
        "kubectl describe shows why: {desc}"
    );

    // Freeing an address gives it to the waiting Service.
    ok(&server, &["delete", "service", "web"]);
    assert_eq!(wait_ip(&server, "third"), web_ip);

    // A deleted Service's proxy stops: the address refuses connections.
    ok(&server, &["delete", "service", "echo"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "3", &url])
            .output()
            .expect("curl");
        if !out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{url} still answers");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(external_ip(&server, "other-class"), "");
}
