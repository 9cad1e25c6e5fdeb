#!/usr/bin/env python3
"""Checks to_pb.py's presence rules against Go's generated marshallers.

Usage: check_presence.py API APIMACHINERY APIEXTENSIONS_APISERVER
(checkouts of github.com/kubernetes/{api,apimachinery,apiextensions-apiserver} at the tag
named in apiserver/proto/README.md; only their `generated.pb.go` files are read).

to_pb.py writes a singular field always unless json_fields.txt says the Go field is a pointer
(or it is a `[]byte`, written when non-nil). The gogo-generated `MarshalToSizedBuffer` of
each message says the same thing in code: a field written under `if m.X != nil {` is
conditional, one written at the top level of the function (or in a bare `{ … }` block) is
always written. This script reads every such function, decodes each field's tag bytes
(`dAtA[i] = 0x..`, written backwards) into its field number, and reports every singular
field of the vendored protos where the two disagree. Run by hand when the protos or
json_fields.txt change; prints `N fields agree` and exits 1 on any disagreement.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import to_pb  # noqa: E402

FUNC = re.compile(r"^func \(m \*(\w+)\) MarshalToSizedBuffer\(")
TAG_BYTE = re.compile(r"^\s*dAtA\[i\] = (0x[0-9a-f]+)$")


def tag_number(tag_bytes):
    """Field number of the tag whose bytes were assigned in this order (last = first on
    the wire)."""
    wire = list(reversed(tag_bytes))
    n, shift = 0, 0
    for b in wire:
        n |= (b & 0x7F) << shift
        shift += 7
    return n >> 3


def scan_function(lines):
    """(field number, always written) for each field a MarshalToSizedBuffer writes."""
    out = []
    depth = 1
    group = None  # the statement that opened the depth-1 block being read
    group_runs = []
    run = []
    for line in lines:
        stripped = line.strip()
        m = TAG_BYTE.match(line)
        if m:
            run.append(int(m.group(1), 16))
            continue
        if stripped == "i--":
            continue
        if run:  # a tag's bytes end here
            if group is None:
                out.append((tag_number(run), True))
            else:
                group_runs.append(run)
            run = []
        if depth == 1 and group is None and stripped.endswith("{"):
            group, group_runs = stripped, []
        depth += stripped.count("{") - stripped.count("}")
        if depth == 1 and group is not None:
            if group_runs:
                conditional = group.startswith("if ") or group.startswith("for ")
                out.append((tag_number(group_runs[-1]), not conditional))
            group = None
    return out


def go_facts(checkouts):
    """{(proto message, field number): always written} from every generated.pb.go."""
    facts = {}
    for root, base in checkouts:
        for directory, _, files in os.walk(root):
            if "generated.pb.go" not in files:
                continue
            rel = os.path.relpath(directory, root).replace(os.sep, ".")
            package = (base + "." + rel).replace("-", "_")
            with open(os.path.join(directory, "generated.pb.go"), encoding="utf-8") as f:
                lines = f.read().split("\n")
            i = 0
            while i < len(lines):
                m = FUNC.match(lines[i])
                if not m:
                    i += 1
                    continue
                end = lines.index("}", i)
                for number, always in scan_function(lines[i + 1:end]):
                    facts[(package + "." + m.group(1), number)] = always
                i = end + 1
    return facts


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    api, machinery, extensions = argv
    facts = go_facts([(api, "k8s.io.api"), (machinery, "k8s.io.apimachinery"),
                      (extensions, "k8s.io.apiextensions-apiserver")])
    messages = to_pb.load_schema()
    encoder = to_pb.Encoder(messages)
    agree, always, disagree = 0, 0, []
    for name, fields in sorted(messages.items()):
        if (name in to_pb.SPECIAL or name.startswith("k8s.io.kube_aggregator.")
                or name.endswith(".resource.QuantityValue")):
            continue  # hand-written marshallers; the aggregator is not read
        for field in fields:
            if field.label != "optional":
                continue
            go = facts.get((name, field.number))
            if go is None:
                disagree.append(f"{name} {field.number} ({field.name}): no Go marshaller")
                continue
            ours = "inline" in field.flags or (
                "pointer" not in field.flags and field.type != "bytes"
                and not encoder.string_list(field.type))
            if ours == go:
                agree += 1
                always += ours
            else:
                disagree.append(f"{name} {field.number} ({field.name}): Go writes it "
                                f"{'always' if go else 'when set'}, to_pb.py "
                                f"{'always' if ours else 'when set'}")
    print("\n".join(disagree))
    print(f"{agree} fields agree ({always} always written, {agree - always} when set), "
          f"{len(disagree)} differ")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
