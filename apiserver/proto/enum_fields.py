#!/usr/bin/env python3
"""Generates enum_fields.txt: the `+enum` string types of the built-in Go types, their values,
and the fields that use them, as kube-openapi's generator publishes them.

Usage: enum_fields.py API_CHECKOUT APIMACHINERY_CHECKOUT > enum_fields.txt
(the same checkouts as patch_fields.py; see README.md for the tag).

kube-openapi (pkg/generators/enum.go) treats a named string type whose doc comment carries the
`+enum` marker as an enum; its values are the typed string constants declared anywhere in the
scanned packages (the first constant of a value wins). A struct field of such a type (or a
pointer to one) gets `enum: [values]` in its schema, and its description gains a paragraph:

    Possible enum values:
     - `"Value"` <the constant's doc comment without its leading name>

(lines sorted; the comment's whitespace collapsed). A field that is a list or map of an enum
type gets `enum` on its `items` / `additionalProperties` schema, without the paragraph.

Output lines (fields separated by one tab):
  enum <package>.<Type> <value> <description line>
      one value of an enum type, in upstream's sorted order; the description line is the
      ` - `"Value"` comment` line exactly as upstream writes it.
  field <package>.<Struct> <json name> <prop|items|values> <package>.<Type>
      a field whose schema (`prop`), list items (`items`) or map values (`values`) is
      the enum type. Embedded `json:",inline"` structs are flattened into the embedding type.
"""

import os
import re
import sys

import patch_fields

ENUM_TYPE = re.compile(r"^type (\w+) string\s*$")
CONST_SINGLE = re.compile(r"^const (\w+)\s+(\w+(?:\.\w+)?)\s*=\s*(.+?)\s*$")
CONST_SPEC = re.compile(r"^\s+(\w+)\s+(\w+(?:\.\w+)?)\s*=\s*(.+?)\s*$")
# `Name = Type(value)` and `Name = OtherConst` (the type comes from the conversion or the other
# constant).
CONST_CONVERSION = re.compile(r"^\s+(\w+)\s*=\s*(\w+(?:\.\w+)?)\((.+)\)\s*(?://.*)?$")
CONST_COPY = re.compile(r"^\s+(\w+)\s*=\s*(\w+(?:\.\w+)?)\s*(?://.*)?$")
IDENT = re.compile(r"^\w+(?:\.\w+)?$")
STRING_LIT = re.compile(r'^"((?:[^"\\]|\\.)*)"$|^`([^`]*)`$')


def comment_text(line):
    """The text of a `//` comment line, as go/ast's CommentGroup.Text gives it."""
    text = line.strip()[2:]
    return text[1:] if text.startswith(" ") else text


def go_string(literal):
    """The value of a Go string literal, or None for anything else."""
    m = STRING_LIT.match(literal.split("//", 1)[0].strip())
    if not m:
        return None
    if m.group(2) is not None:
        return m.group(2)
    return bytes(m.group(1), "utf-8").decode("unicode_escape")


def scan(directory, package, enums, consts):
    """Records `+enum` string types and typed constants (name, type, literal, comment)."""
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("generated") \
                or name.startswith("zz_"):
            continue
        imports = {}
        in_imports = False
        in_const = False
        comment = []
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("import ("):
                    in_imports = True
                    continue
                if in_imports:
                    if line.startswith(")"):
                        in_imports = False
                        continue
                    m = patch_fields.IMPORT.match(line)
                    if m:
                        path = m.group(2)
                        imports[m.group(1) or path.rsplit("/", 1)[-1]] = \
                            patch_fields.package_id(path)
                    continue
                stripped = line.strip()
                if stripped.startswith("//"):
                    comment.append(comment_text(stripped))
                    continue
                doc, comment = comment, []
                if not stripped:
                    continue
                if line.startswith("const ("):
                    in_const = True
                    continue
                if in_const:
                    if line.startswith(")"):
                        in_const = False
                        continue
                    m = CONST_SPEC.match(line) or CONST_CONVERSION.match(line)
                    if not m:
                        copy = CONST_COPY.match(line)
                        if copy:
                            m = (copy.group(1), None, copy.group(2))
                elif line.startswith("const "):
                    m = CONST_SINGLE.match(line)
                else:
                    m = None
                    t = ENUM_TYPE.match(line)
                    if t and any(d.strip() == "+enum" or d.startswith("+enum ") for d in doc):
                        enums.add(f"{package}.{t.group(1)}")
                if m:
                    const, typ, value = m if isinstance(m, tuple) else m.groups()
                    value = value.split("//", 1)[0].strip()
                    if IDENT.match(value):
                        value = patch_fields.qualify(value, package, imports)
                    consts.append({
                        "name": const,
                        "qualified": f"{package}.{const}",
                        "type": typ and patch_fields.qualify(typ, package, imports),
                        "value": value,
                        "comment": " ".join(doc),
                    })


def resolve(const, by_name, depth=0):
    """(type, string value) of a constant: a literal, or another (qualified) constant."""
    value = go_string(const["value"])
    if value is not None:
        return const["type"], value
    other = by_name.get(const["value"])
    if other is None or depth > 5:
        return const["type"], None
    typ, value = resolve(other, by_name, depth + 1)
    return const["type"] or typ, value


def description_line(name, value, comment):
    """kube-openapi's ` - `"Value"` comment` line."""
    comment = comment.strip()
    if comment.startswith(name):
        comment = comment[len(name):]
    comment = re.sub(r"\s+", " ", comment.strip())
    return f" - `{go_quote(value)}` {comment}".rstrip()


def go_quote(value):
    """Go's %q of a plain string (the built-in enum values are printable ASCII)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    api, machinery = sys.argv[1], sys.argv[2]
    enums, consts = set(), []
    structs, aliases, struct_types = {}, {}, {}
    for d in patch_fields.API_DIRS:
        scan(os.path.join(api, d), d, enums, consts)
        patch_fields.scan(os.path.join(api, d), d, structs, aliases, struct_types)
    for d in patch_fields.MACHINERY_DIRS:
        package = patch_fields.package_id("k8s.io/apimachinery/" + d)
        scan(os.path.join(machinery, d), package, enums, consts)
        patch_fields.scan(os.path.join(machinery, d), package, structs, aliases, struct_types)

    by_name = {c["qualified"]: c for c in consts}
    values = {e: [] for e in enums}
    for c in consts:
        typ, value = resolve(c, by_name)
        if typ not in values or value is None or any(v == value for v, _ in values[typ]):
            continue
        values[typ].append((value, description_line(c["name"], value, c["comment"])))

    print("# Generated by enum_fields.py from k8s.io/api and k8s.io/apimachinery v0.33.13;")
    print("# see its doc comment for the format. Tab-separated lines:")
    print("#   enum <package>.<Type> <value> <description line>")
    print("#   field <package>.<Struct> <json> <prop|items|values> <package>.<Type>")
    for enum in sorted(values):
        # Sorted by the quoted value: upstream's order of both the `enum` array and the
        # description lines.
        for value, line in sorted(values[enum], key=lambda v: go_quote(v[0])):
            print("enum", enum, value, line, sep="\t")
    for struct in sorted(structs):
        if struct in patch_fields.OPAQUE:
            continue
        for f in patch_fields.flatten(struct, structs):
            if not f["json"]:
                continue
            typ = f["type"].lstrip("*")
            where = "prop"
            if typ.startswith("[]"):
                typ, where = typ[2:].lstrip("*"), "items"
            elif typ.startswith("map["):
                close = patch_fields.matching_bracket(typ, 3)
                typ, where = typ[close + 1:].lstrip("*"), "values"
            if typ in values and values[typ]:
                print("field", struct, f["json"], where, typ, sep="\t")


if __name__ == "__main__":
    main()
