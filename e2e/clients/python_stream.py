"""The official Kubernetes Python client's streaming calls against a Capstan process node.

Usage: python_stream.py KUBECONFIG POD exec

`exec`: `kubernetes.stream.stream(core.connect_get_namespaced_pod_exec, ...)` (WebSocket,
v4.channel.k8s.io) with stdout and stderr kept apart, stdin fed to the process, and the
exit status read from the error channel. (`kubernetes.stream.portforward` is driven by
e2e/tests/pods_portforward.rs.) Prints "python stream: ok" at the end; any mismatch raises.
"""

import sys

from kubernetes import client, config
from kubernetes.stream import stream


def check(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def exec_checks(core, pod):
    # The preloaded form: the whole output as one string.
    out = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        "default",
        command=["sh", "-c", "echo hello from $HOSTNAME"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    check("preloaded exec output", out, f"hello from {pod}\n")

    # The streaming form: channels apart, and the exit code.
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        "default",
        command=["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    check("stdout", resp.read_stdout(), "to-stdout\n")
    check("stderr", resp.read_stderr(), "to-stderr\n")
    check("exit code", resp.returncode, 3)
    resp.close()

    # A successful command's status.
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        "default",
        command=["true"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    check("exit code of true", resp.returncode, 0)
    resp.close()

    # stdin reaches the process.
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        "default",
        command=["sh", "-c", "read line; echo got $line; exit 0"],
        stderr=True,
        stdin=True,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("through stdin\n")
    got = ""
    while resp.is_open() and "\n" not in got:
        resp.update(timeout=5)
        got += resp.read_stdout()
    check("stdin echoed", got, "got through stdin\n")
    resp.run_forever(timeout=30)
    check("exit code after stdin", resp.returncode, 0)
    resp.close()

    # A container that is not in the pod: an error, not a hang.
    try:
        stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            "default",
            container="nope",
            command=["true"],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
    except Exception as e:  # the client raises ApiException or a handshake error
        text = str(e)
        if "nope" not in text and "400" not in text and "404" not in text:
            raise AssertionError(f"missing container: unexpected error {text!r}")
    else:
        raise AssertionError("exec into a missing container succeeded")


def main():
    kubeconfig, pod, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    if mode == "exec":
        exec_checks(core, pod)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("python stream: ok")


if __name__ == "__main__":
    main()
