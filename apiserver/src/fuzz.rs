//! Entry points for the fuzz targets under `fuzz/` (cargo-fuzz) and their smoke test.
//!
//! Each function takes raw fuzzer bytes, builds JSON documents from them (keys drawn from a
//! vocabulary of Kubernetes field names and patch directives, so random bytes reach deep
//! into the engines) and runs one patch engine. They return nothing: the property checked
//! is that no input makes an engine panic, overflow its stack or loop. The unit test at the
//! bottom feeds each one a fixed-seed stream of random inputs, so `make test` runs them even
//! without a nightly toolchain.

use serde_json::{Map, Value, json};

use crate::patch::schema::{self, Ty};

/// Keys the generated documents use: field names of the built-in kinds and every strategic
/// merge patch directive.
const KEYS: &[&str] = &[
    "metadata",
    "labels",
    "annotations",
    "name",
    "finalizers",
    "spec",
    "template",
    "containers",
    "initContainers",
    "image",
    "env",
    "value",
    "ports",
    "containerPort",
    "protocol",
    "volumes",
    "volumeMounts",
    "mountPath",
    "selector",
    "matchLabels",
    "replicas",
    "strategy",
    "type",
    "rollingUpdate",
    "maxSurge",
    "tolerations",
    "key",
    "args",
    "status",
    "conditions",
    "data",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/env",
    "$setElementOrder/ports",
    "$setElementOrder/finalizers",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/args",
];

/// String values: directive arguments, merge-key values and ordinary strings.
const STRINGS: &[&str] = &[
    "replace", "delete", "merge", "c", "d", "TCP", "UDP", "a", "b", "", "name", "image",
];

/// The kinds the documents are patched as (their types in the patch schema).
const KINDS: &[(&str, &str, &str)] = &[
    ("", "v1", "Pod"),
    ("apps", "v1", "Deployment"),
    ("", "v1", "Service"),
    ("", "v1", "ConfigMap"),
    ("batch", "v1", "Job"),
    ("", "v1", "Node"),
    ("", "v1", "Namespace"),
];

/// Deepest nesting generated (the documents kubectl sends are shallow; this keeps the
/// smoke test fast while still reaching `spec.template.spec.containers[].env[]`).
const MAX_DEPTH: usize = 7;

/// Reads fuzzer bytes one at a time; zeros once they run out.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> usize {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        usize::from(b)
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from.get(self.next() % from.len().max(1))
            .copied()
            .unwrap_or("")
    }

    fn value(&mut self, depth: usize) -> Value {
        let tag = if depth >= MAX_DEPTH {
            self.next() % 4
        } else {
            self.next() % 9
        };
        match tag {
            0 => Value::Null,
            1 => Value::Bool(self.next().is_multiple_of(2)),
            2 => json!(self.next() % 5),
            3 => json!(self.pick(STRINGS)),
            4 | 5 => {
                let len = self.next() % 4;
                Value::Array((0..len).map(|_| self.value(depth + 1)).collect())
            }
            _ => Value::Object(self.object(depth + 1)),
        }
    }

    fn object(&mut self, depth: usize) -> Map<String, Value> {
        let len = self.next() % 5;
        (0..len)
            .map(|_| (self.pick(KEYS).to_owned(), self.value(depth)))
            .collect()
    }

    fn kind(&mut self) -> ((&'static str, &'static str, &'static str), Ty) {
        let k = KINDS
            .get(self.next() % KINDS.len())
            .copied()
            .unwrap_or(("", "v1", "Pod"));
        (k, schema::root(k.0, k.1, k.2).unwrap_or(Ty::Untyped))
    }
}

/// Strategic merge patch (`crate::patch::strategic`): a generated object of a built-in kind
/// patched with a generated patch full of directives.
pub fn strategic_merge(data: &[u8]) {
    let mut b = Bytes { data, pos: 0 };
    let (_, ty) = b.kind();
    let original = b.object(0);
    let patch = b.object(0);
    let _ = crate::patch::strategic::apply(original, patch, ty);
}

/// JSON patch (RFC 6902) and JSON merge patch (RFC 7386) as the PATCH handler runs them
/// (the `json-patch` crate): generated operations with paths from the vocabulary.
pub fn json_patches(data: &[u8]) {
    let mut b = Bytes { data, pos: 0 };
    let mut doc = Value::Object(b.object(0));
    let merge = b.value(0);
    let ops: Vec<Value> = (0..b.next() % 5)
        .map(|_| {
            let path = path_of(&mut b);
            let from = path_of(&mut b);
            let op = b.pick(&["add", "remove", "replace", "move", "copy", "test"]);
            json!({ "op": op, "path": path, "from": from, "value": b.value(1) })
        })
        .collect();
    if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(Value::Array(ops)) {
        let _ = crate::patch::json_patch(&mut doc, &ops);
    }
    json_patch::merge(&mut doc, &merge);
}

fn path_of(b: &mut Bytes<'_>) -> String {
    let mut out = String::new();
    for _ in 0..b.next() % 4 {
        out.push('/');
        match b.next() % 4 {
            0 => out.push_str(&(b.next() % 3).to_string()),
            1 => out.push('-'),
            _ => out.push_str(b.pick(KEYS)),
        }
    }
    out
}

/// Server-side apply (`crate::apply::managed`): a live object with managedFields from an
/// Update by one manager, then a generated configuration applied by another (or the same)
/// manager, with and without `force`, then an Update recorded over the result.
pub fn server_side_apply(data: &[u8]) {
    use crate::apply::managed;
    let mut b = Bytes { data, pos: 0 };
    let ((group, version, kind), ty) = b.kind();
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut live = b.object(0);
    live.insert("apiVersion".into(), json!(api_version));
    live.insert("kind".into(), json!(kind));
    live.insert("metadata".into(), json!({ "name": "x" }));
    managed::record_update(&mut live, &Map::new(), ty, "creator", &api_version, "");
    let mut config = b.object(0);
    config.insert("apiVersion".into(), json!(api_version));
    config.insert("kind".into(), json!(kind));
    let manager = b.pick(&["creator", "applier"]);
    let force = b.next().is_multiple_of(2);
    let applied = managed::apply(&live, &config, ty, manager, &api_version, force);
    if let Ok(applied) = applied {
        // Applying the same configuration again, then an edit through a subresource.
        let _ = managed::apply(&applied, &config, ty, manager, &api_version, false);
        let mut edited = applied.clone();
        for (k, v) in b.object(0) {
            edited.insert(k, v);
        }
        let sub = b.pick(&["", "status", "scale"]);
        managed::record_update(&mut edited, &applied, ty, "editor", &api_version, sub);
        let _ = managed::entries(&edited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: a fixed-seed stream, so failures reproduce.
    fn random_inputs(seed: u64, count: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut state = seed;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        (0..count).map(move |_| {
            let len = (next() % 512) as usize;
            (0..len).map(|_| (next() >> 32) as u8).collect()
        })
    }

    #[test]
    fn patch_engines_survive_random_inputs() {
        let start = std::time::Instant::now();
        for (i, input) in random_inputs(0x5eed_cafe, 12_000).enumerate() {
            strategic_merge(&input);
            json_patches(&input);
            server_side_apply(&input);
            if start.elapsed().as_secs() >= 20 {
                // A slow (debug, shared) machine: enough inputs were tried.
                assert!(i > 100, "only {i} inputs in 20 s");
                break;
            }
        }
    }

    #[test]
    fn failed_json_patches_never_reach_the_panicking_undo() {
        // Found by `json_patches`: the first move replaces the whole document, the second
        // operation fails, and undoing the first would move the root inside itself.
        let mut doc = json!({ "m": ["x"] });
        let ops: json_patch::Patch = serde_json::from_value(json!([
            { "op": "move", "from": "/m", "path": "" },
            { "op": "remove", "path": "/nope" },
        ]))
        .unwrap();
        assert!(crate::patch::json_patch(&mut doc, &ops).is_err());
    }

    #[test]
    fn generated_documents_reach_the_engines() {
        // Non-trivial inputs really produce nested objects with directives.
        let found = random_inputs(7, 500).any(|input| {
            let mut b = Bytes {
                data: &input,
                pos: 0,
            };
            let _ = b.kind();
            let o = Value::Object(b.object(0)).to_string();
            o.contains("$patch") && o.contains("containers")
        });
        assert!(found);
    }
}
