//! The official Kubernetes Python client against `capstan server`: namespaces, create and
//! AlreadyExists, typed defaults read back, the scale subresource, a watch from a list's
//! resourceVersion, delete and NotFound. The checks live in `e2e/clients/python_client.py`;
//! `.ci/run` installs the client (`pip install 'kubernetes>=33,<34'`).

use std::process::Command;

use e2e::ServerProcess;

#[test]
fn the_python_client_works_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&s.kubeconfig)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python client failed:\nstdout: {}\nstderr: {}\nserver log: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client: ok"));
}
