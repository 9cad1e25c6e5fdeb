//! Raw response bodies through the official Python client (issue 23): a Service created and
//! replaced, a Deployment created and read, and the errors 409 AlreadyExists and 422 Invalid,
//! all with `_preload_content=False`, compared byte for byte (key order, trailing newline,
//! Status shape) with the expected encoding — the golden corpus of `e2e/golden` for objects.
//! The checks live in `e2e/python/python_wire.py`.

use std::process::Command;

use e2e::ServerProcess;

#[test]
fn python_client_receives_upstreams_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/python_wire.py");
    let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/golden");
    let out = Command::new("python3")
        .arg(script)
        .arg(&s.kubeconfig)
        .arg(golden)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python wire checks failed:\nstdout: {stdout}\nstderr: {}\nserver log: {}",
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
    assert!(stdout.contains("python wire: ok"), "{stdout}");
}
