#!/usr/bin/env python3
"""Kubernetes' protobuf encoding of a JSON object, written independently of the server.

Usage:
  to_pb.py encode EXPECTED.json [ACTUAL.json] > OBJECT.pb
  to_pb.py dump OBJECT.pb                      (a field-by-field text dump, for diffs)
  to_pb.py check DIR                           (every DIR/<case>.json encodes to <case>.pb)

`encode` writes what Go's protobuf serializer (k8s.io/apimachinery runtime/serializer/
protobuf) writes for the object: the magic `k8s\\x00`, then `runtime.Unknown{typeMeta{apiVersion,
kind}, raw, contentEncoding, contentType}` whose `raw` is the object's message. With ACTUAL
(the server's JSON of the same object), each `"<placeholder>"` string of EXPECTED (`<uid>`,
`<resourceVersion>`, `<creationTimestamp>`, `<time>`, …) is first replaced by the value at the
same place in ACTUAL, and `managedFields` entries are put in ACTUAL's order (matched by manager,
operation, apiVersion and subresource).

The schema is upstream's `generated.proto` files (apiserver/proto, the include root) and the Go
types' facts that the protos lack (apiserver/proto/json_fields.txt, generated from the Go
sources): which fields are Go pointers, which embedded structs JSON inlines, renamed fields.
The rules are those of the gogo-generated marshallers k8s.io/api uses:
- fields in field-number order; a non-pointer scalar or struct is always written, zero or
  not (`""`, `0`, `false`, a struct with its own always-written fields); a pointer (or a
  Go slice type such as `Verbs`, a message of `repeated string items`) only when set; a repeated field once per element (unpacked); a `[]byte` when non-nil;
- maps as entries `{key=1, value=2}` in key order;
- `metav1.Time` as `{seconds, nanos=0}` (ProtoTime drops nanoseconds), the zero time as an
  empty message; `MicroTime` with its nanoseconds; `Duration` in nanoseconds;
  `resource.Quantity` as its string; `intstr.IntOrString` as `{type, intVal, strVal}`;
  `FieldsV1`, `RawExtension` and apiextensions' `JSON` as the compact JSON bytes; the
  apiextensions `JSONSchemaPropsOr*` unions as their Go UnmarshalJSON fills them.

Only the Python standard library is used.
"""

import base64
import calendar
import json
import os
import re
import struct
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parents[2] / "apiserver" / "proto"
META = "k8s.io.apimachinery.pkg.apis.meta.v1."
EXT = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1."

FIELD = re.compile(r"^\s*(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)")
MAP = re.compile(r"^\s*map<\s*([\w.]+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)")
SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float"}


class Field:
    """One field of a message: number, label (optional/repeated/map), type, names."""

    def __init__(self, number, label, typ, name, key_type=None):
        self.number, self.label, self.type, self.name = number, label, typ, name
        self.key_type = key_type
        self.flags = set()
        self.json = name


def load_schema(root=PROTO_ROOT):
    """Messages by full name: each an ordered list of Fields (by number)."""
    messages = {}
    for directory, _, files in os.walk(root):
        if "generated.proto" not in files:
            continue
        package, current = None, None
        with open(os.path.join(directory, "generated.proto"), encoding="utf-8") as f:
            for raw in f:
                line = raw.split("//", 1)[0].strip()
                if not line:
                    continue
                if line.startswith("package "):
                    package = line[len("package "):].rstrip(";").strip()
                elif line.startswith("message "):
                    current = package + "." + line.split()[1]
                    messages[current] = []
                elif line == "}":
                    current = None
                elif current is not None:
                    m = MAP.match(line)
                    if m:
                        key, value, name, number = m.groups()
                        value = qualify(value, package)
                        messages[current].append(Field(int(number), "map", value, name, key))
                        continue
                    m = FIELD.match(line)
                    if m:
                        label, typ, name, number = m.groups()
                        messages[current].append(
                            Field(int(number), label, qualify(typ, package), name))
    with open(root / "json_fields.txt", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            message, number, flag = line.split()
            for field in messages.get(message, []):
                if field.number == int(number):
                    if flag.startswith("json="):
                        field.json = flag[len("json="):]
                    else:
                        field.flags.add(flag)
    for fields in messages.values():
        fields.sort(key=lambda f: f.number)
    return messages


def qualify(typ, package):
    typ = typ.lstrip(".")
    if typ in SCALARS or "." in typ:
        return typ
    return package + "." + typ


# --- wire primitives -------------------------------------------------------------------

def varint(n):
    n &= (1 << 64) - 1  # negative int32/int64 sign-extend to ten bytes, as Go's uint64(x)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(number, wire):
    return varint(number << 3 | wire)


def length_delimited(number, payload):
    return key(number, 2) + varint(len(payload)) + payload


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339_seconds(text):
    """Seconds and nanoseconds of `2006-01-02T15:04:05[.frac]Z`."""
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z", text)
    if not m:
        raise ValueError(f"time {text!r}")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    nanos = int((m.group(7) or "").ljust(9, "0")[:9] or 0)
    return calendar.timegm((y, mo, d, h, mi, s)), nanos


def duration_nanos(text):
    """Go's time.ParseDuration for the forms metav1.Duration writes (`1h2m3.5s`)."""
    units = {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
    sign, rest = (-1, text[1:]) if text.startswith("-") else (1, text)
    if rest == "0":
        return 0
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(ns|us|µs|ms|s|m|h)", rest):
        total += float(number) * units[unit]
    return sign * round(total)


# --- messages --------------------------------------------------------------------------

class Encoder:
    def __init__(self, messages):
        self.messages = messages

    def json_names(self, message):
        """The JSON keys a message's value holds, its inlined structs' keys included."""
        names = set()
        for field in self.messages[message]:
            if "inline" in field.flags:
                names |= self.json_names(field.type)
            else:
                names.add(field.json)
        return names

    def string_list(self, name):
        """A message that is a Go slice type (`type Verbs []string`): only `repeated string
        items = 1`; as a field it is written when non-nil, as a pointer is."""
        fields = self.messages.get(name, [])
        return (len(fields) == 1 and fields[0].name == "items" and fields[0].label == "repeated"
                and fields[0].type == "string")

    def message(self, name, value):
        """The bytes of message `name` for the JSON `value` (None: the Go zero value)."""
        special = SPECIAL.get(name)
        if special:
            return special(self, value)
        if self.string_list(name):
            value = {"items": value}  # a Go `[]string` type (Verbs, ExtraValue): JSON's array
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ValueError(f"{name}: expected an object, got {value!r}")
        out = bytearray()
        used = set()
        for field in self.messages[name]:
            if "inline" in field.flags:
                names = self.json_names(field.type)
                sub = {k: v for k, v in value.items() if k in names}
                used |= sub.keys()
                out += length_delimited(field.number, self.message(field.type, sub))
                continue
            present = field.json in value and value[field.json] is not None
            item = value.get(field.json)
            used.add(field.json)
            if field.label == "map":
                for k in sorted(item or {}):
                    out += length_delimited(field.number, self.map_entry(field, k, item[k]))
            elif field.label == "repeated":
                for element in item or []:
                    out += self.single(field.number, field.type, element)
            elif present or ("pointer" not in field.flags and not self.string_list(field.type)):
                if field.type == "bytes" and not present:
                    continue  # a nil []byte is not written
                out += self.single(field.number, field.type, item)
        unknown = set(value) - used
        if unknown:
            raise ValueError(f"{name}: no field for JSON keys {sorted(unknown)}")
        return bytes(out)

    def map_entry(self, field, k, v):
        out = length_delimited(1, k.encode()) if field.key_type == "string" else key(1, 0) + varint(k)
        if field.type == "bytes":
            return out + (b"" if v is None else length_delimited(2, base64.b64decode(v)))
        return out + self.single(2, field.type, v)

    def single(self, number, typ, v):
        if typ == "string":
            return length_delimited(number, (v or "").encode())
        if typ == "bytes":
            return length_delimited(number, base64.b64decode(v or ""))
        if typ == "bool":
            return key(number, 0) + varint(1 if v else 0)
        if typ in ("int32", "int64", "uint32", "uint64"):
            return key(number, 0) + varint(int(v or 0))
        if typ == "double":
            return key(number, 1) + struct.pack("<d", float(v or 0))
        if typ == "float":
            return key(number, 5) + struct.pack("<f", float(v or 0))
        return length_delimited(number, self.message(typ, v))


def time_message(_, v):
    if v is None:
        return b""  # the zero time
    seconds, _ = rfc3339_seconds(v)
    return key(1, 0) + varint(seconds) + key(2, 0) + varint(0)


def micro_time_message(_, v):
    if v is None:
        return b""
    seconds, nanos = rfc3339_seconds(v)
    return key(1, 0) + varint(seconds) + key(2, 0) + varint(nanos)


def raw_message(_, v):
    return b"" if v is None else length_delimited(1, compact(v))


def quantity_message(_, v):
    return length_delimited(1, ("0" if v is None else str(v)).encode())


def int_or_string_message(_, v):
    is_string = isinstance(v, str)
    return (key(1, 0) + varint(1 if is_string else 0)
            + key(2, 0) + varint(0 if is_string else int(v or 0))
            + length_delimited(3, (v if is_string else "").encode()))


def duration_message(_, v):
    return key(1, 0) + varint(0 if v is None else duration_nanos(v))


def props_or_array(enc, v):
    if v is None:
        return b""
    if isinstance(v, list):
        return b"".join(length_delimited(2, enc.message(EXT + "JSONSchemaProps", s)) for s in v)
    return length_delimited(1, enc.message(EXT + "JSONSchemaProps", v))


def props_or_bool(enc, v):
    if v is None:
        return key(1, 0) + varint(0)
    if isinstance(v, bool):
        return key(1, 0) + varint(1 if v else 0)
    return key(1, 0) + varint(1) + length_delimited(2, enc.message(EXT + "JSONSchemaProps", v))


def props_or_string_array(enc, v):
    if v is None:
        return b""
    if isinstance(v, list):
        return b"".join(length_delimited(2, s.encode()) for s in v)
    return length_delimited(1, enc.message(EXT + "JSONSchemaProps", v))


SPECIAL = {
    META + "Time": time_message,
    META + "MicroTime": micro_time_message,
    META + "FieldsV1": raw_message,
    META + "Duration": duration_message,
    "k8s.io.apimachinery.pkg.runtime.RawExtension": raw_message,
    "k8s.io.apimachinery.pkg.api.resource.Quantity": quantity_message,
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": int_or_string_message,
    EXT + "JSON": raw_message,
    EXT + "JSONSchemaPropsOrArray": props_or_array,
    EXT + "JSONSchemaPropsOrBool": props_or_bool,
    EXT + "JSONSchemaPropsOrStringArray": props_or_string_array,
}


def message_for(messages, api_version, kind):
    """The proto message of a kind: the package of the group's Go package, e.g. `apps/v1`
    → k8s.io.api.apps.v1, `rbac.authorization.k8s.io/v1` → …rbac.v1, `v1` → …core.v1."""
    group, _, version = api_version.rpartition("/")
    short = group.split(".")[0] if group else "core"
    suffix = f".{short.replace('-', '_')}.{version}.{kind}"
    found = [m for m in messages if m.endswith(suffix)]
    if len(found) != 1:
        raise ValueError(f"no single message for {api_version} {kind}: {found}")
    return found[0]


def encode_object(messages, obj):
    """The `k8s\\x00` + runtime.Unknown bytes of a JSON object."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    raw = Encoder(messages).message(message_for(messages, api_version, kind), body)
    type_meta = length_delimited(1, api_version.encode()) + length_delimited(2, kind.encode())
    unknown = (length_delimited(1, type_meta) + length_delimited(2, raw)
               + length_delimited(3, b"") + length_delimited(4, b""))
    return b"k8s\x00" + unknown


# --- placeholders ----------------------------------------------------------------------

def entry_key(entry):
    return tuple(entry.get(k, "") for k in ("manager", "operation", "apiVersion", "subresource"))


def fill(expected, actual):
    """`expected` with each `"<placeholder>"` string replaced by `actual`'s value at the same
    place, and managedFields entries in `actual`'s order."""
    if isinstance(expected, str) and re.fullmatch(r"<[A-Za-z]+>", expected):
        if actual is None:
            raise ValueError(f"no value for {expected}")
        return actual
    if isinstance(expected, dict):
        out = {}
        for k, v in expected.items():
            other = actual.get(k) if isinstance(actual, dict) else None
            if k == "managedFields" and isinstance(v, list) and isinstance(other, list):
                order = [entry_key(e) for e in other]
                v = sorted(v, key=lambda e: order.index(entry_key(e))
                           if entry_key(e) in order else len(order))
            out[k] = fill(v, other)
        return out
    if isinstance(expected, list):
        others = actual if isinstance(actual, list) else []
        return [fill(v, others[i] if i < len(others) else None) for i, v in enumerate(expected)]
    return expected


# --- dump ------------------------------------------------------------------------------

def read_varint(data, at):
    n, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at


def dump(data, indent=0, out=None):
    """Field tree of protobuf bytes: nested messages where the bytes parse as one."""
    out = [] if out is None else out
    at = 0
    while at < len(data):
        tag, at = read_varint(data, at)
        number, wire = tag >> 3, tag & 7
        pad = "  " * indent
        if wire == 0:
            v, at = read_varint(data, at)
            out.append(f"{pad}{number}: {v}")
        elif wire == 1:
            out.append(f"{pad}{number}: fixed64 {data[at:at + 8].hex()}")
            at += 8
        elif wire == 5:
            out.append(f"{pad}{number}: fixed32 {data[at:at + 4].hex()}")
            at += 4
        elif wire == 2:
            n, at = read_varint(data, at)
            payload = data[at:at + n]
            at += n
            nested = []
            try:
                if printable(payload):
                    raise ValueError  # a string
                dump(payload, indent + 1, nested)
                out.append(f"{pad}{number} {{")
                out.extend(nested)
                out.append(f"{pad}}}")
            except (ValueError, IndexError):
                out.append(f"{pad}{number}: {payload!r}")
        else:
            raise ValueError(f"wire type {wire}")
    return out


def printable(b):
    return all(32 <= c < 127 for c in b)


def main(argv):
    messages = load_schema()
    if len(argv) >= 2 and argv[0] == "encode":
        with open(argv[1], encoding="utf-8") as f:
            obj = json.load(f)
        if len(argv) > 2:
            with open(argv[2], encoding="utf-8") as f:
                obj = fill(obj, json.load(f))
        sys.stdout.buffer.write(encode_object(messages, obj))
        return 0
    if len(argv) == 2 and argv[0] == "dump":
        data = Path(argv[1]).read_bytes()
        if data.startswith(b"k8s\x00"):
            data = data[4:]
        print("\n".join(dump(data)))
        return 0
    if len(argv) == 2 and argv[0] == "check":
        checked, failed = 0, 0
        for case in sorted(Path(argv[1]).glob("*.json")):
            want = case.with_suffix(".pb").read_bytes()
            checked += 1
            try:
                got = encode_object(messages, json.loads(case.read_text(encoding="utf-8")))
            except (ValueError, KeyError) as e:
                failed += 1
                print(f"{case.name}: {e!r}")
                continue
            if got != want:
                failed += 1
                print(f"{case.name}: differs from Go's bytes")
                a, b = dump(want[4:]), dump(got[4:])
                for i, (x, y) in enumerate(zip(a + [""] * len(b), b + [""] * len(a))):
                    if x != y:
                        print("\n".join(f"  want {l}" for l in a[max(0, i - 3):i + 3]))
                        print("\n".join(f"  got  {l}" for l in b[max(0, i - 3):i + 3]))
                        break
        print(f"{checked - failed} of {checked} fixtures encode to Go's bytes")
        return 1 if failed or not checked else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
