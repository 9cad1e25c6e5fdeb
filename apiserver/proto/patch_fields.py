#!/usr/bin/env python3
"""Generates patch_fields.txt: the strategic-merge-patch metadata of the built-in Go types.

Usage: patch_fields.py API_CHECKOUT APIMACHINERY_CHECKOUT [APIEXTENSIONS_APISERVER_CHECKOUT]
> patch_fields.txt
(checkouts of github.com/kubernetes/api, github.com/kubernetes/apimachinery and
github.com/kubernetes/apiextensions-apiserver at the tag named in README.md; a bare mirror
works too: `git --git-dir=<mirror> archive v0.33.13 | tar -x -C <dir>`). The third adds
`apiextensions/v1` (CustomResourceDefinition: the list map of its status conditions is what
the field manager keys the CRD controllers' status entries by).

Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch) reads two Go struct tags:
`patchStrategy:"merge"` (also "replace", "retainKeys", "merge,retainKeys") and
`patchMergeKey:"name"`, and walks the object by the Go types of its fields. This script
records both, keyed by Go type, so the server can walk a JSON object from its kind's type.

Output lines (fields separated by one space, `-` for "none"):
  group <api group> <version> <package>
      the package holding the kinds of a group/version (core is the group "-").
  type <package>.<Type> <struct type>
      a struct type with a type-level `+structType=atomic|granular` marker.
  field <package>.<Type> <json name> <shape> <element type> <strategy> <merge key> <list type>
        <list map keys> <map type>
      shape: `struct` (the value is an object of <element type>), `list` (a JSON array whose
      items are <element type> or primitives), `map` (a JSON object whose values are
      <element type> or primitives), `prim` (anything else).
      element type: `<package>.<Type>` of a struct, or `-` (primitive or opaque).
      list type, list map keys, map type: the field's `+listType=atomic|set|map`,
      `+listMapKey=<key>` (repeatable; joined by commas in marker order) and
      `+mapType=atomic|granular` or `+structType=atomic|granular` comment markers (the
      server-side apply schema and the OpenAPI `x-kubernetes-*` extensions).
Only fields with a struct element type, a patch strategy or a marker are written; embedded
`json:",inline"` structs are flattened into the embedding type. Types whose JSON form is a
scalar (Time, Quantity, IntOrString, RawExtension, ...) count as primitives.
"""

import os
import re
import sys

API_DIRS = [
    "admissionregistration/v1", "apps/v1", "authentication/v1", "authorization/v1",
    "autoscaling/v1", "autoscaling/v2", "batch/v1", "certificates/v1", "coordination/v1",
    "core/v1", "discovery/v1", "events/v1", "flowcontrol/v1", "networking/v1", "node/v1",
    "policy/v1", "rbac/v1", "scheduling/v1", "storage/v1",
]
MACHINERY_DIRS = ["pkg/apis/meta/v1"]
APIEXTENSIONS_DIRS = ["pkg/apis/apiextensions/v1"]
# Structs with their own JSON (un)marshalling to a scalar or opaque value.
OPAQUE = {
    "meta/v1.Time", "meta/v1.MicroTime", "meta/v1.Duration", "meta/v1.FieldsV1",
    "meta/v1.Fields", "meta/v1.Verbs",
    # apiextensions: arbitrary JSON, and the schema-or-array/bool/strings unions (marshal.go).
    "apiextensions/v1.JSON", "apiextensions/v1.JSONSchemaPropsOrArray",
    "apiextensions/v1.JSONSchemaPropsOrBool", "apiextensions/v1.JSONSchemaPropsOrStringArray",
}
OPAQUE_PACKAGES = {"intstr", "resource", "runtime"}

STRUCT = re.compile(r"^type (\w+) struct \{")
ALIAS = re.compile(r"^type (\w+) =? ?([^\s{]+)\s*$")
FIELD = re.compile(r"^\s+(?:(\w+)\s+)?([^\s`]+)\s+`([^`]*)`")
TAG = re.compile(r'(\w+):"([^"]*)"')
IMPORT = re.compile(r'^\s*(?:(\w+)\s+)?"([^"]+)"')


def package_id(import_path):
    """`k8s.io/api/core/v1` -> `core/v1`; `k8s.io/apimachinery/pkg/apis/meta/v1` -> `meta/v1`."""
    if import_path.startswith("k8s.io/api/"):
        return import_path[len("k8s.io/api/"):]
    if import_path == "k8s.io/apimachinery/pkg/apis/meta/v1":
        return "meta/v1"
    if import_path.startswith("k8s.io/apiextensions-apiserver/pkg/apis/"):
        return import_path[len("k8s.io/apiextensions-apiserver/pkg/apis/"):]
    return import_path.rsplit("/", 1)[-1]


MARKER = re.compile(r"^//\s*\+(listType|listMapKey|mapType|structType)=(\S+)\s*$")


def parse_markers(comment):
    """The list/map/struct markers of a comment block: marker name -> values in order."""
    markers = {}
    for line in comment:
        m = MARKER.match(line)
        if m:
            markers.setdefault(m.group(1), []).append(m.group(2))
    return markers


def scan(directory, package, structs, aliases, struct_types):
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("generated") \
                or name.startswith("zz_"):
            continue
        imports = {}
        struct = None
        in_imports = False
        comment = []
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                if line.startswith("import ("):
                    in_imports = True
                    continue
                if in_imports:
                    if line.startswith(")"):
                        in_imports = False
                        continue
                    m = IMPORT.match(line)
                    if m:
                        path = m.group(2)
                        imports[m.group(1) or path.rsplit("/", 1)[-1]] = package_id(path)
                    continue
                stripped = line.strip()
                if stripped.startswith("//"):
                    comment.append(stripped)
                    continue
                markers, comment = parse_markers(comment), []
                m = STRUCT.match(line)
                if m:
                    struct = f"{package}.{m.group(1)}"
                    structs[struct] = []
                    if "structType" in markers:
                        struct_types[struct] = markers["structType"][-1]
                    continue
                if struct is None:
                    m = ALIAS.match(line)
                    if m:
                        aliases[f"{package}.{m.group(1)}"] = qualify(m.group(2), package, imports)
                    continue
                if line.startswith("}"):
                    struct = None
                    continue
                m = FIELD.match(line)
                if not m:
                    continue
                field, typ, tag = m.groups()
                tags = dict(TAG.findall(tag))
                if "json" not in tags:
                    continue
                json_opts = tags["json"].split(",")
                if json_opts[0] == "-":
                    continue
                structs[struct].append({
                    "json": json_opts[0],
                    "inline": field is None and "inline" in json_opts,
                    "type": qualify(typ, package, imports),
                    "strategy": tags.get("patchStrategy", "-") or "-",
                    "key": tags.get("patchMergeKey", "-") or "-",
                    "listType": markers.get("listType", ["-"])[-1],
                    "listMapKeys": ",".join(markers.get("listMapKey", [])) or "-",
                    "mapType": (markers.get("mapType") or markers.get("structType") or ["-"])[-1],
                })


def qualify(typ, package, imports):
    """Qualifies every named type in a Go type expression with its package id."""
    def repl(m):
        word = m.group(0)
        if "." in word:
            alias, rest = word.split(".", 1)
            return f"{imports.get(alias, alias)}.{rest}"
        if word in {"string", "bool", "byte", "int", "int32", "int64", "float32", "float64",
                    "uint", "uint32", "uint64", "interface", "map", "struct", "any"}:
            return word
        return f"{package}.{word}"
    return re.sub(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)?", repl, typ)


def resolve(typ, structs, aliases, depth=0):
    """(shape, element struct or None) of a qualified Go type expression."""
    typ = typ.lstrip("*")
    if typ.startswith("[]"):
        inner = typ[2:].lstrip("*")
        if inner == "byte":
            return "prim", None
        return "list", element(inner, structs, aliases, depth)
    if typ.startswith("map["):
        close = matching_bracket(typ, 3)
        return "map", element(typ[close + 1:], structs, aliases, depth)
    if typ in aliases and depth < 10:
        return resolve(aliases[typ], structs, aliases, depth + 1)
    if typ in structs and typ not in OPAQUE and typ.split("/")[0] not in OPAQUE_PACKAGES:
        return "struct", typ
    return "prim", None


def element(typ, structs, aliases, depth):
    typ = typ.lstrip("*")
    while typ in aliases and depth < 10:
        typ = aliases[typ].lstrip("*")
        depth += 1
    if typ in structs and typ not in OPAQUE:
        return typ
    return None


def matching_bracket(s, start):
    level = 0
    for i in range(start, len(s)):
        if s[i] == "[":
            level += 1
        elif s[i] == "]":
            level -= 1
            if level == 0:
                return i
    return len(s) - 1


def flatten(struct, structs, seen=()):
    out = []
    for f in structs.get(struct, []):
        if f["inline"]:
            inner = f["type"].lstrip("*")
            if inner in structs and inner not in seen:
                out.extend(flatten(inner, structs, seen + (struct,)))
        else:
            out.append(f)
    return out


def group_name(directory):
    with open(os.path.join(directory, "register.go"), encoding="utf-8") as f:
        m = re.search(r'const GroupName = "([^"]*)"', f.read())
    return m.group(1) if m else ""


def main():
    api, machinery = sys.argv[1], sys.argv[2]
    structs, aliases, struct_types = {}, {}, {}
    groups = []
    for d in API_DIRS:
        scan(os.path.join(api, d), d, structs, aliases, struct_types)
        groups.append((group_name(os.path.join(api, d)) or "-", d.split("/")[1], d))
    for d in MACHINERY_DIRS:
        scan(os.path.join(machinery, d), package_id("k8s.io/apimachinery/" + d), structs, aliases,
             struct_types)
    sources = "k8s.io/api and k8s.io/apimachinery"
    if len(sys.argv) > 3:
        for d in APIEXTENSIONS_DIRS:
            package = package_id("k8s.io/apiextensions-apiserver/" + d)
            scan(os.path.join(sys.argv[3], d), package, structs, aliases, struct_types)
            groups.append((group_name(os.path.join(sys.argv[3], d)), package.split("/")[1],
                           package))
        sources = "k8s.io/api, k8s.io/apimachinery and k8s.io/apiextensions-apiserver"
    print(f"# Generated by patch_fields.py from {sources} v0.33.13;")
    print("# see its doc comment for the format. Lines:")
    print("#   group <group|-> <version> <package>")
    print("#   type <package>.<Type> <atomic|granular>")
    print("#   field <package>.<Type> <json> <struct|list|map|prim> <element type|-> <strategy|-> <merge key|->")
    print("#         <list type|-> <list map keys|-> <map type|->")
    for g in groups:
        print("group", *g)
    for struct in sorted(struct_types):
        print("type", struct, struct_types[struct])
    for struct in sorted(structs):
        if struct in OPAQUE:
            continue
        for f in flatten(struct, structs):
            if not f["json"]:
                continue
            shape, elem = resolve(f["type"], structs, aliases)
            markers = (f["listType"], f["listMapKeys"], f["mapType"])
            if elem is None and f["strategy"] == "-" and markers == ("-", "-", "-"):
                continue
            print("field", struct, f["json"], shape, elem or "-", f["strategy"], f["key"], *markers)


if __name__ == "__main__":
    main()
