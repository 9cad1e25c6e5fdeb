"""The official Kubernetes Python client (PyPI `kubernetes`, v33) against `capstan server`.

Run by e2e/tests/python_client.rs as `python3 python_client.py KUBECONFIG`; every check is an
assert, so a wrong answer fails the test with a traceback.
"""

import sys
import threading

from kubernetes import client, config, watch

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
apps = client.AppsV1Api()

names = sorted(n.metadata.name for n in core.list_namespace().items)
assert names == ["default", "kube-node-lease", "kube-public", "kube-system"], names

cm = core.create_namespaced_config_map(
    "default",
    client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py1"), data={"a": "b"}),
)
assert cm.metadata.uid and int(cm.metadata.resource_version) > 0
try:
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py1"))
    )
    raise AssertionError("a second create must conflict")
except client.exceptions.ApiException as e:
    assert e.status == 409 and e.reason == "Conflict", (e.status, e.reason)
    assert '"reason":"AlreadyExists"' in e.body.replace(" ", ""), e.body

dep = apps.create_namespaced_deployment(
    "default",
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pyd"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    },
)
assert dep.spec.strategy.type == "RollingUpdate", dep.spec.strategy
assert dep.spec.revision_history_limit == 10
scale = apps.patch_namespaced_deployment_scale("pyd", "default", {"spec": {"replicas": 3}})
assert scale.spec.replicas == 3
assert apps.read_namespaced_deployment("pyd", "default").spec.replicas == 3

# A watch from the list's resourceVersion sees a create made after it started.
rv = core.list_namespaced_config_map("default").metadata.resource_version
w = watch.Watch()
created = threading.Event()


def create_later():
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py2"))
    )
    created.set()


threading.Timer(0.2, create_later).start()
seen = None
for ev in w.stream(
    core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=20
):
    seen = (ev["type"], ev["object"].metadata.name)
    w.stop()
assert seen == ("ADDED", "py2"), seen

status = core.delete_namespaced_config_map("py1", "default")
assert status.status == "Success", status
try:
    core.read_namespaced_config_map("py1", "default")
    raise AssertionError("deleted config map still readable")
except client.exceptions.ApiException as e:
    assert e.status == 404, e.status
print("python client: ok")
