"""Raw response bodies the official Python client (PyPI `kubernetes`, v33) receives, compared
byte for byte with kube-apiserver's encoding (issue 23).

Run by e2e/tests/python_wire.rs as `python3 python_wire.py KUBECONFIG GOLDEN_DIR`. Every call
uses `_preload_content=False`, so the body is what the server wrote. Objects are compared with
the corpus in e2e/golden (expectations written from the Go types, see wire_golden.rs), with
the client's field manager (`OpenAPI-Generator`, its user agent's product) and only
server-generated values normalised; Status errors are compared whole.
"""

import json
import re
import sys

import yaml
from kubernetes import client, config

config.load_kube_config(config_file=sys.argv[1])
GOLDEN = sys.argv[2]
core = client.CoreV1Api()
apps = client.AppsV1Api()

# Known differences owned elsewhere, as in wire_golden.rs's GAPS: (expected, written).
GAPS = []


def normalise(body, obj):
    text = body.decode("utf-8")
    for value, placeholder in [
        (obj["metadata"].get("uid", ""), "<uid>"),
        (obj.get("spec", {}).get("clusterIP", ""), "<clusterIP>"),
    ]:
        if value:
            text = text.replace(value, placeholder)
    for key in ["resourceVersion", "creationTimestamp", "time"]:
        text = re.sub(r'(?<![A-Za-z])"%s":"[^"]*"' % key, '"%s":"<%s>"' % (key, key), text)
    return text


def expected(name, edit=None):
    with open(f"{GOLDEN}/{name}.json", encoding="utf-8") as f:
        text = f.read().replace('"manager":"kubectl-create"', '"manager":"OpenAPI-Generator"')
    if edit:
        text = edit(text)
    for want, written in GAPS:
        text = text.replace(want, written, 1)
    return text


def check(what, resp, want):
    body = resp.data
    assert body.endswith(b"}\n"), (what, body[-20:])
    got = normalise(body, json.loads(body))
    if got != want:
        at = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        lo = max(at - 80, 0)
        raise AssertionError(f"{what} at byte {at}:\n want …{want[lo:at+80]}…\n got  …{got[lo:at+80]}…")
    print(f"{what}: {len(body)} bytes as expected")


def manifest(name):
    with open(f"{GOLDEN}/{name}.input.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def status_failure(resp_or_exc, want):
    body = resp_or_exc.body if isinstance(resp_or_exc, client.exceptions.ApiException) else resp_or_exc.data
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    assert body == want, f"\n want {want!r}\n got  {body!r}"
    print(f"status {json.loads(body)['code']}: {len(body)} bytes as expected")


# Service: create, replace (a label added), JSON patch (an annotation Go escapes).
svc = manifest("service")
r = core.create_namespaced_service("default", svc, _preload_content=False)
assert r.status == 201, r.status
check("service create", r, expected("service"))
live = json.loads(r.data)
live["metadata"]["labels"] = {"tier": "web"}
r = core.replace_namespaced_service("web", "default", live, _preload_content=False)
assert r.status == 200, r.status
labelled = lambda t: t.replace(
    '"creationTimestamp":"<creationTimestamp>",',
    '"creationTimestamp":"<creationTimestamp>","labels":{"tier":"web"},',
).replace('"fieldsV1":{"f:spec"', '"fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:tier":{}}},"f:spec"')
check("service replace", r, expected("service", labelled))

r = core.patch_namespaced_service(
    "web",
    "default",
    [{"op": "add", "path": "/metadata/annotations", "value": {"note": "<&>"}}],
    _preload_content=False,
)
assert r.status == 200, r.status
annotated = lambda t: labelled(t).replace(
    '"labels":{"tier":"web"},',
    '"labels":{"tier":"web"},"annotations":{"note":"\\u003c\\u0026\\u003e"},',
).replace('"f:metadata":{"f:labels"', '"f:metadata":{"f:annotations":{".":{},"f:note":{}},"f:labels"')
check("service JSON patch", r, expected("service", annotated))

# Deployment: create, then the errors: 409 AlreadyExists and 422 Invalid.
dep = manifest("deployment")
r = apps.create_namespaced_deployment("default", dep, _preload_content=False)
assert r.status == 201, r.status
check("deployment create", r, expected("deployment"))
r = apps.read_namespaced_deployment("web", "default", _preload_content=False)
check("deployment get", r, expected("deployment"))

try:
    apps.create_namespaced_deployment("default", dep, _preload_content=False)
    raise AssertionError("a second create must conflict")
except client.exceptions.ApiException as e:
    assert e.status == 409, e.status
    status_failure(
        e,
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"deployments.apps \\"web\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"web","group":"apps","kind":"deployments"},"code":409}\n',
    )

bad = manifest("deployment")
bad["metadata"]["name"] = "bad"
bad["spec"]["replicas"] = -1
try:
    apps.create_namespaced_deployment("default", bad, _preload_content=False)
    raise AssertionError("a negative replica count must be refused")
except client.exceptions.ApiException as e:
    assert e.status == 422, e.status
    status_failure(
        e,
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"Deployment.apps \\"bad\\" is invalid: spec.replicas: Invalid value: -1: '
        'must be greater than or equal to 0","reason":"Invalid","details":{"name":"bad",'
        '"group":"apps","kind":"Deployment","causes":[{"reason":"FieldValueInvalid",'
        '"message":"Invalid value: -1: must be greater than or equal to 0",'
        '"field":"spec.replicas"}]},"code":422}\n',
    )

try:
    core.replace_namespaced_service("missing", "default", svc, _preload_content=False)
    raise AssertionError("replacing a missing service must fail")
except client.exceptions.ApiException as e:
    assert e.status in (400, 404), e.status
    print(f"replace of a missing service: {e.status}")

print("python wire: ok")
