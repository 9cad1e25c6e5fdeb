#!/usr/bin/env python3
"""Writes <kind>.yaml from <kind>.json: the YAML kube-apiserver answers for the same object.

Upstream's YAML serializer is sigs.k8s.io/yaml: JSON decoded into a map, written by go-yaml
v2 — keys sorted, two-space indent, sequences not indented under their key, strings plain
unless YAML would read them as another type (`"true"`, `"3"`, `""`, timestamps: then double
quoted) or plain style cannot hold them (`'a: b'`: single quoted; line breaks: literal `|`).
This is an independent writer of those rules (not the server's encoder), for the shapes the
corpus holds. Placeholders stand for server-generated values and are quoted as the value
they replace would be (resourceVersion and times quoted, uid and IPs plain).

Usage: to_yaml.py e2e/golden/*.json
"""

import json
import re
import sys

QUOTED_PLACEHOLDERS = {"<resourceVersion>", "<creationTimestamp>", "<time>", "<lastTransitionTime>"}
# go-yaml v2's resolve table: words and numbers a plain scalar would not read back as a string.
SPECIAL = {"", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE",
           "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON",
           "off", "Off", "OFF", ".inf", ".Inf", ".INF", "-.inf", ".nan", ".NaN", "<<"}
NUMBER = re.compile(r"^[-+]?(0b[01_]+|0x[0-9a-fA-F_]+|0o?[0-7_]+|[0-9][0-9_]*|"
                    r"(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d?-\d\d?([Tt ].*)?$")


def needs_double(s):
    if s in QUOTED_PLACEHOLDERS:
        return True
    if s.startswith("<") and s.endswith(">"):
        return False
    return s in SPECIAL or bool(NUMBER.match(s)) or bool(TIMESTAMP.match(s))


def plain_ok(s):
    if s[0] in "-?:,[]{}#&*!|>'\"%@`" or s[0] == " " or s[-1] == " ":
        return s[0] in "-?:" and len(s) > 1 and s[1] != " " and s[0] != " " and s[-1] != " "
    return ": " not in s and " #" not in s and not s.endswith(":")


def scalar(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if needs_double(v):
        return json.dumps(v)
    if plain_ok(v):
        return v
    return "'" + v.replace("'", "''") + "'"


def emit(v, indent, out):
    pad = " " * indent
    if isinstance(v, dict):
        for k in sorted(v):
            item = v[k]
            key = scalar(k)
            if isinstance(item, dict) and item:
                out.append(f"{pad}{key}:")
                emit(item, indent + 2, out)
            elif isinstance(item, list) and item:
                out.append(f"{pad}{key}:")
                emit(item, indent, out)
            elif isinstance(item, str) and "\n" in item:
                out.append(f"{pad}{key}: |" + ("" if item.endswith("\n") else "-"))
                for line in item.rstrip("\n").split("\n"):
                    out.append(f"{pad}  {line}")
            else:
                out.append(f"{pad}{key}: {inline(item)}")
    elif isinstance(v, list):
        for item in v:
            if isinstance(item, dict) and item:
                lines = []
                emit(item, indent + 2, lines)
                lines[0] = f"{pad}- " + lines[0][indent + 2:]
                out.extend(lines)
            elif isinstance(item, list) and item:
                lines = []
                emit(item, indent + 2, lines)
                lines[0] = f"{pad}- " + lines[0][indent + 2:]
                out.extend(lines)
            else:
                out.append(f"{pad}- {inline(item)}")


def inline(v):
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return scalar(v)


def main():
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        out = []
        emit(obj, 0, out)
        with open(path[: -len(".json")] + ".yaml", "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
